//! Parquet's async writer over an object-store upload. The parquet release the loader shares
//! with the `iceberg` crate (58) writes to object_store 0.13's uploads; the tree is on 0.14, so
//! the loader hands its writer this instead.

use bytes::Bytes;
use futures::future::BoxFuture;
use object_store::buffered::BufWriter;
use parquet::arrow::async_writer::AsyncFileWriter;
use parquet::errors::ParquetError;
use tokio::io::AsyncWriteExt;

/// A multipart upload that Parquet writes a file into.
pub struct Upload(pub BufWriter);

impl AsyncFileWriter for Upload {
    fn write(&mut self, bytes: Bytes) -> BoxFuture<'_, Result<(), ParquetError>> {
        Box::pin(
            async move { self.0.put(bytes).await.map_err(|e| ParquetError::External(e.into())) },
        )
    }

    fn complete(&mut self) -> BoxFuture<'_, Result<(), ParquetError>> {
        Box::pin(
            async move { self.0.shutdown().await.map_err(|e| ParquetError::External(e.into())) },
        )
    }
}
