//! An in-process registry on a port-0 listener, and an HTTP helper that checks every answer
//! looks like Confluent's (content type, JSON body, error body shape).

#![allow(dead_code)] // Each test binary uses a different part of this module.

use std::path::Path;

use reqwest::Method;
use schema_registry::Config;
use schema_registry::api::http::CONTENT_TYPE;
use serde_json::Value;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

pub struct Server {
    pub url: String,
    stop: CancellationToken,
    task: Option<JoinHandle<Result<(), schema_registry::RunError>>>,
}

impl Server {
    /// Starts a registry on `data_dir` with the default config.
    pub async fn start(data_dir: &Path) -> Server {
        Server::start_with(Config { data_dir: data_dir.to_path_buf(), ..Config::default() }).await
    }

    pub async fn start_with(config: Config) -> Server {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let stop = CancellationToken::new();
        let task = tokio::spawn(schema_registry::run(listener, config, stop.clone()));
        Server { url, stop, task: Some(task) }
    }

    /// Stops serving and waits until the registry has shut down.
    pub async fn stop(mut self) {
        self.stop.cancel();
        if let Some(task) = self.task.take() {
            task.await.unwrap().unwrap();
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(task) = &self.task {
            task.abort();
        }
    }
}

/// The answer to one request: status and JSON body.
#[derive(Debug)]
pub struct Answer {
    pub status: u16,
    pub body: Value,
}

impl Answer {
    /// Asserts a Confluent error with `error_code` and returns its message.
    #[track_caller]
    pub fn expect_error(&self, status: u16, error_code: u64) -> String {
        assert_eq!(self.status, status, "{self:?}");
        assert_eq!(self.body["error_code"], error_code, "{self:?}");
        self.body["message"]
            .as_str()
            .unwrap_or_else(|| panic!("error without a message: {self:?}"))
            .to_owned()
    }

    #[track_caller]
    pub fn expect_ok(&self) -> &Value {
        assert_eq!(self.status, 200, "{self:?}");
        &self.body
    }
}

/// One client for the whole test binary: building one is costly (TLS roots).
pub fn http() -> &'static reqwest::Client {
    static CLIENT: std::sync::OnceLock<reqwest::Client> = std::sync::OnceLock::new();
    CLIENT.get_or_init(testkit::http_client)
}

pub async fn call(method: Method, url: &str, body: Option<Value>) -> Answer {
    let mut request = http().request(method, url);
    if let Some(body) = body {
        request = request.header("content-type", CONTENT_TYPE).body(body.to_string());
    }
    send(request).await
}

/// Sends `request` and checks the answer's content type and JSON body.
pub async fn send(request: reqwest::RequestBuilder) -> Answer {
    let response = request.send().await.unwrap();
    let status = response.status().as_u16();
    let content_type =
        response.headers().get("content-type").map(|v| v.to_str().unwrap().to_owned());
    assert_eq!(content_type.as_deref(), Some(CONTENT_TYPE), "status {status}");
    let text = response.text().await.unwrap();
    let body = serde_json::from_str(&text)
        .unwrap_or_else(|e| panic!("status {status}: body is not JSON ({e}): {text:?}"));
    Answer { status, body }
}

pub async fn get(url: &str) -> Answer {
    call(Method::GET, url, None).await
}

pub async fn post(url: &str, body: Value) -> Answer {
    call(Method::POST, url, Some(body)).await
}

pub async fn put(url: &str, body: Value) -> Answer {
    call(Method::PUT, url, Some(body)).await
}

pub async fn delete(url: &str) -> Answer {
    call(Method::DELETE, url, None).await
}

/// Registers `schema` (Avro JSON) under `subject`; returns the answer.
pub async fn register(base: &str, subject: &str, schema: &Value) -> Answer {
    post(
        &format!("{base}/subjects/{subject}/versions"),
        serde_json::json!({ "schema": schema.to_string() }),
    )
    .await
}

/// A record schema named `name` with `fields` (a JSON array of Avro fields).
pub fn record(name: &str, fields: Value) -> Value {
    serde_json::json!({ "type": "record", "name": name, "namespace": "test", "fields": fields })
}
