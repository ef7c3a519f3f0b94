//! Apache Kafka's wire protocol, as a broker's Kafka listener speaks it (`docs/design.md`,
//! "Kafka protocol listener"): the APIs and versions served ([`versions`]), requests decoded
//! by hand with every count bounded by the bytes present ([`request`]), and answers encoded
//! by `kafka-protocol` with Tributary's error codes mapped to Kafka's ([`response`]), but for
//! Fetch, encoded around its records so that a broker can send them from its files
//! ([`fetch_response`]). The client's side of DescribeGroups ([`describe_groups`]) lets tools
//! show a Kafka group's members.
//!
//! Like the rest of this crate it does no I/O, so a client of Kafka's protocol could use it
//! as well as the broker.

pub mod describe_groups;
pub mod fetch_response;
pub mod request;
pub mod response;
pub mod versions;
