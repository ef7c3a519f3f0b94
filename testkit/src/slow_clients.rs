//! Clients that hold a server's resources and give nothing back, for the tests that show each
//! server bounds them: connections that send half a request and stop, opened from a few
//! threads so that thousands are open before the first times out.

use std::io::Write;
use std::net::TcpStream;
use std::time::{Duration, Instant};

use crate::metrics::{parse, value};
use crate::process::peak_rss;

/// Threads opening connections.
const OPENERS: usize = 4;

/// Opens `count` connections to `addr`, sends the `i`th `first_bytes(i)` and keeps those
/// whose bytes were taken. Connections the server refused are left out.
pub fn hold(
    addr: &str,
    count: usize,
    first_bytes: impl Fn(usize) -> Vec<u8> + Sync,
) -> Vec<TcpStream> {
    let first_bytes = &first_bytes;
    std::thread::scope(|scope| {
        let openers: Vec<_> = (0..OPENERS)
            .map(|opener| {
                scope.spawn(move || {
                    let mut held = Vec::new();
                    for i in (opener..count).step_by(OPENERS) {
                        let Ok(mut stream) = TcpStream::connect(addr) else { continue };
                        if stream.write_all(&first_bytes(i)).is_ok() {
                            held.push(stream);
                        }
                    }
                    held
                })
            })
            .collect();
        openers.into_iter().flat_map(|opener| opener.join().expect("opener")).collect()
    })
}

/// The `p`th percentile of sorted `latencies`.
pub fn percentile(latencies: &[Duration], p: usize) -> Duration {
    latencies[(latencies.len() * p / 100).min(latencies.len() - 1)]
}

/// What [`http_slowloris`] saw.
#[derive(Debug)]
pub struct Siege {
    pub held: usize,
    pub idle_p50: Duration,
    pub idle_p99: Duration,
    pub loaded_p50: Duration,
    pub loaded_p99: Duration,
    pub peak_rss: u64,
    pub refused: f64,
    pub evicted: f64,
    pub timed_out: f64,
}

/// Slowloris against the HTTP server at `addr` (process `pid`, `/metrics` on the same port,
/// metric names under `prefix`). A well-behaved keep-alive client GETs `get_path` before and
/// while `heads` connections hold half a request head and `bodies` connections hold a POST
/// to `post_path` with a head and four bytes of its 1000-byte body. The client must be served
/// throughout — and, given `well_behaved_post` (a path and a JSON body), its POST accepted
/// while the slow bodies are held; past `max_connections`, held connections make way for new
/// ones; the rest are closed within `client_timeout` (plus a margin); then new clients are
/// served again.
pub fn http_slowloris(
    addr: &str,
    pid: u32,
    prefix: &str,
    get_path: &str,
    heads: usize,
    (post_path, bodies): (&str, usize),
    well_behaved_post: Option<(&str, &str)>,
) -> Siege {
    service::tls::install_crypto_provider();
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(10))
        .pool_max_idle_per_host(1)
        .build()
        .expect("client");
    // Over the client's kept-alive connection: a new one may be refused while the server is full.
    let get = |path: &str| {
        let (client, url) = (client.clone(), format!("http://{addr}{path}"));
        runtime.block_on(async move {
            let started = Instant::now();
            let response = client.get(&url).send().await.expect("the client is served");
            assert!(response.status().is_success(), "{url}: {}", response.status());
            let body = response.text().await.expect("a whole body");
            (started.elapsed(), body)
        })
    };
    let metric = |name: &str| value(&parse(&get("/metrics").1), &format!("{prefix}_{name}"), &[]);
    let latencies = || {
        let mut latencies: Vec<Duration> = (0..200).map(|_| get(get_path).0).collect();
        latencies.sort();
        latencies
    };
    let idle = latencies();
    let slow_body = format!(
        "POST {post_path} HTTP/1.1\r\nHost: slow\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n[{{\"a"
    );
    // The slow bodies last, so that they are among the connections still held.
    let held = hold(addr, heads + bodies, |i| {
        if i >= heads {
            slow_body.as_bytes().to_vec()
        } else {
            b"GET /metrics HTTP/1.1\r\nHost: slowloris\r\nX-Wait: ".to_vec()
        }
    });
    let loaded = latencies();
    if let Some((path, body)) = well_behaved_post {
        let (client, url, body) = (client.clone(), format!("http://{addr}{path}"), body.to_owned());
        let status = runtime.block_on(async move {
            let request = client.post(&url).header("content-type", "application/json").body(body);
            request.send().await.expect("the client is served").status()
        });
        assert!(status.is_success(), "a well-behaved POST while bodies trickle: {status}");
    }
    let siege = Siege {
        held: held.len(),
        idle_p50: percentile(&idle, 50),
        idle_p99: percentile(&idle, 99),
        loaded_p50: percentile(&loaded, 50),
        loaded_p99: percentile(&loaded, 99),
        peak_rss: peak_rss(pid),
        refused: metric("http_connections_refused_total"),
        evicted: metric("http_connections_evicted_total"),
        timed_out: 0.0,
    };
    assert!(siege.evicted > 0.0, "past max_connections, held connections make way: {siege:?}");
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        // The client's own connection stays.
        let open = metric("http_connections_open");
        if open <= 1.0 {
            break;
        }
        assert!(Instant::now() < deadline, "{open} connections still open after 60 s");
        std::thread::sleep(Duration::from_millis(200));
    }
    let timed_out = metric("http_clients_timed_out_total");
    let (refused, evicted) =
        (metric("http_connections_refused_total"), metric("http_connections_evicted_total"));
    let closed = refused + evicted + timed_out;
    assert!(closed >= siege.held as f64, "every held connection was closed: {closed}");
    drop(held);
    let fresh = reqwest::Client::new();
    let url = format!("http://{addr}{get_path}");
    let served = runtime.block_on(async { fresh.get(&url).send().await.map(|r| r.status()) });
    assert!(served.as_ref().is_ok_and(|s| s.is_success()), "a new client is served: {served:?}");
    Siege { timed_out, refused, evicted, ..siege }
}
