//! The four peer systems of the experiment, each started from its Debian package on 127.0.0.1
//! with all of its state under the run's directory: Redis Streams and NATS JetStream (modern
//! peers), RabbitMQ and ActiveMQ (the paper's peers).
//!
//! Every peer is configured with the same durability: persistent streams or queues, every
//! message acknowledged by the broker only once it is stored, and no fsync per message (each
//! system's own periodic or grouped sync). Every producer keeps at most
//! `IN_FLIGHT_MESSAGES_MAX` messages unacknowledged.

pub mod activemq;
pub mod nats;
pub mod rabbitmq;
pub mod redis;

use std::process::Command;
use std::time::Duration;

use crate::peer::Launcher;

/// Messages a producer may have sent without their acknowledgement: enough that throughput is
/// not bound by the round trip (1000 single-message requests, or 20 batches of 50).
const IN_FLIGHT_MESSAGES_MAX: usize = 1000;

/// Messages a consumer takes in one `receive` at most, and its prefetch where it has one.
const RECEIVE_MESSAGES_MAX: usize = 1000;

/// How long `receive` waits for a first message.
const RECEIVE_WAIT: Duration = Duration::from_millis(100);

/// The peers in report order.
pub fn all() -> Vec<Box<dyn Launcher>> {
    vec![
        Box::new(redis::Redis),
        Box::new(nats::Nats),
        Box::new(rabbitmq::RabbitMq),
        Box::new(activemq::ActiveMq),
    ]
}

/// The installed version of a Debian package, for `describe`.
fn package_version(package: &str) -> String {
    let output = Command::new("dpkg-query").args(["-W", "-f=${Version}", package]).output();
    match output {
        Ok(out) if out.status.success() && !out.stdout.is_empty() => {
            format!("{package} {}", String::from_utf8_lossy(&out.stdout))
        }
        _ => format!("{package} (not installed)"),
    }
}
