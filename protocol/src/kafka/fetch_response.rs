//! A Fetch answer encoded around its records rather than with them, so that a broker can send
//! each partition's stored batches from their files (`sendfile`) without copying them into
//! the answer. Versions 4 to 11, the ones served: none is flexible, so a partition's records
//! are the last field of its entry and everything else is bytes before or after them.

use bytes::{BufMut, BytesMut};

use crate::kafka::request::{Header, Malformed};

/// One partition's entry, its records known by their length only.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionHead {
    pub partition: i32,
    pub error: i16,
    pub high_watermark: i64,
    pub last_stable_offset: i64,
    pub log_start: i64,
    pub records_len: usize,
    /// For a `read_committed` fetch, the aborted transactions in the records: `(producer id,
    /// first offset)`; `None` (null) otherwise.
    pub aborted: Option<Vec<(i64, i64)>>,
}

/// An encoded Fetch answer without its records: `bytes` is the whole frame (its size counting
/// the records) but for them, and `gaps[i]` the position in `bytes` where the records of the
/// `i`-th partition (in the order given) go.
#[derive(Debug)]
pub struct FetchFrame {
    pub bytes: BytesMut,
    pub gaps: Vec<usize>,
}

/// Encodes the answer to a Fetch of `header`'s version: no throttle, no error, no session, no
/// preferred read replica.
pub fn encode(
    header: &Header,
    topics: &[(String, Vec<PartitionHead>)],
) -> Result<FetchFrame, Malformed> {
    let v = header.version;
    if !(4..=11).contains(&v) {
        return Err(Malformed("a Fetch answer in a version not served"));
    }
    let too_large = || Malformed("a Fetch answer beyond 2 GiB");
    let mut bytes = BytesMut::with_capacity(64 + topics.len() * 64);
    bytes.put_u32(0); // the frame's size, written last
    bytes.put_i32(header.correlation_id);
    bytes.put_i32(0); // throttle_time_ms
    if v >= 7 {
        bytes.put_i16(0); // error_code
        bytes.put_i32(0); // session_id
    }
    bytes.put_i32(i32::try_from(topics.len()).map_err(|_| too_large())?);
    let mut gaps = Vec::new();
    let mut records = 0usize;
    for (topic, partitions) in topics {
        bytes.put_i16(i16::try_from(topic.len()).map_err(|_| Malformed("a topic name too long"))?);
        bytes.put_slice(topic.as_bytes());
        bytes.put_i32(i32::try_from(partitions.len()).map_err(|_| too_large())?);
        for p in partitions {
            bytes.put_i32(p.partition);
            bytes.put_i16(p.error);
            bytes.put_i64(p.high_watermark);
            bytes.put_i64(p.last_stable_offset);
            if v >= 5 {
                bytes.put_i64(p.log_start);
            }
            match &p.aborted {
                None => bytes.put_i32(-1),
                Some(aborted) => {
                    bytes.put_i32(i32::try_from(aborted.len()).map_err(|_| too_large())?);
                    for &(producer_id, first_offset) in aborted {
                        bytes.put_i64(producer_id);
                        bytes.put_i64(first_offset);
                    }
                }
            }
            if v >= 11 {
                bytes.put_i32(-1); // preferred_read_replica
            }
            bytes.put_i32(i32::try_from(p.records_len).map_err(|_| too_large())?);
            gaps.push(bytes.len());
            records += p.records_len;
        }
    }
    let size = u32::try_from(bytes.len() - 4 + records)
        .ok()
        .filter(|&s| s <= i32::MAX as u32)
        .ok_or_else(too_large)?;
    bytes[..4].copy_from_slice(&size.to_be_bytes());
    Ok(FetchFrame { bytes, gaps })
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;
    use kafka_protocol::messages::fetch_response::{
        AbortedTransaction, FetchableTopicResponse, PartitionData,
    };
    use kafka_protocol::messages::{ApiKey, BrokerId, FetchResponse, ProducerId, TopicName};

    use super::*;
    use crate::kafka::response::{encode_version, str_bytes};

    #[test]
    fn the_frame_with_its_records_spliced_in_is_what_kafka_protocol_encodes() {
        let records: [&[u8]; 3] = [b"first batch bytes", b"", b"third"];
        let heads = |topic: &str, from: usize, n: usize| {
            let partitions = (from..from + n)
                .map(|i| PartitionHead {
                    partition: i as i32,
                    error: if i == 1 { 6 } else { 0 },
                    high_watermark: 100 + i as i64,
                    last_stable_offset: 90 + i as i64,
                    log_start: 7 * i as i64,
                    records_len: records[i].len(),
                    aborted: (i == 1).then(|| vec![(42, 7)]),
                })
                .collect::<Vec<_>>();
            (topic.to_owned(), partitions)
        };
        let topics = vec![heads("clicks", 0, 2), heads("views", 2, 1)];
        for version in 4..=11 {
            let header = Header { api_key: 1, version, correlation_id: 4242, client_id: None };
            let frame = encode(&header, &topics).unwrap();
            let mut spliced = Vec::new();
            let mut at = 0;
            for (gap, records) in frame.gaps.iter().zip(records) {
                spliced.extend_from_slice(&frame.bytes[at..*gap]);
                spliced.extend_from_slice(records);
                at = *gap;
            }
            spliced.extend_from_slice(&frame.bytes[at..]);

            let body = FetchResponse::default().with_responses(
                topics
                    .iter()
                    .map(|(topic, partitions)| {
                        let partitions = partitions
                            .iter()
                            .map(|p| {
                                PartitionData::default()
                                    .with_partition_index(p.partition)
                                    .with_error_code(p.error)
                                    .with_high_watermark(p.high_watermark)
                                    .with_last_stable_offset(p.last_stable_offset)
                                    .with_log_start_offset(p.log_start)
                                    .with_aborted_transactions(p.aborted.as_ref().map(|a| {
                                        a.iter()
                                            .map(|&(id, first)| {
                                                AbortedTransaction::default()
                                                    .with_producer_id(ProducerId(id))
                                                    .with_first_offset(first)
                                            })
                                            .collect()
                                    }))
                                    .with_preferred_read_replica(BrokerId(-1))
                                    .with_records(Some(Bytes::from_static(
                                        records[p.partition as usize],
                                    )))
                            })
                            .collect();
                        FetchableTopicResponse::default()
                            .with_topic(TopicName(str_bytes(topic)))
                            .with_partitions(partitions)
                    })
                    .collect(),
            );
            let expected = encode_version(ApiKey::Fetch, version, 4242, &body).unwrap();
            assert_eq!(spliced, expected.to_vec(), "version {version}");
        }
    }

    #[test]
    fn versions_not_served_are_refused() {
        for version in [3, 12] {
            let header = Header { api_key: 1, version, correlation_id: 1, client_id: None };
            assert!(encode(&header, &[]).is_err());
        }
    }
}
