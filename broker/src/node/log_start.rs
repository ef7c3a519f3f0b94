//! Moving a partition's log start: Kafka's DeleteRecords and the native DELETE_RECORDS, one
//! path for both (docs/design.md, "Log start"). In a cluster the new start goes to the
//! registry first, so that every replica (and whichever leads next) applies it; the leader
//! then applies it before it answers.

use std::io;
use std::sync::Arc;

use protocol::ErrorCode;

use super::Node;
use crate::log::{LogError, Partition};

/// Where a DeleteRecords asks the log to start.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeleteBefore {
    /// At the high watermark: every message a consumer could read goes.
    HighWatermark,
    /// At a record number (Kafka's offsets).
    Record(u64),
    /// At the message at a byte offset (the native protocol's offsets).
    Offset(u64),
}

/// A log start: the byte offset of its first message and the number of its first record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LogStartAt {
    pub offset: u64,
    pub record: u64,
}

impl Node {
    /// Moves the start of partition `partition` of `topic`, which this broker leads, to
    /// `before` — at or below the high watermark, or OFFSET_OUT_OF_RANGE; a byte offset must
    /// be a message boundary, or INVALID_REQUEST. A start at or before the current one moves
    /// nothing. Returns where the log starts now.
    pub async fn delete_records(
        &self,
        topic: &str,
        partition: i32,
        before: DeleteBefore,
    ) -> Result<LogStartAt, ErrorCode> {
        let p = self.replicas.led(topic, partition)?;
        let reading = Arc::clone(&p);
        let record = tokio::task::spawn_blocking(move || start_record(&reading, before))
            .await
            .map_err(|_| ErrorCode::Unknown)??;
        if let Some(registry) = self.registry()
            && let Err(e) = registry.advance_log_start(topic, partition, record).await
        {
            tracing::warn!(%topic, partition, error = %e, "cannot record a log start");
            return Err(ErrorCode::Unknown);
        }
        p.want_start(record);
        let moved = tokio::task::spawn_blocking(move || {
            p.advance_start().map(|record| LogStartAt { offset: p.start_offset(), record })
        });
        match moved.await {
            Ok(Ok(start)) => Ok(start),
            Ok(Err(e)) => {
                tracing::error!(%topic, partition, error = %e, "cannot move the log start");
                Err(storage_error(&e))
            }
            Err(_) => Err(ErrorCode::Unknown),
        }
    }
}

/// The record the log should start at for `before`. Blocking: may read messages between an
/// index entry and the asked offset.
fn start_record(p: &Partition, before: DeleteBefore) -> Result<u64, ErrorCode> {
    let visible_end = p.visible_end();
    let record_at = |offset: u64| {
        p.record_at_offset(offset as i64).map_err(|e| match e {
            LogError::OffsetOutOfRange { .. } => ErrorCode::OffsetOutOfRange,
            // The walk from the index entry stepped over `offset`: inside a message.
            LogError::Io { source, .. } if source.kind() == io::ErrorKind::InvalidData => {
                ErrorCode::InvalidRequest
            }
            e => {
                tracing::error!(error = %e, "cannot number a record for a log start");
                storage_error(&e)
            }
        })
    };
    let high_watermark = record_at(visible_end)?;
    match before {
        DeleteBefore::HighWatermark => Ok(high_watermark),
        DeleteBefore::Record(record) if record <= high_watermark => Ok(record),
        DeleteBefore::Offset(offset) if offset <= visible_end => {
            // A start already past the offset stays where it is.
            match offset < p.start_offset() {
                true => Ok(p.start_record()),
                false => record_at(offset),
            }
        }
        _ => Err(ErrorCode::OffsetOutOfRange),
    }
}

fn storage_error(e: &LogError) -> ErrorCode {
    match e.is_storage_full() {
        true => ErrorCode::StorageFull,
        false => ErrorCode::Unknown,
    }
}
