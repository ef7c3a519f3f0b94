//! A service run as its own process, for what only a process can show: signals, `kill -9`,
//! exit codes, and flags parsed by the real binary.

use std::net::TcpListener;
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

/// A child process stopped with SIGKILL when dropped.
pub struct Process {
    pub child: Child,
    pub port: u16,
}

/// A loopback port that was free a moment ago.
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).expect("free port").port()
}

impl Process {
    /// Starts `binary` with `args` (which should make it listen on `port`), stderr to
    /// `log_path`, and waits until `port` accepts connections.
    pub fn spawn(binary: &Path, args: &[String], port: u16, log_path: &Path) -> Process {
        let log = std::fs::File::create(log_path).expect("log file");
        let child = Command::new(binary)
            .args(args)
            .env("RUST_LOG", "info")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {}: {e}", binary.display()));
        let mut process = Process { child, port };
        process.wait_listening(Duration::from_secs(30), log_path);
        process
    }

    fn wait_listening(&mut self, timeout: Duration, log_path: &Path) {
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            if std::net::TcpStream::connect(("127.0.0.1", self.port)).is_ok() {
                return;
            }
            if let Ok(Some(status)) = self.child.try_wait() {
                let log = std::fs::read_to_string(log_path).unwrap_or_default();
                panic!("process exited with {status} before listening:\n{log}");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        panic!("process did not listen on port {} within {timeout:?}", self.port);
    }

    pub fn signal(&self, signal: Signal) {
        kill(Pid::from_raw(self.child.id() as i32), signal).expect("signal");
    }

    /// Waits for the process to exit, at most `timeout`.
    pub fn wait_exit(&mut self, timeout: Duration) -> ExitStatus {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(status) = self.child.try_wait().expect("wait") {
                return status;
            }
            assert!(Instant::now() < deadline, "process did not exit within {timeout:?}");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Runs `binary` with `args` to its end (at most 30 s) and checks that it refused them as a
/// user error: exit code 2 and exactly one line on stderr, which is returned.
pub fn usage_error(binary: &Path, args: &[&str]) -> String {
    let output = Command::new(binary)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("cannot start {}: {e}", binary.display()));
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    assert_eq!(output.status.code(), Some(2), "{} {args:?}: {stderr}", binary.display());
    assert_eq!(stderr.lines().count(), 1, "one line on stderr: {stderr:?}");
    stderr.trim_end().to_owned()
}

/// Writes `text` to a config file in `dir` and returns its path as a string.
pub fn config_file(dir: &Path, text: &str) -> String {
    let path = dir.join("config.toml");
    std::fs::write(&path, text).expect("write config file");
    path.to_str().expect("UTF-8 path").to_owned()
}

/// Sends SIGTERM and checks that the process exits with code 0 within `within`.
pub fn terminates_cleanly(process: &mut Process, within: Duration) {
    process.signal(Signal::SIGTERM);
    let started = Instant::now();
    let status = process.wait_exit(within);
    assert!(status.success(), "SIGTERM ends the process with 0, not {status}");
    assert!(started.elapsed() < within, "it stopped within {within:?}");
}

/// The peak resident set (`VmHWM`) of process `pid` so far, in bytes.
pub fn peak_rss(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("proc status");
    let kb: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmHWM");
    kb * 1024
}
