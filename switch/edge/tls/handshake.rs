//! The TLS handshake of a new client connection, before its first request: driven by the
//! socket's readiness, bounded by the connection's header deadline (a client that opens a
//! connection and stalls in the handshake is a slow client like any other).

use crate::buffer::IoBuf;
use crate::socket::Socket;
use crate::stream::{wait, Then, TimeLimit};
use crate::tls::layer::{push, SocketReader, TlsLayer};
use rustls::server::ServerConfig;
use rustls::ServerConnection;
use std::io;
use std::sync::Arc;
use tokio::time::Instant;

/// Why a handshake did not complete.
#[derive(Debug)]
pub enum HandshakeFailure {
    /// The client went away or the deadline passed: nothing to tell anyone.
    Abandoned(io::Error),
    /// The client's TLS was refused (an alert was sent if the socket took it): no common
    /// version or cipher, a bad message, an unknown ALPN protocol, plain HTTP on a TLS port.
    Refused(rustls::Error),
}

impl std::fmt::Display for HandshakeFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            HandshakeFailure::Abandoned(e) => write!(f, "handshake abandoned: {e}"),
            HandshakeFailure::Refused(e) => write!(f, "handshake refused: {e}"),
        }
    }
}

/// Completes the server side of a handshake on `socket`, starting with the bytes already in
/// `received` (read with a PROXY protocol header, or before it was known to be TLS).
pub async fn accept(
    socket: &Socket,
    config: Arc<ServerConfig>,
    received: &mut IoBuf,
    deadline: Instant,
) -> Result<TlsLayer, HandshakeFailure> {
    let mut connection = ServerConnection::new(config).map_err(HandshakeFailure::Refused)?;
    let mut early = received.filled();
    while !early.is_empty() {
        connection
            .read_tls(&mut early)
            .map_err(HandshakeFailure::Abandoned)?;
        process(&mut connection, socket)?;
    }
    received.consume(received.len());
    let limit = TimeLimit::Until(deadline);
    loop {
        match push(&mut connection, socket, Then::Push) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                wait(socket.ready(tokio::io::Interest::WRITABLE), limit)
                    .await
                    .map_err(HandshakeFailure::Abandoned)?;
                continue;
            }
            Err(e) => return Err(HandshakeFailure::Abandoned(e)),
        }
        if !connection.is_handshaking() {
            return Ok(TlsLayer::new(connection));
        }
        match connection.read_tls(&mut SocketReader(socket)) {
            Ok(0) => {
                return Err(HandshakeFailure::Abandoned(
                    io::ErrorKind::UnexpectedEof.into(),
                ))
            }
            Ok(_) => process(&mut connection, socket)?,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                wait(socket.readable(), limit)
                    .await
                    .map_err(HandshakeFailure::Abandoned)?;
            }
            Err(e) => return Err(HandshakeFailure::Abandoned(e)),
        }
    }
}

/// Handles the records read so far; on a refusal, sends the alert rustls queued if the socket
/// takes it at once.
fn process(connection: &mut ServerConnection, socket: &Socket) -> Result<(), HandshakeFailure> {
    connection.process_new_packets().map(drop).map_err(|e| {
        let _ = push(connection, socket, Then::Push);
        HandshakeFailure::Refused(e)
    })
}
