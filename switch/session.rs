//! One client connection, request after request. The data path reads top to bottom:
//!
//! accept (listener.rs) -> [`Session::read_request_head`] -> [`Session::route`] (rules) ->
//! [`Session::pick_and_connect`] (module, idle reuse or connect) -> [`Session::exchange`]
//! (send head, relay bodies, tunnel) -> [`Session::account`] (stats, access log).
//!
//! Every request on a keep-alive connection is routed and picked again, so one connection can
//! reach several pools. This file holds the connection's life (bursts of requests, refusing,
//! closing) and [`Session::handle_request`], which strings the steps together; `read_head.rs`
//! reads the PROXY header, waits for requests and reads their heads, `tls.rs` does a TLS
//! service's handshake before the first request, `route.rs` routes, picks and connects,
//! `exchange.rs` talks to the server. A `tls-passthrough` connection takes another way after
//! the PROXY header: `passthrough.rs` (ClientHello, route by server name, pick, tunnel).

mod close;
mod exchange;
mod failure;
mod passthrough;
mod read_head;
mod route;
mod tls;

use failure::{short_reason, ExchangeError};

use crate::access_log;
use crate::buffer::IoBuf;
use crate::config::ServiceMode;
use crate::edge::client_stream::ClientStream;
use crate::edge::proxy_protocol;
use crate::http::chunked;
use crate::http::rewrite::{
    client_connection, forwarded_for, write_request_head, ClientConnection, ForwardedFor, Scheme,
};
use crate::http::status::write_error;
use crate::http::{
    parse_request, BodyFraming, HeadProgress, RequestHead, ResponseHead, MAX_HEAD_BYTES,
};
use crate::recycle;
use crate::relay::RelaySettings;
use crate::shared::Shared;
use crate::socket::Socket;
use crate::state::control::{self, Failure};
use crate::state::generation::{Generation, Service};
use crate::state::stats;
use crate::stream::{read_some, write_all, Io, Limit};
use crate::timeouts::Slot;
use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::task::Poll;
use std::time::Duration;
use tcpvs_modules::ResponseField;
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

pub(crate) struct Session {
    shared: Arc<Shared>,
    /// The configuration the current request runs under, and the service's index in it. A
    /// new request takes the current generation (a reload happened meanwhile) when its service
    /// is still there.
    generation: Arc<Generation>,
    service: usize,
    /// A reload removed this connection's service: it closes after the request in progress.
    service_gone: bool,
    client: ClientStream,
    peer: SocketAddr,
    /// The address the client connected to, when a PROXY protocol header named it.
    destination: Option<SocketAddr>,
    /// The TLS server name the client asked for (SNI), for `sni` rules.
    sni: Option<Box<str>>,
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
    /// The server whose failure the request's next attempt retries (counted there when the
    /// attempt is made).
    retry_from: Option<usize>,
    /// What the access log keeps of the current request's head.
    log_request: access_log::Request,
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
        generation: Arc<Generation>,
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
            generation,
            service,
            service_gone: false,
            client: ClientStream::plain(client),
            peer,
            destination: None,
            sni: None,
            client_text: forwarded_for(peer.ip()),
            inbuf: IoBuf::unallocated_for_heads(),
            head: RequestHead::default(),
            upstream_head: Vec::new(),
            server_buf: IoBuf::unallocated(),
            response: ResponseHead::default(),
            out: Vec::new(),
            chunk_scratch: Vec::new(),
            tried: Vec::new(),
            retry_from: None,
            log_request: access_log::Request::default(),
            response_field: None,
            timer,
            unread_input: false,
            response_corked: false,
            relay,
        }
    }

    fn service(&self) -> &Service {
        &self.generation.services[self.service]
    }

    /// At a request's start: moves to the current configuration if a reload happened, by the
    /// service's name. One atomic load when nothing changed.
    fn follow_reloads(&mut self) {
        let current = self.shared.generation.load();
        if Arc::ptr_eq(&current, &self.generation) {
            return;
        }
        match current.service(&self.service().name) {
            Some((index, _)) => {
                self.service = index;
                self.generation = arc_swap::Guard::into_inner(current);
            }
            // Removed: this request still runs under the rules it came with, then the
            // connection closes (its listener is closed already).
            None => self.service_gone = true,
        }
    }

    pub(crate) async fn run(mut self) {
        let keepalive = self.shared.settings.keepalive_timeout;
        // The PROXY header, the TLS handshake or ClientHello and the first request's head are
        // all due by this.
        let connection_deadline = Instant::now() + self.shared.settings.header_timeout;
        let mut head_deadline = Some(connection_deadline);
        let mut wait = keepalive;
        if self.service().proxy_protocol {
            // Boxed: read once, its state need not stay in the connection's task.
            if !Box::pin(self.read_proxy_header(connection_deadline)).await {
                return;
            }
        }
        if self.service().mode == ServiceMode::TlsPassthrough {
            Box::pin(self.pass_through(connection_deadline)).await;
            return;
        }
        if let Some(config) = self.service().tls.clone() {
            if !Box::pin(self.start_tls(config, connection_deadline)).await {
                return;
            }
        }
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

    /// Carries out the request whose head was read. `true`: the client connection may carry
    /// another request.
    async fn serve_request(&mut self) -> bool {
        let started = Instant::now();
        let outcome = self.handle_request(started).await;
        self.account(&outcome, started);
        outcome.keep_client && !self.timer.stopping() && !self.service_gone
    }

    /// Sends a refusal for a request that could not be read, then the connection closes.
    async fn refuse(&mut self, status: u16, why: &str) {
        self.unread_input = true;
        self.out.clear();
        write_error(&mut self.out, status, why, ClientConnection::Close, true);
        stats::bump(&self.service().stats.local_errors);
        self.service().stats.classes.count(status);
        let _ = write_all(&self.client, &self.out, Limit::Idle(Duration::from_secs(5))).await;
        self.shared.access_log.write(&access_log::Entry {
            service: &self.service().name,
            client: self.peer,
            request: None,
            status,
            bytes: self.out.len() as u64,
            pool: None,
            server: None,
            end: access_log::End::Refused(why),
        });
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
        self.follow_reloads();
        stats::bump(&self.service().stats.requests);
        self.response_field = None;
        self.shared
            .access_log
            .capture(&mut self.log_request, &self.head, self.inbuf.filled());
        if self.head.is_connect && !self.service().connect {
            // A tunnel would carry any bytes to the chosen server past routing,
            // X-Forwarded-For and framing checks (design.md, "Decided"): only by choice.
            self.release_head();
            return self
                .respond_locally(405, "CONNECT is not allowed on this service", None)
                .await;
        }
        let Some(pool_index) = self.route() else {
            self.release_head();
            return self
                .respond_locally(503, "no pool for this request", None)
                .await;
        };
        let generation = Arc::clone(&self.generation);
        let pool = &generation.pools[pool_index];
        self.tried.clear();
        self.retry_from = None;
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
                let scheme = match self.client.tls() {
                    None => Scheme::Http,
                    Some(_) => Scheme::Https,
                };
                write_request_head(
                    &mut self.upstream_head,
                    &self.head,
                    self.inbuf.filled(),
                    self.client_text.as_bytes(),
                    &backend.host_field,
                    scheme,
                );
                self.release_head();
                head_written = true;
            }

            let mut result = self.exchange(&lease, stream, reused, started).await;
            if matches!(result, Err(ExchangeError::Stale)) && self.head.retryable() {
                stats::bump(&backend.stats.response_errors);
                stats::bump(&backend.stats.retries);
                tracing::debug!(server = %backend.addr, "reused connection failed; retrying on a new one");
                result = match self.open_connection(backend).await {
                    Ok(stream) => self.exchange(&lease, stream, false, started).await,
                    Err(route::ConnectFailure::OutOfDescriptors) => Err(ExchangeError::Local {
                        status: 503,
                        why: route::OUT_OF_DESCRIPTORS.to_string(),
                    }),
                    Err(route::ConnectFailure::Server(failure)) => {
                        Err(ExchangeError::Unanswered(failure))
                    }
                };
            }
            let error = match result {
                Ok(mut outcome) => {
                    control::exchange_succeeded(&self.shared.generation, pool, lease.server);
                    outcome.pool = Some(pool_index);
                    return outcome;
                }
                Err(error) => error,
            };
            let (status, why) = match error {
                ExchangeError::Unanswered(failure) => {
                    stats::bump(&backend.stats.response_errors);
                    let why = failure.why.clone();
                    self.server_failed(pool, lease.server, failure);
                    if may_retry && attempts < self.shared.settings.connect_attempts {
                        self.retry_from = Some(lease.server);
                        tracing::debug!(server = %backend.addr, "no answer ({why}); trying the next server");
                        continue;
                    }
                    (502, why)
                }
                ExchangeError::Stale => (502, "server closed the connection".to_string()),
                ExchangeError::Server { status, failure } => {
                    stats::bump(&backend.stats.response_errors);
                    if status == 504 {
                        stats::bump(&backend.stats.timeouts);
                    }
                    let why = failure.why.clone();
                    self.server_failed(pool, lease.server, failure);
                    (status, why)
                }
                ExchangeError::Client { status, why } | ExchangeError::Local { status, why } => {
                    (status, why)
                }
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

    /// Drops the current request head from the input: what follows it is its body or the next
    /// request. The head's spans must not be read after this.
    fn release_head(&mut self) {
        self.inbuf.consume(self.head.len);
        self.head.len = 0;
    }

    /// Counts the request and writes its access-log line.
    fn account(&self, outcome: &Outcome, started: Instant) {
        let elapsed = started.elapsed();
        if outcome.status != 0 {
            // Status 0: the client went away before any answer; nothing was answered.
            let service = &self.service().stats;
            service.classes.count(outcome.status);
            service.duration.record(elapsed);
        }
        self.shared.access_log.write(&access_log::Entry {
            service: &self.service().name,
            client: self.peer,
            request: Some(&self.log_request),
            status: outcome.status,
            bytes: outcome.bytes_out,
            pool: outcome.pool.map(|p| self.generation.pools[p].name.as_str()),
            server: outcome.server,
            end: access_log::End::Took(elapsed),
        });
    }
}
