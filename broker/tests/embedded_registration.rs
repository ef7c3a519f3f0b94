//! A broker registered in the embedded coordination backend, as the all-in-one launcher runs it.

use std::time::Duration;

use broker::{Broker, Listeners};
use cluster::{BrokerInfo, Embedded, Registry};
use protocol::Acks;
use testkit::broker::{message_set, test_config};
use testkit::eventually;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broker_registers_in_an_embedded_session() {
    let embedded = Embedded::new();
    let observer = Registry::new(embedded.session("/tributary/live-a").unwrap());
    let dir = tempfile::tempdir().unwrap();
    let mut config = test_config(dir.path());
    config.broker_id = 4;
    let native = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = native.local_addr().unwrap().port();
    let listeners = Listeners { native, kafka: None };
    let session = embedded.session("/tributary/live-a").unwrap();
    let broker = Broker::open(config, &listeners, Some(session)).await.unwrap();
    let stop = tokio_util::sync::CancellationToken::new();
    let server = tokio::spawn(broker.serve(listeners, stop.clone()));

    let brokers = eventually(Duration::from_secs(10), "the broker's node", || async {
        let brokers = observer.brokers().await.unwrap();
        (!brokers.is_empty()).then_some(brokers)
    })
    .await;
    assert_eq!(brokers.get(&4), Some(&BrokerInfo::new("127.0.0.1", port)));
    let conn = client::Connection::connect(&format!("127.0.0.1:{port}")).await.unwrap();
    conn.produce("views", 0, Acks::Written, message_set(&[b"x"])).await.unwrap();
    let (state, _) = observer.partition_state("views", 0).await.unwrap().expect("a state");
    assert_eq!((state.leader, state.isr), (4, vec![4]), "created in the cluster, led here");
    // Another chroot of the same backend is another cluster: it does not see the broker.
    let other = Registry::new(embedded.session("/tributary/live-b").unwrap());
    assert!(other.brokers().await.unwrap().is_empty());

    drop(conn);
    stop.cancel();
    server.await.unwrap().unwrap();
    assert!(observer.brokers().await.unwrap().is_empty(), "a clean stop unregisters");
}
