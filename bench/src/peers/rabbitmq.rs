//! RabbitMQ over AMQP 0-9-1: one durable classic queue (queue format v2, new in 3.10 and the
//! faster one) per benchmark stream, persistent messages (delivery mode 2) with publisher
//! confirms, and a consumer with a prefetch window that acknowledges each received batch at
//! once (`multiple`). The broker confirms a persistent message once its message store has
//! written and fsynced it, and it groups those fsyncs across messages: no fsync per message.
//!
//! The node runs with its own epmd on a free port, so runs never share a node name registry;
//! every file (HOME with the Erlang cookie, mnesia, logs, config) lives under the run's
//! directory.

use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use anyhow::{Context, bail};
use async_trait::async_trait;
use bytes::Bytes;
use futures::{FutureExt, StreamExt};
use lapin::options::{
    BasicAckOptions, BasicConsumeOptions, BasicPublishOptions, BasicQosOptions,
    ConfirmSelectOptions, QueueDeclareOptions,
};
use lapin::types::{AMQPValue, FieldTable};
use lapin::{BasicProperties, Channel, Connection, ConnectionProperties, PublisherConfirm};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

use super::limits::{IN_FLIGHT_MESSAGES_MAX, RECEIVE_MESSAGES_MAX, RECEIVE_WAIT};
use super::package::package_version;
use crate::peer::{BenchResult, Consumer, Launcher, Producer, Running, dir_bytes};
use crate::service::{Service, free_port};
use crate::service::{start_service, stop_service};

const SERVER: &str = "/usr/lib/rabbitmq/bin/rabbitmq-server";
const CTL: &str = "/usr/lib/rabbitmq/bin/rabbitmqctl";
const NODE: &str = "rabbit@localhost";

/// Unacknowledged deliveries the broker may push to the consumer: twice what one `receive`
/// takes, so the next batch is on its way while this one is acknowledged.
const PREFETCH_MESSAGES: u16 = 2 * RECEIVE_MESSAGES_MAX as u16;

/// RabbitMQ boots in about 4 s here; a loaded machine gets more.
const READY_WITHIN: Duration = Duration::from_secs(60);

pub struct RabbitMq;

#[async_trait]
impl Launcher for RabbitMq {
    fn name(&self) -> &'static str {
        "rabbitmq"
    }

    fn describe(&self) -> String {
        format!(
            "RabbitMQ ({}); durable classic queue (version 2), persistent messages (delivery \
             mode 2), publisher confirms, confirmed once the message store has fsynced them \
             (grouped, not per message); producer: basic.publish per message, a batch is that \
             many publishes, up to {IN_FLIGHT_MESSAGES_MAX} unconfirmed; consumer: prefetch \
             {PREFETCH_MESSAGES}, one multiple-ack per received batch; client: lapin",
            package_version("rabbitmq-server")
        )
    }

    async fn start(&self, dir: &Path) -> BenchResult<Box<dyn Running>> {
        if !Path::new(SERVER).exists() {
            bail!(
                "RabbitMQ is not installed: {SERVER} is missing (Debian package rabbitmq-server)"
            );
        }
        let node = Node { dir: dir.to_path_buf(), epmd_port: free_port()? };
        let amqp_port = free_port()?;
        let distribution_port = free_port()?;
        for sub in ["home", "log", "mnesia"] {
            std::fs::create_dir_all(dir.join(sub))
                .with_context(|| format!("creating {}", dir.join(sub).display()))?;
        }
        std::fs::write(
            dir.join("rabbitmq.conf"),
            format!(
                "listeners.tcp.1 = 127.0.0.1:{amqp_port}\n\
                 distribution.listener.interface = 127.0.0.1\n\
                 distribution.listener.port_range.min = {distribution_port}\n\
                 distribution.listener.port_range.max = {distribution_port}\n"
            ),
        )?;
        std::fs::write(dir.join("enabled_plugins"), "[].\n")?;

        let mut epmd = Command::new("epmd");
        epmd.args(["-address", "127.0.0.1", "-port", &node.epmd_port.to_string()]);
        let epmd = start_service(
            "epmd",
            epmd,
            &dir.join("epmd.log"),
            node.epmd_port,
            Duration::from_secs(10),
        )
        .await?;

        let mut server = Command::new(SERVER);
        node.environment(&mut server);
        let server = match start_service(
            "rabbitmq",
            server,
            &dir.join("rabbitmq.log"),
            amqp_port,
            READY_WITHIN,
        )
        .await
        {
            Ok(server) => server,
            Err(error) => {
                // The service is a shell script; the Erlang VM it started is not its pid.
                node.kill_vm();
                return Err(error);
            }
        };
        Ok(Box::new(RabbitRunning {
            node,
            server: Some(server),
            epmd: Some(epmd),
            url: format!("amqp://guest:guest@127.0.0.1:{amqp_port}/%2f"),
        }))
    }
}

/// Where one RabbitMQ node keeps its state, and how its tools find it.
struct Node {
    dir: PathBuf,
    epmd_port: u16,
}

impl Node {
    /// The environment shared by the server and `rabbitmqctl`.
    fn environment(&self, command: &mut Command) {
        let dir = &self.dir;
        command
            .env("HOME", dir.join("home"))
            .env("RABBITMQ_NODENAME", NODE)
            .env("RABBITMQ_CONFIG_FILE", dir.join("rabbitmq.conf"))
            .env("RABBITMQ_ADVANCED_CONFIG_FILE", dir.join("advanced.config"))
            .env("RABBITMQ_CONF_ENV_FILE", dir.join("rabbitmq-env.conf"))
            .env("RABBITMQ_ENABLED_PLUGINS_FILE", dir.join("enabled_plugins"))
            .env("RABBITMQ_MNESIA_BASE", dir.join("mnesia"))
            .env("RABBITMQ_LOG_BASE", dir.join("log"))
            .env("RABBITMQ_PID_FILE", self.pid_file())
            .env("ERL_EPMD_ADDRESS", "127.0.0.1")
            .env("ERL_EPMD_PORT", self.epmd_port.to_string());
    }

    fn pid_file(&self) -> PathBuf {
        self.dir.join("rabbitmq.pid")
    }

    /// SIGKILLs the Erlang VM if its pid file is still there (a clean stop removes it).
    fn kill_vm(&self) {
        let Ok(text) = std::fs::read_to_string(self.pid_file()) else { return };
        if let Ok(pid) = text.trim().parse::<i32>() {
            let _ = kill(Pid::from_raw(pid), Signal::SIGKILL);
        }
    }
}

struct RabbitRunning {
    node: Node,
    /// The `rabbitmq-server` script; it runs the Erlang VM as its child.
    server: Option<Service>,
    epmd: Option<Service>,
    url: String,
}

impl RabbitRunning {
    /// A channel on its own connection, with `queue` declared.
    async fn channel(&self, queue: &str) -> BenchResult<(Connection, Channel)> {
        let connection = Connection::connect(&self.url, ConnectionProperties::default())
            .await
            .context("connecting to RabbitMQ")?;
        let channel = connection.create_channel().await?;
        let mut arguments = FieldTable::default();
        arguments.insert("x-queue-version".into(), AMQPValue::LongInt(2));
        channel
            .queue_declare(
                queue.into(),
                QueueDeclareOptions { durable: true, ..Default::default() },
                arguments,
            )
            .await
            .with_context(|| format!("declaring queue {queue}"))?;
        Ok((connection, channel))
    }
}

#[async_trait]
impl Running for RabbitRunning {
    async fn producer(&self, stream: &str) -> BenchResult<Box<dyn Producer>> {
        let (connection, channel) = self.channel(stream).await?;
        channel.confirm_select(ConfirmSelectOptions::default()).await?;
        Ok(Box::new(RabbitProducer {
            _connection: connection,
            channel,
            queue: stream.to_owned(),
            in_flight: VecDeque::new(),
        }))
    }

    async fn consumer(&self, stream: &str) -> BenchResult<Box<dyn Consumer>> {
        let (connection, channel) = self.channel(stream).await?;
        channel.basic_qos(PREFETCH_MESSAGES, BasicQosOptions::default()).await?;
        let deliveries = channel
            .basic_consume(
                stream.into(),
                "bench".into(),
                BasicConsumeOptions::default(),
                FieldTable::default(),
            )
            .await?;
        Ok(Box::new(RabbitConsumer { _connection: connection, channel, deliveries }))
    }

    fn disk_bytes(&self) -> BenchResult<u64> {
        dir_bytes(&self.node.dir.join("mnesia"))
    }

    async fn stop(mut self: Box<Self>) -> BenchResult<()> {
        let mut ctl = Command::new(CTL);
        ctl.args(["-n", NODE, "stop"]);
        self.node.environment(&mut ctl);
        let stopped = tokio::time::timeout(
            Duration::from_secs(60),
            tokio::process::Command::from(ctl).output(),
        )
        .await;
        // Whatever rabbitmqctl did, SIGTERM to the script stops the VM too.
        if let Some(server) = self.server.take() {
            stop_service(server, Duration::from_secs(30)).await?;
        }
        self.node.kill_vm();
        if let Some(epmd) = self.epmd.take() {
            stop_service(epmd, Duration::from_secs(5)).await?;
        }
        match stopped {
            Ok(Ok(out)) if out.status.success() => Ok(()),
            Ok(Ok(out)) => {
                bail!("rabbitmqctl stop failed: {}", String::from_utf8_lossy(&out.stderr).trim())
            }
            Ok(Err(error)) => Err(error).context("running rabbitmqctl"),
            Err(_) => bail!("rabbitmqctl stop did not finish within 60 s"),
        }
    }
}

impl Drop for RabbitRunning {
    fn drop(&mut self) {
        if self.server.is_some() {
            // Not stopped: the script's pid is not the VM's, so kill the VM itself; the
            // services (script, epmd) are killed as they drop.
            self.node.kill_vm();
        }
    }
}

struct RabbitProducer {
    /// Closing the connection would close the channel.
    _connection: Connection,
    channel: Channel,
    queue: String,
    /// One confirmation per unconfirmed publish, oldest first.
    in_flight: VecDeque<PublisherConfirm>,
}

impl RabbitProducer {
    async fn complete_one(&mut self) -> BenchResult<()> {
        if let Some(confirm) = self.in_flight.pop_front()
            && !confirm.await.context("waiting for a publisher confirm")?.is_ack()
        {
            bail!("RabbitMQ nacked a publish");
        }
        Ok(())
    }
}

#[async_trait]
impl Producer for RabbitProducer {
    async fn send(&mut self, messages: &[Bytes]) -> BenchResult<()> {
        while !self.in_flight.is_empty()
            && self.in_flight.len() + messages.len() > IN_FLIGHT_MESSAGES_MAX
        {
            self.complete_one().await?;
        }
        for message in messages {
            let confirm = self
                .channel
                .basic_publish(
                    "".into(),
                    self.queue.as_str().into(),
                    BasicPublishOptions::default(),
                    message,
                    BasicProperties::default().with_delivery_mode(2),
                )
                .await
                .context("basic.publish")?;
            self.in_flight.push_back(confirm);
        }
        Ok(())
    }

    async fn flush(&mut self) -> BenchResult<()> {
        while !self.in_flight.is_empty() {
            self.complete_one().await?;
        }
        Ok(())
    }
}

struct RabbitConsumer {
    _connection: Connection,
    channel: Channel,
    deliveries: lapin::Consumer,
}

#[async_trait]
impl Consumer for RabbitConsumer {
    async fn receive(&mut self) -> BenchResult<Vec<Bytes>> {
        let mut out = Vec::new();
        let Ok(first) = tokio::time::timeout(RECEIVE_WAIT, self.deliveries.next()).await else {
            return Ok(out);
        };
        let mut next = first;
        let mut last_tag;
        loop {
            let Some(delivery) = next else { bail!("the RabbitMQ consumer was cancelled") };
            let delivery = delivery.context("RabbitMQ delivery")?;
            last_tag = delivery.delivery_tag;
            out.push(Bytes::from(delivery.data));
            if out.len() == RECEIVE_MESSAGES_MAX {
                break;
            }
            // Take whatever else is already buffered, without waiting.
            match self.deliveries.next().now_or_never() {
                Some(delivery) => next = delivery,
                None => break,
            }
        }
        self.channel
            .basic_ack(last_tag, BasicAckOptions { multiple: true })
            .await
            .context("basic.ack")?;
        Ok(out)
    }
}
