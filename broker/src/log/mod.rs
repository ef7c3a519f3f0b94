//! The commit log: partitions of segment files under one data directory.

mod manager;
mod partition;
mod segment;

pub use manager::{CreateError, Created, LogManager, Topic};
pub use partition::{Appended, FileSlice, LogError, Partition, SETS_PER_WRITE_MAX};
pub use segment::{ScanResult, Segment, scan_valid_prefix};
