//! Attempt: the request on one server connection. The rebuilt head goes up (with a small body
//! in the same write), then the request body and the response move at once (full duplex,
//! interim responses relayed: response_head.rs), and the response is relayed (response.rs), or
//! a 101 or a 2xx to CONNECT turns the connection into a tunnel.

use super::account::Outcome;
use super::client::{BodySource, ClientSide, ResponseEdit};
use super::failure::{body_incomplete, request_body_error, timeout_evidence, ExchangeError};
use super::{Buffers, Exchange};
use crate::http::response::RequestKind;
use crate::http::BodyFraming;
use crate::relay::{Meter, RelayError, RelaySettings};
use crate::socket::Socket;
use crate::state::control::Failure;
use crate::state::pool::Lease;
use crate::state::server::Backend;
use crate::state::stats::{self, RelayingBody};
use crate::stream::{write_both, Then, TimeLimit};
use std::future::Future;
use std::pin::{pin, Pin};

/// What went up with the request head.
pub(super) struct Sent {
    /// The body still to send (`Empty` when it went with the head, or there is none).
    pub body_left: BodyFraming,
    /// Body bytes sent with the head.
    pub early_body: usize,
    /// The server's response count when the request went up: a server too slow for this
    /// request that answered others meanwhile is busy, not silent (failure.rs).
    pub answered: u64,
    pub reused: bool,
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
}

/// One attempt's state while the body goes up and the response comes down: the server side
/// (its connection and the exchange's buffers) and the client's response sink.
pub(super) struct Attempt<'x, S> {
    pub server: &'x Socket,
    pub backend: &'x Backend,
    pub work: &'x mut Buffers,
    pub sink: &'x mut S,
    pub relay: RelaySettings,
    pub kind: RequestKind,
    pub reused: bool,
    /// What the response gets besides the server's fields.
    pub response_edit: ResponseEdit<'x>,
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
    /// Sends the request to the server on `server` and relays the response to the client.
    pub(super) async fn attempt(
        &mut self,
        lease: &Lease<'a>,
        server: Socket,
        reused: bool,
    ) -> Result<Outcome, ExchangeError> {
        let backend = lease.backend();
        self.work.server_buf.consume(self.work.server_buf.len());
        let sent = self.send_head(lease, &server, reused).await?;
        let meters = Meters::default();
        let phase = self.duplex(&server, backend, &sent, &meters).await?;
        stats::add(
            &backend.stats.bytes_in,
            (self.work.upstream_head.len() + sent.early_body) as u64 + meters.up.get(),
        );
        match phase {
            Phase::Tunnel => self.open_tunnel(backend, &server).await,
            Phase::Relayed(relayed) => self.finish(lease, server, relayed, &meters.down),
        }
    }

    /// The head, with the body too when it is small and already here (one writev); a PROXY
    /// header first on a new connection of a `send_proxy` pool.
    async fn send_head(
        &mut self,
        lease: &Lease<'a>,
        server: &Socket,
        reused: bool,
    ) -> Result<Sent, ExchangeError> {
        let backend = lease.backend();
        let idle = self.picker.cx.relay.idle;
        let early = self.client.early_body();
        let body_left = match early {
            Some(_) => BodyFraming::Empty,
            None => self.client.request().0.framing,
        };
        let with_head = early.unwrap_or_default();
        // A pool with `send_proxy` starts each new connection with a PROXY header naming the
        // client; its connections serve that client only (never parked for reuse).
        let proxied;
        let head: &[u8] = match lease.pool().config.send_proxy {
            Some(version) if !reused => {
                let mut out = Vec::with_capacity(self.work.upstream_head.len() + 64);
                self.client.write_proxy_header(&mut out, version);
                out.extend_from_slice(&self.work.upstream_head);
                proxied = out;
                &proxied
            }
            _ => &self.work.upstream_head,
        };
        // What the server answered so far, to tell a server too slow for this request from a
        // silent one should the response not come in time.
        let answered = stats::read(&backend.stats.responses);
        // Pushed at once even when a body follows: the client may wait for 100 Continue
        // before sending it, and MSG_MORE would hold the head back for up to 200 ms.
        if let Err(e) = write_both(server, head, with_head, Then::Push, TimeLimit::Idle(idle)).await
        {
            return Err(if reused {
                ExchangeError::Stale
            } else {
                ExchangeError::Unanswered(Failure::broken(format!("sending the request: {e}")))
            });
        }
        let early_body = with_head.len();
        self.client.consume_early(early_body);
        stats::bump(&backend.stats.requests);
        Ok(Sent {
            body_left,
            early_body,
            answered,
            reused,
        })
    }

    /// 2. The request body goes up while the response head is awaited: a server may answer
    ///    100 Continue before the body, or its final status before reading all of it.
    /// 3. The response comes down, the upload still going on if it has not ended: a server
    ///    may stream its answer while it reads (full duplex).
    async fn duplex(
        &mut self,
        server: &Socket,
        backend: &Backend,
        sent: &Sent,
        meters: &Meters,
    ) -> Result<Phase, ExchangeError> {
        let head = self.client.request().0;
        let kind = RequestKind {
            is_head: head.is_head,
            is_connect: head.is_connect,
        };
        let upgrade = head.upgrade;
        let relay = self.picker.cx.relay;
        let (body, sink) = self.client.split();
        let upload = pin!(body.upload(server, sent.body_left, &relay, &meters.up));
        let uploading = !matches!(sent.body_left, BodyFraming::Empty);
        let mut upload = Upload::new(upload, uploading, backend);
        let mut attempt = Attempt {
            server,
            backend,
            work: &mut *self.work,
            sink,
            relay,
            kind,
            reused: sent.reused,
            response_edit: ResponseEdit {
                field: self.response_field.as_ref(),
                headers: self.edits.and_then(|e| e.response_headers.as_ref()),
            },
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
        let status = attempt.work.response.status;
        if status == 101 || (kind.is_connect && (200..300).contains(&status)) {
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
        }))
    }
}

impl<S> Attempt<'_, S>
where
    S: super::client::ResponseSink,
{
    /// Awaits the final response head while the body goes up. A failure before the body is
    /// all in is the client's (failure.rs, `body_incomplete`).
    async fn await_response_head<F: Future<Output = Result<(), RelayError>>>(
        &mut self,
        upload: &mut Upload<'_, F>,
        answered: u64,
        uploaded: &Meter,
    ) -> Result<(), ExchangeError> {
        let backend = self.backend;
        let mut response_head = pin!(self.read_response_head(uploaded));
        loop {
            tokio::select! {
                biased;
                result = &mut response_head => {
                    if let Err(e) = result {
                        // The upload may have ended in the same instant, unpolled.
                        upload.finishes_now().await;
                        let e = timeout_evidence(e, answered, &backend.stats);
                        return Err(if upload.complete { e } else { body_incomplete(e) });
                    }
                    return Ok(());
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
