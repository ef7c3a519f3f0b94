//! One managed process: started detached (its own session, stdin null, output appended to its
//! log), known afterwards only by its pid file, stopped with SIGTERM and, after a bound,
//! SIGKILL.

use std::fs::OpenOptions;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant, SystemTime};

use nix::errno::Errno;
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

use super::error::DeployError;

/// Where a process's pid file and log are, under the run directory.
#[derive(Debug, Clone)]
pub struct Paths {
    pub pid_file: PathBuf,
    pub log_file: PathBuf,
}

impl Paths {
    pub fn new(run_dir: &Path, name: &str) -> Paths {
        Paths {
            pid_file: run_dir.join("pids").join(format!("{name}.pid")),
            log_file: run_dir.join("logs").join(format!("{name}.log")),
        }
    }
}

/// What the process table says about a pid file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum State {
    /// No pid file: never started, or stopped by `down`.
    Stopped,
    /// The process of the pid file runs.
    Alive { pid: i32, since: SystemTime },
    /// The pid file remains but its process is gone (crashed or killed).
    Dead { pid: i32 },
}

/// A process just started by `up`, with the log offset its readiness is read from.
pub struct Started {
    pub child: Child,
    pub log_offset: u64,
}

/// Starts `command` in a new session with stdin null and stdout and stderr appended to the
/// log, and writes its pid file.
pub fn spawn(mut command: Command, paths: &Paths) -> Result<Started, DeployError> {
    for dir in [&paths.pid_file, &paths.log_file].iter().filter_map(|p| p.parent()) {
        std::fs::create_dir_all(dir)
            .map_err(|source| DeployError::Io { path: dir.to_owned(), source })?;
    }
    let log = OpenOptions::new()
        .create(true)
        .append(true)
        .open(&paths.log_file)
        .map_err(|source| DeployError::Io { path: paths.log_file.clone(), source })?;
    let log_offset = log
        .metadata()
        .map_err(|source| DeployError::Io { path: paths.log_file.clone(), source })?
        .len();
    let stderr = log
        .try_clone()
        .map_err(|source| DeployError::Io { path: paths.log_file.clone(), source })?;
    command.stdin(Stdio::null()).stdout(log).stderr(stderr);
    // SAFETY: setsid is async-signal-safe and is the only call between fork and exec. A new
    // session detaches the process from `up`'s terminal, so it outlives `up` and a Ctrl-C.
    unsafe {
        command.pre_exec(|| nix::unistd::setsid().map(drop).map_err(std::io::Error::from));
    }
    let program = command.get_program().to_string_lossy().into_owned();
    let child = command.spawn().map_err(|source| DeployError::Spawn { program, source })?;
    let pid_text = format!("{}\n", child.id());
    // Written whole through a rename, so `status` and `down` never read half a pid.
    let staged = paths.pid_file.with_extension("pid.tmp");
    std::fs::write(&staged, pid_text)
        .and_then(|()| std::fs::rename(&staged, &paths.pid_file))
        .map_err(|source| DeployError::Io { path: paths.pid_file.clone(), source })?;
    Ok(Started { child, log_offset })
}

/// The state of the process named by `paths.pid_file`. `marker` is a string its command line
/// must contain (the run directory), so that a pid reused by another program after a crash is
/// not taken for ours.
pub fn state(paths: &Paths, marker: &str) -> Result<State, DeployError> {
    let text = match std::fs::read_to_string(&paths.pid_file) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(State::Stopped),
        Err(source) => return Err(DeployError::Io { path: paths.pid_file.clone(), source }),
    };
    let pid: i32 = text.trim().parse().map_err(|_| DeployError::Io {
        path: paths.pid_file.clone(),
        source: std::io::Error::new(std::io::ErrorKind::InvalidData, "not a pid"),
    })?;
    if !runs(pid, marker) {
        return Ok(State::Dead { pid });
    }
    let since = std::fs::metadata(&paths.pid_file)
        .and_then(|m| m.modified())
        .map_err(|source| DeployError::Io { path: paths.pid_file.clone(), source })?;
    Ok(State::Alive { pid, since })
}

/// Whether `pid` is a live (not zombie) process whose command line contains `marker`.
pub fn runs(pid: i32, marker: &str) -> bool {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return false;
    };
    // The state follows the parenthesised command name, which may itself hold spaces.
    let zombie =
        stat.rsplit_once(')').is_some_and(|(_, rest)| rest.trim_start().starts_with(['Z', 'X']));
    if zombie {
        return false;
    }
    std::fs::read(format!("/proc/{pid}/cmdline"))
        .is_ok_and(|cmdline| String::from_utf8_lossy(&cmdline).contains(marker))
}

/// How a stop ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stopped {
    /// Exited within the bound after SIGTERM.
    Terminated,
    /// Still running after the bound: killed.
    Killed,
    /// Was not running.
    NotRunning,
}

/// SIGTERM, wait up to `timeout`, then SIGKILL; removes the pid file either way.
pub fn stop(paths: &Paths, marker: &str, timeout: Duration) -> Result<Stopped, DeployError> {
    let outcome = match state(paths, marker)? {
        State::Stopped => return Ok(Stopped::NotRunning),
        State::Dead { .. } => Stopped::NotRunning,
        State::Alive { pid, .. } => terminate(pid, marker, timeout),
    };
    match std::fs::remove_file(&paths.pid_file) {
        Ok(()) => Ok(outcome),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(outcome),
        Err(source) => Err(DeployError::Io { path: paths.pid_file.clone(), source }),
    }
}

/// Stops `pid` (known to be ours): SIGTERM, wait up to `timeout`, SIGKILL.
pub fn terminate(pid: i32, marker: &str, timeout: Duration) -> Stopped {
    let target = Pid::from_raw(pid);
    if matches!(kill(target, Signal::SIGTERM), Err(Errno::ESRCH)) {
        return Stopped::NotRunning;
    }
    if wait_gone(pid, marker, timeout) {
        return Stopped::Terminated;
    }
    let _ = kill(target, Signal::SIGKILL);
    // SIGKILL cannot be ignored; the bound only covers a process stuck in the kernel.
    wait_gone(pid, marker, Duration::from_secs(5));
    Stopped::Killed
}

fn wait_gone(pid: i32, marker: &str, timeout: Duration) -> bool {
    let deadline = Instant::now() + timeout;
    loop {
        if !runs(pid, marker) {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The last `lines` lines of a log from `offset` on, for an error message.
pub fn log_tail(path: &Path, offset: u64, lines: usize) -> String {
    let Ok(bytes) = std::fs::read(path) else {
        return String::new();
    };
    let start = usize::try_from(offset).unwrap_or(0).min(bytes.len());
    let text = String::from_utf8_lossy(&bytes[start..]);
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Kills the child when the test ends, passed or failed.
    struct KillOnDrop(Child);

    impl Drop for KillOnDrop {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }

    #[test]
    fn stop_kills_a_process_that_ignores_sigterm_and_removes_its_pid_file() {
        let dir = tempfile::tempdir().expect("temp dir");
        let paths = Paths::new(dir.path(), "stubborn");
        // The sleep's argument, unique to this test run, is what tells the process apart.
        let marker = format!("60.{}", std::process::id());
        let mut command = Command::new("sh");
        command.arg("-c").arg(format!("trap '' TERM; exec sleep {marker}"));
        let mut child = KillOnDrop(spawn(command, &paths).expect("spawn").child);
        // The shell's command line names the marker too: wait for the exec, which comes after
        // the trap. The kernel renames the process before it sets up the new command line, so
        // wait for both.
        let pid = i32::try_from(child.0.id()).expect("pid");
        let comm = format!("/proc/{pid}/comm");
        let deadline = Instant::now() + Duration::from_secs(5);
        while std::fs::read_to_string(&comm).unwrap_or_default().trim() != "sleep"
            || !runs(pid, &marker)
        {
            assert!(Instant::now() < deadline, "sleep did not start");
            std::thread::sleep(Duration::from_millis(10));
        }
        assert!(matches!(state(&paths, &marker), Ok(State::Alive { .. })));
        let outcome = stop(&paths, &marker, Duration::from_millis(300)).expect("stop");
        assert_eq!(outcome, Stopped::Killed);
        assert!(!paths.pid_file.exists());
        assert_eq!(state(&paths, &marker).expect("state"), State::Stopped);
        let status = child.0.wait().expect("wait");
        assert_eq!(std::os::unix::process::ExitStatusExt::signal(&status), Some(9));
    }

    #[test]
    fn a_pid_now_held_by_another_program_is_dead_and_never_signalled() {
        let dir = tempfile::tempdir().expect("temp dir");
        let paths = Paths::new(dir.path(), "gone");
        std::fs::create_dir_all(paths.pid_file.parent().expect("dir")).expect("mkdir");
        // This test's own pid, whose command line does not name the marker.
        std::fs::write(&paths.pid_file, format!("{}\n", std::process::id())).expect("write");
        let marker = dir.path().to_string_lossy().into_owned();
        let pid = i32::try_from(std::process::id()).expect("pid");
        assert_eq!(state(&paths, &marker).expect("state"), State::Dead { pid });
        assert_eq!(
            stop(&paths, &marker, Duration::from_secs(1)).expect("stop"),
            Stopped::NotRunning
        );
        assert!(!paths.pid_file.exists());
    }
}
