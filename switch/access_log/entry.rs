//! What the access log tells of one request: [`Request`], what a session keeps of the
//! request's head, and [`Entry`], the line's fields.

use crate::http::RequestHead;
use std::net::SocketAddr;
use std::ops::Range;
use std::time::Duration;

/// What the access log keeps of a request's head, taken before the head's buffer is reused:
/// `METHOD target` as the client sent them (bytes unchanged: each format escapes them its own
/// way when it writes them), the protocol, and the Referer and User-Agent fields when the
/// format shows them. A session keeps one from request to request, so a steady request
/// allocates nothing for it.
#[derive(Debug, Default)]
pub struct Request {
    pub(super) line: Vec<u8>,
    /// `HTTP/1.1`; `None` for what is not an HTTP request (a passthrough tunnel's `TLS name`).
    pub(super) protocol: Option<&'static str>,
    /// The captured field values; `referer` and `user_agent` are ranges of it, `None` when the
    /// request had no such field (or the format does not show them).
    pub(super) fields: Vec<u8>,
    pub(super) referer: Option<Range<usize>>,
    pub(super) user_agent: Option<Range<usize>>,
}

/// Which field a captured value is.
enum Captured {
    Referer,
    UserAgent,
}

impl Request {
    /// Forgets the request: nothing is logged of it until the next capture or `push_str`.
    pub fn clear(&mut self) {
        self.line.clear();
        self.protocol = None;
        self.fields.clear();
        self.referer = None;
        self.user_agent = None;
    }

    /// Says the request came in another protocol than its head's version (`HTTP/2.0`: an
    /// HTTP/2 stream, whose head was translated to HTTP/1.1).
    pub fn set_protocol(&mut self, protocol: &'static str) {
        if self.protocol.is_some() {
            self.protocol = Some(protocol);
        }
    }

    /// What the log keeps of an HTTP/2 request refused before it became a head: its method and
    /// target as the client sent them.
    pub fn refused_h2(&mut self, method: &str, target: &str) {
        self.clear();
        self.line.extend_from_slice(method.as_bytes());
        self.line.push(b' ');
        self.line.extend_from_slice(target.as_bytes());
        self.protocol = Some("HTTP/2.0");
    }

    /// Appends to what the line shows as the request (a passthrough tunnel's `TLS name`).
    pub fn push_str(&mut self, text: &str) {
        self.line.extend_from_slice(text.as_bytes());
    }

    /// The first Referer and User-Agent fields of `head`, as the combined format shows them.
    pub(super) fn capture_fields(&mut self, head: &RequestHead, buf: &[u8]) {
        for field in &head.fields {
            let name = field.name.get(buf);
            // By length first, as the head parser dispatches names: most fields cost one
            // comparison.
            let which = match name.len() {
                7 if self.referer.is_none() && name.eq_ignore_ascii_case(b"referer") => {
                    Captured::Referer
                }
                10 if self.user_agent.is_none() && name.eq_ignore_ascii_case(b"user-agent") => {
                    Captured::UserAgent
                }
                _ => continue,
            };
            let start = self.fields.len();
            self.fields.extend_from_slice(field.value.get(buf));
            let range = Some(start..self.fields.len());
            match which {
                Captured::Referer => self.referer = range,
                Captured::UserAgent => self.user_agent = range,
            }
        }
    }

    pub(super) fn field(&self, range: &Option<Range<usize>>) -> Option<&[u8]> {
        range.clone().and_then(|r| self.fields.get(r))
    }
}

/// One request as the access log tells it.
pub struct Entry<'a> {
    pub service: &'a str,
    pub client: SocketAddr,
    /// What was kept of the request, or `None` for a request refused before its head was
    /// read whole.
    pub request: Option<&'a Request>,
    pub status: u16,
    /// Bytes sent to the client.
    pub bytes: u64,
    pub pool: Option<&'a str>,
    pub server: Option<SocketAddr>,
    pub end: End<'a>,
    /// The rate limit that refused the request, or under `dry_run` would have.
    pub limit: Option<&'a str>,
    /// The gRPC status of a gRPC call, when one came back (the server's, or the switch's own
    /// answer's).
    pub grpc: Option<u8>,
    /// The request's trace and id (`trace`, `request_id`: trace/), `None` with both off.
    pub trace: Option<&'a crate::trace::RequestTrace>,
}

/// The last field of a line.
pub enum End<'a> {
    /// The request was carried out in this time.
    Took(Duration),
    /// The request was refused for this reason.
    Refused(&'a str),
}
