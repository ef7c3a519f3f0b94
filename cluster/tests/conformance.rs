//! One conformance suite, run against both backends: a real ZooKeeper server and the embedded
//! tree. Every test here runs twice, once per backend, with the same assertions.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use cluster::{
    BrokerInfo, Claim, Controller, ControllerError, CoordError, Coordinator, Embedded, NodeMode,
    PartitionState, Registry, RegistryError, SessionEvent, TopicAssignment,
    UNCLEAN_LEADER_ELECTION, WatchEvent, ZooKeeper, ZooKeeperConfig,
};
use futures::StreamExt;
use testkit::proxy::TcpProxy;
use testkit::zookeeper::ZooKeeperServer;

/// Short, so that an expiry test waits seconds, not minutes.
const SESSION_TIMEOUT_MS: u64 = 2_000;

/// A coordination service the tests open sessions on.
enum Service {
    ZooKeeper(String),
    Embedded(Embedded, String),
}

impl Service {
    fn zookeeper() -> Service {
        Service::ZooKeeper(ZooKeeperServer::shared().connect_string())
    }

    fn embedded() -> Service {
        Service::Embedded(Embedded::new(), "/tributary/test".into())
    }

    /// The same service seen under another chroot.
    fn other_chroot(&self) -> Service {
        match self {
            Service::ZooKeeper(connect) => Service::ZooKeeper(format!("{connect}-other")),
            Service::Embedded(tree, _) => {
                Service::Embedded(tree.clone(), "/tributary/other".into())
            }
        }
    }

    async fn session(&self) -> Session {
        match self {
            Service::ZooKeeper(connect) => {
                Session::ZooKeeper(zookeeper_session(connect).await, None)
            }
            Service::Embedded(tree, chroot) => {
                Session::Embedded(tree.session(chroot).expect("session"))
            }
        }
    }

    /// A session the test can expire: for ZooKeeper, one that reaches the server through a
    /// proxy the test can cut.
    async fn expirable_session(&self) -> Session {
        match self {
            Service::ZooKeeper(connect) => {
                let (server, chroot) = connect.split_at(connect.find('/').expect("chroot"));
                let proxy = testkit::proxy::start(server.parse().expect("server address")).await;
                let z = zookeeper_session(&format!("{}{chroot}", proxy.addr())).await;
                Session::ZooKeeper(z, Some(proxy))
            }
            Service::Embedded(..) => self.session().await,
        }
    }
}

async fn zookeeper_session(connect: &str) -> Arc<ZooKeeper> {
    let mut config = ZooKeeperConfig::new(connect);
    config.session_timeout_ms = SESSION_TIMEOUT_MS;
    ZooKeeper::connect(config).await.expect("ZooKeeper session")
}

enum Session {
    ZooKeeper(Arc<ZooKeeper>, Option<TcpProxy>),
    Embedded(Arc<cluster::EmbeddedSession>),
}

impl Session {
    fn coordinator(&self) -> Arc<dyn Coordinator> {
        match self {
            Session::ZooKeeper(z, _) => z.clone(),
            Session::Embedded(e) => e.clone(),
        }
    }

    /// Ends the session from the server's side. For ZooKeeper, as in production: the client is
    /// cut off for longer than the session timeout, so the server expires the session, and the
    /// client learns it when it can reach the server again.
    async fn expire(&self) {
        match self {
            Session::ZooKeeper(_, Some(proxy)) => {
                proxy.cut();
                tokio::time::sleep(Duration::from_millis(2 * SESSION_TIMEOUT_MS)).await;
                proxy.heal();
            }
            Session::ZooKeeper(_, None) => panic!("open the session with expirable_session"),
            Session::Embedded(e) => e.expire(),
        }
    }
}

async fn within<T>(what: &str, future: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(Duration::from_secs(10), future)
        .await
        .unwrap_or_else(|_| panic!("timed out: {what}"))
}

async fn create_read_set_delete(service: Service) {
    let s = service.session().await;
    let c = s.coordinator();
    c.create("/a/b/c", b"one", NodeMode::Persistent).await.unwrap();
    assert_eq!(c.get("/a/b/c").await.unwrap(), Some((b"one".to_vec(), 0)));
    assert_eq!(c.get("/a/b").await.unwrap(), Some((Vec::new(), 0)), "parents are created empty");
    assert_eq!(c.set("/a/b/c", b"two", Some(0)).await.unwrap(), 1);
    assert_eq!(c.set("/a/b/c", b"three", None).await.unwrap(), 2);
    assert_eq!(c.children("/a/b").await.unwrap(), ["c"]);
    c.delete("/a/b/c", Some(2)).await.unwrap();
    assert_eq!(c.get("/a/b/c").await.unwrap(), None);
    assert!(matches!(c.delete("/a/b/c", None).await, Err(CoordError::NoNode { .. })));
    assert!(matches!(c.set("/nope", b"x", None).await, Err(CoordError::NoNode { .. })));
    assert!(matches!(c.children("/nope").await, Err(CoordError::NoNode { .. })));
    assert!(matches!(
        c.create("no-slash", b"", NodeMode::Persistent).await,
        Err(CoordError::InvalidPath { .. })
    ));
    c.ensure("/x/y").await.unwrap();
    c.ensure("/x/y").await.unwrap();
}

async fn creating_an_existing_node_fails_with_a_typed_error(service: Service) {
    let c = service.session().await.coordinator();
    c.create("/dup", b"first", NodeMode::Persistent).await.unwrap();
    let err = c.create("/dup", b"second", NodeMode::Ephemeral).await.unwrap_err();
    assert!(matches!(err, CoordError::NodeExists { .. }), "{err}");
    assert_eq!(c.get("/dup").await.unwrap().unwrap().0, b"first");
}

/// A create tried again (its first answer lost with the connection) finds the node it made;
/// another value, or another session's node, is still somebody else's.
async fn an_ephemeral_create_tried_again_finds_its_own_node(service: Service) {
    let (one, two) = (service.session().await, service.session().await);
    let (one, two) = (one.coordinator(), two.coordinator());
    one.create("/again/mine", b"me", NodeMode::Ephemeral).await.unwrap();
    one.create("/again/mine", b"me", NodeMode::Ephemeral).await.unwrap();
    let err = one.create("/again/mine", b"changed", NodeMode::Ephemeral).await.unwrap_err();
    assert!(matches!(err, CoordError::NodeExists { .. }), "{err}");
    let err = two.create("/again/mine", b"me", NodeMode::Ephemeral).await.unwrap_err();
    assert!(matches!(err, CoordError::NodeExists { .. }), "{err}");
    assert_eq!(two.get("/again/mine").await.unwrap().unwrap().0, b"me");
}

async fn conditional_set_fails_on_a_stale_version(service: Service) {
    let c = service.session().await.coordinator();
    c.create("/v", b"0", NodeMode::Persistent).await.unwrap();
    let (_, version) = c.get("/v").await.unwrap().unwrap();
    c.set("/v", b"1", Some(version)).await.unwrap();
    let err = c.set("/v", b"2", Some(version)).await.unwrap_err();
    assert!(matches!(err, CoordError::BadVersion { .. }), "{err}");
    assert!(matches!(c.delete("/v", Some(version)).await, Err(CoordError::BadVersion { .. })));
    assert_eq!(c.get("/v").await.unwrap().unwrap().0, b"1");
}

async fn deleting_a_parent_with_children_fails(service: Service) {
    let c = service.session().await.coordinator();
    c.create("/p/child", b"", NodeMode::Persistent).await.unwrap();
    assert!(matches!(c.delete("/p", None).await, Err(CoordError::NotEmpty { .. })));
    c.create("/eph", b"", NodeMode::Ephemeral).await.unwrap();
    let err = c.create("/eph/kid", b"", NodeMode::Persistent).await.unwrap_err();
    assert!(matches!(err, CoordError::EphemeralParent { .. }), "{err}");
}

async fn ephemeral_nodes_vanish_when_their_session_ends(service: Service) {
    let owner = service.session().await;
    let watcher = service.session().await;
    owner.coordinator().create("/live/one", b"here", NodeMode::Ephemeral).await.unwrap();
    owner.coordinator().create("/kept", b"", NodeMode::Persistent).await.unwrap();
    let w = watcher.coordinator();
    let (children, watch) = w.children_and_watch("/live").await.unwrap();
    assert_eq!(children, ["one"]);
    drop(owner);
    assert_eq!(within("ephemeral node removed", watch).await, WatchEvent::ChildrenChanged);
    assert!(w.children("/live").await.unwrap().is_empty());
    assert!(w.get("/kept").await.unwrap().is_some(), "persistent nodes stay");
}

async fn ephemeral_nodes_come_back_after_the_session_expires(service: Service) {
    let owner = service.expirable_session().await;
    let observer = service.session().await.coordinator();
    let mut events = owner.coordinator().session_events();
    owner.coordinator().create("/brokers/ids/9", b"{}", NodeMode::Ephemeral).await.unwrap();
    let (_, watch) = observer.get_and_watch("/brokers/ids/9").await.unwrap();
    owner.expire().await;
    assert_eq!(within("node removed by expiry", watch).await, WatchEvent::Deleted);
    within("expired event", async {
        loop {
            match events.recv().await {
                Ok(SessionEvent::Expired) => return,
                // Connection blips may outrun a slow reader; only the expiry matters here.
                Ok(_) | Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {}
                Err(closed) => panic!("session events ended: {closed}"),
            }
        }
    })
    .await;
    let back = within("node re-created", async {
        loop {
            if let Some((data, _)) = observer.get("/brokers/ids/9").await.unwrap() {
                return data;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    assert_eq!(back, b"{}");
    // And it belongs to the new session: it goes when that one ends.
    let (_, watch) = observer.get_and_watch("/brokers/ids/9").await.unwrap();
    drop(owner);
    assert_eq!(within("node removed with new session", watch).await, WatchEvent::Deleted);
}

async fn watches_fire_on_child_and_data_changes(service: Service) {
    let c = service.session().await.coordinator();
    c.ensure("/w").await.unwrap();
    let (children, watch) = c.children_and_watch("/w").await.unwrap();
    assert!(children.is_empty());
    c.create("/w/a", b"1", NodeMode::Persistent).await.unwrap();
    assert_eq!(within("child added", watch).await, WatchEvent::ChildrenChanged);

    let (value, watch) = c.get_and_watch("/w/a").await.unwrap();
    assert_eq!(value, Some((b"1".to_vec(), 0)));
    c.set("/w/a", b"2", None).await.unwrap();
    assert_eq!(within("data changed", watch).await, WatchEvent::DataChanged);

    let (_, watch) = c.get_and_watch("/w/a").await.unwrap();
    c.delete("/w/a", None).await.unwrap();
    assert_eq!(within("node deleted", watch).await, WatchEvent::Deleted);

    let (value, watch) = c.get_and_watch("/w/later").await.unwrap();
    assert_eq!(value, None);
    c.create("/w/later", b"", NodeMode::Persistent).await.unwrap();
    assert_eq!(within("node created", watch).await, WatchEvent::Created);
}

async fn streaming_watches_see_every_membership(service: Service) {
    let c = service.session().await.coordinator();
    let mut stream = Box::pin(cluster::watch_children(c.clone(), "/members".into()));
    assert_eq!(within("first", stream.next()).await.unwrap().unwrap(), Vec::<String>::new());
    c.create("/members/a", b"", NodeMode::Ephemeral).await.unwrap();
    assert_eq!(within("second", stream.next()).await.unwrap().unwrap(), ["a"]);
    c.create("/members/b", b"", NodeMode::Ephemeral).await.unwrap();
    let mut latest = within("third", stream.next()).await.unwrap().unwrap();
    if latest.len() == 1 {
        latest = within("fourth", stream.next()).await.unwrap().unwrap();
    }
    assert_eq!(latest, ["a", "b"]);
}

async fn chroots_isolate_clusters(service: Service) {
    let a = service.session().await.coordinator();
    let b = service.other_chroot().session().await.coordinator();
    a.create("/brokers/ids/1", b"a", NodeMode::Ephemeral).await.unwrap();
    b.create("/brokers/ids/1", b"b", NodeMode::Ephemeral).await.unwrap();
    assert_eq!(a.get("/brokers/ids/1").await.unwrap().unwrap().0, b"a");
    assert_eq!(b.get("/brokers/ids/1").await.unwrap().unwrap().0, b"b");
    b.create("/only-b", b"", NodeMode::Persistent).await.unwrap();
    assert_eq!(a.get("/only-b").await.unwrap(), None);
}

async fn registries_follow_the_design_layout(service: Service) {
    let s = service.session().await;
    let r = Registry::new(s.coordinator());
    let info = BrokerInfo::new("127.0.0.1", 6667);
    r.register_broker(0, &info).await.unwrap();
    let other = service.session().await;
    let err = Registry::new(other.coordinator()).register_broker(0, &info).await.unwrap_err();
    assert!(matches!(err, RegistryError::BrokerIdTaken { id: 0, .. }), "{err}");
    assert_eq!(r.brokers().await.unwrap().get(&0), Some(&info));
    let raw = s.coordinator().get("/brokers/ids/0").await.unwrap().unwrap().0;
    assert_eq!(
        serde_json::from_slice::<serde_json::Value>(&raw).unwrap(),
        serde_json::json!({"host": "127.0.0.1", "port": 6667})
    );

    let assignment = TopicAssignment {
        partitions: [(0, vec![0]), (1, vec![0])].into_iter().collect(),
        config: Default::default(),
    };
    r.create_topic("views", &assignment).await.unwrap();
    assert_eq!(r.topics().await.unwrap(), ["views"]);
    assert_eq!(r.partitions("views").await.unwrap(), [0, 1]);
    assert!(r.partitions("nothing").await.unwrap().is_empty());

    let subscription = [("views".to_owned(), 2)].into_iter().collect();
    r.register_consumer("g", "c1", &subscription).await.unwrap();
    assert_eq!(r.consumers("g").await.unwrap().get("c1"), Some(&subscription));

    let p = 1;
    assert_eq!(r.claim("g", "views", p, "c1-0").await.unwrap(), Claim::Claimed);
    assert_eq!(
        r.claim("g", "views", p, "c1-0").await.unwrap(),
        Claim::Claimed,
        "claiming twice is fine"
    );
    assert_eq!(r.claim("g", "views", p, "c2-0").await.unwrap(), Claim::OwnedBy("c1-0".into()));
    r.release("g", "views", p, "c2-0").await.unwrap();
    assert_eq!(
        r.owners("g", "views").await.unwrap().get(&p).map(String::as_str),
        Some("c1-0"),
        "only the owner releases"
    );
    r.release("g", "views", p, "c1-0").await.unwrap();
    assert!(r.owners("g", "views").await.unwrap().is_empty());

    assert_eq!(r.offset("g", "views", p).await.unwrap(), None);
    r.commit_offset("g", "views", p, 19).await.unwrap();
    r.commit_offset("g", "views", p, 48).await.unwrap();
    assert_eq!(r.offset("g", "views", p).await.unwrap(), Some(48));
    assert_eq!(
        s.coordinator().get("/consumers/g/offsets/views/1").await.unwrap().unwrap().0,
        b"48"
    );
    assert_eq!(r.groups().await.unwrap(), ["g"]);
    assert_eq!(r.group_topics("g").await.unwrap(), ["views"]);
    assert!(matches!(
        r.create_topic("a/b", &assignment).await,
        Err(RegistryError::InvalidName { .. })
    ));
    assert!(matches!(r.claim("g", "..", 0, "c1-0").await, Err(RegistryError::InvalidName { .. })));
}

async fn replicated_partitions_follow_the_design_layout(service: Service) {
    let s = service.session().await;
    let r = Registry::new(s.coordinator());
    let live: BTreeSet<i32> = [1, 2, 3].into_iter().collect();
    let assignment = TopicAssignment {
        partitions: cluster::assign_replicas(&live, 0, 2, 3, 0, 0).unwrap(),
        config: [("min_insync_replicas".to_owned(), "2".to_owned())].into_iter().collect(),
    };
    assert_eq!(r.topic_assignment("views").await.unwrap(), None);
    let (_, created) = r.topic_assignment_and_watch("views").await.unwrap();
    r.create_topic("views", &assignment).await.unwrap();
    assert_eq!(within("topic created", created).await, WatchEvent::Created);
    let err = r.create_topic("views", &assignment).await.unwrap_err();
    assert!(matches!(err, RegistryError::TopicExists { .. }), "{err}");
    let raw = s.coordinator().get("/brokers/topics/views").await.unwrap().unwrap().0;
    assert_eq!(
        serde_json::from_slice::<serde_json::Value>(&raw).unwrap(),
        serde_json::json!({
            "partitions": {"0": [1, 2, 3], "1": [2, 3, 1]},
            "config": {"min_insync_replicas": "2"}
        })
    );
    let (read, version) = r.topic_assignment("views").await.unwrap().unwrap();
    assert_eq!(read, assignment);
    let mut more = read.clone();
    more.partitions.insert(2, vec![3, 1, 2]);
    r.set_topic_assignment("views", &more, version).await.unwrap();
    let err = r.set_topic_assignment("views", &more, version).await.unwrap_err();
    assert!(matches!(err, RegistryError::Conflict { .. }), "{err}");
    let mut gap = more.clone();
    gap.partitions.insert(7, vec![1]);
    let err = r.create_topic("gappy", &gap).await.unwrap_err();
    assert!(matches!(err, RegistryError::InvalidAssignment { .. }), "{err}");
    let (topics, _) = r.topics_and_watch().await.unwrap();
    assert_eq!(topics, ["views"]);

    let state = PartitionState::initial(&[1, 2, 3], &live, 1);
    assert_eq!(r.partition_state("views", 0).await.unwrap(), None);
    let version = r.create_partition_state("views", 0, &state).await.unwrap();
    let err = r.create_partition_state("views", 0, &state).await.unwrap_err();
    assert!(matches!(err, RegistryError::Conflict { .. }), "{err}");
    let (_, changed) = r.partition_state_and_watch("views", 0).await.unwrap();
    let shrunk = PartitionState { isr: vec![1, 2], ..state.clone() };
    let next = r.set_partition_state("views", 0, &shrunk, version).await.unwrap();
    assert_eq!(within("state changed", changed).await, WatchEvent::DataChanged);
    let err = r.set_partition_state("views", 0, &state, version).await.unwrap_err();
    assert!(matches!(err, RegistryError::Conflict { .. }), "a stale writer loses: {err}");
    assert_eq!(r.partition_state("views", 0).await.unwrap(), Some((shrunk.clone(), next)));
    let raw = s.coordinator().get("/brokers/topics/views/partitions/0/state").await.unwrap();
    assert_eq!(
        serde_json::from_slice::<serde_json::Value>(&raw.unwrap().0).unwrap(),
        serde_json::json!({"leader": 1, "leader_epoch": 0, "isr": [1, 2], "controller_epoch": 1})
    );
    r.create_partition_state("views", 1, &PartitionState::initial(&[2, 3, 1], &live, 1))
        .await
        .unwrap();
    let states = r.partition_states("views").await.unwrap();
    assert_eq!(states.keys().copied().collect::<Vec<_>>(), [0, 1]);
    assert_eq!(states[&1].0.leader, 2);
    let leaders = r.partition_leaders("views").await.unwrap();
    assert_eq!(leaders.into_iter().collect::<Vec<_>>(), [(0, 1), (1, 2)]);

    // Log starts moved by DeleteRecords: only forward, watched, under the topic only.
    let (starts, moved) = r.log_starts_and_watch("views").await.unwrap();
    assert!(starts.is_empty());
    assert_eq!(r.advance_log_start("views", 1, 150).await.unwrap(), 150);
    assert_eq!(within("a log start moved", moved).await, WatchEvent::Created);
    assert_eq!(r.advance_log_start("views", 1, 120).await.unwrap(), 150, "never back");
    assert_eq!(r.advance_log_start("views", 0, 7).await.unwrap(), 7);
    let (starts, _) = r.log_starts_and_watch("views").await.unwrap();
    assert_eq!(starts.into_iter().collect::<Vec<_>>(), [(0, 7), (1, 150)]);
    let raw = s.coordinator().get("/brokers/topics/views/log_starts").await.unwrap();
    assert_eq!(
        serde_json::from_slice::<serde_json::Value>(&raw.unwrap().0).unwrap(),
        serde_json::json!({"0": 7, "1": 150})
    );
    assert!(r.advance_log_start("gone", 0, 1).await.is_err());
    assert_eq!(s.coordinator().get("/brokers/topics/gone").await.unwrap(), None);
}

async fn one_controller_at_a_time_in_rising_epochs(service: Service) {
    let first = service.session().await;
    let second = service.session().await;
    let (a, b) = (Registry::new(first.coordinator()), Registry::new(second.coordinator()));
    assert_eq!(a.controller().await.unwrap(), None);
    assert_eq!(a.controller_epoch().await.unwrap(), 0);
    assert_eq!(a.elect_controller(1).await.unwrap(), Some(1));
    assert_eq!(b.elect_controller(2).await.unwrap(), None, "broker 1 holds it");
    assert_eq!(b.controller().await.unwrap(), Some(1));
    let (_, watch) = b.controller_and_watch().await.unwrap();
    b.resign_controller(2).await.unwrap();
    assert_eq!(a.controller().await.unwrap(), Some(1), "only the holder resigns");
    drop(first);
    drop(a);
    assert_eq!(within("controller gone", watch).await, WatchEvent::Deleted);
    assert_eq!(b.elect_controller(2).await.unwrap(), Some(2), "a new controller, a new epoch");
    assert_eq!(b.controller_epoch().await.unwrap(), 2);
    b.resign_controller(2).await.unwrap();
    assert_eq!(b.controller().await.unwrap(), None);
}

async fn a_controller_whose_session_expired_is_elected_again_in_a_new_epoch(service: Service) {
    let s = service.expirable_session().await;
    let r = Registry::new(s.coordinator());
    assert_eq!(r.elect_controller(4).await.unwrap(), Some(1));
    s.expire().await;
    // The backend creates the node again in the new session; the broker, told of the expiry,
    // stands again and must not act in its old epoch.
    let back = within("controller node re-created", async {
        loop {
            if let Ok(Some(id)) = r.controller().await {
                return id;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    assert_eq!(back, 4);
    assert_eq!(r.elect_controller(4).await.unwrap(), Some(2));
}

/// Registers broker `id` in a session of its own: the broker is live while the session is.
async fn live_broker(service: &Service, id: i32) -> Session {
    let session = service.session().await;
    let info = BrokerInfo::new("127.0.0.1", 9000 + id as u16);
    Registry::new(session.coordinator()).register_broker(id, &info).await.unwrap();
    session
}

/// Creates `topic` with `replicas` per partition and each partition's first state.
async fn create_replicated(
    r: &Registry,
    topic: &str,
    replicas: &[&[i32]],
    config: &[(&str, &str)],
    isr: impl Fn(&[i32]) -> Vec<i32>,
) {
    let assignment = TopicAssignment {
        partitions: replicas.iter().enumerate().map(|(p, r)| (p as i32, r.to_vec())).collect(),
        config: config.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
    };
    r.create_topic(topic, &assignment).await.unwrap();
    for (p, replicas) in replicas.iter().enumerate() {
        let state = PartitionState {
            leader: replicas[0],
            leader_epoch: 0,
            isr: isr(replicas),
            controller_epoch: 0,
        };
        r.create_partition_state(topic, p as i32, &state).await.unwrap();
    }
}

async fn state_becomes(r: &Registry, topic: &str, partition: i32, expected: (i32, i32, &[i32])) {
    let (leader, epoch, isr) = expected;
    within(&format!("{topic}-{partition} led by {leader} in epoch {epoch}"), async {
        loop {
            if let Some((s, _)) = r.partition_state(topic, partition).await.unwrap()
                && (s.leader, s.leader_epoch, s.isr.as_slice()) == (leader, epoch, isr)
            {
                return;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
}

async fn the_controller_moves_leadership_off_dead_brokers(service: Service) {
    let one = live_broker(&service, 1).await;
    let two = live_broker(&service, 2).await;
    let three = live_broker(&service, 3).await;
    let r = Registry::new(one.coordinator());
    create_replicated(&r, "t", &[&[1, 2, 3], &[2, 3, 1]], &[], |r| r.to_vec()).await;
    let controller = Controller::elect(r.clone(), 1).await.unwrap().expect("elected");
    let stop = tokio_util::sync::CancellationToken::new();
    let running = tokio::spawn(controller.run(stop.clone()));
    drop(two);
    state_becomes(&r, "t", 1, (3, 1, &[3, 1])).await;
    state_becomes(&r, "t", 0, (1, 0, &[1, 3])).await;
    drop(three);
    state_becomes(&r, "t", 1, (1, 2, &[1])).await;
    let (state, _) = r.partition_state("t", 1).await.unwrap().unwrap();
    assert_eq!(state.controller_epoch, r.controller_epoch().await.unwrap());
    stop.cancel();
    running.await.unwrap().unwrap();
    assert_eq!(r.controller().await.unwrap(), None, "a stopped controller resigns");
}

async fn an_offline_partition_waits_for_a_replica_that_may_lead(service: Service) {
    let one = live_broker(&service, 1).await;
    let two = live_broker(&service, 2).await;
    let _three = live_broker(&service, 3).await;
    let r = Registry::new(one.coordinator());
    let only_first = |r: &[i32]| vec![r[0]];
    create_replicated(&r, "clean", &[&[2, 3]], &[], only_first).await;
    create_replicated(&r, "unclean", &[&[2, 3]], &[(UNCLEAN_LEADER_ELECTION, "true")], only_first)
        .await;
    let controller = Controller::elect(r.clone(), 1).await.unwrap().expect("elected");
    let offline = controller.offline_partitions();
    let stop = tokio_util::sync::CancellationToken::new();
    let running = tokio::spawn(controller.run(stop.clone()));
    drop(two);
    state_becomes(&r, "clean", 0, (cluster::NO_LEADER, 1, &[2])).await;
    state_becomes(&r, "unclean", 0, (3, 1, &[3])).await;
    let count = || offline.load(std::sync::atomic::Ordering::Relaxed);
    within("the controller counts the offline partition", async {
        while count() != 1 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    let _two_again = live_broker(&service, 2).await;
    state_becomes(&r, "clean", 0, (2, 2, &[2])).await;
    within("no partition offline", async {
        while count() != 0 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    stop.cancel();
    running.await.unwrap().unwrap();
}

async fn a_controller_elected_after_another_fences_it(service: Service) {
    let one = live_broker(&service, 1).await;
    let two = live_broker(&service, 2).await;
    let (r1, r2) = (Registry::new(one.coordinator()), Registry::new(two.coordinator()));
    create_replicated(&r1, "f", &[&[1, 2]], &[], |r| r.to_vec()).await;
    let first = Controller::elect(r1.clone(), 1).await.unwrap().expect("elected");
    assert!(first.reconcile().await.unwrap().is_empty(), "nothing to do");
    r1.resign_controller(1).await.unwrap();
    let second = Controller::elect(r2.clone(), 2).await.unwrap().expect("elected");
    assert_eq!(second.epoch(), first.epoch() + 1);
    let err = first.reconcile().await.unwrap_err();
    assert!(matches!(err, ControllerError::Fenced { .. }), "{err}");
    let stop = tokio_util::sync::CancellationToken::new();
    let err = first.run(stop).await.unwrap_err();
    assert!(matches!(err, ControllerError::Fenced { .. }), "{err}");
}

async fn a_controller_that_loses_its_session_stops(service: Service) {
    let s = service.expirable_session().await;
    let r = Registry::new(s.coordinator());
    let controller = Controller::elect(r.clone(), 5).await.unwrap().expect("elected");
    let running = tokio::spawn(controller.run(tokio_util::sync::CancellationToken::new()));
    s.expire().await;
    let ended = within("the controller stops", running).await.unwrap();
    assert!(matches!(ended, Err(ControllerError::Fenced { .. })), "{ended:?}");
}

macro_rules! conformance {
    ($($test:ident),* $(,)?) => {
        mod zookeeper_backend {
            $(
                #[tokio::test]
                async fn $test() {
                    super::$test(super::Service::zookeeper()).await
                }
            )*
        }
        mod embedded_backend {
            $(
                #[tokio::test]
                async fn $test() {
                    super::$test(super::Service::embedded()).await
                }
            )*
        }
    };
}

conformance!(
    create_read_set_delete,
    creating_an_existing_node_fails_with_a_typed_error,
    an_ephemeral_create_tried_again_finds_its_own_node,
    conditional_set_fails_on_a_stale_version,
    deleting_a_parent_with_children_fails,
    ephemeral_nodes_vanish_when_their_session_ends,
    ephemeral_nodes_come_back_after_the_session_expires,
    watches_fire_on_child_and_data_changes,
    streaming_watches_see_every_membership,
    chroots_isolate_clusters,
    registries_follow_the_design_layout,
    replicated_partitions_follow_the_design_layout,
    one_controller_at_a_time_in_rising_epochs,
    a_controller_whose_session_expired_is_elected_again_in_a_new_epoch,
    the_controller_moves_leadership_off_dead_brokers,
    an_offline_partition_waits_for_a_replica_that_may_lead,
    a_controller_elected_after_another_fences_it,
    a_controller_that_loses_its_session_stops,
);
