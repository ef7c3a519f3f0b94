//! The chaos run's own traffic: simulated activity with event ids it chooses, sent to every
//! agent over HTTP as a frontend sends it. An event whose request the agent answered
//! `200 {"accepted": N}` is acknowledged — the agent has it in its spool and owes it to the
//! brokers — and must end up in Parquet whatever the faults did; an unanswered request (the
//! agent was killed or paused mid-request) may or may not have been taken, and is counted
//! apart.

use std::collections::{BTreeMap, HashSet};
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use events::envelope::EVENT_ID_BYTES;
use frontend_agent::simulate::Generator;
use serde_json::{Value, json};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

/// An event id: the run's 8 random bytes, then a counter.
pub type EventId = [u8; EVENT_ID_BYTES];

/// How often each sender posts what is due.
const TICK: Duration = Duration::from_millis(100);
/// Events in one request at most.
const BATCH_MAX: usize = 1_000;
/// A request unanswered this long is given up (the agent is down or stopped).
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

/// What the witness traffic did.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct WitnessCounts {
    /// Events posted to an agent.
    pub sent: u64,
    /// Events in requests answered 200: each must be in Parquet.
    pub acknowledged: u64,
    /// Events in requests answered with an error status (503 while a spool is full or the
    /// agent is starting): not taken.
    pub refused: u64,
    /// Events in requests that got no answer (connection refused or reset, timeout): the
    /// agent may or may not have taken them.
    pub unanswered: u64,
}

#[derive(Default)]
struct Shared {
    acknowledged: Mutex<HashSet<EventId>>,
    sent: AtomicU64,
    refused: AtomicU64,
    unanswered: AtomicU64,
}

/// The running traffic; [`Witness::stop`] ends it.
pub struct Witness {
    shared: Arc<Shared>,
    stop: CancellationToken,
    senders: JoinSet<()>,
}

impl Witness {
    /// Sends `rate` events per second in all, spread over `agents` (base URLs), with ids
    /// starting with `run`.
    pub fn start(
        agents: Vec<String>,
        rate: u64,
        run: [u8; 8],
        http: reqwest::Client,
        runtime: &tokio::runtime::Handle,
    ) -> Witness {
        let shared = Arc::new(Shared::default());
        let stop = CancellationToken::new();
        let counter = Arc::new(AtomicU64::new(0));
        let mut senders = JoinSet::new();
        let each = rate.div_ceil(agents.len().max(1) as u64);
        for agent in agents {
            let sender = Sender {
                agent,
                rate: each,
                run,
                counter: Arc::clone(&counter),
                http: http.clone(),
                shared: Arc::clone(&shared),
            };
            senders.spawn_on(sender.run(stop.clone()), runtime);
        }
        Witness { shared, stop, senders }
    }

    /// Stops sending and waits for the requests in flight to be answered or given up.
    pub async fn stop(mut self) -> (WitnessCounts, HashSet<EventId>) {
        self.stop.cancel();
        while self.senders.join_next().await.is_some() {}
        let acknowledged = std::mem::take(
            &mut *self.shared.acknowledged.lock().unwrap_or_else(PoisonError::into_inner),
        );
        let counts = WitnessCounts {
            sent: self.shared.sent.load(Ordering::Relaxed),
            acknowledged: acknowledged.len() as u64,
            refused: self.shared.refused.load(Ordering::Relaxed),
            unanswered: self.shared.unanswered.load(Ordering::Relaxed),
        };
        (counts, acknowledged)
    }
}

struct Sender {
    agent: String,
    rate: u64,
    run: [u8; 8],
    counter: Arc<AtomicU64>,
    http: reqwest::Client,
    shared: Arc<Shared>,
}

impl Sender {
    async fn run(self, stop: CancellationToken) {
        let mut generator = Generator::default();
        let begun = Instant::now();
        let mut generated = 0u64;
        let mut tick = tokio::time::interval(TICK);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
        while !stop.is_cancelled() {
            tokio::select! {
                () = stop.cancelled() => break,
                _ = tick.tick() => {}
            }
            let due = (self.rate as f64 * begun.elapsed().as_secs_f64()) as u64;
            let mut by_topic: BTreeMap<&'static str, Vec<(EventId, Value)>> = BTreeMap::new();
            // A sender that fell behind (an agent that hung for seconds) does not make it up
            // in one burst: what is more than a batch behind is skipped.
            let n = due.saturating_sub(generated).min(BATCH_MAX as u64);
            generated = due;
            for _ in 0..n {
                let (topic, mut event) = generator.next_event();
                let id = self.next_id();
                event["header"] = json!({ "id": hex(&id) });
                by_topic.entry(topic).or_default().push((id, event));
            }
            for (topic, events) in by_topic {
                self.send(topic, events).await;
            }
        }
    }

    fn next_id(&self) -> EventId {
        let mut id = [0u8; EVENT_ID_BYTES];
        id[..8].copy_from_slice(&self.run);
        id[8..].copy_from_slice(&self.counter.fetch_add(1, Ordering::Relaxed).to_be_bytes());
        id
    }

    async fn send(&self, topic: &str, events: Vec<(EventId, Value)>) {
        let n = events.len() as u64;
        self.shared.sent.fetch_add(n, Ordering::Relaxed);
        let mut body = Vec::with_capacity(events.len() * 256);
        for (_, event) in &events {
            serde_json::to_writer(&mut body, event).expect("JSON serializes");
            body.push(b'\n');
        }
        let url = format!("{}/v1/events/{topic}", self.agent.trim_end_matches('/'));
        let answer = self
            .http
            .post(&url)
            .header("content-type", "application/x-ndjson")
            .timeout(REQUEST_TIMEOUT)
            .body(body)
            .send()
            .await;
        let response = match answer {
            Ok(response) => response,
            Err(_) => {
                self.shared.unanswered.fetch_add(n, Ordering::Relaxed);
                return;
            }
        };
        if !response.status().is_success() {
            self.shared.refused.fetch_add(n, Ordering::Relaxed);
            return;
        }
        // The body carries the count; a 200 whose body is cut off was still an answer.
        match response.json::<Value>().await.ok().and_then(|v| v["accepted"].as_u64()) {
            Some(accepted) if accepted == n => {
                let mut acknowledged =
                    self.shared.acknowledged.lock().unwrap_or_else(PoisonError::into_inner);
                acknowledged.extend(events.iter().map(|(id, _)| *id));
            }
            Some(_) => {
                self.shared.refused.fetch_add(n, Ordering::Relaxed);
            }
            None => {
                self.shared.unanswered.fetch_add(n, Ordering::Relaxed);
            }
        }
    }
}

/// Lowercase hex, as the agent reads a header's `id`.
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().fold(String::with_capacity(bytes.len() * 2), |mut s, b| {
        let _ = write!(s, "{b:02x}");
        s
    })
}
