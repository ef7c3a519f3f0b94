//! `tributary demo --tls`: the demo's services speak mutual TLS to each other as separate
//! processes would, with a CA and one certificate per service made under
//! `{data_dir}/pki` (the same files `tributary up` makes). The demo's own reads (status line,
//! drain, summary) go as `operator`. No ACL files: every certified client may do everything.

use std::path::PathBuf;
use std::sync::Arc;

use crate::multiprocess::pki::{OPERATOR, PkiPaths};

use super::error::DemoError;

/// The demo's certificates.
pub struct DemoTls {
    pki: PkiPaths,
    operator: Arc<rustls::ClientConfig>,
}

impl DemoTls {
    /// Makes the CA and a certificate for each of `services` and the operator.
    pub fn prepare(data_dir: &std::path::Path, services: &[String]) -> Result<DemoTls, DemoError> {
        let pki = PkiPaths::new(data_dir);
        let names = services.iter().map(String::as_str).chain([OPERATOR]);
        pki.ensure(names).map_err(|e| DemoError::Tls(e.to_string()))?;
        let operator = service::tls::client_from_settings(
            Some(&pki.ca()),
            Some(&pki.cert(OPERATOR)),
            Some(&pki.key(OPERATOR)),
        )
        .map_err(|e| DemoError::Tls(e.to_string()))?
        .ok_or_else(|| DemoError::Tls("no client TLS for the operator".into()))?;
        Ok(DemoTls { pki, operator })
    }

    /// What `name` is configured with: it trusts the CA, presents its own certificate (on its
    /// listener and to the servers it calls), and requires clients to present one.
    pub fn service(&self, name: &str) -> service::tls::TlsArgs {
        let pki = &self.pki;
        service::tls::TlsArgs {
            tls_ca: Some(pki.ca()),
            tls_cert: Some(pki.cert(name)),
            tls_key: Some(pki.key(name)),
            tls_client_ca: Some(pki.ca()),
        }
    }

    /// The client TLS of the demo's own reads.
    pub fn operator(&self) -> Arc<rustls::ClientConfig> {
        Arc::clone(&self.operator)
    }

    pub fn ca(&self) -> PathBuf {
        self.pki.ca()
    }

    pub fn token_file(&self) -> PathBuf {
        self.pki.token()
    }

    pub fn token(&self) -> Option<String> {
        self.pki.read_token()
    }
}
