//! The HTTP server: dashboard pages, JSON API and metrics on one listener.

use std::sync::Arc;

use axum::Router;
use axum::routing::get;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::state::Shared;
use crate::{api, dashboard, metrics};

pub(crate) fn router(shared: Arc<Shared>) -> Router {
    let (registry, http) = metrics::register(Arc::clone(&shared));
    let pages = Router::new()
        .route("/", get(dashboard::overview))
        .route("/topics/{topic}", get(dashboard::topic_page))
        .route("/topics/{topic}/windows/{start}", get(dashboard::window_page))
        .route("/api/summary", get(api::get_summary))
        .route("/api/topics", get(api::get_topics))
        .route("/api/windows", get(api::get_windows))
        .route("/api/window", get(api::get_window))
        .route("/healthz", get(|| async { "ok\n" }));
    http.layer(pages)
        .fallback(dashboard::not_found)
        .with_state(shared)
        .merge(service::metrics::router(registry))
}

/// Serves until `stop`, then finishes the requests in flight.
pub(crate) async fn serve(
    listener: TcpListener,
    shared: Arc<Shared>,
    stop: CancellationToken,
) -> std::io::Result<()> {
    axum::serve(listener, router(shared)).with_graceful_shutdown(stop.cancelled_owned()).await
}
