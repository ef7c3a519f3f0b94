//! The Confluent Schema Registry REST API over the [`Registry`]: routes, and the limits every
//! request is held to.

mod compatibility;
mod config;
pub mod http;
mod schemas;
mod subjects;

use std::sync::Arc;

use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::http::StatusCode;
use axum::routing::{get, post};
use tower::limit::ConcurrencyLimitLayer;

use self::http::{ApiError, Reply};
use crate::config::Config;
use crate::registry::Registry;

/// Whether a request changes the registry: registering, deleting, and setting compatibility.
/// `POST /subjects/{subject}` (is this schema registered?) and the compatibility checks only
/// read.
fn is_write(method: &axum::http::Method, path: &str) -> bool {
    use axum::http::Method;
    match *method {
        Method::PUT | Method::DELETE => true,
        Method::POST => path.starts_with("/subjects/") && path.ends_with("/versions"),
        _ => false,
    }
}

/// Refuses a write with 403 (Confluent's 40301) unless the caller's principal (from its
/// client certificate, [`service::http::Peer`]) is one of `writers`.
async fn authorize_write(
    writers: Arc<Vec<String>>,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    use axum::extract::ConnectInfo;
    use axum::response::IntoResponse;
    if !is_write(request.method(), request.uri().path()) {
        return next.run(request).await;
    }
    let peer = request.extensions().get::<ConnectInfo<service::http::Peer>>();
    let principal = peer.and_then(|peer| peer.0.principal.as_deref());
    if principal.is_some_and(|p| writers.iter().any(|w| service::glob::matches(w, p))) {
        return next.run(request).await;
    }
    let who = principal.unwrap_or(service::tls::ANONYMOUS).to_owned();
    tracing::warn!(principal = %who, method = %request.method(), path = %request.uri().path(), "write refused");
    let message = format!("principal {who} may not write to the registry (write_principals)");
    ApiError { status: StatusCode::FORBIDDEN, error_code: 40301, message }.into_response()
}

/// The API's routes, bounded by `config`'s request size and concurrency limits, and
/// `GET /metrics`; and the connection limits to serve them with, counted in those metrics.
pub fn router(registry: Arc<Registry>, config: &Config) -> (Router, service::http::Limits) {
    let (metrics, http) = crate::metrics::register(Arc::clone(&registry));
    let limits = http.limits(config.max_connections, config.client_timeout());
    let api = Router::new()
        .route("/", get(root))
        .route("/subjects", get(subjects::list))
        .route("/subjects/{subject}", post(subjects::lookup).delete(subjects::delete))
        .route("/subjects/{subject}/versions", get(subjects::versions).post(subjects::register))
        .route(
            "/subjects/{subject}/versions/{version}",
            get(subjects::version).delete(subjects::delete_version),
        )
        .route("/subjects/{subject}/versions/{version}/schema", get(subjects::version_schema))
        .route("/subjects/{subject}/versions/{version}/referencedby", get(subjects::referenced_by))
        .route("/schemas/types", get(schemas::types))
        .route("/schemas/ids/{id}", get(schemas::by_id))
        .route("/schemas/ids/{id}/schema", get(schemas::by_id_schema))
        .route("/schemas/ids/{id}/versions", get(schemas::id_versions))
        .route("/schemas/ids/{id}/subjects", get(schemas::id_subjects))
        .route("/compatibility/subjects/{subject}/versions", post(compatibility::against_subject))
        .route(
            "/compatibility/subjects/{subject}/versions/{version}",
            post(compatibility::against_version),
        )
        .route("/config", get(config::get_global).put(config::put_global))
        .route(
            "/config/{subject}",
            get(config::get_subject).put(config::put_subject).delete(config::delete_subject),
        )
        .merge(service::metrics::router(metrics));
    let writers = Arc::new(config.write_principals.clone());
    let api = if writers.is_empty() {
        api
    } else {
        api.layer(axum::middleware::from_fn(move |request, next| {
            authorize_write(Arc::clone(&writers), request, next)
        }))
    };
    let app = http
        .layer(api)
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(DefaultBodyLimit::max(config.max_request_bytes))
        .layer(ConcurrencyLimitLayer::new(config.max_concurrent_requests))
        .with_state(registry);
    (app, limits)
}

/// Confluent answers `{}` at the root; probes use it to see the service is up.
async fn root() -> Reply<serde_json::Map<String, serde_json::Value>> {
    Reply(serde_json::Map::new())
}

async fn not_found() -> ApiError {
    ApiError::http(StatusCode::NOT_FOUND, "HTTP 404 Not Found")
}

async fn method_not_allowed() -> ApiError {
    ApiError::http(StatusCode::METHOD_NOT_ALLOWED, "HTTP 405 Method Not Allowed")
}
