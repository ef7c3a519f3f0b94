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
mod connection;
mod follower;
pub mod kafka;
mod leader;
pub mod log;
mod metrics;
mod registration;
mod replicas;
mod scrub;
mod sendfile;
mod server;
mod stream;

pub use broker::{Broker, BrokerError, Following, ReplicaPlan};
pub use config::{
    BrokerConfig, ConfigError, LogConfig, PARTITIONS_MAX, TopicOverrides, VisibleAfter,
};
pub use follower::FollowerError;
pub use leader::Leadership;
pub use metrics::Metrics;
pub use server::{run, serve, serve_with};
