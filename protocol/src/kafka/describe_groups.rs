//! The client's side of DescribeGroups (version 0), for tools that show a Kafka group's members
//! as Kafka's own tools do (`trib groups describe`): the request to a group's coordinator, its
//! answer, and the consumer protocol's assignment that the answer carries for each member.

use bytes::{BufMut, Bytes, BytesMut};

use crate::kafka::request::{Malformed, Reader};

/// DescribeGroups' API key.
const API_KEY: i16 = 15;

/// A group as its coordinator describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Group {
    pub error: i16,
    pub group_id: String,
    /// Kafka's state name: `Empty`, `PreparingRebalance`, `CompletingRebalance`, `Stable`,
    /// `Dead`.
    pub state: String,
    pub protocol_type: String,
    /// The assignor the members agreed on (`range`, `roundrobin`, …).
    pub protocol: String,
    pub members: Vec<Member>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Member {
    pub member_id: String,
    pub client_id: String,
    pub client_host: String,
    /// The member's assignment as the group's protocol encodes it: for consumers,
    /// [`consumer_assignment`] reads it.
    pub assignment: Bytes,
}

/// The frame of a DescribeGroups v0 request for `group`.
pub fn request(correlation_id: i32, client_id: &str, group: &str) -> Result<Vec<u8>, Malformed> {
    let string = |out: &mut BytesMut, s: &str| -> Result<(), Malformed> {
        out.put_i16(i16::try_from(s.len()).map_err(|_| Malformed("a string too long"))?);
        out.put_slice(s.as_bytes());
        Ok(())
    };
    let mut body = BytesMut::new();
    body.put_i16(API_KEY);
    body.put_i16(0);
    body.put_i32(correlation_id);
    string(&mut body, client_id)?;
    body.put_i32(1);
    string(&mut body, group)?;
    let mut frame = Vec::with_capacity(4 + body.len());
    frame.extend_from_slice(&(body.len() as u32).to_be_bytes());
    frame.extend_from_slice(&body);
    Ok(frame)
}

/// The answer to [`request`] (the frame without its size): its correlation id and the group.
pub fn response(frame: Bytes) -> Result<(i32, Group), Malformed> {
    let mut r = Reader::new(frame);
    let correlation_id = r.i32()?;
    let mut groups = r.vec(false, |r| {
        let error = r.i16()?;
        let group_id = r.string(false)?;
        let state = r.string(false)?;
        let protocol_type = r.string(false)?;
        let protocol = r.string(false)?;
        let members = r.vec(false, |r| {
            let member_id = r.string(false)?;
            let client_id = r.string(false)?;
            let client_host = r.string(false)?;
            let _metadata = r.bytes(false)?;
            let assignment = r.bytes(false)?;
            Ok(Member { member_id, client_id, client_host, assignment })
        })?;
        Ok(Group { error, group_id, state, protocol_type, protocol, members })
    })?;
    if groups.len() != 1 || r.remaining() != 0 {
        return Err(Malformed("a DescribeGroups answer that is not one group"));
    }
    Ok((correlation_id, groups.remove(0)))
}

/// The partitions a consumer group member is assigned, by topic: the consumer protocol's
/// assignment (`i16 version`, `[string topic, [i32 partition]]`, user data). Empty bytes (a
/// member not yet assigned) are no partitions.
pub fn consumer_assignment(bytes: &Bytes) -> Result<Vec<(String, Vec<i32>)>, Malformed> {
    if bytes.is_empty() {
        return Ok(Vec::new());
    }
    let mut r = Reader::new(bytes.clone());
    let _version = r.i16()?;
    r.vec(false, |r| {
        let topic = r.string(false)?;
        let partitions = r.vec(false, |r| r.i32())?;
        Ok((topic, partitions))
    })
}

#[cfg(test)]
mod tests {
    use kafka_protocol::messages::describe_groups_response::{
        DescribedGroup, DescribedGroupMember,
    };
    use kafka_protocol::messages::{ApiKey, DescribeGroupsResponse, GroupId};
    use kafka_protocol::protocol::StrBytes;

    use super::*;
    use crate::kafka::request::{self, GroupIdsOf};
    use crate::kafka::response::encode_version;

    #[test]
    fn a_request_reads_as_the_broker_reads_it() {
        let frame = request(9, "trib", "readers").unwrap();
        let size = u32::from_be_bytes(frame[..4].try_into().unwrap()) as usize;
        assert_eq!(size, frame.len() - 4);
        let body = Bytes::copy_from_slice(&frame[4..]);
        assert_eq!(request::peek(&body).unwrap(), (15, 0, 9));
        let mut r = Reader::new(body);
        let header = request::header(&mut r, false).unwrap();
        assert_eq!(header.client_id.as_deref(), Some("trib"));
        let groups = request::group_ids(&mut r, 0, false, GroupIdsOf::Describe).unwrap();
        assert_eq!(groups, ["readers"]);
    }

    #[test]
    fn an_answer_gives_the_members_and_their_partitions() {
        let mut assignment = BytesMut::new();
        assignment.put_i16(0);
        assignment.put_i32(2);
        for (topic, partitions) in [("events", &[0, 2][..]), ("clicks", &[1][..])] {
            assignment.put_i16(topic.len() as i16);
            assignment.put_slice(topic.as_bytes());
            assignment.put_i32(partitions.len() as i32);
            partitions.iter().for_each(|&p| assignment.put_i32(p));
        }
        assignment.put_i32(-1); // no user data
        let assignment = assignment.freeze();
        let member = DescribedGroupMember::default()
            .with_member_id(StrBytes::from_static_str("m-1"))
            .with_client_id(StrBytes::from_static_str("rdkafka"))
            .with_client_host(StrBytes::from_static_str("/127.0.0.1"))
            .with_member_assignment(assignment.clone());
        let group = DescribedGroup::default()
            .with_group_id(GroupId(StrBytes::from_static_str("readers")))
            .with_group_state(StrBytes::from_static_str("Stable"))
            .with_protocol_type(StrBytes::from_static_str("consumer"))
            .with_protocol_data(StrBytes::from_static_str("range"))
            .with_members(vec![member]);
        let body = DescribeGroupsResponse::default().with_groups(vec![group]);
        let frame = encode_version(ApiKey::DescribeGroups, 0, 9, &body).unwrap();
        let (correlation_id, group) = response(frame.freeze().split_off(4)).unwrap();
        assert_eq!(correlation_id, 9);
        assert_eq!((group.state.as_str(), group.protocol.as_str()), ("Stable", "range"));
        assert_eq!(group.members.len(), 1);
        assert_eq!(group.members[0].client_host, "/127.0.0.1");
        assert_eq!(
            consumer_assignment(&group.members[0].assignment).unwrap(),
            [("events".to_owned(), vec![0, 2]), ("clicks".to_owned(), vec![1])]
        );
        assert_eq!(consumer_assignment(&Bytes::new()).unwrap(), []);
        assert!(consumer_assignment(&assignment.slice(..7)).is_err());
    }
}
