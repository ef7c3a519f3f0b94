//! A small filesystem to fill: a tmpfs mounted for a test (which needs root to mount it).

use std::path::{Path, PathBuf};
use std::process::Command;

/// A tmpfs of a given size, unmounted when dropped.
pub struct Tmpfs(PathBuf);

impl Tmpfs {
    /// Mounts a tmpfs of `bytes` at `at` (created if missing).
    pub fn mount(at: &Path, bytes: u64) -> Tmpfs {
        std::fs::create_dir_all(at).expect("mount point");
        let status = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={bytes}"), "tmpfs"])
            .arg(at)
            .status()
            .expect("run mount");
        assert!(status.success(), "mounting a tmpfs at {} needs root: {status}", at.display());
        Tmpfs(at.to_owned())
    }

    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
    }
}
