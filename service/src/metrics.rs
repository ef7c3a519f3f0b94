//! The Prometheus/OpenMetrics side of every service: metrics are kept with
//! `prometheus-client` (counters, gauges, histograms and label families, registered once at
//! start in a [`Registry`]), and [`serve`] answers `GET /metrics` with the registry in the
//! OpenMetrics text format, which Prometheus and its text parsers read.
//!
//! Values known only at scrape time (a partition's log end, a group's lag) come from a
//! [`prometheus_client::collector::Collector`] registered beside the metrics.

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::Router;
use axum::extract::{MatchedPath, Request, State};
use axum::http::header;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
pub use prometheus_client;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::Histogram;
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

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct HttpLabels {
    method: String,
    route: String,
    status: u16,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct RouteLabels {
    method: String,
    route: String,
}

fn latency_histogram() -> Histogram {
    Histogram::new(latency_buckets())
}

/// Requests and their latency for an HTTP service, by method, route (the pattern it matched,
/// e.g. `/subjects/{subject}/versions`, so that paths do not make a label per subject) and
/// status.
#[derive(Debug, Clone)]
pub struct HttpMetrics {
    requests: Family<HttpLabels, Counter>,
    latency: Family<RouteLabels, Histogram, fn() -> Histogram>,
    /// The server's connections, and each of its [`crate::http::Limits`] hit.
    pub connections: crate::http::ConnectionCounters,
}

impl HttpMetrics {
    /// Registers `http_requests_total`, `http_request_duration_seconds` and the
    /// [`crate::http::ConnectionCounters`] in `registry`.
    pub fn register(registry: &mut Registry) -> HttpMetrics {
        let metrics = HttpMetrics {
            requests: Family::default(),
            latency: Family::new_with_constructor(latency_histogram),
            connections: crate::http::ConnectionCounters::register(registry),
        };
        registry.register(
            "http_requests",
            "HTTP requests by method, route and status",
            metrics.requests.clone(),
        );
        registry.register(
            "http_request_duration_seconds",
            "HTTP request latency by method and route, to the response's head",
            metrics.latency.clone(),
        );
        metrics
    }

    /// `max_connections` and `client_timeout`, counted here.
    pub fn limits(&self, max_connections: usize, client_timeout: Duration) -> crate::http::Limits {
        crate::http::Limits { max_connections, client_timeout, counters: self.connections.clone() }
    }

    /// Counts and times every request of `router`.
    pub fn layer<S: Clone + Send + Sync + 'static>(&self, router: Router<S>) -> Router<S> {
        router.layer(axum::middleware::from_fn_with_state(self.clone(), track))
    }
}

async fn track(State(metrics): State<HttpMetrics>, request: Request, next: Next) -> Response {
    let started = Instant::now();
    let method = request.method().as_str().to_owned();
    let route = match request.extensions().get::<MatchedPath>() {
        Some(path) => path.as_str().to_owned(),
        None => "unmatched".to_owned(),
    };
    let response = next.run(request).await;
    let status = response.status().as_u16();
    let route_labels = RouteLabels { method, route };
    metrics.latency.get_or_create(&route_labels).observe(started.elapsed().as_secs_f64());
    let RouteLabels { method, route } = route_labels;
    metrics.requests.get_or_create(&HttpLabels { method, route, status }).inc();
    response
}

/// Serves `GET /metrics` on `listener` until `stop`, over TLS when `tls` is given.
pub async fn serve(
    listener: TcpListener,
    registry: Arc<Registry>,
    tls: Option<Arc<crate::tls::ServerTls>>,
    stop: CancellationToken,
) -> std::io::Result<()> {
    let limits = crate::http::Limits::default();
    crate::http::serve(listener, tls, router::<()>(registry), stop, limits).await
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
    async fn http_requests_are_counted_by_route_and_status() {
        let mut registry = Registry::default();
        let http = HttpMetrics::register(&mut registry);
        let app = http.layer(Router::new().route("/items/{id}", get(|| async { "item" })));
        let app = app.merge(router(Arc::new(registry)));
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await });
        for path in ["/items/1", "/items/2", "/nothing"] {
            get_path(addr, path).await;
        }
        let text = get_text(addr).await;
        let ok = "http_requests_total{method=\"GET\",route=\"/items/{id}\",status=\"200\"} 2";
        assert!(text.contains(ok), "{text}");
        assert!(
            text.contains(
                "http_request_duration_seconds_count{method=\"GET\",route=\"/items/{id}\"} 2"
            ),
            "{text}"
        );
    }

    #[tokio::test]
    async fn serves_the_registry_over_http() {
        let mut registry = Registry::with_prefix("test");
        let messages = Family::<Topic, Counter>::default();
        registry.register("messages", "Messages in", messages.clone());
        let latency = Histogram::new(latency_buckets());
        registry.register("latency_seconds", "Latency", latency.clone());
        messages.get_or_create(&Topic { topic: "page-view".into() }).inc_by(3);
        latency.observe(0.002);

        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let stop = CancellationToken::new();
        let server = tokio::spawn(serve(listener, Arc::new(registry), None, stop.clone()));
        let text = get_text(addr).await;
        assert!(text.contains("test_messages_total{topic=\"page-view\"} 3"), "{text}");
        assert!(text.contains("test_latency_seconds_count 1"), "{text}");
        assert!(text.ends_with("# EOF\n"), "{text}");
        stop.cancel();
        server.await.unwrap().unwrap();
    }

    async fn get_path(addr: std::net::SocketAddr, path: &str) -> String {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
        let request = format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
        stream.write_all(request.as_bytes()).await.unwrap();
        let mut response = String::new();
        stream.read_to_string(&mut response).await.unwrap();
        response
    }

    async fn get_text(addr: std::net::SocketAddr) -> String {
        let response = get_path(addr, "/metrics").await;
        assert!(response.starts_with("HTTP/1.1 200"), "{response}");
        assert!(response.contains(CONTENT_TYPE), "{response}");
        response.split_once("\r\n\r\n").unwrap().1.to_owned()
    }
}
