//! What every `trib` command connects with, built once in `main` from the global flags (one
//! process, one identity) and passed to the command: the TLS of every broker connection
//! (`--tls-ca`, `--tls-cert`, `--tls-key`), the principal the brokers see, and the ZooKeeper
//! credentials of `--zookeeper` (`--zookeeper-auth-file`).

use std::sync::Arc;

use client::{ClientError, Connection, ConnectionConfig, SimpleConsumerConfig};
use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject;
use service::Failure;

use crate::cli::ConnectionArgs;

#[derive(Clone)]
pub struct Context {
    tls: Option<Arc<rustls::ClientConfig>>,
    principal: String,
    zookeeper: cluster::ZooKeeperArgs,
}

impl Context {
    /// Reads the flags' files; a missing or unusable file is a usage error.
    pub fn new(args: &ConnectionArgs) -> Result<Context, Failure> {
        if let Some(file) = &args.zookeeper_auth_file {
            cluster::Digest::read(file).map_err(Failure::usage)?;
        }
        let files = service::tls::ClientTlsFiles::from_settings(
            args.tls_ca.as_deref(),
            args.tls_cert.as_deref(),
            args.tls_key.as_deref(),
        )
        .map_err(|e| Failure::usage(anyhow::anyhow!(e.to_string().replace("tls_", "--tls-"))))?;
        let tls = match &files {
            Some(files) => Some(service::tls::client_config(files).map_err(Failure::usage)?),
            None => None,
        };
        let principal = match files.as_ref().and_then(|f| f.cert.as_ref()) {
            Some(cert) => {
                let der = CertificateDer::from_pem_file(cert).map_err(|e| {
                    Failure::usage(anyhow::anyhow!("cannot read {}: {e}", cert.display()))
                })?;
                service::tls::principal(&der)
                    .map_err(|e| Failure::usage(anyhow::anyhow!("{}: {e}", cert.display())))?
            }
            None => service::tls::ANONYMOUS.to_owned(),
        };
        let zookeeper = cluster::ZooKeeperArgs {
            zookeeper_auth_file: args.zookeeper_auth_file.clone(),
            ..cluster::ZooKeeperArgs::default()
        };
        Ok(Context { tls, principal, zookeeper })
    }

    /// The TLS every connection uses; `None` for plaintext.
    pub fn tls(&self) -> Option<Arc<rustls::ClientConfig>> {
        self.tls.clone()
    }

    /// Who the brokers see: the certificate's CN, or `anonymous`.
    pub fn principal(&self) -> &str {
        &self.principal
    }

    /// The ZooKeeper session settings of `--zookeeper`.
    pub fn zookeeper(&self) -> &cluster::ZooKeeperArgs {
        &self.zookeeper
    }

    pub fn consumer_config(&self) -> SimpleConsumerConfig {
        SimpleConsumerConfig { tls: self.tls(), ..SimpleConsumerConfig::default() }
    }

    pub async fn connect(&self, addr: &str) -> Result<Connection, ClientError> {
        Connection::connect_with(addr, ConnectionConfig::with_tls(self.tls())).await
    }
}
