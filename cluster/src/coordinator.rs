//! The `Coordinator` trait: the small set of operations the registries and the consumer
//! rebalance need, with ZooKeeper's semantics.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use async_trait::async_trait;
use futures::Stream;
use tokio::sync::broadcast;

use crate::CoordError;

/// A node's data version; a conditional set or delete names the version it read.
pub type Version = i32;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NodeMode {
    /// Stays until deleted.
    Persistent,
    /// Deleted when the session that created it ends. A backend that reconnects after its
    /// session expired creates its ephemeral nodes again in the new session.
    Ephemeral,
}

/// What ended a one-shot watch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WatchEvent {
    Created,
    Deleted,
    DataChanged,
    ChildrenChanged,
    /// The session the watch belonged to ended: read again to see what changed.
    SessionLost,
}

/// Changes of this process's session.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SessionEvent {
    /// Connected (again) in the same session: nodes and watches are intact.
    Connected,
    /// Connection lost; the session may still be alive.
    Disconnected,
    /// The session ended: its ephemeral nodes and watches are gone. The backend has opened a
    /// new session and created this process's ephemeral nodes again; whoever relies on
    /// watches or on ephemeral nodes created by others must read everything again.
    Expired,
}

/// A one-shot watch: completes once, on the first change of what it watches.
pub struct Watch(Pin<Box<dyn Future<Output = WatchEvent> + Send>>);

impl Watch {
    pub fn new(future: impl Future<Output = WatchEvent> + Send + 'static) -> Watch {
        Watch(Box::pin(future))
    }
}

impl Future for Watch {
    type Output = WatchEvent;

    fn poll(
        mut self: Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<WatchEvent> {
        self.0.as_mut().poll(cx)
    }
}

impl std::fmt::Debug for Watch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Watch")
    }
}

/// A coordination service session. Paths are absolute within the session's chroot.
#[async_trait]
pub trait Coordinator: Send + Sync + 'static {
    /// Creates `path` holding `data`, creating missing parents as empty persistent nodes.
    /// Fails with [`CoordError::NodeExists`] if `path` exists, unless it is an ephemeral node
    /// of this session holding `data`: a create tried again after the connection lost its
    /// answer ([`CoordError::Unavailable`]: the outcome unknown) finds the node it made.
    async fn create(&self, path: &str, data: &[u8], mode: NodeMode) -> Result<(), CoordError>;

    /// Creates `path` and its parents as empty persistent nodes where missing.
    async fn ensure(&self, path: &str) -> Result<(), CoordError>;

    /// The data and version of `path`; `None` if it does not exist.
    async fn get(&self, path: &str) -> Result<Option<(Vec<u8>, Version)>, CoordError>;

    /// Like [`Coordinator::get`], and a watch that fires when `path` is created, changed or
    /// deleted.
    async fn get_and_watch(
        &self,
        path: &str,
    ) -> Result<(Option<(Vec<u8>, Version)>, Watch), CoordError>;

    /// Sets the data of `path` if its version is `expected` (any version if `None`); returns
    /// the new version. Fails with [`CoordError::BadVersion`] on a stale version.
    async fn set(
        &self,
        path: &str,
        data: &[u8],
        expected: Option<Version>,
    ) -> Result<Version, CoordError>;

    /// Deletes `path` if its version is `expected` (any version if `None`).
    async fn delete(&self, path: &str, expected: Option<Version>) -> Result<(), CoordError>;

    /// Names of the children of `path`, sorted. Fails with [`CoordError::NoNode`] if `path`
    /// does not exist.
    async fn children(&self, path: &str) -> Result<Vec<String>, CoordError>;

    /// Like [`Coordinator::children`], and a watch that fires when a child is added or removed
    /// or `path` is deleted.
    async fn children_and_watch(&self, path: &str) -> Result<(Vec<String>, Watch), CoordError>;

    /// Session changes from now on.
    fn session_events(&self) -> broadcast::Receiver<SessionEvent>;
}

/// The children of `path` now and after every change, as a stream: a streaming watch built on
/// one-shot watches. `path` is created if missing. The stream ends after its first error.
pub fn watch_children(
    coordinator: Arc<dyn Coordinator>,
    path: String,
) -> impl Stream<Item = Result<Vec<String>, CoordError>> + Send {
    enum State {
        Read(Arc<dyn Coordinator>, String),
        Wait(Watch, Arc<dyn Coordinator>, String),
        Done,
    }
    futures::stream::unfold(State::Read(coordinator, path), |state| async move {
        let (coordinator, path) = match state {
            State::Read(coordinator, path) => (coordinator, path),
            State::Wait(watch, coordinator, path) => {
                watch.await;
                (coordinator, path)
            }
            State::Done => return None,
        };
        let read = async {
            coordinator.ensure(&path).await?;
            coordinator.children_and_watch(&path).await
        };
        match read.await {
            Ok((children, watch)) => Some((Ok(children), State::Wait(watch, coordinator, path))),
            Err(e) => Some((Err(e), State::Done)),
        }
    })
}
