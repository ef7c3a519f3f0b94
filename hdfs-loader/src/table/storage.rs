//! The `iceberg` crate's file I/O over the loader's object store, so that table metadata,
//! manifests and data files all go through one store: a local directory or S3, with the
//! loader's settings. Iceberg names files by absolute location (`file:///…`, `s3://…`); the
//! store is rooted at the warehouse URL, so a location is its path below that URL.

use std::ops::Range;
use std::sync::Arc;

use bytes::Bytes;
use futures::StreamExt;
use futures::stream::BoxStream;
use iceberg::io::{
    FileMetadata, FileRead, FileWrite, InputFile, OutputFile, Storage, StorageConfig,
    StorageFactory,
};
use iceberg::{Error, ErrorKind};
use object_store::buffered::BufWriter;
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt, PutPayload};
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use tokio::io::AsyncWriteExt;

/// Bytes of one part of an upload.
const PART_BYTES: usize = 8 << 20;

/// The warehouse: its URL and the store rooted there.
#[derive(Clone)]
pub struct Warehouse {
    url: String,
    store: Arc<dyn ObjectStore>,
}

impl std::fmt::Debug for Warehouse {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Warehouse").field("url", &self.url).finish()
    }
}

impl Warehouse {
    /// `url` is the store's URL (`file:///dir`, `s3://bucket/prefix`), `store` the store it
    /// opened.
    pub fn new(url: &str, store: Arc<dyn ObjectStore>) -> Warehouse {
        Warehouse { url: url.trim_end_matches('/').to_owned(), store }
    }

    pub fn url(&self) -> &str {
        &self.url
    }

    /// The store path of an Iceberg location inside the warehouse.
    pub fn path(&self, location: &str) -> iceberg::Result<Path> {
        let relative = location
            .strip_prefix(&self.url)
            .and_then(|rest| rest.strip_prefix('/'))
            .ok_or_else(|| {
                Error::new(
                    ErrorKind::DataInvalid,
                    format!("{location} is outside the warehouse {}", self.url),
                )
            })?;
        Path::parse(relative).map_err(|e| {
            Error::new(ErrorKind::DataInvalid, format!("{location}: not a store path: {e}"))
        })
    }

    /// The location of a store path.
    pub fn location(&self, path: &Path) -> String {
        format!("{}/{path}", self.url)
    }

    pub fn store(&self) -> &Arc<dyn ObjectStore> {
        &self.store
    }
}

// The crate serializes file I/O to hand it to other processes; a warehouse travels as its URL.
impl Serialize for Warehouse {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.url.serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for Warehouse {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Warehouse, D::Error> {
        let url = String::deserialize(deserializer)?;
        let store = crate::store_from_url(&url).map_err(serde::de::Error::custom)?;
        Ok(Warehouse::new(&url, store))
    }
}

fn store_error(location: &str) -> impl FnOnce(object_store::Error) -> Error + '_ {
    move |e| {
        let kind = match e {
            object_store::Error::NotFound { .. } => ErrorKind::DataInvalid,
            _ => ErrorKind::Unexpected,
        };
        Error::new(kind, format!("{location}: {e}")).with_retryable(false)
    }
}

#[async_trait::async_trait]
#[typetag::serde(name = "tributary-warehouse")]
impl Storage for Warehouse {
    async fn exists(&self, location: &str) -> iceberg::Result<bool> {
        match self.store.head(&self.path(location)?).await {
            Ok(_) => Ok(true),
            Err(object_store::Error::NotFound { .. }) => Ok(false),
            Err(e) => Err(store_error(location)(e)),
        }
    }

    async fn metadata(&self, location: &str) -> iceberg::Result<FileMetadata> {
        let meta = self.store.head(&self.path(location)?).await.map_err(store_error(location))?;
        Ok(FileMetadata { size: meta.size })
    }

    async fn read(&self, location: &str) -> iceberg::Result<Bytes> {
        let got = self.store.get(&self.path(location)?).await.map_err(store_error(location))?;
        got.bytes().await.map_err(store_error(location))
    }

    async fn reader(&self, location: &str) -> iceberg::Result<Box<dyn FileRead>> {
        Ok(Box::new(Reader { warehouse: self.clone(), location: location.to_owned() }))
    }

    async fn write(&self, location: &str, bytes: Bytes) -> iceberg::Result<()> {
        let path = self.path(location)?;
        self.store.put(&path, PutPayload::from(bytes)).await.map_err(store_error(location))?;
        Ok(())
    }

    async fn writer(&self, location: &str) -> iceberg::Result<Box<dyn FileWrite>> {
        let path = self.path(location)?;
        let upload = BufWriter::with_capacity(Arc::clone(&self.store), path, PART_BYTES);
        Ok(Box::new(Writer { upload: Some(upload), location: location.to_owned() }))
    }

    async fn delete(&self, location: &str) -> iceberg::Result<()> {
        match self.store.delete(&self.path(location)?).await {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
            Err(e) => Err(store_error(location)(e)),
        }
    }

    async fn delete_prefix(&self, location: &str) -> iceberg::Result<()> {
        let prefix = self.path(location)?;
        let mut listing = self.store.list(Some(&prefix));
        while let Some(meta) = listing.next().await {
            let meta = meta.map_err(store_error(location))?;
            match self.store.delete(&meta.location).await {
                Ok(()) | Err(object_store::Error::NotFound { .. }) => {}
                Err(e) => return Err(store_error(location)(e)),
            }
        }
        Ok(())
    }

    async fn delete_stream(
        &self,
        mut locations: BoxStream<'static, String>,
    ) -> iceberg::Result<()> {
        while let Some(location) = locations.next().await {
            self.delete(&location).await?;
        }
        Ok(())
    }

    fn new_input(&self, location: &str) -> iceberg::Result<InputFile> {
        Ok(InputFile::new(Arc::new(self.clone()), location.to_owned()))
    }

    fn new_output(&self, location: &str) -> iceberg::Result<OutputFile> {
        Ok(OutputFile::new(Arc::new(self.clone()), location.to_owned()))
    }
}

/// Ranged reads of one file.
struct Reader {
    warehouse: Warehouse,
    location: String,
}

#[async_trait::async_trait]
impl FileRead for Reader {
    async fn read(&self, range: Range<u64>) -> iceberg::Result<Bytes> {
        let path = self.warehouse.path(&self.location)?;
        self.warehouse.store.get_range(&path, range).await.map_err(store_error(&self.location))
    }
}

/// A multipart upload; the file appears whole when it closes.
struct Writer {
    upload: Option<BufWriter>,
    location: String,
}

#[async_trait::async_trait]
impl FileWrite for Writer {
    async fn write(&mut self, bytes: Bytes) -> iceberg::Result<()> {
        let upload = self.upload.as_mut().ok_or_else(|| {
            Error::new(ErrorKind::Unexpected, format!("{}: written after close", self.location))
        })?;
        upload.put(bytes).await.map_err(store_error(&self.location))
    }

    async fn close(&mut self) -> iceberg::Result<()> {
        let mut upload = self.upload.take().ok_or_else(|| {
            Error::new(ErrorKind::Unexpected, format!("{}: closed twice", self.location))
        })?;
        upload
            .shutdown()
            .await
            .map_err(|e| Error::new(ErrorKind::Unexpected, format!("{}: {e}", self.location)))
    }
}

/// What the catalog builds its file I/O from: always this warehouse.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct WarehouseFactory(pub Warehouse);

#[typetag::serde(name = "tributary-warehouse-factory")]
impl StorageFactory for WarehouseFactory {
    fn build(&self, _config: &StorageConfig) -> iceberg::Result<Arc<dyn Storage>> {
        Ok(Arc::new(self.0.clone()))
    }
}
