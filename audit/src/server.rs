//! The HTTP server: dashboard pages, JSON API and metrics on one listener.

use std::sync::Arc;

use axum::Router;
use axum::routing::get;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::state::Shared;
use crate::{api, dashboard, metrics};

/// The routes, and the connection limits to serve them with (the defaults), counted in the
/// service's metrics.
pub(crate) fn router(shared: Arc<Shared>) -> (Router, service::http::Limits) {
    let (registry, http) = metrics::register(Arc::clone(&shared));
    let limits = http.limits(service::http::MAX_CONNECTIONS, service::http::CLIENT_TIMEOUT);
    let pages = Router::new()
        .route("/", get(dashboard::overview))
        .route("/topics/{topic}", get(dashboard::topic_page))
        .route("/topics/{topic}/windows/{start}", get(dashboard::window_page))
        .route("/api/summary", get(api::get_summary))
        .route("/api/topics", get(api::get_topics))
        .route("/api/windows", get(api::get_windows))
        .route("/api/window", get(api::get_window))
        .route("/healthz", get(|| async { "ok\n" }));
    let app = http
        .layer(pages)
        .fallback(dashboard::not_found)
        .with_state(shared)
        .merge(service::metrics::router(registry));
    (app, limits)
}

/// Serves until `stop`, then finishes the requests in flight: over HTTPS when `tls` is
/// given; with `token`, only to a client with a certificate or with that bearer token.
pub(crate) async fn serve(
    listener: TcpListener,
    shared: Arc<Shared>,
    tls: Option<Arc<service::tls::ServerTls>>,
    token: Option<String>,
    stop: CancellationToken,
) -> std::io::Result<()> {
    let (mut app, limits) = router(shared);
    if let Some(token) = token {
        let token = Arc::new(token);
        app = app.layer(axum::middleware::from_fn(move |request, next| {
            authenticate(Arc::clone(&token), request, next)
        }));
    }
    if let Some(tls) = &tls {
        service::tls::reload_on_sighup(Arc::clone(tls), stop.clone());
    }
    service::http::serve(listener, tls, app, stop, limits).await
}

/// The cookie a browser gets for the bearer token (see [`authenticate`]).
const TOKEN_COOKIE: &str = "tributary_audit_token";

/// Lets a request through if its client presented a certificate (the TLS layer checked it),
/// carries `Authorization: Bearer {token}`, or carries the token's cookie; otherwise 401.
/// `/healthz` is open. A browser opens `/?token={token}` once: it is answered with the cookie
/// and sent on to the page without the token in its address bar.
async fn authenticate(
    token: Arc<String>,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    use axum::extract::ConnectInfo;
    use axum::http::{StatusCode, header};
    use axum::response::IntoResponse;
    let matches = |given: &str| same(given.trim().as_bytes(), token.as_bytes());
    let certified = request
        .extensions()
        .get::<ConnectInfo<service::http::Peer>>()
        .is_some_and(|peer| peer.0.principal.is_some());
    let headers = request.headers();
    let bearer = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .is_some_and(matches);
    let cookie = headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .any(|(name, value)| name == TOKEN_COOKIE && matches(value));
    if certified || bearer || cookie || request.uri().path() == "/healthz" {
        return next.run(request).await;
    }
    let in_query = request
        .uri()
        .query()
        .into_iter()
        .flat_map(|q| q.split('&'))
        .filter_map(|pair| pair.split_once('='))
        .any(|(name, value)| name == "token" && matches(value));
    if in_query {
        let cookie = format!("{TOKEN_COOKIE}={token}; HttpOnly; Secure; SameSite=Strict; Path=/");
        let to = request.uri().path().to_owned();
        return (StatusCode::SEE_OTHER, [(header::SET_COOKIE, cookie), (header::LOCATION, to)])
            .into_response();
    }
    let challenge = [(header::WWW_AUTHENTICATE, "Bearer realm=\"tributary audit\"")];
    (StatusCode::UNAUTHORIZED, challenge, "a client certificate or the bearer token is needed\n")
        .into_response()
}

/// Equality that takes as long whatever the first differing byte (the token is a secret).
fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |diff, (x, y)| diff | (x ^ y)) == 0
}
