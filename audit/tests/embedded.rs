//! The audit service on the embedded coordination backend, as the all-in-one launcher runs it:
//! the same code as with ZooKeeper, the clusters being chroots of one in-process backend.

use cluster::Embedded;
use events::audit::Tier::{Agent, Mirror};
use schema_registry::RegistryClient;
use serde_json::json;
use testkit::audit::{
    Audit, Cluster, past_window, produce_audit, produce_events, record, test_config,
};
use testkit::registry::TestRegistry;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runs_on_the_embedded_backend() {
    let registry_server = TestRegistry::start().await;
    let registry = RegistryClient::new(registry_server.url()).unwrap();
    let embedded = Embedded::new();
    let analytics = Cluster::embedded(&embedded, "/tributary/analytics").await;
    let live = Cluster::embedded(&embedded, "/tributary/live-a").await;
    let w0 = past_window(0);
    produce_audit(
        &registry,
        &analytics,
        &[
            record(Agent, "web-1", "page-view", w0, 2),
            record(Mirror, "mirror-1", "page-view", w0, 1),
        ],
    )
    .await;
    produce_events(&registry, &live, "page-view", &[w0, w0 + 1]).await;
    let audit =
        Audit::start(test_config(), &analytics, &[("live-a", &live)], registry_server.url()).await;
    let window =
        audit.wait_window("page-view", w0, "both clusters read", |w| w["tiers"]["live"] == 2).await;
    assert_eq!(window["verdict"], "loss");
    assert_eq!(window["missing"], json!({"mirror": 1}));
    let summary = audit.json("/api/summary").await;
    assert_eq!(summary["windows"]["loss"], 1, "the totals a launcher reads");
    audit.stop().await;
}
