//! The Kafka APIs and versions the listener serves, as ApiVersions advertises them: never a
//! version it does not handle. Which versions are flexible (compact encodings, tagged
//! fields, request header v2) comes from `kafka-protocol`'s generated header versions.

use kafka_protocol::messages::ApiKey;

/// An API and the versions served.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Served {
    pub key: ApiKey,
    pub min: i16,
    pub max: i16,
}

/// What the listener serves. Produce starts at 3 (RecordBatch, magic 2: what every current
/// client sends, and what a broker needs to advertise with Fetch ≥ 4 for librdkafka to use it);
/// CreateTopics at 2, the oldest version `kafka-protocol` encodes an answer to.
pub const SERVED: &[Served] = &[
    Served { key: ApiKey::Produce, min: 3, max: 8 },
    Served { key: ApiKey::Fetch, min: 4, max: 11 },
    Served { key: ApiKey::ListOffsets, min: 1, max: 5 },
    Served { key: ApiKey::Metadata, min: 1, max: 9 },
    Served { key: ApiKey::OffsetCommit, min: 2, max: 7 },
    Served { key: ApiKey::OffsetFetch, min: 1, max: 7 },
    Served { key: ApiKey::FindCoordinator, min: 0, max: 2 },
    Served { key: ApiKey::JoinGroup, min: 0, max: 5 },
    Served { key: ApiKey::Heartbeat, min: 0, max: 3 },
    Served { key: ApiKey::LeaveGroup, min: 0, max: 3 },
    Served { key: ApiKey::SyncGroup, min: 0, max: 3 },
    Served { key: ApiKey::ApiVersions, min: 0, max: 3 },
    Served { key: ApiKey::CreateTopics, min: 2, max: 4 },
    Served { key: ApiKey::InitProducerId, min: 0, max: 4 },
    Served { key: ApiKey::AddPartitionsToTxn, min: 0, max: 3 },
    Served { key: ApiKey::AddOffsetsToTxn, min: 0, max: 3 },
    Served { key: ApiKey::EndTxn, min: 0, max: 3 },
    Served { key: ApiKey::TxnOffsetCommit, min: 0, max: 3 },
    Served { key: ApiKey::ListGroups, min: 0, max: 4 },
    Served { key: ApiKey::DescribeGroups, min: 0, max: 5 },
    Served { key: ApiKey::DeleteGroups, min: 0, max: 2 },
    Served { key: ApiKey::OffsetDelete, min: 0, max: 0 },
    Served { key: ApiKey::DeleteTopics, min: 1, max: 5 },
    Served { key: ApiKey::CreatePartitions, min: 0, max: 3 },
    Served { key: ApiKey::DescribeConfigs, min: 1, max: 4 },
    Served { key: ApiKey::AlterConfigs, min: 0, max: 2 },
    Served { key: ApiKey::IncrementalAlterConfigs, min: 0, max: 1 },
    Served { key: ApiKey::DescribeCluster, min: 0, max: 1 },
    Served { key: ApiKey::ElectLeaders, min: 0, max: 2 },
    Served { key: ApiKey::DeleteRecords, min: 0, max: 2 },
    Served { key: ApiKey::AlterPartitionReassignments, min: 0, max: 0 },
    Served { key: ApiKey::ListPartitionReassignments, min: 0, max: 0 },
];

/// The served API of `key` at `version`, if it is served.
pub fn served(key: i16, version: i16) -> Option<ApiKey> {
    let key = ApiKey::try_from(key).ok()?;
    SERVED.iter().find(|s| s.key == key && (s.min..=s.max).contains(&version)).map(|s| s.key)
}

/// Whether `version` of `key` is a flexible version.
pub fn is_flexible(key: ApiKey, version: i16) -> bool {
    key.request_header_version(version) >= 2
}

#[cfg(test)]
mod tests {
    use kafka_protocol::messages::*;
    use kafka_protocol::protocol::Message;

    use super::*;

    /// What `kafka-protocol` can decode and encode of each served API.
    fn crate_versions(key: ApiKey) -> (i16, i16) {
        let range = match key {
            ApiKey::Produce => ProduceResponse::VERSIONS,
            ApiKey::Fetch => FetchResponse::VERSIONS,
            ApiKey::ListOffsets => ListOffsetsResponse::VERSIONS,
            ApiKey::Metadata => MetadataResponse::VERSIONS,
            ApiKey::OffsetCommit => OffsetCommitResponse::VERSIONS,
            ApiKey::OffsetFetch => OffsetFetchResponse::VERSIONS,
            ApiKey::FindCoordinator => FindCoordinatorResponse::VERSIONS,
            ApiKey::JoinGroup => JoinGroupResponse::VERSIONS,
            ApiKey::Heartbeat => HeartbeatResponse::VERSIONS,
            ApiKey::LeaveGroup => LeaveGroupResponse::VERSIONS,
            ApiKey::SyncGroup => SyncGroupResponse::VERSIONS,
            ApiKey::ApiVersions => ApiVersionsResponse::VERSIONS,
            ApiKey::CreateTopics => CreateTopicsResponse::VERSIONS,
            ApiKey::InitProducerId => InitProducerIdResponse::VERSIONS,
            ApiKey::AddPartitionsToTxn => AddPartitionsToTxnResponse::VERSIONS,
            ApiKey::AddOffsetsToTxn => AddOffsetsToTxnResponse::VERSIONS,
            ApiKey::EndTxn => EndTxnResponse::VERSIONS,
            ApiKey::TxnOffsetCommit => TxnOffsetCommitResponse::VERSIONS,
            ApiKey::ListGroups => ListGroupsResponse::VERSIONS,
            ApiKey::DescribeGroups => DescribeGroupsResponse::VERSIONS,
            ApiKey::DeleteGroups => DeleteGroupsResponse::VERSIONS,
            ApiKey::OffsetDelete => OffsetDeleteResponse::VERSIONS,
            ApiKey::DeleteTopics => DeleteTopicsResponse::VERSIONS,
            ApiKey::CreatePartitions => CreatePartitionsResponse::VERSIONS,
            ApiKey::DescribeConfigs => DescribeConfigsResponse::VERSIONS,
            ApiKey::AlterConfigs => AlterConfigsResponse::VERSIONS,
            ApiKey::IncrementalAlterConfigs => IncrementalAlterConfigsResponse::VERSIONS,
            ApiKey::DescribeCluster => DescribeClusterResponse::VERSIONS,
            ApiKey::ElectLeaders => ElectLeadersResponse::VERSIONS,
            ApiKey::DeleteRecords => DeleteRecordsResponse::VERSIONS,
            ApiKey::AlterPartitionReassignments => AlterPartitionReassignmentsResponse::VERSIONS,
            ApiKey::ListPartitionReassignments => ListPartitionReassignmentsResponse::VERSIONS,
            other => panic!("{other:?} is not served"),
        };
        (range.min, range.max)
    }

    #[test]
    fn every_served_version_has_an_answer_the_crate_encodes() {
        for served in SERVED {
            let (min, max) = crate_versions(served.key);
            assert!(min <= served.min && served.max <= max, "{served:?} vs {min}..{max}");
        }
        assert_eq!(served(3, 9), Some(ApiKey::Metadata));
        assert_eq!(served(3, 10), None);
        assert_eq!(served(0, 2), None, "Produce before RecordBatch is not served");
        assert_eq!(served(9999, 0), None);
        assert!(is_flexible(ApiKey::ApiVersions, 3) && !is_flexible(ApiKey::ApiVersions, 2));
        assert!(is_flexible(ApiKey::Metadata, 9) && !is_flexible(ApiKey::Produce, 8));
    }
}
