//! The response: its head rebuilt for the client and its body relayed (the upload may still be
//! going on), or, after a 101 or a 2xx to CONNECT, a tunnel; then the server connection goes
//! back to the idle list if the exchange ended cleanly.

use super::account::Outcome;
use super::attempt::{Attempt, Relayed, Upload};
use super::client::{ClientSide, ResponseEdit, ResponseSink};
use super::failure::{ExchangeError, Side};
use super::server::{H1Wire, ResponseBody, ResponseSource};
use super::Exchange;
use crate::buffering::read_ahead::{Drain, ReadAhead};
use crate::buffering::BufferMemory;
use crate::compress::body::Compressor;
use crate::http::part::BodyPart;
use crate::http::rewrite::Recoded;
use crate::http::BodyFraming;
use crate::relay::{Meter, RelayError};
use crate::state::pool::Lease;
use crate::state::server::Backend;
use crate::state::stats;
use crate::tls::stream::ServerStream;
use crate::upstream::connection::ServerConnection;
use std::future::Future;
use std::pin::pin;

impl<S: ResponseSink, R: ResponseSource> Attempt<'_, S, R> {
    /// Sends the response head and relays the body, while the upload goes on if it has not
    /// ended. Returns whether the client connection is kept, the head's size, and how the relay
    /// ended.
    pub(super) async fn relay_response<F: Future<Output = Result<(), RelayError>>>(
        &mut self,
        upload: &mut Upload<'_, F>,
        meter: &Meter,
    ) -> (bool, u64, Result<(), RelayError>) {
        let (compressing, recoded) = self.compression();
        let edit = ResponseEdit {
            recoded,
            ..self.response_edit
        };
        let (head, raw) = self.source.head();
        // Announced now, so an upload still running means the connection must close.
        let keep_client = self
            .sink
            .start_response(self.out, head, raw, edit, upload.complete);
        let head_bytes = self.sink.head_size(self.out);
        // The answer comes down at the client's pace, holding the server.
        let _download_mark = self.backend.stats.relaying();
        // The download beside the upload, polled directly (no extra layer on the plain path).
        macro_rules! beside_upload {
            ($download:expr) => {{
                let mut download = pin!($download);
                loop {
                    tokio::select! {
                        biased;
                        relayed = &mut download => break relayed,
                        sent = &mut upload.future, if upload.running => {
                            upload.ended();
                            upload.complete = sent.is_ok();
                        }
                    }
                }
            }};
        }
        if let Some(status) = self.grpc.as_mut() {
            // A gRPC call: its status from the head (Trailers-Only) or the trailers, which are
            // watched on the way; its answer streams, never read ahead.
            *status = grpc_status_in(head, raw);
            let mut watch = GrpcWatch {
                inner: &mut *self.source,
                status,
            };
            let relayed =
                beside_upload!(self
                    .sink
                    .relay_body(&mut watch, self.out, &self.relay, meter));
            return (keep_client, head_bytes, relayed);
        }
        let relayed = match (self.reads_ahead(), compressing) {
            (None, None) => {
                beside_upload!(self
                    .sink
                    .relay_body(self.source, self.out, &self.relay, meter))
            }
            // Boxed, as below: a plain answer carries none of the encoder's state.
            (None, Some(how)) => beside_upload!(Box::pin(self.relay_compressed(how, meter))),
            // Boxed: an answer that is not read ahead carries none of its state.
            (Some((limit, memory)), compressing) => {
                let uploaded = upload.complete;
                let ahead = ReadAheadOf {
                    limit,
                    memory,
                    uploaded,
                    compressing,
                };
                beside_upload!(Box::pin(self.read_ahead(meter, ahead)))
            }
        };
        (keep_client, head_bytes, relayed)
    }
}

/// The `grpc-status` field of a response head, if it has one (a Trailers-Only answer).
fn grpc_status_in(head: &crate::http::ResponseHead, raw: &[u8]) -> Option<u8> {
    head.fields
        .iter()
        .find(|f| f.name.get(raw).eq_ignore_ascii_case(b"grpc-status"))
        .and_then(|f| crate::http::grpc::status_of(f.value.get(raw)))
}

/// A gRPC answer's body on its way to the client, its trailers' `grpc-status` noted.
struct GrpcWatch<'w, R> {
    inner: &'w mut R,
    status: &'w mut Option<u8>,
}

impl<R: ResponseBody> ResponseBody for GrpcWatch<'_, R> {
    async fn next_part(&mut self) -> Result<BodyPart<'_>, RelayError> {
        let part = self.inner.next_part().await?;
        if let BodyPart::Trailers(trailers) = part {
            let status = &mut *self.status;
            trailers.for_each(|name, value| {
                if name.eq_ignore_ascii_case(b"grpc-status") {
                    *status = crate::http::grpc::status_of(value);
                }
            });
        }
        Ok(part)
    }

    fn finished(&self) -> bool {
        self.inner.finished()
    }

    fn has_buffered(&self) -> bool {
        self.inner.has_buffered()
    }

    /// Part by part, so that the trailers are seen.
    fn h1_wire(&mut self) -> Option<H1Wire<'_>> {
        None
    }
}

impl<'x, S: ResponseSink, R: ResponseSource> Attempt<'x, S, R> {
    /// Whether the answer is compressed: if the request's offer, its head (compress/decide.rs)
    /// and `compress_memory` allow. The encoder, and what its head says (a compressible answer
    /// says it varies with `Accept-Encoding` even when it goes as it is).
    fn compression(&self) -> (Option<Compressor<'x>>, Option<Recoded>) {
        let (head, raw) = self.source.head();
        let Some((offer, compression)) = self
            .offer
            .and_then(|offer| Some((offer, offer.decide(head, raw)?)))
        else {
            return (None, None);
        };
        let length = match head.framing {
            BodyFraming::Length(n) => Some(n),
            _ => None,
        };
        match Compressor::take(offer, compression, length) {
            Some(compressor) => (Some(compressor), compression.recoded()),
            None => (None, compression.as_it_is().recoded()),
        }
    }

    /// Whether the body is read ahead of the client, up to the pool's `response_buffer`
    /// (buffering/read_ahead.rs): when it fits in it or its length is unknown, and is not all
    /// here with the head already (the server is done with a small answer). A larger body
    /// of known length moves at the client's pace as before (spliced from the threshold up).
    fn reads_ahead(&self) -> Option<(u64, &'x BufferMemory)> {
        let (limit, memory) = self.read_ahead;
        if limit == 0 {
            return None;
        }
        let fits = match self.source.head().0.framing {
            BodyFraming::Empty => false,
            BodyFraming::Length(n) => n <= limit && !self.source.whole_body_here(),
            BodyFraming::Chunked | BodyFraming::UntilClose => true,
        };
        fits.then_some((limit, memory))
    }

    /// The body read ahead of the client, up to `limit` bytes, charged to `memory`. Once the
    /// server's whole answer is in and the request's body all went up, a client that does not
    /// take the rest at once no longer holds the server: its connection and its place are let
    /// go (`ResponseSource::let_go`, `Lease::let_go`) while the client drains the buffers.
    async fn read_ahead(&mut self, meter: &Meter, of: ReadAheadOf<'_>) -> Result<(), RelayError> {
        let ahead = ReadAhead::new(of.limit, of.memory);
        let mut drain = Drain::new(&ahead);
        match of.compressing {
            None => {
                self.drain_ahead(&ahead, &mut drain, meter, of.uploaded)
                    .await
            }
            Some(how) => {
                let mut compressed = how.over(&mut drain).map_err(RelayError::Read)?;
                self.drain_ahead(&ahead, &mut compressed, meter, of.uploaded)
                    .await
            }
        }
    }

    /// The client takes `body` (what is read ahead, compressed or not) while the server's
    /// answer fills `ahead`; see [`Attempt::read_ahead`].
    async fn drain_ahead<B: ResponseBody>(
        &mut self,
        ahead: &ReadAhead<'_>,
        body: &mut B,
        meter: &Meter,
        uploaded: bool,
    ) -> Result<(), RelayError> {
        let status = self.source.head().0.status;
        let mut relay = pin!(self.sink.relay_body(body, self.out, &self.relay, meter));
        {
            let fill = ahead.fill(&mut *self.source);
            tokio::select! {
                biased;
                relayed = &mut relay => return relayed,
                () = fill => {}
            }
        }
        // A moment for the client: one that takes the rest at once leaves the connection to
        // be kept for the next request, as without read-ahead.
        tokio::select! {
            biased;
            relayed = &mut relay => return relayed,
            () = tokio::time::sleep(KEEP_GRACE) => {}
        }
        if uploaded && ahead.ended_well() {
            self.source.let_go();
            self.lease.let_go(status);
        }
        relay.await
    }

    /// The body compressed on its way to the client.
    async fn relay_compressed(
        &mut self,
        how: Compressor<'_>,
        meter: &Meter,
    ) -> Result<(), RelayError> {
        let mut body = how.over(&mut *self.source).map_err(RelayError::Read)?;
        self.sink
            .relay_body(&mut body, self.out, &self.relay, meter)
            .await
    }
}

/// What a response is read ahead with: the pool's `response_buffer`, the budget it is charged
/// to, and whether the request's body had all gone up when the answer began.
struct ReadAheadOf<'m> {
    limit: u64,
    memory: &'m BufferMemory,
    uploaded: bool,
    /// The answer is compressed as the client takes it.
    compressing: Option<Compressor<'m>>,
}

/// How long a client may take the rest of an answer read ahead before its server is let go
/// (its connection closed rather than kept): a client on the same network takes hundreds of
/// KiB in that time, and a slow one holds the server no longer than this. Not a verdict on
/// the client, only on whether the server's connection is worth keeping.
const KEEP_GRACE: std::time::Duration = std::time::Duration::from_millis(10);

impl<'a, C: ClientSide> Exchange<'a, C> {
    /// 4. The response relayed: counted, and the server connection (HTTP/1.1; an HTTP/2
    ///    stream just ends) goes back to the idle list if the exchange ended cleanly on both
    ///    sides with nothing extra pending.
    pub(super) fn finish(
        &mut self,
        lease: &Lease<'a>,
        server: Option<ServerConnection>,
        relayed: Relayed,
        downloaded: &Meter,
    ) -> Result<Outcome, ExchangeError> {
        let backend = lease.backend();
        let Relayed {
            status,
            relayed,
            keep_client,
            upload_complete,
            uploaded_before_answer,
            head_bytes,
            grpc,
        } = relayed;
        self.client.held_for_close(!keep_client);
        let bytes_out = head_bytes + downloaded.get();
        stats::add(&backend.stats.bytes_out, bytes_out);
        if let Err(e) = relayed {
            return Err(ExchangeError::response_relay(e));
        }
        if !upload_complete {
            self.client.leave_unread();
        }
        let cx = &self.picker.cx;
        let parked = server.filter(|_| {
            self.work.response.server_keep_alive
                && lease.pool().config.send_proxy.is_none()
                && upload_complete
                && uploaded_before_answer
                && self.work.server_buf.is_empty()
        });
        if let Some(server) = parked {
            backend.park(
                cx.timer.worker(),
                server,
                cx.shared.settings.server_idle_max,
                cx.timer.now_ms(),
            );
        }
        Ok(Outcome {
            status,
            bytes_out,
            keep_client,
            pool: None,
            server: Some(backend.addr),
            limited: None,
            trace: None,
            grpc,
        })
    }

    /// After 101 Switching Protocols (or 2xx to CONNECT): the response head goes to the client,
    /// then bytes flow both ways until the tunnel ends.
    pub(super) async fn open_tunnel(
        &mut self,
        backend: &Backend,
        server: &ServerStream,
    ) -> Result<Outcome, ExchangeError> {
        let status = self.work.response.status;
        let relay = self.picker.cx.relay;
        let (head_bytes, end) = self
            .client
            .tunnel(self.work, server, &relay)
            .await
            .map_err(|e| ExchangeError::AfterResponse {
                why: format!("sending the response head: {e}"),
                side: Side::Client,
            })?;
        if let Some(e) = end.failure() {
            tracing::debug!(server = %backend.addr, "tunnel ended: {e}");
        }
        let moved = end.moved;
        let bytes_out = head_bytes + moved.server_to_client;
        stats::add(&backend.stats.bytes_in, moved.client_to_server);
        stats::add(&backend.stats.bytes_out, bytes_out);
        Ok(Outcome {
            status,
            bytes_out,
            keep_client: false,
            pool: None,
            server: Some(backend.addr),
            limited: None,
            trace: None,
            grpc: None,
        })
    }
}
