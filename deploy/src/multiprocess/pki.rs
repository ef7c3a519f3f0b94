//! The deployment's own certificates (`[security] tls`): a CA and one certificate per process
//! under `{run_dir}/pki`, made by the first `up` and kept, so that a process started again
//! later trusts, and is trusted by, the ones still running. A process's certificate names it
//! (its subject CN is the process name, the principal the ACL files name) and serves
//! `127.0.0.1` and `localhost`. `operator` is the certificate of the person at the terminal
//! (`trib`, `curl`); `dashboard.token` is the audit dashboard's bearer token for a browser.

use std::path::{Path, PathBuf};

use service::pki::{CertificateAuthority, Validity};

/// The principal of the person running `trib` and `curl` against the deployment.
pub const OPERATOR: &str = "operator";
/// How long a certificate made here is valid. `down`, remove `{run_dir}/pki` and `up` again
/// for new ones.
const VALID_DAYS: i64 = 825;

/// Where the deployment's certificates are.
#[derive(Debug, Clone)]
pub struct PkiPaths {
    dir: PathBuf,
}

#[derive(Debug, thiserror::Error)]
#[error("the deployment's certificates in {dir}: {reason}")]
pub struct PkiError {
    dir: PathBuf,
    reason: String,
}

impl PkiPaths {
    pub fn new(run_dir: &Path) -> PkiPaths {
        PkiPaths { dir: run_dir.join("pki") }
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The CA's certificate: what every process trusts.
    pub fn ca(&self) -> PathBuf {
        self.dir.join("ca.crt")
    }

    fn ca_key(&self) -> PathBuf {
        self.dir.join("ca.key")
    }

    pub fn cert(&self, name: &str) -> PathBuf {
        self.dir.join(format!("{name}.crt"))
    }

    pub fn key(&self, name: &str) -> PathBuf {
        self.dir.join(format!("{name}.key"))
    }

    /// Certificate and key in one file, as HAProxy takes them.
    pub fn bundle(&self, name: &str) -> PathBuf {
        self.dir.join(format!("{name}.pem"))
    }

    /// The ZooKeeper digest credentials of every process, `tributary:{random}`.
    pub fn zookeeper_digest(&self) -> PathBuf {
        self.dir.join("zookeeper.digest")
    }

    /// Makes the ZooKeeper credentials unless there are some.
    pub fn ensure_zookeeper_digest(&self) -> Result<(), PkiError> {
        let fail = |reason: String| PkiError { dir: self.dir.clone(), reason };
        if self.zookeeper_digest().is_file() {
            return Ok(());
        }
        std::fs::create_dir_all(&self.dir).map_err(|e| fail(e.to_string()))?;
        let password = random_hex(24).map_err(|e| fail(format!("a password: {e}")))?;
        write(&self.zookeeper_digest(), &format!("tributary:{password}\n"), 0o600).map_err(fail)
    }

    /// The dashboard's bearer token.
    pub fn token(&self) -> PathBuf {
        self.dir.join("dashboard.token")
    }

    /// The token, once [`PkiPaths::ensure`] made it.
    pub fn read_token(&self) -> Option<String> {
        std::fs::read_to_string(self.token()).ok().map(|t| t.trim().to_owned())
    }

    /// Makes what is missing: the CA (unless there is one), a certificate for each of
    /// `names` that has none, and the token.
    pub fn ensure<'a>(&self, names: impl IntoIterator<Item = &'a str>) -> Result<(), PkiError> {
        let fail = |reason: String| PkiError { dir: self.dir.clone(), reason };
        std::fs::create_dir_all(&self.dir).map_err(|e| fail(e.to_string()))?;
        let ca = match (std::fs::read_to_string(self.ca()), std::fs::read_to_string(self.ca_key()))
        {
            (Ok(cert), Ok(key)) => CertificateAuthority::load(&cert, &key)
                .map_err(|e| fail(format!("{}: {e}", self.ca().display())))?,
            _ => {
                let ca = CertificateAuthority::new("Tributary local CA")
                    .map_err(|e| fail(e.to_string()))?;
                write(&self.ca_key(), &ca.key_pem(), 0o600).map_err(fail)?;
                write(&self.ca(), &ca.cert_pem(), 0o644).map_err(fail)?;
                ca
            }
        };
        for name in names {
            if self.cert(name).is_file() && self.key(name).is_file() && self.bundle(name).is_file()
            {
                continue;
            }
            let issued = ca
                .issue(name, &["127.0.0.1", "localhost"], Validity::Days(VALID_DAYS))
                .map_err(|e| fail(format!("{name}: {e}")))?;
            write(&self.key(name), &issued.key_pem, 0o600).map_err(fail)?;
            write(&self.bundle(name), &format!("{}{}", issued.cert_pem, issued.key_pem), 0o600)
                .map_err(fail)?;
            write(&self.cert(name), &issued.cert_pem, 0o644).map_err(fail)?;
        }
        if self.read_token().is_none_or(|t| t.is_empty()) {
            let token = random_hex(24).map_err(|e| fail(format!("a token: {e}")))?;
            write(&self.token(), &format!("{token}\n"), 0o600).map_err(fail)?;
        }
        Ok(())
    }
}

/// Writes `path` with `mode`, through a temporary file, so a crash never leaves half a key.
fn write(path: &Path, text: &str, mode: u32) -> Result<(), String> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let temp = path.with_extension("tmp");
    let written = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(mode)
        .open(&temp)
        .and_then(|mut f| f.write_all(text.as_bytes()).and_then(|()| f.sync_all()))
        .and_then(|()| std::fs::rename(&temp, path));
    written.map_err(|e| format!("{}: {e}", path.display()))
}

fn random_hex(bytes: usize) -> std::io::Result<String> {
    use std::io::Read;
    let mut buf = vec![0u8; bytes];
    std::fs::File::open("/dev/urandom")?.read_exact(&mut buf)?;
    Ok(buf.iter().map(|b| format!("{b:02x}")).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_ensure_keeps_the_ca_and_adds_what_is_new() {
        let dir = tempfile::tempdir().unwrap();
        let pki = PkiPaths::new(dir.path());
        pki.ensure(["mirror"]).unwrap();
        let (ca, mirror) = (std::fs::read(pki.ca()).unwrap(), std::fs::read(pki.cert("mirror")));
        let token = pki.read_token().unwrap();
        assert_eq!(token.len(), 48);
        pki.ensure(["mirror", "loader"]).unwrap();
        assert_eq!(std::fs::read(pki.ca()).unwrap(), ca);
        assert_eq!(std::fs::read(pki.cert("mirror")).unwrap(), mirror.unwrap());
        assert!(pki.cert("loader").is_file() && pki.bundle("loader").is_file());
        assert_eq!(pki.read_token().unwrap(), token);
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(pki.key("loader")).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
    }
}
