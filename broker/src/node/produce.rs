//! Produce: whole MessageSets validated (and their records counted) before any byte is
//! written, appended to a partition this broker leads, and acknowledged by `acks` — at once,
//! after the flush (2), or once every in-sync replica has them (3, all). An unknown topic is
//! created on its first produce when the broker allows it.

use std::sync::Arc;

use bytes::Bytes;
use protocol::{Acks, ErrorCode, InvalidMessage};

use super::Node;
use crate::log::compact;
use crate::log::index::{self, CountError};
use crate::log::producers::{BatchProducer, Check, Copied};
use crate::log::{Partition, Topic};
use crate::replication::Leader;

/// A copier's produce: `writer`'s messages from `from` up to `to` of its source
/// ([`Node::append_copy`]).
#[derive(Debug, Clone, Copy)]
pub struct Copy<'a> {
    pub writer: &'a str,
    pub from: i64,
    pub to: i64,
}

/// Each set's `(partition, offset)`, or its error.
type Results = Vec<Result<(i32, i64), ErrorCode>>;

/// Appended sets' results and what their acknowledgement still waits for.
pub struct AppendedRun {
    results: Results,
    wait: Option<AckWait>,
    /// The record number of the first record appended, if any was.
    first_record: Option<u64>,
    /// The time its batches carry under LogAppendTime.
    append_time: Option<i64>,
}

/// What an acknowledgement waits for after the append.
enum AckWait {
    /// `acks` 2: the partition flushed up to this end.
    Flushed(Arc<Partition>, u64),
    /// `acks` 3: every in-sync replica has the log up to this end, within the ack timeout.
    Replicated(Arc<Leader>, u64, std::time::Duration),
}

impl AckWait {
    fn end(&self) -> u64 {
        match self {
            AckWait::Flushed(_, end) | AckWait::Replicated(_, end, _) => *end,
        }
    }
}

impl AppendedRun {
    /// Results settled without an append.
    pub fn now(results: Results) -> AppendedRun {
        AppendedRun { results, wait: None, first_record: None, append_time: None }
    }

    /// The record number of the first record appended, if any was.
    pub fn first_record(&self) -> Option<u64> {
        self.first_record
    }

    /// The leader's append time its batches carry, under LogAppendTime.
    pub fn append_time(&self) -> Option<i64> {
        self.append_time
    }

    /// Whether the answers are ready without waiting.
    pub fn is_ready(&self) -> bool {
        self.wait.is_none()
    }

    /// The results of this run and then of `later`'s (of the same partition and `acks`),
    /// waiting for what the one that reaches further waits for.
    fn then(self, later: AppendedRun) -> AppendedRun {
        let mut results = self.results;
        results.extend(later.results);
        let wait = match (self.wait, later.wait) {
            (Some(a), Some(b)) => Some(if a.end() >= b.end() { a } else { b }),
            (a, b) => a.or(b),
        };
        AppendedRun {
            results,
            wait,
            first_record: self.first_record.or(later.first_record),
            append_time: self.append_time.or(later.append_time),
        }
    }

    /// The answers, once what `acks` asked for happened; if it cannot, every set appended
    /// gets that error.
    pub async fn acknowledged(self) -> Results {
        let waited = match self.wait {
            None => Ok(()),
            Some(AckWait::Flushed(partition, end)) => {
                partition.wait_flushed(end).await;
                Ok(())
            }
            Some(AckWait::Replicated(leader, end, timeout)) => {
                leader.wait_replicated(end, timeout).await
            }
        };
        match waited {
            Ok(()) => self.results,
            Err(code) => self.results.into_iter().map(|r| r.and(Err(code))).collect(),
        }
    }
}

impl Node {
    /// Appends a whole MessageSet, validated before any byte of it is written.
    pub async fn produce(
        &self,
        topic: &str,
        partition: i32,
        acks: Acks,
        set: &Bytes,
    ) -> Result<(i32, i64), ErrorCode> {
        let mut results = self.produce_run(topic, partition, acks, std::slice::from_ref(set)).await;
        results.pop().expect("one result per set")
    }

    /// Appends MessageSets bound for one partition, pipelined back to back by one client,
    /// with a single write: each set is validated whole and gets its own result, as if each
    /// had come alone.
    pub async fn produce_run(
        &self,
        topic: &str,
        partition: i32,
        acks: Acks,
        sets: &[Bytes],
    ) -> Results {
        self.append_run(topic, partition, acks, sets).await.acknowledged().await
    }

    /// The first half of [`Node::produce_run`]: appends the sets and returns their results
    /// with what `acks` still waits for (the flush, or the in-sync replicas), so that a
    /// connection can append the produces pipelined behind while the answers wait.
    pub async fn append_run(
        &self,
        topic: &str,
        partition: i32,
        acks: Acks,
        sets: &[Bytes],
    ) -> AppendedRun {
        let fail_all = |code| AppendedRun::now(sets.iter().map(|_| Err(code)).collect());
        if protocol::validate_topic_name(topic).is_err() {
            return fail_all(ErrorCode::InvalidTopicName);
        }
        let (mut results, mut valid, mut counted) = self.count(topic, partition, sets);
        if valid.is_empty() {
            return AppendedRun::now(results);
        }
        let topic = match self.topic_for_produce(topic).await {
            Ok(topic) => topic,
            Err(code) => return fail_all(code),
        };
        let found = match partition {
            protocol::ANY_PARTITION => self.replicas.any_led(&topic).ok_or(ErrorCode::NotLeader),
            p => self.replicas.led(&topic.name, p),
        };
        let partition = match found {
            Ok(partition) => partition,
            Err(code) => return fail_all(code),
        };
        if partition.config().cleanup_policy.compact {
            // Every record needs a key; a set with one that has none is refused whole.
            let keyed: Vec<bool> =
                valid.iter().map(|set| compact::keyless(set).is_empty()).collect();
            let mut each = keyed.iter();
            for result in results.iter_mut().filter(|r| r.is_ok()) {
                if !each.next().expect("one valid set per ok result") {
                    *result = Err(ErrorCode::InvalidRecord);
                }
            }
            let mut each = keyed.iter();
            valid.retain(|_| *each.next().expect("one flag per set"));
            let mut each = keyed.iter();
            counted.retain(|_| *each.next().expect("one flag per set"));
            if valid.is_empty() {
                return AppendedRun::now(results);
            }
        }
        let leader = self.replicas.leader_of(&partition);
        if acks == Acks::All
            && let Some(Err(code)) = leader.as_ref().map(|l| l.check_all())
        {
            return fail_all(code);
        }
        let appended = match partition.append(&valid, &counted) {
            Ok(appended) => appended,
            Err(e) if e.is_storage_full() => {
                tracing::warn!(error = %e, "disk full: produce refused");
                return fail_all(ErrorCode::StorageFull);
            }
            Err(e) => {
                tracing::error!(error = %e, "append failed");
                return fail_all(ErrorCode::Unknown);
            }
        };
        if let Some(leader) = &leader {
            leader.appended();
        }
        let messages = counted.iter().map(|c| c.messages.len() as u64).sum();
        let bytes: usize = valid.iter().map(|s| s.len()).sum();
        self.metrics.appended(&topic.name, messages, bytes as u64);
        let mut offset = appended.offset;
        let mut valid = valid.iter();
        for result in results.iter_mut().filter(|r| r.is_ok()) {
            *result = Ok((partition.index() as i32, offset as i64));
            offset += valid.next().expect("one valid set per ok result").len() as u64;
        }
        let wait = self.ack_wait(acks, partition, leader, appended.end);
        AppendedRun {
            results,
            wait,
            first_record: Some(appended.first_record),
            append_time: appended.append_time,
        }
    }

    /// Appends `set`, one magic-2 message holding a batch of an idempotent `producer`, unless
    /// the partition has it already — then it is acknowledged again where it was appended,
    /// once `acks` hold for it there — or it does not follow the producer's last batch on the
    /// partition (`OutOfOrderSequence`, `InvalidProducerEpoch`). Every replica keeps its
    /// producers' last batches as it appends ([`crate::log::producers`]), so a batch sent
    /// again across a failover or a restart is not appended twice.
    pub async fn append_idempotent(
        &self,
        topic: &str,
        partition: i32,
        acks: Acks,
        set: &Bytes,
        producer: BatchProducer,
    ) -> Result<AppendedRun, ErrorCode> {
        let run = self
            .append_idempotent_run(topic, partition, acks, std::slice::from_ref(set), &[producer])
            .await;
        // A refusal of the check is the error; an append's failure stays the run's result, as
        // a plain produce's is (a compacted topic's INVALID_RECORD is answered with records).
        match run.results.first() {
            Some(Err(
                code @ (ErrorCode::OutOfOrderSequence
                | ErrorCode::InvalidProducerEpoch
                | ErrorCode::Unknown),
            )) => Err(*code),
            _ => Ok(run),
        }
    }

    /// [`Node::append_idempotent`] for a run of batches to one partition that a client
    /// pipelined back to back (`producers[i]` is `sets[i]`'s): each is checked in order, and a
    /// batch to append goes in one write with the batches that directly follow it (the same
    /// producer and epoch, each starting at the sequence after the last one's), which the
    /// check would let through once the batch before was appended. Each set gets its result.
    pub async fn append_idempotent_run(
        &self,
        topic: &str,
        partition: i32,
        acks: Acks,
        sets: &[Bytes],
        producers: &[BatchProducer],
    ) -> AppendedRun {
        let log = match self.replicas.led(topic, partition) {
            Ok(log) => log,
            // Not led here (or not there yet, for a topic its first produce creates): the
            // produce path answers why.
            Err(_) => return self.append_run(topic, partition, acks, sets).await,
        };
        let appending = self.producers.appending(topic, partition);
        let _appending = appending.lock().await;
        let mut run = AppendedRun::now(Vec::new());
        let mut first = 0;
        while first < sets.len() {
            let mut end = first + 1;
            while end < sets.len() && producers[end].follows(&producers[end - 1]) {
                end += 1;
            }
            let check = match self.check_producer(&log, producers[first]).await {
                Ok(check) => check,
                Err(code) => Check::Refuse(code),
            };
            let checked = match check {
                Check::Append => {
                    let appended = self.append_run(topic, partition, acks, &sets[first..end]).await;
                    first = end;
                    appended
                }
                Check::Duplicate(placed) => {
                    self.metrics.duplicate_batches.inc();
                    first += 1;
                    let leader = self.replicas.leader_of(&log);
                    AppendedRun {
                        results: vec![Ok((partition, placed.offset as i64))],
                        wait: self.ack_wait(acks, Arc::clone(&log), leader, placed.end),
                        first_record: Some(placed.first_record),
                        append_time: placed.log_append_time,
                    }
                }
                Check::Forgotten(last) => {
                    self.metrics.duplicate_batches.inc();
                    first += 1;
                    let leader = self.replicas.leader_of(&log);
                    AppendedRun {
                        results: vec![Err(ErrorCode::DuplicateSequence)],
                        wait: self.ack_wait(acks, Arc::clone(&log), leader, last.end),
                        first_record: None,
                        append_time: None,
                    }
                }
                Check::Refuse(code) => {
                    first += 1;
                    AppendedRun::now(vec![Err(code)])
                }
            };
            run = run.then(checked);
        }
        run
    }

    /// Appends messages a copier copied from its source (`set`: whole messages, the source's
    /// bytes up to `copy.to`; `copy.from`: where its previous copy ended, 0 for "wherever the
    /// writer is"), followed in the same write by the record of `copy.to` as `copy.writer`'s
    /// position — unless the writer is there already: then nothing is appended and the
    /// answer, once `acks` hold for the writer's last record, is `DuplicateSequence`. When the
    /// writer's position lies within the copy, only the messages from it on are appended (a
    /// copier that resumed from an older point). A writer's position short of `copy.from`
    /// (or a writer not seen here, and `copy.from` > 0) means a copy before this one is
    /// missing: `OutOfOrderSequence`. Every replica keeps the writers' positions as it appends
    /// ([`crate::log::producers`]), so a copy sent again across a failover, a restart or the
    /// copier's crash is not appended twice, and one sent out of order is not taken.
    pub async fn append_copy(
        &self,
        topic: &str,
        partition: i32,
        acks: Acks,
        set: &Bytes,
        copy: Copy<'_>,
    ) -> AppendedRun {
        let fail = |code| AppendedRun::now(vec![Err(code)]);
        // Where the set's bytes begin in the source: what lies between `from` and there the
        // source did not have (or the copier skipped).
        let start = copy.to - i64::try_from(set.len()).unwrap_or(i64::MAX);
        if set.is_empty() || start < copy.from {
            return fail(ErrorCode::InvalidRequest);
        }
        if protocol::validate_topic_name(topic).is_err() {
            return fail(ErrorCode::InvalidTopicName);
        }
        if let Err(code) = self.topic_for_produce(topic).await {
            return fail(code);
        }
        let log = match self.replicas.led(topic, partition) {
            Ok(log) => log,
            Err(code) => return fail(code),
        };
        let appending = self.producers.appending(topic, partition);
        let _appending = appending.lock().await;
        let copied = match self.copied(&log, copy.writer).await {
            Ok(copied) => copied,
            Err(code) => return fail(code),
        };
        let skip = match copied {
            Some(copied) if copied.position >= copy.to => {
                self.metrics.duplicate_batches.inc();
                let leader = self.replicas.leader_of(&log);
                return AppendedRun {
                    results: vec![Err(ErrorCode::DuplicateSequence)],
                    wait: self.ack_wait(acks, Arc::clone(&log), leader, copied.placed.end),
                    first_record: None,
                    append_time: None,
                };
            }
            Some(copied) if copied.position < copy.from => {
                return fail(ErrorCode::OutOfOrderSequence);
            }
            None if copy.from > 0 => return fail(ErrorCode::OutOfOrderSequence),
            Some(copied) => usize::try_from(copied.position - start).unwrap_or(0),
            None => 0,
        };
        let now = service::now_ms();
        let marker = protocol::record_batch::copy_position_marker(copy.writer, copy.to, now);
        let mut joined = bytes::BytesMut::with_capacity(set.len() - skip + marker.len() + 16);
        joined.extend_from_slice(&set[skip..]);
        protocol::encode_batch_message(&mut joined, &marker);
        // One set: validated whole (messages cut at `skip` are refused with the record), so the
        // messages and the position are appended together or not at all.
        let joined = joined.freeze();
        self.append_run(topic, partition, acks, std::slice::from_ref(&joined)).await
    }

    /// How far `writer` has copied into `log`, once what lies before this replica's appends
    /// is read in.
    async fn copied(
        &self,
        log: &Arc<Partition>,
        writer: &str,
    ) -> Result<Option<Copied>, ErrorCode> {
        learned(log, |log| log.copied(writer)).await.map(Option::flatten)
    }

    /// What `log`'s producers say of a batch of `producer`, once what lies before this
    /// replica's appends is read in.
    pub(super) async fn check_producer(
        &self,
        log: &Arc<Partition>,
        producer: BatchProducer,
    ) -> Result<Check, ErrorCode> {
        learned(log, |log| log.check_producer(producer)).await.map(|c| c.unwrap_or(Check::Append))
    }

    /// What an acknowledgement of the log up to `end` waits for under `acks`.
    fn ack_wait(
        &self,
        acks: Acks,
        log: Arc<Partition>,
        leader: Option<Arc<Leader>>,
        end: u64,
    ) -> Option<AckWait> {
        match (acks, leader) {
            (Acks::Flushed, _) => Some(AckWait::Flushed(log, end)),
            (Acks::All, Some(leader)) => {
                Some(AckWait::Replicated(leader, end, self.config().ack_timeout()))
            }
            // A partition without followers: its leader is its only in-sync replica.
            _ => None,
        }
    }

    /// Validates each set whole and counts its records: a placeholder result for each valid
    /// set (filled in once appended) or its error, with the valid sets and their counts.
    fn count<'s>(
        &self,
        topic: &str,
        partition: i32,
        sets: &'s [Bytes],
    ) -> (Results, Vec<&'s [u8]>, Vec<index::SetRecords>) {
        let mut results = Vec::with_capacity(sets.len());
        let mut valid: Vec<&[u8]> = Vec::with_capacity(sets.len());
        let mut counted = Vec::with_capacity(sets.len());
        for set in sets {
            match index::count_records(set, self.config().max_message_bytes) {
                Ok(records) if records.messages.iter().any(|m| m.gap) => {
                    tracing::debug!(%topic, partition, "rejected a message set holding a gap");
                    results.push(Err(ErrorCode::InvalidMessage));
                }
                Ok(records) => {
                    valid.push(set);
                    counted.push(records);
                    results.push(Ok((0, 0)));
                }
                Err(e) => {
                    tracing::debug!(%topic, partition, error = %e, "rejected message set");
                    results.push(Err(match e {
                        CountError::Invalid(InvalidMessage::TooLarge { .. }) => {
                            ErrorCode::MessageTooLarge
                        }
                        _ => ErrorCode::InvalidMessage,
                    }));
                }
            }
        }
        (results, valid, counted)
    }

    /// The topic a produce goes to: created first if it is unknown and the broker creates
    /// topics on first produce.
    async fn topic_for_produce(&self, name: &str) -> Result<Arc<Topic>, ErrorCode> {
        let logs = self.replicas.logs();
        let Some(membership) = &self.membership else {
            if let Some(topic) = logs.topic(name) {
                return Ok(topic);
            }
            if !self.config().auto_create_topics {
                return Err(ErrorCode::UnknownTopic);
            }
            return self.replicas.ensure_alone(name).await;
        };
        let view = membership.view();
        if view.deleting.contains(name) {
            return Err(ErrorCode::UnknownTopic);
        }
        if let Some(topic) = logs.topic(name) {
            return Ok(topic);
        }
        let known = view.topics.contains_key(name);
        if !known && !self.config().auto_create_topics {
            return Err(ErrorCode::UnknownTopic);
        }
        if !known {
            // Still being created (by this produce or another): retriable, as in Kafka.
            membership.ensure_topic(name).await.map_err(|_| ErrorCode::NotLeader)?;
        }
        // A replica here or not: a broker without one is not the leader.
        logs.topic(name).ok_or(ErrorCode::NotLeader)
    }
}

/// What `ask` answers of `log`'s producer state (`None`: not read in yet), reading in what
/// lies before this replica's appends first when it must; `None` if it still cannot answer.
async fn learned<T>(
    log: &Arc<Partition>,
    ask: impl Fn(&Partition) -> Option<T>,
) -> Result<Option<T>, ErrorCode> {
    if let Some(answer) = ask(log) {
        return Ok(Some(answer));
    }
    let learning = Arc::clone(log);
    match tokio::task::spawn_blocking(move || learning.learn_producers()).await {
        Ok(Ok(())) => Ok(ask(log)),
        Ok(Err(e)) => {
            tracing::warn!(partition = ?log, error = %e, "cannot read the producers' state");
            Err(ErrorCode::Unknown)
        }
        Err(_) => Err(ErrorCode::Unknown),
    }
}
