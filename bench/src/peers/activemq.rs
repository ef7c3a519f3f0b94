//! ActiveMQ "Classic" over STOMP 1.2: one persistent queue per benchmark stream, stored in
//! KahaDB with `journalDiskSyncStrategy="periodic"` (the journal is fsynced once a second, not
//! per message). The broker answers a SEND's receipt, or a COMMIT's, once the message is in
//! the store. There is no maintained async STOMP crate, so the small client is here: CONNECT,
//! SEND (`persistent:true`, binary bodies with `content-length`), BEGIN/COMMIT, RECEIPT,
//! SUBSCRIBE with `ack:client` and ActiveMQ's prefetch, ACK.

use std::collections::VecDeque;
use std::io::Write as _;
use std::path::Path;
use std::time::Duration;

use anyhow::{Context, bail};
use async_trait::async_trait;
use bytes::{Buf, Bytes, BytesMut};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::time::Instant;

use super::limits::{IN_FLIGHT_MESSAGES_MAX, RECEIVE_MESSAGES_MAX, RECEIVE_WAIT};
use super::package::package_version;
use crate::peer::{BenchResult, Consumer, Launcher, Producer, Running, dir_bytes};
use crate::service::{Service, free_port};
use crate::service::{start_service, stop_service};

const HOME: &str = "/usr/share/activemq";
const JAR: &str = "/usr/share/activemq/bin/activemq.jar";

/// Unacknowledged messages the broker may push to the consumer: twice what one `receive`
/// takes, so the next batch is on its way while this one is acknowledged.
const PREFETCH_MESSAGES: usize = 2 * RECEIVE_MESSAGES_MAX;

/// Largest frame header block and frame the client accepts, checked before buffering more.
const HEAD_BYTES_MAX: usize = 64 * 1024;
const FRAME_BYTES_MAX: usize = 16 * 1024 * 1024;

/// How much the read buffer grows by before each read.
const READ_CHUNK_BYTES: usize = 256 * 1024;

pub struct ActiveMq;

#[async_trait]
impl Launcher for ActiveMq {
    fn name(&self) -> &'static str {
        "activemq"
    }

    fn describe(&self) -> String {
        format!(
            "ActiveMQ ({}); KahaDB, persistent messages, journalDiskSyncStrategy=periodic (fsync \
             once a second, not per message), 1 GiB heap; STOMP 1.2: a SEND with a receipt per \
             message, a transaction (BEGIN, SENDs, COMMIT with a receipt) per batch, up to \
             {IN_FLIGHT_MESSAGES_MAX} messages unacknowledged; consumer: ack:client, prefetch \
             {PREFETCH_MESSAGES}, one cumulative ACK per received batch; client: a minimal STOMP \
             client in this crate",
            package_version("activemq")
        )
    }

    async fn start(&self, dir: &Path) -> BenchResult<Box<dyn Running>> {
        if !Path::new(JAR).exists() {
            bail!("ActiveMQ is not installed: {JAR} is missing (Debian package activemq)");
        }
        let data = dir.join("data");
        std::fs::create_dir_all(&data).with_context(|| format!("creating {}", data.display()))?;
        let port = free_port()?;
        let config = dir.join("activemq.xml");
        std::fs::write(&config, broker_xml(&data, port))?;
        let log4j = dir.join("log4j.properties");
        std::fs::write(
            &log4j,
            "log4j.rootLogger=WARN, stdout\n\
             log4j.appender.stdout=org.apache.log4j.ConsoleAppender\n\
             log4j.appender.stdout.layout=org.apache.log4j.PatternLayout\n\
             log4j.appender.stdout.layout.ConversionPattern=%d %-5p %c - %m%n\n",
        )?;
        let mut command = std::process::Command::new("java");
        command
            .args(["-Xms1g", "-Xmx1g"])
            .arg(format!("-Dlog4j.configuration=file:{}", log4j.display()))
            .arg(format!("-Dactivemq.home={HOME}"))
            .arg(format!("-Dactivemq.base={}", dir.display()))
            .arg(format!("-Dactivemq.conf={}", dir.display()))
            .arg(format!("-Dactivemq.data={}", data.display()))
            .args(["-jar", JAR, "start"])
            .arg(format!("xbean:file:{}", config.display()));
        let service = start_service(
            "activemq",
            command,
            &dir.join("activemq.log"),
            port,
            Duration::from_secs(60),
        )
        .await?;
        Ok(Box::new(ActiveMqRunning { service, port, data }))
    }
}

/// The broker: KahaDB with a periodic journal sync, STOMP on loopback, no JMX, no advisories,
/// no scheduler, no web console.
fn broker_xml(data: &Path, port: u16) -> String {
    let data = xml_escape(&data.display().to_string());
    format!(
        r#"<beans xmlns="http://www.springframework.org/schema/beans"
       xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance"
       xsi:schemaLocation="http://www.springframework.org/schema/beans http://www.springframework.org/schema/beans/spring-beans-2.0.xsd
       http://activemq.apache.org/schema/core http://activemq.apache.org/schema/core/activemq-core.xsd">
  <broker xmlns="http://activemq.apache.org/schema/core" brokerName="bench" persistent="true"
          useJmx="false" advisorySupport="false" schedulerSupport="false" dataDirectory="{data}">
    <persistenceAdapter>
      <kahaDB directory="{data}/kahadb" journalDiskSyncStrategy="periodic"/>
    </persistenceAdapter>
    <systemUsage>
      <systemUsage>
        <memoryUsage><memoryUsage percentOfJvmHeap="70"/></memoryUsage>
      </systemUsage>
    </systemUsage>
    <transportConnectors>
      <transportConnector name="stomp" uri="stomp://127.0.0.1:{port}"/>
    </transportConnectors>
  </broker>
</beans>
"#
    )
}

fn xml_escape(text: &str) -> String {
    text.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;")
}

struct ActiveMqRunning {
    service: Service,
    port: u16,
    data: std::path::PathBuf,
}

#[async_trait]
impl Running for ActiveMqRunning {
    async fn producer(&self, stream: &str) -> BenchResult<Box<dyn Producer>> {
        Ok(Box::new(StompProducer {
            stomp: Stomp::connect(self.port).await?,
            destination: format!("/queue/{stream}"),
            in_flight: VecDeque::new(),
            in_flight_messages: 0,
            next_receipt: 0,
        }))
    }

    async fn consumer(&self, stream: &str) -> BenchResult<Box<dyn Consumer>> {
        let mut stomp = Stomp::connect(self.port).await?;
        stomp.out.clear();
        write!(
            stomp.out,
            "SUBSCRIBE\nid:0\ndestination:/queue/{stream}\nack:client\nactivemq.prefetchSize:{PREFETCH_MESSAGES}\n\n\0"
        )?;
        stomp.write_out().await?;
        Ok(Box::new(StompConsumer { stomp }))
    }

    fn disk_bytes(&self) -> BenchResult<u64> {
        dir_bytes(&self.data)
    }

    async fn stop(self: Box<Self>) -> BenchResult<()> {
        // SIGTERM runs the broker's shutdown hook, which closes KahaDB cleanly.
        stop_service(self.service, Duration::from_secs(30)).await
    }
}

/// One STOMP connection: frames out through `out`, frames in through `buffer`.
struct Stomp {
    reader: OwnedReadHalf,
    writer: OwnedWriteHalf,
    buffer: BytesMut,
    out: Vec<u8>,
}

impl Stomp {
    async fn connect(port: u16) -> BenchResult<Stomp> {
        let socket = TcpStream::connect(("127.0.0.1", port))
            .await
            .context("connecting to ActiveMQ's STOMP port")?;
        socket.set_nodelay(true)?;
        let (reader, writer) = socket.into_split();
        let mut stomp = Stomp { reader, writer, buffer: BytesMut::new(), out: Vec::new() };
        stomp.out.extend_from_slice(
            b"CONNECT\naccept-version:1.2\nhost:localhost\nheart-beat:0,0\n\n\0",
        );
        stomp.write_out().await?;
        let frame = stomp.read_frame().await?;
        match frame.command() {
            b"CONNECTED" => Ok(stomp),
            _ => bail!("ActiveMQ refused the STOMP connection: {}", frame.error_text()),
        }
    }

    async fn write_out(&mut self) -> BenchResult<()> {
        self.writer.write_all(&self.out).await.context("writing to ActiveMQ")?;
        Ok(())
    }

    /// Reads more bytes into the buffer, until `deadline` if given; false if it passed first.
    async fn fill(&mut self, deadline: Option<Instant>) -> BenchResult<bool> {
        self.buffer.reserve(READ_CHUNK_BYTES);
        let read = self.reader.read_buf(&mut self.buffer);
        let read = match deadline {
            Some(deadline) => match tokio::time::timeout_at(deadline, read).await {
                Ok(read) => read,
                Err(_) => return Ok(false),
            },
            None => read.await,
        };
        if read.context("reading from ActiveMQ")? == 0 {
            bail!("ActiveMQ closed the STOMP connection");
        }
        Ok(true)
    }

    async fn read_frame(&mut self) -> BenchResult<Frame> {
        loop {
            if let Some(frame) = parse_frame(&mut self.buffer)? {
                return Ok(frame);
            }
            self.fill(None).await?;
        }
    }
}

/// A received frame: its command and header lines, and its body.
struct Frame {
    head: Bytes,
    body: Bytes,
}

impl Frame {
    fn lines(&self) -> impl Iterator<Item = &[u8]> {
        self.head.split(|&b| b == b'\n').map(|line| line.strip_suffix(b"\r").unwrap_or(line))
    }

    fn command(&self) -> &[u8] {
        self.lines().next().unwrap_or_default()
    }

    /// The first value of header `name`, still escaped as on the wire.
    fn header(&self, name: &[u8]) -> Option<&[u8]> {
        header_in(self.lines().skip(1), name)
    }

    /// What an ERROR frame says, for an error message.
    fn error_text(&self) -> String {
        let message =
            String::from_utf8_lossy(self.header(b"message").unwrap_or_default()).into_owned();
        format!(
            "{} {message}: {}",
            String::from_utf8_lossy(self.command()),
            String::from_utf8_lossy(&self.body).trim()
        )
    }
}

fn header_in<'a>(mut lines: impl Iterator<Item = &'a [u8]>, name: &[u8]) -> Option<&'a [u8]> {
    lines.find_map(|line| line.strip_prefix(name).and_then(|rest| rest.strip_prefix(b":")))
}

/// Takes one complete frame off the front of `buffer`, or `None` if it is not all there yet.
/// The body is a slice of the received bytes, not a copy.
fn parse_frame(buffer: &mut BytesMut) -> BenchResult<Option<Frame>> {
    // Heart-beats, and the end-of-line a broker may put after a frame's NUL.
    let skip = buffer.iter().take_while(|&&b| b == b'\n' || b == b'\r').count();
    buffer.advance(skip);
    // The header block ends with an empty line.
    let head_len = buffer
        .windows(2)
        .position(|w| w == b"\n\n")
        .map(|i| i + 2)
        .or_else(|| buffer.windows(3).position(|w| w == b"\n\r\n").map(|i| i + 3));
    let Some(head_len) = head_len else {
        if buffer.len() > HEAD_BYTES_MAX {
            bail!("STOMP frame header longer than {HEAD_BYTES_MAX} bytes");
        }
        return Ok(None);
    };
    let head = &buffer[..head_len];
    let lines =
        head.split(|&b| b == b'\n').map(|line| line.strip_suffix(b"\r").unwrap_or(line)).skip(1);
    let frame_len = match header_in(lines, b"content-length") {
        Some(length) => {
            let length: usize =
                std::str::from_utf8(length)?.parse().context("STOMP content-length")?;
            if length > FRAME_BYTES_MAX {
                bail!("STOMP frame body of {length} bytes is over {FRAME_BYTES_MAX}");
            }
            if buffer.len() < head_len + length + 1 {
                return Ok(None);
            }
            if buffer[head_len + length] != 0 {
                bail!("STOMP frame body not followed by NUL");
            }
            head_len + length + 1
        }
        None => match buffer[head_len..].iter().position(|&b| b == 0) {
            Some(nul) => head_len + nul + 1,
            None if buffer.len() > FRAME_BYTES_MAX => {
                bail!("STOMP frame longer than {FRAME_BYTES_MAX} bytes")
            }
            None => return Ok(None),
        },
    };
    let frame = buffer.split_to(frame_len).freeze();
    Ok(Some(Frame { head: frame.slice(..head_len), body: frame.slice(head_len..frame_len - 1) }))
}

struct StompProducer {
    stomp: Stomp,
    destination: String,
    /// Per request awaiting its RECEIPT, oldest first: the receipt id and its message count.
    in_flight: VecDeque<(u64, usize)>,
    in_flight_messages: usize,
    next_receipt: u64,
}

impl StompProducer {
    fn encode_send(
        &mut self,
        message: &[u8],
        transaction: Option<u64>,
        receipt: Option<u64>,
    ) -> BenchResult<()> {
        let out = &mut self.stomp.out;
        write!(
            out,
            "SEND\ndestination:{}\npersistent:true\ncontent-length:{}\n",
            self.destination,
            message.len()
        )?;
        if let Some(transaction) = transaction {
            writeln!(out, "transaction:t{transaction}")?;
        }
        if let Some(receipt) = receipt {
            writeln!(out, "receipt:{receipt}")?;
        }
        out.push(b'\n');
        out.extend_from_slice(message);
        out.push(0);
        Ok(())
    }

    /// Waits for the oldest request's RECEIPT (receipts come in request order).
    async fn complete_one(&mut self) -> BenchResult<()> {
        let Some((receipt, count)) = self.in_flight.pop_front() else { return Ok(()) };
        let frame = self.stomp.read_frame().await?;
        if frame.command() != b"RECEIPT" {
            bail!("ActiveMQ did not store a message: {}", frame.error_text());
        }
        if frame.header(b"receipt-id") != Some(receipt.to_string().as_bytes()) {
            bail!(
                "ActiveMQ answered receipt {:?}, expected {receipt}",
                frame.header(b"receipt-id").map(String::from_utf8_lossy)
            );
        }
        self.in_flight_messages -= count;
        Ok(())
    }
}

#[async_trait]
impl Producer for StompProducer {
    async fn send(&mut self, messages: &[Bytes]) -> BenchResult<()> {
        while !self.in_flight.is_empty()
            && self.in_flight_messages + messages.len() > IN_FLIGHT_MESSAGES_MAX
        {
            self.complete_one().await?;
        }
        let receipt = self.next_receipt;
        self.next_receipt += 1;
        self.stomp.out.clear();
        match messages {
            [] => return Ok(()),
            [message] => self.encode_send(message, None, Some(receipt))?,
            _ => {
                write!(self.stomp.out, "BEGIN\ntransaction:t{receipt}\n\n\0")?;
                for message in messages {
                    self.encode_send(message, Some(receipt), None)?;
                }
                write!(self.stomp.out, "COMMIT\ntransaction:t{receipt}\nreceipt:{receipt}\n\n\0")?;
            }
        }
        self.stomp.write_out().await?;
        self.in_flight.push_back((receipt, messages.len()));
        self.in_flight_messages += messages.len();
        Ok(())
    }

    async fn flush(&mut self) -> BenchResult<()> {
        while !self.in_flight.is_empty() {
            self.complete_one().await?;
        }
        Ok(())
    }
}

struct StompConsumer {
    stomp: Stomp,
}

#[async_trait]
impl Consumer for StompConsumer {
    async fn receive(&mut self) -> BenchResult<Vec<Bytes>> {
        let deadline = Instant::now() + RECEIVE_WAIT;
        let mut out = Vec::new();
        let mut last_ack = None;
        loop {
            while out.len() < RECEIVE_MESSAGES_MAX {
                let Some(frame) = parse_frame(&mut self.stomp.buffer)? else { break };
                match frame.command() {
                    b"MESSAGE" => {
                        let Some(ack) = frame.header(b"ack") else {
                            bail!("STOMP MESSAGE without an ack header")
                        };
                        last_ack = Some(frame.head.slice_ref(ack));
                        out.push(frame.body);
                    }
                    b"ERROR" => bail!("ActiveMQ: {}", frame.error_text()),
                    _ => {}
                }
            }
            if !out.is_empty() || !self.stomp.fill(Some(deadline)).await? {
                break;
            }
        }
        if let Some(ack) = last_ack {
            // ack:client is cumulative: this acknowledges every message up to this one.
            self.stomp.out.clear();
            self.stomp.out.extend_from_slice(b"ACK\nid:");
            self.stomp.out.extend_from_slice(&ack);
            self.stomp.out.extend_from_slice(b"\n\n\0");
            self.stomp.write_out().await?;
        }
        Ok(out)
    }
}
