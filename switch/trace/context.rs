//! The W3C trace context of a request (<https://www.w3.org/TR/trace-context/>): the client's
//! `traceparent` read, and the one the server gets written. The switch is one hop of the
//! trace: the server sees the client's trace id and flags with the switch's own span id as its
//! parent (section 3.2.2.4: "the ID of this request as known by the caller"), and the span the
//! switch exports has the client's span id as its parent. A field that does not parse is as if
//! absent (section 3.4: "If the vendor failed to parse traceparent, it ... creates a new
//! traceparent"): a new trace starts here.

use super::ids;

/// The length of a version-00 value: `00-` 32 hex `-` 16 hex `-` 2 hex.
const VERSION_00_LEN: usize = 55;

/// The trace context of one request as the switch carries it on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TraceContext {
    pub trace_id: [u8; 16],
    /// The switch's own span for this request: the parent-id the server sees.
    pub span_id: [u8; 8],
    /// The client's span (its `traceparent`'s parent-id), `None` when the trace starts here.
    pub parent_span_id: Option<[u8; 8]>,
    /// The trace flags as the client sent them (01: sampled), or 01 for a new trace.
    pub flags: u8,
}

impl TraceContext {
    /// The context for a request whose `traceparent` field values are `given` (none, one, or
    /// several): kept with a new span id when exactly one was sent and it parses, else a new
    /// trace (several values are invalid: section 3.2.1 has one field).
    pub fn continue_or_start(given: Option<&[u8]>, fields_seen: usize) -> TraceContext {
        let parsed = given.filter(|_| fields_seen == 1).and_then(parse);
        match parsed {
            Some((trace_id, parent, flags)) => TraceContext {
                trace_id,
                span_id: ids::span_id(),
                parent_span_id: Some(parent),
                // Version 00 defines `sampled` alone; the other bits are zeroed on the way
                // (section 3.2.2.5), so no client sets a future flag for every hop after.
                flags: flags & 0x01,
            },
            None => TraceContext {
                trace_id: ids::trace_id(),
                span_id: ids::span_id(),
                parent_span_id: None,
                // Sampled: a trace the switch starts is one it exports, so the servers after
                // it should record theirs.
                flags: 0x01,
            },
        }
    }

    /// The `traceparent` value the server gets: always version 00 (section 3.2.4.2: a vendor
    /// that reads a higher version sends the version it knows).
    pub fn traceparent(&self) -> [u8; VERSION_00_LEN] {
        let mut value = *b"00-________________________________-________________-__";
        ids::write_hex(&self.trace_id, &mut value[3..35]);
        ids::write_hex(&self.span_id, &mut value[36..52]);
        ids::write_hex(&[self.flags], &mut value[53..55]);
        value
    }
}

/// Trace id, parent id and flags of a valid `traceparent` value, else `None` (section 3.2.2):
/// lowercase hex only, version `ff` invalid, an all-zero trace or parent id invalid; version 00
/// exactly 55 bytes; a later version at least 55, with `-` after them if longer (its further
/// fields are not ours to read).
pub fn parse(value: &[u8]) -> Option<([u8; 16], [u8; 8], u8)> {
    let value = value.trim_ascii();
    if value.len() < VERSION_00_LEN {
        return None;
    }
    let version = hex_byte(value.get(0..2)?)?;
    let fits = match version {
        0xff => false,
        0x00 => value.len() == VERSION_00_LEN,
        _ => value.len() == VERSION_00_LEN || value.get(VERSION_00_LEN) == Some(&b'-'),
    };
    if !fits || value[2] != b'-' || value[35] != b'-' || value[52] != b'-' {
        return None;
    }
    let mut trace_id = [0u8; 16];
    hex_into(&value[3..35], &mut trace_id)?;
    let mut parent = [0u8; 8];
    hex_into(&value[36..52], &mut parent)?;
    let flags = hex_byte(&value[53..55])?;
    if trace_id == [0; 16] || parent == [0; 8] {
        return None;
    }
    Some((trace_id, parent, flags))
}

/// Decodes lowercase hex `text` into `out` (twice its length); `None` on any other byte.
fn hex_into(text: &[u8], out: &mut [u8]) -> Option<()> {
    for (pair, byte) in text.chunks_exact(2).zip(out.iter_mut()) {
        *byte = hex_byte(pair)?;
    }
    Some(())
}

fn hex_byte(pair: &[u8]) -> Option<u8> {
    let digit = |c: u8| match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        _ => None,
    };
    match pair {
        [high, low] => Some(digit(*high)? << 4 | digit(*low)?),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GIVEN: &[u8] = b"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

    #[test]
    fn a_valid_value_parses() {
        let (trace_id, parent, flags) = parse(GIVEN).expect("valid");
        assert_eq!(trace_id[..4], [0x4b, 0xf9, 0x2f, 0x35]);
        assert_eq!(parent, [0x00, 0xf0, 0x67, 0xaa, 0x0b, 0xa9, 0x02, 0xb7]);
        assert_eq!(flags, 1);
    }

    #[test]
    fn invalid_values_do_not_parse() {
        let text = std::str::from_utf8(GIVEN).unwrap_or_default();
        let invalid = [
            &text[..54],                                               // short
            &format!("{text}0"),                                       // long for 00
            &text.replace("4bf9", "4BF9"),                             // uppercase
            &text.replace("4bf9", "4bfx"),                             // not hex
            &text.replacen("00-", "ff-", 1),                           // version ff
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01", // zero trace
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01", // zero parent
            "00_4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", // separator
            &format!("01-{}x", &text[3..]),                            // later version, no '-'
        ];
        for value in invalid {
            assert_eq!(parse(value.as_bytes()), None, "{value}");
        }
        // A later version may carry more fields after a '-'.
        assert!(parse(format!("01-{}-more", &text[3..]).as_bytes()).is_some());
    }

    #[test]
    fn a_kept_trace_gets_a_new_span_id() {
        let context = TraceContext::continue_or_start(Some(GIVEN), 1);
        let (trace_id, parent, _) = parse(GIVEN).expect("valid");
        assert_eq!(context.trace_id, trace_id);
        assert_eq!(context.parent_span_id, Some(parent));
        assert_ne!(context.span_id, parent);
        let out = context.traceparent();
        assert!(out.starts_with(b"00-4bf92f3577b34da6a3ce929d0e0e4736-"));
        assert!(out.ends_with(b"-01"));
        assert_eq!(parse(&out).map(|(_, span, _)| span), Some(context.span_id));
    }

    #[test]
    fn a_missing_invalid_or_repeated_value_starts_a_trace() {
        for (given, seen) in [(None, 0), (Some(&b"junk"[..]), 1), (Some(GIVEN), 2)] {
            let context = TraceContext::continue_or_start(given, seen);
            assert_eq!(context.parent_span_id, None);
            assert_eq!(context.flags, 1);
            assert_ne!(context.trace_id[..4], [0x4b, 0xf9, 0x2f, 0x35]);
        }
    }
}
