//! One HTTP/2 stream: one request, carried out by the same exchange as an HTTP/1 request
//! (exchange/), in a task of its own so that the streams of a connection run at once. The
//! client side of that exchange (exchange/client.rs) is the stream: the request head read
//! from its HEADERS (request.rs), its DATA and trailers as the body source, and the response
//! sent as HEADERS, DATA and trailers (response.rs).

use super::admission::{SparePlace, StreamPass};
use super::error::h2_error;
use super::request::{self, Received, Refusal};
use super::response::{send_answer, H2Sink};
use super::task_memory::InSlot;
use crate::access_log;
use crate::buffering::BufferLease;
use crate::connection::proxy_header::destination_or_unknown;
use crate::edge::proxy_protocol;
use crate::exchange::account::{account, Outcome};
use crate::exchange::client::{BodyRefused, BodySource, ClientSide, Origin};
use crate::exchange::server::RequestBodySink;
use crate::exchange::{self, Buffers, Context};
use crate::http::part::{BodyPart, Trailers};
use crate::http::rewrite::{ForwardedFor, Scheme};
use crate::http::status::Answer;
use crate::http::{BodyFraming, RequestHead};
use crate::recycle;
use crate::relay::{Meter, RelayError, RelaySettings, TunnelEnd};
use crate::shared::Shared;
use crate::state::generation::Generation;
use crate::state::stats;
use crate::stream::{wait, TimeLimit};
use crate::timeouts::{Slot, SESSION_TIMER};
use crate::tls::stream::ServerStream;
use atomic_waker::AtomicWaker;
use bytes::Bytes;
use h2::server::{RawRequest, SendResponse};
use h2::{Reason, RecvStream};
use std::future::poll_fn;
use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::Context as TaskContext;
use tokio::time::Instant;

/// What the streams of one connection share: the client, and the count of streams running.
pub(super) struct Link {
    pub shared: Arc<Shared>,
    pub peer: SocketAddr,
    /// The address the client connected to (a PROXY header's, else the socket's).
    pub destination: Option<SocketAddr>,
    pub sni: Option<Box<str>>,
    pub client_text: ForwardedFor,
    pub scheme: Scheme,
    pub relay: RelaySettings,
    /// The connection's timer slot: each stream gets a slot of the same worker.
    pub timer: Arc<Slot>,
    pub live_streams: LiveStreams,
    /// The connection's place under `max_conns_per_source`, lent to its streams.
    pub spare_place: Arc<SparePlace>,
}

/// The streams of a connection whose tasks have not ended. A stream reset by the client still
/// counts until its task is done with the server, so resetting streams does not let a client
/// keep more exchanges going than `SETTINGS_MAX_CONCURRENT_STREAMS` allows (Rapid Reset).
#[derive(Default)]
pub(super) struct LiveStreams {
    count: AtomicUsize,
    /// The connection's driver, woken when a stream ends.
    driver: AtomicWaker,
}

impl LiveStreams {
    /// How many run now; the driver is woken when one ends.
    pub(super) fn poll_count(&self, cx: &mut TaskContext<'_>) -> usize {
        self.driver.register(cx.waker());
        self.count.load(Ordering::Acquire)
    }

    fn enter(link: &Arc<Link>) -> LiveStream {
        link.live_streams.count.fetch_add(1, Ordering::AcqRel);
        link.shared.h2_streams.fetch_add(1, Ordering::AcqRel);
        LiveStream(Arc::clone(link))
    }
}

/// One stream counted in its connection's [`LiveStreams`] and in the switch's `h2_streams` until
/// its task ends.
struct LiveStream(Arc<Link>);

impl Drop for LiveStream {
    fn drop(&mut self) {
        let streams = &self.0.live_streams;
        self.0.shared.h2_streams.fetch_sub(1, Ordering::AcqRel);
        streams.count.fetch_sub(1, Ordering::AcqRel);
        streams.driver.wake();
    }
}

/// Starts the task of a stream just accepted and admitted (`pass`, held until the task ends),
/// under the configuration and service given.
pub(super) fn spawn(
    link: &Arc<Link>,
    (generation, service): (Arc<Generation>, usize),
    pass: StreamPass,
    stream: (RawRequest, RecvStream, SendResponse<Bytes>),
) {
    let guard = LiveStreams::enter(link);
    let timer = link.timer.sibling();
    let scope = Arc::clone(&timer);
    let task = InSlot::new(move || async move {
        let started = Instant::now();
        let link = &guard.0;
        let cx = Context {
            shared: &link.shared,
            generation: &generation,
            service: &generation.services[service],
            timer: &timer,
            relay: link.relay,
            peer: link.peer,
            sni: link.sni.as_deref(),
        };
        serve(cx, link, stream, started).await;
        drop(pass);
    });
    // In a slot of its own (task_memory.rs): the exchange's state is several kilobytes, which
    // tokio would otherwise copy into its task cell and again at each change of the task's
    // stage (a twelfth of a stream's user-space instructions, measured with
    // benches/instructions.sh H2=1).
    tokio::spawn(SESSION_TIMER.scope(scope, task));
}

/// Carries out the stream's request and accounts for it.
async fn serve(
    cx: Context<'_>,
    link: &Link,
    (request, body, mut respond): (RawRequest, RecvStream, SendResponse<Bytes>),
    started: Instant,
) {
    if reset_already(&mut respond) {
        // Reset before its task ran: by the client (Rapid Reset), or by the h2 crate for a
        // malformed DATA or trailers that came with the HEADERS (a content-length the DATA
        // belies, a pseudo-header in trailers). Nothing to answer, nothing for a server.
        tracing::debug!(client = %cx.peer, "HTTP/2 stream reset before it was served");
        return;
    }
    let stats = &cx.service.stats;
    stats::bump(&stats.requests);
    stats::bump(&stats.h2_streams);
    let received = Received::of(&request);
    let mut head = RequestHead {
        fields: recycle::take_fields(),
        ..RequestHead::default()
    };
    let mut head_bytes = recycle::take_bytes();
    let mut log = access_log::Request::default();
    let translated =
        request::read_head(&received, !body.is_end_stream(), &mut head_bytes, &mut head);
    let outcome = match translated {
        Ok(()) => {
            cx.shared.access_log.capture(&mut log, &head, &head_bytes);
            log.set_protocol("HTTP/2.0");
            let client = H2Client {
                head: &head,
                bytes: &head_bytes,
                link,
                body: H2Body {
                    recv: body,
                    scratch: Vec::new(),
                    held: Vec::new(),
                    lease: BufferLease::new(&cx.shared.buffer_memory),
                    ended: false,
                },
                sink: H2Sink::new(respond, head.is_head),
            };
            let mut work = Buffers::new();
            work.take();
            let mut tried = recycle::take_tried();
            let mut client = client;
            let outcome = exchange::serve(cx, &mut client, &mut work, &mut tried, started).await;
            work.give_back();
            recycle::give_tried(&mut tried);
            outcome
        }
        Err(Refusal::Malformed(why)) => {
            tracing::debug!(client = %cx.peer, "HTTP/2 request refused: {why}");
            respond.send_reset(Reason::PROTOCOL_ERROR);
            log.refused_h2(received.method.as_str(), received.path.unwrap_or(""));
            stats::bump(&stats.local_errors);
            // Logged and counted as the 400 an HTTP/1 client would have had (as nginx logs
            // it), though the stream was reset without an answer.
            Outcome::local(400, 0, true, None)
        }
        Err(Refusal::Answer(status, why)) => {
            log.refused_h2(received.method.as_str(), received.path.unwrap_or(""));
            stats::bump(&stats.local_errors);
            let mut out = Vec::new();
            let (mut text, mut fields) = (Vec::new(), Vec::new());
            let answer = Answer::Error { status, why };
            let answer = cx
                .service
                .own_answers
                .dress(&answer, &mut text, &mut fields);
            let sent = send_answer(&mut respond, &mut out, &answer, false, cx.relay.idle).await;
            Outcome::local(status, sent, true, None)
        }
    };
    account(&cx, &log, &outcome, started);
    recycle::give_fields(&mut head.fields);
    recycle::give_bytes(&mut head_bytes);
}

/// Whether the stream is closed by a reset already (looked at without waiting).
fn reset_already(respond: &mut SendResponse<Bytes>) -> bool {
    let mut cx = TaskContext::from_waker(std::task::Waker::noop());
    respond.poll_reset(&mut cx).is_ready()
}

/// The client side of the exchange of one stream.
struct H2Client<'s> {
    head: &'s RequestHead,
    bytes: &'s [u8],
    link: &'s Link,
    body: H2Body<'s>,
    sink: H2Sink,
}

impl<'s> ClientSide for H2Client<'s> {
    type Body = H2Body<'s>;
    type Sink = H2Sink;

    fn request(&self) -> (&RequestHead, &[u8]) {
        (self.head, self.bytes)
    }

    fn grpc(&self) -> bool {
        crate::http::grpc::is_grpc((self.head, self.bytes))
    }

    /// The head has a buffer of its own, which the body does not share: nothing to release.
    fn release_head(&mut self) {}

    fn protocol(&self) -> &'static str {
        "2"
    }

    fn origin(&self) -> Origin<'_> {
        Origin {
            forwarded_for: self.link.client_text.as_bytes(),
            scheme: self.link.scheme,
        }
    }

    fn write_proxy_header(&self, out: &mut Vec<u8>, version: proxy_protocol::Version) {
        let destination = destination_or_unknown(self.link.destination);
        proxy_protocol::write_header(out, version, self.link.peer, destination);
    }

    fn early_body(&self) -> Option<&[u8]> {
        None
    }

    fn consume_early(&mut self, _n: usize) {}

    /// DATA received and its flow-control window given back, so that the client sends on,
    /// until `up_to` bytes are held or the body ended.
    async fn hold_body(&mut self, up_to: u64, received: &Meter) -> Result<(), BodyRefused> {
        let limit = TimeLimit::Idle(self.link.relay.idle);
        self.body.hold(up_to, limit, received).await
    }

    fn split(&mut self) -> (&mut H2Body<'s>, &mut H2Sink) {
        (&mut self.body, &mut self.sink)
    }

    async fn answer(&mut self, out: &mut Vec<u8>, answer: &Answer<'_>) -> (u64, bool) {
        let idle = self.link.relay.idle;
        let sent = self.sink.answer(out, answer, idle).await;
        (sent, true)
    }

    /// Never reached: HTTP/2 requests carry no Upgrade (the h2 crate refuses it) and CONNECT
    /// is answered before the exchange (request.rs).
    async fn tunnel(
        &mut self,
        _work: &mut Buffers,
        _server: &ServerStream,
        _relay: &RelaySettings,
    ) -> io::Result<(u64, TunnelEnd)> {
        Err(io::Error::other("no tunnel over an HTTP/2 stream"))
    }

    /// What the client still sends of the body is refused when the stream's handles drop (the
    /// h2 crate resets the stream).
    fn leave_unread(&mut self) {}

    fn held_for_close(&mut self, _held: bool) {}
}

/// The request body: the stream's DATA, then its trailers.
pub(super) struct H2Body<'s> {
    recv: RecvStream,
    /// The trailers as field lines.
    scratch: Vec<u8>,
    /// DATA received before the server was picked (`request_buffer`), which goes first.
    held: Vec<Bytes>,
    /// The budget (`buffer_memory`) those bytes take.
    lease: BufferLease<'s>,
    /// The body's DATA all came while it was held.
    ended: bool,
}

impl BodySource for H2Body<'_> {
    async fn upload<U: RequestBodySink>(
        &mut self,
        to: &mut U,
        framing: BodyFraming,
        relay: &RelaySettings,
        meter: &Meter,
    ) -> Result<(), RelayError> {
        if matches!(framing, BodyFraming::Empty | BodyFraming::UntilClose) {
            return Ok(());
        }
        let limit = TimeLimit::Idle(relay.idle);
        for data in std::mem::take(&mut self.held) {
            to.send(BodyPart::Data(&data[..])).await?;
            meter.add(data.len() as u64);
        }
        self.lease.release();
        while !self.ended {
            let Some(data) = self.next_data(limit).await? else {
                break;
            };
            let n = data.len();
            if n == 0 {
                continue;
            }
            to.send(BodyPart::Data(&data[..])).await?;
            meter.add(n as u64);
            // The client may send as much again.
            let _ = self.recv.flow_control().release_capacity(n);
        }
        if let Some(trailers) = self.trailers(limit).await? {
            self.scratch.clear();
            super::response::put_fields(&mut self.scratch, &trailers);
            to.send(BodyPart::Trailers(Trailers(&self.scratch))).await?;
        }
        to.send(BodyPart::End).await
    }
}

impl H2Body<'_> {
    /// Holds DATA until `up_to` bytes are held or the body ended; each DATA's window goes back
    /// to the client at once.
    async fn hold(
        &mut self,
        up_to: u64,
        limit: TimeLimit,
        received: &Meter,
    ) -> Result<(), BodyRefused> {
        while self.lease.held() < up_to {
            let data = match self.next_data(limit).await {
                Ok(Some(data)) => data,
                Ok(None) => {
                    self.ended = true;
                    return Ok(());
                }
                Err(RelayError::Read(e)) if e.kind() == io::ErrorKind::TimedOut => {
                    return Err(BodyRefused::LATE)
                }
                Err(_) => return Err(BodyRefused::GONE),
            };
            let n = data.len();
            received.add(n as u64);
            let _ = self.recv.flow_control().release_capacity(n);
            let taken = self.lease.grow(n as u64);
            self.held.push(data);
            if !taken {
                // Kept (it is here already), but the rest streams.
                self.lease.count_fallback();
                return Ok(());
            }
        }
        Ok(())
    }

    /// The next DATA of the stream; `None` at its end.
    async fn next_data(&mut self, limit: TimeLimit) -> Result<Option<Bytes>, RelayError> {
        let recv = &mut self.recv;
        let next = wait(async { Ok(poll_fn(|cx| recv.poll_data(cx)).await) }, limit)
            .await
            .map_err(RelayError::Read)?;
        match next {
            None => Ok(None),
            Some(Ok(data)) => Ok(Some(data)),
            Some(Err(e)) => Err(RelayError::Read(h2_error(e))),
        }
    }

    async fn trailers(&mut self, limit: TimeLimit) -> Result<Option<http::HeaderMap>, RelayError> {
        let recv = &mut self.recv;
        wait(async { Ok(recv.trailers().await) }, limit)
            .await
            .map_err(RelayError::Read)?
            .map_err(|e| RelayError::Read(h2_error(e)))
    }
}
