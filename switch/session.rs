//! One client connection, request after request. The data path reads top to bottom:
//!
//! accept (listener.rs) -> [`Session::read_request_head`] -> [`Session::route`] (rules) ->
//! [`Session::pick_and_connect`] (module, idle reuse or connect) -> [`Session::exchange`]
//! (send head, relay bodies, tunnel) -> [`Session::account`] (stats, access log).
//!
//! Every request on a keep-alive connection is routed and picked again, so one connection can
//! reach several pools.

use crate::buffer::IoBuf;
use crate::gateway::{Service, Shared};
use crate::health;
use crate::http::chunked;
use crate::http::response::RequestKind;
use crate::http::rewrite::{
    add_field_to_head, client_connection, forwarded_for, write_request_head, write_response_head,
    ClientConnection, ForwardedFor,
};
use crate::http::status::write_error;
use crate::http::{
    parse_request, parse_response, BodyFraming, HeadProgress, RequestHead, ResponseHead, Version,
    MAX_HEAD_BYTES,
};
use crate::recycle;
use crate::relay::{
    relay_chunked, relay_length, relay_until_close, tunnel, ChunkedOutput, Meter, RelayError,
    RelaySettings,
};
use crate::socket::Socket;
use crate::stats;
use crate::stream::{read_some, send_all, wait, write_all, write_both, Limit, Then};
use crate::timeouts::Slot;
use crate::upstream::{Lease, Pool};
use std::io;
use std::net::SocketAddr;
use std::pin::pin;
use std::sync::Arc;
use std::task::Poll;
use std::time::Duration;
use tcpvs_modules::{RequestView, ResponseField};
use tokio::time::Instant;

/// What happened to one request, for the access log and the connection's fate.
struct Outcome {
    status: u16,
    /// Bytes sent to the client for this request.
    bytes_out: u64,
    /// The client connection may carry another request.
    keep_client: bool,
    pool: Option<usize>,
    server: Option<SocketAddr>,
}

impl Outcome {
    fn local(status: u16, bytes_out: u64, keep_client: bool, pool: Option<usize>) -> Self {
        Outcome {
            status,
            bytes_out,
            keep_client,
            pool,
            server: None,
        }
    }
}

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

/// Why a request found no server when every candidate was at its `max_conns`.
const ALL_FULL: &str = "every server is at its connection limit";

/// How long a connection keeps its burst state (one boxed future of a few kilobytes) after a
/// response before it waits in the low-memory state. A busy client sends its next request long
/// before; an idle one frees the memory soon.
const BURST_GRACE: Duration = Duration::from_millis(50);

/// What ended a wait for the next request.
enum Wake {
    Readable(io::Result<()>),
    Expired,
    Stop,
}

/// Why reading the next request head ended without a request.
enum NoRequest {
    /// The client closed, went idle past keepalive_timeout, or the switch is stopping.
    Closed,
    /// Answer with this status and close.
    Refuse(u16, &'static str),
}

/// Why an exchange with a server failed.
enum ExchangeError {
    /// A reused connection failed before any response byte: the server may have closed it
    /// while idle. Safe to retry an idempotent request without body on a new connection.
    Stale,
    /// A new connection broke (closed, reset, refused the request) before any response byte:
    /// the server failed, and an idempotent request without body may go to another one.
    Unanswered(String),
    /// Nothing usable came back (502), or nothing in time (504).
    Server { status: u16, why: String },
    /// The client's request body was invalid (400), late (408), or the client went away (0).
    Client { status: u16, why: String },
    /// Failure after the response head went to the client: nothing to do but close.
    AfterResponse(String),
}

pub(crate) struct Session {
    shared: Arc<Shared>,
    service: usize,
    client: Socket,
    peer: SocketAddr,
    /// The client's address as X-Forwarded-For carries it.
    client_text: ForwardedFor,
    inbuf: IoBuf,
    head: RequestHead,
    /// The request head as rebuilt for the server.
    upstream_head: Vec<u8>,
    server_buf: IoBuf,
    response: ResponseHead,
    /// Rebuilt response heads, error responses and chunk output.
    out: Vec<u8>,
    /// Re-framed chunks of a request body on their way to the server.
    chunk_scratch: Vec<u8>,
    tried: Vec<usize>,
    /// Method and target of the current request, kept for the access log.
    log_request: String,
    /// A field the pool's module adds to the current response.
    response_field: Option<ResponseField>,
    /// This connection's timeout slot, which also says when the switch is stopping.
    timer: Arc<Slot>,
    /// The client may still be sending what the switch did not read (a refused request's
    /// body, an upload cut short): closing must drain it (see `linger`).
    unread_input: bool,
    /// The last response went out held back for the FIN (`Then::More`, the connection closes
    /// after it): nothing is sent until our side shuts down or closes (see `linger`).
    response_corked: bool,
    relay: RelaySettings,
}

/// A closed connection's request memory goes back to the thread's free lists too: with a new
/// connection per request, freeing it to the allocator instead made every connection fault in
/// fresh pages for its buffers (1.3-1.9 page faults and a 16 KiB memset per request, measured
/// with perf under `CLOSE=1`).
impl Drop for Session {
    fn drop(&mut self) {
        self.inbuf.consume(self.inbuf.len());
        self.server_buf.consume(self.server_buf.len());
        self.give_back_workspace();
    }
}

impl Session {
    pub(crate) fn new(
        shared: Arc<Shared>,
        service: usize,
        client: Socket,
        peer: SocketAddr,
        timer: Arc<Slot>,
    ) -> Session {
        let settings = &shared.settings;
        let relay = RelaySettings {
            idle: settings.idle_timeout,
            splice_from: settings.splice.then_some(settings.splice_threshold),
        };
        Session {
            shared,
            service,
            client,
            peer,
            client_text: forwarded_for(peer.ip()),
            inbuf: IoBuf::unallocated(),
            head: RequestHead::default(),
            upstream_head: Vec::new(),
            server_buf: IoBuf::unallocated(),
            response: ResponseHead::default(),
            out: Vec::new(),
            chunk_scratch: Vec::new(),
            tried: Vec::new(),
            log_request: String::new(),
            response_field: None,
            timer,
            unread_input: false,
            response_corked: false,
            relay,
        }
    }

    fn service(&self) -> &Service {
        &self.shared.services[self.service]
    }

    pub(crate) async fn run(mut self) {
        let keepalive = self.shared.settings.keepalive_timeout;
        let mut head_deadline = Some(Instant::now() + self.shared.settings.header_timeout);
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
            // Boxed: carrying out requests takes several kilobytes of state, which an idle
            // connection should not keep in its task (BENCHMARKS.md, "memory"). One box serves
            // a whole burst of requests, so a busy connection allocates nothing per request.
            match Box::pin(self.serve_burst(head_deadline.take())).await {
                Burst::Idle => {
                    wait = keepalive.saturating_sub(BURST_GRACE);
                    self.tried = Vec::new();
                    self.log_request = String::new();
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

    /// Serves requests as long as the next one comes within [`BURST_GRACE`].
    async fn serve_burst(&mut self, head_deadline: Option<Instant>) -> Burst {
        let keepalive = self.shared.settings.keepalive_timeout;
        let mut head_deadline = head_deadline;
        loop {
            match self.serve_request(head_deadline.take()).await {
                Ok(true) => {}
                Ok(false) => return Burst::Close,
                Err(NoRequest::Closed) => return Burst::Gone,
                Err(NoRequest::Refuse(status, why)) => return Burst::Refuse(status, why),
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
        }
    }

    /// Reads the rest of a request head and carries the request out. `Ok(true)`: the client
    /// connection may carry another request.
    async fn serve_request(&mut self, head_deadline: Option<Instant>) -> Result<bool, NoRequest> {
        self.read_request_head(head_deadline).await?;
        let started = Instant::now();
        let outcome = self.handle_request(started).await;
        self.account(&outcome, started);
        Ok(outcome.keep_client && !self.timer.stopping())
    }

    /// Closes the client connection without losing the last response. Closing with unread
    /// bytes from the client (a pipelined request, the rest of a refused body, a stray CRLF)
    /// makes the kernel reset the connection and discard what it has not sent yet, which can
    /// destroy the response. So our side is shut down first, then what the client still sends
    /// is read and dropped, briefly.
    async fn linger(&mut self) {
        const LINGER_TIME: Duration = Duration::from_secs(2);
        const LINGER_BYTES: usize = 1 << 20;
        let shutdown = || rustix::net::shutdown(&self.client, rustix::net::Shutdown::Write);
        if self.response_corked {
            // The held-back answer leaves now, with the FIN in the same segment, before
            // anything the client sends meanwhile could turn the close into a reset.
            let _ = shutdown();
        }
        // Asked of the kernel, not of the reactor's readiness: bytes may have arrived since the
        // reactor last looked (or the socket never joined it).
        if !self.unread_input && self.inbuf.is_empty() && !self.client.has_unread_bytes() {
            // Nothing unread: a plain close cannot reset the connection.
            return;
        }
        if !self.response_corked {
            let _ = shutdown();
        }
        let deadline = Instant::now() + LINGER_TIME;
        self.inbuf.consume(self.inbuf.len());
        let mut dropped = 0;
        while dropped < LINGER_BYTES {
            match read_some(&self.client, &mut self.inbuf, Limit::Until(deadline)).await {
                Ok(0) | Err(_) => return,
                Ok(n) => {
                    dropped += n;
                    self.inbuf.consume(n);
                }
            }
        }
    }

    /// Waits until bytes of a request (or leftovers of a pipelined one) are in `inbuf`.
    ///
    /// Meanwhile the connection holds no request memory (it went back to the thread), and a
    /// stopping switch lets it go at once. `head_deadline` is the first request's: its head must
    /// be complete within header_timeout of the accept; later requests may wait
    /// keepalive_timeout for their first byte.
    async fn wait_for_request(&mut self, waiting: Await) -> Result<(), Waited> {
        let deadline = match waiting {
            Await::FirstHead(at) => self.timer.deadline_at(at),
            Await::KeepAlive(d) | Await::Grace(d) => self.timer.deadline_after(d),
        };
        // A connection that has not joined the reactor has no readiness to consult: a new
        // one's request has usually arrived with it, so it is read speculatively (socket.rs);
        // only a read that would block makes the socket join, in the wait below.
        let mut read_first = !self.client.is_registered();
        loop {
            // Empty lines before a request line are ignored (RFC 9112 section 2.2); dropping
            // them here keeps a stray CRLF after a body from counting as a started head.
            while let [b'\r' | b'\n', ..] = self.inbuf.filled() {
                self.inbuf.consume(1);
            }
            if !self.inbuf.is_empty() {
                return Ok(());
            }
            if read_first {
                match self.client.try_recv(self.inbuf.spare()) {
                    Ok(0) => return Err(Waited::Closed),
                    Ok(n) => {
                        self.inbuf.fill(n);
                        continue;
                    }
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                    Err(_) => return Err(Waited::Closed),
                }
            }
            self.give_back_workspace();
            // A hand-written wait: the state an idle connection keeps is only this.
            let (client, timer) = (&self.client, &self.timer);
            let woken = std::future::poll_fn(|cx| {
                if timer.stopping() {
                    return Poll::Ready(Wake::Stop);
                }
                if let Poll::Ready(result) = client.poll_read_ready(cx) {
                    return Poll::Ready(Wake::Readable(result));
                }
                match timer.poll_expired(deadline, cx) {
                    Poll::Ready(()) => Poll::Ready(Wake::Expired),
                    // Checked again now that the waker is registered: a stop that came after
                    // the first check found no waker to wake, and would be missed until the
                    // deadline.
                    Poll::Pending if timer.stopping() => Poll::Ready(Wake::Stop),
                    Poll::Pending => Poll::Pending,
                }
            })
            .await;
            match woken {
                Wake::Stop => return Err(Waited::Closed),
                Wake::Expired => {
                    return Err(match waiting {
                        // A new connection that sent nothing gets 408, like one that stopped
                        // half-way through its head; an idle keep-alive one is closed quietly.
                        Await::FirstHead(_) => {
                            Waited::Refuse(408, "request head not received in time")
                        }
                        Await::KeepAlive(_) => Waited::Closed,
                        Await::Grace(_) => Waited::GraceOver,
                    });
                }
                Wake::Readable(Err(_)) => return Err(Waited::Closed),
                // Readiness can be a false alarm (a new socket starts out "ready"): the read
                // says, and a read that finds nothing leads back to the wait.
                Wake::Readable(Ok(())) => read_first = true,
            }
        }
    }

    /// Reads until `self.head` holds a complete, valid request head; the first bytes are in
    /// `inbuf` already. The head must be complete by `head_deadline`, or header_timeout after
    /// its first byte.
    async fn read_request_head(&mut self, head_deadline: Option<Instant>) -> Result<(), NoRequest> {
        let deadline =
            head_deadline.unwrap_or_else(|| Instant::now() + self.shared.settings.header_timeout);
        self.take_workspace();
        let mut progress = HeadProgress::default();
        loop {
            if progress.worth_parsing(self.inbuf.filled()) {
                match parse_request(self.inbuf.filled_mut(), &mut self.head) {
                    Ok(true) => return self.check_received_body(),
                    Ok(false) => {}
                    Err(e) => return Err(NoRequest::Refuse(e.status, e.reason)),
                }
            }
            self.inbuf.make_room_for_head(MAX_HEAD_BYTES);
            match read_some(&self.client, &mut self.inbuf, Limit::Until(deadline)).await {
                Ok(0) => return Err(NoRequest::Closed),
                Ok(_) => {}
                Err(e) => return Err(head_not_read(e)),
            }
        }
    }

    /// The per-request memory: buffers and tables from the thread's free lists.
    fn take_workspace(&mut self) {
        if self.head.fields.capacity() == 0 {
            self.head.fields = recycle::take_fields();
            self.response.fields = recycle::take_fields();
            self.upstream_head = recycle::take_bytes();
            self.out = recycle::take_bytes();
        }
    }

    /// Gives the per-request memory back while the connection waits for its next request.
    fn give_back_workspace(&mut self) {
        self.inbuf.release();
        self.server_buf.release();
        recycle::give_fields(&mut self.head.fields);
        recycle::give_fields(&mut self.response.fields);
        recycle::give_bytes(&mut self.upstream_head);
        recycle::give_bytes(&mut self.out);
        recycle::give_bytes(&mut self.chunk_scratch);
        // Cleared, not freed: a client that waits for each answer comes back within the
        // burst grace, and freeing them made every such request allocate them again. They go
        // when the burst ends (run).
        self.tried.clear();
        self.log_request.clear();
    }

    /// A chunked body whose framing is already visibly broken in what was received with the
    /// head is refused before any server sees the request.
    fn check_received_body(&self) -> Result<(), NoRequest> {
        if self.head.framing == BodyFraming::Chunked {
            let received = self.inbuf.filled().get(self.head.len..).unwrap_or_default();
            if chunked::check_received(received).is_err() {
                return Err(NoRequest::Refuse(400, "invalid chunked body"));
            }
        }
        Ok(())
    }

    /// Sends a refusal for a request that could not be read, then the connection closes.
    async fn refuse(&mut self, status: u16, why: &str) {
        self.unread_input = true;
        self.out.clear();
        write_error(&mut self.out, status, why, ClientConnection::Close, true);
        stats::bump(&self.service().stats.local_errors);
        let _ = write_all(&self.client, &self.out, Limit::Idle(Duration::from_secs(5))).await;
        if self.shared.settings.access_log {
            tracing::info!(
                target: "tcpvs::access",
                "{} {} \"-\" {} {} -/- {}",
                self.service().name,
                self.peer,
                status,
                self.out.len(),
                why
            );
        }
    }

    /// Answers the current request with an error from the switch itself.
    async fn respond_locally(&mut self, status: u16, why: &str, pool: Option<usize>) -> Outcome {
        // The client may go on only if no unread request body is left on the connection.
        let keep = self.head.keep_alive && !self.head.has_body() && !self.timer.stopping();
        self.unread_input |= self.head.has_body();
        self.out.clear();
        let connection = client_connection(self.head.version, keep);
        write_error(&mut self.out, status, why, connection, !self.head.is_head);
        stats::bump(&self.service().stats.local_errors);
        let sent = write_all(&self.client, &self.out, Limit::Idle(self.relay.idle)).await;
        Outcome::local(status, self.out.len() as u64, keep && sent.is_ok(), pool)
    }

    /// Everything after the head is read: route, pick, connect, exchange.
    async fn handle_request(&mut self, started: Instant) -> Outcome {
        stats::bump(&self.service().stats.requests);
        self.response_field = None;
        if self.shared.settings.access_log {
            let buf = self.inbuf.filled();
            self.log_request.clear();
            self.log_request.push_str(self.head.method(buf));
            self.log_request.push(' ');
            self.log_request
                .push_str(&String::from_utf8_lossy(self.head.target.get(buf)));
        }
        let Some(pool_index) = self.route() else {
            self.release_head();
            return self
                .respond_locally(503, "no pool for this request", None)
                .await;
        };
        let shared = Arc::clone(&self.shared);
        let pool = &shared.pools[pool_index];
        self.tried.clear();
        let mut attempts = 0;
        // A request that reached no server may go to the next candidate: only idempotent ones
        // without body, and only with a Host of their own (the head is rebuilt once, and a
        // Host made up from the first server's address would name the wrong one).
        let may_retry = self.head.retryable() && self.head.host.is_some();
        let mut head_written = false;
        loop {
            let (lease, stream, reused) = match self.pick_or_queue(pool, &mut attempts).await {
                Ok(connection) => connection,
                Err((status, why)) => {
                    if !head_written {
                        self.release_head();
                    }
                    return self.respond_locally(status, why, Some(pool_index)).await;
                }
            };
            let backend = lease.backend();
            if !head_written {
                write_request_head(
                    &mut self.upstream_head,
                    &self.head,
                    self.inbuf.filled(),
                    self.client_text.as_bytes(),
                    &backend.host_field,
                );
                self.release_head();
                head_written = true;
            }

            let mut result = self.exchange(&lease, stream, reused, started).await;
            if matches!(result, Err(ExchangeError::Stale)) && self.head.retryable() {
                stats::bump(&backend.stats.response_errors);
                tracing::debug!(server = %backend.addr, "reused connection failed; retrying on a new one");
                result = match backend.connect(self.shared.settings.connect_timeout).await {
                    Ok(stream) => self.exchange(&lease, stream, false, started).await,
                    Err(e) => {
                        stats::bump(&backend.stats.connect_errors);
                        Err(ExchangeError::Unanswered(format!("connect failed: {e}")))
                    }
                };
            }
            let error = match result {
                Ok(mut outcome) => {
                    health::exchange_succeeded(pool, lease.server);
                    outcome.pool = Some(pool_index);
                    return outcome;
                }
                Err(error) => error,
            };
            let (status, why) = match error {
                ExchangeError::Unanswered(why) => {
                    stats::bump(&backend.stats.response_errors);
                    self.server_failed(pool, lease.server, &why);
                    if may_retry && attempts < self.shared.settings.connect_attempts {
                        tracing::debug!(server = %backend.addr, "no answer ({why}); trying the next server");
                        continue;
                    }
                    (502, why)
                }
                ExchangeError::Stale => (502, "server closed the connection".to_string()),
                ExchangeError::Server { status, why } => {
                    stats::bump(&backend.stats.response_errors);
                    self.server_failed(pool, lease.server, &why);
                    (status, why)
                }
                ExchangeError::Client { status, why } => (status, why),
                ExchangeError::AfterResponse(why) => {
                    // The relay broke off; the client may be mid-request.
                    self.unread_input = true;
                    stats::bump(&backend.stats.response_errors);
                    tracing::debug!(server = %backend.addr, "relay failed after the response head: {why}");
                    return Outcome {
                        status: self.response.status,
                        bytes_out: 0,
                        keep_client: false,
                        pool: Some(pool_index),
                        server: Some(backend.addr),
                    };
                }
            };
            tracing::debug!(server = %backend.addr, status, "exchange failed: {why}");
            if status == 0 {
                // The client went away: nobody to answer.
                return Outcome::local(0, 0, false, Some(pool_index));
            }
            let mut outcome = self
                .respond_locally(status, short_reason(status), Some(pool_index))
                .await;
            // The request body may be half read: the connection cannot go on.
            outcome.keep_client &= !self.head.has_body();
            outcome.server = Some(backend.addr);
            return outcome;
        }
    }

    /// A server failed this request: passive health detection hears of it, and the log
    /// does, at most once a second per server.
    fn server_failed(&self, pool: &Pool, server: usize, why: &str) {
        let backend = &pool.backends[server];
        if let Some(unlogged) = backend.may_warn(self.timer.now_ms()) {
            if unlogged > 0 {
                tracing::warn!(pool = %pool.name, server = %backend.addr, "{why} ({unlogged} more failures since the last warning)");
            } else {
                tracing::warn!(pool = %pool.name, server = %backend.addr, "{why}");
            }
        }
        health::exchange_failed(pool, server, why.to_string());
    }

    /// [`Session::pick_and_connect`], and when every usable server is at its `max_conns`, a
    /// wait in the pool's queue for up to `queue_timeout`: each request of the pool that ends
    /// wakes the longest waiting one, which looks again.
    async fn pick_or_queue<'p>(
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

    /// Drops the current request head from the input: what follows it is its body or the next
    /// request. The head's spans must not be read after this.
    fn release_head(&mut self) {
        self.inbuf.consume(self.head.len);
        self.head.len = 0;
    }

    /// The pool for the current request, by the service's rules.
    fn route(&self) -> Option<usize> {
        let buf = self.inbuf.filled();
        let headers = self.head.lookup(buf);
        let view = self.request_view(buf, &headers);
        self.service().rules.route(&view)
    }

    fn request_view<'a>(
        &'a self,
        buf: &'a [u8],
        headers: &'a dyn tcpvs_modules::HeaderLookup,
    ) -> RequestView<'a> {
        RequestView {
            method: self.head.method(buf),
            path: self.head.path.get(buf),
            query: self.head.query.map(|q| q.get(buf)),
            host: self.head.host.map(|h| h.get(buf)),
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
        let connect_timeout = self.shared.settings.connect_timeout;
        let mut connects = 0;
        let mut full = 0;
        // Every server can be tried at most once, full ones included.
        while *attempts < max_attempts && self.tried.len() < pool.servers.len() {
            // A backup the module does not offer yet (a primary still counts as up) takes the
            // request when the module has no candidate left and a primary failed it; primaries
            // that are merely full make it queue instead.
            let Some(server) = self.pick(pool).or_else(|| {
                (*attempts > 0)
                    .then(|| pool.backup_candidate(&self.tried))
                    .flatten()
            }) else {
                break;
            };
            if self.tried.contains(&server) {
                tracing::error!(pool = %pool.name, "scheduler `{}` answered a server it was told was tried", pool.scheduler.name());
                break;
            }
            self.tried.push(server);
            let Some(lease) = pool.try_lease(server) else {
                // At its max_conns: the next candidate, without spending an attempt.
                full += 1;
                continue;
            };
            connects += 1;
            *attempts += 1;
            let backend = lease.backend();
            let retryable = self.head.retryable();
            let now_ms = self.timer.now_ms();
            let connection =
                match backend.take_idle(self.timer.worker(), now_ms, idle_age, !retryable) {
                    Some(stream) => Some((stream, true)),
                    None => match backend.connect(connect_timeout).await {
                        Ok(stream) => Some((stream, false)),
                        Err(e) => {
                            stats::bump(&backend.stats.connect_errors);
                            self.server_failed(pool, server, &format!("connect failed: {e}"));
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

    /// Sends the request to the server on `server` and relays the response to the client.
    async fn exchange(
        &mut self,
        lease: &Lease<'_>,
        server: Socket,
        reused: bool,
        started: Instant,
    ) -> Result<Outcome, ExchangeError> {
        let backend = lease.backend();
        let request_kind = RequestKind {
            is_head: self.head.is_head,
            is_connect: self.head.is_connect,
        };
        let idle = self.relay.idle;
        let client_version = self.head.version;
        self.server_buf.consume(self.server_buf.len());
        let upload_meter = Meter::default();
        let download_meter = Meter::default();

        // 1. The head, with the body too when it is small and already here (one writev).
        let mut body_left = self.head.framing;
        let mut with_head: &[u8] = &[];
        if let BodyFraming::Length(n) = self.head.framing {
            if n <= self.inbuf.len() as u64 && n <= 64 * 1024 {
                with_head = &self.inbuf.filled()[..n as usize];
                body_left = BodyFraming::Empty;
            }
        }
        // Pushed at once even when a body follows: the client may wait for 100 Continue
        // before sending it, and MSG_MORE would hold the head back for up to 200 ms.
        if let Err(e) = write_both(
            &server,
            &self.upstream_head,
            with_head,
            Then::Push,
            Limit::Idle(idle),
        )
        .await
        {
            return Err(if reused {
                ExchangeError::Stale
            } else {
                ExchangeError::Unanswered(format!("sending the request: {e}"))
            });
        }
        let early_body = with_head.len();
        self.inbuf.consume(early_body);
        stats::bump(&backend.stats.requests);

        // 2. The request body goes up while the response head is awaited: a server may answer
        //    100 Continue before the body, or its final status before reading all of it.
        // 3. The response comes down, the upload still going on if it has not ended: a server
        //    may stream its answer while it reads (full duplex).
        let uploading_at_start = !matches!(body_left, BodyFraming::Empty);
        let phase = {
            let Session {
                client,
                inbuf,
                server_buf,
                response,
                out,
                chunk_scratch,
                relay,
                head,
                timer,
                response_field,
                ..
            } = &mut *self;
            let client: &Socket = client;
            let relay: &RelaySettings = relay;
            let mut upload = pin!(upload_body(
                client,
                inbuf,
                &server,
                body_left,
                relay,
                chunk_scratch,
                &upload_meter
            ));
            let mut uploading = uploading_at_start;
            let mut upload_complete = !uploading;
            {
                let mut response_head = pin!(read_response_head(
                    &server,
                    server_buf,
                    response,
                    request_kind,
                    client,
                    client_version,
                    out,
                    idle,
                    &upload_meter,
                    reused,
                ));
                loop {
                    tokio::select! {
                        biased;
                        result = &mut response_head => {
                            result?;
                            break;
                        }
                        sent = &mut upload, if uploading => {
                            uploading = false;
                            match sent {
                                Ok(()) => upload_complete = true,
                                // The server stopped reading; its response may say why.
                                Err(RelayError::Write(_)) => {}
                                Err(e) => return Err(request_body_error(e)),
                            }
                        }
                    }
                }
            }
            stats::bump(&backend.stats.responses);
            stats::add(
                &backend.stats.response_time_us,
                started.elapsed().as_micros() as u64,
            );

            let status = response.status;
            if status == 101 || (head.is_connect && (200..300).contains(&status)) {
                if status == 101 && !head.upgrade {
                    return Err(ExchangeError::Server {
                        status: 502,
                        why: "101 to a request that did not ask to upgrade".into(),
                    });
                }
                if !upload_complete {
                    return Err(ExchangeError::Server {
                        status: 502,
                        why: "tunnel before the request body ended".into(),
                    });
                }
                Phase::Tunnel
            } else {
                let framing = response.framing;
                let dechunk = client_version == Version::Http10 && framing == BodyFraming::Chunked;
                // Announced now, so an upload still running means the connection must close.
                let keep_client = head.keep_alive
                    && upload_complete
                    && !dechunk
                    && framing != BodyFraming::UntilClose
                    && !timer.stopping();
                let connection = if keep_client {
                    client_connection(client_version, true)
                } else {
                    ClientConnection::Close
                };
                out.clear();
                write_response_head(
                    out,
                    response,
                    server_buf.filled(),
                    connection,
                    client_version,
                );
                if let Some(field) = response_field {
                    add_field_to_head(out, field.name.as_bytes(), field.value.as_bytes());
                }
                let head_bytes = out.len() as u64;
                server_buf.consume(response.len);
                let relayed = {
                    let mut download = pin!(relay_response(
                        client,
                        &server,
                        server_buf,
                        out,
                        framing,
                        dechunk,
                        // Closing after: the FIN leaves with the last bytes.
                        Then::more_if(!keep_client),
                        relay,
                        &download_meter
                    ));
                    loop {
                        tokio::select! {
                            biased;
                            relayed = &mut download => break relayed,
                            sent = &mut upload, if uploading => {
                                uploading = false;
                                upload_complete = sent.is_ok();
                            }
                        }
                    }
                };
                Phase::Relayed(Relayed {
                    status,
                    relayed,
                    keep_client,
                    upload_complete,
                    head_bytes,
                })
            }
        };
        stats::add(
            &backend.stats.bytes_in,
            (self.upstream_head.len() + early_body) as u64 + upload_meter.get(),
        );
        let Relayed {
            status,
            relayed,
            keep_client,
            upload_complete,
            head_bytes,
        } = match phase {
            Phase::Tunnel => {
                return self
                    .open_tunnel(backend.addr, &backend.stats, &server)
                    .await
            }
            Phase::Relayed(relayed) => relayed,
        };
        self.response_corked = !keep_client;
        let bytes_out = head_bytes + download_meter.get();
        stats::add(&backend.stats.bytes_out, bytes_out);
        if let Err(e) = relayed {
            return Err(ExchangeError::AfterResponse(e.to_string()));
        }

        // 4. The server connection goes back to the idle list if the exchange ended cleanly
        //    on both sides with nothing extra pending.
        self.unread_input |= !upload_complete;
        if self.response.server_keep_alive && upload_complete && self.server_buf.is_empty() {
            backend.park(
                self.timer.worker(),
                server,
                self.shared.settings.server_idle_max,
                self.timer.now_ms(),
            );
        }
        Ok(Outcome {
            status,
            bytes_out,
            keep_client,
            pool: None,
            server: Some(backend.addr),
        })
    }

    /// After 101 Switching Protocols (or 2xx to CONNECT): the response head goes to the client,
    /// then bytes flow both ways until the tunnel ends.
    async fn open_tunnel(
        &mut self,
        server_addr: SocketAddr,
        backend_stats: &stats::ServerStats,
        server: &Socket,
    ) -> Result<Outcome, ExchangeError> {
        let status = self.response.status;
        let connection = if status == 101 {
            ClientConnection::Upgrade
        } else {
            ClientConnection::Persistent
        };
        self.out.clear();
        write_response_head(
            &mut self.out,
            &self.response,
            self.server_buf.filled(),
            connection,
            self.head.version,
        );
        self.server_buf.consume(self.response.len);
        let head_bytes = self.out.len() as u64;
        write_all(&self.client, &self.out, Limit::Idle(self.relay.idle))
            .await
            .map_err(|e| ExchangeError::AfterResponse(e.to_string()))?;
        let (moved, ended) = tunnel(
            &self.client,
            &mut self.inbuf,
            server,
            &mut self.server_buf,
            self.relay.splice_from.is_some(),
            self.relay.idle,
        )
        .await;
        if let Err(e) = ended {
            tracing::debug!(server = %server_addr, "tunnel ended: {e}");
        }
        let bytes_out = head_bytes + moved.server_to_client;
        stats::add(&backend_stats.bytes_in, moved.client_to_server);
        stats::add(&backend_stats.bytes_out, bytes_out);
        Ok(Outcome {
            status,
            bytes_out,
            keep_client: false,
            pool: None,
            server: Some(server_addr),
        })
    }

    /// Counts the request and writes its access-log line.
    fn account(&self, outcome: &Outcome, started: Instant) {
        if !self.shared.settings.access_log {
            return;
        }
        let pool = outcome
            .pool
            .map_or("-", |p| self.shared.pools[p].name.as_str());
        let server = outcome
            .server
            .map_or_else(|| "-".to_string(), |s| s.to_string());
        tracing::info!(
            target: "tcpvs::access",
            "{} {} \"{}\" {} {} {}/{} {}us",
            self.service().name,
            self.peer,
            self.log_request,
            outcome.status,
            outcome.bytes_out,
            pool,
            server,
            started.elapsed().as_micros()
        );
    }
}

/// Where an exchange stands once the response head is in.
enum Phase {
    /// 101 or 2xx to CONNECT: the connection becomes a tunnel.
    Tunnel,
    Relayed(Relayed),
}

/// A response relayed to the client (or failed half-way, see `relayed`).
struct Relayed {
    status: u16,
    relayed: Result<(), RelayError>,
    keep_client: bool,
    upload_complete: bool,
    head_bytes: u64,
}

/// Sends the rest of the request body (what was not sent with the head) to the server.
async fn upload_body(
    client: &Socket,
    inbuf: &mut IoBuf,
    server: &Socket,
    framing: BodyFraming,
    relay: &RelaySettings,
    scratch: &mut Vec<u8>,
    meter: &Meter,
) -> Result<(), RelayError> {
    match framing {
        BodyFraming::Empty | BodyFraming::UntilClose => Ok(()),
        BodyFraming::Length(n) => {
            relay_length(client, inbuf, server, &[], n, Then::Push, relay, meter).await
        }
        BodyFraming::Chunked => {
            scratch.clear();
            relay_chunked(
                client,
                inbuf,
                server,
                ChunkedOutput::Chunked,
                relay,
                scratch,
                meter,
            )
            .await
        }
    }
}

/// Sends the response head in `out` and then the body, as its framing says. `last` is what
/// follows the response on the client connection: `Then::More` when it closes right after.
#[allow(clippy::too_many_arguments)]
async fn relay_response(
    client: &Socket,
    server: &Socket,
    server_buf: &mut IoBuf,
    out: &mut Vec<u8>,
    framing: BodyFraming,
    dechunk: bool,
    last: Then,
    relay: &RelaySettings,
    meter: &Meter,
) -> Result<(), RelayError> {
    let limit = Limit::Idle(relay.idle);
    match framing {
        BodyFraming::Empty => send_all(client, out, last, limit)
            .await
            .map_err(RelayError::Write),
        // The head goes out with the first body bytes (one write).
        BodyFraming::Length(n) => {
            relay_length(server, server_buf, client, out, n, last, relay, meter).await
        }
        BodyFraming::Chunked => {
            let output = if dechunk {
                ChunkedOutput::Decoded
            } else {
                ChunkedOutput::Chunked
            };
            relay_chunked(server, server_buf, client, output, relay, out, meter).await
        }
        BodyFraming::UntilClose => {
            write_all(client, out, limit)
                .await
                .map_err(RelayError::Write)?;
            relay_until_close(server, server_buf, client, relay, meter).await
        }
    }
}

fn short_reason(status: u16) -> &'static str {
    match status {
        400 => "invalid request body",
        408 => "request body not received in time",
        502 => "the server failed to answer",
        504 => "the server did not answer in time",
        _ => "",
    }
}

/// Maps a failure of the request body relay to what the client is told.
fn request_body_error(e: RelayError) -> ExchangeError {
    match e {
        RelayError::Framing(e) => ExchangeError::Client {
            status: 400,
            why: e.to_string(),
        },
        RelayError::Read(e) if e.kind() == io::ErrorKind::TimedOut => ExchangeError::Client {
            status: 408,
            why: "request body stalled".into(),
        },
        RelayError::Truncated | RelayError::Read(_) => ExchangeError::Client {
            status: 0,
            why: "client closed during the request body".into(),
        },
        RelayError::Write(e) => ExchangeError::Server {
            status: 502,
            why: format!("sending request body: {e}"),
        },
    }
}

/// Reads the server's answer until a final (or 101) response head is in `response`. Interim
/// 1xx responses go on to HTTP/1.1 clients as they arrive.
///
/// The server may stay silent for `idle` at most, counting only time in which no byte moved
/// either way: while the request body is still going up (`upload` advancing), silence is fine.
#[allow(clippy::too_many_arguments)]
async fn read_response_head(
    server: &Socket,
    server_buf: &mut IoBuf,
    response: &mut ResponseHead,
    kind: RequestKind,
    client: &Socket,
    client_version: Version,
    out: &mut Vec<u8>,
    idle: Duration,
    upload: &Meter,
    reused: bool,
) -> Result<(), ExchangeError> {
    let mut received_any = false;
    let mut uploaded = upload.get();
    let mut progress = HeadProgress::default();
    loop {
        if !server_buf.is_empty() {
            received_any = true;
        }
        if !server_buf.is_empty() && progress.worth_parsing(server_buf.filled()) {
            match parse_response(server_buf.filled(), kind, response) {
                Ok(true) if response.is_informational() && response.status != 101 => {
                    if client_version == Version::Http11 {
                        out.clear();
                        write_response_head(
                            out,
                            response,
                            server_buf.filled(),
                            ClientConnection::Persistent,
                            Version::Http11,
                        );
                        write_all(client, out, Limit::Idle(idle))
                            .await
                            .map_err(|_| ExchangeError::Client {
                                status: 0,
                                why: "client closed".into(),
                            })?;
                    }
                    server_buf.consume(response.len);
                    progress = HeadProgress::default();
                    continue;
                }
                Ok(true) => return Ok(()),
                Ok(false) => {}
                Err(bad) => {
                    return Err(ExchangeError::Server {
                        status: 502,
                        why: bad.to_string(),
                    })
                }
            }
        }
        server_buf.make_room_for_head(MAX_HEAD_BYTES);
        match read_some(server, server_buf, Limit::Idle(idle)).await {
            Ok(0) if reused && !received_any => return Err(ExchangeError::Stale),
            Ok(0) if !received_any => {
                return Err(ExchangeError::Unanswered(
                    "server closed before any response byte".into(),
                ))
            }
            Ok(0) => {
                return Err(ExchangeError::Server {
                    status: 502,
                    why: "server closed before a complete response head".into(),
                })
            }
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::TimedOut => {
                let now = upload.get();
                if now == uploaded {
                    return Err(ExchangeError::Server {
                        status: 504,
                        why: "no response in time".into(),
                    });
                }
                uploaded = now;
            }
            Err(_) if reused && !received_any => return Err(ExchangeError::Stale),
            Err(e) if !received_any => {
                return Err(ExchangeError::Unanswered(format!(
                    "reading the response: {e}"
                )))
            }
            Err(e) => {
                return Err(ExchangeError::Server {
                    status: 502,
                    why: format!("reading response: {e}"),
                })
            }
        }
    }
}
