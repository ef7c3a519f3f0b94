//! Certificates for tests: a CA of the test's own ([`service::pki`]) in a temporary
//! directory, and identities it signs for `127.0.0.1` and `localhost`.

use std::path::{Path, PathBuf};

use service::pki::{CertificateAuthority, Validity};
use tempfile::TempDir;

/// A certificate and its key, as files.
#[derive(Debug, Clone)]
pub struct Identity {
    pub cert: PathBuf,
    pub key: PathBuf,
}

/// A test CA and the files it wrote.
pub struct Pki {
    dir: TempDir,
    ca: CertificateAuthority,
    ca_path: PathBuf,
}

impl Pki {
    pub fn new(name: &str) -> Pki {
        let dir = tempfile::tempdir().expect("temp dir");
        let ca = CertificateAuthority::new(name).expect("a CA");
        let ca_path = dir.path().join("ca.crt");
        std::fs::write(&ca_path, ca.cert_pem()).expect("write the CA");
        Pki { dir, ca, ca_path }
    }

    /// The CA's certificate file: what servers and clients trust.
    pub fn ca(&self) -> &Path {
        &self.ca_path
    }

    /// A certificate for principal `name`, valid for a day, for the loopback host names.
    pub fn identity(&self, name: &str) -> Identity {
        self.issue(name, Validity::Days(1))
    }

    /// A certificate for `name` that expired yesterday.
    pub fn expired(&self, name: &str) -> Identity {
        self.issue(name, Validity::Expired)
    }

    /// A certificate for `name` that serves only `host` (for a wrong-host check).
    pub fn identity_for_host(&self, name: &str, host: &str) -> Identity {
        let issued = self.ca.issue(name, &[host], Validity::Days(1)).expect("issue");
        let (cert, key) = issued.write(self.dir.path(), &format!("{name}-{host}")).expect("write");
        Identity { cert, key }
    }

    fn issue(&self, name: &str, validity: Validity) -> Identity {
        let issued = self.ca.issue(name, &["127.0.0.1", "localhost"], validity).expect("issue");
        let file = match validity {
            Validity::Expired => format!("{name}-expired"),
            Validity::Days(_) => name.to_owned(),
        };
        let (cert, key) = issued.write(self.dir.path(), &file).expect("write");
        Identity { cert, key }
    }
}
