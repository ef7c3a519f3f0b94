//! `tributary-bench --quick` as a smoke test: every system starts, and every workload moves
//! exactly the messages it should. Speed is not checked here; the full run's report is.

use std::process::Command;

#[test]
fn quick_run_moves_exactly_n_messages_through_every_system() {
    let bench = env!("CARGO_BIN_EXE_tributary-bench");
    // `cargo test --workspace` builds the broker binary beside this one.
    let broker = std::path::Path::new(bench).with_file_name("broker");
    assert!(
        broker.is_file(),
        "no broker binary at {}: build it with cargo build -p broker",
        broker.display()
    );
    let out = tempfile::tempdir().unwrap();
    let run = Command::new(bench)
        .args(["--quick", "--messages", "5000", "--out"])
        .arg(out.path())
        .arg("--broker-bin")
        .arg(&broker)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(run.status.success(), "{stderr}");
    let results: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.path().join("results.json")).unwrap()).unwrap();
    let systems = results["systems"].as_array().unwrap();
    let names: Vec<&str> = systems.iter().map(|s| s["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["tributary", "tributary-write", "redis", "nats", "rabbitmq", "activemq"]);
    for system in systems {
        let name = &system["name"];
        assert!(system["error"].is_null(), "{name}: {}\n{stderr}", system["error"]);
        for step in ["produce_single", "consume_single", "produce_batch", "consume_batch"] {
            assert_eq!(system[step]["messages"], 5000, "{name} {step}");
            assert_eq!(system[step]["bytes"], 5000 * 200, "{name} {step}");
        }
        assert!(system["latency"]["messages"].as_u64().unwrap() > 0, "{name}");
    }
    assert_eq!(results["log_growth"].as_array().unwrap().len(), 2, "{stderr}");
    let report = std::fs::read_to_string(out.path().join("report.md")).unwrap();
    assert!(report.contains("| tributary |") && report.contains("| tributary-write |"));
    let svg = std::fs::read_to_string(out.path().join("throughput.svg")).unwrap();
    assert!(svg.starts_with("<svg") && svg.contains("rabbitmq"));
}

/// Runs `tributary-bench` with `args` and the broker built beside it, writing to a new
/// directory: that directory (its `results.json` read) once the run succeeded.
fn bench_run(args: &[&str]) -> (tempfile::TempDir, serde_json::Value) {
    let bench = env!("CARGO_BIN_EXE_tributary-bench");
    let broker = std::path::Path::new(bench).with_file_name("broker");
    let out = tempfile::tempdir().unwrap();
    let run = Command::new(bench)
        .args(args)
        .arg("--broker-bin")
        .arg(&broker)
        .arg("--out")
        .arg(out.path())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(run.status.success(), "{stderr}");
    let results: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.path().join("results.json")).unwrap()).unwrap();
    (out, results)
}

/// `tributary-bench replication`, small: every flag shows in what it measured and reports.
#[test]
fn a_small_replication_run_reports_what_its_flags_asked_for() {
    let (out, results) = bench_run(&[
        "replication",
        "--messages",
        "20000",
        "--message-bytes",
        "100",
        "--batch",
        "10",
        "--rounds",
        "2",
        "--kills",
        "2",
        "--rate",
        "200",
        "--session-timeout-ms",
        "1000",
    ]);
    assert_eq!(results["messages"], 20000);
    assert_eq!(results["message_bytes"], 100);
    assert_eq!(results["batch"], 10);
    assert_eq!(results["rf1_acks1"].as_array().unwrap().len(), 2);
    assert_eq!(results["rf3_acks_all"].as_array().unwrap().len(), 2);
    // The idempotent producer's rounds, and their ratio to plain acks all.
    assert_eq!(results["rf3_idempotent"].as_array().unwrap().len(), 2);
    assert!(results["idempotent_ratio"].as_f64().unwrap() > 0.0, "{results}");
    assert_eq!(results["session_timeout_ms"], 1000);
    let failovers = results["failovers_ms"].as_array().unwrap();
    assert_eq!(failovers.len(), 2);
    // A leader's partitions move once its 1 s session has expired, not before.
    assert!(failovers.iter().all(|f| f.as_f64().unwrap() >= 1000.0), "{failovers:?}");
    assert!(results["acknowledged"].as_u64().unwrap() > 0);
    assert_eq!(results["lost"], 0);
    let report = std::fs::read_to_string(out.path().join("report.md")).unwrap();
    assert!(report.contains("session timeout 1000 ms") && report.contains("Ratio"), "{report}");
    assert!(report.contains("Idempotent / plain"), "{report}");
}

/// `tributary-bench transactions`, small: confluent-kafka's producers against three brokers,
/// every flag shown in what it measured and reports.
#[test]
fn a_small_transactions_run_reports_what_its_flags_asked_for() {
    let (out, results) = bench_run(&[
        "transactions",
        "--records",
        "4000",
        "--message-bytes",
        "100",
        "--producers",
        "2",
        "--per-transaction",
        "50",
        "--rounds",
        "2",
    ]);
    assert_eq!(results["records"], 4000);
    assert_eq!(results["message_bytes"], 100);
    assert_eq!(results["producers"], 2);
    assert_eq!(results["per_transaction"], 50);
    for mode in ["plain", "idempotent", "transactional"] {
        let rates = results[mode].as_array().unwrap();
        assert_eq!(rates.len(), 2, "{mode}: {results}");
        assert!(rates.iter().all(|r| r.as_f64().unwrap() > 0.0), "{mode}: {results}");
    }
    assert_eq!(results["failed_deliveries"], 0);
    let report = std::fs::read_to_string(out.path().join("report.md")).unwrap();
    assert!(report.contains("2 confluent-kafka producers, 4000 records of 100 bytes"), "{report}");
    assert!(report.contains("transactional, 50 records per transaction"), "{report}");
}

/// `tributary-bench pipeline`, small: the real `tributary up` deployment (the debug binaries
/// `cargo test --workspace` builds), two short steps, every flag shown in what it measured,
/// every event of both steps through every tier to Parquet, and no audit window in loss.
#[test]
fn a_small_pipeline_run_carries_every_event_to_parquet() {
    let bench = env!("CARGO_BIN_EXE_tributary-bench");
    let bin_dir = std::path::Path::new(bench).parent().unwrap();
    for binary in ["tributary", "broker", "frontend-agent", "mirror", "hdfs-loader", "audit"] {
        assert!(
            bin_dir.join(binary).is_file(),
            "no {binary} beside {bench}: cargo build --workspace"
        );
    }
    let (out, work) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    // Below the ephemeral range; a block some other process holds a port of (the bench checks
    // every one first) is passed over for the next.
    let attempt = |base: u16| {
        Command::new(bench)
            .args(["pipeline", "--rates", "1500,3000", "--step", "6s", "--all-steps"])
            .args(["--loader-interval", "2s", "--audit-window", "4s", "--replication-factor", "2"])
            .args(["--base-port", &base.to_string(), "--drain-max", "60s"])
            .arg("--bin-dir")
            .arg(bin_dir)
            .arg("--work-dir")
            .arg(work.path())
            .arg("--out")
            .arg(out.path())
            .output()
            .unwrap()
    };
    let mut run = attempt(28_500);
    for base in [25_500, 22_500] {
        if run.status.success() || !String::from_utf8_lossy(&run.stderr).contains("are in use") {
            break;
        }
        run = attempt(base);
    }
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(run.status.success(), "{stderr}");
    let results: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.path().join("results.json")).unwrap()).unwrap();
    assert_eq!(results["step_seconds"], 6.0);
    assert_eq!(results["loader_interval_seconds"], 2.0);
    assert_eq!(results["replication_factor"], 2);
    let steps = results["steps"].as_array().unwrap();
    let offered: Vec<u64> = steps.iter().map(|s| s["offered"].as_u64().unwrap()).collect();
    assert_eq!(offered, [1500, 3000], "{stderr}");
    for step in steps {
        let accepted = step["tiers"][0].as_u64().unwrap();
        let wanted = step["offered"].as_u64().unwrap() * 6;
        // The simulator paces itself on a busy 2-core machine: most of the offered events, not
        // an exact rate (that is the benchmark's to measure); what is accepted must all arrive.
        assert!(accepted * 100 >= wanted * 90, "accepted {accepted} of {wanted}\n{stderr}");
        assert!(step["drain_seconds"].is_f64(), "not drained: {step}\n{stderr}");
        assert!(step["visible_samples"].as_u64().unwrap() > 0, "{step}");
        assert!(step["parquet_ms"].is_array(), "{step}");
        let processes = step["processes"].as_object().unwrap();
        for name in ["agent-live-a", "mirror", "loader", "simulator-live-b", "zookeeper"] {
            assert!(processes[name]["cpu_seconds"].as_f64().unwrap() > 0.0, "{name}: {step}");
            assert!(processes[name]["rss_peak_bytes"].as_u64().unwrap() > 1 << 20, "{name}");
        }
    }
    let topology = std::fs::read_to_string(out.path().join("topology.toml")).unwrap();
    assert!(topology.contains("default_replication_factor = 2"), "{topology}");
    // --work-dir held the deployment; --bin-dir named its binaries.
    assert!(work.path().join("run/logs/agent-live-a.log").is_file(), "{stderr}");
    assert!(topology.contains(&format!("dir = \"{}\"", bin_dir.display())), "{topology}");
    assert!(topology.contains("interval = \"2000ms\""), "{topology}");
    assert_eq!(results["verdicts"]["loss"], 0, "{stderr}");
    assert!(results["verdicts"]["complete"].as_u64().unwrap() > 0, "{stderr}");
    // The report says the sustained rate the results hold: the highest step with no shortfall.
    // Which step that is, is the benchmark's to measure: on a busy 2-core machine the
    // simulators' pacing fell short of 97 % of 3000/s once (2896/s), and 1500/s was sustained.
    let kept_up = |s: &&serde_json::Value| s["shortfalls"].as_array().unwrap().is_empty();
    let sustained = steps.iter().filter(kept_up).map(|s| s["offered"].as_u64().unwrap()).max();
    let report = std::fs::read_to_string(out.path().join("report.md")).unwrap();
    let svg = std::fs::read_to_string(out.path().join("throughput.svg")).unwrap();
    assert!(svg.starts_with("<svg"), "{svg}");
    match sustained {
        Some(rate) => {
            assert!(report.contains(&format!("**Sustained: {rate} events/s**")), "{report}");
            assert!(svg.contains(&format!("sustained {rate}/s")), "{svg}");
        }
        None => assert!(report.contains("**No step was kept up.**"), "{report}"),
    }

    // --render writes the same report again from results.json, running nothing.
    let again = tempfile::tempdir().unwrap();
    let render = Command::new(bench)
        .args(["pipeline", "--render"])
        .arg(out.path().join("results.json"))
        .arg("--out")
        .arg(again.path())
        .output()
        .unwrap();
    assert!(render.status.success(), "{}", String::from_utf8_lossy(&render.stderr));
    assert_eq!(std::fs::read_to_string(again.path().join("report.md")).unwrap(), report);
    // A --bin-dir without the binaries is refused, naming what is missing.
    let missing = Command::new(bench)
        .args(["pipeline", "--base-port", "28500", "--bin-dir"])
        .arg(again.path())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&missing.stderr);
    assert!(!missing.status.success() && stderr.contains("tributary is missing"), "{stderr}");
}

/// `tributary-bench tiered`, small: its flags show in what it measured and reports.
#[test]
fn a_small_tiered_run_reports_what_its_flags_asked_for() {
    let (out, results) = bench_run(&[
        "tiered",
        "--history-gib",
        "0.03125",
        "--message-bytes",
        "500",
        "--probe-seconds",
        "1",
        "--upload-bytes-per-s",
        "4000000",
    ]);
    assert_eq!(results["message_bytes"], 500);
    let history = results["history_bytes"].as_u64().unwrap();
    assert!(history >= 32 << 20, "{results}");
    assert_eq!(results["segment_bytes"], 1 << 20);
    // The throttle holds: 4 MB/s of uploads at most.
    let (uploaded, seconds) =
        (results["uploaded_bytes"].as_f64().unwrap(), results["upload_seconds"].as_f64().unwrap());
    assert!(uploaded > 0.0 && uploaded / seconds <= 4_000_000.0, "{results}");
    for read in
        ["read_local_mib_per_s", "read_remote_cold_mib_per_s", "read_remote_cached_mib_per_s"]
    {
        assert!(results[read].as_f64().unwrap() > 0.0, "{read}: {results}");
    }
    assert!(results["probe_quiet_p99_ms"].as_f64().unwrap() > 0.0, "{results}");
    let report = std::fs::read_to_string(out.path().join("report.md")).unwrap();
    assert!(report.contains("store, cold") && report.contains("1 MiB segments"), "{report}");
}

/// `scripts/compaction-bench.sh`, small, on the debug `broker` and `trib` `cargo test
/// --workspace` builds: every argument shows in what it reports, and the cleaner frees disk.
#[test]
fn a_small_compaction_bench_reports_what_its_arguments_asked_for() {
    let bench = env!("CARGO_BIN_EXE_tributary-bench");
    let bin_dir = std::path::Path::new(bench).parent().unwrap();
    for binary in ["broker", "trib"] {
        assert!(
            bin_dir.join(binary).is_file(),
            "no {binary} beside {bench}: cargo build --workspace"
        );
    }
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../scripts/compaction-bench.sh");
    let run = Command::new(script)
        .args(["40000", "1000", "100", "1048576"])
        .env("TRIBUTARY_BIN", bin_dir)
        .output()
        .unwrap();
    let (stdout, stderr) =
        (String::from_utf8_lossy(&run.stdout), String::from_utf8_lossy(&run.stderr));
    assert!(run.status.success(), "{stdout}\n{stderr}");
    assert!(
        stdout.contains(
            "40,000 records of about 200 bytes over 1,000 keys in batches of 100, 1 MiB segments"
        ),
        "{stdout}"
    );
    let number = |after: &str| -> f64 {
        let rest = stdout.split(after).nth(1).unwrap_or_else(|| panic!("no {after:?}: {stdout}"));
        rest.trim_start().split(' ').next().unwrap().replace(',', "").parse().unwrap()
    };
    assert!(number("cleaner:") > 0.0, "segments cleaned: {stdout}");
    let (before, after) = (number("disk:"), number("MiB before,"));
    assert!(after * 2.0 < before, "{stdout}");
}
