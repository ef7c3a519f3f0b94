//! Slowloris against the `schema-registry` binary: 5,000 connections hold half a request head
//! and 20 hold half a body. It goes on answering a well-behaved client; past
//! `--max-connections` the oldest held connections make way for new ones, the rest are closed
//! after `--client-timeout-ms`, and its memory stays small.

use testkit::registry::RegistryProcess;

#[test]
fn slow_http_clients_make_way_past_the_limit_and_time_out() {
    let registry = RegistryProcess::start_with_args(
        env!("CARGO_BIN_EXE_schema-registry"),
        &["--max-connections", "1024", "--client-timeout-ms", "10000"],
    );
    let addr = registry.url().trim_start_matches("http://").to_owned();
    let bodies = ("/subjects/slow-value/versions", 20);
    let siege = testkit::slow_clients::http_slowloris(
        &addr,
        registry.pid(),
        "tributary_registry",
        "/subjects",
        5_000,
        bodies,
        None,
    );
    eprintln!("{siege:?}");
    // A base, and about 32 KiB per connection (hyper's buffers and the task).
    let bound = (48 << 20) + 1024 * (32 << 10);
    assert!(siege.peak_rss < bound, "peak RSS {} above {bound}", siege.peak_rss);
}
