//! The response of an HTTP/2 stream: the server's head as HEADERS (without the fields of one
//! connection: RFC 9113 section 8.2.2), its body's parts (exchange/server.rs: whatever
//! protocol the server spoke, this file frames none of it) as DATA sent as fast as the
//! client's flow control allows, its trailers as a trailing HEADERS, and answers of the switch
//! itself.
//!
//! Memory: a stream holds its server buffer and at most one gathering of its parts waiting for
//! the client's window ([`send_data`] reserves before it reads on); the h2 crate buffers at most
//! `MAX_SEND_BUFFER` per stream (h2.rs), so a client that stops reading holds
//! `SETTINGS_MAX_CONCURRENT_STREAMS` times that at most, while its servers wait.

use super::error::h2_error;
use super::head_block::HeadBlock;
use crate::exchange::client::{ResponseEdit, ResponseSink};
use crate::exchange::server::ResponseBody;
use crate::http::chunked::may_be_trailer;
use crate::http::fields::FieldRole;
use crate::http::part::{BodyPart, Trailers};
use crate::http::rewrite::weakened_etag;
use crate::http::status::{reason_phrase, write_error_body, Answer, Given};
use crate::http::{BodyFraming, ResponseHead};
use crate::policy::own_answers::OwnAnswers;
use crate::relay::{Meter, RelayError, RelaySettings};
use crate::stream::{wait, TimeLimit};
use bytes::Bytes;
use h2::server::SendResponse;
use h2::SendStream;
use http::header::{HeaderName, HeaderValue};
use http::{HeaderMap, StatusCode};
use std::future::poll_fn;
use std::io;
use std::time::Duration;

/// Data is sent once this much has gathered (or when no more is already here).
const CHUNK_SEND_BYTES: usize = 32 * 1024;

/// The response side of a stream.
pub(super) struct H2Sink {
    respond: SendResponse<Bytes>,
    /// The response head, encoded by `start_response`, sent by `relay_body`.
    head: Option<HeadBlock>,
    /// Its size as HTTP/1.1 would write it (`head_size_as_http1`).
    head_size: u64,
    framing: BodyFraming,
    /// The request was HEAD: the response's fields describe a body that is not sent.
    is_head: bool,
}

impl H2Sink {
    pub(super) fn new(respond: SendResponse<Bytes>, is_head: bool) -> H2Sink {
        H2Sink {
            respond,
            head: None,
            head_size: 0,
            framing: BodyFraming::Empty,
            is_head,
        }
    }

    /// Answers with what the switch says itself (its own error, a rule's answer); returns the
    /// bytes sent: the body, and the head as HTTP/1.1 counts it.
    pub(super) async fn answer(
        &mut self,
        out: &mut Vec<u8>,
        answer: &Answer<'_>,
        idle: Duration,
    ) -> u64 {
        send_answer(&mut self.respond, out, answer, self.is_head, idle).await
    }
}

/// The fields of the switch's own errors (beside `content-length`).
const ERROR_FIELDS: [(&[u8], &[u8]); 2] = [
    (b"content-type", b"text/plain"),
    (b"cache-control", b"no-store"),
];

/// `answer` as status, fields and body: a rule's as it is; an error of the switch's own as
/// text, written in `out`.
fn given<'a>(answer: &Answer<'a>, out: &'a mut Vec<u8>) -> Given<'a> {
    match *answer {
        Answer::Given(given) => given,
        Answer::Error { status, why } => {
            out.clear();
            write_error_body(out, status, why);
            Given {
                status,
                fields: &ERROR_FIELDS,
                body: out,
            }
        }
    }
}

/// Answers a stream the switch does not run (connection/h2/admission.rs): `503` and its text,
/// queued at once without waiting for the client's window (a few dozen bytes, charged to the
/// connection's budget of refusals), so that nothing waits for a client that does not read.
/// The service's `response_headers` apply; its 503 page does not (`dress_short`).
pub(super) fn refuse_at_once(
    respond: &mut SendResponse<Bytes>,
    is_head: bool,
    why: &str,
    own: &OwnAnswers,
) {
    let mut out = Vec::new();
    let (mut text, mut fields) = (Vec::new(), Vec::new());
    let answer = own.dress_short(&Answer::Error { status: 503, why }, &mut text, &mut fields);
    let given = given(&answer, &mut out);
    if let (Some(mut send), _) = start_answer(respond, &given, is_head) {
        // The answer's own body (the error's text in `out`, or the dressed answer's): a few
        // dozen bytes, the length `start_answer` announced.
        let _ = send.send_data(Bytes::copy_from_slice(given.body), true);
    }
}

/// Sends `answer` on `respond` (an error's text written in `out`): its fields,
/// `content-length`, and its body unless the request was HEAD or the status frames none (204,
/// 304). Returns the body bytes sent.
pub(super) async fn send_answer(
    respond: &mut SendResponse<Bytes>,
    out: &mut Vec<u8>,
    answer: &Answer<'_>,
    is_head: bool,
    idle: Duration,
) -> u64 {
    let answer = given(answer, out);
    let (send, head_size) = start_answer(respond, &answer, is_head);
    let Some(mut send) = send else {
        return head_size;
    };
    // Copied a piece at a time, as the client's window takes it: a stream that does not read
    // holds one piece, not a copy of the whole body (an error page of up to 1 MiB, the same
    // for every stream).
    let mut sent = head_size;
    let pieces = answer.body.chunks(ANSWER_PIECE);
    let last = pieces.len().saturating_sub(1);
    for (i, piece) in pieces.enumerate() {
        let piece = Bytes::copy_from_slice(piece);
        let n = piece.len() as u64;
        if send_data(&mut send, piece, i == last, TimeLimit::Idle(idle))
            .await
            .is_err()
        {
            return sent;
        }
        sent += n;
    }
    sent
}

/// The largest piece of the switch's own answer copied for the stream at once: one DATA
/// frame of the default size.
const ANSWER_PIECE: usize = 16 * 1024;

/// Sends `answer`'s head; the stream to send its body on, if it has one, and the head's size
/// as HTTP/1.1 counts it (0 when it could not be sent).
fn start_answer(
    respond: &mut SendResponse<Bytes>,
    answer: &Given<'_>,
    is_head: bool,
) -> (Option<SendStream<Bytes>>, u64) {
    let status = status_code(answer.status, StatusCode::INTERNAL_SERVER_ERROR);
    let mut head = HeadBlock::new(status.as_u16(), reason_phrase(status.as_u16()).len());
    let frames_content = !matches!(status.as_u16(), 204 | 304);
    for (name, value) in answer.fields {
        // The length is the body's, said once below.
        if !(frames_content && name.eq_ignore_ascii_case(b"content-length")) {
            head.field(name, value);
        }
    }
    if frames_content {
        head.content_length(answer.body.len() as u64);
    }
    let no_body = is_head || !frames_content || answer.body.is_empty();
    let size = head.http1_size();
    match respond.send_response_encoded(status, head.into_bytes(), no_body) {
        Ok(send) => (send.filter(|_| !no_body), size),
        Err(_) => (None, 0),
    }
}

/// `status` as the h2 crate takes it; `fallback` for one outside 100-999.
fn status_code(status: u16, fallback: StatusCode) -> StatusCode {
    StatusCode::from_u16(status).unwrap_or(fallback)
}

impl ResponseSink for H2Sink {
    /// 100 Continue and the other interim responses go to the client as they come.
    async fn interim(
        &mut self,
        _out: &mut Vec<u8>,
        response: &ResponseHead,
        raw: &[u8],
    ) -> io::Result<()> {
        let head = response_head(response, raw, ResponseEdit::default());
        let status = status_code(head.status(), StatusCode::BAD_GATEWAY);
        self.respond
            .send_response_encoded(status, head.into_bytes(), false)
            .map(drop)
            .map_err(h2_error)
    }

    fn start_response(
        &mut self,
        out: &mut Vec<u8>,
        response: &ResponseHead,
        raw: &[u8],
        edit: ResponseEdit<'_>,
        upload_complete: bool,
    ) -> bool {
        out.clear();
        let head = response_head(response, raw, edit);
        self.head_size = head.http1_size();
        self.head = Some(head);
        self.framing = response.framing;
        upload_complete
    }

    /// HTTP/1.1's size of the head, not HPACK's: one answer counts alike over both protocols.
    fn head_size(&self, _out: &[u8]) -> u64 {
        self.head_size
    }

    /// Sends the head, then the body part by part: data gathered up to
    /// [`CHUNK_SEND_BYTES`] while more is already here, the last data with the end of the
    /// stream when nothing follows it, trailers as a trailing HEADERS.
    async fn relay_body<R: ResponseBody>(
        &mut self,
        from: &mut R,
        _out: &mut Vec<u8>,
        relay: &RelaySettings,
        meter: &Meter,
    ) -> Result<(), RelayError> {
        let head = self.head.take().unwrap_or_else(|| HeadBlock::new(200, 2));
        let empty = self.framing == BodyFraming::Empty;
        let status = status_code(head.status(), StatusCode::BAD_GATEWAY);
        let send = self
            .respond
            .send_response_encoded(status, head.into_bytes(), empty)
            .map_err(|e| RelayError::Write(h2_error(e)))?
            .ok_or_else(|| RelayError::Write(io::Error::other("a 1xx head as the final one")))?;
        let mut body = Download {
            send,
            limit: TimeLimit::Idle(relay.idle),
            meter,
            gathered: Vec::new(),
            ended: empty,
        };
        loop {
            let data = match from.next_part().await? {
                BodyPart::Data(data) => data,
                BodyPart::Trailers(trailers) => {
                    body.send_trailers(trailers).await?;
                    continue;
                }
                BodyPart::End => return body.end().await,
            };
            body.gathered.extend_from_slice(data);
            if from.finished() {
                body.flush(true).await?;
            } else if body.gathered.len() >= CHUNK_SEND_BYTES || !from.has_buffered() {
                body.flush(false).await?;
            }
        }
    }
}

/// The server's response head for an HTTP/2 client, HPACK-encoded (head_block.rs): its status
/// and end-to-end fields, with the field the pool's module adds and the rule's field actions.
fn response_head(response: &ResponseHead, raw: &[u8], edit: ResponseEdit<'_>) -> HeadBlock {
    let status = status_code(response.status, StatusCode::BAD_GATEWAY).as_u16();
    let mut head = HeadBlock::new(status, response.reason.get(raw).len());
    // 1xx and 204 frame no content (RFC 9110 sections 8.6, 15.2, 15.3.5).
    let frames_content = response.status >= 200 && response.status != 204;
    let recoded = edit.recoded.filter(|r| r.changes_body());
    for f in &response.fields {
        let name = f.name.get(raw);
        if edit.headers.is_some_and(|h| h.drops(name)) {
            continue;
        }
        match f.role {
            FieldRole::Forward
            | FieldRole::Host
            | FieldRole::ForwardedFor
            | FieldRole::ForwardedProto => {
                // A control byte an HTTP/1 client gets as sent (http/response.rs) goes as a
                // space here (head_block.rs): the field keeps its meaning.
                let value = f.value.get(raw);
                let weak = recoded.and_then(|_| {
                    name.eq_ignore_ascii_case(b"etag")
                        .then(|| weakened_etag(value))
                        .flatten()
                });
                head.field(name, weak.as_deref().unwrap_or(value));
            }
            FieldRole::Drop | FieldRole::TransferEncoding | FieldRole::Upgrade => {}
            FieldRole::ContentLength => {}
        }
    }
    // A recoded body's length is unknown until it ends; its coding is said instead.
    let said = response.content_length.filter(|_| response.length_said);
    if let (true, Some(length), None) = (frames_content, said, recoded) {
        // The length in its canonical form (`0100`, `100, 100` go on as `100`).
        head.content_length(length);
    }
    if let Some(recoded) = edit.recoded {
        for (name, value) in recoded.fields() {
            head.field(name, value);
        }
    }
    if let Some(headers) = edit.headers {
        for (name, value) in headers.appended() {
            head.field(name, value);
        }
    }
    if let Some(field) = edit.field {
        head.field(field.name.as_bytes(), field.value.as_bytes());
    }
    head
}

/// Appends one field whose role already says it goes on (the connection-specific ones are
/// dropped by role: http/fields.rs), unless its name or value is one the h2 crate would refuse
/// to send.
fn append(fields: &mut HeaderMap, name: &[u8], value: &[u8]) {
    if let (Ok(name), Ok(value)) = (HeaderName::from_bytes(name), HeaderValue::from_bytes(value)) {
        fields.append(name, value);
    }
}

/// Writes the fields of `map` (a client's HTTP/2 trailers) as the trailer lines of a chunked
/// body, without those that must not be trailers, as for an HTTP/1 client
/// (`chunked::may_be_trailer`).
pub(super) fn put_fields(out: &mut Vec<u8>, map: &HeaderMap) {
    for (name, value) in map {
        if !may_be_trailer(name.as_str().as_bytes()) {
            continue;
        }
        out.extend_from_slice(name.as_str().as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(value.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
}

/// A response body on its way to the stream.
struct Download<'d> {
    send: SendStream<Bytes>,
    limit: TimeLimit,
    meter: &'d Meter,
    /// Data not sent yet.
    gathered: Vec<u8>,
    /// The end of the stream went.
    ended: bool,
}

impl Download<'_> {
    /// Sends what has gathered, with the end of the stream if `end`.
    async fn flush(&mut self, end: bool) -> Result<(), RelayError> {
        if self.ended || (self.gathered.is_empty() && !end) {
            return Ok(());
        }
        let data = Bytes::from(std::mem::take(&mut self.gathered));
        let n = data.len() as u64;
        send_data(&mut self.send, data, end, self.limit)
            .await
            .map_err(RelayError::Write)?;
        self.meter.add(n);
        self.ended = end;
        Ok(())
    }

    /// The data gathered, then the trailers (the end of the stream without them when none
    /// may pass).
    async fn send_trailers(&mut self, trailers: Trailers<'_>) -> Result<(), RelayError> {
        let map = trailer_map(trailers);
        if map.is_empty() {
            return self.flush(true).await;
        }
        self.flush(false).await?;
        if self.ended {
            return Ok(());
        }
        self.ended = true;
        self.send
            .send_trailers(map)
            .map_err(|e| RelayError::Write(h2_error(e)))
    }

    /// The end of the body: the stream ends here unless it ended already.
    async fn end(&mut self) -> Result<(), RelayError> {
        self.flush(true).await
    }
}

/// A trailer section as HTTP/2 trailers, without the fields that must not be trailers (the
/// same as for an HTTP/1 client).
fn trailer_map(trailers: Trailers<'_>) -> HeaderMap {
    let mut map = HeaderMap::new();
    trailers.for_each(|name, value| append(&mut map, name, value));
    map
}

/// Sends `data` as the client's flow control allows: capacity is reserved, granted as the
/// client's windows open, and each grant sent at once; the wait for a grant is bounded by
/// `limit` (a client that never opens its window loses the stream, not the switch's memory).
pub(super) async fn send_data(
    send: &mut SendStream<Bytes>,
    mut data: Bytes,
    end: bool,
    limit: TimeLimit,
) -> io::Result<()> {
    if data.is_empty() {
        return send.send_data(data, end).map_err(h2_error);
    }
    while !data.is_empty() {
        send.reserve_capacity(data.len());
        let mut granted = send.capacity();
        if granted == 0 {
            let next = wait(
                async { Ok(poll_fn(|cx| send.poll_capacity(cx)).await) },
                limit,
            )
            .await?;
            granted = match next {
                Some(Ok(n)) => n,
                Some(Err(e)) => return Err(h2_error(e)),
                None => return Err(io::Error::from(io::ErrorKind::ConnectionReset)),
            };
        }
        if granted == 0 {
            continue;
        }
        let piece = data.split_to(granted.min(data.len()));
        send.send_data(piece, end && data.is_empty())
            .map_err(h2_error)?;
    }
    Ok(())
}
