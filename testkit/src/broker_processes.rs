//! Brokers as processes of the real `broker` binary, registered in one chroot of a real
//! ZooKeeper: what only processes show — a leader killed with `kill -9`, a data directory
//! wiped before the restart, the same id coming back — and a run that kills partition leaders
//! one after another while an acks-all producer keeps producing, timing every failover.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use client::{Partitioner, Producer, ProducerConfig, RegistryBrokers};
use cluster::{PartitionState, Registry, ZooKeeper, ZooKeeperConfig};
use protocol::Acks;
use tempfile::TempDir;
use tokio::sync::mpsc;

use crate::process::{Process, free_port};

/// How long the run waits for the cluster to heal (a leader elected, the ISR full again).
const HEAL_TIMEOUT: Duration = Duration::from_secs(120);

/// Brokers `0..n` of one cluster, each a process of `binary` with its own port and data
/// directory, all killed when this is dropped.
pub struct BrokerProcesses {
    /// `host:port/chroot` of the cluster.
    pub connect: String,
    binary: PathBuf,
    dir: TempDir,
    args: Vec<String>,
    brokers: Vec<Slot>,
}

struct Slot {
    port: u16,
    /// The port of its Kafka listener when the arguments ask for one on port 0: the broker's
    /// own, kept across restarts as a deployment's would be, so that a client's bootstrap
    /// list stays good.
    kafka_port: u16,
    /// The ports it advertises when the arguments ask for `--advertised-port 0` and
    /// `--kafka-advertised-port 0`: for a proxy in front of each listener.
    advertised_port: u16,
    kafka_advertised_port: u16,
    process: Option<Process>,
    /// How many times it was started: each start logs to a file of its own.
    starts: u32,
    /// Flags of this broker's own, with their values, in place of the common ones.
    own: Vec<(String, String)>,
}

impl BrokerProcesses {
    /// Starts `count` brokers of `binary` registered at `connect` (a ZooKeeper connect string
    /// with the cluster's chroot), each with `args` after the flags that make it broker `id`
    /// (`--kafka-port 0` becomes a port of each broker's own, the same at every restart, as
    /// do `--advertised-port 0` and `--kafka-advertised-port 0`: see
    /// [`BrokerProcesses::advertised_ports`]).
    pub fn start(binary: &Path, connect: &str, count: i32, args: &[&str]) -> BrokerProcesses {
        let mut brokers = BrokerProcesses {
            connect: connect.to_owned(),
            binary: binary.to_owned(),
            dir: tempfile::tempdir().expect("temp dir"),
            args: args.iter().map(|a| a.to_string()).collect(),
            brokers: (0..count)
                .map(|_| Slot {
                    port: free_port(),
                    kafka_port: free_port(),
                    advertised_port: free_port(),
                    kafka_advertised_port: free_port(),
                    process: None,
                    starts: 0,
                    own: Vec::new(),
                })
                .collect(),
        };
        for id in 0..count {
            brokers.restart(id);
        }
        brokers
    }

    pub fn count(&self) -> i32 {
        self.brokers.len() as i32
    }

    pub fn addr(&self, id: i32) -> String {
        format!("127.0.0.1:{}", self.slot(id).port)
    }

    /// Broker `id`'s listening ports and the ports it advertises, `(port, advertised port,
    /// kafka port, kafka advertised port)`: what a proxy in front of it listens on and
    /// relays to.
    pub fn advertised_ports(&self, id: i32) -> (u16, u16, u16, u16) {
        let slot = self.slot(id);
        (slot.port, slot.advertised_port, slot.kafka_port, slot.kafka_advertised_port)
    }

    pub fn data_dir(&self, id: i32) -> PathBuf {
        self.dir.path().join(format!("broker-{id}"))
    }

    /// Everything broker `id` logged, over all its starts.
    pub fn log(&self, id: i32) -> String {
        (1..=self.slot(id).starts)
            .map(|n| std::fs::read_to_string(self.log_path(id, n)).unwrap_or_default())
            .collect::<Vec<_>>()
            .join("\n--- restarted ---\n")
    }

    /// Each broker's state (running, or how its process ended) and the last lines it logged:
    /// what a failed wait for the cluster reports, since the logs go with the test's directory.
    pub fn report(&mut self) -> String {
        let mut report = String::new();
        for id in 0..self.count() {
            let state = match self.slot_mut(id).process.as_mut().map(|p| p.child.try_wait()) {
                None => "killed".to_owned(),
                Some(Ok(None)) => "running".to_owned(),
                Some(Ok(Some(status))) => format!("exited: {status}"),
                Some(Err(e)) => format!("unknown: {e}"),
            };
            let log = self.log(id);
            let lines: Vec<&str> = log.lines().collect();
            let tail = lines[lines.len().saturating_sub(20)..].join("\n");
            report.push_str(&format!("--- broker {id} ({state}), its last lines:\n{tail}\n"));
        }
        report
    }

    /// `kill -9`: no flush, no unregistering; its ZooKeeper node goes when its session expires.
    pub fn kill(&mut self, id: i32) {
        if let Some(mut process) = self.slot_mut(id).process.take() {
            let _ = process.child.kill();
            let _ = process.child.wait();
        }
    }

    /// Deletes broker `id`'s data directory (it must be killed): a lost disk.
    pub fn wipe(&self, id: i32) {
        assert!(self.slot(id).process.is_none(), "wipe a killed broker only");
        match std::fs::remove_dir_all(self.data_dir(id)) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => panic!("wipe: {e}"),
            _ => {}
        }
    }

    /// [`BrokerProcesses::restart`] with `flags` (flag, value) of its own from now on, in place
    /// of the common arguments' (a broker configured apart from the others).
    pub fn restart_with(&mut self, id: i32, flags: &[(&str, &str)]) {
        self.slot_mut(id).own = flags.iter().map(|&(f, v)| (f.to_owned(), v.to_owned())).collect();
        self.restart(id);
    }

    /// Starts broker `id` (again) on its port and data directory; returns once it listens.
    pub fn restart(&mut self, id: i32) {
        self.kill(id);
        let slot = self.slot(id);
        let port = slot.port.to_string();
        let data_dir = self.data_dir(id);
        let mut args: Vec<String> = [
            "--broker-id",
            &id.to_string(),
            "--port",
            &port,
            "--data-dir",
            data_dir.to_str().expect("UTF-8 path"),
            "--zookeeper",
            &self.connect,
        ]
        .map(String::from)
        .to_vec();
        let mut asked = self.args.iter().peekable();
        while let Some(arg) = asked.next() {
            if slot.own.iter().any(|(flag, _)| flag == arg) {
                asked.next(); // its value: the broker's own goes in instead
                continue;
            }
            args.push(arg.clone());
            let own_port = match arg.as_str() {
                "--kafka-port" => slot.kafka_port,
                "--advertised-port" => slot.advertised_port,
                "--kafka-advertised-port" => slot.kafka_advertised_port,
                _ => continue,
            };
            if asked.peek().is_some_and(|p| *p == "0") {
                asked.next();
                args.push(own_port.to_string());
            }
        }
        args.extend(slot.own.iter().flat_map(|(flag, value)| [flag.clone(), value.clone()]));
        let starts = slot.starts + 1;
        let log_path = self.log_path(id, starts);
        let process = Process::spawn(&self.binary, &args, slot.port, &log_path);
        let slot = self.slot_mut(id);
        slot.starts = starts;
        slot.process = Some(process);
    }

    fn log_path(&self, id: i32, start: u32) -> PathBuf {
        self.dir.path().join(format!("broker-{id}.{start}.log"))
    }

    fn slot(&self, id: i32) -> &Slot {
        &self.brokers[usize::try_from(id).expect("broker id")]
    }

    fn slot_mut(&mut self, id: i32) -> &mut Slot {
        &mut self.brokers[usize::try_from(id).expect("broker id")]
    }
}

/// A session in `connect` for reading the registry.
pub async fn registry(connect: &str) -> Registry {
    let mut config = ZooKeeperConfig::new(connect);
    config.session_timeout_ms = 10_000;
    Registry::new(ZooKeeper::connect(config).await.expect("ZooKeeper session"))
}

/// Three brokers of `binary` started with `args` in the ZooKeeper `connect`, all registered,
/// and `topic` created on them: `partitions` partitions of replication factor 3 and
/// `min_insync_replicas` 2, each led and with all three replicas in its ISR.
pub async fn three_with_topic(
    binary: &Path,
    connect: &str,
    args: &[&str],
    topic: &str,
    partitions: i32,
) -> (BrokerProcesses, Registry) {
    const WAIT: Duration = Duration::from_secs(120);
    let brokers = BrokerProcesses::start(binary, connect, 3, args);
    let registry = registry(connect).await;
    crate::eventually(WAIT, "three brokers registered", || async {
        (registry.brokers().await.ok()?.len() == 3).then_some(())
    })
    .await;
    let configs = [("replication_factor", "3"), ("min_insync_replicas", "2")];
    let conn = client::Connection::connect(&brokers.addr(0)).await.expect("connect");
    conn.create_topic(topic, partitions, &configs).await.expect("topic created");
    for partition in 0..partitions {
        crate::eventually(WAIT, "every replica in sync", || async {
            let (state, _) = registry.partition_state(topic, partition).await.ok()??;
            (state.leader >= 0 && state.isr.len() == 3).then_some(())
        })
        .await;
    }
    (brokers, registry)
}

/// What [`kill_leaders`] does.
#[derive(Debug, Clone)]
pub struct KillPlan {
    pub topic: String,
    pub partitions: i32,
    /// Leaders killed, one after another; kill `k` takes the leader of partition
    /// `k % partitions`, and the cluster heals (every ISR full) before the next.
    pub kills: usize,
    /// The kill after which the killed broker's data directory is wiped and the broker started
    /// again at once (before its session has expired).
    pub wipe_at: Option<usize>,
    /// Messages per second the background producer offers, spread over the partitions.
    pub rate: u64,
    /// Bytes of each message.
    pub message_bytes: usize,
    /// Whether the producer is an idempotent one ([`ProducerConfig::idempotence`]).
    pub idempotence: bool,
}

/// What a [`kill_leaders`] run saw.
#[derive(Debug, Default)]
pub struct KillReport {
    /// Each kill's failover: the leader killed → the first acks-all produce to its partition
    /// that succeeds.
    pub failovers: Vec<Duration>,
    /// Every acknowledged payload, by partition, in the order produced.
    pub acknowledged: BTreeMap<i32, Vec<Vec<u8>>>,
    /// Messages the producer gave up on (never acknowledged; they may or may not be stored).
    pub unacknowledged: u64,
}

/// The payload of message `seq` to `partition`: `{partition}:{seq}:` padded to `bytes`.
pub fn payload(partition: i32, seq: u64, bytes: usize) -> Vec<u8> {
    let mut payload = format!("{partition}:{seq:010}:").into_bytes();
    payload.resize(bytes.max(payload.len()), b'x');
    payload
}

/// The partition a message goes to, from its key (4 bytes, big-endian).
fn by_key_partition() -> Partitioner {
    Partitioner::Custom(Arc::new(|_, key, partitions| {
        let wanted = key.map_or(0, |k| i32::from_be_bytes(k.try_into().unwrap_or_default()));
        // A partition without a live leader is missing from the list: an index past its end
        // makes the send fail at once, and the caller counts it as not acknowledged.
        partitions.iter().position(|p| p.partition == wanted).unwrap_or(usize::MAX)
    }))
}

/// An acks-all producer that finds leaders in the registry and retries through a failover.
pub fn acks_all_producer(registry: &Registry) -> Producer {
    acks_all_producer_with(registry, false)
}

/// [`acks_all_producer`], an idempotent one if `idempotence`.
pub fn acks_all_producer_with(registry: &Registry, idempotence: bool) -> Producer {
    let config = ProducerConfig {
        idempotence,
        acks: Acks::All,
        linger_ms: 2,
        partitioner: by_key_partition(),
        retries_max: 1_000,
        retry_backoff_ms: 20,
        retry_backoff_max_ms: 200,
        request_timeout_ms: 10_000,
        metadata_refresh_ms: 200,
        ..ProducerConfig::default()
    };
    Producer::new(config, Arc::new(RegistryBrokers::new(registry.clone()))).expect("producer")
}

/// Kills the leader of one partition after another (`kill -9`), restarting each, while a
/// producer with acks all offers `plan.rate` messages a second; returns every failover's time
/// and what was acknowledged. The topic must exist with every partition's ISR full.
pub async fn kill_leaders(
    brokers: &mut BrokerProcesses,
    registry: &Registry,
    plan: &KillPlan,
) -> KillReport {
    let producer = Arc::new(acks_all_producer_with(registry, plan.idempotence));
    let (acked_tx, mut acked_rx) = mpsc::unbounded_channel();
    let stop = tokio_util::sync::CancellationToken::new();
    let sequencer = Arc::new(Sequencer::default());
    let background = tokio::spawn(steady_producer(
        Arc::clone(&producer),
        Arc::clone(&sequencer),
        plan.clone(),
        acked_tx.clone(),
        stop.clone(),
    ));
    let mut report = KillReport::default();
    for kill in 0..plan.kills {
        let partition = (kill % plan.partitions as usize) as i32;
        let before = healed_state(brokers, registry, plan, partition).await;
        brokers.kill(before.leader);
        let killed_at = Instant::now();
        tracing::info!(kill, partition, leader = before.leader, "killed the leader");
        let wiped = plan.wipe_at == Some(kill);
        if wiped {
            // A lost disk, and a supervisor that restarts the broker at once on a new one,
            // before its old session has expired.
            brokers.wipe(before.leader);
            brokers.restart(before.leader);
        }
        // The first acks-all produce to the partition that succeeds ends its failover.
        loop {
            if let (message, Some(pending)) = sequencer.enqueue(&producer, plan, partition).await
                && pending.await.is_ok()
            {
                let _ = acked_tx.send((partition, message));
                break;
            }
            assert!(killed_at.elapsed() < HEAL_TIMEOUT, "no leader for {partition} after the kill");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        report.failovers.push(killed_at.elapsed());
        if !wiped {
            brokers.restart(before.leader);
        }
        tracing::info!(kill, partition, killed = before.leader, failover = ?killed_at.elapsed(), "failed over");
    }
    for partition in 0..plan.partitions {
        healed_state(brokers, registry, plan, partition).await;
    }
    stop.cancel();
    report.unacknowledged = background.await.expect("producer task");
    drop(acked_tx);
    while let Some((partition, message)) = acked_rx.recv().await {
        report.acknowledged.entry(partition).or_default().push(message);
    }
    for messages in report.acknowledged.values_mut() {
        // Acknowledged by the background producer and the probes apart: in the order sent.
        messages.sort_by_key(|m| sequence(m));
    }
    producer.close().await;
    report
}

/// Numbers messages in the order they enter the producer, whoever sends them.
#[derive(Default)]
struct Sequencer {
    next: tokio::sync::Mutex<u64>,
}

impl Sequencer {
    /// Enqueues the next message for `partition`; its pending acknowledgement, unless the
    /// producer refused it at once.
    async fn enqueue(
        &self,
        producer: &Producer,
        plan: &KillPlan,
        partition: i32,
    ) -> (Vec<u8>, Option<client::Pending>) {
        let mut next = self.next.lock().await;
        let message = payload(partition, *next, plan.message_bytes);
        *next += 1;
        let key = partition.to_be_bytes();
        let pending = producer.enqueue(&plan.topic, Some(&key), &message).await.ok();
        (message, pending)
    }
}

/// Every message of `topic`'s `partition` as the broker at `addr` serves it: `(offset,
/// payload)` in log order, up to its end now.
pub async fn read_partition(addr: &str, topic: &str, partition: i32) -> Vec<(i64, Vec<u8>)> {
    let consumer =
        client::SimpleConsumer::connect(addr, Default::default()).await.expect("connect");
    let end = consumer.latest_offset(topic, partition).await.expect("latest offset");
    let mut offset = 0;
    let mut messages = Vec::new();
    while offset < end {
        let fetched = consumer.fetch(topic, partition, offset).await.expect("fetch");
        let mut read = fetched.iter();
        for message in read.by_ref() {
            let message = message.expect("a valid message");
            messages.push((message.offset, message.payload.to_vec()));
        }
        // Past control batches too (a partition may end in one).
        offset = read.next_offset();
    }
    messages
}

/// Each `.log` segment file of the partition directory `dir`, by name, with its bytes: what
/// must be the same on every replica.
pub fn segment_files(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    std::fs::read_dir(dir)
        .expect("partition directory")
        .map(|e| e.expect("directory entry").path())
        .filter(|p| p.extension().is_some_and(|x| x == "log"))
        .map(|p| {
            let name = p.file_name().expect("file name").to_string_lossy().into_owned();
            (name, std::fs::read(&p).expect("segment file"))
        })
        .collect()
}

/// The sequence number in a [`payload`].
pub fn sequence(payload: &[u8]) -> u64 {
    let text = std::str::from_utf8(payload).unwrap_or_default();
    text.split(':').nth(1).and_then(|s| s.parse().ok()).unwrap_or(u64::MAX)
}

/// Waits until `partition` has a leader and its ISR holds every replica.
async fn healed_state(
    brokers: &BrokerProcesses,
    registry: &Registry,
    plan: &KillPlan,
    partition: i32,
) -> PartitionState {
    let deadline = Instant::now() + HEAL_TIMEOUT;
    loop {
        let found = registry.partition_state(&plan.topic, partition).await;
        if let Ok(Some((state, _))) = &found {
            let state = state.clone();
            let assignment = registry.topic_assignment(&plan.topic).await.ok().flatten();
            let replicas = assignment.and_then(|a| a.0.partitions.get(&partition).map(Vec::len));
            if state.leader >= 0 && Some(state.isr.len()) == replicas {
                return state;
            }
        }
        if Instant::now() > deadline {
            for id in 0..brokers.count() {
                let log = brokers.log(id);
                let tail: Vec<&str> = log.lines().rev().take(40).collect();
                eprintln!("--- broker {id}, last lines:");
                for line in tail.iter().rev() {
                    eprintln!("{line}");
                }
            }
            panic!("partition {partition} did not heal in {HEAL_TIMEOUT:?}: {found:?}");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Offers `plan.rate` messages a second round robin over the partitions until `stop`, sending
/// each acknowledged one to `acked`; returns how many were not acknowledged.
async fn steady_producer(
    producer: Arc<Producer>,
    sequencer: Arc<Sequencer>,
    plan: KillPlan,
    acked: mpsc::UnboundedSender<(i32, Vec<u8>)>,
    stop: tokio_util::sync::CancellationToken,
) -> u64 {
    let (pending_tx, mut pending_rx) = mpsc::channel(100_000);
    let collector = tokio::spawn(async move {
        let mut failed = 0;
        while let Some((partition, message, pending)) = pending_rx.recv().await {
            match pending.await {
                Ok(_) => {
                    let _ = acked.send((partition, message));
                }
                Err(_) => failed += 1,
            }
        }
        failed
    });
    let period = Duration::from_secs_f64(1.0 / plan.rate.max(1) as f64);
    let mut ticker = tokio::time::interval(period);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut failed = 0;
    let mut sent = 0u64;
    while !stop.is_cancelled() {
        tokio::select! {
            _ = ticker.tick() => {}
            _ = stop.cancelled() => break,
        }
        let partition = (sent % plan.partitions as u64) as i32;
        sent += 1;
        match sequencer.enqueue(&producer, &plan, partition).await {
            (message, Some(pending)) => {
                let _ = pending_tx.send((partition, message, pending)).await;
            }
            (_, None) => failed += 1,
        }
    }
    drop(pending_tx);
    failed + collector.await.expect("collector")
}
