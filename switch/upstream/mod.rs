//! The server side of an exchange, one implementation per protocol spoken to the servers
//! (exchange/server.rs says what each offers): [`h1`], HTTP/1.1 over a plain or TLS
//! connection. Beneath the protocols, a [`connection::ServerConnection`] is what is opened,
//! used and parked, and [`tls`] makes it TLS when the pool says so (`[pool.NAME.tls]`).
//! The client side's protocols are the front-ends in connection/.

pub mod connection;
pub(crate) mod h1;
pub mod h2;
pub mod tls;

/// A server connection picked for a request: an HTTP/1.1 one (new or reused), or a stream's
/// place on an HTTP/2 one.
pub(crate) enum ServerLink {
    H1(connection::ServerConnection),
    H2(h2::connections::Channel),
}
