//! Starts a broker on its defaults (127.0.0.1:6667, data in /tmp/tributary-logs), shows a
//! produce → fetch round trip over TCP, and keeps serving until Ctrl-C.
//!
//! `cargo run --release -p broker --example quickstart`

use anyhow::Context;
use broker::BrokerConfig;
use protocol::{Acks, Codec, MessageSetIter, OFFSETS_EARLIEST, OFFSETS_LATEST};

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .init();
    let config = BrokerConfig::default();
    let addr = config.listen_addr();
    let data_dir = config.data_dir.clone();
    let listener = tokio::net::TcpListener::bind(&addr)
        .await
        .with_context(|| format!("cannot listen on {addr} (is a broker already running?)"))?;
    let broker = broker::Broker::open(config).await?;
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(broker::serve(listener, broker, async {
        let _ = stopped.await;
    }));
    println!("broker listening on {addr}, data in {}", data_dir.display());

    let conn = client::Connection::connect(&addr).await?;
    let mut set = bytes::BytesMut::new();
    for event in ["page view /home", "page view /jobs", "search 'rust'"] {
        protocol::encode_message(&mut set, Codec::None, event.as_bytes());
    }
    let ack = conn
        .produce("quickstart", 0, Acks::Flushed, set.freeze())
        .await?
        .context("acks 2 is always answered")?;
    println!("produced 3 messages to quickstart-0 at offset {} (acks 2: on disk)", ack.offset);
    let fetched = conn.fetch("quickstart", 0, ack.offset, 1 << 20).await?;
    for message in MessageSetIter::new(&fetched, ack.offset) {
        let (offset, message) = message?;
        println!("  offset {offset:>6}: {}", String::from_utf8_lossy(message.payload));
    }
    let earliest = conn.offsets("quickstart", 0, OFFSETS_EARLIEST, 1).await?;
    let latest = conn.offsets("quickstart", 0, OFFSETS_LATEST, 1).await?;
    println!("quickstart-0 holds offsets {} to {} (run again: it appends)", earliest[0], latest[0]);
    drop(conn);

    println!("broker still serving on {addr}; Ctrl-C to stop");
    tokio::signal::ctrl_c().await?;
    let _ = stop.send(());
    server.await??;
    println!("stopped; every partition flushed");
    Ok(())
}
