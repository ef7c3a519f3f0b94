//! The one way to make files durable: a file is replaced by writing a staged copy, fsyncing
//! it, renaming it over the target and fsyncing the directory, so that a crash at any point
//! leaves either the old contents or the new, never a torn file and never a lost rename. No
//! caller spells the sequence itself, so none can forget a step.

use std::fs;
use std::io::{self, Write};
use std::path::Path;

/// Suffix of the staged copy beside the target while it is written.
pub const STAGED_SUFFIX: &str = ".tmp";

/// Atomically replaces `path` with `contents`, surviving a crash at any point. Blocking: call
/// it from `spawn_blocking` or a thread of its own in async code.
pub fn write(path: &Path, contents: &[u8]) -> io::Result<()> {
    let dir = parent(path)?;
    let name = path.file_name().ok_or_else(|| io::Error::other("path has no file name"))?;
    let mut staged_name = name.to_owned();
    staged_name.push(STAGED_SUFFIX);
    let staged = dir.join(staged_name);
    let mut file = fs::File::create(&staged)?;
    file.write_all(contents)?;
    file.sync_all()?;
    fs::rename(&staged, path)?;
    sync_dir(dir)
}

/// [`write`] on a blocking thread, so that the async workers never wait for the disk.
pub async fn write_async(path: std::path::PathBuf, contents: Vec<u8>) -> io::Result<()> {
    tokio::task::spawn_blocking(move || write(&path, &contents))
        .await
        .map_err(|e| io::Error::other(format!("durable write task failed: {e}")))?
}

/// Fsyncs a directory, so that files created, renamed or deleted in it survive a crash.
pub fn sync_dir(dir: &Path) -> io::Result<()> {
    fs::File::open(dir)?.sync_all()
}

/// The directory holding `path` (`.` for a bare file name).
fn parent(path: &Path) -> io::Result<&Path> {
    match path.parent() {
        Some(dir) if dir.as_os_str().is_empty() => Ok(Path::new(".")),
        Some(dir) => Ok(dir),
        None => Err(io::Error::other("path has no parent directory")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replaces_the_file_whole_and_leaves_no_staged_copy() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.json");
        write(&path, b"one").unwrap();
        write(&path, b"two").unwrap();
        assert_eq!(fs::read(&path).unwrap(), b"two");
        let names: Vec<_> =
            fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert_eq!(names, ["state.json"]);
    }

    #[test]
    fn a_missing_directory_is_an_error_not_a_panic() {
        let dir = tempfile::tempdir().unwrap();
        assert!(write(&dir.path().join("no/such/dir/file"), b"x").is_err());
        assert!(write(Path::new("/"), b"x").is_err());
    }
}
