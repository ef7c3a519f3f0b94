//! Opens the object store a `--store` URL names: `file:///path` (a local directory, created if
//! missing, writes fsynced), `s3://bucket/prefix` (endpoint and credentials from the usual
//! `AWS_*` variables), or `memory://` (in this process only, for tests).

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

/// The store `url` names, rooted at its path (every key the loader writes is relative to it).
pub fn store_from_url(url: &str) -> Result<Arc<dyn ObjectStore>, StoreUrlError> {
    service::tls::install_crypto_provider();
    let invalid =
        |reason: &str| StoreUrlError::Invalid { url: url.to_owned(), reason: reason.into() };
    let open = |source| StoreUrlError::Open { url: url.to_owned(), source };
    let (scheme, rest) = url.split_once("://").ok_or_else(|| invalid("expected SCHEME://…"))?;
    match scheme {
        "file" => {
            if !rest.starts_with('/') {
                return Err(invalid("a file URL needs an absolute path, e.g. file:///data/loader"));
            }
            std::fs::create_dir_all(rest)
                .map_err(|e| invalid(&format!("cannot create {rest}: {e}")))?;
            let local = LocalFileSystem::new_with_prefix(rest).map_err(open)?.with_fsync(true);
            Ok(Arc::new(local))
        }
        "s3" | "s3a" => {
            let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
            if bucket.is_empty() {
                return Err(invalid("an S3 URL needs a bucket, e.g. s3://bucket/prefix"));
            }
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
            let prefix = prefix.trim_matches('/');
            if prefix.is_empty() { Ok(s3) } else { Ok(Arc::new(PrefixStore::new(s3, prefix))) }
        }
        "memory" => Ok(Arc::new(InMemory::new())),
        _ => Err(invalid("the scheme must be file, s3 or memory")),
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
    }

    #[test]
    fn opens_a_local_directory_creating_it() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("a/b");
        store_from_url(&format!("file://{}", root.display())).unwrap();
        assert!(root.is_dir());
    }
}
