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
use std::time::Instant;

use bytes::{Buf, BytesMut};
use protocol::{
    DELETE_TO_HIGH_WATERMARK, DeleteRecordsRequest, DeleteRecordsResponse, ErrorCode,
    FRAME_SIZE_BYTES, InitProducerIdResponse, OffsetsResponse, RecordNumberResponse, Request,
    Response, WriteTxnMarkerResponse,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_util::sync::CancellationToken;

use crate::log::{FileSlice, SETS_PER_WRITE_MAX};
use crate::metrics::{Latency, RequestKind, Stalled};
use crate::net::admission::{Admission, RequestMemory};
use crate::node::{DeleteBefore, Node};
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
pub(super) const PARKED_INPUT_BYTES_MAX: usize = READ_IDLE_BYTES;

/// Produce runs appended whose answers wait for their acks, at most; one more waits for the
/// oldest answer first.
pub(super) const AWAITING_RUNS_MAX: usize = 64;

/// Each set's `(partition, offset)` of a produce run, or its error.
pub(super) type Results = Vec<Result<(i32, i64), ErrorCode>>;
/// The answers of an appended produce run, once its acks are met.
pub(super) type Answers = Pin<Box<dyn Future<Output = Results> + Send>>;

/// A produce run appended, its answers not yet sent.
pub(super) struct Awaiting {
    pub(super) answers: Answers,
    pub(super) started: Instant,
    /// PRODUCE or IDEMPOTENT_PRODUCE: what its errors are counted under.
    pub(super) kind: RequestKind,
}

/// A produce run's answers, when it began, and its request type.
pub(super) type Answered = (Results, Instant, RequestKind);

/// A frame with a bad size or an undecodable body.
struct BadFrame;

/// What to do after a request.
pub(super) enum Next {
    Continue,
    /// Send what is buffered, then close.
    Close,
    /// The client hung up while a long-poll fetch waited: close without answering.
    Gone,
}

pub(crate) struct Connection {
    pub(super) stream: ServerStream,
    /// Who the client is: its certificate's CN, or `anonymous`.
    pub(super) principal: String,
    pub(super) input: BytesMut,
    pub(super) output: BytesMut,
    pub(super) node: Arc<Node>,
    pub(super) admission: Arc<Admission>,
    /// Shutdown: a waiting long-poll fetch is answered at once.
    pub(super) stop: CancellationToken,
    /// Produce runs waiting for their acks, oldest first.
    pub(super) awaiting: VecDeque<Awaiting>,
    /// Requests taken off the input so far.
    pub(super) requests_read: u64,
    /// Whether the last read filled the input's room: the client is likely sending more.
    pub(super) read_filled: bool,
    /// The share of `request_memory_bytes` the large request at the head of the input holds.
    pub(super) request_memory: Option<RequestMemory>,
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
        node: Arc<Node>,
        admission: Arc<Admission>,
        stop: CancellationToken,
    ) -> Connection {
        Connection {
            stream,
            principal,
            input: BytesMut::new(),
            output: BytesMut::new(),
            node,
            admission,
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
        let client_timeout = self.node.config().client_timeout();
        // When the request begun in the input must be in whole: `client_timeout` after its
        // first bytes were read. However slowly they trickle in, it does not move.
        let mut request_deadline: Option<tokio::time::Instant> = None;
        loop {
            let requests_before = self.requests_read;
            match self.handle_buffered().await? {
                Next::Continue => {}
                Next::Close => {
                    self.flush_output().await?;
                    crate::net::send::close_lingering(&mut self.stream).await;
                    return Ok(());
                }
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
                    let admission = Arc::clone(&self.admission);
                    tokio::select! {
                        memory = admission.request_memory(bytes) => {
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

    /// The produces to `first`'s partition with its acks that the client pipelined right
    /// behind it (IDEMPOTENT_PRODUCEs if `idempotent`, PRODUCEs if not), up to a write's worth,
    /// with what ended the run.
    fn gather_run(
        &mut self,
        first: protocol::ProduceRequest,
        idempotent: bool,
    ) -> (Vec<protocol::ProduceRequest>, RunEnd) {
        let mut run_bytes = first.messages.len();
        let mut run = vec![first];
        let mut end = RunEnd { carried: None, bad_frame: false };
        while run.len() < SETS_PER_WRITE_MAX && run_bytes < RUN_BYTES_MAX {
            let p = match self.next_request() {
                Ok(Some(Request::Produce(p))) if !idempotent => p,
                Ok(Some(Request::IdempotentProduce(p))) if idempotent => p,
                Ok(Some(other)) => {
                    end.carried = Some(other);
                    break;
                }
                Ok(None) => break,
                Err(BadFrame) => {
                    end.bad_frame = true;
                    break;
                }
            };
            if p.topic != run[0].topic || p.partition != run[0].partition || p.acks != run[0].acks {
                end.carried = Some(match idempotent {
                    true => Request::IdempotentProduce(p),
                    false => Request::Produce(p),
                });
                break;
            }
            run_bytes += p.messages.len();
            run.push(p);
        }
        (run, end)
    }

    /// After a run was handled: answered in order, the run's answers, then a bad frame's
    /// error if one ended it.
    async fn after_run(&mut self, bad_frame: bool) -> Next {
        if bad_frame {
            self.answer_awaiting().await;
            self.reject(ErrorCode::InvalidRequest)
        } else {
            Next::Continue
        }
    }

    /// Counts a client that left a request half sent for `client_timeout_ms`, before the
    /// connection closes.
    fn timed_out(&self) -> io::Result<()> {
        self.node.metrics().client_timed_out(Stalled::request);
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
                self.node.metrics().authorization_denied.inc();
                if request.expects_response() {
                    self.respond(Err(ErrorCode::AuthorizationFailed));
                }
                continue;
            }
            let next = match request {
                Request::Produce(first) if first.partition >= 0 => {
                    let (run, after) = self.gather_run(first, false);
                    carried = after.carried;
                    self.handle_produce_run(run).await;
                    self.after_run(after.bad_frame).await
                }
                Request::IdempotentProduce(first) if first.partition >= 0 => {
                    // Waits for its acks beside later requests, like a produce run.
                    let (run, after) = self.gather_run(first, true);
                    carried = after.carried;
                    self.handle_idempotent_run(run).await;
                    self.after_run(after.bad_frame).await
                }
                Request::IdempotentProduce(p) => {
                    self.handle_idempotent_produce(p).await;
                    Next::Continue
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
        let begun = protocol::u32_at(&self.input, 0).map(|size| FRAME_SIZE_BYTES + size as usize);
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
        let max_request_bytes = self.node.config().max_request_bytes as usize;
        let Some(size) = protocol::u32_at(&self.input, 0) else {
            return Ok(None);
        };
        let size = size as usize;
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

    /// Answers a request that cannot be trusted with an error, then closes: after a bad frame
    /// the byte stream has no reliable boundary left.
    pub(super) fn reject(&mut self, error: ErrorCode) -> Next {
        self.node.metrics().rejected_frames.inc();
        Response::encode_error(&mut self.output, error);
        Next::Close
    }

    pub(super) fn respond(&mut self, result: Result<Response, ErrorCode>) {
        match result {
            Ok(response) => response.encode(&mut self.output),
            Err(error) => Response::encode_error(&mut self.output, error),
        }
    }

    /// [`Connection::respond`] for a request of `kind`, counting its error.
    pub(super) fn answer(&mut self, kind: RequestKind, result: Result<Response, ErrorCode>) {
        if let Err(error) = &result {
            self.node.metrics().request_error(kind, *error);
        }
        self.respond(result);
    }

    /// Answers one request (a produce run has its own path: [`Connection::handle_produce_run`]).
    async fn handle(&mut self, request: Request) -> io::Result<Next> {
        let node = Arc::clone(&self.node);
        let metrics = node.metrics();
        match request {
            Request::Produce(p) => self.handle_produce_run(vec![p]).await,
            Request::IdempotentProduce(p) => self.handle_idempotent_produce(p).await,
            Request::CopyProduce(p) => self.handle_copy_produce(p).await,
            Request::InitProducerId => {
                metrics.request(RequestKind::init_producer_id, 1);
                let producer_id = node.allocate_producer_id();
                let response = InitProducerIdResponse { producer_id, producer_epoch: 0 };
                self.respond(Ok(Response::InitProducerId(response)));
            }
            Request::MultiProduce(m) => self.multi_produce(m).await,
            Request::Fetch(f) => self.fetch(f).await?,
            Request::MultiFetch(m) => {
                let started = Instant::now();
                metrics.request(RequestKind::multifetch, 1);
                self.multi_fetch(RequestKind::multifetch, &m.fetches).await?;
                metrics.observe(Latency::fetch, started.elapsed());
            }
            Request::MultiFetchWait(m) => return self.multi_fetch_wait(m).await,
            Request::Offsets(o) => {
                metrics.request(RequestKind::offsets, 1);
                let result = node.offsets(&o.topic, o.partition, o.time, o.max_number).await;
                let result = result.map(|offsets| Response::Offsets(OffsetsResponse { offsets }));
                self.answer(RequestKind::offsets, result);
            }
            Request::Metadata(m) => {
                metrics.request(RequestKind::metadata, 1);
                let metadata = self.visible_metadata(node.metadata(&m.topics), &m.topics);
                self.respond(Ok(Response::Metadata(metadata)));
            }
            Request::RecordNumber(o) => {
                metrics.request(RequestKind::record_number, 1);
                let result = node.record_number(&o.topic, o.partition, o.offset).await;
                let result =
                    result.map(|record| Response::RecordNumber(RecordNumberResponse { record }));
                self.answer(RequestKind::record_number, result);
            }
            Request::DeleteRecords(d) => self.delete_records(d).await,
            Request::WriteTxnMarker(w) => {
                metrics.request(RequestKind::write_txn_marker, 1);
                let result = node.write_txn_marker(&w).await;
                let result = result.map(|()| Response::WriteTxnMarker(WriteTxnMarkerResponse));
                self.answer(RequestKind::write_txn_marker, result);
            }
            Request::ReadCommitted(c) => {
                metrics.request(RequestKind::read_committed, 1);
                let result = node.read_committed(&c).await.map(Response::ReadCommitted);
                self.answer(RequestKind::read_committed, result);
            }
            Request::OffsetForLeaderEpoch(o) => self.offset_for_leader_epoch(o),
            Request::ReplicaFetch(m) => return self.replica_fetch(m).await,
            Request::CreateTopic(c) => {
                metrics.request(RequestKind::create_topic, 1);
                let result = node.create_topic(&c.topic, c.partitions, &c.configs).await;
                let result = result.map(|()| Response::CreateTopic(protocol::CreateTopicResponse));
                self.answer(RequestKind::create_topic, result);
            }
        }
        Ok(Next::Continue)
    }

    /// DELETE_RECORDS: moves the partition's log start (`Node::delete_records`).
    async fn delete_records(&mut self, d: DeleteRecordsRequest) {
        self.node.metrics().request(RequestKind::delete_records, 1);
        let before = match d.offset {
            DELETE_TO_HIGH_WATERMARK => Ok(DeleteBefore::HighWatermark),
            offset => u64::try_from(offset)
                .map(DeleteBefore::Offset)
                .map_err(|_| ErrorCode::OffsetOutOfRange),
        };
        let result = match before {
            Ok(before) => self.node.delete_records(&d.topic, d.partition, before).await,
            Err(e) => Err(e),
        };
        let result = result.map(|start| {
            Response::DeleteRecords(DeleteRecordsResponse { log_start: start.offset as i64 })
        });
        self.answer(RequestKind::delete_records, result);
    }

    /// Writes what is buffered, then the slice's bytes straight from the file.
    pub(super) async fn send(&mut self, slice: Option<&FileSlice>) -> io::Result<()> {
        let Some(slice) = slice.filter(|s| s.len > 0) else { return Ok(()) };
        self.flush_output().await?;
        let metrics = Arc::clone(self.node.metrics());
        let stall = self.node.config().client_timeout();
        let sent = crate::net::send::send_slice(&mut self.stream, slice, &metrics, stall).await;
        self.count_stall(sent)
    }

    pub(super) async fn flush_output(&mut self) -> io::Result<()> {
        let stall = self.node.config().client_timeout();
        let written = tokio::time::timeout(stall, async {
            if !self.output.is_empty() {
                self.stream.write_all(&self.output).await?;
                self.output.clear();
            }
            // TLS keeps records until flushed; a plain socket has nothing to flush.
            self.stream.flush().await
        })
        .await
        .unwrap_or_else(|_| Err(crate::net::send::stalled()));
        self.count_stall(written)
    }

    /// Counts a write that ended because the client took nothing for `client_timeout_ms`.
    pub(super) fn count_stall(&self, written: io::Result<()>) -> io::Result<()> {
        if let Err(e) = &written
            && e.kind() == io::ErrorKind::TimedOut
        {
            self.node.metrics().client_timed_out(Stalled::response);
        }
        written
    }
}

/// Reads into `input`'s spare room, noting whether the read filled it.
pub(super) async fn read_into(
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
pub(super) async fn oldest_answers(awaiting: &mut VecDeque<Awaiting>) -> Answered {
    let oldest = awaiting.front_mut().expect("a produce run waiting");
    let results = oldest.answers.as_mut().await;
    let (started, kind) = (oldest.started, oldest.kind);
    awaiting.pop_front();
    (results, started, kind)
}

/// What ended a run of produces ([`Connection::gather_run`]): the request after it, to handle
/// next, or a frame that does not parse.
struct RunEnd {
    carried: Option<Request>,
    bad_frame: bool,
}
