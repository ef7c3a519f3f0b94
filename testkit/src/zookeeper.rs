//! A real ZooKeeper server (Debian's `zookeeper` package, run standalone with `java -cp`) on a
//! free loopback port with its own data directory. Tests fail loudly if it cannot start.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use tempfile::TempDir;

use crate::process::free_port;

const CLASSPATH: &str = "/usr/share/java/zookeeper.jar:/usr/share/java/slf4j-simple.jar";
/// ZooKeeper's clock: sessions may time out between 2 and 20 ticks.
const TICK_MS: u64 = 250;

pub struct ZooKeeperServer {
    pub port: u16,
    dir: TempDir,
    child: Mutex<Option<Child>>,
}

static SHARED: OnceLock<ZooKeeperServer> = OnceLock::new();
static CHROOTS: AtomicU64 = AtomicU64::new(0);

impl ZooKeeperServer {
    /// One server per test binary, started on first use and killed when the binary exits.
    pub fn shared() -> &'static ZooKeeperServer {
        SHARED.get_or_init(ZooKeeperServer::start)
    }

    /// A server of the caller's own, for tests that stop or restart it.
    pub fn start() -> ZooKeeperServer {
        let dir = tempfile::tempdir().expect("temp dir");
        let port = free_port();
        let server = ZooKeeperServer { port, dir, child: Mutex::new(None) };
        server.launch();
        server
    }

    /// `127.0.0.1:{port}{chroot}` with a chroot no other test in this binary uses.
    pub fn connect_string(&self) -> String {
        let n = CHROOTS.fetch_add(1, Ordering::Relaxed);
        format!("127.0.0.1:{}/test-{}-{n}", self.port, std::process::id())
    }

    pub fn data_dir(&self) -> &Path {
        self.dir.path()
    }

    fn launch(&self) {
        let data = self.dir.path().join("data");
        std::fs::create_dir_all(&data).expect("zookeeper data dir");
        let config = self.dir.path().join("zoo.cfg");
        std::fs::write(
            &config,
            format!(
                "tickTime={TICK_MS}\ndataDir={}\nclientPort={}\nclientPortAddress=127.0.0.1\n\
                 admin.enableServer=false\n4lw.commands.whitelist=ruok,srvr,stat,mntr,conf\n\
                 maxSessionTimeout=30000\n",
                data.display(),
                self.port
            ),
        )
        .expect("zoo.cfg");
        let log_path = self.dir.path().join("zookeeper.log");
        let child = spawn_java(&config, &log_path);
        *self.child.lock().unwrap() = Some(child);
        let deadline = Instant::now() + Duration::from_secs(30);
        while Instant::now() < deadline {
            if self.four_letter("srvr").is_some_and(|s| s.contains("Mode: standalone")) {
                return;
            }
            if let Some(status) =
                self.child.lock().unwrap().as_mut().and_then(|c| c.try_wait().ok().flatten())
            {
                let log = std::fs::read_to_string(&log_path).unwrap_or_default();
                panic!(
                    "ZooKeeper exited with {status} before serving (is the `zookeeper` package installed?):\n{log}"
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let log = std::fs::read_to_string(&log_path).unwrap_or_default();
        panic!("ZooKeeper did not serve on port {} within 30 s:\n{log}", self.port);
    }

    /// Sends a four-letter command and returns the answer, if the server answers.
    pub fn four_letter(&self, command: &str) -> Option<String> {
        let mut stream = TcpStream::connect(("127.0.0.1", self.port)).ok()?;
        stream.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
        stream.write_all(command.as_bytes()).ok()?;
        let mut answer = String::new();
        stream.read_to_string(&mut answer).ok()?;
        Some(answer)
    }

    /// Freezes the server (SIGSTOP) for `pause`, as a long collector pause or a starved
    /// machine would: connections stay open and go unanswered. Returns once it runs again.
    pub fn pause(&self, pause: Duration) {
        let pid = self.child.lock().unwrap().as_ref().map(|c| Pid::from_raw(c.id() as i32));
        let pid = pid.expect("a running server");
        kill(pid, Signal::SIGSTOP).expect("SIGSTOP");
        std::thread::sleep(pause);
        kill(pid, Signal::SIGCONT).expect("SIGCONT");
    }

    /// Stops the server (SIGTERM), keeping its data directory.
    pub fn stop(&self) {
        if let Some(mut child) = self.child.lock().unwrap().take() {
            let _ = kill(Pid::from_raw(child.id() as i32), Signal::SIGTERM);
            let deadline = Instant::now() + Duration::from_secs(10);
            while child.try_wait().ok().flatten().is_none() {
                if Instant::now() > deadline {
                    let _ = child.kill();
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            let _ = child.wait();
        }
    }

    /// Starts the server again on the same port and data directory.
    pub fn restart(&self) {
        self.stop();
        self.launch();
    }
}

impl Drop for ZooKeeperServer {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.lock().unwrap().take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// Starts the JVM from a thread that lives as long as this process, with a parent-death
/// signal, so that a server started for a test binary never outlives it.
fn spawn_java(config: &Path, log_path: &Path) -> Child {
    let config = config.to_owned();
    let log_path = log_path.to_owned();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let log = std::fs::File::create(&log_path).expect("zookeeper log");
        let mut command = Command::new("java");
        command
            .args(["-Xmx256m", "-XX:+UseSerialGC", "-cp", CLASSPATH])
            .arg("org.apache.zookeeper.server.ZooKeeperServerMain")
            .arg(&config)
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("log"))
            .stderr(log);
        // SAFETY: only an async-signal-safe system call runs between fork and exec.
        unsafe {
            command.pre_exec(|| {
                nix::sys::prctl::set_pdeathsig(Signal::SIGKILL).map_err(std::io::Error::from)
            });
        }
        let spawned = command.spawn();
        let failed = spawned.is_err();
        let _ = tx.send(spawned);
        if !failed {
            // The parent-death signal fires when this thread ends: keep it for the process's life.
            loop {
                std::thread::park();
            }
        }
    });
    rx.recv()
        .expect("spawner thread")
        .unwrap_or_else(|e| panic!("cannot run java for ZooKeeper: {e}"))
}
