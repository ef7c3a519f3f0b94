//! Clients of a Tributary broker (paper §3.1–3.2). The base layer is the pipelined
//! [`Connection`]: every request type of `docs/design.md` ("Request types") over one TCP
//! connection, many in flight at once, responses matched to requests by order (the protocol
//! has no correlation ids). On it sit the batching [`Producer`] (with [`BrokerSource`]
//! discovery and a [`Partitioner`]) and the [`SimpleConsumer`]; the `trib` binary puts both in
//! a terminal.

use protocol::compression;
mod connection;
mod discovery;
mod error;
pub mod group;
mod partitioner;
mod producer;
mod registry_brokers;
mod simple_consumer;

pub use compression::{CompressionError, SUPPORTED_CODECS, compress, decompress};
pub use connection::{Connection, ConnectionConfig, Copied, PendingResponse};
pub use discovery::{
    BrokerSource, DiscoveryError, EntryPoint, PartitionLeader, StaticBrokers, TopicLayout,
};
pub use error::ClientError;
pub use group::{
    CommitPolicy, GroupConsumer, GroupConsumerConfig, GroupError, GroupMessage, MessageStream,
    OffsetReset, StreamId, assign,
};
pub use partitioner::{PartitionFn, Partitioner, TopicPartition, fnv1a};
pub use producer::{
    BlockingProducer, BufferFull, Delivery, FramedMessages, Pending, Producer, ProducerConfig,
    ProducerError, Sequenced,
};
pub use registry_brokers::RegistryBrokers;
pub use simple_consumer::{
    ConsumedMessage, ConsumerError, DECOMPRESSED_BYTES_MAX_DEFAULT, FetchedMessages, Messages,
    OffsetTime, PartitionOffset, RecordFields, SimpleConsumer, SimpleConsumerConfig,
};
