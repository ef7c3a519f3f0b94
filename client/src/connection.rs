//! One connection to a broker with pipelining.
//!
//! A writer task takes encoded requests from a bounded queue, records which response each
//! expects, and writes them, flushing only when the queue is momentarily empty so that
//! pipelined requests share system calls. A reader task reads responses in order and hands
//! each to the caller that waits for it. When the connection fails, every waiting caller gets
//! the same typed error.

use std::sync::{Arc, Mutex};

use bytes::{Bytes, BytesMut};
use protocol::{
    Acks, ApiKey, CreateTopicRequest, DeleteRecordsRequest, ErrorCode, FetchPart, FetchRequest,
    InitProducerIdResponse, MetadataRequest, MetadataResponse, MultiFetchRequest,
    MultiFetchWaitRequest, MultiProduceRequest, MultiProduceResponse, OffsetsRequest,
    ProducePartition, ProduceRequest, ProduceResponse, ReadCommittedRequest, ReadCommittedResponse,
    RecordNumberRequest, Request, Response,
};
use service::tls::{ClientStream, MaybeTls};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufReader, BufWriter};
use tokio::sync::{mpsc, oneshot};

use crate::ClientError;

/// Limits of one connection.
#[derive(Debug, Clone)]
pub struct ConnectionConfig {
    /// Requests written but not yet answered, and queued to be written, each at most this many.
    pub in_flight_max: usize,
    /// Largest response accepted; a larger size field means a broken stream.
    pub response_bytes_max: u32,
    /// TLS to the broker (its certificate checked against the host of its address), with
    /// this client's certificate for mutual TLS if the config has one; `None`: plaintext.
    pub tls: Option<Arc<rustls::ClientConfig>>,
}

impl Default for ConnectionConfig {
    fn default() -> ConnectionConfig {
        ConnectionConfig { in_flight_max: 1024, response_bytes_max: 256 << 20, tls: None }
    }
}

impl ConnectionConfig {
    /// The default limits, over `tls` if given.
    pub fn with_tls(tls: Option<Arc<rustls::ClientConfig>>) -> ConnectionConfig {
        ConnectionConfig { tls, ..ConnectionConfig::default() }
    }
}

type Reply = oneshot::Sender<Result<Response, ClientError>>;

struct Outgoing {
    frame: Bytes,
    reply: Option<(ApiKey, Reply)>,
}

/// The response to a request queued with [`Connection::enqueue`].
pub struct PendingResponse {
    rx: oneshot::Receiver<Result<Response, ClientError>>,
    connection: Connection,
}

impl PendingResponse {
    pub async fn wait(self) -> Result<Response, ClientError> {
        match self.rx.await {
            Ok(result) => result,
            Err(_) => Err(self.connection.closed_error()),
        }
    }
}

/// A pipelined connection to one broker. Cheap to share: `&self` methods may run concurrently
/// and their requests go out, and are answered, in the order they were queued.
#[derive(Clone)]
pub struct Connection {
    addr: String,
    queue: mpsc::Sender<Outgoing>,
    /// Why the connection closed, once it has.
    closed: Arc<Mutex<Option<String>>>,
}

impl std::fmt::Debug for Connection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Connection").field("addr", &self.addr).finish()
    }
}

impl Connection {
    pub async fn connect(addr: &str) -> Result<Connection, ClientError> {
        Connection::connect_with(addr, ConnectionConfig::default()).await
    }

    pub async fn connect_with(
        addr: &str,
        config: ConnectionConfig,
    ) -> Result<Connection, ClientError> {
        let stream = ClientStream::connect(addr, config.tls.as_ref())
            .await
            .map_err(|source| ClientError::Connect { addr: addr.to_owned(), source })?;
        let (queue, outgoing) = mpsc::channel(config.in_flight_max);
        let (pending_tx, pending_rx) = mpsc::channel(config.in_flight_max);
        let closed = Arc::new(Mutex::new(None));
        let max = config.response_bytes_max;
        match stream {
            // Plaintext: the socket's own halves, no lock between reader and writer.
            MaybeTls::Plain(stream) => {
                let (read, write) = stream.into_split();
                tokio::spawn(write_requests(write, outgoing, pending_tx, Arc::clone(&closed)));
                tokio::spawn(read_responses(read, pending_rx, max, Arc::clone(&closed)));
            }
            tls @ MaybeTls::Tls(_) => {
                let (read, write) = tokio::io::split(tls);
                tokio::spawn(write_requests(write, outgoing, pending_tx, Arc::clone(&closed)));
                tokio::spawn(read_responses(read, pending_rx, max, Arc::clone(&closed)));
            }
        }
        Ok(Connection { addr: addr.to_owned(), queue, closed })
    }

    pub fn addr(&self) -> &str {
        &self.addr
    }

    fn closed_error(&self) -> ClientError {
        let reason = self.closed.lock().unwrap_or_else(|p| p.into_inner()).clone();
        ClientError::Closed {
            addr: self.addr.clone(),
            reason: reason.unwrap_or_else(|| "connection closed".into()),
        }
    }

    /// Sends any request; `None` for requests the broker does not answer (`acks` 0).
    pub async fn send(&self, request: Request) -> Result<Option<Response>, ClientError> {
        match self.enqueue(request).await? {
            Some(pending) => pending.wait().await.map(Some),
            None => Ok(None),
        }
    }

    /// Queues a request and returns once it is queued (waiting only for queue space), with a
    /// handle on its response: many requests can be in flight without a task per request.
    /// `None` for requests the broker does not answer (`acks` 0).
    pub async fn enqueue(&self, request: Request) -> Result<Option<PendingResponse>, ClientError> {
        let mut buf = BytesMut::new();
        request.encode(&mut buf)?;
        let frame = buf.freeze();
        if !request.expects_response() {
            self.queue
                .send(Outgoing { frame, reply: None })
                .await
                .map_err(|_| self.closed_error())?;
            return Ok(None);
        }
        let (tx, rx) = oneshot::channel();
        let outgoing = Outgoing { frame, reply: Some((request.api_key(), tx)) };
        self.queue.send(outgoing).await.map_err(|_| self.closed_error())?;
        Ok(Some(PendingResponse { rx, connection: self.clone() }))
    }

    async fn call(&self, request: Request) -> Result<Response, ClientError> {
        let api = request.api_key();
        self.send(request).await?.ok_or(ClientError::Closed {
            addr: self.addr.clone(),
            reason: format!("no response expected for {api:?}"),
        })
    }

    /// `PRODUCE`; `None` with `acks` 0, which the broker does not answer.
    pub async fn produce(
        &self,
        topic: &str,
        partition: i32,
        acks: Acks,
        messages: Bytes,
    ) -> Result<Option<ProduceResponse>, ClientError> {
        let request = ProduceRequest { topic: topic.into(), partition, acks, messages };
        self.produce_request(Request::Produce(request)).await
    }

    /// `IDEMPOTENT_PRODUCE`: `messages` is one magic-2 message whose batch carries this
    /// producer's id, epoch and first sequence number on the partition. A batch the leader
    /// has already is answered with the offset it was appended at. `None` with `acks` 0.
    pub async fn produce_idempotent(
        &self,
        topic: &str,
        partition: i32,
        acks: Acks,
        messages: Bytes,
    ) -> Result<Option<ProduceResponse>, ClientError> {
        let request = ProduceRequest { topic: topic.into(), partition, acks, messages };
        self.produce_request(Request::IdempotentProduce(request)).await
    }

    /// `COPY_PRODUCE`: `messages` are a source partition's bytes up to `copied.to`, appended
    /// with `copied.to` as `copied.writer`'s position unless the leader has that position
    /// already (then error `DuplicateSequence`, nothing appended) or lacks `copied.from`
    /// (`OutOfOrderSequence`). `None` with `acks` 0.
    pub async fn produce_copy(
        &self,
        topic: &str,
        partition: i32,
        acks: Acks,
        copied: &Copied,
        messages: Bytes,
    ) -> Result<Option<ProduceResponse>, ClientError> {
        let request = protocol::CopyProduceRequest {
            topic: topic.into(),
            partition,
            acks,
            writer: copied.writer.to_string(),
            from: copied.from,
            to: copied.to,
            messages,
        };
        self.produce_request(Request::CopyProduce(request)).await
    }

    async fn produce_request(
        &self,
        request: Request,
    ) -> Result<Option<ProduceResponse>, ClientError> {
        let api = request.api_key();
        match self.send(request).await? {
            Some(Response::Produce(p)) => Ok(Some(p)),
            Some(other) => Err(unexpected(api, &other)),
            None => Ok(None),
        }
    }

    /// `INIT_PRODUCER_ID`: a producer id no other producer of the cluster has, and its epoch.
    pub async fn init_producer_id(&self) -> Result<InitProducerIdResponse, ClientError> {
        match self.call(Request::InitProducerId).await? {
            Response::InitProducerId(r) => Ok(r),
            other => Err(unexpected(ApiKey::InitProducerId, &other)),
        }
    }

    pub async fn multi_produce(
        &self,
        acks: Acks,
        entries: Vec<ProducePartition>,
    ) -> Result<Option<MultiProduceResponse>, ClientError> {
        match self.send(Request::MultiProduce(MultiProduceRequest { acks, entries })).await? {
            Some(Response::MultiProduce(p)) => Ok(Some(p)),
            Some(other) => Err(unexpected(ApiKey::MultiProduce, &other)),
            None => Ok(None),
        }
    }

    /// `FETCH`: raw MessageSet bytes, possibly ending in a partial message.
    pub async fn fetch(
        &self,
        topic: &str,
        partition: i32,
        offset: i64,
        max_bytes: i32,
    ) -> Result<Bytes, ClientError> {
        let request =
            Request::Fetch(FetchRequest { topic: topic.into(), partition, offset, max_bytes });
        match self.call(request).await? {
            Response::Fetch(f) => Ok(f.messages),
            other => Err(unexpected(ApiKey::Fetch, &other)),
        }
    }

    pub async fn multi_fetch(
        &self,
        fetches: Vec<FetchRequest>,
    ) -> Result<Vec<FetchPart>, ClientError> {
        match self.call(Request::MultiFetch(MultiFetchRequest { fetches })).await? {
            Response::MultiFetch(m) => Ok(m.parts),
            other => Err(unexpected(ApiKey::MultiFetch, &other)),
        }
    }

    /// `MULTIFETCH_WAIT`: a long poll, answered once `min_bytes` are visible over all parts or
    /// once `max_wait_ms` has passed. Requests queued behind it on this connection wait too.
    pub async fn multi_fetch_wait(
        &self,
        max_wait_ms: i32,
        min_bytes: i32,
        fetches: Vec<FetchRequest>,
    ) -> Result<Vec<FetchPart>, ClientError> {
        let request =
            Request::MultiFetchWait(MultiFetchWaitRequest { max_wait_ms, min_bytes, fetches });
        match self.call(request).await? {
            Response::MultiFetch(m) => Ok(m.parts),
            other => Err(unexpected(ApiKey::MultiFetchWait, &other)),
        }
    }

    pub async fn offsets(
        &self,
        topic: &str,
        partition: i32,
        time: i64,
        max_number: i32,
    ) -> Result<Vec<i64>, ClientError> {
        let request =
            Request::Offsets(OffsetsRequest { topic: topic.into(), partition, time, max_number });
        match self.call(request).await? {
            Response::Offsets(o) => Ok(o.offsets),
            other => Err(unexpected(ApiKey::Offsets, &other)),
        }
    }

    /// `RECORD_NUMBER`: the Kafka record number of the message at byte `offset`, or of the
    /// next record when `offset` is the log's end.
    pub async fn record_number(
        &self,
        topic: &str,
        partition: i32,
        offset: i64,
    ) -> Result<i64, ClientError> {
        let request =
            Request::RecordNumber(RecordNumberRequest { topic: topic.into(), partition, offset });
        match self.call(request).await? {
            Response::RecordNumber(r) => Ok(r.record),
            other => Err(unexpected(ApiKey::RecordNumber, &other)),
        }
    }

    /// `DELETE_RECORDS`: moves the log start of a partition (on its leader) to the message at
    /// byte `offset` ([`protocol::DELETE_TO_HIGH_WATERMARK`]: the high watermark), deleting
    /// every message before it on every replica. Returns the byte offset the log starts at.
    pub async fn delete_records(
        &self,
        topic: &str,
        partition: i32,
        offset: i64,
    ) -> Result<i64, ClientError> {
        let request =
            Request::DeleteRecords(DeleteRecordsRequest { topic: topic.into(), partition, offset });
        match self.call(request).await? {
            Response::DeleteRecords(r) => Ok(r.log_start),
            other => Err(unexpected(ApiKey::DeleteRecords, &other)),
        }
    }

    /// `READ_COMMITTED`: the last stable offset of a partition (on its leader) and its aborted
    /// transactions with batches in bytes `from..to`.
    pub async fn read_committed(
        &self,
        topic: &str,
        partition: i32,
        from: i64,
        to: i64,
    ) -> Result<ReadCommittedResponse, ClientError> {
        let request = Request::ReadCommitted(ReadCommittedRequest {
            topic: topic.into(),
            partition,
            from,
            to,
        });
        match self.call(request).await? {
            Response::ReadCommitted(r) => Ok(r),
            other => Err(unexpected(ApiKey::ReadCommitted, &other)),
        }
    }

    pub async fn metadata(&self, topics: &[&str]) -> Result<MetadataResponse, ClientError> {
        let topics = topics.iter().map(|t| t.to_string()).collect();
        match self.call(Request::Metadata(MetadataRequest { topics })).await? {
            Response::Metadata(m) => Ok(m),
            other => Err(unexpected(ApiKey::Metadata, &other)),
        }
    }

    pub async fn create_topic(
        &self,
        topic: &str,
        partitions: i32,
        configs: &[(&str, &str)],
    ) -> Result<(), ClientError> {
        let configs = configs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        let request =
            Request::CreateTopic(CreateTopicRequest { topic: topic.into(), partitions, configs });
        match self.call(request).await? {
            Response::CreateTopic(_) => Ok(()),
            other => Err(unexpected(ApiKey::CreateTopic, &other)),
        }
    }
}

fn unexpected(api: ApiKey, response: &Response) -> ClientError {
    ClientError::Closed {
        addr: String::new(),
        reason: format!("{api:?} answered with {:?}", response.api_key()),
    }
}

fn record_close(closed: &Mutex<Option<String>>, reason: String) {
    closed.lock().unwrap_or_else(|p| p.into_inner()).get_or_insert(reason);
}

async fn write_requests(
    write: impl AsyncWrite + Unpin,
    mut outgoing: mpsc::Receiver<Outgoing>,
    pending: mpsc::Sender<(ApiKey, Reply)>,
    closed: Arc<Mutex<Option<String>>>,
) {
    let mut write = BufWriter::with_capacity(64 << 10, write);
    while let Some(first) = outgoing.recv().await {
        let mut next = Some(first);
        while let Some(Outgoing { frame, reply }) = next.take() {
            if let Some(reply) = reply {
                // Registered before the bytes go out, so the reader always finds it.
                if pending.send(reply).await.is_err() {
                    return; // the reader has failed and recorded why
                }
            }
            if let Err(e) = write.write_all(&frame).await {
                record_close(&closed, format!("write failed: {e}"));
                return;
            }
            next = outgoing.try_recv().ok();
        }
        if let Err(e) = write.flush().await {
            record_close(&closed, format!("write failed: {e}"));
            return;
        }
    }
    // Every `Connection` clone is gone: let the broker see the end of the stream.
    let _ = write.shutdown().await;
}

/// Whether a response's first four bytes are a TLS record's header instead (an alert or a
/// handshake record, version 3.x): what a TLS listener sends a plaintext client.
fn is_tls_record(size: u32) -> bool {
    let [kind, major, minor, _] = size.to_be_bytes();
    matches!(kind, 0x15 | 0x16) && major == 3 && minor <= 4
}

async fn read_responses(
    read: impl AsyncRead + Unpin,
    mut pending: mpsc::Receiver<(ApiKey, Reply)>,
    response_bytes_max: u32,
    closed: Arc<Mutex<Option<String>>>,
) {
    // Buffered: many small pipelined responses arrive in one read.
    let mut read = BufReader::with_capacity(64 << 10, read);
    let reason = loop {
        let size = match read.read_u32().await {
            Ok(size) => size,
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => {
                break "closed by the broker".to_owned();
            }
            Err(e) => break format!("read failed: {e}"),
        };
        if is_tls_record(size) {
            break "the broker answered with TLS: it takes TLS clients only (give its CA)"
                .to_owned();
        }
        if !(2..=response_bytes_max).contains(&size) {
            break format!("response size {size} outside 2..={response_bytes_max}");
        }
        let mut frame = vec![0u8; size as usize];
        if let Err(e) = read.read_exact(&mut frame).await {
            break format!("read failed mid-response: {e}");
        }
        let Some((api, reply)) = pending.recv().await else { break "no request waits".into() };
        let mut frame = Bytes::from(frame);
        let code = ErrorCode::from_i16(i16::from_be_bytes([frame[0], frame[1]]));
        let body = frame.split_off(2);
        let result = if code.is_ok() {
            Response::decode(api, body).map_err(|source| ClientError::Decode { api, source })
        } else {
            Err(ClientError::Broker { api, code })
        };
        let _ = reply.send(result); // the caller may have given up waiting
    };
    record_close(&closed, reason);
    // Dropping the queue wakes every waiting caller with the recorded reason.
    pending.close();
    while let Ok((_, reply)) = pending.try_recv() {
        drop(reply);
    }
}

/// What a copier says of the messages it sends with [`crate::Producer::enqueue_copy`]: they are
/// its source partition's bytes up to `to`, copied by `writer` (a name it keeps for that source
/// partition: 1 to 1,024 bytes, no whitespace), and `from` is where its previous copy ended
/// (0: wherever the target has the writer), so that a copy sent before an earlier one arrives
/// is refused rather than taken past it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Copied {
    pub writer: Arc<str>,
    pub from: i64,
    pub to: i64,
}
