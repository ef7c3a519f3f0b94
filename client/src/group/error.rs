//! What can go wrong in a group consumer.

use cluster::RegistryError;
use thiserror::Error;

use crate::ConsumerError;

#[derive(Debug, Error)]
#[non_exhaustive]
pub enum GroupError {
    #[error("invalid group consumer config: {0}")]
    InvalidConfig(String),
    #[error(transparent)]
    Registry(#[from] RegistryError),
    #[error(transparent)]
    Consumer(#[from] ConsumerError),
    #[error(
        "group {group}: no stable assignment after {attempts} rebalance attempts; last, {topic} {partition} was still owned by {owner:?}"
    )]
    RebalanceFailed { group: String, attempts: u32, topic: String, partition: i32, owner: String },
    #[error("message streams were already created for this consumer")]
    AlreadySubscribed,
    /// Delivered to every stream when a rebalance fails, so that no reader waits in silence;
    /// the consumer tries again after a pause and on the next change.
    #[error("rebalance failed: {0}")]
    Rebalance(String),
}
