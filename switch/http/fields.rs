//! Spans into a read buffer, and the field-value grammar shared by requests and responses.

use std::ops::Range;

/// A byte range of the connection's read buffer. u32 halves the size of a head's field table;
/// heads are capped at 64 KiB, far below u32::MAX.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Span {
    pub start: u32,
    pub end: u32,
}

impl Span {
    /// The span of `part`, which must lie inside `base`.
    pub(crate) fn of(base: &[u8], part: &[u8]) -> Span {
        let start = (part.as_ptr() as usize).wrapping_sub(base.as_ptr() as usize);
        debug_assert!(start + part.len() <= base.len());
        Span {
            start: start as u32,
            end: (start + part.len()) as u32,
        }
    }

    pub fn range(self) -> Range<usize> {
        self.start as usize..self.end as usize
    }

    pub fn get(self, buf: &[u8]) -> &[u8] {
        buf.get(self.range()).unwrap_or_default()
    }

    pub fn is_empty(self) -> bool {
        self.start >= self.end
    }

    /// The part of this span between `from` and `to` (relative offsets).
    pub(crate) fn slice(self, from: usize, to: usize) -> Span {
        Span {
            start: self.start + from as u32,
            end: self.start + to as u32,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Version {
    Http10,
    Http11,
}

impl Version {
    /// From httparse's minor version (it accepts HTTP/1.0 and HTTP/1.1 only).
    pub(crate) fn from_minor(minor: u8) -> Version {
        if minor == 0 {
            Version::Http10
        } else {
            Version::Http11
        }
    }
}

/// What the switch does with one header field when it rebuilds the head for the other side.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FieldRole {
    /// Sent on unchanged.
    Forward,
    /// Connection-specific (hop-by-hop): dropped.
    Drop,
    /// Content-Length: replaced by the validated length at its first occurrence.
    ContentLength,
    /// Host: kept, or replaced when the target was in absolute form.
    Host,
    /// X-Forwarded-For: the client address is appended to the last one.
    ForwardedFor,
    /// X-Forwarded-Proto: replaced by `https` on a TLS connection (a client must not claim
    /// the scheme), passed on otherwise.
    ForwardedProto,
    /// Transfer-Encoding: kept when the body is relayed chunked.
    TransferEncoding,
    /// Upgrade: kept only on an upgrade exchange.
    Upgrade,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Field {
    pub name: Span,
    pub value: Span,
    pub role: FieldRole,
}

/// The role a field name plays, before Connection tokens are applied.
pub(crate) fn role_of(name: &[u8]) -> FieldRole {
    // Dispatch on length first: most names are rejected without a single comparison.
    match name.len() {
        4 if name.eq_ignore_ascii_case(b"host") => FieldRole::Host,
        2 if name.eq_ignore_ascii_case(b"te") => FieldRole::Drop,
        7 if name.eq_ignore_ascii_case(b"upgrade") => FieldRole::Upgrade,
        10 if name.eq_ignore_ascii_case(b"connection")
            || name.eq_ignore_ascii_case(b"keep-alive") =>
        {
            FieldRole::Drop
        }
        14 if name.eq_ignore_ascii_case(b"content-length") => FieldRole::ContentLength,
        15 if name.eq_ignore_ascii_case(b"x-forwarded-for") => FieldRole::ForwardedFor,
        16 if name.eq_ignore_ascii_case(b"proxy-connection") => FieldRole::Drop,
        17 if name.eq_ignore_ascii_case(b"transfer-encoding") => FieldRole::TransferEncoding,
        17 if name.eq_ignore_ascii_case(b"x-forwarded-proto") => FieldRole::ForwardedProto,
        _ => FieldRole::Forward,
    }
}

/// Records httparse's fields as spans of `buf`, each with its role.
pub(crate) fn record_fields(buf: &[u8], headers: &[httparse::Header<'_>], fields: &mut Vec<Field>) {
    fields.clear();
    fields.extend(headers.iter().map(|h| Field {
        name: Span::of(buf, h.name.as_bytes()),
        value: Span::of(buf, h.value),
        role: role_of(h.name.as_bytes()),
    }));
}

/// Adds one Content-Length field's value to the length read so far: every occurrence must
/// carry the same valid number (RFC 9112 section 6.3), else the message is refused.
pub(crate) fn fold_content_length(
    length: &mut Option<u64>,
    value: &[u8],
) -> Result<(), &'static str> {
    let n = parse_content_length(value).ok_or("invalid Content-Length")?;
    if length.is_some_and(|c| c != n) {
        return Err("conflicting Content-Length fields");
    }
    *length = Some(n);
    Ok(())
}

/// Reads the codings of all Transfer-Encoding fields of a head, in order.
pub(crate) fn transfer_coding_of(fields: &[Field], buf: &[u8]) -> TransferCoding {
    transfer_coding(
        fields
            .iter()
            .filter(|f| f.role == FieldRole::TransferEncoding)
            .map(|f| f.value.get(buf)),
    )
}

/// Comma-separated list elements with optional whitespace trimmed; empty elements skipped
/// (RFC 9110 section 5.6.1).
pub(crate) fn list_items(value: &[u8]) -> impl Iterator<Item = &[u8]> {
    value
        .split(|&b| b == b',')
        .map(trim_ows)
        .filter(|item| !item.is_empty())
}

pub(crate) fn trim_ows(mut s: &[u8]) -> &[u8] {
    while let [b' ' | b'\t', rest @ ..] = s {
        s = rest;
    }
    while let [rest @ .., b' ' | b'\t'] = s {
        s = rest;
    }
    s
}

/// Connection options found in Connection fields.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct ConnectionOptions {
    pub close: bool,
    pub keep_alive: bool,
    pub upgrade: bool,
    /// Some token names another field, which must then be dropped as hop-by-hop.
    pub names_fields: bool,
}

pub(crate) fn connection_options<'a>(values: impl Iterator<Item = &'a [u8]>) -> ConnectionOptions {
    let mut options = ConnectionOptions::default();
    for value in values {
        for token in list_items(value) {
            if token.eq_ignore_ascii_case(b"close") {
                options.close = true;
            } else if token.eq_ignore_ascii_case(b"keep-alive") {
                options.keep_alive = true;
            } else if token.eq_ignore_ascii_case(b"upgrade") {
                options.upgrade = true;
            } else {
                options.names_fields = true;
            }
        }
    }
    options
}

/// Reads the Connection fields of a head, drops the fields they name, and says whether the
/// connection persists after this message (RFC 9112 section 9.3).
pub(crate) fn read_connection(
    fields: &mut [Field],
    buf: &[u8],
    version: Version,
) -> (ConnectionOptions, bool) {
    let options = connection_options(
        fields
            .iter()
            .filter(|f| {
                f.role == FieldRole::Drop && f.name.get(buf).eq_ignore_ascii_case(b"connection")
            })
            .map(|f| f.value.get(buf)),
    );
    if options.names_fields {
        drop_fields_named_in_connection(fields, buf);
    }
    let persistent = match version {
        Version::Http11 => !options.close,
        Version::Http10 => options.keep_alive && !options.close,
    };
    (options, persistent)
}

/// Marks as dropped every field named by a Connection token. Framing and routing fields keep
/// their role whatever the client lists: a request must not be able to hide its own
/// Content-Length or Host from the server this way.
pub(crate) fn drop_fields_named_in_connection(fields: &mut [Field], buf: &[u8]) {
    let connection_values: Vec<Span> = fields
        .iter()
        .filter(|f| {
            f.role == FieldRole::Drop && f.name.get(buf).eq_ignore_ascii_case(b"connection")
        })
        .map(|f| f.value)
        .collect();
    for field in fields.iter_mut() {
        if field.role != FieldRole::Forward {
            continue;
        }
        let name = field.name.get(buf);
        let named = connection_values
            .iter()
            .any(|v| list_items(v.get(buf)).any(|token| token.eq_ignore_ascii_case(name)));
        if named {
            field.role = FieldRole::Drop;
        }
    }
}

/// The largest Content-Length accepted: 2^63 - 1. Many servers keep lengths in a signed 64-bit
/// integer (nginx's `ngx_atoof` refuses more); a larger one forwarded could be read as a
/// negative or wrapped length there, a desynchronisation of the two ends.
pub(crate) const MAX_CONTENT_LENGTH: u64 = i64::MAX as u64;

/// Parses a Content-Length value: digits only, or a list of identical digit strings (RFC 9110
/// section 8.6), at most [`MAX_CONTENT_LENGTH`]. `None` for anything else.
pub(crate) fn parse_content_length(value: &[u8]) -> Option<u64> {
    let mut result: Option<u64> = None;
    let mut any = false;
    for item in value.split(|&b| b == b',').map(trim_ows) {
        if item.is_empty() || !item.iter().all(u8::is_ascii_digit) {
            return None;
        }
        // Leading zeros change nothing (the length goes on in its canonical decimal form).
        let first_digit = item
            .iter()
            .position(|&d| d != b'0')
            .unwrap_or(item.len() - 1);
        let digits = &item[first_digit..];
        if digits.len() > 19 {
            return None;
        }
        let n = digits
            .iter()
            .fold(0u64, |n, &d| n * 10 + u64::from(d - b'0'));
        if n > MAX_CONTENT_LENGTH {
            return None;
        }
        if result.is_some_and(|r| r != n) {
            return None;
        }
        result = Some(n);
        any = true;
    }
    if any {
        result
    } else {
        None
    }
}

/// Outcome of reading Transfer-Encoding fields.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum TransferCoding {
    /// The final coding is chunked (and chunked appears once).
    Chunked,
    /// Codings present, chunked not final: the length cannot be determined from framing.
    NotChunkedFinal,
    /// An empty value, or chunked applied twice: the message is malformed.
    Invalid,
}

/// Why a request's Transfer-Encoding is refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum CodingRefusal {
    /// Malformed (an empty list element, parameters on chunked, chunked twice or not last, a
    /// byte that is no token): 400.
    Malformed(&'static str),
    /// Well formed, but a coding other than chunked, which the switch does not decode: 501
    /// (RFC 9112 section 6.1), as nginx answers.
    Unsupported,
}

/// A request's Transfer-Encoding fields must say exactly `chunked` (in any case, with optional
/// whitespace), once: the one form every server reads alike. Lists with empty elements
/// (`chunked,`), parameters (`chunked;q=1`) or other codings (`gzip, chunked`) are refused,
/// as HAProxy refuses the malformed ones and nginx everything but `chunked`; what is accepted
/// goes on as `Transfer-Encoding: chunked`.
pub(crate) fn request_transfer_coding<'a>(
    values: impl Iterator<Item = &'a [u8]>,
) -> Result<(), CodingRefusal> {
    let mut chunked = 0;
    let mut others = 0;
    for value in values {
        for item in value.split(|&b| b == b',').map(trim_ows) {
            if item.is_empty() {
                return Err(CodingRefusal::Malformed(
                    "empty element in Transfer-Encoding",
                ));
            }
            let name = trim_ows(item.split(|&b| b == b';').next().unwrap_or_default());
            if name.is_empty() || !name.iter().all(|&b| is_token_byte(b)) {
                return Err(CodingRefusal::Malformed("invalid Transfer-Encoding"));
            }
            if name.eq_ignore_ascii_case(b"chunked") {
                if item.len() != name.len() {
                    return Err(CodingRefusal::Malformed("parameters on the chunked coding"));
                }
                if chunked > 0 {
                    return Err(CodingRefusal::Malformed("chunked applied twice"));
                }
                chunked += 1;
            } else if chunked > 0 {
                return Err(CodingRefusal::Malformed(
                    "Transfer-Encoding without final chunked",
                ));
            } else {
                others += 1;
            }
        }
    }
    match (chunked, others) {
        (1, 0) => Ok(()),
        (0, _) => Err(CodingRefusal::Malformed(
            "Transfer-Encoding without final chunked",
        )),
        _ => Err(CodingRefusal::Unsupported),
    }
}

/// tchar (RFC 9110 section 5.6.2), by table: a search of the punctuation list per byte cost
/// more than the rest of an HTTP/2 response field's encoding (connection/h2/head_block.rs).
#[inline]
pub(crate) fn is_token_byte(b: u8) -> bool {
    TOKEN_BYTES[usize::from(b)]
}

const TOKEN_BYTES: [bool; 256] = {
    let mut table = [false; 256];
    let mut b = 0;
    while b < 256 {
        let c = b as u8;
        table[b] = c.is_ascii_alphanumeric() || matches!(c, b'!' | b'#'..=b'\'' | b'*' | b'+');
        table[b] |= matches!(c, b'-' | b'.' | b'^' | b'_' | b'`' | b'|' | b'~');
        b += 1;
    }
    table
};

/// A control byte that a field value of a server's response may carry on its way to the
/// client: every CTL (RFC 5234) but HT, which is valid, and CR, LF and NUL, which RFC 9110
/// section 5.5 calls dangerous (a CR or LF could end the field where another parser does not:
/// response splitting). Applications let the others through (PHP and Werkzeug refuse only CR,
/// LF and NUL), so a value filled from the request may hold them; nginx and HAProxy relay them.
pub(crate) fn is_tolerated_control(b: u8) -> bool {
    (b < 0x20 && !matches!(b, b'\t' | b'\r' | b'\n' | 0)) || b == 0x7f
}

/// `value` with each [`is_tolerated_control`] byte replaced by SP and the white space at its
/// ends trimmed, for a peer that cannot carry those bytes (the `http` crate under HTTP/2
/// refuses them, although RFC 9113 does not): the field keeps its meaning, where dropping it
/// could change the response's (a `Content-Disposition: attachment` lost would have a browser
/// show an uploaded page inline).
pub(crate) fn with_controls_as_spaces(value: &[u8]) -> std::borrow::Cow<'_, [u8]> {
    if !value.iter().any(|&b| is_tolerated_control(b)) {
        return std::borrow::Cow::Borrowed(value);
    }
    let spaced: Vec<u8> = value
        .iter()
        .map(|&b| if is_tolerated_control(b) { b' ' } else { b })
        .collect();
    std::borrow::Cow::Owned(trim_ows(&spaced).to_vec())
}

/// A field name written with `_` where a field the switch acts on has `-`
/// (`Content_Length`, `X_Forwarded_For`): many applications (CGI, PHP, WSGI) see both
/// spellings as one, so such a field could carry framing or a forged client address past the
/// switch. nginx drops names with `_` by default; the switch refuses these few.
pub(crate) fn is_underscore_lookalike(name: &[u8]) -> bool {
    if !name.contains(&b'_') || name.len() > 32 {
        return false;
    }
    let mut dashed = [0u8; 32];
    for (d, &b) in dashed.iter_mut().zip(name) {
        *d = if b == b'_' { b'-' } else { b };
    }
    role_of(&dashed[..name.len()]) != FieldRole::Forward
}

pub(crate) fn transfer_coding<'a>(values: impl Iterator<Item = &'a [u8]>) -> TransferCoding {
    let mut chunked_seen = false;
    let mut last_is_chunked = false;
    let mut any = false;
    for value in values {
        let mut in_value = false;
        for item in list_items(value) {
            in_value = true;
            any = true;
            let name = trim_ows(item.split(|&b| b == b';').next().unwrap_or_default());
            let is_chunked = name.eq_ignore_ascii_case(b"chunked");
            if is_chunked && chunked_seen {
                return TransferCoding::Invalid;
            }
            if !is_chunked && chunked_seen {
                // A coding applied after chunked: invalid (chunked must be final).
                return TransferCoding::NotChunkedFinal;
            }
            chunked_seen |= is_chunked;
            last_is_chunked = is_chunked;
        }
        if !in_value {
            return TransferCoding::Invalid;
        }
    }
    if any && last_is_chunked {
        TransferCoding::Chunked
    } else if any {
        TransferCoding::NotChunkedFinal
    } else {
        TransferCoding::Invalid
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn content_length_values() {
        assert_eq!(parse_content_length(b"0"), Some(0));
        assert_eq!(parse_content_length(b"42"), Some(42));
        assert_eq!(parse_content_length(b"42, 42"), Some(42));
        assert_eq!(parse_content_length(b"42,43"), None);
        assert_eq!(parse_content_length(b"+42"), None);
        assert_eq!(parse_content_length(b"4 2"), None);
        assert_eq!(parse_content_length(b""), None);
        assert_eq!(parse_content_length(b"42,"), None);
        assert_eq!(parse_content_length(b"0x10"), None);
        assert_eq!(parse_content_length(b"18446744073709551615"), None);
        assert_eq!(parse_content_length(b"9999999999999999999"), None);
        assert_eq!(parse_content_length(b"9223372036854775808"), None, "2^63");
        assert_eq!(
            parse_content_length(b"9223372036854775807"),
            Some(9_223_372_036_854_775_807)
        );
        assert_eq!(parse_content_length(b"00000000000000000000005"), Some(5));
        assert_eq!(parse_content_length(b"000"), Some(0));
    }

    #[test]
    fn request_codings_are_chunked_alone() {
        let check = |values: &[&[u8]]| request_transfer_coding(values.iter().copied());
        assert_eq!(check(&[b"chunked"]), Ok(()));
        assert_eq!(check(&[b"CHUNKED"]), Ok(()));
        assert_eq!(check(&[b" chunked\t"]), Ok(()));
        for malformed in [
            &b"chunked,"[..],
            b", chunked",
            b"chunked\t,",
            b"chunked;q=1",
            b"chunked, chunked",
            b"chunked, gzip",
            b"",
            b"a b, chunked",
            b"\xff, chunked",
            b"gzip",
        ] {
            assert!(
                matches!(check(&[malformed]), Err(CodingRefusal::Malformed(_))),
                "{:?}",
                String::from_utf8_lossy(malformed)
            );
        }
        assert_eq!(check(&[b"gzip, chunked"]), Err(CodingRefusal::Unsupported));
        assert_eq!(
            check(&[b"gzip", b"chunked"]),
            Err(CodingRefusal::Unsupported)
        );
        assert!(matches!(
            check(&[b"chunked", b"chunked"]),
            Err(CodingRefusal::Malformed(_))
        ));
    }

    #[test]
    fn control_bytes_tolerated_in_values() {
        let tolerated: Vec<u8> = (0..=255).filter(|&b| is_tolerated_control(b)).collect();
        let expected: Vec<u8> = (1..0x20)
            .filter(|&b| !matches!(b, b'\t' | b'\n' | b'\r'))
            .chain([0x7f])
            .collect();
        assert_eq!(tolerated, expected);
        assert_eq!(&*with_controls_as_spaces(b"a\x01b\x7fc\td"), b"a b c\td");
        assert_eq!(&*with_controls_as_spaces(b"\x1bx\x1b"), b"x");
        assert!(matches!(
            with_controls_as_spaces(b"plain \xff"),
            std::borrow::Cow::Borrowed(_)
        ));
    }

    #[test]
    fn underscore_lookalikes() {
        assert!(is_underscore_lookalike(b"Content_Length"));
        assert!(is_underscore_lookalike(b"TRANSFER_ENCODING"));
        assert!(is_underscore_lookalike(b"X_Forwarded_For"));
        assert!(!is_underscore_lookalike(b"X_Custom_Thing"));
        assert!(!is_underscore_lookalike(b"Content-Length"));
    }

    #[test]
    fn transfer_codings() {
        let tc = |vals: &[&[u8]]| transfer_coding(vals.iter().copied());
        assert_eq!(tc(&[b"chunked"]), TransferCoding::Chunked);
        assert_eq!(tc(&[b"CHUNKED"]), TransferCoding::Chunked);
        assert_eq!(tc(&[b"gzip, chunked"]), TransferCoding::Chunked);
        assert_eq!(tc(&[b"gzip", b"chunked"]), TransferCoding::Chunked);
        assert_eq!(tc(&[b"chunked, gzip"]), TransferCoding::NotChunkedFinal);
        assert_eq!(tc(&[b"gzip"]), TransferCoding::NotChunkedFinal);
        assert_eq!(tc(&[b"chunked", b"chunked"]), TransferCoding::Invalid);
        assert_eq!(tc(&[b""]), TransferCoding::Invalid);
        assert_eq!(tc(&[b"chunkedx"]), TransferCoding::NotChunkedFinal);
    }

    #[test]
    fn connection_tokens() {
        let o = connection_options([&b"Keep-Alive, Upgrade"[..], b" close ,x-foo"].into_iter());
        assert!(o.close && o.keep_alive && o.upgrade && o.names_fields);
    }

    #[test]
    fn every_field_named_in_connection_is_dropped() {
        let mut raw = b"Connection: keep-alive".to_vec();
        let names: Vec<String> = (0..20).map(|i| format!("X-H{i}")).collect();
        for n in &names {
            raw.extend_from_slice(format!(", {n}").as_bytes());
        }
        let connection_value_start = 12;
        let mut fields = vec![Field {
            name: Span { start: 0, end: 10 },
            value: Span {
                start: connection_value_start,
                end: raw.len() as u32,
            },
            role: FieldRole::Drop,
        }];
        for n in names.iter().chain(std::iter::once(&"X-Kept".to_string())) {
            let start = raw.len() as u32;
            raw.extend_from_slice(n.as_bytes());
            fields.push(Field {
                name: Span {
                    start,
                    end: raw.len() as u32,
                },
                value: Span { start, end: start },
                role: FieldRole::Forward,
            });
        }
        drop_fields_named_in_connection(&mut fields, &raw);
        let dropped = fields.iter().filter(|f| f.role == FieldRole::Drop).count();
        assert_eq!(dropped, 21, "Connection itself and all 20 named fields");
        assert_eq!(fields.last().unwrap().role, FieldRole::Forward);
    }

    #[test]
    fn roles() {
        assert_eq!(role_of(b"Content-Length"), FieldRole::ContentLength);
        assert_eq!(role_of(b"connection"), FieldRole::Drop);
        assert_eq!(role_of(b"Keep-Alive"), FieldRole::Drop);
        assert_eq!(role_of(b"X-Forwarded-For"), FieldRole::ForwardedFor);
        assert_eq!(role_of(b"x-forwarded-PROTO"), FieldRole::ForwardedProto);
        assert_eq!(role_of(b"Accept"), FieldRole::Forward);
        assert_eq!(role_of(b"TE"), FieldRole::Drop);
    }

    #[test]
    fn token_bytes_are_rfc_9110s_tchar() {
        for b in 0..=255u8 {
            let tchar = b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b);
            assert_eq!(is_token_byte(b), tchar, "{b:#x}");
        }
    }
}
