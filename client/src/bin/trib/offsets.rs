//! `trib offsets`: the earliest or latest offset of a partition, or the segment starts last
//! modified before a time — where a consumer may start.

use client::SimpleConsumer;

use crate::cli::OffsetsArgs;

pub async fn run(args: OffsetsArgs, json: bool) -> anyhow::Result<()> {
    let conn = args.brokers.brokers().await?.connect_for(&args.topic, args.partition).await?;
    let consumer = SimpleConsumer::with_connection(conn, crate::tls::consumer_config())?;
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
