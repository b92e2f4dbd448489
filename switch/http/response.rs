//! Response heads from servers: parsing, validation and framing (RFC 9112 section 6.3).

use super::fields::{
    fold_content_length, is_token_byte, is_tolerated_control, read_connection, record_fields,
    role_of, transfer_coding_of, Field, FieldRole, Span, TransferCoding, Version,
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
    /// Content-Length as validated (also kept for HEAD and 304, where it frames nothing); or
    /// 0 for a message that ended with its head (HTTP/2) and said no length.
    pub content_length: Option<u64>,
    /// A Content-Length field said `content_length`: it goes on to every client (in its
    /// canonical form). A length no field said is said only where the client's protocol
    /// needs it to find the body's end (HTTP/1.1: http/rewrite.rs).
    pub length_said: bool,
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
            length_said: false,
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
pub struct BadResponse {
    pub why: &'static str,
    /// A valid status line (`HTTP/1.x NNN`) came before the fault: the server speaks HTTP and
    /// answered, with a head the switch cannot relay (a field an application filled from the
    /// request, say). Not evidence that it is broken (exchange/failure.rs).
    pub answered: bool,
}

impl std::fmt::Display for BadResponse {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.why)
    }
}

/// What the request asked for, which decides how the response is framed.
#[derive(Clone, Copy, Debug)]
pub struct RequestKind {
    pub is_head: bool,
    pub is_connect: bool,
}

/// What httparse's refusal of a byte in a field value is called, so that the parse can be
/// tried again with the bytes [`tolerated_bytes_hidden`] lets through.
const INVALID_FIELD_VALUE: &str = "invalid byte in a response field value";

/// Parses a response head at the start of `buf`. `Ok(false)`: not complete yet.
///
/// A control byte other than HT, CR, LF and NUL in the value of a field the switch passes on
/// without reading it (an application's `Content-Disposition` filename, say: PHP and Werkzeug
/// refuse only CR, LF and NUL) does not make the head unusable: it is relayed as sent, as nginx
/// and HAProxy do (RFC 9110 section 5.5 lets a recipient keep such bytes). Refusing the head
/// would turn whatever a client puts in such a field into a `502`. CR, LF and NUL (response
/// splitting), obs-fold and a bad byte in a field the switch reads (framing, `Connection`)
/// stay refused.
pub fn parse_response(
    buf: &[u8],
    request: RequestKind,
    head: &mut ResponseHead,
) -> Result<bool, BadResponse> {
    match parse_response_from(buf, buf, request, head) {
        Err(bad) if bad.why == INVALID_FIELD_VALUE => match tolerated_bytes_hidden(buf) {
            Some(syntax) => parse_response_from(&syntax, buf, request, head),
            None => Err(bad),
        },
        other => other,
    }
}

/// Parses the head whose syntax is `syntax` (`buf` itself, or a copy of its head with tolerated
/// bytes hidden, byte for byte in place): spans are offsets, so they hold for `buf`, from which
/// the field values are read.
fn parse_response_from(
    syntax: &[u8],
    buf: &[u8],
    request: RequestKind,
    head: &mut ResponseHead,
) -> Result<bool, BadResponse> {
    let mut storage = [const { MaybeUninit::<httparse::Header<'_>>::uninit() }; MAX_HEADER_FIELDS];
    let mut response = httparse::Response::new(&mut []);
    let parsed = httparse::ParserConfig::default().parse_response_with_uninit_headers(
        &mut response,
        syntax,
        &mut storage,
    );
    // httparse sets the code once the status line's `HTTP/1.x NNN` is read.
    let bad = |why| BadResponse {
        why,
        answered: response.code.is_some(),
    };
    let len = match parsed {
        Ok(httparse::Status::Complete(len)) if len <= MAX_HEAD_BYTES => len,
        Ok(httparse::Status::Partial) if buf.len() < MAX_HEAD_BYTES => return Ok(false),
        Ok(_) => return Err(bad("response head too large")),
        Err(httparse::Error::TooManyHeaders) => return Err(bad("too many response header fields")),
        Err(httparse::Error::HeaderValue) => return Err(bad(INVALID_FIELD_VALUE)),
        Err(_) => return Err(bad("malformed response head")),
    };
    let (Some(status), Some(minor)) = (response.code, response.version) else {
        return Err(bad("malformed status line"));
    };
    if !(100..=999).contains(&status) {
        return Err(bad("invalid status code"));
    }
    head.len = len;
    head.status = status;
    head.reason = reason_phrase(buf);
    head.version = Version::from_minor(minor);
    record_fields(syntax, response.headers, &mut head.fields);
    read_fields(buf, request, head).map_err(|why| BadResponse {
        why,
        answered: true,
    })?;
    Ok(true)
}

/// A copy of the head at the start of `buf` (to its empty line, or all of `buf` while it is
/// incomplete) in which each control byte tolerated in a field value ([`is_tolerated_control`])
/// is replaced by `!` for httparse, when it lies in the value of a field the switch passes on
/// unread ([`FieldRole::Forward`]): every byte keeps its place, so the copy's spans are
/// `buf`'s, and the field goes on with the byte as sent. `None` when there is no such byte: the head
/// is refused as it is.
fn tolerated_bytes_hidden(buf: &[u8]) -> Option<Vec<u8>> {
    let mut copy: Option<Vec<u8>> = None;
    let mut at = 0;
    let mut status_line_read = false;
    // Each pass moves `at` past one line: bounded by the bytes of `buf`.
    while at < buf.len() {
        let end = buf[at..]
            .iter()
            .position(|&b| b == b'\n')
            .map_or(buf.len(), |i| at + i + 1);
        let line = &buf[at..end];
        let line = line.strip_suffix(b"\n").unwrap_or(line);
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        let start = at;
        at = end;
        if line.is_empty() {
            if status_line_read {
                break;
            }
            // Empty lines before the status line, which httparse skips.
            continue;
        }
        if !status_line_read {
            status_line_read = true;
            continue;
        }
        let Some(value) = passed_on_value(line) else {
            continue;
        };
        for i in value {
            if is_tolerated_control(line[i]) {
                copy.get_or_insert_with(|| buf.to_vec())[start + i] = b'!';
            }
        }
    }
    copy.map(|mut copy| {
        copy.truncate(at);
        copy
    })
}

/// Where the value of the field line `line` (without its line end) lies, when its name is a
/// valid token of a field the switch passes on without reading it. A line that is no
/// `name: value` (obs-fold, white space before the colon) gets nothing: httparse refuses it.
fn passed_on_value(line: &[u8]) -> Option<std::ops::Range<usize>> {
    let colon = line.iter().position(|&b| b == b':')?;
    let name = &line[..colon];
    let passed_on = !name.is_empty()
        && name.iter().all(|&b| is_token_byte(b))
        && role_of(name) == FieldRole::Forward;
    passed_on.then_some(colon + 1..line.len())
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

/// Frames a response head that came as a status and fields rather than HTTP/1 text (an
/// HTTP/2 server's: upstream/h2/response_head.rs, which sets `head.status`, `head.reason`
/// and `head.fields` over `buf`): its fields are read as a parsed head's are (Content-Length
/// validated), and a body of unknown length, which its stream's end ends (`more`: DATA may
/// follow), is framed `Chunked`, the form HTTP/1.1 gives such a body; a head that ended its
/// stream is a body of none (`content_length` 0: an HTTP/1.1 client is told the length, an
/// HTTP/2 one gets one HEADERS frame, gRPC's Trailers-Only form, with no field added).
pub fn frame_message_head(
    buf: &[u8],
    request: RequestKind,
    more: bool,
    head: &mut ResponseHead,
) -> Result<(), BadResponse> {
    let bad = |why| BadResponse {
        why,
        answered: true,
    };
    if !(100..=999).contains(&head.status) {
        return Err(bad("invalid status code"));
    }
    // The bound an HTTP/1 head meets in its parser.
    if head.fields.len() > MAX_HEADER_FIELDS {
        return Err(bad("too many response header fields"));
    }
    head.len = buf.len();
    head.version = Version::Http11;
    read_fields(buf, request, head).map_err(bad)?;
    if head.framing == BodyFraming::UntilClose {
        head.framing = match more {
            true => BodyFraming::Chunked,
            false => {
                head.content_length = Some(0);
                BodyFraming::Empty
            }
        };
    }
    // A message's connection is not the server's to keep or close (HTTP/2: its streams).
    head.server_keep_alive = false;
    Ok(())
}

fn read_fields(
    buf: &[u8],
    request: RequestKind,
    head: &mut ResponseHead,
) -> Result<(), &'static str> {
    let mut content_length: Option<u64> = None;
    let mut has_transfer_encoding = false;
    for field in &head.fields {
        match field.role {
            FieldRole::ContentLength => {
                fold_content_length(&mut content_length, field.value.get(buf))?
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

    head.length_said = head.content_length.is_some();
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
                TransferCoding::Invalid => return Err("invalid Transfer-Encoding"),
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

    /// A message head (as an HTTP/2 server's comes) of `status` and `fields`, framed.
    fn message(
        status: u16,
        fields: &[(&str, &str)],
        request: RequestKind,
        more: bool,
    ) -> Result<ResponseHead, BadResponse> {
        let mut buf = Vec::new();
        let mut head = ResponseHead {
            status,
            ..ResponseHead::default()
        };
        for (name, value) in fields {
            let at = |buf: &mut Vec<u8>, bytes: &[u8]| {
                let start = buf.len() as u32;
                buf.extend_from_slice(bytes);
                Span {
                    start,
                    end: buf.len() as u32,
                }
            };
            let name_span = at(&mut buf, name.as_bytes());
            let value_span = at(&mut buf, value.as_bytes());
            head.fields.push(Field {
                name: name_span,
                value: value_span,
                role: role_of(name.as_bytes()),
            });
        }
        frame_message_head(&buf, request, more, &mut head).map(|()| head)
    }

    #[test]
    fn a_message_head_is_framed_by_its_stream() {
        // DATA may follow and no length: chunked to HTTP/1.1.
        let h = message(200, &[("x-a", "1")], GET, true).unwrap();
        assert_eq!(
            (h.framing, h.content_length, h.length_said),
            (BodyFraming::Chunked, None, false)
        );
        // The stream ended with the head: a body of none, a length no field said.
        let h = message(200, &[("grpc-status", "5")], GET, false).unwrap();
        assert_eq!(
            (h.framing, h.content_length, h.length_said),
            (BodyFraming::Empty, Some(0), false)
        );
        // A length the server said is read as an HTTP/1 head's is.
        let h = message(200, &[("content-length", "007")], GET, true).unwrap();
        assert_eq!(
            (h.framing, h.content_length, h.length_said),
            (BodyFraming::Length(7), Some(7), true)
        );
        assert!(message(200, &[("content-length", "7, 8")], GET, true).is_err());
        // HEAD, 204 and 304 frame nothing, and are not given a length.
        let head = RequestKind {
            is_head: true,
            is_connect: false,
        };
        for (status, kind) in [(200, head), (204, GET), (304, GET)] {
            let h = message(status, &[], kind, false).unwrap();
            assert_eq!((h.framing, h.content_length), (BodyFraming::Empty, None));
        }
        // The bounds an HTTP/1 head meets.
        let many: Vec<(&str, &str)> = (0..=MAX_HEADER_FIELDS).map(|_| ("x-a", "1")).collect();
        let err = message(200, &many, GET, true).unwrap_err();
        assert_eq!(err.why, "too many response header fields");
        assert!(message(200, &many[1..], GET, true).is_ok());
        assert!(message(1000, &[], GET, true).is_err());
    }

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
    fn a_status_line_read_before_the_fault_means_the_server_answered() {
        for (raw, answered) in [
            (&b"this is not HTTP\r\n\r\n"[..], false),
            (b"SSH-2.0-OpenSSH_9.6\r\n", false),
            (b"HTTP/1.1 OK\r\n\r\n", false),
            (b"HTTP/1.1 200 OK\r\nX: a\0b\r\n\r\n", true),
            (b"HTTP/1.1 200 OK\r\nContent-Length: x\r\n\r\n", true),
            (b"HTTP/1.1 200 O\x01K\r\n\r\n", true),
        ] {
            let bad = parse(raw, GET).unwrap_err();
            assert_eq!(bad.answered, answered, "{:?}", String::from_utf8_lossy(raw));
        }
    }

    /// A control byte an application let into a field it fills (all but HT, CR, LF, NUL) is
    /// relayed as sent: the field's span holds it.
    #[test]
    fn tolerated_control_bytes_stay_in_their_field() {
        let raw = b"HTTP/1.1 200 OK\r\n\
            Content-Disposition: attachment; filename=\"a\x01b\x7fc\x1bd\tz.txt\"\r\n\
            X-Edge:\x02lead and trail\x03 \r\n\
            Content-Length: 2\r\n\r\nhi";
        let head = parse(raw, GET).unwrap();
        let fields: Vec<(&[u8], &[u8])> = head
            .fields
            .iter()
            .map(|f| (f.name.get(raw), f.value.get(raw)))
            .collect();
        assert_eq!(
            fields,
            [
                (
                    &b"Content-Disposition"[..],
                    &b"attachment; filename=\"a\x01b\x7fc\x1bd\tz.txt\""[..]
                ),
                (b"X-Edge", b"\x02lead and trail\x03"),
                (b"Content-Length", b"2"),
            ]
        );
        assert_eq!(
            (head.len, head.framing),
            (raw.len() - 2, BodyFraming::Length(2))
        );
    }

    #[test]
    fn a_head_with_tolerated_bytes_may_arrive_in_pieces() {
        let raw = b"\r\nHTTP/1.1 200 OK\r\nX-Name: a\x01b\r\nX-Other: \x7f\r\n\r\n";
        for end in 1..raw.len() {
            let mut head = ResponseHead::default();
            assert_eq!(
                parse_response(&raw[..end], GET, &mut head),
                Ok(false),
                "{end}"
            );
        }
        let head = parse(raw, GET).unwrap();
        assert_eq!(head.fields[0].value.get(raw), b"a\x01b");
        assert_eq!(head.fields[1].value.get(raw), b"\x7f");
    }

    /// What stays refused: CR and NUL in a value (response splitting), a control byte in a
    /// field the switch reads (framing, Connection), in a name, in an obs-fold line.
    #[test]
    fn dangerous_bytes_and_bytes_in_fields_the_switch_reads_stay_refused() {
        for raw in [
            &b"HTTP/1.1 200 OK\r\nX-A: a\rb\r\n\r\n"[..],
            b"HTTP/1.1 200 OK\r\nX-A: a\x01\rb\r\n\r\n",
            b"HTTP/1.1 200 OK\r\nX-A: a\0b\r\n\r\n",
            b"HTTP/1.1 200 OK\r\nX-A: a\x01\0b\r\n\r\n",
            b"HTTP/1.1 200 OK\r\nContent-Length: 2\x01\r\n\r\nhi",
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\x01\r\n\r\n",
            b"HTTP/1.1 200 OK\r\nConnection: close\x01\r\n\r\n",
            b"HTTP/1.1 200 OK\r\nKeep-Alive: \x01\r\n\r\n",
            b"HTTP/1.1 200 OK\r\nX-\x01A: a\r\n\r\n",
            b"HTTP/1.1 200 OK\r\nX-A : \x01\r\n\r\n",
            b"HTTP/1.1 200 OK\r\nX-A: a\r\n \x01folded\r\n\r\n",
            b"HTTP/1.1 200 OK\r\n\x01\r\n\r\n",
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
