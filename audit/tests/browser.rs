//! The dashboard in a real browser: headless Chromium loads it from the running service and we
//! check what a person would see — the flagged window marked on the overview, the chart drawn
//! on the topic page, the short host named on the window page — and take screenshots.
//!
//! Set `AUDIT_SCREENSHOTS=DIR` to keep the screenshots (the README's come from here).

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use audit::Config;
use events::audit::{AuditRecord, Tier};
use schema_registry::RegistryClient;
use testkit::audit::{Audit, Cluster, produce_audit, produce_events, test_config};
use testkit::registry::TestRegistry;

/// One-minute windows, decided one minute after they close.
const W: i64 = 60_000;
const WINDOWS: i64 = 12;
const CHROMIUM_TIMEOUT: Duration = Duration::from_secs(90);

fn rec(tier: Tier, host: &str, topic: &str, window_start: i64, count: i64) -> AuditRecord {
    AuditRecord { tier, host: host.into(), topic: topic.into(), window_start, window_ms: W, count }
}

/// Where the known anomalies are.
struct Anomalies {
    /// page-view: 25 events never reach the analytics cluster; the loader, downstream of it,
    /// lacks them too.
    loss_window: i64,
    /// click: the analytics cluster holds 6 events twice.
    duplication_window: i64,
}

/// Twelve minutes of three topics through every tier: agents on two web hosts, two live
/// clusters, the analytics cluster, one loader.
async fn feed(
    registry: &RegistryClient,
    analytics: &Cluster,
    dc_a: &Cluster,
    dc_b: &Cluster,
) -> Anomalies {
    let mut now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_millis() as i64;
    // The newest two windows stay open while the test looks (the one before the current is
    // decided a minute after the next boundary): late in a minute, start after the boundary.
    if now.rem_euclid(W) > W - 30_000 {
        let wait = W - now.rem_euclid(W) + 100;
        tokio::time::sleep(Duration::from_millis(wait as u64)).await;
        now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_millis() as i64;
    }
    let current = now.div_euclid(W) * W;
    let first = current - (WINDOWS - 1) * W;
    let anomalies = Anomalies { loss_window: first + 7 * W, duplication_window: first + 4 * W };
    let mut records = Vec::new();
    for (t, (topic, base)) in
        [("page-view", 300), ("click", 180), ("search", 90)].into_iter().enumerate()
    {
        for i in 0..WINDOWS {
            let start = first + i * W;
            // A multiple of 5, so that the 60/40 split is exact.
            let total = (base + (i * 53 + t as i64 * 17) % 40 - 20) / 5 * 5;
            let (web_1, web_2) = (total * 6 / 10, total - total * 6 / 10);
            records.push(rec(Tier::Agent, "web-1", topic, start, web_1));
            records.push(rec(Tier::Agent, "web-2", topic, start, web_2));
            // web-1 ships to dc-a, web-2 to dc-b; the mirror copies both into analytics.
            let times = |n: i64| (0..n).map(|k| start + k * (W / n.max(1))).collect::<Vec<_>>();
            produce_events(registry, dc_a, topic, &times(web_1)).await;
            produce_events(registry, dc_b, topic, &times(web_2)).await;
            let mut copied = web_1 + web_2;
            if topic == "page-view" && start == anomalies.loss_window {
                copied -= 25;
            }
            if topic == "click" && start == anomalies.duplication_window {
                copied += 6;
            }
            produce_events(registry, analytics, topic, &times(copied)).await;
            let open = i >= WINDOWS - 2;
            // The loader runs behind: the newest windows are not all loaded yet.
            let loaded = if open { copied * 2 / 3 } else { copied };
            records.push(rec(Tier::Loader, "loader-1", topic, start, loaded));
        }
    }
    produce_audit(registry, analytics, &records).await;
    anomalies
}

/// Runs headless Chromium with `args` then `url`; returns its stdout.
async fn chromium(profile: &Path, args: &[String], url: &str) -> String {
    let mut command = tokio::process::Command::new("chromium");
    command
        .args(["--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars"])
        .arg(format!("--user-data-dir={}", profile.display()))
        .args(args)
        .arg(url)
        .kill_on_drop(true);
    let output = tokio::time::timeout(CHROMIUM_TIMEOUT, command.output())
        .await
        .expect("chromium finishes in time")
        .expect("chromium runs (Debian package chromium; scripts/test.sh installs it)");
    assert!(output.status.success(), "chromium: {}", String::from_utf8_lossy(&output.stderr));
    String::from_utf8(output.stdout).expect("UTF-8 DOM")
}

async fn dom(profile: &Path, url: &str) -> String {
    chromium(profile, &["--dump-dom".into()], url).await
}

/// Screenshots `url` into `dir/name` and checks a picture was drawn.
async fn screenshot(profile: &Path, dir: &Path, name: &str, url: &str, height: u32) -> PathBuf {
    let path = dir.join(name);
    let args = [format!("--screenshot={}", path.display()), format!("--window-size=1440,{height}")];
    chromium(profile, &args, url).await;
    let png = std::fs::read(&path).expect("screenshot written");
    assert!(png.starts_with(b"\x89PNG"), "{name} is a PNG");
    assert!(png.len() > 20_000, "{name} shows a page, not a blank ({} bytes)", png.len());
    path
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chromium_shows_the_flagged_window_the_chart_and_the_short_host() {
    let registry_server = TestRegistry::start().await;
    let registry = RegistryClient::new(registry_server.url()).unwrap();
    let analytics = Cluster::start().await;
    let (dc_a, dc_b) = (Cluster::start().await, Cluster::start().await);
    let anomalies = feed(&registry, &analytics, &dc_a, &dc_b).await;
    let config = Config { audit_window_ms: W, grace_ms: W, refresh_s: 30, ..test_config() };
    let live = [("dc-a", &dc_a), ("dc-b", &dc_b)];
    let audit = Audit::start(config, &analytics, &live, registry_server.url()).await;
    let loss = anomalies.loss_window;
    audit
        .wait_window("page-view", loss, "the loss at the mirror", |w| {
            w["verdict"] == "loss" && w["tiers"]["live"] == w["tiers"]["agent"]
        })
        .await;

    let profile = tempfile::tempdir().unwrap();
    let shots = tempfile::tempdir().unwrap();

    // The overview: the page-view mirror cell of that window is marked as loss of 25, the
    // click mirror cell of the duplicated window as +6, the legend explains the colours.
    let overview = dom(profile.path(), &audit.url).await;
    let cell = |topic: &str, tier: &str, window: i64, verdict: &str| {
        format!(
            r#"class="cell {verdict}" href="/topics/{topic}/windows/{window}" data-topic="{topic}" data-tier="{tier}" data-window="{window}" data-verdict="{verdict}""#
        )
    };
    assert!(overview.contains(&cell("page-view", "mirror", loss, "loss")), "{overview}");
    assert!(overview.contains(&cell("page-view", "loader", loss, "loss")));
    assert!(
        overview.contains(&cell("page-view", "live", loss, "complete")),
        "the live tier has them all"
    );
    assert!(overview.contains(">−25</a>"), "the cell says how many are missing");
    let dup = anomalies.duplication_window;
    assert!(overview.contains(&cell("click", "mirror", dup, "duplication")));
    assert!(overview.contains(">+6</a>"));
    assert_eq!(overview.matches(r#"data-verdict="loss""#).count(), 2, "exactly the flagged cells");
    assert!(overview.contains("loss: a tier counted fewer"), "the legend");
    assert!(overview.contains(r#"data-verdict="open""#), "the newest windows are open");

    // The topic page: one line per tier, and a band on the lossy window.
    let topic_url = format!("{}/topics/page-view", audit.url);
    let topic = dom(profile.path(), &topic_url).await;
    assert!(topic.contains(r#"<svg id="chart""#));
    for tier in ["agent", "live", "mirror", "loader"] {
        assert!(
            topic.contains(&format!(r#"class="series" data-tier="{tier}" points=""#)),
            "{tier} line"
        );
    }
    assert!(topic.contains(&format!(r#"class="band" data-window="{loss}" data-verdict="loss""#)));
    assert_eq!(topic.matches(r#"class="band""#).count(), 1);

    // The drill-down from the flagged window names the cluster that fell short, and by how
    // much.
    let window_url = format!("{}/topics/page-view/windows/{loss}", audit.url);
    let window = dom(profile.path(), &window_url).await;
    assert!(
        window.contains(r#"<tr class="flag" data-tier="mirror" data-host="analytics">"#),
        "{window}"
    );
    assert!(window.contains(r#"<td class="short">25</td>"#));
    assert!(window.contains("missing at the <b>mirror</b> tier"), "where the loss happened");
    assert!(!window.contains(r#"data-host="dc-a""#), "the live clusters carried their share");

    let kept = std::env::var_os("AUDIT_SCREENSHOTS").map(PathBuf::from);
    let dir = kept.as_deref().unwrap_or(shots.path());
    screenshot(profile.path(), dir, "dashboard.png", &audit.url, 760).await;
    screenshot(profile.path(), dir, "topic.png", &topic_url, 1180).await;
    screenshot(profile.path(), dir, "window.png", &window_url, 900).await;
    audit.stop().await;
}
