//! The agent: validation and encoding, the spool, the shipper, the audit publisher and the
//! file tailers, started together and shut down together. HTTP, tailing and Rust callers all
//! come in through [`Agent::send_batch`].

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use client::{BrokerSource, Partitioner, Producer, ProducerConfig, RegistryBrokers, StaticBrokers};
use cluster::{Coordinator, Registry};
use events::AuditPublisher;
use protocol::Acks;
use schema_registry::RegistryClient;
use serde_json::Value;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::config::{Config, ConfigError};
use crate::event::{self, EncodedEvent, EventError, HeaderDefaults, Schemas, TopicSchema};
use crate::metrics::Metrics;
use crate::send_error::SendError;
use crate::spool::{NewEvent, Spool, SpoolError, SpoolOptions};
use crate::{audit, ship, tail};

/// Where the live brokers are.
#[derive(Clone)]
pub enum Brokers {
    /// Broker or load-balancer addresses: events go to partition −1 of any of them.
    Addrs(Vec<String>),
    /// The broker registry of the live cluster (ZooKeeper or the embedded backend).
    Cluster(Arc<dyn Coordinator>),
}

#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum AgentError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error(transparent)]
    Spool(#[from] SpoolError),
    #[error("cannot start the producer: {0}")]
    Producer(#[from] client::ProducerError),
}

struct Inner {
    config: Config,
    spool: Arc<Spool>,
    schemas: Schemas,
    defaults: HeaderDefaults,
    metrics: Arc<Metrics>,
    producer: Producer,
    closed: AtomicBool,
    /// Stops the tailers (first, on shutdown).
    stop_input: CancellationToken,
    /// Stops shipping, audit publication and checkpoints (after the drain).
    stop: CancellationToken,
    inputs: Mutex<Vec<JoinHandle<()>>>,
    workers: Mutex<Vec<JoinHandle<()>>>,
}

/// A running agent; clones share it.
#[derive(Clone)]
pub struct Agent {
    inner: Arc<Inner>,
}

impl Agent {
    /// Opens the spool (replaying what it holds) and starts shipping, auditing and tailing.
    pub async fn start(
        config: Config,
        brokers: Brokers,
        registry: Arc<RegistryClient>,
    ) -> Result<Agent, AgentError> {
        config.validate()?;
        let metrics = Arc::new(Metrics::default());
        let host = config.host();
        let options = SpoolOptions {
            dir: config.spool_dir.clone(),
            max_bytes: config.spool_max_bytes,
            segment_bytes: config.segment_bytes(),
            full: config.spool_full,
            host: host.clone(),
            window_ms: config.audit_window_ms,
        };
        let spool_metrics = Arc::clone(&metrics);
        let spool = tokio::task::spawn_blocking(move || Spool::open(options, spool_metrics))
            .await
            .expect("opening the spool does not panic")?;
        let spool = Arc::new(spool);
        // The agent picks each chunk's partition itself (its batches are idempotent ones,
        // numbered per partition): the brokers are asked where the partitions are led, and
        // the leaders are sent to directly, a load balancer given as `brokers` included.
        let source: Arc<dyn BrokerSource> = match brokers {
            Brokers::Addrs(addrs) => Arc::new(
                StaticBrokers::new(addrs)
                    .with_connect_timeout_ms(3_000)
                    .with_tls(config.client_tls()?),
            ),
            Brokers::Cluster(coordinator) => {
                Arc::new(RegistryBrokers::new(Registry::new(coordinator)))
            }
        };
        let producer = Producer::new(producer_config(&config)?, source)?;
        let inner = Arc::new(Inner {
            schemas: Schemas::new(Arc::clone(&registry), config.schema_refresh_ms),
            defaults: HeaderDefaults { server: host, service: config.service.clone() },
            spool: Arc::clone(&spool),
            metrics: Arc::clone(&metrics),
            producer: producer.clone(),
            closed: AtomicBool::new(false),
            stop_input: CancellationToken::new(),
            stop: CancellationToken::new(),
            inputs: Mutex::new(Vec::new()),
            workers: Mutex::new(Vec::new()),
            config,
        });
        let agent = Agent { inner };
        let stop = agent.inner.stop.clone();
        let config = &agent.inner.config;
        let workers = vec![
            tokio::spawn(ship::run(
                Arc::clone(&spool),
                producer.clone(),
                Arc::clone(&metrics),
                ship::ChunkLimits { messages: config.batch_messages, bytes: config.batch_bytes },
                config.retry_backoff_max_ms,
                stop.clone(),
            )),
            tokio::spawn({
                let counts =
                    audit::SpoolCounts { spool: Arc::clone(&spool), metrics: Arc::clone(&metrics) };
                let publisher = AuditPublisher::new(registry, producer);
                let interval = Duration::from_millis(config.audit_publish_ms);
                let stop = stop.clone();
                async move { publisher.run(&counts, interval, stop).await }
            }),
            tokio::spawn(checkpoints(Arc::clone(&spool), config.spool_ack_sync_ms, stop)),
        ];
        *lock(&agent.inner.workers) = workers;
        let tailers = config
            .tails()?
            .into_iter()
            .map(|spec| {
                let tailer = tail::Tailer::new(
                    agent.clone(),
                    Arc::clone(&metrics),
                    &config.spool_dir,
                    spec,
                    config.tail_poll_ms,
                );
                tokio::spawn(tailer.run(agent.inner.stop_input.clone()))
            })
            .collect();
        *lock(&agent.inner.inputs) = tailers;
        Ok(agent)
    }

    /// Validates and spools one event (a JSON object in the topic's schema); returns once it
    /// is durably spooled.
    pub async fn send(&self, topic: &str, event: &Value) -> Result<(), SendError> {
        self.send_batch(topic, std::slice::from_ref(event)).await.map(|_| ())
    }

    /// Validates every event, then spools them all durably, or none: the first invalid event
    /// refuses the whole call. Returns how many were accepted.
    pub async fn send_batch(&self, topic: &str, events: &[Value]) -> Result<usize, SendError> {
        let encode = |index: usize, encoder: &Encoder| {
            encoder.value(&events[index]).map_err(Refused::Event::<SendError>)
        };
        self.send_each(topic, events.len(), encode).await
    }

    /// Like [`Agent::send_batch`], with the `count` events encoded one at a time by `encode`
    /// (given the index and the topic's [`Encoder`]): each is encoded and dropped before the
    /// next, so a caller parsing a request body holds the body and the encoded events, never
    /// every parsed event at once. `encode` may refuse the whole call itself (bad JSON, say).
    pub(crate) async fn send_each<E: From<SendError>>(
        &self,
        topic: &str,
        count: usize,
        mut encode: impl FnMut(usize, &Encoder) -> Result<EncodedEvent, Refused<E>>,
    ) -> Result<usize, E> {
        let inner = &self.inner;
        if inner.closed.load(Ordering::Acquire) {
            return Err(SendError::ShuttingDown.into());
        }
        let reject = |index: usize, source: EventError| {
            if source.is_bad_event() {
                inner.metrics.rejected.inc_by(count as u64);
                inner.metrics.rejected_requests.inc();
                SendError::Invalid { index, source }
            } else {
                SendError::Unavailable(source)
            }
        };
        let schema = inner.schemas.get(topic).await.map_err(|e| reject(0, e))?;
        let encoder = Encoder {
            schema: &schema,
            defaults: &inner.defaults,
            now_ms: service::now_ms(),
            max_bytes: inner.config.max_event_bytes,
        };
        let topic: Arc<str> = Arc::from(topic);
        let mut spooled = Vec::with_capacity(count);
        for index in 0..count {
            let encoded = encode(index, &encoder).map_err(|refused| match refused {
                Refused::Event(e) => reject(index, e).into(),
                Refused::Call(e) => e,
            })?;
            spooled.push(NewEvent {
                topic: Arc::clone(&topic),
                time_ms: encoded.time_ms,
                payload: encoded.payload,
            });
        }
        Ok(self.spool_events(spooled).await?)
    }

    /// Spools already-validated events.
    async fn spool_events(&self, events: Vec<NewEvent>) -> Result<usize, SendError> {
        let inner = &self.inner;
        let count = events.len();
        if count == 0 {
            return Ok(0);
        }
        match inner.spool.append(events).await {
            Ok(_) => {
                inner.metrics.accepted.inc_by(count as u64);
                inner.metrics.request_events.observe(count as f64);
                Ok(count)
            }
            Err(SpoolError::Full { retry_after_ms, .. }) => {
                inner.metrics.refused_full.inc();
                Err(SendError::Full { retry_after_ms })
            }
            Err(SpoolError::DiskFull { .. }) => {
                inner.metrics.refused_disk_full.inc();
                Err(SendError::Full { retry_after_ms: crate::spool::RETRY_AFTER_MS })
            }
            Err(SpoolError::TooLarge { bytes, max_bytes }) => {
                inner.metrics.rejected_requests.inc();
                Err(SendError::TooLarge { bytes, max_bytes })
            }
            Err(SpoolError::Closed) => Err(SendError::ShuttingDown),
            Err(e) => Err(SendError::Spool(e)),
        }
    }

    pub fn metrics(&self) -> &Metrics {
        &self.inner.metrics
    }

    /// Events accepted (durably spooled) since start.
    pub fn accepted(&self) -> u64 {
        self.inner.metrics.accepted.get()
    }

    /// Events acknowledged by a broker since start.
    pub fn acknowledged(&self) -> u64 {
        self.inner.metrics.acknowledged.get()
    }

    /// Events in the spool not yet acknowledged (replayed ones included).
    pub fn unacknowledged(&self) -> u64 {
        self.inner.spool.unacknowledged()
    }

    /// The cumulative `agent` audit count (events acknowledged) of `topic` in the window
    /// starting at `window_start`.
    pub fn audit_count(&self, topic: &str, window_start: i64) -> i64 {
        self.inner.spool.audit_count(topic, window_start)
    }

    /// The cumulative `accepted` audit count of `topic` in the window starting at
    /// `window_start`.
    pub fn accepted_count(&self, topic: &str, window_start: i64) -> i64 {
        self.inner.spool.accepted_count(topic, window_start)
    }

    pub fn config(&self) -> &Config {
        &self.inner.config
    }

    /// Stops taking events, waits up to `drain_timeout_ms` for the spool to be acknowledged
    /// (what is left is shipped on the next start), publishes the audit counts a last time,
    /// and closes the spool. Calling it again does nothing.
    pub async fn shutdown(&self) -> Result<(), AgentError> {
        let inner = &self.inner;
        if inner.closed.swap(true, Ordering::AcqRel) {
            return Ok(());
        }
        inner.stop_input.cancel();
        let inputs = std::mem::take(&mut *lock(&inner.inputs));
        for task in inputs {
            let _ = task.await;
        }
        let deadline = Instant::now() + Duration::from_millis(inner.config.drain_timeout_ms);
        while inner.spool.unacknowledged() > 0 && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let left = inner.spool.unacknowledged();
        if left > 0 {
            tracing::warn!(
                unacknowledged = left,
                "shutting down with events left in the spool; they ship on the next start"
            );
        }
        inner.stop.cancel();
        let workers = std::mem::take(&mut *lock(&inner.workers));
        for task in workers {
            let _ = task.await;
        }
        if tokio::time::timeout(FINAL_STEP_TIMEOUT, inner.producer.close()).await.is_err() {
            tracing::warn!("closing the producer timed out");
        }
        let spool = Arc::clone(&inner.spool);
        tokio::task::spawn_blocking(move || spool.close())
            .await
            .expect("closing the spool does not panic")?;
        Ok(())
    }
}

impl tail::Intake for Agent {
    /// Like [`Agent::send_batch`], but an invalid event is left out (and counted as rejected)
    /// instead of refusing the call: for tailed files, where a bad line must not stop the rest.
    /// Returns how many were accepted and the invalid ones.
    async fn send_valid(
        &self,
        topic: &str,
        events: &[Value],
    ) -> Result<(usize, Vec<(usize, EventError)>), SendError> {
        let inner = &self.inner;
        if inner.closed.load(Ordering::Acquire) {
            return Err(SendError::ShuttingDown);
        }
        let schema = match inner.schemas.get(topic).await {
            Ok(schema) => schema,
            Err(e) if e.is_bad_event() => {
                inner.metrics.rejected.inc_by(events.len() as u64);
                return Err(SendError::Invalid { index: 0, source: e });
            }
            Err(e) => return Err(SendError::Unavailable(e)),
        };
        let topic: Arc<str> = Arc::from(topic);
        let now_ms = service::now_ms();
        let mut spooled = Vec::with_capacity(events.len());
        let mut invalid = Vec::new();
        for (index, event) in events.iter().enumerate() {
            match event::encode_event(
                &schema,
                event,
                &inner.defaults,
                now_ms,
                inner.config.max_event_bytes,
            ) {
                Ok(encoded) => spooled.push(NewEvent {
                    topic: Arc::clone(&topic),
                    time_ms: encoded.time_ms,
                    payload: encoded.payload,
                }),
                Err(e) => invalid.push((index, e)),
            }
        }
        inner.metrics.rejected.inc_by(invalid.len() as u64);
        Ok((self.spool_events(spooled).await?, invalid))
    }
}

/// Encodes a call's events with its topic's schema, the header defaults and the call's time.
pub(crate) struct Encoder<'a> {
    schema: &'a TopicSchema,
    defaults: &'a HeaderDefaults,
    now_ms: i64,
    max_bytes: usize,
}

impl Encoder<'_> {
    /// An event given as a JSON value.
    pub fn value(&self, event: &Value) -> Result<EncodedEvent, EventError> {
        event::encode_event(self.schema, event, self.defaults, self.now_ms, self.max_bytes)
    }

    /// An event given as JSON text, when the one-pass path is sure of it; `None`: parse it and
    /// use [`Encoder::value`].
    pub fn text(&self, text: &[u8]) -> Option<EncodedEvent> {
        event::encode_event_text(self.schema, text, self.defaults, self.now_ms, self.max_bytes)
    }
}

/// Why [`Agent::send_each`]'s encoder refused an event: the event (counted as rejected), or the
/// call as a whole.
pub(crate) enum Refused<E> {
    Event(EventError),
    Call(E),
}

/// Longest wait for the producer's close.
const FINAL_STEP_TIMEOUT: Duration = Duration::from_secs(5);

fn producer_config(config: &Config) -> Result<ProducerConfig, ConfigError> {
    let message_bytes_max = config.max_event_bytes + 64;
    Ok(ProducerConfig {
        acks: match config.acks {
            2 => Acks::Flushed,
            3 => Acks::All,
            _ => Acks::Written,
        },
        batch_messages: config.batch_messages,
        batch_bytes: config.batch_bytes,
        linger_ms: config.linger_ms,
        compression: config.codec()?,
        partitioner: Partitioner::Random,
        buffer_bytes: (64 << 20).max(message_bytes_max * 2),
        message_bytes_max,
        retries_max: 2,
        retry_backoff_ms: 50,
        retry_backoff_max_ms: 1_000,
        connect_timeout_ms: 3_000,
        request_timeout_ms: 10_000,
        metadata_refresh_ms: 10_000,
        tls: config.client_tls()?,
        ..ProducerConfig::default()
    })
}

/// Makes acknowledgements durable every `every_ms` and frees acknowledged segments.
async fn checkpoints(spool: Arc<Spool>, every_ms: u64, stop: CancellationToken) {
    let mut tick = tokio::time::interval(Duration::from_millis(every_ms));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            () = stop.cancelled() => return,
            _ = tick.tick() => {}
        }
        let spool = Arc::clone(&spool);
        match tokio::task::spawn_blocking(move || spool.checkpoint()).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => tracing::error!(error = %e, "cannot checkpoint the spool"),
            Err(e) => tracing::error!(error = %e, "the checkpoint task panicked"),
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}
