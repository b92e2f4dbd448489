//! The client side of a TLS handshake with a server, on a connection just opened: driven by
//! the socket's readiness and bounded by the time left of the connect, before any byte of a
//! request is sent.

use super::PoolTls;
use crate::socket::Socket;
use crate::stream::{wait, Then, TimeLimit};
use crate::tls::layer::{push, SocketReader, TlsLayer};
use crate::tls::stream::ServerStream;
use rustls::pki_types::ServerName;
use rustls::ClientConnection;
use std::io;

/// Why a handshake with a server did not complete.
#[derive(Debug)]
pub(crate) enum HandshakeFailure {
    /// TLS refused: the certificate did not verify (unknown issuer, wrong name, expired), no
    /// common version or cipher, an alert from the server (it wanted a client certificate).
    Refused(rustls::Error),
    /// The connection closed, broke or ran out of time.
    Broken(io::Error),
}

impl std::fmt::Display for HandshakeFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            HandshakeFailure::Refused(e) => write!(f, "TLS handshake refused: {e}"),
            HandshakeFailure::Broken(e) => write!(f, "TLS handshake: {e}"),
        }
    }
}

/// Completes a handshake as `name` on `socket` within `limit`; the stream then carries
/// plaintext over it.
pub(crate) async fn connect(
    socket: Socket,
    tls: &PoolTls,
    name: ServerName<'static>,
    limit: TimeLimit,
) -> Result<ServerStream, HandshakeFailure> {
    let config = std::sync::Arc::clone(tls.client());
    let mut connection = ClientConnection::new(config, name).map_err(HandshakeFailure::Refused)?;
    let broken = HandshakeFailure::Broken;
    loop {
        match push(&mut connection, &socket, Then::Push) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                wait(socket.writable(), limit).await.map_err(broken)?;
                continue;
            }
            Err(e) => return Err(broken(e)),
        }
        if !connection.is_handshaking() {
            break;
        }
        match connection.read_tls(&mut SocketReader(&socket)) {
            Ok(0) => return Err(broken(closed_in_handshake())),
            Ok(_) => {
                if let Err(e) = connection.process_new_packets() {
                    // The alert rustls queued (a bad certificate) goes if the socket takes it.
                    let _ = push(&mut connection, &socket, Then::Push);
                    return Err(HandshakeFailure::Refused(e));
                }
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                wait(socket.readable(), limit).await.map_err(broken)?;
            }
            Err(e) => return Err(broken(e)),
        }
    }
    let mut stream = ServerStream::plain(socket);
    stream.start_tls(TlsLayer::new(connection));
    Ok(stream)
}

fn closed_in_handshake() -> io::Error {
    io::Error::new(
        io::ErrorKind::UnexpectedEof,
        "the server closed the connection in the handshake",
    )
}
