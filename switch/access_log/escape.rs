//! How what the client sent is written so that it cannot forge or hide anything (see the
//! access log's documentation): `\\xHH` escapes between the double quotes of the text and
//! combined lines, ASCII JSON strings.

use std::fmt;

/// Whether a byte of what the client sent is written `\\xHH` between double quotes: `"` and
/// `\\` (a target could end the quotes and forge the fields after them), control bytes, and
/// every byte from 0x80, as nginx's log escaping does (no character beyond ASCII reaches a log
/// viewer: see the module's documentation).
pub(super) fn escaped(b: u8) -> bool {
    matches!(b, b'"' | b'\\' | 0..0x20 | 0x7f..=0xff)
}

const HEX_UPPER: &[u8; 16] = b"0123456789ABCDEF";

/// Bytes to be written between double quotes, escaped: [`escaped`] bytes as `\\xHH` (upper
/// case, as nginx writes them), the rest as it is. The output is ASCII.
pub(super) struct Quoted<'a>(pub(super) &'a [u8]);

impl fmt::Display for Quoted<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let bytes = self.0;
        let mut plain = 0;
        for (at, &b) in bytes.iter().enumerate() {
            if escaped(b) {
                // What is not escaped is printable ASCII: always UTF-8.
                f.write_str(std::str::from_utf8(&bytes[plain..at]).map_err(|_| fmt::Error)?)?;
                let hex = [
                    b'\\',
                    b'x',
                    HEX_UPPER[usize::from(b >> 4)],
                    HEX_UPPER[usize::from(b & 0xf)],
                ];
                f.write_str(std::str::from_utf8(&hex).map_err(|_| fmt::Error)?)?;
                plain = at + 1;
            }
        }
        f.write_str(std::str::from_utf8(&bytes[plain..]).map_err(|_| fmt::Error)?)
    }
}

/// `bytes` escaped as [`Quoted`] writes them, onto a line.
pub(super) fn push_quoted(out: &mut Vec<u8>, bytes: &[u8]) {
    let mut plain = 0;
    for (at, &b) in bytes.iter().enumerate() {
        if escaped(b) {
            out.extend_from_slice(&bytes[plain..at]);
            out.extend_from_slice(&[
                b'\\',
                b'x',
                HEX_UPPER[usize::from(b >> 4)],
                HEX_UPPER[usize::from(b & 0xf)],
            ]);
            plain = at + 1;
        }
    }
    out.extend_from_slice(&bytes[plain..]);
}

/// `text` as a JSON string in ASCII: quotes, backslashes and control characters escaped, every
/// character beyond ASCII as `\\uXXXX` (two, a surrogate pair, beyond U+FFFF), and each byte
/// sequence that is not UTF-8 as `\\ufffd`. Raw, U+2028 and U+2029 end lines for JavaScript
/// and some viewers, and bidirectional controls (U+202E) turn text around on screen; escaped,
/// a JSON parser still gives the request back as sent.
pub(super) fn json_string(out: &mut Vec<u8>, text: &[u8]) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let unit = |out: &mut Vec<u8>, u: u16| {
        out.extend_from_slice(b"\\u");
        for shift in [12, 8, 4, 0] {
            out.push(HEX[usize::from((u >> shift) & 0xf)]);
        }
    };
    out.push(b'"');
    for chunk in text.utf8_chunks() {
        for c in chunk.valid().chars() {
            match c {
                '"' => out.extend_from_slice(b"\\\""),
                '\\' => out.extend_from_slice(b"\\\\"),
                '\n' => out.extend_from_slice(b"\\n"),
                '\r' => out.extend_from_slice(b"\\r"),
                '\t' => out.extend_from_slice(b"\\t"),
                '\u{8}' => out.extend_from_slice(b"\\b"),
                '\u{c}' => out.extend_from_slice(b"\\f"),
                ' '..='~' => out.push(c as u8),
                _ => {
                    let mut units = [0u16; 2];
                    for &u in c.encode_utf16(&mut units).iter() {
                        unit(out, u);
                    }
                }
            }
        }
        if !chunk.invalid().is_empty() {
            unit(out, 0xfffd);
        }
    }
    out.push(b'"');
}
