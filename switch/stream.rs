//! Socket reads and writes driven by tokio readiness, each wait bounded by a timeout from the
//! task's timer slot (timeouts.rs). Every task of the switch that does socket I/O runs with a
//! slot: client sessions, the busy refusals, the demo servers.
//!
//! The switch works on shared references to an [`Io`] (readiness + non-blocking calls: a TCP
//! [`Socket`], see socket.rs, or a client connection with TLS over one, tls/stream.rs)
//! instead of tokio's `AsyncRead`/`AsyncWrite`, so one task can read a client and write its
//! server concurrently without splitting the streams, and the splice path uses the same
//! readiness as the copy path. The helpers here are generic: a plain connection's code is the
//! socket's own calls, with no dispatch left after monomorphisation.

use crate::buffer::IoBuf;
use crate::socket::Socket;
use crate::timeouts::SESSION_TIMER;
use rustix::net::{SendAncillaryBuffer, SendFlags};
use std::future::Future;
use std::io::{self, IoSlice};
use std::sync::Arc;
use std::time::Duration;
use tokio::io::Interest;
use tokio::time::Instant;

/// A byte stream moved by readiness and non-blocking calls.
pub trait Io: Sync {
    /// Receives what is there into `spare`, without waiting: `Ok(0)` is the end of the
    /// stream, `WouldBlock` that nothing is there now (and readiness was cleared).
    fn try_recv(&self, spare: &mut [u8]) -> io::Result<usize>;

    /// Takes as much of `parts` as it can without waiting and returns how much; `WouldBlock`
    /// when it took nothing. What was taken may still wait in the stream ([`Io::try_flush`]).
    fn try_send(&self, parts: &[IoSlice<'_>], then: Then) -> io::Result<usize>;

    /// Pushes out what [`Io::try_send`] took but could not send yet (TLS records):
    /// `WouldBlock` while some remain. A socket keeps nothing back.
    fn try_flush(&self, then: Then) -> io::Result<()>;

    /// Waits until the stream may be readable.
    fn readable(&self) -> impl Future<Output = io::Result<()>> + Send + '_;

    /// Waits until the stream may be writable.
    fn writable(&self) -> impl Future<Output = io::Result<()>> + Send + '_;

    /// The TCP socket, when bytes cross it unchanged so that splice(2) may move them (not
    /// under TLS).
    fn spliceable(&self) -> Option<&Socket>;

    /// Ends this side's direction of the stream (under TLS, with a close_notify first).
    fn shutdown_write(&self) -> impl Future<Output = io::Result<()>> + Send + '_;
}

/// A time limit for one step of an exchange.
#[derive(Clone, Copy, Debug)]
pub enum TimeLimit {
    /// At most this long without progress.
    Idle(Duration),
    /// Before this instant, whatever the progress.
    Until(Instant),
    /// No limit here: a watchdog elsewhere decides (tunnels).
    Never,
}

pub fn timed_out() -> io::Error {
    io::Error::from(io::ErrorKind::TimedOut)
}

/// Waits for `ready` (socket readiness, a connect) within `limit`.
pub(crate) async fn wait<T>(
    ready: impl Future<Output = io::Result<T>>,
    limit: TimeLimit,
) -> io::Result<T> {
    if let TimeLimit::Never = limit {
        return ready.await;
    }
    // Timeouts come from the task's timer slot (see timeouts.rs); every task of the switch
    // that does I/O has one, and one without would fall back to a tokio timer.
    let Ok(slot) = SESSION_TIMER.try_with(Arc::clone) else {
        return match limit {
            TimeLimit::Idle(d) => tokio::time::timeout(d, ready).await,
            TimeLimit::Until(t) => tokio::time::timeout_at(t, ready).await,
            TimeLimit::Never => Ok(ready.await),
        }
        .unwrap_or_else(|_| Err(timed_out()));
    };
    let deadline = match limit {
        TimeLimit::Idle(d) => slot.deadline_after(d),
        TimeLimit::Until(t) => slot.deadline_at(t),
        TimeLimit::Never => return ready.await,
    };
    tokio::select! {
        biased;
        result = ready => result,
        () = slot.expiry(deadline) => Err(timed_out()),
    }
}

/// Reads once into the spare room of `buf`; `Ok(0)` is end of stream (or a full buffer).
pub async fn read_some(stream: &impl Io, buf: &mut IoBuf, limit: TimeLimit) -> io::Result<usize> {
    loop {
        let spare = buf.spare();
        if spare.is_empty() {
            return Ok(0);
        }
        match stream.try_recv(spare) {
            Ok(n) => {
                buf.fill(n);
                return Ok(n);
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
            Err(e) => return Err(e),
        }
        wait(stream.readable(), limit).await?;
    }
}

/// What follows a write: nothing for now (push the bytes out), or more of the same message
/// right away (MSG_MORE: let TCP fill full segments first), or the end of the connection (also
/// MSG_MORE: the shutdown that must follow at once sends the bytes with the FIN in the same
/// segment, so the peer gets one packet and one wake-up instead of two).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Then {
    Push,
    More,
}

impl Then {
    pub fn more_if(more: bool) -> Then {
        if more {
            Then::More
        } else {
            Then::Push
        }
    }

    pub(crate) fn flags(self) -> SendFlags {
        match self {
            Then::Push => SendFlags::NOSIGNAL,
            Then::More => SendFlags::NOSIGNAL | SendFlags::MORE,
        }
    }
}

/// Writes all of `bytes` and pushes them out.
pub async fn write_all(stream: &impl Io, bytes: &[u8], limit: TimeLimit) -> io::Result<()> {
    send_all(stream, bytes, Then::Push, limit).await
}

/// Writes all of `bytes`.
pub async fn send_all(
    stream: &impl Io,
    mut bytes: &[u8],
    then: Then,
    limit: TimeLimit,
) -> io::Result<()> {
    while !bytes.is_empty() {
        match stream.try_send(&[IoSlice::new(bytes)], then) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(n) => bytes = &bytes[n..],
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                wait(stream.writable(), limit).await?;
            }
            Err(e) => return Err(e),
        }
    }
    flush(stream, then, limit).await
}

/// Waits until what the stream took has left it (nothing to wait for on a socket).
async fn flush(stream: &impl Io, then: Then, limit: TimeLimit) -> io::Result<()> {
    loop {
        match stream.try_flush(then) {
            Ok(()) => return Ok(()),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                wait(stream.writable(), limit).await?;
            }
            Err(e) => return Err(e),
        }
    }
}

/// Writes every slice of `parts` in order and pushes them out, with as few system calls as the
/// stream allows (one sendmsg of up to 32 slices at a time).
pub async fn write_all_parts<'p>(
    stream: &impl Io,
    parts: impl Iterator<Item = &'p [u8]> + Clone,
    limit: TimeLimit,
) -> io::Result<()> {
    const MAX_SLICES: usize = 32;
    let total: usize = parts.clone().map(<[u8]>::len).sum();
    let mut sent = 0usize;
    while sent < total {
        let mut slices = [IoSlice::new(&[]); MAX_SLICES];
        let mut count = 0;
        let mut skip = sent;
        for part in parts.clone() {
            if skip >= part.len() {
                skip -= part.len();
                continue;
            }
            slices[count] = IoSlice::new(&part[skip..]);
            skip = 0;
            count += 1;
            if count == MAX_SLICES {
                break;
            }
        }
        match stream.try_send(&slices[..count], Then::Push) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(n) => sent += n,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                wait(stream.writable(), limit).await?;
            }
            Err(e) => return Err(e),
        }
    }
    flush(stream, Then::Push, limit).await
}

/// Writes `first` then `second` with as few system calls as possible (one sendmsg when the
/// socket takes it all).
pub async fn write_both(
    stream: &impl Io,
    first: &[u8],
    second: &[u8],
    then: Then,
    limit: TimeLimit,
) -> io::Result<()> {
    if second.is_empty() {
        return send_all(stream, first, then, limit).await;
    }
    let mut written = 0usize;
    while written < first.len() {
        let parts = [IoSlice::new(&first[written..]), IoSlice::new(second)];
        match stream.try_send(&parts, then) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(n) => written += n,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                wait(stream.writable(), limit).await?;
            }
            Err(e) => return Err(e),
        }
    }
    let rest = written - first.len();
    if rest < second.len() {
        send_all(stream, &second[rest..], then, limit).await?;
    } else {
        flush(stream, then, limit).await?;
    }
    Ok(())
}

/// A plain TCP socket: its own calls.
impl Io for Socket {
    fn try_recv(&self, spare: &mut [u8]) -> io::Result<usize> {
        Socket::try_recv(self, spare)
    }

    fn try_send(&self, parts: &[IoSlice<'_>], then: Then) -> io::Result<usize> {
        send_parts(self, parts, then)
    }

    fn try_flush(&self, _then: Then) -> io::Result<()> {
        Ok(())
    }

    fn readable(&self) -> impl Future<Output = io::Result<()>> + Send + '_ {
        self.ready(Interest::READABLE)
    }

    fn writable(&self) -> impl Future<Output = io::Result<()>> + Send + '_ {
        self.ready(Interest::WRITABLE)
    }

    fn spliceable(&self) -> Option<&Socket> {
        Some(self)
    }

    fn shutdown_write(&self) -> impl Future<Output = io::Result<()>> + Send + '_ {
        std::future::ready(
            rustix::net::shutdown(self, rustix::net::Shutdown::Write).map_err(io::Error::from),
        )
    }
}

/// One non-blocking send of `parts` on a socket: `send` for one part, `sendmsg` for more.
pub(crate) fn send_parts(socket: &Socket, parts: &[IoSlice<'_>], then: Then) -> io::Result<usize> {
    socket.try_io(Interest::WRITABLE, |fd| {
        let sent = match parts {
            [one] => rustix::net::send(fd, one, then.flags()),
            _ => rustix::net::sendmsg(fd, parts, &mut SendAncillaryBuffer::default(), then.flags()),
        };
        sent.map_err(io::Error::from)
    })
}
