//! Idempotent producers (KIP-98), on both protocols: a producer asks for a producer id (Kafka's
//! InitProducerId, the native INIT_PRODUCER_ID), which this module hands out, and a leader
//! checks the sequence numbers of each producer's batches against what the partition's replica
//! knows of them ([`crate::log::producers`]), so that a batch a client sends again after a lost
//! acknowledgement or a failover is acknowledged where it was appended, not appended twice.
//! Kafka's Java and Python clients turn idempotence on by default.

use std::collections::HashMap;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex};

/// What an idempotent append holds from its check to its append.
type AppendLock = Arc<tokio::sync::Mutex<()>>;

/// The producer ids handed out, and one lock per partition for idempotent appends.
#[derive(Debug, Default)]
pub struct ProducerIds {
    next: AtomicI64,
    /// Held by an idempotent append from its check to its append: a batch sent again on
    /// another connection while the first is being appended waits, and then finds it.
    appending: Mutex<HashMap<(String, i32), AppendLock>>,
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

    /// The lock of `topic`-`partition`'s idempotent appends.
    pub fn appending(&self, topic: &str, partition: i32) -> AppendLock {
        let mut locks = lock(&self.appending);
        Arc::clone(locks.entry((topic.to_owned(), partition)).or_default())
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|p| p.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn producer_ids_are_distinct_and_carry_the_broker_id() {
        let ids = ProducerIds::default();
        let (a, b) = (ids.allocate(3), ids.allocate(3));
        assert_ne!(a, b);
        assert_eq!(a >> 44, 3);
        assert_eq!(b >> 44, 3);
    }
}
