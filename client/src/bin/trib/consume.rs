//! `trib consume`: prints one partition's messages from an offset, one payload per line (or
//! one JSON object per line with `--json`), until the end of the log, `--max-messages`, or —
//! with `--follow` — until interrupted.

use std::io::Write;
use std::time::Duration;

use std::collections::BTreeMap;

use client::{
    GroupConsumer, GroupConsumerConfig, OffsetReset, SimpleConsumer, SimpleConsumerConfig,
};
use futures::StreamExt;

use crate::brokers::Brokers;
use crate::cli::{ConsumeArgs, Start};
use crate::context::Context;
use crate::progress::Progress;

pub async fn run(args: ConsumeArgs, context: &Context, json: bool) -> anyhow::Result<()> {
    let brokers = Brokers::find(&args.brokers, context).await?;
    if let Some(group) = &args.group {
        return run_group(&args, &brokers, context, group, json).await;
    }
    let conn = brokers.connect_for(&args.topic, args.partition).await?;
    let config = SimpleConsumerConfig {
        fetch_bytes: args.fetch_bytes,
        read_committed: args.read_committed,
        ..context.consumer_config()
    };
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
        // Following, each fetch at the end of the log is a long poll: answered as soon as a
        // message is visible, and costing nothing while none comes.
        let fetched = if args.follow {
            consumer.fetch_wait(topic, partition, offset, args.poll_ms).await?
        } else {
            consumer.fetch(topic, partition, offset).await?
        };
        let mut messages = fetched.iter();
        for message in messages.by_ref() {
            let message = message?;
            let written = write_message(
                &mut out,
                json,
                None,
                message.offset,
                message.next_offset,
                &message.payload,
            );
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
        if fetched.is_empty() && !args.follow {
            break;
        }
        if fetched.is_empty() && args.read_committed {
            // Held at an open transaction, whose records are visible already (the long poll
            // answers at once): wait for its end without asking all the time.
            tokio::time::sleep(std::time::Duration::from_millis(args.poll_ms.min(100).into()))
                .await;
        }
    }
    if progress.messages > 0 && args.progress {
        eprintln!("trib: {}", progress.summary());
    }
    Ok(())
}

/// One message: its payload and a newline, or with `--json` one object per line (with the
/// group's `broker-partition` name when consuming as a group).
fn write_message(
    out: &mut impl Write,
    json: bool,
    partition: Option<String>,
    offset: i64,
    next_offset: i64,
    payload: &[u8],
) -> std::io::Result<()> {
    if !json {
        return out.write_all(payload).and_then(|()| out.write_all(b"\n"));
    }
    let mut value = serde_json::json!({
        "offset": offset,
        "next_offset": next_offset,
        "payload": String::from_utf8_lossy(payload),
    });
    if let Some(partition) = partition {
        value["partition"] = partition.into();
    }
    writeln!(out, "{value}")
}

/// `Ok(false)` when stdout was closed (`trib consume … | head`): stop quietly.
fn printed(result: std::io::Result<()>) -> anyhow::Result<bool> {
    match result {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(false),
        Err(e) => Err(anyhow::Error::new(e).context("cannot write to stdout")),
    }
}

/// Consumes `args.topic` as a member of `group`: prints what the rebalance gives this member
/// until `--max-messages`, `--idle-ms` without a message (unless `--follow`), or SIGINT/SIGTERM;
/// then commits, releases its partitions and leaves the group.
async fn run_group(
    args: &ConsumeArgs,
    brokers: &Brokers,
    context: &Context,
    group: &str,
    json: bool,
) -> anyhow::Result<()> {
    let registry = brokers.registry()?.clone();
    let mut config = GroupConsumerConfig::new(group);
    config.auto_commit_ms = args.auto_commit_ms;
    config.auto_offset_reset = if args.auto_offset_reset == "largest" {
        OffsetReset::Largest
    } else {
        OffsetReset::Smallest
    };
    config.fetch.fetch_bytes = args.fetch_bytes;
    config.fetch.tls = context.tls();
    let consumer = GroupConsumer::connect(registry, config)?;
    let mut streams =
        consumer.create_message_streams(&BTreeMap::from([(args.topic.clone(), 1)])).await?;
    let mut messages = futures::stream::select_all(streams.remove(&args.topic).unwrap_or_default());
    let limit = args.max_messages.unwrap_or(u64::MAX);
    let mut progress = Progress::new("consumed", args.progress);
    let mut out = std::io::BufWriter::with_capacity(64 << 10, std::io::stdout().lock());
    let idle = Duration::from_millis(args.idle_ms);
    let stop = service::shutdown::on_signal()?;
    let outcome = loop {
        if progress.messages >= limit {
            break Ok(());
        }
        let next = async {
            if args.follow {
                Some(messages.next().await)
            } else {
                tokio::time::timeout(idle, messages.next()).await.ok()
            }
        };
        let message = tokio::select! {
            () = stop.cancelled() => break Ok(()),
            next = next => match next {
                None | Some(None) => break Ok(()), // idle, or the consumer closed
                Some(Some(message)) => message,
            },
        };
        let message = match message {
            Ok(message) => message,
            Err(e) => break Err(anyhow::Error::new(e)),
        };
        let partition = Some(message.partition.to_string());
        let written = write_message(
            &mut out,
            json,
            partition,
            message.offset,
            message.next_offset,
            &message.payload,
        );
        // Flushed per message: a reader of the output sees each message as it is consumed.
        match printed(written.and_then(|()| out.flush())) {
            Ok(true) => progress.add(message.payload.len()),
            Ok(false) => break Ok(()),
            Err(e) => break Err(e),
        }
    };
    drop(messages);
    consumer.close().await?;
    if progress.messages > 0 && args.progress {
        eprintln!("trib: {}", progress.summary());
    }
    outcome
}
