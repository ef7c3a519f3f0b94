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

/// Where [`free_port`] and [`free_port_block`] hand ports out: below the kernel's ephemeral
/// range (32768 and up, where every client socket and every `bind(…:0)` lands), so a port
/// handed to a child process cannot be taken by some connection before the child binds it.
const PORTS: std::ops::Range<u16> = 20_000..32_000;

/// The file every test process takes its ports from, under an exclusive lock: it holds the
/// next port to hand out, so no two tests — in one process or in several at once — are given
/// the same port until the range wraps round (12,000 ports later).
const PORT_FILE: &str = "tributary-test-ports";

/// A loopback port free now, handed to no other test.
pub fn free_port() -> u16 {
    free_port_block(1)
}

/// The first of `n` consecutive loopback ports free now, handed to no other test (SeaweedFS,
/// say, takes a block of them).
pub fn free_port_block(n: u16) -> u16 {
    use std::io::{Read, Seek, Write};
    assert!(n > 0 && n < PORTS.len() as u16, "a block of {n} ports");
    let path = std::env::temp_dir().join(PORT_FILE);
    let mut file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(&path)
        .unwrap_or_else(|e| panic!("cannot open {}: {e}", path.display()));
    file.lock().expect("lock the port file");
    let mut text = String::new();
    file.read_to_string(&mut text).expect("read the port file");
    let stored = text.trim().parse::<u16>().ok().filter(|p| PORTS.contains(p));
    let mut start = stored.unwrap_or(PORTS.start + (std::process::id() % 1000) as u16);
    let mut found = None;
    // At most one lap of the range: ports that some process holds now are passed over.
    for _ in 0..PORTS.len() {
        if start + n > PORTS.end {
            start = PORTS.start;
        }
        if (start..start + n).all(|p| TcpListener::bind(("127.0.0.1", p)).is_ok()) {
            found = Some(start);
            break;
        }
        start += 1;
    }
    let start = found.unwrap_or_else(|| panic!("no block of {n} free ports in {PORTS:?}"));
    let next = start + n;
    file.set_len(0).and_then(|()| file.rewind()).expect("rewrite the port file");
    file.write_all(next.to_string().as_bytes()).expect("write the port file");
    // The lock goes with the file.
    start
}

impl Process {
    /// Starts `binary` with `args` (which should make it listen on `port`), stderr to
    /// `log_path`, and waits until `port` accepts connections.
    pub fn spawn(binary: &Path, args: &[String], port: u16, log_path: &Path) -> Process {
        Process::spawn_with_env(binary, args, &[], port, log_path)
    }

    /// [`Process::spawn`] with `env` added to the environment (an S3 endpoint, say).
    pub fn spawn_with_env(
        binary: &Path,
        args: &[String],
        env: &[(&str, String)],
        port: u16,
        log_path: &Path,
    ) -> Process {
        let log = std::fs::File::create(log_path).expect("log file");
        let child = Command::new(binary)
            .args(args)
            .envs(env.iter().map(|(k, v)| (k, v)))
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

    /// Waits until the child itself listens on the port: a connection answered by another
    /// process on that port (the bit-flip tests once saw one) is not the child's.
    fn wait_listening(&mut self, timeout: Duration, log_path: &Path) {
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            if listens_on(self.child.id(), self.port) {
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

/// Whether process `pid` holds a TCP socket listening on `port` (IPv4 or IPv6), by the socket
/// inodes of `/proc/net/tcp{,6}` and the process's open files.
pub fn listens_on(pid: u32, port: u16) -> bool {
    const LISTEN: &str = "0A";
    let mut inodes = Vec::new();
    for table in ["/proc/net/tcp", "/proc/net/tcp6"] {
        let Ok(text) = std::fs::read_to_string(table) else { continue };
        for line in text.lines().skip(1) {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let (Some(local), Some(state), Some(inode)) =
                (fields.get(1), fields.get(3), fields.get(9))
            else {
                continue;
            };
            let local_port = local.rsplit(':').next().and_then(|p| u16::from_str_radix(p, 16).ok());
            if *state == LISTEN && local_port == Some(port) {
                inodes.push(format!("socket:[{inode}]"));
            }
        }
    }
    if inodes.is_empty() {
        return false;
    }
    let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fd")) else { return false };
    fds.flatten().any(|fd| {
        std::fs::read_link(fd.path())
            .is_ok_and(|target| inodes.iter().any(|inode| target.as_os_str() == inode.as_str()))
    })
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ports_are_handed_out_once_and_outside_the_ephemeral_range() {
        let single: Vec<u16> = (0..50).map(|_| free_port()).collect();
        let block = free_port_block(9);
        let mut all: Vec<u16> = single.iter().copied().chain(block..block + 9).collect();
        assert!(all.iter().all(|p| PORTS.contains(p)), "{all:?}");
        all.sort_unstable();
        all.dedup();
        assert_eq!(all.len(), 59, "no port handed out twice");
    }

    #[test]
    fn a_listener_is_known_by_its_process() {
        let port = free_port();
        assert!(!listens_on(std::process::id(), port));
        let _listener = TcpListener::bind(("127.0.0.1", port)).unwrap();
        assert!(listens_on(std::process::id(), port));
        // Another process (this one's parent, say) does not hold it.
        assert!(!listens_on(std::os::unix::process::parent_id(), port));
    }
}
