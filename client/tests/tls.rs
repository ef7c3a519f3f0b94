//! TLS, principals and ACLs through the real binaries: `broker` processes with a certificate,
//! a client CA and an ACL file, and `trib` with and without the right certificate —
//! plaintext, no certificate, another CA's, an expired one, the wrong host all refused with a
//! message that says why; a reader principal refused a produce with error 14 as one line;
//! replication between brokers over TLS with their own principals; `openssl s_client` seeing
//! TLS 1.3 and the chain.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use testkit::process::{Process, free_port};
use testkit::tls::{Identity, Pki};
use testkit::zookeeper::ZooKeeperServer;

const TRIB: &str = env!("CARGO_BIN_EXE_trib");

/// The `broker` binary, built beside `trib` by `cargo test --workspace`.
fn broker_binary() -> PathBuf {
    let path = Path::new(TRIB).with_file_name("broker");
    assert!(path.exists(), "{} is missing: cargo build -p broker first", path.display());
    path
}

const ACL: &str = r#"
[[allow]]
principals = ["writer"]
topics = ["*"]
operations = ["produce", "consume", "create", "describe"]

[[allow]]
principals = ["reader"]
topics = ["page-view"]
operations = ["consume", "describe"]

[[allow]]
principals = ["broker-*"]
topics = ["*"]
operations = ["replicate", "describe"]
"#;

struct Broker {
    process: Process,
    metrics: u16,
    log: PathBuf,
    _data: tempfile::TempDir,
}

fn start_broker(
    pki: &Pki,
    id: i32,
    identity: &Identity,
    acl: &Path,
    zookeeper: Option<&str>,
) -> Broker {
    let (port, metrics) = (free_port(), free_port());
    let data = tempfile::tempdir().unwrap();
    let log = data.path().join("broker.log");
    let mut args: Vec<String> = [
        "--broker-id",
        &id.to_string(),
        "--port",
        &port.to_string(),
        "--metrics",
        &format!("127.0.0.1:{metrics}"),
        "--data-dir",
        data.path().join("data").to_str().unwrap(),
        "--tls-cert",
        identity.cert.to_str().unwrap(),
        "--tls-key",
        identity.key.to_str().unwrap(),
        "--tls-client-ca",
        pki.ca().to_str().unwrap(),
        "--acl-file",
        acl.to_str().unwrap(),
        "--flush-ms",
        "10",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    if let Some(zk) = zookeeper {
        args.extend([
            "--zookeeper".into(),
            zk.into(),
            "--default-replication-factor".into(),
            "2".into(),
        ]);
        args.extend(["--min-insync-replicas".into(), "2".into()]);
        // What followers check their leaders' certificates with.
        args.extend(["--tls-ca".into(), pki.ca().to_str().unwrap().into()]);
    }
    let process = Process::spawn(&broker_binary(), &args, port, &log);
    Broker { process, metrics, log, _data: data }
}

fn addr(broker: &Broker) -> String {
    format!("127.0.0.1:{}", broker.process.port)
}

/// `trib` as `identity` (none: no certificate), trusting `ca`, with `args`; stdin `input`.
fn trib(ca: Option<&Path>, identity: Option<&Identity>, args: &[&str], input: &str) -> Output {
    let mut command = Command::new(TRIB);
    command.env_remove("RUST_LOG").args(args);
    if let Some(ca) = ca {
        command.arg("--tls-ca").arg(ca);
    }
    if let Some(identity) = identity {
        command.arg("--tls-cert").arg(&identity.cert).arg("--tls-key").arg(&identity.key);
    }
    let mut child = command
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("trib runs");
    use std::io::Write;
    child.stdin.take().unwrap().write_all(input.as_bytes()).unwrap();
    let started = Instant::now();
    let out = child.wait_with_output().unwrap();
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "{args:?} hung for {:?}",
        started.elapsed()
    );
    out
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).trim_end().to_owned()
}

fn wait_for_log(log: &Path, says: &str) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !std::fs::read_to_string(log).unwrap_or_default().contains(says) {
        assert!(Instant::now() < deadline, "the broker never logged {says:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn a_tls_broker_refuses_whom_it_must_and_serves_the_rest_by_principal() {
    let pki = Pki::new("Tributary test CA");
    let other = Pki::new("another CA");
    let dir = tempfile::tempdir().unwrap();
    let acl = dir.path().join("acl.toml");
    std::fs::write(&acl, ACL).unwrap();
    // The broker's certificate names 127.0.0.1 only: `localhost` is the wrong host.
    let served = pki.identity_for_host("broker-1", "127.0.0.1");
    let broker = start_broker(&pki, 1, &served, &acl, None);
    let at = addr(&broker);
    let (writer, reader) = (pki.identity("writer"), pki.identity("reader"));
    let list = ["topics", "list", "--brokers", at.as_str()];

    // Refused, each with a message that says why, none hanging.
    let plaintext = trib(None, None, &list, "");
    assert_eq!(plaintext.status.code(), Some(1), "{}", stderr(&plaintext));
    assert!(stderr(&plaintext).contains("the broker answered with TLS"), "{}", stderr(&plaintext));
    wait_for_log(&broker.log, "not a TLS client");
    let no_cert = trib(Some(pki.ca()), None, &list, "");
    assert!(stderr(&no_cert).contains("CertificateRequired"), "{}", stderr(&no_cert));
    let stranger = trib(Some(pki.ca()), Some(&other.identity("writer")), &list, "");
    assert!(stderr(&stranger).contains("UnknownCA"), "{}", stderr(&stranger));
    let expired = trib(Some(pki.ca()), Some(&pki.expired("writer")), &list, "");
    assert!(stderr(&expired).contains("CertificateExpired"), "{}", stderr(&expired));
    let untrusted = trib(Some(other.ca()), Some(&writer), &list, "");
    assert!(
        stderr(&untrusted).contains("invalid peer certificate: UnknownIssuer"),
        "{}",
        stderr(&untrusted)
    );
    let localhost = format!("localhost:{}", broker.process.port);
    let wrong_host =
        trib(Some(pki.ca()), Some(&writer), &["topics", "list", "--brokers", &localhost], "");
    assert!(
        stderr(&wrong_host).contains("not valid for name \"localhost\""),
        "{}",
        stderr(&wrong_host)
    );
    for out in [&plaintext, &no_cert, &stranger, &expired, &untrusted, &wrong_host] {
        assert_eq!(stderr(out).lines().count(), 1, "{}", stderr(out));
        assert!(!out.status.success());
    }

    // The writer produces and consumes; the reader consumes page-view only.
    let produce = |who: &Identity, topic: &str| {
        let args = ["produce", "--brokers", at.as_str(), "--topic", topic, "--acks", "2"];
        trib(Some(pki.ca()), Some(who), &args, "one\ntwo\nthree\n")
    };
    let consume = |who: &Identity, topic: &str| {
        trib(
            Some(pki.ca()),
            Some(who),
            &["consume", "--brokers", at.as_str(), "--topic", topic],
            "",
        )
    };
    assert!(produce(&writer, "page-view").status.success());
    assert!(produce(&writer, "click").status.success());
    for who in [&writer, &reader] {
        let read = consume(who, "page-view");
        assert!(read.status.success(), "{}", stderr(&read));
        assert_eq!(String::from_utf8_lossy(&read.stdout), "one\ntwo\nthree\n");
    }
    let denied = produce(&reader, "page-view");
    assert_eq!(denied.status.code(), Some(1));
    assert_eq!(
        stderr(&denied),
        "trib: authorization failed: principal reader may not produce to topic page-view"
    );
    let denied = consume(&reader, "click");
    assert_eq!(
        stderr(&denied),
        "trib: authorization failed: principal reader may not consume topic click"
    );
    // METADATA leaves out what the reader may not describe.
    let listed = trib(Some(pki.ca()), Some(&reader), &[&list[..], &["--json"]].concat(), "");
    let topics: serde_json::Value = serde_json::from_slice(&listed.stdout).unwrap();
    assert_eq!(topics.as_array().unwrap().len(), 1, "{topics}");
    assert_eq!(topics[0]["topic"], "page-view");

    // /metrics speaks TLS too, with the broker's certificate and client CA.
    let url = format!("https://127.0.0.1:{}/metrics", broker.metrics);
    let curl = |who: Option<&Identity>| {
        let mut command = Command::new("curl");
        command.args(["-sS", "--cacert", pki.ca().to_str().unwrap(), &url]);
        if let Some(who) = who {
            command.arg("--cert").arg(&who.cert).arg("--key").arg(&who.key);
        }
        command.output().expect("curl runs")
    };
    assert!(!curl(None).status.success(), "a scrape without a client certificate is refused");
    let scraped = curl(Some(&writer));
    assert!(scraped.status.success(), "{}", String::from_utf8_lossy(&scraped.stderr));
    let page = String::from_utf8(scraped.stdout).unwrap();
    let count = |name: &str| {
        testkit::metrics::parse(&page).iter().find(|s| s.name == name).map_or(0.0, |s| s.value)
    };
    assert!(count("tributary_broker_authorization_denied_total") >= 2.0, "{page}");
    assert!(count("tributary_broker_tls_handshake_failures_total") >= 4.0, "{page}");
    assert!(count("tributary_broker_tls_fetch_bytes_total") > 0.0, "{page}");
    // Logged once a minute per principal, topic and operation, not once per request.
    for _ in 0..3 {
        produce(&reader, "page-view");
    }
    let log = std::fs::read_to_string(&broker.log).unwrap();
    let logged = log
        .lines()
        .filter(|l| l.contains("authorization failed") && l.contains("page-view"))
        .count();
    assert_eq!(logged, 1, "{log}");

    // `openssl s_client` sees TLS 1.3 and the chain up to the test CA.
    let out = Command::new("openssl")
        .args(["s_client", "-connect", &at, "-CAfile", pki.ca().to_str().unwrap(), "-brief"])
        .arg("-cert")
        .arg(&writer.cert)
        .arg("-key")
        .arg(&writer.key)
        .stdin(Stdio::null())
        .output()
        .expect("openssl runs");
    let said =
        String::from_utf8_lossy(&out.stderr).to_string() + &String::from_utf8_lossy(&out.stdout);
    assert!(said.contains("Protocol version: TLSv1.3"), "{said}");
    assert!(said.contains("Verification: OK"), "{said}");
    assert!(said.contains("CN = broker-1") || said.contains("CN=broker-1"), "{said}");
}

#[test]
fn brokers_replicate_over_tls_as_their_own_principals() {
    let zk = ZooKeeperServer::shared().connect_string();
    let pki = Pki::new("Tributary test CA");
    let dir = tempfile::tempdir().unwrap();
    let acl = dir.path().join("acl.toml");
    std::fs::write(&acl, ACL).unwrap();
    let brokers: Vec<Broker> = (1..=2)
        .map(|id| start_broker(&pki, id, &pki.identity(&format!("broker-{id}")), &acl, Some(&zk)))
        .collect();
    let writer = pki.identity("writer");
    let at = addr(&brokers[0]);
    let create =
        ["topics", "create", "--brokers", at.as_str(), "--topic", "orders", "--partitions", "2"];
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let out = trib(Some(pki.ca()), Some(&writer), &create, "");
        if out.status.success() {
            break;
        }
        assert!(Instant::now() < deadline, "{}", stderr(&out));
        std::thread::sleep(Duration::from_millis(200));
    }
    // acks all with min_insync_replicas 2: acknowledged only once the follower, fetching
    // over TLS as broker-N, has the data.
    let lines: String = (0..200).map(|i| format!("order-{i}\n")).collect();
    let args = ["produce", "--zookeeper", zk.as_str(), "--topic", "orders", "--acks", "all"];
    let out = trib(Some(pki.ca()), Some(&writer), &args, &lines);
    assert!(out.status.success(), "{}", stderr(&out));
    let described = trib(
        Some(pki.ca()),
        Some(&writer),
        &["topics", "describe", "--zookeeper", &zk, "--topic", "orders", "--json"],
        "",
    );
    let described: serde_json::Value = serde_json::from_slice(&described.stdout).unwrap();
    for p in described["partitions"].as_array().unwrap() {
        assert_eq!(p["isr"].as_array().unwrap().len(), 2, "{described}");
    }
    drop(brokers);
}
