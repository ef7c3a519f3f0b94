//! Events for tests of every tier: page views of the shipped schema (as Avro values, encoded
//! through a registry, or as the JSON the agent takes), ids a test can recognise and wait for
//! in a broker, and bare envelopes for tiers that read only the header.

use std::collections::HashMap;
use std::time::Duration;

use apache_avro::types::Value;
use bytes::Bytes;
use events::envelope::EventHeader;
use schema_registry::RegistryClient;

use crate::broker::read_all;

/// How long [`wait_for_ids`] waits.
const WAIT: Duration = Duration::from_secs(60);

/// A 16-byte event id holding `n` (big-endian, first 8 bytes) and this process's id, so ids of
/// two test processes sharing a cluster never collide.
pub fn event_id(n: i64) -> [u8; 16] {
    let mut id = [0u8; 16];
    id[..8].copy_from_slice(&n.to_be_bytes());
    id[8..].copy_from_slice(&u64::from(std::process::id()).to_be_bytes());
    id
}

/// An [`event_id`] in hex, as an event's JSON header spells it.
pub fn event_id_hex(n: i64) -> String {
    event_id(n).iter().map(|byte| format!("{byte:02x}")).collect()
}

/// The `n` an [`event_id`] holds.
pub fn sequence_of(id: &[u8; 16]) -> i64 {
    let [a, b, c, d, e, f, g, h, ..] = *id;
    i64::from_be_bytes([a, b, c, d, e, f, g, h])
}

/// A page view of the shipped schema (`events/schemas/page-view.avsc`) with `header.time`
/// `time_ms` and `header.id` `id`; its other fields vary with `n`.
pub fn page_view(time_ms: i64, id: [u8; 16], n: i64) -> Value {
    Value::Record(vec![
        (
            "header".into(),
            Value::Record(vec![
                ("time".into(), Value::Long(time_ms)),
                ("server".into(), Value::String("web-1".into())),
                ("service".into(), Value::String("frontend".into())),
                ("id".into(), Value::Fixed(16, id.to_vec())),
            ]),
        ),
        (
            "member_id".into(),
            if n % 3 == 0 {
                Value::Union(0, Box::new(Value::Null))
            } else {
                Value::Union(1, Box::new(Value::Long(n)))
            },
        ),
        ("page_key".into(), Value::String(format!("page-{}", n % 10))),
        ("url".into(), Value::String(format!("https://example.com/p/{n}"))),
        ("referrer".into(), Value::Union(0, Box::new(Value::Null))),
        ("duration_ms".into(), Value::Int((n % 500) as i32)),
    ])
}

/// A page view as JSON, as the agent's inputs take it, with header id [`event_id`]`(n)` so the
/// test can find it again.
pub fn page_view_json(n: i64) -> serde_json::Value {
    serde_json::json!({
        "header": {"id": event_id_hex(n)},
        "member_id": n,
        "page_key": "feed",
        "url": format!("https://example.com/{n}"),
        "duration_ms": 12,
    })
}

/// Page views encoded in the envelope with the registry's latest `page-view-value` schema, one
/// per entry of `times_ms` (its `header.time`), ids `event_id(0..)`.
pub async fn page_view_payloads(registry: &RegistryClient, times_ms: &[i64]) -> Vec<Vec<u8>> {
    let latest = registry.latest("page-view-value").await.expect("page-view schema registered");
    let mut payloads = Vec::with_capacity(times_ms.len());
    for (n, time) in (0..).zip(times_ms) {
        let value = page_view(*time, event_id(n), n);
        let payload = events::envelope::encode_with(registry, latest.id, value).await;
        payloads.push(payload.expect("a page view encodes"));
    }
    payloads
}

/// A bare envelope: schema id 1, `header.time` = `time_ms`, a fixed server, service and id,
/// then `body` — for tiers that read only the header (the mirror); not an Avro datum.
pub fn raw_event(time_ms: i64, body: &str) -> Bytes {
    let mut payload = vec![0, 0, 0, 0, 1];
    let mut zigzag = ((time_ms << 1) ^ (time_ms >> 63)) as u64;
    loop {
        let byte = (zigzag & 0x7f) as u8;
        zigzag >>= 7;
        if zigzag == 0 {
            payload.push(byte);
            break;
        }
        payload.push(byte | 0x80);
    }
    payload.extend_from_slice(b"\x08host\x06web");
    payload.extend_from_slice(&[7; 16]);
    payload.extend_from_slice(body.as_bytes());
    Bytes::from(payload)
}

/// `count` bare envelopes ([`raw_event`]) of `topic` from `source` (a cluster's name, say), at
/// `time_ms`, each with a unique body: numbers `from..from + count`.
pub fn raw_events(
    source: &str,
    topic: &str,
    from: usize,
    count: usize,
    time_ms: i64,
) -> Vec<Bytes> {
    (from..from + count).map(|i| raw_event(time_ms, &format!("{source}/{topic}/{i}"))).collect()
}

/// How many times each header id occurs in partition 0 of `topic` on the broker at `addr`.
pub async fn id_counts(addr: &str, topic: &str) -> HashMap<[u8; 16], usize> {
    let mut counts = HashMap::new();
    for payload in read_all(addr, topic).await {
        let (_, header) = EventHeader::read(&payload).expect("an event header");
        *counts.entry(header.id).or_default() += 1;
    }
    counts
}

/// Waits until the [`event_id`] of every `n` of `expected` is in `topic`; returns the counts
/// (duplicates show > 1).
pub async fn wait_for_ids(addr: &str, topic: &str, expected: &[i64]) -> HashMap<[u8; 16], usize> {
    crate::eventually(WAIT, "every accepted event in the broker", || async {
        let counts = id_counts(addr, topic).await;
        expected.iter().all(|n| counts.contains_key(&event_id(*n))).then_some(counts)
    })
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn raw_events_carry_their_header_time() {
        for time in [0, -5, 1_764_547_200_000] {
            assert_eq!(events::envelope::header_time(&raw_event(time, "x")), Some(time));
        }
        assert_eq!(sequence_of(&event_id(42)), 42);
        assert_eq!(event_id_hex(1).len(), 32);
        assert!(event_id_hex(1).starts_with("0000000000000001"));
    }
}
