//! The process's TLS crypto provider. The workspace builds one provider, rustls's `ring`
//! (reqwest's default, aws-lc-rs, is a large C build), and rustls needs it installed before
//! the first TLS config is made: every constructor of an HTTP client (the registry client,
//! the loader's S3 store, a test's client) calls [`install_crypto_provider`] first.

use std::sync::Once;

/// Installs rustls's `ring` provider as the process default, once; later calls do nothing.
pub fn install_crypto_provider() {
    static INSTALL: Once = Once::new();
    INSTALL.call_once(|| {
        // Fails only if another provider was installed first, which then serves as well.
        let _ = rustls::crypto::ring::default_provider().install_default();
    });
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_provider_is_installed_once() {
        super::install_crypto_provider();
        super::install_crypto_provider();
        assert!(rustls::crypto::CryptoProvider::get_default().is_some());
    }
}
