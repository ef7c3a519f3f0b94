//! The registry over HTTPS with client certificates, through the real binary and `curl`:
//! reads for any authenticated client, writes (register, delete, compatibility) only for the
//! principals of `--write-principals`, 403 with Confluent's 40301 for the rest.

use std::path::Path;
use std::process::{Command, Output};

use testkit::process::{Process, free_port};
use testkit::tls::{Identity, Pki};

const REGISTRY: &str = env!("CARGO_BIN_EXE_schema-registry");

struct Https<'a> {
    pki: &'a Pki,
    base: String,
}

impl Https<'_> {
    fn curl(&self, who: Option<&Identity>, method: &str, path: &str, body: Option<&str>) -> Output {
        let mut command = Command::new("curl");
        command.args(["-sS", "--cacert", self.pki.ca().to_str().unwrap(), "-X", method]);
        command.args(["-H", "Content-Type: application/vnd.schemaregistry.v1+json"]);
        command.args(["-w", "\n%{http_code}"]);
        if let Some(who) = who {
            command.arg("--cert").arg(&who.cert).arg("--key").arg(&who.key);
        }
        if let Some(body) = body {
            command.args(["--data", body]);
        }
        command.arg(format!("{}{path}", self.base)).output().expect("curl runs")
    }

    /// `(status, body)` of a request that completed.
    fn call(&self, who: &Identity, method: &str, path: &str, body: Option<&str>) -> (u16, String) {
        let out = self.curl(Some(who), method, path, body);
        assert!(out.status.success(), "{method} {path}: {}", String::from_utf8_lossy(&out.stderr));
        let text = String::from_utf8(out.stdout).unwrap();
        let (body, status) = text.rsplit_once('\n').unwrap();
        (status.parse().unwrap(), body.to_owned())
    }
}

#[test]
fn writes_need_a_write_principal_and_reads_any_client_certificate() {
    let pki = Pki::new("registry test CA");
    let server = pki.identity("schema-registry");
    let (reader, writer, admin) =
        (pki.identity("reader"), pki.identity("writer"), pki.identity("admin-1"));
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let args: Vec<String> = [
        "--port",
        &port.to_string(),
        "--data-dir",
        dir.path().join("data").to_str().unwrap(),
        "--tls-cert",
        server.cert.to_str().unwrap(),
        "--tls-key",
        server.key.to_str().unwrap(),
        "--tls-client-ca",
        pki.ca().to_str().unwrap(),
        "--write-principals",
        "writer,admin-*",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let _registry = Process::spawn(Path::new(REGISTRY), &args, port, &dir.path().join("log"));
    let https = Https { pki: &pki, base: format!("https://127.0.0.1:{port}") };

    let schema = r#"{"schema": "{\"type\": \"record\", \"name\": \"V\", \"fields\": [{\"name\": \"a\", \"type\": \"string\"}]}"}"#;
    let register = "/subjects/page-view-value/versions";
    let (status, body) = https.call(&reader, "POST", register, Some(schema));
    assert_eq!(status, 403, "{body}");
    assert!(body.contains("40301") && body.contains("principal reader"), "{body}");
    let (status, body) = https.call(&writer, "POST", register, Some(schema));
    assert_eq!((status, body.as_str()), (200, r#"{"id":1}"#));
    // Reads, and the read-only POSTs (lookup, compatibility check), for any client.
    assert_eq!(
        https.call(&reader, "GET", "/subjects", None),
        (200, r#"["page-view-value"]"#.into())
    );
    let (status, body) = https.call(&reader, "POST", "/subjects/page-view-value", Some(schema));
    assert_eq!(status, 200, "{body}");
    let check = "/compatibility/subjects/page-view-value/versions/latest";
    assert_eq!(https.call(&reader, "POST", check, Some(schema)).0, 200);
    // Compatibility and deletes are writes.
    let level = r#"{"compatibility": "NONE"}"#;
    assert_eq!(https.call(&reader, "PUT", "/config", Some(level)).0, 403);
    assert_eq!(https.call(&admin, "PUT", "/config", Some(level)).0, 200);
    assert_eq!(https.call(&reader, "DELETE", "/subjects/page-view-value", None).0, 403);
    assert_eq!(https.call(&writer, "DELETE", "/subjects/page-view-value", None).0, 200);

    // No certificate, or plaintext: refused before any HTTP.
    assert!(!https.curl(None, "GET", "/subjects", None).status.success());
    let plain = Command::new("curl")
        .args(["-sS", "--max-time", "10", &format!("http://127.0.0.1:{port}/subjects")])
        .output()
        .unwrap();
    assert!(!plain.status.success(), "{}", String::from_utf8_lossy(&plain.stdout));
}

#[test]
fn write_principals_without_client_certificates_is_a_usage_error() {
    let out = Command::new(REGISTRY).args(["--write-principals", "writer"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("write_principals needs tls_client_ca"), "{stderr}");
}
