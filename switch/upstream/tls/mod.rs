//! TLS to a pool's servers (`[pool.NAME.tls]`): the rustls client configuration a pool's
//! connections share (roots, verification, client certificate, the session cache that resumes
//! handshakes), the name each server is asked for (SNI), and the handshake itself
//! ([`handshake`]), made before any byte of a request goes: a server whose certificate does
//! not verify never sees the request.
//!
//! Why rustls' `ClientConfig` is built here once per pool and kept (`Arc`): it holds the
//! session cache, so a new connection to a server resumes the last one's session (one round
//! trip and no certificate check) as HAProxy's `ssl` servers and nginx's
//! `proxy_ssl_session_reuse` do.

pub(crate) mod handshake;
mod verify;

use rustls::client::ResolvesClientCert;
use rustls::pki_types::{CertificateDer, ServerName};
use rustls::sign::CertifiedKey;
use rustls::{ClientConfig, RootCertStore, SignatureScheme};
use std::net::SocketAddr;
use std::sync::{Arc, OnceLock};

/// What a pool's `[pool.NAME.tls]` says, with what its files held: two equal settings make the
/// same connections (a reload that keeps them keeps the pool's connections).
#[derive(Clone, Debug)]
pub struct TlsSettings {
    /// The protocols offered by ALPN, by the pool's `protocol` (a server that speaks several on
    /// one port answers in one the switch speaks).
    pub alpn: &'static [&'static [u8]],
    /// The certificates of `ca`; `None`: the system's roots.
    pub ca: Option<Vec<CertificateDer<'static>>>,
    /// `false`: any certificate is taken (its signature of the handshake is still checked).
    pub verify: bool,
    /// The name asked for on every server (`sni`); `None`: each server's name as written.
    pub sni: Option<ServerName<'static>>,
    /// The client certificate and its key (`cert`, `key`), for servers that ask for one.
    pub client_certificate: Option<Arc<CertifiedKey>>,
}

impl PartialEq for TlsSettings {
    fn eq(&self, other: &TlsSettings) -> bool {
        // A key belongs to its certificate (checked when read): the chains decide.
        let chain = |c: &Option<Arc<CertifiedKey>>| c.as_ref().map(|key| key.cert.clone());
        self.alpn == other.alpn
            && self.ca == other.ca
            && self.verify == other.verify
            && self.sni == other.sni
            && chain(&self.client_certificate) == chain(&other.client_certificate)
    }
}

/// TLS to a pool's servers, ready for connections.
#[derive(Debug)]
pub struct PoolTls {
    settings: TlsSettings,
    client: Arc<ClientConfig>,
}

impl PartialEq for PoolTls {
    fn eq(&self, other: &PoolTls) -> bool {
        self.settings == other.settings
    }
}

impl PoolTls {
    /// The configuration for `settings`; `Err`: why none could be made (no usable root).
    pub fn new(settings: TlsSettings) -> Result<PoolTls, String> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder = ClientConfig::builder_with_provider(Arc::clone(&provider))
            .with_safe_default_protocol_versions()
            .map_err(|e| format!("TLS versions: {e}"))?;
        let builder = match (settings.verify, &settings.ca) {
            (false, _) => builder
                .dangerous()
                .with_custom_certificate_verifier(Arc::new(verify::AnyCertificate::new(provider))),
            (true, Some(ca)) => builder.with_root_certificates(roots_of(ca)?),
            (true, None) => builder.with_root_certificates(system_roots()?),
        };
        let mut client = match &settings.client_certificate {
            Some(key) => {
                builder.with_client_cert_resolver(Arc::new(ClientCertificate(Arc::clone(key))))
            }
            None => builder.with_no_client_auth(),
        };
        client.alpn_protocols = settings.alpn.iter().map(|p| p.to_vec()).collect();
        Ok(PoolTls {
            settings,
            client: Arc::new(client),
        })
    }

    /// The rustls configuration of the pool's connections (shared: it holds the session
    /// cache).
    pub fn client(&self) -> &Arc<ClientConfig> {
        &self.client
    }

    /// Whether connections are made without verifying the server (`verify = false`).
    pub fn verifies(&self) -> bool {
        self.settings.verify
    }

    /// The name a server is asked for and checked against: `sni`, else the server's name as
    /// written in `addr` (`host`), else its IP address (rustls sends no SNI for an address,
    /// and checks the certificate's IP names).
    pub fn server_name(&self, host: Option<&str>, addr: SocketAddr) -> ServerName<'static> {
        if let Some(sni) = &self.settings.sni {
            return sni.clone();
        }
        host.and_then(|h| ServerName::try_from(h.to_string()).ok())
            .unwrap_or_else(|| ServerName::IpAddress(addr.ip().into()))
    }
}

/// A root store of `ca`'s certificates; `Err` when none of them is usable.
fn roots_of(ca: &[CertificateDer<'static>]) -> Result<Arc<RootCertStore>, String> {
    let mut roots = RootCertStore::empty();
    let (added, _ignored) = roots.add_parsable_certificates(ca.iter().cloned());
    if added == 0 {
        return Err("no usable CA certificate (each was refused as a trust anchor)".into());
    }
    Ok(Arc::new(roots))
}

/// The system's roots (the OpenSSL bundle, or `SSL_CERT_FILE`/`SSL_CERT_DIR`), read once: a
/// pool without `ca` trusts what the machine trusts, as `curl` does.
fn system_roots() -> Result<Arc<RootCertStore>, String> {
    static ROOTS: OnceLock<Result<Arc<RootCertStore>, String>> = OnceLock::new();
    ROOTS
        .get_or_init(|| {
            let found = rustls_native_certs::load_native_certs();
            let mut roots = RootCertStore::empty();
            let (added, _) = roots.add_parsable_certificates(found.certs);
            if added == 0 {
                let why = found
                    .errors
                    .first()
                    .map_or_else(|| "none found".to_string(), |e| e.to_string());
                return Err(format!(
                    "no system root certificates ({why}): give the pool a `ca` file"
                ));
            }
            Ok(Arc::new(roots))
        })
        .clone()
}

/// The pool's client certificate, offered whenever a server asks for one (the server decides
/// whether it is enough).
#[derive(Debug)]
struct ClientCertificate(Arc<CertifiedKey>);

impl ResolvesClientCert for ClientCertificate {
    fn resolve(
        &self,
        _root_hint_subjects: &[&[u8]],
        _sigschemes: &[SignatureScheme],
    ) -> Option<Arc<CertifiedKey>> {
        Some(Arc::clone(&self.0))
    }

    fn has_certs(&self) -> bool {
        true
    }
}
