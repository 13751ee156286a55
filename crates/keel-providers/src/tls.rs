//! The one TLS set-up of Keel's outgoing HTTPS connections: model providers, MCP servers over
//! HTTP and `keel chat` all build their client from [`client_builder`].
//!
//! A server certificate is trusted when it chains to a root in the operating system's store
//! (read through `rustls-platform-verifier`, so a company CA installed there works) or to one
//! of the Mozilla roots bundled at build time (`webpki-root-certs`), the fallback for machines
//! whose store is empty or missing, such as slim containers.
//!
//! The cryptography comes from the process-wide rustls provider, which the program installs
//! once before building a client (the `keel` binary does so first thing in `main`). Without
//! one, [`client_builder`] reports an error instead of panicking later in `build`.

use rustls::crypto::CryptoProvider;

/// Why no TLS-capable client builder could be made.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TlsError {
    #[error(
        "no rustls crypto provider is installed: call \
         rustls::crypto::ring::default_provider().install_default() before building HTTP clients"
    )]
    NoCryptoProvider,
    #[error("a bundled root certificate was refused: {0}")]
    BundledRoot(String),
}

/// A [`reqwest::ClientBuilder`] that trusts the OS store plus the bundled roots.
pub fn client_builder() -> Result<reqwest::ClientBuilder, TlsError> {
    if CryptoProvider::get_default().is_none() {
        return Err(TlsError::NoCryptoProvider);
    }
    Ok(reqwest::Client::builder().tls_certs_merge(bundled_roots()?))
}

/// The Mozilla roots compiled into the binary.
fn bundled_roots() -> Result<Vec<reqwest::Certificate>, TlsError> {
    webpki_root_certs::TLS_SERVER_ROOT_CERTS
        .iter()
        .map(|der| {
            reqwest::Certificate::from_der(der.as_ref())
                .map_err(|e| TlsError::BundledRoot(e.to_string()))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_bundled_root_is_accepted() {
        let roots = bundled_roots().unwrap();
        assert!(roots.len() > 100, "only {} bundled roots", roots.len());
    }

    #[test]
    fn a_client_trusting_both_stores_builds_once_a_provider_is_installed() {
        let _ = rustls::crypto::ring::default_provider().install_default();
        client_builder().unwrap().build().unwrap();
    }
}
