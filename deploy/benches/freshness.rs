//! Pipeline freshness (issue 13): how long after the frontend agent accepts an event it is
//! visible in the analytics cluster — agent → live broker → mirror → analytics broker, each
//! the library its binary runs, on loopback — at a steady offered rate, for both visibility
//! policies. Latency is `now − header.time` when a long-polling consumer of the analytics
//! cluster reads the event (the agent stamps `header.time` when it accepts the event).
//!
//! `cargo bench -p deploy --bench freshness [-- --rate N --seconds S]`

use std::sync::Arc;
use std::time::{Duration, Instant};

use broker::VisibleAfter;
use client::{SimpleConsumer, SimpleConsumerConfig};
use deploy::demo::cluster::{Cluster, ClusterSpec, session};
use events::envelope::EventHeader;
use serde_json::json;
use tokio_util::sync::CancellationToken;

const TOPIC: &str = "page-view";
/// Events per agent call; the offered rate is spread evenly over calls.
const EVENTS_PER_CALL: u64 = 10;

struct Args {
    rate: u64,
    seconds: u64,
}

fn args() -> Args {
    let mut args = Args { rate: 10_000, seconds: 10 };
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        let mut value = || it.next().and_then(|v| v.parse().ok());
        match arg.as_str() {
            "--rate" => args.rate = value().expect("--rate N"),
            "--seconds" => args.seconds = value().expect("--seconds S"),
            _ => {} // cargo bench passes --bench
        }
    }
    args
}

#[tokio::main(flavor = "multi_thread")]
async fn main() {
    let args = args();
    println!(
        "pipeline freshness: agent accept → visible in analytics, {} events/s for {} s",
        args.rate, args.seconds
    );
    println!("| visible_after | events | p50 ms | p99 ms | max ms |");
    println!("|---|---:|---:|---:|---:|");
    for policy in [VisibleAfter::Flush, VisibleAfter::Write] {
        let mut latencies = run(policy, &args).await;
        latencies.sort_unstable();
        let at = |q: f64| latencies[((latencies.len() - 1) as f64 * q) as usize];
        println!(
            "| {policy:?} | {} | {} | {} | {} |",
            latencies.len(),
            at(0.5),
            at(0.99),
            latencies.last().unwrap()
        );
    }
}

async fn run(policy: VisibleAfter, args: &Args) -> Vec<i64> {
    let dir = tempfile::tempdir().unwrap();
    let registry = deploy::demo::registry::Registry::start(&dir.path().join("registry"))
        .await
        .expect("registry");
    let registry_client = Arc::new(registry.client().unwrap());
    let embedded = cluster::Embedded::new();
    let spec = |name| ClusterSpec { visible_after: policy, ..ClusterSpec::new(name, 1, 1) };
    let live = Cluster::start(&embedded, &spec("live"), dir.path()).await.unwrap();
    let analytics = Cluster::start(&embedded, &spec("analytics"), dir.path()).await.unwrap();

    let agent = frontend_agent::Agent::start(
        frontend_agent::Config {
            registry: registry.url.clone(),
            brokers: live.addrs.clone(),
            spool_dir: dir.path().join("spool"),
            linger_ms: 1,
            ..frontend_agent::Config::default()
        },
        frontend_agent::Brokers::Cluster(session(&embedded, &live.chroot).unwrap()),
        Arc::clone(&registry_client),
    )
    .await
    .unwrap();
    let mirror = mirror::Mirror::start(
        mirror::Config { partitions: 1, ..mirror::Config::default() },
        vec![("live".into(), session(&embedded, &live.chroot).unwrap())],
        session(&embedded, &analytics.chroot).unwrap(),
        None,
    )
    .await
    .unwrap();

    // The reader on the analytics side: long polls from the start of the mirrored topic.
    let stop = CancellationToken::new();
    let reader = tokio::spawn({
        let addr = analytics.addrs[0].clone();
        let stop = stop.clone();
        async move {
            let consumer =
                SimpleConsumer::connect(&addr, SimpleConsumerConfig::default()).await.unwrap();
            let mut offset = 0;
            let mut latencies = Vec::new();
            while !stop.is_cancelled() {
                let Ok(fetched) = consumer.fetch_wait(TOPIC, 0, offset, 100).await else {
                    // The mirror has not created the topic yet.
                    tokio::time::sleep(Duration::from_millis(5)).await;
                    continue;
                };
                let read_ms = service::now_ms();
                let mut messages = fetched.iter();
                for message in messages.by_ref() {
                    let message = message.unwrap();
                    let (_, header) = EventHeader::read(&message.payload).unwrap();
                    latencies.push(read_ms - header.time);
                }
                // Past the copier's position records too.
                offset = messages.next_offset();
            }
            latencies
        }
    });

    // The frontend: `rate` events/s in calls of EVENTS_PER_CALL, the agent stamps the time.
    let calls = args.rate * args.seconds / EVENTS_PER_CALL;
    let interval = Duration::from_secs_f64(EVENTS_PER_CALL as f64 / args.rate as f64);
    let started = Instant::now();
    for call in 0..calls {
        let due = started + interval * call as u32;
        tokio::time::sleep_until(due.into()).await;
        let events: Vec<_> = (0..EVENTS_PER_CALL)
            .map(|n| {
                json!({"member_id": n, "page_key": "feed", "url": "/feed", "referrer": null,
                       "duration_ms": 3})
            })
            .collect();
        agent.send_batch(TOPIC, &events).await.unwrap();
    }
    let sent = calls * EVENTS_PER_CALL;
    let deadline = Instant::now() + Duration::from_secs(30);
    while mirror.totals().events() < sent && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    stop.cancel();
    let latencies = reader.await.unwrap();
    mirror.shutdown().await.unwrap();
    agent.shutdown().await.unwrap();
    live.stop().await;
    analytics.stop().await;
    registry.stop().await;
    latencies
}
