//! `tributary demo` as a new user runs it: the real binary, for a minute, then its summary.

use std::process::Command;

#[test]
fn a_one_minute_demo_loads_every_acknowledged_event_and_audits_every_window_complete() {
    let dir = tempfile::tempdir().unwrap();
    let summary_path = dir.path().join("summary.json");
    let dashboard = format!("127.0.0.1:{}", testkit::process::free_port());
    let output = Command::new(env!("CARGO_BIN_EXE_tributary"))
        .args(["demo", "--duration", "60s", "--dashboard", &dashboard])
        .args(["--rate", "300", "--loader-interval", "20s", "--data-dir"])
        .arg(dir.path().join("demo"))
        .arg("--summary-json")
        .arg(&summary_path)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{}\nstdout:\n{stdout}\nstderr:\n{stderr}", output.status);
    // What a user sees: where things are, status lines while it runs, and the summary.
    let dashboard_line = format!("dashboard http://{dashboard}/");
    for expected in [dashboard_line.as_str(), "agents", "── summary", "query it:"] {
        assert!(stdout.contains(expected), "{expected:?} missing from:\n{stdout}");
    }
    let summary: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&summary_path).unwrap()).unwrap();
    let number = |key: &str| summary[key].as_u64().unwrap_or_else(|| panic!("{key} in {summary}"));
    let windows = &summary["windows"];
    let verdicts =
        |key: &str| windows[key].as_u64().unwrap_or_else(|| panic!("{key} in {summary}"));

    // --rate 300: two frontends at 300 events/s for a minute.
    let accepted = number("accepted");
    assert!((24_000..=48_000).contains(&accepted), "--rate 300 for 60 s: {summary}");
    // --loader-interval 20s: the loader committed rows while the demo ran, not only at the end.
    let loaded_while_running = stdout
        .lines()
        .take_while(|line| !line.contains("--duration reached"))
        .filter_map(|line| line.split("loader ").nth(1)?.split(' ').next()?.parse::<u64>().ok())
        .any(|rows| rows > 0);
    assert!(loaded_while_running, "no loader run before the drain:\n{stdout}");
    assert_eq!(number("acknowledged"), number("accepted"), "{summary}");
    assert!(number("mirrored") > 0, "{summary}");
    // Every tier counts events: the mirror copied at least what the agents acknowledged.
    assert!(number("mirrored_events") >= number("acknowledged"), "{summary}");
    assert_eq!(number("distinct_ids_loaded"), number("acknowledged"), "{summary}");
    assert!(number("loaded_rows") >= number("distinct_ids_loaded"), "{summary}");
    assert!(verdicts("complete") >= 6, "a minute holds at least 6 windows of 10 s: {summary}");
    assert_eq!(verdicts("loss"), 0, "{summary}\n{stdout}");
    assert_eq!(verdicts("open"), 0, "{summary}");
    if number("loaded_rows") > number("distinct_ids_loaded") {
        assert!(verdicts("duplication") > 0, "duplicates must be reported: {summary}");
    } else {
        assert_eq!(verdicts("duplication"), 0, "{summary}\n{stdout}");
    }
    // The query the summary prints is ready to run (with pyiceberg and DuckDB: the Python of
    // the environment scripts/test.sh makes), and counts what was loaded.
    let query = stdout
        .lines()
        .find_map(|line| line.trim_start().strip_prefix("query it:"))
        .expect("the summary prints a query")
        .trim();
    let python = std::env::var("TRIBUTARY_ICEBERG_PYTHON").expect(
        "TRIBUTARY_ICEBERG_PYTHON: the Python with pyiceberg and DuckDB that scripts/test.sh sets",
    );
    let run = query.strip_prefix("python3 ").expect("a python3 command");
    let read = Command::new("sh").args(["-c", &format!("{python} {run}")]).output().unwrap();
    let result = String::from_utf8_lossy(&read.stdout);
    assert!(read.status.success(), "{query}\n{}", String::from_utf8_lossy(&read.stderr));
    assert!(result.contains("events") && result.contains("hour"), "{result}");
    let loaded = number("loaded_rows");
    let counted: u64 = result
        .lines()
        .filter_map(|line| {
            let cells: Vec<&str> = line.split('│').map(str::trim).collect();
            cells.get(3)?.parse::<u64>().ok()
        })
        .sum();
    // It counts the page views, one of the demo's topics.
    assert!(counted > 0 && counted <= loaded, "{loaded} rows loaded in all:\n{result}");
}

#[test]
fn a_data_dir_the_demo_did_not_make_is_refused_and_kept() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("precious"), "x").unwrap();
    let output = Command::new(env!("CARGO_BIN_EXE_tributary"))
        .args(["demo", "--duration", "1s", "--data-dir"])
        .arg(dir.path())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("was not made by `tributary demo`"), "{stderr}");
    assert!(dir.path().join("precious").exists());
    for bad in [["--rate", "0"], ["--duration", "soon"]] {
        let output =
            Command::new(env!("CARGO_BIN_EXE_tributary")).arg("demo").args(bad).output().unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{bad:?}: {stderr}");
        assert_eq!(stderr.trim_end().lines().count(), 1, "{bad:?}: {stderr}");
    }
}

#[test]
fn a_tls_demo_speaks_only_tls_and_balances_its_books() {
    use std::io::BufRead;
    let dir = tempfile::tempdir().unwrap();
    let summary_path = dir.path().join("summary.json");
    let mut demo = Command::new(env!("CARGO_BIN_EXE_tributary"))
        .args(["demo", "--tls", "--duration", "20s", "--dashboard", "127.0.0.1:0"])
        .args(["--rate", "200", "--loader-interval", "10s", "--data-dir"])
        .arg(dir.path().join("demo"))
        .arg("--summary-json")
        .arg(&summary_path)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut lines = std::io::BufReader::new(demo.stdout.take().unwrap()).lines();
    let mut head = String::new();
    let broker = loop {
        let line = lines.next().expect("the demo says where its brokers are").unwrap();
        head.push_str(&line);
        head.push('\n');
        if let Some(list) = line.trim_start().strip_prefix("live-a    brokers ") {
            break list.split(',').next().unwrap().trim().to_owned();
        }
    };
    assert!(head.contains("mutual TLS between every service"), "{head}");
    assert!(head.contains("?token="), "{head}");
    // A plaintext client is refused by the brokers; the demo's CA and a certificate it made
    // are let in.
    let trib = std::path::Path::new(env!("CARGO_BIN_EXE_tributary")).with_file_name("trib");
    let plain =
        Command::new(&trib).args(["topics", "list", "--brokers", &broker]).output().unwrap();
    assert!(!plain.status.success());
    assert!(String::from_utf8_lossy(&plain.stderr).contains("answered with TLS"), "{plain:?}");
    let pki = dir.path().join("demo/pki");
    let certified = Command::new(&trib)
        .arg("--tls-ca")
        .arg(pki.join("ca.crt"))
        .arg("--tls-cert")
        .arg(pki.join("operator.crt"))
        .arg("--tls-key")
        .arg(pki.join("operator.key"))
        .args(["topics", "list", "--brokers", &broker])
        .output()
        .unwrap();
    assert!(certified.status.success(), "{certified:?}");
    let rest: Vec<String> = lines.map(Result::unwrap).collect();
    assert!(demo.wait().unwrap().success(), "{}", rest.join("\n"));
    let summary: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&summary_path).unwrap()).unwrap();
    let number = |key: &str| summary[key].as_u64().unwrap_or_else(|| panic!("{key} in {summary}"));
    assert!(number("acknowledged") > 1000, "{summary}");
    assert_eq!(number("acknowledged"), number("accepted"), "{summary}");
    assert_eq!(number("distinct_ids_loaded"), number("acknowledged"), "{summary}");
    assert_eq!(summary["windows"]["loss"], 0, "{summary}");
    assert_eq!(summary["windows"]["open"], 0, "{summary}");
    assert!(summary["dashboard_url"].as_str().unwrap().starts_with("https://"), "{summary}");
}
