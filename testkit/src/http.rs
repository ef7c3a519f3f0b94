//! JSON over HTTP to a service under test, as its clients call it: one client for the whole
//! test binary, and every answer read as its status and JSON body, its content type checked
//! against the service's ([`JsonApi`]).

use reqwest::Method;
use serde_json::Value;

/// The answer to one request: status and JSON body.
#[derive(Debug)]
pub struct Answer {
    pub status: u16,
    pub body: Value,
}

impl Answer {
    /// Asserts a Confluent error (a body `{"error_code": …, "message": …}`, as the registry
    /// answers) with `error_code` and returns its message.
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
pub fn client() -> &'static reqwest::Client {
    static CLIENT: std::sync::OnceLock<reqwest::Client> = std::sync::OnceLock::new();
    CLIENT.get_or_init(crate::http_client)
}

/// A service's JSON API: the content type of the bodies it takes and of every answer it gives.
#[derive(Debug, Clone, Copy)]
pub struct JsonApi {
    content_type: &'static str,
}

impl JsonApi {
    pub const fn new(content_type: &'static str) -> JsonApi {
        JsonApi { content_type }
    }

    /// `method` on `url`, with `body` if given.
    pub async fn call(self, method: Method, url: &str, body: Option<Value>) -> Answer {
        let mut request = client().request(method, url);
        if let Some(body) = body {
            request = request.header("content-type", self.content_type).body(body.to_string());
        }
        self.send(request).await
    }

    /// Sends `request` and checks the answer's content type and JSON body.
    pub async fn send(self, request: reqwest::RequestBuilder) -> Answer {
        let response = request.send().await.unwrap();
        let status = response.status().as_u16();
        let content_type =
            response.headers().get("content-type").map(|v| v.to_str().unwrap().to_owned());
        assert_eq!(content_type.as_deref(), Some(self.content_type), "status {status}");
        let text = response.text().await.unwrap();
        let body = serde_json::from_str(&text)
            .unwrap_or_else(|e| panic!("status {status}: body is not JSON ({e}): {text:?}"));
        Answer { status, body }
    }

    pub async fn get(self, url: &str) -> Answer {
        self.call(Method::GET, url, None).await
    }

    pub async fn post(self, url: &str, body: Value) -> Answer {
        self.call(Method::POST, url, Some(body)).await
    }

    pub async fn put(self, url: &str, body: Value) -> Answer {
        self.call(Method::PUT, url, Some(body)).await
    }

    pub async fn delete(self, url: &str) -> Answer {
        self.call(Method::DELETE, url, None).await
    }
}
