//! The frame headers of an HTTP/2 connection, seen as its bytes pass (RFC 9113 section 4.1),
//! for what the h2 crate neither limits nor shows:
//!
//! - on the way in, a budget of frames that cost the switch work and carry no request (PING,
//!   SETTINGS, PRIORITY, RST_STREAM, empty DATA and header fragments): a client that spends it
//!   gets `GOAWAY` with `ENHANCE_YOUR_CALM` ([`Budget`]). The h2 crate bounds the memory of such
//!   floods (one pending PONG, one pending SETTINGS ACK, reset streams awaiting accept, small
//!   DATA frames, CONTINUATION); it does not bound the CPU they cost, nor Rapid Reset once a
//!   stream was accepted;
//! - on the way out, the `GOAWAY` frames sent and the streams reset for a protocol error, for
//!   `/stats` (`h2_goaways_sent`, `h2_protocol_errors`): counted as they leave, whichever part
//!   of the h2 crate decided them.
//!
//! Why by hand: a frame header is 9 bytes of fixed layout, and only headers are read here
//! (payloads are skipped, but for the 4 or 8 bytes that carry an error code).

use std::time::Instant;

pub(super) const DATA: u8 = 0x0;
pub(super) const HEADERS: u8 = 0x1;
pub(super) const PRIORITY: u8 = 0x2;
pub(super) const RST_STREAM: u8 = 0x3;
pub(super) const SETTINGS: u8 = 0x4;
pub(super) const PING: u8 = 0x6;
pub(super) const GOAWAY: u8 = 0x7;
pub(super) const CONTINUATION: u8 = 0x9;

const END_STREAM: u8 = 0x1;
const ACK: u8 = 0x1;
const END_HEADERS: u8 = 0x4;

/// A frame's header, and the error code of a RST_STREAM or GOAWAY.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Frame {
    pub kind: u8,
    pub flags: u8,
    pub len: u32,
    pub stream: u32,
    /// RST_STREAM's and GOAWAY's error code.
    pub code: Option<u32>,
    /// Where its header began: bytes of the direction before it (the preface included).
    pub start: u64,
}

impl Frame {
    /// A frame that costs the receiver work and carries no request: what a flood is made of.
    pub(super) fn is_overhead(&self) -> bool {
        match self.kind {
            PING | SETTINGS => self.flags & ACK == 0,
            PRIORITY | RST_STREAM => true,
            DATA => self.len == 0 && self.flags & END_STREAM == 0,
            HEADERS | CONTINUATION => self.len == 0 && self.flags & END_HEADERS == 0,
            _ => false,
        }
    }
}

/// Follows the frames of one direction across reads or writes of any size.
#[derive(Debug)]
pub(super) struct Scanner {
    /// Bytes of the client's connection preface still to pass (24, inbound; 0, outbound).
    preface_left: usize,
    header: [u8; 9],
    header_have: usize,
    payload_left: u32,
    /// The frame whose error code is being collected, its bytes so far, and how many it needs.
    pending: Option<Frame>,
    peek: [u8; 8],
    peek_have: usize,
    peek_want: usize,
    /// Bytes scanned so far, and where the frame whose header is being read began.
    position: u64,
    frame_start: u64,
}

impl Scanner {
    /// A scanner that first lets `preface` bytes pass.
    pub(super) fn new(preface: usize) -> Scanner {
        Scanner {
            preface_left: preface,
            header: [0; 9],
            header_have: 0,
            payload_left: 0,
            pending: None,
            peek: [0; 8],
            peek_have: 0,
            peek_want: 0,
            position: 0,
            frame_start: 0,
        }
    }

    /// Bytes scanned so far.
    pub(super) fn position(&self) -> u64 {
        self.position
    }

    /// Reads `bytes`, the next of the direction, calling `seen` for each frame header
    /// completed (for RST_STREAM and GOAWAY, once their error code is in).
    pub(super) fn scan(&mut self, mut bytes: &[u8], seen: &mut impl FnMut(&Frame)) {
        while !bytes.is_empty() {
            let n;
            if self.preface_left > 0 {
                n = self.preface_left.min(bytes.len());
                self.preface_left -= n;
            } else if let Some(frame) = self.pending {
                n = (self.peek_want - self.peek_have).min(bytes.len());
                self.peek[self.peek_have..self.peek_have + n].copy_from_slice(&bytes[..n]);
                self.peek_have += n;
                self.payload_left -= n as u32;
                if self.peek_have == self.peek_want {
                    let at = self.peek_want - 4;
                    let code = u32::from_be_bytes([
                        self.peek[at],
                        self.peek[at + 1],
                        self.peek[at + 2],
                        self.peek[at + 3],
                    ]);
                    self.pending = None;
                    seen(&Frame {
                        code: Some(code),
                        ..frame
                    });
                }
            } else if self.payload_left > 0 {
                n = (self.payload_left as usize).min(bytes.len());
                self.payload_left -= n as u32;
            } else {
                if self.header_have == 0 {
                    self.frame_start = self.position;
                }
                n = (9 - self.header_have).min(bytes.len());
                self.header[self.header_have..self.header_have + n].copy_from_slice(&bytes[..n]);
                self.header_have += n;
                if self.header_have == 9 {
                    self.header_have = 0;
                    self.frame_header_complete(seen);
                }
            }
            bytes = &bytes[n..];
            self.position += n as u64;
        }
    }

    fn frame_header_complete(&mut self, seen: &mut impl FnMut(&Frame)) {
        let h = &self.header;
        let frame = Frame {
            kind: h[3],
            flags: h[4],
            len: u32::from_be_bytes([0, h[0], h[1], h[2]]),
            stream: u32::from_be_bytes([h[5], h[6], h[7], h[8]]) & 0x7fff_ffff,
            code: None,
            start: self.frame_start,
        };
        self.payload_left = frame.len;
        let want = match frame.kind {
            RST_STREAM => 4,
            GOAWAY => 8,
            _ => 0,
        };
        if want > 0 && frame.len as usize >= want {
            self.pending = Some(frame);
            self.peek_have = 0;
            self.peek_want = want;
        } else {
            seen(&frame);
        }
    }
}

/// How many overhead frames ([`Frame::is_overhead`]) a client may send at once.
pub(super) const OVERHEAD_BURST: u32 = 1000;
/// How many more it may send each second after the burst.
pub(super) const OVERHEAD_PER_SECOND: u32 = 100;

/// A token bucket of overhead frames: a browser sends a handful per page (its SETTINGS, a
/// PRIORITY or a cancelled image's RST_STREAM), a client keeping a connection alive a PING every
/// few seconds; a flood sends thousands at once.
#[derive(Debug)]
pub(super) struct Budget {
    tokens: u32,
    /// When tokens were last added.
    filled: Instant,
}

impl Budget {
    pub(super) fn new() -> Budget {
        Budget {
            tokens: OVERHEAD_BURST,
            filled: Instant::now(),
        }
    }

    /// Spends one token; `false` when none is left.
    pub(super) fn spend(&mut self) -> bool {
        if self.tokens == 0 {
            self.refill(Instant::now());
        }
        match self.tokens.checked_sub(1) {
            Some(left) => {
                self.tokens = left;
                true
            }
            None => false,
        }
    }

    fn refill(&mut self, now: Instant) {
        let elapsed_ms = now.saturating_duration_since(self.filled).as_millis();
        let earned = elapsed_ms * u128::from(OVERHEAD_PER_SECOND) / 1000;
        if earned > 0 {
            self.tokens = (u128::from(self.tokens) + earned).min(u128::from(OVERHEAD_BURST)) as u32;
            self.filled = now;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header(kind: u8, flags: u8, len: u32, stream: u32) -> Vec<u8> {
        let mut h = len.to_be_bytes()[1..].to_vec();
        h.push(kind);
        h.push(flags);
        h.extend_from_slice(&stream.to_be_bytes());
        h
    }

    fn frames_in(bytes: &[u8], preface: usize, step: usize) -> Vec<Frame> {
        let mut scanner = Scanner::new(preface);
        let mut seen = Vec::new();
        for piece in bytes.chunks(step) {
            scanner.scan(piece, &mut |f: &Frame| seen.push(*f));
        }
        seen
    }

    #[test]
    fn frames_are_seen_across_any_split_with_their_error_codes() {
        let mut bytes = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec();
        bytes.extend(header(SETTINGS, 0, 6, 0));
        bytes.extend([0, 3, 0, 0, 0, 100]);
        bytes.extend(header(RST_STREAM, 0, 4, 5));
        bytes.extend(8u32.to_be_bytes());
        bytes.extend(header(DATA, 1, 3, 1));
        bytes.extend(b"abc");
        bytes.extend(header(GOAWAY, 0, 10, 0));
        bytes.extend(7u32.to_be_bytes());
        bytes.extend(11u32.to_be_bytes());
        bytes.extend(b"hi");
        bytes.extend(header(PING, 0, 8, 0));
        bytes.extend([0; 8]);
        let whole = frames_in(&bytes, 24, bytes.len());
        let kinds: Vec<(u8, Option<u32>)> = whole.iter().map(|f| (f.kind, f.code)).collect();
        assert_eq!(
            kinds,
            [
                (SETTINGS, None),
                (RST_STREAM, Some(8)),
                (DATA, None),
                (GOAWAY, Some(11)),
                (PING, None)
            ]
        );
        assert_eq!(whole[1].stream, 5);
        assert_eq!((whole[0].start, whole[1].start), (24, 24 + 9 + 6));
        for step in 1..12 {
            assert_eq!(frames_in(&bytes, 24, step), whole, "in pieces of {step}");
        }
    }

    #[test]
    fn overhead_is_what_carries_no_request() {
        let frame = |kind, flags, len| Frame {
            kind,
            flags,
            len,
            stream: 1,
            code: None,
            start: 0,
        };
        assert!(frame(PING, 0, 8).is_overhead());
        assert!(!frame(PING, ACK, 8).is_overhead());
        assert!(frame(SETTINGS, 0, 0).is_overhead());
        assert!(!frame(SETTINGS, ACK, 0).is_overhead());
        assert!(frame(DATA, 0, 0).is_overhead());
        assert!(!frame(DATA, END_STREAM, 0).is_overhead());
        assert!(!frame(DATA, 0, 1).is_overhead());
        assert!(frame(CONTINUATION, 0, 0).is_overhead());
        assert!(!frame(HEADERS, END_HEADERS, 0).is_overhead());
        assert!(frame(RST_STREAM, 0, 4).is_overhead());
    }

    #[test]
    fn the_budget_allows_a_burst_then_a_rate() {
        let mut budget = Budget::new();
        for _ in 0..OVERHEAD_BURST {
            assert!(budget.spend());
        }
        assert!(!budget.spend());
        let later = budget.filled + std::time::Duration::from_millis(50);
        budget.refill(later);
        assert_eq!(budget.tokens, OVERHEAD_PER_SECOND / 20);
        let much_later = later + std::time::Duration::from_secs(3600);
        budget.refill(much_later);
        assert_eq!(budget.tokens, OVERHEAD_BURST);
    }
}
