//! One request carried out, whatever protocol the client speaks: the front-end
//! (connection/h1.rs for HTTP/1.x, connection/h2/stream.rs for one HTTP/2 stream) hands over a
//! request head and a body source, and gets its response head and body through a sink
//! ([`client::ClientSide`]). The steps, in the order a request takes them:
//!
//! [`route`] (the service's rules pick the pool) -> [`policy`] (the rule's redirect, answer,
//! rate limit, path edit) -> [`pick`] (the pool's module picks a server;
//! backups, the pool's queue; an idle connection to it reused) -> [`connect`] (else a new one) ->
//! [`attempt`] (the head goes up, the body while the response head is awaited, through the
//! server side of the pool's protocol: [`server`], upstream/) -> [`response`] (the response
//! relayed, or a tunnel after 101; the server connection parked) -> [`account`] (stats, access log). Whatever fails on the way is
//! classified in [`failure`]: the client's status, whose failure it is, whether the request
//! may go to the next server, what is counted at the server.

pub(crate) mod account;
mod attempt;
mod attempt_h2;
pub(crate) mod client;
mod connect;
pub(crate) mod failure;
mod pick;
mod policy;
mod response;
pub(crate) mod route;
pub(crate) mod server;

use account::Outcome;
use client::{BodyRefused, ClientSide};
use failure::{short_reason, ExchangeError, Side, Verdict};

use crate::buffer::IoBuf;
use crate::compress::Offer;
use crate::config::ServerProtocol;
use crate::http::grpc::GrpcAnswer;
use crate::http::path::normalize;
use crate::http::request_message::RequestMessage;
use crate::http::status::Answer;
use crate::http::ResponseHead;
use crate::policy::{Action, Edits};
use crate::recycle;
use crate::relay::RelaySettings;
use crate::shared::Shared;
use crate::state::control;
use crate::state::generation::{Generation, Service};
use crate::state::pool::{Lease, Pool};
use crate::state::stats;
use crate::timeouts::Slot;
use crate::trace::RequestTrace;
use crate::upstream::ServerLink;
use std::net::SocketAddr;
use std::sync::Arc;
use tcpvs_modules::ResponseField;
use tokio::time::Instant;

/// What an exchange reads of the connection it runs on (built by the connection for each
/// request, after it followed a reload): a few references, copied freely.
#[derive(Clone, Copy)]
pub(crate) struct Context<'a> {
    pub shared: &'a Shared,
    /// The configuration the request runs under.
    pub generation: &'a Arc<Generation>,
    pub service: &'a Service,
    /// The connection's timeout slot, which also says when the switch is stopping.
    pub timer: &'a Slot,
    pub relay: RelaySettings,
    /// The client, as X-Forwarded-For and `source-hash` see it (a PROXY header's, if any).
    pub peer: SocketAddr,
    /// The TLS server name the client asked for (SNI), for `sni` rules.
    pub sni: Option<&'a str>,
}

/// The server side's memory, kept by the connection from request to request (and given back to
/// the thread while it waits for the next one: connection/mod.rs, `give_back_workspace`).
pub(crate) struct Buffers {
    /// The request head as rebuilt for the server, as HTTP/1.1 text.
    pub upstream_head: Vec<u8>,
    /// The same as a message (http/request_message.rs), for a pool that may speak HTTP/2:
    /// boxed, as most pools never need one.
    pub message: Option<Box<RequestMessage>>,
    pub server_buf: IoBuf,
    pub response: ResponseHead,
    /// Rebuilt response heads, error responses and chunk output.
    pub out: Vec<u8>,
    /// The path a rule rewrote, a redirect's location, a limit's answer (policy.rs).
    pub policy_bytes: Vec<u8>,
    /// The request's path in its normal form, when it differs (http/path.rs).
    pub normal_path: Vec<u8>,
}

impl Buffers {
    pub(crate) fn new() -> Buffers {
        Buffers {
            upstream_head: Vec::new(),
            message: None,
            server_buf: IoBuf::unallocated(),
            response: ResponseHead::default(),
            out: Vec::new(),
            policy_bytes: Vec::new(),
            normal_path: Vec::new(),
        }
    }

    /// The memory the exchange uses, taken once the request head is complete: a client still
    /// sending its head holds only its buffer and the head's field table.
    pub(crate) fn take(&mut self) {
        if self.response.fields.capacity() == 0 {
            self.response.fields = recycle::take_fields();
        }
        if self.upstream_head.capacity() == 0 {
            self.upstream_head = recycle::take_bytes();
        }
        if self.out.capacity() == 0 {
            self.out = recycle::take_bytes();
        }
    }

    /// Gives the memory back to the thread's free lists (an HTTP/2 stream's, at its end).
    pub(crate) fn give_back(&mut self) {
        self.server_buf.consume(self.server_buf.len());
        self.server_buf.release();
        recycle::give_fields(&mut self.response.fields);
        recycle::give_bytes(&mut self.upstream_head);
        recycle::give_bytes(&mut self.out);
        self.message = None;
        self.policy_bytes = Vec::new();
        self.normal_path = Vec::new();
    }
}

/// Choosing a server for one request: the pool the rules gave, and what the request's
/// attempts share (the servers tried, the attempts spent). pick.rs and connect.rs hold its
/// steps; the tunnel front-end (connection/tunnel.rs) uses it without an [`Exchange`].
pub(crate) struct Picker<'a> {
    pub cx: Context<'a>,
    pub pool: &'a Pool,
    pub pool_index: usize,
    /// Servers picked for this request so far (the connection's vector, reused).
    tried: &'a mut Vec<usize>,
    /// The server whose failure the request's next attempt retries (counted there when the
    /// attempt is made).
    retry_from: Option<usize>,
    /// Connections tried for this request, against `connect_attempts`.
    attempts: usize,
}

impl<'a> Picker<'a> {
    pub(crate) fn new(cx: Context<'a>, pool_index: usize, tried: &'a mut Vec<usize>) -> Self {
        tried.clear();
        Picker {
            cx,
            pool: &cx.generation.pools[pool_index],
            pool_index,
            tried,
            retry_from: None,
            attempts: 0,
        }
    }
}

/// A server connection for a request: the lease that counts the request on the server, the
/// socket, whether it was reused, and the field the pool's module adds to the response.
pub(crate) struct Connected<'p> {
    pub lease: Lease<'p>,
    pub server: ServerLink,
    pub reused: bool,
    pub response_field: Option<ResponseField>,
}

/// One request carried out against the pool the rules chose: [`Exchange::run`].
pub(crate) struct Exchange<'a, C: ClientSide> {
    picker: Picker<'a>,
    /// The front-end's, lent: moved in, its few hundred bytes were copied twice a request.
    client: &'a mut C,
    work: &'a mut Buffers,
    started: Instant,
    /// A field the pool's module adds to the current response.
    response_field: Option<ResponseField>,
    /// What the rule changes on the way (policy.rs); `None` on the plain path.
    edits: Option<&'a Edits>,
    /// What the request asks of the hop (attempt.rs), for a server side that says it its
    /// own way.
    asks: attempt::Asks,
    /// The request is a gRPC call (http/grpc.rs).
    grpc: bool,
    /// The compression its answer may get (compress/): decided while its head is here.
    offer: Option<Offer<'a>>,
    /// Its trace and id (trace/), for the head written for the server.
    trace: Option<&'a RequestTrace>,
}

/// Carries out the request whose head `client` holds: routes it, applies the rule's policy,
/// then runs its [`Exchange`].
/// `tried` and `work` are the connection's, reused from request to request.
pub(crate) async fn serve<C: ClientSide>(
    cx: Context<'_>,
    client: &mut C,
    work: &mut Buffers,
    tried: &mut Vec<usize>,
    started: Instant,
) -> Outcome {
    // Before routing: a request answered by a rule is logged with its ids too.
    let trace = cx.shared.tracing.begin(client.request(), client.protocol());
    // The rules see the path in its normal form; the buffer is lent out while they do.
    let mut normal_path = std::mem::take(&mut work.normal_path);
    let step = decide(&cx, client, work, &mut normal_path).await;
    work.normal_path = normal_path;
    let (pool_index, edits, would_limit) = match step {
        policy::Step::Pool {
            pool,
            edits,
            would_limit,
        } => (pool, edits, would_limit),
        policy::Step::Answered(mut outcome) => {
            outcome.trace = trace;
            return outcome;
        }
    };
    // The pool's `request_buffer`: the body comes in before a server is picked. Boxed: a
    // request without it carries none of that step's state in its future.
    let up_to = cx.generation.pools[pool_index].config.request_buffer;
    if up_to > 0 && client.request().0.has_body() {
        let held = Box::pin(hold_body(&cx, client, work, (pool_index, up_to))).await;
        if let Some(mut refused) = held {
            refused.limited = would_limit;
            refused.trace = trace;
            return refused;
        }
    }
    let mut exchange = Exchange {
        picker: Picker::new(cx, pool_index, tried),
        client,
        work,
        started,
        response_field: None,
        edits,
        asks: attempt::Asks::default(),
        grpc: false,
        offer: None,
        trace: trace.as_deref(),
    };
    let mut outcome = exchange.run().await;
    drop(exchange);
    outcome.limited = would_limit;
    outcome.trace = trace;
    outcome
}

/// Receives the request body up to `up_to` before a server of the pool is picked
/// (buffering/), within `min_body_rate`; `Some`: the client failed to send it, and was answered.
async fn hold_body<C: ClientSide>(
    cx: &Context<'_>,
    client: &mut C,
    work: &mut Buffers,
    (pool_index, up_to): (usize, u64),
) -> Option<Outcome> {
    let received = crate::relay::Meter::default();
    let rate = cx.shared.settings.min_body_rate;
    let held = tokio::select! {
        held = client.hold_body(up_to, &received) => held,
        () = crate::buffering::rate::too_slow(&received, rate) => Err(BodyRefused::TOO_SLOW),
    };
    let refused = held.err()?;
    client.release_head();
    let pool = Some(pool_index);
    Some(match refused.status {
        0 => Outcome::local(0, 0, false, pool),
        status => answer_locally(cx, client, &mut work.out, status, refused.why, pool).await,
    })
}

/// Routes the request on its normal path and applies the rule's policy: on to a pool (with
/// the rule's edits), or answered here.
async fn decide<'a, C: ClientSide>(
    cx: &Context<'a>,
    client: &mut C,
    work: &mut Buffers,
    normal_path: &mut Vec<u8>,
) -> policy::Step<'a> {
    let (head, buf) = client.request();
    let normal = normalize(head.path.get(buf), normal_path);
    let path = normal.unwrap_or(head.path.get(buf));
    let matched = match route::admit(cx, client.request(), path) {
        Ok(matched) => matched,
        Err((status, why)) => {
            client.release_head();
            let outcome = answer_locally(cx, client, &mut work.out, status, why, None).await;
            return policy::Step::Answered(outcome);
        }
    };
    match matched.action {
        // The plain path: a pool and nothing else to do.
        Action::Pool { pool, edits: None } => policy::Step::Pool {
            pool: *pool,
            edits: None,
            would_limit: None,
        },
        _ => policy::apply(cx, matched, normal, client, work).await,
    }
}

/// Answers the request with an error from the switch itself.
async fn answer_locally<C: ClientSide>(
    cx: &Context<'_>,
    client: &mut C,
    out: &mut Vec<u8>,
    status: u16,
    why: &str,
    pool: Option<usize>,
) -> Outcome {
    stats::bump(&cx.service.stats.local_errors);
    let grpc = client.grpc();
    // The service's page and fields (policy/own_answers.rs); a gRPC call keeps its form.
    let (mut text, mut own_fields) = (Vec::new(), Vec::new());
    let (bytes_out, keep_client) = match grpc {
        false => {
            let answer = Answer::Error { status, why };
            let answer = cx
                .service
                .own_answers
                .dress(&answer, &mut text, &mut own_fields);
            client.answer(out, &answer).await
        }
        true => {
            let grpc = GrpcAnswer::new(status, why);
            let mut fields = Default::default();
            let answer = Answer::Given(grpc.given(&mut fields));
            let answer = cx
                .service
                .own_answers
                .dress(&answer, &mut text, &mut own_fields);
            client.answer(out, &answer).await
        }
    };
    let mut outcome = Outcome::local(status, bytes_out, keep_client, pool);
    outcome.grpc = grpc.then(|| crate::http::grpc::status_for(status));
    outcome
}

/// What the exchange does after a failure (failure.rs says which).
enum Next {
    /// The request goes to the next server.
    Retry,
    Done(Outcome),
}

impl<'a, C: ClientSide> Exchange<'a, C> {
    /// Picks, connects and exchanges until the request is answered, by a server or by the
    /// switch; a request that reached no server goes to the next one while failure.rs allows.
    async fn run(&mut self) -> Outcome {
        // A request that reached no server may go to the next candidate: only idempotent ones
        // without body, and only with a Host of their own (the head is rebuilt once, and a
        // Host made up from the first server's address would name the wrong one).
        let (head, _) = self.client.request();
        let may_retry = head.retryable() && head.host.is_some();
        // Asked once: a gRPC call's answer is watched for its status (response.rs).
        self.grpc = self.client.grpc();
        let service = self.picker.cx.service;
        if service.compress.is_some() && !self.grpc && !self.edits.is_some_and(|e| e.uncompressed) {
            let memory = &self.picker.cx.shared.compress_memory;
            let of = (service.compress.as_ref(), &*service.stats, memory);
            self.offer = Offer::of(of, self.client.request());
        }
        if self.picker.pool.config.protocol == ServerProtocol::Http1 && self.grpc {
            // Never mangled into HTTP/1.1 (its trailers, its framing): refused the gRPC way.
            self.client.release_head();
            return self
                .answer_locally(502, "a gRPC call to a pool of HTTP/1.1 servers")
                .await;
        }
        let mut head_written = false;
        loop {
            let connected = match self.picker.pick_or_queue(self.client.request()).await {
                Ok(connected) => connected,
                Err((status, why)) => {
                    if !head_written {
                        self.client.release_head();
                    }
                    return self.answer_locally(status, why).await;
                }
            };
            let Connected {
                mut lease,
                server,
                reused,
                response_field,
            } = connected;
            self.response_field = response_field;
            if !head_written {
                self.write_server_head(&lease.backend().host_field);
                head_written = true;
            }
            let result = self.attempt_or_renew(&lease, server, reused).await;
            let error = match result {
                Ok(mut outcome) => {
                    lease.answered(outcome.status);
                    let cx = &self.picker.cx;
                    control::exchange_succeeded(
                        &cx.shared.generation,
                        self.picker.pool,
                        lease.server,
                    );
                    outcome.pool = Some(self.picker.pool_index);
                    let backend = lease.backend();
                    drop(lease);
                    // The server is done with a request: a connect its full accept queue
                    // dropped may get in now (connect.rs).
                    backend.handshakes.request_ended();
                    return outcome;
                }
                Err(error) => error,
            };
            match self.failed(error, &lease, may_retry).await {
                Next::Retry => continue,
                Next::Done(outcome) => return outcome,
            }
        }
    }

    /// One attempt on the connection picked; when a reused connection turns out closed by the
    /// server, one more on a new connection to the same server (if the request may be sent
    /// again). HTTP/2 streams: attempt_h2.rs.
    async fn attempt_or_renew(
        &mut self,
        lease: &Lease<'a>,
        server: ServerLink,
        reused: bool,
    ) -> Result<Outcome, ExchangeError> {
        let server = match server {
            ServerLink::H1(server) => server,
            ServerLink::H2(channel) => return self.attempt_h2_or_again(lease, channel).await,
        };
        let result = self.attempt(lease, server, reused).await;
        if !matches!(result, Err(ExchangeError::Stale)) || !self.client.request().0.retryable() {
            return result;
        }
        let backend = lease.backend();
        failure::count_stale_retry(&backend.stats);
        tracing::debug!(server = %backend.addr, "reused connection failed; retrying on a new one");
        match self.picker.open_link(lease.server).await {
            Ok(ServerLink::H1(stream)) => self.attempt(lease, stream, false).await,
            Ok(ServerLink::H2(channel)) => self.attempt_h2_or_again(lease, channel).await,
            Err(failure) => Err(ExchangeError::from(failure)),
        }
    }

    /// What a failed attempt leads to, as failure.rs classifies it: the next server, or an
    /// answer (and what the failure counts at the server).
    async fn failed(&mut self, error: ExchangeError, lease: &Lease<'a>, may_retry: bool) -> Next {
        let backend = lease.backend();
        let pool_index = self.picker.pool_index;
        let retry_allowed =
            may_retry && self.picker.attempts < self.picker.cx.shared.settings.connect_attempts;
        let (status, why) = match error.verdict(retry_allowed) {
            Verdict::Retry(failure) => {
                stats::bump(&backend.stats.response_errors);
                let why = failure.why.clone();
                self.picker.server_failed(lease.server, failure);
                self.picker.retry_from = Some(lease.server);
                tracing::debug!(server = %backend.addr, "no answer ({why}); trying the next server");
                return Next::Retry;
            }
            Verdict::BrokeOff { why, side } => {
                // The relay broke off; the client may be mid-request. Only a break on the
                // server's side is the server's (a client that resets or stops reading is not).
                self.client.leave_unread();
                if side == Side::Server {
                    stats::bump(&backend.stats.response_errors);
                }
                tracing::debug!(server = %backend.addr, ?side, "relay failed after the response head: {why}");
                return Next::Done(Outcome {
                    status: self.work.response.status,
                    bytes_out: 0,
                    keep_client: false,
                    pool: Some(pool_index),
                    server: Some(backend.addr),
                    limited: None,
                    trace: None,
                    grpc: None,
                });
            }
            Verdict::Answer { status, why, blame } => {
                if let Some(failure) = failure::counted_at_server(blame, status, &backend.stats) {
                    self.picker.server_failed(lease.server, failure);
                }
                (status, why)
            }
        };
        tracing::debug!(server = %backend.addr, status, "exchange failed: {why}");
        if status == 0 {
            // The client went away: nobody to answer.
            return Next::Done(Outcome::local(0, 0, false, Some(pool_index)));
        }
        let mut outcome = self.answer_locally(status, short_reason(status)).await;
        // The request body may be half read: the connection cannot go on.
        outcome.keep_client &= !self.client.request().0.has_body();
        outcome.server = Some(backend.addr);
        Next::Done(outcome)
    }

    /// Answers the request with an error from the switch itself.
    async fn answer_locally(&mut self, status: u16, why: &str) -> Outcome {
        let cx = self.picker.cx;
        let pool = Some(self.picker.pool_index);
        answer_locally(&cx, self.client, &mut self.work.out, status, why, pool).await
    }
}
