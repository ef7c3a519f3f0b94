//! What each fuzz target checks, as plain functions: `fuzz/` wraps each for libFuzzer
//! (`cargo +nightly fuzz run NAME`, campaigns with `scripts/fuzz.sh`), and
//! `tests/corpora.rs` runs every committed input of `fuzz/corpus/` through them in the
//! workspace's own test build, so a decoder that fails on a known input fails the tests.
//! Each module's doc says what its target's input is and what must hold for any input.

pub mod acl_file;
pub mod agent_json;
pub mod commit_record;
pub mod event_envelope;
pub mod kafka_request;
pub mod leader_epoch_file;
pub mod loader_datum;
pub mod message_set;
pub mod record_batch;
pub mod registry_log;
pub mod registry_schema;
pub mod request_decoder;
pub mod segment_scan;
pub mod spool_record;
pub mod topology_file;
pub mod zookeeper_digest;

/// What a target does with one input: returns, or panics on a broken promise.
pub type Check = fn(&[u8]);

/// Every target: its name (`fuzz/fuzz_targets/NAME.rs`, `fuzz/corpus/NAME/`) and its check.
pub const TARGETS: &[(&str, Check)] = &[
    ("acl_file", acl_file::check),
    ("agent_json", agent_json::check),
    ("commit_record", commit_record::check),
    ("event_envelope", event_envelope::check),
    ("kafka_request", kafka_request::check),
    ("leader_epoch_file", leader_epoch_file::check),
    ("loader_datum", loader_datum::check),
    ("message_set", message_set::check),
    ("record_batch", record_batch::check),
    ("registry_log", registry_log::check),
    ("registry_schema", registry_schema::check),
    ("request_decoder", request_decoder::check),
    ("segment_scan", segment_scan::check),
    ("spool_record", spool_record::check),
    ("topology_file", topology_file::check),
    ("zookeeper_digest", zookeeper_digest::check),
];
