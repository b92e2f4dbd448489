//! The switch's own responses: short plain-text errors, and the answers rules give
//! (redirects, `respond`, refusals by a rate limit).

use super::rewrite::ClientConnection;
use std::io::Write;

pub fn reason_phrase(status: u16) -> &'static str {
    match status {
        200 => "OK",
        201 => "Created",
        202 => "Accepted",
        204 => "No Content",
        301 => "Moved Permanently",
        302 => "Found",
        303 => "See Other",
        304 => "Not Modified",
        307 => "Temporary Redirect",
        308 => "Permanent Redirect",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "Not Found",
        410 => "Gone",
        418 => "I'm a teapot",
        429 => "Too Many Requests",
        451 => "Unavailable For Legal Reasons",
        500 => "Internal Server Error",
        400 => "Bad Request",
        405 => "Method Not Allowed",
        408 => "Request Timeout",
        431 => "Request Header Fields Too Large",
        501 => "Not Implemented",
        502 => "Bad Gateway",
        503 => "Service Unavailable",
        504 => "Gateway Timeout",
        505 => "HTTP Version Not Supported",
        _ => "Error",
    }
}

/// What the switch answers by itself, in every front-end (HTTP/1 writes it with
/// [`write_answer`], HTTP/2 sends it as HEADERS and DATA: connection/h2/response.rs): its own
/// errors and refusals, and what a rule says.
#[derive(Clone, Copy)]
pub enum Answer<'a> {
    /// An error or refusal of the switch itself: `STATUS REASON: why` as text, not to be
    /// cached. `why` is a short explanation meant for the client; it never carries server
    /// addresses.
    Error { status: u16, why: &'a str },
    /// What a rule says: a redirect, `respond`, a limit's refusal.
    Given(Given<'a>),
}

/// An answer a rule gives: its status, its fields, its body.
#[derive(Clone, Copy)]
pub struct Given<'a> {
    pub status: u16,
    /// Fields besides Content-Length and Connection, which the writer adds.
    pub fields: &'a [(&'a [u8], &'a [u8])],
    pub body: &'a [u8],
}

impl Answer<'_> {
    pub fn status(&self) -> u16 {
        match self {
            Answer::Error { status, .. } => *status,
            Answer::Given(given) => given.status,
        }
    }
}

/// Appends `answer` as an HTTP/1.1 response to `out`. `connection` says what happens to the
/// client connection next (an HTTP/1.0 client kept alive must be told so). A response to HEAD
/// (`with_body` false) keeps its Content-Length but sends no body; 204 and 304 frame nothing.
pub fn write_answer(
    out: &mut Vec<u8>,
    answer: &Answer<'_>,
    connection: ClientConnection,
    with_body: bool,
) {
    match answer {
        Answer::Error { status, why } => write_error(out, *status, why, connection, with_body),
        Answer::Given(given) => write_given(out, given, connection, with_body),
    }
}

fn write_error(
    out: &mut Vec<u8>,
    status: u16,
    detail: &str,
    connection: ClientConnection,
    with_body: bool,
) {
    let reason = reason_phrase(status);
    let body_len = status_body_len(status, reason, detail);
    let _ = write!(
        out,
        "HTTP/1.1 {status} {reason}\r\nContent-Type: text/plain\r\nContent-Length: {body_len}\r\nCache-Control: no-store\r\n",
    );
    out.extend_from_slice(connection.field());
    out.extend_from_slice(b"\r\n");
    if !with_body {
        return;
    }
    write_error_body(out, status, detail);
}

fn write_given(
    out: &mut Vec<u8>,
    given: &Given<'_>,
    connection: ClientConnection,
    with_body: bool,
) {
    let status = given.status;
    let _ = write!(out, "HTTP/1.1 {status} {}\r\n", reason_phrase(status));
    for (name, value) in given.fields {
        out.extend_from_slice(name);
        out.extend_from_slice(b": ");
        out.extend_from_slice(value);
        out.extend_from_slice(b"\r\n");
    }
    let frames_content = !matches!(status, 204 | 304);
    if frames_content {
        let _ = write!(out, "Content-Length: {}\r\n", given.body.len());
    }
    out.extend_from_slice(connection.field());
    out.extend_from_slice(b"\r\n");
    if with_body && frames_content {
        out.extend_from_slice(given.body);
    }
}

/// The body of a response the switch makes itself: `STATUS REASON: detail` and a newline
/// (HTTP/2 sends it after a head of its own).
pub fn write_error_body(out: &mut Vec<u8>, status: u16, detail: &str) {
    let reason = reason_phrase(status);
    let _ = write!(out, "{status} {reason}");
    if !detail.is_empty() {
        let _ = write!(out, ": {detail}");
    }
    out.push(b'\n');
}

fn status_body_len(status: u16, reason: &str, detail: &str) -> usize {
    let digits = status.to_string().len();
    let detail_len = if detail.is_empty() {
        0
    } else {
        2 + detail.len()
    };
    digits + 1 + reason.len() + detail_len + 1
}

/// The size of a head as HTTP/1.1 writes it: the status line with a reason of `reason` bytes,
/// each field as `name: value` and its line end, and the empty line. What an HTTP/2 answer's
/// head counts in the access log's bytes and the server's `bytes_out`, so that one answer
/// counts alike over both protocols (the HPACK size is the h2 crate's, and changes with the
/// connection's table).
pub fn head_size_as_http1(reason: usize, fields: impl Iterator<Item = (usize, usize)>) -> u64 {
    // "HTTP/1.1 200 " and the line end; the empty line.
    let status_line = 9 + 3 + 1 + reason + 2;
    let fields: usize = fields.map(|(name, value)| name + 2 + value + 2).sum();
    (status_line + fields + 2) as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_bodies_match_their_length() {
        for (status, detail) in [(400, "bad chunk"), (503, ""), (504, "server timeout")] {
            let mut out = Vec::new();
            write_error(&mut out, status, detail, ClientConnection::Close, true);
            let text = String::from_utf8(out).unwrap();
            let (head, body) = text.split_once("\r\n\r\n").unwrap();
            let declared: usize = head
                .lines()
                .find_map(|l| l.strip_prefix("Content-Length: "))
                .unwrap()
                .parse()
                .unwrap();
            assert_eq!(declared, body.len(), "{text}");
            assert!(head.contains("Connection: close"));
            let mut head_only = Vec::new();
            write_error(
                &mut head_only,
                status,
                detail,
                ClientConnection::Close,
                false,
            );
            assert_eq!(head_only, format!("{head}\r\n\r\n").into_bytes());
        }
    }
}
