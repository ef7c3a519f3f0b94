//! The Kafka protocol listener (`docs/design.md`, "Kafka protocol listener"): a second port on
//! which Kafka's own clients — librdkafka and kcat, confluent-kafka, kafka-python, Java —
//! produce, consume and commit offsets unchanged. The paper's byte-addressed log stays the
//! storage: a produced RecordBatch is appended as one magic-2 message, Kafka offsets are the
//! partitions' record numbers (`log::index`), and a fetch answers RecordBatches — magic-2
//! payloads as stored, messages in Tributary's own format converted.
//!
//! Layers, each using only those above it in this list: the state the APIs keep
//! (`coordinator` for groups, `txn_coordinator` for transactions; idempotent producers'
//! sequences are the node's, shared with the native protocol), who a connection serves
//! (`client`), one file per API or family of APIs (`metadata`, `admin`, `partition_admin`,
//! `produce`, `fetch`, `groups`, `group_admin`, `init_producer_id`, `transactions`), and the
//! connection that reads frames and dispatches them (`connection`). Requests are decoded and
//! answers encoded by [`protocol::kafka`].

mod admin;
mod client;
mod connection;
mod coordinator;
mod fetch;
mod group_admin;
mod groups;
mod init_producer_id;
mod metadata;
mod partition_admin;
mod produce;
mod transactions;
mod txn_coordinator;

pub(crate) use client::{Client, State};
pub(crate) use coordinator::tick_until;
pub(crate) use txn_coordinator::sweep_until;
