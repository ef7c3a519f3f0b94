//! What a partition's replica knows of its idempotent producers (KIP-98): the last
//! [`BATCHES_KEPT`] batches of each producer, with their sequence numbers and where they are in
//! the log. Every replica keeps it as it appends — the leader as it takes a batch, a follower as
//! it copies the leader's bytes — because every batch carries its producer id, epoch and
//! sequences; so a follower that becomes leader has it already, however much was written since.
//! What lies in the log before the replica opened it is learned once ([`Producers::missing_before`]):
//! from the newest snapshot of the state (written at each segment roll and at shutdown,
//! `{offset:020}.producers`) and the log after it, or without one from the last
//! [`STATE_TAIL_BYTES`] before that point.
//!
//! It also keeps the partition's transactions (KIP-98): where each producer's open
//! transaction began (its first transactional batch here, until a marker ends it) — the
//! last stable offset is the earliest of them — and the aborted transactions whose records
//! are still in the log, which a `read_committed` fetch lists so that its client drops them.

use std::collections::{HashMap, VecDeque};

use protocol::ErrorCode;
use protocol::record_batch::RecordBatchRef;

/// Batches remembered per producer (clients have at most five in flight).
pub const BATCHES_KEPT: usize = 5;
/// Producers remembered per partition at most; past it, the one that wrote least recently is
/// forgotten. Copiers' writers likewise.
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

/// What a batch is to its producer's transactions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// An idempotent batch outside any transaction.
    Plain,
    /// Records of the producer's open transaction.
    Transactional,
    /// The marker that ends the producer's transaction: commits it or aborts it.
    Marker { commit: bool },
}

/// A transaction that was aborted: its producer, the number of its first record in this
/// partition and of its marker's record, and where its first batch and its marker begin
/// (byte offsets). Readers in `read_committed` drop the producer's records from the first
/// until the marker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Aborted {
    pub producer_id: i64,
    pub first_record: u64,
    pub last_record: u64,
    pub first_offset: u64,
    pub marker_offset: u64,
}

/// What a partition's state holds, as a snapshot keeps it: the idempotent batches (oldest
/// first), the open transactions (their first batches) and the aborted ones.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct History {
    pub batches: Vec<(BatchProducer, Placed)>,
    pub open: Vec<(i64, Placed)>,
    pub aborted: Vec<Aborted>,
    /// Each producer's first sequence of the run of its batches this replica has without a
    /// gap, up to its last batch (in its current epoch).
    pub runs: Vec<(i64, i32)>,
    /// Each copier's writer, its position and where the record of it is.
    pub copies: Vec<(String, Copied)>,
}

/// How far a copier's writer has copied its source partition into this one
/// ([`protocol::CopyProduceRequest`]): everything it copied from before `position` is in the
/// log; the record that says so is where `placed` says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Copied {
    pub position: i64,
    pub placed: Placed,
}

/// Aborted transactions remembered per partition at most (the oldest are forgotten).
const ABORTED_MAX: usize = 100_000;

/// What a leader does with a batch of an idempotent producer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Check {
    Append,
    /// In the log already, where it says: acknowledged, not appended again.
    Duplicate(Placed),
    /// In the log already, older than the batches whose places are kept: not appended again,
    /// answered `DuplicateSequence` once the producer's last batch (`Placed`) is acknowledged.
    Forgotten(Placed),
    /// `OutOfOrderSequence` or `InvalidProducerEpoch`.
    Refuse(ErrorCode),
}

/// One producer's last batches on the partition.
#[derive(Debug)]
struct Sequences {
    epoch: i16,
    /// The first sequence of the run that ends with the last batch and that this replica has
    /// whole: every sequence from it to the last is in the log. A producer's first batch here
    /// need not start at 0 (its state was forgotten, or an earlier batch never reached this
    /// leader), so what lies before the run is not known to be in the log.
    first: i32,
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
    /// Each producer's open transaction: where its first batch here is.
    open: HashMap<i64, Placed>,
    /// Aborted transactions, in the order of their markers. Before the state is loaded, one
    /// whose first batch came before `tracked_from` has `first_record` unknown (`u64::MAX`).
    aborted: VecDeque<Aborted>,
    /// Before the state is loaded: producers whose transaction was ended by a marker seen
    /// since `tracked_from` with no batch of it seen (it began before).
    ended_unseen: std::collections::HashSet<i64>,
    /// Copiers' writers: the last position each recorded here.
    copies: HashMap<String, Copied>,
}

/// The sequence after `sequence`.
fn after(sequence: i32) -> i32 {
    if sequence == i32::MAX { 0 } else { sequence + 1 }
}

impl Producers {
    /// Nothing known yet; appends are seen from `end` on.
    pub fn from(end: u64) -> Producers {
        Producers {
            producers: HashMap::new(),
            tracked_from: end,
            loaded: false,
            open: HashMap::new(),
            aborted: VecDeque::new(),
            ended_unseen: std::collections::HashSet::new(),
            copies: HashMap::new(),
        }
    }

    /// The state a snapshot (and the log after it) describes, complete.
    pub fn from_history(history: History) -> Producers {
        let mut producers = Producers::from(0);
        producers.loaded = true;
        for (producer, placed) in history.batches {
            producers.record(producer, placed);
        }
        for (id, first) in history.runs {
            if let Some(seen) = producers.producers.get_mut(&id) {
                seen.first = first;
            }
        }
        producers.open = history.open.into_iter().collect();
        producers.aborted = history.aborted.into_iter().collect();
        producers.copies = history.copies.into_iter().collect();
        producers
    }

    /// Whether batches before [`Producers::tracked_from`] are still to be read in: then the
    /// log up to it, and [`Producers::learned`] with what it holds.
    pub fn missing_before(&self) -> Option<u64> {
        (!self.loaded).then_some(self.tracked_from)
    }

    /// Takes in what the log before `tracked_from` holds (`earlier`, complete up to there),
    /// which comes before everything seen since. Ignored if the log was cut back meanwhile (it
    /// is read again).
    pub fn learned(&mut self, tracked_from: u64, earlier: Producers) {
        if self.loaded || self.tracked_from != tracked_from {
            return;
        }
        let mut merged = earlier;
        merged.tracked_from = self.tracked_from;
        for (id, sequences) in std::mem::take(&mut self.producers) {
            // The run seen since joins the one before when it began right after it.
            let earlier_run = merged.producers.get(&id).and_then(|e| {
                let &(_, last, _) = e.batches.back()?;
                (e.epoch == sequences.epoch && after(last) == sequences.first).then_some(e.first)
            });
            for (base, last, placed) in sequences.batches {
                let producer =
                    BatchProducer { id, epoch: sequences.epoch, sequences: (base, last) };
                merged.record(producer, placed);
            }
            if let Some(seen) = merged.producers.get_mut(&id)
                && seen.epoch == sequences.epoch
                && !seen.batches.is_empty()
            {
                seen.first = earlier_run.unwrap_or(sequences.first);
            }
            // A marker seen since with a newer epoch than any batch.
            merged.raise_epoch(id, sequences.epoch);
        }
        // A transaction that began before and ended since: its first batch is in `earlier`.
        for mut aborted in std::mem::take(&mut self.aborted) {
            if aborted.first_record == u64::MAX {
                match merged.open.get(&aborted.producer_id) {
                    Some(first) => {
                        aborted.first_record = first.first_record;
                        aborted.first_offset = first.offset;
                    }
                    None => continue, // nothing of it here: nothing to drop
                }
            }
            merged.push_aborted(aborted);
        }
        for id in std::mem::take(&mut self.ended_unseen) {
            merged.open.remove(&id);
        }
        merged.open.extend(std::mem::take(&mut self.open));
        // A position recorded since is the newer.
        merged.copies.extend(std::mem::take(&mut self.copies));
        merged.loaded = true;
        *self = merged;
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
            Some(&(_, previous_last, last_placed)) if base != after(previous_last) => {
                // Wholly within the run this replica has whole, below the batches kept: in
                // the log already.
                if seen.first <= base && base <= last && last <= previous_last {
                    Check::Forgotten(last_placed)
                } else {
                    Check::Refuse(ErrorCode::OutOfOrderSequence)
                }
            }
            _ => Check::Append,
        }
    }

    /// Everything known — what a snapshot holds — once nothing before `tracked_from` is
    /// missing; `None` before. Aborted transactions whose markers are before record
    /// `start_record` (gone from the log) are left out.
    pub fn history(&self, start_record: u64) -> Option<History> {
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
        let mut open: Vec<(i64, Placed)> = self.open.iter().map(|(&id, &p)| (id, p)).collect();
        open.sort_by_key(|(_, placed)| placed.offset);
        let aborted =
            self.aborted.iter().filter(|a| a.last_record >= start_record).copied().collect();
        let mut runs: Vec<(i64, i32)> =
            self.producers.iter().map(|(&id, seen)| (id, seen.first)).collect();
        runs.sort_unstable();
        let mut copies: Vec<(String, Copied)> =
            self.copies.iter().map(|(writer, &copied)| (writer.clone(), copied)).collect();
        copies.sort_by_key(|(_, copied)| copied.placed.offset);
        Some(History { batches, open, aborted, runs, copies })
    }

    /// How far `writer` has copied into this partition, as far as this replica knows (it
    /// knows all once the state is loaded).
    pub fn copied(&self, writer: &str) -> Option<Copied> {
        self.copies.get(writer).copied()
    }

    /// Notes `writer`'s position recorded where `placed` says.
    pub fn note_copy(&mut self, writer: &str, position: i64, placed: Placed) {
        if let Some(copied) = self.copies.get_mut(writer) {
            *copied = Copied { position, placed };
            return;
        }
        if self.copies.len() >= PRODUCERS_MAX {
            let least_recent = self
                .copies
                .iter()
                .min_by_key(|(_, c)| c.placed.offset)
                .map(|(writer, _)| writer.clone());
            if let Some(forgotten) = least_recent {
                self.copies.remove(&forgotten);
            }
        }
        self.copies.insert(writer.to_owned(), Copied { position, placed });
    }

    /// Whether any transaction was ever seen here (open, or aborted and still listed).
    pub fn has_transactions(&self) -> bool {
        !self.open.is_empty() || !self.aborted.is_empty()
    }

    /// The earliest open transaction's first batch: the last stable offset is its first
    /// record (`Some(None)`: no transaction is open, it is the high watermark). `None` until
    /// the state is loaded.
    pub fn first_open(&self) -> Option<Option<Placed>> {
        self.loaded.then(|| self.open.values().min_by_key(|p| p.offset).copied())
    }

    /// The aborted transactions with records from byte `from` up to (not including) `to`.
    pub fn aborted_in_bytes(&self, from: u64, to: u64) -> Vec<Aborted> {
        self.aborted
            .iter()
            .filter(|a| a.marker_offset >= from && a.first_offset < to)
            .copied()
            .collect()
    }

    /// The aborted transactions with records from record `from` up to (not including) `to`.
    pub fn aborted_between(&self, from: u64, to: u64) -> Vec<Aborted> {
        self.aborted
            .iter()
            .filter(|a| a.last_record >= from && a.first_record < to)
            .copied()
            .collect()
    }

    /// Notes a transactional batch of producer `id` where `placed` says: the first opens its
    /// transaction here.
    pub fn note_transactional(&mut self, id: i64, placed: Placed) {
        self.open.entry(id).or_insert(placed);
    }

    /// Notes the marker of producer `id` in `epoch` at `placed`: its transaction here ends,
    /// committed or aborted, and batches of an older epoch are refused from now on.
    pub fn note_marker(&mut self, id: i64, epoch: i16, commit: bool, placed: Placed) {
        let first = self.open.remove(&id);
        if first.is_none() && !self.loaded {
            self.ended_unseen.insert(id);
        }
        if !commit {
            let (first_record, first_offset) = match first {
                Some(first) => (first.first_record, first.offset),
                // Nothing of it here.
                None if self.loaded => (placed.first_record, placed.offset),
                // Before `tracked_from`: learned with what is before.
                None => (u64::MAX, u64::MAX),
            };
            self.push_aborted(Aborted {
                producer_id: id,
                first_record,
                last_record: placed.first_record,
                first_offset,
                marker_offset: placed.offset,
            });
        }
        self.raise_epoch(id, epoch);
    }

    fn push_aborted(&mut self, aborted: Aborted) {
        if aborted.first_record == aborted.last_record {
            return; // the marker alone: no record of the transaction here to drop
        }
        if self.aborted.len() == ABORTED_MAX {
            self.aborted.pop_front();
        }
        self.aborted.push_back(aborted);
    }

    /// Moves producer `id` to `epoch` if that is newer than the batches known of it (which are
    /// then forgotten, as a new epoch's sequences start again).
    fn raise_epoch(&mut self, id: i64, epoch: i16) {
        let seen = self.producers.entry(id).or_insert_with(|| Sequences {
            epoch,
            first: 0,
            batches: VecDeque::new(),
        });
        if epoch > seen.epoch {
            seen.epoch = epoch;
            seen.batches.clear();
        }
    }

    /// Notes the magic-2 message `message` (whole and checked) appended where `placed` says:
    /// an idempotent batch, a transaction's batch or its marker.
    pub fn note_message(&mut self, message: &[u8], placed: Placed) {
        let Some(producer) = producer_of_message(message) else {
            if let Some((writer, position)) = copy_position_of_message(message) {
                self.note_copy(&writer, position, placed);
            }
            return;
        };
        match role_of_message(message) {
            Role::Marker { commit } => {
                self.note_marker(producer.id, producer.epoch, commit, placed)
            }
            role => {
                self.record(producer, placed);
                if role == Role::Transactional {
                    self.note_transactional(producer.id, placed);
                }
            }
        }
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
        let seen = self.producers.entry(id).or_insert_with(|| Sequences {
            epoch,
            first: base,
            batches: VecDeque::new(),
        });
        if epoch != seen.epoch {
            seen.epoch = epoch;
            seen.batches.clear();
        }
        match seen.batches.back() {
            Some(&(_, previous_last, _)) if base == after(previous_last) => {}
            _ => seen.first = base,
        }
        if seen.batches.len() == BATCHES_KEPT {
            seen.batches.pop_front();
        }
        seen.batches.push_back((base, last, placed));
    }
}

/// Suffix of a snapshot of a partition's producers, named by the log end it was taken at.
pub const SNAPSHOT_SUFFIX: &str = ".producers";
/// What a snapshot file begins with: its format (version 1 held batches only).
const SNAPSHOT_MARK: &str = "tributary-producers 4";
/// Format 3 lacks the copiers' positions.
const SNAPSHOT_MARK_V3: &str = "tributary-producers 3";
/// Formats 1 and 2 lack the runs: a producer's run is taken to begin at its oldest batch kept.
const SNAPSHOT_MARK_V1: &str = "tributary-producers 1";
const SNAPSHOT_MARK_V2: &str = "tributary-producers 2";

/// The text of a snapshot of `history`: a mark line, then one line per batch (oldest first),
/// `id epoch base_sequence last_sequence first_record offset end append_time` (−1 for none),
/// one per open transaction, `open id first_record offset end`, and one per aborted
/// transaction, `aborted id first_record last_record first_offset marker_offset`, one per
/// producer, `run id first_sequence` (the run it has whole), and one per copier's writer,
/// `copy position first_record offset end writer` (the writer's name last: it has no spaces).
pub fn encode_snapshot(history: &History) -> String {
    let mut text = format!("{SNAPSHOT_MARK}\n");
    for (producer, placed) in &history.batches {
        let BatchProducer { id, epoch, sequences: (base, last) } = producer;
        let time = placed.log_append_time.unwrap_or(-1);
        text.push_str(&format!(
            "{id} {epoch} {base} {last} {} {} {} {time}\n",
            placed.first_record, placed.offset, placed.end
        ));
    }
    for (id, placed) in &history.open {
        text.push_str(&format!(
            "open {id} {} {} {}\n",
            placed.first_record, placed.offset, placed.end
        ));
    }
    for a in &history.aborted {
        text.push_str(&format!(
            "aborted {} {} {} {} {}\n",
            a.producer_id, a.first_record, a.last_record, a.first_offset, a.marker_offset
        ));
    }
    for (id, first) in &history.runs {
        text.push_str(&format!("run {id} {first}\n"));
    }
    for (writer, Copied { position, placed }) in &history.copies {
        text.push_str(&format!(
            "copy {position} {} {} {} {writer}\n",
            placed.first_record, placed.offset, placed.end
        ));
    }
    text
}

/// What a snapshot's text holds; `None` for one that does not parse whole (a crash while it
/// was written: the log is read instead).
pub fn decode_snapshot(text: &str) -> Option<History> {
    let mut lines = text.lines();
    let mark = lines.next()?;
    let marks = [SNAPSHOT_MARK, SNAPSHOT_MARK_V3, SNAPSHOT_MARK_V2, SNAPSHOT_MARK_V1];
    if !marks.contains(&mark) || !text.ends_with('\n') {
        return None;
    }
    let mut history = History::default();
    for line in lines {
        let f: Vec<&str> = line.split(' ').collect();
        match f[..] {
            ["open", id, first_record, offset, end] => {
                let placed = Placed {
                    first_record: first_record.parse().ok()?,
                    offset: offset.parse().ok()?,
                    end: end.parse().ok()?,
                    log_append_time: None,
                };
                history.open.push((id.parse().ok()?, placed));
            }
            ["run", id, first] => history.runs.push((id.parse().ok()?, first.parse().ok()?)),
            ["copy", position, first_record, offset, end, writer] => {
                let placed = Placed {
                    first_record: first_record.parse().ok()?,
                    offset: offset.parse().ok()?,
                    end: end.parse().ok()?,
                    log_append_time: None,
                };
                let position = position.parse().ok()?;
                history.copies.push((writer.to_owned(), Copied { position, placed }));
            }
            ["aborted", id, first_record, last_record, first_offset, marker_offset] => {
                history.aborted.push(Aborted {
                    producer_id: id.parse().ok()?,
                    first_record: first_record.parse().ok()?,
                    last_record: last_record.parse().ok()?,
                    first_offset: first_offset.parse().ok()?,
                    marker_offset: marker_offset.parse().ok()?,
                })
            }
            [id, epoch, base, last, first_record, offset, end, time] => {
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
                history.batches.push((producer, placed));
            }
            _ => return None,
        }
    }
    Some(history)
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

/// The writer and position of a copier's record at the start of `message` (a whole, checked
/// magic-2 message), if it is one: a control batch without a producer id.
pub fn copy_position_of_message(message: &[u8]) -> Option<(String, i64)> {
    let batch = message.get(BATCH_AT..)?;
    let attributes = batch.get(21..23).map_or(0, |a| i16::from_be_bytes([a[0], a[1]]));
    if attributes & (1 << 5) == 0 {
        return None;
    }
    protocol::record_batch::copy_position(&RecordBatchRef::parse(batch).ok()?)
}

/// What the magic-2 message at the start of `message` (a whole, checked message) is to its
/// producer's transactions.
pub fn role_of_message(message: &[u8]) -> Role {
    let Some(batch) = message.get(BATCH_AT..) else { return Role::Plain };
    let attributes = batch.get(21..23).map_or(0, |a| i16::from_be_bytes([a[0], a[1]]));
    if attributes & (1 << 5) != 0 {
        let commit =
            RecordBatchRef::parse(batch).ok().and_then(|b| protocol::record_batch::marker_kind(&b));
        // A control batch of another kind ends nothing: taken as a commit of nothing.
        return Role::Marker { commit: commit.unwrap_or(true) };
    }
    if attributes & (1 << 4) != 0 { Role::Transactional } else { Role::Plain }
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
        let forgotten = Check::Forgotten(at(209));
        assert_eq!(producers.check(batch(a, 1, 2, 3)), forgotten, "in the log, offset forgotten");
        // A producer first seen here at sequence 5 (its batch 0 never reached this leader):
        // what lies before its run is not known to be in the log.
        let b = 8;
        producers.record(batch(b, 0, 5, 6), at(400));
        producers.record(batch(b, 0, 7, 9), at(401));
        assert_eq!(producers.check(batch(b, 0, 0, 4)), out_of_order, "before the run");
        assert_eq!(producers.check(batch(b, 0, 5, 6)), Check::Duplicate(at(400)));
        assert_eq!(producers.check(batch(a, 1, 8, 10)), out_of_order, "overlaps the last");
        producers.record(batch(a, 1, i32::MAX - 1, i32::MAX), at(300));
        assert_eq!(producers.check(batch(a, 1, 0, 3)), Check::Append, "sequences wrap");
    }

    /// Batches read from before the replica opened come before those it has seen since.
    #[test]
    fn what_is_learned_from_the_log_comes_before_what_was_seen() {
        let mut producers = Producers::from(1_000);
        producers.record(batch(1, 0, 10, 19), at(20));
        assert_eq!(producers.missing_before(), Some(1_000));
        let earlier = |batches| Producers::from_history(History { batches, ..History::default() });
        producers.learned(999, earlier(vec![(batch(1, 0, 0, 9), at(5))]));
        assert_eq!(producers.missing_before(), Some(1_000), "cut back meanwhile: read again");
        producers
            .learned(1_000, earlier(vec![(batch(1, 0, 0, 9), at(5)), (batch(2, 0, 0, 0), at(6))]));
        assert_eq!(producers.missing_before(), None);
        assert_eq!(producers.check(batch(1, 0, 0, 9)), Check::Duplicate(at(5)));
        assert_eq!(producers.check(batch(1, 0, 20, 29)), Check::Append, "follows the newest");
        assert_eq!(producers.check(batch(2, 0, 0, 0)), Check::Duplicate(at(6)));
    }

    #[test]
    fn a_snapshot_holds_every_batch_and_a_torn_one_is_refused() {
        let mut producers = Producers::from(0);
        assert_eq!(producers.history(0), None, "not loaded yet");
        producers.learned(0, Producers::from_history(History::default()));
        producers.record(batch(1, 0, 0, 4), at(3));
        producers.record(batch(2, 5, 10, 10), at(4));
        let stamped = Placed { log_append_time: Some(1_700_000_000_000), ..at(5) };
        producers.record(batch(1, 0, 5, 9), stamped);
        producers.note_transactional(3, at(6));
        producers.note_transactional(4, at(7));
        producers.note_marker(4, 0, false, at(9));
        let history = producers.history(0).unwrap();
        assert_eq!(history.batches.len(), 3);
        assert_eq!(history.open, vec![(3, at(6))]);
        let aborted = Aborted {
            producer_id: 4,
            first_record: 7,
            last_record: 9,
            first_offset: 700,
            marker_offset: 900,
        };
        assert_eq!(history.aborted, vec![aborted]);
        let text = encode_snapshot(&history);
        assert_eq!(decode_snapshot(&text), Some(history));
        assert_eq!(producers.history(10).unwrap().aborted, Vec::new(), "before the log start");
        let v1 = "tributary-producers 1\n1 0 0 4 3 300 370 -1\n";
        assert_eq!(decode_snapshot(v1).unwrap().batches, vec![(batch(1, 0, 0, 4), at(3))]);
        assert_eq!(decode_snapshot(&text[..text.len() - 3]), None, "torn");
        assert_eq!(decode_snapshot("something else\n"), None);
        assert_eq!(parse_snapshot_name("00000000000000001234.producers"), Some(1234));
        assert_eq!(parse_snapshot_name("1234.producers"), None);
    }

    /// The run a replica has whole outlives the five batches kept: through a snapshot, and
    /// when what was learned from the log joins what was seen since.
    #[test]
    fn the_run_a_replica_has_whole_survives_a_snapshot_and_joins_what_came_before() {
        let mut producers = Producers::from(0);
        producers.learned(0, Producers::from_history(History::default()));
        for i in 3..11 {
            producers.record(batch(5, 0, i, i), at(20 + i as u64));
        }
        let text = encode_snapshot(&producers.history(0).unwrap());
        let reopened = Producers::from_history(decode_snapshot(&text).unwrap());
        let forgotten = Check::Forgotten(at(30));
        assert_eq!(reopened.check(batch(5, 0, 3, 4)), forgotten, "within the run");
        let out_of_order = Check::Refuse(ErrorCode::OutOfOrderSequence);
        assert_eq!(reopened.check(batch(5, 0, 1, 2)), out_of_order, "before it");
        // Seen since a restart: 11..=20, learned from the log before it: 3..=10.
        let mut later = Producers::from(1_000);
        for i in 11..21 {
            later.record(batch(5, 0, i, i), at(100 + i as u64));
        }
        later.learned(1_000, reopened);
        assert_eq!(later.check(batch(5, 0, 3, 9)), Check::Forgotten(at(120)), "joined");
        assert_eq!(later.check(batch(5, 0, 0, 2)), out_of_order);
    }

    /// The last stable offset is the earliest open transaction's first record; an aborted
    /// transaction is listed for the records it spans; a marker fences older epochs.
    #[test]
    fn transactions_open_with_their_first_batch_and_end_with_their_marker() {
        let mut producers = Producers::from(0);
        producers.learned(0, Producers::from_history(History::default()));
        assert_eq!(producers.first_open(), Some(None));
        producers.record(batch(1, 0, 0, 0), at(10));
        producers.note_transactional(1, at(10));
        producers.record(batch(2, 0, 0, 0), at(11));
        producers.note_transactional(2, at(11));
        producers.note_transactional(1, at(12));
        assert_eq!(producers.first_open(), Some(Some(at(10))));
        producers.note_marker(1, 0, false, at(13));
        assert_eq!(producers.first_open(), Some(Some(at(11))));
        let aborted = Aborted {
            producer_id: 1,
            first_record: 10,
            last_record: 13,
            first_offset: 1_000,
            marker_offset: 1_300,
        };
        assert_eq!(producers.aborted_between(0, 100), vec![aborted]);
        assert_eq!(producers.aborted_in_bytes(1_300, 2_000), vec![aborted], "its marker");
        assert_eq!(producers.aborted_in_bytes(1_301, 2_000), Vec::new());
        assert_eq!(producers.aborted_in_bytes(0, 1_000), Vec::new());
        assert_eq!(producers.aborted_between(14, 100), Vec::new(), "after it");
        assert_eq!(producers.aborted_between(0, 10), Vec::new(), "before it");
        producers.note_marker(2, 1, true, at(14));
        assert_eq!(producers.first_open(), Some(None));
        assert_eq!(
            producers.check(batch(2, 0, 1, 1)),
            Check::Refuse(ErrorCode::InvalidProducerEpoch),
            "a zombie of the fenced epoch"
        );
    }

    /// A transaction that began before the replica opened the log and ended after: its
    /// aborted span starts where the earlier part says.
    #[test]
    fn a_transaction_ended_since_opening_takes_its_start_from_what_is_learned() {
        let mut producers = Producers::from(1_000);
        assert_eq!(producers.first_open(), None);
        producers.note_marker(5, 0, false, at(20));
        producers.note_transactional(6, at(21));
        let mut earlier = Producers::from_history(History::default());
        earlier.note_transactional(5, at(3));
        earlier.note_transactional(7, at(4));
        producers.learned(1_000, earlier);
        assert_eq!(producers.first_open(), Some(Some(at(4))));
        let aborted = Aborted {
            producer_id: 5,
            first_record: 3,
            last_record: 20,
            first_offset: 300,
            marker_offset: 2_000,
        };
        assert_eq!(producers.aborted_between(0, 100), vec![aborted]);
        let open: Vec<i64> = producers.history(0).unwrap().open.iter().map(|o| o.0).collect();
        assert_eq!(open, vec![7, 6]);
    }

    /// A copier's position is noted from its record, kept by a snapshot (format 4), and the
    /// one seen since a restart wins over what is learned from before it.
    #[test]
    fn copiers_positions_come_from_their_records_and_survive_a_snapshot() {
        let mut producers = Producers::from(0);
        producers.learned(0, Producers::from_history(History::default()));
        let marker = protocol::record_batch::copy_position_marker("live-a/t/3", 4_096, 1_000);
        let mut message = Vec::new();
        protocol::encode_batch_message(&mut message, &marker);
        producers.note_message(&message, at(7));
        let copied = Copied { position: 4_096, placed: at(7) };
        assert_eq!(producers.copied("live-a/t/3"), Some(copied));
        assert_eq!(producers.copied("live-a/t/4"), None);
        let text = encode_snapshot(&producers.history(0).unwrap());
        assert!(text.starts_with("tributary-producers 4\n"), "{text}");
        let reopened = Producers::from_history(decode_snapshot(&text).unwrap());
        assert_eq!(reopened.copied("live-a/t/3"), Some(copied));
        let mut later = Producers::from(1_000);
        later.note_copy("live-a/t/3", 9_000, at(20));
        later.learned(1_000, reopened);
        assert_eq!(later.copied("live-a/t/3").map(|c| c.position), Some(9_000));
        let v3 = "tributary-producers 3\nrun 5 0\n";
        assert_eq!(decode_snapshot(v3).unwrap().copies, Vec::new(), "format 3 still reads");
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
