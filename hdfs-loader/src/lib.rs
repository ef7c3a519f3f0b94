//! HDFS loader (in progress).
