//! A schema registry for tests: a real `schema-registry` process on a free loopback port with a
//! temporary data directory, which can be `kill -9`ed and restarted on the same directory and
//! is killed when dropped; or one served in this process ([`TestRegistry`]). And the registry's
//! REST API called as its clients call it ([`API`]), with helpers to register schemas.
//!
//! To start the process, pass the binary's path: in the `schema-registry` crate's own tests
//! that is `env!("CARGO_BIN_EXE_schema-registry")`; other crates build it first
//! (`cargo build -p schema-registry`) and pass `target/{profile}/schema-registry`.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use schema_registry::api::http::CONTENT_TYPE;
use serde_json::Value;
use tempfile::TempDir;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::http::{Answer, JsonApi};

/// How long a start may take, replay of the log included.
const START_TIMEOUT: Duration = Duration::from_secs(30);
/// The line the binary prints on stdout once bound; the address follows it.
const LISTENING_PREFIX: &str = "schema-registry listening on http://";

/// A running registry process. Its address changes on each (re)start: ask [`Self::url`].
pub struct RegistryProcess {
    binary: PathBuf,
    extra_args: Vec<String>,
    dir: TempDir,
    child: Option<Child>,
    addr: SocketAddr,
}

impl RegistryProcess {
    /// Starts `binary` on `127.0.0.1` port 0 with a fresh data directory and waits until it
    /// answers HTTP.
    pub fn start(binary: impl AsRef<Path>) -> RegistryProcess {
        RegistryProcess::start_with_args(binary, &[])
    }

    /// Like [`Self::start`], with more flags (e.g. `--register-schemas DIR`) on every start.
    pub fn start_with_args(binary: impl AsRef<Path>, extra_args: &[&str]) -> RegistryProcess {
        let dir = tempfile::tempdir().expect("temporary directory for the registry");
        let binary = binary.as_ref().to_path_buf();
        let extra_args: Vec<String> = extra_args.iter().map(|a| (*a).to_owned()).collect();
        let (child, addr) = spawn(&binary, &extra_args, dir.path());
        RegistryProcess { binary, extra_args, dir, child: Some(child), addr }
    }

    /// Base URL, e.g. `http://127.0.0.1:40123`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The running process's id.
    pub fn pid(&self) -> u32 {
        self.child.as_ref().expect("the registry is running").id()
    }

    /// The data directory that survives restarts.
    pub fn data_dir(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    /// `kill -9`: no chance to flush or clean up.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            // SIGKILL on Unix; an already exited child makes this fail harmlessly.
            let _ = child.kill();
            child.wait().expect("reap the killed registry");
        }
    }

    /// Kills the process if it runs and starts it again on the same data directory.
    pub fn restart(&mut self) {
        self.kill();
        let (child, addr) = spawn(&self.binary, &self.extra_args, self.dir.path());
        self.child = Some(child);
        self.addr = addr;
    }

    /// The registry's log (stderr) so far, for failure messages.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("stderr.log")).unwrap_or_default()
    }
}

impl Drop for RegistryProcess {
    fn drop(&mut self) {
        self.kill();
    }
}

fn spawn(binary: &Path, extra_args: &[String], dir: &Path) -> (Child, SocketAddr) {
    let stderr = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(dir.join("stderr.log"))
        .expect("registry log file");
    let mut child = Command::new(binary)
        .args(["--host", "127.0.0.1", "--port", "0", "--data-dir"])
        .arg(dir.join("data"))
        .args(extra_args)
        .env("RUST_LOG", "info")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(stderr)
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {}: {e}", binary.display()));

    let stdout = child.stdout.take().expect("piped stdout");
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut line = String::new();
        let _ = BufReader::new(stdout).read_line(&mut line);
        let _ = tx.send(line);
    });
    let log = || std::fs::read_to_string(dir.join("stderr.log")).unwrap_or_default();
    let line = rx.recv_timeout(START_TIMEOUT).unwrap_or_default();
    let Some(addr) =
        line.trim().strip_prefix(LISTENING_PREFIX).and_then(|a| a.parse::<SocketAddr>().ok())
    else {
        let _ = child.kill();
        let _ = child.wait();
        panic!("the registry did not report its address (stdout {line:?}); its log:\n{}", log());
    };

    let deadline = Instant::now() + START_TIMEOUT;
    while !answers_http(addr) {
        if let Ok(Some(status)) = child.try_wait() {
            panic!("the registry exited with {status} while starting; its log:\n{}", log());
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "the registry did not answer HTTP within {START_TIMEOUT:?}; its log:\n{}",
                log()
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    (child, addr)
}

/// Whether `GET /` answers 200.
fn answers_http(addr: SocketAddr) -> bool {
    let Ok(mut stream) = TcpStream::connect_timeout(&addr, Duration::from_secs(1)) else {
        return false;
    };
    let _ = stream.set_read_timeout(Some(Duration::from_secs(5)));
    let request = "GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n";
    if stream.write_all(request.as_bytes()).is_err() {
        return false;
    }
    let mut response = Vec::new();
    let _ = stream.take(64 * 1024).read_to_end(&mut response);
    response.starts_with(b"HTTP/1.1 200")
}

/// A registry served in this process over HTTP on a free loopback port: with the pipeline's
/// shipped schemas registered (`events/schemas/`) for tests of the services that use one (the
/// agent, the loader, the audit), or with a test's own config for the registry's own tests.
/// Stops when dropped.
pub struct TestRegistry {
    url: String,
    stop: CancellationToken,
    task: Option<JoinHandle<()>>,
    /// The data directory of a registry that made its own ([`Self::start`]).
    _dir: Option<TempDir>,
}

impl TestRegistry {
    /// Starts the registry and waits until the shipped schemas are registered.
    pub async fn start() -> TestRegistry {
        let dir = tempfile::tempdir().expect("temporary directory for the registry");
        let config = schema_registry::Config {
            data_dir: dir.path().join("data"),
            register_schemas: Some(events::schemas::source_dir()),
            ..schema_registry::Config::default()
        };
        let mut registry = TestRegistry::start_with(config).await;
        registry._dir = Some(dir);
        let client = schema_registry::RegistryClient::new(&registry.url).expect("registry client");
        crate::eventually(START_TIMEOUT, "the registry to serve the shipped schemas", || async {
            client.latest(events::AUDIT_SUBJECT).await.ok()
        })
        .await;
        registry
    }

    /// Starts a registry on `data_dir` with the default config.
    pub async fn start_in(data_dir: &Path) -> TestRegistry {
        let data_dir = data_dir.to_path_buf();
        TestRegistry::start_with(schema_registry::Config { data_dir, ..Default::default() }).await
    }

    /// Starts a registry with `config`.
    pub async fn start_with(config: schema_registry::Config) -> TestRegistry {
        let listener =
            tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind the registry");
        let url = format!("http://{}", listener.local_addr().expect("registry address"));
        let stop = CancellationToken::new();
        let shutdown = stop.clone();
        let task = tokio::spawn(async move {
            if let Err(e) = schema_registry::run(listener, config, shutdown).await {
                panic!("the in-process registry failed: {e}");
            }
        });
        TestRegistry { url, stop, task: Some(task), _dir: None }
    }

    /// Base URL, e.g. `http://127.0.0.1:40123`.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// Stops serving and waits until the registry has shut down.
    pub async fn stop(mut self) {
        self.stop.cancel();
        if let Some(task) = self.task.take() {
            task.await.expect("the registry shuts down cleanly");
        }
    }
}

impl Drop for TestRegistry {
    fn drop(&mut self) {
        self.stop.cancel();
        if let Some(task) = &self.task {
            task.abort();
        }
    }
}

/// The registry's REST API, Confluent's: every answer has its content type.
pub const API: JsonApi = JsonApi::new(CONTENT_TYPE);

/// Registers `schema` (Avro JSON) under `subject`; returns the answer.
pub async fn register(base: &str, subject: &str, schema: &Value) -> Answer {
    API.post(
        &format!("{base}/subjects/{subject}/versions"),
        serde_json::json!({ "schema": schema.to_string() }),
    )
    .await
}

/// A record schema named `name` with `fields` (a JSON array of Avro fields).
pub fn record(name: &str, fields: Value) -> Value {
    serde_json::json!({ "type": "record", "name": name, "namespace": "test", "fields": fields })
}
