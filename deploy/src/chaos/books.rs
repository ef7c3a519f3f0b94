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

    /// Whether the service has read its sources to their end (verdicts mean something).
    pub async fn caught_up(&self) -> bool {
        let summary: Option<serde_json::Value> = self.get("api/summary").await;
        summary.is_some_and(|s| s["caught_up"] == true)
    }
}

/// For every window and downstream tier, when the tier last caught up with the agents'
/// count: how long after the window closed each tier was behind.
#[derive(Debug, Default)]
pub struct Lag {
    /// (topic, window start) → tier → ms since the epoch it has been caught up since, or
    /// `None` while it is behind.
    caught_up: BTreeMap<(String, i64), BTreeMap<&'static str, Option<i64>>>,
    window_ends: BTreeMap<(String, i64), i64>,
}

/// The longest any tier was behind.
#[derive(Debug, Clone, Serialize)]
pub struct Behind {
    pub tier: &'static str,
    pub topic: String,
    pub window_start: i64,
    /// From the end of the window until the tier counted what the agents did.
    pub ms: i64,
    /// Still behind at the end of the run.
    pub still_behind: bool,
}

impl Lag {
    /// One look at the windows at `now_ms`.
    pub fn observe(&mut self, windows: &BTreeMap<(String, i64), Window>, now_ms: i64) {
        for (key, window) in windows {
            let reference = window.tiers.get("agent").copied().unwrap_or(0);
            if reference == 0 {
                continue;
            }
            self.window_ends.insert(key.clone(), window.window_start + window.window_ms);
            let tiers = self.caught_up.entry(key.clone()).or_default();
            for tier in DOWNSTREAM {
                let count = window.tiers.get(tier).copied().unwrap_or(0);
                let since = tiers.entry(tier).or_insert(None);
                if count < reference {
                    *since = None;
                } else if since.is_none() {
                    *since = Some(now_ms);
                }
            }
        }
    }

    /// Per tier, the window it was furthest behind in, at `now_ms`.
    pub fn longest(&self, now_ms: i64) -> BTreeMap<&'static str, Behind> {
        let mut longest: BTreeMap<&'static str, Behind> = BTreeMap::new();
        for (key, tiers) in &self.caught_up {
            let end = self.window_ends[key];
            for (&tier, since) in tiers {
                let ms = (since.unwrap_or(now_ms) - end).max(0);
                if longest.get(tier).is_none_or(|b| ms > b.ms) {
                    longest.insert(
                        tier,
                        Behind {
                            tier,
                            topic: key.0.clone(),
                            window_start: key.1,
                            ms,
                            still_behind: since.is_none(),
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

/// Rows and distinct event ids in the Parquet files of `topics`.
pub async fn parquet_ids(
    store: &Arc<dyn ObjectStore>,
    topics: &[&str],
) -> Result<(u64, HashSet<EventId>), hdfs_loader::LoadError> {
    let mut rows = 0;
    let mut ids = HashSet::new();
    for topic in topics {
        let read = hdfs_loader::readback::read_topic(store, topic).await?;
        rows += read.positions.len() as u64;
        ids.extend(read.event_ids.into_iter().filter_map(|id| EventId::try_from(id).ok()));
    }
    Ok((rows, ids))
}
