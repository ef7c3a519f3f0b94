//! Progress and rate of a long produce or consume, on stderr at most once a second.

use std::io::IsTerminal;
use std::time::{Duration, Instant};

const INTERVAL: Duration = Duration::from_secs(1);

pub struct Progress {
    verb: &'static str,
    enabled: bool,
    started: Instant,
    last_report: Instant,
    pub messages: u64,
    pub bytes: u64,
}

impl Progress {
    /// Reports when asked to, or when stderr is a terminal.
    pub fn new(verb: &'static str, requested: bool) -> Progress {
        let now = Instant::now();
        Progress {
            verb,
            enabled: requested || std::io::stderr().is_terminal(),
            started: now,
            last_report: now,
            messages: 0,
            bytes: 0,
        }
    }

    pub fn add(&mut self, bytes: usize) {
        self.messages += 1;
        self.bytes += bytes as u64;
        if self.enabled && self.last_report.elapsed() >= INTERVAL {
            self.last_report = Instant::now();
            eprintln!("trib: {}", self.summary());
        }
    }

    pub fn elapsed(&self) -> Duration {
        self.started.elapsed()
    }

    /// `12000 messages (1.1 MiB) produced in 3.0 s: 4000 msg/s, 0.4 MiB/s`.
    pub fn summary(&self) -> String {
        let seconds = self.elapsed().as_secs_f64().max(1e-3);
        let mib = self.bytes as f64 / (1 << 20) as f64;
        format!(
            "{} messages ({mib:.1} MiB) {} in {seconds:.1} s: {:.0} msg/s, {:.1} MiB/s",
            self.messages,
            self.verb,
            self.messages as f64 / seconds,
            mib / seconds,
        )
    }
}
