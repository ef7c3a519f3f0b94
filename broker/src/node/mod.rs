//! What every API calls, whichever protocol it came in by: produce (`produce`, idempotent
//! producers' sequences in `producer_ids`), fetch and offsets (`fetch`), topic creation
//! (`topics`), log starts moved by DeleteRecords (`log_start`) and cluster metadata
//! (`metadata`). A node
//! answers with values or typed error codes, never panics; it holds no protocol state.
//!
//! It stands on this broker's replicas (which partitions it has and leads) and, in a
//! cluster, on its membership (the cluster's view, and topic creation in the registry).

mod fetch;
mod log_start;
mod markers;
mod metadata;
mod produce;
mod producer_ids;
mod topics;

use std::sync::Arc;

use cluster::BrokerInfo;

use crate::acl::Authorizer;
use crate::config::BrokerConfig;
use crate::membership::Membership;
use crate::metrics::Metrics;
use crate::replication::Replicas;
use crate::tier::RemoteTier;

pub(crate) use fetch::remote_failed;
pub use log_start::DeleteBefore;
pub use produce::{AppendedRun, Copy};

use producer_ids::ProducerIds;

pub struct Node {
    replicas: Arc<Replicas>,
    /// This broker's part in its cluster; `None` for a broker alone.
    membership: Option<Arc<Membership>>,
    metrics: Arc<Metrics>,
    authorizer: Authorizer,
    /// Where clients reach this broker: what METADATA says of it when it is alone.
    advertised: BrokerInfo,
    /// The producer ids handed out, and the sequences of idempotent producers' batches.
    producers: ProducerIds,
    /// Where tiered topics' older segments are, if the broker has a remote store.
    tier: Option<Arc<RemoteTier>>,
}

impl Node {
    pub fn new(
        replicas: Arc<Replicas>,
        membership: Option<Arc<Membership>>,
        metrics: Arc<Metrics>,
        authorizer: Authorizer,
        advertised: BrokerInfo,
        tier: Option<Arc<RemoteTier>>,
    ) -> Node {
        Node {
            replicas,
            membership,
            metrics,
            authorizer,
            advertised,
            producers: ProducerIds::default(),
            tier,
        }
    }

    pub fn config(&self) -> &BrokerConfig {
        self.replicas.config()
    }

    pub fn replicas(&self) -> &Arc<Replicas> {
        &self.replicas
    }

    pub fn metrics(&self) -> &Arc<Metrics> {
        &self.metrics
    }

    pub(crate) fn authorizer(&self) -> &Authorizer {
        &self.authorizer
    }

    /// A producer id for an idempotent producer, which no other broker of the cluster hands
    /// out.
    pub fn allocate_producer_id(&self) -> i64 {
        self.producers.allocate(self.config().broker_id)
    }

    /// The cluster's registry, if this broker is in one.
    pub(crate) fn registry(&self) -> Option<&cluster::Registry> {
        self.membership.as_ref().map(|m| m.registry())
    }
}
