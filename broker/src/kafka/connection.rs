//! One Kafka connection: frames read and answered in order, as Kafka clients expect; up to
//! [`IN_FLIGHT_MAX`] requests of a connection are worked on at once, so a client's pipelined
//! produces wait for their acks together. A frame that does not decode closes the
//! connection; a version that is not served is answered `UNSUPPORTED_VERSION` for
//! ApiVersions (whose answer every client can read) and closes the connection otherwise, as a
//! Kafka broker does.

use bytes::{Bytes, BytesMut};
use futures::StreamExt;
use futures::stream::FuturesOrdered;
use kafka_protocol::messages::ApiKey;
use protocol::kafka::request::{self, GroupIdsOf, Header, Reader};
use protocol::kafka::versions;
use service::tls::{MaybeTls, ServerStream};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio_util::sync::CancellationToken;

use super::client::{Answer, Client, Ended, Piece, Reply};
use super::{
    admin, fetch, group_admin, groups, init_producer_id, metadata, partition_admin, produce,
    transactions,
};
use crate::metrics::Stalled;
use crate::net::send;

/// Requests of one connection worked on at once; more wait to be read.
const IN_FLIGHT_MAX: usize = 16;
/// Bytes of a request frame read without taking a share of `request_memory_bytes`.
const SMALL_REQUEST_BYTES: usize = 4 << 10;

impl Client {
    /// Serves the connection until the client closes, sends something unusable, or `stop`.
    pub(crate) async fn run(
        self,
        stream: ServerStream,
        stop: CancellationToken,
    ) -> Result<(), Ended> {
        let (input, mut output) = Output::split(stream);
        let mut in_flight = FuturesOrdered::new();
        // Frames come from a stream that keeps a half-read frame across `select!` rounds: a
        // read future dropped when an answer wins the race would lose the bytes it had read.
        let frames = futures::stream::unfold(input, |mut input| {
            let client = self.clone();
            async move {
                let frame = read_frame(&mut input, &client).await;
                Some((frame, input))
            }
        });
        let mut frames = std::pin::pin!(frames);
        loop {
            tokio::select! {
                () = stop.cancelled() => return Ok(()),
                answered = in_flight.next(), if !in_flight.is_empty() => {
                    let answered: Answer = answered.expect("not empty");
                    if let Some(reply) = answered? {
                        output.write(reply, &self).await?;
                    }
                }
                frame = frames.next(), if in_flight.len() < IN_FLIGHT_MAX => {
                    let frame = match frame {
                        Some(Ok(Some(frame))) => frame,
                        Some(Err(e)) => return Err(e),
                        Some(Ok(None)) | None => return Ok(()),
                    };
                    in_flight.push_back(self.start(frame).await);
                }
            }
        }
    }

    /// Starts on a request frame: a produce is appended now, in the order the connection sent
    /// it; everything else is worked on in the returned future, beside later requests.
    async fn start(&self, frame: Bytes) -> produce::Pending {
        if let Ok((key, version, _)) = request::peek(&frame)
            && versions::served(key, version) == Some(ApiKey::Produce)
        {
            let flexible = versions::is_flexible(ApiKey::Produce, version);
            let mut r = Reader::new(frame);
            let started = async {
                let header = request::header(&mut r, flexible)?;
                let request = request::produce(&mut r, version, flexible)?;
                produce::start(self, header, request).await
            };
            return match started.await {
                Ok(pending) => pending,
                Err(e) => Box::pin(async move { Err(Ended::Malformed(e)) }),
            };
        }
        let client = self.clone();
        Box::pin(async move { client.handle(frame).await })
    }

    /// Answers one request frame.
    async fn handle(self, frame: Bytes) -> Answer {
        let (key, version, correlation_id) = request::peek(&frame)?;
        let Some(api) = versions::served(key, version) else {
            if key == ApiKey::ApiVersions as i16 {
                return Ok(Some(metadata::unsupported_api_versions(correlation_id)?.into()));
            }
            return Err(Ended::Unsupported { key, version });
        };
        let flexible = versions::is_flexible(api, version);
        let mut r = Reader::new(frame);
        let header = request::header(&mut r, flexible)?;
        let (v, f) = (version, flexible);
        let answer = match api {
            ApiKey::ApiVersions => Some(metadata::api_versions(&header)?),
            ApiKey::Metadata => {
                let request = request::metadata(&mut r, v, f)?;
                Some(metadata::metadata(&self, &header, request).await?)
            }
            ApiKey::Produce => unreachable!("Client::start appends produces itself"),
            ApiKey::Fetch => {
                let request = request::fetch(&mut r, v, f)?;
                return Ok(Some(fetch::fetch(&self, &header, request).await?));
            }
            ApiKey::ListOffsets => {
                let request = request::list_offsets(&mut r, v, f)?;
                Some(fetch::list_offsets(&self, &header, request).await?)
            }
            ApiKey::InitProducerId => {
                let request = request::init_producer_id(&mut r, v, f)?;
                Some(init_producer_id::init_producer_id(&self, &header, request).await?)
            }
            ApiKey::AddPartitionsToTxn => {
                let request = request::add_partitions_to_txn(&mut r, v, f)?;
                Some(transactions::add_partitions_to_txn(&self, &header, request).await?)
            }
            ApiKey::AddOffsetsToTxn => {
                let request = request::add_offsets_to_txn(&mut r, v, f)?;
                Some(transactions::add_offsets_to_txn(&self, &header, request).await?)
            }
            ApiKey::EndTxn => {
                let request = request::end_txn(&mut r, v, f)?;
                Some(transactions::end_txn(&self, &header, request).await?)
            }
            ApiKey::TxnOffsetCommit => {
                let request = request::txn_offset_commit(&mut r, v, f)?;
                Some(transactions::txn_offset_commit(&self, &header, request).await?)
            }
            ApiKey::FindCoordinator
            | ApiKey::JoinGroup
            | ApiKey::SyncGroup
            | ApiKey::Heartbeat
            | ApiKey::LeaveGroup
            | ApiKey::OffsetCommit
            | ApiKey::OffsetFetch
            | ApiKey::ListGroups
            | ApiKey::DescribeGroups
            | ApiKey::DeleteGroups
            | ApiKey::OffsetDelete => Some(self.handle_group(api, &header, &mut r, v, f).await?),
            // Every other API served is an administrative one.
            _ => Some(self.handle_admin(api, &header, &mut r, v, f).await?),
        };
        Ok(answer.map(Reply::from))
    }

    /// Answers a request to the group coordinator: membership, offsets, group administration.
    async fn handle_group(
        &self,
        api: ApiKey,
        header: &Header,
        r: &mut Reader,
        v: i16,
        f: bool,
    ) -> Result<BytesMut, Ended> {
        let answer = match api {
            ApiKey::FindCoordinator => {
                let request = request::find_coordinator(r, v, f)?;
                groups::find_coordinator(self, header, request)?
            }
            ApiKey::JoinGroup => {
                let request = request::join_group(r, v, f)?;
                groups::join_group(self, header, request).await?
            }
            ApiKey::SyncGroup => {
                let request = request::sync_group(r, v, f)?;
                groups::sync_group(self, header, request).await?
            }
            ApiKey::Heartbeat => {
                let request = request::heartbeat(r, v, f)?;
                groups::heartbeat(self, header, request)?
            }
            ApiKey::LeaveGroup => {
                let request = request::leave_group(r, v, f)?;
                groups::leave_group(self, header, request)?
            }
            ApiKey::OffsetCommit => {
                let request = request::offset_commit(r, v, f)?;
                groups::offset_commit(self, header, request).await?
            }
            ApiKey::OffsetFetch => {
                let request = request::offset_fetch(r, v, f)?;
                groups::offset_fetch(self, header, request).await?
            }
            ApiKey::ListGroups => {
                let request = request::list_groups(r, v, f)?;
                group_admin::list_groups(self, header, request).await?
            }
            ApiKey::DescribeGroups => {
                let groups = request::group_ids(r, v, f, GroupIdsOf::Describe)?;
                group_admin::describe_groups(self, header, groups).await?
            }
            ApiKey::DeleteGroups => {
                let groups = request::group_ids(r, v, f, GroupIdsOf::Delete)?;
                group_admin::delete_groups(self, header, groups).await?
            }
            ApiKey::OffsetDelete => {
                let request = request::offset_delete(r, v, f)?;
                group_admin::offset_delete(self, header, request).await?
            }
            _ => unreachable!("Client::handle passes only the APIs handled here"),
        };
        Ok(answer)
    }

    /// Answers an administrative request: topics, configs, partitions, the cluster.
    async fn handle_admin(
        &self,
        api: ApiKey,
        header: &Header,
        r: &mut Reader,
        v: i16,
        f: bool,
    ) -> Result<BytesMut, Ended> {
        let answer = match api {
            ApiKey::CreateTopics => {
                let request = request::create_topics(r, v, f)?;
                metadata::create_topics(self, header, request).await?
            }
            ApiKey::DeleteTopics => {
                let request = request::delete_topics(r, v, f)?;
                admin::delete_topics(self, header, request).await?
            }
            ApiKey::CreatePartitions => {
                let request = request::create_partitions(r, v, f)?;
                admin::create_partitions(self, header, request).await?
            }
            ApiKey::DescribeConfigs => {
                let request = request::describe_configs(r, v, f)?;
                admin::describe_configs(self, header, request).await?
            }
            ApiKey::AlterConfigs => {
                let request = request::alter_configs(r, v, f, false)?;
                admin::alter_configs(self, header, request, false).await?
            }
            ApiKey::IncrementalAlterConfigs => {
                let request = request::alter_configs(r, v, f, true)?;
                admin::alter_configs(self, header, request, true).await?
            }
            ApiKey::DescribeCluster => {
                request::describe_cluster(r, v, f)?;
                admin::describe_cluster(self, header)?
            }
            ApiKey::ElectLeaders => {
                let request = request::elect_leaders(r, v, f)?;
                partition_admin::elect_leaders(self, header, request).await?
            }
            ApiKey::AlterPartitionReassignments => {
                let request = request::alter_reassignments(r, v, f)?;
                partition_admin::alter_reassignments(self, header, request).await?
            }
            ApiKey::DeleteRecords => {
                let request = request::delete_records(r, v, f)?;
                partition_admin::delete_records(self, header, request).await?
            }
            ApiKey::ListPartitionReassignments => {
                let asked = request::list_reassignments(r, v, f)?;
                partition_admin::list_reassignments(self, header, asked).await?
            }
            _ => unreachable!("Client::handle passes only the APIs handled here"),
        };
        Ok(answer)
    }
}

/// The writing side of a connection: a plaintext socket's, which `sendfile` writes to, or a
/// TLS stream's.
enum Output {
    Plain(tokio::net::tcp::OwnedWriteHalf),
    Tls(tokio::io::WriteHalf<Box<TlsServerStream>>),
}

type TlsServerStream = tokio_rustls::server::TlsStream<tokio::net::TcpStream>;
type Input = Box<dyn AsyncRead + Send + Unpin>;

impl Output {
    fn split(stream: ServerStream) -> (Input, Output) {
        match stream {
            MaybeTls::Plain(stream) => {
                let (input, output) = stream.into_split();
                (Box::new(input), Output::Plain(output))
            }
            MaybeTls::Tls(stream) => {
                let (input, output) = tokio::io::split(stream);
                (Box::new(input), Output::Tls(output))
            }
        }
    }

    /// Writes an answer's pieces in order: bytes in memory as they are, a segment's slice by
    /// `sendfile` (read and encrypted over TLS). A client that takes nothing for
    /// `client_timeout_ms` ends the connection.
    async fn write(&mut self, reply: Reply, client: &Client) -> Result<(), Ended> {
        let metrics = client.node.metrics();
        let stall = client.node.config().client_timeout();
        // An answer in several pieces (a fetch's batches) leaves in full segments: corked,
        // the socket sends what is written only once a segment is full or it is uncorked.
        let cork = matches!(self, Output::Plain(_)) && reply.0.len() > 2;
        if cork {
            self.cork(true)?;
        }
        let written = async {
            for piece in reply.0 {
                match (&mut *self, piece) {
                    (Output::Plain(output), Piece::Bytes(bytes)) => {
                        timed(stall, output.write_all(&bytes)).await?;
                    }
                    (Output::Tls(output), Piece::Bytes(bytes)) => {
                        timed(stall, output.write_all(&bytes)).await?;
                    }
                    (Output::Plain(output), Piece::File(slice)) => {
                        send::sendfile(output.as_ref(), &slice, metrics, stall).await?;
                    }
                    (Output::Tls(output), Piece::File(slice)) => {
                        send::write_from_file(output, &slice, metrics, stall).await?;
                    }
                }
            }
            match self {
                Output::Plain(_) => Ok(()),
                // TLS keeps records until flushed.
                Output::Tls(output) => timed(stall, output.flush()).await,
            }
        };
        let written = written.await.map_err(|e: std::io::Error| {
            if e.kind() == std::io::ErrorKind::TimedOut {
                metrics.client_timed_out(Stalled::response);
            }
            Ended::Io(e)
        });
        if cork {
            self.cork(false)?;
        }
        written
    }

    /// Corks or uncorks a plaintext socket (`TCP_CORK`).
    fn cork(&self, cork: bool) -> std::io::Result<()> {
        match self {
            Output::Plain(output) => socket2::SockRef::from(output.as_ref()).set_tcp_cork(cork),
            Output::Tls(_) => Ok(()),
        }
    }
}

/// `write` unless the socket takes nothing for `stall`.
async fn timed<F: Future<Output = std::io::Result<()>>>(
    stall: std::time::Duration,
    write: F,
) -> std::io::Result<()> {
    tokio::time::timeout(stall, write).await.unwrap_or_else(|_| Err(send::stalled()))
}

/// Reads one frame: its size (`None` when the client has closed), then its bytes, within
/// `client_timeout` of the first byte. A large frame first takes its share of the broker's
/// request memory.
async fn read_frame<R: tokio::io::AsyncRead + Unpin>(
    input: &mut R,
    client: &Client,
) -> Result<Option<Bytes>, Ended> {
    let client_timeout = client.node.config().client_timeout();
    let max_request_bytes = client.node.config().max_request_bytes as usize;
    let mut size = [0u8; 4];
    if input.read(&mut size[..1]).await? == 0 {
        return Ok(None);
    }
    let rest = async {
        input.read_exact(&mut size[1..]).await?;
        let size = u32::from_be_bytes(size) as usize;
        if size > max_request_bytes {
            return Err(Ended::TooLarge(size));
        }
        let _memory = match size > SMALL_REQUEST_BYTES {
            true => Some(client.admission.request_memory(size).await),
            false => None,
        };
        let mut frame = BytesMut::zeroed(size);
        input.read_exact(&mut frame).await?;
        Ok(frame.freeze())
    };
    match tokio::time::timeout(client_timeout, rest).await {
        Ok(frame) => frame.map(Some),
        Err(_) => {
            client.node.metrics().client_timed_out(Stalled::request);
            Err(Ended::TimedOut)
        }
    }
}
