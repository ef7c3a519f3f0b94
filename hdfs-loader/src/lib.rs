//! The loader of the analytics cluster into the warehouse (paper §5, "Hadoop": a job pulls
//! directly from the brokers and writes data and offsets to HDFS only when it completes, so a
//! failed job run again neither loses nor duplicates). Here the warehouse is Parquet in an
//! object store (a local directory, S3, HDFS through an S3 gateway), laid out for analysts in
//! Hive partitions by `header.time`, with offsets kept in commit records beside the data
//! (docs/design.md, "Loader commit protocol") — never in ZooKeeper.
//!
//! [`run_once`] is the hourly job, [`serve`] the same at an interval, [`status()`] what is
//! committed and how far behind the logs it is.

mod audit;
pub mod columns;
pub mod commit;
mod config;
pub mod datum;
pub mod decode;
pub mod layout;
mod load;
mod metrics;
mod output;
pub mod readback;
mod run;
mod sink;
mod status;
pub mod table;

use std::path::PathBuf;

pub use config::{Config, ConfigError, Format, TopicFilter};
pub use load::PartitionLoad;
pub use output::Output;
pub use run::{Loader, RunSummary, maintain, run_once, serve};
pub use service::store::{StoreUrlError, store_from_url};
pub use status::{HourStatus, PartitionStatus, Status, TopicStatus, status};
pub use table::maintain::Maintained;

/// Why a run, or one partition's load, failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LoadError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error("cluster registry: {0}")]
    Cluster(#[from] cluster::RegistryError),
    #[error(transparent)]
    Commit(#[from] commit::CommitError),
    #[error("object store at {path}: {source}")]
    Store {
        path: String,
        #[source]
        source: object_store::Error,
    },
    #[error("{topic}/{partition}: {source}")]
    Broker {
        topic: String,
        partition: String,
        #[source]
        source: Box<client::ConsumerError>,
    },
    #[error("{topic}/{partition}: offset {offset} is not in the log and the log starts after it")]
    OffsetOutOfRange { topic: String, partition: String, offset: i64 },
    #[error("{topic}: schema registry: {source}")]
    Registry {
        topic: String,
        #[source]
        source: Box<schema_registry::ClientError>,
    },
    #[error("{topic}: {source}")]
    Schema {
        topic: String,
        #[source]
        source: columns::ColumnError,
    },
    #[error(
        "{topic}/{partition} at offset {offset}: cannot decode the message: {reason} (the run stopped here; --bad-records DIR sets such messages aside)"
    )]
    BadRecord { topic: String, partition: String, offset: i64, reason: String },
    #[error("{topic}/{partition} at offset {offset}: {source}")]
    Convert {
        topic: String,
        partition: String,
        offset: i64,
        #[source]
        source: columns::ColumnError,
    },
    #[error("{topic}/{partition}: writing Parquet: {source}")]
    Parquet {
        topic: String,
        partition: String,
        #[source]
        source: parquet::errors::ParquetError,
    },
    #[error("bad-records directory {path}: {source}")]
    BadRecordsDir {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(transparent)]
    Table(#[from] table::TableError),
    #[error("audit: {0}")]
    Audit(String),
    #[error("event ids spilled to {path}: {source}")]
    Spill { path: String, source: std::io::Error },
}
