//! The Tributary broker (paper §3.1): each topic is a set of partitions, each partition an
//! append-only log of segment files addressed by logical byte offsets. Producers append whole
//! MessageSets; consumers pull `(offset, max_bytes)` and get the stored bytes back by
//! `sendfile(2)`. The broker keeps no per-consumer state and no message cache: the page cache
//! is the cache.
//!
//! [`run`] serves a bound listener (tests bind port 0); `main` only parses the command line.
//! [`serve_with`] also speaks the Apache Kafka protocol on a second listener (`kafka`).

pub mod acl;
mod broker;
mod config;
mod kafka;
pub mod log;
mod membership;
mod metrics;
mod native;
mod net;
mod node;
mod replication;
mod tier;

pub use broker::{Broker, BrokerError, Listeners, run};
pub use config::{
    BrokerConfig, CleanupPolicy, ConfigError, LogConfig, PARTITIONS_MAX, TimestampType,
    TopicOverrides, VisibleAfter,
};
pub use metrics::Metrics;
pub use node::Node;
pub use replication::{FollowerError, Following, Leadership, ReplicaPlan, Replicas};
