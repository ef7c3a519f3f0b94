//! Opens the object store a URL names — the loader's `--store`, the broker's `--remote-store`:
//! `file:///path` (a local directory, created if missing, writes fsynced), `s3://bucket/prefix`
//! (endpoint and credentials from the usual `AWS_*` variables), or `memory://` (in this process
//! only, for tests).

use std::sync::Arc;

use object_store::ObjectStore;
use object_store::aws::AmazonS3Builder;
use object_store::local::LocalFileSystem;
use object_store::memory::InMemory;
use object_store::prefix::PrefixStore;

#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StoreUrlError {
    #[error("store URL {url:?}: {reason}")]
    Invalid { url: String, reason: String },
    #[error("store URL {url:?}: {source}")]
    Open {
        url: String,
        #[source]
        source: object_store::Error,
    },
}

/// What a store URL names.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Target<'a> {
    Directory(&'a str),
    S3 { bucket: &'a str, prefix: &'a str },
    Memory,
}

/// Reads `url` without opening anything: what a config check calls.
pub fn check_url(url: &str) -> Result<(), StoreUrlError> {
    target(url).map(|_| ())
}

fn target(url: &str) -> Result<Target<'_>, StoreUrlError> {
    let invalid =
        |reason: &str| StoreUrlError::Invalid { url: url.to_owned(), reason: reason.into() };
    let (scheme, rest) = url.split_once("://").ok_or_else(|| invalid("expected SCHEME://…"))?;
    match scheme {
        "file" if rest.starts_with('/') => Ok(Target::Directory(rest)),
        "file" => Err(invalid("a file URL needs an absolute path, e.g. file:///data/loader")),
        "s3" | "s3a" => {
            let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
            if bucket.is_empty() {
                return Err(invalid("an S3 URL needs a bucket, e.g. s3://bucket/prefix"));
            }
            Ok(Target::S3 { bucket, prefix: prefix.trim_matches('/') })
        }
        "memory" => Ok(Target::Memory),
        _ => Err(invalid("the scheme must be file, s3 or memory")),
    }
}

/// The store `url` names, rooted at its path (every key written through it is relative to it).
pub fn store_from_url(url: &str) -> Result<Arc<dyn ObjectStore>, StoreUrlError> {
    crate::tls::install_crypto_provider();
    let open = |source| StoreUrlError::Open { url: url.to_owned(), source };
    match target(url)? {
        Target::Directory(path) => {
            std::fs::create_dir_all(path).map_err(|e| StoreUrlError::Invalid {
                url: url.to_owned(),
                reason: format!("cannot create {path}: {e}"),
            })?;
            let local = LocalFileSystem::new_with_prefix(path).map_err(open)?.with_fsync(true);
            Ok(Arc::new(local))
        }
        Target::S3 { bucket, prefix } => {
            let mut builder = AmazonS3Builder::from_env().with_bucket_name(bucket);
            // A local S3 server (SeaweedFS, MinIO) needs path-style requests and a region.
            if std::env::var_os("AWS_REGION").is_none()
                && std::env::var_os("AWS_DEFAULT_REGION").is_none()
            {
                builder = builder.with_region("us-east-1");
            }
            if std::env::var_os("AWS_ENDPOINT_URL").is_some()
                || std::env::var_os("AWS_ENDPOINT").is_some()
            {
                builder = builder.with_virtual_hosted_style_request(false);
            }
            let s3: Arc<dyn ObjectStore> = Arc::new(builder.build().map_err(open)?);
            if prefix.is_empty() { Ok(s3) } else { Ok(Arc::new(PrefixStore::new(s3, prefix))) }
        }
        Target::Memory => Ok(Arc::new(InMemory::new())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rejects_unknown_schemes_and_relative_paths() {
        assert!(matches!(store_from_url("ftp://x"), Err(StoreUrlError::Invalid { .. })));
        assert!(matches!(store_from_url("/tmp/x"), Err(StoreUrlError::Invalid { .. })));
        assert!(matches!(store_from_url("file://relative"), Err(StoreUrlError::Invalid { .. })));
        assert!(matches!(store_from_url("s3:///prefix"), Err(StoreUrlError::Invalid { .. })));
        assert!(check_url("s3://bucket/a/b").is_ok());
        assert!(check_url("file:///nowhere/yet").is_ok());
        assert!(!std::path::Path::new("/nowhere").exists());
    }

    #[test]
    fn opens_a_local_directory_creating_it() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("a/b");
        store_from_url(&format!("file://{}", root.display())).unwrap();
        assert!(root.is_dir());
    }
}
