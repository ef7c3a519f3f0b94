//! Realistic activity for demos and benchmarks: members and pages of skewed popularity (a
//! few are very popular, most are rare), in sessions of page views, with clicks and searches
//! between them. Events go into an in-process [`Agent`] or over HTTP to an agent's URL, at a
//! steady rate.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use rand::RngExt;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use crate::agent::Agent;
use crate::send_error::SendError;

/// The topics the simulator knows.
pub const TOPICS: [&str; 3] = ["page-view", "click", "search"];

const MEMBERS: u64 = 100_000;
const PAGES: [&str; 12] = [
    "feed",
    "profile",
    "jobs",
    "messaging",
    "notifications",
    "search-results",
    "company",
    "network",
    "settings",
    "groups",
    "learning",
    "events",
];
const ELEMENTS: [&str; 6] = ["like", "comment", "share", "connect", "apply", "follow"];
const QUERIES: [&str; 10] = [
    "rust engineer",
    "data scientist",
    "product manager",
    "kafka",
    "distributed systems",
    "marketing",
    "recruiter",
    "designer",
    "sales",
    "site reliability",
];
const VERTICALS: [&str; 4] = ["ALL", "PEOPLE", "JOBS", "COMPANIES"];
/// Pause between sends.
const TICK_MS: u64 = 20;
/// Events sent in one call at most.
const BATCH_EVENTS_MAX: usize = 5_000;

/// Where simulated events go.
#[derive(Clone)]
pub enum Target {
    Agent(Agent),
    /// An agent's base URL, e.g. `http://127.0.0.1:8090`, and for `https://` the CA it trusts
    /// and the certificate it presents (an agent whose input requires client certificates).
    Http {
        url: String,
        tls: Option<std::sync::Arc<rustls::ClientConfig>>,
    },
}

/// What a run did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SimReport {
    /// Events accepted by the agent, per topic.
    pub accepted: BTreeMap<String, u64>,
    /// Events the agent refused (full spool, shutting down, errors).
    pub refused: u64,
}

impl SimReport {
    pub fn accepted_total(&self) -> u64 {
        self.accepted.values().sum()
    }
}

#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SimError {
    #[error("unknown topic {0:?}: the simulator generates page-view, click and search")]
    UnknownTopic(String),
    #[error("rate must be positive")]
    ZeroRate,
    #[error("cannot start the HTTP client: {0}")]
    Client(String),
}

/// Sends about `rate` events per second for `duration` (or until `shutdown`) of `topics`.
pub async fn simulate(
    target: Target,
    rate: u64,
    duration: Duration,
    topics: &[String],
    shutdown: CancellationToken,
) -> Result<SimReport, SimError> {
    if rate == 0 {
        return Err(SimError::ZeroRate);
    }
    if let Some(unknown) = topics.iter().find(|t| !TOPICS.contains(&t.as_str())) {
        return Err(SimError::UnknownTopic(unknown.clone()));
    }
    service::tls::install_crypto_provider();
    let mut http = reqwest::Client::builder().timeout(Duration::from_secs(30));
    if let Target::Http { tls: Some(tls), .. } = &target {
        http = http.tls_backend_preconfigured((**tls).clone());
    }
    let http = http.build().map_err(|e| SimError::Client(e.to_string()))?;
    let mut generator = Generator::default();
    let mut report = SimReport::default();
    let start = Instant::now();
    let mut generated = 0u64;
    while start.elapsed() < duration && !shutdown.is_cancelled() {
        let due = (rate as f64 * start.elapsed().as_secs_f64()) as u64;
        let mut by_topic: BTreeMap<&'static str, Vec<Event>> = BTreeMap::new();
        let mut batch = 0;
        while generated < due && batch < BATCH_EVENTS_MAX {
            let event = generator.generate();
            generated += 1;
            if topics.iter().any(|t| t == event.topic()) {
                by_topic.entry(event.topic()).or_default().push(event);
                batch += 1;
            }
        }
        for (topic, events) in by_topic {
            let sent = send(&target, &http, topic, &events).await;
            match sent {
                Some(n) => *report.accepted.entry(topic.to_owned()).or_default() += n,
                None => report.refused += events.len() as u64,
            }
        }
        // Behind schedule (a batch was capped at BATCH_EVENTS_MAX, or the sends were slow):
        // go on at once, so a high rate is not capped by the pause.
        if generated < (rate as f64 * start.elapsed().as_secs_f64()) as u64 {
            continue;
        }
        tokio::select! {
            () = shutdown.cancelled() => break,
            () = tokio::time::sleep(Duration::from_millis(TICK_MS)) => {}
        }
    }
    Ok(report)
}

/// Events accepted, or `None` if refused.
async fn send(
    target: &Target,
    http: &reqwest::Client,
    topic: &str,
    events: &[Event],
) -> Option<u64> {
    match target {
        Target::Agent(agent) => {
            let events: Vec<Value> = events.iter().map(Event::to_value).collect();
            agent_send(agent, topic, &events).await
        }
        Target::Http { url, .. } => {
            // Written as JSON text straight away: a `Value` tree per event, serialized, cost
            // the load generator more than the agent's parsing of it.
            let mut body = Vec::with_capacity(events.len() * 160);
            for event in events {
                event.write_json(&mut body);
                body.push(b'\n');
            }
            let url = format!("{}/v1/events/{topic}", url.trim_end_matches('/'));
            let response = http
                .post(&url)
                .header("content-type", "application/x-ndjson")
                .body(body)
                .send()
                .await;
            match response {
                Ok(r) if r.status().is_success() => {
                    let answer: Value = r.json().await.ok()?;
                    answer.get("accepted").and_then(Value::as_u64)
                }
                Ok(r) => {
                    tracing::warn!(topic, status = %r.status(), "the agent refused simulated events");
                    None
                }
                Err(e) => {
                    tracing::warn!(topic, error = %e, "cannot reach the agent");
                    None
                }
            }
        }
    }
}

async fn agent_send(agent: &Agent, topic: &str, events: &[Value]) -> Option<u64> {
    match agent.send_batch(topic, events).await {
        Ok(n) => Some(n as u64),
        Err(SendError::Full { .. } | SendError::ShuttingDown) => None,
        Err(e) => {
            tracing::warn!(topic, error = %e, "the agent refused simulated events");
            None
        }
    }
}

/// A member's visit: page views, with clicks and searches between them.
struct Session {
    member_id: Option<i64>,
    page_key: &'static str,
    views_left: u32,
}

/// One simulated event, before it is written as JSON.
#[derive(Debug, Clone, PartialEq)]
pub enum Event {
    PageView {
        member_id: Option<i64>,
        page_key: &'static str,
        referrer: &'static str,
        duration_ms: i32,
    },
    Click {
        member_id: Option<i64>,
        page_key: &'static str,
        element: &'static str,
    },
    Search {
        member_id: Option<i64>,
        query: &'static str,
        vertical: &'static str,
        result_count: i32,
    },
}

impl Event {
    pub fn topic(&self) -> &'static str {
        match self {
            Event::PageView { .. } => "page-view",
            Event::Click { .. } => "click",
            Event::Search { .. } => "search",
        }
    }

    /// The event as the JSON object its topic's schema takes (the header left to the agent).
    pub fn to_value(&self) -> Value {
        match *self {
            Event::PageView { member_id, page_key, referrer, duration_ms } => json!({
                "member_id": member_id,
                "page_key": page_key,
                "url": format!("https://example.com/{page_key}"),
                "referrer": format!("https://example.com/{referrer}"),
                "duration_ms": duration_ms,
            }),
            Event::Click { member_id, page_key, element } => json!({
                "member_id": member_id,
                "page_key": page_key,
                "element": element,
                "target_url": null,
            }),
            Event::Search { member_id, query, vertical, result_count } => json!({
                "member_id": member_id,
                "query": query,
                "vertical": vertical,
                "result_count": result_count,
                "page": 0,
            }),
        }
    }

    /// Appends the same object as [`Event::to_value`] as JSON text. Every string is one of
    /// the simulator's constants, none of which needs escaping.
    pub fn write_json(&self, out: &mut Vec<u8>) {
        use std::io::Write;
        let member = |out: &mut Vec<u8>, member_id: Option<i64>| match member_id {
            Some(id) => write!(out, "{{\"member_id\":{id}"),
            None => write!(out, "{{\"member_id\":null"),
        };
        let written = match *self {
            Event::PageView { member_id, page_key, referrer, duration_ms } => {
                member(out, member_id).and_then(|()| {
                    write!(
                        out,
                        ",\"page_key\":\"{page_key}\",\"url\":\"https://example.com/{page_key}\",\
                         \"referrer\":\"https://example.com/{referrer}\",\"duration_ms\":{duration_ms}}}"
                    )
                })
            }
            Event::Click { member_id, page_key, element } => member(out, member_id).and_then(|()| {
                write!(
                    out,
                    ",\"page_key\":\"{page_key}\",\"element\":\"{element}\",\"target_url\":null}}"
                )
            }),
            Event::Search { member_id, query, vertical, result_count } => {
                member(out, member_id).and_then(|()| {
                    write!(
                        out,
                        ",\"query\":\"{query}\",\"vertical\":\"{vertical}\",\
                         \"result_count\":{result_count},\"page\":0}}"
                    )
                })
            }
        };
        written.expect("writing to a Vec does not fail");
    }
}

/// Generates events session by session.
#[derive(Default)]
pub struct Generator {
    session: Option<Session>,
    /// The next event of the session that is not a page view, if any.
    follow_up: Option<Event>,
}

impl Generator {
    /// The next event and its topic, as a JSON object.
    pub fn next_event(&mut self) -> (&'static str, Value) {
        let event = self.generate();
        (event.topic(), event.to_value())
    }

    /// The next event.
    pub fn generate(&mut self) -> Event {
        if let Some(event) = self.follow_up.take() {
            return event;
        }
        let mut rng = rand::rng();
        let session = match &mut self.session {
            Some(s) if s.views_left > 0 => s,
            _ => self.session.insert(Session {
                // One visit in five is by a visitor who is not signed in.
                member_id: rng.random_bool(0.8).then(|| skewed(&mut rng, MEMBERS) as i64),
                page_key: PAGES[skewed(&mut rng, PAGES.len() as u64) as usize],
                views_left: rng.random_range(1..12),
            }),
        };
        session.views_left -= 1;
        let referrer = session.page_key;
        session.page_key = PAGES[skewed(&mut rng, PAGES.len() as u64) as usize];
        let (member_id, page_key) = (session.member_id, session.page_key);
        let roll: f64 = rng.random();
        if roll < 0.35 {
            self.follow_up = Some(Event::Click {
                member_id,
                page_key,
                element: ELEMENTS[skewed(&mut rng, ELEMENTS.len() as u64) as usize],
            });
        } else if roll < 0.5 {
            self.follow_up = Some(Event::Search {
                member_id,
                query: QUERIES[skewed(&mut rng, QUERIES.len() as u64) as usize],
                vertical: VERTICALS[rng.random_range(0..VERTICALS.len())],
                result_count: rng.random_range(0..500),
            });
        }
        Event::PageView { member_id, page_key, referrer, duration_ms: rng.random_range(5..400) }
    }
}

/// An index in `0..n` skewed toward 0: the cube of a uniform draw, so the first tenth of the
/// range takes nearly half the draws.
fn skewed(rng: &mut impl RngExt, n: u64) -> u64 {
    let u: f64 = rng.random();
    ((u * u * u) * n as f64) as u64 % n
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_json_text_of_an_event_is_its_value() {
        let mut generator = Generator::default();
        let mut seen = std::collections::BTreeSet::new();
        for _ in 0..2_000 {
            let event = generator.generate();
            seen.insert(event.topic());
            let mut text = Vec::new();
            event.write_json(&mut text);
            let parsed: Value = serde_json::from_slice(&text).unwrap();
            assert_eq!(parsed, event.to_value(), "{}", String::from_utf8_lossy(&text));
        }
        assert_eq!(seen.len(), 3, "every topic generated");
    }
}
