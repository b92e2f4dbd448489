//! Route, pick and connect: the pool a request goes to (the service's rules), the server the
//! pool's module picks (backups when primaries failed, the pool's queue when every server is
//! full), and a connection to it, reused or new. Failures here feed passive health detection.

use super::{Session, ALL_FULL};
use crate::config::ServiceMode;
use crate::limits::exhaustion;
use crate::socket::Socket;
use crate::state::control::{self, Evidence, Failure};
use crate::state::pool::{Lease, Pool};
use crate::state::server::Backend;
use crate::state::stats;
use crate::stream::{wait, Limit};
use std::pin::pin;
use std::time::Duration;
use tcpvs_modules::{RequestView, ResponseField};
use tokio::time::Instant;

impl Session {
    /// A server failed this request: passive health detection hears of it, and the log
    /// does, at most once a second per server.
    pub(super) fn server_failed(&self, pool: &Pool, server: usize, failure: Failure) {
        let backend = &pool.backends[server];
        if let Some(unlogged) = backend.may_warn(self.timer.now_ms()) {
            let why = &failure.why;
            let busy = match failure.evidence {
                Evidence::Busy => {
                    " (busy: it answered other requests meanwhile; not counted against it)"
                }
                Evidence::Broken | Evidence::Silent => "",
            };
            if unlogged > 0 {
                tracing::warn!(pool = %pool.name, server = %backend.addr, "{why}{busy} ({unlogged} more failures since the last warning)");
            } else {
                tracing::warn!(pool = %pool.name, server = %backend.addr, "{why}{busy}");
            }
        }
        control::exchange_failed(&self.shared.generation, pool, server, failure);
    }

    /// [`Session::pick_and_connect`], and when every usable server is at its `max_conns`, a
    /// wait in the pool's queue for up to `queue_timeout`: each request of the pool that ends
    /// wakes the longest waiting one, which looks again.
    pub(super) async fn pick_or_queue<'p>(
        &mut self,
        pool: &'p Pool,
        attempts: &mut usize,
    ) -> Result<(Lease<'p>, Socket, bool), (u16, &'static str)> {
        let first = self.pick_and_connect(pool, attempts).await;
        let queue_timeout = pool.health.queue_timeout;
        if queue_timeout.is_zero() || !matches!(first, Err((_, ALL_FULL))) {
            return first;
        }
        let deadline = Instant::now() + queue_timeout;
        let ticket = pool.queued();
        loop {
            let mut woken = pin!(ticket.notified());
            woken.as_mut().enable();
            // Looked at again after the waiter is registered: no wake-up falls in between.
            self.tried.clear();
            match self.pick_and_connect(pool, attempts).await {
                Err((_, ALL_FULL)) => {}
                other => return other,
            }
            let waited = wait(
                async {
                    woken.await;
                    Ok(())
                },
                Limit::Until(deadline),
            )
            .await;
            if waited.is_err() {
                return Err((
                    503,
                    "every server is at its connection limit (queue timeout)",
                ));
            }
        }
    }

    /// The pool for the current request, by the service's rules.
    pub(super) fn route(&self) -> Option<usize> {
        let buf = self.inbuf.filled();
        let headers = self.head.lookup(buf);
        let view = self.request_view(buf, &headers);
        let sni = self.sni.as_deref().map(str::as_bytes);
        self.service().rules.route(&view, sni)
    }

    fn request_view<'a>(
        &'a self,
        buf: &'a [u8],
        headers: &'a dyn tcpvs_modules::HeaderLookup,
    ) -> RequestView<'a> {
        let host = match self.service().mode {
            ServiceMode::Http => self.head.host.map(|h| h.get(buf)),
            // No HTTP request: the module sees the server name as the host (hash key "host").
            ServiceMode::TlsPassthrough => self.sni.as_deref().map(str::as_bytes),
        };
        RequestView {
            method: self.head.method(buf),
            path: self.head.path.get(buf),
            query: self.head.query.map(|q| q.get(buf)),
            host,
            headers,
            client: self.peer.ip(),
        }
    }

    /// Asks the pool's module for servers in preference order until one gives a connection:
    /// a parked idle one, else a new one. Returns `None` when candidates or attempts run out.
    async fn pick_and_connect<'p>(
        &mut self,
        pool: &'p Pool,
        attempts: &mut usize,
    ) -> Result<(Lease<'p>, Socket, bool), (u16, &'static str)> {
        let max_attempts = self.shared.settings.connect_attempts;
        let idle_age = self.shared.settings.server_idle_timeout;
        let mut connects = 0;
        let mut full = 0;
        // Servers whose connection timed out while they answered other requests (busy, not
        // dead): once every candidate has been tried, they are tried again while attempts
        // last, as HAProxy's `retries` tries its server again. A connection refused, or a
        // timeout of a silent server, is not worth another wait.
        let mut busy: Vec<usize> = Vec::new();
        // Every server is picked at most once (full ones included), then only busy ones again.
        while *attempts < max_attempts {
            let fresh = if self.tried.len() < pool.servers.len() {
                // A backup the module does not offer yet (a primary still counts as up) takes
                // the request when the module has no candidate left and a primary failed it;
                // primaries that are merely full make it queue instead.
                self.pick(pool).or_else(|| {
                    (*attempts > 0)
                        .then(|| pool.backup_candidate(&self.tried))
                        .flatten()
                })
            } else {
                None
            };
            let server = match fresh {
                Some(server) if self.tried.contains(&server) => {
                    tracing::error!(pool = %pool.name, "scheduler `{}` answered a server it was told was tried", pool.scheduler.name());
                    break;
                }
                Some(server) => {
                    self.tried.push(server);
                    server
                }
                None if !busy.is_empty() => busy.remove(0),
                None => break,
            };
            let Some(lease) = pool.try_lease(server) else {
                // At its max_conns: the next candidate, without spending an attempt.
                full += 1;
                continue;
            };
            connects += 1;
            *attempts += 1;
            if let Some(failed) = self.retry_from.take() {
                // The request goes on after failing there: that server counts a retry.
                if let Some(failed) = pool.backends.get(failed) {
                    stats::bump(&failed.stats.retries);
                }
            }
            let backend = lease.backend();
            let retryable = self.head.retryable();
            let now_ms = self.timer.now_ms();
            // A `send_proxy` pool's connections belong to one client each: never reused
            // (idle ones may remain from before a reload turned it on); a passthrough
            // connection is a new TLS connection to the server, never an idle HTTP one.
            let reusable =
                pool.config.send_proxy.is_none() && self.service().mode == ServiceMode::Http;
            let idle = match reusable {
                true => backend.take_idle(self.timer.worker(), now_ms, idle_age, !retryable),
                false => None,
            };
            let connection = match idle {
                Some(stream) => Some((stream, true)),
                None => match self.open_connection(backend).await {
                    Ok(stream) => Some((stream, false)),
                    Err(ConnectFailure::OutOfDescriptors) => {
                        // No other server would fare better, and this one did not fail.
                        return Err((503, OUT_OF_DESCRIPTORS));
                    }
                    Err(ConnectFailure::Server(failure)) => {
                        match failure.evidence {
                            Evidence::Busy => busy.push(server),
                            Evidence::Broken if pool.in_panic() && backend.is_down() => {
                                // A pool in panic offers its down servers too; one that
                                // refuses must not spend the attempts that would reach a
                                // live one (each server is still tried once at most).
                                *attempts -= 1;
                            }
                            Evidence::Broken | Evidence::Silent => {}
                        }
                        self.retry_from = Some(server);
                        self.server_failed(pool, server, failure);
                        None
                    }
                },
            };
            if let Some((stream, reused)) = connection {
                self.response_field = self.module_response_field(pool, server);
                return Ok((lease, stream, reused));
            }
        }
        Err(match (self.tried.is_empty(), connects, full) {
            (true, _, _) => (503, "no server available"),
            (false, 0, 1..) => (503, ALL_FULL),
            (false, 0, 0) => (502, "no server answered"),
            _ => (502, "no server accepted the connection"),
        })
    }

    /// A new connection to `backend`. When this process is out of descriptors, the idle
    /// connections this worker keeps to any server are closed to free some, and the socket is
    /// tried again a few times over a short while before the request gets a 503; none of it
    /// counts against the server.
    pub(super) async fn open_connection(
        &self,
        backend: &Backend,
    ) -> Result<Socket, ConnectFailure> {
        let connect_timeout = self.shared.settings.connect_timeout;
        // What the server answered so far: a connect that times out while it goes on
        // answering (or moving others' bodies) shows a full listen queue (busy), not a dead
        // server.
        let answered = stats::read(&backend.stats.responses);
        for pause in EXHAUSTED_PAUSES {
            match backend.connect(connect_timeout).await {
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

    /// Closes the idle server connections of this session's worker, in every pool.
    fn shed_idle_connections(&self) -> usize {
        let worker = self.timer.worker();
        self.generation
            .pools
            .iter()
            .flat_map(|pool| pool.backends.iter())
            .map(|backend| backend.shed_idle(worker))
            .sum()
    }

    /// The pool module's next candidate for the current request.
    fn pick(&self, pool: &Pool) -> Option<usize> {
        let buf = self.inbuf.filled();
        let headers = self.head.lookup(buf);
        let view = self.request_view(buf, &headers);
        pool.pick(&view, &self.tried)
    }

    /// A field the module wants on the response (a persistence cookie), if it is safe to send.
    fn module_response_field(&self, pool: &Pool, server: usize) -> Option<ResponseField> {
        let buf = self.inbuf.filled();
        let headers = self.head.lookup(buf);
        let view = self.request_view(buf, &headers);
        let field = pool.scheduler.response_field(&view, server)?;
        let safe = field
            .value
            .bytes()
            .all(|b| b == b'\t' || (b' '..=b'~').contains(&b));
        safe.then_some(field)
    }
}

/// Why no new connection to a server was opened.
pub(super) enum ConnectFailure {
    /// Refused, unreachable, timed out: the server's failure (counted as a connect error).
    Server(Failure),
    /// This process could not get a socket (descriptors or socket memory ran out), even after
    /// freeing idle connections and waiting: nobody's failure but ours.
    OutOfDescriptors,
}

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

/// A connection attempt that failed: counted, and as a timeout when it ran out of time.
fn count_connect_error(server: &stats::ServerStats, error: &std::io::Error) {
    stats::bump(&server.connect_errors);
    if error.kind() == std::io::ErrorKind::TimedOut {
        stats::bump(&server.timeouts);
    }
}
