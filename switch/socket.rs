//! TCP sockets that join the reactor (epoll) only when they first have to wait.
//!
//! Why not tokio's `TcpStream` for accepted connections: it registers every socket with epoll
//! at once (`epoll_ctl` ADD, and DEL when it closes) and starts with no readiness, so even a
//! request that is already waiting in the socket is read only after a trip through the
//! reactor. Most clients send their request with the connection, so a new connection can
//! usually be served by reads and writes that never block, and one that asks to close
//! afterwards never needs epoll at all: HAProxy reads speculatively after accept for the same
//! reason. Measured with a new connection per request, together with the listeners'
//! TCP_DEFER_ACCEPT (without it most connections are accepted before their request arrives):
//! both epoll_ctl calls and a task wake-up per connection saved, about a fifth of the CPU
//! (BENCHMARKS.md, "What the profiles found").
//!
//! A [`Socket`] starts *detached*: its reads and writes are plain non-blocking system calls.
//! The first wait registers it, after which tokio's readiness drives it like a `TcpStream`.
//! Nothing is lost across that switch: epoll reports the socket's state at the moment it is
//! added, so bytes that arrived before the registration still wake the waiter.
//!
//! tokio offers no way to defer registration of its own socket types, and `AsyncFd` (the
//! public way to register a descriptor) needs an `unsafe` promise that the descriptor outlives
//! the registration; that promise is kept here, in one place, by field order.

use rustix::fd::OwnedFd;
use rustix::net::{AddressFamily, RecvFlags, SocketFlags, SocketType};
use std::io;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, RawFd};
use std::sync::OnceLock;
use std::task::{Context, Poll};
use tokio::io::unix::AsyncFd;
use tokio::io::Interest;

/// A new non-blocking TCP socket of `addr`'s family.
pub fn new_tcp_socket(addr: SocketAddr) -> io::Result<OwnedFd> {
    let family = if addr.is_ipv4() {
        AddressFamily::INET
    } else {
        AddressFamily::INET6
    };
    let flags = SocketFlags::NONBLOCK | SocketFlags::CLOEXEC;
    Ok(rustix::net::socket_with(
        family,
        SocketType::STREAM,
        flags,
        None,
    )?)
}

/// Sets TCP_DEFER_ACCEPT on a listening socket (see `listener::bind`). By hand because
/// rustix has no wrapper for this option.
pub fn set_defer_accept(listener: &OwnedFd, secs: u32) -> io::Result<()> {
    let value = libc::c_int::try_from(secs).unwrap_or(libc::c_int::MAX);
    // SAFETY: the descriptor is open (borrowed from `listener` for the call), and the option
    // value points to a live c_int whose exact size is passed as its length.
    let done = unsafe {
        libc::setsockopt(
            listener.as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_DEFER_ACCEPT,
            (&value as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if done == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// A connected TCP socket, detached until its first wait (see the module comment).
#[derive(Debug)]
pub struct Socket {
    /// The socket's registration with the reactor, once it had to wait. Declared before
    /// `stream` so that it is dropped (deregistered) before the descriptor is closed.
    reactor: OnceLock<AsyncFd<RawFd>>,
    stream: TcpStream,
}

impl Socket {
    /// Wraps a connected, non-blocking socket without registering it.
    pub fn detached(stream: TcpStream) -> Socket {
        Socket {
            reactor: OnceLock::new(),
            stream,
        }
    }

    /// Connects to `addr` with TCP_NODELAY set. A connect always waits, so the socket is
    /// registered when this returns.
    pub async fn connect(addr: SocketAddr) -> io::Result<Socket> {
        Socket::connect_with(new_tcp_socket(addr)?, addr).await
    }

    /// [`Socket::connect`] with a socket made by [`new_tcp_socket`] (the caller tells running
    /// out of descriptors from a failure to connect).
    pub async fn connect_with(fd: OwnedFd, addr: SocketAddr) -> io::Result<Socket> {
        rustix::net::sockopt::set_tcp_nodelay(&fd, true)?;
        match rustix::net::connect(&fd, &addr) {
            Ok(()) | Err(rustix::io::Errno::INPROGRESS) => {}
            Err(e) => return Err(e.into()),
        }
        let socket = Socket::detached(TcpStream::from(fd));
        // Writable once the handshake ended, either way; SO_ERROR says which way.
        socket.ready(Interest::WRITABLE).await?;
        rustix::net::sockopt::socket_error(&socket)?.map_err(io::Error::from)?;
        Ok(socket)
    }

    /// The registration, made on first use. Only the task that owns the socket uses it (the
    /// switch never shares a socket between tasks), so two registrations never race.
    fn reactor(&self) -> io::Result<&AsyncFd<RawFd>> {
        if let Some(registered) = self.reactor.get() {
            return Ok(registered);
        }
        let fd = self.stream.as_raw_fd();
        // SAFETY: `fd` is owned by `self.stream`, which nothing closes or replaces while
        // `self` lives, and the registration is a field of `self` dropped before `stream`
        // (field order), so the descriptor stays open and the same for the registration's
        // whole life, as `register_with_interest` requires. (Anything that ever takes the
        // stream out of a Socket must take the registration out first.)
        let registered =
            unsafe { AsyncFd::register_with_interest(fd, Interest::READABLE | Interest::WRITABLE) };
        match registered {
            Ok(registered) => Ok(self.reactor.get_or_init(|| registered)),
            Err(e) => match self.reactor.get() {
                Some(registered) => Ok(registered),
                None => Err(e.into_parts().1),
            },
        }
    }

    pub fn is_registered(&self) -> bool {
        self.reactor.get().is_some()
    }

    /// Runs one non-blocking operation. Registered: only if tokio last saw the socket ready
    /// for `interest`, and a `WouldBlock` from `op` clears that readiness. Detached: always.
    pub fn try_io<R>(
        &self,
        interest: Interest,
        op: impl FnOnce(BorrowedFd<'_>) -> io::Result<R>,
    ) -> io::Result<R> {
        match self.reactor.get() {
            Some(registered) => registered.try_io(interest, |_| op(self.stream.as_fd())),
            None => op(self.stream.as_fd()),
        }
    }

    /// Waits until the socket may be ready for `interest`, registering it first if needed.
    pub async fn ready(&self, interest: Interest) -> io::Result<()> {
        // The guard is dropped without clearing: readiness is cleared by `try_io` when an
        // operation finds nothing to do, as with tokio's own sockets.
        self.reactor()?.ready(interest).await.map(drop)
    }

    pub async fn readable(&self) -> io::Result<()> {
        self.ready(Interest::READABLE).await
    }

    pub async fn writable(&self) -> io::Result<()> {
        self.ready(Interest::WRITABLE).await
    }

    /// Polls for read readiness, registering the socket first if needed.
    pub fn poll_read_ready(&self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.reactor() {
            Ok(registered) => registered.poll_read_ready(cx).map_ok(drop),
            Err(e) => Poll::Ready(Err(e)),
        }
    }

    /// Polls for write readiness, registering the socket first if needed.
    pub fn poll_write_ready(&self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.reactor() {
            Ok(registered) => registered.poll_write_ready(cx).map_ok(drop),
            Err(e) => Poll::Ready(Err(e)),
        }
    }

    /// Whether input (data, end of stream or an error) may be waiting, without a system
    /// call: a registered socket's readiness as the reactor last saw it (it may lag the
    /// kernel). A detached socket has none, so it may always have input.
    pub fn input_pending(&self) -> bool {
        match self.reactor.get() {
            Some(registered) => {
                let mut cx = Context::from_waker(std::task::Waker::noop());
                registered.poll_read_ready(&mut cx).is_ready()
            }
            None => true,
        }
    }

    /// Whether unread bytes wait in the socket now, asking the kernel (one peek). Closing a
    /// socket with unread bytes resets the connection and discards what was not yet sent.
    pub fn has_unread_bytes(&self) -> bool {
        let mut byte = [0u8; 1];
        let flags = RecvFlags::PEEK | RecvFlags::DONTWAIT;
        matches!(rustix::net::recv(&self.stream, &mut byte, flags), Ok((n, _)) if n > 0)
    }

    /// Receives what the socket holds into `spare`, without waiting.
    ///
    /// A read that leaves room in `spare` proves the socket drained, so its readiness is
    /// cleared at once, as tokio's own AsyncRead does: the next read then waits for the next
    /// readiness event instead of spending a system call to learn EAGAIN. (Returning
    /// WouldBlock from the closure is how `try_io` clears readiness; it clears only if no newer
    /// event arrived since the read began, so no wake-up is lost.)
    pub fn try_recv(&self, spare: &mut [u8]) -> io::Result<usize> {
        let room = spare.len();
        let mut drained = None;
        let result = self.try_io(Interest::READABLE, |fd| {
            let (n, _) = rustix::net::recv(fd, &mut *spare, RecvFlags::empty())?;
            if n > 0 && n < room {
                drained = Some(n);
                return Err(io::ErrorKind::WouldBlock.into());
            }
            Ok(n)
        });
        match (result, drained) {
            (Err(e), Some(n)) if e.kind() == io::ErrorKind::WouldBlock => Ok(n),
            (result, _) => result,
        }
    }
}

impl Socket {
    /// The address this end of the connection is bound to.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.stream.local_addr()
    }
}

impl AsFd for Socket {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.stream.as_fd()
    }
}

/// A listening socket whose accepted connections start detached.
#[derive(Debug)]
pub struct Listener {
    listener: AsyncFd<TcpListener>,
}

impl AsFd for Listener {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.listener.get_ref().as_fd()
    }
}

impl Listener {
    /// Takes a bound, listening, non-blocking socket.
    pub fn new(listener: TcpListener) -> io::Result<Listener> {
        // SAFETY: the `AsyncFd` owns the listener, so its descriptor stays open and the same
        // for the registration's whole life.
        let listener = unsafe { AsyncFd::register_with_interest(listener, Interest::READABLE) }
            .map_err(|e| e.into_parts().1)?;
        Ok(Listener { listener })
    }

    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.listener.get_ref().local_addr()
    }

    /// The next connection, non-blocking and detached, with its peer's address.
    pub async fn accept(&self) -> io::Result<(Socket, SocketAddr)> {
        loop {
            let mut ready = self.listener.readable().await?;
            let accepted = ready.try_io(|listener| {
                rustix::net::acceptfrom_with(
                    listener.get_ref(),
                    SocketFlags::NONBLOCK | SocketFlags::CLOEXEC,
                )
                .map_err(io::Error::from)
            });
            match accepted {
                Ok(Ok((fd, peer))) => {
                    let peer = peer
                        .and_then(|peer| SocketAddr::try_from(peer).ok())
                        .ok_or_else(|| io::Error::other("accepted a socket without a peer"))?;
                    return Ok((Socket::detached(TcpStream::from(fd)), peer));
                }
                Ok(Err(e)) => return Err(e),
                // Nothing to accept: readiness was cleared, wait for the next connection.
                Err(_would_block) => {}
            }
        }
    }
}
