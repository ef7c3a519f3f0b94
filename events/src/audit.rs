//! The audit record of docs/design.md ("Audit record"): every tier of the pipeline counts, per
//! topic and time window (by `header.time`), the events it passed on, and publishes the
//! **cumulative** count to topic `_audit` as an ordinary event in the envelope. A later record
//! for the same `(tier, host, topic, window_start)` supersedes an earlier one, so a record that
//! is re-sent or duplicated on the way is harmless.
//!
//! [`AuditCounts`] is the counter a tier keeps; [`AuditRecord`] is one published count, with
//! its Avro encoding against the shipped `_audit` schema (`schemas/_audit.avsc`, subject
//! [`AUDIT_SUBJECT`]).

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

use apache_avro::Schema;
use apache_avro::types::Value;

use crate::envelope::{self, EnvelopeError};

/// The topic every tier publishes its counts to.
pub const AUDIT_TOPIC: &str = "_audit";
/// The registry subject of the audit record's schema.
pub const AUDIT_SUBJECT: &str = "_audit-value";
/// Default window: 10 minutes, as docs/design.md ("Audit record") says.
pub const WINDOW_MS_DEFAULT: i64 = 600_000;

/// A stage of the pipeline that reports counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Tier {
    /// Events the frontend agent accepted: durably spooled, answered with a success.
    Accepted,
    /// Events acknowledged by a live broker to the frontend agent.
    Agent,
    /// Events present in a live cluster (counted by the audit service's own consumers).
    Live,
    /// Events acknowledged by the analytics cluster to the mirror.
    Mirror,
    /// Events committed to Parquet by the loader.
    Loader,
}

impl Tier {
    /// Every tier, in pipeline order.
    pub const ALL: [Tier; 5] =
        [Tier::Accepted, Tier::Agent, Tier::Live, Tier::Mirror, Tier::Loader];

    /// The tier's place in [`Tier::ALL`] (pipeline order).
    pub fn index(self) -> usize {
        self as usize
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Tier::Accepted => "accepted",
            Tier::Agent => "agent",
            Tier::Live => "live",
            Tier::Mirror => "mirror",
            Tier::Loader => "loader",
        }
    }
}

impl fmt::Display for Tier {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Tier {
    type Err = AuditError;

    fn from_str(s: &str) -> Result<Tier, AuditError> {
        Tier::ALL
            .into_iter()
            .find(|tier| tier.as_str() == s)
            .ok_or_else(|| AuditError::UnknownTier(s.to_owned()))
    }
}

#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum AuditError {
    #[error("unknown audit tier {0:?} (expected accepted, agent, live, mirror or loader)")]
    UnknownTier(String),
    #[error(transparent)]
    Envelope(#[from] EnvelopeError),
    #[error("the audit record's field {field} is missing or has the wrong type")]
    BadField { field: &'static str },
    #[error("window_ms must be positive, got {0}")]
    BadWindow(i64),
}

/// Start of the window of `window_ms` that holds `time_ms` (windows are aligned to the epoch;
/// times before it fall in windows with negative starts).
pub fn window_start(time_ms: i64, window_ms: i64) -> i64 {
    time_ms.div_euclid(window_ms) * window_ms
}

/// One published count (docs/design.md, "Audit record").
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuditRecord {
    pub tier: Tier,
    pub host: String,
    pub topic: String,
    /// Ms since the epoch, aligned to `window_ms`.
    pub window_start: i64,
    pub window_ms: i64,
    /// Cumulative: every event of `topic` with `header.time` in the window that `host` passed
    /// on at `tier` so far.
    pub count: i64,
}

impl AuditRecord {
    /// The record as an Avro value of the `_audit` schema.
    pub fn to_value(&self) -> Value {
        Value::Record(vec![
            ("tier".into(), Value::String(self.tier.as_str().into())),
            ("host".into(), Value::String(self.host.clone())),
            ("topic".into(), Value::String(self.topic.clone())),
            ("window_start".into(), Value::Long(self.window_start)),
            ("window_ms".into(), Value::Long(self.window_ms)),
            ("count".into(), Value::Long(self.count)),
        ])
    }

    /// Encodes the record as an event payload: `schema` is the `_audit` schema registered
    /// under `schema_id` (see [`schema_registry::RegistryClient::latest`] with [`AUDIT_SUBJECT`]).
    pub fn encode(&self, schema_id: i32, schema: &Schema) -> Result<Vec<u8>, AuditError> {
        Ok(envelope::encode(schema_id, schema, self.to_value())?)
    }

    /// Reads a record from an Avro value of the `_audit` schema (fields by name, so a later
    /// version of the schema that adds fields still reads).
    pub fn from_value(value: &Value) -> Result<AuditRecord, AuditError> {
        let Value::Record(fields) = value else {
            return Err(AuditError::BadField { field: "record" });
        };
        let field = |name: &'static str| {
            fields
                .iter()
                .find(|(n, _)| n == name)
                .map(|(_, v)| v)
                .ok_or(AuditError::BadField { field: name })
        };
        let string = |name: &'static str| match field(name)? {
            Value::String(s) => Ok(s.clone()),
            _ => Err(AuditError::BadField { field: name }),
        };
        let long = |name: &'static str| match field(name)? {
            Value::Long(n) => Ok(*n),
            Value::Int(n) => Ok(i64::from(*n)),
            _ => Err(AuditError::BadField { field: name }),
        };
        let window_ms = long("window_ms")?;
        if window_ms <= 0 {
            return Err(AuditError::BadWindow(window_ms));
        }
        Ok(AuditRecord {
            tier: string("tier")?.parse()?,
            host: string("host")?,
            topic: string("topic")?,
            window_start: long("window_start")?,
            window_ms,
            count: long("count")?,
        })
    }

    /// Decodes an event payload whose schema id names `schema` (the caller looked it up).
    pub fn decode(payload: &[u8], schema: &Schema) -> Result<AuditRecord, AuditError> {
        let (_, value) = envelope::decode(payload, schema)?;
        AuditRecord::from_value(&value)
    }
}

/// The cumulative counts one host keeps at one tier, per topic and window. Counting is cheap
/// (a map update); [`AuditCounts::take_changed`] hands out the records to publish.
#[derive(Debug, Clone)]
pub struct AuditCounts {
    tier: Tier,
    host: String,
    window_ms: i64,
    /// `(topic, window_start)` → (cumulative count, changed since last taken).
    counts: BTreeMap<(String, i64), (i64, bool)>,
}

impl AuditCounts {
    /// Counts for `host` at `tier` in windows of `window_ms` (positive).
    pub fn new(tier: Tier, host: impl Into<String>, window_ms: i64) -> Result<Self, AuditError> {
        if window_ms <= 0 {
            return Err(AuditError::BadWindow(window_ms));
        }
        Ok(AuditCounts { tier, host: host.into(), window_ms, counts: BTreeMap::new() })
    }

    pub fn tier(&self) -> Tier {
        self.tier
    }

    pub fn window_ms(&self) -> i64 {
        self.window_ms
    }

    /// Counts `events` more events of `topic` with `header.time` = `time_ms`.
    pub fn add(&mut self, topic: &str, time_ms: i64, events: i64) {
        let window = window_start(time_ms, self.window_ms);
        // Look up by reference first: the common case allocates nothing.
        if let Some(entry) = self.counts.get_mut(&(topic.to_owned(), window)) {
            entry.0 += events;
            entry.1 = true;
        } else {
            self.counts.insert((topic.to_owned(), window), (events, true));
        }
    }

    /// The cumulative count of `topic` in the window that starts at `window_start`.
    pub fn count(&self, topic: &str, window_start: i64) -> i64 {
        self.counts.get(&(topic.to_owned(), window_start)).map_or(0, |(count, _)| *count)
    }

    /// Records for every `(topic, window)` whose count changed since the last call, marked
    /// unchanged. If publishing them fails, hand them back with [`AuditCounts::mark_changed`].
    pub fn take_changed(&mut self) -> Vec<AuditRecord> {
        let mut records = Vec::new();
        for ((topic, window_start), (count, changed)) in &mut self.counts {
            if std::mem::take(changed) {
                records.push(AuditRecord {
                    tier: self.tier,
                    host: self.host.clone(),
                    topic: topic.clone(),
                    window_start: *window_start,
                    window_ms: self.window_ms,
                    count: *count,
                });
            }
        }
        records
    }

    /// Marks each topic's newest window changed, so that the next [`AuditCounts::take_changed`]
    /// publishes it again even if nothing was counted: a heartbeat, by which the audit tells a
    /// host that cannot reach it from one that has nothing to count.
    pub fn touch_newest(&mut self) {
        let mut newest: Option<(&String, &mut (i64, bool))> = None;
        for ((topic, _), entry) in self.counts.iter_mut() {
            // Keys are ordered by topic, then window: the last entry of each topic is its newest.
            if let Some((previous, last)) = newest.take()
                && previous != topic
            {
                last.1 = true;
            }
            newest = Some((topic, entry));
        }
        if let Some((_, last)) = newest {
            last.1 = true;
        }
    }

    /// Records for every `(topic, window)` counted so far, changed or not.
    pub fn all(&self) -> Vec<AuditRecord> {
        self.counts
            .iter()
            .map(|((topic, window_start), (count, _))| AuditRecord {
                tier: self.tier,
                host: self.host.clone(),
                topic: topic.clone(),
                window_start: *window_start,
                window_ms: self.window_ms,
                count: *count,
            })
            .collect()
    }

    /// Takes back a count this host published before it restarted (read back from `_audit`),
    /// so that its cumulative counts go on from there rather than from zero. The larger count
    /// wins; it is not marked changed (it is already published). Records of another tier,
    /// host or window length are ignored: returns whether `record` was taken.
    pub fn restore(&mut self, record: &AuditRecord) -> bool {
        if record.tier != self.tier
            || record.host != self.host
            || record.window_ms != self.window_ms
        {
            return false;
        }
        let entry = self.counts.entry((record.topic.clone(), record.window_start)).or_default();
        entry.0 = entry.0.max(record.count);
        true
    }

    /// Marks the windows of `records` as changed again (their publication failed); records
    /// of another tier are passed over.
    pub fn mark_changed(&mut self, records: &[AuditRecord]) {
        for record in records.iter().filter(|r| r.tier == self.tier) {
            if let Some(entry) = self.counts.get_mut(&(record.topic.clone(), record.window_start)) {
                entry.1 = true;
            }
        }
    }

    /// Forgets windows that ended before `before_ms` and are already published, bounding the
    /// map for a long-running process. Their counts are final in `_audit`.
    pub fn forget_published_before(&mut self, before_ms: i64) {
        let window_ms = self.window_ms;
        self.counts.retain(|(_, window_start), (_, changed)| {
            *changed || window_start.saturating_add(window_ms) > before_ms
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn audit_schema() -> Schema {
        let text =
            std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/schemas/_audit.avsc"))
                .expect("shipped _audit schema");
        Schema::parse_str(&text).expect("valid schema")
    }

    #[test]
    fn touching_marks_each_topics_newest_window_for_publishing_again() {
        let mut counts = AuditCounts::new(Tier::Accepted, "web-1", 1000).unwrap();
        counts.add("a", 500, 1);
        counts.add("a", 1_500, 2);
        counts.add("b", 500, 3);
        assert_eq!(counts.take_changed().len(), 3);
        assert!(counts.take_changed().is_empty());
        counts.touch_newest();
        let again: Vec<_> =
            counts.take_changed().into_iter().map(|r| (r.topic, r.window_start, r.count)).collect();
        assert_eq!(again, [("a".to_owned(), 1_000, 2), ("b".to_owned(), 0, 3)]);
    }

    #[test]
    fn windows_align_to_the_epoch() {
        assert_eq!(window_start(0, 600_000), 0);
        assert_eq!(window_start(599_999, 600_000), 0);
        assert_eq!(window_start(600_000, 600_000), 600_000);
        assert_eq!(window_start(-1, 600_000), -600_000);
    }

    #[test]
    fn counts_are_cumulative_and_taken_once() {
        let mut counts = AuditCounts::new(Tier::Agent, "web-1", 1000).unwrap();
        counts.add("page-view", 1500, 2);
        counts.add("page-view", 1999, 1);
        counts.add("click", 2500, 1);
        let taken = counts.take_changed();
        assert_eq!(taken.len(), 2);
        let page_view = taken.iter().find(|r| r.topic == "page-view").unwrap();
        assert_eq!((page_view.window_start, page_view.count), (1000, 3));
        assert!(counts.take_changed().is_empty(), "nothing changed since");
        counts.add("page-view", 1000, 1);
        let taken = counts.take_changed();
        assert_eq!(taken.len(), 1);
        assert_eq!(taken[0].count, 4, "cumulative, not a delta");
        counts.mark_changed(&taken);
        assert_eq!(counts.take_changed(), taken, "a failed publication is retried");
    }

    #[test]
    fn a_restart_goes_on_from_the_published_counts() {
        let mut counts = AuditCounts::new(Tier::Mirror, "m", 1000).unwrap();
        let published = |host: &str, count| AuditRecord {
            tier: Tier::Mirror,
            host: host.into(),
            topic: "t".into(),
            window_start: 2000,
            window_ms: 1000,
            count,
        };
        assert!(counts.restore(&published("m", 7)));
        assert!(counts.restore(&published("m", 5)), "an older record: the larger count stays");
        assert!(!counts.restore(&published("other-host", 100)));
        assert!(counts.take_changed().is_empty(), "restored counts are already published");
        counts.add("t", 2500, 1);
        assert_eq!(counts.take_changed()[0].count, 8);
    }

    #[test]
    fn forgetting_keeps_unpublished_and_open_windows() {
        let mut counts = AuditCounts::new(Tier::Mirror, "m", 1000).unwrap();
        counts.add("t", 100, 1);
        counts.add("t", 5100, 1);
        counts.take_changed();
        counts.add("t", 2100, 1);
        counts.forget_published_before(5000);
        assert_eq!(counts.count("t", 0), 0, "published and closed: forgotten");
        assert_eq!(counts.count("t", 2000), 1, "not yet published: kept");
        assert_eq!(counts.count("t", 5000), 1, "still open: kept");
    }

    #[test]
    fn record_round_trips_through_the_shipped_schema() {
        let schema = audit_schema();
        let record = AuditRecord {
            tier: Tier::Loader,
            host: "loader-1".into(),
            topic: "search".into(),
            window_start: 1_700_000_400_000,
            window_ms: 600_000,
            count: 12_345,
        };
        let payload = record.encode(7, &schema).unwrap();
        assert_eq!(&payload[..5], &[0, 0, 0, 0, 7]);
        assert_eq!(AuditRecord::decode(&payload, &schema).unwrap(), record);
    }

    #[test]
    fn unknown_tier_and_bad_window_are_typed_errors() {
        assert!(matches!("edge".parse::<Tier>(), Err(AuditError::UnknownTier(_))));
        assert!(matches!(AuditCounts::new(Tier::Agent, "h", 0), Err(AuditError::BadWindow(0))));
        let schema = audit_schema();
        let mut bad = AuditRecord {
            tier: Tier::Agent,
            host: "h".into(),
            topic: "t".into(),
            window_start: 0,
            window_ms: 600_000,
            count: 1,
        }
        .to_value();
        if let Value::Record(fields) = &mut bad {
            fields[0].1 = Value::String("edge".into());
        }
        let payload = envelope::encode(1, &schema, bad).unwrap();
        assert!(matches!(AuditRecord::decode(&payload, &schema), Err(AuditError::UnknownTier(_))));
    }
}
