//! Who a Kafka connection serves and with what: the node every API calls, the admission both
//! listeners share, the state the Kafka APIs keep across connections (groups), and the
//! connection's principal; and what a handler answers with.

use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use protocol::kafka::request::Malformed;

use super::coordinator::Coordinator;
use super::txn_coordinator::{Ctx, Transactions};
use crate::log::FileSlice;
use crate::net::admission::Admission;
use crate::node::Node;

/// What the Kafka listener keeps across connections.
#[derive(Debug, Default)]
pub(crate) struct State {
    pub groups: Arc<Coordinator>,
    pub transactions: Arc<Transactions>,
}

/// Who a connection serves.
#[derive(Clone)]
pub(crate) struct Client {
    pub node: Arc<Node>,
    pub admission: Arc<Admission>,
    pub state: Arc<State>,
    /// The connection's principal: its client certificate's CN, or `anonymous`.
    pub principal: Arc<str>,
    /// The client's address, as Kafka's tools show a group member's host.
    pub host: Arc<str>,
}

impl Client {
    /// What the transaction coordinator works with.
    pub(super) fn txn_ctx(&self) -> Ctx<'_> {
        Ctx { node: &self.node, transactions: &self.state.transactions, groups: &self.state.groups }
    }
}

/// Why a connection ends.
#[derive(Debug, thiserror::Error)]
pub(crate) enum Ended {
    #[error(transparent)]
    Io(#[from] std::io::Error),
    #[error(transparent)]
    Malformed(#[from] Malformed),
    #[error("a frame of {0} bytes, beyond max_request_bytes")]
    TooLarge(usize),
    #[error("a request half sent for client_timeout_ms")]
    TimedOut,
    #[error("API {key} version {version} is not served")]
    Unsupported { key: i16, version: i16 },
}

/// A run of an answer's bytes: in memory, or stored batches sent from their segment file.
#[derive(Debug)]
pub(crate) enum Piece {
    Bytes(Bytes),
    File(FileSlice),
}

impl Piece {
    pub fn len(&self) -> usize {
        match self {
            Piece::Bytes(bytes) => bytes.len(),
            Piece::File(slice) => slice.len as usize,
        }
    }
}

/// An answer's frame, in the order its pieces go out.
#[derive(Debug, Default)]
pub(crate) struct Reply(pub Vec<Piece>);

impl From<BytesMut> for Reply {
    fn from(frame: BytesMut) -> Self {
        Reply(vec![Piece::Bytes(frame.freeze())])
    }
}

/// An answer to write: `None` for a produce with acks 0, which Kafka does not answer.
pub(crate) type Answer = Result<Option<Reply>, Ended>;
