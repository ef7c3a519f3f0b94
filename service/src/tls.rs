//! TLS for every listener and client (`docs/design.md`, "TLS"), on rustls with its `ring`
//! provider — the one TLS stack and crypto provider of the workspace (reqwest's default,
//! aws-lc-rs, is a large C build), which [`install_crypto_provider`] installs before the first
//! config is made.
//!
//! - A **server** takes `tls_cert` and `tls_key` (PEM) and speaks TLS 1.3 only; with
//!   `tls_client_ca` it requires a client certificate signed by that CA (mutual TLS).
//!   [`ServerTls::reload`] reads the files again (on SIGHUP, [`reload_on_sighup`]): new
//!   connections get the new certificate, open ones keep theirs.
//! - A **client** takes `tls_ca` (whom to trust) and, for mutual TLS, `tls_cert`/`tls_key`.
//! - The **principal** of a connection is its client certificate's subject CN
//!   ([`principal`]); a connection without one is [`ANONYMOUS`].

use std::path::{Path, PathBuf};
use std::sync::{Arc, Once, RwLock};

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use thiserror::Error;
use tokio_util::sync::CancellationToken;

/// Installs rustls's `ring` provider as the process default, once; later calls do nothing.
pub fn install_crypto_provider() {
    static INSTALL: Once = Once::new();
    INSTALL.call_once(|| {
        // Fails only if another provider was installed first, which then serves as well.
        let _ = rustls::crypto::ring::default_provider().install_default();
    });
}

/// The principal of a connection that presented no certificate (or of any plaintext one).
pub const ANONYMOUS: &str = "anonymous";

#[derive(Debug, Error)]
#[non_exhaustive]
pub enum TlsError {
    #[error("cannot read {what} {path}: {reason}")]
    Read { what: &'static str, path: PathBuf, reason: String },
    #[error("{what} {path} holds no {expected}")]
    Empty { what: &'static str, path: PathBuf, expected: &'static str },
    #[error("invalid TLS setup: {0}")]
    Config(String),
    #[error("{key} needs {needs}")]
    Incomplete { key: &'static str, needs: &'static str },
    #[error("cannot take a TLS server name from {addr:?}")]
    ServerName { addr: String },
}

/// A server's certificate files.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerTlsFiles {
    pub cert: PathBuf,
    pub key: PathBuf,
    /// Clients must present a certificate signed by this CA...
    pub client_ca: Option<PathBuf>,
    /// ...or, when this is set, may present one (a browser with a bearer token has none).
    pub client_certificate_optional: bool,
}

impl ServerTlsFiles {
    /// The files of the `tls_cert`, `tls_key` and `tls_client_ca` settings: `None` without
    /// TLS, an error for a half-given pair.
    pub fn from_settings(
        cert: Option<&Path>,
        key: Option<&Path>,
        client_ca: Option<&Path>,
    ) -> Result<Option<ServerTlsFiles>, TlsError> {
        match (cert, key) {
            (Some(cert), Some(key)) => Ok(Some(ServerTlsFiles {
                cert: cert.to_owned(),
                key: key.to_owned(),
                client_ca: client_ca.map(Path::to_owned),
                client_certificate_optional: false,
            })),
            (None, None) if client_ca.is_none() => Ok(None),
            (None, None) => {
                Err(TlsError::Incomplete { key: "tls_client_ca", needs: "tls_cert and tls_key" })
            }
            (Some(_), None) => Err(TlsError::Incomplete { key: "tls_cert", needs: "tls_key" }),
            (None, Some(_)) => Err(TlsError::Incomplete { key: "tls_key", needs: "tls_cert" }),
        }
    }
}

/// A client's certificate files.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientTlsFiles {
    /// The CA that signs the servers' certificates.
    pub ca: PathBuf,
    /// This client's certificate and key, for mutual TLS.
    pub cert: Option<PathBuf>,
    pub key: Option<PathBuf>,
}

impl ClientTlsFiles {
    /// The files of the `tls_ca`, `tls_cert` and `tls_key` settings of a client: `None`
    /// without TLS, an error for a certificate without its key (or the other way round), or
    /// either without a CA.
    pub fn from_settings(
        ca: Option<&Path>,
        cert: Option<&Path>,
        key: Option<&Path>,
    ) -> Result<Option<ClientTlsFiles>, TlsError> {
        if cert.is_some() != key.is_some() {
            let (key, needs) =
                if cert.is_some() { ("tls_cert", "tls_key") } else { ("tls_key", "tls_cert") };
            return Err(TlsError::Incomplete { key, needs });
        }
        match ca {
            Some(ca) => Ok(Some(ClientTlsFiles {
                ca: ca.to_owned(),
                cert: cert.map(Path::to_owned),
                key: key.map(Path::to_owned),
            })),
            None if cert.is_some() => {
                Err(TlsError::Incomplete { key: "tls_cert", needs: "tls_ca" })
            }
            None => Ok(None),
        }
    }
}

fn read_certs(what: &'static str, path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let read = |reason: String| TlsError::Read { what, path: path.to_owned(), reason };
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(path)
        .map_err(|e| read(e.to_string()))?
        .collect::<Result<_, _>>()
        .map_err(|e| read(e.to_string()))?;
    if certs.is_empty() {
        return Err(TlsError::Empty { what, path: path.to_owned(), expected: "PEM certificate" });
    }
    Ok(certs)
}

fn read_key(path: &Path) -> Result<PrivateKeyDer<'static>, TlsError> {
    PrivateKeyDer::from_pem_file(path).map_err(|e| TlsError::Read {
        what: "private key",
        path: path.to_owned(),
        reason: e.to_string(),
    })
}

fn roots(what: &'static str, path: &Path) -> Result<rustls::RootCertStore, TlsError> {
    let mut roots = rustls::RootCertStore::empty();
    for cert in read_certs(what, path)? {
        roots.add(cert).map_err(|e| TlsError::Config(format!("{}: {e}", path.display())))?;
    }
    Ok(roots)
}

fn server_config(files: &ServerTlsFiles) -> Result<Arc<rustls::ServerConfig>, TlsError> {
    install_crypto_provider();
    let builder = rustls::ServerConfig::builder_with_protocol_versions(&[&rustls::version::TLS13]);
    let builder = match &files.client_ca {
        Some(ca) => {
            let mut verifier =
                rustls::server::WebPkiClientVerifier::builder(Arc::new(roots("client CA", ca)?));
            if files.client_certificate_optional {
                verifier = verifier.allow_unauthenticated();
            }
            let verifier = verifier.build().map_err(|e| TlsError::Config(e.to_string()))?;
            builder.with_client_cert_verifier(verifier)
        }
        None => builder.with_no_client_auth(),
    };
    let config = builder
        .with_single_cert(read_certs("certificate", &files.cert)?, read_key(&files.key)?)
        .map_err(|e| TlsError::Config(format!("{}: {e}", files.cert.display())))?;
    Ok(Arc::new(config))
}

/// A server's TLS configuration, reloadable while it serves.
#[derive(Debug)]
pub struct ServerTls {
    files: ServerTlsFiles,
    current: RwLock<Arc<rustls::ServerConfig>>,
}

impl ServerTls {
    pub fn load(files: ServerTlsFiles) -> Result<Arc<ServerTls>, TlsError> {
        let config = server_config(&files)?;
        Ok(Arc::new(ServerTls { files, current: RwLock::new(config) }))
    }

    /// The configuration new connections get.
    pub fn config(&self) -> Arc<rustls::ServerConfig> {
        Arc::clone(&self.current.read().unwrap_or_else(|p| p.into_inner()))
    }

    /// Whether clients must present a certificate.
    pub fn requires_client_certificate(&self) -> bool {
        self.files.client_ca.is_some() && !self.files.client_certificate_optional
    }

    pub fn files(&self) -> &ServerTlsFiles {
        &self.files
    }

    /// Reads the files again; on an error the configuration in use stays.
    pub fn reload(&self) -> Result<(), TlsError> {
        let config = server_config(&self.files)?;
        *self.current.write().unwrap_or_else(|p| p.into_inner()) = config;
        Ok(())
    }
}

/// Reloads `tls` on every SIGHUP until `stop`, logging the outcome.
pub fn reload_on_sighup(tls: Arc<ServerTls>, stop: CancellationToken) {
    tokio::spawn(async move {
        let Ok(mut hangups) =
            tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup())
        else {
            tracing::warn!("cannot listen for SIGHUP: certificates reload only on restart");
            return;
        };
        loop {
            tokio::select! {
                () = stop.cancelled() => return,
                got = hangups.recv() => if got.is_none() { return },
            }
            match tls.reload() {
                Ok(()) => {
                    tracing::info!(cert = %tls.files.cert.display(), "SIGHUP: reloaded the TLS certificate")
                }
                Err(e) => {
                    tracing::error!(error = %e, "SIGHUP: cannot reload the TLS certificate; keeping the one in use")
                }
            }
        }
    });
}

/// The client TLS of a service's `tls_ca`, `tls_cert` and `tls_key` settings, files read:
/// `None` without `tls_ca` — a service's certificate may serve only its own listener, its
/// clients staying plaintext.
pub fn client_from_settings(
    ca: Option<&Path>,
    cert: Option<&Path>,
    key: Option<&Path>,
) -> Result<Option<Arc<rustls::ClientConfig>>, TlsError> {
    if ca.is_none() {
        return Ok(None);
    }
    ClientTlsFiles::from_settings(ca, cert, key)?.map(|files| client_config(&files)).transpose()
}

/// The server TLS of a process's `tls_cert`, `tls_key` and `tls_client_ca` settings, files
/// read: `None` without a certificate.
pub fn server_from_settings(
    cert: Option<&Path>,
    key: Option<&Path>,
    client_ca: Option<&Path>,
) -> Result<Option<Arc<ServerTls>>, TlsError> {
    ServerTlsFiles::from_settings(cert, key, client_ca)?.map(ServerTls::load).transpose()
}

/// The TLS flags and config keys of a service that both serves and calls others (`tls_ca`,
/// `tls_cert`, `tls_key`, `tls_client_ca`): flattened into its `Cli` (`#[command(flatten)]
/// #[serde(flatten)]`) and its `Config` (`#[serde(flatten)]`). One certificate serves both
/// roles: the listener's, and the service's principal to the servers it calls.
#[derive(
    Debug, Clone, Default, PartialEq, Eq, clap::Args, serde::Serialize, serde::Deserialize,
)]
#[serde(default)]
pub struct TlsArgs {
    /// TLS to the brokers (and an https registry), trusting this CA [default: plaintext].
    #[arg(long, value_name = "FILE")]
    pub tls_ca: Option<PathBuf>,
    /// This service's certificate (PEM): with --tls-key, its listener speaks TLS 1.3 only,
    /// and it is the service's principal (the subject CN) to the servers it calls.
    #[arg(long, value_name = "FILE")]
    pub tls_cert: Option<PathBuf>,
    /// The key of --tls-cert (PEM).
    #[arg(long, value_name = "FILE")]
    pub tls_key: Option<PathBuf>,
    /// The listener requires client certificates signed by this CA (principal: the subject CN).
    #[arg(long, value_name = "FILE")]
    pub tls_client_ca: Option<PathBuf>,
}

impl TlsArgs {
    /// The client TLS, files read: `None` without `tls_ca` (the certificate may serve only
    /// the listener, the service's clients staying plaintext).
    pub fn client(&self) -> Result<Option<Arc<rustls::ClientConfig>>, TlsError> {
        client_from_settings(
            self.tls_ca.as_deref(),
            self.tls_cert.as_deref(),
            self.tls_key.as_deref(),
        )
    }

    /// The client's files, strictly: a certificate without `tls_ca` is an error, not a
    /// listener's only.
    pub fn client_files(&self) -> Result<Option<ClientTlsFiles>, TlsError> {
        ClientTlsFiles::from_settings(
            self.tls_ca.as_deref(),
            self.tls_cert.as_deref(),
            self.tls_key.as_deref(),
        )
    }

    /// The listener's settings.
    pub fn server_args(&self) -> ServerTlsArgs {
        ServerTlsArgs {
            tls_cert: self.tls_cert.clone(),
            tls_key: self.tls_key.clone(),
            tls_client_ca: self.tls_client_ca.clone(),
        }
    }

    /// The listener's files: `None` without a certificate, an error for a half-given pair.
    pub fn server_files(&self) -> Result<Option<ServerTlsFiles>, TlsError> {
        self.server_args().files()
    }

    /// The listener's TLS, files read: `None` without a certificate.
    pub fn server(&self) -> Result<Option<Arc<ServerTls>>, TlsError> {
        self.server_args().load()
    }
}

/// The TLS flags and config keys of a service that only serves (`tls_cert`, `tls_key`,
/// `tls_client_ca`), flattened like [`TlsArgs`].
#[derive(
    Debug, Clone, Default, PartialEq, Eq, clap::Args, serde::Serialize, serde::Deserialize,
)]
#[serde(default)]
pub struct ServerTlsArgs {
    /// PEM certificate: with --tls-key, serve HTTPS (TLS 1.3) only; SIGHUP reloads it.
    #[arg(long, value_name = "FILE")]
    pub tls_cert: Option<PathBuf>,
    /// The key of --tls-cert (PEM).
    #[arg(long, value_name = "FILE")]
    pub tls_key: Option<PathBuf>,
    /// Require client certificates signed by this CA (principal: the subject CN).
    #[arg(long, value_name = "FILE")]
    pub tls_client_ca: Option<PathBuf>,
}

impl ServerTlsArgs {
    /// The files: `None` without a certificate, an error for a half-given pair.
    pub fn files(&self) -> Result<Option<ServerTlsFiles>, TlsError> {
        ServerTlsFiles::from_settings(
            self.tls_cert.as_deref(),
            self.tls_key.as_deref(),
            self.tls_client_ca.as_deref(),
        )
    }

    /// The TLS, files read: `None` without a certificate.
    pub fn load(&self) -> Result<Option<Arc<ServerTls>>, TlsError> {
        self.files()?.map(ServerTls::load).transpose()
    }
}

/// A client's TLS configuration.
pub fn client_config(files: &ClientTlsFiles) -> Result<Arc<rustls::ClientConfig>, TlsError> {
    install_crypto_provider();
    let builder = rustls::ClientConfig::builder_with_protocol_versions(&[&rustls::version::TLS13])
        .with_root_certificates(roots("CA", &files.ca)?);
    let config = match (&files.cert, &files.key) {
        (Some(cert), Some(key)) => builder
            .with_client_auth_cert(read_certs("certificate", cert)?, read_key(key)?)
            .map_err(|e| TlsError::Config(format!("{}: {e}", cert.display())))?,
        _ => builder.with_no_client_auth(),
    };
    Ok(Arc::new(config))
}

/// The name a client checks the server's certificate against: the host of `host:port`
/// (an IP address or a DNS name; `[v6]:port` too).
pub fn server_name(addr: &str) -> Result<ServerName<'static>, TlsError> {
    let host = match addr.rsplit_once(':') {
        Some((host, port)) if port.parse::<u16>().is_ok() => host,
        _ => addr,
    };
    let host = host.trim_start_matches('[').trim_end_matches(']');
    ServerName::try_from(host.to_owned())
        .map_err(|_| TlsError::ServerName { addr: addr.to_owned() })
}

/// Why a certificate names no principal.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum PrincipalError {
    #[error("the certificate does not parse: {0}")]
    Unparsable(String),
    #[error("the certificate's subject has no common name (CN)")]
    NoCommonName,
    #[error("the certificate's subject has {0} common names; a principal needs exactly one")]
    SeveralCommonNames(usize),
    #[error("the certificate's common name is not UTF-8 text")]
    NotText,
    #[error("the certificate's common name is empty or has control characters")]
    Invalid,
}

/// The principal a certificate (DER) names: its subject's common name, exactly one, UTF-8,
/// not empty, without control characters.
pub fn principal(cert: &[u8]) -> Result<String, PrincipalError> {
    let (_, parsed) = x509_parser::parse_x509_certificate(cert)
        .map_err(|e| PrincipalError::Unparsable(e.to_string()))?;
    let names: Vec<_> = parsed.subject().iter_common_name().collect();
    let name = match names.as_slice() {
        [] => return Err(PrincipalError::NoCommonName),
        [one] => one,
        many => return Err(PrincipalError::SeveralCommonNames(many.len())),
    };
    let text = name.as_str().map_err(|_| PrincipalError::NotText)?;
    if text.is_empty() || text.chars().any(char::is_control) {
        return Err(PrincipalError::Invalid);
    }
    Ok(text.to_owned())
}

/// The principal of a TLS connection from its peer's certificates: [`ANONYMOUS`] without one.
pub fn peer_principal(
    certificates: Option<&[CertificateDer<'_>]>,
) -> Result<String, PrincipalError> {
    match certificates.and_then(<[_]>::first) {
        Some(cert) => principal(cert),
        None => Ok(ANONYMOUS.to_owned()),
    }
}

/// A connection that is plaintext or TLS: `T` is tokio-rustls's client or server stream.
pub enum MaybeTls<T> {
    Plain(tokio::net::TcpStream),
    Tls(Box<T>),
}

/// A client's connection to a server.
pub type ClientStream = MaybeTls<tokio_rustls::client::TlsStream<tokio::net::TcpStream>>;
/// A server's connection from a client.
pub type ServerStream = MaybeTls<tokio_rustls::server::TlsStream<tokio::net::TcpStream>>;

impl ClientStream {
    /// Connects to `addr`, with TLS when `tls` is given (checking the server's certificate
    /// against the host of `addr`). Nagle is off: requests are framed by the caller.
    pub async fn connect(
        addr: &str,
        tls: Option<&Arc<rustls::ClientConfig>>,
    ) -> std::io::Result<ClientStream> {
        let stream = tokio::net::TcpStream::connect(addr).await?;
        let _ = stream.set_nodelay(true);
        let Some(config) = tls else { return Ok(MaybeTls::Plain(stream)) };
        let name = server_name(addr).map_err(std::io::Error::other)?;
        let connector = tokio_rustls::TlsConnector::from(Arc::clone(config));
        let tls = connector
            .connect(name, stream)
            .await
            .map_err(|e| std::io::Error::new(e.kind(), format!("TLS handshake failed: {e}")))?;
        Ok(MaybeTls::Tls(Box::new(tls)))
    }
}

impl ServerStream {
    /// The principal of the connection: its client certificate's, or [`ANONYMOUS`] without
    /// one (and over plaintext).
    pub fn principal(&self) -> Result<String, PrincipalError> {
        match self {
            MaybeTls::Plain(_) => Ok(ANONYMOUS.to_owned()),
            MaybeTls::Tls(tls) => peer_principal(tls.get_ref().1.peer_certificates()),
        }
    }
}

/// How long a client has to complete the TLS handshake.
pub const HANDSHAKE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// Why a server's TLS handshake failed.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum HandshakeError {
    #[error("not a TLS client (plaintext on a TLS port?): {0}")]
    Plaintext(std::io::Error),
    #[error("{0}")]
    Refused(std::io::Error),
    #[error("no handshake within {HANDSHAKE_TIMEOUT:?}")]
    TimedOut,
    /// The peer went away during the handshake (a TCP or TLS health check, a client that gave
    /// up): nothing to act on, so servers log it at debug level and do not count it.
    #[error("the peer closed the connection during the handshake: {0}")]
    Closed(std::io::Error),
}

impl HandshakeError {
    /// Whether it is worth an operator's attention (see [`HandshakeError::Closed`]).
    pub fn is_failure(&self) -> bool {
        !matches!(self, HandshakeError::Closed(_))
    }
}

/// The server's side of a TLS handshake on `stream`, within [`HANDSHAKE_TIMEOUT`].
pub async fn accept(
    stream: tokio::net::TcpStream,
    tls: &ServerTls,
) -> Result<ServerStream, HandshakeError> {
    let acceptor = tokio_rustls::TlsAcceptor::from(tls.config());
    match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(stream)).await {
        Ok(Ok(accepted)) => Ok(MaybeTls::Tls(Box::new(accepted))),
        Ok(Err(e)) => {
            let plaintext = e
                .get_ref()
                .and_then(|inner| inner.downcast_ref::<rustls::Error>())
                .is_some_and(|e| matches!(e, rustls::Error::InvalidMessage(_)));
            use std::io::ErrorKind;
            let closed = matches!(
                e.kind(),
                ErrorKind::UnexpectedEof | ErrorKind::ConnectionReset | ErrorKind::BrokenPipe
            );
            Err(if plaintext {
                HandshakeError::Plaintext(e)
            } else if closed {
                HandshakeError::Closed(e)
            } else {
                HandshakeError::Refused(e)
            })
        }
        Err(_) => Err(HandshakeError::TimedOut),
    }
}

impl<T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin> tokio::io::AsyncRead for MaybeTls<T> {
    fn poll_read(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        match self.get_mut() {
            MaybeTls::Plain(s) => std::pin::Pin::new(s).poll_read(cx, buf),
            MaybeTls::Tls(s) => std::pin::Pin::new(s.as_mut()).poll_read(cx, buf),
        }
    }
}

impl<T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin> tokio::io::AsyncWrite
    for MaybeTls<T>
{
    fn poll_write(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        match self.get_mut() {
            MaybeTls::Plain(s) => std::pin::Pin::new(s).poll_write(cx, buf),
            MaybeTls::Tls(s) => std::pin::Pin::new(s.as_mut()).poll_write(cx, buf),
        }
    }

    fn poll_flush(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        match self.get_mut() {
            MaybeTls::Plain(s) => std::pin::Pin::new(s).poll_flush(cx),
            MaybeTls::Tls(s) => std::pin::Pin::new(s.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        match self.get_mut() {
            MaybeTls::Plain(s) => std::pin::Pin::new(s).poll_shutdown(cx),
            MaybeTls::Tls(s) => std::pin::Pin::new(s.as_mut()).poll_shutdown(cx),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_provider_is_installed_once() {
        install_crypto_provider();
        install_crypto_provider();
        assert!(rustls::crypto::CryptoProvider::get_default().is_some());
    }

    fn cert_with(subject: rcgen::DistinguishedName) -> Vec<u8> {
        let key = rcgen::KeyPair::generate().unwrap();
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        params.distinguished_name = subject;
        params.self_signed(&key).unwrap().der().to_vec()
    }

    #[test]
    fn the_principal_is_the_one_common_name() {
        let mut dn = rcgen::DistinguishedName::new();
        dn.push(rcgen::DnType::CommonName, "agent-1");
        dn.push(rcgen::DnType::OrganizationName, "Tributary");
        assert_eq!(principal(&cert_with(dn)).unwrap(), "agent-1");
        let mut wild = rcgen::DistinguishedName::new();
        wild.push(rcgen::DnType::CommonName, "*");
        assert_eq!(principal(&cert_with(wild)).unwrap(), "*", "a name, not a pattern");
    }

    #[test]
    fn hostile_subjects_name_no_principal() {
        assert_eq!(
            principal(&cert_with(rcgen::DistinguishedName::new())),
            Err(PrincipalError::NoCommonName)
        );
        let mut empty = rcgen::DistinguishedName::new();
        empty.push(rcgen::DnType::CommonName, "");
        assert_eq!(principal(&cert_with(empty)), Err(PrincipalError::Invalid));
        let mut control = rcgen::DistinguishedName::new();
        control.push(rcgen::DnType::CommonName, "agent\n1");
        assert_eq!(principal(&cert_with(control)), Err(PrincipalError::Invalid));
        // A UTF8String common name whose bytes are not UTF-8 (patched in the DER: the
        // signature no longer matters to the parser).
        let mut named = rcgen::DistinguishedName::new();
        named.push(rcgen::DnType::CommonName, "zq");
        let mut der = cert_with(named);
        // Issuer and subject alike (the certificate is its own issuer).
        while let Some(at) = der.windows(4).position(|w| w == [0x0c, 0x02, b'z', b'q']) {
            der[at + 2..at + 4].copy_from_slice(&[0xff, 0xfe]);
        }
        assert_eq!(principal(&der), Err(PrincipalError::NotText));
        assert!(matches!(principal(b"not a certificate"), Err(PrincipalError::Unparsable(_))));
        assert!(matches!(principal(&[]), Err(PrincipalError::Unparsable(_))));
        assert_eq!(peer_principal(None).unwrap(), ANONYMOUS);
    }

    #[test]
    fn server_names_come_from_the_host() {
        assert!(server_name("127.0.0.1:6667").is_ok());
        assert!(server_name("localhost:6667").is_ok());
        assert!(server_name("[::1]:6667").is_ok());
        assert!(server_name("bad host:1").is_err());
    }

    #[test]
    fn half_given_settings_are_refused() {
        let p = Path::new("x.pem");
        assert!(ServerTlsFiles::from_settings(None, None, None).unwrap().is_none());
        assert!(ServerTlsFiles::from_settings(Some(p), None, None).is_err());
        assert!(ServerTlsFiles::from_settings(None, None, Some(p)).is_err());
        assert!(ClientTlsFiles::from_settings(None, Some(p), Some(p)).is_err());
        assert!(ClientTlsFiles::from_settings(Some(p), Some(p), None).is_err());
        assert!(ClientTlsFiles::from_settings(Some(p), None, None).unwrap().is_some());
        // A service's certificate without a CA is its listener's only: its clients stay plain.
        assert!(client_from_settings(None, Some(p), Some(p)).unwrap().is_none());
    }

    #[test]
    fn the_args_of_both_roles_share_one_certificate() {
        let tls = TlsArgs {
            tls_cert: Some("c.pem".into()),
            tls_key: Some("k.pem".into()),
            ..TlsArgs::default()
        };
        assert!(tls.client().unwrap().is_none(), "no CA: the listener's certificate only");
        assert!(tls.client_files().is_err(), "strictly, a certificate needs a CA");
        let files = tls.server_files().unwrap().unwrap();
        assert_eq!((files.cert.to_str(), files.client_ca.as_deref()), (Some("c.pem"), None));
        assert_eq!(tls.server_args().files().unwrap(), Some(files));
        let half = ServerTlsArgs { tls_cert: Some("c.pem".into()), ..ServerTlsArgs::default() };
        assert!(matches!(half.files(), Err(TlsError::Incomplete { key: "tls_cert", .. })));
        assert!(ServerTlsArgs::default().load().unwrap().is_none());
    }
}
