//! The `hdfs-loader` binary as a user starts it: `run`, `serve`, `status`, every flag and
//! `--config`, bad input, and the output read by a real query engine (DuckDB).

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use hdfs_loader::layout::Hour;
use testkit::loader::{BASE_TIME_MS, Cluster, TOPIC, unique_positions};

const BIN: &str = env!("CARGO_BIN_EXE_hdfs-loader");

fn loader(args: &[&str]) -> Output {
    Command::new(BIN).args(args).stdin(Stdio::null()).output().expect("run hdfs-loader")
}

fn text(output: &Output) -> String {
    format!(
        "status {}\nstdout:\n{}\nstderr:\n{}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

/// Rows per `(dt, hr)` as DuckDB counts them over the Hive layout.
fn duckdb_rows_per_hour(root: &Path) -> BTreeMap<(String, String), i64> {
    let query = format!(
        "SELECT dt, hr, count(*) AS rows, count(DISTINCT header.id) AS ids \
         FROM read_parquet('{}/{TOPIC}/*/*/*.parquet', hive_partitioning = true) \
         GROUP BY dt, hr ORDER BY dt, hr",
        root.display()
    );
    let script = format!(
        "import duckdb\nfor dt, hr, rows, ids in duckdb.sql(\"\"\"{query}\"\"\").fetchall():\n    assert rows == ids, (rows, ids)\n    print(dt, hr, rows)\n"
    );
    let output = Command::new("python3").arg("-c").arg(&script).output().expect("python3");
    assert!(output.status.success(), "duckdb failed: {}", text(&output));
    String::from_utf8(output.stdout)
        .unwrap()
        .lines()
        .map(|line| {
            let mut fields = line.split_whitespace();
            let dt = fields.next().unwrap().to_owned();
            let hr = fields.next().unwrap().to_owned();
            ((dt, format!("{:0>2}", hr)), fields.next().unwrap().parse().unwrap())
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_from_a_config_file_writes_parquet_that_duckdb_counts_per_hour() {
    let cluster = Cluster::start(2).await;
    let ids = cluster.produce_page_views(300, 30_000).await;
    let root = tempfile::tempdir().unwrap();
    let config = root.path().join("loader.toml");
    std::fs::write(
        &config,
        format!(
            "zookeeper = \"{}\"\nzookeeper_session_timeout_ms = 4000\nregistry = \"{}\"\nstore = \"file://{}/warehouse\"\n\
             topics = \"{TOPIC}\"\ngroup = \"nightly\"\nhost_name = \"from-file\"\nmax_messages_per_commit = 100\n\
             row_group_rows = 64\nbatch_rows = 32\npartitions_in_parallel = 1\nfetch_bytes = 65536\nzstd_level = 5\n\
             audit_window_ms = 3600000\naudit = false\nstaging_grace_ms = 60000\n",
            cluster.zookeeper,
            cluster.registry_server.url(),
            root.path().display()
        ),
    )
    .unwrap();
    let output = tokio::task::spawn_blocking(move || {
        loader(&["run", "--config", config.to_str().unwrap(), "--json"])
    })
    .await
    .unwrap();
    assert!(output.status.success(), "{}", text(&output));
    let summary: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(summary["rows"], 300, "{summary}");
    assert_eq!(summary["audit_records_published"], 0, "audit = false");
    let commits: u64 = summary["partitions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["commits"].as_u64().unwrap())
        .sum();
    assert!(commits >= 3, "max_messages_per_commit = 100 over 300 events: {summary}");

    // The commit records carry the file's settings.
    let commit =
        root.path().join("warehouse/_commits").join(TOPIC).join("0/00000000000000000000.json");
    let record: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&commit).unwrap()).unwrap();
    assert_eq!(record["host"], "from-file");
    assert_eq!(record["window_ms"], 3_600_000);

    // DuckDB reads the Hive layout unchanged; its counts are the events' hours.
    // Sequence numbers are shared by the tests running at once: each event's own says its time.
    let mut expected: BTreeMap<(String, String), i64> = BTreeMap::new();
    for id in &ids {
        let dir = Hour::of(BASE_TIME_MS + testkit::events::sequence_of(id) * 30_000).dir();
        let (dt, hr) = dir.split_once('/').unwrap();
        *expected.entry((dt[3..].to_owned(), hr[3..].to_owned())).or_default() += 1;
    }
    assert_eq!(duckdb_rows_per_hour(&root.path().join("warehouse")), expected);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn flags_override_the_config_file() {
    let cluster = Cluster::start(1).await;
    cluster.produce_page_views(15, 1).await;
    // Set aside under --bad-records (without it the run would stop here).
    let bad = [0u8, 0, 0, 0x7f, 0x7f, 1, 2, 3]; // schema id 2139062143: not registered
    let bad_offset = cluster.producer.send(TOPIC, None, &bad).await.unwrap().offset.unwrap();
    cluster.produce_page_views(14, 1).await;
    let root = tempfile::tempdir().unwrap();
    let config = root.path().join("loader.toml");
    // Every key here is overridden by a flag below.
    std::fs::write(
        &config,
        "zookeeper = \"127.0.0.1:1/nowhere\"\nregistry = \"http://127.0.0.1:1\"\nstore = \"memory://\"\n\
         topics = \"nothing\"\nhost_name = \"file\"\nmax_messages_per_commit = 1000\naudit_window_ms = 1000\naudit = false\n",
    )
    .unwrap();
    let bad_records = root.path().join("bad");
    let store = format!("file://{}/w", root.path().display());
    // A staged file of a run that died before committing, older than --staging-grace-ms 1000
    // (the default grace, an hour, would keep it).
    let leftover = root.path().join("w/_staging").join(TOPIC).join("0/dead-run/x.parquet");
    std::fs::create_dir_all(leftover.parent().unwrap()).unwrap();
    std::fs::write(&leftover, b"partial").unwrap();
    tokio::time::sleep(std::time::Duration::from_millis(1_200)).await;
    let args = [
        "run",
        "--config",
        config.to_str().unwrap(),
        "--zookeeper",
        &cluster.zookeeper,
        "--zookeeper-session-timeout-ms",
        "5000",
        "--registry",
        cluster.registry_server.url(),
        "--store",
        &store,
        "--topics",
        TOPIC,
        "--group",
        "flags",
        "--host-name",
        "flag",
        "--max-messages-per-commit",
        "10",
        "--row-group-rows",
        "8",
        "--batch-rows",
        "4",
        "--partitions-in-parallel",
        "2",
        "--fetch-bytes",
        "4096",
        "--zstd-level",
        "1",
        "--bad-records",
        bad_records.to_str().unwrap(),
        "--audit-window-ms",
        "60000",
        "--audit",
        "true",
        "--staging-grace-ms",
        "1000",
        "--json",
    ]
    .map(str::to_owned);
    let output = tokio::task::spawn_blocking(move || {
        loader(&args.iter().map(String::as_str).collect::<Vec<_>>())
    })
    .await
    .unwrap();
    assert!(output.status.success(), "{}", text(&output));
    let summary: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(summary["rows"], 29);
    assert_eq!(summary["partitions"][0]["commits"], 3, "--max-messages-per-commit 10");
    assert_eq!(summary["partitions"][0]["bad_records"], 1);
    let kept = bad_records.join(TOPIC).join("0").join(format!("{bad_offset:020}.bin"));
    assert_eq!(std::fs::read(&kept).unwrap(), bad, "--bad-records");
    assert!(!leftover.exists(), "--staging-grace-ms 1000: the dead run's staged file is gone");
    assert!(summary["audit_records_published"].as_u64().unwrap() >= 1, "--audit true");
    let commit = root.path().join("w/_commits").join(TOPIC).join("0/00000000000000000000.json");
    let record: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&commit).unwrap()).unwrap();
    assert_eq!(
        (record["host"].as_str(), record["window_ms"].as_i64()),
        (Some("flag"), Some(60_000))
    );
    // --row-group-rows 8: the file of the first commit's 10 rows has row groups of 8 and 2.
    let path = record["files"][0]["path"].as_str().unwrap();
    let file = std::fs::File::open(root.path().join("w").join(path)).unwrap();
    let metadata =
        parquet::arrow::arrow_reader::ArrowReaderMetadata::load(&file, Default::default()).unwrap();
    let groups: Vec<i64> = metadata.metadata().row_groups().iter().map(|g| g.num_rows()).collect();
    assert_eq!(groups, [8, 2], "--row-group-rows 8");
}

#[test]
fn bad_flags_and_config_exit_2_with_one_line_naming_the_problem() {
    let dir = tempfile::tempdir().unwrap();
    let bad_toml = dir.path().join("bad.toml");
    std::fs::write(&bad_toml, "no_such_key = 1\n").unwrap();
    let store = format!("file://{}", dir.path().display());
    let common =
        ["--zookeeper", "127.0.0.1:1", "--registry", "http://127.0.0.1:1", "--store", &store];
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (vec!["run", "--no-such-flag"], "--no-such-flag"),
        (vec!["run", "--zookeeper", "127.0.0.1:1", "--registry", "http://x"], "--store"),
        (vec!["run", "--store", &store, "--registry", "http://x"], "--zookeeper"),
        (vec!["run", "--store", &store, "--zookeeper", "127.0.0.1:1"], "--registry"),
        (vec!["run", "--store", "ftp://x"], "scheme"),
        (vec!["run", "--config", bad_toml.to_str().unwrap()], "no_such_key"),
        (vec!["run", "--config", "/no/such/file.toml"], "/no/such/file.toml"),
        ([&["run", "--topics", "("][..], &common].concat(), "topics"),
        ([&["run", "--group", "a/b"][..], &common].concat(), "group"),
        ([&["run", "--host-name", ""][..], &common].concat(), "host_name"),
        (
            [&["run", "--max-messages-per-commit", "0"][..], &common].concat(),
            "max_messages_per_commit",
        ),
        ([&["run", "--row-group-rows", "0"][..], &common].concat(), "row_group_rows"),
        ([&["run", "--batch-rows", "0"][..], &common].concat(), "row_group_rows"),
        (
            [&["run", "--partitions-in-parallel", "0"][..], &common].concat(),
            "partitions_in_parallel",
        ),
        ([&["run", "--fetch-bytes", "1"][..], &common].concat(), "fetch_bytes"),
        ([&["run", "--zstd-level", "99"][..], &common].concat(), "zstd_level"),
        ([&["run", "--audit-window-ms", "0"][..], &common].concat(), "window_ms"),
        ([&["run", "--audit", "maybe"][..], &common].concat(), "--audit"),
        ([&["run", "--staging-grace-ms", "soon"][..], &common].concat(), "--staging-grace-ms"),
        (
            [&["run", "--zookeeper-session-timeout-ms", "x"][..], &common].concat(),
            "--zookeeper-session-timeout-ms",
        ),
        ([&["run", "--bad-records"][..], &common].concat(), "--bad-records"),
        ([&["serve", "--interval", "5 parsecs"][..], &common].concat(), "--interval"),
        ([&["serve", "--interval", "90"][..], &common].concat(), "expected a number with a unit"),
        (vec!["status"], "--store"),
        ([&["run", "--format", "avro"][..], &common].concat(), "--format"),
        ([&["run", "--catalog", "http://x"][..], &common].concat(), "catalog"),
        ([&["run", "--namespace", "a.b"][..], &common].concat(), "namespace"),
        ([&["run", "--target-file-bytes", "100"][..], &common].concat(), "target_file_bytes"),
        ([&["serve", "--compaction-delay", "10"][..], &common].concat(), "--compaction-delay"),
        (
            vec![
                "run",
                "--format",
                "iceberg",
                "--store",
                "s3://bucket/p",
                "--zookeeper",
                "127.0.0.1:1",
                "--registry",
                "http://127.0.0.1:1",
            ],
            "catalog = \"sqlite:///PATH\"",
        ),
    ];
    for (args, needle) in cases {
        let output = loader(&args);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{args:?}: {}", text(&output));
        assert_eq!(stderr.lines().count(), 1, "{args:?}: one line: {stderr}");
        assert!(
            stderr.starts_with("hdfs-loader: ") && stderr.contains(needle),
            "{args:?}: {stderr}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_prints_offsets_lag_and_complete_hours_as_text_and_json() {
    let cluster = Cluster::start(1).await;
    cluster.produce_page_views(50, 120_000).await; // 100 minutes: the first hour completes
    let root = tempfile::tempdir().unwrap();
    let store = format!("file://{}", root.path().display());
    let (zk, registry) = (cluster.zookeeper.clone(), cluster.registry_server.url().to_owned());
    let run_store = store.clone();
    let output = tokio::task::spawn_blocking(move || {
        loader(&["run", "--zookeeper", &zk, "--registry", &registry, "--store", &run_store])
    })
    .await
    .unwrap();
    assert!(output.status.success(), "{}", text(&output));
    assert!(
        String::from_utf8_lossy(&output.stdout).contains(&format!("{TOPIC}/0 ")),
        "{}",
        text(&output)
    );
    cluster.produce_page_views(5, 1).await; // lag

    let zk = cluster.zookeeper.clone();
    let status_store = store.clone();
    let output = tokio::task::spawn_blocking(move || {
        loader(&["status", "--store", &status_store, "--zookeeper", &zk, "--json"])
    })
    .await
    .unwrap();
    assert!(output.status.success(), "{}", text(&output));
    let status: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    let topic = status["topics"].as_array().unwrap().iter().find(|t| t["topic"] == TOPIC).unwrap();
    let partition = &topic["partitions"][0];
    assert_eq!(partition["partition"], 0);
    assert_eq!(partition["rows"], 50);
    let (committed, end) =
        (partition["committed_offset"].as_i64().unwrap(), partition["log_end"].as_i64().unwrap());
    assert!(end > committed && partition["lag"].as_i64() == Some(end - committed), "{partition}");
    assert!(partition["last_commit_ms"].as_i64().unwrap() > 0);
    let hours = topic["hours"].as_array().unwrap();
    assert!(hours.len() >= 2 && hours[0]["complete"] == true, "{hours:?}");
    assert_eq!(hours.last().unwrap()["complete"], false);

    // Text, from the store alone: no log end, no lag.
    let output = loader(&["status", "--store", &store]);
    assert!(output.status.success(), "{}", text(&output));
    let out = String::from_utf8_lossy(&output.stdout);
    assert!(out.contains(&format!("topic {TOPIC}  rows 50")) && out.contains("complete"), "{out}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_loads_new_events_every_interval_and_stops_on_sigterm() {
    let cluster = Cluster::start(1).await;
    cluster.produce_page_views(20, 1).await;
    let root = tempfile::tempdir().unwrap();
    let store_url = format!("file://{}", root.path().display());
    let store = hdfs_loader::store_from_url(&store_url).unwrap();
    let log = root.path().join("serve.log");
    let metrics_addr = format!("127.0.0.1:{}", testkit::process::free_port());
    let mut child = Reaped(
        Command::new(BIN)
            .args([
                "serve",
                "--zookeeper",
                &cluster.zookeeper,
                "--registry",
                cluster.registry_server.url(),
                "--store",
                &store_url,
                "--interval",
                "200ms",
                "--metrics",
                &metrics_addr,
            ])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap(),
    );
    testkit::eventually(Duration::from_secs(30), "the first 20 rows", || async {
        (unique_positions(&store, TOPIC).await.len() == 20).then_some(())
    })
    .await;
    cluster.produce_page_views(15, 1).await;
    testkit::eventually(Duration::from_secs(30), "35 rows, loaded by a later round", || async {
        (unique_positions(&store, TOPIC).await.len() == 35).then_some(())
    })
    .await;
    use testkit::metrics::value;
    let samples = testkit::eventually(Duration::from_secs(30), "35 rows in /metrics", || async {
        let addr = metrics_addr.clone();
        let samples = tokio::task::spawn_blocking(move || {
            testkit::metrics::parse(&testkit::metrics::scrape(&addr))
        })
        .await
        .unwrap();
        (value(&samples, "tributary_loader_rows_committed_total", &[]) == 35.0).then_some(samples)
    })
    .await;
    assert!(value(&samples, "tributary_loader_commits_total", &[]) >= 2.0);
    assert!(value(&samples, "tributary_loader_rounds_total", &[("outcome", "ok")]) >= 2.0);
    assert!(value(&samples, "tributary_loader_last_commit_timestamp_seconds", &[]) > 1.7e9);
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.0.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    let status = tokio::task::spawn_blocking(move || child.0.wait().unwrap()).await.unwrap();
    assert!(status.success(), "{}", std::fs::read_to_string(&log).unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_flags_load_from_a_tls_broker() {
    let pki = testkit::tls::Pki::new("loader test CA");
    let cluster = Cluster::start_tls(1, &pki).await;
    cluster.produce_page_views(40, 30_000).await;
    let root = tempfile::tempdir().unwrap();
    let me = pki.identity("loader");
    let store = format!("file://{}/warehouse", root.path().display());
    let (zk, registry) = (cluster.zookeeper.clone(), cluster.registry_server.url().to_owned());
    let path = |p: &Path| p.to_str().unwrap().to_owned();
    let (ca, cert, key) = (path(pki.ca()), path(&me.cert), path(&me.key));
    let output = tokio::task::spawn_blocking(move || {
        let args = ["run", "--zookeeper", &zk, "--registry", &registry, "--store", &store];
        let tls = ["--tls-ca", &ca, "--tls-cert", &cert, "--tls-key", &key];
        loader(&[&args[..], &tls[..], &["--topics", TOPIC, "--audit", "false", "--json"]].concat())
    })
    .await
    .unwrap();
    assert!(output.status.success(), "{}", text(&output));
    let summary: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(summary["rows"], 40, "{summary}");
    // Without the flags the broker refuses the loader at the handshake: nothing loads.
    let (zk, registry) = (cluster.zookeeper.clone(), cluster.registry_server.url().to_owned());
    let store = format!("file://{}/other", root.path().display());
    let plain = tokio::task::spawn_blocking(move || {
        loader(&["run", "--zookeeper", &zk, "--registry", &registry, "--store", &store])
    })
    .await
    .unwrap();
    assert!(!plain.status.success(), "{}", text(&plain));

    // `serve` serves /metrics over HTTPS with the loader's certificate, to clients with one.
    let port = testkit::process::free_port();
    let store = format!("file://{}/served", root.path().display());
    let (ca, cert, key) = (path(pki.ca()), path(&me.cert), path(&me.key));
    let argv: Vec<String> = [
        "serve",
        "--zookeeper",
        &cluster.zookeeper,
        "--registry",
        cluster.registry_server.url(),
        "--store",
        &store,
        "--interval",
        "200ms",
        "--metrics",
        &format!("127.0.0.1:{port}"),
        "--tls-ca",
        &ca,
        "--tls-cert",
        &cert,
        "--tls-key",
        &key,
        "--tls-client-ca",
        &ca,
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let log = root.path().join("serve.log");
    let _serving = testkit::process::Process::spawn(Path::new(BIN), &argv, port, &log);
    let url = format!("https://127.0.0.1:{port}/metrics");
    let curl = |extra: &[&str]| {
        Command::new("curl").args(["-sS", "--fail", "--cacert", &ca]).args(extra).arg(&url).output()
    };
    assert!(!curl(&[]).unwrap().status.success(), "no client certificate: refused");
    let scraped = curl(&["--cert", &cert, "--key", &key]).unwrap();
    let page = String::from_utf8_lossy(&scraped.stdout);
    assert!(page.contains("tributary_loader_round_duration_seconds"), "{page}");
}

/// A local store on a filesystem that fills (a 4 MiB tmpfs; mounting it needs root): the run
/// fails with the store's error and commits nothing it could not write; once space returns,
/// the next run loads every event exactly once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_local_store_fails_the_run_and_the_next_run_completes_it() {
    let cluster = Cluster::start(1).await;
    let ids = cluster.produce_page_views(3_000, 1_000).await;
    let dir = tempfile::tempdir().unwrap();
    let disk = testkit::disk::Tmpfs::mount(&dir.path().join("disk"), 4 << 20);
    let ballast = disk.path().join("ballast");
    std::fs::write(&ballast, vec![1u8; (4 << 20) - (16 << 10)]).unwrap();
    let store = format!("file://{}/warehouse", disk.path().display());
    let args = [
        "run",
        "--zookeeper",
        &cluster.zookeeper,
        "--registry",
        cluster.registry_server.url(),
        "--store",
        &store,
        "--topics",
        TOPIC,
        "--json",
    ]
    .map(String::from);
    let run = |args: [String; 10]| async move {
        tokio::task::spawn_blocking(move || {
            loader(&args.iter().map(String::as_str).collect::<Vec<_>>())
        })
        .await
        .unwrap()
    };
    let failed = run(args.clone()).await;
    assert!(!failed.status.success(), "a full store fails the run: {}", text(&failed));
    let stderr = String::from_utf8_lossy(&failed.stderr).to_lowercase();
    assert!(stderr.contains("no space") || stderr.contains("full"), "{}", text(&failed));
    eprintln!("full store: {}", String::from_utf8_lossy(&failed.stderr).trim());

    std::fs::remove_file(&ballast).unwrap();
    let completed = run(args).await;
    assert!(completed.status.success(), "{}", text(&completed));
    let rows: i64 = duckdb_rows_per_hour(&disk.path().join("warehouse")).values().sum();
    assert_eq!(rows, ids.len() as i64, "every event once (DuckDB checks rows == distinct ids)");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn format_iceberg_loads_a_table_and_status_shows_its_snapshot_and_files() {
    let cluster = Cluster::start(1).await;
    cluster.produce_page_views(50, 120_000).await; // 100 minutes: two hours at least
    let root = tempfile::tempdir().unwrap();
    let store = format!("file://{}", root.path().display());
    let (zk, registry) = (cluster.zookeeper.clone(), cluster.registry_server.url().to_owned());
    let run_store = store.clone();
    let output = tokio::task::spawn_blocking(move || {
        let args = ["run", "--format", "iceberg", "--zookeeper", &zk, "--registry", &registry];
        loader(&[&args[..], &["--store", &run_store]].concat())
    })
    .await
    .unwrap();
    assert!(output.status.success(), "{}", text(&output));
    assert!(root.path().join("catalog.db").exists(), "the catalog beside the tables");

    let zk = cluster.zookeeper.clone();
    let status_store = store.clone();
    let output = tokio::task::spawn_blocking(move || {
        let args = ["status", "--format", "iceberg", "--zookeeper", &zk, "--json"];
        loader(&[&args[..], &["--store", &status_store]].concat())
    })
    .await
    .unwrap();
    assert!(output.status.success(), "{}", text(&output));
    let status: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    let topic = status["topics"].as_array().unwrap().iter().find(|t| t["topic"] == TOPIC).unwrap();
    assert_eq!(topic["rows"], 50);
    assert!(topic["snapshot"].as_i64().is_some(), "{topic}");
    let hours = topic["hours"].as_array().unwrap();
    assert!(hours.len() >= 2 && hours[0]["complete"] == true, "{hours:?}");
    assert_eq!(topic["files"], hours.iter().map(|h| h["files"].as_u64().unwrap()).sum::<u64>());
    let partition = &topic["partitions"][0];
    assert_eq!(partition["committed_offset"], partition["log_end"], "{partition}");
    assert_eq!(partition["lag"], 0);

    let output = loader(&["status", "--format", "iceberg", "--store", &store]);
    assert!(output.status.success(), "{}", text(&output));
    let out = String::from_utf8_lossy(&output.stdout);
    assert!(
        out.contains(&format!("topic {TOPIC}  rows 50  files")) && out.contains("snapshot"),
        "{out}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn target_file_bytes_rolls_a_tables_files() {
    let cluster = Cluster::start(1).await;
    cluster.produce_page_views(300, 1).await;
    let root = tempfile::tempdir().unwrap();
    let store = format!("file://{}", root.path().display());
    let (zk, registry) = (cluster.zookeeper.clone(), cluster.registry_server.url().to_owned());
    let output = loader(&[
        "run",
        "--zookeeper",
        &zk,
        "--registry",
        &registry,
        "--store",
        &store,
        "--format",
        "iceberg",
        "--batch-rows",
        "16",
        "--target-file-bytes",
        "4096",
    ]);
    assert!(output.status.success(), "{}", text(&output));
    // 300 events of one hour in one range: without the flag, one file.
    let hours = std::fs::read_dir(root.path().join("default").join(TOPIC).join("data")).unwrap();
    let files: usize = hours.map(|h| std::fs::read_dir(h.unwrap().path()).unwrap().count()).sum();
    assert!(files >= 2, "{files} files");
    let output = loader(&["status", "--store", &store, "--format", "iceberg"]);
    let out = String::from_utf8_lossy(&output.stdout);
    assert!(out.contains(&format!("topic {TOPIC}  rows 300")), "{}", text(&output));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn namespace_maintain_and_serve_maintenance_flags_take_effect() {
    let cluster = Cluster::start(1).await;
    let root = tempfile::tempdir().unwrap();
    let store = format!("file://{}", root.path().display());
    let iceberg = ["--format", "iceberg", "--namespace", "events", "--store", &store];
    let (zk, registry) = (cluster.zookeeper.clone(), cluster.registry_server.url().to_owned());
    let load = [&["--zookeeper", &zk, "--registry", &registry][..], &iceberg].concat();
    let owned = |args: &[&str]| args.iter().map(|a| a.to_string()).collect::<Vec<_>>();
    let run = owned(&[&["run"][..], &load].concat());
    for _ in 0..3 {
        cluster.produce_page_views(10, 1).await;
        let args = run.clone();
        let output = tokio::task::spawn_blocking(move || {
            loader(&args.iter().map(String::as_str).collect::<Vec<_>>())
        })
        .await
        .unwrap();
        assert!(output.status.success(), "{}", text(&output));
    }
    // --namespace: the table is `events.page-view`, under `events/`.
    assert!(root.path().join("events").join(TOPIC).join("metadata").is_dir());
    let output = loader(&[&["status"][..], &iceberg].concat());
    let out = String::from_utf8_lossy(&output.stdout);
    assert!(out.contains(&format!("topic {TOPIC}  rows 30")), "{}", text(&output));
    let maintained = |extra: &[&str]| {
        let output = loader(&[&["maintain", "--json"][..], &iceberg, extra].concat());
        assert!(output.status.success(), "{}", text(&output));
        let done: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
        done.as_array()
            .unwrap()
            .iter()
            .find(|t| t["table"] == format!("events.{TOPIC}"))
            .cloned()
            .unwrap()
    };
    // The three runs' files are in one hour, closed long ago: compaction makes them one,
    // unless --compaction-delay says the hour is still open.
    let done = maintained(&["--compaction-delay", "100000h"]);
    assert_eq!(done["compacted"]["hours"], 0, "{done}");
    let done = maintained(&[]);
    let compacted = &done["compacted"];
    assert_eq!(
        (compacted["files_removed"].as_u64(), compacted["files_added"].as_u64()),
        (Some(3), Some(1)),
        "{done}"
    );
    let output = loader(&[&["status"][..], &iceberg].concat());
    assert!(String::from_utf8_lossy(&output.stdout).contains(&format!("topic {TOPIC}  rows 30")));
    // The default age keeps the four snapshots (three runs', the compaction's); 1ms expires
    // all but the current one, and text output says so too.
    assert_eq!(done["snapshots_expired"], 0);
    let done = maintained(&["--snapshot-max-age", "1ms"]);
    assert_eq!(
        (done["snapshots_expired"].as_u64(), done["snapshots_kept"].as_u64()),
        (Some(3), Some(1))
    );
    let output = loader(&[&["maintain"][..], &iceberg].concat());
    assert!(
        String::from_utf8_lossy(&output.stdout)
            .contains(&format!("events.{TOPIC}  snapshots expired 0  kept 1")),
        "{}",
        text(&output)
    );

    // serve --maintenance-interval/--snapshot-max-age: its rounds expire what they commit.
    cluster.produce_page_views(10, 1).await;
    let log = root.path().join("serve.log");
    let serve = owned(
        &[
            &["serve"][..],
            &load,
            &[
                "--interval",
                "200ms",
                "--maintenance-interval",
                "300ms",
                "--snapshot-max-age",
                "1ms",
                "--compaction-delay",
                "1ms",
            ],
        ]
        .concat(),
    );
    let mut child = Reaped(
        Command::new(BIN)
            .args(&serve)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap(),
    );
    testkit::eventually(Duration::from_secs(30), "serve to load and maintain", || async {
        let log = std::fs::read_to_string(&log).unwrap_or_default();
        // The round's snapshot, and the compaction's that merged its file with the hour's.
        log.lines()
            .any(|l| {
                l.contains("maintained")
                    && l.contains("compacted_hours=1")
                    && l.contains("expired=2")
            })
            .then_some(())
    })
    .await;
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.0.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    assert!(child.0.wait().unwrap().success());
    assert_eq!(maintained(&[])["snapshots_kept"], 1, "serve expired the older snapshot");
}

#[test]
fn the_bench_loads_one_log_in_each_format_it_is_given() {
    let bench = env!("CARGO_BIN_EXE_hdfs-loader-bench");
    let broker = Path::new(bench).with_file_name("broker");
    assert!(broker.is_file(), "no broker beside {bench}: cargo build --workspace");
    let run = |format: &str| {
        let output = Command::new(bench)
            .args(["--events", "2000", "--partitions", "2", "--format", format])
            .args(["--rounds", "4", "--hours", "24"])
            .stdin(Stdio::null())
            .output()
            .unwrap();
        assert!(output.status.success(), "{}", text(&output));
        String::from_utf8_lossy(&output.stdout).into_owned()
    };
    let both = run("parquet,iceberg");
    for format in ["Parquet", "Iceberg"] {
        let line = format!("{format}: loaded 2000 events over 2 partitions");
        assert!(both.contains(&line), "{line:?} missing:\n{both}");
    }
    assert!(both.contains("µs CPU/event"), "{both}");
    let iceberg = run("iceberg");
    assert!(
        iceberg.contains("Iceberg: loaded 2000") && !iceberg.contains("Parquet: loaded"),
        "{iceberg}"
    );
    // A day of events in four rounds: each hour has a file per partition, and compaction
    // leaves one per hour (all are below the target), every row and id kept.
    assert!(both.contains("in 4 round(s)"), "{both}");
    assert!(
        iceberg.contains("files per hour before: mean 2.0, most 2 (48 files, 24 hours); after: mean 1.0, most 1 (24 files, 24 hours); rows and distinct ids unchanged (2000)"),
        "{iceberg}"
    );
    assert!(!both.contains("Parquet compaction"), "{both}");

    // --store (each format under its own name), --broker-bin, --partitions-in-parallel.
    let dir = tempfile::tempdir().unwrap();
    let store = format!("file://{}/Warehouse", dir.path().display());
    let output = Command::new(bench)
        .args(["--events", "500", "--partitions", "2", "--partitions-in-parallel", "1"])
        .args(["--format", "parquet,iceberg", "--store", &store, "--broker-bin"])
        .arg(&broker)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(output.status.success(), "{}", text(&output));
    assert!(dir.path().join("Warehouse/parquet").join(TOPIC).is_dir(), "{}", text(&output));
    assert!(dir.path().join("Warehouse/iceberg/catalog.db").is_file(), "{}", text(&output));
    let output = Command::new(bench)
        .args(["--events", "10", "--broker-bin", "/no/such/broker"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(!output.status.success());
    assert!(
        String::from_utf8_lossy(&output.stderr).contains("/no/such/broker"),
        "{}",
        text(&output)
    );
}

/// A loader process killed when its test ends, passed or failed: a failed assertion leaves no
/// `serve` running.
struct Reaped(std::process::Child);

impl Drop for Reaped {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}
