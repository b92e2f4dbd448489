//! Pick: the server the pool's module picks for a request (backups when primaries failed, the
//! pool's queue when every server is full), and a connection to it (connect.rs), reused or
//! new. Failures here feed passive health detection.

use super::connect::{ConnectFailure, OUT_OF_DESCRIPTORS};
use super::route::request_view;
use super::{Connected, Picker};
use crate::config::ServerProtocol;
use crate::config::ServiceMode;
use crate::http::host::HostScratch;
use crate::http::RequestHead;
use crate::state::control::Evidence;
use crate::state::pool::Lease;
use crate::state::server::Backend;
use crate::state::stats;
use crate::stream::{wait, TimeLimit};
use crate::upstream::h2::connections::{Channel, Opening, Taken};
use crate::upstream::ServerLink;

/// Times a request waits for another to open an HTTP/2 connection to the same server before it
/// opens one itself (each wait ends when that opening does, within `connect_timeout`).
const MAX_OPENING_WAITS: usize = 16;
use std::pin::pin;
use tcpvs_modules::{ResponseField, Ticket};
use tokio::time::Instant;

/// Why a request found no server when every candidate was at its `max_conns`.
const ALL_FULL: &str = "every server is at its connection limit";

/// The request as the module sees it: its head and the bytes the head's spans index.
type Request<'r> = (&'r RequestHead, &'r [u8]);

/// Why no server was found: the status and reason the client gets.
type NoServer = (u16, &'static str);

/// What the candidates of one [`Picker::pick_and_connect`] came to.
#[derive(Default)]
struct Tally {
    /// Connections tried (idle or new).
    connects: usize,
    /// Candidates at their `max_conns`, skipped.
    full: usize,
    /// Servers whose connection timed out while they answered other requests (busy, not
    /// dead): once every candidate has been tried, they are tried again while attempts last,
    /// as HAProxy's `retries` tries its server again. A connection refused, or a timeout of a
    /// silent server, is not worth another wait.
    busy: Vec<usize>,
}

impl<'a> Picker<'a> {
    /// [`Picker::pick_and_connect`], and when every usable server is at its `max_conns`, a
    /// wait in the pool's queue for up to `queue_timeout`: each request of the pool that ends
    /// wakes the longest waiting one, which looks again.
    pub(crate) async fn pick_or_queue(
        &mut self,
        request: Request<'_>,
    ) -> Result<Connected<'a>, NoServer> {
        let first = self.pick_and_connect(request).await;
        let pool = self.pool;
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
            match self.pick_and_connect(request).await {
                Err((_, ALL_FULL)) => {}
                other => return other,
            }
            let waited = wait(
                async {
                    woken.await;
                    Ok(())
                },
                TimeLimit::Until(deadline),
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

    /// Asks the pool's module for servers in preference order until one gives a connection:
    /// a parked idle one, else a new one. Fails when candidates or attempts run out.
    async fn pick_and_connect(&mut self, request: Request<'_>) -> Result<Connected<'a>, NoServer> {
        let max_attempts = self.cx.shared.settings.connect_attempts;
        let mut tally = Tally::default();
        // Every server is picked at most once (full ones included), then only busy ones again.
        while self.attempts < max_attempts {
            let Some((server, ticket)) = self.next_candidate(request, &mut tally.busy) else {
                break;
            };
            let Some(lease) = self.pool.try_lease(server, ticket) else {
                // At its max_conns: the next candidate, without spending an attempt.
                tally.full += 1;
                continue;
            };
            tally.connects += 1;
            self.attempts += 1;
            if let Some(failed) = self.retry_from.take() {
                // The request goes on after failing there: that server counts a retry.
                if let Some(failed) = self.pool.backends.get(failed) {
                    stats::bump(&failed.stats.retries);
                }
            }
            let retryable = request.0.retryable();
            if let Some((server_socket, reused)) =
                self.connect_to(&lease, retryable, &mut tally.busy).await?
            {
                return Ok(Connected {
                    lease,
                    server: server_socket,
                    reused,
                    response_field: self.module_response_field(request, server),
                });
            }
        }
        Err(match (self.tried.is_empty(), tally.connects, tally.full) {
            (true, _, _) => (503, "no server available"),
            (false, 0, 1..) => (503, ALL_FULL),
            (false, 0, 0) => (502, "no server answered"),
            _ => (502, "no server accepted the connection"),
        })
    }

    /// The next server to try, with the module's ticket for it: the module's next candidate
    /// (or a backup), else a busy one again; `None` when there is none left.
    fn next_candidate(
        &mut self,
        request: Request<'_>,
        busy: &mut Vec<usize>,
    ) -> Option<(usize, Ticket)> {
        let pool = self.pool;
        let fresh = if self.tried.len() < pool.servers.len() {
            // A backup the module does not offer yet (a primary still counts as up) takes
            // the request when the module has no candidate left and a primary failed it;
            // primaries that are merely full make it queue instead.
            self.pick(request).or_else(|| {
                (self.attempts > 0)
                    .then(|| pool.backup_candidate(self.tried))
                    .flatten()
                    .map(|backup| (backup, Ticket::NONE))
            })
        } else {
            None
        };
        match fresh {
            Some((server, _)) if self.tried.contains(&server) => {
                tracing::error!(pool = %pool.name, "scheduler `{}` answered a server it was told was tried", pool.scheduler.name());
                None
            }
            Some((server, ticket)) => {
                self.tried.push(server);
                Some((server, ticket))
            }
            None if !busy.is_empty() => Some((busy.remove(0), Ticket::NONE)),
            None => None,
        }
    }

    /// A connection to the leased server: a stream on one of its HTTP/2 connections with
    /// room, or a parked idle HTTP/1.1 one, else a new one. `Ok(None)`: the server failed
    /// (counted, and remembered in `busy` when it was only busy); `Err`: no server would fare
    /// better (this process is out of descriptors).
    async fn connect_to(
        &mut self,
        lease: &Lease<'a>,
        retryable: bool,
        busy: &mut Vec<usize>,
    ) -> Result<Option<(ServerLink, bool)>, NoServer> {
        let server = lease.server;
        let backend = lease.backend();
        let (pool, cx) = (self.pool, self.cx);
        let now_ms = cx.timer.now_ms();
        let tls = pool.config.tls.as_ref();
        // A `send_proxy` pool's connections belong to one client each: never reused (idle
        // ones may remain from before a reload turned it on); a passthrough connection is a
        // new TLS connection to the server, never an idle HTTP one.
        let reusable = pool.config.send_proxy.is_none() && cx.service.mode == ServiceMode::Http;
        // HTTP/2: a stream on a connection with room; for "h2" (and "auto" once the server
        // chose it) one connection opened at a time, the others waiting for it.
        let mut opening = None;
        let gated = pool.config.protocol == ServerProtocol::H2
            || (pool.config.protocol == ServerProtocol::Auto
                && backend.chose_h2.load(std::sync::atomic::Ordering::Relaxed));
        if reusable && gated {
            match self.h2_stream_or_opening(backend).await {
                Ok(channel) => return Ok(Some((ServerLink::H2(channel), true))),
                Err(right) => opening = right,
            }
        } else if reusable && pool.config.protocol == ServerProtocol::Auto {
            if let Some(channel) = backend.h2.take(cx.timer.worker(), tls) {
                return Ok(Some((ServerLink::H2(channel), true)));
            }
        }
        let idle_age = cx.shared.settings.server_idle_timeout;
        let idle = match reusable && pool.config.protocol != ServerProtocol::H2 {
            true => backend.take_idle(cx.timer.worker(), now_ms, idle_age, !retryable, tls),
            false => None,
        };
        if let Some(stream) = idle {
            return Ok(Some((ServerLink::H1(stream), true)));
        }
        let opened = self.open_link(server).await;
        drop(opening);
        match opened {
            Ok(link) => Ok(Some((link, false))),
            // No other server would fare better, and this one did not fail.
            Err(ConnectFailure::OutOfDescriptors) => Err((503, OUT_OF_DESCRIPTORS)),
            Err(ConnectFailure::Server(failure)) => {
                match failure.evidence {
                    Evidence::Busy => busy.push(server),
                    Evidence::Broken if pool.in_panic() && backend.is_down() => {
                        // A pool in panic offers its down servers too; one that refuses must
                        // not spend the attempts that would reach a live one (each server is
                        // still tried once at most).
                        self.attempts -= 1;
                    }
                    Evidence::Broken | Evidence::Silent | Evidence::Answered => {}
                }
                self.retry_from = Some(server);
                self.server_failed(server, failure);
                Ok(None)
            }
        }
    }

    /// A stream (or for `"auto"`, a connection) to the pool's server `server` for a request
    /// whose stream the server refused: on a connection with room, else a new one.
    pub(crate) async fn h2_link(&self, server: usize) -> Result<ServerLink, ConnectFailure> {
        let backend = &*self.pool.backends[server];
        let opening = match self.h2_stream_or_opening(backend).await {
            Ok(channel) => return Ok(ServerLink::H2(channel)),
            Err(right) => right,
        };
        let opened = self.open_link(server).await;
        drop(opening);
        opened
    }

    /// A stream on one of `backend`'s HTTP/2 connections of this worker, waiting while another
    /// request opens one; `Err`: none has room, and the caller opens one, holding the right
    /// to (`None` after many waits: it opens one anyway).
    async fn h2_stream_or_opening(
        &self,
        backend: &'a Backend,
    ) -> Result<Channel, Option<Opening<'a>>> {
        let worker = self.cx.timer.worker();
        let tls = self.pool.config.tls.as_ref();
        let limit = TimeLimit::Idle(self.cx.shared.settings.connect_timeout);
        for _ in 0..MAX_OPENING_WAITS {
            match backend.h2.take_or_open(worker, tls) {
                Taken::Stream(channel) => return Ok(channel),
                Taken::Open(right) => return Err(Some(right)),
                Taken::Wait => {
                    let opened = async {
                        backend.h2.opened(worker).await;
                        Ok(())
                    };
                    let _ = wait(opened, limit).await;
                }
            }
        }
        Err(None)
    }

    /// The pool module's next candidate for the request, and its ticket.
    fn pick(&self, (head, buf): Request<'_>) -> Option<(usize, Ticket)> {
        let headers = head.lookup(buf);
        let mut host = HostScratch::default();
        let view = request_view(&self.cx, head, buf, &headers, &mut host);
        self.pool.pick(&view, self.tried)
    }

    /// A field the module wants on the response (a persistence cookie), if it is safe to send.
    fn module_response_field(
        &self,
        (head, buf): Request<'_>,
        server: usize,
    ) -> Option<ResponseField> {
        let headers = head.lookup(buf);
        let mut host = HostScratch::default();
        let view = request_view(&self.cx, head, buf, &headers, &mut host);
        let field = self.pool.scheduler.response_field(&view, server)?;
        let safe = field
            .value
            .bytes()
            .all(|b| b == b'\t' || (b' '..=b'~').contains(&b));
        safe.then_some(field)
    }
}
