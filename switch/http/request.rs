//! Request heads: parsing (httparse) and validation of the request line and target; the
//! fields are read in `request_fields.rs`, the parsed head is a [`RequestHead`].

use super::fields::{record_fields, Span, Version};
use super::host::host_without_port;
use super::request_fields::read_fields;
use super::{HeadError, MAX_HEADER_FIELDS, MAX_HEAD_BYTES};
use std::mem::MaybeUninit;

pub use super::request_head::{FieldLookup, RequestHead, TargetForm};

/// Parses the request head at the start of `buf` into `head`.
///
/// `Ok(false)`: the head is not complete yet (and may still fit). `Ok(true)`: `head` is filled
/// and `head.len` bytes of `buf` belong to it. `Err`: the request must be refused with the
/// error's status and the connection closed.
///
/// A request line with `HTTP/1.2` to `HTTP/1.9` is handled as HTTP/1.1 (RFC 9110 section 2.5):
/// its minor digit is rewritten in `buf` (heads are rebuilt before they go anywhere).
pub fn parse_request(buf: &mut [u8], head: &mut RequestHead) -> Result<bool, HeadError> {
    match parse_request_as_is(buf, head) {
        Err(e) if e.status == 505 => match later_minor_version_digit(buf) {
            Some(at) => {
                buf[at] = b'1';
                parse_request_as_is(buf, head)
            }
            None => Err(e),
        },
        other => other,
    }
}

fn parse_request_as_is(buf: &[u8], head: &mut RequestHead) -> Result<bool, HeadError> {
    let mut storage = [const { MaybeUninit::<httparse::Header<'_>>::uninit() }; MAX_HEADER_FIELDS];
    let mut request = httparse::Request::new(&mut []);
    let len = match request.parse_with_uninit_headers(buf, &mut storage) {
        Ok(httparse::Status::Complete(len)) if len <= MAX_HEAD_BYTES => len,
        Ok(httparse::Status::Complete(_)) => return Err(too_large()),
        Ok(httparse::Status::Partial) if buf.len() >= MAX_HEAD_BYTES => return Err(too_large()),
        Ok(httparse::Status::Partial) => return Ok(false),
        Err(httparse::Error::TooManyHeaders) => {
            return Err(HeadError {
                status: 431,
                reason: "too many header fields",
            })
        }
        Err(httparse::Error::Version) => return Err(version_error(buf)),
        Err(_) => return Err(HeadError::bad_request("malformed request head")),
    };
    let (Some(method), Some(target), Some(minor)) = (request.method, request.path, request.version)
    else {
        return Err(HeadError::bad_request("malformed request line"));
    };

    head.len = len;
    head.method = Span::of(buf, method.as_bytes());
    head.target = Span::of(buf, target.as_bytes());
    head.version = Version::from_minor(minor);
    record_fields(buf, request.headers, &mut head.fields);
    read_request_parts(buf, head, method)?;
    Ok(true)
}

/// What the request's method, target and fields say, once `head` has their spans in `buf`:
/// the target's form, path and query, then framing, connection options and Host. The HTTP/1
/// parser above gets the spans from httparse; the HTTP/2 front-end records them as it takes
/// the request from its HEADERS frame (connection/h2/request.rs), so that both kinds of
/// request meet the same checks without an HTTP/2 request being written out as HTTP/1.1
/// text and parsed again.
pub(crate) fn read_request_parts(
    buf: &[u8],
    head: &mut RequestHead,
    method: &str,
) -> Result<(), HeadError> {
    head.is_head = method == "HEAD";
    head.is_connect = method == "CONNECT";
    head.idempotent = matches!(
        method,
        "GET" | "HEAD" | "OPTIONS" | "TRACE" | "PUT" | "DELETE"
    );
    split_target(buf, head, method)?;
    read_fields(buf, head)
}

/// The request line (after any empty lines httparse skips), without its line ending.
fn request_line(buf: &[u8]) -> (usize, &[u8]) {
    let start = buf
        .iter()
        .position(|&b| b != b'\r' && b != b'\n')
        .unwrap_or(buf.len());
    let rest = &buf[start..];
    let end = rest.iter().position(|&b| b == b'\n').unwrap_or(rest.len());
    let line = &rest[..end];
    (start, line.strip_suffix(b"\r").unwrap_or(line))
}

/// httparse reports every bad version alike. A well-formed `HTTP/x.y` in a well-formed line is
/// a version this switch does not speak (505); anything else is a malformed request line (400).
fn version_error(buf: &[u8]) -> HeadError {
    let (_, line) = request_line(buf);
    let parts: Vec<&[u8]> = line.split(|&b| b == b' ').collect();
    match parts.as_slice() {
        [method, target, [b'H', b'T', b'T', b'P', b'/', major, b'.', minor]]
            if !method.is_empty()
                && !target.is_empty()
                && major.is_ascii_digit()
                && minor.is_ascii_digit() =>
        {
            HeadError {
                status: 505,
                reason: "HTTP version not supported",
            }
        }
        _ => HeadError::bad_request("malformed request line"),
    }
}

/// Where the minor digit of an `HTTP/1.2`..`HTTP/1.9` request line sits, if that is the line.
fn later_minor_version_digit(buf: &[u8]) -> Option<usize> {
    let (start, line) = request_line(buf);
    if version_error(buf).status != 505 {
        return None;
    }
    match line {
        [.., b'H', b'T', b'T', b'P', b'/', b'1', b'.', b'2'..=b'9'] => Some(start + line.len() - 1),
        _ => None,
    }
}

pub(crate) fn too_large() -> HeadError {
    HeadError {
        status: 431,
        reason: "request head too large",
    }
}

/// Classifies the target and finds path, query and (absolute form) authority.
fn split_target(buf: &[u8], head: &mut RequestHead, method: &str) -> Result<(), HeadError> {
    let target = head.target.get(buf);
    head.authority = None;
    head.host = None;
    head.query = None;
    if target.contains(&b'#') {
        return Err(HeadError::bad_request("fragment in request target"));
    }
    let path_and_query = if target.first() == Some(&b'/') {
        head.target_form = TargetForm::Origin;
        head.target
    } else if target == b"*" {
        if method != "OPTIONS" {
            return Err(HeadError::bad_request("asterisk target outside OPTIONS"));
        }
        head.target_form = TargetForm::Asterisk;
        head.path = head.target;
        return Ok(());
    } else if method == "CONNECT" {
        head.target_form = TargetForm::Authority;
        let host =
            host_without_port(target).ok_or(HeadError::bad_request("invalid CONNECT target"))?;
        // `host:port` with a port: `host` alone or `host:` names no place to connect to.
        if target.len() <= host.len() + 1 {
            return Err(HeadError::bad_request("CONNECT target without port"));
        }
        head.host = Some(Span::of(buf, host));
        head.path = Span::of(buf, &target[..0]);
        return Ok(());
    } else {
        let scheme_len = if starts_with_ignore_case(target, b"http://") {
            7
        } else if starts_with_ignore_case(target, b"https://") {
            8
        } else {
            return Err(HeadError::bad_request("invalid request target"));
        };
        head.target_form = TargetForm::Absolute;
        let rest = &target[scheme_len..];
        let authority_len = rest
            .iter()
            .position(|&b| b == b'/' || b == b'?')
            .unwrap_or(rest.len());
        let authority = &rest[..authority_len];
        if authority.is_empty() || authority.contains(&b'@') {
            return Err(HeadError::bad_request(
                "invalid authority in request target",
            ));
        }
        let host = host_without_port(authority)
            .filter(|host| !host.is_empty())
            .ok_or(HeadError::bad_request("invalid host in request target"))?;
        head.authority = Some(Span::of(buf, authority));
        head.host = Some(Span::of(buf, host));
        head.target.slice(scheme_len + authority_len, target.len())
    };
    if method == "CONNECT" {
        return Err(HeadError::bad_request("CONNECT needs an authority target"));
    }
    let pq = path_and_query.get(buf);
    match pq.iter().position(|&b| b == b'?') {
        Some(q) => {
            head.path = path_and_query.slice(0, q);
            head.query = Some(path_and_query.slice(q + 1, pq.len()));
        }
        None => head.path = path_and_query,
    }
    Ok(())
}

fn starts_with_ignore_case(s: &[u8], prefix: &[u8]) -> bool {
    s.len() >= prefix.len() && s[..prefix.len()].eq_ignore_ascii_case(prefix)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::http::fields::FieldRole;
    use crate::http::BodyFraming;
    use tcpvs_modules::HeaderLookup;

    fn parse(raw: &[u8]) -> Result<RequestHead, HeadError> {
        let mut head = RequestHead::default();
        match parse_request(&mut raw.to_vec(), &mut head)? {
            true => Ok(head),
            false => panic!("incomplete: {:?}", String::from_utf8_lossy(raw)),
        }
    }

    fn status_of(raw: &[u8]) -> u16 {
        match parse(raw) {
            Ok(_) => 200,
            Err(e) => e.status,
        }
    }

    #[test]
    fn origin_form_with_query() {
        let raw = b"GET /a/b.png?x=1&y=2 HTTP/1.1\r\nHost: Img.Example.com:8080\r\nAccept: */*\r\n\r\nrest";
        let h = parse(raw).unwrap();
        assert_eq!(h.len, raw.len() - 4);
        assert_eq!(h.method(raw), "GET");
        assert_eq!(h.path.get(raw), b"/a/b.png");
        assert_eq!(h.query.unwrap().get(raw), b"x=1&y=2");
        assert_eq!(h.host.unwrap().get(raw), b"Img.Example.com");
        assert_eq!(h.framing, BodyFraming::Empty);
        assert!(h.keep_alive && h.idempotent && !h.upgrade);
        assert_eq!(h.lookup(raw).header("accept"), Some(&b"*/*"[..]));
    }

    #[test]
    fn absolute_form_takes_host_from_target() {
        let raw = b"GET http://example.org:81/x?q HTTP/1.1\r\nHost: other\r\n\r\n";
        let h = parse(raw).unwrap();
        assert_eq!(h.target_form, TargetForm::Absolute);
        assert_eq!(h.host.unwrap().get(raw), b"example.org");
        assert_eq!(h.authority.unwrap().get(raw), b"example.org:81");
        assert_eq!(h.path.get(raw), b"/x");
        assert_eq!(h.query.unwrap().get(raw), b"q");
        let raw = b"GET http://example.org HTTP/1.1\r\nHost: x\r\n\r\n";
        assert_eq!(parse(raw).unwrap().path.get(raw), b"");
    }

    #[test]
    fn framing() {
        let h = parse(b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 10\r\n\r\n").unwrap();
        assert_eq!(h.framing, BodyFraming::Length(10));
        let h = parse(
            b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 7, 7\r\nContent-Length: 7\r\n\r\n",
        )
        .unwrap();
        assert_eq!(h.framing, BodyFraming::Length(7));
        let h = parse(b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: Chunked\r\n\r\n").unwrap();
        assert_eq!(h.framing, BodyFraming::Chunked);
        assert!(!h.idempotent);
        // A coding the switch does not decode: 501, as nginx answers.
        let e = parse(b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: gzip, chunked\r\n\r\n")
            .unwrap_err();
        assert_eq!(e.status, 501);
    }

    #[test]
    fn what_a_server_could_read_otherwise_is_refused() {
        for raw in [
            &b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked,\r\n\r\n"[..],
            b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: , chunked\r\n\r\n",
            b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked;q=1\r\n\r\n",
            b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 9223372036854775808\r\n\r\n",
            b"POST / HTTP/1.1\r\nHost: a\r\nContent_Length: 5\r\n\r\n",
            b"GET / HTTP/1.1\r\nHost: a\r\nX_Forwarded_For: 6.6.6.6\r\n\r\n",
            b"CONNECT a:443 HTTP/1.1\r\nHost: a:443\r\nContent-Length: 5\r\n\r\n",
        ] {
            let e = parse(raw).unwrap_err();
            assert_eq!(e.status, 400, "{}", String::from_utf8_lossy(raw));
        }
        let h = parse(b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 9223372036854775807\r\n\r\n")
            .unwrap();
        assert_eq!(h.framing, BodyFraming::Length(i64::MAX as u64));
        // Other underscored names pass.
        assert!(parse(b"GET / HTTP/1.1\r\nHost: a\r\nX_Custom: 1\r\n\r\n").is_ok());
    }

    #[test]
    fn only_websocket_upgrades_from_http11() {
        let upgrade = |raw: &[u8]| parse(raw).unwrap().upgrade;
        assert!(upgrade(
            b"GET / HTTP/1.1\r\nHost: a\r\nUpgrade: WebSocket\r\nConnection: upgrade\r\n\r\n"
        ));
        assert!(!upgrade(b"GET / HTTP/1.1\r\nHost: a\r\nUpgrade: h2c\r\nConnection: upgrade, HTTP2-Settings\r\n\r\n"));
        assert!(!upgrade(
            b"GET / HTTP/1.1\r\nHost: a\r\nUpgrade: websocket, h2c\r\nConnection: upgrade\r\n\r\n"
        ));
        assert!(!upgrade(
            b"GET / HTTP/1.0\r\nUpgrade: websocket\r\nConnection: upgrade\r\n\r\n"
        ));
    }

    #[test]
    fn refusals() {
        for raw in [
            &b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n"[..],
            b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n",
            b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 1, 2\r\n\r\n",
            b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: -1\r\n\r\n",
            b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked, gzip\r\n\r\n",
            b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n",
            b"POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n",
            b"GET / HTTP/1.1\r\n\r\n",
            b"GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n",
            b"GET / HTTP/1.1\r\nHost: a b\r\n\r\n",
            b"GET / HTTP/1.1\r\nHost: a:80x\r\n\r\n",
            b"GET / HTTP/1.1\r\nHost: user@a\r\n\r\n",
            b"GET x HTTP/1.1\r\nHost: a\r\n\r\n",
            b"GET * HTTP/1.1\r\nHost: a\r\n\r\n",
            b"GET /a#b HTTP/1.1\r\nHost: a\r\n\r\n",
            b"GET http://u@a/ HTTP/1.1\r\nHost: a\r\n\r\n",
            // An empty host (RFC 9110 section 4.2.3), with or without a port, in every place.
            b"GET http://:80/ HTTP/1.1\r\nHost: a\r\n\r\n",
            b"GET http://:/ HTTP/1.1\r\nHost: a\r\n\r\n",
            b"GET https://:443 HTTP/1.1\r\nHost: a\r\n\r\n",
            b"GET / HTTP/1.1\r\nHost: :80\r\n\r\n",
            b"CONNECT :443 HTTP/1.1\r\nHost: a\r\n\r\n",
            b"CONNECT /x HTTP/1.1\r\nHost: a\r\n\r\n",
            b"CONNECT a HTTP/1.1\r\nHost: a\r\n\r\n",
            b"GET / HTTP/1.1\r\nHost: a\r\nBad Name: x\r\n\r\n",
            b"GET / HTTP/1.1\r\nHost: a\r\nX: a\r\n b\r\n\r\n",
            b"GET / HTTP/1.1\r\nHost: a\r\nX : b\r\n\r\n",
            b"GET  / HTTP/1.1\r\nHost: a\r\n\r\n",
            b"G(T / HTTP/1.1\r\nHost: a\r\n\r\n",
        ] {
            assert_eq!(status_of(raw), 400, "{:?}", String::from_utf8_lossy(raw));
        }
        assert_eq!(status_of(b"GET / HTTP/2.0\r\nHost: a\r\n\r\n"), 505);
        assert_eq!(status_of(b"\r\nGET / HTTP/0.9\r\nHost: a\r\n\r\n"), 505);
        for malformed in [
            &b"GET /a b HTTP/1.1\r\nHost: a\r\n\r\n"[..],
            b"GET / HTTX/1.1\r\nHost: a\r\n\r\n",
            b"GET / http/1.1\r\nHost: a\r\n\r\n",
            b"GET / HTTP/1\r\nHost: a\r\n\r\n",
            b"GET / HTTP/1.10\r\nHost: a\r\n\r\n",
        ] {
            assert_eq!(
                status_of(malformed),
                400,
                "{:?}",
                String::from_utf8_lossy(malformed)
            );
        }
    }

    #[test]
    fn later_minor_versions_are_http11() {
        let mut raw = b"GET /x HTTP/1.2\r\nHost: a\r\n\r\n".to_vec();
        let mut head = RequestHead::default();
        assert_eq!(parse_request(&mut raw, &mut head), Ok(true));
        assert_eq!(head.version, Version::Http11);
        assert_eq!(head.path.get(&raw), b"/x");
    }

    #[test]
    fn limits() {
        let mut raw = b"GET / HTTP/1.1\r\nHost: a\r\n".to_vec();
        for i in 0..100 {
            raw.extend_from_slice(format!("X-{i}: v\r\n").as_bytes());
        }
        raw.extend_from_slice(b"\r\n");
        assert_eq!(status_of(&raw), 431);

        let mut raw = b"GET / HTTP/1.1\r\nHost: a\r\nX-Big: ".to_vec();
        raw.resize(MAX_HEAD_BYTES + 10, b'a');
        let mut head = RequestHead::default();
        assert_eq!(
            parse_request(&mut raw.clone(), &mut head)
                .unwrap_err()
                .status,
            431
        );
        let mut head = RequestHead::default();
        assert_eq!(parse_request(&mut raw[..1000], &mut head), Ok(false));
    }

    #[test]
    fn connection_semantics() {
        assert!(!parse(b"GET / HTTP/1.0\r\n\r\n").unwrap().keep_alive);
        assert!(
            parse(b"GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n")
                .unwrap()
                .keep_alive
        );
        assert!(
            !parse(b"GET / HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n")
                .unwrap()
                .keep_alive
        );
        let raw = b"GET / HTTP/1.1\r\nHost: a\r\nConnection: upgrade, X-Secret\r\nUpgrade: websocket\r\nX-Secret: 1\r\nContent-Length: 0\r\n\r\n";
        let h = parse(raw).unwrap();
        assert!(h.upgrade);
        let roles: Vec<_> = h.fields.iter().map(|f| f.role).collect();
        assert_eq!(
            roles,
            [
                FieldRole::Host,
                FieldRole::Drop,
                FieldRole::Upgrade,
                FieldRole::Drop,
                FieldRole::ContentLength
            ]
        );
    }

    #[test]
    fn connect_and_asterisk() {
        let raw = b"CONNECT example.org:443 HTTP/1.1\r\nHost: example.org:443\r\n\r\n";
        let h = parse(raw).unwrap();
        assert!(h.is_connect);
        assert_eq!(h.target_form, TargetForm::Authority);
        assert_eq!(h.host.unwrap().get(raw), b"example.org");
        let raw = b"OPTIONS * HTTP/1.1\r\nHost: a\r\n\r\n";
        assert_eq!(parse(raw).unwrap().target_form, TargetForm::Asterisk);
    }

    #[test]
    fn hosts() {
        assert_eq!(host_without_port(b"a.b:80"), Some(&b"a.b"[..]));
        assert_eq!(host_without_port(b"[::1]:80"), Some(&b"[::1]"[..]));
        assert_eq!(host_without_port(b"[::1]"), Some(&b"[::1]"[..]));
        assert_eq!(host_without_port(b""), Some(&b""[..]));
        assert_eq!(host_without_port(b"[::1"), None);
        assert_eq!(host_without_port(b"a:b:c"), None);
        assert_eq!(host_without_port(b"a:123456"), None);
    }

    #[test]
    fn hosts_a_server_would_refuse_are_refused() {
        for raw in [
            &b"GET / HTTP/1.1\r\nHost: %x\r\n\r\n"[..],
            b"GET / HTTP/1.1\r\nHost: a%4\r\n\r\n",
            b"GET / HTTP/1.1\r\nHost: [.:1]\r\n\r\n",
            b"GET http://[.:1]/ HTTP/1.1\r\nHost: a\r\n\r\n",
            b"CONNECT exa344: HTTP/1.1\r\nHost: exa344:\r\n\r\n",
        ] {
            assert_eq!(
                parse(raw).unwrap_err().status,
                400,
                "{}",
                String::from_utf8_lossy(raw)
            );
        }
        for raw in [
            &b"GET / HTTP/1.1\r\nHost: a%41b\r\n\r\n"[..],
            b"GET / HTTP/1.1\r\nHost: [::1]:80\r\n\r\n",
            b"GET / HTTP/1.1\r\nHost: a:\r\n\r\n",
        ] {
            assert!(parse(raw).is_ok(), "{}", String::from_utf8_lossy(raw));
        }
    }
}
