//! The Debian package a peer runs from, named with its installed version.

use std::process::Command;

/// The installed version of a Debian package, for `describe`.
pub(super) fn package_version(package: &str) -> String {
    let output = Command::new("dpkg-query").args(["-W", "-f=${Version}", package]).output();
    match output {
        Ok(out) if out.status.success() && !out.stdout.is_empty() => {
            format!("{package} {}", String::from_utf8_lossy(&out.stdout))
        }
        _ => format!("{package} (not installed)"),
    }
}
