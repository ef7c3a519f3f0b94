//! The alert rules `tributary up` gives Prometheus, checked by Prometheus' own `promtool`.

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
    assert!(stdout.contains("SUCCESS: 7 rules found"), "{stdout}");
}
