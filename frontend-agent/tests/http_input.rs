//! The HTTP input against a real broker and a real registry: what is accepted arrives in the
//! envelope with its header filled in, what is invalid is refused whole with its reason, and
//! the agent's audit counts reach `_audit`.

use apache_avro::types::Value as Avro;
use events::audit::{AUDIT_TOPIC, AuditRecord, Tier};
use frontend_agent::{Agent, serve_http};
use schema_registry::RegistryClient;
use serde_json::{Value, json};
use testkit::agent::{DEADLINE, config, start};
use testkit::broker::{TestBroker, read_all};
use testkit::events::{event_id, event_id_hex, page_view_json, wait_for_ids};
use testkit::registry::TestRegistry;
use tokio_util::sync::CancellationToken;

/// Serves `agent` on a free port; returns its base URL.
async fn serve(agent: &Agent, stop: &CancellationToken) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(serve_http(listener, agent.clone(), stop.clone()));
    url
}

fn field<'a>(record: &'a Avro, name: &str) -> &'a Avro {
    let Avro::Record(fields) = record else { panic!("a record") };
    &fields.iter().find(|(n, _)| n == name).unwrap().1
}

#[tokio::test]
async fn http_events_reach_the_broker_in_the_envelope_with_the_header_filled_in() {
    let broker = TestBroker::start().await;
    let registry = TestRegistry::start().await;
    let spool = tempfile::tempdir().unwrap();
    let agent = start(config(registry.url(), spool.path(), &[&broker.addr])).await;
    let stop = CancellationToken::new();
    let url = serve(&agent, &stop).await;
    let http = testkit::http_client();
    let before_ms =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis()
            as i64;

    // One object, with a header of its own.
    let one = json!({"header": {"id": event_id_hex(1), "service": "caller", "time": 1_000_000},
        "page_key": "feed", "url": "https://example.com/", "duration_ms": 3, "member_id": 42});
    let r = http.post(format!("{url}/v1/events/page-view")).json(&one).send().await.unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.json::<Value>().await.unwrap(), json!({"accepted": 1}));
    // An array, without headers.
    let array = json!([
        {"page_key": "jobs", "url": "u", "duration_ms": 1},
        {"page_key": "feed", "url": "u", "duration_ms": 2, "referrer": "r"},
    ]);
    let r = http.post(format!("{url}/v1/events/page-view")).json(&array).send().await.unwrap();
    assert_eq!(r.json::<Value>().await.unwrap(), json!({"accepted": 2}));
    // Newline-delimited JSON.
    let ndjson = "{\"page_key\":\"a\",\"url\":\"u\",\"duration_ms\":1}\n\n{\"page_key\":\"b\",\"url\":\"u\",\"duration_ms\":2}\n";
    let r = http
        .post(format!("{url}/v1/events/page-view"))
        .header("content-type", "application/x-ndjson")
        .body(ndjson)
        .send()
        .await
        .unwrap();
    assert_eq!(r.json::<Value>().await.unwrap(), json!({"accepted": 2}));

    let payloads = testkit::eventually(DEADLINE, "five events in the broker", || async {
        let payloads = read_all(&broker.addr, "page-view").await;
        (payloads.len() == 5).then_some(payloads)
    })
    .await;
    let client = RegistryClient::new(registry.url()).unwrap();
    let latest = client.latest("page-view-value").await.unwrap();
    let mut ids = std::collections::HashSet::new();
    for (i, payload) in payloads.iter().enumerate() {
        let (schema_id, value) = events::envelope::decode_with(&client, payload).await.unwrap();
        assert_eq!(schema_id, latest.id, "encoded with the topic's latest schema");
        let header = field(&value, "header");
        let Avro::Fixed(16, id) = field(header, "id") else { panic!("a 16-byte id") };
        ids.insert(id.clone());
        if i == 0 {
            assert_eq!(id, &event_id(1).to_vec(), "the caller's id is kept");
            assert_eq!(field(header, "service"), &Avro::String("caller".into()));
            assert_eq!(field(header, "time"), &Avro::Long(1_000_000));
            assert_eq!(field(&value, "member_id"), &Avro::Union(1, Box::new(Avro::Long(42))));
        } else {
            assert_eq!(field(header, "service"), &Avro::String("test-service".into()));
            let Avro::Long(time) = field(header, "time") else { panic!("a long") };
            assert!(*time >= before_ms, "time filled with now");
        }
        assert_eq!(field(header, "server"), &Avro::String("test-host".into()));
    }
    assert_eq!(ids.len(), 5, "every event has its own id");

    // The audit rows: events accepted and events acknowledged per window, published to
    // `_audit` on the same broker.
    let audit_schema =
        client.schema(client.latest("_audit-value").await.unwrap().id).await.unwrap();
    let records = testkit::eventually(DEADLINE, "audit counts of all five events", || async {
        let records: Vec<AuditRecord> = read_all(&broker.addr, AUDIT_TOPIC)
            .await
            .iter()
            .map(|p| AuditRecord::decode(p, &audit_schema).unwrap())
            .collect();
        // Counts are cumulative: the latest (largest) per tier and window, summed over windows.
        let mut latest = std::collections::BTreeMap::new();
        for r in &records {
            let count = latest.entry((r.tier, r.window_start)).or_insert(0);
            *count = r.count.max(*count);
        }
        let counted = [Tier::Accepted, Tier::Agent].iter().all(|tier| {
            let windows = latest.iter().filter(|((t, _), _)| t == tier);
            latest.get(&(*tier, 600_000)) == Some(&1) && windows.map(|(_, n)| n).sum::<i64>() == 5
        });
        counted.then_some(records)
    })
    .await;
    for record in &records {
        assert!(matches!(record.tier, Tier::Accepted | Tier::Agent), "{record:?}");
        assert_eq!((record.host.as_str(), record.topic.as_str()), ("test-host", "page-view"));
        assert_eq!(record.window_ms, 600_000);
    }

    let metrics = http.get(format!("{url}/metrics")).send().await.unwrap().text().await.unwrap();
    assert!(metrics.contains("tributary_agent_accepted_total 5\n"), "{metrics}");
    assert!(metrics.contains("tributary_agent_acknowledged_total 5\n"), "{metrics}");
    assert!(metrics.contains("tributary_agent_request_events_count 3\n"), "{metrics}");
    let samples = testkit::metrics::parse(&metrics);
    let posted = [("method", "POST"), ("route", "/v1/events/{topic}"), ("status", "200")];
    assert_eq!(
        testkit::metrics::value(&samples, "tributary_agent_http_requests_total", &posted),
        3.0
    );
    assert!(testkit::metrics::value(&samples, "tributary_agent_audit_published_total", &[]) >= 1.0);
    stop.cancel();
    agent.shutdown().await.unwrap();
}

#[tokio::test]
async fn every_kind_of_invalid_event_refuses_the_whole_request_with_its_reason() {
    let broker = TestBroker::start().await;
    let registry = TestRegistry::start().await;
    let spool = tempfile::tempdir().unwrap();
    let mut cfg = config(registry.url(), spool.path(), &[&broker.addr]);
    cfg.max_request_bytes = 4096;
    let agent = start(cfg).await;
    let stop = CancellationToken::new();
    let url = serve(&agent, &stop).await;
    let http = testkit::http_client();
    let good = || json!({"page_key": "feed", "url": "u", "duration_ms": 1});
    let with = |key: &str, value: Value| {
        let mut event = good();
        event[key] = value;
        event
    };
    let mut missing = good();
    missing.as_object_mut().unwrap().remove("url");
    let cases: Vec<(&str, String, usize, &str)> = vec![
        ("nope", json!([good()]).to_string(), 0, "unknown topic nope"),
        ("page-view", json!([good(), missing]).to_string(), 1, "missing field url"),
        (
            "page-view",
            json!([good(), good(), with("duration_ms", json!("slow"))]).to_string(),
            2,
            "field duration_ms: expected int, got string",
        ),
        (
            "page-view",
            json!([with("member_id", json!(1.5))]).to_string(),
            0,
            "field member_id: expected long, got number",
        ),
        (
            "page-view",
            json!([with("header", json!({"id": "abcd"}))]).to_string(),
            0,
            "field header.id: 2 bytes, the fixed type needs 16",
        ),
        ("page-view", json!([with("colour", json!("red"))]).to_string(), 0, "unknown field colour"),
        ("page-view", json!([good(), 7]).to_string(), 1, "not a JSON object"),
        ("page-view", "{\"page_key\": ".to_owned(), 0, "invalid JSON"),
        (
            "page-view",
            format!("[{}]", vec![good().to_string(); 100].join(",")),
            0,
            "exceeds 4096 bytes",
        ),
        ("_audit", json!([good()]).to_string(), 0, "reserved"),
        (
            "search",
            json!([{"query": "q", "result_count": 1, "vertical": "MOVIES"}]).to_string(),
            0,
            "field vertical: \"MOVIES\" is not one of",
        ),
    ];
    for (topic, body, index, reason) in cases {
        let r = http
            .post(format!("{url}/v1/events/{topic}"))
            .header("content-type", "application/json")
            .body(body.clone())
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 400, "{topic} {body}");
        let answer: Value = r.json().await.unwrap();
        assert_eq!(answer["index"], json!(index), "{answer}");
        let error = answer["error"].as_str().unwrap();
        assert!(error.contains(reason), "{error:?} should say {reason:?}");
    }
    // The library path refuses the same way.
    let refused = agent.send_batch("page-view", &[good(), with("url", json!(3))]).await;
    assert!(
        matches!(refused, Err(frontend_agent::SendError::Invalid { index: 1, .. })),
        "{refused:?}"
    );

    assert_eq!(agent.accepted(), 0, "nothing of a refused request is accepted");
    let metrics = agent.metrics().render();
    assert!(metrics.contains("tributary_agent_rejected_requests_total 12\n"), "{metrics}");
    assert!(metrics.contains("tributary_agent_spooled_total 0\n"), "{metrics}");
    stop.cancel();
    agent.shutdown().await.unwrap();
    assert!(read_all(&broker.addr, "page-view").await.is_empty());
}

#[tokio::test]
async fn library_send_validates_spools_and_ships_like_http() {
    let broker = TestBroker::start().await;
    let registry = TestRegistry::start().await;
    let spool = tempfile::tempdir().unwrap();
    let agent = start(config(registry.url(), spool.path(), &[&broker.addr])).await;
    for n in 0..50 {
        agent.send("page-view", &page_view_json(n)).await.unwrap();
    }
    let counts = wait_for_ids(&broker.addr, "page-view", &(0..50).collect::<Vec<_>>()).await;
    assert!(counts.values().all(|&c| c == 1), "no duplicates without failures");
    testkit::eventually(DEADLINE, "all acknowledged", || async {
        (agent.acknowledged() == 50).then_some(())
    })
    .await;
    agent.shutdown().await.unwrap();
    assert!(matches!(
        agent.send("page-view", &page_view_json(99)).await,
        Err(frontend_agent::SendError::ShuttingDown)
    ));
}
