//! Attempt: the request on one server connection. The rebuilt head goes up (with a small body
//! in the same write), then the request body and the response move at once (full duplex,
//! interim responses relayed: response_head.rs), and the response is relayed (response.rs), or
//! a 101 or a 2xx to CONNECT turns the connection into a tunnel.

use super::account::Outcome;
use super::client::{BodySource, ClientSide, ResponseEdit, ResponseSink};
use super::failure::{body_incomplete, request_body_error, timeout_evidence, ExchangeError};
use super::server::{HeadRead, ResponseSource, ServerSide};
use super::Exchange;
use crate::buffer::IoBuf;
use crate::buffering::rate::within_rate;
use crate::buffering::BufferMemory;
use crate::compress::Offer;
use crate::config::ServerProtocol;
use crate::http::response::RequestKind;
use crate::http::rewrite::{write_request_head, RequestEdit};
use crate::http::BodyFraming;
use crate::relay::{Meter, RelayError, RelaySettings};
use crate::state::pool::Lease;
use crate::state::server::Backend;
use crate::state::stats::{self, RelayingBody};
use crate::upstream::connection::ServerConnection;
use crate::upstream::h1::{H1Request, H1Server};
use std::future::Future;
use std::pin::{pin, Pin};

/// Interim (1xx) responses relayed before a final one, at most. Each moves bytes, so the idle
/// timeout never ends a server that streams `100 Continue` forever; a long operation's
/// `102 Processing` every few seconds, or a few `103 Early Hints`, stay far below this.
const MAX_INTERIM_RESPONSES: usize = 100;

/// What a request asks of the hop that HTTP/1.1 says in fields of the connection, which an
/// HTTP/2 server side must say its own way (attempt_h2.rs). Read only for pools that may
/// speak HTTP/2: the plain path never scans for them.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct Asks {
    /// `TE: trailers`: the client takes trailers (gRPC needs the server told).
    pub te_trailers: bool,
    /// `Expect: 100-continue` (HTTP/1.1): the client waits for `100 Continue` before its body.
    pub continue_first: bool,
}

impl Asks {
    fn of((head, bytes): (&crate::http::RequestHead, &[u8])) -> Asks {
        let mut asks = Asks::default();
        for field in &head.fields {
            let (name, value) = (field.name.get(bytes), field.value.get(bytes));
            if name.eq_ignore_ascii_case(b"te") {
                asks.te_trailers |= value
                    .windows(8)
                    .any(|w| w.eq_ignore_ascii_case(b"trailers"));
            } else if name.eq_ignore_ascii_case(b"expect") {
                asks.continue_first |= head.version == crate::http::Version::Http11
                    && value.eq_ignore_ascii_case(b"100-continue");
            }
        }
        asks
    }
}

/// What went up with the request head.
pub(super) struct Sent {
    /// The body still to send (`Empty` when it went with the head, or there is none).
    pub body_left: BodyFraming,
    /// The server's response count when the request went up: a server too slow for this
    /// request that answered others meanwhile is busy, not silent (failure.rs).
    pub answered: u64,
}

/// Bytes of the request body sent (up) and of the response body relayed (down).
#[derive(Default)]
pub(super) struct Meters {
    pub up: Meter,
    pub down: Meter,
}

/// Where an exchange stands once the response head is in.
pub(super) enum Phase {
    /// 101 or 2xx to CONNECT: the connection becomes a tunnel.
    Tunnel,
    Relayed(Relayed),
}

/// A response relayed to the client (or failed half-way, see `relayed`).
pub(super) struct Relayed {
    pub status: u16,
    pub relayed: Result<(), RelayError>,
    pub keep_client: bool,
    pub upload_complete: bool,
    /// The request body had all gone up when the response head came.
    pub uploaded_before_answer: bool,
    pub head_bytes: u64,
    /// A gRPC call's status, if one came back.
    pub grpc: Option<u8>,
}

/// One attempt's state while the body goes up and the response comes down: the server side's
/// response, the client's response sink, and the buffer heads are written in.
pub(super) struct Attempt<'x, S, R> {
    pub source: &'x mut R,
    pub backend: &'x Backend,
    /// The request's hold on the server, let go once the server's part is done
    /// (response.rs, read ahead).
    pub lease: &'x Lease<'x>,
    pub out: &'x mut Vec<u8>,
    pub sink: &'x mut S,
    pub relay: RelaySettings,
    /// What the response gets besides the server's fields.
    pub response_edit: ResponseEdit<'x>,
    /// The pool's `response_buffer`, and the budget it is charged to.
    pub read_ahead: (u64, &'x BufferMemory),
    /// `Some` for a gRPC call (http/grpc.rs): its status once it came back, if it did.
    pub grpc: Option<Option<u8>>,
    /// The compression the answer may get (compress/), if its head allows.
    pub offer: Option<Offer<'x>>,
}

/// The request body's upload, boxed only when the request has a body: its future is a few
/// kilobytes (the client's body source and the server's upload side), and held inline it made
/// every request's state that much larger, a bodiless one's too (an HTTP/2 stream's task was
/// 8 928 bytes, 2 624 of them this; `RUSTC_BOOTSTRAP=1 cargo rustc --release --lib --
/// -Zprint-type-sizes`). Without a body it is done at once (and never polled: `Upload`).
struct MaybeUpload<F>(Option<Pin<Box<F>>>);

impl<F> MaybeUpload<F> {
    /// The upload `make` makes, only when `uploading`: made and then dropped, the future was
    /// still copied whole into `when` (280 instructions a bodiless HTTP/2 request, callgrind).
    fn when(uploading: bool, make: impl FnOnce() -> F) -> MaybeUpload<F> {
        MaybeUpload(uploading.then(|| Box::pin(make())))
    }
}

impl<F: Future<Output = Result<(), RelayError>>> Future for MaybeUpload<F> {
    type Output = Result<(), RelayError>;

    fn poll(
        mut self: Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Self::Output> {
        match self.0.as_mut() {
            Some(upload) => upload.as_mut().poll(cx),
            None => std::task::Poll::Ready(Ok(())),
        }
    }
}

/// The request body on its way up, polled beside the response.
pub(super) struct Upload<'u, F> {
    pub future: Pin<&'u mut F>,
    /// Not finished yet.
    pub running: bool,
    /// All of it went up.
    pub complete: bool,
    /// While the body goes up, the server is held at the client's pace: another request's
    /// timeout meanwhile is no evidence against it (see `relaying`).
    mark: Option<RelayingBody<'u>>,
}

impl<'u, F: Future<Output = Result<(), RelayError>>> Upload<'u, F> {
    fn new(future: Pin<&'u mut F>, running: bool, backend: &'u Backend) -> Self {
        Upload {
            future,
            running,
            complete: !running,
            mark: running.then(|| backend.stats.relaying()),
        }
    }

    /// The upload finished (its result is the caller's to judge).
    pub(super) fn ended(&mut self) {
        self.running = false;
        drop(self.mark.take());
    }

    /// Whether the upload is done, and done well, at this instant (it is polled once): it may
    /// have ended in the same instant as the response, unpolled.
    pub(super) async fn finishes_now(&mut self) -> bool {
        if !self.running {
            return false;
        }
        let future = &mut self.future;
        let done = std::future::poll_fn(|cx| {
            std::task::Poll::Ready(matches!(
                future.as_mut().poll(cx),
                std::task::Poll::Ready(Ok(()))
            ))
        })
        .await;
        if done {
            self.complete = true;
            drop(self.mark.take());
        }
        done
    }
}

impl<'a, C: ClientSide> Exchange<'a, C> {
    /// Writes the request head as the pool's servers get it, once per request (the same for
    /// every server tried): `host_field` when the request has no Host of its own, and what the
    /// rule changes; as HTTP/1.1 text for HTTP/1.1 servers, as a message for HTTP/2 ones (both
    /// for `"auto"`, where each connection speaks what its server chose). The client's copy of
    /// the head may go after.
    pub(super) fn write_server_head(&mut self, host_field: &[u8]) {
        let edit = match self.edits {
            None => RequestEdit {
                trace: self.trace,
                ..RequestEdit::default()
            },
            Some(edits) => RequestEdit {
                path: edits.path.as_ref().map(|_| &self.work.policy_bytes[..]),
                headers: edits.request_headers.as_ref(),
                trace: self.trace,
            },
        };
        let origin = self.client.origin();
        let protocol = self.picker.pool.config.protocol;
        if protocol != ServerProtocol::Http1 {
            // The request's message, for an HTTP/2 server side: no HTTP/1.1 text for it.
            let request = self.client.request();
            self.asks = Asks::of(request);
            let message = self.work.message.get_or_insert_with(Box::default);
            let (client, scheme) = (origin.forwarded_for, origin.scheme);
            write_request_head(
                &mut **message,
                request.0,
                request.1,
                client,
                host_field,
                scheme,
                edit,
            );
        }
        if protocol != ServerProtocol::H2 {
            let out = &mut self.work.upstream_head;
            H1Server::write_head(out, self.client.request(), origin, host_field, edit);
            // A switch that keeps no server connection says so, as nginx's HTTP/1.0 requests
            // do: the server closes once it has answered rather than wait for another request
            // (a server of one worker takes the next connection at once).
            if self.picker.cx.shared.settings.server_idle_max == 0
                && !self.client.request().0.upgrade
            {
                H1Server::ask_close(out);
            }
        }
        self.client.release_head();
    }

    /// Sends the request to the server on `server` and relays the response to the client.
    pub(super) async fn attempt(
        &mut self,
        lease: &Lease<'a>,
        server: ServerConnection,
        reused: bool,
    ) -> Result<Outcome, ExchangeError> {
        let backend = lease.backend();
        let head = self.client.request().0;
        let early_len = self.client.early_body().map(<[u8]>::len);
        let request = H1Request {
            kind: RequestKind {
                is_head: head.is_head,
                is_connect: head.is_connect,
            },
            body_left: match early_len {
                Some(_) => BodyFraming::Empty,
                None => head.framing,
            },
            reused,
            idle: self.picker.cx.relay.idle,
        };
        // The server side reads into the exchange's buffers, lent for the attempt.
        let mut buf = std::mem::replace(&mut self.work.server_buf, IoBuf::unallocated());
        let mut response = std::mem::take(&mut self.work.response);
        let mut side = H1Server::new(&server.stream, &mut buf, &mut response, request);
        let meters = Meters::default();
        let exchanged = match self.send_on(lease, &mut side, request).await {
            Ok(sent) => self.duplex(&mut side, lease, &sent, &meters).await,
            Err(e) => Err(e),
        };
        drop(side);
        self.work.server_buf = buf;
        self.work.response = response;
        let phase = exchanged?;
        stats::add(
            &backend.stats.bytes_in,
            (self.work.upstream_head.len() + early_len.unwrap_or(0)) as u64 + meters.up.get(),
        );
        match phase {
            Phase::Tunnel => self.open_tunnel(backend, &server.stream).await,
            Phase::Relayed(relayed) => self.finish(lease, Some(server), relayed, &meters.down),
        }
    }

    /// 1. The head goes up, with the body too when it is small and already here (one write);
    ///    a PROXY header first on a new connection of a `send_proxy` pool.
    async fn send_on(
        &mut self,
        lease: &Lease<'a>,
        side: &mut H1Server<'_>,
        request: H1Request,
    ) -> Result<Sent, ExchangeError> {
        let backend = lease.backend();
        // A pool with `send_proxy` starts each new connection with a PROXY header naming the
        // client; its connections serve that client only (never parked for reuse).
        let mut preamble = Vec::new();
        if let (Some(version), false) = (lease.pool().config.send_proxy, request.reused) {
            self.client.write_proxy_header(&mut preamble, version);
        }
        // What the server answered so far, to tell a server too slow for this request from a
        // silent one should the response not come in time.
        let answered = stats::read(&backend.stats.responses);
        let early = self.client.early_body().unwrap_or_default();
        side.send_request(&preamble, &self.work.upstream_head, early)
            .await?;
        self.client.consume_early(early.len());
        stats::bump(&backend.stats.requests);
        Ok(Sent {
            body_left: request.body_left,
            answered,
        })
    }

    /// 2. The request body goes up while the response head is awaited: a server may answer
    ///    100 Continue before the body, or its final status before reading all of it.
    /// 3. The response comes down, the upload still going on if it has not ended: a server
    ///    may stream its answer while it reads (full duplex).
    pub(super) async fn duplex<V: ServerSide>(
        &mut self,
        side: &mut V,
        lease: &Lease<'_>,
        sent: &Sent,
        meters: &Meters,
    ) -> Result<Phase, ExchangeError> {
        let backend = lease.backend();
        let head = self.client.request().0;
        let (is_connect, upgrade) = (head.is_connect, head.upgrade);
        let relay = self.picker.cx.relay;
        let grpc = self.grpc;
        let (up, down) = side.split();
        let (body, sink) = self.client.split();
        let rate = self.picker.cx.shared.settings.min_body_rate;
        let uploading = !matches!(sent.body_left, BodyFraming::Empty);
        let upload = pin!(MaybeUpload::when(uploading, || {
            let upload = body.upload(up, sent.body_left, &relay, &meters.up);
            within_rate(upload, &meters.up, rate)
        }));
        let mut upload = Upload::new(upload, uploading, backend);
        let mut attempt = Attempt {
            source: down,
            backend,
            lease,
            out: &mut self.work.out,
            sink,
            relay,
            response_edit: ResponseEdit {
                field: self.response_field.as_ref(),
                headers: self.edits.and_then(|e| e.response_headers.as_ref()),
                recoded: None,
            },
            read_ahead: (
                self.picker.pool.config.response_buffer,
                &self.picker.cx.shared.buffer_memory,
            ),
            grpc: grpc.then_some(None),
            offer: self.offer,
        };
        attempt
            .await_response_head(&mut upload, sent.answered, &meters.up)
            .await?;
        stats::bump(&backend.stats.responses);
        backend.stats.latency.record(self.started.elapsed());
        // A server that answered before it had the whole body may not read the rest as this
        // request's (an early error, or a bug): the rest could be read as the next request,
        // so such a connection is not reused, however the upload ends.
        let uploaded_before_answer = upload.complete;
        let status = attempt.source.head().0.status;
        if status == 101 || (is_connect && (200..300).contains(&status)) {
            if status == 101 && !upgrade {
                return Err(ExchangeError::server(
                    502,
                    "101 to a request that did not ask to upgrade",
                ));
            }
            if !upload.complete {
                return Err(body_incomplete(ExchangeError::server(
                    502,
                    "tunnel before the request body ended",
                )));
            }
            backend.stats.classes.count(status);
            return Ok(Phase::Tunnel);
        }
        backend.stats.classes.count(status);
        let (keep_client, head_bytes, relayed) =
            attempt.relay_response(&mut upload, &meters.down).await;
        Ok(Phase::Relayed(Relayed {
            status,
            relayed,
            keep_client,
            upload_complete: upload.complete,
            uploaded_before_answer,
            head_bytes,
            grpc: attempt.grpc.flatten(),
        }))
    }
}

impl<S: ResponseSink, R: ResponseSource> Attempt<'_, S, R> {
    /// Awaits the final response head while the body goes up, passing interim ones on to the
    /// client. A failure before the body is all in is the client's (failure.rs,
    /// `body_incomplete`).
    async fn await_response_head<F: Future<Output = Result<(), RelayError>>>(
        &mut self,
        upload: &mut Upload<'_, F>,
        answered: u64,
        uploaded: &Meter,
    ) -> Result<(), ExchangeError> {
        let mut interim = 0;
        loop {
            match self.next_head(upload, answered, uploaded).await? {
                HeadRead::Final => return Ok(()),
                HeadRead::Interim => {}
            }
            interim += 1;
            if interim > MAX_INTERIM_RESPONSES {
                return Err(ExchangeError::server(
                    502,
                    format!("more than {MAX_INTERIM_RESPONSES} interim responses"),
                ));
            }
            let (head, raw) = self.source.head();
            self.sink
                .interim(self.out, head, raw)
                .await
                .map_err(|_| ExchangeError::Client {
                    status: 0,
                    why: "client closed".into(),
                })?;
        }
    }

    /// Reads the next response head while the body goes up.
    async fn next_head<F: Future<Output = Result<(), RelayError>>>(
        &mut self,
        upload: &mut Upload<'_, F>,
        answered: u64,
        uploaded: &Meter,
    ) -> Result<HeadRead, ExchangeError> {
        let backend = self.backend;
        let mut response_head = pin!(self.source.read_head(uploaded));
        loop {
            tokio::select! {
                biased;
                result = &mut response_head => {
                    let e = match result {
                        Ok(read) => return Ok(read),
                        Err(e) => e,
                    };
                    // The upload may have ended in the same instant, unpolled.
                    upload.finishes_now().await;
                    let e = timeout_evidence(e, answered, &backend.stats);
                    return Err(if upload.complete { e } else { body_incomplete(e) });
                }
                sent = &mut upload.future, if upload.running => {
                    upload.ended();
                    match sent {
                        Ok(()) => upload.complete = true,
                        // The server stopped reading; its response may say why.
                        Err(RelayError::Write(_)) => {}
                        Err(e) => return Err(request_body_error(e)),
                    }
                }
            }
        }
    }
}
