//! The alert rules `tributary up` gives Prometheus, checked and unit-tested by Prometheus'
//! own `promtool`.

use std::path::Path;
use std::process::Command;

#[test]
fn promtool_accepts_the_alert_rules() {
    let rules = Path::new(env!("CARGO_MANIFEST_DIR")).join("prometheus/alerts.yml");
    let output = Command::new("promtool")
        .args(["check", "rules"])
        .arg(&rules)
        .output()
        .expect("promtool runs (Debian's prometheus package)");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stdout}{stderr}");
    assert!(stdout.contains("SUCCESS: 10 rules found"), "{stdout}");
}

/// `prometheus/alerts_test.yml`: series as the services export them, and the alerts that must
/// (and must not) fire — a stuck agent seen by the audit and by the agent itself among them.
#[test]
fn the_alert_rules_fire_on_what_they_watch_and_not_otherwise() {
    let tests = Path::new(env!("CARGO_MANIFEST_DIR")).join("prometheus/alerts_test.yml");
    let output = Command::new("promtool")
        .args(["test", "rules"])
        .arg(&tests)
        .output()
        .expect("promtool runs (Debian's prometheus package)");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stdout}{stderr}");
    assert!(stdout.contains("SUCCESS"), "{stdout}");
}
