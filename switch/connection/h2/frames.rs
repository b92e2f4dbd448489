//! The frame headers of an HTTP/2 connection, seen as its bytes pass (RFC 9113 section 4.1),
//! for what the h2 crate neither limits nor shows:
//!
//! - on the way in, a budget of the frames a client can send for free ([`Frame::is_overhead`]):
//!   every frame but those that carry a request (HEADERS and CONTINUATION with a fragment or
//!   ending a block, DATA with data or ending a stream). So PING and SETTINGS with or without
//!   ACK, WINDOW_UPDATE, PRIORITY, PRIORITY_UPDATE (RFC 9218) and every other type the h2
//!   crate reads and ignores, RST_STREAM, GOAWAY, and DATA, HEADERS or CONTINUATION frames
//!   holding nothing but padding. A client that spends it gets `GOAWAY` with
//!   `ENHANCE_YOUR_CALM` ([`Budget`]), and nothing of the connection is read past the frame
//!   that spent it. The h2 crate bounds the memory of such floods (one pending PONG, one
//!   pending SETTINGS ACK, reset streams awaiting accept, small DATA frames, CONTINUATION); it
//!   does not bound the CPU they cost: it reads frames as long as the socket has some, so a
//!   flood of frames it ignores held the worker's thread for as long as the flood lasted
//!   (every other connection of the worker stalled), and each unsolicited PING ACK cost a log
//!   line besides (issue 42);
//! - on the way out, the `GOAWAY` frames sent and the streams reset for a protocol error, for
//!   `/stats` (`h2_goaways_sent`, `h2_protocol_errors`): counted as they leave, whichever part
//!   of the h2 crate decided them; and the DATA frames sent, which earn the client the
//!   WINDOW_UPDATEs that answer them.
//!
//! WINDOW_UPDATE is the one free frame an honest client sends in numbers: a client may answer
//! every DATA frame it reads with one for the stream and one for the connection (a 5 MiB
//! download in 16 KiB frames: 640), and a long download would spend any fixed budget. So each
//! DATA frame the switch sends credits the client [`WINDOW_UPDATES_PER_DATA`] WINDOW_UPDATEs,
//! spent before the budget's tokens: an honest download of any size is never cut, whatever
//! its pace, while a flood of WINDOW_UPDATEs without downloading spends the budget as any other
//! free frame does, and one with a download is bounded by the DATA frames the switch chose to
//! send (two per frame, a frame being far more work than two WINDOW_UPDATEs). The credit kept
//! is capped ([`WINDOW_CREDIT_CAP`]: the answers to 1000 frames, 16 MiB in flight at the
//! smallest frame size), so a long download does not bank a flood for later. Uploads need no
//! credit: a client answers the switch's WINDOW_UPDATEs with DATA, which carries data.
//!
//! Why by hand: a frame header is 9 bytes of fixed layout, and only headers are read here
//! (payloads are skipped, but for the 4 or 8 bytes that carry an error code and the byte that
//! gives a padded frame's padding).

use std::time::{Duration, Instant};

pub(super) const DATA: u8 = 0x0;
pub(super) const HEADERS: u8 = 0x1;
pub(super) const RST_STREAM: u8 = 0x3;
pub(super) const SETTINGS: u8 = 0x4;
pub(super) const GOAWAY: u8 = 0x7;
pub(super) const WINDOW_UPDATE: u8 = 0x8;
pub(super) const CONTINUATION: u8 = 0x9;

const END_STREAM: u8 = 0x1;
const END_HEADERS: u8 = 0x4;
const PADDED: u8 = 0x8;
/// HEADERS' flag for the 5 bytes of priority fields before the fragment.
const PRIORITY_FIELDS: u8 = 0x20;

/// A frame's header, the error code of a RST_STREAM or GOAWAY, and the padding of a padded
/// DATA or HEADERS.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Frame {
    pub kind: u8,
    pub flags: u8,
    pub len: u32,
    pub stream: u32,
    /// RST_STREAM's and GOAWAY's error code.
    pub code: Option<u32>,
    /// Bytes of a padded frame's payload that are padding: the Pad Length byte and the
    /// padding it names (0 for a frame without the PADDED flag).
    pub padding: u32,
    /// Where its header began: bytes of the direction before it (the preface included).
    pub start: u64,
}

impl Frame {
    /// A frame that carries no request: what a flood is made of (the module comment).
    pub(super) fn is_overhead(&self) -> bool {
        match self.kind {
            DATA => self.content_len() == 0 && self.flags & END_STREAM == 0,
            HEADERS | CONTINUATION => self.content_len() == 0 && self.flags & END_HEADERS == 0,
            _ => true,
        }
    }

    /// Bytes of a DATA frame's data or of a header block fragment: the payload less its
    /// padding and, for HEADERS, its priority fields.
    fn content_len(&self) -> u32 {
        let priority = match self.kind == HEADERS && self.flags & PRIORITY_FIELDS != 0 {
            true => 5,
            false => 0,
        };
        self.len
            .saturating_sub(self.padding)
            .saturating_sub(priority)
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
    /// The frame whose first payload bytes (an error code, a Pad Length) are being collected,
    /// its bytes so far, and how many it needs.
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
    /// completed (for RST_STREAM and GOAWAY, once their error code is in; for a padded frame,
    /// once its Pad Length is).
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
                    self.pending = None;
                    seen(&self.peeked(frame));
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

    /// `frame` with what its first payload bytes, now collected, say.
    fn peeked(&self, frame: Frame) -> Frame {
        match frame.kind {
            RST_STREAM | GOAWAY => {
                let at = self.peek_want - 4;
                let code = u32::from_be_bytes([
                    self.peek[at],
                    self.peek[at + 1],
                    self.peek[at + 2],
                    self.peek[at + 3],
                ]);
                Frame {
                    code: Some(code),
                    ..frame
                }
            }
            _ => Frame {
                padding: 1 + u32::from(self.peek[0]),
                ..frame
            },
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
            padding: 0,
            start: self.frame_start,
        };
        self.payload_left = frame.len;
        let want = match frame.kind {
            RST_STREAM => 4,
            GOAWAY => 8,
            DATA | HEADERS if frame.flags & PADDED != 0 => 1,
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

/// How many free frames ([`Frame::is_overhead`]) a client may send at once.
pub(super) const OVERHEAD_BURST: u32 = 1000;
/// How many more it may send each second after the burst.
pub(super) const OVERHEAD_PER_SECOND: u32 = 100;
/// The time that earns one more frame.
const TOKEN_INTERVAL: Duration = Duration::from_millis(1000 / OVERHEAD_PER_SECOND as u64);
/// WINDOW_UPDATEs each DATA frame sent lets the client send without spending the budget: one
/// for the stream, one for the connection.
pub(super) const WINDOW_UPDATES_PER_DATA: u32 = 2;
/// The most WINDOW_UPDATE credit a client keeps (the module comment).
pub(super) const WINDOW_CREDIT_CAP: u32 = OVERHEAD_BURST;

/// Where a budget reads the time: the monotonic clock, or a unit test's own.
pub(super) trait Clock {
    fn now(&self) -> Instant;
}

/// `Instant::now()`.
#[derive(Debug, Default)]
pub(super) struct Monotonic;

impl Clock for Monotonic {
    fn now(&self) -> Instant {
        Instant::now()
    }
}

/// A token bucket of free frames: a browser sends a handful per page (its SETTINGS and
/// SETTINGS ACK, a WINDOW_UPDATE that opens its connection window, a PRIORITY or a cancelled
/// image's RST_STREAM), a client keeping a connection alive a PING every few seconds; a flood
/// sends thousands at once. Beside it, the WINDOW_UPDATE credit earned by the DATA frames sent.
/// The clock is read only when the tokens are out.
#[derive(Debug)]
pub(super) struct Budget<C: Clock = Monotonic> {
    tokens: u32,
    /// When the tokens were last counted: the time since has not earned one yet.
    filled: Instant,
    window_credit: u32,
    clock: C,
}

impl Budget {
    pub(super) fn new() -> Budget {
        Budget::with_clock(Monotonic)
    }
}

impl<C: Clock> Budget<C> {
    pub(super) fn with_clock(clock: C) -> Budget<C> {
        Budget {
            tokens: OVERHEAD_BURST,
            filled: clock.now(),
            window_credit: 0,
            clock,
        }
    }

    /// Charges a frame the client sent; `false` when it is a free frame and none is left.
    pub(super) fn charge(&mut self, frame: &Frame) -> bool {
        if !frame.is_overhead() {
            return true;
        }
        if frame.kind == WINDOW_UPDATE && self.window_credit > 0 {
            self.window_credit -= 1;
            return true;
        }
        self.spend()
    }

    /// Spends one token (a free frame, or a stream the switch refused at once: h2.rs);
    /// `false` when none is left.
    pub(super) fn spend(&mut self) -> bool {
        if self.tokens == 0 {
            self.refill();
        }
        match self.tokens.checked_sub(1) {
            Some(left) => {
                self.tokens = left;
                true
            }
            None => false,
        }
    }

    /// The switch sent a DATA frame with data: the client may answer it.
    pub(super) fn data_sent(&mut self) {
        self.window_credit = (self.window_credit + WINDOW_UPDATES_PER_DATA).min(WINDOW_CREDIT_CAP);
    }

    /// Adds a token per [`TOKEN_INTERVAL`] since `filled`, up to the burst; the remainder of an
    /// interval is kept for the next time (a client paced just under the rate is never cut).
    fn refill(&mut self) {
        let now = self.clock.now();
        let elapsed = now.saturating_duration_since(self.filled);
        let earned = elapsed.as_nanos() / TOKEN_INTERVAL.as_nanos();
        let room = OVERHEAD_BURST - self.tokens;
        if earned >= u128::from(room) {
            self.tokens = OVERHEAD_BURST;
            self.filled = now;
        } else {
            // Below `room`, so within u32.
            let earned = earned as u32;
            self.tokens += earned;
            self.filled += TOKEN_INTERVAL * earned;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;
    use std::rc::Rc;

    const PRIORITY: u8 = 0x2;
    const PING: u8 = 0x6;
    const ACK: u8 = 0x1;

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
    fn frames_are_seen_across_any_split_with_their_error_codes_and_padding() {
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
        // Padded DATA: Pad Length 4, 2 bytes of data, 4 of padding.
        bytes.extend(header(DATA, PADDED, 7, 3));
        bytes.extend([4, b'o', b'k', 0, 0, 0, 0]);
        let whole = frames_in(&bytes, 24, bytes.len());
        let kinds: Vec<(u8, Option<u32>, u32)> =
            whole.iter().map(|f| (f.kind, f.code, f.padding)).collect();
        assert_eq!(
            kinds,
            [
                (SETTINGS, None, 0),
                (RST_STREAM, Some(8), 0),
                (DATA, None, 0),
                (GOAWAY, Some(11), 0),
                (PING, None, 0),
                (DATA, None, 5)
            ]
        );
        assert_eq!(whole[1].stream, 5);
        assert_eq!((whole[0].start, whole[1].start), (24, 24 + 9 + 6));
        assert_eq!(whole[5].content_len(), 2);
        for step in 1..12 {
            assert_eq!(frames_in(&bytes, 24, step), whole, "in pieces of {step}");
        }
    }

    fn frame(kind: u8, flags: u8, len: u32) -> Frame {
        Frame {
            kind,
            flags,
            len,
            stream: 1,
            code: None,
            padding: 0,
            start: 0,
        }
    }

    #[test]
    fn every_frame_but_those_carrying_a_request_is_overhead() {
        let padded = |kind, flags, len, padding| Frame {
            padding,
            ..frame(kind, flags | PADDED, len)
        };
        let free = [
            ("PING", frame(PING, 0, 8)),
            ("PING ACK", frame(PING, ACK, 8)),
            ("SETTINGS", frame(SETTINGS, 0, 0)),
            ("SETTINGS ACK", frame(SETTINGS, ACK, 0)),
            ("WINDOW_UPDATE", frame(WINDOW_UPDATE, 0, 4)),
            ("PRIORITY", frame(PRIORITY, 0, 5)),
            ("PRIORITY_UPDATE", frame(0x10, 0, 7)),
            ("an unknown type", frame(0xfa, 0, 100)),
            ("RST_STREAM", frame(RST_STREAM, 0, 4)),
            ("GOAWAY", frame(GOAWAY, 0, 8)),
            ("empty DATA", frame(DATA, 0, 0)),
            ("DATA of padding only", padded(DATA, 0, 200, 200)),
            ("empty CONTINUATION", frame(CONTINUATION, 0, 0)),
            ("empty HEADERS", frame(HEADERS, 0, 0)),
            (
                "HEADERS of priority fields only",
                frame(HEADERS, PRIORITY_FIELDS, 5),
            ),
            ("HEADERS of padding only", padded(HEADERS, 0, 9, 9)),
        ];
        for (what, f) in free {
            assert!(f.is_overhead(), "{what}");
        }
        let carrying = [
            ("DATA with data", frame(DATA, 0, 1)),
            ("empty DATA ending the stream", frame(DATA, END_STREAM, 0)),
            ("padded DATA with data", padded(DATA, 0, 200, 199)),
            ("HEADERS ending a block", frame(HEADERS, END_HEADERS, 0)),
            (
                "HEADERS with a fragment",
                frame(HEADERS, PRIORITY_FIELDS, 6),
            ),
            ("CONTINUATION with a fragment", frame(CONTINUATION, 0, 1)),
            (
                "CONTINUATION ending a block",
                frame(CONTINUATION, END_HEADERS, 0),
            ),
        ];
        for (what, f) in carrying {
            assert!(!f.is_overhead(), "{what}");
        }
    }

    /// A clock the test moves.
    #[derive(Clone)]
    struct Manual(Rc<Cell<Instant>>);

    impl Clock for Manual {
        fn now(&self) -> Instant {
            self.0.get()
        }
    }

    impl Manual {
        fn advance(&self, by: Duration) {
            self.0.set(self.0.get() + by);
        }
    }

    fn manual_budget() -> (Budget<Manual>, Manual) {
        let clock = Manual(Rc::new(Cell::new(Instant::now())));
        (Budget::with_clock(clock.clone()), clock)
    }

    /// How many of `n` charges of `f` pass.
    fn passed(budget: &mut Budget<Manual>, f: Frame, n: u32) -> u32 {
        (0..n).filter(|_| budget.charge(&f)).count() as u32
    }

    #[test]
    fn the_budget_allows_a_burst_then_the_rate() {
        let (mut budget, clock) = manual_budget();
        let ping = frame(PING, 0, 8);
        assert_eq!(
            passed(&mut budget, ping, 5 * OVERHEAD_BURST),
            OVERHEAD_BURST
        );
        // 50 ms: 5 more; 9 ms more, none; 1 ms more, one (the 9 ms were kept).
        clock.advance(Duration::from_millis(50));
        assert_eq!(passed(&mut budget, ping, 1000), OVERHEAD_PER_SECOND / 20);
        clock.advance(Duration::from_millis(9));
        assert_eq!(passed(&mut budget, ping, 1000), 0);
        clock.advance(Duration::from_millis(1));
        assert_eq!(passed(&mut budget, ping, 1000), 1);
        // An hour: the burst again, no more.
        clock.advance(Duration::from_secs(3600));
        assert_eq!(
            passed(&mut budget, ping, 5 * OVERHEAD_BURST),
            OVERHEAD_BURST
        );
        // Frames that carry requests are never charged.
        assert_eq!(passed(&mut budget, frame(DATA, 0, 1), 10_000), 10_000);
    }

    #[test]
    fn a_flood_gets_the_burst_and_the_rate_however_it_is_paced() {
        // A frame every millisecond for 20 s: the burst, then 100 a second.
        let (mut budget, clock) = manual_budget();
        let mut passed = 0;
        for _ in 0..20_000 {
            clock.advance(Duration::from_millis(1));
            passed += u32::from(budget.charge(&frame(PING, ACK, 8)));
        }
        assert_eq!(passed, OVERHEAD_BURST + 20 * OVERHEAD_PER_SECOND);
        // A client paced at the rate after its burst is never refused.
        let (mut budget, clock) = manual_budget();
        assert_eq!(passed_all(&mut budget, OVERHEAD_BURST), OVERHEAD_BURST);
        for _ in 0..10_000 {
            clock.advance(TOKEN_INTERVAL);
            assert!(budget.charge(&frame(WINDOW_UPDATE, 0, 4)));
        }
    }

    fn passed_all(budget: &mut Budget<Manual>, n: u32) -> u32 {
        passed(budget, frame(SETTINGS, 0, 6), n)
    }

    #[test]
    fn data_sent_earns_window_updates_up_to_a_cap() {
        let (mut budget, _clock) = manual_budget();
        let update = frame(WINDOW_UPDATE, 0, 4);
        // A download of 10 000 DATA frames, each answered by two WINDOW_UPDATEs: never cut,
        // and the budget's tokens untouched.
        for _ in 0..10_000 {
            budget.data_sent();
            assert_eq!(passed(&mut budget, update, WINDOW_UPDATES_PER_DATA), 2);
        }
        assert_eq!(budget.tokens, OVERHEAD_BURST);
        // Credit banked by a long download is capped; past it, the tokens.
        for _ in 0..10_000 {
            budget.data_sent();
        }
        assert_eq!(
            passed(&mut budget, update, 10 * WINDOW_CREDIT_CAP),
            WINDOW_CREDIT_CAP + OVERHEAD_BURST
        );
        // The credit is for WINDOW_UPDATE only.
        let (mut budget, _clock) = manual_budget();
        for _ in 0..10_000 {
            budget.data_sent();
        }
        assert_eq!(
            passed(&mut budget, frame(PING, ACK, 8), 5000),
            OVERHEAD_BURST
        );
    }
}
