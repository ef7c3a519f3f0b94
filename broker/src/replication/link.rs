//! One connection to another broker of the cluster, over which a follower copies its leader's
//! log and the scrubber reads a damaged range back from a replica: the broker protocol, one
//! request at a time (a follower needs no pipelining, and a broker does not link the client
//! crate).

use std::sync::Arc;

use bytes::BytesMut;
use protocol::{ApiKey, ErrorCode, ReplicaFetchPartition, ReplicaFetchRequest, Request, Response};
use service::tls::ClientStream;
use thiserror::Error;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::log::{Damage, Partition};

/// A connection's failure: worth a reconnect.
#[derive(Debug, Error)]
pub(super) enum LinkError {
    #[error("{0}")]
    Io(#[from] std::io::Error),
    #[error("undecodable answer: {0}")]
    Decode(#[from] protocol::DecodeError),
    #[error("answered with {0}")]
    Error(ErrorCode),
    #[error("answer {size} bytes long, more than {max}")]
    TooLarge { size: usize, max: usize },
    #[error("unencodable request: {0}")]
    Encode(#[from] protocol::EncodeError),
}

/// One request at a time to another broker.
pub(super) struct PeerLink {
    stream: ClientStream,
    response_bytes_max: usize,
}

impl PeerLink {
    pub(super) async fn connect(
        addr: &str,
        tls: Option<&Arc<rustls::ClientConfig>>,
        response_bytes_max: usize,
    ) -> Result<PeerLink, LinkError> {
        let stream = ClientStream::connect(addr, tls).await?;
        Ok(PeerLink { stream, response_bytes_max })
    }

    pub(super) async fn call(&mut self, request: &Request) -> Result<Response, LinkError> {
        let key: ApiKey = request.api_key();
        let mut frame = BytesMut::new();
        request.encode(&mut frame)?;
        self.stream.write_all(&frame).await?;
        self.stream.flush().await?;
        let size = self.stream.read_u32().await? as usize;
        if size > self.response_bytes_max || size < 2 {
            return Err(LinkError::TooLarge { size, max: self.response_bytes_max });
        }
        // Read without zeroing first: an answer is up to a fetch's bytes.
        let mut body = BytesMut::with_capacity(size);
        while body.len() < size {
            if self.stream.read_buf(&mut body).await? == 0 {
                return Err(std::io::Error::from(std::io::ErrorKind::UnexpectedEof).into());
            }
        }
        let error = ErrorCode::from_i16(i16::from_be_bytes([body[0], body[1]]));
        if !error.is_ok() {
            return Err(LinkError::Error(error));
        }
        Ok(Response::decode(key, body.freeze().slice(2..))?)
    }
}

/// Sends one request to the broker at `addr` and reads its answer, on a connection of its own:
/// for a broker's occasional request to another (a transaction coordinator's marker). An
/// error answer is `Err(Ok(code))`; a connection that failed, `Err(Err(why))`.
pub async fn call_broker(
    addr: &str,
    tls: Option<&Arc<rustls::ClientConfig>>,
    request: &Request,
) -> Result<Response, Result<ErrorCode, String>> {
    let mut link = PeerLink::connect(addr, tls, 1 << 20).await.map_err(|e| Err(e.to_string()))?;
    link.call(request).await.map_err(|e| match e {
        LinkError::Error(code) => Ok(code),
        e => Err(e.to_string()),
    })
}

/// Why a copy of a range from another replica was not had.
#[derive(Debug, Error)]
pub enum RangeError {
    #[error("{0}")]
    Link(String),
    #[error("its segment there starts at {theirs}, this one at {ours}")]
    OtherSegment { theirs: i64, ours: u64 },
    #[error("it is in none of the epochs tried")]
    NoEpoch,
    #[error("it has nothing at {0}")]
    Short(u64),
}

impl From<LinkError> for RangeError {
    fn from(e: LinkError) -> RangeError {
        RangeError::Link(e.to_string())
    }
}

/// The whole messages of `partition`'s log from the start of the damage, up to `max_bytes`
/// of them (and at least one), as the replica at `addr` holds them, read with `REPLICA_FETCH`
/// as the repair reader (no leader takes it for a follower's progress). A replica answers in
/// the epoch its log is in: `epochs` are tried in order until one is taken. The bytes must
/// come from the replica's segment based where the damaged one is.
pub async fn fetch_range(
    addr: &str,
    tls: Option<&Arc<rustls::ClientConfig>>,
    partition: &Partition,
    epochs: &[i32],
    damage: &Damage,
    max_bytes: u64,
) -> Result<Vec<u8>, RangeError> {
    const STEP_BYTES: u64 = 1 << 20;
    let from = damage.from;
    let wanted = damage.to.min(from + max_bytes);
    let mut link = PeerLink::connect(addr, tls, STEP_BYTES as usize + 4096).await?;
    let mut bytes = Vec::new();
    let mut epochs = epochs.iter().copied().peekable();
    // Up to the bound, and on past it only until the first message is whole.
    while from + (bytes.len() as u64) < damage.to
        && (from + (bytes.len() as u64) < wanted || whole_messages(&bytes) == 0)
    {
        let Some(&epoch) = epochs.peek() else { return Err(RangeError::NoEpoch) };
        let offset = from + bytes.len() as u64;
        let request = Request::ReplicaFetch(ReplicaFetchRequest {
            replica_id: protocol::REPAIR_READER_ID,
            max_wait_ms: 0,
            min_bytes: 0,
            fetches: vec![ReplicaFetchPartition {
                topic: partition.topic().to_owned(),
                partition: partition.index() as i32,
                leader_epoch: epoch,
                offset: offset as i64,
                max_bytes: STEP_BYTES.min(damage.to - offset) as i32,
            }],
        });
        let answer = match link.call(&request).await {
            Ok(Response::ReplicaFetch(mut answer)) => answer.parts.pop(),
            Ok(_) => None,
            Err(LinkError::Error(ErrorCode::NotLeader | ErrorCode::FencedLeaderEpoch)) => {
                epochs.next();
                continue;
            }
            Err(e) => return Err(e.into()),
        };
        let Some(part) = answer else { return Err(LinkError::Error(ErrorCode::Unknown).into()) };
        match part.error {
            ErrorCode::None if part.segment_base != damage.segment_base as i64 => {
                let ours = damage.segment_base;
                return Err(RangeError::OtherSegment { theirs: part.segment_base, ours });
            }
            ErrorCode::None if part.messages.is_empty() => return Err(RangeError::Short(offset)),
            ErrorCode::None => bytes.extend_from_slice(&part.messages),
            ErrorCode::NotLeader | ErrorCode::FencedLeaderEpoch => {
                epochs.next();
            }
            error => return Err(LinkError::Error(error).into()),
        }
    }
    // A message the bound cut in two is left for the next step.
    bytes.truncate(whole_messages(&bytes));
    Ok(bytes)
}

/// Length of the prefix of `set` made of whole messages (by their length fields).
pub(super) fn whole_messages(set: &[u8]) -> usize {
    let mut at = 0;
    while let Some(length) = protocol::u32_at(set, at) {
        let length = length as usize;
        let end = at + 4 + length;
        if end > set.len() {
            break;
        }
        at = end;
    }
    at
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn whole_messages_stop_before_a_partial_one() {
        let mut set = Vec::new();
        protocol::encode_message(&mut set, protocol::Codec::None, b"one");
        let first = set.len();
        protocol::encode_message(&mut set, protocol::Codec::None, b"two");
        assert_eq!(whole_messages(&set), set.len());
        assert_eq!(whole_messages(&set[..set.len() - 1]), first);
        assert_eq!(whole_messages(&set[..3]), 0);
        assert_eq!(whole_messages(&[]), 0);
    }
}
