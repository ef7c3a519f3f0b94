//! Idempotent producers (KIP-98): InitProducerId hands out a producer id (`init_producer_id`),
//! and a leader checks
//! the sequence numbers of each producer's batches per partition, so that a batch a client
//! sends again after a lost acknowledgement is acknowledged with its first offset, not
//! appended twice. Kafka's Java and Python clients turn idempotence on by default.
//!
//! What a leader knows of a producer is kept in memory: the last [`BATCHES_KEPT`] batches per
//! producer and partition (clients have at most five in flight). A broker that starts leading
//! a partition — a new leader after a failover, or one that restarted — learns them from the
//! batches themselves, which carry their producer id, epoch and sequences and are the same on
//! every replica: it reads the last [`STATE_TAIL_BYTES`] of the log before its first
//! idempotent produce ([`ProducerIds::load`]). A batch sent again across a failover is then
//! acknowledged with its first offset, not appended twice. A producer whose last batch lies
//! further back is taken as new. Transactions are not served: a transactional id is refused.

use std::collections::{HashMap, VecDeque};
use std::future::Future;
use std::sync::Mutex;
use std::sync::atomic::{AtomicI64, Ordering};

use protocol::kafka::response::code;

use crate::log::ProducerBatch;

/// Batches remembered per producer and partition.
pub const BATCHES_KEPT: usize = 5;
/// Producers and partitions remembered at most; past it, one is forgotten per new one.
const ENTRIES_MAX: usize = 100_000;
/// How much of a partition's log a new leader reads for its producers' sequences: far more
/// than five batches in flight per producer at the largest batch a broker takes, by default.
pub const STATE_TAIL_BYTES: u64 = 8 << 20;

/// A producer's batches on one partition.
#[derive(Debug)]
struct Sequences {
    epoch: i16,
    /// `(base sequence, last sequence, first record number)`, oldest first.
    batches: VecDeque<(i32, i32, u64)>,
}

/// What a leader does with a batch of an idempotent producer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Check {
    Append,
    /// Appended before: acknowledged with its first record's number, not appended again.
    Duplicate(u64),
    /// A Kafka error code.
    Refuse(i16),
}

/// The producer ids handed out and the sequences seen.
#[derive(Debug, Default)]
pub struct ProducerIds {
    next: AtomicI64,
    sequences: Mutex<HashMap<(i64, String, i32), Sequences>>,
    /// The leadership (leader epoch; `None` on a broker alone) each partition's sequences
    /// were learned for from its log.
    loaded: Mutex<HashMap<(String, i32), Option<i32>>>,
    /// Held while a partition's sequences are learned, so that no batch is recorded and then
    /// forgotten by a load that read the log before it.
    loading: tokio::sync::Mutex<()>,
}

/// The sequence after `sequence` (sequences wrap to 0 past `i32::MAX`).
fn after(sequence: i32) -> i32 {
    if sequence == i32::MAX { 0 } else { sequence + 1 }
}

impl ProducerIds {
    /// A producer id no other broker of the cluster hands out: the broker id in the high bits,
    /// and a counter that starts at the time in ms when this broker first hands one out (ids
    /// of an earlier run of the broker are behind it unless it handed out more than one a
    /// millisecond).
    pub fn allocate(&self, broker_id: i32) -> i64 {
        const COUNTER_BITS: u32 = 44;
        let counter = loop {
            let current = self.next.load(Ordering::Acquire);
            let next = if current == 0 { service::now_ms().max(1) } else { current + 1 };
            if self
                .next
                .compare_exchange(current, next, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
            {
                break next;
            }
        };
        (i64::from(broker_id & 0x7ffff) << COUNTER_BITS) | (counter & ((1 << COUNTER_BITS) - 1))
    }

    /// Learns the sequences of `topic`-`partition` from its log, led in `leadership`, unless
    /// they were learned for that leadership already: `read` gives the log's recent batches of
    /// idempotent producers (`Partition::producer_batches`), and what was known of the
    /// partition before (from an earlier leadership) is forgotten for them.
    pub async fn load<F, Fut>(&self, topic: &str, partition: i32, leadership: Option<i32>, read: F)
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = Option<Vec<ProducerBatch>>>,
    {
        let key = (topic.to_owned(), partition);
        let loaded = |ids: &ProducerIds| lock(&ids.loaded).get(&key) == Some(&leadership);
        if loaded(self) {
            return;
        }
        let _loading = self.loading.lock().await;
        if loaded(self) {
            return;
        }
        // Unread (the log could not be read): the leader goes on without, as before.
        let batches = read().await.unwrap_or_default();
        lock(&self.sequences).retain(|(_, t, p), _| !(t == topic && *p == partition));
        for b in &batches {
            self.record(b.producer_id, b.epoch, topic, partition, b.sequences, b.first_record);
        }
        lock(&self.loaded).insert(key, leadership);
        tracing::debug!(%topic, partition, batches = batches.len(), "learned producers' sequences from the log");
    }

    /// What to do with a batch of sequences `base..=last` in `epoch` of producer `id` for
    /// `topic`-`partition`.
    pub fn check(
        &self,
        id: i64,
        epoch: i16,
        topic: &str,
        partition: i32,
        base: i32,
        last: i32,
    ) -> Check {
        let sequences = lock(&self.sequences);
        let Some(seen) = sequences.get(&(id, topic.to_owned(), partition)) else {
            return Check::Append;
        };
        if epoch < seen.epoch {
            return Check::Refuse(code::INVALID_PRODUCER_EPOCH);
        }
        if epoch > seen.epoch {
            return Check::Append;
        }
        if let Some(&(_, _, first)) = seen.batches.iter().find(|b| b.0 == base && b.1 == last) {
            return Check::Duplicate(first);
        }
        match seen.batches.back() {
            Some(&(_, previous_last, _)) if base != after(previous_last) => {
                Check::Refuse(code::OUT_OF_ORDER_SEQUENCE_NUMBER)
            }
            _ => Check::Append,
        }
    }

    /// Remembers a batch appended with its first record numbered `first_record`.
    pub fn record(
        &self,
        id: i64,
        epoch: i16,
        topic: &str,
        partition: i32,
        (base, last): (i32, i32),
        first_record: u64,
    ) {
        let mut sequences = lock(&self.sequences);
        let key = (id, topic.to_owned(), partition);
        if !sequences.contains_key(&key) && sequences.len() >= ENTRIES_MAX {
            let forgotten = sequences.keys().next().cloned();
            if let Some(forgotten) = forgotten {
                sequences.remove(&forgotten);
            }
        }
        let seen =
            sequences.entry(key).or_insert_with(|| Sequences { epoch, batches: VecDeque::new() });
        if epoch != seen.epoch {
            seen.epoch = epoch;
            seen.batches.clear();
        }
        if seen.batches.len() == BATCHES_KEPT {
            seen.batches.pop_front();
        }
        seen.batches.push_back((base, last, first_record));
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|p| p.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_batch_sent_again_is_a_duplicate_and_a_gap_is_out_of_order() {
        let ids = ProducerIds::default();
        let a = ids.allocate(3);
        let b = ids.allocate(3);
        assert_ne!(a, b);
        assert_eq!(a >> 44, 3);
        assert_eq!(ids.check(a, 0, "t", 0, 0, 4), Check::Append);
        ids.record(a, 0, "t", 0, (0, 4), 100);
        assert_eq!(ids.check(a, 0, "t", 0, 0, 4), Check::Duplicate(100));
        assert_eq!(ids.check(a, 0, "t", 0, 5, 9), Check::Append);
        assert_eq!(
            ids.check(a, 0, "t", 0, 7, 9),
            Check::Refuse(code::OUT_OF_ORDER_SEQUENCE_NUMBER)
        );
        assert_eq!(ids.check(a, 0, "t", 1, 7, 9), Check::Append, "another partition");
        ids.record(a, 1, "t", 0, (0, 0), 200);
        assert_eq!(ids.check(a, 0, "t", 0, 10, 10), Check::Refuse(code::INVALID_PRODUCER_EPOCH));
        for i in 1..10 {
            ids.record(a, 1, "t", 0, (i, i), 200 + i as u64);
        }
        assert_eq!(ids.check(a, 1, "t", 0, 9, 9), Check::Duplicate(209));
        assert_eq!(
            ids.check(a, 1, "t", 0, 2, 2),
            Check::Refuse(code::OUT_OF_ORDER_SEQUENCE_NUMBER),
            "forgotten"
        );
        ids.record(a, 1, "t", 0, (i32::MAX - 1, i32::MAX), 300);
        assert_eq!(ids.check(a, 1, "t", 0, 0, 3), Check::Append, "sequences wrap");
    }
}
