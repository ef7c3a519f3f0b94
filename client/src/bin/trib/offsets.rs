//! `trib offsets`: the earliest or latest offset of a partition, or the segment starts last
//! modified before a time — where a consumer may start.

use client::SimpleConsumer;

use crate::brokers::Brokers;
use crate::cli::OffsetsArgs;
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
