//! `broker --config FILE [flags]`: parses the configuration, binds, and runs until SIGTERM or
//! SIGINT, then flushes every partition and exits.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use broker::{Broker, BrokerConfig, CleanupPolicy, Listeners, TimestampType, VisibleAfter};
use clap::Parser;
use serde::Serialize;
use service::Failure;

/// A Tributary broker: partitioned append-only logs served over TCP.
#[derive(Debug, Parser, Serialize)]
#[command(version, about)]
// A broker's `--tls-ca` is not its clients' but its followers' (trusting its leaders).
#[command(mut_arg("tls_ca", |a| {
    a.help("The CA followers check their leaders' certificates with [default: --tls-client-ca]")
}))]
struct Cli {
    /// TOML file whose keys are the flag names below (with `_` for `-`); flags override it.
    #[arg(long, value_name = "FILE")]
    #[serde(skip)]
    config: Option<PathBuf>,
    #[arg(long, value_name = "N")]
    broker_id: Option<i32>,
    /// Address to listen on.
    #[arg(long, value_name = "H")]
    host: Option<String>,
    #[arg(long, value_name = "P")]
    port: Option<u16>,
    /// The host clients and other brokers are told to connect to (ZooKeeper, metadata):
    /// a proxy's or NAT's in front of this broker; `host` without it.
    #[arg(long, value_name = "H")]
    advertised_host: Option<String>,
    /// The port clients and other brokers are told to connect to; `port` without it.
    #[arg(long, value_name = "P")]
    advertised_port: Option<u16>,
    /// Also speak the Apache Kafka protocol on this port, for Kafka's own clients (0: a free
    /// port); unset: no Kafka listener.
    #[arg(long, value_name = "P")]
    kafka_port: Option<u16>,
    /// Address the Kafka listener listens on; `host` without it.
    #[arg(long, value_name = "H")]
    kafka_host: Option<String>,
    /// The port Kafka clients are told to connect to (METADATA, FindCoordinator, ZooKeeper):
    /// a proxy's or NAT's in front of the Kafka listener (Kafka's `advertised.listeners`);
    /// the listener's own port without it.
    #[arg(long, value_name = "P")]
    kafka_advertised_port: Option<u16>,
    #[arg(long, value_name = "DIR")]
    data_dir: Option<PathBuf>,
    /// Serve Prometheus metrics at http://HOST:PORT/metrics.
    #[arg(long, value_name = "HOST:PORT")]
    metrics: Option<String>,
    /// Partitions of a topic created without an explicit count.
    #[arg(long, value_name = "N")]
    num_partitions: Option<u32>,
    /// Create an unknown topic on its first produce.
    #[arg(long, value_name = "BOOL")]
    auto_create_topics: Option<bool>,
    /// Largest request accepted, checked before anything is allocated.
    #[arg(long, value_name = "B")]
    max_request_bytes: Option<u32>,
    /// Largest message (its bytes after the length field).
    #[arg(long, value_name = "B")]
    max_message_bytes: Option<u32>,
    /// Connections beyond this many are closed at once.
    #[arg(long, value_name = "N")]
    max_connections: Option<u32>,
    /// Disconnect a client that leaves a request half sent, or a response unread, this long
    /// [default: 30000].
    #[arg(long, value_name = "MS")]
    client_timeout_ms: Option<u64>,
    /// Bytes of large requests being read at once, over all connections [default: 512 MiB].
    #[arg(long, value_name = "B")]
    request_memory_bytes: Option<u64>,
    /// Long-poll fetches waiting for data at once; one more is answered at once.
    #[arg(long, value_name = "N")]
    max_parked_fetches: Option<u32>,
    /// The longest a long-poll fetch waits, whatever it asks for.
    #[arg(long, value_name = "MS")]
    max_fetch_wait_ms: Option<u64>,
    /// Replicas of each partition of a new topic that sets none [default: 1].
    #[arg(long, value_name = "N")]
    default_replication_factor: Option<u32>,
    /// In-sync replicas an acks-all produce needs, where a topic sets none [default: 1].
    #[arg(long, value_name = "N")]
    min_insync_replicas: Option<u32>,
    /// A follower behind its leader's log end for this long leaves the ISR [default: 10000].
    #[arg(long, value_name = "MS")]
    replica_lag_ms: Option<u64>,
    /// The longest an acks-all produce waits for the in-sync replicas [default: 30000].
    #[arg(long, value_name = "MS")]
    ack_timeout_ms: Option<u64>,
    /// Flush a partition after this many messages...
    #[arg(long, value_name = "N")]
    flush_messages: Option<u64>,
    /// ...or when its oldest unflushed message is this old.
    #[arg(long, value_name = "MS")]
    flush_ms: Option<u64>,
    /// Roll to a new segment file at this size...
    #[arg(long, value_name = "B")]
    segment_bytes: Option<u64>,
    /// ...or when the last segment is this old.
    #[arg(long, value_name = "MS")]
    segment_ms: Option<u64>,
    /// When appended data becomes visible to fetches: `flush` (once on disk) or `write` (once
    /// in the page cache; a machine crash can lose data a consumer saw).
    #[arg(long, value_name = "flush|write")]
    visible_after: Option<VisibleAfter>,
    /// Which time magic-2 batches carry: the producer's (`CreateTime`) or the leader's clock
    /// at append (`LogAppendTime`); Kafka's `log.message.timestamp.type`.
    #[arg(long, value_name = "CreateTime|LogAppendTime")]
    message_timestamp_type: Option<TimestampType>,
    /// What happens to old records of topics that do not say: `delete` (by age and size),
    /// `compact` (the last record of each key kept) or `compact,delete`.
    #[arg(long, value_name = "POLICY")]
    cleanup_policy: Option<CleanupPolicy>,
    /// How long a compacted topic keeps a tombstone [default: 86400000].
    #[arg(long, value_name = "MS")]
    delete_retention_ms: Option<u64>,
    /// How often the cleaner looks for compacted partitions to clean [default: 15000].
    #[arg(long, value_name = "MS")]
    cleaner_interval_ms: Option<u64>,
    /// The cleaner reads at most this many bytes per second; 0: no limit [default: 32 MiB].
    #[arg(long, value_name = "B")]
    cleaner_bytes_per_s: Option<u64>,
    /// Delete segments last modified longer ago than this.
    #[arg(long, value_name = "MS")]
    retention_ms: Option<u64>,
    /// Delete head segments while a partition is larger than this.
    #[arg(long, value_name = "B")]
    retention_bytes: Option<u64>,
    /// How often to look for segments to delete.
    #[arg(long, value_name = "MS")]
    retention_check_ms: Option<u64>,
    /// Check every sealed segment's CRCs this often, repairing damage from a replica; 0: never
    /// [default: 86400000].
    #[arg(long, value_name = "MS")]
    scrub_interval_ms: Option<u64>,
    /// The scrubber reads at most this many bytes per second; 0: no limit [default: 16 MiB].
    #[arg(long, value_name = "B")]
    scrub_bytes_per_s: Option<u64>,
    /// Upload sealed segments of tiered topics to this object store: `file:///dir` or
    /// `s3://bucket/prefix` (S3 settings from the `AWS_*` variables, as the loader's).
    #[arg(long, value_name = "URL")]
    remote_store: Option<String>,
    /// Tier every topic that does not say otherwise (Kafka's `remote.storage.enable`).
    #[arg(long, value_name = "BOOL")]
    remote_storage: Option<bool>,
    /// What a tiered topic keeps on disk by age [default: retention_ms].
    #[arg(long, value_name = "MS")]
    local_retention_ms: Option<u64>,
    /// What a tiered topic keeps on disk by size [default: retention_bytes].
    #[arg(long, value_name = "B")]
    local_retention_bytes: Option<u64>,
    /// Upload at most this many bytes per second; 0: no limit [default: 64 MiB].
    #[arg(long, value_name = "B")]
    remote_upload_bytes_per_s: Option<u64>,
    /// Keep this many bytes of remote segments on disk for repeated reads [default: 1 GiB].
    #[arg(long, value_name = "B")]
    remote_cache_bytes: Option<u64>,
    /// Look for segments to upload and remote segments to expire this often [default: 5000].
    #[arg(long, value_name = "MS")]
    remote_task_interval_ms: Option<u64>,
    /// Register in this ZooKeeper (`host:port[,host:port…][/chroot]`); standalone without it.
    #[arg(long, value_name = "CONNECT")]
    zookeeper: Option<String>,
    #[command(flatten)]
    #[serde(flatten)]
    zookeeper_session: cluster::ZooKeeperArgs,
    #[command(flatten)]
    #[serde(flatten)]
    tls: service::tls::TlsArgs,
    /// Allow only what this TOML file allows (error 14 for the rest).
    #[arg(long, value_name = "FILE")]
    acl_file: Option<PathBuf>,
}

fn main() -> ExitCode {
    let cli: Cli = service::cli::parse("broker");
    service::cli::finish("broker", start(cli))
}

fn start(cli: Cli) -> Result<(), Failure> {
    let config: BrokerConfig =
        service::config::load(cli.config.as_deref(), &cli).map_err(Failure::usage)?;
    config.validate().map_err(Failure::usage)?;
    service::cli::run(serve(config))
}

async fn serve(config: BrokerConfig) -> anyhow::Result<()> {
    let shutdown = service::shutdown::on_signal()?;
    let native = config.listen_addr();
    let listeners =
        Listeners::bind(&config).await.with_context(|| match config.kafka_listen_addr() {
            Some(kafka) => format!("cannot listen on {native} and for Kafka clients on {kafka}"),
            None => format!("cannot listen on {native}"),
        })?;
    let metrics = match &config.metrics {
        Some(addr) => Some(
            tokio::net::TcpListener::bind(addr)
                .await
                .with_context(|| format!("cannot listen for metrics on {addr}"))?,
        ),
        None => None,
    };
    let broker = Broker::open(config, &listeners, None).await?;
    if let Some(listener) = metrics {
        tracing::info!(addr = %listener.local_addr()?, "metrics at /metrics");
        let registry = broker.metrics().registry();
        // The broker's own TLS (and client CA) guards its /metrics too.
        let tls = broker.tls().cloned();
        tokio::spawn(service::metrics::serve(listener, registry, tls, shutdown.clone()));
    }
    broker.serve(listeners, shutdown).await?;
    Ok(())
}
