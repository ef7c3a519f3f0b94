//! The Prometheus/OpenMetrics side of every service: metrics are kept with
//! `prometheus-client` (counters, gauges, histograms and label families, registered once at
//! start in a [`Registry`]), and [`serve`] answers `GET /metrics` with the registry in the
//! OpenMetrics text format, which Prometheus and its text parsers read.
//!
//! Values known only at scrape time (a partition's log end, a group's lag) come from a
//! [`prometheus_client::collector::Collector`] registered beside the metrics.

use std::sync::Arc;

use axum::Router;
use axum::http::header;
use axum::response::IntoResponse;
use axum::routing::get;
pub use prometheus_client;
pub use prometheus_client::registry::Registry;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

/// The content type of [`encode`]'s text.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Buckets in seconds for request and flush latencies: 100 µs to about 26 s, doubling.
pub fn latency_buckets() -> impl Iterator<Item = f64> {
    prometheus_client::metrics::histogram::exponential_buckets(0.000_1, 2.0, 19)
}

/// Buckets for sizes counted in items (events per request, messages per batch): 1 to 32768.
pub fn size_buckets() -> impl Iterator<Item = f64> {
    prometheus_client::metrics::histogram::exponential_buckets(1.0, 2.0, 16)
}

/// The registry in the OpenMetrics text format.
pub fn encode(registry: &Registry) -> String {
    let mut text = String::with_capacity(8 * 1024);
    if let Err(e) = prometheus_client::encoding::text::encode(&mut text, registry) {
        // Only a collector's own formatting can fail; say so rather than serve half a page.
        tracing::error!(error = %e, "cannot encode metrics");
        text.clear();
    }
    text
}

/// A router answering `GET /metrics` with `registry`, to merge into a service's own routes.
pub fn router<S: Clone + Send + Sync + 'static>(registry: Arc<Registry>) -> Router<S> {
    Router::new().route(
        "/metrics",
        get(move || {
            let registry = Arc::clone(&registry);
            async move { ([(header::CONTENT_TYPE, CONTENT_TYPE)], encode(&registry)).into_response() }
        }),
    )
}

/// Serves `GET /metrics` on `listener` until `stop`.
pub async fn serve(
    listener: TcpListener,
    registry: Arc<Registry>,
    stop: CancellationToken,
) -> std::io::Result<()> {
    axum::serve(listener, router::<()>(registry))
        .with_graceful_shutdown(stop.cancelled_owned())
        .await
}

#[cfg(test)]
mod tests {
    use prometheus_client::encoding::EncodeLabelSet;
    use prometheus_client::metrics::counter::Counter;
    use prometheus_client::metrics::family::Family;
    use prometheus_client::metrics::histogram::Histogram;

    use super::*;

    #[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
    struct Topic {
        topic: String,
    }

    #[tokio::test]
    async fn serves_the_registry_over_http() {
        let mut registry = Registry::with_prefix("test");
        let messages = Family::<Topic, Counter>::default();
        registry.register("messages", "Messages in.", messages.clone());
        let latency = Histogram::new(latency_buckets());
        registry.register("latency_seconds", "Latency.", latency.clone());
        messages.get_or_create(&Topic { topic: "page-view".into() }).inc_by(3);
        latency.observe(0.002);

        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let stop = CancellationToken::new();
        let server = tokio::spawn(serve(listener, Arc::new(registry), stop.clone()));
        let text = get_text(addr).await;
        assert!(text.contains("test_messages_total{topic=\"page-view\"} 3"), "{text}");
        assert!(text.contains("test_latency_seconds_count 1"), "{text}");
        assert!(text.ends_with("# EOF\n"), "{text}");
        stop.cancel();
        server.await.unwrap().unwrap();
    }

    async fn get_text(addr: std::net::SocketAddr) -> String {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
        stream
            .write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            .await
            .unwrap();
        let mut response = String::new();
        stream.read_to_string(&mut response).await.unwrap();
        assert!(response.starts_with("HTTP/1.1 200"), "{response}");
        assert!(response.contains(CONTENT_TYPE), "{response}");
        response.split_once("\r\n\r\n").unwrap().1.to_owned()
    }
}
