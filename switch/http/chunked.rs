//! Incremental decoder for the chunked transfer coding (RFC 9112 section 7.1).
//!
//! The decoder is strict where leniency has been used to smuggle requests: chunk sizes are hex
//! digits only (at most 16), every line ends in CRLF, chunk data is followed by CRLF, and
//! extensions may not contain control characters. Trailer fields are parsed with httparse and
//! re-emitted by the caller.

use std::ops::Range;

/// The largest trailer section accepted.
pub const MAX_TRAILER_BYTES: usize = 16 * 1024;

/// The most fields a trailer section read from HTTP/1 may hold (HAProxy's `tune.http.maxhdr`
/// is 101); more is a malformed body.
pub const MAX_TRAILER_FIELDS: usize = 128;

/// The longest chunk extension accepted (the bytes between a chunk size and its CRLF).
/// Extensions are dropped when the body is re-framed, so nothing legitimate needs many; without
/// a bound, a client could send one endless extension and hold the exchange without ever
/// sending a body byte or tripping the idle timeout.
pub const MAX_EXTENSION_BYTES: usize = 4096;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ChunkError(pub &'static str);

impl std::fmt::Display for ChunkError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "invalid chunked body: {}", self.0)
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    /// Reading hex digits of a chunk size.
    Size {
        value: u64,
        digits: u8,
    },
    /// Inside `;ext` after the size, `len` bytes into it.
    Extension {
        size: u64,
        len: u16,
    },
    /// After the CR that ends a size line.
    SizeLf {
        size: u64,
    },
    /// Chunk data bytes still to come.
    Data {
        left: u64,
    },
    DataCr,
    DataLf,
    /// After the last chunk: collecting the trailer section.
    Trailers,
    Done,
}

/// What one call to [`ChunkedDecoder::decode`] found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Decoded {
    /// More input is needed.
    NeedMore,
    /// This range of the input is chunk data.
    Data(Range<usize>),
    /// The body is complete; the trailer section (possibly empty, without the final CRLF) is in
    /// [`ChunkedDecoder::trailers`].
    End,
}

#[derive(Debug)]
pub struct ChunkedDecoder {
    state: State,
    trailers: Vec<u8>,
}

impl Default for ChunkedDecoder {
    fn default() -> Self {
        Self::new()
    }
}

impl ChunkedDecoder {
    pub fn new() -> Self {
        ChunkedDecoder {
            state: State::NEXT_SIZE,
            trailers: Vec::new(),
        }
    }

    /// Whether decoding `input` from where the decoder stands gives data or the body's end at
    /// once, rather than only framing bytes (a chunk's CRLF, part of the next size line): a
    /// reader holding only those must wait for the sender. Decodes a copy of the state; in
    /// the trailer section, any byte counts (the end is near).
    pub fn gives_at_once(&self, input: &[u8]) -> bool {
        if self.state == State::Trailers {
            return !input.is_empty();
        }
        let mut probe = ChunkedDecoder {
            state: self.state,
            trailers: Vec::new(),
        };
        !matches!(probe.decode(input), Ok((_, Decoded::NeedMore)))
    }

    pub fn is_done(&self) -> bool {
        self.state == State::Done
    }

    /// The raw trailer section, each line ending in CRLF, without the terminating empty line.
    pub fn trailers(&self) -> &[u8] {
        &self.trailers
    }

    /// Decodes from `input`; returns the bytes consumed and what they were. Framing bytes are
    /// consumed silently; `Decoded::Data` ranges index into `input` and are consumed too.
    pub fn decode(&mut self, input: &[u8]) -> Result<(usize, Decoded), ChunkError> {
        let mut i = 0;
        while i < input.len() {
            let b = input[i];
            self.state = match self.state {
                State::Size { value, digits } => State::after_size_byte(value, digits, b)?,
                State::Extension { size, len } => State::after_extension_byte(size, len, b)?,
                State::SizeLf { size } => State::after_size_line(size, b)?,
                State::Data { left } => {
                    // Data is handed out as one range, not byte by byte.
                    let (take, next) = State::take_data(left, input.len() - i);
                    self.state = next;
                    return Ok((i + take, Decoded::Data(i..i + take)));
                }
                State::DataCr => State::after_data_crlf_byte(b, b'\r', State::DataLf)?,
                State::DataLf => State::after_data_crlf_byte(b, b'\n', State::NEXT_SIZE)?,
                State::Trailers => {
                    if self.take_trailer_byte(b)? {
                        self.state = State::Done;
                        return Ok((i + 1, Decoded::End));
                    }
                    State::Trailers
                }
                State::Done => return Ok((i, Decoded::End)),
            };
            i += 1;
        }
        if self.state == State::Done {
            return Ok((i, Decoded::End));
        }
        Ok((i, Decoded::NeedMore))
    }

    /// Appends one byte to the trailer section; `true` when it ended the empty line that ends
    /// the body (the section is then validated and kept without that line).
    #[inline]
    fn take_trailer_byte(&mut self, b: u8) -> Result<bool, ChunkError> {
        self.trailers.push(b);
        if self.trailers.len() > MAX_TRAILER_BYTES {
            return Err(ChunkError("trailer section too large"));
        }
        if b != b'\n' {
            return Ok(false);
        }
        if !self.trailers.ends_with(b"\r\n") {
            return Err(ChunkError("trailer line not ended by CRLF"));
        }
        let line_start = self.trailers.len() - 2;
        let empty_line = line_start == 0 || self.trailers[..line_start].ends_with(b"\r\n");
        if !empty_line {
            return Ok(false);
        }
        self.trailers.truncate(line_start);
        validate_trailers(&self.trailers)?;
        Ok(true)
    }
}

/// One transition per state and byte: the decoder's loop calls these for every framing byte,
/// hence `#[inline]`.
impl State {
    /// Where a chunk size line starts: after the CRLF that ends a chunk's data.
    const NEXT_SIZE: State = State::Size {
        value: 0,
        digits: 0,
    };

    /// The state after byte `b` of a chunk size that has `digits` hex digits worth `value`.
    #[inline]
    fn after_size_byte(value: u64, digits: u8, b: u8) -> Result<State, ChunkError> {
        if let Some(d) = hex_value(b) {
            if digits == 16 {
                return Err(ChunkError("chunk size too large"));
            }
            Ok(State::Size {
                value: value << 4 | u64::from(d),
                digits: digits + 1,
            })
        } else if digits == 0 {
            Err(ChunkError("chunk size expected"))
        } else if b == b'\r' {
            Ok(State::SizeLf { size: value })
        } else if b == b';' || b == b' ' || b == b'\t' {
            Ok(State::Extension {
                size: value,
                len: 1,
            })
        } else {
            Err(ChunkError("invalid character in chunk size"))
        }
    }

    /// The state after byte `b` of a chunk extension already `len` bytes long.
    #[inline]
    fn after_extension_byte(size: u64, len: u16, b: u8) -> Result<State, ChunkError> {
        if b == b'\r' {
            Ok(State::SizeLf { size })
        } else if b != b'\t' && (b < 0x20 || b == 0x7f) {
            Err(ChunkError("control character in chunk extension"))
        } else if usize::from(len) >= MAX_EXTENSION_BYTES {
            Err(ChunkError("chunk extension too long"))
        } else {
            Ok(State::Extension { size, len: len + 1 })
        }
    }

    /// The state after the byte that must be the LF of a size line: the chunk's data, or the
    /// trailer section after the last chunk (size 0).
    #[inline]
    fn after_size_line(size: u64, b: u8) -> Result<State, ChunkError> {
        if b != b'\n' {
            return Err(ChunkError("chunk size line not ended by CRLF"));
        }
        Ok(if size == 0 {
            State::Trailers
        } else {
            State::Data { left: size }
        })
    }

    /// How many of the `available` bytes belong to a chunk with `left` bytes still to come,
    /// and the state after them.
    #[inline]
    fn take_data(left: u64, available: usize) -> (usize, State) {
        let take = left.min(available as u64) as usize;
        let rest = left - take as u64;
        let next = if rest == 0 {
            State::DataCr
        } else {
            State::Data { left: rest }
        };
        (take, next)
    }

    /// `next` if `b` is the `expected` byte of the CRLF after a chunk's data.
    #[inline]
    fn after_data_crlf_byte(b: u8, expected: u8, next: State) -> Result<State, ChunkError> {
        if b != expected {
            return Err(ChunkError("chunk data not followed by CRLF"));
        }
        Ok(next)
    }
}

/// Checks the framing of the part of a chunked body already at hand, so that a request whose
/// body is visibly broken is refused before any server sees its head. Bytes not yet received
/// are checked as they are relayed.
pub fn check_received(bytes: &[u8]) -> Result<(), ChunkError> {
    let mut decoder = ChunkedDecoder::new();
    let mut at = 0;
    while at < bytes.len() {
        match decoder.decode(&bytes[at..])? {
            (_, Decoded::End) | (_, Decoded::NeedMore) => return Ok(()),
            (used, Decoded::Data(_)) => at += used,
        }
    }
    Ok(())
}

#[inline]
fn hex_value(b: u8) -> Option<u8> {
    match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        b'A'..=b'F' => Some(b - b'A' + 10),
        _ => None,
    }
}

/// Appends a trailer section (as [`ChunkedDecoder::trailers`] holds it, validated) as it goes
/// on: each field rebuilt as `name: value` and CRLF, and the fields that must not be trailers
/// left out (RFC 9110 section 6.5.1: framing, routing, authentication, request modifiers,
/// content metadata, and the hop-by-hop fields). A recipient that merges trailers into the
/// header section (RFC 9110 section 6.5.2 forbids it, some do) would otherwise let a trailer
/// change Host or X-Forwarded-For after the switch has routed and stamped the request.
pub fn put_trailers(out: &mut Vec<u8>, section: &[u8]) {
    for_each_trailer(section, |name, value| {
        out.extend_from_slice(name);
        out.extend_from_slice(b": ");
        out.extend_from_slice(value);
        out.extend_from_slice(b"\r\n");
    });
}

/// Calls `field` with the name and value of each field of a trailer section (as
/// [`ChunkedDecoder::trailers`] holds it) that may go on as a trailer ([`may_be_trailer`]): for
/// HTTP/1 ([`put_trailers`]) and for HTTP/2 trailers alike.
///
/// The section is read line by line, with no bound on the number of fields: it was either
/// checked as it came ([`validate_trailers`]: field lines, at most [`MAX_TRAILER_FIELDS`]) or
/// written by the switch from an HTTP/2 trailer block, whose size the connection bounds. (A
/// parse into a fixed array once gave back nothing for a block of more fields than the array:
/// a gRPC answer lost its `grpc-status` silently.)
pub fn for_each_trailer(section: &[u8], mut field: impl FnMut(&[u8], &[u8])) {
    for line in section.split(|&b| b == b'\n') {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        let Some(colon) = line.iter().position(|&b| b == b':') else {
            continue;
        };
        let name = &line[..colon];
        let is_token = !name.is_empty() && name.iter().all(|&b| b.is_ascii_graphic());
        if is_token && may_be_trailer(name) {
            field(name, super::fields::trim_ows(&line[colon + 1..]));
        }
    }
}

/// Whether a field may travel in a trailer section.
pub fn may_be_trailer(name: &[u8]) -> bool {
    const NEVER: &[&[u8]] = &[
        b"trailer",
        b"authorization",
        b"proxy-authorization",
        b"proxy-authenticate",
        b"www-authenticate",
        b"cookie",
        b"set-cookie",
        b"content-type",
        b"content-encoding",
        b"content-range",
        b"expect",
        b"range",
        b"max-forwards",
        b"cache-control",
        b"pragma",
        b"age",
        b"expires",
        b"date",
        b"location",
        b"retry-after",
        b"vary",
        b"warning",
    ];
    super::fields::role_of(name) == super::fields::FieldRole::Forward
        && !super::fields::is_underscore_lookalike(name)
        && !name
            .get(..3)
            .is_some_and(|prefix| prefix.eq_ignore_ascii_case(b"if-"))
        && !NEVER.iter().any(|never| never.eq_ignore_ascii_case(name))
}

/// Trailer lines must be well-formed field lines, like header fields.
fn validate_trailers(section: &[u8]) -> Result<(), ChunkError> {
    if section.is_empty() {
        return Ok(());
    }
    let mut terminated = Vec::with_capacity(section.len() + 2);
    terminated.extend_from_slice(section);
    terminated.extend_from_slice(b"\r\n");
    let mut fields = [httparse::EMPTY_HEADER; MAX_TRAILER_FIELDS];
    match httparse::parse_headers(&terminated, &mut fields) {
        Ok(httparse::Status::Complete((len, _))) if len == terminated.len() => Ok(()),
        _ => Err(ChunkError("malformed trailer field")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_trailer_section_of_many_fields_is_read_whole() {
        let mut section = Vec::new();
        for i in 0..200 {
            section.extend_from_slice(format!("x-t{i}: v{i} \r\n").as_bytes());
        }
        section.extend_from_slice(b"grpc-status: 0\r\nset-cookie: no");
        let mut seen = Vec::new();
        for_each_trailer(&section, |n, v| seen.push((n.to_vec(), v.to_vec())));
        assert_eq!(
            seen.len(),
            201,
            "every field but the one that may not be a trailer"
        );
        assert_eq!(seen[7], (b"x-t7".to_vec(), b"v7".to_vec()));
        assert_eq!(seen[200], (b"grpc-status".to_vec(), b"0".to_vec()));
        // From HTTP/1, at most MAX_TRAILER_FIELDS fields.
        let lines = |n: usize| (0..n).map(|i| format!("x-t{i}: v\r\n")).collect::<String>();
        let at_most = lines(MAX_TRAILER_FIELDS);
        assert!(validate_trailers(at_most.as_bytes()).is_ok());
        let over = lines(MAX_TRAILER_FIELDS + 1);
        assert!(validate_trailers(over.as_bytes()).is_err());
    }

    #[test]
    fn only_data_or_the_end_gives_at_once() {
        let mut d = ChunkedDecoder::new();
        let (used, what) = d.decode(b"5\r\nhello\r\n3").unwrap();
        assert_eq!((used, what), (8, Decoded::Data(3..8)));
        // The CRLF after the data and half a size line are framing only.
        assert!(!d.gives_at_once(b"\r\n"));
        assert!(!d.gives_at_once(b"\r\n3"));
        assert!(!d.gives_at_once(b"\r\n3\r\n"));
        assert!(d.gives_at_once(b"\r\n3\r\nabc"));
        assert!(d.gives_at_once(b"\r\n0\r\n\r\n"));
        assert!(!d.gives_at_once(b"\r\n0\r\nx-sum: 1\r\n"));
        // A broken frame comes at once too (as an error).
        assert!(d.gives_at_once(b"xx"));
        // The probe leaves the decoder where it stood.
        assert_eq!(d.decode(b"\r\n3\r\nabc").unwrap(), (8, Decoded::Data(5..8)));
    }

    /// Feeds `input` in pieces of `step` bytes and collects the data and trailers.
    fn decode_all(input: &[u8], step: usize) -> Result<(Vec<u8>, Vec<u8>, usize), ChunkError> {
        let mut d = ChunkedDecoder::new();
        let mut data = Vec::new();
        let mut pending: Vec<u8> = Vec::new();
        let mut fed = 0;
        let mut consumed_total = 0;
        loop {
            if fed < input.len() {
                let end = (fed + step).min(input.len());
                pending.extend_from_slice(&input[fed..end]);
                fed = end;
            }
            loop {
                let (used, what) = d.decode(&pending)?;
                if let Decoded::Data(r) = &what {
                    data.extend_from_slice(&pending[r.clone()]);
                }
                pending.drain(..used);
                consumed_total += used;
                match what {
                    Decoded::End => return Ok((data, d.trailers().to_vec(), consumed_total)),
                    Decoded::NeedMore => break,
                    Decoded::Data(_) => {}
                }
            }
            if fed == input.len() {
                return Err(ChunkError("truncated"));
            }
        }
    }

    #[test]
    fn decodes_at_every_split() {
        let body = b"5\r\nhello\r\n1;name=value\r\n \r\n10\r\n0123456789abcdef\r\n0\r\nX-Sum: 1\r\n\r\nNEXT";
        for step in 1..body.len() {
            let (data, trailers, used) = decode_all(body, step).unwrap();
            assert_eq!(data, b"hello 0123456789abcdef");
            assert_eq!(trailers, b"X-Sum: 1\r\n");
            assert_eq!(used, body.len() - 4, "stops before the next message");
        }
    }

    #[test]
    fn last_chunk_without_trailers() {
        let (data, trailers, used) = decode_all(b"0\r\n\r\n", 1).unwrap();
        assert!(data.is_empty() && trailers.is_empty());
        assert_eq!(used, 5);
    }

    #[test]
    fn refuses_smuggling_shapes() {
        for bad in [
            &b"5\nhello\r\n0\r\n\r\n"[..],
            b"5\r\nhello\n0\r\n\r\n",
            b"5\r\nhelloXX0\r\n\r\n",
            b"-5\r\nhello\r\n0\r\n\r\n",
            b"0x5\r\nhello\r\n0\r\n\r\n",
            b" 5\r\nhello\r\n0\r\n\r\n",
            b"\r\n",
            b"10000000000000000\r\n",
            b"5;a\x00b\r\nhello\r\n0\r\n\r\n",
            b"0\r\nBad Field: x\r\n\r\n",
            b"0\r\nX: y\n\r\n",
        ] {
            assert!(
                decode_all(bad, 3).is_err(),
                "{:?}",
                String::from_utf8_lossy(bad)
            );
        }
    }

    #[test]
    fn extensions_are_bounded() {
        // The longest extension accepted, one byte split at a time, and then one byte more.
        let longest = format!(
            "3;{}\r\nabc\r\n0\r\n\r\n",
            "x".repeat(MAX_EXTENSION_BYTES - 1)
        );
        let (data, _, _) = decode_all(longest.as_bytes(), 7).unwrap();
        assert_eq!(data, b"abc");
        let over = format!("3;{}\r\nabc\r\n0\r\n\r\n", "x".repeat(MAX_EXTENSION_BYTES));
        assert_eq!(
            decode_all(over.as_bytes(), 7).unwrap_err(),
            ChunkError("chunk extension too long")
        );
        // An endless one is refused as soon as it passes the bound, not when it ends.
        let endless = format!("3;{}", "x".repeat(MAX_EXTENSION_BYTES + 10));
        assert!(check_received(endless.as_bytes()).is_err());
    }

    #[test]
    fn received_prefix_is_checked() {
        assert!(check_received(b"5\r\nhel").is_ok());
        assert!(check_received(b"5\r\nhello\r\n0\r\n\r\nGET / HTTP/1.1\r\n").is_ok());
        assert!(check_received(b"5\r\nhello\r\nzz\r\n").is_err());
        assert!(check_received(b"5\r\nhelloXX").is_err());
        assert!(check_received(b"").is_ok());
    }

    #[test]
    fn large_sizes_are_exact() {
        let mut d = ChunkedDecoder::new();
        let (used, what) = d.decode(b"ffffffffffffffff\r\n").unwrap();
        assert_eq!((used, what), (18, Decoded::NeedMore));
        let (used, what) = d.decode(b"abc").unwrap();
        assert_eq!((used, what), (3, Decoded::Data(0..3)));
    }

    #[test]
    fn trailers_are_rebuilt_and_filtered() {
        let mut out = Vec::new();
        put_trailers(
            &mut out,
            b"X-Checksum:   abc  \r\nHost: evil\r\nContent-Length: 0\r\nX-Forwarded-For: 6.6.6.6\r\nSet-Cookie: a=b\r\nIf-Match: x\r\nX_Forwarded_For: 1\r\nTransfer-Encoding: chunked\r\nX-Other: 1\r\n",
        );
        assert_eq!(out, b"X-Checksum: abc\r\nX-Other: 1\r\n");
        out.clear();
        put_trailers(&mut out, b"");
        assert!(out.is_empty());
    }
}
