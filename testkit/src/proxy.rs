//! A TCP proxy that a test can cut off: [`service::proxy::TcpProxy`] on a free loopback port.

pub use service::proxy::TcpProxy;

/// A proxy on a free loopback port relaying every connection to `upstream`.
pub async fn start(upstream: std::net::SocketAddr) -> TcpProxy {
    TcpProxy::bind("127.0.0.1:0".parse().expect("loopback"), upstream).await.expect("bind proxy")
}
