//! The HTTP input: `POST /v1/events/{topic}` with one JSON object, a JSON array of objects,
//! or newline-delimited JSON (`Content-Type: application/x-ndjson`); `GET /metrics`
//! (Prometheus text); `GET /health`.
//!
//! The answer comes only once every event of the request is durably spooled:
//! `200 {"accepted": N}`. Any invalid event refuses the whole request with
//! `400 {"error": …, "index": i}`, and so does a request larger than the whole spool (without
//! `index`); a full spool (`block`) answers 503 with Retry-After.
//!
//! A request's body is read first, its bytes taken as they arrive out of a budget of
//! `max_concurrent_requests × max_request_bytes` over all requests, so a client trickling a
//! body holds what it sent, not a slot. Then at most `max_concurrent_requests` requests are
//! handled at once; a request that finds no slot within [`BUSY_WAIT_MS`] is answered 503 with
//! Retry-After (counted as `refused_busy`). A request holds its body and its events encoded: each event is parsed
//! from the body, encoded and dropped before the next (an array's elements are first only
//! checked and located, as borrowed [`RawValue`]s), so the input's memory is about
//! `max_concurrent_requests × 3 × max_request_bytes` (the README's Memory).

use std::borrow::Cow;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::body::HttpBody;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde_json::value::RawValue;
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio_util::sync::CancellationToken;

use crate::agent::{Agent, Encoder, Refused};
use crate::send_error::SendError;

/// How long a request waits for one of the `max_concurrent_requests` slots before a 503.
pub const BUSY_WAIT_MS: u64 = 1_000;

#[derive(Clone)]
struct Input {
    agent: Agent,
    slots: Arc<Semaphore>,
    /// Bytes of request bodies held, read or being read: `max_concurrent_requests ×
    /// max_request_bytes`.
    body_budget: Arc<Semaphore>,
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
    let budget = agent.config().max_concurrent_requests * agent.config().max_request_bytes;
    let body_budget = Arc::new(Semaphore::new(budget.min(Semaphore::MAX_PERMITS)));
    let routes = Router::new()
        .route("/v1/events/{topic}", post(post_events))
        .route("/health", get(|| async { "ok\n" }));
    let app = metrics
        .http
        .layer(routes)
        .with_state(Input { agent: agent.clone(), slots, body_budget })
        .merge(service::metrics::router(metrics.registry()));
    let tls = agent.config().server_tls().map_err(std::io::Error::other)?;
    if let Some(tls) = &tls {
        service::tls::reload_on_sighup(Arc::clone(tls), shutdown.clone());
    }
    let config = agent.config();
    let limits = metrics
        .http
        .limits(config.max_connections, std::time::Duration::from_millis(config.client_timeout_ms));
    service::http::serve(listener, tls, app, shutdown, limits).await
}

async fn post_events(
    State(Input { agent, slots, body_budget }): State<Input>,
    Path(topic): Path<String>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let limit = agent.config().max_request_bytes;
    // Read before a slot is taken: a client trickling its body holds only what it has sent.
    let (body, _body_bytes) = match read_body(body, limit, &body_budget).await {
        Ok(read) => read,
        Err(BodyFailure::TooLarge) => {
            return refuse(&agent, 0, format!("the request body exceeds {limit} bytes"));
        }
        Err(BodyFailure::Broken(reason)) => return refuse(&agent, 0, reason),
    };
    let wait = tokio::time::timeout(Duration::from_millis(BUSY_WAIT_MS), slots.acquire_owned());
    let Ok(Ok(_slot)) = wait.await else {
        agent.metrics().refused_busy.inc();
        let mut response = error(StatusCode::SERVICE_UNAVAILABLE, "the agent is busy", None);
        response.headers_mut().insert(header::RETRY_AFTER, 1.into());
        return response;
    };
    let ndjson = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/x-ndjson"));
    let events = match parse(&body, ndjson) {
        Ok(events) => events,
        Err((index, reason)) => return refuse(&agent, index, reason),
    };
    let encode = |index: usize, encoder: &Encoder| {
        if let Some(text) = events.text(index)
            && let Some(encoded) = encoder.text(text)
        {
            return Ok(encoded);
        }
        // Not on the fast path (or invalid): through its parsed `Value`, for the exact answer.
        let event = events.event(index).map_err(Refused::Call)?;
        encoder.value(&event).map_err(Refused::Event)
    };
    let sent = agent.send_each(&topic, events.len(), encode).await;
    match sent {
        Ok(accepted) => {
            (StatusCode::OK, axum::Json(json!({ "accepted": accepted }))).into_response()
        }
        Err(Refusal::Body { index, reason }) => refuse(&agent, index, reason),
        Err(Refusal::Send(SendError::Invalid { index, source })) => {
            error(StatusCode::BAD_REQUEST, &source.to_string(), Some(index))
        }
        Err(Refusal::Send(e @ SendError::TooLarge { .. })) => {
            error(StatusCode::BAD_REQUEST, &e.to_string(), None)
        }
        Err(Refusal::Send(SendError::Full { retry_after_ms })) => {
            let seconds = retry_after_ms.div_ceil(1000).max(1);
            let mut response = error(StatusCode::SERVICE_UNAVAILABLE, "the spool is full", None);
            response.headers_mut().insert(header::RETRY_AFTER, seconds.into());
            response
        }
        Err(Refusal::Send(e @ (SendError::Unavailable(_) | SendError::ShuttingDown))) => {
            let mut response = error(StatusCode::SERVICE_UNAVAILABLE, &e.to_string(), None);
            response.headers_mut().insert(header::RETRY_AFTER, 1.into());
            response
        }
        Err(Refusal::Send(e)) => error(StatusCode::INTERNAL_SERVER_ERROR, &e.to_string(), None),
    }
}

/// Why a request body was not read whole.
enum BodyFailure {
    TooLarge,
    /// The connection failed or the body did not arrive within `client_timeout_ms`.
    Broken(String),
}

/// Reads `body`, at most `limit` bytes, taking each chunk's bytes out of `budget` as it
/// arrives (held until the returned permit is dropped). When the budget is spent, reading
/// waits for other requests to end.
async fn read_body(
    mut body: Body,
    limit: usize,
    budget: &Arc<Semaphore>,
) -> Result<(bytes::Bytes, Option<OwnedSemaphorePermit>), BodyFailure> {
    let mut read = bytes::BytesMut::new();
    let mut held: Option<OwnedSemaphorePermit> = None;
    loop {
        let frame = std::future::poll_fn(|cx| std::pin::Pin::new(&mut body).poll_frame(cx)).await;
        let Some(frame) = frame else { break };
        let frame = frame.map_err(|e| BodyFailure::Broken(e.to_string()))?;
        let Ok(chunk) = frame.into_data() else { continue };
        if read.len() + chunk.len() > limit {
            return Err(BodyFailure::TooLarge);
        }
        if chunk.is_empty() {
            continue;
        }
        let bytes = u32::try_from(chunk.len()).map_err(|_| BodyFailure::TooLarge)?;
        let permit = Arc::clone(budget)
            .acquire_many_owned(bytes)
            .await
            .map_err(|_| BodyFailure::Broken("the agent is stopping".to_owned()))?;
        match &mut held {
            Some(held) => held.merge(permit),
            None => held = Some(permit),
        }
        read.extend_from_slice(&chunk);
    }
    Ok((read.freeze(), held))
}

/// Why a request's events were not spooled: its body (an event that is not JSON, or not an
/// object), or the agent.
enum Refusal {
    Body { index: usize, reason: String },
    Send(SendError),
}

impl From<SendError> for Refusal {
    fn from(e: SendError) -> Refusal {
        Refusal::Send(e)
    }
}

/// A body's events, located but not parsed yet (but for a single object).
enum Events<'a> {
    /// Non-empty lines of newline-delimited JSON.
    Lines(Vec<&'a [u8]>),
    /// The elements of an array, each checked to be a JSON object.
    Elements(Vec<&'a RawValue>),
    One(Value),
}

impl Events<'_> {
    fn len(&self) -> usize {
        match self {
            Events::Lines(lines) => lines.len(),
            Events::Elements(elements) => elements.len(),
            Events::One(_) => 1,
        }
    }

    /// Event `index` as JSON text, where the body has it apart.
    fn text(&self, index: usize) -> Option<&[u8]> {
        match self {
            Events::Lines(lines) => Some(lines[index]),
            Events::Elements(elements) => Some(elements[index].get().as_bytes()),
            Events::One(_) => None,
        }
    }

    /// Event `index`, parsed.
    fn event(&self, index: usize) -> Result<Cow<'_, Value>, Refusal> {
        let body = |reason: String| Refusal::Body { index, reason };
        match self {
            Events::Lines(lines) => match serde_json::from_slice::<Value>(lines[index]) {
                Ok(v @ Value::Object(_)) => Ok(Cow::Owned(v)),
                Ok(_) => Err(body("the event is not a JSON object".to_owned())),
                Err(e) => Err(body(format!("invalid JSON: {e}"))),
            },
            Events::Elements(elements) => serde_json::from_str(elements[index].get())
                .map(Cow::Owned)
                .map_err(|e| body(format!("invalid JSON: {e}"))),
            Events::One(event) => Ok(Cow::Borrowed(event)),
        }
    }
}

/// The events of a body, or the index of the first one that is not a JSON object (for
/// newline-delimited JSON, each line is checked only when its turn comes).
fn parse(body: &[u8], ndjson: bool) -> Result<Events<'_>, (usize, String)> {
    if ndjson {
        let lines = body.split(|&b| b == b'\n').filter(|line| !line.trim_ascii().is_empty());
        return Ok(Events::Lines(lines.collect()));
    }
    let first = body.iter().find(|b| !b.is_ascii_whitespace());
    if first == Some(&b'[') {
        let elements: Vec<&RawValue> = match serde_json::from_slice(body) {
            Ok(elements) => elements,
            Err(e) => return Err((0, format!("invalid JSON: {e}"))),
        };
        return match elements.iter().position(|e| !e.get().starts_with('{')) {
            Some(index) => Err((index, "the event is not a JSON object".to_owned())),
            None => Ok(Events::Elements(elements)),
        };
    }
    match serde_json::from_slice::<Value>(body) {
        Ok(v @ Value::Object(_)) => Ok(Events::One(v)),
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
