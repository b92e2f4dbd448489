//! The HTTP/1.1 of the client: the bytes of a request, and an answer read and framed by its
//! `Content-Length`.

use super::{Address, Endpoint, Error, CONNECT_TIMEOUT, IO_TIMEOUT};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::os::unix::net::UnixStream;

/// The largest answer accepted: far above any `/stats` document, a guard against a peer that
/// is not the admin endpoint and never stops sending.
const MAX_ANSWER: usize = 64 << 20;

/// An answer: status line, fields and the body with its framing removed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer {
    pub status: u16,
    pub reason: String,
    pub headers: Vec<(String, Vec<u8>)>,
    pub body: Vec<u8>,
}

/// Which verb an answer belongs to, for the meaning of its status.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Verb {
    Read,
    Change,
    Reload,
}

impl Answer {
    /// Turns a status other than 2xx into its [`Error`].
    pub(super) fn success(&self, endpoint: &Endpoint, verb: Verb) -> Result<(), Error> {
        match self.status {
            200..=299 => Ok(()),
            401 => Err(Error::Token {
                sent: endpoint.token.is_some(),
            }),
            501 if verb == Verb::Reload => Err(Error::ReloadUnsupported),
            422 if verb == Verb::Reload => Err(Error::ReloadRefused {
                errors: self.error_lines(),
            }),
            status => Err(Error::Status {
                status,
                reason: self.reason.clone(),
                message: self.error_lines().join("; "),
            }),
        }
    }

    /// The endpoint's explanation: `{"error": "..."}`, `{"errors": [...]}`, or the body's text
    /// when it is not that JSON.
    fn error_lines(&self) -> Vec<String> {
        if let Ok(value) = serde_json::from_slice::<serde_json::Value>(&self.body) {
            if let Some(text) = value.get("error").and_then(|e| e.as_str()) {
                return vec![text.to_string()];
            }
            if let Some(list) = value.get("errors").and_then(|e| e.as_array()) {
                return list
                    .iter()
                    .map(|e| e.as_str().map_or_else(|| e.to_string(), str::to_string))
                    .collect();
            }
        }
        let text = String::from_utf8_lossy(&self.body);
        let text = text.trim();
        if text.is_empty() {
            return Vec::new();
        }
        let mut short: String = text.chars().take(200).collect();
        if short.len() < text.len() {
            short.push_str("...");
        }
        vec![short]
    }

    pub(super) fn json(&self, endpoint: &Endpoint) -> Result<serde_json::Value, Error> {
        serde_json::from_slice(&self.body).map_err(|e| Error::Malformed {
            addr: endpoint.addr.clone(),
            what: format!("the body is not JSON: {e}"),
        })
    }

    /// The first field of that name (case-insensitive).
    pub fn header(&self, name: &str) -> Option<&[u8]> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_slice())
    }
}

/// The bytes of a request: request line, `Host`, the token when there is one (reads need none,
/// but an endpoint that wants one for reads too gets it), `Content-Type` and `Content-Length`
/// with a body, `Connection: close`.
pub fn request_bytes(
    endpoint: &Endpoint,
    method: &str,
    path: &str,
    body: Option<&[u8]>,
) -> Vec<u8> {
    // A Unix socket has no host name; `localhost` is what curl sends over one.
    let host = match &endpoint.addr {
        Address::Tcp(addr) => addr.to_string(),
        Address::Unix(_) => "localhost".to_string(),
    };
    let mut head = format!(
        "{method} {path} HTTP/1.1\r\nHost: {host}\r\nUser-Agent: tcpvs/{}\r\nAccept: application/json\r\n",
        env!("CARGO_PKG_VERSION")
    );
    if let Some(token) = &endpoint.token {
        head.push_str(&format!("Authorization: Bearer {token}\r\n"));
    }
    if let Some(body) = body {
        if !body.is_empty() {
            head.push_str("Content-Type: application/json\r\n");
        }
        head.push_str(&format!("Content-Length: {}\r\n", body.len()));
    }
    head.push_str("Connection: close\r\n\r\n");
    let mut bytes = head.into_bytes();
    bytes.extend_from_slice(body.unwrap_or_default());
    bytes
}

/// One request, one answer, on a connection of its own.
pub(super) fn exchange(
    endpoint: &Endpoint,
    method: &str,
    path: &str,
    body: Option<&[u8]>,
) -> Result<Answer, Error> {
    if let Some(token) = &endpoint.token {
        if token.is_empty() || !token.bytes().all(|b| b.is_ascii_graphic()) {
            return Err(Error::TokenText);
        }
    }
    let addr = &endpoint.addr;
    let unreachable = |error| Error::Unreachable {
        addr: addr.clone(),
        error,
    };
    let broken = |error| Error::Exchange {
        addr: addr.clone(),
        error,
    };
    let request = request_bytes(endpoint, method, path, body);
    // A connection closed before any byte of an answer is tried again, a few times: the
    // endpoint closes a connection to make room only while it waits for the request (or for
    // a slow reader of an answer, which this client is not), so the request was not acted on.
    // A flood of new connections by another local user can close this one before its request
    // arrives (admin/slots.rs).
    let mut attempt = 1;
    let answer = loop {
        match exchange_once(addr, &request) {
            Err(ReadError::Unanswered) if attempt < ATTEMPTS => {
                std::thread::sleep(RETRY_PAUSE * attempt);
                attempt += 1;
            }
            other => break other,
        }
    };
    answer.map_err(|e| match e {
        ReadError::Connect(error) => unreachable(error),
        ReadError::Io(error) => broken(error),
        ReadError::Unanswered => Error::Malformed {
            addr: addr.clone(),
            what: "it closed the connection without answering".into(),
        },
        ReadError::Malformed(what) => Error::Malformed {
            addr: addr.clone(),
            what,
        },
    })
}

/// Connections tried for one request when the endpoint closes them unanswered.
const ATTEMPTS: u32 = 5;
/// The pause before the next attempt, times the attempts made.
const RETRY_PAUSE: std::time::Duration = std::time::Duration::from_millis(20);

/// One connection: the request sent, the answer read.
fn exchange_once(addr: &Address, request: &[u8]) -> Result<Answer, ReadError> {
    match addr {
        Address::Tcp(socket) => {
            let mut stream =
                TcpStream::connect_timeout(socket, CONNECT_TIMEOUT).map_err(ReadError::Connect)?;
            stream
                .set_read_timeout(Some(IO_TIMEOUT))
                .map_err(ReadError::Io)?;
            stream
                .set_write_timeout(Some(IO_TIMEOUT))
                .map_err(ReadError::Io)?;
            let _ = stream.set_nodelay(true);
            stream.write_all(request).map_err(ReadError::sending)?;
            read_answer(&mut stream)
        }
        Address::Unix(path) => {
            // No connect timeout here (std has none for Unix sockets): a local connect waits
            // only while the endpoint's accept queue is full, and the endpoint accepts at once
            // (it makes room by closing a connection rather than leaving new ones queued).
            let mut stream = UnixStream::connect(path).map_err(ReadError::Connect)?;
            stream
                .set_read_timeout(Some(IO_TIMEOUT))
                .map_err(ReadError::Io)?;
            stream
                .set_write_timeout(Some(IO_TIMEOUT))
                .map_err(ReadError::Io)?;
            stream.write_all(request).map_err(ReadError::sending)?;
            read_answer(&mut stream)
        }
    }
}

enum ReadError {
    Connect(std::io::Error),
    Io(std::io::Error),
    /// Closed (or reset) before any byte of an answer.
    Unanswered,
    Malformed(String),
}

impl ReadError {
    /// A write refused because the endpoint closed the connection is a connection unanswered.
    fn sending(error: std::io::Error) -> ReadError {
        match error.kind() {
            std::io::ErrorKind::BrokenPipe | std::io::ErrorKind::ConnectionReset => {
                ReadError::Unanswered
            }
            _ => ReadError::Io(error),
        }
    }
}

/// Reads until the answer is complete (by its `Content-Length`).
fn read_answer(stream: &mut impl Read) -> Result<Answer, ReadError> {
    let mut buf = Vec::with_capacity(16384);
    let mut chunk = [0u8; 16384];
    loop {
        if let Some(answer) = parse_answer(&buf).map_err(ReadError::Malformed)? {
            return Ok(answer);
        }
        let n = match stream.read(&mut chunk) {
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset && buf.is_empty() => {
                return Err(ReadError::Unanswered)
            }
            Err(e) => return Err(ReadError::Io(e)),
        };
        if n == 0 {
            if buf.is_empty() {
                return Err(ReadError::Unanswered);
            }
            return Err(ReadError::Malformed(
                "it closed the connection in the middle of its answer".into(),
            ));
        }
        buf.extend_from_slice(chunk.get(..n).unwrap_or_default());
        if buf.len() > MAX_ANSWER {
            return Err(ReadError::Malformed(too_large()));
        }
    }
}

fn too_large() -> String {
    format!("the answer is larger than {} MiB", MAX_ANSWER >> 20)
}

/// The error for an answer that is not framed by a `Content-Length`.
const NO_LENGTH: &str = "the admin endpoint's answer has no Content-Length";

/// Parses an answer from the bytes read so far: `Ok(None)` while it is incomplete. The body is
/// framed by `Content-Length` only (what the admin endpoint sends); an answer without one, or
/// with a `Transfer-Encoding`, is an error as soon as its head is complete. Interim 1xx answers
/// are skipped.
pub fn parse_answer(bytes: &[u8]) -> Result<Option<Answer>, String> {
    let mut bytes = bytes;
    loop {
        let mut fields = [httparse::EMPTY_HEADER; 64];
        let mut response = httparse::Response::new(&mut fields);
        let head_len = match response.parse(bytes) {
            Ok(httparse::Status::Complete(n)) => n,
            Ok(httparse::Status::Partial) => return Ok(None),
            Err(e) => return Err(format!("not an HTTP answer ({e})")),
        };
        let status = response.code.unwrap_or(0);
        let reason = response.reason.unwrap_or("").to_string();
        let headers: Vec<(String, Vec<u8>)> = response
            .headers
            .iter()
            .map(|h| (h.name.to_string(), h.value.to_vec()))
            .collect();
        let rest = bytes.get(head_len..).unwrap_or_default();
        if (100..200).contains(&status) && status != 101 {
            bytes = rest;
            continue;
        }
        let field = |name: &str| {
            headers
                .iter()
                .filter(|(n, _)| n.eq_ignore_ascii_case(name))
                .map(|(_, v)| String::from_utf8_lossy(v).trim().to_string())
                .collect::<Vec<_>>()
        };
        let body = if status == 204 || status == 304 {
            Vec::new()
        } else {
            let lengths = field("content-length");
            if !field("transfer-encoding").is_empty() || lengths.is_empty() {
                return Err(NO_LENGTH.into());
            }
            let length = content_length(&lengths)?;
            if length > MAX_ANSWER {
                return Err(too_large());
            }
            match rest.get(..length) {
                Some(body) => body.to_vec(),
                None => return Ok(None),
            }
        };
        return Ok(Some(Answer {
            status,
            reason,
            headers,
            body,
        }));
    }
}

/// The value of the `Content-Length` fields: digits only, every field the same number.
fn content_length(values: &[String]) -> Result<usize, String> {
    let mut length = None;
    for value in values {
        let n = if !value.is_empty() && value.bytes().all(|b| b.is_ascii_digit()) {
            value.parse::<usize>().ok()
        } else {
            None
        }
        .ok_or_else(|| format!("a bad Content-Length: {value:?}"))?;
        if length.is_some_and(|l| l != n) {
            return Err(format!("conflicting Content-Length fields: {values:?}"));
        }
        length = Some(n);
    }
    length.ok_or_else(|| NO_LENGTH.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_are_framed_by_their_content_length_only() {
        let whole = b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello";
        for cut in 0..whole.len() {
            assert_eq!(parse_answer(&whole[..cut]).unwrap(), None, "{cut}");
        }
        let answer = parse_answer(whole).unwrap().unwrap();
        assert_eq!(
            (answer.status, answer.body.as_slice()),
            (200, &b"hello"[..])
        );
        assert_eq!(answer.header("content-length"), Some(&b"5"[..]));
        // Bytes after the body are not part of it.
        let more = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nhello";
        assert_eq!(parse_answer(more).unwrap().unwrap().body, b"he");

        let not_found = b"HTTP/1.1 404 Not Found\r\nContent-Length: 13\r\n\r\n{\"error\":\"x\"}";
        let answer = parse_answer(not_found).unwrap().unwrap();
        assert_eq!(answer.status, 404);
        assert_eq!(answer.reason, "Not Found");
        assert_eq!(answer.error_lines(), vec!["x".to_string()]);

        let interim = b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 204 No Content\r\n\r\n";
        assert_eq!(parse_answer(interim).unwrap().unwrap().status, 204);

        // No Content-Length, or a Transfer-Encoding: refused once the head is complete, without
        // waiting for the close.
        for head in [
            &b"HTTP/1.0 404 Not Found\r\n\r\n{\"error\":\"x\"}"[..],
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n",
            // A chunk size that once overflowed `size + 2`.
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nffffffffffffffff\r\n",
        ] {
            assert_eq!(parse_answer(head), Err(NO_LENGTH.to_string()));
        }

        assert!(parse_answer(b"SSH-2.0-OpenSSH\r\n\r\n").is_err());
        for length in [
            "x",
            "",
            "+5",
            "-1",
            "18446744073709551616",
            "99999999999999999999999999",
            "18446744073709551615",
            "67108865",
        ] {
            let head = format!("HTTP/1.1 200 OK\r\nContent-Length: {length}\r\n\r\nhello");
            assert!(parse_answer(head.as_bytes()).is_err(), "{length:?}");
        }
        let twice = b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Length: 2\r\n\r\nhello";
        assert!(parse_answer(twice).is_err());
        let same = b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Length: 5\r\n\r\nhello";
        assert_eq!(parse_answer(same).unwrap().unwrap().body, b"hello");
    }

    #[test]
    fn reading_stops_at_the_end_of_the_body_and_names_a_close_too_early() {
        let mut whole = &b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}"[..];
        assert_eq!(read_answer(&mut whole).ok().unwrap().body, b"{}");
        let mut cut = &b"HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\n{}"[..];
        assert!(matches!(
            read_answer(&mut cut),
            Err(ReadError::Malformed(m)) if m.contains("in the middle of its answer")
        ));
        let mut nothing = &b""[..];
        assert!(matches!(
            read_answer(&mut nothing),
            Err(ReadError::Unanswered)
        ));
        let mut unframed = &b"HTTP/1.1 200 OK\r\n\r\n{}"[..];
        assert!(matches!(
            read_answer(&mut unframed),
            Err(ReadError::Malformed(m)) if m == NO_LENGTH
        ));
    }
}
