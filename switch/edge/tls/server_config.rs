//! The rustls configuration of a TLS virtual service: TLS 1.3 and 1.2 on the ring provider,
//! the certificate chosen by SNI, ALPN `h2` (when the service speaks HTTP/2) and `http/1.1`,
//! and session resumption.
//!
//! Resumption (session IDs and tickets, TLS 1.2 and 1.3) belongs to a virtual service, not to one
//! configuration: its ticket keys and session cache are made once per service name and given to
//! every generation's configuration of that service, so that a reload (new certificates, say)
//! does not force every returning client into a full handshake. Never shared between services:
//! rustls resumes a session wherever its server name matches, so a client sent (by an attacker
//! on the path) to another service's port would resume there without seeing that service's
//! certificate, and its requests would reach that service's pools.

use super::certificates::{Certificate, SniResolver};
use rustls::server::{
    ProducesTickets, ServerConfig, ServerSessionMemoryCache, StoresServerSessions,
};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// Sessions remembered for resumption by ID (TLS 1.2 clients without tickets); HAProxy's
/// `tune.ssl.cachesize` default.
const SESSION_CACHE_ENTRIES: usize = 20_000;

/// What resumption needs, made once per service and shared by its configurations.
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

/// The resumption state of each service, by name; clones share it.
#[derive(Clone, Debug, Default)]
pub struct ResumptionByService(Arc<Mutex<HashMap<String, Resumption>>>);

impl ResumptionByService {
    /// The state of the service named `service`, made at its first use.
    pub fn of(&self, service: &str) -> Resumption {
        let mut map = self
            .0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        map.entry(service.to_string()).or_default().clone()
    }
}

/// The configuration for a service with these certificates (at least one).
pub fn server_config(
    certificates: &[Certificate],
    resumption: &Resumption,
    http2: bool,
) -> Result<Arc<ServerConfig>, rustls::Error> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = ServerConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])?
        .with_no_client_auth()
        .with_cert_resolver(Arc::new(SniResolver::new(certificates)));
    // `h2` first when the service speaks it (the client's order does not matter: rustls picks
    // the server's first protocol the client offers). A client that offers ALPN without any
    // of them is refused in the handshake (no_application_protocol).
    config.alpn_protocols = vec![b"http/1.1".to_vec(), b"http/1.0".to_vec()];
    if http2 {
        config.alpn_protocols.insert(0, b"h2".to_vec());
    }
    config.session_storage = Arc::clone(&resumption.cache);
    if let Some(ticketer) = &resumption.ticketer {
        config.ticketer = Arc::clone(ticketer);
    }
    Ok(Arc::new(config))
}
