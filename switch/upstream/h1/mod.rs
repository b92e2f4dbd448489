//! HTTP/1.1 to a server, over plain TCP or TLS: the request head rebuilt as HTTP/1.1 text and sent with a small body
//! (request.rs), the request body framed as the head says ([`H1Upload`]), the response head
//! parsed from the connection's buffer (response_head.rs) and its body read as its framing
//! says ([`H1Download`]: relay/parts.rs), or moved as it came by an HTTP/1 front-end
//! (the `h1_wire` capability of exchange/server.rs, offered over plain TCP only: under TLS
//! the bytes on the socket are not the body's).

mod request;
mod response_head;

use crate::buffer::IoBuf;
use crate::exchange::failure::ExchangeError;
use crate::exchange::server::{
    H1Wire, HeadRead, RequestBodySink, ResponseBody, ResponseSource, ServerSide,
};
use crate::http::part::BodyPart;
use crate::http::response::RequestKind;
use crate::http::{BodyFraming, ResponseHead};
use crate::relay::parts::{put_part, PartFraming, PartReader};
use crate::relay::{Meter, RelayError};
use crate::socket::Socket;
use crate::stream::{write_all, Io, TimeLimit};
use crate::tls::stream::ServerStream;
use std::time::Duration;

/// What one attempt on an HTTP/1.1 server connection needs to know of its request.
#[derive(Clone, Copy)]
pub(crate) struct H1Request {
    pub kind: RequestKind,
    /// How the body that did not go with the head is framed (`Empty`: none left).
    pub body_left: BodyFraming,
    /// The connection was used before (a failure before any byte back may be its close).
    pub reused: bool,
    pub idle: Duration,
}

/// One request on an HTTP/1.1 server connection: its two directions, which run at once.
pub(crate) struct H1Server<'x> {
    up: H1Upload<'x>,
    down: H1Download<'x>,
}

impl<'x> H1Server<'x> {
    /// The request on `socket`; the response is read into `buf` (emptied first) and its head
    /// parsed into `response`.
    pub(crate) fn new(
        socket: &'x ServerStream,
        buf: &'x mut IoBuf,
        response: &'x mut ResponseHead,
        request: H1Request,
    ) -> Self {
        buf.consume(buf.len());
        let framing = match request.body_left {
            BodyFraming::Chunked => PartFraming::Chunked,
            _ => PartFraming::Raw,
        };
        H1Server {
            up: H1Upload {
                socket,
                framing,
                scratch: Vec::new(),
                ended: false,
                limit: TimeLimit::Idle(request.idle),
            },
            down: H1Download {
                socket,
                buf,
                response,
                request,
                head_len: 0,
                received_any: false,
                body: PartReader::new(BodyFraming::Empty, 0),
            },
        }
    }
}

impl<'x> ServerSide for H1Server<'x> {
    type Up = H1Upload<'x>;
    type Down = H1Download<'x>;

    fn split(&mut self) -> (&mut H1Upload<'x>, &mut H1Download<'x>) {
        (&mut self.up, &mut self.down)
    }
}

/// The request body, written to the server connection.
pub(crate) struct H1Upload<'x> {
    socket: &'x ServerStream,
    framing: PartFraming,
    /// A chunk on its way, framed.
    scratch: Vec<u8>,
    /// The chunked body's last chunk went.
    ended: bool,
    limit: TimeLimit,
}

impl RequestBodySink for H1Upload<'_> {
    async fn send(&mut self, part: BodyPart<'_>) -> Result<(), RelayError> {
        let bytes = match (part, self.framing) {
            (BodyPart::Data(data), PartFraming::Raw) => data,
            (_, PartFraming::Raw) => return Ok(()),
            (part, PartFraming::Chunked) => {
                self.scratch.clear();
                put_part(
                    &mut self.scratch,
                    part,
                    PartFraming::Chunked,
                    &mut self.ended,
                );
                &self.scratch
            }
        };
        if bytes.is_empty() {
            return Ok(());
        }
        write_all(self.socket, bytes, self.limit)
            .await
            .map_err(RelayError::Write)
    }

    fn h1_wire(&self) -> Option<&Socket> {
        self.socket.spliceable()
    }
}

/// The response, read from the server connection.
pub(crate) struct H1Download<'x> {
    socket: &'x ServerStream,
    buf: &'x mut IoBuf,
    response: &'x mut ResponseHead,
    request: H1Request,
    /// The bytes of the last head read, still at the front of `buf`.
    head_len: usize,
    /// A byte of the response came (a failure is no longer the silent close of a reused
    /// connection).
    received_any: bool,
    /// Where the body's reading stands (from the final head on).
    body: PartReader,
}

impl ResponseSource for H1Download<'_> {
    fn read_head(
        &mut self,
        uploaded: &Meter,
    ) -> impl std::future::Future<Output = Result<HeadRead, ExchangeError>> + Send {
        // The inherent method's own future: no layer of its own around it.
        self.read_response_head(uploaded)
    }

    fn head(&self) -> (&ResponseHead, &[u8]) {
        (self.response, self.buf.filled())
    }

    fn whole_body_here(&self) -> bool {
        let here = self.buf.len().saturating_sub(self.response.len) as u64;
        matches!(self.response.framing, BodyFraming::Length(n) if n <= here)
    }

    fn let_go(&mut self) {
        // Not parked afterwards (exchange/response.rs `finish`); the server sees its end now.
        self.response.server_keep_alive = false;
        let _ = rustix::net::shutdown(self.socket.socket(), rustix::net::Shutdown::Both);
    }
}

impl ResponseBody for H1Download<'_> {
    async fn next_part(&mut self) -> Result<BodyPart<'_>, RelayError> {
        let limit = TimeLimit::Idle(self.request.idle);
        self.body.next_part(self.socket, self.buf, limit).await
    }

    fn finished(&self) -> bool {
        self.body.finished()
    }

    fn has_buffered(&self) -> bool {
        self.body.has_buffered(self.buf)
    }

    fn h1_wire(&mut self) -> Option<H1Wire<'_>> {
        let socket = self.socket.spliceable()?;
        self.body.release(self.buf);
        Some(H1Wire {
            socket,
            buf: self.buf,
        })
    }
}
