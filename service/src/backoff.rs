//! The one retry delay of the workspace: exponential from a first delay, doubling, capped,
//! with jitter so that clients that failed together do not retry together, and optionally a
//! bounded number of attempts. The delays come from `backon`'s exponential builder; this
//! type adds the cap after jitter (backon's jitter may add up to one more delay on top of
//! its cap), `reset` after a success, and a wait that a shutdown interrupts.

use std::time::Duration;

use backon::{BackoffBuilder, ExponentialBackoff, ExponentialBuilder};
use tokio_util::sync::CancellationToken;

/// Delays between attempts of one retried operation. Not shared between operations.
#[derive(Debug)]
pub struct Backoff {
    builder: ExponentialBuilder,
    delays: ExponentialBackoff,
    max: Duration,
}

impl Backoff {
    /// Delays starting at `first` (at least 1 ms), doubling up to `max`, with jitter, for as
    /// many attempts as the caller makes.
    pub fn new(first: Duration, max: Duration) -> Backoff {
        let first = first.max(Duration::from_millis(1));
        let max = max.max(first);
        let builder = ExponentialBuilder::new()
            .with_min_delay(first)
            .with_max_delay(max)
            .with_factor(2.0)
            .with_jitter()
            .without_max_times();
        Backoff { delays: builder.build(), builder, max }
    }

    /// [`Backoff::new`] in milliseconds, as most settings hold them.
    pub fn from_ms(first_ms: u64, max_ms: u64) -> Backoff {
        Backoff::new(Duration::from_millis(first_ms), Duration::from_millis(max_ms))
    }

    /// At most `retries` delays (so `retries + 1` attempts in all) before [`Backoff::next_delay`]
    /// says to give up.
    pub fn with_max_retries(mut self, retries: usize) -> Backoff {
        self.builder = self.builder.with_max_times(retries);
        self.delays = self.builder.build();
        self
    }

    /// The delay before the next attempt, or `None` once the attempts are used up.
    pub fn next_delay(&mut self) -> Option<Duration> {
        self.delays.next().map(|delay| delay.min(self.max))
    }

    /// Starts again from the first delay, after a success.
    pub fn reset(&mut self) {
        self.delays = self.builder.build();
    }

    /// Sleeps the next delay. Returns `false` without sleeping once the attempts are used up,
    /// and `false` as soon as `stop` is cancelled: the caller stops retrying.
    pub async fn wait(&mut self, stop: &CancellationToken) -> bool {
        let Some(delay) = self.next_delay() else { return false };
        tokio::select! {
            () = stop.cancelled() => false,
            () = tokio::time::sleep(delay) => true,
        }
    }

    /// Sleeps the next delay; `false` once the attempts are used up.
    pub async fn sleep(&mut self) -> bool {
        let Some(delay) = self.next_delay() else { return false };
        tokio::time::sleep(delay).await;
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delays_double_with_jitter_and_stay_under_the_cap() {
        let mut backoff = Backoff::from_ms(100, 1_000);
        let delays: Vec<Duration> = (0..8).map(|_| backoff.next_delay().unwrap()).collect();
        assert!(delays[0] >= Duration::from_millis(100) && delays[0] < Duration::from_millis(200));
        assert!(delays[1] >= Duration::from_millis(200), "{delays:?}");
        assert!(delays.iter().all(|&d| d <= Duration::from_secs(1)), "{delays:?}");
        assert_eq!(delays[7], Duration::from_secs(1), "capped: {delays:?}");
        backoff.reset();
        assert!(backoff.next_delay().unwrap() < Duration::from_millis(200));
    }

    #[test]
    fn jitter_spreads_clients_that_failed_together() {
        let firsts: std::collections::BTreeSet<Duration> =
            (0..20).map(|_| Backoff::from_ms(100, 10_000).next_delay().unwrap()).collect();
        assert!(firsts.len() > 1, "{firsts:?}");
    }

    #[test]
    fn bounded_retries_run_out() {
        let mut backoff = Backoff::from_ms(1, 10).with_max_retries(2);
        assert!(backoff.next_delay().is_some());
        assert!(backoff.next_delay().is_some());
        assert_eq!(backoff.next_delay(), None);
        backoff.reset();
        assert!(backoff.next_delay().is_some());
    }

    #[tokio::test]
    async fn a_shutdown_ends_the_wait() {
        let stop = CancellationToken::new();
        stop.cancel();
        let started = std::time::Instant::now();
        assert!(!Backoff::from_ms(60_000, 60_000).wait(&stop).await);
        assert!(started.elapsed() < Duration::from_secs(1));
        assert!(Backoff::from_ms(1, 1).wait(&CancellationToken::new()).await);
    }
}
