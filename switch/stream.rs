//! Socket reads and writes driven by tokio readiness, each wait bounded by a timeout from the
//! task's timer slot (timeouts.rs). Every task of the switch that does socket I/O runs with a
//! slot: client sessions, the busy refusals, the demo servers.
//!
//! The switch works on `&Socket` (readiness + non-blocking system calls, see socket.rs) instead
//! of tokio's `AsyncRead`/`AsyncWrite`, so one task can read a client and write its server
//! concurrently without splitting the streams, and the splice path uses the same readiness as
//! the copy path.

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

/// A time limit for one step of an exchange.
#[derive(Clone, Copy, Debug)]
pub enum Limit {
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
    limit: Limit,
) -> io::Result<T> {
    if let Limit::Never = limit {
        return ready.await;
    }
    // Timeouts come from the task's timer slot (see timeouts.rs); every task of the switch
    // that does I/O has one, and one without would fall back to a tokio timer.
    let Ok(slot) = SESSION_TIMER.try_with(Arc::clone) else {
        return match limit {
            Limit::Idle(d) => tokio::time::timeout(d, ready).await,
            Limit::Until(t) => tokio::time::timeout_at(t, ready).await,
            Limit::Never => Ok(ready.await),
        }
        .unwrap_or_else(|_| Err(timed_out()));
    };
    let deadline = match limit {
        Limit::Idle(d) => slot.deadline_after(d),
        Limit::Until(t) => slot.deadline_at(t),
        Limit::Never => return ready.await,
    };
    tokio::select! {
        biased;
        result = ready => result,
        () = slot.expiry(deadline) => Err(timed_out()),
    }
}

/// Reads once into the spare room of `buf`; `Ok(0)` is end of stream (or a full buffer).
pub async fn read_some(stream: &Socket, buf: &mut IoBuf, limit: Limit) -> io::Result<usize> {
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

    fn flags(self) -> SendFlags {
        match self {
            Then::Push => SendFlags::NOSIGNAL,
            Then::More => SendFlags::NOSIGNAL | SendFlags::MORE,
        }
    }
}

/// Writes all of `bytes` and pushes them out.
pub async fn write_all(stream: &Socket, bytes: &[u8], limit: Limit) -> io::Result<()> {
    send_all(stream, bytes, Then::Push, limit).await
}

/// Writes all of `bytes`.
pub async fn send_all(
    stream: &Socket,
    mut bytes: &[u8],
    then: Then,
    limit: Limit,
) -> io::Result<()> {
    while !bytes.is_empty() {
        let sent = stream.try_io(Interest::WRITABLE, |fd| {
            rustix::net::send(fd, bytes, then.flags()).map_err(io::Error::from)
        });
        match sent {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(n) => bytes = &bytes[n..],
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                wait(stream.writable(), limit).await?;
            }
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Writes `first` then `second` with as few system calls as possible (one sendmsg when the
/// socket takes it all).
pub async fn write_both(
    stream: &Socket,
    first: &[u8],
    second: &[u8],
    then: Then,
    limit: Limit,
) -> io::Result<()> {
    if second.is_empty() {
        return send_all(stream, first, then, limit).await;
    }
    let mut written = 0usize;
    while written < first.len() {
        let parts = [IoSlice::new(&first[written..]), IoSlice::new(second)];
        let sent = stream.try_io(Interest::WRITABLE, |fd| {
            rustix::net::sendmsg(
                fd,
                &parts,
                &mut SendAncillaryBuffer::default(),
                then.flags(),
            )
            .map_err(io::Error::from)
        });
        match sent {
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
    }
    Ok(())
}
