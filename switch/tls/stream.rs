//! A connection as the switch reads and writes it: its socket, and the TLS layer over it once
//! a handshake is done. [`ClientStream`] is a client's (TLS when its service has `tls`),
//! [`ServerStream`] a server's (TLS when its pool has `[pool.NAME.tls]`).
//!
//! The socket stays the one place readiness comes from: a TLS read or write is the socket's
//! non-blocking call beneath rustls, so the session's waits, timeouts and speculative first read
//! are the same with TLS or without. A plain connection pays one predictable branch per call.

use super::layer::{Side, TlsLayer};
use crate::socket::Socket;
use crate::stream::{wait, Io, Then, TimeLimit};
use std::future::Future;
use std::io::{self, IoSlice};
use std::net::SocketAddr;
use std::task::{Context, Poll};
use std::time::Duration;

/// A socket, with TLS over it or not.
#[derive(Debug)]
pub struct TlsStream<C: Side> {
    socket: Socket,
    /// Boxed: a rustls connection is large, and most connections of most services have none.
    tls: Option<Box<TlsLayer<C>>>,
}

/// A client's connection: the switch is the TLS server.
pub type ClientStream = TlsStream<rustls::ServerConnection>;

/// A server's connection: the switch is the TLS client.
pub type ServerStream = TlsStream<rustls::ClientConnection>;

/// How long closing waits for the socket to take a close_notify.
const CLOSE_NOTIFY_WAIT: Duration = Duration::from_secs(2);

impl<C: Side> TlsStream<C> {
    pub fn plain(socket: Socket) -> TlsStream<C> {
        TlsStream { socket, tls: None }
    }

    pub fn socket(&self) -> &Socket {
        &self.socket
    }

    /// From now on bytes cross `tls` (its handshake is complete).
    pub fn start_tls(&mut self, tls: TlsLayer<C>) {
        self.tls = Some(Box::new(tls));
    }

    pub fn tls(&self) -> Option<&TlsLayer<C>> {
        self.tls.as_deref()
    }

    pub fn is_registered(&self) -> bool {
        self.socket.is_registered()
    }

    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.socket.local_addr()
    }

    /// Polls for read readiness; at once when TLS holds decrypted bytes the socket will not
    /// announce again.
    pub fn poll_read_ready(&self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        if self
            .tls
            .as_ref()
            .is_some_and(|tls| tls.has_buffered_input())
        {
            return Poll::Ready(Ok(()));
        }
        self.socket.poll_read_ready(cx)
    }

    /// Polls for write readiness (the socket's: TLS keeps nothing back that the socket would
    /// not take).
    pub fn poll_write_ready(&self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.socket.poll_write_ready(cx)
    }

    /// [`Io::try_send`] in poll form, for tokio's `AsyncWrite` (the h2 crate's view of a
    /// stream: connection/h2/io.rs, upstream/h2/io.rs): `Pending` until the socket takes some.
    pub fn poll_send(
        &self,
        cx: &mut Context<'_>,
        parts: &[IoSlice<'_>],
        then: Then,
    ) -> Poll<io::Result<usize>> {
        loop {
            match self.try_send(parts, then) {
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    std::task::ready!(self.poll_write_ready(cx))?;
                }
                done => return Poll::Ready(done),
            }
        }
    }

    /// [`Io::try_flush`] in poll form: `Pending` while TLS records wait for the socket.
    pub fn poll_flush(&self, cx: &mut Context<'_>, then: Then) -> Poll<io::Result<()>> {
        loop {
            match self.try_flush(then) {
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    std::task::ready!(self.poll_write_ready(cx))?;
                }
                done => return Poll::Ready(done),
            }
        }
    }

    /// Ends this side's direction in poll form: a close_notify queued once (`queued` keeps
    /// that), everything flushed, then the socket's write side shut.
    pub fn poll_shutdown(&self, cx: &mut Context<'_>, queued: &mut bool) -> Poll<io::Result<()>> {
        if !*queued {
            if let Some(tls) = self.tls() {
                tls.close_notify();
            }
            *queued = true;
        }
        std::task::ready!(self.poll_flush(cx, Then::Push))?;
        let _ = rustix::net::shutdown(&self.socket, rustix::net::Shutdown::Write);
        Poll::Ready(Ok(()))
    }

    /// Whether unread bytes wait, asking the kernel (see `Socket::has_unread_bytes`).
    pub fn has_unread_bytes(&self) -> bool {
        self.tls
            .as_ref()
            .is_some_and(|tls| tls.has_buffered_input())
            || self.socket.has_unread_bytes()
    }
}

impl<C: Side> Io for TlsStream<C> {
    fn try_recv(&self, spare: &mut [u8]) -> io::Result<usize> {
        match &self.tls {
            None => self.socket.try_recv(spare),
            Some(tls) => tls.try_recv(&self.socket, spare),
        }
    }

    fn try_send(&self, parts: &[IoSlice<'_>], then: Then) -> io::Result<usize> {
        match &self.tls {
            None => Io::try_send(&self.socket, parts, then),
            Some(tls) => tls.try_send(&self.socket, parts, then),
        }
    }

    fn try_flush(&self, then: Then) -> io::Result<()> {
        match &self.tls {
            None => Ok(()),
            Some(tls) => tls.try_flush(&self.socket, then),
        }
    }

    /// The socket's readiness: a TLS read answers `WouldBlock` only once it has drained the
    /// socket and holds no plaintext, so the socket's next readiness is the next news.
    fn readable(&self) -> impl Future<Output = io::Result<()>> + Send + '_ {
        Io::readable(&self.socket)
    }

    fn writable(&self) -> impl Future<Output = io::Result<()>> + Send + '_ {
        Io::writable(&self.socket)
    }

    fn spliceable(&self) -> Option<&Socket> {
        match self.tls {
            None => Some(&self.socket),
            Some(_) => None,
        }
    }

    async fn shutdown_write(&self) -> io::Result<()> {
        if let Some(tls) = &self.tls {
            tls.close_notify();
            let limit = TimeLimit::Idle(CLOSE_NOTIFY_WAIT);
            loop {
                match tls.try_flush(&self.socket, Then::Push) {
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                        if wait(Io::writable(&self.socket), limit).await.is_err() {
                            break;
                        }
                    }
                    _ => break,
                }
            }
        }
        rustix::net::shutdown(&self.socket, rustix::net::Shutdown::Write).map_err(io::Error::from)
    }
}
