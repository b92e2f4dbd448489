//! An HTTP/2 request as a request head (RFC 9113 section 8): what the h2 crate checked
//! already (one of each pseudo-header, before the fields; lower-case names; no
//! connection-specific fields; `te` only `trailers`; `content-length` against the DATA
//! received; valid field values), and the rest here: `Host` from `:authority` (a `Host` that
//! disagrees is refused), cookie crumbs joined, values without surrounding whitespace, framing
//! for a body without a length. The method, target and fields are copied once into the head's
//! own buffer, each recorded as a span as it goes in, and then meet the same checks as an
//! HTTP/1 client's head (`http::request::read_request_parts`), so routing, rewriting and every
//! later check see one kind of head. No HTTP/1.1 text is written or parsed for it: writing it
//! and parsing it back cost an HTTP/2 request 1 000 user-space instructions more than this
//! (52 405 -> 51 385 with `H2=1 benches/instructions.sh`; BENCHMARKS.md, "Where an HTTP/2
//! request's instructions go"). Nor is an `http::Request` built: the vendored h2 crate hands
//! the request over as it came (`h2::server::RawRequest`, vendor/README.md), its fields in
//! their order, with no `Uri` and no `HeaderMap` (BENCHMARKS.md, "HTTP/2 requests as they
//! came").

use crate::http::fields::{role_of, Field, FieldRole, Span, Version};
use crate::http::request::{read_request_parts, too_large};
use crate::http::{RequestHead, MAX_HEADER_FIELDS, MAX_HEAD_BYTES};
use h2::server::RawRequest;
use http::header::{self, HeaderName, HeaderValue};
use http::Method;

/// An HTTP/2 request's pseudo-header fields and fields, as the client sent them.
pub(super) struct Received<'a> {
    pub(super) method: &'a Method,
    pub(super) scheme: Option<&'a str>,
    pub(super) authority: Option<&'a str>,
    pub(super) path: Option<&'a str>,
    pub(super) fields: &'a [(HeaderName, HeaderValue)],
}

impl<'a> Received<'a> {
    pub(super) fn of(request: &'a RawRequest) -> Received<'a> {
        Received {
            method: request.method(),
            scheme: request.scheme(),
            authority: request.authority(),
            path: request.path(),
            fields: request.fields(),
        }
    }

    /// The values of the fields named `name`, in their order.
    fn values(&self, name: HeaderName) -> impl Iterator<Item = &'a [u8]> + use<'a> {
        self.fields
            .iter()
            .filter(move |(n, _)| *n == name)
            .map(|(_, v)| v.as_bytes())
    }
}

/// Why a request does not go on.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Refusal {
    /// Malformed (RFC 9113 section 8.1.1): the stream is reset with PROTOCOL_ERROR.
    Malformed(&'static str),
    /// Well formed, but not served: answered with this status.
    Answer(u16, &'static str),
}

/// Reads `request` into `head`, its bytes into `buf`; `body` says whether DATA may follow
/// (the HEADERS frame did not end the stream).
pub(super) fn read_head(
    request: &Received<'_>,
    body: bool,
    buf: &mut Vec<u8>,
    head: &mut RequestHead,
) -> Result<(), Refusal> {
    buf.clear();
    head.fields.clear();
    if *request.method == Method::CONNECT {
        return Err(connect(request));
    }
    let target = target(request)?;
    let host = host(request)?;
    head.method = put(buf, request.method.as_str().as_bytes());
    head.target = put(buf, target.as_bytes());
    head.version = Version::Http11;
    if let Some(host) = host {
        add_field(buf, head, b"host", host);
    }
    let mut cookies_joined = false;
    let mut length_said = false;
    for (name, value) in request.fields {
        let value = value.as_bytes();
        if value.first().is_some_and(is_space) || value.last().is_some_and(is_space) {
            return Err(Refusal::Malformed(
                "a field value begins or ends with white space",
            ));
        }
        if *name == header::HOST {
            // Host is taken from :authority above.
            continue;
        }
        // `te` (only ever `trailers`: the h2 crate refuses any other value) goes into the head:
        // an HTTP/1.1 server never gets it (a field of the hop: http/fields.rs), an HTTP/2 one
        // does (upstream/h2/request.rs), as gRPC needs.
        if *name == header::COOKIE {
            // Crumbs of one Cookie field, split for compression (RFC 9113 section 8.2.3): one
            // field again, joined with "; ", where the first crumb was.
            if !cookies_joined {
                cookies_joined = true;
                add_cookie(buf, head, request);
            }
            continue;
        }
        length_said |= *name == header::CONTENT_LENGTH;
        add_field(buf, head, name.as_str().as_bytes(), value);
    }
    if body && !length_said {
        // A body without a length: chunked to the server, its trailers (if any) after it.
        add_field(buf, head, b"transfer-encoding", b"chunked");
    }
    if head.fields.len() > MAX_HEADER_FIELDS {
        return Err(Refusal::Answer(431, "too many header fields"));
    }
    if buf.len() > MAX_HEAD_BYTES {
        let e = too_large();
        return Err(Refusal::Answer(e.status, e.reason));
    }
    head.len = buf.len();
    read_request_parts(buf, head, request.method.as_str())
        .map_err(|e| Refusal::Answer(e.status, e.reason))
}

/// What a CONNECT request gets: well formed (RFC 9113 section 8.5: `:authority`, and neither
/// `:scheme` nor `:path`), a `501`, since the switch does not tunnel over HTTP/2; else it is
/// malformed, and its stream is reset.
fn connect(request: &Received<'_>) -> Refusal {
    if request.authority.is_none() {
        Refusal::Malformed("CONNECT without :authority")
    } else if request.scheme.is_some() || request.path.is_some_and(|p| !p.is_empty()) {
        Refusal::Malformed("CONNECT with :scheme or :path")
    } else {
        Refusal::Answer(501, "CONNECT over HTTP/2 is not supported; use HTTP/1.1")
    }
}

/// Every crumb of the request's Cookie fields as one field.
fn add_cookie(buf: &mut Vec<u8>, head: &mut RequestHead, request: &Received<'_>) {
    let name = put(buf, b"cookie");
    let start = buf.len();
    for (i, crumb) in request.values(header::COOKIE).enumerate() {
        if i > 0 {
            buf.extend_from_slice(b"; ");
        }
        buf.extend_from_slice(crumb);
    }
    head.fields.push(Field {
        name,
        value: span(start, buf.len()),
        role: FieldRole::Forward,
    });
}

fn add_field(buf: &mut Vec<u8>, head: &mut RequestHead, name: &[u8], value: &[u8]) {
    let name_span = put(buf, name);
    let value = put(buf, value);
    head.fields.push(Field {
        name: name_span,
        value,
        role: role_of(name),
    });
}

/// Appends `bytes` to the head's buffer; their span there. The buffer stays far below u32's
/// range: the h2 crate bounds a header list (`MAX_HEADER_LIST`).
fn put(buf: &mut Vec<u8>, bytes: &[u8]) -> Span {
    let start = buf.len();
    buf.extend_from_slice(bytes);
    span(start, buf.len())
}

fn span(start: usize, end: usize) -> Span {
    Span {
        start: start as u32,
        end: end as u32,
    }
}

/// The request target: the path and query, or `*` for OPTIONS.
fn target<'a>(request: &Received<'a>) -> Result<&'a str, Refusal> {
    let path = request.path.unwrap_or("");
    match path.as_bytes().first() {
        Some(b'/') => Ok(path),
        Some(b'*') if path == "*" && *request.method == Method::OPTIONS => Ok(path),
        _ => Err(Refusal::Malformed("invalid :path")),
    }
}

/// The authority to put in Host: `:authority`, else the one Host field (RFC 9113 section
/// 8.3.1). A Host that names another authority than `:authority` is refused.
fn host<'a>(request: &Received<'a>) -> Result<Option<&'a [u8]>, Refusal> {
    let mut hosts = request.values(header::HOST);
    let field = hosts.next();
    if hosts.next().is_some() {
        return Err(Refusal::Malformed("more than one Host field"));
    }
    let Some(authority) = request.authority else {
        return Ok(field);
    };
    if authority.contains('@') {
        return Err(Refusal::Malformed(":authority carries user information"));
    }
    if authority.is_empty() {
        return Err(Refusal::Malformed("empty :authority"));
    }
    if field.is_some_and(|f| !f.eq_ignore_ascii_case(authority.as_bytes())) {
        return Err(Refusal::Malformed("Host differs from :authority"));
    }
    Ok(Some(authority.as_bytes()))
}

fn is_space(b: &u8) -> bool {
    matches!(b, b' ' | b'\t')
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::http::BodyFraming;

    /// A request as a client would send it: `uri`'s parts as the pseudo-header fields.
    struct Sent {
        method: Method,
        scheme: Option<String>,
        authority: Option<String>,
        path: Option<String>,
        fields: Vec<(HeaderName, HeaderValue)>,
    }

    impl Sent {
        fn received(&self) -> Received<'_> {
            Received {
                method: &self.method,
                scheme: self.scheme.as_deref(),
                authority: self.authority.as_deref(),
                path: self.path.as_deref(),
                fields: &self.fields,
            }
        }
    }

    fn parts(method: &str, uri: &str, fields: &[(&str, &str)]) -> Sent {
        let uri: http::Uri = uri.parse().expect("a URI");
        Sent {
            method: method.parse().expect("a method"),
            scheme: uri.scheme_str().map(str::to_string),
            authority: uri.authority().map(|a| a.as_str().to_string()),
            path: uri.path_and_query().map(|p| p.as_str().to_string()),
            fields: fields
                .iter()
                .map(|(n, v)| {
                    let name = HeaderName::from_bytes(n.as_bytes()).expect("a name");
                    (name, HeaderValue::from_str(v).expect("a value"))
                })
                .collect(),
        }
    }

    /// The head read from `sent`: method, target and each field as `name: value`.
    fn head(sent: &Sent, body: bool) -> Result<String, Refusal> {
        let (head, buf) = read(sent, body)?;
        let mut text = format!(
            "{} {}",
            String::from_utf8_lossy(head.method.get(&buf)),
            String::from_utf8_lossy(head.target.get(&buf))
        );
        for field in &head.fields {
            text.push_str(&format!(
                "\n{}: {}",
                String::from_utf8_lossy(field.name.get(&buf)),
                String::from_utf8_lossy(field.value.get(&buf))
            ));
        }
        Ok(text)
    }

    fn read(sent: &Sent, body: bool) -> Result<(RequestHead, Vec<u8>), Refusal> {
        let mut head = RequestHead::default();
        let mut buf = Vec::new();
        read_head(&sent.received(), body, &mut buf, &mut head)?;
        Ok((head, buf))
    }

    #[test]
    fn authority_becomes_host_and_cookies_are_joined() {
        let p = parts(
            "GET",
            "https://www.example.org/a?b=1",
            &[
                ("cookie", "a=1"),
                ("accept", "*/*"),
                ("cookie", "b=2"),
                ("cookie", "c=3"),
            ],
        );
        assert_eq!(
            head(&p, false).unwrap(),
            "GET /a?b=1\nhost: www.example.org\ncookie: a=1; b=2; c=3\naccept: */*"
        );
        let (head, buf) = read(&p, false).unwrap();
        assert_eq!(
            head.host.map(|h| h.get(&buf)),
            Some(&b"www.example.org"[..])
        );
        assert_eq!(head.path.get(&buf), b"/a");
        assert_eq!(head.query.map(|q| q.get(&buf)), Some(&b"b=1"[..]));
        assert_eq!(head.fields[0].role, FieldRole::Host);
        assert!(head.idempotent && !head.is_head && head.keep_alive);
        assert_eq!(head.framing, BodyFraming::Empty);
    }

    /// Fields reach the server in the order the client sent them, as over HTTP/1.1; a map
    /// would group a name's values at its first place.
    #[test]
    fn fields_keep_the_order_they_came_in() {
        let p = parts(
            "GET",
            "http://a/",
            &[("x-a", "1"), ("accept", "*/*"), ("x-a", "2")],
        );
        assert_eq!(
            head(&p, false).unwrap(),
            "GET /\nhost: a\nx-a: 1\naccept: */*\nx-a: 2"
        );
    }

    #[test]
    fn a_body_without_length_goes_chunked() {
        let p = parts("POST", "http://a/up", &[]);
        assert_eq!(
            head(&p, true).unwrap(),
            "POST /up\nhost: a\ntransfer-encoding: chunked"
        );
        assert_eq!(read(&p, true).unwrap().0.framing, BodyFraming::Chunked);
        let p = parts("POST", "http://a/up", &[("content-length", "3")]);
        assert_eq!(
            head(&p, true).unwrap(),
            "POST /up\nhost: a\ncontent-length: 3"
        );
        let (head, _) = read(&p, true).unwrap();
        assert_eq!(head.framing, BodyFraming::Length(3));
        assert!(!head.idempotent);
    }

    #[test]
    fn host_must_agree_with_authority() {
        let p = parts("GET", "http://a/", &[("host", "A")]);
        assert!(head(&p, false).is_ok());
        let p = parts("GET", "http://a/", &[("host", "b")]);
        assert_eq!(
            head(&p, false),
            Err(Refusal::Malformed("Host differs from :authority"))
        );
        let p = parts("GET", "/", &[("host", "b")]);
        assert_eq!(head(&p, false).unwrap(), "GET /\nhost: b");
        let p = parts("GET", "http://u@a/", &[]);
        assert!(matches!(head(&p, false), Err(Refusal::Malformed(_))));
    }

    #[test]
    fn values_with_surrounding_space_and_connect_are_refused() {
        let p = parts("GET", "http://a/", &[("x", " v")]);
        assert!(matches!(head(&p, false), Err(Refusal::Malformed(_))));
        let p = parts("CONNECT", "a:443", &[]);
        assert!(matches!(head(&p, false), Err(Refusal::Answer(501, _))));
    }

    #[test]
    fn a_connect_without_authority_or_with_a_path_is_malformed() {
        let p = parts("CONNECT", "/", &[]);
        assert_eq!(
            head(&p, false),
            Err(Refusal::Malformed("CONNECT without :authority"))
        );
        let p = parts("CONNECT", "https://a:443/x", &[]);
        assert_eq!(
            head(&p, false),
            Err(Refusal::Malformed("CONNECT with :scheme or :path"))
        );
    }

    #[test]
    fn te_trailers_is_kept_for_the_server_side_to_judge() {
        let p = parts("GET", "http://a/", &[("te", "trailers")]);
        assert_eq!(head(&p, false).unwrap(), "GET /\nhost: a\nte: trailers");
    }

    /// The checks an HTTP/1 head meets, met here too, with the same answers.
    #[test]
    fn the_http1_checks_apply() {
        let many: Vec<(String, String)> = (0..=MAX_HEADER_FIELDS)
            .map(|i| (format!("x-{i}"), "v".to_string()))
            .collect();
        let many: Vec<(&str, &str)> = many.iter().map(|(n, v)| (n.as_str(), v.as_str())).collect();
        let p = parts("GET", "http://a/", &many);
        assert_eq!(
            head(&p, false),
            Err(Refusal::Answer(431, "too many header fields"))
        );
        let long = "v".repeat(MAX_HEAD_BYTES);
        let p = parts("GET", "http://a/", &[("x", long.as_str())]);
        assert!(matches!(head(&p, false), Err(Refusal::Answer(431, _))));
        let p = parts(
            "GET",
            "http://a/",
            &[("content-length", "1"), ("content-length", "2")],
        );
        assert!(matches!(head(&p, false), Err(Refusal::Answer(400, _))));
        let p = parts("GET", "http://a/", &[("x_forwarded_for", "1.2.3.4")]);
        assert!(matches!(head(&p, false), Err(Refusal::Answer(400, _))));
        let p = parts("HEAD", "http://a/x", &[]);
        assert!(read(&p, false).unwrap().0.is_head);
    }
}
