//! The response head from an HTTP/2 stream, written as the HTTP/1.1 head the front-ends
//! rebuild the client's head from (mod.rs says why), and parsed in place; trailers both ways
//! as field lines.

use super::{io_error, BodyState, H2Download};
use crate::exchange::failure::ExchangeError;
use crate::exchange::server::HeadRead;
use crate::http::part::Trailers;
use crate::http::{parse_response, MAX_HEAD_BYTES};
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
        write_head(
            self.buf,
            parts.status.as_u16(),
            &parts.headers,
            !body.is_end_stream(),
            self.kind.is_head,
        );
        match parse_response(self.buf.filled(), self.kind, self.head) {
            Ok(true) => {}
            Ok(false) => return Err(ExchangeError::server(502, "response head too large")),
            Err(bad) => return Err(ExchangeError::bad_response(bad)),
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

/// Writes `status` and `fields` as an HTTP/1.1 head into `out`; a body of unknown length
/// (`more` DATA may come, no Content-Length) is marked chunked, the framing HTTP/1.1 would
/// give it, and none (the stream ended with the head) as a length of 0, so that the head says
/// how the body ends.
fn write_head(
    out: &mut crate::buffer::IoBuf,
    status: u16,
    fields: &HeaderMap,
    more: bool,
    is_head: bool,
) {
    let mut text = Vec::with_capacity(256);
    text.extend_from_slice(b"HTTP/1.1 ");
    text.extend_from_slice(status.to_string().as_bytes());
    text.push(b' ');
    // HTTP/2 has no reason phrase: the standard one, as HTTP/1.1 clients expect one.
    let reason = http::StatusCode::from_u16(status)
        .ok()
        .and_then(|s| s.canonical_reason())
        .unwrap_or_default();
    text.extend_from_slice(reason.as_bytes());
    text.extend_from_slice(b"\r\n");
    put_field_lines(&mut text, fields);
    let sized = fields.contains_key(http::header::CONTENT_LENGTH);
    if more && !sized {
        text.extend_from_slice(b"transfer-encoding: chunked\r\n");
    } else if !more && !sized && !is_head && !matches!(status, 204 | 304) {
        // The stream ended with its head (gRPC's Trailers-Only): no body, which HTTP/1.1
        // says with a length of 0 (else it would read as a body until the close), and which
        // an HTTP/2 client gets as one HEADERS frame with END_STREAM.
        text.extend_from_slice(b"content-length: 0\r\n");
    }
    text.extend_from_slice(b"\r\n");
    // Into the buffer as a head read from a socket would be: it grows up to MAX_HEAD_BYTES, and
    // a longer head stays incomplete (refused as too large).
    let mut rest = &text[..];
    while !rest.is_empty() {
        out.make_room_for_head(MAX_HEAD_BYTES);
        let spare = out.spare();
        if spare.is_empty() {
            break;
        }
        let n = rest.len().min(spare.len());
        spare[..n].copy_from_slice(&rest[..n]);
        out.fill(n);
        rest = &rest[n..];
    }
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
