//! Progress on stderr while a step runs: at most every two seconds, then a final line.

use std::sync::Mutex;
use std::time::{Duration, Instant};

pub struct Progress {
    what: String,
    started: Instant,
    last: Mutex<Instant>,
}

const EVERY: Duration = Duration::from_secs(2);

impl Progress {
    pub fn new(what: impl Into<String>) -> Progress {
        let what = what.into();
        eprintln!("bench: {what} …");
        let now = Instant::now();
        Progress { what, started: now, last: Mutex::new(now) }
    }

    pub fn tick(&self, done: u64, total: u64) {
        let mut last = self.last.lock().unwrap_or_else(|p| p.into_inner());
        if last.elapsed() >= EVERY {
            *last = Instant::now();
            let rate = done as f64 / self.started.elapsed().as_secs_f64();
            eprintln!("bench:   {}: {done}/{total} ({:.0}/s)", self.what, rate);
        }
    }
}
