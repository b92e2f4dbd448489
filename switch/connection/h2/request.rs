//! An HTTP/2 request as an HTTP/1.1 head (RFC 9113 section 8): what the h2 crate checked
//! already (one of each pseudo-header, before the fields and never in trailers; lower-case
//! names; no connection-specific fields; `te` only `trailers`; `content-length` against the
//! DATA received; no CR, LF or NUL in a value), and the rest here: `Host` from `:authority` (a
//! `Host` that disagrees is refused), cookie crumbs joined, values without surrounding
//! whitespace, framing for a body without a length. The head is then parsed by the same parser
//! as an HTTP/1 client's (http/request.rs), so routing, rewriting and every later check see
//! one kind of head.

use http::header;
use http::request::Parts;
use http::Method;

/// Why a request does not go on.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Refusal {
    /// Malformed (RFC 9113 section 8.1.1): the stream is reset with PROTOCOL_ERROR.
    Malformed(&'static str),
    /// Well formed, but not served: answered with this status.
    Answer(u16, &'static str),
}

/// Writes the HTTP/1.1 head of the request in `parts` into `out`; `body` says whether DATA may
/// follow (the HEADERS frame did not end the stream).
pub(super) fn write_head(parts: &Parts, body: bool, out: &mut Vec<u8>) -> Result<(), Refusal> {
    out.clear();
    if parts.method == Method::CONNECT {
        return Err(Refusal::Answer(
            501,
            "CONNECT over HTTP/2 is not supported; use HTTP/1.1",
        ));
    }
    let target = target(parts)?;
    let host = host(parts)?;
    out.extend_from_slice(parts.method.as_str().as_bytes());
    out.push(b' ');
    out.extend_from_slice(target.as_bytes());
    out.extend_from_slice(b" HTTP/1.1\r\n");
    if let Some(host) = host {
        put(out, b"host", host);
    }
    let mut cookie: Option<usize> = None;
    for (name, value) in &parts.headers {
        let value = value.as_bytes();
        if value.first().is_some_and(is_space) || value.last().is_some_and(is_space) {
            return Err(Refusal::Malformed(
                "a field value begins or ends with white space",
            ));
        }
        if *name == header::HOST || *name == header::TE {
            // Host is written from :authority above; `te: trailers` is for this hop only.
            continue;
        }
        if *name == header::COOKIE {
            // Crumbs of one Cookie field, split for compression (RFC 9113 section 8.2.3): one
            // field again for HTTP/1.1, joined with "; ".
            match cookie {
                Some(end) => {
                    let crumb = [b"; ", value].concat();
                    let at = end - 2;
                    out.splice(at..at, crumb.iter().copied());
                    cookie = Some(end + crumb.len());
                }
                None => {
                    put(out, b"cookie", value);
                    cookie = Some(out.len());
                }
            }
            continue;
        }
        put(out, name.as_str().as_bytes(), value);
    }
    if body && !parts.headers.contains_key(header::CONTENT_LENGTH) {
        // A body without a length: chunked to the server, its trailers (if any) after it.
        put(out, b"transfer-encoding", b"chunked");
    }
    out.extend_from_slice(b"\r\n");
    Ok(())
}

/// The request target: the path and query, or `*` for OPTIONS.
fn target(parts: &Parts) -> Result<&str, Refusal> {
    let path = parts.uri.path_and_query().map(|p| p.as_str()).unwrap_or("");
    match path.as_bytes().first() {
        Some(b'/') => Ok(path),
        Some(b'*') if path == "*" && parts.method == Method::OPTIONS => Ok(path),
        _ => Err(Refusal::Malformed("invalid :path")),
    }
}

/// The authority to put in Host: `:authority`, else the one Host field (RFC 9113 section
/// 8.3.1). A Host that names another authority than `:authority` is refused.
fn host(parts: &Parts) -> Result<Option<&[u8]>, Refusal> {
    let mut hosts = parts.headers.get_all(header::HOST).iter();
    let field = hosts.next().map(|v| v.as_bytes());
    if hosts.next().is_some() {
        return Err(Refusal::Malformed("more than one Host field"));
    }
    let Some(authority) = parts.uri.authority() else {
        return Ok(field);
    };
    let authority = authority.as_str();
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

fn put(out: &mut Vec<u8>, name: &[u8], value: &[u8]) {
    out.extend_from_slice(name);
    out.extend_from_slice(b": ");
    out.extend_from_slice(value);
    out.extend_from_slice(b"\r\n");
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parts(method: &str, uri: &str, fields: &[(&str, &str)]) -> Parts {
        let mut builder = http::Request::builder().method(method).uri(uri);
        for (name, value) in fields {
            builder = builder.header(*name, *value);
        }
        builder
            .body(())
            .map(|r| r.into_parts().0)
            .expect("a request")
    }

    fn head(parts: &Parts, body: bool) -> Result<String, Refusal> {
        let mut out = Vec::new();
        write_head(parts, body, &mut out)?;
        Ok(String::from_utf8(out).expect("text"))
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
            "GET /a?b=1 HTTP/1.1\r\nhost: www.example.org\r\ncookie: a=1; b=2; c=3\r\naccept: */*\r\n\r\n"
        );
    }

    #[test]
    fn a_body_without_length_goes_chunked() {
        let p = parts("POST", "http://a/up", &[]);
        assert_eq!(
            head(&p, true).unwrap(),
            "POST /up HTTP/1.1\r\nhost: a\r\ntransfer-encoding: chunked\r\n\r\n"
        );
        let p = parts("POST", "http://a/up", &[("content-length", "3")]);
        assert_eq!(
            head(&p, true).unwrap(),
            "POST /up HTTP/1.1\r\nhost: a\r\ncontent-length: 3\r\n\r\n"
        );
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
        assert_eq!(
            head(&p, false).unwrap(),
            "GET / HTTP/1.1\r\nhost: b\r\n\r\n"
        );
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
    fn te_trailers_stays_on_this_hop() {
        let p = parts("GET", "http://a/", &[("te", "trailers")]);
        assert_eq!(
            head(&p, false).unwrap(),
            "GET / HTTP/1.1\r\nhost: a\r\n\r\n"
        );
    }
}
