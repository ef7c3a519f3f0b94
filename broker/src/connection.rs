//! One client connection: frames in, responses out, in request order.
//!
//! Requests are read into one buffer and handled in turn; small responses collect in an
//! output buffer that is written when no more complete requests are buffered, so pipelined
//! requests share system calls. Fetch data skips the buffer: the header goes out, then the
//! segment bytes by `sendfile`.
//!
//! A produce whose `acks` wait (2: for the flush, 3: for the in-sync replicas) does not hold
//! the connection up: it is appended, its answer waits in a queue, and the produces pipelined
//! behind it are read and appended meanwhile; answers leave in request order. Any other request
//! waits for the queue to empty first.
//!
//! A long-poll fetch (`MULTIFETCH_WAIT`) that finds too little data parks the connection: it
//! waits on the watches of its partitions' visible ends, which the append (or the flush) that
//! makes data visible wakes. Responses stay in request order, so the requests behind it wait
//! too; while parked the connection still reads, to notice a client that hangs up.

use std::collections::VecDeque;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::{Buf, BytesMut};
use protocol::{
    Acks, ErrorCode, FRAME_SIZE_BYTES, FetchRequest, MultiFetchWaitRequest, MultiProduceResponse,
    OffsetForLeaderEpochResponse, OffsetsResponse, ProducePart, ProduceResponse,
    REPLICA_PART_HEADER_BYTES, RecordNumberResponse, ReplicaFetchRequest, ReplicaPartHeader,
    Request, Response, UNDEFINED_EPOCH, encode_replica_part_header, encode_response_header,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use crate::acl::Operation;
use crate::broker::{Broker, ReplicaPlan, RequestMemory};
use crate::log::{FileSlice, SETS_PER_WRITE_MAX};
use crate::metrics::{Latency, RequestKind, Stalled};
use service::tls::ServerStream;

/// Read buffer growth per read while a frame larger than what is buffered arrives; a frame's
/// declared size is never reserved up front.
const READ_CHUNK_BYTES: usize = 64 << 10;
/// Read buffer room between requests: what an idle or small-request connection holds.
const READ_IDLE_BYTES: usize = 4 << 10;
/// Bytes of pipelined produces to one partition appended with one write, at most.
const RUN_BYTES_MAX: usize = 1 << 20;
/// Output buffered before it is written even though more requests are waiting.
const OUTPUT_BYTES_MAX: usize = 256 << 10;
/// Pipelined request bytes read while a long-poll fetch waits (enough to notice a client that
/// hangs up); beyond them the connection stops reading until the fetch is answered.
const PARKED_INPUT_BYTES_MAX: usize = READ_IDLE_BYTES;

/// Produce runs appended whose answers wait for their acks, at most; one more waits for the
/// oldest answer first.
const AWAITING_RUNS_MAX: usize = 64;

/// Each set's `(partition, offset)` of a produce run, or its error.
type Results = Vec<Result<(i32, i64), ErrorCode>>;
/// The answers of an appended produce run, once its acks are met.
type Answers = Pin<Box<dyn Future<Output = Results> + Send>>;

/// A produce run appended, its answers not yet sent.
struct Awaiting {
    answers: Answers,
    started: Instant,
}

/// A long-poll fetch waiting: counted in the parked gauge, and its wait timed, until dropped.
struct Parked<'a> {
    metrics: &'a crate::metrics::Metrics,
    since: Instant,
}

impl<'a> Parked<'a> {
    fn new(metrics: &'a crate::metrics::Metrics) -> Parked<'a> {
        metrics.parked_now.inc();
        Parked { metrics, since: Instant::now() }
    }
}

impl Drop for Parked<'_> {
    fn drop(&mut self) {
        self.metrics.parked_now.dec();
        self.metrics.observe(Latency::long_poll_wait, self.since.elapsed());
    }
}

/// A frame with a bad size or an undecodable body.
struct BadFrame;

/// What to do after a request.
enum Next {
    Continue,
    /// Send what is buffered, then close.
    Close,
    /// The client hung up while a long-poll fetch waited: close without answering.
    Gone,
}

pub(crate) struct Connection {
    stream: ServerStream,
    /// Who the client is: its certificate's CN, or `anonymous`.
    principal: String,
    input: BytesMut,
    output: BytesMut,
    broker: Arc<Broker>,
    /// Shutdown: a waiting long-poll fetch is answered at once.
    stop: CancellationToken,
    /// Produce runs waiting for their acks, oldest first.
    awaiting: VecDeque<Awaiting>,
    /// Requests taken off the input so far.
    requests_read: u64,
    /// Whether the last read filled the input's room: the client is likely sending more.
    read_filled: bool,
    /// The share of `request_memory_bytes` the large request at the head of the input holds.
    request_memory: Option<RequestMemory>,
}

/// Room for the next read.
enum Room {
    Bytes(usize),
    /// A request of this many bytes (its size field included) must first take its share of
    /// `request_memory_bytes`.
    NeedsMemory(usize),
}

impl Connection {
    pub(crate) fn new(
        stream: ServerStream,
        principal: String,
        broker: Arc<Broker>,
        stop: CancellationToken,
    ) -> Connection {
        Connection {
            stream,
            principal,
            input: BytesMut::new(),
            output: BytesMut::new(),
            broker,
            stop,
            awaiting: VecDeque::new(),
            requests_read: 0,
            read_filled: false,
            request_memory: None,
        }
    }

    /// Serves requests until the client closes, sends something unusable, or `stop` fires.
    pub(crate) async fn run(mut self) -> io::Result<()> {
        let stop = self.stop.clone();
        let client_timeout = self.broker.config().client_timeout();
        // When the request begun in the input must be in whole: `client_timeout` after its
        // first bytes were read. However slowly they trickle in, it does not move.
        let mut request_deadline: Option<tokio::time::Instant> = None;
        loop {
            let requests_before = self.requests_read;
            match self.handle_buffered().await? {
                Next::Continue => {}
                Next::Close => return self.flush_output().await,
                Next::Gone => return Ok(()),
            }
            self.flush_output().await?;
            if self.input.is_empty() {
                request_deadline = None;
            } else if request_deadline.is_none() || self.requests_read != requests_before {
                request_deadline = Some(tokio::time::Instant::now() + client_timeout);
            }
            self.shrink_when_quiet();
            let room = match self.read_room() {
                Room::Bytes(room) => room,
                Room::NeedsMemory(bytes) => {
                    let broker = Arc::clone(&self.broker);
                    tokio::select! {
                        memory = broker.request_memory(bytes) => {
                            self.request_memory = Some(memory);
                        }
                        () = sleep_until(request_deadline) => return self.timed_out(),
                        _ = stop.cancelled() => return Ok(()),
                    }
                    READ_CHUNK_BYTES
                }
            };
            self.input.reserve(room);
            tokio::select! {
                () = sleep_until(request_deadline) => return self.timed_out(),
                read = read_into(&mut self.stream, &mut self.input, &mut self.read_filled) => {
                    if read? == 0 {
                        if !self.input.is_empty() {
                            tracing::debug!(bytes = self.input.len(), "client closed mid-request");
                        }
                        return Ok(());
                    }
                }
                answers = oldest_answers(&mut self.awaiting), if !self.awaiting.is_empty() => {
                    self.answer_produce(answers);
                }
                _ = stop.cancelled() => return Ok(()),
            }
        }
    }

    /// Counts a client that left a request half sent for `client_timeout_ms`, before the
    /// connection closes.
    fn timed_out(&self) -> io::Result<()> {
        self.broker.metrics().client_timed_out(Stalled::request);
        tracing::debug!(
            bytes = self.input.len(),
            "closing connection: a request half sent for client_timeout_ms"
        );
        Ok(())
    }

    /// Handles every complete request in the input buffer. Produces to one partition that a
    /// client pipelined back to back are appended together (one write for the run), each
    /// still validated and answered on its own.
    async fn handle_buffered(&mut self) -> io::Result<Next> {
        let mut carried: Option<Request> = None;
        loop {
            let request = match carried.take() {
                Some(request) => request,
                None => match self.next_request() {
                    Ok(Some(request)) => request,
                    Ok(None) => return Ok(Next::Continue),
                    Err(BadFrame) => {
                        self.answer_awaiting().await;
                        return Ok(self.reject(ErrorCode::InvalidRequest));
                    }
                },
            };
            if !self.authorized(&request) {
                // In its turn, like any answer.
                self.answer_awaiting().await;
                self.broker.metrics().authorization_denied.inc();
                if request.expects_response() {
                    self.respond(Err(ErrorCode::AuthorizationFailed));
                }
                continue;
            }
            let next = match request {
                Request::Produce(first) if first.partition >= 0 => {
                    let mut run_bytes = first.messages.len();
                    let mut run = vec![first];
                    let mut bad_frame_after_run = false;
                    while run.len() < SETS_PER_WRITE_MAX && run_bytes < RUN_BYTES_MAX {
                        match self.next_request() {
                            Ok(Some(Request::Produce(p)))
                                if p.topic == run[0].topic
                                    && p.partition == run[0].partition
                                    && p.acks == run[0].acks =>
                            {
                                run_bytes += p.messages.len();
                                run.push(p);
                            }
                            Ok(Some(other)) => {
                                carried = Some(other);
                                break;
                            }
                            Ok(None) => break,
                            Err(BadFrame) => {
                                bad_frame_after_run = true;
                                break;
                            }
                        }
                    }
                    // Answered in order: the run's answers, then the bad frame's error.
                    self.handle_produce_run(run).await;
                    if bad_frame_after_run {
                        self.answer_awaiting().await;
                        self.reject(ErrorCode::InvalidRequest)
                    } else {
                        Next::Continue
                    }
                }
                request => {
                    // Answers stay in request order.
                    self.answer_awaiting().await;
                    self.handle(request).await?
                }
            };
            if !matches!(next, Next::Continue) {
                return Ok(next);
            }
            if self.output.len() >= OUTPUT_BYTES_MAX {
                self.flush_output().await?;
            }
        }
    }

    /// How much room the next read gets: a chunk while a large request (which holds its
    /// share of `request_memory_bytes`) arrives or the client keeps the buffer full, a little
    /// otherwise, so idle and stalled connections stay small. A large request not yet holding
    /// its share must take it first.
    fn read_room(&self) -> Room {
        let begun = self.input.get(..FRAME_SIZE_BYTES).map(|size| {
            FRAME_SIZE_BYTES + u32::from_be_bytes(size.try_into().expect("4")) as usize
        });
        match begun {
            Some(total) if total > READ_IDLE_BYTES && total > self.input.len() => {
                match self.request_memory {
                    None => Room::NeedsMemory(total),
                    Some(_) => Room::Bytes(READ_CHUNK_BYTES),
                }
            }
            _ if self.read_filled => Room::Bytes(READ_CHUNK_BYTES),
            _ => Room::Bytes(READ_IDLE_BYTES),
        }
    }

    /// Gives back the buffers' memory once a connection has gone quiet.
    fn shrink_when_quiet(&mut self) {
        if self.input.is_empty() && !self.read_filled && self.input.capacity() > READ_CHUNK_BYTES {
            self.input = BytesMut::new();
        }
        if self.output.is_empty() && self.output.capacity() > READ_CHUNK_BYTES {
            self.output = BytesMut::new();
        }
    }

    /// The next complete request in the input buffer, if there is one; `Err` for a frame that
    /// cannot be trusted, which the caller answers with an error (in its turn) before closing.
    fn next_request(&mut self) -> Result<Option<Request>, BadFrame> {
        let max_request_bytes = self.broker.config().max_request_bytes as usize;
        if self.input.len() < FRAME_SIZE_BYTES {
            return Ok(None);
        }
        let size = u32::from_be_bytes(self.input[..4].try_into().expect("4 bytes")) as usize;
        if size > max_request_bytes || size < 2 {
            tracing::debug!(size, max_request_bytes, "closing connection: bad frame size");
            return Err(BadFrame);
        }
        if self.input.len() < FRAME_SIZE_BYTES + size {
            return Ok(None);
        }
        self.input.advance(FRAME_SIZE_BYTES);
        let frame = self.input.split_to(size).freeze();
        self.requests_read += 1;
        self.request_memory = None;
        match Request::decode(frame) {
            Ok(request) => Ok(Some(request)),
            Err(e) => {
                tracing::debug!(error = %e, "closing connection: undecodable request");
                Err(BadFrame)
            }
        }
    }

    /// Whether the connection's principal may make `request`: every topic it touches allows
    /// the operation. METADATA is always allowed; it leaves out what may not be described.
    fn authorized(&self, request: &Request) -> bool {
        let authorizer = self.broker.authorizer();
        if !authorizer.enforcing() {
            return true;
        }
        let may = |topic: &str, operation| authorizer.check(&self.principal, topic, operation);
        match request {
            Request::Produce(p) => may(&p.topic, Operation::Produce),
            Request::MultiProduce(m) => m.entries.iter().all(|e| may(&e.topic, Operation::Produce)),
            Request::Fetch(f) => may(&f.topic, Operation::Consume),
            Request::MultiFetch(m) => m.fetches.iter().all(|f| may(&f.topic, Operation::Consume)),
            Request::MultiFetchWait(m) => {
                m.fetches.iter().all(|f| may(&f.topic, Operation::Consume))
            }
            Request::Offsets(o) => may(&o.topic, Operation::Consume),
            Request::Metadata(_) => true,
            Request::OffsetForLeaderEpoch(o) => may(&o.topic, Operation::Replicate),
            Request::RecordNumber(o) => {
                may(&o.topic, Operation::Replicate) || may(&o.topic, Operation::Consume)
            }
            Request::ReplicaFetch(r) => {
                r.fetches.iter().all(|f| may(&f.topic, Operation::Replicate))
            }
            Request::CreateTopic(c) => may(&c.topic, Operation::Create),
        }
    }

    /// METADATA as this principal may see it: a topic asked for that it may not describe is
    /// answered with error 14, and one it did not ask for is left out.
    fn visible_metadata(
        &self,
        mut metadata: protocol::MetadataResponse,
        asked: &[String],
    ) -> protocol::MetadataResponse {
        let authorizer = self.broker.authorizer();
        if !authorizer.enforcing() {
            return metadata;
        }
        let may = |topic: &str| authorizer.check(&self.principal, topic, Operation::Describe);
        if asked.is_empty() {
            metadata.topics.retain(|t| may(&t.name));
        } else {
            for topic in &mut metadata.topics {
                if !may(&topic.name) {
                    topic.error = ErrorCode::AuthorizationFailed;
                    topic.partitions.clear();
                }
            }
        }
        metadata
    }

    /// Appends a run of produces to one partition and answers each (unless `acks` is 0): at
    /// once, or once its acks are met if they wait ([`Connection::awaiting`]).
    async fn handle_produce_run(&mut self, run: Vec<protocol::ProduceRequest>) {
        let broker = Arc::clone(&self.broker);
        let started = Instant::now();
        broker.metrics().request(RequestKind::produce, run.len() as u64);
        let (topic, partition, acks) = (run[0].topic.as_str(), run[0].partition, run[0].acks);
        let sets: Vec<bytes::Bytes> = run.iter().map(|p| p.messages.clone()).collect();
        let appended = broker.append_run(topic, partition, acks, &sets).await;
        if acks == Acks::None {
            let results = appended.acknowledged().await;
            for error in results.into_iter().filter_map(Result::err) {
                broker.metrics().request_error(RequestKind::produce, error);
            }
            broker.metrics().observe(Latency::produce, started.elapsed());
            return;
        }
        if appended.is_ready() && self.awaiting.is_empty() {
            let results = appended.acknowledged().await;
            self.answer_produce((results, started));
            return;
        }
        while self.awaiting.len() >= AWAITING_RUNS_MAX {
            let answers = oldest_answers(&mut self.awaiting).await;
            self.answer_produce(answers);
        }
        self.awaiting.push_back(Awaiting { answers: Box::pin(appended.acknowledged()), started });
    }

    /// Sends the answers of a produce run.
    fn answer_produce(&mut self, (results, started): (Results, Instant)) {
        for result in results {
            if let Err(error) = result {
                self.broker.metrics().request_error(RequestKind::produce, error);
            }
            let result = result.map(|(partition, offset)| {
                Response::Produce(ProduceResponse { partition, offset })
            });
            self.respond(result);
        }
        self.broker.metrics().observe(Latency::produce, started.elapsed());
    }

    /// Waits for every produce run still waiting for its acks and answers it, oldest first.
    async fn answer_awaiting(&mut self) {
        while !self.awaiting.is_empty() {
            let answers = oldest_answers(&mut self.awaiting).await;
            self.answer_produce(answers);
        }
    }

    /// Answers a request that cannot be trusted with an error, then closes: after a bad frame
    /// the byte stream has no reliable boundary left.
    fn reject(&mut self, error: ErrorCode) -> Next {
        self.broker.metrics().rejected_frames.inc();
        Response::encode_error(&mut self.output, error);
        Next::Close
    }

    fn respond(&mut self, result: Result<Response, ErrorCode>) {
        match result {
            Ok(response) => response.encode(&mut self.output),
            Err(error) => Response::encode_error(&mut self.output, error),
        }
    }

    /// [`Connection::respond`] for a request of `kind`, counting its error.
    fn answer(&mut self, kind: RequestKind, result: Result<Response, ErrorCode>) {
        if let Err(error) = &result {
            self.broker.metrics().request_error(kind, *error);
        }
        self.respond(result);
    }

    async fn handle(&mut self, request: Request) -> io::Result<Next> {
        let broker = Arc::clone(&self.broker);
        match request {
            Request::Produce(p) => self.handle_produce_run(vec![p]).await,
            Request::MultiProduce(m) => {
                let started = Instant::now();
                broker.metrics().request(RequestKind::multiproduce, 1);
                let mut parts = Vec::with_capacity(m.entries.len());
                for e in &m.entries {
                    let part =
                        match broker.produce(&e.topic, e.partition, m.acks, &e.messages).await {
                            Ok((partition, offset)) => {
                                ProducePart { error: ErrorCode::None, partition, offset }
                            }
                            Err(error) => {
                                broker.metrics().request_error(RequestKind::multiproduce, error);
                                ProducePart { error, partition: e.partition, offset: -1 }
                            }
                        };
                    parts.push(part);
                }
                if m.acks != Acks::None {
                    self.respond(Ok(Response::MultiProduce(MultiProduceResponse { parts })));
                }
                broker.metrics().observe(Latency::produce, started.elapsed());
            }
            Request::Fetch(f) => {
                let started = Instant::now();
                broker.metrics().request(RequestKind::fetch, 1);
                match broker.plan_fetch(&f) {
                    Ok(slice) => {
                        let len = slice.as_ref().map_or(0, |s| s.len as usize);
                        encode_response_header(&mut self.output, len, ErrorCode::None);
                        self.send(slice.as_ref()).await?;
                        broker.metrics().sent(&f.topic, len as u64);
                    }
                    Err(error) => self.answer(RequestKind::fetch, Err(error)),
                }
                broker.metrics().observe(Latency::fetch, started.elapsed());
            }
            Request::MultiFetch(m) => {
                let started = Instant::now();
                broker.metrics().request(RequestKind::multifetch, 1);
                self.multi_fetch(RequestKind::multifetch, &m.fetches).await?;
                broker.metrics().observe(Latency::fetch, started.elapsed());
            }
            Request::MultiFetchWait(m) => {
                broker.metrics().request(RequestKind::multifetch_wait, 1);
                if m.max_wait_ms < 0 {
                    self.answer(RequestKind::multifetch_wait, Err(ErrorCode::InvalidRequest));
                } else if m.min_bytes < 0 {
                    self.answer(RequestKind::multifetch_wait, Err(ErrorCode::InvalidFetchSize));
                } else {
                    if let Next::Gone = self.wait_for_data(&m).await? {
                        return Ok(Next::Gone);
                    }
                    let started = Instant::now();
                    self.multi_fetch(RequestKind::multifetch_wait, &m.fetches).await?;
                    broker.metrics().observe(Latency::fetch, started.elapsed());
                }
            }
            Request::Offsets(o) => {
                broker.metrics().request(RequestKind::offsets, 1);
                let result = broker.offsets(&o.topic, o.partition, o.time, o.max_number).await;
                let result = result.map(|offsets| Response::Offsets(OffsetsResponse { offsets }));
                self.answer(RequestKind::offsets, result);
            }
            Request::Metadata(m) => {
                broker.metrics().request(RequestKind::metadata, 1);
                let metadata = self.visible_metadata(broker.metadata(&m.topics), &m.topics);
                self.respond(Ok(Response::Metadata(metadata)));
            }
            Request::RecordNumber(o) => {
                broker.metrics().request(RequestKind::record_number, 1);
                let result = broker.record_number(&o.topic, o.partition, o.offset).await;
                let result =
                    result.map(|record| Response::RecordNumber(RecordNumberResponse { record }));
                self.answer(RequestKind::record_number, result);
            }
            Request::OffsetForLeaderEpoch(o) => {
                broker.metrics().request(RequestKind::offset_for_leader_epoch, 1);
                let result = broker.offset_for_leader_epoch(&o.topic, o.partition, o.epoch);
                let result = result.map(|(epoch, end_offset)| {
                    Response::OffsetForLeaderEpoch(OffsetForLeaderEpochResponse {
                        epoch,
                        end_offset,
                    })
                });
                self.answer(RequestKind::offset_for_leader_epoch, result);
            }
            Request::ReplicaFetch(m) => {
                broker.metrics().request(RequestKind::replica_fetch, 1);
                if m.max_wait_ms < 0 {
                    self.answer(RequestKind::replica_fetch, Err(ErrorCode::InvalidRequest));
                    return Ok(Next::Continue);
                }
                if m.min_bytes < 0 {
                    self.answer(RequestKind::replica_fetch, Err(ErrorCode::InvalidFetchSize));
                    return Ok(Next::Continue);
                }
                broker.record_replica_fetches(&m);
                if let Next::Gone = self.wait_for_replica_data(&m).await? {
                    return Ok(Next::Gone);
                }
                let started = Instant::now();
                self.replica_fetch(&m).await?;
                broker.metrics().observe(Latency::fetch, started.elapsed());
            }
            Request::CreateTopic(c) => {
                broker.metrics().request(RequestKind::create_topic, 1);
                let result = broker.create_topic(&c.topic, c.partitions, &c.configs).await;
                let result = result.map(|()| Response::CreateTopic(protocol::CreateTopicResponse));
                self.answer(RequestKind::create_topic, result);
            }
        }
        Ok(Next::Continue)
    }

    /// Answers a multifetch: each part's header, then its bytes by `sendfile`.
    async fn multi_fetch(&mut self, kind: RequestKind, fetches: &[FetchRequest]) -> io::Result<()> {
        let parts: Vec<_> = fetches.iter().map(|f| self.broker.plan_fetch(f)).collect();
        let part_len = |p: &Result<Option<FileSlice>, ErrorCode>| match p {
            Ok(Some(slice)) => slice.len as usize,
            _ => 0,
        };
        let body_len: usize = parts.iter().map(|p| FRAME_SIZE_BYTES + 2 + part_len(p)).sum();
        encode_response_header(&mut self.output, body_len, ErrorCode::None);
        for (part, fetch) in parts.iter().zip(fetches) {
            let error = part.as_ref().err().copied().unwrap_or(ErrorCode::None);
            encode_response_header(&mut self.output, part_len(part), error);
            match part {
                Ok(slice) => {
                    self.send(slice.as_ref()).await?;
                    self.broker.metrics().sent(&fetch.topic, part_len(part) as u64);
                }
                Err(error) => self.broker.metrics().request_error(kind, *error),
            }
        }
        Ok(())
    }

    /// Waits until `min_bytes` are visible over the fetch's parts, `max_wait_ms` (at most
    /// `max_fetch_wait_ms`) has passed, or the broker shuts down. Returns at once when a part
    /// will be answered with an error, when enough is visible already, or when
    /// `max_parked_fetches` fetches wait already. Woken only by changes of the visible ends:
    /// no polling.
    async fn wait_for_data(&mut self, request: &MultiFetchWaitRequest) -> io::Result<Next> {
        let mut watches = Vec::with_capacity(request.fetches.len());
        for fetch in &request.fetches {
            match self.broker.watch_fetch(fetch) {
                Ok(watch) => watches.push((watch, fetch.offset as u64, fetch.max_bytes as u64)),
                Err(_) => return Ok(Next::Continue), // the answer carries the error
            }
        }
        self.wait_for_bytes(request.max_wait_ms, request.min_bytes, watches).await
    }

    /// [`Connection::wait_for_data`] for a follower's fetch, on the written ends.
    async fn wait_for_replica_data(&mut self, request: &ReplicaFetchRequest) -> io::Result<Next> {
        let mut watches = Vec::with_capacity(request.fetches.len());
        for fetch in &request.fetches {
            match self.broker.watch_replica_fetch(fetch, request.replica_id) {
                Ok(watch) => watches.push((watch, fetch.offset as u64, fetch.max_bytes as u64)),
                Err(_) => return Ok(Next::Continue),
            }
        }
        self.wait_for_bytes(request.max_wait_ms, request.min_bytes, watches).await
    }

    /// Parks until the ends `watches` follow are `min_bytes` past their offsets (each counted
    /// up to its `max_bytes`), `max_wait_ms` has passed, or the broker stops.
    async fn wait_for_bytes(
        &mut self,
        max_wait_ms: i32,
        min_bytes: i32,
        mut watches: Vec<(watch::Receiver<u64>, u64, u64)>,
    ) -> io::Result<Next> {
        let max_wait = Duration::from_millis(max_wait_ms.max(0) as u64)
            .min(self.broker.config().max_fetch_wait());
        let min_bytes = min_bytes.max(0) as u64;
        let visible = |watches: &[(watch::Receiver<u64>, u64, u64)]| -> u64 {
            watches
                .iter()
                .map(|(watch, offset, max_bytes)| {
                    watch.borrow().saturating_sub(*offset).min(*max_bytes)
                })
                .sum()
        };
        if max_wait.is_zero() || visible(&watches) >= min_bytes {
            return Ok(Next::Continue);
        }
        let Some(_slot) = self.broker.try_park() else {
            self.broker.metrics().fetches_not_parked.inc();
            return Ok(Next::Continue);
        };
        let metrics = Arc::clone(self.broker.metrics());
        metrics.fetches_parked.inc();
        let _parked = Parked::new(&metrics);
        // Answers to earlier requests go out now, not after the wait.
        self.flush_output().await?;
        let deadline = tokio::time::Instant::now() + max_wait;
        loop {
            let changed = async {
                if watches.is_empty() {
                    return std::future::pending().await;
                }
                let changes = watches.iter_mut().map(|(watch, _, _)| Box::pin(watch.changed()));
                futures::future::select_all(changes).await.0
            };
            let reading = self.input.len() < PARKED_INPUT_BYTES_MAX;
            if reading {
                self.input.reserve(PARKED_INPUT_BYTES_MAX - self.input.len());
            }
            tokio::select! {
                _ = tokio::time::sleep_until(deadline) => return Ok(Next::Continue),
                _ = self.stop.cancelled() => return Ok(Next::Continue),
                changed = changed => {
                    // A partition that went away has nothing more to wait for.
                    if changed.is_err() || visible(&watches) >= min_bytes {
                        return Ok(Next::Continue);
                    }
                }
                read = read_into(&mut self.stream, &mut self.input, &mut self.read_filled), if reading => {
                    if read? == 0 {
                        return Ok(Next::Gone);
                    }
                }
            }
        }
    }

    /// Answers a follower's fetch: each part's header (error, high watermark, epoch), then its
    /// bytes by `sendfile`.
    async fn replica_fetch(&mut self, request: &ReplicaFetchRequest) -> io::Result<()> {
        let fetches = &request.fetches;
        let parts: Vec<_> =
            fetches.iter().map(|f| self.broker.plan_replica_fetch(f, request.replica_id)).collect();
        let part_len = |p: &Result<ReplicaPlan, ErrorCode>| match p {
            Ok(ReplicaPlan { slice: Some(slice), .. }) => slice.len as usize,
            _ => 0,
        };
        let body_len: usize =
            parts.iter().map(|p| FRAME_SIZE_BYTES + REPLICA_PART_HEADER_BYTES + part_len(p)).sum();
        encode_response_header(&mut self.output, body_len, ErrorCode::None);
        for (part, fetch) in parts.iter().zip(fetches) {
            match part {
                Ok(plan) => {
                    let len = part_len(part);
                    let header = ReplicaPartHeader {
                        error: ErrorCode::None,
                        high_watermark: plan.high_watermark,
                        data_epoch: plan.epoch,
                        segment_base: plan.segment_base,
                    };
                    encode_replica_part_header(&mut self.output, len, header);
                    self.send(plan.slice.as_ref()).await?;
                    self.broker.metrics().sent(&fetch.topic, len as u64);
                }
                Err(error) => {
                    let header = ReplicaPartHeader {
                        error: *error,
                        high_watermark: -1,
                        data_epoch: UNDEFINED_EPOCH,
                        segment_base: -1,
                    };
                    encode_replica_part_header(&mut self.output, 0, header);
                    self.broker.metrics().request_error(RequestKind::replica_fetch, *error);
                }
            }
        }
        Ok(())
    }

    /// Writes what is buffered, then the slice's bytes straight from the file.
    async fn send(&mut self, slice: Option<&FileSlice>) -> io::Result<()> {
        let Some(slice) = slice.filter(|s| s.len > 0) else { return Ok(()) };
        self.flush_output().await?;
        let metrics = Arc::clone(self.broker.metrics());
        let stall = self.broker.config().client_timeout();
        let sent = crate::stream::send_slice(&mut self.stream, slice, &metrics, stall).await;
        self.count_stall(sent)
    }

    async fn flush_output(&mut self) -> io::Result<()> {
        let stall = self.broker.config().client_timeout();
        let written = tokio::time::timeout(stall, async {
            if !self.output.is_empty() {
                self.stream.write_all(&self.output).await?;
                self.output.clear();
            }
            // TLS keeps records until flushed; a plain socket has nothing to flush.
            self.stream.flush().await
        })
        .await
        .unwrap_or_else(|_| Err(crate::stream::stalled()));
        self.count_stall(written)
    }

    /// Counts a write that ended because the client took nothing for `client_timeout_ms`.
    fn count_stall(&self, written: io::Result<()>) -> io::Result<()> {
        if let Err(e) = &written
            && e.kind() == io::ErrorKind::TimedOut
        {
            self.broker.metrics().client_timed_out(Stalled::response);
        }
        written
    }
}

/// Reads into `input`'s spare room, noting whether the read filled it.
async fn read_into(
    stream: &mut ServerStream,
    input: &mut BytesMut,
    filled: &mut bool,
) -> io::Result<usize> {
    let room = input.capacity() - input.len();
    let read = stream.read_buf(input).await?;
    *filled = read == room;
    Ok(read)
}

/// Sleeps until `deadline`, or forever without one.
async fn sleep_until(deadline: Option<tokio::time::Instant>) {
    match deadline {
        Some(deadline) => tokio::time::sleep_until(deadline).await,
        None => std::future::pending().await,
    }
}

/// Waits for the oldest produce run's acks and takes it off the queue, which must not be
/// empty. Dropped before it is ready, it leaves the run at the front.
async fn oldest_answers(awaiting: &mut VecDeque<Awaiting>) -> (Results, Instant) {
    let oldest = awaiting.front_mut().expect("a produce run waiting");
    let results = oldest.answers.as_mut().await;
    let started = oldest.started;
    awaiting.pop_front();
    (results, started)
}
