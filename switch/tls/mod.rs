//! TLS over the switch's own sockets, for both ends of an exchange: [`layer`] drives a rustls
//! connection with the socket's readiness, [`stream`] joins it to the socket. The ends' own
//! parts are elsewhere: edge/tls/ terminates clients' TLS (certificates, the server
//! handshake), upstream/tls/ speaks TLS to servers (verification, the client handshake).

pub mod layer;
pub mod stream;
