//! Where a loader's rows are, for what reads them back (status, readback): Parquet in the Hive
//! layout of a store, or a catalog of Iceberg tables over it.

use std::sync::Arc;

use object_store::ObjectStore;

use crate::table::Tables;
use crate::table::storage::Warehouse;
use crate::{Config, ConfigError, Format, LoadError};

#[derive(Debug, Clone)]
pub enum Output {
    /// `{topic}/dt=…/hr=…/*.parquet`, with commit records under `_commits/`.
    Hive(Arc<dyn ObjectStore>),
    /// A table per topic.
    Iceberg(Tables),
}

impl Output {
    /// What a loader of `config` writes into `store` (for `iceberg`, its catalog, opened).
    pub async fn open(config: &Config, store: Arc<dyn ObjectStore>) -> Result<Output, LoadError> {
        match config.format {
            Format::Parquet => Ok(Output::Hive(store)),
            Format::Iceberg => {
                let url = config
                    .store
                    .as_deref()
                    .ok_or(ConfigError::Invalid { field: "store", reason: "is required" })?;
                let warehouse = Warehouse::new(url, store);
                let tables =
                    Tables::open(&config.catalog_uri()?, warehouse, &config.namespace).await?;
                Ok(Output::Iceberg(tables))
            }
        }
    }

    /// The store the rows are in.
    pub fn store(&self) -> &Arc<dyn ObjectStore> {
        match self {
            Output::Hive(store) => store,
            Output::Iceberg(tables) => tables.warehouse().store(),
        }
    }
}
