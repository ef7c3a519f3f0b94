//! What the chaos run checks from outside, as an operator would: the audit service's windows
//! (verdicts, and how long each tier took to catch up with the agents in each window) and the
//! event ids in the loader's Parquet files.

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;

use object_store::ObjectStore;
use object_store::aws::AmazonS3Builder;
use object_store::prefix::PrefixStore;
use serde::{Deserialize, Serialize};

use super::witness::EventId;
use crate::multiprocess::plan;
use crate::multiprocess::topology::{HOST, Topology};

/// The tiers compared with the agents', in pipeline order.
pub const DOWNSTREAM: [&str; 3] = ["live", "mirror", "loader"];

/// One window as `GET /api/windows` gives it.
#[derive(Debug, Clone, Deserialize)]
pub struct Window {
    pub window_start: i64,
    pub window_ms: i64,
    pub verdict: String,
    pub tiers: BTreeMap<String, i64>,
}

#[derive(Debug, Deserialize)]
struct TopicSummary {
    topic: String,
}

/// The audit service's JSON API, read as the operator.
#[derive(Clone)]
pub struct Audit {
    url: String,
    http: reqwest::Client,
}

impl Audit {
    pub fn new(topology: &Topology, http: reqwest::Client) -> Audit {
        Audit { url: plan::dashboard_url(topology), http }
    }

    async fn get<T: serde::de::DeserializeOwned>(&self, path: &str) -> Option<T> {
        let response = self.http.get(format!("{}{path}", self.url)).send().await.ok()?;
        if !response.status().is_success() {
            return None;
        }
        response.json().await.ok()
    }

    /// Every window of every topic; `None` while the audit service does not answer.
    pub async fn windows(&self) -> Option<BTreeMap<(String, i64), Window>> {
        let topics: Vec<TopicSummary> = self.get("api/topics").await?;
        let mut all = BTreeMap::new();
        for topic in topics {
            let windows: Vec<Window> =
                self.get(&format!("api/windows?topic={}", topic.topic)).await?;
            for window in windows {
                all.insert((topic.topic.clone(), window.window_start), window);
            }
        }
        Some(all)
    }

    /// Per tier, the events it counted beyond the reference tier, summed over the windows:
    /// what the audit reports duplicated (`None` while it does not answer).
    pub async fn duplicated(&self) -> Option<BTreeMap<String, i64>> {
        let summary: serde_json::Value = self.get("api/summary").await?;
        serde_json::from_value(summary.get("duplicate_events")?.clone()).ok()
    }

    /// Whether the service has read its sources to their end (verdicts mean something).
    pub async fn caught_up(&self) -> bool {
        let summary: Option<serde_json::Value> = self.get("api/summary").await;
        summary.is_some_and(|s| s["caught_up"] == true)
    }
}

/// For every window and downstream tier, the spans of time after the window closed during
/// which the tier had counted fewer of its events than the agents: how long each tier was
/// behind. Samples taken while the audit is still reading its sources (just restarted) are
/// left out: its counts are then its own lag, not the tiers'.
#[derive(Debug, Default)]
pub struct Lag {
    spans: BTreeMap<(String, i64), BTreeMap<&'static str, Span>>,
}

/// One tier in one window.
#[derive(Debug, Default, Clone, Copy)]
struct Span {
    /// Since when it has been behind (never earlier than the window's end), if it is.
    behind_since: Option<i64>,
    /// The longest span behind that has ended.
    longest_ms: i64,
}

/// The longest any tier was behind.
#[derive(Debug, Clone, Serialize)]
pub struct Behind {
    pub tier: &'static str,
    pub topic: String,
    pub window_start: i64,
    /// The longest span, after the end of the window, in which the tier had counted less than
    /// the agents did.
    pub ms: i64,
    /// Still behind at the end of the run.
    pub still_behind: bool,
}

impl Lag {
    /// One look at the windows at `now_ms`, by an audit that has (`audit_caught_up`) or has
    /// not read its sources to their ends.
    pub fn observe(
        &mut self,
        windows: &BTreeMap<(String, i64), Window>,
        audit_caught_up: bool,
        now_ms: i64,
    ) {
        if !audit_caught_up {
            return;
        }
        for (key, window) in windows {
            let reference = window.tiers.get("agent").copied().unwrap_or(0);
            if reference == 0 {
                continue;
            }
            let end = window.window_start + window.window_ms;
            let tiers = self.spans.entry(key.clone()).or_default();
            for tier in DOWNSTREAM {
                let count = window.tiers.get(tier).copied().unwrap_or(0);
                let span = tiers.entry(tier).or_default();
                match span.behind_since {
                    None if count < reference => span.behind_since = Some(now_ms.max(end)),
                    Some(since) if count >= reference => {
                        span.longest_ms = span.longest_ms.max(now_ms - since);
                        span.behind_since = None;
                    }
                    _ => {}
                }
            }
        }
    }

    /// Per tier, the window it was longest behind in, at `now_ms`.
    pub fn longest(&self, now_ms: i64) -> BTreeMap<&'static str, Behind> {
        let mut longest: BTreeMap<&'static str, Behind> = BTreeMap::new();
        for (key, tiers) in &self.spans {
            for (&tier, span) in tiers {
                let open = span.behind_since.map_or(0, |since| now_ms - since);
                let ms = span.longest_ms.max(open).max(0);
                if longest.get(tier).is_none_or(|b| ms > b.ms) {
                    longest.insert(
                        tier,
                        Behind {
                            tier,
                            topic: key.0.clone(),
                            window_start: key.1,
                            ms,
                            still_behind: span.behind_since.is_some(),
                        },
                    );
                }
            }
        }
        longest
    }
}

/// The loader's store (SeaweedFS), rooted where it writes.
pub fn store(topology: &Topology) -> Result<Arc<dyn ObjectStore>, object_store::Error> {
    service::tls::install_crypto_provider();
    let s3 = AmazonS3Builder::new()
        .with_endpoint(format!("http://{HOST}:{}", topology.seaweedfs.s3_port))
        .with_bucket_name(&topology.seaweedfs.bucket)
        .with_region("us-east-1")
        // SeaweedFS started without credentials checks no signature; the loader signs with
        // these too.
        .with_access_key_id("tributary")
        .with_secret_access_key("tributary")
        .with_allow_http(true)
        .with_virtual_hosted_style_request(false)
        .build()?;
    Ok(Arc::new(PrefixStore::new(s3, topology.loader.prefix.as_str())))
}

/// Rows and distinct event ids in the loader's committed files of `topics`.
pub async fn parquet_ids(
    output: &hdfs_loader::Output,
    topics: &[&str],
) -> Result<(u64, HashSet<EventId>), hdfs_loader::LoadError> {
    let mut rows = 0;
    let mut ids = HashSet::new();
    for topic in topics {
        let read = hdfs_loader::readback::read_topic(output, topic).await?;
        rows += read.positions.len() as u64;
        ids.extend(read.event_ids.into_iter().filter_map(|id| EventId::try_from(id).ok()));
    }
    Ok((rows, ids))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn windows(agent: i64, live: i64) -> BTreeMap<(String, i64), Window> {
        let tiers = BTreeMap::from([
            ("agent".to_owned(), agent),
            ("live".to_owned(), live),
            ("mirror".to_owned(), agent),
            ("loader".to_owned(), agent),
        ]);
        let window = Window { window_start: 0, window_ms: 10_000, verdict: "open".into(), tiers };
        BTreeMap::from([(("t".to_owned(), 0), window)])
    }

    #[test]
    fn a_tier_is_behind_for_its_longest_span_after_the_window_and_not_while_the_audit_reads() {
        let mut lag = Lag::default();
        lag.observe(&windows(10, 4), true, 5_000); // in the window: counted from its end
        lag.observe(&windows(10, 10), true, 13_000);
        lag.observe(&windows(12, 10), true, 20_000); // a late event: behind again
        lag.observe(&windows(12, 12), true, 21_000);
        // An audit that has just restarted and counts again from its checkpoint: not a lag.
        lag.observe(&windows(12, 0), false, 900_000);
        lag.observe(&windows(12, 12), true, 902_000);
        let longest = lag.longest(1_000_000);
        assert_eq!((longest["live"].ms, longest["live"].still_behind), (3_000, false));
        assert_eq!(longest["mirror"].ms, 0);
        lag.observe(&windows(13, 12), true, 990_000);
        let still = &lag.longest(1_000_000)["live"];
        assert_eq!((still.ms, still.still_behind), (10_000, true));
    }
}
