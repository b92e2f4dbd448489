//! Attempt over HTTP/2: the request on a stream of one of the server's HTTP/2 connections
//! (upstream/h2/), the HTTP/2 counterpart of attempt.rs's head sending. The head made from the
//! request's message (http/request_message.rs) goes with the stream's HEADERS, a small body
//! already here after it; then the body and the response move at once as for HTTP/1.1
//! (`duplex`), and the response is relayed by the same steps (response.rs). A stream is never
//! parked: it ends with its request, and its connection stays with the server's others.

use super::account::Outcome;
use super::attempt::{Meters, Phase, Sent};
use super::client::{ClientSide, ResponseSink};
use super::failure::{self, ExchangeError};
use super::Exchange;
use crate::buffer::IoBuf;
use crate::http::part::BodyPart;
use crate::http::response::RequestKind;
use crate::http::BodyFraming;
use crate::state::control::Failure;
use crate::state::pool::Lease;
use crate::state::stats;
use crate::stream::{wait, TimeLimit};
use crate::upstream::h2::connections::Channel;
use crate::upstream::h2::request::request_of;
use crate::upstream::h2::{io_error, H2Server};
use crate::upstream::ServerLink;
use bytes::Bytes;
use h2::client::ResponseFuture;
use h2::SendStream;

/// Streams of one request the server may refuse (or leave unprocessed behind a GOAWAY) before
/// the request fails. Each refusal is a stream the server never processed, so another costs
/// only time; and a server that drains its connections after a few streams each (GOAWAY after
/// N) refuses a burst's late streams wave after wave, each wave serving some: with 30 requests
/// at once and 3 streams a connection, the last of them goes on its tenth stream.
const MAX_REFUSED_STREAMS: usize = 16;

impl<'a, C: ClientSide> Exchange<'a, C> {
    /// One request on a stream of `channel`'s connection. A stream the server refused, or that
    /// a GOAWAY left unprocessed, goes again on another stream (a new connection if need be)
    /// when nothing of the request is lost by it (no body still streaming from the client), a
    /// few times at most: the server never saw it, and servers that drain connections one
    /// after the other (GOAWAY after N streams) refuse a burst's late streams in waves.
    pub(super) async fn attempt_h2_or_again(
        &mut self,
        lease: &Lease<'a>,
        channel: Channel,
    ) -> Result<Outcome, ExchangeError> {
        let mut channel = channel;
        for _ in 0..MAX_REFUSED_STREAMS {
            let result = self.attempt_h2(lease, &channel).await;
            let again = match &result {
                Err(ExchangeError::Refused) => true,
                // Lost with a connection opened for it: the server failed (blamed as a new
                // HTTP/1.1 connection that closes unanswered is).
                Err(ExchangeError::Stale) if channel.is_fresh() => {
                    return Err(ExchangeError::Unanswered(Failure::broken(
                        "the server closed a new HTTP/2 connection before answering",
                    )))
                }
                // Lost with a kept connection: maybe processed, so idempotent requests only.
                Err(ExchangeError::Stale) => self.client.request().0.retryable(),
                _ => false,
            };
            if !again {
                return result;
            }
            // The connection may be going away (GOAWAY): no new stream on it.
            channel.retire();
            let backend = lease.backend();
            if self.body_streams() {
                return Err(ExchangeError::Unanswered(Failure::broken(
                    "the server refused the stream after its body began",
                )));
            }
            failure::count_stale_retry(&backend.stats);
            tracing::debug!(server = %backend.addr, "HTTP/2 stream refused; trying a new one");
            channel = match self.picker.h2_link(lease.server).await {
                Ok(ServerLink::H2(next)) => next,
                Ok(ServerLink::H1(connection)) => {
                    return self.attempt(lease, connection, false).await
                }
                Err(failure) => return Err(ExchangeError::from(failure)),
            };
        }
        Err(ExchangeError::Unanswered(Failure::broken(format!(
            "the server refused the stream {MAX_REFUSED_STREAMS} times"
        ))))
    }

    /// Starts the stream with the request's head (and its end, `end`: no body follows). A
    /// connection that cannot take it any more is [`ExchangeError::Refused`]: another stream
    /// takes it.
    async fn open_stream(
        &self,
        channel: &Channel,
        end: bool,
    ) -> Result<(ResponseFuture, Option<SendStream<Bytes>>), ExchangeError> {
        let scheme = match self.picker.pool.config.tls {
            Some(_) => "https",
            None => "http",
        };
        let Some(message) = self.work.message.as_deref() else {
            return Err(ExchangeError::Local {
                status: 502,
                why: "no request message for an HTTP/2 server".into(),
            });
        };
        let request = request_of(message, scheme, self.asks.te_trailers)
            .map_err(|why| ExchangeError::Local { status: 502, why })?;
        let sender = channel.sender();
        let mut sender = wait(
            async { sender.ready().await.map_err(io_error) },
            TimeLimit::Idle(self.picker.cx.relay.idle),
        )
        .await
        .map_err(|_| ExchangeError::Refused)?;
        let (response, send) = sender
            .send_request(request, end)
            .map_err(|_| ExchangeError::Refused)?;
        Ok((response, (!end).then_some(send)))
    }

    /// Tells the client `100 Continue`.
    async fn continue_client(&mut self) -> Result<(), ExchangeError> {
        let mut head = crate::http::ResponseHead::default();
        let raw = b"HTTP/1.1 100 Continue\r\n\r\n";
        let kind = RequestKind {
            is_head: false,
            is_connect: false,
        };
        if !matches!(crate::http::parse_response(raw, kind, &mut head), Ok(true)) {
            return Ok(());
        }
        let (_, sink) = self.client.split();
        sink.interim(&mut self.work.out, &head, raw)
            .await
            .map_err(|_| ExchangeError::Client {
                status: 0,
                why: "client closed".into(),
            })
    }

    /// Whether the request's body is still to come from the client (not all here).
    fn body_streams(&self) -> bool {
        self.client.early_body().is_none() && self.client.request().0.framing != BodyFraming::Empty
    }

    /// Sends the request on a new stream of `channel` and relays the response to the client.
    async fn attempt_h2(
        &mut self,
        lease: &Lease<'a>,
        channel: &Channel,
    ) -> Result<Outcome, ExchangeError> {
        let backend = lease.backend();
        let head = self.client.request().0;
        if head.is_connect {
            return Err(ExchangeError::Local {
                status: 502,
                why: "CONNECT to a pool spoken to in HTTP/2".into(),
            });
        }
        let kind = RequestKind {
            is_head: head.is_head,
            is_connect: false,
        };
        let early_len = self.client.early_body().map(<[u8]>::len);
        let body_left = match early_len {
            Some(_) => BodyFraming::Empty,
            None => head.framing,
        };
        let early_end = early_len.unwrap_or(0) == 0 && body_left == BodyFraming::Empty;
        let relay = self.picker.cx.relay;
        let answered = stats::read(&backend.stats.responses);
        let (response, send) = self.open_stream(channel, early_end).await?;
        stats::bump(&backend.stats.requests);
        // The server side reads into the exchange's buffers, lent for the attempt.
        let mut buf = std::mem::replace(&mut self.work.server_buf, IoBuf::unallocated());
        let mut response_head = std::mem::take(&mut self.work.response);
        let mut side = H2Server::new(
            send,
            response,
            (&mut buf, &mut response_head),
            kind,
            relay.idle,
        );
        let meters = Meters::default();
        let early = self.client.early_body().unwrap_or_default();
        let mut exchanged = send_early(&mut side, early, body_left).await;
        if exchanged.is_ok() && self.asks.continue_first && body_left != BodyFraming::Empty {
            // The h2 crate passes no interim response on: the switch answers the client's
            // `Expect: 100-continue` itself, as its body goes up at once anyway.
            exchanged = self.continue_client().await.map(|()| None);
        }
        if exchanged.is_ok() {
            let sent = Sent {
                body_left,
                answered,
            };
            exchanged = self
                .duplex(&mut side, lease, &sent, &meters)
                .await
                .map(Some);
        }
        drop(side);
        self.work.server_buf = buf;
        self.work.response = response_head;
        if !matches!(
            exchanged,
            Err(ExchangeError::Stale | ExchangeError::Refused)
        ) {
            // Kept until now so that a refused stream can carry it again.
            self.client.consume_early(early_len.unwrap_or(0));
        }
        let phase = exchanged?;
        let head_size = self.work.message.as_deref().map_or(0, |m| m.http1_size());
        stats::add(
            &backend.stats.bytes_in,
            (head_size + early_len.unwrap_or(0)) as u64 + meters.up.get(),
        );
        match phase {
            Some(Phase::Relayed(relayed)) => self.finish(lease, None, relayed, &meters.down),
            Some(Phase::Tunnel) | None => Err(ExchangeError::server(
                502,
                "a tunnel over an HTTP/2 stream to a server",
            )),
        }
    }
}

/// Sends the small body that is already here (and the end, when it is the whole body).
async fn send_early(
    side: &mut H2Server<'_>,
    early: &[u8],
    body_left: BodyFraming,
) -> Result<Option<Phase>, ExchangeError> {
    use crate::exchange::server::{RequestBodySink, ServerSide};
    if early.is_empty() {
        return Ok(None);
    }
    let (up, _) = side.split();
    let sent = async {
        up.send(BodyPart::Data(early)).await?;
        if body_left == BodyFraming::Empty {
            up.send(BodyPart::End).await?;
        }
        Ok::<_, crate::relay::RelayError>(())
    };
    sent.await.map(|()| None).map_err(|e| {
        ExchangeError::Unanswered(Failure::broken(format!("sending the request body: {e}")))
    })
}
