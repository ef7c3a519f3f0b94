//! The one accept loop both of a broker's listeners run (its own protocol's and Kafka's): a
//! connection beyond `max_connections` (counted over both) is closed at once, an accept that
//! fails (out of file descriptors, typically) backs off instead of spinning, and a TLS
//! listener completes the handshake and learns the client's principal before the connection
//! is handed to its protocol.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;

use service::tls::{MaybeTls, ServerStream, ServerTls};
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::metrics::Metrics;

/// Connections the kernel completes and queues for a listener before it accepts them (the
/// kernel caps it at `net.core.somaxconn`). The usual 128 (std's, mio's) lost connects in a
/// burst: past it the kernel drops the SYN and the client tries again a second later, so
/// 5,500 clients connecting at once took 20 s to get in instead of a fraction of one.
pub const LISTEN_BACKLOG: u32 = 4096;

/// A listener on `addr` (`host:port`; a name is resolved, its first address used) with a
/// backlog of [`LISTEN_BACKLOG`].
pub async fn bind(addr: &str) -> std::io::Result<TcpListener> {
    let mut last = None;
    for addr in tokio::net::lookup_host(addr).await? {
        let socket = match addr {
            SocketAddr::V4(_) => tokio::net::TcpSocket::new_v4()?,
            SocketAddr::V6(_) => tokio::net::TcpSocket::new_v6()?,
        };
        socket.set_reuseaddr(true)?;
        match socket.bind(addr) {
            Ok(()) => return socket.listen(LISTEN_BACKLOG),
            Err(e) => last = Some(e),
        }
    }
    Err(last.unwrap_or_else(|| {
        std::io::Error::new(std::io::ErrorKind::InvalidInput, "the address names no host")
    }))
}

/// What the listeners of one broker share.
#[derive(Clone)]
pub struct Listening {
    /// One permit per open connection (`max_connections`).
    pub limit: Arc<Semaphore>,
    pub tls: Option<Arc<ServerTls>>,
    pub metrics: Arc<Metrics>,
    /// Every connection's task, so that shutdown can wait for them.
    pub connections: TaskTracker,
}

/// A connection accepted and through its handshake: the stream, the principal its client
/// certificate names (`anonymous` without TLS), and where it came from.
pub struct Accepted {
    pub stream: ServerStream,
    pub principal: String,
    pub peer: SocketAddr,
}

/// Accepts connections on `listener` until `stop`, and serves each in a task of its own with
/// `serve`, within the connection limit.
pub async fn accept<F, Fut>(
    listener: TcpListener,
    protocol: &'static str,
    shared: Listening,
    stop: CancellationToken,
    serve: F,
) where
    F: Fn(Accepted) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = ()> + Send + 'static,
{
    let serve = Arc::new(serve);
    let mut backoff = service::Backoff::from_ms(1, 1_000);
    loop {
        let (stream, peer) = tokio::select! {
            () = stop.cancelled() => return,
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(e) => {
                    tracing::warn!(protocol, error = %e, "accept failed");
                    backoff.sleep().await;
                    continue;
                }
            },
        };
        backoff.reset();
        let metrics = Arc::clone(&shared.metrics);
        let Ok(permit) = Arc::clone(&shared.limit).try_acquire_owned() else {
            metrics.connections_refused.inc();
            tracing::warn!(%peer, protocol, "too many connections; closing");
            continue;
        };
        metrics.connections_accepted.inc();
        metrics.connections_open.inc();
        let _ = stream.set_nodelay(true);
        let (serve, tls) = (Arc::clone(&serve), shared.tls.clone());
        shared.connections.spawn(async move {
            let opened = match tls {
                None => Some((MaybeTls::Plain(stream), service::tls::ANONYMOUS.to_owned())),
                Some(tls) => handshake(stream, &tls, &metrics, peer).await,
            };
            if let Some((stream, principal)) = opened {
                serve(Accepted { stream, principal, peer }).await;
            }
            metrics.connections_open.dec();
            drop(permit);
        });
    }
}

/// The TLS handshake of a new connection, and the principal its certificate names. A client
/// that fails it — plaintext on a TLS port, a certificate the CA did not sign, none where one
/// is required, silence — is logged and closed, never left hanging.
async fn handshake(
    stream: tokio::net::TcpStream,
    tls: &ServerTls,
    metrics: &Metrics,
    peer: SocketAddr,
) -> Option<(ServerStream, String)> {
    let refused = |reason: String| {
        metrics.tls_handshake_failures.inc();
        tracing::warn!(%peer, %reason, "TLS handshake failed; closing");
    };
    let accepted = match service::tls::accept(stream, tls).await {
        Ok(accepted) => accepted,
        Err(e) if !e.is_failure() => {
            tracing::debug!(%peer, reason = %e, "TLS handshake ended");
            return None;
        }
        Err(e) => {
            refused(e.to_string());
            return None;
        }
    };
    match accepted.principal() {
        Ok(principal) => {
            tracing::debug!(%peer, %principal, "TLS connection");
            Some((accepted, principal))
        }
        Err(e) => {
            refused(format!("the client certificate names no principal: {e}"));
            None
        }
    }
}
