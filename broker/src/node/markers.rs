//! Transactions at a partition's leader. Markers: the commit or abort control batch a transaction coordinator has the
//! leader of each partition of a transaction append (`WRITE_TXN_MARKER`, Kafka's
//! WriteTxnMarkers), acknowledged once every in-sync replica has it. The marker ends the
//! producer's open transaction on the partition — its last stable offset moves past it — and
//! an abort lists the transaction's records as aborted for `read_committed` readers
//! ([`crate::log::producers`]). And what a native reader of committed data asks
//! (`READ_COMMITTED`): the last stable offset and the aborted transactions of a range.

use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use protocol::{
    AbortedTransaction, Acks, ErrorCode, ReadCommittedRequest, ReadCommittedResponse,
    WriteTxnMarkerRequest,
};

use super::Node;
use crate::log::producers::{BatchProducer, Check};

impl Node {
    /// Appends the marker `request` asks for to a partition this broker leads, once no batch of
    /// the producer's is being checked, unless the producer is in a newer epoch there
    /// (`InvalidProducerEpoch`: a coordinator that has been superseded).
    pub async fn write_txn_marker(&self, request: &WriteTxnMarkerRequest) -> Result<(), ErrorCode> {
        let WriteTxnMarkerRequest { topic, partition, producer_id, producer_epoch, .. } = request;
        if *producer_id < 0 || *producer_epoch < 0 {
            return Err(ErrorCode::InvalidRequest);
        }
        let log = self.replicas.led(topic, *partition)?;
        let appending = self.producers.appending(topic, *partition);
        let _appending = appending.lock().await;
        let producer =
            BatchProducer { id: *producer_id, epoch: *producer_epoch, sequences: (0, 0) };
        if let Check::Refuse(ErrorCode::InvalidProducerEpoch) =
            self.check_producer(&log, producer).await?
        {
            return Err(ErrorCode::InvalidProducerEpoch);
        }
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as i64);
        let batch = protocol::record_batch::transaction_marker(
            *producer_id,
            *producer_epoch,
            request.commit,
            request.coordinator_epoch,
            now,
        );
        let mut set = BytesMut::with_capacity(batch.len() + 9);
        protocol::encode_batch_message(&mut set, &batch);
        let set: Bytes = set.freeze();
        let run = self.append_run(topic, *partition, Acks::All, std::slice::from_ref(&set)).await;
        run.acknowledged().await.pop().expect("one set").map(drop)
    }

    /// The last stable offset of a partition this broker leads (the visible end, or where the
    /// earliest open transaction's first batch is before it) and its aborted transactions
    /// with batches in bytes `from..to`.
    pub async fn read_committed(
        &self,
        request: &ReadCommittedRequest,
    ) -> Result<ReadCommittedResponse, ErrorCode> {
        let log = self.replicas.led(&request.topic, request.partition)?;
        let from = u64::try_from(request.from).map_err(|_| ErrorCode::OffsetOutOfRange)?;
        let to = u64::try_from(request.to).unwrap_or(0).max(from);
        let learning = Arc::clone(&log);
        let open = match tokio::task::spawn_blocking(move || learning.first_open_transaction())
            .await
        {
            Ok(Ok(open)) => open,
            Ok(Err(e)) => {
                tracing::warn!(partition = ?log, error = %e, "cannot read producers' transactions");
                return Err(ErrorCode::Unknown);
            }
            Err(_) => return Err(ErrorCode::Unknown),
        };
        let visible = log.visible_end();
        let last_stable = open.map_or(visible, |open| open.offset.min(visible));
        let aborted = log
            .aborted_in_bytes(from, to)
            .into_iter()
            .map(|a| AbortedTransaction {
                producer_id: a.producer_id,
                first_offset: a.first_offset as i64,
                marker_offset: a.marker_offset as i64,
            })
            .collect();
        Ok(ReadCommittedResponse { last_stable: last_stable as i64, aborted })
    }
}
