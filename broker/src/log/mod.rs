//! The commit log: partitions of segment files under one data directory, each with the
//! checkpoint of its leader epochs.

pub mod compact;
mod error;
pub mod index;
mod leader_epoch;
mod manager;
mod partition;
pub mod producers;
mod segment;
pub mod tasks;

pub use error::LogError;
pub use leader_epoch::{EPOCHS_MAX, EpochEntry, LEADER_EPOCH_CHECKPOINT, LeaderEpochCache};
pub use manager::{CreateError, Created, LogManager, Topic};
pub use partition::{
    Appended, Cleaned, Damage, FileSlice, Partition, ReplicaSlice, SETS_PER_WRITE_MAX,
    SealedSegment,
};
pub use segment::{ScanResult, Segment, scan_valid_prefix};
