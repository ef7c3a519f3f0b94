//! The alert rules `tributary up` gives Prometheus, checked and unit-tested by Prometheus'
//! own `promtool`.

use std::path::Path;
use std::process::Command;

/// `promtool ARGS prometheus/FILE`, which must succeed: its standard output.
fn promtool(args: &[&str], file: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("prometheus").join(file);
    let output = Command::new("promtool")
        .args(args)
        .arg(&path)
        .output()
        .expect("promtool runs (Debian's prometheus package)");
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stdout}{stderr}");
    stdout
}

#[test]
fn promtool_accepts_the_alert_rules() {
    let stdout = promtool(&["check", "rules"], "alerts.yml");
    assert!(stdout.contains("SUCCESS: 12 rules found"), "{stdout}");
}

/// `prometheus/alerts_test.yml`: series as the services export them, and the alerts that must
/// (and must not) fire — a stuck agent seen by the audit and by the agent itself among them.
#[test]
fn the_alert_rules_fire_on_what_they_watch_and_not_otherwise() {
    let stdout = promtool(&["test", "rules"], "alerts_test.yml");
    assert!(stdout.contains("SUCCESS"), "{stdout}");
}
