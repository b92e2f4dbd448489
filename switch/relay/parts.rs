//! An HTTP/1 body turned into [`BodyPart`]s and back, for the sides of an exchange that speak
//! HTTP/1 to a side of another protocol: [`PartReader`] reads a body framed by Content-Length,
//! chunked or the close, [`put_part`] frames a part for the wire. Between two HTTP/1 ends the
//! body does not come this way: it moves as it came (mod.rs, splice.rs).

use super::RelayError;
use crate::buffer::IoBuf;
use crate::http::chunked::{put_trailers, ChunkedDecoder, Decoded};
use crate::http::part::{BodyPart, Trailers};
use crate::http::BodyFraming;
use crate::relay::push_hex;
use crate::stream::{read_some, Io, TimeLimit};

/// Where the reading of a body stands.
enum Reading {
    /// This many bytes still to come.
    Length(u64),
    Chunked {
        decoder: ChunkedDecoder,
        /// The last chunk and its trailers were given: the end comes next.
        ended: bool,
    },
    /// Until the sender closes.
    UntilClose,
    /// The end was given.
    Done,
}

/// An HTTP/1 body read part by part from a source, starting with what its buffer holds. It
/// keeps only where the reading stands: the source and its buffer are lent to each call. A
/// part lends bytes of the buffer; they are consumed when the next part is asked for (or
/// [`PartReader::release`]).
pub struct PartReader {
    reading: Reading,
    /// Bytes at the front of the buffer that are not the body's, or that the last part lent.
    lent: usize,
}

impl PartReader {
    /// A body framed as `framing` says, which begins after the first `skip` bytes of the
    /// buffer (a head still in it).
    pub fn new(framing: BodyFraming, skip: usize) -> Self {
        let reading = match framing {
            BodyFraming::Empty => Reading::Done,
            BodyFraming::Length(n) => Reading::Length(n),
            BodyFraming::Chunked => Reading::Chunked {
                decoder: ChunkedDecoder::new(),
                ended: false,
            },
            BodyFraming::UntilClose => Reading::UntilClose,
        };
        PartReader {
            reading,
            lent: skip,
        }
    }

    /// The rest of a chunked body from where `decoder` stands (its first part was read
    /// before: a request body held by the switch); a done decoder gives its trailers, if any,
    /// then the end.
    pub fn resume_chunked(decoder: ChunkedDecoder) -> Self {
        PartReader {
            reading: Reading::Chunked {
                decoder,
                ended: false,
            },
            lent: 0,
        }
    }

    /// Consumes what the last part lent.
    pub fn release(&mut self, buf: &mut IoBuf) {
        buf.consume(std::mem::take(&mut self.lent));
    }

    /// Whether the body's data has all been given (only its end, or trailers, follows).
    pub fn finished(&self) -> bool {
        matches!(self.reading, Reading::Length(0) | Reading::Done)
    }

    /// Whether more of the body is already read (the next part comes without waiting): for
    /// a chunked body, data or its end, not only framing (a sink that gathers parts while
    /// more is here would otherwise hold the last data of a pausing stream).
    pub fn has_buffered(&self, buf: &IoBuf) -> bool {
        match &self.reading {
            Reading::Chunked { ended: true, .. } => true,
            Reading::Chunked { decoder, .. } => buf
                .filled()
                .get(self.lent..)
                .is_some_and(|rest| decoder.gives_at_once(rest)),
            _ => buf.len() > self.lent,
        }
    }

    /// The next part of the body, read from `src` into `buf` when what `buf` holds is not
    /// enough; each read waits `limit` at most.
    pub async fn next_part<'a>(
        &'a mut self,
        src: &impl Io,
        buf: &'a mut IoBuf,
        limit: TimeLimit,
    ) -> Result<BodyPart<'a>, RelayError> {
        self.release(buf);
        match self.reading {
            Reading::Done => Ok(BodyPart::End),
            Reading::Length(0) => {
                self.reading = Reading::Done;
                Ok(BodyPart::End)
            }
            Reading::Length(left) => {
                if buf.is_empty() && read(src, buf, limit).await? == 0 {
                    return Err(RelayError::Truncated);
                }
                let n = (buf.len() as u64).min(left) as usize;
                self.reading = Reading::Length(left - n as u64);
                self.lent = n;
                Ok(BodyPart::Data(&buf.filled()[..n]))
            }
            Reading::UntilClose => {
                if buf.is_empty() && read(src, buf, limit).await? == 0 {
                    self.reading = Reading::Done;
                    return Ok(BodyPart::End);
                }
                self.lent = buf.len();
                Ok(BodyPart::Data(buf.filled()))
            }
            Reading::Chunked { .. } => self.next_chunk(src, buf, limit).await,
        }
    }

    async fn next_chunk<'a>(
        &'a mut self,
        src: &impl Io,
        buf: &'a mut IoBuf,
        limit: TimeLimit,
    ) -> Result<BodyPart<'a>, RelayError> {
        loop {
            let Reading::Chunked { decoder, ended } = &mut self.reading else {
                return Ok(BodyPart::End);
            };
            if *ended {
                self.reading = Reading::Done;
                return Ok(BodyPart::End);
            }
            let (used, decoded) = decoder.decode(buf.filled()).map_err(RelayError::Framing)?;
            match decoded {
                Decoded::Data(range) => {
                    self.lent = used;
                    return Ok(BodyPart::Data(&buf.filled()[range]));
                }
                Decoded::End => {
                    buf.consume(used);
                    if decoder.trailers().is_empty() {
                        self.reading = Reading::Done;
                        return Ok(BodyPart::End);
                    }
                    *ended = true;
                    return Ok(self.trailers());
                }
                Decoded::NeedMore => {
                    buf.consume(used);
                    if read(src, buf, limit).await? == 0 {
                        return Err(RelayError::Truncated);
                    }
                }
            }
        }
    }

    /// The trailers of a chunked body that ended with some.
    fn trailers(&self) -> BodyPart<'_> {
        match &self.reading {
            Reading::Chunked { decoder, .. } => BodyPart::Trailers(Trailers(decoder.trailers())),
            _ => BodyPart::End,
        }
    }
}

/// Reads once more into `buf` (made room for first if it is full).
async fn read(src: &impl Io, buf: &mut IoBuf, limit: TimeLimit) -> Result<usize, RelayError> {
    if buf.spare_len() == 0 {
        buf.make_room_for_body();
    }
    read_some(src, buf, limit).await.map_err(RelayError::Read)
}

/// How parts are framed on an HTTP/1 wire.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PartFraming {
    /// As they are: the length was announced, or the close ends the body; trailers go.
    Raw,
    /// In chunks, the trailers in the last one.
    Chunked,
}

/// Appends `part` to `out` as `framing` puts it on the wire (nothing for the end of a raw
/// body; a chunked body's end once, with its trailers or without: `ended` says it went
/// already). Empty data sends no chunk (that would end the body).
pub fn put_part(out: &mut Vec<u8>, part: BodyPart<'_>, framing: PartFraming, ended: &mut bool) {
    match (part, framing) {
        (BodyPart::Data(data), PartFraming::Raw) => out.extend_from_slice(data),
        (BodyPart::Data(data), PartFraming::Chunked) if !data.is_empty() => {
            push_hex(out, data.len());
            out.extend_from_slice(b"\r\n");
            out.extend_from_slice(data);
            out.extend_from_slice(b"\r\n");
        }
        (BodyPart::Trailers(trailers), PartFraming::Chunked) if !*ended => {
            out.extend_from_slice(b"0\r\n");
            put_trailers(out, trailers.0);
            out.extend_from_slice(b"\r\n");
            *ended = true;
        }
        (BodyPart::End, PartFraming::Chunked) if !*ended => {
            out.extend_from_slice(b"0\r\n\r\n");
            *ended = true;
        }
        _ => {}
    }
}
