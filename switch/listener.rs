//! Accepting client connections: one listener per virtual service, one task per connection,
//! `max_clients` enforced at the door.

use crate::capacity::exhaustion;
use crate::config::ServiceMode;
use crate::connection::Connection;
use crate::http::rewrite::ClientConnection;
use crate::http::status::{write_answer, Answer};
use crate::shared::Shared;
use crate::socket::{new_tcp_socket, set_defer_accept, Listener, Socket};
use crate::state::stats::{self, ServiceStats};
use crate::stream::{write_all, TimeLimit};
use crate::timeouts::{Timeouts, SESSION_TIMER};
use rustix::net::sockopt;
use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

/// Pending connections the kernel may queue per listener.
const BACKLOG: i32 = 4096;

/// How long the kernel holds a connection whose client has sent nothing yet, with
/// `defer_accept` (HAProxy's `defer-accept` uses the same second). A silent client is handed
/// over after this anyway (on its next ACK, or when it sends), then header_timeout applies.
const DEFER_ACCEPT_SECS: u32 = 1;

/// Binds a listener; with `reuse_port`, several workers may each bind one to the same address
/// and the kernel spreads new connections over them. With `defer_accept`, the kernel hands a
/// connection over only once the client's first bytes arrived: HTTP clients speak first, so
/// the first read then finds the request, and a new connection is served without an extra
/// wake-up or ever joining epoll (socket.rs). Must run inside a tokio runtime (the listener
/// is registered with its reactor).
pub fn bind(addr: SocketAddr, reuse_port: bool, defer_accept: bool) -> io::Result<Listener> {
    Listener::new(bind_socket(addr, reuse_port, defer_accept)?)
}

/// Refuses an address another process listens on already. Several workers bind with
/// SO_REUSEPORT, and the kernel would let a second tcpvs started by mistake (same user) join
/// the group and silently take part of the traffic; a plain bind first (SO_REUSEADDR only,
/// never listening, closed at once) fails on any listener there, with the option or without.
pub fn ensure_unclaimed(addr: SocketAddr) -> io::Result<()> {
    if addr.port() == 0 {
        return Ok(());
    }
    let probe = new_tcp_socket(addr)?;
    sockopt::set_socket_reuseaddr(&probe, true)?;
    match rustix::net::bind(&probe, &addr) {
        Ok(()) => Ok(()),
        Err(rustix::io::Errno::ADDRINUSE) => Err(io::Error::new(
            io::ErrorKind::AddrInUse,
            "address in use: another process listens there already (a second tcpvs?); stop it \
             first, or start this one with --take-over to take its listeners over",
        )),
        Err(e) => Err(e.into()),
    }
}

/// [`bind`] without the runtime: a listening socket any worker can adopt (`Listener::new` on
/// its runtime). A reload binds new addresses this way first, so that an address that cannot
/// be bound refuses the reload before anything changes.
pub fn bind_socket(
    addr: SocketAddr,
    reuse_port: bool,
    defer_accept: bool,
) -> io::Result<std::net::TcpListener> {
    let socket = new_tcp_socket(addr)?;
    sockopt::set_socket_reuseaddr(&socket, true)?;
    if reuse_port {
        sockopt::set_socket_reuseport(&socket, true)?;
    }
    // Accepted sockets inherit TCP_NODELAY from the listener on Linux: one system call here
    // instead of one per connection.
    sockopt::set_tcp_nodelay(&socket, true)?;
    if defer_accept {
        set_defer_accept(&socket, DEFER_ACCEPT_SECS)?;
    }
    rustix::net::bind(&socket, &addr)?;
    rustix::net::listen(&socket, BACKLOG)?;
    Ok(std::net::TcpListener::from(socket))
}

/// Keeps one client connection counted in `Shared::clients` and in its service's open
/// connections while it lives.
struct ClientSlot {
    shared: Arc<Shared>,
    service: Arc<ServiceStats>,
}

impl Drop for ClientSlot {
    fn drop(&mut self) {
        self.shared.clients.fetch_sub(1, Ordering::Relaxed);
        self.service.open.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Accepts the connections of the listener bound to `listen` until the switch stops or a
/// reload removes the address (the task is aborted). Each connection belongs to the service of
/// the current configuration that listens there.
pub async fn accept_loop(
    shared: Arc<Shared>,
    listen: SocketAddr,
    listener: Listener,
    timeouts: Arc<Timeouts>,
) {
    let mut shutdown = shared.shutdown.clone();
    loop {
        // The stop is looked at first: a listener that keeps failing (out of descriptors, the
        // connection left queued) is always ready and would otherwise hide it.
        let accepted = tokio::select! {
            biased;
            _ = shutdown.wait_for(|stop| *stop) => return,
            accepted = listener.accept() => accepted,
        };
        let (stream, peer) = match accepted {
            Ok(pair) => pair,
            Err(e) if exhaustion::is_per_connection(&e) => continue,
            Err(e) => {
                // Out of descriptors or memory: the connection stays queued in the kernel and
                // the listener readable, so back off (waking for a stop) instead of spinning,
                // and say so once a second at most. Open connections go on being served.
                exhaustion::ACCEPT.warn(|held| {
                    tracing::warn!(%listen, "accept failed: {e}; retrying in {} ms{}",
                        exhaustion::ACCEPT_BACKOFF.as_millis(), exhaustion::held_back(held));
                });
                tokio::select! {
                    _ = shutdown.wait_for(|stop| *stop) => return,
                    _ = tokio::time::sleep(exhaustion::ACCEPT_BACKOFF) => continue,
                }
            }
        };
        let generation = shared.generation.load_full();
        let Some(service) = generation.service_at(listen) else {
            // A reload removed this address a moment ago; its listener is being closed.
            continue;
        };
        let service_stats = Arc::clone(&generation.services[service].stats);
        // Open before accepted: a snapshot reads them the other way round (state/snapshot.rs).
        let open = shared.clients.fetch_add(1, Ordering::Relaxed);
        stats::bump(&service_stats.accepted);
        stats::bump(&service_stats.open);
        let refused = open >= shared.max_clients;
        if refused {
            stats::bump(&service_stats.refused);
        }
        let slot = ClientSlot {
            shared: Arc::clone(&shared),
            service: service_stats,
        };
        if refused {
            let service = &generation.services[service];
            if service.tls.is_some() || service.mode == ServiceMode::TlsPassthrough {
                // A plain-text 503 would be garbage to a TLS client: the connection is closed
                // (counted as refused), as a TLS server at its limit does.
                continue;
            }
            let timer = timeouts.register();
            tokio::spawn(SESSION_TIMER.scope(timer, refuse_busy(slot, stream)));
            continue;
        }
        let timer = timeouts.register();
        let connection = Connection::new(
            Arc::clone(&shared),
            generation,
            service,
            stream,
            peer,
            Arc::clone(&timer),
        );
        tokio::spawn(SESSION_TIMER.scope(timer, serve(connection, slot)));
    }
}

/// A connection's task: it runs in place, and its client slot is freed after it is dropped.
/// Not an async fn: one would keep its arguments and a moved copy of them, and every
/// connection's task would carry the connection twice (issue 42: the task took 3.3 KiB, 2.2 of
/// them copies and HTTP/2's preface check, of the 8.5 KiB a slow client cost).
#[allow(clippy::manual_async_fn)]
fn serve(mut connection: Connection, slot: ClientSlot) -> impl Future<Output = ()> {
    async move {
        connection.run().await;
        drop(connection);
        drop(slot);
    }
}

/// Answers 503 to a connection over `max_clients`. The request is read first (briefly) so
/// that closing does not reset the connection before the client sees the answer.
async fn refuse_busy(slot: ClientSlot, stream: Socket) {
    let _slot = slot;
    let mut scratch = crate::buffer::IoBuf::with_capacity(4096);
    // One deadline for the whole read, from the connection's timer slot. The scratch buffer
    // keeps at most 4 KiB, so scanning it again after each read stays cheap.
    let deadline = tokio::time::Instant::now() + Duration::from_millis(500);
    while !scratch.filled().windows(4).any(|w| w == b"\r\n\r\n") {
        match crate::stream::read_some(&stream, &mut scratch, TimeLimit::Until(deadline)).await {
            Ok(0) | Err(_) => break,
            Ok(_) if scratch.spare().is_empty() => scratch.consume(scratch.len() - 3),
            Ok(_) => {}
        }
    }
    let mut out = Vec::new();
    let answer = Answer::Error {
        status: 503,
        why: "too many clients",
    };
    write_answer(&mut out, &answer, ClientConnection::Close, true);
    let _ = write_all(&stream, &out, TimeLimit::Idle(Duration::from_secs(2))).await;
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The size of the future that `f` returns, without calling it.
    fn future_size<F, Fut>(_: F) -> usize
    where
        F: FnOnce(Connection, ClientSlot) -> Fut,
    {
        std::mem::size_of::<Fut>()
    }

    /// Every connection's task holds this future for as long as it lives: an idle keep-alive
    /// client and a slow one still sending its head (slowloris) pay each byte of it. It took
    /// 3304 bytes: `run` took the connection by value (an async fn keeps its argument and a
    /// moved copy, and the spawning block held a third: 3 x 824 bytes), and HTTP/2's preface
    /// check kept its read state inline (576 bytes). Now the connection once and a few hundred
    /// bytes of waiting. A larger bound is a choice to make knowingly, with
    /// `benches/slowloris.sh` (RELIABILITY.md, "Slow clients").
    #[test]
    fn a_connections_task_holds_the_connection_once_and_no_rare_state() {
        let task = future_size(serve);
        let connection = std::mem::size_of::<Connection>();
        assert!(
            task <= connection + 384,
            "the task takes {task} bytes, the connection {connection}"
        );
    }
}
