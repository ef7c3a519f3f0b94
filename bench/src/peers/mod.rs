//! The four peer systems of the experiment, each started from its Debian package on 127.0.0.1
//! with all of its state under the run's directory: Redis Streams and NATS JetStream (modern
//! peers), RabbitMQ and ActiveMQ (the paper's peers).
//!
//! Every peer is configured with the same durability: persistent streams or queues, every
//! message acknowledged by the broker only once it is stored, and no fsync per message (each
//! system's own periodic or grouped sync). Every producer keeps at most
//! `limits::IN_FLIGHT_MESSAGES_MAX` messages unacknowledged.

pub mod activemq;
mod limits;
pub mod nats;
mod package;
pub mod rabbitmq;
pub mod redis;

use crate::peer::Launcher;

/// The peers in report order.
pub fn all() -> Vec<Box<dyn Launcher>> {
    vec![
        Box::new(redis::Redis),
        Box::new(nats::Nats),
        Box::new(rabbitmq::RabbitMq),
        Box::new(activemq::ActiveMq),
    ]
}
