//! `trib produce`: each line of stdin (without its newline) becomes one message. Messages are
//! batched by the producer and acknowledged per `--acks`; the run fails on the first message
//! that could not be delivered, after the producer's retries.

use std::sync::Arc;

use anyhow::Context as _;
use client::{BrokerSource, Partitioner, Producer, ProducerConfig};
use futures::FutureExt;
use futures::stream::{FuturesUnordered, StreamExt};
use protocol::Acks;
use tokio::io::{AsyncBufReadExt, BufReader};

use crate::brokers::Brokers;
use crate::cli::ProduceArgs;
use crate::context::Context;
use crate::progress::Progress;

/// Messages accepted but not yet confirmed, at most; the producer's buffer bounds their bytes.
const PENDING_MAX: usize = 100_000;

pub async fn run(args: ProduceArgs, context: &Context, json: bool) -> anyhow::Result<()> {
    let partitioner = match (args.partition, args.any_partition, args.key_field) {
        (Some(partition), _, _) => fixed_partition(partition),
        (None, true, _) => Partitioner::Any,
        (None, false, Some(_)) => Partitioner::ByKey,
        (None, false, None) => Partitioner::Random,
    };
    let config = ProducerConfig {
        acks: args.acks,
        compression: args.compression.codec(),
        batch_messages: args.batch_messages as usize,
        linger_ms: args.linger_ms,
        idempotence: !args.no_idempotence,
        partitioner,
        tls: context.tls(),
        ..ProducerConfig::default()
    };
    if args.idempotent && args.acks == Acks::None {
        anyhow::bail!("idempotence needs acks 1 or more: with acks 0 nothing is retried");
    }
    let source = Brokers::find(&args.brokers, context).await?.source();
    if let Some(partition) = args.partition {
        require_partition(source.as_ref(), &args.topic, partition).await?;
    }
    let producer = Producer::new(config, source)?;
    let mut progress = Progress::new("produced", args.progress);
    let sent = send_lines(&producer, &args, &mut progress).await;
    producer.close().await;
    sent?;
    if json {
        let value = serde_json::json!({
            "topic": args.topic,
            "messages": progress.messages,
            "bytes": progress.bytes,
            "seconds": progress.elapsed().as_secs_f64(),
        });
        println!("{value}");
    } else if progress.messages > 0 {
        eprintln!("trib: {} to {}", progress.summary(), args.topic);
    }
    Ok(())
}

async fn send_lines(
    producer: &Producer,
    args: &ProduceArgs,
    progress: &mut Progress,
) -> anyhow::Result<()> {
    let mut stdin = BufReader::with_capacity(256 << 10, tokio::io::stdin());
    let mut line = Vec::new();
    let mut inflight = FuturesUnordered::new();
    loop {
        line.clear();
        if stdin.read_until(b'\n', &mut line).await.context("cannot read stdin")? == 0 {
            break;
        }
        let payload = trim_newline(&line);
        let key = args.key_field.and_then(|n| field(payload, args.field_delimiter, n));
        let bytes = payload.len();
        let accepted = producer.enqueue(&args.topic, key, payload).await?;
        inflight.push(accepted.map(move |delivered| delivered.map(|_| bytes)));
        // Count what is already acknowledged; wait only when too much is outstanding.
        while let Some(Some(delivered)) = inflight.next().now_or_never() {
            progress.add(delivered?);
        }
        if inflight.len() > PENDING_MAX
            && let Some(delivered) = inflight.next().await
        {
            progress.add(delivered?);
        }
    }
    producer.flush().await;
    while let Some(delivered) = inflight.next().await {
        progress.add(delivered?);
    }
    Ok(())
}

fn trim_newline(line: &[u8]) -> &[u8] {
    let line = line.strip_suffix(b"\n").unwrap_or(line);
    line.strip_suffix(b"\r").unwrap_or(line)
}

/// Field `n` (1-based) of `line`; `None` when the line has fewer fields.
fn field(line: &[u8], delimiter: u8, n: u32) -> Option<&[u8]> {
    line.split(|b| *b == delimiter).nth(n as usize - 1)
}

/// Fails unless `topic` has `partition` with a live leader: a fixed partition of a topic the
/// cluster does not have yet cannot be routed (a produce without `--partition` creates it).
async fn require_partition(
    source: &dyn BrokerSource,
    topic: &str,
    partition: i32,
) -> anyhow::Result<()> {
    let layout = source.topic_layout(topic).await?;
    if !layout.known {
        anyhow::bail!(
            "topic {topic} does not exist: create it with `trib topics create`, \
             or produce without --partition (the first produce creates it)"
        );
    }
    if !layout.partitions.iter().any(|p| p.partition == partition) {
        let mut have: Vec<i32> = layout.partitions.iter().map(|p| p.partition).collect();
        have.sort_unstable();
        anyhow::bail!(
            "topic {topic} has no partition {partition} with a live leader (partitions led now: {have:?})"
        );
    }
    Ok(())
}

/// Every message to `partition`, on the first broker that has it.
fn fixed_partition(partition: i32) -> Partitioner {
    Partitioner::Custom(Arc::new(move |_, _, partitions| {
        partitions.iter().position(|p| p.partition == partition).unwrap_or(partitions.len())
    }))
}
