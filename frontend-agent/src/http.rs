//! The HTTP input: `POST /v1/events/{topic}` with one JSON object, a JSON array of objects,
//! or newline-delimited JSON (`Content-Type: application/x-ndjson`); `GET /metrics`
//! (Prometheus text); `GET /health`.
//!
//! The answer comes only once every event of the request is durably spooled:
//! `200 {"accepted": N}`. Any invalid event refuses the whole request with
//! `400 {"error": …, "index": i}`, and so does a request larger than the whole spool (without
//! `index`); a full spool (`block`) answers 503 with Retry-After.
//!
//! At most `max_concurrent_requests` requests are read and handled at once, which bounds the
//! input's memory to `max_concurrent_requests × max_request_bytes`; a request that finds no
//! slot within [`BUSY_WAIT_MS`] is answered 503 with Retry-After (counted as `refused_busy`).

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;

use crate::agent::{Agent, SendError};

/// How long a request waits for one of the `max_concurrent_requests` slots before a 503.
pub const BUSY_WAIT_MS: u64 = 1_000;

#[derive(Clone)]
struct Input {
    agent: Agent,
    slots: Arc<Semaphore>,
}

/// Serves the agent's HTTP endpoints on `listener` until `shutdown` is cancelled, then lets
/// requests in progress finish.
pub async fn serve_http(
    listener: TcpListener,
    agent: Agent,
    shutdown: CancellationToken,
) -> std::io::Result<()> {
    let metrics = agent.metrics();
    let slots = Arc::new(Semaphore::new(agent.config().max_concurrent_requests));
    let routes = Router::new()
        .route("/v1/events/{topic}", post(post_events))
        .route("/health", get(|| async { "ok\n" }));
    let app = metrics
        .http
        .layer(routes)
        .with_state(Input { agent: agent.clone(), slots })
        .merge(service::metrics::router(metrics.registry()));
    let tls = agent.config().server_tls().map_err(std::io::Error::other)?;
    if let Some(tls) = &tls {
        service::tls::reload_on_sighup(Arc::clone(tls), shutdown.clone());
    }
    service::http::serve(listener, tls, app, shutdown).await
}

async fn post_events(
    State(Input { agent, slots }): State<Input>,
    Path(topic): Path<String>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let wait = tokio::time::timeout(Duration::from_millis(BUSY_WAIT_MS), slots.acquire_owned());
    let Ok(Ok(_slot)) = wait.await else {
        agent.metrics().refused_busy.inc();
        let mut response = error(StatusCode::SERVICE_UNAVAILABLE, "the agent is busy", None);
        response.headers_mut().insert(header::RETRY_AFTER, 1.into());
        return response;
    };
    let limit = agent.config().max_request_bytes;
    let Ok(body) = axum::body::to_bytes(body, limit).await else {
        return refuse(&agent, 0, format!("the request body exceeds {limit} bytes"));
    };
    let ndjson = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/x-ndjson"));
    let events = match parse(&body, ndjson) {
        Ok(events) => events,
        Err((index, reason)) => return refuse(&agent, index, reason),
    };
    match agent.send_batch(&topic, &events).await {
        Ok(accepted) => {
            (StatusCode::OK, axum::Json(json!({ "accepted": accepted }))).into_response()
        }
        Err(SendError::Invalid { index, source }) => {
            error(StatusCode::BAD_REQUEST, &source.to_string(), Some(index))
        }
        Err(e @ SendError::TooLarge { .. }) => error(StatusCode::BAD_REQUEST, &e.to_string(), None),
        Err(SendError::Full { retry_after_ms }) => {
            let seconds = retry_after_ms.div_ceil(1000).max(1);
            let mut response = error(StatusCode::SERVICE_UNAVAILABLE, "the spool is full", None);
            response.headers_mut().insert(header::RETRY_AFTER, seconds.into());
            response
        }
        Err(e @ (SendError::Unavailable(_) | SendError::ShuttingDown)) => {
            let mut response = error(StatusCode::SERVICE_UNAVAILABLE, &e.to_string(), None);
            response.headers_mut().insert(header::RETRY_AFTER, 1.into());
            response
        }
        Err(e) => error(StatusCode::INTERNAL_SERVER_ERROR, &e.to_string(), None),
    }
}

/// The events of a body, or the index of the first one that is not a JSON object.
fn parse(body: &[u8], ndjson: bool) -> Result<Vec<Value>, (usize, String)> {
    if ndjson {
        let lines = body.split(|&b| b == b'\n').filter(|line| !line.trim_ascii().is_empty());
        return lines
            .enumerate()
            .map(|(index, line)| match serde_json::from_slice::<Value>(line) {
                Ok(v @ Value::Object(_)) => Ok(v),
                Ok(_) => Err((index, "the event is not a JSON object".to_owned())),
                Err(e) => Err((index, format!("invalid JSON: {e}"))),
            })
            .collect();
    }
    match serde_json::from_slice::<Value>(body) {
        Ok(v @ Value::Object(_)) => Ok(vec![v]),
        Ok(Value::Array(events)) => match events.iter().position(|e| !e.is_object()) {
            Some(index) => Err((index, "the event is not a JSON object".to_owned())),
            None => Ok(events),
        },
        Ok(_) => Err((0, "expected a JSON object or an array of objects".to_owned())),
        Err(e) => Err((0, format!("invalid JSON: {e}"))),
    }
}

/// A 400 for a request refused before its events were validated (counted as one rejected
/// request; its events are unknown in number).
fn refuse(agent: &Agent, index: usize, reason: String) -> Response {
    agent.metrics().rejected_requests.inc();
    error(StatusCode::BAD_REQUEST, &reason, Some(index))
}

fn error(status: StatusCode, message: &str, index: Option<usize>) -> Response {
    let body = match index {
        Some(index) => json!({ "error": message, "index": index }),
        None => json!({ "error": message }),
    };
    (status, axum::Json(body)).into_response()
}
