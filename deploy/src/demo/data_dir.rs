//! The demo's data directory: every broker's logs, the registry's log, the agents' spools and
//! the Parquet warehouse live under one directory that the demo owns. A run starts from an
//! empty one so its summary counts only its own events; it never deletes a directory that a
//! demo did not make.

use std::path::{Path, PathBuf};

use super::error::DemoError;

/// File that marks a directory as the demo's own.
const MARKER: &str = ".tributary-demo";

/// Makes `dir` an empty demo directory: creates it, or empties it if an earlier demo made it.
/// A non-empty directory without the marker is refused.
pub fn prepare(dir: &Path) -> Result<PathBuf, DemoError> {
    let io = |source| DemoError::DataDir { path: dir.to_owned(), source };
    match std::fs::read_dir(dir) {
        Ok(mut entries) => {
            if entries.next().is_some() {
                if !dir.join(MARKER).is_file() {
                    return Err(DemoError::NotADemoDir(dir.to_owned()));
                }
                std::fs::remove_dir_all(dir).map_err(io)?;
            }
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(io(e)),
    }
    std::fs::create_dir_all(dir).map_err(io)?;
    std::fs::write(dir.join(MARKER), "made by `tributary demo`; emptied by its next run\n")
        .map_err(io)?;
    std::fs::canonicalize(dir).map_err(io)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_directory_of_an_earlier_demo_is_emptied() {
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("demo");
        prepare(&dir).unwrap();
        std::fs::write(dir.join("old-data"), "x").unwrap();
        prepare(&dir).unwrap();
        assert!(!dir.join("old-data").exists());
        assert!(dir.join(MARKER).is_file());
    }

    #[test]
    fn a_foreign_directory_is_never_emptied() {
        let root = tempfile::tempdir().unwrap();
        std::fs::write(root.path().join("precious"), "x").unwrap();
        let err = prepare(root.path()).unwrap_err();
        assert!(matches!(err, DemoError::NotADemoDir(_)), "{err}");
        assert!(root.path().join("precious").exists());
    }
}
