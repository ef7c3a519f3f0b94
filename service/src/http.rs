//! Every HTTP server of Tributary (the registry, the agent's input, the audit dashboard and
//! API, each `/metrics`) on one listener: plaintext, or TLS with the same options and rules as
//! the broker's ([`crate::tls`]). TLS handshakes run beside the accept loop, so a slow or
//! silent client holds up nobody; a failed one is logged and closed.
//!
//! Handlers learn who is calling from [`Peer`] (`axum::extract::ConnectInfo<Peer>`): its
//! address, and its principal when it presented a client certificate.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::extract::connect_info::Connected;
use axum::serve::IncomingStream;
use tokio::net::TcpListener;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

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

impl Connected<IncomingStream<'_, HttpListener>> for Peer {
    fn connect_info(stream: IncomingStream<'_, HttpListener>) -> Peer {
        let principal = match stream.io() {
            ServerStream::Plain(_) => None,
            ServerStream::Tls(tls) => tls
                .get_ref()
                .1
                .peer_certificates()
                .and_then(|certs| certs.first())
                .and_then(|cert| crate::tls::principal(cert).ok()),
        };
        Peer { addr: *stream.remote_addr(), principal }
    }
}

/// Serves `router` on `tcp` (TLS when `tls` is given) until `stop`, handlers seeing [`Peer`].
pub async fn serve(
    tcp: TcpListener,
    tls: Option<Arc<ServerTls>>,
    router: axum::Router,
    stop: CancellationToken,
) -> std::io::Result<()> {
    let listener = HttpListener::new(tcp, tls, stop.clone());
    axum::serve(listener, router.into_make_service_with_connect_info::<Peer>())
        .with_graceful_shutdown(stop.cancelled_owned())
        .await
}
