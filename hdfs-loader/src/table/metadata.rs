//! Commits the crate's catalogs cannot make. The `iceberg` crate (0.10) builds a catalog commit
//! only from its own transaction actions, and has none for a replace snapshot (compaction) or a
//! column's type promotion. For those the loader applies the updates to the table's metadata
//! itself, writes the next metadata file, and swaps the SQL catalog's row to it with the same
//! compare-and-set the crate's `SqlCatalog::update_table` runs (`UPDATE iceberg_tables SET
//! metadata_location = new … WHERE metadata_location = old`): a commit of anyone else in
//! between makes it match no row.

use std::str::FromStr;

use iceberg::table::Table;
use iceberg::{ErrorKind, MetadataLocation, TableUpdate};
use object_store::path::Path;

use super::{CATALOG_NAME, TableError, Tables};

impl Tables {
    /// Commits `updates` to `table` if the catalog still has the metadata `table` was loaded
    /// from; `false` (nothing committed) if the table moved. The metadata file written is
    /// added to `written`, for the caller to delete if the commit does not happen.
    pub(super) async fn commit_metadata(
        &self,
        table: &Table,
        updates: Vec<TableUpdate>,
        written: &mut Vec<Path>,
    ) -> Result<bool, TableError> {
        let name = table.identifier().to_string();
        let table_error =
            |source| TableError::Table { table: name.clone(), source: Box::new(source) };
        let current = table
            .metadata_location()
            .ok_or_else(|| {
                table_error(iceberg::Error::new(ErrorKind::Unexpected, "no metadata location"))
            })?
            .to_owned();
        let mut builder = table.metadata().clone().into_builder(Some(current.clone()));
        for update in updates {
            builder = update.apply(builder).map_err(table_error)?;
        }
        let metadata = builder.build().map_err(table_error)?.metadata;
        let location = MetadataLocation::from_str(&current)
            .map_err(table_error)?
            .with_next_version()
            .with_new_metadata(&metadata);
        written.push(self.warehouse.path(&location.to_string()).map_err(table_error)?);
        metadata.write_to(table.file_io(), &location).await.map_err(table_error)?;
        self.swap(table, &current, &location.to_string()).await
    }

    /// Points the catalog's row of `table` at `new` if it still points at `current`.
    async fn swap(&self, table: &Table, current: &str, new: &str) -> Result<bool, TableError> {
        let ident = table.identifier();
        let sql_error = |e: sqlx::Error| TableError::Catalog {
            catalog: self.catalog_uri.clone(),
            source: Box::new(iceberg::Error::new(ErrorKind::Unexpected, e.to_string())),
        };
        let pool = self
            .sql
            .get_or_try_init(|| async {
                sqlx::sqlite::SqlitePoolOptions::new()
                    .max_connections(1)
                    .connect(&self.catalog_uri)
                    .await
            })
            .await
            .map_err(sql_error)?;
        let done = sqlx::query(
            "UPDATE iceberg_tables SET metadata_location = ?, previous_metadata_location = ? \
             WHERE catalog_name = ? AND table_name = ? AND table_namespace = ? \
             AND (iceberg_type = 'TABLE' OR iceberg_type IS NULL) AND metadata_location = ?",
        )
        .bind(new)
        .bind(current)
        .bind(CATALOG_NAME)
        .bind(ident.name())
        .bind(ident.namespace().join("."))
        .bind(current)
        .execute(pool)
        .await
        .map_err(sql_error)?;
        Ok(done.rows_affected() == 1)
    }
}
