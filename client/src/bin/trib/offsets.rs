//! `trib offsets`: the earliest or latest offset of a partition, or the segment starts last
//! modified before a time — where a consumer may start. `trib delete-records`: moves where a
//! partition starts.

use client::SimpleConsumer;
use protocol::ErrorCode;

use crate::Refused;
use crate::brokers::Brokers;
use crate::cli::{DeleteRecordsArgs, OffsetsArgs};
use crate::context::Context;

pub async fn run(args: OffsetsArgs, context: &Context, json: bool) -> anyhow::Result<()> {
    let brokers = Brokers::find(&args.brokers, context).await?;
    let conn = brokers.connect_for(&args.topic, args.partition).await?;
    let consumer = SimpleConsumer::with_connection(conn, context.consumer_config())?;
    let offsets = consumer.offsets(&args.topic, args.partition, args.time, args.max).await?;
    if json {
        let value = serde_json::json!({
            "topic": args.topic,
            "partition": args.partition,
            "offsets": offsets,
        });
        println!("{value}");
    } else {
        offsets.iter().for_each(|offset| println!("{offset}"));
    }
    Ok(())
}

pub async fn delete_records(
    args: DeleteRecordsArgs,
    context: &Context,
    json: bool,
) -> anyhow::Result<()> {
    let brokers = Brokers::find(&args.brokers, context).await?;
    let conn = brokers.connect_for(&args.topic, args.partition).await?;
    let (topic, partition, before) = (&args.topic, args.partition, args.before);
    let log_start = match conn.delete_records(topic, partition, before).await {
        Ok(start) => start,
        Err(e) => {
            let refusal = match e.code() {
                Some(ErrorCode::OffsetOutOfRange) => "is past the high watermark",
                Some(ErrorCode::InvalidRequest) => "is not the offset of a message",
                _ => return Err(anyhow::Error::new(e).context(delete_failed(topic, partition))),
            };
            return Err(Refused(format!(
                "{topic}-{partition}: cannot delete records before {before}: the offset {refusal}"
            ))
            .into());
        }
    };
    if json {
        let value = serde_json::json!({
            "topic": topic,
            "partition": partition,
            "log_start": log_start,
        });
        println!("{value}");
    } else {
        println!("{topic}-{partition} starts at offset {log_start}");
    }
    Ok(())
}

fn delete_failed(topic: &str, partition: i32) -> String {
    format!("cannot delete records of {topic}-{partition}")
}
