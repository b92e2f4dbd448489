//! A response body compressed on its way: a [`ResponseBody`] over the server's (or over what
//! was read ahead of a slow client), whose parts are the compressed bytes. The sink frames
//! them as it frames any body of unknown length (chunked for HTTP/1.1, DATA for HTTP/2); the
//! server's trailers follow the compressed data.

use super::encoder::{memory_bound, Encoder};
use super::{Coding, Compression, Levels, Offer};
use crate::buffering::BufferLease;
use crate::exchange::server::{H1Wire, ResponseBody};
use crate::http::part::{BodyPart, Trailers};
use crate::relay::RelayError;
use crate::state::stats::{self, ServiceStats};

/// The body of one compressed response.
pub(crate) struct Compressing<'c, R> {
    inner: &'c mut R,
    encoder: Encoder,
    /// The compressed bytes given last.
    out: Vec<u8>,
    /// The server's trailers, kept while the coding's last bytes go first.
    trailers: Vec<u8>,
    next: Next,
    /// Flush the encoder whenever the server makes the next part wait (a stream of unknown
    /// length: what the server sent must reach the client without waiting for more).
    flush_on_wait: bool,
    stats: &'c ServiceStats,
    /// The encoder's share of `compress_memory`, given back when the body is dropped.
    _memory: BufferLease<'c>,
}

/// What the next call gives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Next {
    /// More of the server's body.
    Body,
    /// The server's trailers (kept), then the end.
    Trailers,
    /// The end, once the server's body gives its own (its data is all in).
    InnerEnd,
    /// The end (the server's body gave its own).
    End,
    /// The end was given.
    Done,
}

/// How one response is compressed: its coding at the service's levels, the body's length
/// when its head says it, the service's counters, and the encoder's share of
/// `compress_memory`, held until the body ends.
pub(crate) struct Compressor<'c> {
    coding: Coding,
    levels: Levels,
    length: Option<u64>,
    stats: &'c ServiceStats,
    memory: BufferLease<'c>,
}

impl<'c> Compressor<'c> {
    /// The encoder for a response decided compressible (decide.rs) with `offer`, whose body
    /// is `length` long if known; `None` when the client takes no coding, or when
    /// `compress_memory` has no room for the encoder (counted as `compress_skipped`): the
    /// response then goes as it is. Counted as `compressed` otherwise.
    pub(crate) fn take(
        offer: Offer<'c>,
        compression: Compression,
        length: Option<u64>,
    ) -> Option<Self> {
        let coding = compression.coding?;
        let levels = offer.config.levels;
        let mut memory = BufferLease::new(offer.memory);
        if !memory.grow(memory_bound(coding, levels)) {
            stats::bump(&offer.stats.compress_skipped);
            return None;
        }
        stats::bump(&offer.stats.compressed);
        Some(Compressor {
            coding,
            levels,
            length,
            stats: offer.stats,
            memory,
        })
    }

    /// `inner`'s parts compressed.
    pub(crate) fn over<R: ResponseBody>(
        self,
        inner: &'c mut R,
    ) -> std::io::Result<Compressing<'c, R>> {
        Ok(Compressing {
            inner,
            encoder: Encoder::new(self.coding, self.levels, self.length)?,
            out: Vec::new(),
            trailers: Vec::new(),
            next: Next::Body,
            flush_on_wait: self.length.is_none(),
            stats: self.stats,
            _memory: self.memory,
        })
    }
}

impl<R: ResponseBody> Compressing<'_, R> {
    /// Takes what the encoder has made into `out`; whether there is any.
    fn take_output(&mut self) -> bool {
        self.out.clear();
        std::mem::swap(&mut self.out, self.encoder.output());
        stats::add(&self.stats.compress_bytes_out, self.out.len() as u64);
        !self.out.is_empty()
    }

    /// The server's body has ended (`trailers` follow or not): the coding's end.
    fn end_coding(&mut self, then: Next) -> Result<(), RelayError> {
        self.encoder.finish().map_err(RelayError::Read)?;
        self.next = then;
        Ok(())
    }

    /// Feeds the server's next part to the encoder; whether compressed bytes are ready.
    async fn feed(&mut self) -> Result<bool, RelayError> {
        match self.inner.next_part().await? {
            BodyPart::Data(data) => {
                stats::add(&self.stats.compress_bytes_in, data.len() as u64);
                self.encoder.write(data).map_err(RelayError::Read)?;
                if self.inner.finished() {
                    // A body of known length is all here: no trailers can follow.
                    self.end_coding(Next::InnerEnd)?;
                } else if self.flush_on_wait && !self.inner.has_buffered() {
                    self.encoder.flush().map_err(RelayError::Read)?;
                }
            }
            BodyPart::Trailers(Trailers(fields)) => {
                self.trailers.clear();
                self.trailers.extend_from_slice(fields);
                self.end_coding(Next::Trailers)?;
            }
            BodyPart::End => self.end_coding(Next::End)?,
        }
        Ok(self.take_output())
    }
}

impl<R: ResponseBody> ResponseBody for Compressing<'_, R> {
    async fn next_part(&mut self) -> Result<BodyPart<'_>, RelayError> {
        loop {
            match self.next {
                Next::Body => {
                    if self.feed().await? {
                        return Ok(BodyPart::Data(&self.out));
                    }
                }
                Next::Trailers => {
                    // The server's trailers: the inner source gives only its end after them.
                    if !matches!(self.inner.next_part().await?, BodyPart::End) {
                        return Err(RelayError::Truncated);
                    }
                    self.next = Next::End;
                    return Ok(BodyPart::Trailers(Trailers(&self.trailers)));
                }
                Next::InnerEnd => {
                    if !matches!(self.inner.next_part().await?, BodyPart::End) {
                        return Err(RelayError::Truncated);
                    }
                    self.next = Next::Done;
                    return Ok(BodyPart::End);
                }
                Next::End => {
                    self.next = Next::Done;
                    return Ok(BodyPart::End);
                }
                Next::Done => return Ok(BodyPart::End),
            }
        }
    }

    /// Only the end follows the coding's last bytes (trailers are not the end).
    fn finished(&self) -> bool {
        matches!(self.next, Next::InnerEnd | Next::End | Next::Done)
    }

    fn has_buffered(&self) -> bool {
        self.next != Next::Body || self.inner.has_buffered()
    }

    /// Part by part: the bytes change on the way.
    fn h1_wire(&mut self) -> Option<H1Wire<'_>> {
        None
    }
}
