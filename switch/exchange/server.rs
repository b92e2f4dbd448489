//! The server side of an exchange, as a protocol offers it (HAProxy's HTX, Pingora's
//! `HttpTask`): the request body goes to it as [`BodyPart`]s ([`RequestBodySink`]), and the
//! response comes from it as a head and [`BodyPart`]s ([`ResponseSource`]). Each protocol to
//! the servers is one implementation (upstream/h1/ for HTTP/1.1); each front-end's body source
//! and response sink (exchange/client.rs) are written against these traits only, so a second
//! server protocol changes no front-end.
//!
//! One capability crosses the seam: when the server side is an HTTP/1 connection over a plain
//! socket ([`RequestBodySink::h1_wire`], [`ResponseSource::h1_wire`]), an HTTP/1 front-end moves
//! the body itself, by `splice(2)` from the threshold up and with the chunk framing checked in
//! place (relay/), as HAProxy splices only when h1 is on both ends. Everything else goes part by
//! part.

use super::failure::ExchangeError;
use crate::buffer::IoBuf;
use crate::http::part::BodyPart;
use crate::http::ResponseHead;
use crate::relay::{Meter, RelayError};
use crate::socket::Socket;
use std::future::Future;

/// An HTTP/1 server connection over a plain socket, for a front-end that moves an HTTP/1 body
/// itself (the capability above): the socket, and what was read from it past the head.
pub(crate) struct H1Wire<'w> {
    pub socket: &'w Socket,
    pub buf: &'w mut IoBuf,
}

/// The request body's way to the server.
pub(crate) trait RequestBodySink: Send {
    /// Sends one part of the body (the caller counts its bytes). `End` follows the last data
    /// or the trailers.
    fn send(&mut self, part: BodyPart<'_>) -> impl Future<Output = Result<(), RelayError>> + Send;

    /// The server connection, when it is HTTP/1 over a plain socket (the caller then sends the
    /// body as it came, framed as the request head said).
    fn h1_wire(&self) -> Option<&Socket>;
}

/// What a read of the response head found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum HeadRead {
    /// An interim (1xx, not 101) response: pass it on, then read the next head.
    Interim,
    /// The final response head (or a 101).
    Final,
}

/// A request on a server connection, as two directions that run at once.
pub(crate) trait ServerSide: Send {
    /// The request body's way.
    type Up: RequestBodySink;
    /// The response's way.
    type Down: ResponseSource;

    fn split(&mut self) -> (&mut Self::Up, &mut Self::Down);
}

/// The response, from the server: its head, then its body.
pub(crate) trait ResponseSource: ResponseBody {
    /// Reads until a response head is in: an interim one (pass it on, then read again) or the
    /// final one. The server may be silent for the idle timeout at most, counting only time in
    /// which the request body (`uploaded`) did not move either.
    fn read_head(
        &mut self,
        uploaded: &Meter,
    ) -> impl Future<Output = Result<HeadRead, ExchangeError>> + Send;

    /// The response head read last, and the bytes its spans index (valid until the body is
    /// read).
    fn head(&self) -> (&ResponseHead, &[u8]);

    /// The whole response was read (ahead of a client that takes it slowly): the server is let
    /// go now rather than when the client has it all. A connection that carries one request
    /// at a time is closed, never kept for another request (a server that serves one
    /// connection at a time is free at once, as behind nginx, which does not keep server
    /// connections by default); a stream of a shared connection has nothing to do.
    fn let_go(&mut self) {}

    /// Whether the whole body is already here with the head (a small answer): the server is
    /// done with it, and reading it ahead of the client would only add a copy.
    fn whole_body_here(&self) -> bool {
        false
    }
}

/// A response body, as a sink takes it: from the server side, or from what the switch read
/// ahead of a slow client (buffering/read_ahead.rs).
pub(crate) trait ResponseBody: Send {
    /// The next part of the response body, as its head framed it. A close before the body's
    /// end is [`RelayError::Truncated`].
    fn next_part(&mut self) -> impl Future<Output = Result<BodyPart<'_>, RelayError>> + Send;

    /// Whether the body's data has all been given: only its end (or its trailers) follows, so
    /// the last data may carry the end with it.
    fn finished(&self) -> bool;

    /// Whether more of the body is already here (the next part comes without waiting for the
    /// server): a sink gathers small parts while it is so, and sends them when it is not.
    fn has_buffered(&self) -> bool;

    /// The server connection, when it is HTTP/1 over a plain socket (the caller then relays
    /// the body as the head framed it; what was read past the head is in the buffer).
    fn h1_wire(&mut self) -> Option<H1Wire<'_>>;
}
