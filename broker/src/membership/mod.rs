//! The broker as a member of its cluster (`docs/design.md`, "Replicated partitions"): its
//! registration (`registration`), the registry's view of the cluster (`view`), the replica
//! manager that keeps this broker's replicas in the roles the registry gives them
//! (`replica_manager`), the controller candidacy and ISR writes (`controller`), and topic
//! creation (`topics`). [`Membership`] puts them together.
//!
//! It reaches this broker's replicas through [`crate::replication::Replicas`], the layer
//! below; nothing below reaches up into it.

mod controller;
mod member;
mod registration;
mod replica_manager;
mod topics;
mod view;

pub use member::Membership;
pub use view::{TopicView, View};
