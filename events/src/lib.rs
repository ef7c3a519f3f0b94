//! The pipeline's data contract (docs/design.md, "Event envelope" and "Audit record"), owned by
//! one crate so that no tier re-implements another's decoder:
//!
//! - [`envelope`]: every event's payload is Confluent's wire format, `0x00 | i32 schema id |
//!   Avro datum`, and every event schema starts with the `header` record, so any tier reads
//!   `header.time`, `server`, `service` and `id` without the schema ([`EventHeader::read`],
//!   and [`envelope::header_time`] on the hot path, which allocates nothing).
//! - [`audit`]: the audit record, the tiers that publish it, and [`AuditCounts`], the
//!   cumulative per-window counts a tier keeps.
//! - [`publisher`]: the one way counts reach `_audit` — keyed by
//!   `tier/host/topic/window_start`, bounded retries with backoff, and "published" meaning
//!   every count taken before the call is acknowledged (what the mirror needs before it marks
//!   offsets).
//! - [`schemas`]: the pipeline's Avro schemas, shipped with this crate.
//!
//! In the paper (§5), the schema registry maps the id in each payload to its schema, and the
//! audit compares per-window counts of every tier to detect data loss.

pub mod audit;
pub mod envelope;
pub mod publisher;
pub mod schemas;

pub use audit::{
    AUDIT_SUBJECT, AUDIT_TOPIC, AuditCounts, AuditError, AuditRecord, Tier, WINDOW_MS_DEFAULT,
};
pub use envelope::{EnvelopeError, EventHeader};
pub use publisher::{AuditPublisher, AuditSource, PublishError, SharedCounts};
