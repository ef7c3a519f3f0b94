//! A server process the benchmark starts itself: on 127.0.0.1, with a log file in its data
//! directory, stopped by its pid. Dropping it kills the process, so no run leaves one behind.

use std::net::TcpListener;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

use crate::peer::BenchResult;

pub struct Service {
    name: &'static str,
    child: Option<Child>,
}

/// A loopback port that was free a moment ago.
pub fn free_port() -> BenchResult<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

impl Service {
    /// Runs `command` with stdout and stderr to `log`, then waits up to `ready_within` for
    /// `port` to accept connections. Fails with the log's tail if the process exits first.
    pub fn start(
        name: &'static str,
        mut command: Command,
        log: &Path,
        port: u16,
        ready_within: Duration,
    ) -> BenchResult<Service> {
        let file =
            std::fs::File::create(log).with_context(|| format!("creating {}", log.display()))?;
        command.stdin(Stdio::null()).stdout(file.try_clone()?).stderr(file);
        let child = command.spawn().with_context(|| {
            format!("cannot run {name} ({:?}): is it installed?", command.get_program())
        })?;
        let mut service = Service { name, child: Some(child) };
        let deadline = Instant::now() + ready_within;
        loop {
            if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
                return Ok(service);
            }
            if let Some(status) = service.child.as_mut().and_then(|c| c.try_wait().ok().flatten()) {
                service.child = None;
                bail!("{name} exited with {status} before listening; log:\n{}", tail(log));
            }
            if Instant::now() > deadline {
                bail!(
                    "{name} did not listen on port {port} within {ready_within:?}; log:\n{}",
                    tail(log)
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// SIGTERM, then SIGKILL if it has not exited within `grace`.
    pub fn stop(&mut self, grace: Duration) -> BenchResult<()> {
        let Some(mut child) = self.child.take() else { return Ok(()) };
        let _ = kill(Pid::from_raw(child.id() as i32), Signal::SIGTERM);
        let deadline = Instant::now() + grace;
        while child.try_wait()?.is_none() {
            if Instant::now() > deadline {
                eprintln!("bench: {} ignored SIGTERM for {grace:?}; killing it", self.name);
                child.kill()?;
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        child.wait()?;
        Ok(())
    }
}

impl Drop for Service {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// [`Service::start`] off the async runtime: it polls the port with blocking sleeps.
pub async fn start_service(
    name: &'static str,
    command: Command,
    log: &Path,
    port: u16,
    ready_within: Duration,
) -> BenchResult<Service> {
    let log = log.to_path_buf();
    tokio::task::spawn_blocking(move || Service::start(name, command, &log, port, ready_within))
        .await?
}

/// [`Service::stop`] off the async runtime: it waits for the process with blocking sleeps.
pub async fn stop_service(mut service: Service, grace: Duration) -> BenchResult<()> {
    tokio::task::spawn_blocking(move || service.stop(grace)).await?
}

/// The last lines of a log, for an error message.
pub fn tail(log: &Path) -> String {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(15)..].join("\n")
}
