//! Idempotent producers (KIP-98), on both protocols: a producer asks for a producer id (Kafka's
//! InitProducerId, the native INIT_PRODUCER_ID), and a leader checks the sequence numbers of
//! each producer's batches per partition, so that a batch a client sends again after a lost
//! acknowledgement is acknowledged with where it was appended, not appended twice. Kafka's
//! Java and Python clients turn idempotence on by default, and so does the native producer.
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
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex};

use protocol::ErrorCode;
use protocol::record_batch::RecordBatchRef;

use crate::log::ProducerBatch;

/// Batches remembered per producer and partition.
pub const BATCHES_KEPT: usize = 5;
/// Producers and partitions remembered at most; past it, one is forgotten per new one.
const ENTRIES_MAX: usize = 100_000;
/// How much of a partition's log a new leader reads for its producers' sequences: far more
/// than five batches in flight per producer at the largest batch a broker takes, by default.
pub const STATE_TAIL_BYTES: u64 = 8 << 20;

/// Who wrote a batch of an idempotent producer, and which of its sequence numbers it holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchProducer {
    pub id: i64,
    pub epoch: i16,
    /// The batch's first and last sequence numbers.
    pub sequences: (i32, i32),
}

impl BatchProducer {
    /// The producer of `batch`, if an idempotent producer wrote it (its producer id is set).
    pub fn of(batch: &RecordBatchRef) -> Option<BatchProducer> {
        let base = batch.base_sequence();
        (batch.producer_id() >= 0).then(|| BatchProducer {
            id: batch.producer_id(),
            epoch: batch.producer_epoch(),
            sequences: (base, base.wrapping_add(batch.last_offset_delta()) & i32::MAX),
        })
    }
}

/// Where a batch was appended: the number of its first record, and where its message begins
/// and ends in the log (byte offsets).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Placed {
    pub first_record: u64,
    pub offset: u64,
    pub end: u64,
}

/// A producer's batches on one partition.
#[derive(Debug)]
struct Sequences {
    epoch: i16,
    /// `(base sequence, last sequence, where it was appended)`, oldest first.
    batches: VecDeque<(i32, i32, Placed)>,
}

/// What a leader does with a batch of an idempotent producer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Check {
    Append,
    /// Appended before: acknowledged with where it was appended, not appended again.
    Duplicate(Placed),
    /// `OutOfOrderSequence` or `InvalidProducerEpoch`.
    Refuse(ErrorCode),
}

/// What an idempotent append holds from its check to its record.
type AppendLock = Arc<tokio::sync::Mutex<()>>;

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
    /// One lock per partition, held by an idempotent append from its check to its record:
    /// a batch sent again on another connection while the first is being appended waits,
    /// and then finds it.
    appending: Mutex<HashMap<(String, i32), AppendLock>>,
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
            let producer =
                BatchProducer { id: b.producer_id, epoch: b.epoch, sequences: b.sequences };
            let placed = Placed { first_record: b.first_record, offset: b.offset, end: b.end };
            self.record(producer, topic, partition, placed);
        }
        lock(&self.loaded).insert(key, leadership);
        tracing::debug!(%topic, partition, batches = batches.len(), "learned producers' sequences from the log");
    }

    /// What to do with a batch of `producer` for `topic`-`partition`.
    /// The lock of `topic`-`partition`'s idempotent appends.
    pub fn appending(&self, topic: &str, partition: i32) -> AppendLock {
        let mut locks = lock(&self.appending);
        Arc::clone(locks.entry((topic.to_owned(), partition)).or_default())
    }

    pub fn check(&self, producer: BatchProducer, topic: &str, partition: i32) -> Check {
        let BatchProducer { id, epoch, sequences: (base, last) } = producer;
        let sequences = lock(&self.sequences);
        let Some(seen) = sequences.get(&(id, topic.to_owned(), partition)) else {
            return Check::Append;
        };
        if epoch < seen.epoch {
            return Check::Refuse(ErrorCode::InvalidProducerEpoch);
        }
        if epoch > seen.epoch {
            return Check::Append;
        }
        if let Some(&(_, _, placed)) = seen.batches.iter().find(|b| b.0 == base && b.1 == last) {
            return Check::Duplicate(placed);
        }
        match seen.batches.back() {
            Some(&(_, previous_last, _)) if base != after(previous_last) => {
                Check::Refuse(ErrorCode::OutOfOrderSequence)
            }
            _ => Check::Append,
        }
    }

    /// Remembers a batch of `producer` appended where `placed` says.
    pub fn record(&self, producer: BatchProducer, topic: &str, partition: i32, placed: Placed) {
        let BatchProducer { id, epoch, sequences: (base, last) } = producer;
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
        seen.batches.push_back((base, last, placed));
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|p| p.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn batch(id: i64, epoch: i16, base: i32, last: i32) -> BatchProducer {
        BatchProducer { id, epoch, sequences: (base, last) }
    }

    fn at(n: u64) -> Placed {
        Placed { first_record: n, offset: n * 100, end: n * 100 + 70 }
    }

    #[test]
    fn a_batch_sent_again_is_a_duplicate_and_a_gap_is_out_of_order() {
        let ids = ProducerIds::default();
        let a = ids.allocate(3);
        let b = ids.allocate(3);
        assert_ne!(a, b);
        assert_eq!(a >> 44, 3);
        assert_eq!(ids.check(batch(a, 0, 0, 4), "t", 0), Check::Append);
        ids.record(batch(a, 0, 0, 4), "t", 0, at(100));
        assert_eq!(ids.check(batch(a, 0, 0, 4), "t", 0), Check::Duplicate(at(100)));
        assert_eq!(ids.check(batch(a, 0, 5, 9), "t", 0), Check::Append);
        let out_of_order = Check::Refuse(ErrorCode::OutOfOrderSequence);
        assert_eq!(ids.check(batch(a, 0, 7, 9), "t", 0), out_of_order);
        assert_eq!(ids.check(batch(a, 0, 7, 9), "t", 1), Check::Append, "another partition");
        ids.record(batch(a, 1, 0, 0), "t", 0, at(200));
        assert_eq!(
            ids.check(batch(a, 0, 10, 10), "t", 0),
            Check::Refuse(ErrorCode::InvalidProducerEpoch)
        );
        for i in 1..10 {
            ids.record(batch(a, 1, i, i), "t", 0, at(200 + i as u64));
        }
        assert_eq!(ids.check(batch(a, 1, 9, 9), "t", 0), Check::Duplicate(at(209)));
        assert_eq!(ids.check(batch(a, 1, 2, 2), "t", 0), out_of_order, "forgotten");
        ids.record(batch(a, 1, i32::MAX - 1, i32::MAX), "t", 0, at(300));
        assert_eq!(ids.check(batch(a, 1, 0, 3), "t", 0), Check::Append, "sequences wrap");
    }
}
