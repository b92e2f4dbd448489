//! A rustls connection over a [`Socket`], driven like the socket itself: non-blocking calls
//! that answer `WouldBlock` when the socket would, so the session's readiness-driven code
//! (stream.rs) runs over TLS unchanged. The same layer serves both ends: a client's
//! connection, where the switch is the TLS server (edge/tls/), and a server's, where it is
//! the TLS client (upstream/tls/); the two differ only in rustls' side type ([`Side`]).
//!
//! Records are read into rustls and decrypted on the caller's read; plaintext written is
//! encrypted into rustls' send buffer (bounded at [`SEND_BUFFER_BYTES`]) and pushed to the
//! socket at once, the rest when the socket is writable again (`try_flush`). What reading
//! makes rustls say (an alert, a KeyUpdate's answer) is pushed at once too. The
//! connection sits behind a mutex because the session reads a peer while it writes it (an
//! upload beside a response) through shared references; only the session's own task ever
//! takes it, so it is never contended.

use crate::socket::Socket;
use crate::stream::{send_parts, Then};
use rustls::client::ClientConnectionData;
use rustls::server::ServerConnectionData;
use rustls::{ClientConnection, ConnectionCommon, ServerConnection, SideData};
use std::fmt::Debug;
use std::io::{self, IoSlice, Read, Write};
use std::ops::DerefMut;
use std::sync::{Mutex, MutexGuard};

/// The side of a rustls connection: [`ServerConnection`] toward clients, [`ClientConnection`]
/// toward servers. Both are a `ConnectionCommon` underneath, which is all the layer uses.
pub trait Side: DerefMut<Target = ConnectionCommon<Self::Data>> + Debug + Send {
    type Data: SideData;
}

impl Side for ServerConnection {
    type Data = ServerConnectionData;
}

impl Side for ClientConnection {
    type Data = ClientConnectionData;
}

/// Encrypted output a slow client may keep waiting in user space, beside the 16 KiB the relay
/// reads at a time: rustls' default (64 KiB) would let each slow reader hold four times what
/// a plain connection holds.
pub const SEND_BUFFER_BYTES: usize = 32 * 1024;

#[derive(Debug)]
pub struct TlsLayer<C: Side = ServerConnection> {
    connection: Mutex<Connection<C>>,
}

/// The rustls connection, and whether it failed (rustls' errors are sticky: a failed connection
/// only repeats its error).
#[derive(Debug)]
struct Connection<C> {
    rustls: C,
    failed: bool,
}

/// The socket as rustls reads it: non-blocking receives.
pub(crate) struct SocketReader<'a>(pub(crate) &'a Socket);

impl Read for SocketReader<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.0.try_recv(buf)
    }
}

/// The socket as rustls writes it: non-blocking sends, all records of a flush in one sendmsg
/// when they fit.
pub(crate) struct SocketWriter<'a> {
    pub(crate) socket: &'a Socket,
    pub(crate) then: Then,
}

impl Write for SocketWriter<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        send_parts(self.socket, &[IoSlice::new(buf)], self.then)
    }

    fn write_vectored(&mut self, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
        send_parts(self.socket, bufs, self.then)
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl<C: Side> TlsLayer<C> {
    /// A connection whose handshake is complete (edge/tls/handshake.rs,
    /// upstream/tls/handshake.rs).
    pub(crate) fn new(mut connection: C) -> TlsLayer<C> {
        connection.set_buffer_limit(Some(SEND_BUFFER_BYTES));
        TlsLayer {
            connection: Mutex::new(Connection {
                rustls: connection,
                failed: false,
            }),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Connection<C>> {
        self.connection
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Plaintext into `spare`, reading and decrypting records as needed. `Ok(0)`: the peer
    /// closed (with a close_notify, or without one: for HTTP, framing tells a cut message).
    pub fn try_recv(&self, socket: &Socket, spare: &mut [u8]) -> io::Result<usize> {
        if spare.is_empty() {
            return Ok(0);
        }
        let mut guard = self.lock();
        let Connection { rustls, failed } = &mut *guard;
        if *failed {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "TLS connection failed",
            ));
        }
        loop {
            match (**rustls).reader().read(spare) {
                Ok(n) => return Ok(n),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(0),
                Err(e) => return Err(e),
            }
            // No plaintext yet: the next records (WouldBlock when the socket has none).
            rustls.read_tls(&mut SocketReader(socket))?;
            let processed = rustls.process_new_packets();
            // What the records made rustls say (the alert of a refusal, the answer to a
            // KeyUpdate) goes now if the socket takes it; else with the next write.
            let _ = push(rustls, socket, Then::Push);
            if let Err(e) = processed {
                *failed = true;
                return Err(io::Error::new(io::ErrorKind::InvalidData, e));
            }
        }
    }

    /// Encrypts as much of `parts` as the send buffer takes and pushes it out; the bytes
    /// taken, or `WouldBlock` when none could be (the buffer is full of records the socket
    /// has not taken yet).
    pub fn try_send(
        &self,
        socket: &Socket,
        parts: &[IoSlice<'_>],
        then: Then,
    ) -> io::Result<usize> {
        let connection = &mut self.lock().rustls;
        // Twice at most: a buffer full of older records takes nothing until they are pushed.
        for _ in 0..2 {
            let taken = (**connection).writer().write_vectored(parts)?;
            match push(connection, socket, then) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock && taken > 0 => return Ok(taken),
                Err(e) => return Err(e),
            }
            if taken > 0 || parts.iter().all(|p| p.is_empty()) {
                return Ok(taken);
            }
        }
        Err(io::ErrorKind::WouldBlock.into())
    }

    /// Pushes out records still in the send buffer; `WouldBlock` while some remain.
    pub fn try_flush(&self, socket: &Socket, then: Then) -> io::Result<()> {
        push(&mut self.lock().rustls, socket, then)
    }

    /// Decrypted bytes wait to be read, or records that will say something (an error, the end):
    /// the socket's readiness may not fire for them again.
    pub fn has_buffered_input(&self) -> bool {
        let mut guard = self.lock();
        if guard.failed {
            // The next read says so at once.
            return true;
        }
        match guard.rustls.process_new_packets() {
            Ok(state) => state.plaintext_bytes_to_read() > 0 || state.peer_has_closed(),
            Err(_) => {
                guard.failed = true;
                true
            }
        }
    }

    /// The two ends agreed on HTTP/2 (ALPN `h2`).
    pub fn speaks_h2(&self) -> bool {
        self.lock().rustls.alpn_protocol() == Some(b"h2")
    }

    /// The handshake resumed an earlier session (a ticket or a session ID).
    pub fn resumed(&self) -> bool {
        self.lock().rustls.handshake_kind() == Some(rustls::HandshakeKind::Resumed)
    }

    /// Queues a close_notify: the peer learns that the stream is complete, not cut.
    pub fn close_notify(&self) {
        self.lock().rustls.send_close_notify();
    }
}

impl TlsLayer<ServerConnection> {
    /// The server name the client asked for (SNI), lower case.
    pub fn server_name(&self) -> Option<Box<str>> {
        self.lock().rustls.server_name().map(Box::from)
    }
}

/// Writes queued records to the socket until none are left or it would block.
pub(crate) fn push<C: Side>(connection: &mut C, socket: &Socket, then: Then) -> io::Result<()> {
    while connection.wants_write() {
        if connection.write_tls(&mut SocketWriter { socket, then })? == 0 {
            return Err(io::ErrorKind::WriteZero.into());
        }
    }
    Ok(())
}
