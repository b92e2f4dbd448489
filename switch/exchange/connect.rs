//! Connect: a new connection to the server picked (an idle one is reused by pick.rs before
//! this is tried), with the answer to running out of descriptors, and a SYN that the
//! server's full accept queue dropped sent again when a slot may have opened
//! (state/handshakes.rs); then, for a pool with `[pool.NAME.tls]`, the TLS handshake
//! (upstream/tls/), within the same `connect_timeout`.

use super::Picker;
use crate::capacity::exhaustion;
use crate::config::ServerProtocol;
use crate::config::ServiceMode;
use crate::socket::Socket;
use crate::state::control::{Evidence, Failure};
use crate::state::server::Backend;
use crate::state::stats;
use crate::stream::TimeLimit;
use crate::upstream::connection::ServerConnection;
use crate::upstream::h2::driver;
use crate::upstream::tls::handshake::{self, HandshakeFailure};
use crate::upstream::ServerLink;
use std::future::{poll_fn, Future};
use std::io;
use std::pin::pin;
use std::task::Poll;
use std::time::Duration;
use tokio::time::Instant;

/// Why no new connection to a server was opened.
pub(crate) enum ConnectFailure {
    /// Refused, unreachable, timed out: the server's failure (counted as a connect error).
    Server(Failure),
    /// This process could not get a socket (descriptors or socket memory ran out), even after
    /// freeing idle connections and waiting: nobody's failure but ours.
    OutOfDescriptors,
}

/// SYNs sent again within one connect, at most (each waits for a request of the server to
/// end, and the connect's time limit bounds them anyway).
const MAX_RESENDS: usize = 64;

/// The answer's reason when descriptors ran out.
pub(super) const OUT_OF_DESCRIPTORS: &str = "out of file descriptors";

/// How long to wait between tries for a socket when descriptors ran out and no idle connection
/// could be closed: descriptors come back as other requests end. Some 300 ms in all, then 503.
const EXHAUSTED_PAUSES: [Duration; 4] = [
    Duration::from_millis(10),
    Duration::from_millis(40),
    Duration::from_millis(100),
    Duration::from_millis(150),
];

impl Picker<'_> {
    /// A new connection to the pool's server `server` as the pool's `protocol` says: HTTP/2
    /// for `"h2"`, or for `"auto"` when the server chose it by ALPN (its first stream's place
    /// taken), else HTTP/1.1.
    pub(crate) async fn open_link(&self, server: usize) -> Result<ServerLink, ConnectFailure> {
        let connection = self.open_connection(server).await?;
        let protocol = self.pool.config.protocol;
        let backend = &*self.pool.backends[server];
        let chose_h2 = connection.stream.tls().is_some_and(|tls| tls.speaks_h2());
        let h2 = match protocol {
            ServerProtocol::Http1 => false,
            ServerProtocol::H2 => true,
            ServerProtocol::Auto => chose_h2,
        };
        backend
            .chose_h2
            .store(h2, std::sync::atomic::Ordering::Relaxed);
        if !h2 {
            return Ok(ServerLink::H1(connection));
        }
        let settings = &self.cx.shared.settings;
        let limit = TimeLimit::Idle(settings.connect_timeout);
        let tls = self.pool.config.tls.clone();
        let idle = settings.server_idle_timeout;
        match driver::start(connection.stream, tls, idle, limit).await {
            Ok(started) => Ok(ServerLink::H2(
                backend.h2.add(self.cx.timer.worker(), started),
            )),
            Err(e) => {
                count_connect_error(&backend.stats, &e);
                Err(ConnectFailure::Server(Failure {
                    why: format!("HTTP/2 handshake: {e}"),
                    evidence: Evidence::Broken,
                }))
            }
        }
    }

    /// A new connection to the pool's server `server`, over TLS when the pool says so (never
    /// for a passthrough service: its clients speak TLS to the server themselves).
    pub(crate) async fn open_connection(
        &self,
        server: usize,
    ) -> Result<ServerConnection, ConnectFailure> {
        let backend = &*self.pool.backends[server];
        let started = Instant::now();
        let answered = stats::read(&backend.stats.responses);
        let socket = self.open_socket(backend).await?;
        let tls = match &self.pool.config.tls {
            Some(tls) if self.cx.service.mode == ServiceMode::Http => tls,
            _ => return Ok(ServerConnection::plain(socket)),
        };
        let host = self
            .pool
            .config
            .servers
            .get(server)
            .and_then(|s| s.host.as_deref());
        let name = tls.server_name(host, backend.addr);
        let deadline = started + self.cx.shared.settings.connect_timeout;
        match handshake::connect(socket, tls, name, TimeLimit::Until(deadline)).await {
            Ok(stream) => Ok(ServerConnection::with_tls(
                stream,
                std::sync::Arc::clone(tls),
            )),
            Err(failure) => Err(ConnectFailure::Server(handshake_failed(
                backend, failure, answered,
            ))),
        }
    }

    /// A new TCP connection to `backend`. When this process is out of descriptors, the idle
    /// connections this worker keeps to any server are closed to free some, and the socket is
    /// tried again a few times over a short while before the request gets a 503; none of it
    /// counts against the server.
    async fn open_socket(&self, backend: &Backend) -> Result<Socket, ConnectFailure> {
        let connect_timeout = self.cx.shared.settings.connect_timeout;
        // What the server answered so far: a connect that times out while it goes on
        // answering (or moving others' bodies) shows a full listen queue (busy), not a dead
        // server.
        let answered = stats::read(&backend.stats.responses);
        for pause in EXHAUSTED_PAUSES {
            match connect_or_resend(backend, connect_timeout).await {
                Ok(stream) => return Ok(stream),
                Err(e) if exhaustion::is_exhaustion(&e) => {
                    exhaustion::CONNECT.warn(|held| {
                        tracing::warn!(server = %backend.addr, "no connection opened: {e}{}", exhaustion::held_back(held));
                    });
                    if self.shed_idle_connections() == 0 {
                        tokio::time::sleep(pause).await;
                    }
                }
                Err(e) => {
                    count_connect_error(&backend.stats, &e);
                    let evidence = match e.kind() {
                        std::io::ErrorKind::TimedOut => {
                            Evidence::of_timeout(backend.stats.alive_since(answered))
                        }
                        _ => Evidence::Broken,
                    };
                    return Err(ConnectFailure::Server(Failure {
                        why: format!("connect failed: {e}"),
                        evidence,
                    }));
                }
            }
        }
        Err(ConnectFailure::OutOfDescriptors)
    }

    /// Closes the idle server connections of this connection's worker, in every pool.
    fn shed_idle_connections(&self) -> usize {
        let worker = self.cx.timer.worker();
        self.cx
            .generation
            .pools
            .iter()
            .flat_map(|pool| pool.backends.iter())
            .map(|backend| backend.shed_idle(worker))
            .sum()
    }
}

/// A new connection to `backend` within `timeout`, its SYN sent again (a new socket) each time
/// the server's full accept queue is seen to have dropped it and a request of the server has
/// ended since (state/handshakes.rs): a second later, the kernel would send it again itself,
/// into a slot long taken by a SYN that came after. Before any byte of the request: safe for
/// every request, and one attempt, one time limit, however many SYNs.
async fn connect_or_resend(backend: &Backend, timeout: Duration) -> io::Result<Socket> {
    let deadline = Instant::now() + timeout;
    let handshakes = &backend.handshakes;
    for _ in 0..MAX_RESENDS {
        let number = handshakes.begin();
        let left = deadline.saturating_duration_since(Instant::now());
        let mut connecting = pin!(backend.connect(left));
        // The first poll sends the SYN (or fails at once).
        let first = poll_fn(|cx| Poll::Ready(connecting.as_mut().poll(cx))).await;
        let result = match first {
            Poll::Ready(result) => result,
            Poll::Pending => {
                let sent = handshakes.sent();
                tokio::select! {
                    biased;
                    result = &mut connecting => result,
                    () = handshakes.overtaken(sent) => continue,
                }
            }
        };
        if result.is_ok() {
            handshakes.completed(number);
        }
        return result;
    }
    let left = deadline.saturating_duration_since(Instant::now());
    backend.connect(left).await
}

/// A TLS handshake that failed: counted (as a connection error too), and the server's failure:
/// a certificate that does not verify is as broken as a refused connection; a handshake that
/// ran out of time is judged as a connect that did (`answered`: the server's responses before).
fn handshake_failed(backend: &Backend, failure: HandshakeFailure, answered: u64) -> Failure {
    stats::bump(&backend.stats.tls_failures);
    let evidence = match &failure {
        HandshakeFailure::Broken(e) => {
            count_connect_error(&backend.stats, e);
            match e.kind() {
                io::ErrorKind::TimedOut => {
                    Evidence::of_timeout(backend.stats.alive_since(answered))
                }
                _ => Evidence::Broken,
            }
        }
        HandshakeFailure::Refused(_) => {
            stats::bump(&backend.stats.connect_errors);
            Evidence::Broken
        }
    };
    Failure {
        why: failure.to_string(),
        evidence,
    }
}

/// A connection attempt that failed: counted, and as a timeout when it ran out of time.
fn count_connect_error(server: &stats::ServerStats, error: &std::io::Error) {
    stats::bump(&server.connect_errors);
    if error.kind() == std::io::ErrorKind::TimedOut {
        stats::bump(&server.timeouts);
    }
}
