//! NATS JetStream: one file-storage stream per benchmark stream (its subject is the stream's
//! name), async publish with a window of unacknowledged publishes, and an ephemeral pull
//! consumer that reads from the first message. JetStream acknowledges a publish once the
//! message is written to the stream's file store; nats-server 2.9 fsyncs the store on its own
//! timer (every 2 minutes), never per message, and has no setting to shorten that.

use std::collections::VecDeque;
use std::path::Path;
use std::time::Duration;

use anyhow::{Context, bail};
use async_nats::jetstream::consumer::{AckPolicy, DeliverPolicy, pull};
use async_nats::jetstream::context::PublishAckFuture;
use async_nats::jetstream::stream::{self, StorageType};
use async_trait::async_trait;
use bytes::Bytes;
use futures::{FutureExt, StreamExt};

use super::limits::{IN_FLIGHT_MESSAGES_MAX, RECEIVE_MESSAGES_MAX, RECEIVE_WAIT};
use super::package::package_version;
use crate::peer::{BenchResult, Consumer, Launcher, Producer, Running, dir_bytes};
use crate::service::{Service, free_port};
use crate::service::{start_service, stop_service};

pub struct Nats;

#[async_trait]
impl Launcher for Nats {
    fn name(&self) -> &'static str {
        "nats"
    }

    fn describe(&self) -> String {
        format!(
            "NATS JetStream ({}); file storage, one replica, acknowledged once written to the \
             store, fsync on the server's 2-minute timer; producer: async publish, up to \
             {IN_FLIGHT_MESSAGES_MAX} messages unacknowledged (a batch is that many publishes: \
             2.9 has no batch publish); consumer: pull, {RECEIVE_MESSAGES_MAX} messages per \
             pull request, no acks; client: async-nats",
            package_version("nats-server")
        )
    }

    async fn start(&self, dir: &Path) -> BenchResult<Box<dyn Running>> {
        let data = dir.join("data");
        std::fs::create_dir_all(&data).with_context(|| format!("creating {}", data.display()))?;
        let port = free_port()?;
        let mut command = std::process::Command::new("nats-server");
        command.args(["-js", "-a", "127.0.0.1", "-p", &port.to_string(), "-sd"]).arg(&data);
        let service =
            start_service("nats", command, &dir.join("nats.log"), port, Duration::from_secs(10))
                .await?;
        Ok(Box::new(NatsRunning { service, url: format!("nats://127.0.0.1:{port}"), data }))
    }
}

struct NatsRunning {
    service: Service,
    url: String,
    data: std::path::PathBuf,
}

impl NatsRunning {
    /// A JetStream context on its own connection, with `stream` created if needed.
    async fn stream(
        &self,
        stream: &str,
    ) -> BenchResult<(async_nats::jetstream::Context, stream::Stream)> {
        let client = async_nats::connect(&self.url)
            .await
            .with_context(|| format!("connecting to {}", self.url))?;
        let jetstream = async_nats::jetstream::new(client);
        let config = stream::Config {
            name: stream.to_owned(),
            subjects: vec![stream.to_owned()],
            storage: StorageType::File,
            num_replicas: 1,
            ..Default::default()
        };
        let handle = jetstream
            .get_or_create_stream(config)
            .await
            .with_context(|| format!("creating stream {stream}"))?;
        Ok((jetstream, handle))
    }
}

#[async_trait]
impl Running for NatsRunning {
    async fn producer(&self, stream: &str) -> BenchResult<Box<dyn Producer>> {
        let (jetstream, _) = self.stream(stream).await?;
        Ok(Box::new(NatsProducer {
            jetstream,
            subject: stream.to_owned(),
            in_flight: VecDeque::new(),
        }))
    }

    async fn consumer(&self, stream: &str) -> BenchResult<Box<dyn Consumer>> {
        let (_, handle) = self.stream(stream).await?;
        let consumer = handle
            .create_consumer(pull::Config {
                deliver_policy: DeliverPolicy::All,
                ack_policy: AckPolicy::None,
                ..Default::default()
            })
            .await
            .context("creating a pull consumer")?;
        let messages = consumer
            .stream()
            .max_messages_per_batch(RECEIVE_MESSAGES_MAX)
            .messages()
            .await
            .context("starting to pull")?;
        Ok(Box::new(NatsConsumer { messages }))
    }

    fn disk_bytes(&self) -> BenchResult<u64> {
        dir_bytes(&self.data)
    }

    async fn stop(self: Box<Self>) -> BenchResult<()> {
        stop_service(self.service, Duration::from_secs(30)).await
    }
}

struct NatsProducer {
    jetstream: async_nats::jetstream::Context,
    subject: String,
    /// One future per unacknowledged publish, oldest first.
    in_flight: VecDeque<PublishAckFuture>,
}

impl NatsProducer {
    async fn complete_one(&mut self) -> BenchResult<()> {
        if let Some(ack) = self.in_flight.pop_front() {
            ack.await.context("JetStream publish not acknowledged")?;
        }
        Ok(())
    }
}

#[async_trait]
impl Producer for NatsProducer {
    async fn send(&mut self, messages: &[Bytes]) -> BenchResult<()> {
        while !self.in_flight.is_empty()
            && self.in_flight.len() + messages.len() > IN_FLIGHT_MESSAGES_MAX
        {
            self.complete_one().await?;
        }
        for message in messages {
            let ack = self
                .jetstream
                .publish(self.subject.clone(), message.clone())
                .await
                .context("JetStream publish")?;
            self.in_flight.push_back(ack);
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

struct NatsConsumer {
    messages: pull::Stream,
}

#[async_trait]
impl Consumer for NatsConsumer {
    async fn receive(&mut self) -> BenchResult<Vec<Bytes>> {
        let mut out = Vec::new();
        let Ok(first) = tokio::time::timeout(RECEIVE_WAIT, self.messages.next()).await else {
            return Ok(out);
        };
        let mut next = first;
        loop {
            match next {
                Some(message) => out.push(message.context("JetStream pull")?.message.payload),
                None => bail!("the JetStream pull consumer ended"),
            }
            if out.len() == RECEIVE_MESSAGES_MAX {
                break;
            }
            // Take whatever else is already buffered, without waiting.
            match self.messages.next().now_or_never() {
                Some(message) => next = message,
                None => break,
            }
        }
        Ok(out)
    }
}
