//! The switch at the edge of a network: what comes before HTTP on a connection, in the order
//! it comes.
//!
//! - [`proxy_protocol`]: the real client's address from an L4 director in front of the switch
//!   (`proxy_protocol = true` on a virtual service), and passed on to servers (`send_proxy` on a
//!   pool);
//! - [`tls`]: TLS termination (`tls = [...]` on a virtual service);
//! - [`client_hello`]: the server name of a ClientHello, for `mode = "tls-passthrough"`, which
//!   routes TLS connections by it without decrypting them.
//!
//! A client connection as the session reads and writes it, with or without TLS over its
//! socket, is tls/stream.rs's `ClientStream`.

pub mod client_hello;
pub mod proxy_protocol;
pub mod tls;
