//! The `audit` binary as a user starts it: every flag, the config file, signals, bad input.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use events::audit::Tier::Agent;
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use schema_registry::RegistryClient;
use serde_json::Value;
use testkit::audit::{Cluster, WAIT, WINDOW_MS, produce_audit, produce_events, record};
use testkit::registry::TestRegistry;

const BINARY: &str = env!("CARGO_BIN_EXE_audit");

/// A running `audit` and the address it printed.
struct Running {
    child: Child,
    url: String,
}

impl Running {
    fn start(args: &[String]) -> Running {
        let mut child = Command::new(BINARY)
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("audit starts");
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut line = String::new();
            let _ = BufReader::new(stdout).read_line(&mut line);
            let _ = tx.send(line);
        });
        let line = rx.recv_timeout(WAIT).expect("audit prints its address");
        let addr = line.trim().strip_prefix("listening on ").unwrap_or_else(|| panic!("{line:?}"));
        Running { child, url: format!("http://{addr}") }
    }

    async fn get(&self, path: &str) -> String {
        let response =
            testkit::http_client().get(format!("{}{path}", self.url)).send().await.expect("GET");
        assert!(response.status().is_success(), "GET {path}: {}", response.status());
        response.text().await.unwrap()
    }

    async fn json(&self, path: &str) -> Value {
        serde_json::from_str(&self.get(path).await).unwrap()
    }

    /// Waits until the window of `topic` at `start` satisfies `check`.
    async fn wait_window(&self, topic: &str, start: i64, check: impl Fn(&Value) -> bool) -> Value {
        testkit::eventually(WAIT, "the window's counts", || async {
            let response = testkit::http_client()
                .get(format!("{}/api/windows?topic={topic}", self.url))
                .send()
                .await
                .ok()?;
            let windows: Vec<Value> = response.json().await.ok()?;
            windows.into_iter().find(|w| w["window_start"] == start && check(w))
        })
        .await
    }

    fn stop(mut self, signal: Signal) -> ExitStatus {
        kill(Pid::from_raw(self.child.id() as i32), signal).unwrap();
        let deadline = Instant::now() + WAIT;
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status;
            }
            assert!(Instant::now() < deadline, "audit did not stop on {signal}");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The window that started ten seconds ago: decided at once only with no grace.
fn recent_window() -> i64 {
    let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_millis() as i64;
    (now - 10_000).div_euclid(WINDOW_MS) * WINDOW_MS
}

/// Two events of `page-view` in the window: reported by an agent, present in the live cluster.
async fn feed(registry: &RegistryClient, analytics: &Cluster, live: &Cluster, window: i64) {
    produce_audit(registry, analytics, &[record(Agent, "web-1", "page-view", window, 2)]).await;
    produce_events(registry, live, "page-view", &[window, window + 1]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_flag_takes_effect_and_sigterm_stops_it_cleanly() {
    let registry_server = TestRegistry::start().await;
    let registry = RegistryClient::new(registry_server.url()).unwrap();
    let (analytics, live) = (Cluster::start().await, Cluster::start().await);
    let window = recent_window();
    feed(&registry, &analytics, &live, window).await;
    let port = testkit::process::free_port();
    let audit = Running::start(&[
        "--zookeeper".into(),
        analytics.connect.clone(),
        "--live".into(),
        format!("dc-a={}", live.connect),
        "--registry".into(),
        registry_server.url().into(),
        "--http".into(),
        format!("127.0.0.1:{port}"),
        "--audit-window-ms".into(),
        WINDOW_MS.to_string(),
        "--grace-ms".into(),
        "0".into(),
        "--loader-grace-ms".into(),
        "45000".into(),
        "--held-ms".into(),
        "1000".into(),
    ]);
    assert_eq!(audit.url, format!("http://127.0.0.1:{port}"), "--http");
    // Agent counts come from --zookeeper's _audit, decoded with --registry; live counts from
    // --live under its name; windows of --audit-window-ms; decided 10 s after with --grace-ms 0.
    let report = audit.wait_window("page-view", window, |w| w["verdict"] == "complete").await;
    assert_eq!(report["tiers"], serde_json::json!({"agent": 2, "live": 2}));
    let detail = audit.json(&format!("/api/window?topic=page-view&start={window}")).await;
    assert_eq!(detail["hosts"]["live"][0]["host"], "dc-a");
    assert!(audit.get("/").await.contains("page-view"));
    assert_eq!(audit.json("/api/summary").await["loader_grace_ms"], 45_000, "--loader-grace-ms");
    // --held-ms 1000: the agent web-1, heard once, is listed as unheard a second later (the
    // default 30 s would take thirty).
    let summary = testkit::eventually(WAIT, "web-1 listed as unheard", || async {
        let summary = audit.json("/api/summary").await;
        (summary["silent_agents"][0]["host"] == "web-1").then_some(summary)
    })
    .await;
    assert_eq!(summary["held_ms"], 1_000, "--held-ms");
    assert!(summary["silent_agents"][0]["silent_ms"].as_i64() > Some(1_000), "{summary}");
    assert!(audit.get("/").await.contains(r#"data-silent="web-1""#), "on the dashboard");
    let page = audit.get("/metrics").await;
    assert!(page.contains("tributary_audit_missing_events{topic=\"page-view\",tier=\"live\"} 0"));
    let samples = testkit::metrics::parse(&page);
    let complete = [("topic", "page-view"), ("verdict", "complete")];
    assert!(testkit::metrics::value(&samples, "tributary_audit_windows", &complete) >= 1.0);
    let pages = [("route", "/api/window"), ("status", "200")];
    assert!(
        testkit::metrics::value(&samples, "tributary_audit_http_requests_total", &pages) >= 1.0
    );
    assert!(audit.stop(Signal::SIGTERM).success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_config_file_sets_every_key_and_flags_override_it() {
    let registry_server = TestRegistry::start().await;
    let registry = RegistryClient::new(registry_server.url()).unwrap();
    let (analytics, live) = (Cluster::start().await, Cluster::start().await);
    let window = recent_window();
    feed(&registry, &analytics, &live, window).await;
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("audit.toml");
    std::fs::write(
        &config,
        format!(
            r#"zookeeper = "{zookeeper}"
live = ["dc-file={live}"]
registry = "{registry}"
http = "127.0.0.1:0"
audit_window_ms = 60000
grace_ms = 0
loader_grace_ms = 2000
history_ms = 86400000
dashboard_windows = 3
refresh_s = 7
fetch_wait_ms = 50
fetch_bytes = 65536
discovery_ms = 500
retry_backoff_max_ms = 1000
catch_up_max_ms = 30000
held_ms = 1500
"#,
            zookeeper = analytics.connect,
            live = live.connect,
            registry = registry_server.url(),
        ),
    )
    .unwrap();
    // --window-ms overrides the file's 60000: the 1-second records are accepted.
    let audit = Running::start(&[
        "--config".into(),
        config.display().to_string(),
        "--audit-window-ms".into(),
        WINDOW_MS.to_string(),
    ]);
    let report = audit.wait_window("page-view", window, |w| w["verdict"] == "complete").await;
    assert_eq!(report["tiers"], serde_json::json!({"agent": 2, "live": 2}));
    let summary = audit.json("/api/summary").await;
    assert_eq!(
        (summary["window_ms"].as_i64(), summary["grace_ms"].as_i64()),
        (Some(1_000), Some(0))
    );
    assert_eq!(summary["loader_grace_ms"], 2_000);
    assert_eq!(summary["held_ms"], 1_500);
    let detail = audit.json(&format!("/api/window?topic=page-view&start={window}")).await;
    assert_eq!(detail["hosts"]["live"][0]["host"], "dc-file");
    let page = audit.get("/").await;
    assert!(page.contains(r#"<meta http-equiv="refresh" content="7">"#), "refresh_s from the file");
    assert!(audit.stop(Signal::SIGINT).success());
}

/// Runs `audit` with `args`, expecting it to refuse them.
fn refused(args: &[&str]) -> String {
    let output = Command::new(BINARY).args(args).output().expect("audit runs");
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    assert_eq!(output.status.code(), Some(2), "{args:?}: {stderr}");
    assert_eq!(stderr.lines().count(), 1, "one line for {args:?}: {stderr}");
    assert!(stderr.starts_with("audit: "), "{stderr}");
    stderr
}

#[test]
fn bad_flags_and_config_get_one_line_and_exit_code_2() {
    let ok = ["--zookeeper", "127.0.0.1:1/x", "--registry", "http://127.0.0.1:1"];
    let with = |extra: &[&'static str]| -> Vec<&str> {
        ok.iter().copied().chain(extra.iter().copied()).collect()
    };
    assert!(refused(&["--bogus"]).contains("--bogus"));
    assert!(refused(&with(&["--audit-window-ms", "0"])).contains("window_ms"));
    assert!(refused(&with(&["--audit-window-ms", "ten"])).contains("ten"));
    assert!(refused(&with(&["--grace-ms=-5"])).contains("grace_ms"));
    assert!(refused(&with(&["--loader-grace-ms=-5"])).contains("loader_grace_ms"));
    assert!(refused(&with(&["--held-ms", "0"])).contains("held_ms"));
    assert!(refused(&with(&["--live", "nameless"])).contains("NAME=CONNECT"));
    assert!(refused(&with(&["--live", "a=zk:1", "--live", "a=zk:2"])).contains("twice"));
    assert!(refused(&["--registry", "http://127.0.0.1:1"]).contains("--zookeeper"));
    assert!(refused(&["--zookeeper", "127.0.0.1:1"]).contains("--registry"));
    assert!(refused(&["--config", "/nonexistent/audit.toml"]).contains("/nonexistent/audit.toml"));
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("audit.toml");
    std::fs::write(&config, "audit_window_ms = 1000\nwindow_size = 5\n").unwrap();
    assert!(refused(&["--config", config.to_str().unwrap()]).contains("window_size"));
}

/// `curl` against the HTTPS dashboard: `(status, body)`.
fn curl(ca: &std::path::Path, url: &str, extra: &[&str]) -> (u16, String) {
    let out = Command::new("curl")
        .args(["-sS", "--cacert", ca.to_str().unwrap(), "-w", "\n%{http_code}"])
        .args(extra)
        .arg(url)
        .output()
        .expect("curl runs");
    assert!(out.status.success(), "{url}: {}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8(out.stdout).unwrap();
    let (body, status) = text.rsplit_once('\n').unwrap();
    (status.parse().unwrap(), body.to_owned())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_https_dashboard_takes_a_client_certificate_or_the_token() {
    let registry_server = TestRegistry::start().await;
    let analytics = Cluster::start().await;
    let pki = testkit::tls::Pki::new("audit test CA");
    let (server, operator) = (pki.identity("audit"), pki.identity("operator"));
    let dir = tempfile::tempdir().unwrap();
    let token = dir.path().join("token");
    std::fs::write(&token, "s3cret-token\n").unwrap();
    let port = testkit::process::free_port();
    let path = |p: &std::path::Path| p.to_str().unwrap().to_owned();
    let _audit = Running::start(&[
        "--zookeeper".into(),
        analytics.connect.clone(),
        "--registry".into(),
        registry_server.url().into(),
        "--http".into(),
        format!("127.0.0.1:{port}"),
        "--tls-cert".into(),
        path(&server.cert),
        "--tls-key".into(),
        path(&server.key),
        "--tls-client-ca".into(),
        path(pki.ca()),
        "--token-file".into(),
        path(&token),
    ]);
    let url = format!("https://127.0.0.1:{port}/api/summary");
    let (status, body) = curl(pki.ca(), &url, &[]);
    assert_eq!(status, 401, "{body}");
    assert_eq!(curl(pki.ca(), &url, &["-H", "Authorization: Bearer wrong"]).0, 401);
    let (status, body) = curl(pki.ca(), &url, &["-H", "Authorization: Bearer s3cret-token"]);
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("loader_grace_ms"), "{body}");
    let certified = ["--cert", &path(&operator.cert), "--key", &path(&operator.key)];
    assert_eq!(curl(pki.ca(), &url, &certified).0, 200, "a client certificate is enough");
    let dashboard = format!("https://127.0.0.1:{port}/");
    assert_eq!(curl(pki.ca(), &dashboard, &["-H", "Authorization: Bearer s3cret-token"]).0, 200);
    assert_eq!(curl(pki.ca(), &format!("https://127.0.0.1:{port}/healthz"), &[]).0, 200);
    // A browser opens the address with the token once and keeps a cookie.
    let jar = dir.path().join("cookies");
    let jar = path(&jar);
    let login = format!("https://127.0.0.1:{port}/?token=s3cret-token");
    let (status, _) = curl(pki.ca(), &login, &["-c", &jar]);
    assert_eq!(status, 303, "the token's address sends the browser on to the page");
    let cookies = std::fs::read_to_string(&jar).unwrap();
    assert!(cookies.contains("tributary_audit_token\ts3cret-token"), "{cookies}");
    assert_eq!(curl(pki.ca(), &url, &["-b", &jar]).0, 200, "the cookie is enough");
    let (status, body) = curl(pki.ca(), &login, &["-b", &jar, "-L"]);
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("<html") || body.contains("<!DOCTYPE"), "{body}");
    let wrong = format!("https://127.0.0.1:{port}/?token=guess");
    assert_eq!(curl(pki.ca(), &wrong, &[]).0, 401);
    assert_eq!(curl(pki.ca(), &url, &["-H", "Cookie: tributary_audit_token=guess"]).0, 401);
    // Another CA's certificate is refused at the handshake.
    let other = testkit::tls::Pki::new("other CA").identity("operator");
    let out = Command::new("curl")
        .args(["-sS", "--cacert", pki.ca().to_str().unwrap(), "--cert", &path(&other.cert)])
        .args(["--key", &path(&other.key), &url])
        .output()
        .unwrap();
    assert!(!out.status.success(), "{}", String::from_utf8_lossy(&out.stdout));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_flags_read_a_tls_cluster_as_the_audits_principal() {
    let registry_server = TestRegistry::start().await;
    let registry = RegistryClient::new(registry_server.url()).unwrap();
    let pki = testkit::tls::Pki::new("audit reader CA");
    let analytics = Cluster::start_tls(&pki).await;
    let window = recent_window();
    produce_audit(&registry, &analytics, &[record(Agent, "web-1", "page-view", window, 7)]).await;
    let me = pki.identity("audit");
    let port = testkit::process::free_port();
    let path = |p: &std::path::Path| p.to_str().unwrap().to_owned();
    let _audit = Running::start(&[
        "--zookeeper".into(),
        analytics.connect.clone(),
        "--registry".into(),
        registry_server.url().into(),
        "--http".into(),
        format!("127.0.0.1:{port}"),
        "--audit-window-ms".into(),
        WINDOW_MS.to_string(),
        "--tls-ca".into(),
        path(pki.ca()),
        "--tls-cert".into(),
        path(&me.cert),
        "--tls-key".into(),
        path(&me.key),
    ]);
    // Its dashboard speaks HTTPS with the same certificate; the agent's count was read over TLS.
    let url = format!("https://127.0.0.1:{port}/api/windows?topic=page-view");
    testkit::eventually(WAIT, "the agent's count read over TLS", || async {
        let (status, body) = curl(pki.ca(), &url, &[]);
        (status == 200 && body.contains("\"agent\":7")).then_some(())
    })
    .await;
}
