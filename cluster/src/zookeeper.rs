//! The ZooKeeper backend, over the `zookeeper-client` crate. One session per [`ZooKeeper`];
//! a chroot per cluster (`host:port,host:port/tributary/live-a`). Lost connections are
//! re-established by the client within the session; when the session itself expires, a
//! supervisor opens a new one and creates this process's ephemeral nodes again.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, RwLock, Weak};
use std::time::Duration;

use async_trait::async_trait;
use tokio::sync::broadcast;
use zookeeper_client as zk;

use crate::CoordError;
use crate::coordinator::{Coordinator, NodeMode, SessionEvent, Version, Watch, WatchEvent};
use crate::path::{parent, validate_path};

/// How to reach an ensemble.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ZooKeeperConfig {
    /// `host:port[,host:port…][/chroot]`.
    pub connect: String,
    pub session_timeout_ms: u64,
    /// How long to try before giving up on the first connection.
    pub connect_timeout_ms: u64,
    /// Digest credentials of the cluster's connection. With them the session authenticates,
    /// and every node it creates (the chroot, registrations, partition state, consumer-group
    /// offsets and owners, admin requests) may be changed only by sessions with the same
    /// credentials and read by anyone. ZooKeeper 3.8 needs nothing for it: its digest
    /// provider is always on.
    pub digest: Option<Digest>,
}

impl ZooKeeperConfig {
    pub fn new(connect: impl Into<String>) -> ZooKeeperConfig {
        ZooKeeperConfig {
            connect: connect.into(),
            session_timeout_ms: 6_000,
            connect_timeout_ms: 15_000,
            digest: None,
        }
    }

    /// With the credentials of `file` (see [`Digest::read`]), if given.
    pub fn with_digest_file(
        mut self,
        file: Option<&std::path::Path>,
    ) -> Result<ZooKeeperConfig, CoordError> {
        self.digest = file.map(Digest::read).transpose()?;
        Ok(self)
    }
}

/// ZooKeeper digest credentials, `user:password`. Its `Debug` leaves out the password.
#[derive(Clone, PartialEq, Eq)]
pub struct Digest(String);

impl std::fmt::Debug for Digest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let user = self.0.split_once(':').map_or("", |(user, _)| user);
        write!(f, "Digest({user}:…)")
    }
}

impl Digest {
    /// `user:password` (both non-empty, the user without `:`).
    pub fn new(credentials: &str) -> Result<Digest, CoordError> {
        match credentials.split_once(':') {
            Some((user, password)) if !user.is_empty() && !password.is_empty() => {
                Ok(Digest(credentials.to_owned()))
            }
            _ => Err(CoordError::Credentials(
                "ZooKeeper digest credentials are user:password, both non-empty".into(),
            )),
        }
    }

    /// The first line of `file`, `user:password` (a file, so the password is in no command
    /// line or config shown to others).
    pub fn read(file: &std::path::Path) -> Result<Digest, CoordError> {
        let text = std::fs::read_to_string(file)
            .map_err(|e| CoordError::Credentials(format!("cannot read {}: {e}", file.display())))?;
        Digest::new(text.lines().next().unwrap_or_default().trim())
            .map_err(|e| CoordError::Credentials(format!("{}: {e}", file.display())))
    }
}

/// The ZooKeeper session settings every service that connects repeats, as flags and config
/// keys: flattened into its `Cli` (`#[command(flatten)] #[serde(flatten)]`) and its `Config`
/// (`#[serde(flatten)]`, see `service::config`). The connect string stays each binary's own
/// flag, since what it names differs (the cluster to register in, the analytics cluster, a
/// mirror's target and sources).
///
/// With `zookeeper_auth_file` the session authenticates, and the nodes it creates (group
/// offsets and owners among them) may be changed only with the same credentials; anyone reads
/// them.
#[derive(
    Debug, Clone, Default, PartialEq, Eq, clap::Args, serde::Serialize, serde::Deserialize,
)]
#[serde(default)]
pub struct ZooKeeperArgs {
    /// ZooKeeper session timeout of every cluster connection [default: 6000].
    #[arg(long, value_name = "MS")]
    pub zookeeper_session_timeout_ms: Option<u64>,
    /// ZooKeeper digest credentials: FILE's first line, `user:password`.
    #[arg(long, value_name = "FILE")]
    pub zookeeper_auth_file: Option<std::path::PathBuf>,
}

/// The session timeouts a service accepts, in ms.
pub const SESSION_TIMEOUT_MS: std::ops::RangeInclusive<u64> = 1_000..=60_000;

/// A ZooKeeper setting out of range.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("zookeeper_session_timeout_ms must be between 1000 and 60000, not {0}")]
pub struct SessionTimeoutError(pub u64);

/// Opening a session failed (or reading its credentials).
#[derive(Debug, thiserror::Error)]
#[error("cannot connect to ZooKeeper at {connect}")]
pub struct ConnectError {
    pub connect: String,
    #[source]
    pub source: CoordError,
}

impl ZooKeeperArgs {
    /// `zookeeper_session_timeout_ms`, 6000 unless given.
    pub fn session_timeout_ms(&self) -> u64 {
        self.zookeeper_session_timeout_ms.unwrap_or(ZooKeeperConfig::new("").session_timeout_ms)
    }

    /// The session timeout is within [`SESSION_TIMEOUT_MS`].
    pub fn validate(&self) -> Result<(), SessionTimeoutError> {
        let timeout = self.session_timeout_ms();
        if SESSION_TIMEOUT_MS.contains(&timeout) {
            Ok(())
        } else {
            Err(SessionTimeoutError(timeout))
        }
    }

    /// How to reach `connect` (`host:port[,…][/chroot]`) with these settings, the credentials
    /// file read.
    pub fn config(&self, connect: &str) -> Result<ZooKeeperConfig, CoordError> {
        let config = ZooKeeperConfig {
            session_timeout_ms: self.session_timeout_ms(),
            ..ZooKeeperConfig::new(connect)
        };
        config.with_digest_file(self.zookeeper_auth_file.as_deref())
    }

    /// Opens a session on `connect` with these settings.
    pub async fn connect(&self, connect: &str) -> Result<Arc<ZooKeeper>, ConnectError> {
        let failed = |source| ConnectError { connect: connect.to_owned(), source };
        ZooKeeper::connect(self.config(connect).map_err(failed)?).await.map_err(failed)
    }
}

/// What an authenticated session's nodes carry: everything for sessions with the same
/// credentials, reading for anyone (brokers, groups and offsets are found by every client).
static AUTHENTICATED_ACLS: [zk::Acl; 2] = [
    zk::Acl::new_const(zk::Permission::ALL, "auth", ""),
    zk::Acl::new_const(zk::Permission::READ, "world", "anyone"),
];

fn acls_of(config: &ZooKeeperConfig) -> zk::Acls<'static> {
    match config.digest {
        Some(_) => zk::Acls::new(&AUTHENTICATED_ACLS),
        None => zk::Acls::anyone_all(),
    }
}

/// A session with a ZooKeeper ensemble.
pub struct ZooKeeper {
    inner: Arc<Inner>,
    supervisor: tokio::task::JoinHandle<()>,
}

struct Inner {
    config: ZooKeeperConfig,
    hosts: String,
    /// Empty for none.
    chroot: String,
    client: RwLock<zk::Client>,
    /// This session's ephemeral nodes and their data, to create again after an expiry.
    ephemerals: Mutex<BTreeMap<String, Vec<u8>>>,
    events: broadcast::Sender<SessionEvent>,
}

/// Retry delays when the session must be opened again, doubling (with jitter) up to this cap.
const RECONNECT_BACKOFF_MAX_MS: u64 = 5_000;

fn map_error(path: &str, e: zk::Error) -> CoordError {
    let path = path.to_owned();
    match e {
        zk::Error::NoNode => CoordError::NoNode { path },
        zk::Error::NodeExists => CoordError::NodeExists { path },
        zk::Error::BadVersion => CoordError::BadVersion { path, expected: -1 },
        zk::Error::NotEmpty => CoordError::NotEmpty { path },
        zk::Error::NoChildrenForEphemerals => {
            CoordError::EphemeralParent { path: parent(&path).to_owned() }
        }
        zk::Error::SessionExpired => CoordError::SessionExpired,
        zk::Error::NoAuth => CoordError::NotAuthorized { path },
        zk::Error::AuthFailed => {
            CoordError::Credentials("ZooKeeper refused the credentials".into())
        }
        e @ (zk::Error::ConnectionLoss
        | zk::Error::Timeout
        | zk::Error::NoHosts
        | zk::Error::ClientClosed) => CoordError::Unavailable(e.to_string()),
        // The client's own failures of the connection under a request ("no response from
        // connection in 400ms" when the server paused, a socket error): ZooKeeper's
        // connection loss, the outcome unknown and the session perhaps still alive.
        e @ zk::Error::Custom(_) => CoordError::Unavailable(e.to_string()),
        e => CoordError::Backend(e.to_string()),
    }
}

fn options(mode: NodeMode, acls: zk::Acls<'static>) -> zk::CreateOptions<'static> {
    let mode = match mode {
        NodeMode::Persistent => zk::CreateMode::Persistent,
        NodeMode::Ephemeral => zk::CreateMode::Ephemeral,
    };
    mode.with_acls(acls)
}

fn watch_event(event: zk::WatchedEvent) -> WatchEvent {
    match event.event_type {
        zk::EventType::NodeCreated => WatchEvent::Created,
        zk::EventType::NodeDeleted => WatchEvent::Deleted,
        zk::EventType::NodeDataChanged => WatchEvent::DataChanged,
        zk::EventType::NodeChildrenChanged => WatchEvent::ChildrenChanged,
        zk::EventType::Session => WatchEvent::SessionLost,
    }
}

impl ZooKeeper {
    /// Opens a session, creating the chroot if it is missing.
    pub async fn connect(config: ZooKeeperConfig) -> Result<Arc<ZooKeeper>, CoordError> {
        let (hosts, chroot) = match config.connect.find('/') {
            Some(i) => (config.connect[..i].to_owned(), config.connect[i..].to_owned()),
            None => (config.connect.clone(), String::new()),
        };
        if !chroot.is_empty() {
            validate_path(&chroot)?;
        }
        let chroot = if chroot == "/" { String::new() } else { chroot };
        let client = open(&hosts, &chroot, &config).await?;
        let state = client.state_watcher();
        let (events, _) = broadcast::channel(16);
        let inner = Arc::new(Inner {
            config,
            hosts,
            chroot,
            client: RwLock::new(client),
            ephemerals: Mutex::new(BTreeMap::new()),
            events,
        });
        let supervisor = tokio::spawn(supervise(Arc::downgrade(&inner), state));
        tracing::info!(connect = %inner.config.connect, "ZooKeeper session open");
        Ok(Arc::new(ZooKeeper { inner, supervisor }))
    }

    fn acls(&self) -> zk::Acls<'static> {
        acls_of(&self.inner.config)
    }

    fn client(&self) -> zk::Client {
        self.inner.client.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    fn ephemerals(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, Vec<u8>>> {
        self.inner.ephemerals.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl Drop for ZooKeeper {
    fn drop(&mut self) {
        // The client closes its session, and its ephemeral nodes go, when its last clone drops.
        self.supervisor.abort();
    }
}

/// Connects to `hosts` and roots the client at `chroot`, creating it. The client gives up on a
/// server that stops answering for 2/3 of the session timeout (a collector's pause, a starved
/// machine), at the connection or at the chroot's creation: the whole is tried again until the
/// connect timeout, as for a server not up yet.
async fn open(
    hosts: &str,
    chroot: &str,
    config: &ZooKeeperConfig,
) -> Result<zk::Client, CoordError> {
    let deadline = tokio::time::Instant::now() + Duration::from_millis(config.connect_timeout_ms);
    let mut backoff = service::Backoff::from_ms(50, 1_000);
    loop {
        let lost = match tokio::time::timeout_at(deadline, open_once(hosts, chroot, config)).await {
            Ok(Ok(client)) => return Ok(client),
            Ok(Err(CoordError::Unavailable(lost))) => lost,
            Ok(Err(other)) => return Err(other),
            Err(_) => String::from("no answer"),
        };
        if tokio::time::Instant::now() >= deadline {
            return Err(CoordError::Unavailable(format!(
                "no ZooKeeper session at {hosts} within {} ms: {lost}",
                config.connect_timeout_ms
            )));
        }
        tracing::debug!(error = %lost, "ZooKeeper connection failed; trying again");
        backoff.sleep().await;
    }
}

/// One try of [`open`].
async fn open_once(
    hosts: &str,
    chroot: &str,
    config: &ZooKeeperConfig,
) -> Result<zk::Client, CoordError> {
    let mut connector = zk::Client::connector();
    connector = connector.with_session_timeout(Duration::from_millis(config.session_timeout_ms));
    if let Some(Digest(credentials)) = &config.digest {
        connector = connector.with_auth("digest", credentials.as_bytes());
    }
    let client = connector.connect(hosts).await.map_err(|e| map_error("/", e))?;
    if chroot.is_empty() {
        return Ok(client);
    }
    let persistent = options(NodeMode::Persistent, acls_of(config));
    mkdir(&client, chroot, &persistent).await.map_err(|e| map_error(chroot, e))?;
    client
        .chroot(chroot.to_owned())
        .map_err(|_| CoordError::InvalidPath { path: chroot.to_owned(), reason: "not a chroot" })
}

/// Follows session state: reports changes, and after an expiry opens a new session and
/// creates this process's ephemeral nodes again. Ends when the session is closed.
async fn supervise(inner: Weak<Inner>, mut state: zk::StateWatcher) {
    loop {
        let changed = state.changed().await;
        let Some(inner) = inner.upgrade() else { return };
        match changed {
            zk::SessionState::SyncConnected | zk::SessionState::ConnectedReadOnly => {
                let _ = inner.events.send(SessionEvent::Connected);
            }
            zk::SessionState::Disconnected => {
                tracing::warn!(connect = %inner.config.connect, "ZooKeeper connection lost; reconnecting");
                let _ = inner.events.send(SessionEvent::Disconnected);
            }
            zk::SessionState::Expired => {
                tracing::warn!(connect = %inner.config.connect, "ZooKeeper session expired; opening a new one");
                let mut backoff = service::Backoff::from_ms(100, RECONNECT_BACKOFF_MAX_MS);
                let client = loop {
                    match open(&inner.hosts, &inner.chroot, &inner.config).await {
                        Ok(client) => break client,
                        Err(e) => {
                            tracing::warn!(error = %e, "cannot open a new ZooKeeper session; retrying");
                            backoff.sleep().await;
                        }
                    }
                };
                state = client.state_watcher();
                let ephemerals = inner.ephemerals.lock().unwrap_or_else(|p| p.into_inner()).clone();
                let stale_bound = Duration::from_millis(2 * inner.config.session_timeout_ms);
                for (path, data) in &ephemerals {
                    let acls = acls_of(&inner.config);
                    match create_again(&client, path, data, stale_bound, acls).await {
                        Ok(()) => tracing::info!(%path, "ephemeral node created again"),
                        Err(e) => {
                            tracing::warn!(%path, error = %e, "cannot create ephemeral node again")
                        }
                    }
                }
                *inner.client.write().unwrap_or_else(|p| p.into_inner()) = client;
                let _ = inner.events.send(SessionEvent::Expired);
            }
            other if other.is_terminated() => return,
            _ => {}
        }
    }
}

/// Creates an ephemeral node of the expired session again in the new one. The client may learn
/// of the expiry (by timing out) before the server has processed it, so the old node may still
/// be there: wait up to `stale_bound` for the server to remove it.
async fn create_again(
    client: &zk::Client,
    path: &str,
    data: &[u8],
    stale_bound: Duration,
    acls: zk::Acls<'static>,
) -> Result<(), CoordError> {
    let deadline = tokio::time::Instant::now() + stale_bound;
    loop {
        match create_with_parents(client, path, data, NodeMode::Ephemeral, acls).await {
            Err(CoordError::NodeExists { .. }) => {}
            done => return done,
        }
        let (_, stat, watch) = match client.get_and_watch_data(path).await {
            Ok(found) => found,
            Err(zk::Error::NoNode) => continue,
            Err(e) => return Err(map_error(path, e)),
        };
        if stat.ephemeral_owner == client.session_id().0 {
            return Ok(());
        }
        if tokio::time::timeout_at(deadline, watch.changed()).await.is_err() {
            return Err(CoordError::NodeExists { path: path.to_owned() });
        }
    }
}

/// `path` and its missing parents. ZooKeeper checks the right to create under a parent before
/// whether the node exists, so a session without an authenticated cluster's credentials is
/// refused even for nodes that are all there: then it is enough that `path` exists.
async fn mkdir(
    client: &zk::Client,
    path: &str,
    options: &zk::CreateOptions<'_>,
) -> Result<(), zk::Error> {
    match client.mkdir(path, options).await {
        Err(zk::Error::NoAuth) if client.check_stat(path).await?.is_some() => Ok(()),
        result => result,
    }
}

async fn create_with_parents(
    client: &zk::Client,
    path: &str,
    data: &[u8],
    mode: NodeMode,
    acls: zk::Acls<'static>,
) -> Result<(), CoordError> {
    match client.create(path, data, &options(mode, acls)).await {
        Err(zk::Error::NoNode) => {
            let parent_path = parent(path);
            client
                .mkdir(parent_path, &options(NodeMode::Persistent, acls))
                .await
                .map_err(|e| map_error(parent_path, e))?;
            client
                .create(path, data, &options(mode, acls))
                .await
                .map(drop)
                .map_err(|e| map_error(path, e))
        }
        result => result.map(drop).map_err(|e| map_error(path, e)),
    }
}

#[async_trait]
impl Coordinator for ZooKeeper {
    async fn create(&self, path: &str, data: &[u8], mode: NodeMode) -> Result<(), CoordError> {
        validate_path(path)?;
        let client = self.client();
        match create_with_parents(&client, path, data, mode, self.acls()).await {
            // This session's own node with these very bytes: an earlier create whose answer
            // the connection lost (Unavailable, the outcome unknown) was carried out, and the
            // caller tries again. Anything else there is someone else's, or another value.
            Err(CoordError::NodeExists { .. }) if mode == NodeMode::Ephemeral => {
                let own = match client.get_data(path).await {
                    Ok((found, stat)) => {
                        stat.ephemeral_owner == client.session_id().0 && found == data
                    }
                    Err(zk::Error::NoNode) => false,
                    Err(e) => return Err(map_error(path, e)),
                };
                if !own {
                    return Err(CoordError::NodeExists { path: path.to_owned() });
                }
            }
            result => result?,
        }
        if mode == NodeMode::Ephemeral {
            self.ephemerals().insert(path.to_owned(), data.to_vec());
        }
        Ok(())
    }

    async fn ensure(&self, path: &str) -> Result<(), CoordError> {
        validate_path(path)?;
        if path == "/" {
            return Ok(());
        }
        mkdir(&self.client(), path, &options(NodeMode::Persistent, self.acls()))
            .await
            .map_err(|e| map_error(path, e))
    }

    async fn get(&self, path: &str) -> Result<Option<(Vec<u8>, Version)>, CoordError> {
        validate_path(path)?;
        match self.client().get_data(path).await {
            Ok((data, stat)) => Ok(Some((data, stat.version))),
            Err(zk::Error::NoNode) => Ok(None),
            Err(e) => Err(map_error(path, e)),
        }
    }

    async fn get_and_watch(
        &self,
        path: &str,
    ) -> Result<(Option<(Vec<u8>, Version)>, Watch), CoordError> {
        validate_path(path)?;
        let client = self.client();
        // A node may appear between "no node" and the existence watch; a few tries settle it.
        for _ in 0..3 {
            match client.get_and_watch_data(path).await {
                Ok((data, stat, watcher)) => {
                    let watch = Watch::new(async move { watch_event(watcher.changed().await) });
                    return Ok((Some((data, stat.version)), watch));
                }
                Err(zk::Error::NoNode) => {}
                Err(e) => return Err(map_error(path, e)),
            }
            let (stat, watcher) =
                client.check_and_watch_stat(path).await.map_err(|e| map_error(path, e))?;
            if stat.is_none() {
                return Ok((None, Watch::new(async move { watch_event(watcher.changed().await) })));
            }
        }
        Err(CoordError::Backend(format!("{path} keeps appearing and vanishing")))
    }

    async fn set(
        &self,
        path: &str,
        data: &[u8],
        expected: Option<Version>,
    ) -> Result<Version, CoordError> {
        validate_path(path)?;
        let stat =
            self.client().set_data(path, data, expected).await.map_err(|e| {
                match map_error(path, e) {
                    CoordError::BadVersion { path, .. } => {
                        CoordError::BadVersion { path, expected: expected.unwrap_or(-1) }
                    }
                    e => e,
                }
            })?;
        if let Some(kept) = self.ephemerals().get_mut(path) {
            *kept = data.to_vec();
        }
        Ok(stat.version)
    }

    async fn delete(&self, path: &str, expected: Option<Version>) -> Result<(), CoordError> {
        validate_path(path)?;
        self.client().delete(path, expected).await.map_err(|e| match map_error(path, e) {
            CoordError::BadVersion { path, .. } => {
                CoordError::BadVersion { path, expected: expected.unwrap_or(-1) }
            }
            e => e,
        })?;
        self.ephemerals().remove(path);
        Ok(())
    }

    async fn children(&self, path: &str) -> Result<Vec<String>, CoordError> {
        validate_path(path)?;
        let mut children =
            self.client().list_children(path).await.map_err(|e| map_error(path, e))?;
        children.sort();
        Ok(children)
    }

    async fn children_and_watch(&self, path: &str) -> Result<(Vec<String>, Watch), CoordError> {
        validate_path(path)?;
        let client = self.client();
        let (mut children, watcher) =
            client.list_and_watch_children(path).await.map_err(|e| map_error(path, e))?;
        children.sort();
        Ok((children, Watch::new(async move { watch_event(watcher.changed().await) })))
    }

    fn session_events(&self) -> broadcast::Receiver<SessionEvent> {
        self.inner.events.subscribe()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_shared_settings_default_check_and_read_their_file() {
        let args = ZooKeeperArgs::default();
        assert_eq!(args.session_timeout_ms(), 6_000);
        args.validate().unwrap();
        let short = ZooKeeperArgs { zookeeper_session_timeout_ms: Some(999), ..args.clone() };
        assert_eq!(short.validate(), Err(SessionTimeoutError(999)));
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("digest");
        std::fs::write(&file, "user:secret\n").unwrap();
        let args = ZooKeeperArgs {
            zookeeper_session_timeout_ms: Some(2_000),
            zookeeper_auth_file: Some(file),
        };
        let config = args.config("zk:2181/t").unwrap();
        assert_eq!((config.connect.as_str(), config.session_timeout_ms), ("zk:2181/t", 2_000));
        assert_eq!(config.digest, Some(Digest::new("user:secret").unwrap()));
    }

    #[tokio::test]
    async fn an_unreadable_credentials_file_fails_the_connection() {
        let missing = ZooKeeperArgs {
            zookeeper_auth_file: Some("/no/such/digest".into()),
            ..ZooKeeperArgs::default()
        };
        let error = missing.connect("127.0.0.1:1").await.err().unwrap();
        let text = format!("{error}: {}", std::error::Error::source(&error).unwrap());
        assert!(
            text.starts_with("cannot connect to ZooKeeper at 127.0.0.1:1: cannot read"),
            "{text}"
        );
    }
}
