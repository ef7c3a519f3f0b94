//! What the bench reads from outside the processes: `/proc` (CPU time and resident memory),
//! each service's `/metrics`, and the loader's Iceberg tables (their snapshots' offsets and
//! commit records) in the object store.

use std::sync::Arc;

use hdfs_loader::commit::CommitRecord;
use hdfs_loader::table::Tables;
use object_store::ObjectStore;

use super::deployment::{Deployment, LIVE};

/// The event topics the simulators produce.
pub const TOPICS: [&str; 3] = ["page-view", "click", "search"];

/// CPU time (user + system) and resident memory of one process, from `/proc/PID`.
#[derive(Debug, Clone, Copy, Default)]
pub struct ProcSample {
    pub cpu_seconds: f64,
    pub rss_bytes: u64,
}

/// Clock ticks per second of `/proc/PID/stat`'s times: Linux's USER_HZ, 100 on every
/// architecture it runs on.
const USER_HZ: f64 = 100.0;

pub fn proc_sample(pid: i32) -> Option<ProcSample> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the command name in parentheses (which may hold spaces): state is the
    // first, utime the 12th, stime the 13th.
    let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
    let ticks: u64 = fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?;
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let rss_kb: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))?
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()?;
    Some(ProcSample { cpu_seconds: ticks as f64 / USER_HZ, rss_bytes: rss_kb * 1024 })
}

/// Events counted at each tier so far.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counts {
    /// Accepted by the agents (durably spooled).
    pub accepted: u64,
    /// Acknowledged by the live brokers.
    pub live: u64,
    /// Copied by the mirror and acknowledged by the analytics brokers.
    pub mirrored: u64,
    /// Committed to Parquet by the loader.
    pub loaded: u64,
}

impl Counts {
    /// Events not yet through each tier: (agent, mirror, loader).
    pub fn backlog(&self) -> [u64; 3] {
        [
            self.accepted.saturating_sub(self.live),
            self.live.saturating_sub(self.mirrored),
            self.mirrored.saturating_sub(self.loaded),
        ]
    }

    pub fn drained(&self) -> bool {
        self.backlog() == [0, 0, 0]
    }
}

/// Reads the counters of every tier.
pub struct Probe {
    http: reqwest::Client,
    agents: Vec<String>,
    mirror: String,
    tables: Tables,
}

impl Probe {
    pub async fn new(deployment: &Deployment) -> anyhow::Result<Probe> {
        let ports = deployment.ports;
        let store = object_store::aws::AmazonS3Builder::new()
            .with_endpoint(format!("http://127.0.0.1:{}", ports.s3()))
            .with_allow_http(true)
            .with_bucket_name("tributary")
            .with_region("us-east-1")
            .with_access_key_id("tributary")
            .with_secret_access_key("tributary")
            .with_virtual_hosted_style_request(false)
            .build()?;
        let store: Arc<dyn ObjectStore> =
            Arc::new(object_store::prefix::PrefixStore::new(store, "warehouse"));
        // Where `tributary up` has its loader write: an Iceberg table per topic under
        // s3://tributary/warehouse, the SQL catalog in the loader's data directory.
        let config = hdfs_loader::Config {
            store: Some("s3://tributary/warehouse".into()),
            format: hdfs_loader::Format::Iceberg,
            catalog: Some(format!(
                "sqlite://{}",
                deployment.run_dir.join("data/loader/catalog.db").display()
            )),
            ..hdfs_loader::Config::default()
        };
        let tables = match hdfs_loader::Output::open(&config, store).await? {
            hdfs_loader::Output::Iceberg(tables) => tables,
            hdfs_loader::Output::Hive(_) => unreachable!("the format is iceberg"),
        };
        Ok(Probe {
            http: reqwest::Client::builder().timeout(std::time::Duration::from_secs(10)).build()?,
            agents: (0..LIVE.len() as u16)
                .map(|c| format!("http://127.0.0.1:{}/metrics", ports.agent(c)))
                .collect(),
            mirror: format!("http://127.0.0.1:{}/metrics", ports.mirror()),
            tables,
        })
    }

    async fn page(&self, url: &str) -> anyhow::Result<String> {
        let response = self.http.get(url).send().await?.error_for_status()?;
        Ok(response.text().await?)
    }

    /// Every tier's count now; `None` while a service does not answer.
    pub async fn counts(&self) -> anyhow::Result<Counts> {
        let mut counts = Counts::default();
        for url in &self.agents {
            let page = self.page(url).await?;
            counts.accepted += sum(&page, "tributary_agent_accepted_total", |_| true);
            counts.live += sum(&page, "tributary_agent_acknowledged_total", |_| true);
        }
        let page = self.page(&self.mirror).await?;
        counts.mirrored += sum(&page, "tributary_mirror_events_total", |labels| {
            TOPICS.iter().any(|t| labels.contains(&format!("topic=\"{t}\"")))
        });
        for topic in TOPICS {
            let covers = self.tables.covers_of(topic).await?;
            counts.loaded += covers.values().map(|c| c.rows_total).sum::<u64>();
        }
        Ok(counts)
    }

    /// Every commit record of `topic`/`partition` starting at or after `from`, in order.
    pub async fn commits_from(
        &self,
        topic: &str,
        partition: i32,
        from: i64,
    ) -> anyhow::Result<Vec<CommitRecord>> {
        let mut records: Vec<CommitRecord> = self
            .tables
            .commit_records(topic)
            .await?
            .into_iter()
            .filter(|r| r.partition == partition.to_string() && r.start >= from)
            .collect();
        records.sort_by_key(|r| r.start);
        Ok(records)
    }

    /// The audit service's windows of `topic`, as `/api/windows` answers.
    pub async fn windows(&self, audit_port: u16, topic: &str) -> anyhow::Result<serde_json::Value> {
        let url = format!("http://127.0.0.1:{audit_port}/api/windows?topic={topic}");
        Ok(serde_json::from_str(&self.page(&url).await?)?)
    }
}

/// The sum of the samples of `name` whose label text satisfies `labels`.
fn sum(page: &str, name: &str, labels: impl Fn(&str) -> bool) -> u64 {
    page.lines()
        .filter_map(|line| {
            let rest = line.strip_prefix(name)?;
            let (label_text, value) = match rest.strip_prefix('{') {
                Some(rest) => rest.split_once("} ")?,
                None => ("", rest.strip_prefix(' ')?),
            };
            labels(label_text).then(|| value.trim().parse::<f64>().ok()).flatten()
        })
        .map(|v| v as u64)
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sums_samples_by_label() {
        let page = "# HELP x X.\n\
                    tributary_mirror_events_total{source=\"a\",topic=\"click\",partition=\"0\"} 5\n\
                    tributary_mirror_events_total{source=\"a\",topic=\"_audit\",partition=\"0\"} 7\n\
                    tributary_mirror_events_total{source=\"b\",topic=\"click\",partition=\"1\"} 6\n\
                    tributary_agent_accepted_total 11\n";
        assert_eq!(sum(page, "tributary_mirror_events_total", |l| l.contains("\"click\"")), 11);
        assert_eq!(sum(page, "tributary_agent_accepted_total", |_| true), 11);
        assert_eq!(sum(page, "tributary_agent_acknowledged_total", |_| true), 0);
    }

    #[test]
    fn reads_this_process() {
        let sample = proc_sample(std::process::id() as i32).expect("/proc");
        assert!(sample.rss_bytes > 1 << 20);
    }
}
