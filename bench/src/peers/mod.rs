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

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use crate::peer::{BenchResult, Launcher};
use crate::service::Service;

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

/// `Service::start` off the async runtime: it polls the port with blocking sleeps.
async fn start_service(
    name: &'static str,
    command: Command,
    log: &Path,
    port: u16,
    ready_within: Duration,
) -> BenchResult<Service> {
    let log = log.to_path_buf();
    tokio::task::spawn_blocking(move || Service::start(name, command, &log, port, ready_within))
        .await?
}

/// `Service::stop` off the async runtime: it waits for the process with blocking sleeps.
async fn stop_service(mut service: Service, grace: Duration) -> BenchResult<()> {
    tokio::task::spawn_blocking(move || service.stop(grace)).await?
}
