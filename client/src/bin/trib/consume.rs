//! `trib consume`: prints one partition's messages from an offset, one payload per line (or
//! one JSON object per line with `--json`), until the end of the log, `--max-messages`, or —
//! with `--follow` — until interrupted.

use std::io::Write;
use std::time::Duration;

use client::{SimpleConsumer, SimpleConsumerConfig};

use crate::cli::{ConsumeArgs, Start};
use crate::progress::Progress;

pub async fn run(args: ConsumeArgs, json: bool) -> anyhow::Result<()> {
    let conn = args.brokers.brokers().connect_for(&args.topic, args.partition).await?;
    let config =
        SimpleConsumerConfig { fetch_bytes: args.fetch_bytes, ..SimpleConsumerConfig::default() };
    let consumer = SimpleConsumer::with_connection(conn, config)?;
    let (topic, partition) = (args.topic.as_str(), args.partition);
    let mut offset = match args.offset {
        Start::Offset(offset) => offset,
        Start::Earliest => consumer.earliest_offset(topic, partition).await?,
        Start::Latest => consumer.latest_offset(topic, partition).await?,
    };
    let limit = args.max_messages.unwrap_or(u64::MAX);
    let mut progress = Progress::new("consumed", args.progress);
    let mut out = std::io::BufWriter::with_capacity(64 << 10, std::io::stdout().lock());
    while progress.messages < limit {
        let fetched = consumer.fetch(topic, partition, offset).await?;
        let mut messages = fetched.iter();
        for message in messages.by_ref() {
            let message = message?;
            let written = if json {
                let value = serde_json::json!({
                    "offset": message.offset,
                    "next_offset": message.next_offset,
                    "payload": String::from_utf8_lossy(&message.payload),
                });
                writeln!(out, "{value}")
            } else {
                out.write_all(&message.payload).and_then(|()| out.write_all(b"\n"))
            };
            if !printed(written)? {
                return Ok(());
            }
            offset = message.next_offset;
            progress.add(message.payload.len());
            if progress.messages >= limit {
                break;
            }
        }
        if progress.messages < limit {
            offset = offset.max(messages.next_offset());
        }
        if !printed(out.flush())? {
            return Ok(());
        }
        if fetched.is_empty() {
            if !args.follow {
                break;
            }
            tokio::time::sleep(Duration::from_millis(args.poll_ms)).await;
        }
    }
    if progress.messages > 0 && args.progress {
        eprintln!("trib: {}", progress.summary());
    }
    Ok(())
}

/// `Ok(false)` when stdout was closed (`trib consume … | head`): stop quietly.
fn printed(result: std::io::Result<()>) -> anyhow::Result<bool> {
    match result {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(false),
        Err(e) => Err(anyhow::Error::new(e).context("cannot write to stdout")),
    }
}
