//! `trib`'s TLS: the `--tls-ca`, `--tls-cert` and `--tls-key` flags, read once at start and
//! used by every connection the command opens (one process, one identity).

use std::sync::{Arc, OnceLock};

use client::{ClientError, Connection, ConnectionConfig, SimpleConsumerConfig};
use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject;
use service::Failure;

use crate::cli::TlsArgs;

struct Identity {
    config: Option<Arc<rustls::ClientConfig>>,
    principal: String,
}

static IDENTITY: OnceLock<Identity> = OnceLock::new();
static ZOOKEEPER_AUTH_FILE: OnceLock<Option<std::path::PathBuf>> = OnceLock::new();

/// `--zookeeper-auth-file`, as [`init`] found it.
pub fn zookeeper_auth_file() -> Option<&'static std::path::Path> {
    ZOOKEEPER_AUTH_FILE.get().and_then(|f| f.as_deref())
}

/// Reads the flags' files; a missing or unusable file is a usage error.
pub fn init(args: &TlsArgs) -> Result<(), Failure> {
    if let Some(file) = &args.zookeeper_auth_file {
        cluster::Digest::read(file).map_err(Failure::usage)?;
    }
    let _ = ZOOKEEPER_AUTH_FILE.set(args.zookeeper_auth_file.clone());
    let files = service::tls::ClientTlsFiles::from_settings(
        args.tls_ca.as_deref(),
        args.tls_cert.as_deref(),
        args.tls_key.as_deref(),
    )
    .map_err(|e| Failure::usage(anyhow::anyhow!(e.to_string().replace("tls_", "--tls-"))))?;
    let config = match &files {
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
    let _ = IDENTITY.set(Identity { config, principal });
    Ok(())
}

/// The TLS every connection uses; `None` for plaintext.
pub fn config() -> Option<Arc<rustls::ClientConfig>> {
    IDENTITY.get().and_then(|i| i.config.clone())
}

/// Who the brokers see: the certificate's CN, or `anonymous`.
pub fn principal() -> &'static str {
    IDENTITY.get().map_or(service::tls::ANONYMOUS, |i| i.principal.as_str())
}

pub fn consumer_config() -> SimpleConsumerConfig {
    SimpleConsumerConfig { tls: config(), ..SimpleConsumerConfig::default() }
}

pub async fn connect(addr: &str) -> Result<Connection, ClientError> {
    Connection::connect_with(addr, ConnectionConfig::with_tls(config())).await
}
