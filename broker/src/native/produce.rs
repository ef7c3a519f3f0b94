//! Produces on the native protocol: a run of produces to one partition that a client
//! pipelined back to back is appended with one write, each set still validated and answered
//! on its own; answers that wait for their `acks` queue up in request order while the
//! produces behind them are appended. A run of IDEMPOTENT_PRODUCEs is checked a batch at a
//! time, and the batches that follow one another are appended with one write; their answers
//! queue up the same way.

use std::sync::Arc;
use std::time::Instant;

use protocol::record_batch::RecordBatchRef;
use protocol::{
    Acks, ErrorCode, MultiProduceRequest, MultiProduceResponse, ProducePart, ProduceResponse,
    Response,
};

use super::connection::{AWAITING_RUNS_MAX, Answered, Awaiting, Connection, oldest_answers};
use crate::log::producers::BatchProducer;
use crate::metrics::{Latency, RequestKind};
use crate::node::AppendedRun;

impl Connection {
    /// Appends a run of produces to one partition and answers each (unless `acks` is 0): at
    /// once, or once its acks are met if they wait ([`Connection::awaiting`]).
    pub(super) async fn handle_produce_run(&mut self, run: Vec<protocol::ProduceRequest>) {
        let node = Arc::clone(&self.node);
        let started = Instant::now();
        node.metrics().request(RequestKind::produce, run.len() as u64);
        let (topic, partition, acks) = (run[0].topic.as_str(), run[0].partition, run[0].acks);
        let sets: Vec<bytes::Bytes> = run.iter().map(|p| p.messages.clone()).collect();
        let appended = node.append_run(topic, partition, acks, &sets).await;
        self.queue_answers(appended, acks, (started, RequestKind::produce)).await;
    }

    /// Appends an idempotent producer's batch unless the leader has it already (then answers
    /// where it was appended) or it does not follow the producer's last one (error 16) or is
    /// of an older epoch (17). The set must be one magic-2 message whose batch carries a
    /// producer id and is neither transactional nor a control batch (else error 6), and the
    /// partition a real one (−1 has no sequences).
    pub(super) async fn handle_idempotent_produce(&mut self, p: protocol::ProduceRequest) {
        let node = Arc::clone(&self.node);
        let started = Instant::now();
        node.metrics().request(RequestKind::idempotent_produce, 1);
        let appended = match producer_of(&p.messages) {
            Some(producer) if p.partition >= 0 => {
                let (topic, partition) = (p.topic.as_str(), p.partition);
                let appended =
                    node.append_idempotent(topic, partition, p.acks, &p.messages, producer).await;
                appended.unwrap_or_else(|error| AppendedRun::now(vec![Err(error)]))
            }
            _ => AppendedRun::now(vec![Err(ErrorCode::InvalidRequest)]),
        };
        self.queue_answers(appended, p.acks, (started, RequestKind::idempotent_produce)).await;
    }

    /// Appends a copier's messages with its writer's new position, unless the partition has
    /// them already, or not after a copy missing before them ([`crate::node::Node::append_copy`]).
    /// A writer's name is 1 to 1,024 bytes without whitespace or control characters,
    /// `0 ≤ from < to` (`to − from` at least the set's length), and the partition a real one;
    /// else error 6.
    pub(super) async fn handle_copy_produce(&mut self, p: protocol::CopyProduceRequest) {
        let node = Arc::clone(&self.node);
        let started = Instant::now();
        node.metrics().request(RequestKind::copy_produce, 1);
        let valid_writer = !p.writer.is_empty()
            && p.writer.len() <= 1024
            && !p.writer.chars().any(|c| c.is_whitespace() || c.is_control());
        let appended = if valid_writer && p.partition >= 0 && 0 <= p.from && p.from < p.to {
            let copy = crate::node::Copy { writer: &p.writer, from: p.from, to: p.to };
            node.append_copy(&p.topic, p.partition, p.acks, &p.messages, copy).await
        } else {
            AppendedRun::now(vec![Err(ErrorCode::InvalidRequest)])
        };
        self.queue_answers(appended, p.acks, (started, RequestKind::copy_produce)).await;
    }

    /// A run of idempotent produces to one partition that the client pipelined back to back
    /// ([`crate::node::Node::append_idempotent_run`]): checked in order, the batches that
    /// follow one another appended in one write, each answered on its own. A run with a set
    /// that is not one idempotent batch is handled a produce at a time.
    pub(super) async fn handle_idempotent_run(&mut self, run: Vec<protocol::ProduceRequest>) {
        let producers: Option<Vec<BatchProducer>> =
            run.iter().map(|p| producer_of(&p.messages)).collect();
        let Some(producers) = producers.filter(|_| run.len() > 1) else {
            for p in run {
                self.handle_idempotent_produce(p).await;
            }
            return;
        };
        let node = Arc::clone(&self.node);
        let started = Instant::now();
        node.metrics().request(RequestKind::idempotent_produce, run.len() as u64);
        let (topic, partition, acks) = (run[0].topic.as_str(), run[0].partition, run[0].acks);
        let sets: Vec<bytes::Bytes> = run.iter().map(|p| p.messages.clone()).collect();
        let appended = node.append_idempotent_run(topic, partition, acks, &sets, &producers).await;
        self.queue_answers(appended, acks, (started, RequestKind::idempotent_produce)).await;
    }

    /// Answers appended sets (none with `acks` 0): at once if nothing waits before them,
    /// else behind the answers still waiting for their acks ([`Connection::awaiting`]).
    async fn queue_answers(
        &mut self,
        appended: AppendedRun,
        acks: Acks,
        (started, kind): (Instant, RequestKind),
    ) {
        let node = Arc::clone(&self.node);
        if acks == Acks::None {
            let results = appended.acknowledged().await;
            for error in results.into_iter().filter_map(Result::err) {
                node.metrics().request_error(kind, error);
            }
            node.metrics().observe(Latency::produce, started.elapsed());
            return;
        }
        if appended.is_ready() && self.awaiting.is_empty() {
            let results = appended.acknowledged().await;
            self.answer_produce((results, started, kind));
            return;
        }
        while self.awaiting.len() >= AWAITING_RUNS_MAX {
            let answers = oldest_answers(&mut self.awaiting).await;
            self.answer_produce(answers);
        }
        let answers = Box::pin(appended.acknowledged());
        self.awaiting.push_back(Awaiting { answers, started, kind });
    }

    /// Sends the answers of a produce run.
    pub(super) fn answer_produce(&mut self, (results, started, kind): Answered) {
        for result in results {
            if let Err(error) = result {
                self.node.metrics().request_error(kind, error);
            }
            let result = result.map(|(partition, offset)| {
                Response::Produce(ProduceResponse { partition, offset })
            });
            self.respond(result);
        }
        self.node.metrics().observe(Latency::produce, started.elapsed());
    }

    /// Waits for every produce run still waiting for its acks and answers it, oldest first.
    pub(super) async fn answer_awaiting(&mut self) {
        while !self.awaiting.is_empty() {
            let answers = oldest_answers(&mut self.awaiting).await;
            self.answer_produce(answers);
        }
    }

    /// `MULTIPRODUCE`: each part appended as a produce of its own, answered together.
    pub(super) async fn multi_produce(&mut self, m: MultiProduceRequest) {
        let node = Arc::clone(&self.node);
        let started = Instant::now();
        node.metrics().request(RequestKind::multiproduce, 1);
        let mut parts = Vec::with_capacity(m.entries.len());
        for e in &m.entries {
            let part = match node.produce(&e.topic, e.partition, m.acks, &e.messages).await {
                Ok((partition, offset)) => {
                    ProducePart { error: ErrorCode::None, partition, offset }
                }
                Err(error) => {
                    node.metrics().request_error(RequestKind::multiproduce, error);
                    ProducePart { error, partition: e.partition, offset: -1 }
                }
            };
            parts.push(part);
        }
        if m.acks != Acks::None {
            self.respond(Ok(Response::MultiProduce(MultiProduceResponse { parts })));
        }
        node.metrics().observe(Latency::produce, started.elapsed());
    }
}

/// The producer of an idempotent produce's set: one magic-2 message whose batch has a
/// producer id, neither transactional nor control.
fn producer_of(set: &[u8]) -> Option<BatchProducer> {
    let mut messages = protocol::MessageSetIter::new(set, 0);
    let (_, message) = messages.next()?.ok()?;
    if messages.next().is_some() || message.magic != protocol::MAGIC_BATCH {
        return None;
    }
    let batch = RecordBatchRef::parse(message.payload).ok()?;
    if batch.is_transactional() || batch.is_control() {
        return None;
    }
    BatchProducer::of(&batch)
}
