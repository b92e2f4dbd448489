//! A response head HPACK-encoded for an HTTP/2 client straight from the fields the exchange
//! hands over, sent with the vendored h2 crate's `send_response_encoded` (vendor/README.md).
//!
//! Why by hand: the h2 crate encodes only from an `http::Response`, whose `HeaderMap` costs a
//! `HeaderName` and a `HeaderValue` (an allocation, each checked again) per field, and then
//! searches and grows the connection's HPACK dynamic table and Huffman-codes every value: a
//! quarter of an HTTP/2 request's instructions (BENCHMARKS.md, "Where an HTTP/2 request's
//! instructions go"). HAProxy's and nginx's encoders leave the dynamic table alone for
//! responses; this one does too: `:status` as an indexed static entry when RFC 7541's static
//! table has it, every field as a literal without indexing (its name by static index when the
//! table has it), no Huffman coding. The block refers to no dynamic entry and adds none, so it
//! can be made in the stream's task, before the connection writes it, and mixes with the
//! crate's own blocks (trailers) on the same connection.
//!
//! What the crate checked on the way, this does: names lowercased (RFC 9113 section 8.2.1) and
//! tokens, values without control bytes (each sent as a space and the value trimmed, as
//! before: `with_controls_as_spaces`; a CR, LF or NUL leaves the field out), and the
//! connection-specific fields left out (section 8.2.2).

use crate::http::fields::{is_token_byte, with_controls_as_spaces};

/// RFC 7541 Appendix A: the static table's names from index 15 on (1 to 14 are the request
/// pseudo-fields and `:status`), each with its index; `static_index` is the same list as a
/// `match`, which the compiler turns into a switch on the length and a comparison or two
/// (measured: a scan of the list cost more than the rest of a field).
macro_rules! static_names {
    ($($index:literal $name:literal,)*) => {
        #[cfg(test)]
        const STATIC_NAMES: &[(usize, &[u8])] = &[$(($index, $name)),*];

        fn static_index(lower: &[u8]) -> Option<usize> {
            match lower {
                $($name => Some($index),)*
                _ => None,
            }
        }
    };
}

static_names! {
    15 b"accept-charset",
    16 b"accept-encoding",
    17 b"accept-language",
    18 b"accept-ranges",
    19 b"accept",
    20 b"access-control-allow-origin",
    21 b"age",
    22 b"allow",
    23 b"authorization",
    24 b"cache-control",
    25 b"content-disposition",
    26 b"content-encoding",
    27 b"content-language",
    28 b"content-length",
    29 b"content-location",
    30 b"content-range",
    31 b"content-type",
    32 b"cookie",
    33 b"date",
    34 b"etag",
    35 b"expect",
    36 b"expires",
    37 b"from",
    38 b"host",
    39 b"if-match",
    40 b"if-modified-since",
    41 b"if-none-match",
    42 b"if-range",
    43 b"if-unmodified-since",
    44 b"last-modified",
    45 b"link",
    46 b"location",
    47 b"max-forwards",
    48 b"proxy-authenticate",
    49 b"proxy-authorization",
    50 b"range",
    51 b"referer",
    52 b"refresh",
    53 b"retry-after",
    54 b"server",
    55 b"set-cookie",
    56 b"strict-transport-security",
    57 b"transfer-encoding",
    58 b"user-agent",
    59 b"vary",
    60 b"via",
    61 b"www-authenticate",
}

/// `:status`'s name in the static table, and the statuses it holds whole.
const STATUS_NAME_INDEX: usize = 8;
const STATUS_ENTRIES: [(u16, usize); 7] = [
    (200, 8),
    (204, 9),
    (206, 10),
    (304, 11),
    (400, 12),
    (404, 13),
    (500, 14),
];

/// HPACK representations' first bits (RFC 7541 section 6): an indexed field (1, a 7-bit
/// index), a literal without indexing (0000, a 4-bit name index, 0 for a literal name).
const INDEXED: u8 = 0x80;
const LITERAL_WITHOUT_INDEXING: u8 = 0x00;

/// One response head being encoded, and its size as HTTP/1.1 would write it (the access log
/// and `bytes_out` count a head alike over both protocols).
pub(super) struct HeadBlock {
    bytes: Vec<u8>,
    status: u16,
    http1_size: u64,
}

impl HeadBlock {
    /// A head with `status`, whose HTTP/1.1 status line has a reason of `reason_len` bytes.
    pub(super) fn new(status: u16, reason_len: usize) -> HeadBlock {
        let mut bytes = Vec::with_capacity(256);
        match STATUS_ENTRIES.iter().find(|(s, _)| *s == status) {
            Some((_, index)) => integer(&mut bytes, INDEXED, 7, *index),
            None => {
                integer(&mut bytes, LITERAL_WITHOUT_INDEXING, 4, STATUS_NAME_INDEX);
                let mut digits = itoa::Buffer::new();
                string(&mut bytes, digits.format(status).as_bytes());
            }
        }
        // "HTTP/1.1 200 " and the line end, then the empty line that ends the head.
        let http1_size = (9 + 3 + 1 + reason_len + 2 + 2) as u64;
        HeadBlock {
            bytes,
            status,
            http1_size,
        }
    }

    /// Adds a field; one whose name is no token or is connection-specific is left out
    /// (returns false), as the h2 crate refused them.
    pub(super) fn field(&mut self, name: &[u8], value: &[u8]) -> bool {
        let mut lower = [0u8; NAME_ON_STACK];
        let Some(lower) = lowercase_token(name, &mut lower) else {
            return self.long_field(name, value);
        };
        let index = match known_name(lower) {
            Known::ConnectionSpecific => return false,
            Known::Static(index) => index,
            Known::Other => 0,
        };
        let Some(value) = sendable_value(value) else {
            return false;
        };
        if index > 0 {
            integer(&mut self.bytes, LITERAL_WITHOUT_INDEXING, 4, index);
        } else {
            self.bytes.push(LITERAL_WITHOUT_INDEXING);
            string(&mut self.bytes, lower);
        }
        string(&mut self.bytes, &value);
        self.http1_size += (name.len() + 2 + value.len() + 2) as u64;
        true
    }

    /// A field whose name is longer than any the static table or the connection-specific
    /// ones have, or no token.
    #[cold]
    fn long_field(&mut self, name: &[u8], value: &[u8]) -> bool {
        if name.is_empty() || !name.iter().all(|&b| is_token_byte(b)) {
            return false;
        }
        let Some(value) = sendable_value(value) else {
            return false;
        };
        self.bytes.push(LITERAL_WITHOUT_INDEXING);
        integer(&mut self.bytes, 0, 7, name.len());
        self.bytes
            .extend(name.iter().map(|b| b.to_ascii_lowercase()));
        string(&mut self.bytes, &value);
        self.http1_size += (name.len() + 2 + value.len() + 2) as u64;
        true
    }

    /// Adds `content-length` with `length` in its canonical form.
    pub(super) fn content_length(&mut self, length: u64) {
        let mut digits = itoa::Buffer::new();
        self.field(b"content-length", digits.format(length).as_bytes());
    }

    pub(super) fn status(&self) -> u16 {
        self.status
    }

    pub(super) fn http1_size(&self) -> u64 {
        self.http1_size
    }

    /// The block, for the h2 crate (no copy, no allocation).
    pub(super) fn into_bytes(self) -> Vec<u8> {
        self.bytes
    }
}

/// Names up to this long are lowercased on the stack and looked up; longer ones are neither
/// in the static table (its longest, `access-control-allow-origin`, has 27 bytes) nor
/// connection-specific.
const NAME_ON_STACK: usize = 32;

/// `name` lowercased into `into`, if it fits and is a token (RFC 9110 section 5.6.2).
#[inline]
fn lowercase_token<'a>(name: &[u8], into: &'a mut [u8; NAME_ON_STACK]) -> Option<&'a [u8]> {
    if name.is_empty() || name.len() > NAME_ON_STACK {
        return None;
    }
    let mut token = true;
    for (to, &b) in into.iter_mut().zip(name) {
        token &= is_token_byte(b);
        *to = b.to_ascii_lowercase();
    }
    token.then_some(&into[..name.len()])
}

/// What a lowercased name is to this encoder.
enum Known {
    /// The static table's index of the name.
    Static(usize),
    /// One of the fields of one connection, which HTTP/2 does not carry (RFC 9113 section
    /// 8.2.2; `te` has no meaning in a response either).
    ConnectionSpecific,
    Other,
}

/// The static table's index of `lower`, or whether it is connection-specific.
fn known_name(lower: &[u8]) -> Known {
    match lower {
        b"connection" | b"keep-alive" | b"proxy-connection" | b"transfer-encoding" | b"upgrade"
        | b"te" => Known::ConnectionSpecific,
        _ => static_index(lower).map_or(Known::Other, Known::Static),
    }
}

/// `value` as it may go in HTTP/2: control bytes as spaces and trimmed (as before, when the
/// http crate refused them: `with_controls_as_spaces`); `None` when it holds CR, LF or NUL.
/// One pass over the bytes by table for the usual value, which has neither.
#[inline]
fn sendable_value(value: &[u8]) -> Option<std::borrow::Cow<'_, [u8]>> {
    let worst = value
        .iter()
        .fold(0u8, |worst, &b| worst | VALUE_BYTES[usize::from(b)]);
    match worst {
        0 => Some(std::borrow::Cow::Borrowed(value)),
        _ if worst & FORBIDDEN != 0 => None,
        _ => Some(with_controls_as_spaces(value)),
    }
}

/// What a byte is in a field value here: fine (0), a control sent as a space, or one that
/// leaves the field out.
const SPACED: u8 = 1;
const FORBIDDEN: u8 = 2;
const VALUE_BYTES: [u8; 256] = {
    let mut table = [0u8; 256];
    let mut b = 0;
    while b < 256 {
        table[b] = match b as u8 {
            b'\r' | b'\n' | 0 => FORBIDDEN,
            b'\t' => 0,
            c if c < 0x20 || c == 0x7f => SPACED,
            _ => 0,
        };
        b += 1;
    }
    table
};

/// An HPACK integer (RFC 7541 section 5.1) in a `prefix_bits` prefix after `first`'s bits.
#[inline]
fn integer(out: &mut Vec<u8>, first: u8, prefix_bits: u32, mut n: usize) {
    let max = (1usize << prefix_bits) - 1;
    if n < max {
        out.push(first | n as u8);
        return;
    }
    out.push(first | max as u8);
    n -= max;
    while n >= 128 {
        out.push((n % 128) as u8 | 0x80);
        n /= 128;
    }
    out.push(n as u8);
}

/// A string literal without Huffman coding (section 5.2): its length, then its bytes.
#[inline]
fn string(out: &mut Vec<u8>, bytes: &[u8]) {
    integer(out, 0, 7, bytes.len());
    out.extend_from_slice(bytes);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The fields an HPACK decoder reads from `block`: the h2 crate's decoder through its
    /// client, not here (it is private); this reads only what [`HeadBlock`] writes.
    fn decoded(block: &[u8]) -> Vec<(String, String)> {
        fn int(block: &mut &[u8], prefix_bits: u32) -> usize {
            let max = (1usize << prefix_bits) - 1;
            let mut n = usize::from(block[0]) & max;
            *block = &block[1..];
            if n == max {
                let mut shift = 0;
                loop {
                    let b = block[0];
                    *block = &block[1..];
                    n += usize::from(b & 0x7f) << shift;
                    shift += 7;
                    if b & 0x80 == 0 {
                        break;
                    }
                }
            }
            n
        }
        fn text(block: &mut &[u8]) -> String {
            assert_eq!(block[0] & 0x80, 0, "no Huffman coding");
            let len = int(block, 7);
            let (s, rest) = block.split_at(len);
            *block = rest;
            String::from_utf8_lossy(s).into_owned()
        }
        let statuses = ["200", "204", "206", "304", "400", "404", "500"];
        let mut block = block;
        let mut fields = Vec::new();
        while !block.is_empty() {
            if block[0] & 0x80 != 0 {
                let index = int(&mut block, 7);
                fields.push((":status".into(), statuses[index - 8].into()));
                continue;
            }
            assert_eq!(block[0] & 0xf0, 0, "a literal without indexing");
            let name = match int(&mut block, 4) {
                0 => text(&mut block),
                8 => ":status".into(),
                i => {
                    let (_, name) = STATIC_NAMES
                        .iter()
                        .find(|(at, _)| *at == i)
                        .expect("an index");
                    String::from_utf8_lossy(name).into_owned()
                }
            };
            fields.push((name, text(&mut block)));
        }
        fields
    }

    fn pairs(list: &[(&str, &str)]) -> Vec<(String, String)> {
        list.iter()
            .map(|(n, v)| (n.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn a_head_of_known_and_new_names() {
        let mut head = HeadBlock::new(200, 2);
        assert!(head.field(b"Content-Type", b"text/html"));
        assert!(head.field(b"X-Served-By", b"a\x01b"));
        assert!(!head.field(b"x-split", b"a\r\nb"));
        assert!(head.field(b"www-authenticate", b"Basic"));
        head.content_length(100);
        // "HTTP/1.1 200 OK\r\n" + fields + "\r\n"
        let http1 =
            17 + (12 + 2 + 9 + 2) + (11 + 2 + 3 + 2) + (16 + 2 + 5 + 2) + (14 + 2 + 3 + 2) + 2;
        assert_eq!(head.http1_size(), http1);
        assert_eq!(
            decoded(&head.into_bytes()),
            pairs(&[
                (":status", "200"),
                ("content-type", "text/html"),
                ("x-served-by", "a b"),
                ("www-authenticate", "Basic"),
                ("content-length", "100"),
            ])
        );
    }

    #[test]
    fn static_indexes_are_rfc_7541s() {
        // A few entries of Appendix A, by hand.
        for (name, index) in [
            (&b"accept-charset"[..], 15),
            (b"accept-ranges", 18),
            (b"cache-control", 24),
            (b"content-length", 28),
            (b"content-type", 31),
            (b"date", 33),
            (b"etag", 34),
            (b"last-modified", 44),
            (b"location", 46),
            (b"server", 54),
            (b"set-cookie", 55),
            (b"vary", 59),
            (b"www-authenticate", 61),
        ] {
            assert_eq!(static_index(name), Some(index), "{name:?}");
        }
        assert_eq!(STATIC_NAMES.len(), 47);
        assert_eq!(static_index(b"x-custom"), None);
        // A known name goes as its index: content-type is 0x0f 0x10 (15 + 16 = 31).
        let mut head = HeadBlock::new(200, 2);
        head.field(b"Content-Type", b"a");
        assert_eq!(&head.into_bytes()[..], [0x88, 0x0f, 0x10, 0x01, b'a']);
    }

    #[test]
    fn value_bytes_are_classed_as_the_fields_module_does() {
        for b in 0..=255u8 {
            let class = VALUE_BYTES[usize::from(b)];
            let forbidden = matches!(b, b'\r' | b'\n' | 0);
            assert_eq!(class == FORBIDDEN, forbidden, "{b:#x}");
            assert_eq!(
                class == SPACED,
                crate::http::fields::is_tolerated_control(b),
                "{b:#x}"
            );
        }
        assert_eq!(sendable_value(b" a\x7f ").as_deref(), Some(&b"a"[..]));
        assert_eq!(sendable_value(b"a\x00"), None);
    }

    #[test]
    fn statuses_outside_the_table_are_literals() {
        for status in [100u16, 200, 301, 404, 503, 599] {
            let block = HeadBlock::new(status, 0).into_bytes();
            assert_eq!(decoded(&block), pairs(&[(":status", &status.to_string())]));
        }
        // The static entry is one byte: 0x88 for 200.
        assert_eq!(&HeadBlock::new(200, 2).into_bytes()[..], [0x88]);
    }

    #[test]
    fn fields_http2_does_not_carry_are_left_out() {
        let mut head = HeadBlock::new(200, 2);
        for name in [
            &b"Connection"[..],
            b"keep-alive",
            b"Transfer-Encoding",
            b"upgrade",
            b"TE",
            b"proxy-connection",
            b"bad name",
            b"",
            b"x:y",
        ] {
            assert!(!head.field(name, b"v"), "{name:?}");
        }
        assert_eq!(decoded(&head.into_bytes()), pairs(&[(":status", "200")]));
    }

    #[test]
    fn long_names_and_values_use_continued_integers() {
        let name = "x-".to_string() + &"n".repeat(200);
        let value = "v".repeat(70_000);
        let mut head = HeadBlock::new(200, 2);
        assert!(head.field(name.as_bytes(), value.as_bytes()));
        assert_eq!(
            decoded(&head.into_bytes()),
            pairs(&[(":status", "200"), (&name, &value)])
        );
        // Section 5.1's example: 1337 in a 5-bit prefix is 31, 154, 10.
        let mut out = Vec::new();
        integer(&mut out, 0, 5, 1337);
        assert_eq!(out, [31, 154, 10]);
    }
}
