//! Proxies for tests: a TCP proxy that a test can cut off ([`service::proxy::TcpProxy`] on a
//! free loopback port), and one that loses answers ([`AckDropper`]).

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

pub use service::proxy::TcpProxy;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinSet;

/// A proxy on a free loopback port relaying every connection to `upstream`.
pub async fn start(upstream: std::net::SocketAddr) -> TcpProxy {
    TcpProxy::bind("127.0.0.1:0".parse().expect("loopback"), upstream).await.expect("bind proxy")
}

/// A proxy that relays whole frames — a 4-byte size, then the frame, whose first two bytes
/// are the request's API key: the native protocol's and Kafka's alike — and loses every
/// `every`th answer to a request whose API key is one of `api_keys` (counted over all
/// connections): it closes the connection instead of relaying that answer, after the server
/// has done what was asked. An acknowledgement lost on its way back. Requests that get no
/// answer (acks 0) must not pass through it.
pub struct AckDropper {
    addr: SocketAddr,
    dropped: Arc<AtomicU64>,
    acceptor: tokio::task::JoinHandle<()>,
}

impl AckDropper {
    /// Listens on `listen` (port 0: a free one) and relays to `upstream`.
    pub async fn start(
        listen: SocketAddr,
        upstream: SocketAddr,
        api_keys: &[i16],
        every: u64,
    ) -> AckDropper {
        assert!(every > 0, "every answer but the `every`th is relayed");
        let listener = TcpListener::bind(listen).await.expect("bind the ack-dropping proxy");
        let addr = listener.local_addr().expect("bound");
        let dropped = Arc::new(AtomicU64::new(0));
        let rule = Arc::new(DropRule {
            api_keys: api_keys.to_vec(),
            every,
            answered: AtomicU64::new(0),
            dropped: Arc::clone(&dropped),
        });
        let acceptor = tokio::spawn(async move {
            let mut relays = JoinSet::new();
            while let Ok((client, _)) = listener.accept().await {
                while relays.try_join_next().is_some() {}
                relays.spawn(relay_frames(client, upstream, Arc::clone(&rule)));
            }
        });
        AckDropper { addr, dropped, acceptor }
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Answers lost so far.
    pub fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }
}

impl Drop for AckDropper {
    fn drop(&mut self) {
        self.acceptor.abort();
    }
}

struct DropRule {
    api_keys: Vec<i16>,
    every: u64,
    /// Answers to the requests picked, relayed or not.
    answered: AtomicU64,
    dropped: Arc<AtomicU64>,
}

impl DropRule {
    fn drops(&self, api_key: i16) -> bool {
        if !self.api_keys.contains(&api_key) {
            return false;
        }
        let n = self.answered.fetch_add(1, Ordering::Relaxed) + 1;
        let drop = n.is_multiple_of(self.every);
        if drop {
            self.dropped.fetch_add(1, Ordering::Relaxed);
        }
        drop
    }
}

/// One frame from `from`: its size field and the frame; `None` at the end of the stream.
async fn read_frame(from: &mut (impl AsyncRead + Unpin)) -> Option<Vec<u8>> {
    let mut size = [0u8; 4];
    from.read_exact(&mut size).await.ok()?;
    let len = usize::try_from(i32::from_be_bytes(size)).ok()?;
    let mut frame = vec![0u8; 4 + len];
    frame[..4].copy_from_slice(&size);
    from.read_exact(&mut frame[4..]).await.ok()?;
    Some(frame)
}

async fn relay_frames(client: TcpStream, upstream: SocketAddr, rule: Arc<DropRule>) {
    let Ok(server) = TcpStream::connect(upstream).await else { return };
    let _ = (client.set_nodelay(true), server.set_nodelay(true));
    let (mut client_reads, mut client_writes) = client.into_split();
    let (mut server_reads, mut server_writes) = server.into_split();
    // The API keys of the requests sent and not yet answered, in order.
    let (asked, mut answering) = tokio::sync::mpsc::unbounded_channel::<i16>();
    let requests = async move {
        while let Some(frame) = read_frame(&mut client_reads).await {
            let api_key = frame.get(4..6).map_or(-1, |k| i16::from_be_bytes([k[0], k[1]]));
            if asked.send(api_key).is_err() || server_writes.write_all(&frame).await.is_err() {
                return;
            }
        }
    };
    let answers = async move {
        while let Some(frame) = read_frame(&mut server_reads).await {
            let Some(api_key) = answering.recv().await else { return };
            if rule.drops(api_key) || client_writes.write_all(&frame).await.is_err() {
                return; // both connections close with this relay
            }
        }
    };
    tokio::select! {
        () = requests => {}
        () = answers => {}
    }
}
