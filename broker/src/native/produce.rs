//! Produces on the native protocol: a run of produces to one partition that a client
//! pipelined back to back is appended with one write, each set still validated and answered
//! on its own; answers that wait for their `acks` queue up in request order while the
//! produces behind them are appended.

use std::sync::Arc;
use std::time::Instant;

use protocol::{
    Acks, ErrorCode, MultiProduceRequest, MultiProduceResponse, ProducePart, ProduceResponse,
    Response,
};

use super::connection::{AWAITING_RUNS_MAX, Awaiting, Connection, Results, oldest_answers};
use crate::metrics::{Latency, RequestKind};

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
        if acks == Acks::None {
            let results = appended.acknowledged().await;
            for error in results.into_iter().filter_map(Result::err) {
                node.metrics().request_error(RequestKind::produce, error);
            }
            node.metrics().observe(Latency::produce, started.elapsed());
            return;
        }
        if appended.is_ready() && self.awaiting.is_empty() {
            let results = appended.acknowledged().await;
            self.answer_produce((results, started));
            return;
        }
        while self.awaiting.len() >= AWAITING_RUNS_MAX {
            let answers = oldest_answers(&mut self.awaiting).await;
            self.answer_produce(answers);
        }
        self.awaiting.push_back(Awaiting { answers: Box::pin(appended.acknowledged()), started });
    }

    /// Sends the answers of a produce run.
    pub(super) fn answer_produce(&mut self, (results, started): (Results, Instant)) {
        for result in results {
            if let Err(error) = result {
                self.node.metrics().request_error(RequestKind::produce, error);
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
