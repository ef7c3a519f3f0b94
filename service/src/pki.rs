//! A certificate authority of one's own (rcgen): what `tributary up` generates under its run
//! directory so that every service speaks mutual TLS, and what tests sign their certificates
//! with. Keys are ECDSA P-256; certificates name their principal as the subject's CN and the
//! hosts they serve as subject alternative names.

use std::path::{Path, PathBuf};

use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose, SanType,
};
use thiserror::Error;

#[derive(Debug, Error)]
#[non_exhaustive]
pub enum PkiError {
    #[error("cannot make a certificate: {0}")]
    Generate(#[from] rcgen::Error),
    #[error("cannot write {path}: {source}")]
    Write { path: PathBuf, source: std::io::Error },
    #[error("not a CA of this kind: {0}")]
    Load(String),
}

/// A certificate and its private key, PEM.
#[derive(Debug, Clone)]
pub struct Issued {
    pub cert_pem: String,
    pub key_pem: String,
}

impl Issued {
    /// Writes `{dir}/{name}.crt` and `{dir}/{name}.key` (the key readable by its owner only).
    pub fn write(&self, dir: &Path, name: &str) -> Result<(PathBuf, PathBuf), PkiError> {
        let cert = dir.join(format!("{name}.crt"));
        let key = dir.join(format!("{name}.key"));
        write(&cert, &self.cert_pem, 0o644)?;
        write(&key, &self.key_pem, 0o600)?;
        Ok((cert, key))
    }
}

fn write(path: &Path, text: &str, mode: u32) -> Result<(), PkiError> {
    use std::os::unix::fs::PermissionsExt;
    let failed = |source| PkiError::Write { path: path.to_owned(), source };
    std::fs::write(path, text).map_err(failed)?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).map_err(failed)
}

/// How long an issued certificate is valid.
#[derive(Debug, Clone, Copy)]
pub enum Validity {
    /// From a day ago for this many days.
    Days(i64),
    /// Already expired: it ended a day ago.
    Expired,
}

/// A CA that signs server and client certificates.
pub struct CertificateAuthority {
    issuer: Issuer<'static, KeyPair>,
    cert_pem: String,
}

impl std::fmt::Debug for CertificateAuthority {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CertificateAuthority").finish_non_exhaustive()
    }
}

fn name(common_name: &str) -> DistinguishedName {
    let mut name = DistinguishedName::new();
    name.push(DnType::OrganizationName, "Tributary");
    name.push(DnType::CommonName, common_name);
    name
}

/// What a CA named `common_name` signs with: its name and its key usages.
fn ca_params(common_name: &str) -> Result<CertificateParams, rcgen::Error> {
    let mut params = CertificateParams::new(Vec::<String>::new())?;
    params.distinguished_name = name(common_name);
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    Ok(params)
}

impl CertificateAuthority {
    /// A new self-signed CA named `common_name`, valid for ten years.
    pub fn new(common_name: &str) -> Result<CertificateAuthority, PkiError> {
        let mut params = ca_params(common_name)?;
        let now = time_now();
        params.not_before = now - time::Duration::days(1);
        params.not_after = now + time::Duration::days(3650);
        let key = KeyPair::generate()?;
        let cert_pem = params.self_signed(&key)?.pem();
        Ok(CertificateAuthority { issuer: Issuer::new(params, key), cert_pem })
    }

    /// The CA that [`CertificateAuthority::new`] made earlier, from its certificate and key
    /// (as [`CertificateAuthority::cert_pem`] and [`CertificateAuthority::key_pem`] gave them):
    /// what it signs from now on is trusted wherever its certificate already is.
    pub fn load(cert_pem: &str, key_pem: &str) -> Result<CertificateAuthority, PkiError> {
        use rustls::pki_types::CertificateDer;
        use rustls::pki_types::pem::PemObject;
        use x509_parser::prelude::FromDer;
        let der = CertificateDer::from_pem_slice(cert_pem.as_bytes())
            .map_err(|e| PkiError::Load(format!("its certificate: {e}")))?;
        let common_name =
            crate::tls::principal(&der).map_err(|e| PkiError::Load(format!("its name: {e}")))?;
        let key =
            KeyPair::from_pem(key_pem).map_err(|e| PkiError::Load(format!("its key: {e}")))?;
        let (_, cert) = x509_parser::certificate::X509Certificate::from_der(&der)
            .map_err(|e| PkiError::Load(format!("its certificate: {e}")))?;
        if cert.public_key().subject_public_key.data.as_ref() != key.public_key_raw() {
            return Err(PkiError::Load("the key is not the certificate's".into()));
        }
        if !cert.is_ca() {
            return Err(PkiError::Load(format!("{common_name:?} is not a CA certificate")));
        }
        let issuer = Issuer::new(ca_params(&common_name)?, key);
        Ok(CertificateAuthority { issuer, cert_pem: cert_pem.to_owned() })
    }

    /// The CA's certificate, PEM: what clients and servers trust.
    pub fn cert_pem(&self) -> String {
        self.cert_pem.clone()
    }

    /// The CA's private key, PEM: keep it where only its owner reads it.
    pub fn key_pem(&self) -> String {
        self.issuer.key().serialize_pem()
    }

    /// A certificate for principal `common_name`, serving `hosts` (DNS names or IP
    /// addresses), usable as a server's and as a client's.
    pub fn issue(
        &self,
        common_name: &str,
        hosts: &[&str],
        validity: Validity,
    ) -> Result<Issued, PkiError> {
        let mut params = CertificateParams::new(Vec::<String>::new())?;
        params.distinguished_name = name(common_name);
        params.subject_alt_names = hosts
            .iter()
            .map(|h| match h.parse::<std::net::IpAddr>() {
                Ok(ip) => Ok(SanType::IpAddress(ip)),
                Err(_) => Ok(SanType::DnsName((*h).try_into()?)),
            })
            .collect::<Result<_, rcgen::Error>>()?;
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        params.extended_key_usages =
            vec![ExtendedKeyUsagePurpose::ServerAuth, ExtendedKeyUsagePurpose::ClientAuth];
        let now = time_now();
        let day = time::Duration::days(1);
        (params.not_before, params.not_after) = match validity {
            Validity::Days(days) => (now - day, now + time::Duration::days(days)),
            Validity::Expired => (now - day * 30, now - day),
        };
        let key = KeyPair::generate()?;
        let cert = params.signed_by(&key, &self.issuer)?;
        Ok(Issued { cert_pem: cert.pem(), key_pem: key.serialize_pem() })
    }
}

fn time_now() -> time::OffsetDateTime {
    time::OffsetDateTime::now_utc()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn issued_certificates_name_their_principal() {
        let ca = CertificateAuthority::new("test CA").unwrap();
        let issued = ca.issue("agent-1", &["127.0.0.1", "localhost"], Validity::Days(1)).unwrap();
        let der = rustls::pki_types::CertificateDer::from_pem_slice(issued.cert_pem.as_bytes());
        use rustls::pki_types::pem::PemObject;
        assert_eq!(crate::tls::principal(&der.unwrap()).unwrap(), "agent-1");
        assert!(ca.cert_pem().starts_with("-----BEGIN CERTIFICATE-----"));
    }

    #[test]
    fn a_loaded_ca_signs_what_its_certificate_verifies() {
        use rustls::pki_types::CertificateDer;
        use rustls::pki_types::pem::PemObject;
        let ca = CertificateAuthority::new("local CA").unwrap();
        let loaded = CertificateAuthority::load(&ca.cert_pem(), &ca.key_pem()).unwrap();
        let issued = loaded.issue("mirror", &["127.0.0.1"], Validity::Days(1)).unwrap();
        let mut roots = rustls::RootCertStore::empty();
        roots.add(CertificateDer::from_pem_slice(ca.cert_pem().as_bytes()).unwrap()).unwrap();
        let verifier = rustls::server::WebPkiClientVerifier::builder(std::sync::Arc::new(roots))
            .build()
            .unwrap();
        let der = CertificateDer::from_pem_slice(issued.cert_pem.as_bytes()).unwrap();
        let now = rustls::pki_types::UnixTime::now();
        verifier.verify_client_cert(&der, &[], now).unwrap();
        // Another CA's key, or a leaf certificate, is not this CA.
        let other = CertificateAuthority::new("other CA").unwrap();
        assert!(CertificateAuthority::load(&ca.cert_pem(), &other.key_pem()).is_err());
        assert!(CertificateAuthority::load(&issued.cert_pem, &issued.key_pem).is_err());
    }
}
