//! How `up` knows a process is ready before it starts the next: each kind of process has its
//! own sign, checked by polling within the topology's `ready_timeout_ms`.

use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::path::Path;
use std::time::Duration;

use super::topology::HOST;

/// The sign that a process serves.
#[derive(Debug, Clone)]
pub enum Ready {
    /// ZooKeeper answers `srvr` with `Mode: standalone` (`ruok` answers before it serves).
    ZooKeeper { port: u16 },
    /// An S3 PUT and DELETE of a probe object in the bucket succeed.
    S3 { port: u16, bucket: String },
    /// The port accepts TCP connections.
    Tcp { port: u16 },
    /// The process wrote this text to its log since it was started.
    LogLine { text: String },
    /// The process is still running this long after it started (it has no port to ask).
    Running { ms: u64 },
}

impl Ready {
    /// One check of a process that has been running for `running`; `log` and `log_offset`
    /// locate what it wrote since it started.
    pub fn check(&self, running: Duration, log: &Path, log_offset: u64) -> bool {
        match self {
            Ready::ZooKeeper { port } => {
                four_letter(*port, "srvr").is_some_and(|answer| answer.contains("Mode: standalone"))
            }
            Ready::S3 { port, bucket } => s3_probe(*port, bucket),
            Ready::Tcp { port } => {
                TcpStream::connect_timeout(&loopback(*port), Duration::from_secs(1)).is_ok()
            }
            Ready::LogLine { text } => log_since(log, log_offset).contains(text.as_str()),
            Ready::Running { ms } => running >= Duration::from_millis(*ms),
        }
    }

    /// What `up` says it is waiting for.
    pub fn describe(&self) -> String {
        match self {
            Ready::ZooKeeper { port } => {
                format!("ZooKeeper on port {port} to report Mode: standalone")
            }
            Ready::S3 { port, bucket } => {
                format!("S3 on port {port} to accept writes to bucket {bucket}")
            }
            Ready::Tcp { port } => format!("port {port} to accept connections"),
            Ready::LogLine { text } => format!("the log to say {text:?}"),
            Ready::Running { ms } => format!("the process to keep running for {ms} ms"),
        }
    }
}

/// `127.0.0.1:{port}` (the deployment's [`HOST`]).
fn loopback(port: u16) -> SocketAddr {
    SocketAddr::from((Ipv4Addr::LOCALHOST, port))
}

fn log_since(path: &Path, offset: u64) -> String {
    let Ok(mut file) = std::fs::File::open(path) else {
        return String::new();
    };
    use std::io::Seek;
    if file.seek(std::io::SeekFrom::Start(offset)).is_err() {
        return String::new();
    }
    // A ready line comes within the first lines a process writes; read a bounded prefix.
    let mut text = Vec::new();
    let _ = file.take(4 * 1024 * 1024).read_to_end(&mut text);
    String::from_utf8_lossy(&text).into_owned()
}

/// Sends a ZooKeeper four-letter command and returns the answer.
pub fn four_letter(port: u16, command: &str) -> Option<String> {
    let mut stream = TcpStream::connect_timeout(&loopback(port), Duration::from_secs(1)).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
    stream.write_all(command.as_bytes()).ok()?;
    let mut answer = String::new();
    stream.read_to_string(&mut answer).ok()?;
    Some(answer)
}

/// PUT then DELETE of `_tributary_probe` in `bucket`, unsigned: SeaweedFS started without
/// credentials does not check signatures.
fn s3_probe(port: u16, bucket: &str) -> bool {
    let path = format!("/{bucket}/_tributary_probe");
    http_status(port, "PUT", &path, b"probe").is_some_and(|s| s == 200)
        && http_status(port, "DELETE", &path, b"").is_some_and(|s| s == 204 || s == 200)
}

/// One HTTP/1.1 request on a fresh connection; the response's status code.
fn http_status(port: u16, method: &str, path: &str, body: &[u8]) -> Option<u16> {
    let mut stream = TcpStream::connect_timeout(&loopback(port), Duration::from_secs(1)).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
    let head = format!(
        "{method} {path} HTTP/1.1\r\nHost: {HOST}:{port}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes()).ok()?;
    stream.write_all(body).ok()?;
    let mut status_line = [0u8; 12];
    stream.read_exact(&mut status_line).ok()?;
    // "HTTP/1.1 200"
    std::str::from_utf8(&status_line[9..12]).ok()?.parse().ok()
}
