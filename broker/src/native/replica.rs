//! What followers ask of a leader on the native protocol (`docs/design.md`, "Replicated
//! partitions"): `OFFSET_FOR_LEADER_EPOCH`, and `REPLICA_FETCH`, which waits on the written
//! end (not the visible one) and reports the follower's progress before it waits.

use std::io;
use std::sync::Arc;
use std::time::Instant;

use protocol::{
    ErrorCode, FRAME_SIZE_BYTES, OffsetForLeaderEpochRequest, OffsetForLeaderEpochResponse,
    REPLICA_PART_HEADER_BYTES, ReplicaFetchRequest, ReplicaPartHeader, Response, UNDEFINED_EPOCH,
    encode_replica_part_header, encode_response_header,
};

use super::connection::{Connection, Next};
use crate::metrics::{Latency, RequestKind};
use crate::replication::ReplicaPlan;

impl Connection {
    /// `OFFSET_FOR_LEADER_EPOCH`: where an epoch ends in this leader's log.
    pub(super) fn offset_for_leader_epoch(&mut self, o: OffsetForLeaderEpochRequest) {
        self.node.metrics().request(RequestKind::offset_for_leader_epoch, 1);
        let result = self.node.replicas().offset_for_leader_epoch(&o.topic, o.partition, o.epoch);
        let result = result.map(|(epoch, end_offset)| {
            Response::OffsetForLeaderEpoch(OffsetForLeaderEpochResponse { epoch, end_offset })
        });
        self.answer(RequestKind::offset_for_leader_epoch, result);
    }

    /// `REPLICA_FETCH`: a follower's progress recorded, then its fetch answered once there is
    /// data past its end or `max_wait_ms` has passed.
    pub(super) async fn replica_fetch(&mut self, m: ReplicaFetchRequest) -> io::Result<Next> {
        let node = Arc::clone(&self.node);
        node.metrics().request(RequestKind::replica_fetch, 1);
        if m.max_wait_ms < 0 {
            self.answer(RequestKind::replica_fetch, Err(ErrorCode::InvalidRequest));
            return Ok(Next::Continue);
        }
        if m.min_bytes < 0 {
            self.answer(RequestKind::replica_fetch, Err(ErrorCode::InvalidFetchSize));
            return Ok(Next::Continue);
        }
        node.replicas().record_replica_fetches(&m);
        if let Next::Gone = self.wait_for_replica_data(&m).await? {
            return Ok(Next::Gone);
        }
        let started = Instant::now();
        self.answer_replica_fetch(&m).await?;
        node.metrics().observe(Latency::fetch, started.elapsed());
        Ok(Next::Continue)
    }

    /// [`Connection::wait_for_data`] for a follower's fetch, on the written ends.
    async fn wait_for_replica_data(&mut self, request: &ReplicaFetchRequest) -> io::Result<Next> {
        let mut watches = Vec::with_capacity(request.fetches.len());
        for fetch in &request.fetches {
            match self.node.replicas().watch_replica_fetch(fetch, request.replica_id) {
                Ok(watch) => watches.push((watch, fetch.offset as u64, fetch.max_bytes as u64)),
                Err(_) => return Ok(Next::Continue),
            }
        }
        self.wait_for_bytes(request.max_wait_ms, request.min_bytes, watches).await
    }

    /// Answers a follower's fetch: each part's header (error, high watermark, epoch), then its
    /// bytes by `sendfile`.
    async fn answer_replica_fetch(&mut self, request: &ReplicaFetchRequest) -> io::Result<()> {
        let fetches = &request.fetches;
        let parts: Vec<_> = fetches
            .iter()
            .map(|f| self.node.replicas().plan_replica_fetch(f, request.replica_id))
            .collect();
        let part_len = |p: &Result<ReplicaPlan, ErrorCode>| match p {
            Ok(ReplicaPlan { slice: Some(slice), .. }) => slice.len as usize,
            _ => 0,
        };
        let body_len: usize =
            parts.iter().map(|p| FRAME_SIZE_BYTES + REPLICA_PART_HEADER_BYTES + part_len(p)).sum();
        encode_response_header(&mut self.output, body_len, ErrorCode::None);
        for (part, fetch) in parts.iter().zip(fetches) {
            match part {
                Ok(plan) => {
                    let len = part_len(part);
                    let header = ReplicaPartHeader {
                        error: ErrorCode::None,
                        high_watermark: plan.high_watermark,
                        data_epoch: plan.epoch,
                        segment_base: plan.segment_base,
                    };
                    encode_replica_part_header(&mut self.output, len, header);
                    self.send(plan.slice.as_ref()).await?;
                    self.node.metrics().sent(&fetch.topic, len as u64);
                }
                Err(error) => {
                    let header = ReplicaPartHeader {
                        error: *error,
                        high_watermark: -1,
                        data_epoch: UNDEFINED_EPOCH,
                        segment_base: -1,
                    };
                    encode_replica_part_header(&mut self.output, 0, header);
                    self.node.metrics().request_error(RequestKind::replica_fetch, *error);
                }
            }
        }
        Ok(())
    }
}
