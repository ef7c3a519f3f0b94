//! Schemas shipped as `.avsc` files: a directory of them is registered at start (or by a
//! client), each under subject `{file stem}-value`, Confluent's name for a topic's values.

use std::path::{Path, PathBuf};

/// Appended to a file's stem (the topic) to name its subject.
pub const SUBJECT_SUFFIX: &str = "-value";
/// Most files one directory may hold.
pub const SCHEMA_FILES_MAX: usize = 1000;
/// Largest schema file read.
pub const SCHEMA_FILE_BYTES_MAX: u64 = 1024 * 1024;

/// One schema file: the subject it registers under, where it came from, and its text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SchemaFile {
    pub subject: String,
    pub path: PathBuf,
    pub text: String,
}

#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SchemaFileError {
    #[error("{path}: {source}")]
    Io { path: PathBuf, source: std::io::Error },
    #[error("{0}: holds more than {SCHEMA_FILES_MAX} .avsc files")]
    TooManyFiles(PathBuf),
    #[error("{0}: larger than {SCHEMA_FILE_BYTES_MAX} bytes")]
    TooLarge(PathBuf),
    #[error("{0}: the file name is not UTF-8")]
    BadName(PathBuf),
    #[error("the thread reading schema files stopped: {0}")]
    Background(String),
}

/// Reads every `*.avsc` file in `dir` (not its subdirectories), sorted by file name, on a
/// blocking thread.
pub async fn load_dir(dir: PathBuf) -> Result<Vec<SchemaFile>, SchemaFileError> {
    tokio::task::spawn_blocking(move || load_dir_blocking(&dir))
        .await
        .map_err(|e| SchemaFileError::Background(e.to_string()))?
}

fn load_dir_blocking(dir: &Path) -> Result<Vec<SchemaFile>, SchemaFileError> {
    let io_err = |path: &Path| {
        let path = path.to_path_buf();
        move |source| SchemaFileError::Io { path, source }
    };
    let mut paths = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(io_err(dir))? {
        let path = entry.map_err(io_err(dir))?.path();
        if path.extension().is_some_and(|e| e == "avsc") && path.is_file() {
            if paths.len() == SCHEMA_FILES_MAX {
                return Err(SchemaFileError::TooManyFiles(dir.to_path_buf()));
            }
            paths.push(path);
        }
    }
    paths.sort();
    paths
        .into_iter()
        .map(|path| {
            let len = std::fs::metadata(&path).map_err(io_err(&path))?.len();
            if len > SCHEMA_FILE_BYTES_MAX {
                return Err(SchemaFileError::TooLarge(path));
            }
            let stem = path
                .file_stem()
                .and_then(|s| s.to_str())
                .ok_or_else(|| SchemaFileError::BadName(path.clone()))?;
            let subject = format!("{stem}{SUBJECT_SUFFIX}");
            let text = std::fs::read_to_string(&path).map_err(io_err(&path))?;
            Ok(SchemaFile { subject, path, text })
        })
        .collect()
}
