//! Redis Streams: one stream key, `XADD` to produce (a pipeline per request), `XREAD` from id
//! `0` to consume. Durability is the append-only file with `appendfsync everysec`: every write
//! is in the AOF before the reply, fsynced once a second; RDB snapshots are off.

use std::path::Path;
use std::task::Poll;
use std::time::Duration;

use anyhow::{Context, bail};
use async_trait::async_trait;
use bytes::Bytes;
use futures::future::BoxFuture;
use futures::stream::{FuturesOrdered, StreamExt};
use redis::aio::MultiplexedConnection;
use redis::{AsyncConnectionConfig, Value};

use super::limits::{IN_FLIGHT_MESSAGES_MAX, RECEIVE_MESSAGES_MAX, RECEIVE_WAIT};
use super::package::package_version;
use crate::peer::{BenchResult, Consumer, Launcher, Producer, Running, dir_bytes};
use crate::service::{Service, free_port};
use crate::service::{start_service, stop_service};

/// The field each stream entry carries its payload in.
const FIELD: &str = "d";

/// A reply can wait behind the once-a-second fsync; the client's default 500 ms is too short.
const RESPONSE_TIMEOUT: Duration = Duration::from_secs(30);

pub struct Redis;

#[async_trait]
impl Launcher for Redis {
    fn name(&self) -> &'static str {
        "redis"
    }

    fn describe(&self) -> String {
        format!(
            "Redis Streams ({}); appendonly yes, appendfsync everysec, RDB snapshots off; \
             producer: a pipeline of XADD per request, up to {IN_FLIGHT_MESSAGES_MAX} messages \
             unacknowledged; consumer: XREAD COUNT {RECEIVE_MESSAGES_MAX} BLOCK 100; client: redis-rs",
            package_version("redis-server")
        )
    }

    async fn start(&self, dir: &Path) -> BenchResult<Box<dyn Running>> {
        let data = dir.join("data");
        std::fs::create_dir_all(&data).with_context(|| format!("creating {}", data.display()))?;
        let port = free_port()?;
        let mut command = std::process::Command::new("redis-server");
        command
            .args(["--bind", "127.0.0.1", "--port", &port.to_string(), "--save", ""])
            .args(["--appendonly", "yes", "--appendfsync", "everysec", "--daemonize", "no"])
            .arg("--dir")
            .arg(&data);
        let service =
            start_service("redis", command, &dir.join("redis.log"), port, Duration::from_secs(10))
                .await?;
        let client = redis::Client::open(format!("redis://127.0.0.1:{port}/"))?;
        Ok(Box::new(RedisRunning { service, client, data }))
    }
}

struct RedisRunning {
    service: Service,
    client: redis::Client,
    data: std::path::PathBuf,
}

impl RedisRunning {
    async fn connect(&self) -> BenchResult<MultiplexedConnection> {
        // The connection's queue to its writer task holds every request the producer can have
        // in flight (at most one per message), so handing a request over never waits: waiting
        // senders can be overtaken, which reordered the stream in testing.
        let config = AsyncConnectionConfig::new()
            .set_response_timeout(Some(RESPONSE_TIMEOUT))
            .set_pipeline_buffer_size(IN_FLIGHT_MESSAGES_MAX);
        Ok(self.client.get_multiplexed_async_connection_with_config(&config).await?)
    }
}

#[async_trait]
impl Running for RedisRunning {
    async fn producer(&self, stream: &str) -> BenchResult<Box<dyn Producer>> {
        Ok(Box::new(RedisProducer {
            connection: self.connect().await?,
            key: stream.to_owned(),
            in_flight: FuturesOrdered::new(),
            in_flight_messages: 0,
        }))
    }

    async fn consumer(&self, stream: &str) -> BenchResult<Box<dyn Consumer>> {
        Ok(Box::new(RedisConsumer {
            connection: self.connect().await?,
            key: stream.to_owned(),
            last_id: "0".into(),
        }))
    }

    fn disk_bytes(&self) -> BenchResult<u64> {
        dir_bytes(&self.data)
    }

    async fn stop(self: Box<Self>) -> BenchResult<()> {
        // SIGTERM makes Redis fsync the AOF and exit.
        stop_service(self.service, Duration::from_secs(30)).await
    }
}

/// A pipeline in flight; it yields how many messages it carried.
type Request = BoxFuture<'static, redis::RedisResult<usize>>;

struct RedisProducer {
    connection: MultiplexedConnection,
    key: String,
    /// Requests already handed to the connection, awaiting their replies, oldest first.
    in_flight: FuturesOrdered<Request>,
    in_flight_messages: usize,
}

impl RedisProducer {
    async fn complete_one(&mut self) -> BenchResult<()> {
        if let Some(done) = self.in_flight.next().await {
            self.in_flight_messages -= done.context("XADD failed")?;
        }
        Ok(())
    }
}

#[async_trait]
impl Producer for RedisProducer {
    async fn send(&mut self, messages: &[Bytes]) -> BenchResult<()> {
        while !self.in_flight.is_empty()
            && self.in_flight_messages + messages.len() > IN_FLIGHT_MESSAGES_MAX
        {
            self.complete_one().await?;
        }
        let mut pipeline = redis::pipe();
        for message in messages {
            pipeline.cmd("XADD").arg(&self.key).arg("*").arg(FIELD).arg(message.as_ref()).ignore();
        }
        let count = messages.len();
        let mut connection = self.connection.clone();
        let mut request: Request = Box::pin(tokio::task::unconstrained(async move {
            pipeline.exec_async(&mut connection).await.map(|()| count)
        }));
        // Poll it once now: that hands the pipeline to the connection's writer task at once, in
        // `send` order (see `connect`). Unconstrained, so tokio's cooperative budget cannot make
        // this first poll return before the hand-over.
        if let Poll::Ready(done) = futures::poll!(request.as_mut()) {
            done.context("XADD failed")?;
            return Ok(());
        }
        self.in_flight.push_back(request);
        self.in_flight_messages += count;
        Ok(())
    }

    async fn flush(&mut self) -> BenchResult<()> {
        while !self.in_flight.is_empty() {
            self.complete_one().await?;
        }
        Ok(())
    }
}

struct RedisConsumer {
    connection: MultiplexedConnection,
    key: String,
    /// The id of the last entry read; `0` reads from the start.
    last_id: String,
}

#[async_trait]
impl Consumer for RedisConsumer {
    async fn receive(&mut self) -> BenchResult<Vec<Bytes>> {
        let reply: Value = redis::cmd("XREAD")
            .arg("COUNT")
            .arg(RECEIVE_MESSAGES_MAX)
            .arg("BLOCK")
            .arg(RECEIVE_WAIT.as_millis() as u64)
            .arg("STREAMS")
            .arg(&self.key)
            .arg(&self.last_id)
            .query_async(&mut self.connection)
            .await
            .context("XREAD failed")?;
        let mut messages = Vec::new();
        if let Some(last_id) = parse_xread(reply, &mut messages)? {
            self.last_id = last_id;
        }
        Ok(messages)
    }
}

/// Appends the payloads of an XREAD reply (RESP2: `[[key, [[id, [field, value]], …]]]`, or
/// nil when nothing arrived) to `out`, and returns the last entry id.
fn parse_xread(reply: Value, out: &mut Vec<Bytes>) -> BenchResult<Option<String>> {
    let streams = match reply {
        Value::Nil => return Ok(None),
        Value::Array(streams) => streams,
        other => bail!("unexpected XREAD reply {other:?}"),
    };
    let mut last_id = None;
    for stream in streams {
        let Value::Array(mut key_entries) = stream else {
            bail!("unexpected XREAD stream {stream:?}")
        };
        let Some(Value::Array(entries)) = key_entries.pop() else {
            bail!("XREAD stream without entries")
        };
        for entry in entries {
            let Value::Array(entry) = entry else { bail!("unexpected stream entry {entry:?}") };
            let [Value::BulkString(id), Value::Array(fields)] = <[Value; 2]>::try_from(entry)
                .map_err(|entry| anyhow::anyhow!("unexpected stream entry {entry:?}"))?
            else {
                bail!("unexpected stream entry shape")
            };
            let Ok([_, Value::BulkString(payload)]) = <[Value; 2]>::try_from(fields) else {
                bail!("stream entry without a single payload field")
            };
            out.push(Bytes::from(payload));
            last_id = Some(String::from_utf8(id)?);
        }
    }
    Ok(last_id)
}
