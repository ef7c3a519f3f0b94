//! The embedded backend: a tree of nodes inside this process, with ZooKeeper's semantics for
//! sessions, ephemeral nodes, versions and one-shot watches. For the all-in-one launcher and
//! for fast tests; every process that shares it must be this process.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex, MutexGuard};

use async_trait::async_trait;
use tokio::sync::{broadcast, oneshot};

use crate::CoordError;
use crate::coordinator::{Coordinator, NodeMode, SessionEvent, Version, Watch, WatchEvent};
use crate::path::{ancestors, parent, validate_path};

type SessionId = u64;

/// The shared tree. Cheap to clone: clones are the same service.
#[derive(Clone, Default)]
pub struct Embedded {
    tree: Arc<Mutex<Tree>>,
}

#[derive(Default)]
struct Tree {
    nodes: BTreeMap<String, Node>,
    next_session: SessionId,
    data_watches: HashMap<String, Vec<(SessionId, oneshot::Sender<WatchEvent>)>>,
    child_watches: HashMap<String, Vec<(SessionId, oneshot::Sender<WatchEvent>)>>,
}

struct Node {
    data: Vec<u8>,
    version: Version,
    owner: Option<SessionId>,
    children: BTreeSet<String>,
}

fn lock(tree: &Mutex<Tree>) -> MutexGuard<'_, Tree> {
    // Every change to the tree is completed before the lock is released; a panic elsewhere
    // while holding it cannot leave it half-changed.
    tree.lock().unwrap_or_else(|p| p.into_inner())
}

impl Tree {
    fn new_session(&mut self) -> SessionId {
        self.next_session += 1;
        self.next_session
    }

    fn fire(
        watches: &mut HashMap<String, Vec<(SessionId, oneshot::Sender<WatchEvent>)>>,
        path: &str,
        event: WatchEvent,
    ) {
        for (_, tx) in watches.remove(path).unwrap_or_default() {
            let _ = tx.send(event);
        }
    }

    fn node(&self, path: &str) -> Option<&Node> {
        if path == "/" { None } else { self.nodes.get(path) }
    }

    fn insert(
        &mut self,
        path: &str,
        data: Vec<u8>,
        owner: Option<SessionId>,
    ) -> Result<(), CoordError> {
        if let Some(node) = self.nodes.get(path) {
            // As on ZooKeeper (see `Coordinator::create`): this session's own ephemeral node
            // with these bytes is the node it asked for.
            if owner.is_some() && node.owner == owner && node.data == data {
                return Ok(());
            }
            return Err(CoordError::NodeExists { path: path.to_owned() });
        }
        if path == "/" {
            return Err(CoordError::NodeExists { path: path.to_owned() });
        }
        let parent_path = parent(path);
        if parent_path != "/" {
            match self.nodes.get_mut(parent_path) {
                None => return Err(CoordError::NoNode { path: parent_path.to_owned() }),
                Some(p) if p.owner.is_some() => {
                    return Err(CoordError::EphemeralParent { path: parent_path.to_owned() });
                }
                Some(p) => {
                    p.children.insert(path[parent_path.len() + 1..].to_owned());
                }
            }
        }
        self.nodes
            .insert(path.to_owned(), Node { data, version: 0, owner, children: BTreeSet::new() });
        Tree::fire(&mut self.data_watches, path, WatchEvent::Created);
        Tree::fire(&mut self.child_watches, parent_path, WatchEvent::ChildrenChanged);
        Ok(())
    }

    fn remove(&mut self, path: &str, expected: Option<Version>) -> Result<(), CoordError> {
        let node = self.node(path).ok_or_else(|| CoordError::NoNode { path: path.to_owned() })?;
        if let Some(expected) = expected
            && node.version != expected
        {
            return Err(CoordError::BadVersion { path: path.to_owned(), expected });
        }
        if !node.children.is_empty() {
            return Err(CoordError::NotEmpty { path: path.to_owned() });
        }
        self.nodes.remove(path);
        let parent_path = parent(path);
        if let Some(p) = self.nodes.get_mut(parent_path) {
            p.children.remove(&path[parent_path.len() + 1..]);
        }
        Tree::fire(&mut self.data_watches, path, WatchEvent::Deleted);
        Tree::fire(&mut self.child_watches, path, WatchEvent::Deleted);
        Tree::fire(&mut self.child_watches, parent_path, WatchEvent::ChildrenChanged);
        Ok(())
    }

    /// Ends a session: its ephemeral nodes go, its watches fire `SessionLost`.
    fn end_session(&mut self, session: SessionId) {
        let owned: Vec<String> = self
            .nodes
            .iter()
            .filter(|(_, n)| n.owner == Some(session))
            .map(|(p, _)| p.clone())
            .collect();
        for path in owned {
            let _ = self.remove(&path, None);
        }
        for watches in [&mut self.data_watches, &mut self.child_watches] {
            for list in watches.values_mut() {
                for (_, tx) in list.extract_if(.., |(s, _)| *s == session) {
                    let _ = tx.send(WatchEvent::SessionLost);
                }
            }
        }
    }
}

impl Embedded {
    pub fn new() -> Embedded {
        Embedded::default()
    }

    /// Opens a session whose paths are relative to `chroot` (`/` for none), creating the
    /// chroot's nodes if missing.
    pub fn session(&self, chroot: &str) -> Result<Arc<EmbeddedSession>, CoordError> {
        validate_path(chroot)?;
        let mut tree = lock(&self.tree);
        if chroot != "/" {
            for path in ancestors(chroot).chain(std::iter::once(chroot)) {
                if !tree.nodes.contains_key(path) {
                    tree.insert(path, Vec::new(), None)?;
                }
            }
        }
        let id = tree.new_session();
        let (events, _) = broadcast::channel(16);
        Ok(Arc::new(EmbeddedSession {
            tree: Arc::clone(&self.tree),
            chroot: if chroot == "/" { String::new() } else { chroot.to_owned() },
            state: Mutex::new(SessionState { id, ephemerals: BTreeMap::new() }),
            events,
        }))
    }
}

/// One session on an [`Embedded`] tree. Its ephemeral nodes go when it is dropped.
pub struct EmbeddedSession {
    tree: Arc<Mutex<Tree>>,
    /// Prefix of every path; empty for the root.
    chroot: String,
    state: Mutex<SessionState>,
    events: broadcast::Sender<SessionEvent>,
}

struct SessionState {
    id: SessionId,
    /// This session's ephemeral nodes (full paths) and their data, to create again after an
    /// expiry as the ZooKeeper backend does.
    ephemerals: BTreeMap<String, Vec<u8>>,
}

impl EmbeddedSession {
    fn full(&self, path: &str) -> Result<String, CoordError> {
        validate_path(path)?;
        Ok(if path == "/" && !self.chroot.is_empty() {
            self.chroot.clone()
        } else {
            format!("{}{path}", self.chroot)
        })
    }

    fn session(&self) -> MutexGuard<'_, SessionState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Ends this session as a server does when a client stops answering: its ephemeral nodes
    /// vanish and its watches fire. Like the ZooKeeper backend, it then opens a new session
    /// and creates this process's ephemeral nodes again.
    pub fn expire(&self) {
        let mut session = self.session();
        let mut tree = lock(&self.tree);
        tree.end_session(session.id);
        let _ = self.events.send(SessionEvent::Expired);
        session.id = tree.new_session();
        let id = session.id;
        for (path, data) in &session.ephemerals {
            let _ = ensure_parents(&mut tree, path)
                .and_then(|()| tree.insert(path, data.clone(), Some(id)));
        }
        let _ = self.events.send(SessionEvent::Connected);
    }

    fn watch(&self, tree: &mut Tree, children: bool, path: &str, session: SessionId) -> Watch {
        let (tx, rx) = oneshot::channel();
        let watches = if children { &mut tree.child_watches } else { &mut tree.data_watches };
        watches.entry(path.to_owned()).or_default().push((session, tx));
        Watch::new(async move { rx.await.unwrap_or(WatchEvent::SessionLost) })
    }
}

fn ensure_parents(tree: &mut Tree, path: &str) -> Result<(), CoordError> {
    for ancestor in ancestors(path) {
        if !tree.nodes.contains_key(ancestor) {
            tree.insert(ancestor, Vec::new(), None)?;
        }
    }
    Ok(())
}

impl Drop for EmbeddedSession {
    fn drop(&mut self) {
        let id = self.session().id;
        lock(&self.tree).end_session(id);
    }
}

#[async_trait]
impl Coordinator for EmbeddedSession {
    async fn create(&self, path: &str, data: &[u8], mode: NodeMode) -> Result<(), CoordError> {
        let full = self.full(path)?;
        let mut session = self.session();
        let mut tree = lock(&self.tree);
        ensure_parents(&mut tree, &full)?;
        let owner = (mode == NodeMode::Ephemeral).then_some(session.id);
        tree.insert(&full, data.to_vec(), owner)?;
        if mode == NodeMode::Ephemeral {
            session.ephemerals.insert(full, data.to_vec());
        }
        Ok(())
    }

    async fn ensure(&self, path: &str) -> Result<(), CoordError> {
        let full = self.full(path)?;
        let mut tree = lock(&self.tree);
        ensure_parents(&mut tree, &full)?;
        match tree.insert(&full, Vec::new(), None) {
            Err(CoordError::NodeExists { .. }) | Ok(()) => Ok(()),
            Err(e) => Err(e),
        }
    }

    async fn get(&self, path: &str) -> Result<Option<(Vec<u8>, Version)>, CoordError> {
        let full = self.full(path)?;
        Ok(lock(&self.tree).node(&full).map(|n| (n.data.clone(), n.version)))
    }

    async fn get_and_watch(
        &self,
        path: &str,
    ) -> Result<(Option<(Vec<u8>, Version)>, Watch), CoordError> {
        let full = self.full(path)?;
        let id = self.session().id;
        let mut tree = lock(&self.tree);
        let value = tree.node(&full).map(|n| (n.data.clone(), n.version));
        Ok((value, self.watch(&mut tree, false, &full, id)))
    }

    async fn set(
        &self,
        path: &str,
        data: &[u8],
        expected: Option<Version>,
    ) -> Result<Version, CoordError> {
        let full = self.full(path)?;
        let mut session = self.session();
        let mut tree = lock(&self.tree);
        let node =
            tree.nodes.get_mut(&full).ok_or_else(|| CoordError::NoNode { path: full.clone() })?;
        if let Some(expected) = expected
            && node.version != expected
        {
            return Err(CoordError::BadVersion { path: full, expected });
        }
        node.data = data.to_vec();
        node.version += 1;
        let version = node.version;
        if let Some(kept) = session.ephemerals.get_mut(&full) {
            *kept = data.to_vec();
        }
        Tree::fire(&mut tree.data_watches, &full, WatchEvent::DataChanged);
        Ok(version)
    }

    async fn delete(&self, path: &str, expected: Option<Version>) -> Result<(), CoordError> {
        let full = self.full(path)?;
        let mut session = self.session();
        lock(&self.tree).remove(&full, expected)?;
        session.ephemerals.remove(&full);
        Ok(())
    }

    async fn children(&self, path: &str) -> Result<Vec<String>, CoordError> {
        let full = self.full(path)?;
        let tree = lock(&self.tree);
        children_of(&tree, &full)
    }

    async fn children_and_watch(&self, path: &str) -> Result<(Vec<String>, Watch), CoordError> {
        let full = self.full(path)?;
        let id = self.session().id;
        let mut tree = lock(&self.tree);
        let children = children_of(&tree, &full)?;
        Ok((children, self.watch(&mut tree, true, &full, id)))
    }

    fn session_events(&self) -> broadcast::Receiver<SessionEvent> {
        self.events.subscribe()
    }
}

fn children_of(tree: &Tree, path: &str) -> Result<Vec<String>, CoordError> {
    if path == "/" {
        return Ok(tree
            .nodes
            .keys()
            .filter(|p| p[1..].find('/').is_none())
            .map(|p| p[1..].to_owned())
            .collect());
    }
    let node = tree.nodes.get(path).ok_or_else(|| CoordError::NoNode { path: path.to_owned() })?;
    Ok(node.children.iter().cloned().collect())
}
