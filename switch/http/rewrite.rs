//! Heads rebuilt for the other side: the request as the server sees it, the response as the
//! client sees it. Connection-specific fields are dropped and replaced by the switch's own,
//! Content-Length is normalised, everything else is copied byte for byte in its order.

use super::fields::{list_items, Field, FieldRole, Version};
pub use super::head_writer::HeadWriter;
use super::request::{RequestHead, TargetForm};
use super::response::ResponseHead;
use super::BodyFraming;
use crate::policy::headers::HeaderActions;
use crate::trace::RequestTrace;
use std::io::Write;
use std::net::IpAddr;

/// What the matched rule changes in the request sent to the server (policy/): its path (the
/// query stays), its fields. `Default`: nothing, the plain path.
#[derive(Clone, Copy, Debug, Default)]
pub struct RequestEdit<'e> {
    /// The path to send instead of the client's.
    pub path: Option<&'e [u8]>,
    pub headers: Option<&'e HeaderActions>,
    /// The request's trace and id (trace/): the client's `traceparent` and `X-Request-Id` are
    /// left out and the trace's written instead. `None` with tracing off.
    pub trace: Option<&'e RequestTrace>,
}

/// How the client's request reached the switch, for X-Forwarded-Proto.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scheme {
    /// Plain HTTP: the client's X-Forwarded-Proto, if any, goes on as it is (as HAProxy and
    /// nginx pass it by default).
    Http,
    /// Over TLS terminated here: `X-Forwarded-Proto: https`, whatever the client sent.
    Https,
}

/// Writes the head sent to the server for `head` (parsed from `buf`) into `out`: HTTP/1.1 text
/// or a [`RequestMessage`] ([`HeadWriter`]).
///
/// The request always goes out as HTTP/1.1 so the server connection can be kept alive.
/// `client` is the client's address as X-Forwarded-For shows it (see [`forwarded_for`]);
/// `default_host` fills in Host for an HTTP/1.0 request that had none. `edit` is what the
/// rule changes: fields it removes or sets are left out (X-Forwarded-For among them: the
/// client's address then starts a new one), its own follow the request's, and the switch
/// writes no X-Forwarded-For or X-Forwarded-Proto of its own where the rule writes one.
pub fn write_request_head<W: HeadWriter>(
    out: &mut W,
    head: &RequestHead,
    buf: &[u8],
    client: &[u8],
    default_host: &[u8],
    scheme: Scheme,
    edit: RequestEdit<'_>,
) {
    out.request_line(head.method.get(buf), target_of(head, buf, edit.path));
    let mut fields = ServerFields {
        head,
        buf,
        client,
        scheme,
        headers: edit.headers,
        trace: edit.trace,
        last_forwarded_for: head.fields.iter().rposition(|f| {
            f.role == FieldRole::ForwardedFor
                && !edit.headers.is_some_and(|h| h.drops(f.name.get(buf)))
        }),
        wrote_length: false,
        wrote_host: false,
        wrote_coding: false,
    };
    for (i, field) in head.fields.iter().enumerate() {
        fields.put(out, i, field);
    }
    fields.put_missing(out, default_host);
    out.end();
}

/// The request target as the server gets it, in pieces: an absolute-form target in origin
/// form; `path`, when a rule rewrote it, with the client's query.
#[inline]
fn target_of<'t>(head: &RequestHead, buf: &'t [u8], path: Option<&'t [u8]>) -> [&'t [u8]; 3] {
    if let Some(path) = path {
        return match head.query {
            Some(query) => [path, b"?", query.get(buf)],
            None => [path, b"", b""],
        };
    }
    match head.target_form {
        TargetForm::Origin | TargetForm::Asterisk | TargetForm::Authority => {
            [head.target.get(buf), b"", b""]
        }
        TargetForm::Absolute => {
            let slash: &[u8] = if head.path.get(buf).is_empty() {
                b"/"
            } else {
                b""
            };
            let path_start = head.path.start as usize;
            let rest = buf
                .get(path_start..head.target.end as usize)
                .unwrap_or_default();
            [slash, rest, b""]
        }
    }
}

/// The header section of the request as the server gets it, field by field: what the
/// request's head holds, and what has been written so far of the fields sent once.
struct ServerFields<'a> {
    head: &'a RequestHead,
    buf: &'a [u8],
    client: &'a [u8],
    scheme: Scheme,
    /// The rule's field actions, if any.
    headers: Option<&'a HeaderActions>,
    trace: Option<&'a RequestTrace>,
    /// The X-Forwarded-For field the client's address is appended to.
    last_forwarded_for: Option<usize>,
    wrote_length: bool,
    wrote_host: bool,
    wrote_coding: bool,
}

impl ServerFields<'_> {
    /// Writes what becomes of field number `i` of the request (maybe nothing).
    #[inline]
    fn put<W: HeadWriter>(&mut self, out: &mut W, i: usize, field: &Field) {
        let (head, buf) = (self.head, self.buf);
        let name = field.name.get(buf);
        let value = field.value.get(buf);
        // Rules never name the framing, connection or Host fields (policy/headers.rs).
        if self.headers.is_some_and(|h| h.drops(name)) {
            return;
        }
        match field.role {
            // Tracing's fields are among those forwarded as they are; with tracing off this
            // is one test of a `None`.
            FieldRole::Forward => {
                if !self.trace.is_some_and(|t| t.replaces(name)) {
                    put_field(out, name, value)
                }
            }
            FieldRole::ForwardedProto => {
                if self.scheme == Scheme::Http {
                    put_field(out, name, value)
                }
            }
            // Checked to say exactly `chunked` (request.rs): sent in that one form, once.
            FieldRole::TransferEncoding => {
                if !self.wrote_coding && head.framing == BodyFraming::Chunked {
                    self.wrote_coding = true;
                    put_field(out, b"Transfer-Encoding", b"chunked");
                }
            }
            FieldRole::Drop => {}
            FieldRole::Upgrade => {
                if head.upgrade {
                    put_field(out, name, value);
                }
            }
            FieldRole::ContentLength => {
                if !self.wrote_length {
                    self.wrote_length = true;
                    let length = request_length(head.framing);
                    put_field(out, name, itoa::Buffer::new().format(length).as_bytes());
                }
            }
            FieldRole::Host => {
                self.wrote_host = true;
                match head.authority {
                    Some(authority) => put_field(out, name, authority.get(buf)),
                    None => put_field(out, name, value),
                }
            }
            FieldRole::ForwardedFor if Some(i) == self.last_forwarded_for => {
                put_forwarded_for(out, name, value, self.client)
            }
            FieldRole::ForwardedFor => put_field(out, name, value),
        }
    }

    /// The switch's own fields after the request's: Host if it had none, X-Forwarded-For if
    /// it had none to append to, X-Forwarded-Proto over TLS, Connection for an upgrade.
    fn put_missing<W: HeadWriter>(&self, out: &mut W, default_host: &[u8]) {
        if !self.wrote_host {
            let host = self
                .head
                .authority
                .map_or(default_host, |a| a.get(self.buf));
            put_field(out, b"Host", host);
        }
        let rule_writes = |name: &[u8]| self.headers.is_some_and(|h| h.writes(name));
        if self.last_forwarded_for.is_none() && !rule_writes(b"x-forwarded-for") {
            put_field(out, b"X-Forwarded-For", self.client);
        }
        if self.scheme == Scheme::Https && !rule_writes(b"x-forwarded-proto") {
            put_field(out, b"X-Forwarded-Proto", b"https");
        }
        if let Some(headers) = self.headers {
            for (name, value) in headers.appended() {
                put_field(out, name, value);
            }
        }
        if let Some(trace) = self.trace {
            let ruled = |name: &[u8]| {
                self.headers
                    .is_some_and(|h| h.writes(name) || h.drops(name))
            };
            trace.for_each_field(ruled, |name, value| put_field(out, name, value));
        }
        if self.head.upgrade {
            put_field(out, b"Connection", b"upgrade");
        }
    }
}

/// The client's X-Forwarded-For with the client's address appended.
#[inline]
fn put_forwarded_for<W: HeadWriter>(out: &mut W, name: &[u8], value: &[u8], client: &[u8]) {
    // An empty value gets no empty list element before the client's address.
    match value.is_empty() {
        true => out.field(name, client),
        false => out.field_joined(name, [value, b", ", client]),
    }
}

/// The client address as X-Forwarded-For carries it: IPv4-mapped IPv6 addresses as IPv4.
/// Formatted once per connection, not per request, into the connection's own bytes: with a new
/// connection per request, a heap string here was one allocation per request.
pub fn forwarded_for(client: IpAddr) -> ForwardedFor {
    let mut text = [0u8; ForwardedFor::MAX];
    let mut room = &mut text[..];
    // The longest IPv6 text is 45 bytes, so the write cannot run out of room.
    let _ = write!(room, "{}", client.to_canonical());
    let len = ForwardedFor::MAX - room.len();
    ForwardedFor {
        text,
        len: len as u8,
    }
}

/// An address as text, held inline (see [`forwarded_for`]).
#[derive(Clone, Copy, Debug)]
pub struct ForwardedFor {
    text: [u8; ForwardedFor::MAX],
    len: u8,
}

impl ForwardedFor {
    /// INET6_ADDRSTRLEN without the terminating NUL.
    const MAX: usize = 45;

    pub fn as_bytes(&self) -> &[u8] {
        &self.text[..usize::from(self.len)]
    }
}

fn request_length(framing: BodyFraming) -> u64 {
    match framing {
        BodyFraming::Length(n) => n,
        _ => 0,
    }
}

/// How the switch will treat the client connection after a response; decides the Connection
/// field the client is sent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ClientConnection {
    /// HTTP/1.1 persistence is the default: nothing to say.
    Persistent,
    /// An HTTP/1.0 client asked for keep-alive and gets it.
    KeepAlive10,
    Close,
    Upgrade,
}

impl ClientConnection {
    /// The Connection field line that says it (empty for HTTP/1.1 persistence).
    pub fn field(self) -> &'static [u8] {
        match self {
            ClientConnection::Persistent => b"",
            ClientConnection::KeepAlive10 => b"Connection: keep-alive\r\n",
            ClientConnection::Close => b"Connection: close\r\n",
            ClientConnection::Upgrade => b"Connection: upgrade\r\n",
        }
    }
}

/// Writes the response head for the client into `out` (appending), with the rule's field
/// actions (`headers`) applied.
///
/// An HTTP/1.0 client never sees Transfer-Encoding (RFC 9112 section 6.1): a chunked body
/// reaches it decoded and delimited by closing the connection, and a head without body (HEAD,
/// 304) must not announce a coding it cannot read either.
pub fn write_response_head(
    out: &mut Vec<u8>,
    head: &ResponseHead,
    buf: &[u8],
    connection: ClientConnection,
    client: Version,
    headers: Option<&HeaderActions>,
) {
    let edit = ResponseFieldEdit {
        headers,
        recoded: None,
    };
    write_response_head_with(out, head, buf, (connection, client), edit);
}

/// What the switch changes in a response's fields besides the connection's own: a rule's
/// field actions, and a body it recodes on the way.
#[derive(Clone, Copy, Debug, Default)]
pub struct ResponseFieldEdit<'e> {
    pub headers: Option<&'e HeaderActions>,
    pub recoded: Option<Recoded>,
}

/// An answer the switch may recode on the way (compression: switch/compress/). When it does
/// (`content_encoding`), the head loses its length (the body goes chunked, or by HTTP/2
/// framing) and its strong validator (RFC 9110 section 8.8.3: `ETag: "x"` becomes `W/"x"`),
/// and says the coding; either way it may say that it varies with `Accept-Encoding`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Recoded {
    /// The `Content-Encoding` token; `None`: the body goes as it is.
    pub content_encoding: Option<&'static str>,
    /// `Vary: Accept-Encoding` is added (the server's `Vary` does not already say it).
    pub add_vary: bool,
}

impl Recoded {
    /// Whether the body's bytes change.
    pub fn changes_body(self) -> bool {
        self.content_encoding.is_some()
    }

    /// The fields the response gets after its own.
    pub fn fields(self) -> impl Iterator<Item = (&'static [u8], &'static [u8])> {
        let encoding = self
            .content_encoding
            .map(|coding| (&b"Content-Encoding"[..], coding.as_bytes()));
        let vary = (&b"Vary"[..], &b"Accept-Encoding"[..]);
        encoding.into_iter().chain(self.add_vary.then_some(vary))
    }
}

/// A strong entity tag made weak (`"abc"` becomes `W/"abc"`) for a recoded body, whose bytes
/// differ from the server's; `None`: already weak, or not an entity tag at all.
pub fn weakened_etag(value: &[u8]) -> Option<Vec<u8>> {
    if !value.starts_with(b"\"") {
        return None;
    }
    let mut weak = Vec::with_capacity(value.len() + 2);
    weak.extend_from_slice(b"W/");
    weak.extend_from_slice(value);
    Some(weak)
}

/// [`write_response_head`] with a recoded body as well (`edit`).
pub fn write_response_head_with(
    out: &mut Vec<u8>,
    head: &ResponseHead,
    buf: &[u8],
    (connection, client): (ClientConnection, Version),
    edit: ResponseFieldEdit<'_>,
) {
    let headers = edit.headers;
    let recoded = edit.recoded;
    let body_recoded = recoded.is_some_and(Recoded::changes_body);
    out.extend_from_slice(b"HTTP/1.1 ");
    out.extend_from_slice(itoa::Buffer::new().format(head.status).as_bytes());
    out.push(b' ');
    out.extend_from_slice(head.reason.get(buf));
    out.extend_from_slice(b"\r\n");
    let mut wrote_length = false;
    // 1xx and 204 have no content to frame (RFC 9110 sections 8.6, 15.2, 15.3.5): a length or
    // coding there only misleads. An HTTP/1.0 server's Transfer-Encoding is faulty framing
    // (RFC 9112 section 6.1): its body is read until the close and goes on without one.
    let frames_content = head.status >= 200 && head.status != 204;
    let codings_to_client =
        frames_content && client == Version::Http11 && head.version == Version::Http11;
    let mut wrote_coding = false;
    for field in &head.fields {
        let name = field.name.get(buf);
        let value = field.value.get(buf);
        if headers.is_some_and(|h| h.drops(name)) {
            continue;
        }
        match field.role {
            FieldRole::Forward if body_recoded => put_recoded_field(out, name, value),
            FieldRole::Forward
            | FieldRole::Host
            | FieldRole::ForwardedFor
            | FieldRole::ForwardedProto => put_field(out, name, value),
            FieldRole::Drop => {}
            FieldRole::TransferEncoding => {
                if codings_to_client && !wrote_coding && !body_recoded {
                    wrote_coding = true;
                    put_codings(out, head, buf);
                }
            }
            FieldRole::Upgrade => {
                if head.status == 101 {
                    put_field(out, name, value);
                }
            }
            FieldRole::ContentLength => {
                if !wrote_length && frames_content && !body_recoded {
                    wrote_length = true;
                    put_length(out, name, head.content_length.unwrap_or(0));
                }
            }
        }
    }
    if !body_recoded && !wrote_length && !wrote_coding {
        put_unsaid_framing(out, head, frames_content, codings_to_client);
    }
    if let Some(recoded) = recoded {
        // Chunked to an HTTP/1.1 client; an HTTP/1.0 one reads it to the close.
        if body_recoded && client == Version::Http11 {
            out.extend_from_slice(b"Transfer-Encoding: chunked\r\n");
        }
        for (name, value) in recoded.fields() {
            put_field(out, name, value);
        }
    }
    if let Some(headers) = headers {
        for (name, value) in headers.appended() {
            put_field(out, name, value);
        }
    }
    out.extend_from_slice(connection.field());
    out.extend_from_slice(b"\r\n");
}

/// The framing of a head that came as a message (HTTP/2), which no field of its own says
/// (http/response.rs, `frame_message_head`): a body its stream ends goes chunked, one that
/// ended with the head has a length of 0. An HTTP/1 head that frames its body has said it in
/// its fields.
fn put_unsaid_framing(
    out: &mut Vec<u8>,
    head: &ResponseHead,
    frames_content: bool,
    codings_to_client: bool,
) {
    if codings_to_client && head.framing == BodyFraming::Chunked {
        out.extend_from_slice(b"Transfer-Encoding: chunked\r\n");
    } else if let (true, Some(length)) = (frames_content, head.content_length) {
        put_length(out, b"Content-Length", length);
    }
}

/// The codings of all of a response's Transfer-Encoding fields as one field, each coding as
/// the server wrote it and without empty list elements (`gzip,, chunked` and a second field
/// become `Transfer-Encoding: gzip, chunked`).
fn put_codings(out: &mut Vec<u8>, head: &ResponseHead, buf: &[u8]) {
    out.extend_from_slice(b"Transfer-Encoding: ");
    let mut first = true;
    for field in head
        .fields
        .iter()
        .filter(|f| f.role == FieldRole::TransferEncoding)
    {
        for coding in list_items(field.value.get(buf)) {
            if !first {
                out.extend_from_slice(b", ");
            }
            first = false;
            out.extend_from_slice(coding);
        }
    }
    out.extend_from_slice(b"\r\n");
}

/// Adds a field at the end of the complete head in `out` (before its empty line).
pub fn add_field_to_head(out: &mut Vec<u8>, name: &[u8], value: &[u8]) {
    if out.ends_with(b"\r\n\r\n") {
        out.truncate(out.len() - 2);
        put_field(out, name, value);
        out.extend_from_slice(b"\r\n");
    }
}

/// The Connection treatment a response to this client gets, before framing is considered.
pub fn client_connection(version: Version, keep_alive: bool) -> ClientConnection {
    match (keep_alive, version) {
        (false, _) => ClientConnection::Close,
        (true, Version::Http11) => ClientConnection::Persistent,
        (true, Version::Http10) => ClientConnection::KeepAlive10,
    }
}

/// A field of a recoded response: its entity tag made weak.
fn put_recoded_field(out: &mut Vec<u8>, name: &[u8], value: &[u8]) {
    match name
        .eq_ignore_ascii_case(b"etag")
        .then(|| weakened_etag(value))
    {
        Some(Some(weak)) => put_field(out, name, &weak),
        _ => put_field(out, name, value),
    }
}

#[inline]
fn put_field<W: HeadWriter>(out: &mut W, name: &[u8], value: &[u8]) {
    out.field(name, value);
}

fn put_length(out: &mut Vec<u8>, name: &[u8], length: u64) {
    out.extend_from_slice(name);
    out.extend_from_slice(b": ");
    out.extend_from_slice(itoa::Buffer::new().format(length).as_bytes());
    out.extend_from_slice(b"\r\n");
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::http::request::parse_request;
    use crate::http::response::{parse_response, RequestKind};
    use std::net::Ipv4Addr;

    fn upstream(raw: &[u8]) -> String {
        let mut head = RequestHead::default();
        assert!(parse_request(&mut raw.to_vec(), &mut head).unwrap());
        let mut out = Vec::new();
        let client = forwarded_for(IpAddr::V4(Ipv4Addr::new(10, 0, 0, 7)));
        write_request_head(
            &mut out,
            &head,
            raw,
            client.as_bytes(),
            b"127.0.0.1:9001",
            Scheme::Http,
            RequestEdit::default(),
        );
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn request_is_rebuilt_with_crlf_and_forwarded_for() {
        let got = upstream(b"GET /a?b=%20c HTTP/1.1\nHost: x\nAccept:\t*/*\nConnection: keep-alive, X-Hop\nX-Hop: 1\nKeep-Alive: 5\n\n");
        assert_eq!(
            got,
            "GET /a?b=%20c HTTP/1.1\r\nHost: x\r\nAccept: */*\r\nX-Forwarded-For: 10.0.0.7\r\n\r\n"
        );
    }

    fn upstream_edited(raw: &[u8], edit: RequestEdit<'_>, scheme: Scheme) -> String {
        let mut head = RequestHead::default();
        assert!(parse_request(&mut raw.to_vec(), &mut head).unwrap());
        let mut out = Vec::new();
        let client = forwarded_for(IpAddr::V4(Ipv4Addr::new(10, 0, 0, 7)));
        write_request_head(&mut out, &head, raw, client.as_bytes(), b"h", scheme, edit);
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn the_trace_replaces_the_clients_traceparent_and_request_id() {
        let raw = b"GET / HTTP/1.1\r\nHost: x\r\ntraceparent: 00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01\r\ntracestate: a=1\r\nX-Request-Id: bad id\r\n\r\n";
        let mut head = RequestHead::default();
        assert!(parse_request(&mut raw.to_vec(), &mut head).unwrap());
        let trace = RequestTrace::begin((true, true, false), (&head, raw), "1.1");
        let edit = RequestEdit {
            trace: Some(&trace),
            ..RequestEdit::default()
        };
        let got = upstream_edited(raw, edit, Scheme::Http);
        let mut ours = Vec::new();
        trace.for_each_field(|_| false, |name, value| ours.field(name, value));
        let ours = String::from_utf8(ours).unwrap();
        assert_eq!(
            got,
            format!("GET / HTTP/1.1\r\nHost: x\r\ntracestate: a=1\r\nX-Forwarded-For: 10.0.0.7\r\n{ours}\r\n")
        );
        assert!(
            ours.contains("-4bf92f3577b34da6a3ce929d0e0e4736-"),
            "{ours}"
        );
        assert!(
            !ours.contains("00f067aa0ba902b7") && !ours.contains("bad id"),
            "{ours}"
        );
    }

    fn actions(remove: &[&str], set: &[(&str, &str)], add: &[(&str, &str)]) -> HeaderActions {
        let owned = |l: &[(&str, &str)]| -> Vec<(String, String)> {
            l.iter()
                .map(|(n, v)| (n.to_string(), v.to_string()))
                .collect()
        };
        let remove: Vec<String> = remove.iter().map(|n| n.to_string()).collect();
        HeaderActions::new(&remove, &owned(set), &owned(add))
    }

    #[test]
    fn rules_change_the_path_and_the_fields_sent_up() {
        let headers = actions(
            &["cookie"],
            &[("X-Pool", "images")],
            &[("Via", "1.1 tcpvs")],
        );
        let edit = RequestEdit {
            path: Some(b"/img/a.png"),
            headers: Some(&headers),
            trace: None,
        };
        let got = upstream_edited(
            b"GET /images/a.png?s=1 HTTP/1.1\r\nHost: x\r\nCookie: a=1\r\nX-Pool: old\r\nx-pool: older\r\nVia: 1.0 cdn\r\n\r\n",
            edit,
            Scheme::Http,
        );
        assert_eq!(
            got,
            "GET /img/a.png?s=1 HTTP/1.1\r\nHost: x\r\nVia: 1.0 cdn\r\nX-Forwarded-For: 10.0.0.7\r\nX-Pool: images\r\nVia: 1.1 tcpvs\r\n\r\n"
        );
    }

    #[test]
    fn forwarded_fields_follow_the_rule() {
        // Removed: the client's list goes, the switch starts a new one.
        let remove = actions(&["X-Forwarded-For"], &[], &[]);
        let edit = RequestEdit {
            path: None,
            headers: Some(&remove),
            trace: None,
        };
        let got = upstream_edited(
            b"GET / HTTP/1.1\r\nHost: x\r\nX-Forwarded-For: 6.6.6.6\r\n\r\n",
            edit,
            Scheme::Http,
        );
        assert_eq!(
            got,
            "GET / HTTP/1.1\r\nHost: x\r\nX-Forwarded-For: 10.0.0.7\r\n\r\n"
        );
        // Set by the rule: its value alone, and no X-Forwarded-Proto of the switch's.
        let set = actions(
            &[],
            &[
                ("X-Forwarded-For", "1.2.3.4"),
                ("X-Forwarded-Proto", "http"),
            ],
            &[],
        );
        let edit = RequestEdit {
            path: None,
            headers: Some(&set),
            trace: None,
        };
        let got = upstream_edited(
            b"GET / HTTP/1.1\r\nHost: x\r\nX-Forwarded-For: 6.6.6.6\r\n\r\n",
            edit,
            Scheme::Https,
        );
        assert_eq!(
            got,
            "GET / HTTP/1.1\r\nHost: x\r\nX-Forwarded-For: 1.2.3.4\r\nX-Forwarded-Proto: http\r\n\r\n"
        );
    }

    #[test]
    fn rules_change_the_fields_sent_down() {
        let raw = b"HTTP/1.1 200 OK\r\nServer: apache\r\nContent-Length: 2\r\nX-A: 1\r\n\r\n";
        let mut head = ResponseHead::default();
        let kind = RequestKind {
            is_head: false,
            is_connect: false,
        };
        assert!(parse_response(raw, kind, &mut head).unwrap());
        let headers = actions(
            &["server"],
            &[("Strict-Transport-Security", "max-age=60")],
            &[("X-A", "2")],
        );
        let mut out = Vec::new();
        write_response_head(
            &mut out,
            &head,
            raw,
            ClientConnection::Persistent,
            Version::Http11,
            Some(&headers),
        );
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nX-A: 1\r\nStrict-Transport-Security: max-age=60\r\nX-A: 2\r\n\r\n"
        );
    }

    #[test]
    fn mapped_addresses_are_shown_as_ipv4() {
        let mapped = IpAddr::V6(Ipv4Addr::new(192, 0, 2, 9).to_ipv6_mapped());
        assert_eq!(forwarded_for(mapped).as_bytes(), b"192.0.2.9");
        let v6 = "2001:db8::1".parse().unwrap();
        assert_eq!(forwarded_for(v6).as_bytes(), b"2001:db8::1");
        let longest = "ffff:ffff:ffff:ffff:ffff:ffff:255.255.255.255"
            .parse()
            .unwrap();
        let text = forwarded_for(longest);
        assert_eq!(text.as_bytes(), longest.to_string().as_bytes());
    }

    #[test]
    fn forwarded_for_is_appended_to_the_last_one() {
        let got = upstream(b"GET / HTTP/1.1\r\nX-Forwarded-For: 1.1.1.1\r\nHost: x\r\nX-Forwarded-For: 2.2.2.2\r\n\r\n");
        assert_eq!(
            got,
            "GET / HTTP/1.1\r\nX-Forwarded-For: 1.1.1.1\r\nHost: x\r\nX-Forwarded-For: 2.2.2.2, 10.0.0.7\r\n\r\n"
        );
    }

    #[test]
    fn absolute_form_becomes_origin_form() {
        let got = upstream(b"GET http://h.example:81 HTTP/1.1\r\nHost: wrong\r\n\r\n");
        assert_eq!(
            got,
            "GET / HTTP/1.1\r\nHost: h.example:81\r\nX-Forwarded-For: 10.0.0.7\r\n\r\n"
        );
        let got = upstream(b"GET http://h.example/p?q HTTP/1.0\r\n\r\n");
        assert_eq!(
            got,
            "GET /p?q HTTP/1.1\r\nHost: h.example\r\nX-Forwarded-For: 10.0.0.7\r\n\r\n"
        );
    }

    #[test]
    fn http10_without_host_gets_the_server_address() {
        let got = upstream(b"GET / HTTP/1.0\r\n\r\n");
        assert_eq!(
            got,
            "GET / HTTP/1.1\r\nHost: 127.0.0.1:9001\r\nX-Forwarded-For: 10.0.0.7\r\n\r\n"
        );
    }

    #[test]
    fn content_length_is_normalised_and_upgrade_kept() {
        let got = upstream(
            b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 3, 3\r\ncontent-length: 3\r\n\r\n",
        );
        assert_eq!(
            got,
            "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\nX-Forwarded-For: 10.0.0.7\r\n\r\n"
        );
        let got = upstream(
            b"GET /ws HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n",
        );
        assert_eq!(
            got,
            "GET /ws HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nX-Forwarded-For: 10.0.0.7\r\nConnection: upgrade\r\n\r\n"
        );
        // Without Connection: upgrade the Upgrade field is not sent on.
        let got = upstream(b"GET /ws HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\n\r\n");
        assert_eq!(
            got,
            "GET /ws HTTP/1.1\r\nHost: x\r\nX-Forwarded-For: 10.0.0.7\r\n\r\n"
        );
    }

    /// The response head `raw` as rebuilt for a client of `version` getting `connection`.
    fn client_head(raw: &[u8], connection: ClientConnection, version: Version) -> String {
        let mut head = ResponseHead::default();
        let kind = RequestKind {
            is_head: false,
            is_connect: false,
        };
        assert!(parse_response(raw, kind, &mut head).unwrap());
        let mut out = Vec::new();
        write_response_head(&mut out, &head, raw, connection, version, None);
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn response_connection_fields() {
        let raw = b"HTTP/1.1 200 OK\r\nConnection: close\r\nTransfer-Encoding: chunked\r\nX-Served-By: a\r\n\r\n";
        assert_eq!(
            client_head(raw, ClientConnection::Persistent, Version::Http11),
            "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nX-Served-By: a\r\n\r\n"
        );
        assert_eq!(
            client_head(raw, ClientConnection::Close, Version::Http10),
            "HTTP/1.1 200 OK\r\nX-Served-By: a\r\nConnection: close\r\n\r\n"
        );
    }

    #[test]
    fn no_transfer_encoding_to_http10_even_without_body() {
        let raw = b"HTTP/1.1 304 Not Modified\r\nTransfer-Encoding: chunked\r\nETag: \"x\"\r\n\r\n";
        assert_eq!(
            client_head(raw, ClientConnection::KeepAlive10, Version::Http10),
            "HTTP/1.1 304 Not Modified\r\nETag: \"x\"\r\nConnection: keep-alive\r\n\r\n"
        );
    }

    #[test]
    fn framing_goes_on_in_its_one_canonical_form() {
        let got = upstream(b"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding:  CHUNKED \r\n\r\n");
        assert!(got.contains("\r\nTransfer-Encoding: chunked\r\n"), "{got}");
        let got = upstream(b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 007, 7\r\n\r\n");
        assert!(got.contains("\r\nContent-Length: 7\r\n"), "{got}");
    }

    #[test]
    fn an_empty_forwarded_for_gets_no_empty_element() {
        let got = upstream(b"GET / HTTP/1.1\r\nHost: x\r\nX-Forwarded-For:\r\n\r\n");
        assert!(got.contains("\r\nX-Forwarded-For: 10.0.0.7\r\n"), "{got}");
    }

    #[test]
    fn response_framing_is_rebuilt() {
        // Codings joined in one field, empty elements gone.
        let raw =
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip,,\r\nTransfer-Encoding: chunked\r\n\r\n";
        assert_eq!(
            client_head(raw, ClientConnection::Persistent, Version::Http11),
            "HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n"
        );
        // 204 and 1xx frame nothing: no length, no coding.
        let raw = b"HTTP/1.1 204 No Content\r\nContent-Length: 5\r\nX-A: 1\r\n\r\n";
        assert_eq!(
            client_head(raw, ClientConnection::Persistent, Version::Http11),
            "HTTP/1.1 204 No Content\r\nX-A: 1\r\n\r\n"
        );
        let raw = b"HTTP/1.1 100 Continue\r\nTransfer-Encoding: chunked\r\n\r\n";
        assert_eq!(
            client_head(raw, ClientConnection::Persistent, Version::Http11),
            "HTTP/1.1 100 Continue\r\n\r\n"
        );
        // An HTTP/1.0 server's coding is faulty framing: read until close, announced as none.
        let raw = b"HTTP/1.0 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n";
        assert_eq!(
            client_head(raw, ClientConnection::Close, Version::Http11),
            "HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n"
        );
    }
}
