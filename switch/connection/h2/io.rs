//! The client connection as the h2 crate reads and writes it: tokio's `AsyncRead` and
//! `AsyncWrite` over the switch's own readiness-driven stream (tls/stream.rs, TLS or
//! not), with the frames of both directions watched on the way (frames.rs).

use super::frames::{self, Budget, Frame, Scanner};
use crate::state::stats::{self, ServiceStats};
use crate::stream::{Io, Then};
use crate::tls::stream::ClientStream;
use std::io::{self, IoSlice};
use std::pin::Pin;
use std::sync::atomic::{AtomicU32, Ordering};
use std::task::{ready, Context, Poll};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// Bytes of the client's connection preface: where its first frame begins.
const PREFACE_LEN: u64 = super::PREFACE.len() as u64;

/// RST_STREAM and GOAWAY error codes (RFC 9113 section 7).
const NO_ERROR: u32 = 0x0;
pub(super) const PROTOCOL_ERROR: u32 = 0x1;
const FLOW_CONTROL_ERROR: u32 = 0x3;
const STREAM_CLOSED: u32 = 0x5;
const FRAME_SIZE_ERROR: u32 = 0x6;
const COMPRESSION_ERROR: u32 = 0x9;
const ENHANCE_YOUR_CALM: u32 = 0xb;

/// What the connection's driver learns from its I/O: the client spent its budget of free
/// frames (`ENHANCE_YOUR_CALM`), or its preface was not followed by SETTINGS
/// (`PROTOCOL_ERROR`). Either way nothing more is read, and the driver ends the connection
/// with GOAWAY and that code. An atomic, though the I/O and the driver run in one task: both
/// hold it by reference, and the task must be `Send`.
#[derive(Debug, Default)]
pub(super) struct Alarm {
    /// The GOAWAY error code, 0 while nothing is wrong (NO_ERROR is never an alarm).
    code: AtomicU32,
}

impl Alarm {
    /// The error code the connection is to end with, if the alarm was raised.
    pub(super) fn raised(&self) -> Option<u32> {
        match self.code.load(Ordering::Relaxed) {
            NO_ERROR => None,
            code => Some(code),
        }
    }

    /// The first alarm stands: the frame that raised it is the one the client is told about.
    fn raise(&self, code: u32) {
        let _ = self
            .code
            .compare_exchange(NO_ERROR, code, Ordering::Relaxed, Ordering::Relaxed);
    }
}

pub(super) struct H2Io<'c> {
    stream: &'c ClientStream,
    /// Bytes read before HTTP/2 began (a plain connection's preface), handed over first.
    early: Vec<u8>,
    early_at: usize,
    inbound: Scanner,
    outbound: Scanner,
    budget: Budget,
    alarm: &'c Alarm,
    stats: &'c ServiceStats,
    shut_down: bool,
    /// The alarm was raised and the driver woken to see it.
    alarm_seen: bool,
}

impl<'c> H2Io<'c> {
    pub(super) fn new(
        stream: &'c ClientStream,
        early: Vec<u8>,
        alarm: &'c Alarm,
        stats: &'c ServiceStats,
    ) -> H2Io<'c> {
        H2Io {
            stream,
            early,
            early_at: 0,
            inbound: Scanner::new(PREFACE_LEN as usize),
            outbound: Scanner::new(0),
            budget: Budget::new(),
            alarm,
            stats,
            shut_down: false,
            alarm_seen: false,
        }
    }

    /// Checks that the client's first frame is SETTINGS and charges its free frames to its
    /// budget; returns how many of `bytes` the h2 crate may have: all, or those before the
    /// frame that raised the alarm (the rest is never read, so the budget bounds the frames
    /// handled, whatever the size of a read, and a frame before SETTINGS is never answered).
    fn received(&mut self, bytes: &[u8]) -> usize {
        let base = self.inbound.position();
        let (budget, alarm) = (&mut self.budget, self.alarm);
        let mut cut: Option<u64> = None;
        self.inbound.scan(bytes, &mut |frame: &Frame| {
            // RFC 9113 section 3.4: the preface is followed by SETTINGS, anything else is a
            // connection error of type PROTOCOL_ERROR. The h2 crate does not check it (it
            // answered a PING sent first), so it never sees such a frame.
            if frame.start == PREFACE_LEN && frame.kind != frames::SETTINGS {
                alarm.raise(PROTOCOL_ERROR);
                cut.get_or_insert(frame.start);
            } else if !budget.charge(frame) {
                alarm.raise(ENHANCE_YOUR_CALM);
                cut.get_or_insert(frame.start);
            }
        });
        cut.map_or(bytes.len(), |start| start.saturating_sub(base) as usize)
    }

    /// Nothing more for a flooding client: the driver, the task polling here, is woken once
    /// to see the alarm (no socket readiness would wake it now); it sends GOAWAY and closes.
    fn read_no_more(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        if !self.alarm_seen {
            self.alarm_seen = true;
            cx.waker().wake_by_ref();
        }
        Poll::Pending
    }

    /// Counts the GOAWAYs and the protocol errors that leave, and credits the client the
    /// WINDOW_UPDATEs that may answer the DATA frames that leave.
    fn sent(&mut self, parts: &[IoSlice<'_>], mut n: usize) {
        let (stats, budget) = (self.stats, &mut self.budget);
        let mut count = |frame: &Frame| match (frame.kind, frame.code) {
            (frames::DATA, _) if frame.len > 0 => budget.data_sent(),
            (frames::GOAWAY, code) => {
                stats::bump(&stats.h2_goaways_sent);
                if code.is_some_and(|code| code != NO_ERROR) {
                    stats::bump(&stats.h2_protocol_errors);
                }
            }
            (
                frames::RST_STREAM,
                Some(
                    PROTOCOL_ERROR | FLOW_CONTROL_ERROR | STREAM_CLOSED | FRAME_SIZE_ERROR
                    | COMPRESSION_ERROR | ENHANCE_YOUR_CALM,
                ),
            ) => stats::bump(&stats.h2_protocol_errors),
            _ => {}
        };
        for part in parts {
            if n == 0 {
                break;
            }
            let taken = part.len().min(n);
            self.outbound.scan(&part[..taken], &mut count);
            n -= taken;
        }
    }
}

impl AsyncRead for H2Io<'_> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if this.alarm.raised().is_some() {
            return this.read_no_more(cx);
        }
        if this.early_at < this.early.len() {
            let n = (this.early.len() - this.early_at).min(buf.remaining());
            let early = std::mem::take(&mut this.early);
            let piece = &early[this.early_at..this.early_at + n];
            let pass = this.received(piece);
            buf.put_slice(&piece[..pass]);
            this.early_at += n;
            // Handed over whole: freed, not kept for the connection's life.
            if this.early_at < early.len() {
                this.early = early;
            }
            if pass == 0 {
                return this.read_no_more(cx);
            }
            return Poll::Ready(Ok(()));
        }
        loop {
            // SAFETY: `try_recv` only writes into the slice (recv(2), or rustls copying
            // plaintext) and reports how many bytes it wrote; no byte of it is read before
            // `assume_init` below covers exactly those. Zeroing the spare room first, as
            // `initialize_unfilled` would, cost a tenth of an HTTP/2 request's user-space
            // instructions (the h2 crate hands over an uninitialised buffer on every read).
            let spare = unsafe {
                let unfilled = buf.unfilled_mut();
                std::slice::from_raw_parts_mut(unfilled.as_mut_ptr().cast::<u8>(), unfilled.len())
            };
            match this.stream.try_recv(spare) {
                // A read of 0 is the end of the stream: passed on as such.
                Ok(n) => {
                    let pass = this.received(&spare[..n]);
                    if n > 0 && pass == 0 {
                        return this.read_no_more(cx);
                    }
                    // SAFETY: the first `n` bytes of the unfilled part were just written
                    // (`pass` is at most `n`).
                    unsafe { buf.assume_init(pass) };
                    buf.advance(pass);
                    return Poll::Ready(Ok(()));
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    ready!(this.stream.poll_read_ready(cx))?;
                }
                Err(e) => return Poll::Ready(Err(e)),
            }
        }
    }
}

impl AsyncWrite for H2Io<'_> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.poll_write_vectored(cx, &[IoSlice::new(buf)])
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        parts: &[IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let n = ready!(this.stream.poll_send(cx, parts, Then::Push))?;
        this.sent(parts, n);
        Poll::Ready(Ok(n))
    }

    fn is_write_vectored(&self) -> bool {
        true
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.stream.poll_flush(cx, Then::Push)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        this.stream.poll_shutdown(cx, &mut this.shut_down)
    }
}
