//! TLS termination for virtual services with `tls = [{ cert, key }, ...]`: rustls on the ring
//! provider (no OpenSSL), TLS 1.3 and 1.2, the certificate chosen by the ClientHello's server
//! name, ALPN `h2` (unless the service sets `http2 = false`) and `http/1.1`, session resumption
//! by tickets and by ID.
//!
//! - [`certificates`]: PEM files read at check time, the names of each certificate, the
//!   choice by SNI (exact, then wildcard, then the first);
//! - [`server_config`]: the rustls configuration of a generation, and each service's ticket
//!   keys and session cache, which outlive reloads;
//! - [`handshake`]: the server side of the handshake, before a connection's first request;
//!   the established connection is read and written with the socket's own readiness by
//!   tls/layer.rs (tls/stream.rs joins it to the socket for the session).
//!
//! Certificates come with the rule file: a reload reads them again, new connections get the
//! new ones, connections open already keep theirs.

pub mod certificates;
pub mod handshake;
pub mod server_config;

pub use certificates::Certificate;
pub use server_config::{server_config, Resumption, ResumptionByService};
