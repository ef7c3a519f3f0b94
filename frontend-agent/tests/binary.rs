//! The `frontend-agent` binary as a user starts it: every flag, `--config`, bad input,
//! SIGTERM, `kill -9` mid-stream, and the simulator.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use events::audit::{AUDIT_TOPIC, AuditRecord};
use events::envelope::EventHeader;
use nix::sys::signal::Signal;
use schema_registry::RegistryClient;
use testkit::agent::DEADLINE;
use testkit::broker::{TestBroker, read_all, read_all_with};
use testkit::events::{page_view_json, wait_for_ids};
use testkit::process::{Process, free_port, peak_rss};
use testkit::registry::TestRegistry;
use testkit::zookeeper::ZooKeeperServer;
use tokio_util::sync::CancellationToken;

const BINARY: &str = env!("CARGO_BIN_EXE_frontend-agent");

/// Starts `frontend-agent` with `args` and waits until `port` accepts connections.
async fn spawn(args: Vec<String>, port: u16, log: PathBuf) -> Process {
    tokio::task::spawn_blocking(move || Process::spawn(Path::new(BINARY), &args, port, &log))
        .await
        .unwrap()
}

fn args(list: &[&str]) -> Vec<String> {
    list.iter().map(|s| (*s).to_owned()).collect()
}

/// Posts batches of 50 page views with fresh ids until `stop`; returns the accepted ids.
fn keep_posting(url: String, stop: CancellationToken) -> tokio::task::JoinHandle<Vec<i64>> {
    tokio::spawn(async move {
        let http = testkit::http_client();
        let mut accepted = Vec::new();
        let mut n = 0;
        while !stop.is_cancelled() {
            let ids: Vec<i64> = (n..n + 50).collect();
            n += 50;
            let body: Vec<_> = ids.iter().map(|&i| page_view_json(i)).collect();
            match http.post(&url).json(&body).send().await {
                Ok(r) if r.status() == 200 => accepted.extend(ids),
                _ => tokio::time::sleep(Duration::from_millis(50)).await,
            }
        }
        accepted
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_with_sigkill_mid_stream_and_restarted_it_loses_nothing_accepted() {
    let broker = TestBroker::start().await;
    let registry = TestRegistry::start().await;
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("agent.toml");
    std::fs::write(
        &config,
        format!(
            "registry = \"{}\"\nbrokers = [\"{}\"]\nspool_dir = \"{}\"\nservice = \"from-file\"\naudit_publish_ms = 200\n",
            registry.url(),
            broker.addr,
            dir.path().join("spool").display()
        ),
    )
    .unwrap();
    let port = free_port();
    let serve = args(&[
        "serve",
        "--config",
        config.to_str().unwrap(),
        "--http",
        &format!("127.0.0.1:{port}"),
        "--host-name",
        "web-7",
        "--acks",
        "2",
        "--compression",
        "zstd",
        "--audit-window-ms",
        "60000",
        "--audit-publish-ms",
        "300",
    ]);
    let mut agent = spawn(serve.clone(), port, dir.path().join("1.log")).await;
    let stop = CancellationToken::new();
    let poster = keep_posting(format!("http://127.0.0.1:{port}/v1/events/page-view"), stop.clone());
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    agent.child.kill().unwrap(); // SIGKILL
    agent.child.wait().unwrap();
    let restarted = spawn(serve, port, dir.path().join("2.log")).await;
    tokio::time::sleep(Duration::from_millis(1_000)).await;
    stop.cancel();
    let accepted = poster.await.unwrap();
    assert!(accepted.len() > 100, "{} accepted", accepted.len());
    let counts = wait_for_ids(&broker.addr, "page-view", &accepted).await;
    let duplicates: usize = counts.values().map(|c| c - 1).sum();
    println!(
        "{} accepted across kill -9, all in the broker; {duplicates} duplicates",
        accepted.len()
    );

    // The flags and the file both took effect.
    let payload = read_all(&broker.addr, "page-view").await.remove(0);
    let (_, header) = EventHeader::read(&payload).unwrap();
    assert_eq!((header.server.as_str(), header.service.as_str()), ("web-7", "from-file"));
    // --compression zstd (the default is lz4): the broker holds zstd wrappers.
    let conn = broker.connect().await;
    let mut codecs = std::collections::BTreeSet::new();
    for partition in 0..8 {
        let Ok(set) = conn.fetch("page-view", partition, 0, 1 << 20).await else { break };
        for message in protocol::MessageSetIter::new(&set, 0) {
            codecs.insert(format!("{:?}", message.unwrap().1.codec()));
        }
    }
    assert_eq!(codecs.into_iter().collect::<Vec<_>>(), ["Zstd"], "--compression zstd");
    let client = RegistryClient::new(registry.url()).unwrap();
    let schema = client.schema(client.latest("_audit-value").await.unwrap().id).await.unwrap();
    let audit = testkit::eventually(DEADLINE, "audit records", || async {
        let records = read_all(&broker.addr, AUDIT_TOPIC).await;
        (!records.is_empty()).then_some(records)
    })
    .await;
    let record = AuditRecord::decode(&audit[0], &schema).unwrap();
    assert_eq!((record.host.as_str(), record.window_ms), ("web-7", 60_000));

    restarted.signal(Signal::SIGTERM);
    let mut restarted = restarted;
    let status = tokio::task::spawn_blocking(move || restarted.wait_exit(Duration::from_secs(30)))
        .await
        .unwrap();
    assert!(status.success(), "SIGTERM is a clean exit: {status}");
}

/// Exactly once from the spool to the log: the broker is reached through a proxy that loses
/// every third produce answer after the broker appended (its advertised address, so the agent
/// sends through it), and the agent is killed -9 four times mid-stream. Every accepted event is
/// in the log once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lost_answers_and_kill_9_restarts_store_every_accepted_event_once() {
    let kills: usize = std::env::var("AGENT_KILLS").map_or(4, |k| k.parse().expect("AGENT_KILLS"));
    let proxy_port = free_port();
    let broker = TestBroker::start_with(|c| c.advertised_port = Some(proxy_port)).await;
    let upstream = broker.addr.parse().unwrap();
    let listen = std::net::SocketAddr::from(([127, 0, 0, 1], proxy_port));
    let idempotent_produce = protocol::ApiKey::IdempotentProduce as i16;
    let proxy = testkit::proxy::AckDropper::start(listen, upstream, &[idempotent_produce], 3).await;
    let registry = TestRegistry::start().await;
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let spool = dir.path().join("spool");
    let serve = args(&[
        "serve",
        "--registry",
        registry.url(),
        "--brokers",
        &proxy.addr().to_string(),
        "--http",
        &format!("127.0.0.1:{port}"),
        "--spool-dir",
        spool.to_str().unwrap(),
    ]);
    let mut agent = spawn(serve.clone(), port, dir.path().join("0.log")).await;
    let stop = CancellationToken::new();
    let poster = keep_posting(format!("http://127.0.0.1:{port}/v1/events/page-view"), stop.clone());
    for kill in 1..=kills {
        tokio::time::sleep(Duration::from_millis(700)).await;
        agent.child.kill().unwrap(); // SIGKILL
        agent.child.wait().unwrap();
        agent = spawn(serve.clone(), port, dir.path().join(format!("{kill}.log"))).await;
    }
    tokio::time::sleep(Duration::from_millis(700)).await;
    stop.cancel();
    let accepted = poster.await.unwrap();
    assert!(accepted.len() > 500, "{} accepted", accepted.len());
    let counts = wait_for_ids(&broker.addr, "page-view", &accepted).await;
    let twice: Vec<_> = counts.iter().filter(|&(_, &n)| n > 1).collect();
    println!(
        "{} accepted across {kills} kills and {} lost answers; {} stored more than once",
        accepted.len(),
        proxy.dropped(),
        twice.len()
    );
    assert!(proxy.dropped() > 0, "no answer was lost");
    assert!(twice.is_empty(), "{} events stored more than once", twice.len());
    // A request spooled as the agent was killed, before its answer went out, is in the log
    // too: one request of 50 per kill at most.
    let unanswered = counts.len() - accepted.len();
    assert!(unanswered <= 50 * kills, "{unanswered} events stored that were never answered");
    agent.signal(Signal::SIGTERM);
    let status = tokio::task::spawn_blocking(move || agent.wait_exit(Duration::from_secs(30)))
        .await
        .unwrap();
    assert!(status.success(), "SIGTERM is a clean exit: {status}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zookeeper_tail_and_service_flags_ship_a_tailed_file_to_registered_brokers() {
    let connect = ZooKeeperServer::shared().connect_string();
    let broker_connect = connect.clone();
    let broker = TestBroker::start_with(move |c| c.zookeeper = Some(broker_connect)).await;
    let registry = TestRegistry::start().await;
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("events.log");
    let lines: String = (0..20).map(|n| format!("{}\n", page_view_json(n))).collect();
    std::fs::write(&log, lines).unwrap();
    let port = free_port();
    let agent = spawn(
        args(&[
            "serve",
            "--registry",
            registry.url(),
            "--zookeeper",
            &connect,
            "--spool-dir",
            dir.path().join("spool").to_str().unwrap(),
            "--http",
            &format!("127.0.0.1:{port}"),
            "--service",
            "checkout",
            "--tail",
            &format!("{}=page-view", log.display()),
        ]),
        port,
        dir.path().join("agent.log"),
    )
    .await;
    wait_for_ids(&broker.addr, "page-view", &(0..20).collect::<Vec<_>>()).await;
    let payload = read_all(&broker.addr, "page-view").await.remove(0);
    assert_eq!(EventHeader::read(&payload).unwrap().1.service, "checkout");
    agent.signal(Signal::SIGTERM);
    let mut agent = agent;
    let status = tokio::task::spawn_blocking(move || agent.wait_exit(Duration::from_secs(30)))
        .await
        .unwrap();
    assert!(status.success());
}

async fn metric(url: &str, name: &str) -> u64 {
    let text = testkit::http_client()
        .get(format!("{url}/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    text.lines()
        .find_map(|l| l.strip_prefix(&format!("{name} ")))
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no {name} in {text}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spool_max_bytes_and_spool_full_flags_choose_the_policy() {
    let registry = TestRegistry::start().await;
    for policy in ["block", "drop-oldest"] {
        let dir = tempfile::tempdir().unwrap();
        let config = dir.path().join("agent.toml");
        std::fs::write(&config, "max_event_bytes = 4096\n").unwrap();
        let dead = format!("127.0.0.1:{}", free_port());
        let port = free_port();
        let _agent = spawn(
            args(&[
                "serve",
                "--config",
                config.to_str().unwrap(),
                "--registry",
                registry.url(),
                "--brokers",
                &dead,
                "--spool-dir",
                dir.path().join("spool").to_str().unwrap(),
                "--http",
                &format!("127.0.0.1:{port}"),
                "--spool-max-bytes",
                "65536",
                "--spool-full",
                policy,
            ]),
            port,
            dir.path().join("agent.log"),
        )
        .await;
        let url = format!("http://127.0.0.1:{port}");
        let http = testkit::http_client();
        let mut statuses = Vec::new();
        for batch in 0..30 {
            let body: Vec<_> = (batch * 50..batch * 50 + 50).map(page_view_json).collect();
            let r =
                http.post(format!("{url}/v1/events/page-view")).json(&body).send().await.unwrap();
            statuses.push(r.status().as_u16());
        }
        // --spool-dir: the accepted events wait there.
        let segments = std::fs::read_dir(dir.path().join("spool").join("segments")).unwrap();
        assert!(segments.count() > 0, "no spool segment under --spool-dir");
        if policy == "block" {
            assert!(statuses.contains(&503), "{statuses:?}");
            assert_eq!(metric(&url, "tributary_agent_dropped_total").await, 0);
        } else {
            assert!(statuses.iter().all(|&s| s == 200), "{statuses:?}");
            assert!(metric(&url, "tributary_agent_dropped_total").await > 0);
        }
    }
}

#[test]
fn bad_flags_and_config_exit_2_with_one_line() {
    let dir = tempfile::tempdir().unwrap();
    let bad_key = dir.path().join("bad.toml");
    std::fs::write(&bad_key, "registry = \"http://r\"\nbrokers = [\"b:1\"]\nno_such_key = 1\n")
        .unwrap();
    let cases: Vec<(Vec<String>, &str)> = vec![
        (args(&["serve", "--brokers", "b:1"]), "registry is required"),
        (
            args(&["serve", "--registry", "http://r", "--brokers", "b:1", "--zookeeper", "z:1"]),
            "exactly one of brokers and zookeeper",
        ),
        (args(&["serve", "--registry", "http://r"]), "exactly one of brokers and zookeeper"),
        (args(&["serve", "--registry", "http://r", "--brokers", "nohost"]), "expected HOST:PORT"),
        (
            args(&[
                "serve",
                "--registry",
                "http://r",
                "--brokers",
                "b:1",
                "--spool-full",
                "sometimes",
            ]),
            "expected block or drop-oldest",
        ),
        (args(&["serve", "--registry", "http://r", "--brokers", "b:1", "--acks", "0"]), "acks 0"),
        (
            args(&["serve", "--registry", "http://r", "--brokers", "b:1", "--acks", "most"]),
            "acks \"most\"",
        ),
        (
            args(&["serve", "--registry", "http://r", "--brokers", "b:1", "--tail", "nofile"]),
            "expected FILE=TOPIC",
        ),
        (
            args(&[
                "serve",
                "--registry",
                "http://r",
                "--brokers",
                "b:1",
                "--compression",
                "snappy",
            ]),
            "compression \"snappy\"",
        ),
        (
            args(&[
                "serve",
                "--registry",
                "http://r",
                "--brokers",
                "b:1",
                "--audit-window-ms",
                "0",
            ]),
            "audit_window_ms",
        ),
        (
            args(&[
                "serve",
                "--registry",
                "http://r",
                "--brokers",
                "b:1",
                "--spool-max-bytes",
                "10",
            ]),
            "spool_max_bytes",
        ),
        (args(&["serve", "--registry", "not a url", "--brokers", "b:1"]), "invalid registry URL"),
        (args(&["serve", "--config", bad_key.to_str().unwrap()]), "unknown field `no_such_key`"),
        (args(&["serve", "--config", "/nonexistent/agent.toml"]), "cannot read config file"),
        (args(&["serve", "--bogus"]), "unexpected argument"),
        (args(&["simulate", "--rate", "0", "--duration", "1s", "--agent", "http://a"]), "--rate"),
        (
            args(&["simulate", "--rate", "5", "--duration", "1", "--agent", "http://a"]),
            "expected a number with a unit",
        ),
        (args(&["simulate", "--rate", "5", "--duration", "1s"]), "registry is required"),
        (
            args(&["simulate", "--rate", "5", "--duration", "1s", "--agent", "http://a"])
                .into_iter()
                .chain(args(&["--spool-dir", "/tmp/s", "--acks", "1"]))
                .collect(),
            "--acks, --spool-dir configure the in-process agent and do not apply with --agent",
        ),
        (
            args(&["simulate", "--rate", "5", "--duration", "1s", "--agent", "https://a"])
                .into_iter()
                .chain(args(&["--tls-cert", "/nonexistent.crt", "--tls-key", "/k"]))
                .collect(),
            "tls_cert needs tls_ca",
        ),
    ];
    for (args, expected) in cases {
        let output = Command::new(BINARY).args(&args).output().unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{args:?}: {stderr}");
        assert_eq!(stderr.lines().count(), 1, "{args:?}: one line, got {stderr}");
        assert!(stderr.contains(expected), "{args:?}: {stderr:?} should say {expected:?}");
    }
}

/// Runs `frontend-agent simulate …` to completion; returns its stdout.
async fn simulate(args: Vec<String>) -> String {
    let output =
        tokio::task::spawn_blocking(move || Command::new(BINARY).args(&args).output().unwrap())
            .await
            .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(output.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&output.stderr));
    stdout
}

fn number_after(text: &str, word: &str) -> u64 {
    let rest = text.split(word).nth(1).unwrap_or_else(|| panic!("{word:?} in {text:?}"));
    rest.split_whitespace().next().unwrap().parse().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn simulate_sends_over_http_to_an_agent_or_into_one_started_in_process() {
    let broker = TestBroker::start().await;
    let registry = TestRegistry::start().await;
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let _agent = spawn(
        args(&[
            "serve",
            "--registry",
            registry.url(),
            "--brokers",
            &broker.addr,
            "--spool-dir",
            dir.path().join("spool").to_str().unwrap(),
            "--http",
            &format!("127.0.0.1:{port}"),
        ]),
        port,
        dir.path().join("agent.log"),
    )
    .await;
    let url = format!("http://127.0.0.1:{port}");
    let out = simulate(args(&[
        "simulate",
        "--agent",
        &url,
        "--rate",
        "2000",
        "--duration",
        "1s",
        "--topics",
        "page-view,click",
    ]))
    .await;
    let accepted = number_after(&out, "accepted");
    assert!(accepted > 500, "{out}");
    assert!(!out.contains("search:"), "only the topics asked for: {out}");
    assert_eq!(metric(&url, "tributary_agent_accepted_total").await, accepted);

    let out = simulate(args(&[
        "simulate",
        "--rate",
        "1000",
        "--duration",
        "1s",
        "--registry",
        registry.url(),
        "--brokers",
        &broker.addr,
        "--spool-dir",
        dir.path().join("spool-2").to_str().unwrap(),
    ]))
    .await;
    let accepted = number_after(&out, "accepted");
    assert!(accepted > 300, "{out}");
    assert_eq!(number_after(&out, "acknowledged"), accepted, "drained before exit: {out}");
    let searches = testkit::eventually(DEADLINE, "simulated searches in the broker", || async {
        let payloads = read_all(&broker.addr, "search").await;
        (!payloads.is_empty()).then_some(payloads)
    })
    .await;
    let client = RegistryClient::new(registry.url()).unwrap();
    let (_, search) = events::envelope::decode_with(&client, &searches[0]).await.unwrap();
    let apache_avro::types::Value::Record(fields) = search else { panic!("a record") };
    assert!(fields.iter().any(|(name, _)| name == "query"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_flags_secure_the_input_and_the_brokers_with_the_agents_principal() {
    let pki = testkit::tls::Pki::new("agent test CA");
    let (served, agent_id) = (pki.identity("broker-0"), pki.identity("agent-1"));
    let dir = tempfile::tempdir().unwrap();
    let acl = dir.path().join("acl.toml");
    std::fs::write(
        &acl,
        "[[allow]]\nprincipals = [\"agent-*\"]\ntopics = [\"page-view\", \"_audit\"]\n\
         operations = [\"produce\", \"describe\"]\n\n[[allow]]\nprincipals = [\"auditor\"]\n\
         topics = [\"*\"]\noperations = [\"consume\", \"describe\"]\n",
    )
    .unwrap();
    let (cert, key, ca) = (served.cert.clone(), served.key.clone(), pki.ca().to_owned());
    let acl_file = acl.clone();
    let broker = TestBroker::start_with(move |c| {
        c.tls.tls_cert = Some(cert);
        c.tls.tls_key = Some(key);
        c.tls.tls_client_ca = Some(ca);
        c.acl_file = Some(acl_file);
    })
    .await;
    let registry = TestRegistry::start().await;
    let port = free_port();
    let path = |p: &Path| p.to_str().unwrap().to_owned();
    let _agent = spawn(
        args(&[
            "serve",
            "--registry",
            registry.url(),
            "--brokers",
            &broker.addr,
            "--spool-dir",
            dir.path().join("spool").to_str().unwrap(),
            "--http",
            &format!("127.0.0.1:{port}"),
            "--tls-ca",
            &path(pki.ca()),
            "--tls-cert",
            &path(&agent_id.cert),
            "--tls-key",
            &path(&agent_id.key),
            "--tls-client-ca",
            &path(pki.ca()),
        ]),
        port,
        dir.path().join("agent.log"),
    )
    .await;
    // The input speaks HTTPS with the agent's certificate, and wants a client's
    // (--tls-client-ca): a frontend without one is refused at the handshake.
    let body = serde_json::to_string(&(0..10).map(page_view_json).collect::<Vec<_>>()).unwrap();
    let url = format!("https://127.0.0.1:{port}/v1/events/page-view");
    let post = |cert: Option<&testkit::tls::Identity>| {
        let mut command = Command::new("curl");
        command.args(["-sS", "--fail", "--cacert", &path(pki.ca())]);
        if let Some(cert) = cert {
            command.args(["--cert", &path(&cert.cert), "--key", &path(&cert.key)]);
        }
        command.args(["-H", "Content-Type: application/json", "--data", &body, &url]);
        command.output().unwrap()
    };
    assert!(!post(None).status.success(), "no client certificate");
    let out = post(Some(&pki.identity("frontend-1")));
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let plain = Command::new("curl")
        .args(["-sS", "--max-time", "5", &format!("http://127.0.0.1:{port}/health")])
        .output()
        .unwrap();
    assert!(!plain.status.success(), "plaintext HTTP is refused");
    // `simulate --agent https://…` with the serve flags' CA and a frontend's certificate.
    let frontend = pki.identity("frontend-2");
    let out = simulate(args(&[
        "simulate",
        "--agent",
        &format!("https://127.0.0.1:{port}"),
        "--rate",
        "200",
        "--duration",
        "1s",
        "--topics",
        "page-view",
        "--tls-ca",
        &path(pki.ca()),
        "--tls-cert",
        &path(&frontend.cert),
        "--tls-key",
        &path(&frontend.key),
    ]))
    .await;
    let simulated = number_after(&out, "accepted");
    assert!(simulated > 0 && out.contains("refused 0"), "{out}");
    // The events reach the TLS broker, produced as agent-1 (the ACL allows nothing else).
    let reader = pki.identity("auditor");
    let tls =
        service::tls::client_from_settings(Some(pki.ca()), Some(&reader.cert), Some(&reader.key))
            .unwrap();
    let config = client::SimpleConsumerConfig { tls, ..Default::default() };
    testkit::eventually(DEADLINE, "the events in the TLS broker", || async {
        let payloads = read_all_with(&broker.addr, "page-view", config.clone()).await;
        (payloads.len() as u64 == 10 + simulated).then_some(())
    })
    .await;
}

/// The README's bound on the HTTP input: a request holds its body, its events encoded and the
/// spool writer's records of them, about three times the body — not every event's JSON tree
/// (about ten times its text) as well, as when the agent parsed a whole body before encoding
/// any of it (an 11 MB request then grew it by 166 MB).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_large_request_holds_a_few_times_its_body_not_its_parsed_events() {
    let registry = TestRegistry::start().await;
    let dir = tempfile::tempdir().unwrap();
    let dead = format!("127.0.0.1:{}", free_port());
    let port = free_port();
    let agent = spawn(
        args(&[
            "serve",
            "--registry",
            registry.url(),
            "--brokers",
            &dead,
            "--spool-dir",
            dir.path().join("spool").to_str().unwrap(),
            "--http",
            &format!("127.0.0.1:{port}"),
        ]),
        port,
        dir.path().join("agent.log"),
    )
    .await;
    let url = format!("http://127.0.0.1:{port}/v1/events/page-view");
    // Memory is what this measures, not time: a debug build parses and encodes these 80,000
    // events at about 25,000 a second on this machine alone, and slower beside other tests,
    // past the 5 s the tests' client allows an ordinary request.
    let http = testkit::http_client_with_timeout(Duration::from_secs(60));
    // Warm up: the schema fetched, the spool's first segment open.
    let r = http.post(&url).json(&vec![page_view_json(0)]).send().await.unwrap();
    assert_eq!(r.status(), 200);
    let events: Vec<serde_json::Value> = (1..=80_000).map(page_view_json).collect();
    let ndjson: String = events.iter().map(|e| format!("{e}\n")).collect();
    let array = serde_json::to_string(&events).unwrap();
    drop(events);
    for (content_type, body) in [("application/x-ndjson", ndjson), ("application/json", array)] {
        let before = peak_rss(agent.child.id());
        let bytes = body.len() as u64;
        let r = http.post(&url).header("content-type", content_type).body(body).send().await;
        let r = r.unwrap();
        assert_eq!(r.status(), 200, "{content_type}");
        assert_eq!(r.json::<serde_json::Value>().await.unwrap()["accepted"], 80_000);
        let grown = peak_rss(agent.child.id()).saturating_sub(before);
        eprintln!("{content_type}: a {bytes}-byte request grew the agent's peak by {grown} bytes");
        // The body, its events encoded, and the spool writer's buffer of them.
        assert!(
            grown < 4 * bytes,
            "{content_type}: a {bytes}-byte request grew the agent by {grown} bytes"
        );
    }
}

/// Slowloris: 5,000 connections hold half a request head and 100 hold half a body. The
/// agent goes on answering a well-behaved client, and accepting its events; past `--max-connections` the oldest held
/// connections make way for new ones, the rest are closed after `--client-timeout-ms`, and
/// its memory stays small.
#[tokio::test(flavor = "multi_thread")]
async fn slow_http_clients_make_way_past_the_limit_and_time_out() {
    let registry = TestRegistry::start().await;
    let dir = tempfile::tempdir().unwrap();
    let dead = format!("127.0.0.1:{}", free_port());
    let port = free_port();
    let agent = spawn(
        args(&[
            "serve",
            "--registry",
            registry.url(),
            "--brokers",
            &dead,
            "--spool-dir",
            dir.path().join("spool").to_str().unwrap(),
            "--http",
            &format!("127.0.0.1:{port}"),
            "--max-connections",
            "1024",
            "--client-timeout-ms",
            "10000",
        ]),
        port,
        dir.path().join("agent.log"),
    )
    .await;
    let pid = agent.child.id();
    let siege = tokio::task::spawn_blocking(move || {
        let addr = format!("127.0.0.1:{port}");
        // More slow bodies than `max_concurrent_requests` (32): they hold no slot.
        let bodies = ("/v1/events/page-view", 100);
        let post = serde_json::to_string(&vec![page_view_json(1)]).unwrap();
        let post = Some(("/v1/events/page-view", post.as_str()));
        let agent = "tributary_agent";
        testkit::slow_clients::http_slowloris(&addr, pid, agent, "/health", 5_000, bodies, post)
    })
    .await
    .unwrap();
    eprintln!("{siege:?}");
    // A base, and about 32 KiB per connection (hyper's buffers and the task).
    let bound = (48 << 20) + 1024 * (32 << 10);
    assert!(siege.peak_rss < bound, "peak RSS {} above {bound}", siege.peak_rss);
    drop(agent);
}

/// The spool on a filesystem that fills (an 8 MiB tmpfs; mounting it needs root): a request
/// that does not fit is answered 503 with Retry-After, counted, and nothing of it kept; once
/// space returns requests are accepted again; and after `kill -9` every accepted event
/// reaches the broker.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_disk_answers_503_and_loses_nothing_accepted() {
    let registry = TestRegistry::start().await;
    let dir = tempfile::tempdir().unwrap();
    let disk = testkit::disk::Tmpfs::mount(&dir.path().join("disk"), 8 << 20);
    let ballast = disk.path().join("ballast");
    std::fs::write(&ballast, vec![1u8; 2 << 20]).unwrap();
    let port = free_port();
    let serve = |brokers: &str| {
        args(&[
            "serve",
            "--registry",
            registry.url(),
            "--brokers",
            brokers,
            "--spool-dir",
            disk.path().join("spool").to_str().unwrap(),
            "--http",
            &format!("127.0.0.1:{port}"),
        ])
    };
    // No broker yet: everything accepted stays in the spool.
    let dead = format!("127.0.0.1:{}", free_port());
    let mut agent = spawn(serve(&dead), port, dir.path().join("1.log")).await;
    let url = format!("http://127.0.0.1:{port}");
    let post = |from: i64| {
        let url = format!("{url}/v1/events/page-view");
        async move {
            let events: Vec<serde_json::Value> = (from..from + 500).map(page_view_json).collect();
            testkit::http_client().post(url).json(&events).send().await.unwrap()
        }
    };
    let mut accepted = Vec::new();
    let refusal = loop {
        let from = accepted.len() as i64;
        let response = post(from).await;
        if response.status() != 200 {
            break response;
        }
        accepted.extend(from..from + 500);
        assert!(from < 1_000_000, "8 MiB cannot hold {from} events");
    };
    assert_eq!(refusal.status(), 503);
    assert!(refusal.headers().contains_key("retry-after"));
    eprintln!(
        "{} events accepted before the disk filled: {}",
        accepted.len(),
        refusal.text().await.unwrap()
    );
    assert!(accepted.len() >= 5_000, "most of the free space was used");
    assert!(metric(&url, "tributary_agent_refused_disk_full_total").await >= 1);

    // Space returns: requests are accepted again.
    std::fs::remove_file(&ballast).unwrap();
    let from = accepted.len() as i64;
    assert_eq!(post(from).await.status(), 200, "accepted once there is room");
    accepted.extend(from..from + 500);

    // A crash, a broker: every accepted event is delivered.
    agent.child.kill().unwrap();
    agent.child.wait().unwrap();
    let broker = TestBroker::start().await;
    let _agent = spawn(serve(&broker.addr), port, dir.path().join("2.log")).await;
    let counts = wait_for_ids(&broker.addr, "page-view", &accepted).await;
    assert!(counts.len() >= accepted.len(), "every accepted event delivered");
}
