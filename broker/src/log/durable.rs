//! The one way to replace a small file durably: write a staged copy, fsync it, rename it over
//! the target, fsync the directory. No caller can forget a step.

use std::fs;
use std::io::{self, Write};
use std::path::Path;

/// Atomically replaces `path` with `contents`, surviving a crash at any point.
pub fn write_durably(path: &Path, contents: &[u8]) -> io::Result<()> {
    let dir = path.parent().ok_or_else(|| io::Error::other("path has no parent directory"))?;
    let name = path.file_name().ok_or_else(|| io::Error::other("path has no file name"))?;
    let mut staged_name = name.to_owned();
    staged_name.push(".tmp");
    let staged = dir.join(staged_name);
    let mut file = fs::File::create(&staged)?;
    file.write_all(contents)?;
    file.sync_all()?;
    fs::rename(&staged, path)?;
    fs::File::open(dir)?.sync_all()
}
