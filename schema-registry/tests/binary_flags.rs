//! The `schema-registry` binary: flags over the config file, one-line errors for bad values,
//! shipped schemas registered at start, and a clean stop on SIGTERM.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

use serde_json::json;
use testkit::registry::{API, RegistryProcess};

const BINARY: &str = env!("CARGO_BIN_EXE_schema-registry");

/// Runs the binary with `args`; returns its exit code and stderr.
fn run_failing(args: &[&str]) -> (i32, String) {
    let output = Command::new(BINARY)
        .args(args)
        .env("RUST_LOG", "off")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let code = output.status.code().expect("exited, not killed");
    (code, String::from_utf8(output.stderr).unwrap())
}

#[track_caller]
fn assert_one_line_error(args: &[&str], mentions: &str) {
    let (code, stderr) = run_failing(args);
    assert_ne!(code, 0, "{args:?} succeeded");
    assert_eq!(stderr.trim_end().lines().count(), 1, "{args:?}: {stderr:?}");
    assert!(stderr.starts_with("schema-registry: "), "{stderr:?}");
    assert!(stderr.contains(mentions), "{args:?}: {stderr:?} lacks {mentions:?}");
}

#[test]
fn bad_flags_are_one_line_errors() {
    assert_one_line_error(&["--port", "eighty"], "--port");
    assert_one_line_error(&["--port", "70000"], "--port");
    assert_one_line_error(&["--colour", "blue"], "--colour");
    assert_one_line_error(&["--host", ""], "host");
    assert_one_line_error(
        &["--host", "no.such.host.invalid", "--port", "0"],
        "no.such.host.invalid",
    );
}

#[test]
fn bad_config_files_are_one_line_errors() {
    let dir = tempfile::tempdir().unwrap();
    let write = |name: &str, text: &str| {
        let path = dir.path().join(name);
        std::fs::write(&path, text).unwrap();
        path.to_str().unwrap().to_owned()
    };
    let wrong_type = write("a.toml", "host = \"127.0.0.1\"\nport = \"eighty\"\n");
    assert_one_line_error(&["--config", &wrong_type], "a.toml, line 2 `port = \"eighty\"`");
    let bad_level = write("b.toml", "compatibility = \"SIDEWAYS\"\n");
    assert_one_line_error(&["--config", &bad_level], "SIDEWAYS");
    let unknown_key = write("c.toml", "colour = \"blue\"\n");
    assert_one_line_error(&["--config", &unknown_key], "colour");
    let tiny_limit = write("d.toml", "max_request_bytes = 10\n");
    assert_one_line_error(&["--config", &tiny_limit], "max_request_bytes");
    let not_toml = write("e.toml", "[[[\n");
    assert_one_line_error(&["--config", &not_toml], "e.toml, line 1");
    assert_one_line_error(&["--config", "/no/such/file.toml"], "/no/such/file.toml");
}

#[tokio::test]
async fn flags_override_the_config_file_and_the_rest_of_it_applies() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("registry.toml");
    // host, port and data_dir here are unusable; the fixture's flags must win over them.
    std::fs::write(
        &config,
        "host = \"256.0.0.1\"\nport = 1\ndata_dir = \"/proc/no-such-dir\"\ncompatibility = \"FULL_TRANSITIVE\"\n",
    )
    .unwrap();
    let registry =
        RegistryProcess::start_with_args(BINARY, &["--config", config.to_str().unwrap()]);
    assert_eq!(
        API.get(&format!("{}/config", registry.url())).await.expect_ok(),
        &json!({ "compatibilityLevel": "FULL_TRANSITIVE" })
    );
    assert!(registry.data_dir().join("registry.log").exists());
}

#[tokio::test]
async fn register_schemas_flag_registers_the_shipped_schemas_once() {
    let schemas = events::schemas::source_dir();
    let schemas = schemas.to_str().expect("a UTF-8 path");
    let mut registry = RegistryProcess::start_with_args(BINARY, &["--register-schemas", schemas]);
    let subjects = ["_audit-value", "click-value", "page-view-value", "search-value"];
    assert_eq!(
        API.get(&format!("{}/subjects", registry.url())).await.expect_ok(),
        &json!(subjects)
    );
    let mut ids = Vec::new();
    for subject in subjects {
        let latest =
            API.get(&format!("{}/subjects/{subject}/versions/latest", registry.url())).await;
        assert_eq!(latest.expect_ok()["version"], 1);
        ids.push(latest.body["id"].clone());
    }
    registry.restart();
    for (subject, id) in subjects.iter().zip(&ids) {
        let latest = API.get(&format!("{}/subjects/{subject}/versions", registry.url())).await;
        assert_eq!(latest.expect_ok(), &json!([1]), "registering again added a version");
        let latest =
            API.get(&format!("{}/subjects/{subject}/versions/latest", registry.url())).await;
        assert_eq!(&latest.expect_ok()["id"], id);
    }
}

#[test]
fn usage_errors_exit_2_and_failures_exit_1() {
    let dir = tempfile::tempdir().unwrap();
    let file = testkit::process::config_file(dir.path(), "port = 0\ncolour = \"blue\"\n");
    let error = testkit::process::usage_error(BINARY.as_ref(), &["--config", &file]);
    assert!(error.contains("line 2") && error.contains("colour"), "{error}");
    let error = testkit::process::usage_error(BINARY.as_ref(), &["--max-concurrent-requests", "0"]);
    assert!(error.contains("max_concurrent_requests"), "{error}");
    let (code, _) = run_failing(&["--host", "no.such.host.invalid", "--port", "0"]);
    assert_eq!(code, 1, "a host that cannot be bound is a failure, not a usage error");
}

#[tokio::test]
async fn metrics_count_requests_and_schemas_for_a_scraper() {
    let schemas = events::schemas::source_dir();
    let registry = RegistryProcess::start_with_args(
        BINARY,
        &["--register-schemas", schemas.to_str().unwrap()],
    );
    for _ in 0..3 {
        API.get(&format!("{}/subjects", registry.url())).await.expect_ok();
    }
    API.get(&format!("{}/subjects/nobody/versions", registry.url())).await;
    let addr = registry.url().trim_start_matches("http://").to_owned();
    let samples = testkit::metrics::parse(&testkit::metrics::scrape(&addr));
    use testkit::metrics::value;
    let ok = [("method", "GET"), ("route", "/subjects"), ("status", "200")];
    assert_eq!(value(&samples, "tributary_registry_http_requests_total", &ok), 3.0);
    let missing = [("route", "/subjects/{subject}/versions"), ("status", "404")];
    assert_eq!(value(&samples, "tributary_registry_http_requests_total", &missing), 1.0);
    assert!(value(&samples, "tributary_registry_http_request_duration_seconds_count", &[]) >= 4.0);
    assert_eq!(value(&samples, "tributary_registry_schemas", &[]), 4.0);
    assert_eq!(value(&samples, "tributary_registry_subjects", &[]), 4.0);
}

#[test]
fn sigterm_stops_the_service_cleanly() {
    let dir = tempfile::tempdir().unwrap();
    let mut child = Command::new(BINARY)
        .args(["--port", "0", "--data-dir"])
        .arg(dir.path())
        .env("RUST_LOG", "off")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
    assert!(line.starts_with("schema-registry listening on http://127.0.0.1:"), "{line:?}");
    let killed = Command::new("kill").args(["-TERM", &child.id().to_string()]).status().unwrap();
    assert!(killed.success());
    let status = child.wait().unwrap();
    assert!(status.success(), "{status}");
}

#[test]
fn a_second_registry_on_a_data_dir_in_use_exits_with_one_line() {
    let registry = RegistryProcess::start(BINARY);
    let data_dir = registry.data_dir();
    let args = ["--port", "0", "--data-dir", data_dir.to_str().unwrap()];
    assert_one_line_error(&args, "another registry process has this log open");
    let (_, stderr) = run_failing(&args);
    assert_eq!(stderr.matches("another registry").count(), 1, "{stderr:?}");
}
