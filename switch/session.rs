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
use crate::http::chunked;
use crate::http::response::RequestKind;
use crate::http::rewrite::{
    add_field_to_head, client_connection, write_request_head, write_response_head, ClientConnection,
};
use crate::http::status::write_error;
use crate::http::{
    parse_request, parse_response, BodyFraming, RequestHead, ResponseHead, Version, MAX_HEAD_BYTES,
};
use crate::relay::{
    relay_chunked, relay_length, relay_until_close, tunnel, ChunkedOutput, Meter, RelayError,
    RelaySettings,
};
use crate::stats;
use crate::stream::{read_some, write_all, write_both, Limit, Then};
use crate::upstream::{Lease, Pool};
use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tcpvs_modules::{RequestView, ResponseField};
use tokio::net::TcpStream;
use tokio::sync::watch;
use tokio::time::Instant;

/// Client read buffer to start with; it grows to [`MAX_HEAD_BYTES`] only for large heads.
const CLIENT_BUFFER_BYTES: usize = 16 * 1024;
const SERVER_BUFFER_BYTES: usize = 16 * 1024;

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
    client: TcpStream,
    peer: SocketAddr,
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
    shutdown: watch::Receiver<bool>,
    relay: RelaySettings,
}

impl Session {
    pub(crate) fn new(
        shared: Arc<Shared>,
        service: usize,
        client: TcpStream,
        peer: SocketAddr,
    ) -> Session {
        let settings = &shared.settings;
        let relay = RelaySettings {
            idle: settings.idle_timeout,
            splice_from: settings.splice.then_some(settings.splice_threshold),
        };
        let shutdown = shared.shutdown.clone();
        Session {
            shared,
            service,
            client,
            peer,
            inbuf: IoBuf::with_capacity(CLIENT_BUFFER_BYTES),
            head: RequestHead::default(),
            upstream_head: Vec::with_capacity(1024),
            server_buf: IoBuf::with_capacity(SERVER_BUFFER_BYTES),
            response: ResponseHead::default(),
            out: Vec::with_capacity(1024),
            chunk_scratch: Vec::new(),
            tried: Vec::new(),
            log_request: String::new(),
            response_field: None,
            shutdown,
            relay,
        }
    }

    fn service(&self) -> &Service {
        &self.shared.services[self.service]
    }

    pub(crate) async fn run(mut self) {
        let mut first = true;
        loop {
            match self.read_request_head(first).await {
                Ok(()) => {}
                Err(NoRequest::Closed) => return,
                Err(NoRequest::Refuse(status, why)) => {
                    self.refuse(status, why).await;
                    break;
                }
            }
            first = false;
            let started = Instant::now();
            let outcome = self.handle_request().await;
            self.account(&outcome, started);
            if !outcome.keep_client || *self.shutdown.borrow() {
                break;
            }
        }
        self.linger().await;
    }

    /// Closes the client connection without losing the last response. Closing with unread
    /// bytes from the client (a pipelined request, the rest of a refused body) makes the kernel
    /// reset the connection, which can destroy the response before the client reads it. So our
    /// side is shut down first, then what the client still sends is read and dropped, briefly.
    async fn linger(&mut self) {
        const LINGER_TIME: Duration = Duration::from_secs(2);
        const LINGER_BYTES: usize = 1 << 20;
        let _ = rustix::net::shutdown(&self.client, rustix::net::Shutdown::Write);
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

    /// Reads until `self.head` holds a complete, valid request head.
    ///
    /// The first head of a connection must be complete within header_timeout of the accept;
    /// later ones may wait keepalive_timeout for their first byte, then get header_timeout.
    async fn read_request_head(&mut self, first: bool) -> Result<(), NoRequest> {
        let settings = &self.shared.settings;
        let header_timeout = settings.header_timeout;
        let keepalive_timeout = settings.keepalive_timeout;
        let mut deadline =
            (first || !self.inbuf.is_empty()).then(|| Instant::now() + header_timeout);
        loop {
            if !self.inbuf.is_empty() {
                match parse_request(self.inbuf.filled_mut(), &mut self.head) {
                    Ok(true) => return self.check_received_body(),
                    Ok(false) => {}
                    Err(e) => return Err(NoRequest::Refuse(e.status, e.reason)),
                }
            }
            self.inbuf.make_room_for_head(MAX_HEAD_BYTES);
            let limit = match deadline {
                Some(at) => Limit::Until(at),
                None => Limit::Idle(keepalive_timeout),
            };
            let waiting_idle = deadline.is_none();
            let read = tokio::select! {
                read = read_some(&self.client, &mut self.inbuf, limit) => read,
                _ = self.shutdown.wait_for(|stop| *stop), if waiting_idle => return Err(NoRequest::Closed),
            };
            match read {
                Ok(0) => return Err(NoRequest::Closed),
                Ok(_) => {
                    if deadline.is_none() {
                        deadline = Some(Instant::now() + header_timeout);
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::TimedOut => {
                    // A keep-alive connection that stays silent is closed quietly; a head
                    // that started (or a new connection that sent nothing) gets 408.
                    return Err(if waiting_idle {
                        NoRequest::Closed
                    } else {
                        NoRequest::Refuse(408, "request head not received in time")
                    });
                }
                Err(_) => return Err(NoRequest::Closed),
            }
        }
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
        self.out.clear();
        write_error(&mut self.out, status, why, true);
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
        let keep = self.head.keep_alive && !self.head.has_body() && !*self.shutdown.borrow();
        self.out.clear();
        write_error(&mut self.out, status, why, !keep);
        stats::bump(&self.service().stats.local_errors);
        let sent = write_all(&self.client, &self.out, Limit::Idle(self.relay.idle)).await;
        Outcome::local(status, self.out.len() as u64, keep && sent.is_ok(), pool)
    }

    /// Everything after the head is read: route, pick, connect, exchange.
    async fn handle_request(&mut self) -> Outcome {
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
        let (lease, stream, reused) = match self.pick_and_connect(pool).await {
            Ok(connection) => connection,
            Err((status, why)) => {
                self.release_head();
                return self.respond_locally(status, why, Some(pool_index)).await;
            }
        };
        let backend = lease.backend();
        write_request_head(
            &mut self.upstream_head,
            &self.head,
            self.inbuf.filled(),
            self.peer.ip(),
            &backend.host_field,
        );
        self.release_head();

        let mut result = self.exchange(&lease, stream, reused).await;
        if matches!(result, Err(ExchangeError::Stale))
            && self.head.idempotent
            && !self.head.has_body()
        {
            stats::bump(&backend.stats.response_errors);
            tracing::debug!(server = %backend.addr, "reused connection failed; retrying on a new one");
            result = match backend.connect(self.shared.settings.connect_timeout).await {
                Ok(stream) => self.exchange(&lease, stream, false).await,
                Err(e) => {
                    stats::bump(&backend.stats.connect_errors);
                    Err(ExchangeError::Server {
                        status: 502,
                        why: format!("connect: {e}"),
                    })
                }
            };
        }
        match result {
            Ok(mut outcome) => {
                outcome.pool = Some(pool_index);
                outcome
            }
            Err(error) => {
                let (status, why) = match error {
                    ExchangeError::Stale => (502, "server closed the connection".to_string()),
                    ExchangeError::Server { status, why } => (status, why),
                    ExchangeError::Client { status, why } => (status, why),
                    ExchangeError::AfterResponse(why) => {
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
                if status >= 500 {
                    stats::bump(&backend.stats.response_errors);
                }
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
                outcome
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
    ) -> Result<(Lease<'p>, TcpStream, bool), (u16, &'static str)> {
        self.tried.clear();
        let attempts = self.shared.settings.connect_attempts;
        let idle_age = self.shared.settings.server_idle_timeout;
        let connect_timeout = self.shared.settings.connect_timeout;
        let mut connects = 0;
        while connects < attempts {
            let Some(server) = self.pick(pool) else { break };
            self.tried.push(server);
            if pool.servers[server].is_full() {
                // At its max_conns: the next candidate, without spending an attempt.
                continue;
            }
            connects += 1;
            let lease = pool.lease(server);
            let backend = lease.backend();
            let connection = match backend.take_idle(idle_age) {
                Some(stream) => Some((stream, true)),
                None => match backend.connect(connect_timeout).await {
                    Ok(stream) => Some((stream, false)),
                    Err(e) => {
                        stats::bump(&backend.stats.connect_errors);
                        tracing::warn!(pool = %pool.name, server = %backend.addr, "connect failed: {e}");
                        None
                    }
                },
            };
            if let Some((stream, reused)) = connection {
                self.response_field = self.module_response_field(pool, server);
                return Ok((lease, stream, reused));
            }
        }
        Err(match (self.tried.is_empty(), connects) {
            (true, _) => (503, "no server available"),
            (false, 0) => (503, "every server is at its connection limit"),
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
        server: TcpStream,
        reused: bool,
    ) -> Result<Outcome, ExchangeError> {
        let backend = lease.backend();
        let request_kind = RequestKind {
            is_head: self.head.is_head,
            is_connect: self.head.is_connect,
        };
        let idle = self.relay.idle;
        let client_version = self.head.version;
        self.server_buf.consume(self.server_buf.len());
        let request_meter = Meter::default();

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
                ExchangeError::Server {
                    status: 502,
                    why: format!("sending request: {e}"),
                }
            });
        }
        let early_body = with_head.len();
        self.inbuf.consume(early_body);
        stats::bump(&backend.stats.requests);
        let sent_at = Instant::now();

        // 2. The request body and the response head, concurrently: a server may answer 100
        //    Continue before the body, or a final status without waiting for it.
        let has_body_to_send = !matches!(body_left, BodyFraming::Empty);
        let body_done = {
            let Session {
                client,
                inbuf,
                server_buf,
                response,
                out,
                chunk_scratch,
                relay,
                ..
            } = &mut *self;
            let client: &TcpStream = client;
            let relay: &RelaySettings = relay;
            let body = async {
                match body_left {
                    BodyFraming::Empty | BodyFraming::UntilClose => Ok(()),
                    BodyFraming::Length(n) => {
                        relay_length(client, inbuf, &server, n, relay, &request_meter).await
                    }
                    BodyFraming::Chunked => {
                        relay_chunked(
                            client,
                            inbuf,
                            &server,
                            ChunkedOutput::Chunked,
                            relay,
                            chunk_scratch,
                            &request_meter,
                        )
                        .await
                    }
                }
            };
            let head_limit = if has_body_to_send {
                Limit::Never
            } else {
                Limit::Idle(idle)
            };
            let head = read_response_head(
                &server,
                server_buf,
                response,
                request_kind,
                client,
                client_version,
                out,
                head_limit,
                reused,
            );
            tokio::pin!(body);
            tokio::pin!(head);
            if has_body_to_send {
                tokio::select! {
                    sent = &mut body => {
                        let body_done = match sent {
                            Ok(()) => true,
                            // The server stopped reading; its response may say why.
                            Err(RelayError::Write(_)) => false,
                            Err(e) => return Err(request_body_error(e)),
                        };
                        match tokio::time::timeout(idle, &mut head).await {
                            Ok(result) => result?,
                            Err(_) => return Err(ExchangeError::Server { status: 504, why: "no response in time".into() }),
                        }
                        body_done
                    }
                    result = &mut head => {
                        result?;
                        false
                    }
                }
            } else {
                head.await?;
                true
            }
        };
        stats::bump(&backend.stats.responses);
        stats::add(
            &backend.stats.response_time_us,
            sent_at.elapsed().as_micros() as u64,
        );
        stats::add(
            &backend.stats.bytes_in,
            (self.upstream_head.len() + early_body) as u64 + request_meter.get(),
        );

        // 3. The response.
        let status = self.response.status;
        if status == 101 || (self.head.is_connect && (200..300).contains(&status)) {
            if status == 101 && !self.head.upgrade {
                return Err(ExchangeError::Server {
                    status: 502,
                    why: "101 to a request that did not ask to upgrade".into(),
                });
            }
            if !body_done {
                return Err(ExchangeError::Server {
                    status: 502,
                    why: "tunnel before the request body ended".into(),
                });
            }
            return self.open_tunnel(backend.addr, &server).await;
        }

        let framing = self.response.framing;
        let http10_client = client_version == Version::Http10;
        let dechunk = http10_client && framing == BodyFraming::Chunked;
        let keep_client = self.head.keep_alive
            && body_done
            && !dechunk
            && framing != BodyFraming::UntilClose
            && !*self.shutdown.borrow();
        let connection = if keep_client {
            client_connection(client_version, true)
        } else {
            ClientConnection::Close
        };
        self.out.clear();
        write_response_head(
            &mut self.out,
            &self.response,
            self.server_buf.filled(),
            connection,
            dechunk,
        );
        if let Some(field) = &self.response_field {
            add_field_to_head(&mut self.out, field.name.as_bytes(), field.value.as_bytes());
        }
        let head_bytes = self.out.len() as u64;
        self.server_buf.consume(self.response.len);

        let response_meter = Meter::default();
        let relayed = {
            let Session {
                client,
                server_buf,
                out,
                relay,
                ..
            } = &mut *self;
            let client: &TcpStream = client;
            let relay: &RelaySettings = relay;
            match framing {
                BodyFraming::Empty => write_all(client, out, Limit::Idle(idle))
                    .await
                    .map_err(RelayError::Write),
                BodyFraming::Length(n) => {
                    // The head and the first body bytes in one write.
                    let first = (server_buf.len() as u64).min(n) as usize;
                    let then = Then::more_if(first as u64 != n);
                    match write_both(
                        client,
                        out,
                        &server_buf.filled()[..first],
                        then,
                        Limit::Idle(idle),
                    )
                    .await
                    {
                        Ok(()) => {
                            server_buf.consume(first);
                            response_meter.add(first as u64);
                            relay_length(
                                &server,
                                server_buf,
                                client,
                                n - first as u64,
                                relay,
                                &response_meter,
                            )
                            .await
                        }
                        Err(e) => Err(RelayError::Write(e)),
                    }
                }
                BodyFraming::Chunked => match write_all(client, out, Limit::Idle(idle)).await {
                    Ok(()) => {
                        let output = if dechunk {
                            ChunkedOutput::Decoded
                        } else {
                            ChunkedOutput::Chunked
                        };
                        relay_chunked(
                            &server,
                            server_buf,
                            client,
                            output,
                            relay,
                            out,
                            &response_meter,
                        )
                        .await
                    }
                    Err(e) => Err(RelayError::Write(e)),
                },
                BodyFraming::UntilClose => match write_all(client, out, Limit::Idle(idle)).await {
                    Ok(()) => {
                        relay_until_close(&server, server_buf, client, relay, &response_meter).await
                    }
                    Err(e) => Err(RelayError::Write(e)),
                },
            }
        };
        let bytes_out = head_bytes + response_meter.get();
        stats::add(&backend.stats.bytes_out, bytes_out);
        if let Err(e) = relayed {
            return Err(ExchangeError::AfterResponse(e.to_string()));
        }

        // 4. The server connection goes back to the idle list if the exchange ended cleanly
        //    on both sides with nothing extra pending.
        if self.response.server_keep_alive && body_done && self.server_buf.is_empty() {
            backend.park(server, self.shared.settings.server_idle_max);
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
        server: &TcpStream,
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
            false,
        );
        self.server_buf.consume(self.response.len);
        let head_bytes = self.out.len() as u64;
        write_all(&self.client, &self.out, Limit::Idle(self.relay.idle))
            .await
            .map_err(|e| ExchangeError::AfterResponse(e.to_string()))?;
        let moved = tunnel(
            &self.client,
            &mut self.inbuf,
            server,
            &mut self.server_buf,
            self.relay.splice_from.is_some(),
            self.relay.idle,
        )
        .await
        .map_err(|e| ExchangeError::AfterResponse(e.to_string()))?;
        Ok(Outcome {
            status,
            bytes_out: head_bytes + moved.server_to_client,
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
#[allow(clippy::too_many_arguments)]
async fn read_response_head(
    server: &TcpStream,
    server_buf: &mut IoBuf,
    response: &mut ResponseHead,
    kind: RequestKind,
    client: &TcpStream,
    client_version: Version,
    out: &mut Vec<u8>,
    limit: Limit,
    reused: bool,
) -> Result<(), ExchangeError> {
    let mut received_any = false;
    loop {
        if !server_buf.is_empty() {
            received_any = true;
            match parse_response(server_buf.filled(), kind, response) {
                Ok(true) if response.is_informational() && response.status != 101 => {
                    if client_version == Version::Http11 {
                        out.clear();
                        write_response_head(
                            out,
                            response,
                            server_buf.filled(),
                            ClientConnection::Persistent,
                            false,
                        );
                        write_all(client, out, limit)
                            .await
                            .map_err(|_| ExchangeError::Client {
                                status: 0,
                                why: "client closed".into(),
                            })?;
                    }
                    server_buf.consume(response.len);
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
        match read_some(server, server_buf, limit).await {
            Ok(0) if reused && !received_any => return Err(ExchangeError::Stale),
            Ok(0) => {
                return Err(ExchangeError::Server {
                    status: 502,
                    why: "server closed before a complete response head".into(),
                })
            }
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::TimedOut => {
                return Err(ExchangeError::Server {
                    status: 504,
                    why: "no response in time".into(),
                })
            }
            Err(_) if reused && !received_any => return Err(ExchangeError::Stale),
            Err(e) => {
                return Err(ExchangeError::Server {
                    status: 502,
                    why: format!("reading response: {e}"),
                })
            }
        }
    }
}
