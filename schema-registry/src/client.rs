//! A client of the registry's REST API for the pipeline's tiers, with the caches a hot path
//! needs: id → schema (ids are immutable, so never stale) and (subject, schema) → id.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use apache_avro::Schema;
use reqwest::{Method, Url};
use serde::Deserialize;
use serde::de::DeserializeOwned;

use crate::error::RegistryError;
use crate::registry::SubjectVersion;
use crate::schema;
use crate::schema_files::{self, SchemaFileError};

/// Entries each cache holds at most; past that, new answers are used but not kept.
pub const CACHE_ENTRIES_MAX: usize = 10_000;
/// Largest response body read from the registry.
pub const RESPONSE_BYTES_MAX: usize = 16 * 1024 * 1024;
/// Time allowed for one request, connection included.
pub const REQUEST_TIMEOUT_MS: u64 = 10_000;

#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ClientError {
    #[error("invalid registry URL {0:?}: it must be an http(s) URL")]
    InvalidUrl(String),
    #[error("request to {url} failed: {source}")]
    Http {
        url: Url,
        #[source]
        source: reqwest::Error,
    },
    #[error("{url}: the registry answered {status}, error code {error_code}: {message}")]
    Registry { url: Url, status: u16, error_code: u32, message: String },
    #[error("unknown schema id {0}")]
    UnknownSchemaId(i32),
    #[error("{url}: the response is larger than {RESPONSE_BYTES_MAX} bytes")]
    ResponseTooLarge { url: Url },
    #[error("{url}: unexpected response: {source}")]
    BadResponse {
        url: Url,
        #[source]
        source: serde_json::Error,
    },
    #[error(transparent)]
    InvalidSchema(#[from] RegistryError),
    #[error(transparent)]
    SchemaFiles(#[from] SchemaFileError),
}

#[derive(Deserialize)]
struct ErrorBody {
    error_code: u32,
    message: String,
}

#[derive(Deserialize)]
struct IdBody {
    id: i32,
}

#[derive(Deserialize)]
struct SchemaBody {
    schema: String,
}

/// Talks to one registry. Cheap to share behind an `Arc`; the caches are shared by all callers.
#[derive(Debug)]
pub struct RegistryClient {
    http: reqwest::Client,
    base: Url,
    schemas: Mutex<HashMap<i32, Arc<Schema>>>,
    /// (subject, canonical schema text) → id.
    ids: Mutex<HashMap<(String, Arc<str>), i32>>,
}

impl RegistryClient {
    /// A client of the registry at `base_url`, e.g. `http://127.0.0.1:8081`.
    pub fn new(base_url: &str) -> Result<RegistryClient, ClientError> {
        RegistryClient::with_tls(base_url, None)
    }

    /// A client of the registry at `base_url` (`https://…`) over `tls`: the CA it trusts and,
    /// for a registry that requires client certificates, this client's certificate.
    pub fn with_tls(
        base_url: &str,
        tls: Option<std::sync::Arc<rustls::ClientConfig>>,
    ) -> Result<RegistryClient, ClientError> {
        let base = Url::parse(base_url)
            .ok()
            .filter(|u| matches!(u.scheme(), "http" | "https") && !u.cannot_be_a_base())
            .ok_or_else(|| ClientError::InvalidUrl(base_url.to_owned()))?;
        service::tls::install_crypto_provider();
        let mut builder =
            reqwest::Client::builder().timeout(Duration::from_millis(REQUEST_TIMEOUT_MS));
        if let Some(tls) = tls {
            builder = builder.tls_backend_preconfigured((*tls).clone());
        }
        let http =
            builder.build().map_err(|source| ClientError::Http { url: base.clone(), source })?;
        Ok(RegistryClient {
            http,
            base,
            schemas: Mutex::new(HashMap::new()),
            ids: Mutex::new(HashMap::new()),
        })
    }

    /// Registers `schema` under `subject` (or finds it registered) and returns its id.
    pub async fn register(&self, subject: &str, schema: &str) -> Result<i32, ClientError> {
        let parsed = schema::parse(schema)?;
        let key = (subject.to_owned(), Arc::clone(&parsed.canonical));
        if let Some(&id) = lock(&self.ids).get(&key) {
            return Ok(id);
        }
        let body = serde_json::json!({ "schema": &*parsed.canonical });
        let IdBody { id } =
            self.call(Method::POST, &["subjects", subject, "versions"], Some(&body)).await?;
        insert_bounded(&self.ids, key, id);
        insert_bounded(&self.schemas, id, parsed.schema);
        Ok(id)
    }

    /// The schema with global id `id`, from the cache or the registry.
    pub async fn schema(&self, id: i32) -> Result<Arc<Schema>, ClientError> {
        if let Some(schema) = lock(&self.schemas).get(&id) {
            return Ok(Arc::clone(schema));
        }
        let path = ["schemas", "ids", &id.to_string()];
        let SchemaBody { schema } = match self.call(Method::GET, &path, None).await {
            Err(ClientError::Registry { error_code: 40403, .. }) => {
                return Err(ClientError::UnknownSchemaId(id));
            }
            other => other?,
        };
        let schema = schema::parse(&schema)?.schema;
        insert_bounded(&self.schemas, id, Arc::clone(&schema));
        Ok(schema)
    }

    /// The newest live version of `subject` (never cached: it changes).
    pub async fn latest(&self, subject: &str) -> Result<SubjectVersion, ClientError> {
        self.call(Method::GET, &["subjects", subject, "versions", "latest"], None).await
    }

    /// The live version numbers of `subject`, oldest first.
    pub async fn versions(&self, subject: &str) -> Result<Vec<i32>, ClientError> {
        self.call(Method::GET, &["subjects", subject, "versions"], None).await
    }

    /// Version `version` of `subject`.
    pub async fn version(
        &self,
        subject: &str,
        version: i32,
    ) -> Result<SubjectVersion, ClientError> {
        self.call(Method::GET, &["subjects", subject, "versions", &version.to_string()], None).await
    }

    /// Sets `subject`'s compatibility level (`BACKWARD`, `NONE`, …), as `PUT /config/{subject}`.
    pub async fn set_compatibility(&self, subject: &str, level: &str) -> Result<(), ClientError> {
        let body = serde_json::json!({ "compatibility": level });
        let _: serde_json::Value =
            self.call(Method::PUT, &["config", subject], Some(&body)).await?;
        Ok(())
    }

    /// Registers every `.avsc` file in `dir` as subject `{file stem}-value` (see
    /// [`schema_files`]); returns each subject with its id.
    pub async fn register_dir(&self, dir: PathBuf) -> Result<Vec<(String, i32)>, ClientError> {
        let files = schema_files::load_dir(dir).await?;
        let mut registered = Vec::with_capacity(files.len());
        for file in files {
            let id = self.register(&file.subject, &file.text).await?;
            registered.push((file.subject, id));
        }
        Ok(registered)
    }

    /// One request: `segments` are percent-encoded into the path; a non-2xx answer becomes
    /// `ClientError::Registry` with Confluent's error code.
    async fn call<T: DeserializeOwned>(
        &self,
        method: Method,
        segments: &[&str],
        body: Option<&serde_json::Value>,
    ) -> Result<T, ClientError> {
        let mut url = self.base.clone();
        url.path_segments_mut()
            .map_err(|()| ClientError::InvalidUrl(self.base.to_string()))?
            .pop_if_empty()
            .extend(segments);
        let mut request = self
            .http
            .request(method, url.clone())
            .header(reqwest::header::ACCEPT, crate::api::http::CONTENT_TYPE);
        if let Some(body) = body {
            request = request.json(body);
        }
        let http_err = |source| ClientError::Http { url: url.clone(), source };
        let mut response = request.send().await.map_err(http_err)?;
        let status = response.status();
        if response.content_length().is_some_and(|len| len > RESPONSE_BYTES_MAX as u64) {
            return Err(ClientError::ResponseTooLarge { url });
        }
        let mut bytes = Vec::new();
        while let Some(chunk) = response.chunk().await.map_err(http_err)? {
            if bytes.len() + chunk.len() > RESPONSE_BYTES_MAX {
                return Err(ClientError::ResponseTooLarge { url });
            }
            bytes.extend_from_slice(&chunk);
        }
        if !status.is_success() {
            let (error_code, message) = match serde_json::from_slice::<ErrorBody>(&bytes) {
                Ok(e) => (e.error_code, e.message),
                Err(_) => {
                    (u32::from(status.as_u16()), String::from_utf8_lossy(&bytes).into_owned())
                }
            };
            return Err(ClientError::Registry {
                url,
                status: status.as_u16(),
                error_code,
                message,
            });
        }
        serde_json::from_slice(&bytes).map_err(|source| ClientError::BadResponse { url, source })
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // The maps are only ever inserted into; a panic elsewhere cannot leave them inconsistent.
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

fn insert_bounded<K: std::hash::Hash + Eq, V>(cache: &Mutex<HashMap<K, V>>, key: K, value: V) {
    let mut cache = lock(cache);
    if cache.len() < CACHE_ENTRIES_MAX {
        cache.insert(key, value);
    }
}
