//! Who may do what on the native protocol: every topic a request touches must allow the
//! operation to the connection's principal (the ACL file); METADATA is always allowed and
//! leaves out what the principal may not describe, and INIT_PRODUCER_ID (which touches no
//! topic and reveals nothing) too.

use protocol::{ErrorCode, Request};

use super::connection::Connection;
use crate::acl::Operation;

impl Connection {
    /// Whether the connection's principal may make `request`: every topic it touches allows
    /// the operation. METADATA is always allowed; it leaves out what may not be described.
    pub(super) fn authorized(&self, request: &Request) -> bool {
        let authorizer = self.node.authorizer();
        if !authorizer.enforcing() {
            return true;
        }
        let may = |topic: &str, operation| authorizer.check(&self.principal, topic, operation);
        match request {
            Request::Produce(p) | Request::IdempotentProduce(p) => {
                may(&p.topic, Operation::Produce)
            }
            Request::InitProducerId => true,
            Request::CopyProduce(p) => may(&p.topic, Operation::Produce),
            Request::MultiProduce(m) => m.entries.iter().all(|e| may(&e.topic, Operation::Produce)),
            Request::Fetch(f) => may(&f.topic, Operation::Consume),
            Request::MultiFetch(m) => m.fetches.iter().all(|f| may(&f.topic, Operation::Consume)),
            Request::MultiFetchWait(m) => {
                m.fetches.iter().all(|f| may(&f.topic, Operation::Consume))
            }
            Request::Offsets(o) => may(&o.topic, Operation::Consume),
            Request::Metadata(_) => true,
            Request::OffsetForLeaderEpoch(o) => may(&o.topic, Operation::Replicate),
            Request::RecordNumber(o) => {
                may(&o.topic, Operation::Replicate) || may(&o.topic, Operation::Consume)
            }
            Request::ReplicaFetch(r) => {
                r.fetches.iter().all(|f| may(&f.topic, Operation::Replicate))
            }
            Request::CreateTopic(c) => may(&c.topic, Operation::Create),
            Request::DeleteRecords(d) => may(&d.topic, Operation::Delete),
            // From a transaction coordinator: a broker's request.
            Request::WriteTxnMarker(w) => may(&w.topic, Operation::Replicate),
            Request::ReadCommitted(c) => may(&c.topic, Operation::Consume),
        }
    }

    /// METADATA as this principal may see it: a topic asked for that it may not describe is
    /// answered with error 14, and one it did not ask for is left out.
    pub(super) fn visible_metadata(
        &self,
        mut metadata: protocol::MetadataResponse,
        asked: &[String],
    ) -> protocol::MetadataResponse {
        let authorizer = self.node.authorizer();
        if !authorizer.enforcing() {
            return metadata;
        }
        let may = |topic: &str| authorizer.check(&self.principal, topic, Operation::Describe);
        if asked.is_empty() {
            metadata.topics.retain(|t| may(&t.name));
        } else {
            for topic in &mut metadata.topics {
                if !may(&topic.name) {
                    topic.error = ErrorCode::AuthorizationFailed;
                    topic.partitions.clear();
                }
            }
        }
        metadata
    }
}
