//! Coordination without a master (paper §3.3): brokers and consumers find each other, and
//! consumers divide partitions among themselves, through a shared tree of nodes.
//!
//! [`Coordinator`] is the seam between Tributary and the coordination service. It has two
//! backends of the same shape: [`ZooKeeper`], over a real ensemble, for any deployment of more
//! than one process; and [`Embedded`], the same semantics (sessions, ephemeral nodes, watches)
//! inside one process, for the all-in-one launcher and fast tests. It is not a distributed
//! service and does not pretend to be one.
//!
//! [`Registry`] is the typed layout of `docs/design.md` ("ZooKeeper layout") over either backend,
//! so that no other crate spells a path by hand.

mod admin;
mod controller;
mod coordinator;
mod election;
mod embedded;
mod error;
mod partitions;
mod path;
mod registry;
mod replicated;
mod transactions;
mod zookeeper;

pub use admin::{Deletion, PartitionMove, PreferredElection, ReassignmentPlan, TopicPartition};
pub use controller::{
    Change, Controller, ControllerError, ReassignStep, UNCLEAN_LEADER_ELECTION, decide,
    prefer_leader, reassign_step,
};
pub use coordinator::{
    Coordinator, NodeMode, SessionEvent, Version, Watch, WatchEvent, watch_children,
};
pub use election::{Elected, Outcome as ElectionOutcome};
pub use embedded::{Embedded, EmbeddedSession};
pub use error::CoordError;
pub use partitions::{
    AssignError, Election, NO_LEADER, PartitionState, TopicAssignment, assign_replicas,
    elect_leader,
};
pub use path::{join, validate_path};
pub use registry::{
    BrokerInfo, Claim, KafkaCommit, Registry, RegistryError, Subscription, kafka_coordinator,
};
pub use transactions::{TxnPhase, TxnRecord};
pub use zookeeper::{
    ConnectError, Digest, SESSION_TIMEOUT_MS, SessionTimeoutError, ZooKeeper, ZooKeeperArgs,
    ZooKeeperConfig,
};
