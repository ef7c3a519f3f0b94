//! Kafka requests, decoded by hand from a frame's bytes for the API versions the listener
//! serves ([`crate::kafka::versions`]). Field order and presence follow Kafka's message specs (as
//! `kafka-protocol` generates them); flexible versions use compact strings, arrays and bytes
//! and end each structure with tagged fields, which are skipped.
//!
//! Every length and count is checked against the bytes present before anything is sized by
//! it: an array's count can never claim more elements than bytes remain. (`kafka-protocol`'s
//! own decoders reserve a vector of whatever count a request claims, which a 10-byte request
//! turns into an allocation that aborts the process; they are not used on requests.)

use bytes::{Buf, Bytes};

/// Why a request frame cannot be read: the connection is closed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("malformed Kafka request: {0}")]
pub struct Malformed(pub &'static str);

type Result<T> = std::result::Result<T, Malformed>;

/// Reads Kafka's primitive types from a frame.
pub struct Reader {
    buf: Bytes,
}

impl Reader {
    pub fn new(buf: Bytes) -> Reader {
        Reader { buf }
    }

    pub fn remaining(&self) -> usize {
        self.buf.remaining()
    }

    fn need(&self, n: usize, what: &'static str) -> Result<()> {
        if self.buf.remaining() < n { Err(Malformed(what)) } else { Ok(()) }
    }

    pub fn i8(&mut self) -> Result<i8> {
        self.need(1, "an int8 cut short")?;
        Ok(self.buf.get_i8())
    }

    pub fn bool(&mut self) -> Result<bool> {
        Ok(self.i8()? != 0)
    }

    pub fn i16(&mut self) -> Result<i16> {
        self.need(2, "an int16 cut short")?;
        Ok(self.buf.get_i16())
    }

    pub fn i32(&mut self) -> Result<i32> {
        self.need(4, "an int32 cut short")?;
        Ok(self.buf.get_i32())
    }

    pub fn i64(&mut self) -> Result<i64> {
        self.need(8, "an int64 cut short")?;
        Ok(self.buf.get_i64())
    }

    /// An unsigned varint of at most 5 bytes.
    pub fn uvarint(&mut self) -> Result<u32> {
        let mut value: u32 = 0;
        for shift in (0..35).step_by(7) {
            self.need(1, "a varint cut short")?;
            let byte = self.buf.get_u8();
            value |= u32::from(byte & 0x7f).checked_shl(shift).unwrap_or(0);
            if byte & 0x80 == 0 {
                return Ok(value);
            }
        }
        Err(Malformed("a varint longer than 5 bytes"))
    }

    /// A length: `i16`/`i32` (−1 null), or compact (`uvarint` of length + 1, 0 null).
    fn length(&mut self, flexible: bool, wide: bool) -> Result<Option<usize>> {
        let n: i64 = match (flexible, wide) {
            (true, _) => i64::from(self.uvarint()?) - 1,
            (false, false) => i64::from(self.i16()?),
            (false, true) => i64::from(self.i32()?),
        };
        match n {
            -1 => Ok(None),
            n if n < 0 => Err(Malformed("a negative length")),
            n => {
                let n = n as usize;
                self.need(n, "a length past the end of the request")?;
                Ok(Some(n))
            }
        }
    }

    pub fn nullable_string(&mut self, flexible: bool) -> Result<Option<String>> {
        let Some(n) = self.length(flexible, false)? else { return Ok(None) };
        let bytes = self.buf.split_to(n);
        String::from_utf8(bytes.to_vec()).map(Some).map_err(|_| Malformed("a string not UTF-8"))
    }

    pub fn string(&mut self, flexible: bool) -> Result<String> {
        self.nullable_string(flexible)?.ok_or(Malformed("a null string where one is required"))
    }

    pub fn nullable_bytes(&mut self, flexible: bool) -> Result<Option<Bytes>> {
        Ok(self.length(flexible, true)?.map(|n| self.buf.split_to(n)))
    }

    pub fn bytes(&mut self, flexible: bool) -> Result<Bytes> {
        self.nullable_bytes(flexible)?.ok_or(Malformed("null bytes where they are required"))
    }

    /// An array's count (−1 / 0 compact: null); never more than the bytes left, since every
    /// element takes one at least.
    pub fn array(&mut self, flexible: bool) -> Result<Option<usize>> {
        let n: i64 = if flexible { i64::from(self.uvarint()?) - 1 } else { i64::from(self.i32()?) };
        match n {
            -1 => Ok(None),
            n if n < 0 => Err(Malformed("a negative array count")),
            n if n as usize > self.remaining() => Err(Malformed("an array count past the end")),
            n => Ok(Some(n as usize)),
        }
    }

    /// A non-null array of `element`s.
    pub fn vec<T>(
        &mut self,
        flexible: bool,
        mut element: impl FnMut(&mut Reader) -> Result<T>,
    ) -> Result<Vec<T>> {
        let n = self.array(flexible)?.ok_or(Malformed("a null array where one is required"))?;
        (0..n).map(|_| element(self)).collect()
    }

    /// A nullable array of `element`s.
    pub fn nullable_vec<T>(
        &mut self,
        flexible: bool,
        mut element: impl FnMut(&mut Reader) -> Result<T>,
    ) -> Result<Option<Vec<T>>> {
        match self.array(flexible)? {
            None => Ok(None),
            Some(n) => (0..n).map(|_| element(self)).collect::<Result<_>>().map(Some),
        }
    }

    /// The tagged fields that end a structure of a flexible version: skipped.
    pub fn tagged_fields(&mut self, flexible: bool) -> Result<()> {
        if !flexible {
            return Ok(());
        }
        let count = self.uvarint()?;
        for _ in 0..count {
            let _tag = self.uvarint()?;
            let size = self.uvarint()? as usize;
            self.need(size, "a tagged field past the end")?;
            self.buf.advance(size);
        }
        Ok(())
    }
}

/// A request header (v1, or v2 in a flexible version).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Header {
    pub api_key: i16,
    pub version: i16,
    pub correlation_id: i32,
    pub client_id: Option<String>,
}

/// The key, version and correlation id of a frame, before anything else is read: enough to
/// answer a version that is not served.
pub fn peek(frame: &[u8]) -> Result<(i16, i16, i32)> {
    let head = frame.get(..8).ok_or(Malformed("a frame shorter than a request header"))?;
    let api_key = i16::from_be_bytes([head[0], head[1]]);
    let version = i16::from_be_bytes([head[2], head[3]]);
    let correlation_id = i32::from_be_bytes([head[4], head[5], head[6], head[7]]);
    Ok((api_key, version, correlation_id))
}

/// Reads the header of a frame whose version `flexible` says whether it is flexible. The
/// client id stays a plain nullable string in header v2.
pub fn header(r: &mut Reader, flexible: bool) -> Result<Header> {
    let api_key = r.i16()?;
    let version = r.i16()?;
    let correlation_id = r.i32()?;
    let client_id = r.nullable_string(false)?;
    r.tagged_fields(flexible)?;
    Ok(Header { api_key, version, correlation_id, client_id })
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MetadataRequest {
    /// `None`: every topic.
    pub topics: Option<Vec<String>>,
    pub allow_auto_topic_creation: bool,
}

pub fn metadata(r: &mut Reader, v: i16, flex: bool) -> Result<MetadataRequest> {
    let topics = r.nullable_vec(flex, |r| {
        let name = r.string(flex)?;
        r.tagged_fields(flex)?;
        Ok(name)
    })?;
    let allow_auto_topic_creation = if v >= 4 { r.bool()? } else { true };
    if (8..=10).contains(&v) {
        r.bool()?; // include_cluster_authorized_operations
    }
    if v >= 8 {
        r.bool()?; // include_topic_authorized_operations
    }
    r.tagged_fields(flex)?;
    Ok(MetadataRequest { topics, allow_auto_topic_creation })
}

/// A partition's records in a produce: `(partition, records)`.
pub type ProducePartition = (i32, Option<Bytes>);

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProduceRequest {
    pub transactional_id: Option<String>,
    pub acks: i16,
    pub timeout_ms: i32,
    pub topics: Vec<(String, Vec<ProducePartition>)>,
}

pub fn produce(r: &mut Reader, _v: i16, flex: bool) -> Result<ProduceRequest> {
    let transactional_id = r.nullable_string(flex)?;
    let acks = r.i16()?;
    let timeout_ms = r.i32()?;
    let topics = r.vec(flex, |r| {
        let name = r.string(flex)?;
        let partitions = r.vec(flex, |r| {
            let index = r.i32()?;
            let records = r.nullable_bytes(flex)?;
            r.tagged_fields(flex)?;
            Ok((index, records))
        })?;
        r.tagged_fields(flex)?;
        Ok((name, partitions))
    })?;
    r.tagged_fields(flex)?;
    Ok(ProduceRequest { transactional_id, acks, timeout_ms, topics })
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FetchPartition {
    pub partition: i32,
    pub fetch_offset: i64,
    pub partition_max_bytes: i32,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FetchRequest {
    pub max_wait_ms: i32,
    pub min_bytes: i32,
    pub max_bytes: i32,
    pub isolation_level: i8,
    pub topics: Vec<(String, Vec<FetchPartition>)>,
}

pub fn fetch(r: &mut Reader, v: i16, flex: bool) -> Result<FetchRequest> {
    let _replica_id = r.i32()?;
    let max_wait_ms = r.i32()?;
    let min_bytes = r.i32()?;
    let max_bytes = r.i32()?;
    let isolation_level = r.i8()?;
    if v >= 7 {
        let _session_id = r.i32()?;
        let _session_epoch = r.i32()?;
    }
    let topics = r.vec(flex, |r| {
        let topic = r.string(flex)?;
        let partitions = r.vec(flex, |r| {
            let partition = r.i32()?;
            if v >= 9 {
                let _current_leader_epoch = r.i32()?;
            }
            let fetch_offset = r.i64()?;
            if v >= 5 {
                let _log_start_offset = r.i64()?;
            }
            let partition_max_bytes = r.i32()?;
            r.tagged_fields(flex)?;
            Ok(FetchPartition { partition, fetch_offset, partition_max_bytes })
        })?;
        r.tagged_fields(flex)?;
        Ok((topic, partitions))
    })?;
    if v >= 7 {
        // Forgotten topics of an incremental fetch session: sessions are not kept.
        r.vec(flex, |r| {
            r.string(flex)?;
            r.vec(flex, Reader::i32)?;
            r.tagged_fields(flex)
        })?;
    }
    if v >= 11 {
        let _rack_id = r.string(flex)?;
    }
    r.tagged_fields(flex)?;
    Ok(FetchRequest { max_wait_ms, min_bytes, max_bytes, isolation_level, topics })
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListOffsetsRequest {
    /// 1: `read_committed` (the latest offset is the last stable one).
    pub isolation_level: i8,
    pub topics: Vec<(String, Vec<(i32, i64)>)>,
}

pub fn list_offsets(r: &mut Reader, v: i16, flex: bool) -> Result<ListOffsetsRequest> {
    let _replica_id = r.i32()?;
    let isolation_level = if v >= 2 { r.i8()? } else { 0 };
    let topics = r.vec(flex, |r| {
        let name = r.string(flex)?;
        let partitions = r.vec(flex, |r| {
            let partition = r.i32()?;
            if v >= 4 {
                let _current_leader_epoch = r.i32()?;
            }
            let timestamp = r.i64()?;
            r.tagged_fields(flex)?;
            Ok((partition, timestamp))
        })?;
        r.tagged_fields(flex)?;
        Ok((name, partitions))
    })?;
    r.tagged_fields(flex)?;
    Ok(ListOffsetsRequest { isolation_level, topics })
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CreatableTopic {
    pub name: String,
    pub num_partitions: i32,
    pub replication_factor: i16,
    pub assignments: Vec<(i32, Vec<i32>)>,
    pub configs: Vec<(String, Option<String>)>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CreateTopicsRequest {
    pub topics: Vec<CreatableTopic>,
    pub timeout_ms: i32,
    pub validate_only: bool,
}

pub fn create_topics(r: &mut Reader, _v: i16, flex: bool) -> Result<CreateTopicsRequest> {
    let topics = r.vec(flex, |r| {
        let name = r.string(flex)?;
        let num_partitions = r.i32()?;
        let replication_factor = r.i16()?;
        let assignments = r.vec(flex, |r| {
            let partition = r.i32()?;
            let brokers = r.vec(flex, Reader::i32)?;
            r.tagged_fields(flex)?;
            Ok((partition, brokers))
        })?;
        let configs = r.vec(flex, |r| {
            let name = r.string(flex)?;
            let value = r.nullable_string(flex)?;
            r.tagged_fields(flex)?;
            Ok((name, value))
        })?;
        r.tagged_fields(flex)?;
        Ok(CreatableTopic { name, num_partitions, replication_factor, assignments, configs })
    })?;
    let timeout_ms = r.i32()?;
    let validate_only = r.bool()?;
    r.tagged_fields(flex)?;
    Ok(CreateTopicsRequest { topics, timeout_ms, validate_only })
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FindCoordinatorRequest {
    pub key: String,
    /// 0: a group, 1: a transaction.
    pub key_type: i8,
}

pub fn find_coordinator(r: &mut Reader, v: i16, flex: bool) -> Result<FindCoordinatorRequest> {
    let key = r.string(flex)?;
    let key_type = if v >= 1 { r.i8()? } else { 0 };
    r.tagged_fields(flex)?;
    Ok(FindCoordinatorRequest { key, key_type })
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JoinGroupRequest {
    pub group_id: String,
    pub session_timeout_ms: i32,
    pub rebalance_timeout_ms: i32,
    pub member_id: String,
    pub group_instance_id: Option<String>,
    pub protocol_type: String,
    pub protocols: Vec<(String, Bytes)>,
}

pub fn join_group(r: &mut Reader, v: i16, flex: bool) -> Result<JoinGroupRequest> {
    let group_id = r.string(flex)?;
    let session_timeout_ms = r.i32()?;
    let rebalance_timeout_ms = if v >= 1 { r.i32()? } else { session_timeout_ms };
    let member_id = r.string(flex)?;
    let group_instance_id = if v >= 5 { r.nullable_string(flex)? } else { None };
    let protocol_type = r.string(flex)?;
    let protocols = r.vec(flex, |r| {
        let name = r.string(flex)?;
        let metadata = r.bytes(flex)?;
        r.tagged_fields(flex)?;
        Ok((name, metadata))
    })?;
    r.tagged_fields(flex)?;
    Ok(JoinGroupRequest {
        group_id,
        session_timeout_ms,
        rebalance_timeout_ms,
        member_id,
        group_instance_id,
        protocol_type,
        protocols,
    })
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SyncGroupRequest {
    pub group_id: String,
    pub generation_id: i32,
    pub member_id: String,
    pub group_instance_id: Option<String>,
    pub assignments: Vec<(String, Bytes)>,
}

pub fn sync_group(r: &mut Reader, v: i16, flex: bool) -> Result<SyncGroupRequest> {
    let group_id = r.string(flex)?;
    let generation_id = r.i32()?;
    let member_id = r.string(flex)?;
    let group_instance_id = if v >= 3 { r.nullable_string(flex)? } else { None };
    let assignments = r.vec(flex, |r| {
        let member = r.string(flex)?;
        let assignment = r.bytes(flex)?;
        r.tagged_fields(flex)?;
        Ok((member, assignment))
    })?;
    r.tagged_fields(flex)?;
    Ok(SyncGroupRequest { group_id, generation_id, member_id, group_instance_id, assignments })
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeartbeatRequest {
    pub group_id: String,
    pub generation_id: i32,
    pub member_id: String,
    pub group_instance_id: Option<String>,
}

pub fn heartbeat(r: &mut Reader, v: i16, flex: bool) -> Result<HeartbeatRequest> {
    let group_id = r.string(flex)?;
    let generation_id = r.i32()?;
    let member_id = r.string(flex)?;
    let group_instance_id = if v >= 3 { r.nullable_string(flex)? } else { None };
    r.tagged_fields(flex)?;
    Ok(HeartbeatRequest { group_id, generation_id, member_id, group_instance_id })
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaveGroupRequest {
    pub group_id: String,
    /// `(member id, group instance id)`; one member without an instance id before v3.
    pub members: Vec<(String, Option<String>)>,
}

pub fn leave_group(r: &mut Reader, v: i16, flex: bool) -> Result<LeaveGroupRequest> {
    let group_id = r.string(flex)?;
    let members = if v <= 2 {
        vec![(r.string(flex)?, None)]
    } else {
        r.vec(flex, |r| {
            let member = r.string(flex)?;
            let group_instance_id = r.nullable_string(flex)?;
            r.tagged_fields(flex)?;
            Ok((member, group_instance_id))
        })?
    };
    r.tagged_fields(flex)?;
    Ok(LeaveGroupRequest { group_id, members })
}

/// A partition's offset in a commit: `(partition, offset, metadata)`.
pub type CommittedOffset = (i32, i64, Option<String>);

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OffsetCommitRequest {
    pub group_id: String,
    pub generation_id: i32,
    pub member_id: String,
    pub group_instance_id: Option<String>,
    pub topics: Vec<(String, Vec<CommittedOffset>)>,
}

pub fn offset_commit(r: &mut Reader, v: i16, flex: bool) -> Result<OffsetCommitRequest> {
    let group_id = r.string(flex)?;
    let generation_id = r.i32()?;
    let member_id = r.string(flex)?;
    let group_instance_id = if v >= 7 { r.nullable_string(flex)? } else { None };
    if v <= 4 {
        let _retention_time_ms = r.i64()?;
    }
    let topics = r.vec(flex, |r| {
        let name = r.string(flex)?;
        let partitions = r.vec(flex, |r| {
            let partition = r.i32()?;
            let offset = r.i64()?;
            if v >= 6 {
                let _committed_leader_epoch = r.i32()?;
            }
            let metadata = r.nullable_string(flex)?;
            r.tagged_fields(flex)?;
            Ok((partition, offset, metadata))
        })?;
        r.tagged_fields(flex)?;
        Ok((name, partitions))
    })?;
    r.tagged_fields(flex)?;
    Ok(OffsetCommitRequest { group_id, generation_id, member_id, group_instance_id, topics })
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OffsetFetchRequest {
    pub group_id: String,
    /// `None`: every partition the group committed.
    pub topics: Option<Vec<(String, Vec<i32>)>>,
}

pub fn offset_fetch(r: &mut Reader, v: i16, flex: bool) -> Result<OffsetFetchRequest> {
    let group_id = r.string(flex)?;
    let topic = |r: &mut Reader| {
        let name = r.string(flex)?;
        let partitions = r.vec(flex, Reader::i32)?;
        r.tagged_fields(flex)?;
        Ok((name, partitions))
    };
    let topics = if v >= 2 { r.nullable_vec(flex, topic)? } else { Some(r.vec(flex, topic)?) };
    if v >= 7 {
        let _require_stable = r.bool()?;
    }
    r.tagged_fields(flex)?;
    Ok(OffsetFetchRequest { group_id, topics })
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListGroupsRequest {
    /// The group states asked for (v4); empty: every state.
    pub states: Vec<String>,
}

pub fn list_groups(r: &mut Reader, v: i16, flex: bool) -> Result<ListGroupsRequest> {
    let states = if v >= 4 { r.vec(flex, |r| r.string(flex))? } else { Vec::new() };
    r.tagged_fields(flex)?;
    Ok(ListGroupsRequest { states })
}

/// The group ids of a DescribeGroups or DeleteGroups request.
pub fn group_ids(r: &mut Reader, v: i16, flex: bool, api: GroupIdsOf) -> Result<Vec<String>> {
    let groups = r.vec(flex, |r| r.string(flex))?;
    if api == GroupIdsOf::Describe && v >= 3 {
        r.bool()?; // include_authorized_operations
    }
    r.tagged_fields(flex)?;
    Ok(groups)
}

/// Which request [`group_ids`] reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GroupIdsOf {
    Describe,
    Delete,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OffsetDeleteRequest {
    pub group_id: String,
    pub topics: Vec<(String, Vec<i32>)>,
}

pub fn offset_delete(r: &mut Reader, _v: i16, flex: bool) -> Result<OffsetDeleteRequest> {
    let group_id = r.string(flex)?;
    let topics = r.vec(flex, |r| {
        let name = r.string(flex)?;
        let partitions = r.vec(flex, Reader::i32)?;
        r.tagged_fields(flex)?;
        Ok((name, partitions))
    })?;
    r.tagged_fields(flex)?;
    Ok(OffsetDeleteRequest { group_id, topics })
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeleteTopicsRequest {
    pub topics: Vec<String>,
    pub timeout_ms: i32,
}

pub fn delete_topics(r: &mut Reader, _v: i16, flex: bool) -> Result<DeleteTopicsRequest> {
    let topics = r.vec(flex, |r| r.string(flex))?;
    let timeout_ms = r.i32()?;
    r.tagged_fields(flex)?;
    Ok(DeleteTopicsRequest { topics, timeout_ms })
}

/// A topic's new partition count, and the replicas the client asks for (refused: the
/// cluster places replicas).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewPartitions {
    pub name: String,
    pub count: i32,
    pub assignments: Option<Vec<Vec<i32>>>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CreatePartitionsRequest {
    pub topics: Vec<NewPartitions>,
    pub timeout_ms: i32,
    pub validate_only: bool,
}

pub fn create_partitions(r: &mut Reader, _v: i16, flex: bool) -> Result<CreatePartitionsRequest> {
    let topics = r.vec(flex, |r| {
        let name = r.string(flex)?;
        let count = r.i32()?;
        let assignments = r.nullable_vec(flex, |r| {
            let brokers = r.vec(flex, Reader::i32)?;
            r.tagged_fields(flex)?;
            Ok(brokers)
        })?;
        r.tagged_fields(flex)?;
        Ok(NewPartitions { name, count, assignments })
    })?;
    let timeout_ms = r.i32()?;
    let validate_only = r.bool()?;
    r.tagged_fields(flex)?;
    Ok(CreatePartitionsRequest { topics, timeout_ms, validate_only })
}

/// Kafka's config resource types the listener knows.
pub mod resource_type {
    pub const TOPIC: i8 = 2;
    pub const BROKER: i8 = 4;
}

/// A resource whose configs are described: `None` keys, every config.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigResource {
    pub resource_type: i8,
    pub name: String,
    pub keys: Option<Vec<String>>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DescribeConfigsRequest {
    pub resources: Vec<ConfigResource>,
    pub include_synonyms: bool,
    pub include_documentation: bool,
}

pub fn describe_configs(r: &mut Reader, v: i16, flex: bool) -> Result<DescribeConfigsRequest> {
    let resources = r.vec(flex, |r| {
        let resource_type = r.i8()?;
        let name = r.string(flex)?;
        let keys = r.nullable_vec(flex, |r| r.string(flex))?;
        r.tagged_fields(flex)?;
        Ok(ConfigResource { resource_type, name, keys })
    })?;
    let include_synonyms = if v >= 1 { r.bool()? } else { false };
    let include_documentation = if v >= 3 { r.bool()? } else { false };
    r.tagged_fields(flex)?;
    Ok(DescribeConfigsRequest { resources, include_synonyms, include_documentation })
}

/// How an IncrementalAlterConfigs entry changes a config (AlterConfigs: always `Set`, and
/// every config not named goes back to its default).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConfigOp {
    Set,
    Delete,
    Append,
    Subtract,
}

/// A resource's config changes: `(name, op, value)`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AlterResource {
    pub resource_type: i8,
    pub name: String,
    pub configs: Vec<(String, ConfigOp, Option<String>)>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AlterConfigsRequest {
    pub resources: Vec<AlterResource>,
    pub validate_only: bool,
}

/// AlterConfigs (`incremental` false) or IncrementalAlterConfigs (true).
pub fn alter_configs(
    r: &mut Reader,
    _v: i16,
    flex: bool,
    incremental: bool,
) -> Result<AlterConfigsRequest> {
    let resources = r.vec(flex, |r| {
        let resource_type = r.i8()?;
        let name = r.string(flex)?;
        let configs = r.vec(flex, |r| {
            let key = r.string(flex)?;
            let op = match incremental {
                false => ConfigOp::Set,
                true => match r.i8()? {
                    0 => ConfigOp::Set,
                    1 => ConfigOp::Delete,
                    2 => ConfigOp::Append,
                    3 => ConfigOp::Subtract,
                    _ => return Err(Malformed("an unknown config operation")),
                },
            };
            let value = r.nullable_string(flex)?;
            r.tagged_fields(flex)?;
            Ok((key, op, value))
        })?;
        r.tagged_fields(flex)?;
        Ok(AlterResource { resource_type, name, configs })
    })?;
    let validate_only = r.bool()?;
    r.tagged_fields(flex)?;
    Ok(AlterConfigsRequest { resources, validate_only })
}

pub fn describe_cluster(r: &mut Reader, v: i16, flex: bool) -> Result<()> {
    r.bool()?; // include_cluster_authorized_operations
    if v >= 1 {
        r.i8()?; // endpoint_type
    }
    r.tagged_fields(flex)?;
    Ok(())
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeleteRecordsRequest {
    /// Per topic, each partition and the record number its log is to start at (−1: its high
    /// watermark).
    pub topics: Vec<(String, Vec<(i32, i64)>)>,
    pub timeout_ms: i32,
}

pub fn delete_records(r: &mut Reader, _v: i16, flex: bool) -> Result<DeleteRecordsRequest> {
    let topics = r.vec(flex, |r| {
        let name = r.string(flex)?;
        let partitions = r.vec(flex, |r| {
            let partition = r.i32()?;
            let offset = r.i64()?;
            r.tagged_fields(flex)?;
            Ok((partition, offset))
        })?;
        r.tagged_fields(flex)?;
        Ok((name, partitions))
    })?;
    let timeout_ms = r.i32()?;
    r.tagged_fields(flex)?;
    Ok(DeleteRecordsRequest { topics, timeout_ms })
}

/// Partitions by topic; `None`: every partition of the cluster.
pub type TopicPartitions = Option<Vec<(String, Vec<i32>)>>;

fn topic_partitions(r: &mut Reader, flex: bool) -> Result<TopicPartitions> {
    r.nullable_vec(flex, |r| {
        let topic = r.string(flex)?;
        let partitions = r.vec(flex, Reader::i32)?;
        r.tagged_fields(flex)?;
        Ok((topic, partitions))
    })
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ElectLeadersRequest {
    /// 0: preferred, 1: unclean.
    pub election_type: i8,
    pub partitions: TopicPartitions,
    pub timeout_ms: i32,
}

pub fn elect_leaders(r: &mut Reader, v: i16, flex: bool) -> Result<ElectLeadersRequest> {
    let election_type = if v >= 1 { r.i8()? } else { 0 };
    let partitions = topic_partitions(r, flex)?;
    let timeout_ms = r.i32()?;
    r.tagged_fields(flex)?;
    Ok(ElectLeadersRequest { election_type, partitions, timeout_ms })
}

/// A partition's new replicas in an AlterPartitionReassignments; `None` cancels its move.
pub type ReassignedPartition = (i32, Option<Vec<i32>>);

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AlterReassignmentsRequest {
    pub timeout_ms: i32,
    pub topics: Vec<(String, Vec<ReassignedPartition>)>,
}

pub fn alter_reassignments(
    r: &mut Reader,
    _v: i16,
    flex: bool,
) -> Result<AlterReassignmentsRequest> {
    let timeout_ms = r.i32()?;
    let topics = r.vec(flex, |r| {
        let name = r.string(flex)?;
        let partitions = r.vec(flex, |r| {
            let index = r.i32()?;
            let replicas = r.nullable_vec(flex, Reader::i32)?;
            r.tagged_fields(flex)?;
            Ok((index, replicas))
        })?;
        r.tagged_fields(flex)?;
        Ok((name, partitions))
    })?;
    r.tagged_fields(flex)?;
    Ok(AlterReassignmentsRequest { timeout_ms, topics })
}

/// The partitions a ListPartitionReassignments asks about.
pub fn list_reassignments(r: &mut Reader, _v: i16, flex: bool) -> Result<TopicPartitions> {
    let _timeout_ms = r.i32()?;
    let partitions = topic_partitions(r, flex)?;
    r.tagged_fields(flex)?;
    Ok(partitions)
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InitProducerIdRequest {
    pub transactional_id: Option<String>,
    pub transaction_timeout_ms: i32,
    pub producer_id: i64,
    pub producer_epoch: i16,
}

pub fn init_producer_id(r: &mut Reader, v: i16, flex: bool) -> Result<InitProducerIdRequest> {
    let transactional_id = r.nullable_string(flex)?;
    let transaction_timeout_ms = r.i32()?;
    let (producer_id, producer_epoch) = if v >= 3 { (r.i64()?, r.i16()?) } else { (-1, -1) };
    r.tagged_fields(flex)?;
    Ok(InitProducerIdRequest {
        transactional_id,
        transaction_timeout_ms,
        producer_id,
        producer_epoch,
    })
}

/// A transactional producer, as the transaction APIs name it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TxnProducer {
    pub transactional_id: String,
    pub producer_id: i64,
    pub producer_epoch: i16,
}

fn txn_producer(r: &mut Reader, flex: bool) -> Result<TxnProducer> {
    Ok(TxnProducer {
        transactional_id: r.string(flex)?,
        producer_id: r.i64()?,
        producer_epoch: r.i16()?,
    })
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AddPartitionsToTxnRequest {
    pub producer: TxnProducer,
    pub topics: Vec<(String, Vec<i32>)>,
}

/// AddPartitionsToTxn up to version 3 (a client's; 4 on is a broker's batch of them).
pub fn add_partitions_to_txn(
    r: &mut Reader,
    _v: i16,
    flex: bool,
) -> Result<AddPartitionsToTxnRequest> {
    let producer = txn_producer(r, flex)?;
    let topics = r.vec(flex, |r| {
        let name = r.string(flex)?;
        let partitions = r.vec(flex, Reader::i32)?;
        r.tagged_fields(flex)?;
        Ok((name, partitions))
    })?;
    r.tagged_fields(flex)?;
    Ok(AddPartitionsToTxnRequest { producer, topics })
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AddOffsetsToTxnRequest {
    pub producer: TxnProducer,
    pub group_id: String,
}

pub fn add_offsets_to_txn(r: &mut Reader, _v: i16, flex: bool) -> Result<AddOffsetsToTxnRequest> {
    let producer = txn_producer(r, flex)?;
    let group_id = r.string(flex)?;
    r.tagged_fields(flex)?;
    Ok(AddOffsetsToTxnRequest { producer, group_id })
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EndTxnRequest {
    pub producer: TxnProducer,
    pub committed: bool,
}

pub fn end_txn(r: &mut Reader, _v: i16, flex: bool) -> Result<EndTxnRequest> {
    let producer = txn_producer(r, flex)?;
    let committed = r.bool()?;
    r.tagged_fields(flex)?;
    Ok(EndTxnRequest { producer, committed })
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TxnOffsetCommitRequest {
    pub transactional_id: String,
    pub group_id: String,
    pub producer_id: i64,
    pub producer_epoch: i16,
    pub topics: Vec<(String, Vec<TxnOffset>)>,
}

/// A partition's offset in a TxnOffsetCommit: `(partition, offset, metadata)`.
pub type TxnOffset = (i32, i64, Option<String>);

pub fn txn_offset_commit(r: &mut Reader, v: i16, flex: bool) -> Result<TxnOffsetCommitRequest> {
    let transactional_id = r.string(flex)?;
    let group_id = r.string(flex)?;
    let producer_id = r.i64()?;
    let producer_epoch = r.i16()?;
    if v >= 3 {
        let _generation_id = r.i32()?;
        let _member_id = r.string(flex)?;
        let _group_instance_id = r.nullable_string(flex)?;
    }
    let topics = r.vec(flex, |r| {
        let name = r.string(flex)?;
        let partitions = r.vec(flex, |r| {
            let partition = r.i32()?;
            let offset = r.i64()?;
            if v >= 2 {
                let _committed_leader_epoch = r.i32()?;
            }
            let metadata = r.nullable_string(flex)?;
            r.tagged_fields(flex)?;
            Ok((partition, offset, metadata))
        })?;
        r.tagged_fields(flex)?;
        Ok((name, partitions))
    })?;
    r.tagged_fields(flex)?;
    Ok(TxnOffsetCommitRequest { transactional_id, group_id, producer_id, producer_epoch, topics })
}

/// Decodes a whole request frame of any API and version the listener serves, header and body,
/// as the listener does: `Ok(None)` for one it does not serve. What the fuzz target drives.
pub fn decode_frame(frame: Bytes) -> Result<Option<Header>> {
    use kafka_protocol::messages::ApiKey;
    let (key, version, _) = peek(&frame)?;
    let Some(api) = crate::kafka::versions::served(key, version) else { return Ok(None) };
    let flex = crate::kafka::versions::is_flexible(api, version);
    let mut r = Reader::new(frame);
    let header = header(&mut r, flex)?;
    let v = version;
    match api {
        ApiKey::ApiVersions => {
            if flex {
                r.string(flex)?;
                r.string(flex)?;
            }
            r.tagged_fields(flex)?;
        }
        ApiKey::Metadata => drop(metadata(&mut r, v, flex)?),
        ApiKey::CreateTopics => drop(create_topics(&mut r, v, flex)?),
        ApiKey::Produce => drop(produce(&mut r, v, flex)?),
        ApiKey::Fetch => drop(fetch(&mut r, v, flex)?),
        ApiKey::ListOffsets => drop(list_offsets(&mut r, v, flex)?),
        ApiKey::FindCoordinator => drop(find_coordinator(&mut r, v, flex)?),
        ApiKey::JoinGroup => drop(join_group(&mut r, v, flex)?),
        ApiKey::SyncGroup => drop(sync_group(&mut r, v, flex)?),
        ApiKey::Heartbeat => drop(heartbeat(&mut r, v, flex)?),
        ApiKey::LeaveGroup => drop(leave_group(&mut r, v, flex)?),
        ApiKey::OffsetCommit => drop(offset_commit(&mut r, v, flex)?),
        ApiKey::OffsetFetch => drop(offset_fetch(&mut r, v, flex)?),
        ApiKey::InitProducerId => drop(init_producer_id(&mut r, v, flex)?),
        ApiKey::AddPartitionsToTxn => drop(add_partitions_to_txn(&mut r, v, flex)?),
        ApiKey::AddOffsetsToTxn => drop(add_offsets_to_txn(&mut r, v, flex)?),
        ApiKey::EndTxn => drop(end_txn(&mut r, v, flex)?),
        ApiKey::TxnOffsetCommit => drop(txn_offset_commit(&mut r, v, flex)?),
        ApiKey::ListGroups => drop(list_groups(&mut r, v, flex)?),
        ApiKey::DescribeGroups => drop(group_ids(&mut r, v, flex, GroupIdsOf::Describe)?),
        ApiKey::DeleteGroups => drop(group_ids(&mut r, v, flex, GroupIdsOf::Delete)?),
        ApiKey::OffsetDelete => drop(offset_delete(&mut r, v, flex)?),
        ApiKey::DeleteTopics => drop(delete_topics(&mut r, v, flex)?),
        ApiKey::CreatePartitions => drop(create_partitions(&mut r, v, flex)?),
        ApiKey::DescribeConfigs => drop(describe_configs(&mut r, v, flex)?),
        ApiKey::AlterConfigs => drop(alter_configs(&mut r, v, flex, false)?),
        ApiKey::IncrementalAlterConfigs => drop(alter_configs(&mut r, v, flex, true)?),
        ApiKey::DescribeCluster => describe_cluster(&mut r, v, flex)?,
        ApiKey::ElectLeaders => drop(elect_leaders(&mut r, v, flex)?),
        ApiKey::DeleteRecords => drop(delete_records(&mut r, v, flex)?),
        ApiKey::AlterPartitionReassignments => drop(alter_reassignments(&mut r, v, flex)?),
        ApiKey::ListPartitionReassignments => drop(list_reassignments(&mut r, v, flex)?),
        _ => return Ok(None),
    }
    Ok(Some(header))
}

#[cfg(test)]
mod tests {
    use bytes::BufMut;

    use super::*;

    #[test]
    fn an_array_count_cannot_claim_more_than_the_bytes_left() {
        // A metadata request (v1) claiming 2^31 - 1 topics in 6 bytes.
        let mut frame = Vec::new();
        frame.put_i32(i32::MAX);
        frame.put_i16(1);
        frame.put_u8(b'a');
        let error = metadata(&mut Reader::new(frame.into()), 1, false).unwrap_err();
        assert_eq!(error, Malformed("an array count past the end"));
        // The same in a compact array.
        let compact = Bytes::from_static(&[0xff, 0xff, 0xff, 0xff, 0x0f]);
        assert!(metadata(&mut Reader::new(compact), 9, true).is_err());
    }

    #[test]
    fn strings_bytes_and_varints_are_checked() {
        let cut = Bytes::from_static(&[0, 5, b'a']);
        assert!(Reader::new(cut).string(false).is_err());
        let not_utf8 = Bytes::from_static(&[0, 1, 0xff]);
        assert_eq!(Reader::new(not_utf8).string(false), Err(Malformed("a string not UTF-8")));
        let long_varint = Bytes::from_static(&[0x80, 0x80, 0x80, 0x80, 0x80, 0x01]);
        assert!(Reader::new(long_varint).uvarint().is_err());
        let null = Bytes::from_static(&[0xff, 0xff, 0xff, 0xff]);
        assert_eq!(Reader::new(null).nullable_bytes(false), Ok(None));
        let tagged = Bytes::from_static(&[1, 7, 200]);
        assert!(Reader::new(tagged).tagged_fields(true).is_err(), "a tagged field past the end");
    }

    #[test]
    fn a_produce_request_reads_in_both_encodings() {
        let records = b"not parsed here";
        let mut plain = Vec::new();
        plain.put_i16(-1); // transactional id: null
        plain.put_i16(-1); // acks all
        plain.put_i32(30_000);
        plain.put_i32(1);
        plain.put_i16(5);
        plain.put_slice(b"topic");
        plain.put_i32(1);
        plain.put_i32(3);
        plain.put_i32(records.len() as i32);
        plain.put_slice(records);
        let request = produce(&mut Reader::new(plain.into()), 8, false).unwrap();
        let expected = ProduceRequest {
            transactional_id: None,
            acks: -1,
            timeout_ms: 30_000,
            topics: vec![("topic".into(), vec![(3, Some(Bytes::from_static(records)))])],
        };
        assert_eq!(request, expected);
        let mut compact = vec![0u8]; // null transactional id
        compact.put_i16(-1);
        compact.put_i32(30_000);
        compact.put_u8(2); // one topic
        compact.put_u8(6);
        compact.put_slice(b"topic");
        compact.put_u8(2); // one partition
        compact.put_i32(3);
        compact.put_u8(records.len() as u8 + 1);
        compact.put_slice(records);
        compact.extend_from_slice(&[0, 0, 0]); // tagged fields: partition, topic, request
        assert_eq!(produce(&mut Reader::new(compact.into()), 9, true).unwrap(), expected);
    }
}
