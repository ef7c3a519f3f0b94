//! Events per second through the agent, with the durable spool, into a real broker:
//!
//! - library: `Agent::send_batch` from concurrent callers, batches of 1000 events;
//! - HTTP: `POST /v1/events/page-view` with newline-delimited JSON, 1000 events per request,
//!   from concurrent clients over loopback.
//!
//! Each reports the rate at which events were accepted (durably spooled) and the rate until
//! the last one was acknowledged by the broker, and the events per CPU-second of the agent's
//! side of the process: the broker runs on a runtime of its own whose threads are named
//! `bench-broker`, and their CPU time (from `/proc/self/task`) is taken out of the process's.
//!
//! `cargo bench -p frontend-agent --bench throughput [-- --events N --callers C]`

use std::sync::Arc;
use std::time::{Duration, Instant};

use frontend_agent::{Agent, Brokers, Config, serve_http};
use schema_registry::RegistryClient;
use serde_json::{Value, json};
use testkit::broker::TestBroker;
use testkit::registry::TestRegistry;

const BATCH_EVENTS: usize = 1_000;

fn arg(name: &str, default: usize) -> usize {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn events() -> Vec<Value> {
    const PAGES: [&str; 3] = ["feed", "profile", "jobs"];
    (0..BATCH_EVENTS)
        .map(|i| {
            json!({
                "member_id": i * 7919 % 100_000,
                "page_key": PAGES[i % 3],
                "url": format!("https://example.com/page/{}", i % 97),
                "referrer": null,
                "duration_ms": (i % 400) as i32,
            })
        })
        .collect()
}

async fn start_agent(registry: &str, broker: &str, spool: &std::path::Path) -> Agent {
    let config = Config {
        registry: registry.to_owned(),
        brokers: vec![broker.to_owned()],
        spool_dir: spool.to_owned(),
        spool_max_bytes: 4 << 30,
        host_name: Some("bench".to_owned()),
        drain_timeout_ms: 120_000,
        ..Config::default()
    };
    let client = Arc::new(RegistryClient::new(registry).unwrap());
    Agent::start(config, Brokers::Addrs(vec![broker.to_owned()]), client).await.unwrap()
}

const BROKER_THREADS: &str = "bench-broker";

/// CPU seconds (user + system) of the whole process, and of its `bench-broker` threads.
fn cpu_seconds() -> (f64, f64) {
    // Fields after the parenthesised command name: utime and stime are the 12th and 13th.
    fn ticks(stat: &str) -> Option<u64> {
        let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
        Some(fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?)
    }
    // `/proc` counts in USER_HZ, which Linux fixes at 100 for user space.
    let per_second = 100.0;
    let process = std::fs::read_to_string("/proc/self/stat").ok().and_then(|s| ticks(&s));
    let mut broker = 0;
    for task in std::fs::read_dir("/proc/self/task").into_iter().flatten().flatten() {
        let comm = std::fs::read_to_string(task.path().join("comm")).unwrap_or_default();
        if comm.trim() == BROKER_THREADS {
            let stat = std::fs::read_to_string(task.path().join("stat")).unwrap_or_default();
            broker += ticks(&stat).unwrap_or(0);
        }
    }
    (process.unwrap_or(0) as f64 / per_second, broker as f64 / per_second)
}

/// CPU seconds of the agent's side (everything but the broker's threads) since `since`.
fn agent_cpu_since(since: (f64, f64)) -> f64 {
    let now = cpu_seconds();
    (now.0 - since.0) - (now.1 - since.1)
}

/// Waits until `agent` acknowledged `total` events.
async fn wait_acknowledged(agent: &Agent, total: u64) {
    while agent.acknowledged() < total {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

fn report(path: &str, total: u64, accepted_in: Duration, acknowledged_in: Duration, cpu: f64) {
    println!(
        "{path:8} {total} events: accepted {:>9.0} events/s ({:.2} s), acknowledged {:>9.0} events/s ({:.2} s); agent side {cpu:.2} CPU-s = {:>9.0} events per CPU-second",
        total as f64 / accepted_in.as_secs_f64(),
        accepted_in.as_secs_f64(),
        total as f64 / acknowledged_in.as_secs_f64(),
        acknowledged_in.as_secs_f64(),
        total as f64 / cpu,
    );
}

fn main() {
    let total_events = arg("--events", 1_000_000);
    let callers = arg("--callers", 4);
    let batches = total_events / BATCH_EVENTS;
    let total = (batches * BATCH_EVENTS) as u64;
    let broker_runtime = tokio::runtime::Builder::new_multi_thread()
        .thread_name(BROKER_THREADS)
        .enable_all()
        .build()
        .unwrap();
    let broker = broker_runtime.block_on(TestBroker::start_with(|c| {
        c.flush_ms = 1_000;
        c.flush_messages = 1_000_000;
    }));
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let registry = TestRegistry::start().await;
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        println!("{cores} cores; broker (own runtime), registry, agent and callers in one process; batches of {BATCH_EVENTS}");

        // Library path.
        let spool = tempfile::tempdir().unwrap();
        let agent = start_agent(registry.url(), &broker.addr, spool.path()).await;
        let batch = Arc::new(events());
        agent.send_batch("page-view", &batch).await.unwrap(); // schema lookup, topic creation
        wait_acknowledged(&agent, BATCH_EVENTS as u64).await;
        let (start, cpu) = (Instant::now(), cpu_seconds());
        let tasks: Vec<_> = (0..callers)
            .map(|c| {
                let (agent, batch) = (agent.clone(), Arc::clone(&batch));
                tokio::spawn(async move {
                    for _ in (c..batches).step_by(callers) {
                        agent.send_batch("page-view", &batch).await.unwrap();
                    }
                })
            })
            .collect();
        for task in tasks {
            task.await.unwrap();
        }
        let accepted_in = start.elapsed();
        wait_acknowledged(&agent, total + BATCH_EVENTS as u64).await;
        report("library", total, accepted_in, start.elapsed(), agent_cpu_since(cpu));
        agent.shutdown().await.unwrap();

        // HTTP path.
        let spool = tempfile::tempdir().unwrap();
        let agent = start_agent(registry.url(), &broker.addr, spool.path()).await;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/v1/events/page-view", listener.local_addr().unwrap());
        let stop = tokio_util::sync::CancellationToken::new();
        tokio::spawn(serve_http(listener, agent.clone(), stop.clone()));
        let mut body = Vec::new();
        for event in events() {
            serde_json::to_writer(&mut body, &event).unwrap();
            body.push(b'\n');
        }
        let body = bytes::Bytes::from(body);
        let http = testkit::http_client();
        let post = |http: reqwest::Client, body: bytes::Bytes, url: String| async move {
            let r = http
                .post(url)
                .header("content-type", "application/x-ndjson")
                .body(body)
                .send()
                .await
                .unwrap();
            assert_eq!(r.status(), 200);
        };
        post(http.clone(), body.clone(), url.clone()).await;
        wait_acknowledged(&agent, BATCH_EVENTS as u64).await;
        let (start, cpu) = (Instant::now(), cpu_seconds());
        let tasks: Vec<_> = (0..callers)
            .map(|c| {
                let (http, body, url) = (http.clone(), body.clone(), url.clone());
                tokio::spawn(async move {
                    for _ in (c..batches).step_by(callers) {
                        post(http.clone(), body.clone(), url.clone()).await;
                    }
                })
            })
            .collect();
        for task in tasks {
            task.await.unwrap();
        }
        let accepted_in = start.elapsed();
        wait_acknowledged(&agent, total + BATCH_EVENTS as u64).await;
        report("http", total, accepted_in, start.elapsed(), agent_cpu_since(cpu));
        stop.cancel();
        agent.shutdown().await.unwrap();
    });
    drop(broker);
    drop(broker_runtime);
}
