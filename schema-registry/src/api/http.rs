//! How requests and responses look on the wire: Confluent's content type, its error body
//! `{"error_code", "message"}`, and extractors whose every rejection is such a body (axum's
//! own rejections are plain text, which Confluent clients cannot parse).

use axum::body::Bytes;
use axum::extract::{FromRequest, FromRequestParts, Request};
use axum::http::request::Parts;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::error::RegistryError;

/// The content type of every response, as Confluent sends it.
pub const CONTENT_TYPE: &str = "application/vnd.schemaregistry.v1+json";

/// A JSON response with Confluent's content type.
pub struct Reply<T>(pub T);

impl<T: Serialize> IntoResponse for Reply<T> {
    fn into_response(self) -> Response {
        match serde_json::to_vec(&self.0) {
            Ok(body) => json_response(StatusCode::OK, body),
            Err(e) => {
                ApiError::internal(format!("cannot encode the response: {e}")).into_response()
            }
        }
    }
}

/// A response body that is already JSON text (a schema), sent as it is.
pub struct RawJson(pub String);

impl IntoResponse for RawJson {
    fn into_response(self) -> Response {
        json_response(StatusCode::OK, self.0.into_bytes())
    }
}

fn json_response(status: StatusCode, body: Vec<u8>) -> Response {
    let mut response = (status, body).into_response();
    response.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static(CONTENT_TYPE));
    response
}

/// An error as Confluent clients expect it: an HTTP status and `{"error_code", "message"}`.
#[derive(Debug)]
pub struct ApiError {
    pub status: StatusCode,
    pub error_code: u32,
    pub message: String,
}

#[derive(Serialize)]
struct ErrorBody<'a> {
    error_code: u32,
    message: &'a str,
}

impl ApiError {
    /// An error about the HTTP exchange itself, whose code is its status (Confluent does the
    /// same for 404 on unknown paths, 405, 413 and the like).
    pub fn http(status: StatusCode, message: impl Into<String>) -> ApiError {
        ApiError { status, error_code: u32::from(status.as_u16()), message: message.into() }
    }

    fn internal(message: String) -> ApiError {
        ApiError { status: StatusCode::INTERNAL_SERVER_ERROR, error_code: 50001, message }
    }
}

impl From<RegistryError> for ApiError {
    fn from(e: RegistryError) -> ApiError {
        let error_code = e.error_code();
        // Confluent's codes start with their HTTP status: 40401 → 404, 409 → 409.
        let status_digits = if error_code >= 10_000 { error_code / 100 } else { error_code };
        let status = u16::try_from(status_digits)
            .ok()
            .and_then(|s| StatusCode::from_u16(s).ok())
            .unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        if status.is_server_error() {
            tracing::error!(error = %e, "request failed");
        }
        ApiError { status, error_code, message: e.to_string() }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = ErrorBody { error_code: self.error_code, message: &self.message };
        // Serialising a u32 and a str cannot fail; the fallback keeps the body JSON anyway.
        let body = serde_json::to_vec(&body)
            .unwrap_or_else(|_| br#"{"error_code":50001,"message":"error"}"#.to_vec());
        json_response(self.status, body)
    }
}

/// A JSON request body, whatever its content type (Confluent clients send
/// `application/vnd.schemaregistry.v1+json`), read up to the router's body limit.
pub struct Body<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned> FromRequest<S> for Body<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, ApiError> {
        let bytes = Bytes::from_request(req, state)
            .await
            .map_err(|r| ApiError::http(r.status(), r.body_text()))?;
        serde_json::from_slice(&bytes).map(Body).map_err(|e| {
            if e.is_data() {
                ApiError::http(
                    StatusCode::UNPROCESSABLE_ENTITY,
                    format!("Unprocessable entity: {e}"),
                )
            } else {
                ApiError::http(StatusCode::BAD_REQUEST, format!("Malformed JSON: {e}"))
            }
        })
    }
}

/// Path parameters, with Confluent-style rejections.
pub struct Path<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned + Send> FromRequestParts<S> for Path<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        axum::extract::Path::<T>::from_request_parts(parts, state)
            .await
            .map(|p| Path(p.0))
            .map_err(|r| ApiError::http(r.status(), r.body_text()))
    }
}

/// The query parameters any endpoint understands; each endpoint reads those it needs and
/// unknown ones are ignored, as Confluent does. `normalize` is accepted too: every schema is
/// normalised (see [`crate::schema::ParsedSchema::canonical`]), so it changes nothing.
///
/// Values are read as Confluent (Java's `Boolean.valueOf`) reads them: `true` in any case is
/// true and anything else false, so clients sending `True`/`False` work; a number that does
/// not parse keeps its default.
#[derive(Debug, serde::Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct Flags {
    /// Include soft-deleted subjects and versions.
    #[serde(deserialize_with = "lenient_bool")]
    pub deleted: bool,
    /// `GET /subjects`: only soft-deleted subjects.
    #[serde(deserialize_with = "lenient_bool", alias = "deleted_only")]
    pub deleted_only: bool,
    /// Delete for good (after a soft delete).
    #[serde(deserialize_with = "lenient_bool")]
    pub permanent: bool,
    /// Return the reasons a compatibility check failed.
    #[serde(deserialize_with = "lenient_bool")]
    pub verbose: bool,
    /// `GET /config/{subject}`: fall back to the global level.
    #[serde(deserialize_with = "lenient_bool")]
    pub default_to_global: bool,
    /// `GET /subjects`: only subjects starting with this.
    pub subject_prefix: String,
    /// `GET /subjects`: skip this many subjects…
    #[serde(deserialize_with = "lenient_offset")]
    pub offset: usize,
    /// …and return at most this many (`-1`, the default, for all).
    #[serde(deserialize_with = "lenient_limit")]
    pub limit: usize,
}

impl Default for Flags {
    fn default() -> Self {
        Flags {
            deleted: false,
            deleted_only: false,
            permanent: false,
            verbose: false,
            default_to_global: false,
            subject_prefix: String::new(),
            offset: 0,
            limit: usize::MAX,
        }
    }
}

fn lenient_bool<'de, D: serde::Deserializer<'de>>(d: D) -> Result<bool, D::Error> {
    let text = <String as serde::Deserialize>::deserialize(d)?;
    Ok(text.eq_ignore_ascii_case("true"))
}

fn lenient_offset<'de, D: serde::Deserializer<'de>>(d: D) -> Result<usize, D::Error> {
    let text = <String as serde::Deserialize>::deserialize(d)?;
    Ok(text.trim().parse().unwrap_or(0))
}

fn lenient_limit<'de, D: serde::Deserializer<'de>>(d: D) -> Result<usize, D::Error> {
    let text = <String as serde::Deserialize>::deserialize(d)?;
    Ok(text.trim().parse().unwrap_or(usize::MAX))
}

impl<S: Send + Sync> FromRequestParts<S> for Flags {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        axum::extract::Query::<Flags>::from_request_parts(parts, state)
            .await
            .map(|q| q.0)
            .map_err(|r| ApiError::http(r.status(), r.body_text()))
    }
}
