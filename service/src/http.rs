//! Every HTTP server of Tributary (the registry, the agent's input, the audit dashboard and
//! API, each `/metrics`) on one listener: plaintext, or TLS with the same options and rules as
//! the broker's ([`crate::tls`]). TLS handshakes run beside the accept loop, so a slow or
//! silent client holds up nobody; a failed one is logged and closed.
//!
//! Every server bounds what clients hold ([`Limits`]): with `max_connections` open, a new one
//! takes the place of the oldest connection not yet answered (a slowloris client holds its
//! slot only until newer clients need it), or is closed at once if every open one has been
//! answered; a request's head must arrive within `client_timeout` (which also closes a
//! keep-alive connection idle that long), and its body within `client_timeout` of its head.
//!
//! Handlers learn who is calling from [`Peer`] (`axum::extract::ConnectInfo<Peer>`): its
//! address, and its principal when it presented a client certificate.

use std::collections::BTreeMap;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::http::Request;
use hyper::body::{Frame, Incoming};
use hyper_util::rt::{TokioIo, TokioTimer};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use tokio::net::TcpListener;
use tokio::sync::{Semaphore, mpsc};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::tls::{ServerStream, ServerTls};

/// Handshaken connections waiting for axum to take them.
const ACCEPTED_QUEUE: usize = 64;

/// A listener axum serves: plain TCP, or TLS connections handshaken beside the accept loop.
pub enum HttpListener {
    Plain(TcpListener),
    Tls { accepted: mpsc::Receiver<(ServerStream, SocketAddr)>, local: SocketAddr },
}

impl HttpListener {
    /// Listens on `tcp`, with TLS when `tls` is given, until `stop`.
    pub fn new(
        tcp: TcpListener,
        tls: Option<Arc<ServerTls>>,
        stop: CancellationToken,
    ) -> HttpListener {
        let Some(tls) = tls else { return HttpListener::Plain(tcp) };
        let local = tcp.local_addr().unwrap_or_else(|_| SocketAddr::from(([0, 0, 0, 0], 0)));
        let (tx, accepted) = mpsc::channel(ACCEPTED_QUEUE);
        tokio::spawn(accept_tls(tcp, tls, tx, stop));
        HttpListener::Tls { accepted, local }
    }
}

async fn accept_tls(
    tcp: TcpListener,
    tls: Arc<ServerTls>,
    tx: mpsc::Sender<(ServerStream, SocketAddr)>,
    stop: CancellationToken,
) {
    let mut backoff = crate::Backoff::from_ms(1, 1_000);
    loop {
        let (stream, peer) = tokio::select! {
            () = stop.cancelled() => return,
            () = tx.closed() => return,
            accepted = TcpListener::accept(&tcp) => match accepted {
                Ok(accepted) => accepted,
                Err(e) => {
                    tracing::warn!(error = %e, "accept failed");
                    backoff.sleep().await;
                    continue;
                }
            },
        };
        backoff.reset();
        let (tls, tx) = (Arc::clone(&tls), tx.clone());
        tokio::spawn(async move {
            match crate::tls::accept(stream, &tls).await {
                Ok(stream) => {
                    let _ = tx.send((stream, peer)).await;
                }
                Err(e) if !e.is_failure() => {
                    tracing::debug!(%peer, reason = %e, "TLS handshake ended")
                }
                Err(e) => tracing::warn!(%peer, reason = %e, "TLS handshake failed; closing"),
            }
        });
    }
}

impl axum::serve::Listener for HttpListener {
    type Io = ServerStream;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (ServerStream, SocketAddr) {
        match self {
            // axum's own accept for TCP (it waits out accept errors).
            HttpListener::Plain(tcp) => {
                let (stream, peer) = axum::serve::Listener::accept(tcp).await;
                (ServerStream::Plain(stream), peer)
            }
            HttpListener::Tls { accepted, .. } => match accepted.recv().await {
                Some(connection) => connection,
                // The accept task ended (shutdown): nothing more will come.
                None => std::future::pending().await,
            },
        }
    }

    fn local_addr(&self) -> std::io::Result<SocketAddr> {
        match self {
            HttpListener::Plain(tcp) => tcp.local_addr(),
            HttpListener::Tls { local, .. } => Ok(*local),
        }
    }
}

/// Who sent a request: its address, and the principal its client certificate names (none
/// over plaintext or without a certificate).
#[derive(Debug, Clone)]
pub struct Peer {
    pub addr: SocketAddr,
    pub principal: Option<String>,
}

impl Peer {
    fn of(stream: &ServerStream, addr: SocketAddr) -> Peer {
        let principal = match stream {
            ServerStream::Plain(_) => None,
            ServerStream::Tls(tls) => tls
                .get_ref()
                .1
                .peer_certificates()
                .and_then(|certs| certs.first())
                .and_then(|cert| crate::tls::principal(cert).ok()),
        };
        Peer { addr, principal }
    }
}

/// Connections a server keeps open at most, by default.
pub const MAX_CONNECTIONS: usize = 1024;
/// How long a client may take over a request's head, or its body, by default.
pub const CLIENT_TIMEOUT: Duration = Duration::from_secs(30);
/// How long connections get to finish the request in hand after shutdown begins.
const DRAIN: Duration = Duration::from_secs(5);

/// What an HTTP server lets its clients hold, and the counters that show each limit hit.
#[derive(Debug, Clone)]
pub struct Limits {
    pub max_connections: usize,
    /// A request's head must arrive within this (counted from when the connection became
    /// ready for it), and its body within this of its head.
    pub client_timeout: Duration,
    pub counters: ConnectionCounters,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            max_connections: MAX_CONNECTIONS,
            client_timeout: CLIENT_TIMEOUT,
            counters: ConnectionCounters::default(),
        }
    }
}

/// `http_connections_open`, `http_connections_refused_total` and
/// `http_clients_timed_out_total`: unregistered (counting for nobody) until
/// [`ConnectionCounters::register`].
#[derive(Debug, Clone, Default)]
pub struct ConnectionCounters {
    open: Gauge,
    refused: Counter,
    evicted: Counter,
    timed_out: Counter,
}

impl ConnectionCounters {
    pub fn register(registry: &mut Registry) -> ConnectionCounters {
        let counters = ConnectionCounters::default();
        registry.register("http_connections_open", "HTTP connections open", counters.open.clone());
        registry.register(
            "http_connections_refused",
            "HTTP connections closed at once because max_connections were open",
            counters.refused.clone(),
        );
        registry.register(
            "http_connections_evicted",
            "HTTP connections closed, with max_connections open, to make way for a new one: \
             the oldest that had not yet been answered",
            counters.evicted.clone(),
        );
        registry.register(
            "http_clients_timed_out",
            "HTTP connections closed because a request's head or body took longer than \
             client_timeout_ms (or a keep-alive connection sat idle that long)",
            counters.timed_out.clone(),
        );
        counters
    }
}

/// Serves `router` on `tcp` (TLS when `tls` is given) within `limits` until `stop`, handlers
/// seeing [`Peer`]. After `stop`, requests in hand get a few seconds to finish.
pub async fn serve(
    tcp: TcpListener,
    tls: Option<Arc<ServerTls>>,
    router: axum::Router,
    stop: CancellationToken,
    limits: Limits,
) -> std::io::Result<()> {
    let mut listener = HttpListener::new(tcp, tls, stop.clone());
    let slots = Arc::new(Semaphore::new(limits.max_connections));
    let open = Arc::new(Mutex::new(OpenConnections::default()));
    let connections = TaskTracker::new();
    loop {
        let (stream, addr) = tokio::select! {
            () = stop.cancelled() => break,
            accepted = axum::serve::Listener::accept(&mut listener) => accepted,
        };
        let slot = match Arc::clone(&slots).try_acquire_owned() {
            Ok(slot) => slot,
            // Full: the oldest connection never yet answered (a slowloris client, most
            // likely) makes way, so that clients that do send requests are served.
            Err(_) if lock(&open).evict_oldest_unanswered() => {
                limits.counters.evicted.inc();
                match Arc::clone(&slots).acquire_owned().await {
                    Ok(slot) => slot,
                    Err(_) => break,
                }
            }
            Err(_) => {
                limits.counters.refused.inc();
                tracing::warn!(peer = %addr, max = limits.max_connections, "too many HTTP connections; closing");
                continue;
            }
        };
        let peer = Peer::of(&stream, addr);
        let (router, stop, limits) = (router.clone(), stop.clone(), limits.clone());
        let (id, handle) = lock(&open).add();
        let open = Arc::clone(&open);
        connections.spawn(async move {
            limits.counters.open.inc();
            tokio::select! {
                () = serve_connection(stream, peer, router, stop, &limits, &handle.answered) => {}
                () = handle.evict.cancelled() => {}
            }
            lock(&open).remove(id);
            limits.counters.open.dec();
            drop(slot);
        });
    }
    drop(listener);
    connections.close();
    if tokio::time::timeout(DRAIN, connections.wait()).await.is_err() {
        tracing::warn!("HTTP requests still in hand after {DRAIN:?}; stopping anyway");
    }
    Ok(())
}

/// The connections being served, oldest first, and whether each has answered a request.
#[derive(Default)]
struct OpenConnections {
    next_id: u64,
    by_age: BTreeMap<u64, Handle>,
}

#[derive(Clone)]
struct Handle {
    answered: Arc<AtomicBool>,
    evict: CancellationToken,
}

impl OpenConnections {
    fn add(&mut self) -> (u64, Handle) {
        let id = self.next_id;
        self.next_id += 1;
        let handle = Handle { answered: Arc::default(), evict: CancellationToken::new() };
        self.by_age.insert(id, handle.clone());
        (id, handle)
    }

    fn remove(&mut self, id: u64) {
        self.by_age.remove(&id);
    }

    /// Closes the oldest connection that has answered nothing yet, if there is one.
    fn evict_oldest_unanswered(&mut self) -> bool {
        let oldest = self.by_age.iter().find(|(_, h)| !h.answered.load(Ordering::Relaxed));
        let Some((&id, handle)) = oldest else { return false };
        handle.evict.cancel();
        self.by_age.remove(&id);
        true
    }
}

fn lock(open: &Mutex<OpenConnections>) -> std::sync::MutexGuard<'_, OpenConnections> {
    open.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// One connection's requests, until it closes, times out, or `stop` (then the request in hand
/// finishes first). `answered` is set once a response is ready.
async fn serve_connection(
    stream: ServerStream,
    peer: Peer,
    router: axum::Router,
    stop: CancellationToken,
    limits: &Limits,
    answered: &Arc<AtomicBool>,
) {
    let answered = Arc::clone(answered);
    let client_timeout = limits.client_timeout;
    let timed_out = limits.counters.timed_out.clone();
    let addr = peer.addr;
    let service = hyper::service::service_fn(move |request: Request<Incoming>| {
        let (parts, body) = request.into_parts();
        let body = DeadlineBody {
            body,
            deadline: Box::pin(tokio::time::sleep(client_timeout)),
            timed_out: timed_out.clone(),
        };
        let mut request = Request::from_parts(parts, axum::body::Body::new(body));
        request.extensions_mut().insert(axum::extract::ConnectInfo(peer.clone()));
        let (router, answered) = (router.clone(), Arc::clone(&answered));
        async move {
            let response = tower::ServiceExt::oneshot(router, request).await;
            answered.store(true, Ordering::Relaxed);
            response
        }
    });
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder.timer(TokioTimer::new()).header_read_timeout(client_timeout);
    let connection = builder.serve_connection(TokioIo::new(stream), service);
    let mut connection = std::pin::pin!(connection);
    let ended = tokio::select! {
        ended = connection.as_mut() => ended,
        () = stop.cancelled() => {
            connection.as_mut().graceful_shutdown();
            connection.await
        }
    };
    if let Err(e) = ended {
        if e.is_timeout() {
            limits.counters.timed_out.inc();
            tracing::debug!(peer = %addr, "HTTP client timed out; closing");
        } else {
            tracing::debug!(peer = %addr, error = %e, "HTTP connection ended");
        }
    }
}

/// A request body that fails once `deadline` passes before its end: a client trickling a body
/// gives its connection back like one trickling a head.
struct DeadlineBody {
    body: Incoming,
    deadline: Pin<Box<tokio::time::Sleep>>,
    timed_out: Counter,
}

impl hyper::body::Body for DeadlineBody {
    type Data = bytes::Bytes;
    type Error = std::io::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<bytes::Bytes>, std::io::Error>>> {
        let this = self.get_mut();
        if let Poll::Ready(frame) = Pin::new(&mut this.body).poll_frame(cx) {
            return Poll::Ready(frame.map(|frame| frame.map_err(std::io::Error::other)));
        }
        if this.deadline.as_mut().poll(cx).is_ready() {
            this.timed_out.inc();
            return Poll::Ready(Some(Err(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                "the request body did not arrive within client_timeout_ms",
            ))));
        }
        Poll::Pending
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        self.body.size_hint()
    }
}
