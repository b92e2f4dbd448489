//! The response head from an HTTP/2 stream, as the message head the front-ends rebuild the
//! client's head from (`ResponseHead`: status and fields as spans of the exchange's buffer),
//! with no HTTP/1.1 text written or parsed; trailers both ways as field lines.

use super::{io_error, BodyState, H2Download};
use crate::buffer::IoBuf;
use crate::exchange::failure::ExchangeError;
use crate::exchange::server::HeadRead;
use crate::http::fields::{role_of, Field, Span};
use crate::http::part::Trailers;
use crate::http::response::frame_message_head;
use crate::http::{ResponseHead, MAX_HEAD_BYTES};
use crate::relay::Meter;
use crate::state::control::{Evidence, Failure};
use crate::stream::{wait, TimeLimit};
use http::header::{HeaderName, HeaderValue};
use http::HeaderMap;
use std::io;

impl H2Download<'_> {
    /// Awaits the response head (HTTP/2 has no interim responses the h2 crate passes on, so
    /// the first head is the final one). The server may stay silent for `idle` at most while
    /// the request body does not move either.
    pub(super) async fn read_response_head(
        &mut self,
        upload: &Meter,
    ) -> Result<HeadRead, ExchangeError> {
        let Some(mut response) = self.response.take() else {
            return Err(ExchangeError::server(502, "no response on this stream"));
        };
        let mut uploaded = upload.get();
        let answer = loop {
            match wait(
                async { Ok::<_, io::Error>((&mut response).await) },
                TimeLimit::Idle(self.idle),
            )
            .await
            {
                Ok(answer) => break answer,
                Err(_) if upload.get() != uploaded => uploaded = upload.get(),
                Err(_) => return Err(ExchangeError::server(504, "no response in time")),
            }
        };
        let (parts, body) = match answer {
            Ok(answer) => answer.into_parts(),
            Err(e) => return Err(stream_failed(e)),
        };
        self.buf.consume(self.buf.len());
        if !read_head(self.buf, self.head, parts.status.as_u16(), &parts.headers) {
            return Err(ExchangeError::server(502, "response head too large"));
        }
        let more = !body.is_end_stream();
        if let Err(bad) = frame_message_head(self.buf.filled(), self.kind, more, self.head) {
            return Err(ExchangeError::bad_response(bad));
        }
        self.body = Some(body);
        self.state = BodyState::Data;
        Ok(HeadRead::Final)
    }
}

/// A stream that failed before its response: refused by the server (`REFUSED_STREAM`, or above
/// a GOAWAY's last stream id: it was never processed, so it may go again on another stream:
/// [`ExchangeError::Refused`]); lost with its connection (closed or broken: the server may have
/// processed it, so only an idempotent request goes again, as after a stale HTTP/1.1
/// connection: [`ExchangeError::Stale`]); or broken otherwise.
fn stream_failed(e: h2::Error) -> ExchangeError {
    let refused =
        e.reason() == Some(h2::Reason::REFUSED_STREAM) || (e.is_go_away() && e.is_remote());
    if refused {
        return ExchangeError::Refused;
    }
    if e.is_io() {
        return ExchangeError::Stale;
    }
    ExchangeError::Unanswered(Failure {
        why: format!("HTTP/2 stream: {}", io_error(e)),
        evidence: Evidence::Broken,
    })
}

/// Sets `head`'s status, reason and fields, their bytes written into `out` as a head read
/// from a socket would be: it grows up to MAX_HEAD_BYTES; `false` when the head is longer.
fn read_head(out: &mut IoBuf, head: &mut ResponseHead, status: u16, fields: &HeaderMap) -> bool {
    head.status = status;
    head.fields.clear();
    // HTTP/2 has no reason phrase: the standard one, as HTTP/1.1 clients expect one.
    let reason = http::StatusCode::from_u16(status)
        .ok()
        .and_then(|s| s.canonical_reason())
        .unwrap_or_default();
    let Some(reason) = put(out, reason.as_bytes()) else {
        return false;
    };
    head.reason = reason;
    for (name, value) in fields {
        let name_bytes = name.as_str().as_bytes();
        let (Some(name), Some(value)) = (put(out, name_bytes), put(out, value.as_bytes())) else {
            return false;
        };
        head.fields.push(Field {
            name,
            value,
            role: role_of(name_bytes),
        });
    }
    true
}

/// Appends `bytes` to `out`'s filled bytes (growing it as a head's buffer grows, up to
/// MAX_HEAD_BYTES); their span, or `None` when they do not fit.
fn put(out: &mut IoBuf, bytes: &[u8]) -> Option<Span> {
    let start = out.len();
    let mut rest = bytes;
    while !rest.is_empty() {
        out.make_room_for_head(MAX_HEAD_BYTES);
        let spare = out.spare();
        if spare.is_empty() {
            return None;
        }
        let n = rest.len().min(spare.len());
        spare[..n].copy_from_slice(&rest[..n]);
        out.fill(n);
        rest = &rest[n..];
    }
    Some(Span {
        start: start as u32,
        end: out.len() as u32,
    })
}

/// Writes `fields` as `name: value` lines (names as HTTP/2 carries them, lower case).
pub(super) fn put_field_lines(out: &mut Vec<u8>, fields: &HeaderMap) {
    for (name, value) in fields {
        out.extend_from_slice(name.as_str().as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(value.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
}

/// A trailer section (field lines) as the h2 crate sends it; a field HTTP/2 cannot carry is
/// left out.
pub(super) fn trailer_map(trailers: Trailers<'_>) -> HeaderMap {
    let mut map = HeaderMap::new();
    trailers.for_each(|name, value| {
        if let (Ok(name), Ok(value)) =
            (HeaderName::from_bytes(name), HeaderValue::from_bytes(value))
        {
            map.append(name, value);
        }
    });
    map
}
