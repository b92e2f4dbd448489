//! The rustls configuration of a TLS virtual service: TLS 1.3 and 1.2 on the ring provider,
//! the certificate chosen by SNI, ALPN `http/1.1`, and session resumption.
//!
//! Resumption (session IDs and tickets, TLS 1.2 and 1.3) belongs to the process, not to one
//! configuration: the ticket keys and the session cache are made once and given to every
//! generation's configuration, so that a reload (new certificates, say) does not force every
//! returning client into a full handshake.

use super::certificates::{Certificate, SniResolver};
use rustls::server::{
    ProducesTickets, ServerConfig, ServerSessionMemoryCache, StoresServerSessions,
};
use std::sync::Arc;

/// Sessions remembered for resumption by ID (TLS 1.2 clients without tickets); HAProxy's
/// `tune.ssl.cachesize` default.
const SESSION_CACHE_ENTRIES: usize = 20_000;

/// What resumption needs, made once per process and shared by every configuration.
#[derive(Clone, Debug)]
pub struct Resumption {
    /// Ticket keys, rotated by rustls every 6 hours (the previous key still decrypts).
    ticketer: Option<Arc<dyn ProducesTickets>>,
    cache: Arc<dyn StoresServerSessions>,
}

impl Resumption {
    pub fn new() -> Resumption {
        let ticketer = match rustls::crypto::ring::Ticketer::new() {
            Ok(ticketer) => Some(ticketer),
            Err(e) => {
                // Only if the system's random source fails; the session cache still works.
                tracing::warn!("TLS session tickets are off: {e}");
                None
            }
        };
        Resumption {
            ticketer,
            cache: ServerSessionMemoryCache::new(SESSION_CACHE_ENTRIES),
        }
    }
}

impl Default for Resumption {
    fn default() -> Self {
        Resumption::new()
    }
}

/// The configuration for a service with these certificates (at least one).
pub fn server_config(
    certificates: &[Certificate],
    resumption: &Resumption,
) -> Result<Arc<ServerConfig>, rustls::Error> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = ServerConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])?
        .with_no_client_auth()
        .with_cert_resolver(Arc::new(SniResolver::new(certificates)));
    // HTTP/1.x only: a client that offers ALPN without either is refused in the handshake
    // (no_application_protocol), rather than speaking HTTP/2 to an HTTP/1.1 switch.
    config.alpn_protocols = vec![b"http/1.1".to_vec(), b"http/1.0".to_vec()];
    config.session_storage = Arc::clone(&resumption.cache);
    if let Some(ticketer) = &resumption.ticketer {
        config.ticketer = Arc::clone(ticketer);
    }
    Ok(Arc::new(config))
}
