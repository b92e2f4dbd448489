//! The command line's side of the admin endpoint: `tcpvs list`, `set-weight`, `set-state` and
//! `reload` each send one request and read one answer.
//!
//! The HTTP/1.1 client is written by hand over a blocking `std::net::TcpStream`: the command
//! line sends a single request, with `Connection: close`, to an endpoint that is normally on
//! loopback, and reads a single JSON answer. An HTTP client crate (with its own runtime, pools,
//! TLS and redirects) would be a heavy dependency for that; `httparse`, already used by the
//! switch, parses the answer's head, and the body is framed by its `Content-Length`, which the
//! endpoint always sends (an answer without one, or with a `Transfer-Encoding`, is refused).
//!
//! Errors say what to do: the switch not running (or not serving `[admin] listen`), a token
//! refused, an unknown pool or server, a body refused, reload not supported.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

/// How long to wait for the connection to the endpoint.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(3);
/// How long one read or write may wait.
pub const IO_TIMEOUT: Duration = Duration::from_secs(10);
/// The largest answer accepted: far above any `/stats` document, a guard against a peer that
/// is not the admin endpoint and never stops sending.
const MAX_ANSWER: usize = 64 << 20;

/// Where the admin endpoint is, and the token for changes (`Authorization: Bearer <token>`).
#[derive(Clone)]
pub struct Endpoint {
    pub addr: SocketAddr,
    pub token: Option<String>,
}

impl std::fmt::Debug for Endpoint {
    // The token stays out of debug output.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Endpoint")
            .field("addr", &self.addr)
            .field("token", &self.token.as_ref().map(|_| "<set>"))
            .finish()
    }
}

/// The states an operator can ask for (`PUT /pools/{pool}/servers/{addr}`, `state`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AdminState {
    /// Back in service (up, or down until its checks pass).
    Ready,
    /// Keeps its requests and persistent clients, gets no new ones.
    Drain,
    /// No new requests, not checked.
    Maint,
}

impl AdminState {
    pub fn as_str(self) -> &'static str {
        match self {
            AdminState::Ready => "ready",
            AdminState::Drain => "drain",
            AdminState::Maint => "maint",
        }
    }
}

// ---------------------------------------------------------------- the /stats document

pub use super::stats_json::{ServerJson, StatsJson};

// ---------------------------------------------------------------- the verbs

/// `GET /stats`, read into [`StatsJson`].
pub fn get_stats(endpoint: &Endpoint) -> Result<StatsJson, Error> {
    let text = get_stats_json(endpoint)?;
    serde_json::from_str(&text).map_err(|e| Error::Malformed {
        addr: endpoint.addr,
        what: format!("its /stats document does not have the expected shape: {e}"),
    })
}

/// `GET /stats` as the JSON text received (`tcpvs list --json`), checked to be JSON.
pub fn get_stats_json(endpoint: &Endpoint) -> Result<String, Error> {
    let answer = exchange(endpoint, "GET", "/stats", None)?;
    answer.success(endpoint, Verb::Read)?;
    answer.json(endpoint)?;
    String::from_utf8(answer.body).map_err(|_| Error::Malformed {
        addr: endpoint.addr,
        what: "the body is not UTF-8".into(),
    })
}

/// `PUT /pools/{pool}/servers/{addr}` with `{"weight":N}`; the server as it is now.
pub fn set_weight(
    endpoint: &Endpoint,
    pool: &str,
    server: SocketAddr,
    weight: u16,
) -> Result<ServerJson, Error> {
    change_server(
        endpoint,
        pool,
        server,
        serde_json::json!({ "weight": weight }),
    )
}

/// `PUT /pools/{pool}/servers/{addr}` with `{"state":"ready"|"drain"|"maint"}`; the server as it
/// is now.
pub fn set_state(
    endpoint: &Endpoint,
    pool: &str,
    server: SocketAddr,
    state: AdminState,
) -> Result<ServerJson, Error> {
    change_server(
        endpoint,
        pool,
        server,
        serde_json::json!({ "state": state.as_str() }),
    )
}

/// `POST /reload`; the generation now running.
pub fn reload(endpoint: &Endpoint) -> Result<u64, Error> {
    let answer = exchange(endpoint, "POST", "/reload", Some(b""))?;
    answer.success(endpoint, Verb::Reload)?;
    let value = answer.json(endpoint)?;
    value
        .get("generation")
        .and_then(serde_json::Value::as_u64)
        .ok_or_else(|| Error::Malformed {
            addr: endpoint.addr,
            what: "its answer to POST /reload has no `generation`".into(),
        })
}

/// The path of a server's resource: `/pools/{pool}/servers/{addr}`, each segment
/// percent-encoded where it must be.
pub fn server_path(pool: &str, server: SocketAddr) -> String {
    format!(
        "/pools/{}/servers/{}",
        encode_segment(pool),
        encode_segment(&server.to_string())
    )
}

fn change_server(
    endpoint: &Endpoint,
    pool: &str,
    server: SocketAddr,
    body: serde_json::Value,
) -> Result<ServerJson, Error> {
    let body = body.to_string();
    let answer = exchange(
        endpoint,
        "PUT",
        &server_path(pool, server),
        Some(body.as_bytes()),
    )?;
    answer.success(endpoint, Verb::Change)?;
    serde_json::from_value(answer.json(endpoint)?).map_err(|e| Error::Malformed {
        addr: endpoint.addr,
        what: format!("its answer is not a server: {e}"),
    })
}

/// Keeps the characters a path segment may hold as they are (letters, digits, `-._~`, and `:`,
/// `[`, `]`, `@` so that `127.0.0.1:9001` and `[::1]:80` go as written); the rest as `%XX`.
fn encode_segment(segment: &str) -> String {
    let mut out = String::with_capacity(segment.len());
    for b in segment.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~:[]@".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

// ---------------------------------------------------------------- errors

/// What went wrong, worded for the operator.
#[derive(Debug)]
pub enum Error {
    /// No connection: the switch is not running, or not with this `[admin] listen`.
    Unreachable {
        addr: SocketAddr,
        error: std::io::Error,
    },
    /// The connection broke or stalled during the exchange.
    Exchange {
        addr: SocketAddr,
        error: std::io::Error,
    },
    /// The answer is not HTTP, or not the JSON expected.
    Malformed { addr: SocketAddr, what: String },
    /// The token is not something an HTTP field can carry.
    TokenText,
    /// 401: the token was refused (`sent`: one was sent at all).
    Token { sent: bool },
    /// 501 to `POST /reload`.
    ReloadUnsupported,
    /// 422 to `POST /reload`: the rule file's errors; the running configuration is unchanged.
    ReloadRefused { errors: Vec<String> },
    /// Any other answer that is not a success (400, 404, 500, ...), with the endpoint's text.
    Status {
        status: u16,
        reason: String,
        message: String,
    },
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Error::Unreachable { addr, error } => {
                let why = match error.kind() {
                    std::io::ErrorKind::ConnectionRefused => "connection refused".to_string(),
                    std::io::ErrorKind::TimedOut | std::io::ErrorKind::WouldBlock => {
                        format!("no answer within {}s", CONNECT_TIMEOUT.as_secs())
                    }
                    _ => error.to_string(),
                };
                write!(
                    f,
                    "cannot reach the admin endpoint at {addr}: {why} - is tcpvs running with \
                     [admin] listen = \"{addr}\"?"
                )
            }
            Error::Exchange { addr, error } => match error.kind() {
                std::io::ErrorKind::TimedOut | std::io::ErrorKind::WouldBlock => write!(
                    f,
                    "the admin endpoint at {addr} did not answer within {}s",
                    IO_TIMEOUT.as_secs()
                ),
                _ => write!(
                    f,
                    "the exchange with the admin endpoint at {addr} failed: {error}"
                ),
            },
            Error::Malformed { addr, what } => {
                write!(
                    f,
                    "unexpected answer from the admin endpoint at {addr}: {what}"
                )
            }
            Error::TokenText => write!(
                f,
                "the token must be printable ASCII without spaces (it is sent as \
                 `Authorization: Bearer <token>`)"
            ),
            Error::Token { sent: true } => write!(
                f,
                "the admin endpoint refused the token: set TCPVS_ADMIN_TOKEN or --token-file"
            ),
            Error::Token { sent: false } => write!(
                f,
                "the admin endpoint wants a token: set TCPVS_ADMIN_TOKEN or --token-file"
            ),
            Error::ReloadUnsupported => write!(f, "this tcpvs does not support reload yet"),
            Error::ReloadRefused { errors } => {
                write!(f, "reload refused; the running configuration is unchanged")?;
                if errors.is_empty() {
                    return Ok(());
                }
                write!(f, ":")?;
                for e in errors {
                    write!(f, "\n{e}")?;
                }
                Ok(())
            }
            Error::Status {
                status,
                reason,
                message,
            } => {
                write!(f, "the admin endpoint answered {status}")?;
                if !reason.is_empty() {
                    write!(f, " {reason}")?;
                }
                if !message.is_empty() {
                    write!(f, ": {message}")?;
                }
                Ok(())
            }
        }
    }
}

impl std::error::Error for Error {}

// ---------------------------------------------------------------- HTTP/1.1

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
enum Verb {
    Read,
    Change,
    Reload,
}

impl Answer {
    /// Turns a status other than 2xx into its [`Error`].
    fn success(&self, endpoint: &Endpoint, verb: Verb) -> Result<(), Error> {
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

    fn json(&self, endpoint: &Endpoint) -> Result<serde_json::Value, Error> {
        serde_json::from_slice(&self.body).map_err(|e| Error::Malformed {
            addr: endpoint.addr,
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
    let mut head = format!(
        "{method} {path} HTTP/1.1\r\nHost: {}\r\nUser-Agent: tcpvs/{}\r\nAccept: application/json\r\n",
        endpoint.addr,
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
fn exchange(
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
    let addr = endpoint.addr;
    let mut stream = TcpStream::connect_timeout(&addr, CONNECT_TIMEOUT)
        .map_err(|error| Error::Unreachable { addr, error })?;
    let broken = |error| Error::Exchange { addr, error };
    stream.set_read_timeout(Some(IO_TIMEOUT)).map_err(broken)?;
    stream.set_write_timeout(Some(IO_TIMEOUT)).map_err(broken)?;
    let _ = stream.set_nodelay(true);
    stream
        .write_all(&request_bytes(endpoint, method, path, body))
        .map_err(broken)?;
    read_answer(&mut stream).map_err(|e| match e {
        ReadError::Io(error) => Error::Exchange { addr, error },
        ReadError::Malformed(what) => Error::Malformed { addr, what },
    })
}

enum ReadError {
    Io(std::io::Error),
    Malformed(String),
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
            Err(e) => return Err(ReadError::Io(e)),
        };
        if n == 0 {
            return Err(ReadError::Malformed(if buf.is_empty() {
                "it closed the connection without answering".into()
            } else {
                "it closed the connection in the middle of its answer".into()
            }));
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

    fn endpoint(token: Option<&str>) -> Endpoint {
        Endpoint {
            addr: "127.0.0.1:9090".parse().unwrap(),
            token: token.map(str::to_string),
        }
    }

    #[test]
    fn a_change_carries_a_json_body_and_every_request_the_token() {
        let ep = endpoint(Some("s3cret"));
        let put = request_bytes(
            &ep,
            "PUT",
            &server_path("static", "127.0.0.1:9001".parse().unwrap()),
            Some(br#"{"weight":5}"#),
        );
        assert_eq!(
            String::from_utf8(put).unwrap(),
            format!(
                "PUT /pools/static/servers/127.0.0.1:9001 HTTP/1.1\r\nHost: 127.0.0.1:9090\r\n\
                 User-Agent: tcpvs/{}\r\nAccept: application/json\r\n\
                 Authorization: Bearer s3cret\r\nContent-Type: application/json\r\n\
                 Content-Length: 12\r\nConnection: close\r\n\r\n{{\"weight\":5}}",
                env!("CARGO_PKG_VERSION")
            )
        );
        let get = String::from_utf8(request_bytes(&ep, "GET", "/stats", None)).unwrap();
        assert!(get.starts_with("GET /stats HTTP/1.1\r\n"), "{get}");
        assert!(get.contains("Authorization: Bearer s3cret\r\n"), "{get}");
        assert!(!get.contains("Content-Length"), "{get}");
        let reload = String::from_utf8(request_bytes(&ep, "POST", "/reload", Some(b""))).unwrap();
        assert!(reload.contains("Content-Length: 0\r\n"), "{reload}");
        assert!(
            reload.contains("Authorization: Bearer s3cret\r\n"),
            "{reload}"
        );
    }

    #[test]
    fn path_segments_are_encoded_where_they_must_be() {
        assert_eq!(
            server_path("static", "[::1]:80".parse().unwrap()),
            "/pools/static/servers/[::1]:80"
        );
        assert_eq!(
            server_path("a b/c%", "10.0.0.1:80".parse().unwrap()),
            "/pools/a%20b%2Fc%25/servers/10.0.0.1:80"
        );
    }

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
            Err(ReadError::Malformed(m)) if m.contains("without answering")
        ));
        let mut unframed = &b"HTTP/1.1 200 OK\r\n\r\n{}"[..];
        assert!(matches!(
            read_answer(&mut unframed),
            Err(ReadError::Malformed(m)) if m == NO_LENGTH
        ));
    }

    #[test]
    fn statuses_become_the_errors_an_operator_reads() {
        let answer = |status: u16, body: &str| Answer {
            status,
            reason: String::new(),
            headers: Vec::new(),
            body: body.as_bytes().to_vec(),
        };
        let with = endpoint(Some("t"));
        let without = endpoint(None);
        let message = |a: Answer, ep: &Endpoint, verb| a.success(ep, verb).unwrap_err().to_string();
        assert_eq!(
            message(answer(401, "{}"), &with, Verb::Change),
            "the admin endpoint refused the token: set TCPVS_ADMIN_TOKEN or --token-file"
        );
        assert!(message(answer(401, "{}"), &without, Verb::Change).contains("wants a token"));
        assert_eq!(
            message(answer(501, r#"{"error":"no"}"#), &with, Verb::Reload),
            "this tcpvs does not support reload yet"
        );
        assert_eq!(
            message(
                answer(422, r#"{"errors":["a.toml:1:2: x","a.toml:3:4: y"]}"#),
                &with,
                Verb::Reload
            ),
            "reload refused; the running configuration is unchanged:\na.toml:1:2: x\na.toml:3:4: y"
        );
        assert_eq!(
            message(
                answer(404, r#"{"error":"unknown pool `x`"}"#),
                &with,
                Verb::Change
            ),
            "the admin endpoint answered 404: unknown pool `x`"
        );
        assert_eq!(
            message(answer(500, "oops"), &with, Verb::Read),
            "the admin endpoint answered 500: oops"
        );
    }

    #[test]
    fn the_stats_document_of_the_spec_is_read_and_a_smaller_one_too() {
        let minimal = r#"{"generation": 1, "uptime_s": 12.5,
 "services": [{"name": "web", "listen": "127.0.0.1:8080", "connections": 3, "requests": 1234}],
 "pools": [{"name": "static", "scheduler": "wlc", "servers": [
   {"addr": "127.0.0.1:9001", "weight": 1, "state": "up", "backup": false,
    "active": 0, "requests": 600, "failures": 0, "bytes_in": 0, "bytes_out": 0}]}]}"#;
        let stats: StatsJson = serde_json::from_str(minimal).unwrap();
        assert_eq!(stats.pools[0].servers[0].requests, 600);
        let nulls = r#"{"pools":[{"servers":[{"latency_ms":null,
            "check":{"kind":"tcp","last":null,"age_s":null}}]}]}"#;
        let stats: StatsJson = serde_json::from_str(nulls).unwrap();
        assert_eq!(stats.pools[0].servers[0].check.last, None);
    }
}
