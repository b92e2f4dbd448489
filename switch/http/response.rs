//! Response heads from servers: parsing, validation and framing (RFC 9112 section 6.3).

use super::fields::{
    fold_content_length, read_connection, record_fields, transfer_coding_of, Field, FieldRole,
    Span, TransferCoding, Version,
};
use super::{BodyFraming, MAX_HEADER_FIELDS, MAX_HEAD_BYTES};
use std::mem::MaybeUninit;

#[derive(Debug)]
pub struct ResponseHead {
    pub len: usize,
    pub status: u16,
    pub reason: Span,
    pub version: Version,
    pub fields: Vec<Field>,
    pub framing: BodyFraming,
    /// Content-Length as validated (also kept for HEAD and 304, where it frames nothing).
    pub content_length: Option<u64>,
    /// The server will take another request on this connection.
    pub server_keep_alive: bool,
}

impl Default for ResponseHead {
    fn default() -> Self {
        ResponseHead {
            len: 0,
            status: 0,
            reason: Span::default(),
            version: Version::Http11,
            fields: Vec::new(),
            framing: BodyFraming::Empty,
            content_length: None,
            server_keep_alive: false,
        }
    }
}

impl ResponseHead {
    pub fn is_informational(&self) -> bool {
        (100..200).contains(&self.status)
    }
}

/// Why a server's response cannot be relayed: the client gets 502.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BadResponse(pub &'static str);

impl std::fmt::Display for BadResponse {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.0)
    }
}

/// What the request asked for, which decides how the response is framed.
#[derive(Clone, Copy, Debug)]
pub struct RequestKind {
    pub is_head: bool,
    pub is_connect: bool,
}

/// Parses a response head at the start of `buf`. `Ok(false)`: not complete yet.
pub fn parse_response(
    buf: &[u8],
    request: RequestKind,
    head: &mut ResponseHead,
) -> Result<bool, BadResponse> {
    let mut storage = [const { MaybeUninit::<httparse::Header<'_>>::uninit() }; MAX_HEADER_FIELDS];
    let mut response = httparse::Response::new(&mut []);
    let len = match httparse::ParserConfig::default().parse_response_with_uninit_headers(
        &mut response,
        buf,
        &mut storage,
    ) {
        Ok(httparse::Status::Complete(len)) if len <= MAX_HEAD_BYTES => len,
        Ok(httparse::Status::Partial) if buf.len() < MAX_HEAD_BYTES => return Ok(false),
        Ok(_) => return Err(BadResponse("response head too large")),
        Err(httparse::Error::TooManyHeaders) => {
            return Err(BadResponse("too many response header fields"))
        }
        Err(_) => return Err(BadResponse("malformed response head")),
    };
    let (Some(status), Some(minor)) = (response.code, response.version) else {
        return Err(BadResponse("malformed status line"));
    };
    if !(100..=999).contains(&status) {
        return Err(BadResponse("invalid status code"));
    }
    head.len = len;
    head.status = status;
    head.reason = reason_phrase(buf);
    head.version = Version::from_minor(minor);
    record_fields(buf, response.headers, &mut head.fields);
    read_fields(buf, request, head)?;
    Ok(true)
}

/// The reason phrase of a status line httparse accepted, cut from the line itself: httparse
/// gives a phrase that is not UTF-8 (obs-text, RFC 9112 section 4) or absent as a static `""`
/// outside `buf`, which has no span there (found by fuzzing: fuzz/REPORT.md, C1).
fn reason_phrase(buf: &[u8]) -> Span {
    let start = buf
        .iter()
        .position(|&b| b != b'\r' && b != b'\n')
        .unwrap_or(buf.len());
    let line = &buf[start..];
    let end = line.iter().position(|&b| b == b'\n').unwrap_or(line.len());
    let line = line[..end].strip_suffix(b"\r").unwrap_or(&line[..end]);
    // "HTTP/1.1 200 " is 13 bytes; a line of 12 has no reason.
    match line.get(13..) {
        Some(reason) if line[12] == b' ' => Span::of(buf, reason),
        _ => Span::default(),
    }
}

fn read_fields(
    buf: &[u8],
    request: RequestKind,
    head: &mut ResponseHead,
) -> Result<(), BadResponse> {
    let mut content_length: Option<u64> = None;
    let mut has_transfer_encoding = false;
    for field in &head.fields {
        match field.role {
            FieldRole::ContentLength => {
                fold_content_length(&mut content_length, field.value.get(buf))
                    .map_err(BadResponse)?
            }
            FieldRole::TransferEncoding => has_transfer_encoding = true,
            _ => {}
        }
    }
    let (_, persistent) = read_connection(&mut head.fields, buf, head.version);
    head.server_keep_alive = persistent;
    head.content_length = content_length;
    if has_transfer_encoding && content_length.is_some() {
        // RFC 9112 section 6.3: Transfer-Encoding overrides Content-Length, which must not be
        // passed on; a sender of both is suspect, so its connection is not reused.
        head.server_keep_alive = false;
        head.content_length = None;
        for field in head
            .fields
            .iter_mut()
            .filter(|f| f.role == FieldRole::ContentLength)
        {
            field.role = FieldRole::Drop;
        }
    }

    let status = head.status;
    head.framing =
        if (100..200).contains(&status) || status == 204 || status == 304 || request.is_head {
            BodyFraming::Empty
        } else if request.is_connect && (200..300).contains(&status) {
            // The connection becomes a tunnel; no body framing applies.
            BodyFraming::Empty
        } else if has_transfer_encoding {
            match transfer_coding_of(&head.fields, buf) {
                TransferCoding::Chunked if head.version == Version::Http11 => BodyFraming::Chunked,
                TransferCoding::Invalid => return Err(BadResponse("invalid Transfer-Encoding")),
                _ => BodyFraming::UntilClose,
            }
        } else {
            match content_length {
                Some(0) => BodyFraming::Empty,
                Some(n) => BodyFraming::Length(n),
                None => BodyFraming::UntilClose,
            }
        };
    if head.framing == BodyFraming::UntilClose {
        head.server_keep_alive = false;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const GET: RequestKind = RequestKind {
        is_head: false,
        is_connect: false,
    };

    fn parse(raw: &[u8], request: RequestKind) -> Result<ResponseHead, BadResponse> {
        let mut head = ResponseHead::default();
        assert!(parse_response(raw, request, &mut head)?);
        Ok(head)
    }

    #[test]
    fn framings() {
        let h = parse(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n", GET).unwrap();
        assert_eq!(
            (h.status, h.framing, h.server_keep_alive),
            (200, BodyFraming::Length(5), true)
        );
        let h = parse(
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n",
            GET,
        )
        .unwrap();
        assert_eq!(h.framing, BodyFraming::Chunked);
        let h = parse(b"HTTP/1.1 200 OK\r\n\r\n", GET).unwrap();
        assert_eq!(
            (h.framing, h.server_keep_alive),
            (BodyFraming::UntilClose, false)
        );
        let h = parse(
            b"HTTP/1.1 304 Not Modified\r\nContent-Length: 99\r\n\r\n",
            GET,
        )
        .unwrap();
        assert_eq!(
            (h.framing, h.content_length),
            (BodyFraming::Empty, Some(99))
        );
        let head = RequestKind {
            is_head: true,
            is_connect: false,
        };
        let h = parse(b"HTTP/1.1 200 OK\r\nContent-Length: 99\r\n\r\n", head).unwrap();
        assert_eq!(h.framing, BodyFraming::Empty);
        let h = parse(b"HTTP/1.1 204 No Content\r\n\r\n", GET).unwrap();
        assert_eq!((h.framing, h.server_keep_alive), (BodyFraming::Empty, true));
        let h = parse(b"HTTP/1.0 200 OK\r\nContent-Length: 1\r\n\r\n", GET).unwrap();
        assert!(!h.server_keep_alive);
        let h = parse(
            b"HTTP/1.0 200 OK\r\nConnection: keep-alive\r\nContent-Length: 1\r\n\r\n",
            GET,
        )
        .unwrap();
        assert!(h.server_keep_alive);
        let h = parse(
            b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 1\r\n\r\n",
            GET,
        )
        .unwrap();
        assert!(!h.server_keep_alive);
        let h = parse(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\n", GET).unwrap();
        assert_eq!(h.framing, BodyFraming::UntilClose);
        let h = parse(
            b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n",
            GET,
        )
        .unwrap();
        assert_eq!(
            (h.framing, h.server_keep_alive),
            (BodyFraming::Chunked, false)
        );
    }

    #[test]
    fn bad_responses() {
        for raw in [
            &b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n"[..],
            b"HTTP/1.1 200 OK\r\nContent-Length: x\r\n\r\n",
            b"HTTP/1.1 2000 OK\r\n\r\n",
            b"HTTP/1.1 OK\r\n\r\n",
            b"ICY 200 OK\r\n\r\n",
        ] {
            assert!(
                parse(raw, GET).is_err(),
                "{:?}",
                String::from_utf8_lossy(raw)
            );
        }
    }

    #[test]
    fn a_reason_phrase_missing_or_not_utf8_is_cut_from_the_line() {
        for (raw, reason) in [
            (&b"HTTP/1.1 200\r\n\r\n"[..], &b""[..]),
            (b"HTTP/1.1 200 \xffOK\r\n\r\n", b"\xffOK"),
            (
                b"HTTP/1.1 204 No Con\xdbent\nConnection: close\n\n",
                b"No Con\xdbent",
            ),
            (b"HTTP/1.1 404 Not Found\r\n\r\n", b"Not Found"),
        ] {
            let head = parse(raw, GET).unwrap();
            assert_eq!(head.reason.get(raw), reason);
            assert!(head.reason.range().end <= head.len);
        }
    }
}
