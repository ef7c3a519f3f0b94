//! A broker served in this process on `127.0.0.1:0`, with its own data directory; MessageSets
//! to produce to one, and what a broker holds read back.

use std::collections::HashSet;
use std::path::Path;
use std::sync::Arc;

use broker::{Broker, BrokerConfig, Listeners};
use bytes::{Bytes, BytesMut};
use client::{Connection, ConsumedMessage, SimpleConsumer, SimpleConsumerConfig};
use protocol::{Codec, MessageSetIter};
use tempfile::TempDir;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

/// A running broker. Dropping it stops the server task; [`TestBroker::stop`] stops it cleanly
/// and hands back the data directory for a restart.
pub struct TestBroker {
    pub addr: String,
    pub broker: Arc<Broker>,
    data_dir: Option<TempDir>,
    stop: CancellationToken,
    task: Option<JoinHandle<Result<(), broker::BrokerError>>>,
}

/// The settings tests start from: the defaults, but data visible within 10 ms.
pub fn test_config(data_dir: &Path) -> BrokerConfig {
    BrokerConfig { data_dir: data_dir.to_owned(), port: 0, flush_ms: 10, ..BrokerConfig::default() }
}

impl TestBroker {
    pub async fn start() -> TestBroker {
        TestBroker::start_with(|_| {}).await
    }

    pub async fn start_with(configure: impl FnOnce(&mut BrokerConfig)) -> TestBroker {
        TestBroker::start_in(tempfile::tempdir().expect("temp dir"), configure).await
    }

    /// Starts a broker on an existing data directory, as a restart does.
    pub async fn start_in(
        data_dir: TempDir,
        configure: impl FnOnce(&mut BrokerConfig),
    ) -> TestBroker {
        init_logging();
        let mut config = test_config(data_dir.path());
        configure(&mut config);
        let native = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
        TestBroker::serve(native, config, None, data_dir).await
    }

    /// Opens a broker on `native` (and a Kafka listener when the configuration asks for one,
    /// as the binary binds it), registered in `session` if given, and serves it.
    async fn serve(
        native: tokio::net::TcpListener,
        config: BrokerConfig,
        session: Option<Arc<dyn cluster::Coordinator>>,
        data_dir: TempDir,
    ) -> TestBroker {
        let addr = native.local_addr().expect("local addr").to_string();
        let kafka = match config.kafka_listen_addr() {
            Some(kafka) => Some(tokio::net::TcpListener::bind(kafka).await.expect("bind Kafka")),
            None => None,
        };
        let listeners = Listeners { native, kafka };
        let broker = Broker::open(config, &listeners, session).await.expect("broker opens");
        let stop = CancellationToken::new();
        let task = tokio::spawn(Arc::clone(&broker).serve(listeners, stop.clone()));
        TestBroker { addr, broker, data_dir: Some(data_dir), stop, task: Some(task) }
    }

    /// A broker registered in `session` (the embedded backend, say) rather than in a
    /// ZooKeeper of its configuration: a member of that session's cluster.
    pub async fn start_registered_in(
        session: Arc<dyn cluster::Coordinator>,
        configure: impl FnOnce(&mut BrokerConfig),
    ) -> TestBroker {
        init_logging();
        let data_dir = tempfile::tempdir().expect("temp dir");
        let mut config = test_config(data_dir.path());
        configure(&mut config);
        let native = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
        TestBroker::serve(native, config, Some(session), data_dir).await
    }

    pub fn data_dir(&self) -> &Path {
        self.data_dir.as_ref().expect("data dir").path()
    }

    pub async fn connect(&self) -> Connection {
        Connection::connect(&self.addr).await.expect("connect to test broker")
    }

    /// Shuts down as on SIGTERM (connections closed, partitions flushed) and returns the data
    /// directory.
    pub async fn stop(mut self) -> TempDir {
        self.stop.cancel();
        let result = self.task.take().expect("running").await.expect("server task");
        result.expect("clean shutdown");
        self.data_dir.take().expect("data dir")
    }

    /// Restarts on the same data directory with the same settings plus `configure`.
    pub async fn restart(self, configure: impl FnOnce(&mut BrokerConfig)) -> TestBroker {
        TestBroker::start_in(self.stop().await, configure).await
    }
}

impl Drop for TestBroker {
    fn drop(&mut self) {
        if let Some(task) = self.task.take() {
            task.abort();
        }
    }
}

/// A MessageSet of plain messages with these payloads.
pub fn message_set<P: AsRef<[u8]>>(payloads: &[P]) -> Bytes {
    let mut buf = BytesMut::new();
    for p in payloads {
        protocol::encode_message(&mut buf, Codec::None, p.as_ref());
    }
    buf.freeze()
}

/// One compressed wrapper holding `payloads`.
pub fn wrapper(codec: Codec, payloads: &[Bytes]) -> Bytes {
    let inner = message_set(payloads);
    let mut set = BytesMut::new();
    protocol::encode_message(&mut set, codec, &client::compress(codec, &inner).unwrap());
    set.freeze()
}

/// `(offset, payload)` of every whole message in a fetched set; panics on an invalid one.
pub fn messages_of(set: &[u8], base_offset: i64) -> Vec<(i64, Vec<u8>)> {
    MessageSetIter::new(set, base_offset)
        .map(|m| {
            let (offset, message) = m.expect("valid message");
            (offset, message.payload.to_vec())
        })
        .collect()
}

/// Every message of `topic`'s `partition` that `consumer` reads from offset 0 to the end of the
/// visible log, wrappers inflated: as far as it got if a fetch fails (nothing if the topic is
/// not there yet).
pub async fn read_partition(
    consumer: &SimpleConsumer,
    topic: &str,
    partition: i32,
) -> Vec<ConsumedMessage> {
    let mut read = Vec::new();
    let mut offset = 0;
    loop {
        let Ok(fetched) = consumer.fetch(topic, partition, offset).await else { return read };
        if fetched.is_empty() {
            return read;
        }
        let mut messages = fetched.iter();
        for message in messages.by_ref() {
            read.push(message.expect("a valid message"));
        }
        offset = messages.next_offset();
    }
}

/// Every payload in partition 0 of `topic` on the broker at `addr` (empty if the topic is not
/// there yet).
pub async fn read_all(addr: &str, topic: &str) -> Vec<Bytes> {
    read_all_with(addr, topic, SimpleConsumerConfig::default()).await
}

/// [`read_all`] with `config` (TLS, say).
pub async fn read_all_with(addr: &str, topic: &str, config: SimpleConsumerConfig) -> Vec<Bytes> {
    let Ok(consumer) = SimpleConsumer::connect(addr, config).await else {
        return Vec::new();
    };
    read_partition(&consumer, topic, 0).await.into_iter().map(|m| m.payload).collect()
}

/// Every message offset of every partition of `topic` in the broker, as `(partition, offset)`.
pub async fn log_positions(
    broker: &TestBroker,
    topic: &str,
    partitions: i32,
) -> HashSet<(i32, i64)> {
    let consumer = SimpleConsumer::connect(&broker.addr, SimpleConsumerConfig::default())
        .await
        .expect("consumer");
    let mut positions = HashSet::new();
    for partition in 0..partitions {
        let messages = read_partition(&consumer, topic, partition).await;
        positions.extend(messages.iter().map(|message| (partition, message.offset)));
    }
    positions
}

/// Logs to the test's output when `RUST_LOG` is set.
pub fn init_logging() {
    if std::env::var_os("RUST_LOG").is_some() {
        let _ = tracing_subscriber::fmt().with_test_writer().try_init();
    }
}

/// Attempts to bind a just-released address before giving up.
const REBIND_ATTEMPTS: u32 = 50;

impl TestBroker {
    /// Restarts on the same data directory *and the same address*, as a broker restarted by
    /// an operator is: clients configured with its address reconnect to it.
    pub async fn restart_on_same_addr(
        self,
        configure: impl FnOnce(&mut BrokerConfig),
    ) -> TestBroker {
        let addr = self.addr.clone();
        let data_dir = self.stop().await;
        TestBroker::start_at(data_dir, &addr, configure).await
    }

    /// Starts a broker on an existing data directory, listening on `addr`.
    pub async fn start_at(
        data_dir: TempDir,
        addr: &str,
        configure: impl FnOnce(&mut BrokerConfig),
    ) -> TestBroker {
        init_logging();
        let mut config = test_config(data_dir.path());
        configure(&mut config);
        let native = bind_with_retry(addr).await;
        TestBroker::serve(native, config, None, data_dir).await
    }
}

/// Binds `addr`, retrying briefly while the previous listener's socket is released.
async fn bind_with_retry(addr: &str) -> tokio::net::TcpListener {
    let mut attempt = 0;
    loop {
        match tokio::net::TcpListener::bind(addr).await {
            Ok(listener) => return listener,
            Err(_) if attempt < REBIND_ATTEMPTS => {
                attempt += 1;
                tokio::time::sleep(std::time::Duration::from_millis(20)).await;
            }
            Err(e) => panic!("cannot bind {addr} again: {e}"),
        }
    }
}
