//! The paper's workloads, run the same way against every system: one producer sending N
//! messages of a fixed size (one per request, or in batches), one consumer reading all of them
//! back, and end-to-end latency at a fixed offered rate.

use std::time::{Duration, Instant};

use anyhow::{bail, ensure};
use bytes::{Bytes, BytesMut};

use crate::peer::{BenchResult, Running};
use crate::progress::Progress;

/// Messages and bytes moved in a time.
#[derive(Debug, Clone, Copy, serde::Serialize, serde::Deserialize)]
pub struct Throughput {
    pub messages: u64,
    pub bytes: u64,
    pub seconds: f64,
}

impl Throughput {
    pub fn messages_per_second(&self) -> f64 {
        self.messages as f64 / self.seconds
    }

    pub fn megabytes_per_second(&self) -> f64 {
        self.bytes as f64 / self.seconds / 1e6
    }
}

/// Distinct payloads a producer cycles through, so that no system's compression (Redis's
/// LZF, a peer's page compression) finds repeats that real events would not have.
const PAYLOAD_POOL: usize = 4096;

/// A payload of `bytes` of pseudo-random, incompressible content that starts with `sequence`.
pub fn payload(sequence: u64, bytes: usize) -> Bytes {
    let mut buf = BytesMut::with_capacity(bytes);
    buf.extend_from_slice(&sequence.to_be_bytes()[..bytes.min(8)]);
    fill_random(&mut buf, bytes, sequence);
    buf.freeze()
}

/// Appends xorshift bytes to `buf` until it holds `bytes`.
fn fill_random(buf: &mut BytesMut, bytes: usize, seed: u64) {
    let mut state = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    while buf.len() < bytes {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        let take = (bytes - buf.len()).min(8);
        buf.extend_from_slice(&state.to_le_bytes()[..take]);
    }
}

/// Sends `count` messages of `message_bytes` in requests of `batch`, and waits for every
/// acknowledgement.
pub async fn produce(
    running: &dyn Running,
    stream: &str,
    count: u64,
    message_bytes: usize,
    batch: usize,
    progress: &Progress,
) -> BenchResult<Throughput> {
    let mut producer = running.producer(stream).await?;
    // Payloads are made before the clock starts: the benchmark measures the system.
    let pool_len = PAYLOAD_POOL.max(batch);
    let pool: Vec<Bytes> = (0..pool_len as u64).map(|i| payload(i, message_bytes)).collect();
    let started = Instant::now();
    let (mut sent, mut at) = (0u64, 0usize);
    while sent < count {
        let n = (count - sent).min(batch as u64) as usize;
        if at + n > pool_len {
            at = 0;
        }
        producer.send(&pool[at..at + n]).await?;
        at += n;
        sent += n as u64;
        progress.tick(sent, count);
    }
    producer.flush().await?;
    let seconds = started.elapsed().as_secs_f64();
    Ok(Throughput { messages: count, bytes: count * message_bytes as u64, seconds })
}

/// Reads `stream` from the start until `count` messages of `message_bytes` have arrived;
/// fails on a message of another size or if the stream stays silent for `idle`.
pub async fn consume(
    running: &dyn Running,
    stream: &str,
    count: u64,
    message_bytes: usize,
    progress: &Progress,
) -> BenchResult<Throughput> {
    let mut consumer = running.consumer(stream).await?;
    let idle = Duration::from_secs(30);
    let started = Instant::now();
    let mut last_message = Instant::now();
    let (mut received, mut bytes) = (0u64, 0u64);
    while received < count {
        let messages = consumer.receive().await?;
        if messages.is_empty() {
            if last_message.elapsed() > idle {
                bail!("only {received} of {count} messages arrived; none for {idle:?}");
            }
            continue;
        }
        last_message = Instant::now();
        for m in &messages {
            ensure!(
                m.len() == message_bytes,
                "a message of {} bytes, expected {message_bytes}",
                m.len()
            );
            bytes += m.len() as u64;
        }
        received += messages.len() as u64;
        progress.tick(received, count);
    }
    ensure!(received == count, "{received} messages arrived, {count} were sent");
    Ok(Throughput { messages: received, bytes, seconds: started.elapsed().as_secs_f64() })
}

/// End-to-end latency percentiles in microseconds.
#[derive(Debug, Clone, Copy, serde::Serialize, serde::Deserialize)]
pub struct Latency {
    pub rate_per_second: u64,
    pub messages: u64,
    pub p50_us: f64,
    pub p99_us: f64,
    pub p999_us: f64,
    pub max_us: f64,
}

/// Sends single messages at `rate` per second for `duration`, each carrying its send time,
/// while a consumer reads them; latency is receive time minus send time.
pub async fn latency(
    running: &dyn Running,
    stream: &str,
    rate: u64,
    duration: Duration,
    message_bytes: usize,
) -> BenchResult<Latency> {
    let mut producer = running.producer(stream).await?;
    let mut consumer = running.consumer(stream).await?;
    let origin = Instant::now();
    let total = (rate as f64 * duration.as_secs_f64()) as u64;
    let reader = tokio::spawn(async move {
        let mut samples = Vec::with_capacity(total as usize);
        let deadline = Instant::now() + duration + Duration::from_secs(30);
        while (samples.len() as u64) < total && Instant::now() < deadline {
            for m in consumer.receive().await? {
                let sent_ns = u64::from_be_bytes(m[..8].try_into().expect("8-byte stamp"));
                let now_ns = origin.elapsed().as_nanos() as u64;
                samples.push(now_ns.saturating_sub(sent_ns));
            }
        }
        BenchResult::Ok(samples)
    });
    let interval = Duration::from_secs_f64(1.0 / rate as f64);
    for i in 0..total {
        // Open loop: each message leaves at its scheduled time, however long the last took.
        let due = origin + interval.mul_f64(i as f64);
        tokio::time::sleep_until(due.into()).await;
        let mut m = BytesMut::with_capacity(message_bytes);
        m.extend_from_slice(&(origin.elapsed().as_nanos() as u64).to_be_bytes());
        fill_random(&mut m, message_bytes.max(8), i);
        producer.send(&[m.freeze()]).await?;
    }
    producer.flush().await?;
    let mut samples = reader.await??;
    ensure!(samples.len() as u64 == total, "{} of {total} latency messages arrived", samples.len());
    samples.sort_unstable();
    let at =
        |q: f64| samples[((samples.len() as f64 * q) as usize).min(samples.len() - 1)] as f64 / 1e3;
    Ok(Latency {
        rate_per_second: rate,
        messages: total,
        p50_us: at(0.50),
        p99_us: at(0.99),
        p999_us: at(0.999),
        max_us: *samples.last().unwrap_or(&0) as f64 / 1e3,
    })
}
