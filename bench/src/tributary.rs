//! Tributary under the benchmark: the release `broker` binary (found beside this binary, or
//! given with `--broker-bin`), a pipelined connection with `acks` 1 for the producer, and
//! 4 MiB long-poll fetches (`MULTIFETCH_WAIT`) with CRC checks for the consumer. It runs twice:
//! as `tributary` with the paper's visibility (`visible_after = "flush"`), as
//! `tributary-write` with data visible once appended, and as `tributary-tls`: the first over
//! mutual TLS 1.3 (a CA and certificates generated for the run), whose fetches cannot use
//! `sendfile` (no kernel TLS here) — its ratio to `tributary` is TLS's cost.

use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use anyhow::{Context, bail};
use async_trait::async_trait;
use bytes::{Bytes, BytesMut};
use client::{Connection, ConnectionConfig, PendingResponse};
use protocol::{Acks, Codec, FetchRequest, MessageSetIter, ProduceRequest, Request};

use crate::peer::{BenchResult, Consumer, Launcher, Producer, Running, dir_bytes};
use crate::service::{Service, free_port, start_service, stop_service};

/// Produce requests in flight before `send` waits for the oldest answer.
const IN_FLIGHT_MAX: usize = 512;
/// Bytes per fetch.
const FETCH_BYTES: i32 = 4 << 20;
/// Fsync within this long; also every 10,000 messages, the default.
const FLUSH_MS: u64 = 10;
/// The longest a consumer's long poll waits at the end of the log; new data ends it at once.
const LONG_POLL_MS: i32 = 100;

/// The broker's `visible_after`: when appended data becomes visible to consumers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VisibleAfter {
    Flush,
    Write,
}

pub struct Tributary {
    pub broker_bin: PathBuf,
    pub visible_after: VisibleAfter,
    /// Mutual TLS between the clients and the broker.
    pub tls: bool,
}

impl Tributary {
    /// The `broker` binary beside the running one, as `cargo build --release` leaves them.
    pub fn beside_this_binary() -> BenchResult<PathBuf> {
        let exe = std::env::current_exe()?;
        Ok(exe.with_file_name("broker"))
    }
}

#[async_trait]
impl Launcher for Tributary {
    fn name(&self) -> &'static str {
        match (self.visible_after, self.tls) {
            (VisibleAfter::Flush, false) => "tributary",
            (VisibleAfter::Flush, true) => "tributary-tls",
            (VisibleAfter::Write, _) => "tributary-write",
        }
    }

    fn describe(&self) -> String {
        let visible = match self.visible_after {
            VisibleAfter::Flush => {
                "visible_after = flush: data is visible to consumers once flushed"
            }
            VisibleAfter::Write => {
                "visible_after = write: data is visible to consumers once appended (page cache)"
            }
        };
        let tls = if self.tls {
            "; mutual TLS 1.3 (rustls, ECDSA P-256 certificates), fetches read and encrypted (no sendfile)"
        } else {
            ""
        };
        format!(
            "`{}`: one partition, producer acks 1 (answered once appended), {IN_FLIGHT_MAX} requests in flight; \
             fsync every 10,000 messages or {FLUSH_MS} ms; {visible}; consumer long polls (MULTIFETCH_WAIT, \
             at most {LONG_POLL_MS} ms) of {} MiB, every CRC checked{tls}",
            self.broker_bin.display(),
            FETCH_BYTES >> 20
        )
    }

    async fn start(&self, dir: &Path) -> BenchResult<Box<dyn Running>> {
        if !self.broker_bin.is_file() {
            bail!(
                "no broker binary at {} (build it: cargo build --release -p broker)",
                self.broker_bin.display()
            );
        }
        let port = free_port()?;
        let data = dir.join("data");
        let mut command = Command::new(&self.broker_bin);
        command
            .args(["--host", "127.0.0.1", "--port", &port.to_string(), "--data-dir"])
            .arg(&data)
            .args(["--flush-ms", &FLUSH_MS.to_string(), "--num-partitions", "1"])
            .args([
                "--visible-after",
                match self.visible_after {
                    VisibleAfter::Flush => "flush",
                    VisibleAfter::Write => "write",
                },
            ])
            .env("RUST_LOG", "warn");
        let tls = if self.tls { Some(certificates(dir, &mut command)?) } else { None };
        let log = dir.join("broker.log");
        let service =
            start_service("tributary", command, &log, port, Duration::from_secs(30)).await?;
        let addr = format!("127.0.0.1:{port}");
        Ok(Box::new(RunningTributary { service, addr, data, tls }))
    }
}

/// A CA, the broker's certificate and the client's, under `dir`; the broker's flags for
/// them; the client's TLS.
fn certificates(
    dir: &Path,
    command: &mut Command,
) -> BenchResult<std::sync::Arc<rustls::ClientConfig>> {
    use service::pki::{CertificateAuthority, Validity};
    let ca = CertificateAuthority::new("tributary-bench CA")?;
    let ca_path = dir.join("ca.crt");
    std::fs::write(&ca_path, ca.cert_pem())?;
    let hosts = ["127.0.0.1", "localhost"];
    let (cert, key) = ca.issue("broker", &hosts, Validity::Days(1))?.write(dir, "broker")?;
    command.arg("--tls-cert").arg(cert).arg("--tls-key").arg(key);
    command.arg("--tls-client-ca").arg(&ca_path);
    let (cert, key) = ca.issue("bench", &hosts, Validity::Days(1))?.write(dir, "client")?;
    let files = service::tls::ClientTlsFiles { ca: ca_path, cert: Some(cert), key: Some(key) };
    Ok(service::tls::client_config(&files)?)
}

struct RunningTributary {
    service: Service,
    addr: String,
    data: PathBuf,
    tls: Option<std::sync::Arc<rustls::ClientConfig>>,
}

impl RunningTributary {
    async fn connect(&self) -> BenchResult<Connection> {
        let config = ConnectionConfig {
            in_flight_max: IN_FLIGHT_MAX * 2,
            tls: self.tls.clone(),
            ..ConnectionConfig::default()
        };
        Connection::connect_with(&self.addr, config).await.context("connecting to the broker")
    }
}

#[async_trait]
impl Running for RunningTributary {
    async fn producer(&self, stream: &str) -> BenchResult<Box<dyn Producer>> {
        let conn = self.connect().await?;
        conn.create_topic(stream, 1, &[]).await?;
        Ok(Box::new(TributaryProducer {
            conn,
            topic: stream.to_owned(),
            in_flight: VecDeque::new(),
            set: BytesMut::new(),
        }))
    }

    async fn consumer(&self, stream: &str) -> BenchResult<Box<dyn Consumer>> {
        let conn = self.connect().await?;
        Ok(Box::new(TributaryConsumer { conn, topic: stream.to_owned(), offset: 0 }))
    }

    fn disk_bytes(&self) -> BenchResult<u64> {
        dir_bytes(&self.data)
    }

    async fn stop(self: Box<Self>) -> BenchResult<()> {
        stop_service(self.service, Duration::from_secs(30)).await
    }
}

struct TributaryProducer {
    conn: Connection,
    topic: String,
    in_flight: VecDeque<PendingResponse>,
    set: BytesMut,
}

impl TributaryProducer {
    async fn wait_oldest(&mut self) -> BenchResult<()> {
        if let Some(oldest) = self.in_flight.pop_front() {
            oldest.wait().await?;
        }
        Ok(())
    }
}

#[async_trait]
impl Producer for TributaryProducer {
    async fn send(&mut self, messages: &[Bytes]) -> BenchResult<()> {
        for m in messages {
            protocol::encode_message(&mut self.set, Codec::None, m);
        }
        let messages = self.set.split().freeze();
        let request = Request::Produce(ProduceRequest {
            topic: self.topic.clone(),
            partition: 0,
            acks: Acks::Written,
            messages,
        });
        let pending = self.conn.enqueue(request).await?.context("acks 1 is always answered")?;
        self.in_flight.push_back(pending);
        while self.in_flight.len() > IN_FLIGHT_MAX {
            self.wait_oldest().await?;
        }
        Ok(())
    }

    async fn flush(&mut self) -> BenchResult<()> {
        while !self.in_flight.is_empty() {
            self.wait_oldest().await?;
        }
        Ok(())
    }
}

struct TributaryConsumer {
    conn: Connection,
    topic: String,
    offset: i64,
}

#[async_trait]
impl Consumer for TributaryConsumer {
    async fn receive(&mut self) -> BenchResult<Vec<Bytes>> {
        let fetch = FetchRequest {
            topic: self.topic.clone(),
            partition: 0,
            offset: self.offset,
            max_bytes: FETCH_BYTES,
        };
        let mut parts = self.conn.multi_fetch_wait(LONG_POLL_MS, 1, vec![fetch]).await?;
        let part = parts.pop().context("a long poll answered without its part")?;
        if !part.error.is_ok() {
            bail!("fetch at offset {} failed: {}", self.offset, part.error);
        }
        let set = part.messages;
        if set.is_empty() {
            return Ok(Vec::new());
        }
        let mut messages = MessageSetIter::new(&set, self.offset);
        let mut payloads = Vec::with_capacity(set.len() / 200 + 1);
        for message in messages.by_ref() {
            let (_, message) = message?;
            payloads.push(set.slice_ref(message.payload));
        }
        self.offset = messages.next_offset();
        Ok(payloads)
    }
}
