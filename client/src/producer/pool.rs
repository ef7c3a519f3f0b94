//! The producer's connections, one per broker address, shared by every partition sender.
//! A connection that failed is forgotten, and the next attempt connects anew.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use crate::{ClientError, Connection, ConnectionConfig};

pub(crate) struct ConnectionPool {
    connections: Mutex<HashMap<String, Connection>>,
    connect_timeout_ms: u64,
    tls: Option<std::sync::Arc<rustls::ClientConfig>>,
}

impl ConnectionPool {
    pub fn new(
        connect_timeout_ms: u64,
        tls: Option<std::sync::Arc<rustls::ClientConfig>>,
    ) -> ConnectionPool {
        ConnectionPool { connections: Mutex::new(HashMap::new()), connect_timeout_ms, tls }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Connection>> {
        self.connections.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The open connection to `addr`, or a new one.
    pub async fn get(&self, addr: &str) -> Result<Connection, ClientError> {
        if let Some(conn) = self.lock().get(addr) {
            return Ok(conn.clone());
        }
        let timeout = Duration::from_millis(self.connect_timeout_ms);
        let connecting =
            Connection::connect_with(addr, ConnectionConfig::with_tls(self.tls.clone()));
        let conn = match tokio::time::timeout(timeout, connecting).await {
            Ok(result) => result?,
            Err(_) => {
                let source = std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    format!("not connected within {} ms", self.connect_timeout_ms),
                );
                return Err(ClientError::Connect { addr: addr.to_owned(), source });
            }
        };
        // Another sender may have connected meanwhile; keep one and drop the other.
        Ok(self.lock().entry(addr.to_owned()).or_insert(conn).clone())
    }

    /// Drops the connection to `addr` after a failure on it.
    pub fn forget(&self, addr: &str) {
        self.lock().remove(addr);
    }
}
