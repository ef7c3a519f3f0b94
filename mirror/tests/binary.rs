//! The `mirror` binary as a user starts it: flags, `--config`, `/metrics`, SIGTERM, and
//! `kill -9` of one of two mirrors sharing the work (nothing lost, nothing twice).

use std::path::Path;
use std::time::Duration;

use nix::sys::signal::Signal;
use testkit::cluster::TestCluster;
use testkit::events::raw_events;
use testkit::eventually;
use testkit::mirror::{WAIT, held_twice};
use testkit::process::{Process, free_port};

const BINARY: &str = env!("CARGO_BIN_EXE_mirror");

fn args(list: &[&str]) -> Vec<String> {
    list.iter().map(|s| (*s).to_owned()).collect()
}

async fn metrics(port: u16) -> Option<String> {
    let url = format!("http://127.0.0.1:{port}/metrics");
    testkit::http_client().get(url).send().await.ok()?.text().await.ok()
}

/// Lines of `family` in a `/metrics` text.
fn lines<'a>(text: &'a str, family: &str) -> Vec<&'a str> {
    let prefix = format!("{family}{{");
    text.lines().filter(|l| l.starts_with(&prefix)).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_of_one_of_two_mirrors_mid_stream_loses_nothing_and_duplicates_nothing() {
    let (live, analytics) = tokio::join!(TestCluster::start(2), TestCluster::start(1));
    live.create_topic("page-view", 4).await;
    // Not copied: "debug" is --exclude'd, "other" not --include'd.
    for topic in ["debug", "other"] {
        live.create_topic(topic, 1).await;
        live.produce(topic, 1, &raw_events("live", topic, 0, 10, service::now_ms())).await;
    }
    let dir = tempfile::tempdir().unwrap();
    let source = format!("live={}", live.connect);
    let spawn = |name: &str, port: u16| {
        let argv = args(&[
            "--source",
            &source,
            "--target",
            &analytics.connect,
            "--group",
            "copiers",
            "--partitions",
            "2",
            "--commit-ms",
            "100",
            "--metrics",
            &format!("127.0.0.1:{port}"),
            "--metrics-refresh-ms",
            "100",
            "--include",
            "page-.*|debug",
            "--exclude",
            "debug",
            "--zookeeper-session-timeout-ms",
            "4000",
            "--inflight-messages",
            "500",
            "--buffer-bytes",
            "4194304",
            "--drain-timeout-ms",
            "3000",
        ]);
        Process::spawn(Path::new(BINARY), &argv, port, &dir.path().join(format!("{name}.log")))
    };
    let (port_1, port_2) = (free_port(), free_port());
    let mut first = spawn("mirror-1", port_1);
    let mut second = spawn("mirror-2", port_2);
    // Both share the 8 partitions: each reports the lag of its own.
    eventually(WAIT, "both mirrors own partitions", || async {
        let (one, two) = (metrics(port_1).await?, metrics(port_2).await?);
        let (one, two) =
            (lines(&one, "tributary_mirror_lag_bytes"), lines(&two, "tributary_mirror_lag_bytes"));
        (!one.is_empty() && !two.is_empty() && one.len() + two.len() == 8).then_some(())
    })
    .await;

    let time = service::now_ms();
    let all = raw_events("live", "page-view", 0, 3_000, time);
    for (i, batch) in all.chunks(500).enumerate() {
        live.produce("page-view", 4, batch).await;
        if i == 2 {
            first.signal(Signal::SIGKILL);
            first.wait_exit(Duration::from_secs(10));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    analytics.wait_for_all("page-view", &all, "every event despite the kill").await;
    eventually(WAIT, "the survivor owns all 8 partitions", || async {
        let text = metrics(port_2).await?;
        (lines(&text, "tributary_mirror_lag_bytes").len() == 8).then_some(())
    })
    .await;
    let partitions = analytics.registry().partitions("page-view").await.unwrap();
    assert_eq!(partitions.len(), 2, "--partitions");
    let live_registry = live.registry();
    assert!(live_registry.groups().await.unwrap().contains(&"copiers".to_owned()), "--group");
    // What the killed mirror copied and had not committed, the survivor copied again: the
    // target appended none of it twice.
    eventually(WAIT, "the survivor copied to the end", || async {
        let text = metrics(port_2).await?;
        let lags = lines(&text, "tributary_mirror_lag_bytes");
        (lags.len() == 8 && lags.iter().all(|l| l.ends_with(" 0"))).then_some(())
    })
    .await;
    let twice = held_twice(&analytics, "page-view").await;
    assert!(twice.is_empty(), "{} events held twice", twice.len());
    assert_eq!(analytics.payloads("page-view").await.len(), all.len());
    let topics = analytics.registry().topics().await.unwrap();
    assert!(!topics.iter().any(|t| t == "debug" || t == "other"), "filtered: {topics:?}");

    second.signal(Signal::SIGTERM);
    assert!(second.wait_exit(Duration::from_secs(30)).success(), "SIGTERM: a clean exit");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn config_file_sets_every_key_and_flags_override_it() {
    let (live, analytics) = tokio::join!(TestCluster::start(1), TestCluster::start(1));
    live.create_topic("page-view", 1).await;
    live.create_topic("click", 1).await;
    live.create_topic("debug", 1).await;
    let time = service::now_ms();
    let views = raw_events("live", "page-view", 0, 50, time);
    live.produce("page-view", 1, &views).await;
    live.produce("click", 1, &raw_events("live", "click", 0, 50, time)).await;
    live.produce("debug", 1, &raw_events("live", "debug", 0, 50, time)).await;
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let file = dir.path().join("mirror.toml");
    std::fs::write(
        &file,
        format!(
            r#"
source = ["live={live}"]
target = "{analytics}"
group = "from-file"
include = "page-.*|click"
exclude = "click"
partitions = 1
metrics = "127.0.0.1:{port}"
commit_ms = 100
inflight_messages = 100
buffer_bytes = 4194304
metrics_refresh_ms = 100
drain_timeout_ms = 2000
zookeeper_session_timeout_ms = 4000
"#,
            live = live.connect,
            analytics = analytics.connect,
        ),
    )
    .unwrap();
    let argv = args(&["--config", file.to_str().unwrap(), "--group", "from-flag"]);
    let mut mirror = Process::spawn(Path::new(BINARY), &argv, port, &dir.path().join("log"));

    analytics.wait_for_all("page-view", &views, "the included topic").await;
    let topics = analytics.registry().topics().await.unwrap();
    assert!(!topics.contains(&"click".to_owned()), "excluded: {topics:?}");
    assert!(!topics.contains(&"debug".to_owned()), "not included: {topics:?}");
    let offsets = live.registry();
    let partition = 0;
    eventually(WAIT, "offsets committed under the flag's group", || async {
        offsets.offset("from-flag", "page-view", partition).await.ok()?.map(|_| ())
    })
    .await;
    let groups = offsets.groups().await.unwrap();
    assert!(!groups.contains(&"from-file".to_owned()), "the flag overrides the file: {groups:?}");
    mirror.signal(Signal::SIGTERM);
    assert!(mirror.wait_exit(Duration::from_secs(30)).success());
}

#[test]
fn bad_flags_and_config_exit_2_with_one_line() {
    let dir = tempfile::tempdir().unwrap();
    let bad_key = dir.path().join("bad.toml");
    std::fs::write(&bad_key, "sources = [\"a=b\"]\n").unwrap();
    let base = ["--source", "a=127.0.0.1:1/a", "--target", "127.0.0.1:1/t"];
    let cases: Vec<Vec<&str>> = vec![
        vec![],
        vec!["--target", "127.0.0.1:1/t"],
        vec!["--source", "no-equals", "--target", "t"],
        vec!["--source", "a b=x", "--target", "t"],
        vec!["--source", "a=x", "--source", "a=y", "--target", "t"],
        vec!["--source", "a=x"],
        vec!["--registry", "http://x"],
        vec!["--include", "("],
        vec!["--exclude", "[z-a]"],
        vec!["--group", "a/b"],
        vec!["--partitions", "0"],
        vec!["--commit-ms", "0"],
        vec!["--inflight-messages", "0"],
        vec!["--buffer-bytes", "1"],
        vec!["--audit-window-ms", "60000"],
        vec!["--metrics-refresh-ms", "0"],
        vec!["--drain-timeout-ms", "soon"],
        vec!["--zookeeper-session-timeout-ms", "10"],
        vec!["--host-name", "m"],
        vec!["--no-such-flag"],
        vec!["--config", bad_key.to_str().unwrap()],
        vec!["--config", "/does/not/exist.toml"],
    ];
    for case in cases {
        let mut argv: Vec<&str> =
            if case.iter().any(|a| *a == "--source" || a.is_empty()) || case.is_empty() {
                Vec::new()
            } else {
                base.to_vec()
            };
        argv.extend(&case);
        let output = std::process::Command::new(BINARY).args(&argv).output().unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{argv:?}: {stderr}");
        assert_eq!(stderr.trim().lines().count(), 1, "{argv:?}: one line, got {stderr}");
        assert!(stderr.starts_with("mirror: "), "{argv:?}: {stderr}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_flags_copy_between_tls_clusters_as_the_mirrors_principal() {
    let pki = testkit::tls::Pki::new("mirror test CA");
    let dir = tempfile::tempdir().unwrap();
    let acl = dir.path().join("acl.toml");
    std::fs::write(
        &acl,
        "[[allow]]\nprincipals = [\"mirror-*\", \"test\"]\ntopics = [\"*\"]\n\
         operations = [\"produce\", \"consume\", \"create\", \"describe\"]\n",
    )
    .unwrap();
    let (live, analytics) = tokio::join!(
        TestCluster::start_tls(1, &pki, Some(acl.clone())),
        TestCluster::start_tls(1, &pki, Some(acl.clone()))
    );
    live.create_topic("page-view", 1).await;
    let views = raw_events("live", "page-view", 0, 50, service::now_ms());
    live.produce("page-view", 1, &views).await;
    let me = pki.identity("mirror-1");
    let port = free_port();
    let path = |p: &Path| p.to_str().unwrap().to_owned();
    let argv = args(&[
        "--source",
        &format!("live={}", live.connect),
        "--target",
        &analytics.connect,
        "--partitions",
        "1",
        "--metrics",
        &format!("127.0.0.1:{port}"),
        "--tls-ca",
        &path(pki.ca()),
        "--tls-cert",
        &path(&me.cert),
        "--tls-key",
        &path(&me.key),
        "--tls-client-ca",
        &path(pki.ca()),
    ]);
    let _mirror = Process::spawn(Path::new(BINARY), &argv, port, &dir.path().join("log"));
    analytics.wait_for_all("page-view", &views, "the mirrored topic over TLS").await;
    // /metrics speaks HTTPS with the mirror's certificate, and wants a client's (--tls-client-ca).
    let url = format!("https://127.0.0.1:{port}/metrics");
    let bare = std::process::Command::new("curl")
        .args(["-sS", "--cacert", &path(pki.ca()), &url])
        .output()
        .unwrap();
    assert!(!bare.status.success(), "a scrape without a client certificate is refused");
    let scraper = pki.identity("prometheus");
    let out = std::process::Command::new("curl")
        .args(["-sS", "--cacert", &path(pki.ca()), "--cert", &path(&scraper.cert)])
        .args(["--key", &path(&scraper.key), &url])
        .output()
        .unwrap();
    let page = String::from_utf8_lossy(&out.stdout);
    assert!(page.contains("tributary_mirror"), "{page}{}", String::from_utf8_lossy(&out.stderr));
}
