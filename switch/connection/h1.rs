//! The HTTP/1 front-end: request after request on one connection. It waits for a request
//! (`h1/wait.rs`: nothing but the socket held meanwhile), reads its head (`h1/head.rs`), hands
//! it to an exchange (exchange/, through the client side of `h1/client.rs`), and keeps the
//! connection for the next one: a burst of requests shares one boxed state, an idle connection
//! keeps only its socket. What cannot be read is refused here (400, 408, 431, ...).

mod buffer_body;
mod client;
mod head;
mod parts;
mod wait;

use super::h2::PREFACE;
use super::Connection;
use crate::access_log;
use crate::exchange;
use crate::http::rewrite::ClientConnection;
use crate::http::status::{write_answer, Answer};
use crate::http::HeadProgress;
use crate::state::stats;
use crate::stream::{read_some, write_all, TimeLimit};
use std::io;
use std::time::Duration;
use tokio::time::Instant;

/// A head not complete by its deadline gets 408; any other failure to read it closes quietly.
fn head_not_read(e: io::Error) -> NoRequest {
    if e.kind() == io::ErrorKind::TimedOut {
        NoRequest::Refuse(408, "request head not received in time")
    } else {
        NoRequest::Closed
    }
}

/// How long a connection may wait for its next request, and what the end of the wait means.
#[derive(Clone, Copy)]
enum Await {
    /// The first request of a connection: its head is due by then (else 408).
    FirstHead(Instant),
    /// An idle keep-alive connection: closed quietly after this.
    KeepAlive(Duration),
    /// Right after a response, still holding the burst's state: after this, the connection
    /// goes on waiting with less memory (see [`BURST_GRACE`]).
    Grace(Duration),
}

/// Why a wait for the next request ended without one.
enum Waited {
    Closed,
    Refuse(u16, &'static str),
    GraceOver,
}

/// How a burst of requests ended.
enum Burst {
    /// No request came within the grace: back to the low-memory wait.
    Idle,
    /// The connection is to be closed after the last response.
    Close,
    /// The client went away, or its connection ended quietly.
    Gone,
    Refuse(u16, &'static str),
}

/// How long a connection keeps its burst state (one boxed future of a few kilobytes) after a
/// response before it waits in the low-memory state. A busy client sends its next request long
/// before; an idle one frees the memory soon.
const BURST_GRACE: Duration = Duration::from_millis(50);

/// The length of the preface's first line, `PRI * HTTP/2.0\r\n`: what tells HTTP/2 by prior
/// knowledge from HTTP/1.
const PREFACE_LINE: usize = 16;
const _: () = assert!(PREFACE[PREFACE_LINE - 2] == b'\r' && PREFACE[PREFACE_LINE - 1] == b'\n');

/// Why reading the next request head ended without a request.
enum NoRequest {
    /// The client closed, went idle past keepalive_timeout, or the switch is stopping.
    Closed,
    /// Answer with this status and close.
    Refuse(u16, &'static str),
}

impl Connection {
    /// Serves HTTP/1 requests until the connection ends; the first request's head is due by
    /// `first_head`.
    pub(super) async fn serve_h1(&mut self, first_head: Instant) {
        let keepalive = self.shared.settings.keepalive_timeout;
        let mut head_deadline = Some(first_head);
        let mut wait = keepalive;
        loop {
            // Waiting for a request: nothing but the socket is held (see wait_for_request).
            let waiting = match head_deadline {
                Some(at) => Await::FirstHead(at),
                None => Await::KeepAlive(wait),
            };
            match self.wait_for_request(waiting).await {
                Ok(()) => {}
                Err(Waited::Closed | Waited::GraceOver) => return,
                Err(Waited::Refuse(status, why)) => {
                    Box::pin(self.refuse(status, why)).await;
                    break;
                }
            }
            if let Some(first) = head_deadline {
                if self.begins_with_preface(first).await {
                    Box::pin(self.serve_h2(first)).await;
                    return;
                }
            }
            // The head is read before the box below: a slow client still sending it holds
            // only its buffer, its field table and a small box (not the exchange's state),
            // and an idle connection's task does not carry the state of reading a head.
            let mut progress = HeadProgress::default();
            let head = match self.head_in_buffer(&mut progress) {
                Some(head) => head,
                None => Box::pin(self.read_request_head(head_deadline, progress)).await,
            };
            head_deadline = None;
            match head {
                Ok(()) => {}
                Err(NoRequest::Closed) => return,
                Err(NoRequest::Refuse(status, why)) => {
                    Box::pin(self.refuse(status, why)).await;
                    break;
                }
            }
            // Boxed: carrying out requests takes several kilobytes of state, which an idle
            // connection should not keep in its task (BENCHMARKS.md, "memory"). One box serves
            // a whole burst of requests, so a busy connection allocates nothing per request.
            match Box::pin(self.serve_burst()).await {
                Burst::Idle => {
                    wait = keepalive.saturating_sub(BURST_GRACE);
                    self.tried = Vec::new();
                    self.log_request = access_log::Request::default();
                }
                Burst::Close => break,
                Burst::Gone => return,
                Burst::Refuse(status, why) => {
                    Box::pin(self.refuse(status, why)).await;
                    break;
                }
            }
        }
        // Boxed, like refusals: closing happens once, and its state need not sit in every
        // idle connection's task.
        Box::pin(self.linger()).await;
    }

    /// Whether a plain connection of an HTTP/2 service begins with the HTTP/2 preface (prior
    /// knowledge, RFC 9113 section 3.3): reads on while what came is a beginning of its first
    /// line. An HTTP/1 request is told apart by what is in the buffer already; only a
    /// connection whose first bytes begin the preface reads on, in a box: that read's state
    /// (some 650 bytes) would otherwise sit in every connection's task for as long as it lives
    /// (issue 42).
    async fn begins_with_preface(&mut self, deadline: Instant) -> bool {
        if !self.service().http2 || self.client.tls().is_some() {
            return false;
        }
        match self.preface_in_buffer() {
            Some(decided) => decided,
            None => Box::pin(self.read_preface(deadline)).await,
        }
    }

    /// Whether the buffer holds the preface's first line (`Some(true)`) or something else
    /// (`Some(false)`); `None` while it holds a beginning of it. The first line decides: no
    /// HTTP/1 request begins `PRI * HTTP/2.0`, so a connection that does is HTTP/2's, and a
    /// corrupt rest of the preface is HTTP/2's error to answer (GOAWAY `PROTOCOL_ERROR`,
    /// RFC 9113 section 3.4: `serve_h2`), not an HTTP/1 request of version 2.0.
    fn preface_in_buffer(&self) -> Option<bool> {
        let filled = self.inbuf.filled();
        let n = filled.len().min(PREFACE_LINE);
        if filled[..n] != PREFACE[..n] {
            return Some(false);
        }
        (n == PREFACE_LINE).then_some(true)
    }

    /// Reads until the buffer holds the preface or something else.
    async fn read_preface(&mut self, deadline: Instant) -> bool {
        loop {
            if let Some(decided) = self.preface_in_buffer() {
                return decided;
            }
            match read_some(&self.client, &mut self.inbuf, TimeLimit::Until(deadline)).await {
                Ok(0) | Err(_) => return false,
                Ok(_) => {}
            }
        }
    }

    /// Serves requests, the first one's head read already, as long as the next one comes
    /// within [`BURST_GRACE`].
    async fn serve_burst(&mut self) -> Burst {
        let keepalive = self.shared.settings.keepalive_timeout;
        loop {
            if !self.serve_request().await {
                return Burst::Close;
            }
            match self
                .wait_for_request(Await::Grace(keepalive.min(BURST_GRACE)))
                .await
            {
                Ok(()) => {}
                // The whole keep-alive time fitted in the grace: the connection is done.
                Err(Waited::GraceOver) if keepalive <= BURST_GRACE => return Burst::Gone,
                Err(Waited::GraceOver) => return Burst::Idle,
                Err(Waited::Closed | Waited::Refuse(..)) => return Burst::Gone,
            }
            match self.read_request_head(None, HeadProgress::default()).await {
                Ok(()) => {}
                Err(NoRequest::Closed) => return Burst::Gone,
                Err(NoRequest::Refuse(status, why)) => return Burst::Refuse(status, why),
            }
        }
    }

    /// Carries out the request whose head was read (exchange/), and accounts for it. `true`:
    /// the client connection may carry another request.
    async fn serve_request(&mut self) -> bool {
        let started = Instant::now();
        self.follow_reloads();
        stats::bump(&self.service().stats.requests);
        self.shared
            .access_log
            .capture(&mut self.log_request, &self.head, self.inbuf.filled());
        let outcome = self.exchange(started).await;
        self.account(&outcome, started);
        outcome.keep_client && !self.timer.stopping() && !self.service_gone
    }

    /// The exchange of the current request, its client side this connection's (h1/client.rs).
    async fn exchange(&mut self, started: Instant) -> exchange::account::Outcome {
        let (cx, client, work, tried) = self.exchange_parts();
        let mut client = client;
        exchange::serve(cx, &mut client, work, tried, started).await
    }

    /// Sends a refusal for a request that could not be read, then the connection closes.
    async fn refuse(&mut self, status: u16, why: &str) {
        self.unread_input = true;
        self.work.out.clear();
        let (mut text, mut fields) = (Vec::new(), Vec::new());
        let own = &self.generation.services[self.service].own_answers;
        let answer = own.dress(&Answer::Error { status, why }, &mut text, &mut fields);
        write_answer(&mut self.work.out, &answer, ClientConnection::Close, true);
        stats::bump(&self.service().stats.local_errors);
        self.service().stats.classes.count(status);
        let limit = TimeLimit::Idle(Duration::from_secs(5));
        let _ = write_all(&self.client, &self.work.out, limit).await;
        self.shared.access_log.write(&access_log::Entry {
            service: &self.service().name,
            client: self.peer,
            request: None,
            status,
            bytes: self.work.out.len() as u64,
            pool: None,
            server: None,
            end: access_log::End::Refused(why),
            limit: None,
            grpc: None,
            trace: None,
        });
    }
}
