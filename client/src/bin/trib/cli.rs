//! The command line: subcommands and their flags (clap derive).

use clap::{Args, Parser, Subcommand, ValueEnum};
use client::OffsetTime;
use protocol::{Acks, Codec};

#[derive(Debug, Parser)]
#[command(name = "trib", version, about = "Produce, consume and inspect Tributary topics")]
pub struct Cli {
    /// Print JSON instead of text (one object per line for streams).
    #[arg(long, global = true)]
    pub json: bool,
    #[command(flatten)]
    pub connection: ConnectionArgs,
    #[command(subcommand)]
    pub command: Command,
}

/// What every connection is made with (`crate::context::Context` reads the files). TLS to the
/// brokers: every connection checks the brokers' certificates with `--tls-ca`; `--tls-cert`
/// and `--tls-key` are this client's, for mutual TLS (its principal is the certificate's CN).
#[derive(Debug, Clone, Args)]
pub struct ConnectionArgs {
    /// Speak TLS to the brokers, trusting this CA (`tributary up`: {run_dir}/pki/ca.crt).
    #[arg(long, global = true, value_name = "PEM")]
    pub tls_ca: Option<std::path::PathBuf>,
    /// This client's certificate, for brokers that require one (its subject CN is the
    /// principal the brokers' ACLs name; `tributary up`: {run_dir}/pki/operator.crt).
    #[arg(long, global = true, value_name = "PEM", requires = "tls_key")]
    pub tls_cert: Option<std::path::PathBuf>,
    /// The key of --tls-cert.
    #[arg(long, global = true, value_name = "PEM", requires = "tls_cert")]
    pub tls_key: Option<std::path::PathBuf>,
    /// ZooKeeper digest credentials for --zookeeper: FILE's first line, `user:password`
    /// (needed to change an authenticated cluster's nodes: groups, admin requests).
    #[arg(long, global = true, value_name = "FILE")]
    pub zookeeper_auth_file: Option<std::path::PathBuf>,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Send each line of stdin as one message.
    Produce(ProduceArgs),
    /// Print the messages of one partition, one payload per line.
    Consume(ConsumeArgs),
    /// List, create or describe topics.
    Topics {
        #[command(subcommand)]
        command: TopicsCommand,
    },
    /// Print offsets of a partition: earliest, latest, or segment starts before a time.
    Offsets(OffsetsArgs),
    /// Delete a partition's messages before an offset: its log start moves there on every
    /// replica, and consumers below it get "offset out of range".
    DeleteRecords(DeleteRecordsArgs),
    /// List consumer groups, or describe one: owners, committed offsets, log ends and lag.
    Groups {
        #[command(subcommand)]
        command: GroupsCommand,
    },
    /// The cluster's live brokers and what each carries.
    Brokers {
        #[command(subcommand)]
        command: BrokersCommand,
    },
    /// Move partitions between brokers, or their leadership back to preferred replicas.
    Partitions {
        #[command(subcommand)]
        command: PartitionsCommand,
    },
}

impl Command {
    /// What the command does to which topic, in the ACL's words (for an error 14's message).
    pub fn intent(&self) -> Option<(&'static str, String)> {
        match self {
            Command::Produce(args) => Some(("produce to", args.topic.clone())),
            Command::Consume(args) => Some(("consume", args.topic.clone())),
            Command::Offsets(args) => Some(("consume", args.topic.clone())),
            Command::DeleteRecords(args) => Some(("delete records of", args.topic.clone())),
            Command::Topics { command: TopicsCommand::Create { topic, .. } } => {
                Some(("create", topic.clone()))
            }
            Command::Topics {
                command: TopicsCommand::Describe { topic, .. } | TopicsCommand::Config { topic, .. },
            } => Some(("describe", topic.clone())),
            _ => None,
        }
    }
}

#[derive(Debug, Subcommand)]
pub enum PartitionsCommand {
    /// Moves partitions to new replica lists: new replicas catch up and join the in-sync
    /// replicas before the old ones leave. Prints the plan; --execute starts it, --verify
    /// says how far it is.
    Reassign {
        #[command(flatten)]
        brokers: BrokerArgs,
        /// Kafka's reassignment JSON: {"version":1,"partitions":[{"topic":…,"partition":…,
        /// "replicas":[…]}]}.
        #[arg(long, value_name = "FILE", required_unless_present = "decommission")]
        plan: Option<std::path::PathBuf>,
        /// Move every replica off this broker (to the live brokers with the fewest).
        #[arg(long, value_name = "BROKER", conflicts_with = "plan")]
        decommission: Option<i32>,
        #[arg(long, conflicts_with = "verify")]
        execute: bool,
        /// Report each partition of the plan: done, or still moving.
        #[arg(long)]
        verify: bool,
        /// With --execute: the most bytes per second each new replica copies.
        #[arg(long, value_name = "N", requires = "execute", value_parser = clap::value_parser!(u64).range(1..))]
        throttle_bytes_per_s: Option<u64>,
    },
    /// Makes the preferred replica (the first of its list) lead every partition where it is
    /// live and in sync but does not lead.
    ElectPreferred {
        #[command(flatten)]
        brokers: BrokerArgs,
        /// Only this topic's partitions.
        #[arg(long)]
        topic: Option<String>,
        /// How long to wait for the controller to carry it out.
        #[arg(long, default_value_t = 30_000)]
        timeout_ms: u64,
    },
}

#[derive(Debug, Subcommand)]
pub enum BrokersCommand {
    /// Each broker's leader and replica counts, the partitions it leads short of in-sync
    /// replicas, and the bytes of log it holds.
    List {
        #[command(flatten)]
        brokers: BrokerArgs,
    },
}

#[derive(Debug, Subcommand)]
pub enum GroupsCommand {
    /// Every consumer group in the registry: native groups, then groups of Kafka's own clients
    /// (marked "(Kafka protocol)").
    List {
        #[command(flatten)]
        brokers: BrokerArgs,
    },
    /// Per partition of each topic the group reads: owner, committed offset, log end, lag. A
    /// Kafka-protocol group: committed record numbers, log end and lag in records, and the
    /// broker coordinating it.
    Describe {
        #[command(flatten)]
        brokers: BrokerArgs,
        #[arg(long)]
        group: String,
    },
    /// Moves the group's committed offsets of a topic: prints the plan, and commits it with
    /// --execute (refused while the group has live members).
    Reset {
        #[command(flatten)]
        brokers: BrokerArgs,
        #[arg(long)]
        group: String,
        #[arg(long)]
        topic: String,
        /// `earliest`, `latest`, an RFC 3339 time (the start of the newest segment last
        /// modified at or before it), or an offset (a message boundary within the log).
        #[arg(long, value_name = "earliest|latest|TIME|OFFSET", value_parser = parse_reset_to)]
        to: ResetTo,
        /// Commit the plan; without it nothing changes.
        #[arg(long)]
        execute: bool,
    },
    /// Deletes a group that has no live members: its committed offsets and every other node.
    /// Prints what it would delete; deletes with --execute.
    Delete {
        #[command(flatten)]
        brokers: BrokerArgs,
        #[arg(long)]
        group: String,
        #[arg(long)]
        execute: bool,
    },
}

/// Where `trib groups reset` moves a group's offsets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ResetTo {
    Earliest,
    Latest,
    /// Ms since the epoch.
    Time(i64),
    Offset(i64),
}

fn parse_reset_to(s: &str) -> Result<ResetTo, String> {
    match s {
        "earliest" => Ok(ResetTo::Earliest),
        "latest" => Ok(ResetTo::Latest),
        _ => match s.parse::<i64>() {
            Ok(offset) if offset >= 0 => Ok(ResetTo::Offset(offset)),
            Ok(_) => Err("an offset must not be negative".into()),
            Err(_) => service::clock::parse_rfc3339_ms(s).map(ResetTo::Time).map_err(|_| {
                format!("{s:?}: expected earliest, latest, an RFC 3339 time or an offset")
            }),
        },
    }
}

/// Where the brokers are (`crate::brokers::Brokers::find` finds them). One of these flags is
/// required.
#[derive(Debug, Clone, Args)]
#[group(required = true, multiple = false)]
pub struct BrokerArgs {
    /// Broker addresses, comma separated (host:port), or one load balancer's address.
    #[arg(long, value_name = "ADDRS", value_delimiter = ',', num_args = 1)]
    pub brokers: Vec<String>,
    /// Find brokers (and consumer groups) in ZooKeeper: host:port[,host:port…][/chroot].
    #[arg(long, value_name = "ZK")]
    pub zookeeper: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Compression {
    None,
    Gzip,
    Lz4,
    Zstd,
}

impl Compression {
    pub fn codec(self) -> Codec {
        match self {
            Compression::None => Codec::None,
            Compression::Gzip => Codec::Gzip,
            Compression::Lz4 => Codec::Lz4,
            Compression::Zstd => Codec::Zstd,
        }
    }
}

#[derive(Debug, Args)]
pub struct ProduceArgs {
    #[command(flatten)]
    pub brokers: BrokerArgs,
    #[arg(long)]
    pub topic: String,
    /// Send every message to this partition (of the first broker that has it).
    #[arg(long, conflicts_with_all = ["key_field", "any_partition"])]
    pub partition: Option<i32>,
    /// Partition −1: each broker picks a partition (for a load balancer in front of brokers).
    #[arg(long, conflicts_with = "key_field")]
    pub any_partition: bool,
    /// Use field N (1-based) of each line as the key: equal keys go to the same partition.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub key_field: Option<u32>,
    /// The byte that separates fields for --key-field.
    #[arg(long, default_value = "\t", value_parser = parse_delimiter)]
    pub field_delimiter: u8,
    /// 0: do not wait; 1: after the leader appended; 2: after it flushed to disk; 3 or `all`:
    /// after every in-sync replica has it.
    #[arg(long, default_value = "1", value_parser = str::parse::<Acks>)]
    pub acks: Acks,
    #[arg(long, value_enum, default_value_t = Compression::None)]
    pub compression: Compression,
    #[arg(long, default_value_t = 500, value_parser = clap::value_parser!(u32).range(1..))]
    pub batch_messages: u32,
    #[arg(long, default_value_t = 5)]
    pub linger_ms: u64,
    /// Insist on an idempotent producer, which is the default wherever it applies (--acks 1
    /// or more, and a partition: not --any-partition): a batch retried after a lost answer or
    /// a failover is stored once, and each batch is one magic-2 message. An error where it
    /// cannot apply.
    #[arg(long, conflicts_with_all = ["any_partition", "no_idempotence"])]
    pub idempotent: bool,
    /// Send plain message sets, each message framed as given (retries after a lost answer
    /// may then store a batch twice).
    #[arg(long)]
    pub no_idempotence: bool,
    /// Report progress on stderr every second (on by default when stderr is a terminal).
    #[arg(long)]
    pub progress: bool,
}

#[derive(Debug, Args)]
pub struct ConsumeArgs {
    #[command(flatten)]
    pub brokers: BrokerArgs,
    #[arg(long)]
    pub topic: String,
    /// Consume as a member of this group (needs --zookeeper): partitions are shared with the
    /// group's other members and offsets committed to ZooKeeper.
    #[arg(long, requires = "zookeeper", conflicts_with_all = ["partition", "offset"])]
    pub group: Option<String>,
    /// With --group: where a group with no committed offset starts.
    #[arg(long, value_parser = ["smallest", "largest"], default_value = "smallest", requires = "group")]
    pub auto_offset_reset: String,
    /// With --group: commit consumed offsets this often.
    #[arg(long, default_value_t = 1000, requires = "group", value_parser = clap::value_parser!(u64).range(1..))]
    pub auto_commit_ms: u64,
    /// With --group and without --follow: stop after this long without a new message.
    #[arg(long, default_value_t = 3000, requires = "group")]
    pub idle_ms: u64,
    #[arg(long, default_value_t = 0)]
    pub partition: i32,
    /// A byte offset, `earliest` or `latest`.
    #[arg(long, default_value = "earliest", value_parser = parse_start)]
    pub offset: Start,
    /// Stop after this many messages.
    #[arg(long, value_name = "N")]
    pub max_messages: Option<u64>,
    /// At the end of the log, wait for new messages instead of exiting.
    #[arg(long)]
    pub follow: bool,
    /// With --follow: the longest one long poll waits at the end of the log (a new message
    /// ends it at once).
    #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u32).range(1..=3_600_000))]
    pub poll_ms: u32,
    /// Bytes per fetch; grown automatically (up to 16 MiB) for a larger message.
    #[arg(long, default_value_t = 1 << 20, value_parser = clap::value_parser!(u32).range(64..=(16 << 20)))]
    pub fetch_bytes: u32,
    /// Only what Kafka producers' transactions committed (Kafka's
    /// `isolation.level=read_committed`): stop where an open transaction begins, leave out
    /// aborted ones.
    #[arg(long, conflicts_with = "group")]
    pub read_committed: bool,
    /// Report progress on stderr every second (on by default when stderr is a terminal).
    #[arg(long)]
    pub progress: bool,
}

/// Where `consume` starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Start {
    Offset(i64),
    Earliest,
    Latest,
}

#[derive(Debug, Subcommand)]
pub enum TopicsCommand {
    /// Every topic of every broker, with its partitions.
    List {
        #[command(flatten)]
        brokers: BrokerArgs,
    },
    /// Create a topic in the cluster (or add partitions and change its settings).
    Create {
        #[command(flatten)]
        brokers: BrokerArgs,
        #[arg(long)]
        topic: String,
        /// Partitions across the cluster.
        #[arg(long, value_parser = clap::value_parser!(i32).range(1..))]
        partitions: i32,
        /// Brokers that keep a replica of each partition [default: the brokers'
        /// default_replication_factor].
        #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
        replication_factor: Option<u32>,
        /// Per-topic settings such as retention_ms=3600000; repeat for more.
        #[arg(long = "config", value_name = "KEY=VALUE", value_parser = parse_key_value)]
        configs: Vec<(String, String)>,
    },
    /// Each partition of a topic: its leader, replicas and in-sync replicas, and its earliest
    /// and latest offsets.
    Describe {
        #[command(flatten)]
        brokers: BrokerArgs,
        #[arg(long)]
        topic: String,
    },
    /// Deletes a topic from every broker, with its consumer groups' offsets of it. Prints
    /// what it would delete; deletes with --execute (and waits until every replica is gone).
    Delete {
        #[command(flatten)]
        brokers: BrokerArgs,
        #[arg(long)]
        topic: String,
        #[arg(long)]
        execute: bool,
        /// How long --execute waits for every replica to be removed.
        #[arg(long, default_value_t = 60_000)]
        timeout_ms: u64,
    },
    /// Shows a topic's settings, or changes them (validated by a broker; brokers apply a
    /// change at once, retention included).
    Config {
        #[command(flatten)]
        brokers: BrokerArgs,
        #[arg(long)]
        topic: String,
        /// A setting to set, such as retention_ms=3600000; repeat for more.
        #[arg(long = "set", value_name = "KEY=VALUE", value_parser = parse_key_value)]
        set: Vec<(String, String)>,
        /// A setting to remove (back to the brokers' default); repeat for more.
        #[arg(long = "unset", value_name = "KEY")]
        unset: Vec<String>,
    },
}

#[derive(Debug, Args)]
pub struct OffsetsArgs {
    #[command(flatten)]
    pub brokers: BrokerArgs,
    #[arg(long)]
    pub topic: String,
    #[arg(long, default_value_t = 0)]
    pub partition: i32,
    /// `earliest`, `latest`, or ms since the epoch (segment starts modified at or before it).
    #[arg(long, default_value = "latest", value_parser = parse_time)]
    pub time: OffsetTime,
    /// Most offsets to print for a time.
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(i32).range(1..))]
    pub max: i32,
}

#[derive(Debug, Args)]
pub struct DeleteRecordsArgs {
    #[command(flatten)]
    pub brokers: BrokerArgs,
    #[arg(long)]
    pub topic: String,
    #[arg(long, default_value_t = 0)]
    pub partition: i32,
    /// The byte offset of the message that becomes the first (a message boundary, as `trib
    /// consume --json` and `trib offsets` print them), or `latest`: every message up to the
    /// high watermark.
    #[arg(long, value_name = "OFFSET", value_parser = parse_before)]
    pub before: i64,
}

fn parse_before(s: &str) -> Result<i64, String> {
    match s {
        "latest" => Ok(protocol::DELETE_TO_HIGH_WATERMARK),
        n => match n.parse::<i64>() {
            Ok(offset) if offset >= 0 => Ok(offset),
            _ => Err("expected a byte offset or latest".into()),
        },
    }
}

fn parse_start(s: &str) -> Result<Start, String> {
    match s {
        "earliest" => Ok(Start::Earliest),
        "latest" => Ok(Start::Latest),
        n => match n.parse::<i64>() {
            Ok(offset) if offset >= 0 => Ok(Start::Offset(offset)),
            _ => Err("expected a byte offset, earliest or latest".into()),
        },
    }
}

fn parse_time(s: &str) -> Result<OffsetTime, String> {
    s.parse()
}

fn parse_key_value(s: &str) -> Result<(String, String), String> {
    match s.split_once('=') {
        Some((k, v)) if !k.is_empty() => Ok((k.to_owned(), v.to_owned())),
        _ => Err("expected KEY=VALUE".into()),
    }
}

fn parse_delimiter(s: &str) -> Result<u8, String> {
    match s.as_bytes() {
        [b] => Ok(*b),
        _ => Err("expected a single byte".into()),
    }
}
