//! Kafka transactions' state in the registry (`docs/design.md`, "Transactions on the
//! listener"), what a transaction coordinator keeps so that another broker can take over:
//!
//! | path | kind | value |
//! |---|---|---|
//! | `/kafka-transactions/{transactional_id}` | persistent | [`TxnRecord`], JSON |
//! | `/kafka-groups/{group}/txn-offsets/{producer_id}` | persistent | offsets a transaction committed, JSON, until it ends |
//!
//! A record is written with the version it was read at, so two brokers that both believe they
//! coordinate an id (one about to learn it does not) cannot both move it on.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use crate::CoordError;
use crate::coordinator::{NodeMode, Version};
use crate::registry::{KafkaCommit, Registry, RegistryError, corrupt, ignore_missing, segment};

/// Where a transaction is, as Kafka's coordinator names its states.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum TxnPhase {
    /// No transaction has begun since the producer's id was handed out.
    Empty,
    /// Partitions or offsets were added: records may be written.
    Ongoing,
    /// Its commit is decided: the markers are being written.
    PrepareCommit,
    /// Its abort is decided: the markers are being written.
    PrepareAbort,
    CompleteCommit,
    CompleteAbort,
}

/// A transactional id's producer and its current transaction.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TxnRecord {
    pub producer_id: i64,
    pub epoch: i16,
    /// The producer's `transaction.timeout.ms`: an Ongoing transaction older than this is
    /// aborted.
    pub timeout_ms: i32,
    pub phase: TxnPhase,
    /// The partitions the current transaction has written to, by topic.
    pub partitions: BTreeMap<String, BTreeSet<i32>>,
    /// The consumer groups whose offsets it commits.
    pub groups: BTreeSet<String>,
    /// When it became Ongoing (ms since the epoch).
    pub started_ms: i64,
    /// When its producer last began a transaction or was handed out (ms since the epoch): an
    /// id unused for Kafka's `transactional.id.expiration.ms` is forgotten.
    #[serde(default)]
    pub used_ms: i64,
}

impl Registry {
    fn transaction_path(id: &str) -> Result<String, RegistryError> {
        Ok(format!("/kafka-transactions/{}", segment("transactional id", id)?))
    }

    /// The record of transactional id `id` and its version; `None` if it has none.
    pub async fn transaction(
        &self,
        id: &str,
    ) -> Result<Option<(TxnRecord, Version)>, RegistryError> {
        let path = Registry::transaction_path(id)?;
        match self.coordinator().get(&path).await? {
            Some((data, version)) => {
                let record = serde_json::from_slice(&data).map_err(|e| corrupt(&path, e))?;
                Ok(Some((record, version)))
            }
            None => Ok(None),
        }
    }

    /// Writes `record` for `id` if its record is still at `expected` (`None`: if it has none);
    /// [`RegistryError::Conflict`] if another writer came first. Returns the new version.
    pub async fn write_transaction(
        &self,
        id: &str,
        record: &TxnRecord,
        expected: Option<Version>,
    ) -> Result<Version, RegistryError> {
        let path = Registry::transaction_path(id)?;
        let data = serde_json::to_vec(record).expect("a record serializes");
        let conflict = || RegistryError::Conflict { path: path.clone() };
        match expected {
            Some(version) => match self.coordinator().set(&path, &data, Some(version)).await {
                Ok(version) => Ok(version),
                Err(CoordError::BadVersion { .. } | CoordError::NoNode { .. }) => Err(conflict()),
                Err(e) => Err(e.into()),
            },
            None => match self.coordinator().create(&path, &data, NodeMode::Persistent).await {
                Ok(()) => Ok(0),
                Err(CoordError::NodeExists { .. }) => Err(conflict()),
                Err(e) => Err(e.into()),
            },
        }
    }

    /// Forgets transactional id `id` if its record is still at `version`.
    pub async fn delete_transaction(
        &self,
        id: &str,
        version: Version,
    ) -> Result<(), RegistryError> {
        let path = Registry::transaction_path(id)?;
        match self.coordinator().delete(&path, Some(version)).await {
            Ok(()) | Err(CoordError::NoNode { .. }) => Ok(()),
            Err(CoordError::BadVersion { .. }) => Err(RegistryError::Conflict { path }),
            Err(e) => Err(e.into()),
        }
    }

    /// Every transactional id with a record.
    pub async fn transactional_ids(&self) -> Result<Vec<String>, RegistryError> {
        match self.coordinator().children("/kafka-transactions").await {
            Ok(ids) => Ok(ids),
            Err(CoordError::NoNode { .. }) => Ok(Vec::new()),
            Err(e) => Err(e.into()),
        }
    }

    fn staged_path(group: &str, producer_id: i64) -> Result<String, RegistryError> {
        Ok(format!("/kafka-groups/{}/txn-offsets/{producer_id}", segment("group", group)?))
    }

    /// Offsets of `group` that producer `producer_id`'s open transaction committed, by topic
    /// and partition: visible once it commits.
    pub async fn staged_kafka_offsets(
        &self,
        group: &str,
        producer_id: i64,
    ) -> Result<BTreeMap<String, BTreeMap<i32, KafkaCommit>>, RegistryError> {
        let path = Registry::staged_path(group, producer_id)?;
        let Some((data, _)) = self.coordinator().get(&path).await? else {
            return Ok(BTreeMap::new());
        };
        let staged: BTreeMap<String, BTreeMap<i32, (i64, String)>> =
            serde_json::from_slice(&data).map_err(|e| corrupt(&path, e))?;
        Ok(staged
            .into_iter()
            .map(|(topic, ps)| {
                let ps = ps
                    .into_iter()
                    .map(|(p, (record, metadata))| (p, KafkaCommit { record, metadata }))
                    .collect();
                (topic, ps)
            })
            .collect())
    }

    /// Adds `offsets` to what producer `producer_id`'s transaction committed for `group`.
    pub async fn stage_kafka_offsets(
        &self,
        group: &str,
        producer_id: i64,
        offsets: &BTreeMap<String, BTreeMap<i32, KafkaCommit>>,
    ) -> Result<(), RegistryError> {
        let mut staged = self.staged_kafka_offsets(group, producer_id).await?;
        for (topic, ps) in offsets {
            staged.entry(topic.clone()).or_default().extend(ps.clone());
        }
        let plain: BTreeMap<&String, BTreeMap<i32, (i64, &str)>> = staged
            .iter()
            .map(|(t, ps)| {
                (t, ps.iter().map(|(p, c)| (*p, (c.record, c.metadata.as_str()))).collect())
            })
            .collect();
        let data = serde_json::to_vec(&plain).expect("offsets serialize");
        let path = Registry::staged_path(group, producer_id)?;
        match self.coordinator().set(&path, &data, None).await {
            Err(CoordError::NoNode { .. }) => {
                match self.coordinator().create(&path, &data, NodeMode::Persistent).await {
                    Err(CoordError::NodeExists { .. }) => {
                        self.coordinator().set(&path, &data, None).await?;
                        Ok(())
                    }
                    result => Ok(result?),
                }
            }
            result => result.map(drop).map_err(Into::into),
        }
    }

    /// Forgets what producer `producer_id`'s transaction committed for `group` (after it is
    /// applied, or because the transaction aborted).
    pub async fn drop_staged_kafka_offsets(
        &self,
        group: &str,
        producer_id: i64,
    ) -> Result<(), RegistryError> {
        let path = Registry::staged_path(group, producer_id)?;
        ignore_missing(self.coordinator().delete(&path, None).await)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::Embedded;

    #[tokio::test]
    async fn a_record_moves_on_only_from_the_version_it_was_read_at() {
        let registry = Registry::new(Embedded::new().session("/").unwrap() as Arc<_>);
        let record = TxnRecord {
            producer_id: 7,
            epoch: 0,
            timeout_ms: 60_000,
            phase: TxnPhase::Empty,
            partitions: BTreeMap::new(),
            groups: BTreeSet::new(),
            started_ms: 0,
            used_ms: 0,
        };
        assert!(registry.transaction("t").await.unwrap().is_none());
        let v0 = registry.write_transaction("t", &record, None).await.unwrap();
        assert!(matches!(
            registry.write_transaction("t", &record, None).await,
            Err(RegistryError::Conflict { .. })
        ));
        let ongoing = TxnRecord { phase: TxnPhase::Ongoing, ..record.clone() };
        let v1 = registry.write_transaction("t", &ongoing, Some(v0)).await.unwrap();
        assert!(matches!(
            registry.write_transaction("t", &record, Some(v0)).await,
            Err(RegistryError::Conflict { .. })
        ));
        assert_eq!(registry.transaction("t").await.unwrap(), Some((ongoing, v1)));
        assert_eq!(registry.transactional_ids().await.unwrap(), vec!["t".to_owned()]);
        assert!(matches!(
            registry.delete_transaction("t", v0).await,
            Err(RegistryError::Conflict { .. })
        ));
        registry.delete_transaction("t", v1).await.unwrap();
        assert!(registry.transactional_ids().await.unwrap().is_empty());

        let commit = |record| KafkaCommit { record, metadata: String::new() };
        let first = BTreeMap::from([("in".to_owned(), BTreeMap::from([(0, commit(5))]))]);
        let second = BTreeMap::from([("in".to_owned(), BTreeMap::from([(1, commit(9))]))]);
        registry.stage_kafka_offsets("g", 7, &first).await.unwrap();
        registry.stage_kafka_offsets("g", 7, &second).await.unwrap();
        let staged = registry.staged_kafka_offsets("g", 7).await.unwrap();
        assert_eq!(staged["in"].len(), 2);
        registry.drop_staged_kafka_offsets("g", 7).await.unwrap();
        assert!(registry.staged_kafka_offsets("g", 7).await.unwrap().is_empty());
    }
}
