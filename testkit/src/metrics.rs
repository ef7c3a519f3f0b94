//! Reading a service's `/metrics` page as Prometheus does: fetched over HTTP and parsed by the
//! reference parser, Python's `prometheus_client` (its OpenMetrics parser), so a test proves
//! that a real scraper reads the page, not only that it contains some text.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::{Command, Stdio};
use std::time::Duration;

/// One sample of a page: metric name (with `_total`, `_bucket`, … as exposed), labels, value.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    pub name: String,
    pub labels: BTreeMap<String, String>,
    pub value: f64,
}

/// `GET /metrics` from `addr` (`host:port`): the status line and the body.
pub fn scrape(addr: &str) -> String {
    let mut stream = TcpStream::connect(addr).unwrap_or_else(|e| panic!("connect {addr}: {e}"));
    stream.set_read_timeout(Some(Duration::from_secs(10))).expect("read timeout");
    let request = format!("GET /metrics HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).expect("send request");
    let mut response = Vec::new();
    stream.read_to_end(&mut response).expect("read response");
    let response = String::from_utf8(response).expect("UTF-8 response");
    let (head, body) = response.split_once("\r\n\r\n").expect("HTTP response");
    assert!(head.starts_with("HTTP/1.1 200"), "GET /metrics: {head}");
    let body = if head.to_ascii_lowercase().contains("transfer-encoding: chunked") {
        dechunk(body)
    } else {
        body.to_owned()
    };
    // `prometheus_client`'s registry ends every help text with a full stop of its own.
    let doubled: Vec<&str> =
        body.lines().filter(|l| l.starts_with("# HELP") && l.ends_with("..")).collect();
    assert!(doubled.is_empty(), "help texts ending in two full stops: {doubled:?}");
    body
}

fn dechunk(mut body: &str) -> String {
    let mut text = String::new();
    loop {
        let (size, rest) = body.split_once("\r\n").expect("chunk size");
        let size = usize::from_str_radix(size.trim(), 16).expect("hex chunk size");
        if size == 0 {
            return text;
        }
        text.push_str(&rest[..size]);
        body = &rest[size + 2..];
    }
}

/// Parses `text` with `prometheus_client`'s OpenMetrics parser (strict: any malformed line
/// fails the test) and returns every sample.
pub fn parse(text: &str) -> Vec<Sample> {
    const SCRIPT: &str = r#"
import json, sys
from prometheus_client.openmetrics.parser import text_string_to_metric_families
samples = []
for family in text_string_to_metric_families(sys.stdin.read()):
    for s in family.samples:
        samples.append([s.name, s.labels, s.value])
print(json.dumps(samples))
"#;
    let mut child = Command::new("python3")
        .args(["-c", SCRIPT])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("python3 (with prometheus_client, which scripts/test.sh installs)");
    child.stdin.take().expect("stdin").write_all(text.as_bytes()).expect("write the page");
    let output = child.wait_with_output().expect("parser output");
    assert!(
        output.status.success(),
        "the OpenMetrics parser refused the page: {}\n{text}",
        String::from_utf8_lossy(&output.stderr)
    );
    let rows: Vec<(String, BTreeMap<String, String>, f64)> =
        serde_json::from_slice(&output.stdout).expect("the parser's JSON");
    rows.into_iter().map(|(name, labels, value)| Sample { name, labels, value }).collect()
}

/// The sum of the samples named `name` whose labels include every pair of `labels`.
pub fn value(samples: &[Sample], name: &str, labels: &[(&str, &str)]) -> f64 {
    samples
        .iter()
        .filter(|s| s.name == name)
        .filter(|s| labels.iter().all(|(k, v)| s.labels.get(*k).map(String::as_str) == Some(*v)))
        .map(|s| s.value)
        .sum()
}

/// Whether any sample is named `name`.
pub fn has(samples: &[Sample], name: &str) -> bool {
    samples.iter().any(|s| s.name == name)
}
