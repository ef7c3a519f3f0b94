//! Accepts connections until shutdown, then stops them and flushes every partition.

use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::broker::{Broker, BrokerError};
use crate::config::BrokerConfig;
use crate::connection::Connection;
use crate::metrics::Metrics;
use service::tls::{MaybeTls, ServerStream};

/// How long connections get to finish the request in hand after shutdown begins.
const DRAIN_MS: u64 = 5_000;

/// Opens the logs in `config.data_dir` and serves `listener` until `shutdown` is cancelled.
pub async fn run(
    listener: TcpListener,
    config: BrokerConfig,
    shutdown: CancellationToken,
) -> Result<(), BrokerError> {
    let broker = Broker::open(config).await?;
    serve(listener, broker, shutdown).await
}

/// Serves an opened broker until `shutdown` is cancelled; then closes every connection and
/// flushes every partition before returning.
pub async fn serve(
    listener: TcpListener,
    broker: Arc<Broker>,
    shutdown: CancellationToken,
) -> Result<(), BrokerError> {
    serve_with(listener, None, broker, shutdown).await
}

/// [`serve`], and Kafka's protocol on `kafka` too when given (`crate::kafka`): both listeners
/// share the connection limit, TLS and ACLs, and stop together.
pub async fn serve_with(
    listener: TcpListener,
    kafka: Option<TcpListener>,
    broker: Arc<Broker>,
    shutdown: CancellationToken,
) -> Result<(), BrokerError> {
    let limit = Arc::new(Semaphore::new(broker.config().max_connections as usize));
    let connections = TaskTracker::new();
    let stop = CancellationToken::new();
    if let Some(kafka) = kafka {
        let port = match kafka.local_addr() {
            Ok(addr) => addr.port(),
            Err(e) => {
                broker.close().await?;
                return Err(BrokerError::Listen(e));
            }
        };
        broker.set_kafka_port(port);
        tracing::info!(port, broker_id = broker.config().broker_id, "Kafka listener");
        connections.spawn(crate::kafka::serve(
            kafka,
            Arc::clone(&broker),
            Arc::clone(&limit),
            connections.clone(),
            stop.clone(),
        ));
    }
    let addr = match listener.local_addr() {
        Ok(addr) => addr,
        Err(e) => {
            broker.close().await?;
            return Err(BrokerError::Listen(e));
        }
    };
    let tls = broker.tls().cloned();
    match &tls {
        Some(tls) => {
            service::tls::reload_on_sighup(Arc::clone(tls), shutdown.clone());
            tracing::info!(
                %addr, broker_id = broker.config().broker_id,
                client_certificates = tls.requires_client_certificate(), "broker listening (TLS)"
            );
        }
        None => tracing::info!(%addr, broker_id = broker.config().broker_id, "broker listening"),
    }
    if let Err(e) = broker.register(addr.port()).await {
        broker.close().await?;
        return Err(e);
    }
    let mut accept_backoff = service::Backoff::from_ms(1, 1_000);
    loop {
        let (stream, peer) = tokio::select! {
            () = shutdown.cancelled() => break,
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(e) => {
                    // Typically out of file descriptors: wait rather than spin.
                    tracing::warn!(error = %e, "accept failed");
                    accept_backoff.sleep().await;
                    continue;
                }
            },
        };
        accept_backoff.reset();
        let Ok(permit) = Arc::clone(&limit).try_acquire_owned() else {
            broker.metrics().connections_refused.inc();
            tracing::warn!(%peer, max = broker.config().max_connections, "too many connections; closing");
            continue;
        };
        broker.metrics().connections_accepted.inc();
        broker.metrics().connections_open.inc();
        let _ = stream.set_nodelay(true);
        let (broker, stop, tls) = (Arc::clone(&broker), stop.clone(), tls.clone());
        connections.spawn(async move {
            let metrics = Arc::clone(broker.metrics());
            let opened = match tls {
                None => Some((MaybeTls::Plain(stream), service::tls::ANONYMOUS.to_owned())),
                Some(tls) => handshake(stream, &tls, &metrics, peer).await,
            };
            if let Some((stream, principal)) = opened {
                let connection = Connection::new(stream, principal, broker, stop);
                if let Err(e) = connection.run().await {
                    tracing::debug!(%peer, error = %e, "connection ended");
                }
            }
            metrics.connections_open.dec();
            drop(permit);
        });
    }
    tracing::info!("shutting down: closing connections");
    drop(listener);
    stop.cancel();
    connections.close();
    if tokio::time::timeout(Duration::from_millis(DRAIN_MS), connections.wait()).await.is_err() {
        tracing::warn!("connections still busy after {DRAIN_MS} ms; closing the logs anyway");
    }
    broker.unregister().await;
    broker.close().await
}

/// The TLS handshake of a new connection, and the principal its certificate names. A client
/// that fails it — plaintext on a TLS port, a certificate the CA did not sign, none where one
/// is required, silence — is logged and closed, never left hanging.
pub(crate) async fn handshake(
    stream: tokio::net::TcpStream,
    tls: &service::tls::ServerTls,
    metrics: &Metrics,
    peer: std::net::SocketAddr,
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
