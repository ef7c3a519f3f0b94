//! Replication (`docs/design.md`, "Replicated partitions"): this broker's replicas and their
//! roles ([`Replicas`]), the leader's ISR and high watermark (`leader`), what a follower's
//! fetch is answered (`serve`), the follower that copies a leader's log (`follower`) over a
//! connection to another broker (`link`), and the scrubber that finds bit rot in sealed
//! segments and mends it from another replica (`scrub`).

mod follower;
mod leader;
mod link;
mod replicas;
pub mod scrub;
mod serve;

pub use follower::{FollowerError, Following, ProducerHistory};
pub(crate) use leader::Leader;
pub use leader::{IsrStore, Leadership};
pub use link::{call_broker, fetch_range};
pub use replicas::{Leaders, Replicas};
pub use serve::ReplicaPlan;
