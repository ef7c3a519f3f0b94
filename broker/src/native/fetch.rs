//! Fetches on the native protocol: each part's header, then its bytes straight from the
//! segment file ([`crate::net::send`]). A long-poll fetch (`MULTIFETCH_WAIT`) that finds too
//! little data parks the connection on the watches of its partitions' visible ends, which the
//! append (or flush) that makes data visible wakes; while parked the connection still reads,
//! to notice a client that hangs up.

use std::io;
use std::sync::Arc;
use std::time::{Duration, Instant};

use protocol::{
    ErrorCode, FRAME_SIZE_BYTES, FetchRequest, MultiFetchWaitRequest, encode_response_header,
};
use tokio::sync::watch;

use super::connection::{Connection, Next, PARKED_INPUT_BYTES_MAX, read_into};
use crate::log::FileSlice;
use crate::metrics::{Latency, Metrics, RequestKind};

/// A long-poll fetch waiting: counted in the parked gauge, and its wait timed, until dropped.
struct Parked<'a> {
    metrics: &'a Metrics,
    since: Instant,
}

impl<'a> Parked<'a> {
    fn new(metrics: &'a Metrics) -> Parked<'a> {
        metrics.parked_now.inc();
        Parked { metrics, since: Instant::now() }
    }
}

impl Drop for Parked<'_> {
    fn drop(&mut self) {
        self.metrics.parked_now.dec();
        self.metrics.observe(Latency::long_poll_wait, self.since.elapsed());
    }
}

impl Connection {
    /// `FETCH`: one partition's bytes.
    pub(super) async fn fetch(&mut self, f: FetchRequest) -> io::Result<()> {
        let node = Arc::clone(&self.node);
        let started = Instant::now();
        node.metrics().request(RequestKind::fetch, 1);
        match node.plan_fetch_settled(&f).await {
            Ok(slice) => {
                let len = slice.as_ref().map_or(0, |s| s.len as usize);
                encode_response_header(&mut self.output, len, ErrorCode::None);
                self.send(slice.as_ref()).await?;
                node.metrics().sent(&f.topic, len as u64);
            }
            Err(error) => self.answer(RequestKind::fetch, Err(error)),
        }
        node.metrics().observe(Latency::fetch, started.elapsed());
        Ok(())
    }

    /// `MULTIFETCH_WAIT`: a multifetch answered once `min_bytes` are visible or `max_wait_ms`
    /// has passed.
    pub(super) async fn multi_fetch_wait(&mut self, m: MultiFetchWaitRequest) -> io::Result<Next> {
        let node = Arc::clone(&self.node);
        node.metrics().request(RequestKind::multifetch_wait, 1);
        if m.max_wait_ms < 0 {
            self.answer(RequestKind::multifetch_wait, Err(ErrorCode::InvalidRequest));
        } else if m.min_bytes < 0 {
            self.answer(RequestKind::multifetch_wait, Err(ErrorCode::InvalidFetchSize));
        } else {
            if let Next::Gone = self.wait_for_data(&m).await? {
                return Ok(Next::Gone);
            }
            let started = Instant::now();
            self.multi_fetch(RequestKind::multifetch_wait, &m.fetches).await?;
            node.metrics().observe(Latency::fetch, started.elapsed());
        }
        Ok(Next::Continue)
    }

    /// Answers a multifetch: each part's header, then its bytes by `sendfile`.
    pub(super) async fn multi_fetch(
        &mut self,
        kind: RequestKind,
        fetches: &[FetchRequest],
    ) -> io::Result<()> {
        let mut parts = Vec::with_capacity(fetches.len());
        for fetch in fetches {
            parts.push(self.node.plan_fetch_settled(fetch).await);
        }
        let part_len = |p: &Result<Option<FileSlice>, ErrorCode>| match p {
            Ok(Some(slice)) => slice.len as usize,
            _ => 0,
        };
        let body_len: usize = parts.iter().map(|p| FRAME_SIZE_BYTES + 2 + part_len(p)).sum();
        encode_response_header(&mut self.output, body_len, ErrorCode::None);
        for (part, fetch) in parts.iter().zip(fetches) {
            let error = part.as_ref().err().copied().unwrap_or(ErrorCode::None);
            encode_response_header(&mut self.output, part_len(part), error);
            match part {
                Ok(slice) => {
                    self.send(slice.as_ref()).await?;
                    self.node.metrics().sent(&fetch.topic, part_len(part) as u64);
                }
                Err(error) => self.node.metrics().request_error(kind, *error),
            }
        }
        Ok(())
    }

    /// Waits until `min_bytes` are visible over the fetch's parts, `max_wait_ms` (at most
    /// `max_fetch_wait_ms`) has passed, or the broker shuts down. Returns at once when a part
    /// will be answered with an error, when enough is visible already, or when
    /// `max_parked_fetches` fetches wait already. Woken only by changes of the visible ends:
    /// no polling.
    async fn wait_for_data(&mut self, request: &MultiFetchWaitRequest) -> io::Result<Next> {
        let mut watches = Vec::with_capacity(request.fetches.len());
        for fetch in &request.fetches {
            match self.node.watch_fetch(fetch) {
                Ok(watch) => watches.push((watch, fetch.offset as u64, fetch.max_bytes as u64)),
                Err(_) => return Ok(Next::Continue), // the answer carries the error
            }
        }
        self.wait_for_bytes(request.max_wait_ms, request.min_bytes, watches).await
    }

    /// Parks until the ends `watches` follow are `min_bytes` past their offsets (each counted
    /// up to its `max_bytes`), `max_wait_ms` has passed, or the broker stops.
    pub(super) async fn wait_for_bytes(
        &mut self,
        max_wait_ms: i32,
        min_bytes: i32,
        mut watches: Vec<(watch::Receiver<u64>, u64, u64)>,
    ) -> io::Result<Next> {
        let max_wait = Duration::from_millis(max_wait_ms.max(0) as u64)
            .min(self.node.config().max_fetch_wait());
        let min_bytes = min_bytes.max(0) as u64;
        let visible = |watches: &[(watch::Receiver<u64>, u64, u64)]| -> u64 {
            watches
                .iter()
                .map(|(watch, offset, max_bytes)| {
                    watch.borrow().saturating_sub(*offset).min(*max_bytes)
                })
                .sum()
        };
        if max_wait.is_zero() || visible(&watches) >= min_bytes {
            return Ok(Next::Continue);
        }
        let Some(_slot) = self.admission.try_park() else {
            self.node.metrics().fetches_not_parked.inc();
            return Ok(Next::Continue);
        };
        let metrics = Arc::clone(self.node.metrics());
        metrics.fetches_parked.inc();
        let _parked = Parked::new(&metrics);
        // Answers to earlier requests go out now, not after the wait.
        self.flush_output().await?;
        let deadline = tokio::time::Instant::now() + max_wait;
        loop {
            let changed = async {
                if watches.is_empty() {
                    return std::future::pending().await;
                }
                let changes = watches.iter_mut().map(|(watch, _, _)| Box::pin(watch.changed()));
                futures::future::select_all(changes).await.0
            };
            let reading = self.input.len() < PARKED_INPUT_BYTES_MAX;
            if reading {
                self.input.reserve(PARKED_INPUT_BYTES_MAX - self.input.len());
            }
            tokio::select! {
                _ = tokio::time::sleep_until(deadline) => return Ok(Next::Continue),
                _ = self.stop.cancelled() => return Ok(Next::Continue),
                changed = changed => {
                    // A partition that went away has nothing more to wait for.
                    if changed.is_err() || visible(&watches) >= min_bytes {
                        return Ok(Next::Continue);
                    }
                }
                read = read_into(&mut self.stream, &mut self.input, &mut self.read_filled), if reading => {
                    if read? == 0 {
                        return Ok(Next::Gone);
                    }
                }
            }
        }
    }
}
