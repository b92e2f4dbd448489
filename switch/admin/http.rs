//! The admin endpoint's HTTP/1.1: requests read with httparse, answers with a Content-Length,
//! keep-alive for the monitor page's polling.
//!
//! Hand-written rather than a server crate: the endpoint serves five routes to an operator's
//! browser, a scraper and the `tcpvs` command, and the switch already reads HTTP heads with
//! httparse; hyper or axum would add a second HTTP stack (and its dependency tree) for that.

use super::slots::Slot;
use std::io;
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

/// A request head larger than this is refused (431).
const MAX_HEAD: usize = 16 * 1024;
/// A request body larger than this is refused (413): changes are a few bytes of JSON.
const MAX_BODY: usize = 64 * 1024;
/// How long a connection may take to send a request (from its first byte, or from the
/// connection's start), and stay idle between requests: the monitor page polls every second,
/// so a connection idle for longer is not worth a slot.
const READ_TIMEOUT: Duration = Duration::from_secs(10);
const IDLE_TIMEOUT: Duration = Duration::from_secs(5);

/// A request as the routes see it.
#[derive(Debug, Default)]
pub struct Request {
    pub method: String,
    /// The path, without the query.
    pub path: String,
    pub authorization: Option<String>,
    pub accept: String,
    /// `Host`, `Origin` and `Content-Type` as sent (empty when absent): changes without a token
    /// check them against cross-site requests (routes.rs).
    pub host: String,
    pub origin: String,
    pub content_type: String,
    pub body: Vec<u8>,
    /// The client asked to close after this answer (or speaks HTTP/1.0 without keep-alive).
    pub close: bool,
}

/// An answer.
#[derive(Debug)]
pub struct Response {
    pub status: u16,
    pub content_type: &'static str,
    pub body: Vec<u8>,
    /// Extra fields, each a whole `Name: value` line without CRLF.
    pub fields: Vec<String>,
}

impl Response {
    pub fn new(status: u16, content_type: &'static str, body: impl Into<Vec<u8>>) -> Response {
        Response {
            status,
            content_type,
            body: body.into(),
            fields: Vec::new(),
        }
    }

    pub fn json(status: u16, value: &impl serde::Serialize) -> Response {
        match serde_json::to_vec(value) {
            Ok(mut body) => {
                body.push(b'\n');
                Response::new(status, "application/json", body)
            }
            Err(e) => Response::error(500, &format!("encoding the answer failed: {e}")),
        }
    }

    /// `{"error": "..."}` with `status`.
    pub fn error(status: u16, message: &str) -> Response {
        let mut body = serde_json::json!({ "error": message }).to_string();
        body.push('\n');
        Response::new(status, "application/json", body)
    }

    pub fn with_field(mut self, field: String) -> Response {
        self.fields.push(field);
        self
    }
}

/// Why no request could be read.
enum Unread {
    /// The connection ended, timed out, broke, or was closed to make room: nothing to answer.
    Gone,
    /// A request that cannot be served; answered, then the connection closes.
    Refuse(u16, &'static str),
}

/// What the endpoint's connections are: TCP or Unix stream sockets.
pub trait Stream: AsyncRead + AsyncWrite + Unpin + Send {}
impl<S: AsyncRead + AsyncWrite + Unpin + Send> Stream for S {}

/// Serves requests on `stream` until it closes, `handle` answering each. `privileged` says
/// whether a request carries the valid token: its connection is then never closed to make
/// room for another until it is answered (slots.rs), nor while its handler runs.
pub async fn serve_connection<S, P, F, Fut>(mut stream: S, slot: Slot, privileged: P, mut handle: F)
where
    S: Stream,
    P: Fn(&Request) -> bool,
    F: FnMut(Request) -> Fut,
    Fut: std::future::Future<Output = Response>,
{
    let mut buffer = Vec::with_capacity(4096);
    let mut first = true;
    loop {
        let wait = if first { READ_TIMEOUT } else { IDLE_TIMEOUT };
        first = false;
        let request = match read_request(&mut stream, &mut buffer, wait, &slot, &privileged).await {
            Ok(request) => request,
            Err(Unread::Gone) => return,
            Err(Unread::Refuse(status, why)) => {
                slot.writing();
                let refusal = Response::error(status, why);
                let _ = or_evicted(&slot, write_response(&mut stream, &refusal, true, false)).await;
                return;
            }
        };
        let kept = privileged(&request);
        // The handler runs to the end (a reload in progress is not cut short).
        if !slot.keep() {
            return;
        }
        let close = request.close;
        let head_only = request.method == "HEAD";
        let response = handle(request).await;
        if !kept {
            slot.writing();
        }
        let written = or_evicted(
            &slot,
            write_response(&mut stream, &response, close, head_only),
        )
        .await;
        if !matches!(written, Some(Ok(()))) || close {
            return;
        }
        slot.waiting();
    }
}

/// `io`, unless the connection is closed to make room first (`None`). What can be done at once
/// is done first: bytes already received are read, an answer the socket takes is written
/// (a handler's answer is then never lost to a closing that raced it).
async fn or_evicted<T>(slot: &Slot, io: impl std::future::Future<Output = T>) -> Option<T> {
    tokio::select! {
        biased;
        out = io => Some(out),
        () = slot.evicted() => None,
    }
}

/// Answers 503 to a connection that finds every connection kept (slots.rs), and closes it. The
/// request head is read first (briefly): closing with it unread would reset the connection,
/// and the reset could destroy the answer before the caller reads it.
pub async fn refuse_busy<S: Stream>(mut stream: S) {
    let deadline = tokio::time::Instant::now() + Duration::from_millis(500);
    let mut seen = Vec::new();
    while !seen.windows(4).any(|w| w == b"\r\n\r\n") && seen.len() < MAX_HEAD {
        if read_more(&mut stream, &mut seen, deadline).await.is_err() {
            break;
        }
    }
    let busy = Response::error(
        503,
        "the admin endpoint is busy: every connection is serving a change or a token holder",
    );
    let _ = write_response(&mut stream, &busy, true, false).await;
}

/// Reads one request; bytes after it stay in `buffer` for the next. A head that carries the
/// valid token keeps its connection from being closed to make room while its body arrives.
async fn read_request<S: Stream>(
    stream: &mut S,
    buffer: &mut Vec<u8>,
    first_byte_within: Duration,
    slot: &Slot,
    privileged: &impl Fn(&Request) -> bool,
) -> Result<Request, Unread> {
    // A request already begun (pipelined behind the last one) has READ_TIMEOUT to complete.
    let wait = if buffer.is_empty() {
        first_byte_within
    } else {
        READ_TIMEOUT
    };
    let mut deadline = tokio::time::Instant::now() + wait;
    loop {
        if !buffer.is_empty() {
            let mut fields = [httparse::EMPTY_HEADER; 64];
            let mut parsed = httparse::Request::new(&mut fields);
            match parsed.parse(buffer) {
                Ok(httparse::Status::Complete(head_len)) => {
                    let (mut request, body_len) = request_of(&parsed)?;
                    buffer.drain(..head_len);
                    if privileged(&request) && !slot.keep() {
                        return Err(Unread::Gone);
                    }
                    while buffer.len() < body_len {
                        or_evicted(slot, read_more(stream, buffer, deadline))
                            .await
                            .unwrap_or(Err(Unread::Gone))?;
                    }
                    request.body = buffer.drain(..body_len).collect();
                    return Ok(request);
                }
                Ok(httparse::Status::Partial) if buffer.len() >= MAX_HEAD => {
                    return Err(Unread::Refuse(431, "request head too large"));
                }
                Ok(httparse::Status::Partial) => {}
                Err(_) => return Err(Unread::Refuse(400, "malformed request")),
            }
        }
        let was_empty = buffer.is_empty();
        or_evicted(slot, read_more(stream, buffer, deadline))
            .await
            .unwrap_or(Err(Unread::Gone))?;
        if was_empty {
            // The request began: it has READ_TIMEOUT from now to arrive whole.
            deadline = tokio::time::Instant::now() + READ_TIMEOUT;
        }
    }
}

async fn read_more<S: Stream>(
    stream: &mut S,
    buffer: &mut Vec<u8>,
    deadline: tokio::time::Instant,
) -> Result<(), Unread> {
    let mut chunk = [0u8; 4096];
    match tokio::time::timeout_at(deadline, stream.read(&mut chunk)).await {
        Ok(Ok(0)) | Ok(Err(_)) | Err(_) => Err(Unread::Gone),
        Ok(Ok(n)) => {
            buffer.extend_from_slice(&chunk[..n]);
            Ok(())
        }
    }
}

/// The fields the routes need, and the body's length.
fn request_of(parsed: &httparse::Request<'_, '_>) -> Result<(Request, usize), Unread> {
    let method = parsed.method.unwrap_or("").to_string();
    let target = parsed.path.unwrap_or("/");
    let path = target.split_once('?').map_or(target, |(path, _query)| path);
    let mut request = Request {
        method,
        path: path.to_string(),
        close: parsed.version == Some(0),
        ..Request::default()
    };
    let mut body_len: Option<usize> = None;
    let mut seen_host = false;
    for field in parsed.headers.iter() {
        let value = std::str::from_utf8(field.value).unwrap_or("").trim();
        if field.name.eq_ignore_ascii_case("content-length") {
            let length = value
                .parse()
                .map_err(|_| Unread::Refuse(400, "invalid Content-Length"))?;
            if body_len.is_some_and(|earlier| earlier != length) {
                return Err(Unread::Refuse(400, "conflicting Content-Length fields"));
            }
            body_len = Some(length);
        } else if field.name.eq_ignore_ascii_case("host") {
            // RFC 9112 section 3.2: two Host fields are a 400, as on the data path. Taking
            // either would let a request name a loopback host beside another one
            // (`named_as_local`, routes.rs).
            if seen_host {
                return Err(Unread::Refuse(400, "more than one Host field"));
            }
            seen_host = true;
            request.host = value.to_string();
        } else if field.name.eq_ignore_ascii_case("origin") {
            request.origin = value.to_string();
        } else if field.name.eq_ignore_ascii_case("content-type") {
            request.content_type = value.to_string();
        } else if field.name.eq_ignore_ascii_case("transfer-encoding") {
            return Err(Unread::Refuse(411, "send the body with a Content-Length"));
        } else if field.name.eq_ignore_ascii_case("authorization") {
            request.authorization = Some(value.to_string());
        } else if field.name.eq_ignore_ascii_case("accept") {
            request.accept = value.to_string();
        } else if field.name.eq_ignore_ascii_case("connection") {
            for token in value.split(',').map(str::trim) {
                if token.eq_ignore_ascii_case("close") {
                    request.close = true;
                } else if token.eq_ignore_ascii_case("keep-alive") && parsed.version == Some(0) {
                    request.close = false;
                }
            }
        }
    }
    let body_len = body_len.unwrap_or(0);
    if body_len > MAX_BODY {
        return Err(Unread::Refuse(413, "request body too large"));
    }
    Ok((request, body_len))
}

async fn write_response<S: Stream>(
    stream: &mut S,
    response: &Response,
    close: bool,
    head_only: bool,
) -> io::Result<()> {
    let mut out = Vec::with_capacity(256 + response.body.len());
    out.extend_from_slice(
        format!(
            "HTTP/1.1 {} {}\r\nContent-Type: {}\r\nContent-Length: {}\r\nCache-Control: no-store\r\n",
            response.status,
            reason(response.status),
            response.content_type,
            response.body.len()
        )
        .as_bytes(),
    );
    for field in &response.fields {
        out.extend_from_slice(field.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    if close {
        out.extend_from_slice(b"Connection: close\r\n");
    }
    out.extend_from_slice(b"\r\n");
    if !head_only {
        out.extend_from_slice(&response.body);
    }
    tokio::time::timeout(READ_TIMEOUT, stream.write_all(&out))
        .await
        .map_err(|_| io::Error::from(io::ErrorKind::TimedOut))?
}

fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        400 => "Bad Request",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "Not Found",
        405 => "Method Not Allowed",
        411 => "Length Required",
        413 => "Content Too Large",
        415 => "Unsupported Media Type",
        409 => "Conflict",
        422 => "Unprocessable Content",
        431 => "Request Header Fields Too Large",
        501 => "Not Implemented",
        503 => "Service Unavailable",
        _ => "Error",
    }
}

/// Decodes `%XX` escapes (an IPv6 server address arrives as `%5B%3A%3A1%5D%3A80`). `None` for
/// a broken escape or bytes that are not UTF-8.
pub fn percent_decode(text: &str) -> Option<String> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = bytes.get(i + 1..i + 3)?;
            // from_str_radix alone would take a sign: `%+f`.
            if !hex.iter().all(u8::is_ascii_hexdigit) {
                return None;
            }
            out.push(u8::from_str_radix(std::str::from_utf8(hex).ok()?, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

#[cfg(test)]
mod tests {
    use super::percent_decode;

    #[test]
    fn percent_escapes_decode() {
        assert_eq!(
            percent_decode("%5B%3A%3A1%5D%3A80").as_deref(),
            Some("[::1]:80")
        );
        assert_eq!(
            percent_decode("127.0.0.1:9001").as_deref(),
            Some("127.0.0.1:9001")
        );
        assert_eq!(percent_decode("%5"), None);
        assert_eq!(percent_decode("%zz"), None);
        assert_eq!(percent_decode("%ff"), None);
        assert_eq!(percent_decode("%+f"), None);
        assert_eq!(percent_decode("%-1"), None);
    }
}
