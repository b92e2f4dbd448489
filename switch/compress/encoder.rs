//! One response's encoder, whichever the coding: bytes in, compressed bytes out into a buffer
//! the caller takes from, a flush when the server pauses, and the coding's end.

use super::{Coding, Levels};
use std::io::{self, Write};

/// The encoder of one response.
pub(crate) struct Encoder {
    kind: Kind,
    /// What the encoder gave back when it ended (brotli's and zstd's writers are consumed).
    ended: Vec<u8>,
}

enum Kind {
    Gzip(flate2::write::GzEncoder<Vec<u8>>),
    /// `None` once ended. Boxed: the encoder's state is large, and most responses are not
    /// compressed with it.
    Brotli(Option<Box<brotli::CompressorWriter<Vec<u8>>>>),
    Zstd(Option<zstd::stream::write::Encoder<'static, Vec<u8>>>),
}

/// The smallest and largest brotli window, in bits: a body known to be small gets a window
/// its size, one of unknown length 256 KiB (most pages are smaller). The window decides the
/// encoder's memory: [`memory_bound`].
const BROTLI_WINDOW_BITS: (u32, u32) = (16, 18);
/// The same for zstd (its level 3 default is 2 MiB, which a response rarely needs, and which
/// takes 0.75 MiB more per encoder).
const ZSTD_WINDOW_BITS: (u32, u32) = (10, 18);
/// brotli's staging buffer between its encoder and the output.
const BROTLI_BUFFER: usize = 4096;

impl Encoder {
    /// An encoder for `coding` at the service's `levels`; `length`, when the response says it,
    /// sizes the window and tables to the body.
    pub(crate) fn new(coding: Coding, levels: Levels, length: Option<u64>) -> io::Result<Self> {
        let kind = match coding {
            Coding::Gzip => Kind::Gzip(flate2::write::GzEncoder::new(
                Vec::new(),
                flate2::Compression::new(levels.gzip),
            )),
            Coding::Brotli => {
                let (least, most) = BROTLI_WINDOW_BITS;
                let bits = length.map_or(most, |n| bits_for(n).clamp(least, most));
                Kind::Brotli(Some(Box::new(brotli::CompressorWriter::new(
                    Vec::new(),
                    BROTLI_BUFFER,
                    levels.brotli,
                    bits,
                ))))
            }
            Coding::Zstd => {
                let mut encoder = zstd::stream::write::Encoder::new(Vec::new(), levels.zstd)?;
                let (least, most) = ZSTD_WINDOW_BITS;
                let bits = length.map_or(most, |n| bits_for(n).clamp(least, most));
                encoder.window_log(bits)?;
                if let Some(n) = length {
                    // Tables sized to the body too (the length is then in the frame).
                    encoder.set_pledged_src_size(Some(n))?;
                }
                Kind::Zstd(Some(encoder))
            }
        };
        Ok(Encoder {
            kind,
            ended: Vec::new(),
        })
    }

    /// Compresses `data` (output may stay inside the encoder until more comes).
    pub(crate) fn write(&mut self, data: &[u8]) -> io::Result<()> {
        match &mut self.kind {
            Kind::Gzip(e) => e.write_all(data),
            Kind::Brotli(Some(e)) => e.write_all(data),
            Kind::Zstd(Some(e)) => e.write_all(data),
            Kind::Brotli(None) | Kind::Zstd(None) => Err(ended()),
        }
    }

    /// Everything written so far out of the encoder, decodable as it is (the coding's sync
    /// flush): for a server that pauses in the middle of a stream.
    pub(crate) fn flush(&mut self) -> io::Result<()> {
        match &mut self.kind {
            Kind::Gzip(e) => e.flush(),
            Kind::Brotli(Some(e)) => e.flush(),
            Kind::Zstd(Some(e)) => e.flush(),
            Kind::Brotli(None) | Kind::Zstd(None) => Ok(()),
        }
    }

    /// Ends the coding: the rest of the output and the coding's trailer.
    pub(crate) fn finish(&mut self) -> io::Result<()> {
        match &mut self.kind {
            Kind::Gzip(e) => e.try_finish(),
            Kind::Brotli(e) => {
                if let Some(e) = e.take() {
                    // Its end is written as the writer is taken apart.
                    self.ended = e.into_inner();
                }
                Ok(())
            }
            Kind::Zstd(e) => {
                if let Some(e) = e.take() {
                    self.ended = e.finish()?;
                }
                Ok(())
            }
        }
    }

    /// The compressed bytes not yet taken; the caller takes them (clears what it sent).
    pub(crate) fn output(&mut self) -> &mut Vec<u8> {
        match &mut self.kind {
            Kind::Gzip(e) => e.get_mut(),
            Kind::Brotli(Some(e)) => e.get_mut(),
            Kind::Zstd(Some(e)) => e.get_mut(),
            Kind::Brotli(None) | Kind::Zstd(None) => &mut self.ended,
        }
    }
}

/// The most memory one encoder of `coding` at `levels` takes, charged to `compress_memory`
/// while it works: measured peaks (Rust allocations counted; zstd's own context size as
/// libzstd reports it), with the largest window the encoder is given, rounded up, plus the
/// output buffer. Levels past the table's are refused by the rule file (brotli 5 and more took
/// 8 to 38 MiB, zstd 9 and more 11 to 84 MiB: BENCHMARKS.md).
pub(crate) fn memory_bound(coding: Coding, levels: Levels) -> u64 {
    const KIB: u64 = 1024;
    let encoder = match coding {
        // zlib-rs's state and flate2's staging buffer: 428 KiB at every level.
        Coding::Gzip => 448 * KIB,
        // Window 256 KiB, text: 176 KiB at 0, 192 at 1, 2029 at 2, 2106 at 3, 3000 at 4; an
        // attacker's review measured more on bodies that hardly compress, of known length (no
        // flushes): 3.1 to 3.5 MiB at 2, 3.8 at 4 (RSS of 200 encoders).
        Coding::Brotli => match levels.brotli {
            0 | 1 => 512 * KIB,
            2 | 3 => 4096 * KIB,
            _ => 4608 * KIB,
        },
        // Window 256 KiB: 1081 KiB at 1, 1273 at 2, 1785 at 3, 3065 at 4, 3577 at 5 and 6
        // (the review's RSS: 1.75 MiB at 3, 3.5 at 6), with a margin.
        Coding::Zstd => match levels.zstd {
            ..=1 => 1280 * KIB,
            2 => 1536 * KIB,
            3 => 2048 * KIB,
            4 => 3584 * KIB,
            _ => 4096 * KIB,
        },
    };
    // The compressed output of one part, at most about the part's size.
    encoder + 64 * KIB
}

fn ended() -> io::Error {
    io::Error::other("the compressed body had already ended")
}

/// The bits of a window that holds `n` bytes.
fn bits_for(n: u64) -> u32 {
    u64::BITS - n.saturating_sub(1).leading_zeros()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;

    fn decode(coding: Coding, bytes: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        match coding {
            Coding::Gzip => flate2::read::GzDecoder::new(bytes).read_to_end(&mut out),
            Coding::Brotli => brotli::Decompressor::new(bytes, 4096).read_to_end(&mut out),
            Coding::Zstd => {
                zstd::stream::read::Decoder::new(bytes).and_then(|mut d| d.read_to_end(&mut out))
            }
        }
        .expect("decodes");
        out
    }

    fn text(n: usize) -> Vec<u8> {
        (0..n)
            .map(|i| b"<p>tcpvs compresses text, </p>\n"[i % 31])
            .collect()
    }

    #[test]
    fn each_coding_round_trips_in_pieces_with_flushes() {
        let body = text(100_000);
        for coding in [Coding::Gzip, Coding::Brotli, Coding::Zstd] {
            for length in [None, Some(body.len() as u64)] {
                let mut encoder = Encoder::new(coding, Levels::default(), length).unwrap();
                let mut wire = Vec::new();
                for (i, piece) in body.chunks(7_000).enumerate() {
                    encoder.write(piece).unwrap();
                    if i % 3 == 0 {
                        encoder.flush().unwrap();
                    }
                    wire.append(encoder.output());
                }
                encoder.finish().unwrap();
                wire.append(encoder.output());
                assert_eq!(decode(coding, &wire), body, "{coding:?} {length:?}");
                assert!(wire.len() < body.len() / 10, "{coding:?}: {}", wire.len());
            }
        }
    }

    #[test]
    fn a_flush_makes_what_was_written_decodable_before_the_end() {
        let body = text(62_155);
        for coding in [Coding::Gzip, Coding::Brotli, Coding::Zstd] {
            let mut encoder = Encoder::new(coding, Levels::default(), None).unwrap();
            for piece in body.chunks(16_000) {
                encoder.write(piece).unwrap();
            }
            encoder.flush().unwrap();
            let so_far = std::mem::take(encoder.output());
            // A streaming decoder gives back all of it without the end.
            let mut got = vec![0; body.len()];
            let read = match coding {
                Coding::Gzip => flate2::read::GzDecoder::new(&so_far[..]).read_exact(&mut got),
                Coding::Brotli => brotli::Decompressor::new(&so_far[..], 4096).read_exact(&mut got),
                Coding::Zstd => zstd::stream::read::Decoder::new(&so_far[..])
                    .and_then(|mut d| d.read_exact(&mut got)),
            };
            read.unwrap_or_else(|e| panic!("{coding:?}: {e}"));
            assert_eq!(got, body, "{coding:?}");
        }
    }

    #[test]
    fn window_bits_fit_the_length() {
        assert_eq!(bits_for(1), 0);
        assert_eq!(bits_for(1024), 10);
        assert_eq!(bits_for(1025), 11);
        assert_eq!(bits_for(u64::MAX), 64);
    }
}
