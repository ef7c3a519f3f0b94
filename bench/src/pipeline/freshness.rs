//! Freshness: how long after an agent accepted an event (it stamps `header.time`) the event is
//! visible in the analytics cluster, and committed in Parquet. Long-polling consumers read
//! every partition of `page-view` in analytics (a sample of the event mix from every agent)
//! and note each event's read time and offset; after a step, the loader's commit records of
//! those partitions say when each offset was committed.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use client::{SimpleConsumer, SimpleConsumerConfig};
use events::envelope::EventHeader;
use tokio_util::sync::CancellationToken;

/// The topic sampled.
pub const TOPIC: &str = "page-view";

/// One event read from analytics.
#[derive(Debug, Clone, Copy)]
pub struct Seen {
    /// The agent's accept time.
    pub time_ms: i64,
    /// When this consumer read it.
    pub read_ms: i64,
    pub partition: i32,
    /// Offset of its message (its wrapper's, compressed): committed once a commit record's
    /// end passes it.
    pub offset: i64,
}

/// The samples so far, shared with the consumer task.
#[derive(Clone, Default)]
pub struct Samples(Arc<Mutex<Vec<Seen>>>);

impl Samples {
    /// Takes every sample so far.
    pub fn take(&self) -> Vec<Seen> {
        std::mem::take(&mut *self.0.lock().unwrap_or_else(|p| p.into_inner()))
    }
}

/// Reads partitions `0..partitions` of the sampled topic from their log ends on, each
/// following its leader among `brokers`, until `stop`.
pub fn spawn(brokers: Vec<String>, partitions: i32, stop: CancellationToken) -> Samples {
    let samples = Samples::default();
    for partition in 0..partitions {
        let (brokers, shared, stop) = (brokers.clone(), samples.clone(), stop.clone());
        tokio::spawn(async move {
            let mut offset = None;
            let mut next = 0;
            while !stop.is_cancelled() {
                let addr = &brokers[next % brokers.len()];
                match read(addr, partition, &mut offset, &shared, &stop).await {
                    Ok(()) => return,
                    // Not the leader, or not up, or the topic is not there yet: the next one.
                    Err(_) => {
                        next += 1;
                        tokio::time::sleep(Duration::from_millis(200)).await;
                    }
                }
            }
        });
    }
    samples
}

async fn read(
    addr: &str,
    partition: i32,
    offset: &mut Option<i64>,
    samples: &Samples,
    stop: &CancellationToken,
) -> anyhow::Result<()> {
    let consumer = SimpleConsumer::connect(addr, SimpleConsumerConfig::default()).await?;
    let mut at = match *offset {
        Some(at) => at,
        None => consumer.latest_offset(TOPIC, partition).await?,
    };
    *offset = Some(at);
    loop {
        let fetched = tokio::select! {
            () = stop.cancelled() => return Ok(()),
            fetched = consumer.fetch_wait(TOPIC, partition, at, 500) => fetched?,
        };
        let read_ms = service::now_ms();
        let mut seen = Vec::new();
        let mut messages = fetched.iter();
        for message in messages.by_ref() {
            let message = message?;
            if let Ok((_, header)) = EventHeader::read(&message.payload) {
                seen.push(Seen {
                    time_ms: header.time,
                    read_ms,
                    partition,
                    offset: message.offset,
                });
            }
        }
        // Past the copier's position record that ends every copy too: resuming at it, the
        // next long poll would return at once with nothing, and again.
        at = messages.next_offset();
        *offset = Some(at);
        samples.0.lock().unwrap_or_else(|p| p.into_inner()).extend(seen);
    }
}

/// Percentiles of `values` (sorted here), `None` when empty.
pub fn percentiles(values: &mut [i64], quantiles: &[f64]) -> Option<Vec<i64>> {
    if values.is_empty() {
        return None;
    }
    values.sort_unstable();
    Some(
        quantiles
            .iter()
            .map(|q| values[((values.len() - 1) as f64 * q).round() as usize])
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_of_a_sample() {
        let mut values: Vec<i64> = (1..=100).rev().collect();
        assert_eq!(percentiles(&mut values, &[0.5, 0.99, 1.0]), Some(vec![51, 99, 100]));
        assert_eq!(percentiles(&mut [], &[0.5]), None);
    }
}
