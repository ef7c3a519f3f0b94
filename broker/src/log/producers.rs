//! What a partition's replica knows of its idempotent producers (KIP-98): the last
//! [`BATCHES_KEPT`] batches of each producer, with their sequence numbers and where they are in
//! the log. Every replica keeps it as it appends — the leader as it takes a batch, a follower as
//! it copies the leader's bytes — because every batch carries its producer id, epoch and
//! sequences; so a follower that becomes leader has it already, however much was written since.
//! What lies in the log before the replica opened it is learned once ([`Producers::missing_before`]):
//! from the newest snapshot of the state (written at each segment roll and at shutdown,
//! `{offset:020}.producers`) and the log after it, or without one from the last
//! [`STATE_TAIL_BYTES`] before that point.

use std::collections::{HashMap, VecDeque};

use protocol::ErrorCode;
use protocol::record_batch::RecordBatchRef;

/// Batches remembered per producer (clients have at most five in flight).
pub const BATCHES_KEPT: usize = 5;
/// Producers remembered per partition at most; past it, the one that wrote least recently is
/// forgotten.
const PRODUCERS_MAX: usize = 10_000;
/// How much of the log before a replica opened it is read for its producers' last batches: far
/// more than five batches in flight per producer at the largest batch a broker takes.
pub const STATE_TAIL_BYTES: u64 = 8 << 20;

/// Who wrote a batch of an idempotent producer, and which of its sequence numbers it holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchProducer {
    pub id: i64,
    pub epoch: i16,
    /// The batch's first and last sequence numbers (sequences wrap to 0 past `i32::MAX`).
    pub sequences: (i32, i32),
}

impl BatchProducer {
    /// Whether this batch comes right after `before`: the same producer and epoch, its first
    /// sequence the one after `before`'s last.
    pub fn follows(&self, before: &BatchProducer) -> bool {
        self.id == before.id
            && self.epoch == before.epoch
            && self.sequences.0 == after(before.sequences.1)
    }

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

/// Where a batch is: the number of its first record, and where its message begins and ends
/// in the log (byte offsets); and the leader's time stamped on it at append, on a
/// LogAppendTime topic (what a batch sent again is answered with).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Placed {
    pub first_record: u64,
    pub offset: u64,
    pub end: u64,
    pub log_append_time: Option<i64>,
}

/// What a leader does with a batch of an idempotent producer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Check {
    Append,
    /// In the log already, where it says: acknowledged, not appended again.
    Duplicate(Placed),
    /// `OutOfOrderSequence` or `InvalidProducerEpoch`.
    Refuse(ErrorCode),
}

/// One producer's last batches on the partition.
#[derive(Debug)]
struct Sequences {
    epoch: i16,
    /// `(base sequence, last sequence, where)`, oldest first.
    batches: VecDeque<(i32, i32, Placed)>,
}

/// A partition's idempotent producers, as far as this replica has seen them.
#[derive(Debug)]
pub struct Producers {
    producers: HashMap<i64, Sequences>,
    /// Where this replica began to see appends (the log end when it opened, or where it was
    /// last cut back to).
    tracked_from: u64,
    /// Whether what lies before `tracked_from` has been read in.
    loaded: bool,
}

/// The sequence after `sequence`.
fn after(sequence: i32) -> i32 {
    if sequence == i32::MAX { 0 } else { sequence + 1 }
}

impl Producers {
    /// Nothing known yet; appends are seen from `end` on.
    pub fn from(end: u64) -> Producers {
        Producers { producers: HashMap::new(), tracked_from: end, loaded: false }
    }

    /// Whether batches before [`Producers::tracked_from`] are still to be read in: then the
    /// log up to it, and [`Producers::learned`] with what it holds.
    pub fn missing_before(&self) -> Option<u64> {
        (!self.loaded).then_some(self.tracked_from)
    }

    /// Takes in the batches of the log before `tracked_from` (oldest first), which come before
    /// everything seen since. Ignored if the log was cut back meanwhile (it is read again).
    pub fn learned(&mut self, tracked_from: u64, earlier: Vec<(BatchProducer, Placed)>) {
        if self.loaded || self.tracked_from != tracked_from {
            return;
        }
        let seen = std::mem::take(&mut self.producers);
        for (producer, placed) in earlier {
            self.record(producer, placed);
        }
        for (id, sequences) in seen {
            for (base, last, placed) in sequences.batches {
                let producer =
                    BatchProducer { id, epoch: sequences.epoch, sequences: (base, last) };
                self.record(producer, placed);
            }
        }
        self.loaded = true;
    }

    /// What to do with a batch of `producer`.
    pub fn check(&self, producer: BatchProducer) -> Check {
        let BatchProducer { id, epoch, sequences: (base, last) } = producer;
        let Some(seen) = self.producers.get(&id) else {
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

    /// Every batch known, oldest first — what a snapshot holds — once nothing before
    /// `tracked_from` is missing; `None` before.
    pub fn batches(&self) -> Option<Vec<(BatchProducer, Placed)>> {
        if !self.loaded {
            return None;
        }
        let mut batches: Vec<(BatchProducer, Placed)> = self
            .producers
            .iter()
            .flat_map(|(&id, seen)| {
                seen.batches.iter().map(move |&(base, last, placed)| {
                    (BatchProducer { id, epoch: seen.epoch, sequences: (base, last) }, placed)
                })
            })
            .collect();
        batches.sort_by_key(|(_, placed)| placed.offset);
        Some(batches)
    }

    /// Remembers a batch of `producer` appended where `placed` says.
    pub fn record(&mut self, producer: BatchProducer, placed: Placed) {
        let BatchProducer { id, epoch, sequences: (base, last) } = producer;
        if !self.producers.contains_key(&id) && self.producers.len() >= PRODUCERS_MAX {
            let least_recent = self
                .producers
                .iter()
                .min_by_key(|(_, s)| s.batches.back().map_or(0, |b| b.2.offset))
                .map(|(id, _)| *id);
            if let Some(forgotten) = least_recent {
                self.producers.remove(&forgotten);
            }
        }
        let seen = self
            .producers
            .entry(id)
            .or_insert_with(|| Sequences { epoch, batches: VecDeque::new() });
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

/// Idempotent producers' batches, each with where it is in the log, oldest first: what a
/// snapshot holds.
pub type ProducerBatches = Vec<(BatchProducer, Placed)>;

/// Suffix of a snapshot of a partition's producers, named by the log end it was taken at.
pub const SNAPSHOT_SUFFIX: &str = ".producers";
/// What a snapshot file begins with: its format.
const SNAPSHOT_MARK: &str = "tributary-producers 1";

/// The text of a snapshot of `batches` (oldest first): a mark line, then one line per batch,
/// `id epoch base_sequence last_sequence first_record offset end append_time` (−1 for none).
pub fn encode_snapshot(batches: &[(BatchProducer, Placed)]) -> String {
    let mut text = format!("{SNAPSHOT_MARK}\n");
    for (producer, placed) in batches {
        let BatchProducer { id, epoch, sequences: (base, last) } = producer;
        let time = placed.log_append_time.unwrap_or(-1);
        text.push_str(&format!(
            "{id} {epoch} {base} {last} {} {} {} {time}\n",
            placed.first_record, placed.offset, placed.end
        ));
    }
    text
}

/// The batches of a snapshot's text; `None` for one that does not parse whole (a crash while
/// it was written: the log is read instead).
pub fn decode_snapshot(text: &str) -> Option<Vec<(BatchProducer, Placed)>> {
    let mut lines = text.lines();
    if lines.next()? != SNAPSHOT_MARK || !text.ends_with('\n') {
        return None;
    }
    lines
        .map(|line| {
            let f: Vec<&str> = line.split(' ').collect();
            let [id, epoch, base, last, first_record, offset, end, time] = f[..] else {
                return None;
            };
            let time: i64 = time.parse().ok()?;
            let producer = BatchProducer {
                id: id.parse().ok()?,
                epoch: epoch.parse().ok()?,
                sequences: (base.parse().ok()?, last.parse().ok()?),
            };
            let placed = Placed {
                first_record: first_record.parse().ok()?,
                offset: offset.parse().ok()?,
                end: end.parse().ok()?,
                log_append_time: (time >= 0).then_some(time),
            };
            Some((producer, placed))
        })
        .collect()
}

/// The log end a snapshot file's name says it was taken at, if it names one.
pub fn parse_snapshot_name(name: &str) -> Option<u64> {
    let digits = name.strip_suffix(SNAPSHOT_SUFFIX)?;
    (digits.len() == 20 && digits.bytes().all(|b| b.is_ascii_digit()))
        .then(|| digits.parse().ok())
        .flatten()
}

/// Where a magic-2 message's batch begins: after its length, CRC and magic.
const BATCH_AT: usize = 9;

/// The leader's append time a magic-2 message's batch carries, if it is stamped
/// LogAppendTime.
pub fn log_append_time_of_message(message: &[u8]) -> Option<i64> {
    protocol::record_batch::log_append_time_of(message.get(BATCH_AT..)?)
}

/// The producer of the magic-2 message at the start of `message` (a whole, checked message:
/// its 9-byte header, then its batch), read from the batch's header without checking it again.
pub fn producer_of_message(message: &[u8]) -> Option<BatchProducer> {
    let batch = message.get(BATCH_AT..)?;
    let field = |at: usize, width: usize| batch.get(at..at + width);
    let last_offset_delta = i32::from_be_bytes(field(23, 4)?.try_into().ok()?);
    let id = i64::from_be_bytes(field(43, 8)?.try_into().ok()?);
    let epoch = i16::from_be_bytes(field(51, 2)?.try_into().ok()?);
    let base = i32::from_be_bytes(field(53, 4)?.try_into().ok()?);
    (id >= 0).then(|| BatchProducer {
        id,
        epoch,
        sequences: (base, base.wrapping_add(last_offset_delta) & i32::MAX),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn batch(id: i64, epoch: i16, base: i32, last: i32) -> BatchProducer {
        BatchProducer { id, epoch, sequences: (base, last) }
    }

    fn at(n: u64) -> Placed {
        Placed { first_record: n, offset: n * 100, end: n * 100 + 70, log_append_time: None }
    }

    #[test]
    fn a_batch_seen_again_is_a_duplicate_and_a_gap_is_out_of_order() {
        let mut producers = Producers::from(0);
        let a = 7;
        assert_eq!(producers.check(batch(a, 0, 0, 4)), Check::Append);
        producers.record(batch(a, 0, 0, 4), at(100));
        assert_eq!(producers.check(batch(a, 0, 0, 4)), Check::Duplicate(at(100)));
        assert_eq!(producers.check(batch(a, 0, 5, 9)), Check::Append);
        let out_of_order = Check::Refuse(ErrorCode::OutOfOrderSequence);
        assert_eq!(producers.check(batch(a, 0, 7, 9)), out_of_order);
        assert_eq!(producers.check(batch(a + 1, 0, 7, 9)), Check::Append, "another producer");
        producers.record(batch(a, 1, 0, 0), at(200));
        assert_eq!(
            producers.check(batch(a, 0, 10, 10)),
            Check::Refuse(ErrorCode::InvalidProducerEpoch)
        );
        for i in 1..10 {
            producers.record(batch(a, 1, i, i), at(200 + i as u64));
        }
        assert_eq!(producers.check(batch(a, 1, 9, 9)), Check::Duplicate(at(209)));
        assert_eq!(producers.check(batch(a, 1, 2, 2)), out_of_order, "forgotten");
        producers.record(batch(a, 1, i32::MAX - 1, i32::MAX), at(300));
        assert_eq!(producers.check(batch(a, 1, 0, 3)), Check::Append, "sequences wrap");
    }

    /// Batches read from before the replica opened come before those it has seen since.
    #[test]
    fn what_is_learned_from_the_log_comes_before_what_was_seen() {
        let mut producers = Producers::from(1_000);
        producers.record(batch(1, 0, 10, 19), at(20));
        assert_eq!(producers.missing_before(), Some(1_000));
        producers.learned(999, vec![(batch(1, 0, 0, 9), at(5))]);
        assert_eq!(producers.missing_before(), Some(1_000), "cut back meanwhile: read again");
        producers.learned(1_000, vec![(batch(1, 0, 0, 9), at(5)), (batch(2, 0, 0, 0), at(6))]);
        assert_eq!(producers.missing_before(), None);
        assert_eq!(producers.check(batch(1, 0, 0, 9)), Check::Duplicate(at(5)));
        assert_eq!(producers.check(batch(1, 0, 20, 29)), Check::Append, "follows the newest");
        assert_eq!(producers.check(batch(2, 0, 0, 0)), Check::Duplicate(at(6)));
    }

    #[test]
    fn a_snapshot_holds_every_batch_and_a_torn_one_is_refused() {
        let mut producers = Producers::from(0);
        assert_eq!(producers.batches(), None, "not loaded yet");
        producers.learned(0, Vec::new());
        producers.record(batch(1, 0, 0, 4), at(3));
        producers.record(batch(2, 5, 10, 10), at(4));
        let stamped = Placed { log_append_time: Some(1_700_000_000_000), ..at(5) };
        producers.record(batch(1, 0, 5, 9), stamped);
        let batches = producers.batches().unwrap();
        assert_eq!(batches.len(), 3);
        let text = encode_snapshot(&batches);
        assert_eq!(decode_snapshot(&text), Some(batches));
        assert_eq!(decode_snapshot(&text[..text.len() - 3]), None, "torn");
        assert_eq!(decode_snapshot("something else\n"), None);
        assert_eq!(parse_snapshot_name("00000000000000001234.producers"), Some(1234));
        assert_eq!(parse_snapshot_name("1234.producers"), None);
    }

    #[test]
    fn the_producer_is_read_from_a_batch_message_header() {
        let mut builder =
            protocol::record_batch::RecordBatchBuilder::new(0).with_producer(42, 3, 100);
        builder.push(0, 1, None, Some(b"a"), &[]);
        builder.push(1, 1, None, Some(b"b"), &[]);
        let mut message = Vec::new();
        protocol::encode_batch_message(&mut message, &builder.finish());
        assert_eq!(producer_of_message(&message), Some(batch(42, 3, 100, 101)));
        assert_eq!(log_append_time_of_message(&message), None, "CreateTime");
        let mut stamped = message[9..].to_vec();
        protocol::record_batch::set_log_append_time(&mut stamped, 1_234_567);
        let mut message = Vec::new();
        protocol::encode_batch_message(&mut message, &stamped);
        assert_eq!(log_append_time_of_message(&message), Some(1_234_567));
        let mut plain = Vec::new();
        protocol::encode_batch_message(
            &mut plain,
            &protocol::record_batch::RecordBatchBuilder::new(0).finish(),
        );
        assert_eq!(producer_of_message(&plain), None, "no producer id");
    }
}
