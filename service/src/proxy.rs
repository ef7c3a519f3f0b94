//! A TCP proxy in front of one upstream address that can be cut off, as a firewall that
//! starts rejecting a host does: while cut, every relayed connection is closed and new ones
//! are closed as soon as they are accepted. Healing lets new connections through again.
//! `tributary proxy` runs one in front of a broker for `tributary chaos`; tests put one in
//! front of a server they want to lose.

use std::net::SocketAddr;
use std::sync::Arc;

use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::{JoinHandle, JoinSet};

pub struct TcpProxy {
    addr: SocketAddr,
    cut: Arc<watch::Sender<bool>>,
    acceptor: JoinHandle<()>,
}

impl TcpProxy {
    /// Listens on `listen` and relays every connection to `upstream`.
    pub async fn bind(listen: SocketAddr, upstream: SocketAddr) -> std::io::Result<TcpProxy> {
        let listener = TcpListener::bind(listen).await?;
        let addr = listener.local_addr()?;
        let cut = Arc::new(watch::channel(false).0);
        let acceptor = tokio::spawn(accept(listener, upstream, cut.clone()));
        Ok(TcpProxy { addr, cut, acceptor })
    }

    /// Where clients connect instead of the upstream.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Closes every relayed connection and refuses new ones until [`TcpProxy::heal`].
    pub fn cut(&self) {
        self.cut.send_replace(true);
    }

    pub fn heal(&self) {
        self.cut.send_replace(false);
    }

    pub fn is_cut(&self) -> bool {
        *self.cut.borrow()
    }
}

impl Drop for TcpProxy {
    fn drop(&mut self) {
        // The relays live in the acceptor's join set and end with it.
        self.acceptor.abort();
    }
}

async fn accept(listener: TcpListener, upstream: SocketAddr, cut: Arc<watch::Sender<bool>>) {
    let mut relays = JoinSet::new();
    loop {
        let client = match listener.accept().await {
            Ok((client, _)) => client,
            // Out of descriptors: wait for relays to end rather than spin.
            Err(_) => {
                tokio::time::sleep(std::time::Duration::from_millis(10)).await;
                continue;
            }
        };
        while relays.try_join_next().is_some() {}
        if *cut.borrow() {
            continue;
        }
        let _ = client.set_nodelay(true);
        relays.spawn(relay(client, upstream, cut.subscribe()));
    }
}

async fn relay(mut client: TcpStream, upstream: SocketAddr, mut cut: watch::Receiver<bool>) {
    let Ok(mut server) = TcpStream::connect(upstream).await else { return };
    let _ = server.set_nodelay(true);
    tokio::select! {
        _ = tokio::io::copy_bidirectional(&mut client, &mut server) => {}
        _ = cut.wait_for(|cut| *cut) => {}
    }
}
