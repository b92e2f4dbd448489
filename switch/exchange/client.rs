//! The client side of an exchange, as a protocol front-end offers it: the request (its head,
//! and its body as a [`BodySource`]) and the way back (a [`ResponseSink`]). The h1 front-end
//! (connection/h1/client.rs) implements them over the client's connection, the h2 front-end
//! (connection/h2/stream.rs, connection/h2/response.rs) over one stream of its connection; the
//! exchange runs unchanged under both. Generic, never `dyn`: each front-end gets its own
//! compiled exchange, with no dispatch on the per-request path.
//!
//! The body source and the sink are separate parts ([`ClientSide::split`]) because they run
//! at once: the body goes up while the response head is awaited and while the response comes
//! down (full duplex).

use super::server::{RequestBodySink, ResponseBody};
use super::Buffers;
use crate::edge::proxy_protocol;
use crate::http::rewrite::{Recoded, Scheme};
use crate::http::status::Answer;
use crate::http::{RequestHead, ResponseHead};
use crate::policy::headers::HeaderActions;
use crate::relay::{Meter, RelayError, RelaySettings, TunnelEnd};
use crate::tls::stream::ServerStream;
use std::future::Future;
use std::io;
use tcpvs_modules::ResponseField;

/// The request of one exchange, and the client it came from.
pub(crate) trait ClientSide {
    /// The request body on its way to the server.
    type Body: BodySource;
    /// The response on its way to the client.
    type Sink: ResponseSink;

    /// The request head, and the bytes its spans index (they stay valid until
    /// [`ClientSide::release_head`]; the head's other fields stay valid after).
    fn request(&self) -> (&RequestHead, &[u8]);

    /// Whether the request is a gRPC call (http/grpc.rs): the switch's own answers to it are
    /// said the gRPC way. Only HTTP/2 clients make gRPC calls.
    fn grpc(&self) -> bool;

    /// The head is rebuilt or answered: its bytes may go (what follows is its body).
    fn release_head(&mut self);

    /// Who sent the request, as the server is told (X-Forwarded-For, X-Forwarded-Proto).
    fn origin(&self) -> Origin<'_>;

    /// The protocol version the request came in, as a trace's span says it: the head's
    /// (`1.0`, `1.1`); an HTTP/2 stream says `2`.
    fn protocol(&self) -> &'static str {
        match self.request().0.version {
            crate::http::fields::Version::Http10 => "1.0",
            crate::http::fields::Version::Http11 => "1.1",
        }
    }

    /// A PROXY protocol header naming the client and the address it connected to.
    fn write_proxy_header(&self, out: &mut Vec<u8>, version: proxy_protocol::Version);

    /// The whole body when it is small and already here, to go up in the same write as the
    /// head; `None`: it is streamed by the [`BodySource`].
    fn early_body(&self) -> Option<&[u8]>;

    /// `n` bytes of the early body went up.
    fn consume_early(&mut self, n: usize);

    /// Receives the request body, up to `up_to` bytes of it, before a server is picked (the
    /// pool's `request_buffer`: buffering/); the rest, if any, streams as without. A budget
    /// (`buffer_memory`) with no room leaves the body to stream, counted. `Err`: the client
    /// failed to send it.
    /// The bytes received count in `received`.
    fn hold_body(
        &mut self,
        up_to: u64,
        received: &Meter,
    ) -> impl Future<Output = Result<(), BodyRefused>> + Send;

    /// The body source and the response sink, to be driven at once.
    fn split(&mut self) -> (&mut Self::Body, &mut Self::Sink);

    /// Answers the request with what the switch says itself: its own error or refusal, or a
    /// rule's answer (a redirect, `respond`, a limit's refusal), written in `out`. The one way
    /// every front-end answers from the switch. Returns the bytes sent and whether the client
    /// may send another request.
    fn answer(
        &mut self,
        out: &mut Vec<u8>,
        answer: &Answer<'_>,
    ) -> impl Future<Output = (u64, bool)> + Send;

    /// After a 101 (or a 2xx to CONNECT) in `work.response`: sends that head, then joins the
    /// client and `server` both ways until the tunnel ends. Returns the head's size and how
    /// the tunnel ended; `Err`: the head could not be sent.
    fn tunnel(
        &mut self,
        work: &mut Buffers,
        server: &ServerStream,
        relay: &RelaySettings,
    ) -> impl Future<Output = io::Result<(u64, TunnelEnd)>> + Send;

    /// The client may still be sending what the switch did not read (the rest of a body):
    /// the connection must not take another request, and closing must drain it.
    fn leave_unread(&mut self);

    /// The last response went out held back for the FIN (the connection closes after it).
    fn held_for_close(&mut self, held: bool);
}

/// Why a request body could not be received: the client's failure, answered with `status` (0:
/// the client went away, nobody to answer); never a server's.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct BodyRefused {
    pub status: u16,
    pub why: &'static str,
}

impl BodyRefused {
    /// The client closed or reset before its body was in.
    pub(crate) const GONE: BodyRefused = BodyRefused {
        status: 0,
        why: "client closed during the request body",
    };
    /// A chunked body whose framing is broken.
    pub(crate) const MALFORMED: BodyRefused = BodyRefused {
        status: 400,
        why: "invalid chunked request body",
    };
    /// Nothing came for the idle timeout.
    pub(crate) const LATE: BodyRefused = BodyRefused {
        status: 408,
        why: "request body not received in time",
    };
    /// It came slower than `min_body_rate`.
    pub(crate) const TOO_SLOW: BodyRefused = BodyRefused {
        status: 408,
        why: "request body slower than min_body_rate",
    };
}

/// Who sent a request, as the server is told.
#[derive(Clone, Copy)]
pub(crate) struct Origin<'o> {
    /// The client's address as X-Forwarded-For text.
    pub forwarded_for: &'o [u8],
    /// Whether the client came over TLS.
    pub scheme: Scheme,
}

/// What the response gets on its way to the client besides the server's fields.
#[derive(Clone, Copy, Default)]
pub(crate) struct ResponseEdit<'e> {
    /// The field the pool's module adds (a persistence cookie).
    pub field: Option<&'e ResponseField>,
    /// The rule's `response_headers`.
    pub headers: Option<&'e HeaderActions>,
    /// The body is compressed on the way (compress/): its length goes, its coding is said.
    pub recoded: Option<Recoded>,
}

/// The request body, sent to the server.
pub(crate) trait BodySource {
    /// Sends the rest of the body (what did not go with the head) to the server side `to`,
    /// counting it in `meter`.
    fn upload<U: RequestBodySink>(
        &mut self,
        to: &mut U,
        framing: crate::http::BodyFraming,
        relay: &RelaySettings,
        meter: &Meter,
    ) -> impl Future<Output = Result<(), RelayError>> + Send;
}

/// The response, sent to the client.
pub(crate) trait ResponseSink {
    /// Relays an interim (1xx) response (in `response`, its bytes in `raw`) if the client
    /// understands it. `Err`: the client is gone.
    fn interim(
        &mut self,
        out: &mut Vec<u8>,
        response: &ResponseHead,
        raw: &[u8],
    ) -> impl Future<Output = io::Result<()>> + Send;

    /// Writes the final response head for the client into `out` (with the module's field and
    /// the rule's field actions: `edit`), and decides the connection's fate: `true` when the
    /// client may send another request (`upload_complete`: the request body is all in).
    fn start_response(
        &mut self,
        out: &mut Vec<u8>,
        response: &ResponseHead,
        raw: &[u8],
        edit: ResponseEdit<'_>,
        upload_complete: bool,
    ) -> bool;

    /// The size of the head [`ResponseSink::start_response`] wrote (in `out`, for a protocol
    /// that writes heads as text), as the access log and `bytes_out` count it.
    fn head_size(&self, out: &[u8]) -> u64 {
        out.len() as u64
    }

    /// Sends the head in `out` and then the body from the server side `from`; the body bytes
    /// count in `meter`.
    fn relay_body<R: ResponseBody>(
        &mut self,
        from: &mut R,
        out: &mut Vec<u8>,
        relay: &RelaySettings,
        meter: &Meter,
    ) -> impl Future<Output = Result<(), RelayError>> + Send;
}
