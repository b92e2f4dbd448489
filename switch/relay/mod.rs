//! Moving message bodies from one socket to the other: by Content-Length (spliced from the
//! threshold up), chunked (decoded, checked and re-framed), until close, and tunnels after an
//! upgrade.

pub mod parts;
pub mod splice;

use crate::buffer::IoBuf;
use crate::http::chunked::{ChunkError, ChunkedDecoder, Decoded};
use crate::relay::splice::{splice_between, PipeLease};
use crate::stream::{read_some, send_all, write_all, write_both, Io, Then, TimeLimit};
use std::io;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Why a body could not be moved completely.
#[derive(Debug)]
pub enum RelayError {
    /// The sending side closed before the body ended.
    Truncated,
    /// Reading from the sending side failed or timed out.
    Read(io::Error),
    /// Writing to the receiving side failed or timed out.
    Write(io::Error),
    /// The chunked framing is invalid.
    Framing(ChunkError),
}

impl std::fmt::Display for RelayError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RelayError::Truncated => f.write_str("peer closed before the end of the body"),
            RelayError::Read(e) => write!(f, "read: {e}"),
            RelayError::Write(e) => write!(f, "write: {e}"),
            RelayError::Framing(e) => write!(f, "{e}"),
        }
    }
}

/// Bytes delivered so far, readable while a move is still running (tunnel watchdog, stats).
#[derive(Debug, Default)]
pub struct Meter(AtomicU64);

impl Meter {
    pub fn add(&self, n: u64) {
        self.0.fetch_add(n, Ordering::Relaxed);
    }

    pub fn get(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

/// How bodies move.
#[derive(Clone, Copy, Debug)]
pub struct RelaySettings {
    pub idle: Duration,
    /// Bodies of at least this many bytes are spliced; `None`: always copy.
    pub splice_from: Option<u64>,
}

impl RelaySettings {
    fn limit(&self) -> TimeLimit {
        TimeLimit::Idle(self.idle)
    }
}

/// One body on its way from `src` to `dst`, starting with the bytes already read into `buf`
/// (bytes past the body stay in `buf`, or in `src`), moved as `settings` say and counted in
/// `meter` as they arrive. Built by the caller for each body, then moved by its framing:
/// [`BodyRelay::length`], [`BodyRelay::chunked`], [`BodyRelay::until_close`].
pub struct BodyRelay<'m, S, D> {
    pub src: &'m S,
    pub buf: &'m mut IoBuf,
    pub dst: &'m D,
    pub settings: &'m RelaySettings,
    pub meter: &'m Meter,
}

impl<S: Io, D: Io> BodyRelay<'_, S, D> {
    /// Moves a body of exactly `len` bytes (spliced from the threshold up).
    ///
    /// `head` (a response head, or nothing) goes out first, in the same write as the body
    /// bytes already read; it is not counted by the meter. `last` says what follows the last
    /// bytes when they are copied (see [`Then`]): `More` when the connection is shut down right
    /// after, so the FIN leaves with them; a spliced body is always pushed.
    pub async fn length(&mut self, head: &[u8], len: u64, last: Then) -> Result<(), RelayError> {
        let (src, dst, settings, meter) = (self.src, self.dst, self.settings, self.meter);
        let buf = &mut *self.buf;
        let mut left = len;
        let buffered = (buf.len() as u64).min(left) as usize;
        if buffered > 0 || !head.is_empty() {
            let then = then_after(buffered, left, buf, last);
            write_both(dst, head, &buf.filled()[..buffered], then, settings.limit())
                .await
                .map_err(RelayError::Write)?;
            buf.consume(buffered);
            meter.add(buffered as u64);
            left -= buffered as u64;
        }
        if left == 0 {
            return Ok(());
        }
        if settings.splice_from.is_some_and(|from| len >= from) {
            // Only between plain TCP sockets: TLS bytes must be decrypted or encrypted here.
            if let (Some(from), Some(to)) = (src.spliceable(), dst.spliceable()) {
                if let Ok(mut pipe) = PipeLease::take() {
                    splice_between(&mut pipe, from, to, Some(left), settings.limit(), meter)
                        .await?;
                    return Ok(());
                }
            }
            // No pipe (descriptor limit), or TLS: the copy path below still works.
        }
        while left > 0 {
            if read_some(src, buf, settings.limit())
                .await
                .map_err(RelayError::Read)?
                == 0
            {
                return Err(RelayError::Truncated);
            }
            let n = (buf.len() as u64).min(left) as usize;
            send_all(
                dst,
                &buf.filled()[..n],
                then_after(n, left, buf, last),
                settings.limit(),
            )
            .await
            .map_err(RelayError::Write)?;
            buf.consume(n);
            meter.add(n as u64);
            left -= n as u64;
        }
        Ok(())
    }
}

/// What follows writing `n` bytes of `buf` when `left` bytes of the body remain: `last` after
/// the final bytes; before that MSG_MORE only while the source fills the whole buffer (more is
/// surely waiting), since a source that pauses must not have its bytes held back (up to
/// 200 ms) waiting for more.
fn then_after(n: usize, left: u64, buf: &IoBuf, last: Then) -> Then {
    if n as u64 == left {
        last
    } else {
        Then::more_if(buf.spare_len() == 0)
    }
}

/// Re-framing of a chunked body.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ChunkedOutput {
    /// Sent on chunked, with canonical chunk lines and the trailer fields.
    Chunked,
    /// Sent decoded (to an HTTP/1.0 client, delimited by close); trailers are dropped.
    Decoded,
}

/// Output is written once this much has gathered, to bound memory per connection.
const CHUNK_FLUSH_BYTES: usize = 32 * 1024;

impl<S: Io, D: Io> BodyRelay<'_, S, D> {
    /// Moves a chunked body, checking its framing on the way.
    ///
    /// `out` is the output buffer, reused between calls. What it holds on entry (a response
    /// head, or nothing) goes out with the first body bytes and is not counted by the meter.
    pub async fn chunked(
        &mut self,
        output: ChunkedOutput,
        out: &mut Vec<u8>,
    ) -> Result<(), RelayError> {
        self.chunked_from(ChunkedDecoder::new(), output, out).await
    }

    /// [`BodyRelay::chunked`] from where `decoder` stands: the rest of a body whose first part
    /// was read before (a request body held by the switch).
    pub async fn chunked_from(
        &mut self,
        mut decoder: ChunkedDecoder,
        output: ChunkedOutput,
        out: &mut Vec<u8>,
    ) -> Result<(), RelayError> {
        let (src, dst, settings, meter) = (self.src, self.dst, self.settings, self.meter);
        let buf = &mut *self.buf;
        let mut unmetered = out.len();
        loop {
            loop {
                let (used, decoded) = decoder.decode(buf.filled()).map_err(RelayError::Framing)?;
                match decoded {
                    Decoded::Data(range) => {
                        let data = &buf.filled()[range];
                        if output == ChunkedOutput::Chunked {
                            push_hex(out, data.len());
                            out.extend_from_slice(b"\r\n");
                            out.extend_from_slice(data);
                            out.extend_from_slice(b"\r\n");
                        } else {
                            out.extend_from_slice(data);
                        }
                        buf.consume(used);
                        if out.len() >= CHUNK_FLUSH_BYTES {
                            flush(dst, out, &mut unmetered, settings, meter).await?;
                        }
                    }
                    Decoded::End => {
                        buf.consume(used);
                        if output == ChunkedOutput::Chunked {
                            out.extend_from_slice(b"0\r\n");
                            crate::http::chunked::put_trailers(out, decoder.trailers());
                            out.extend_from_slice(b"\r\n");
                        }
                        return flush(dst, out, &mut unmetered, settings, meter).await;
                    }
                    Decoded::NeedMore => {
                        buf.consume(used);
                        break;
                    }
                }
            }
            flush(dst, out, &mut unmetered, settings, meter).await?;
            if read_some(src, buf, settings.limit())
                .await
                .map_err(RelayError::Read)?
                == 0
            {
                return Err(RelayError::Truncated);
            }
        }
    }

    /// Moves everything until `src` closes (a response without length).
    pub async fn until_close(&mut self) -> Result<(), RelayError> {
        let use_splice = self.settings.splice_from.is_some();
        let limit = self.settings.limit();
        pump(self.src, self.buf, self.dst, use_splice, limit, self.meter).await
    }
}

/// Appends `n` in lower-case hexadecimal (a chunk size line), without the formatting
/// machinery on the per-chunk path.
pub(crate) fn push_hex(out: &mut Vec<u8>, n: usize) {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut digits = [0u8; 16];
    let mut at = digits.len();
    let mut n = n;
    loop {
        at -= 1;
        digits[at] = DIGITS[n & 0xf];
        n >>= 4;
        if n == 0 {
            break;
        }
    }
    out.extend_from_slice(&digits[at..]);
}

/// Writes `out`, counting all but its first `unmetered` bytes (a head sent with the body).
async fn flush(
    dst: &impl Io,
    out: &mut Vec<u8>,
    unmetered: &mut usize,
    settings: &RelaySettings,
    meter: &Meter,
) -> Result<(), RelayError> {
    if !out.is_empty() {
        write_all(dst, out, settings.limit())
            .await
            .map_err(RelayError::Write)?;
        meter.add((out.len() - *unmetered) as u64);
        *unmetered = 0;
        out.clear();
    }
    Ok(())
}

/// Sends what `buf` holds, then everything `src` sends until end of stream, spliced or copied.
async fn pump(
    src: &impl Io,
    buf: &mut IoBuf,
    dst: &impl Io,
    use_splice: bool,
    limit: TimeLimit,
    meter: &Meter,
) -> Result<(), RelayError> {
    if !buf.is_empty() {
        write_all(dst, buf.filled(), limit)
            .await
            .map_err(RelayError::Write)?;
        meter.add(buf.len() as u64);
        buf.consume(buf.len());
    }
    if let (true, Some(from), Some(to)) = (use_splice, src.spliceable(), dst.spliceable()) {
        if let Ok(mut pipe) = PipeLease::take() {
            splice_between(&mut pipe, from, to, None, limit, meter).await?;
            return Ok(());
        }
    }
    loop {
        if read_some(src, buf, limit).await.map_err(RelayError::Read)? == 0 {
            return Ok(());
        }
        write_all(dst, buf.filled(), limit)
            .await
            .map_err(RelayError::Write)?;
        meter.add(buf.len() as u64);
        buf.consume(buf.len());
    }
}

/// Bytes moved each way by a tunnel.
#[derive(Clone, Copy, Debug, Default)]
pub struct TunnelBytes {
    pub client_to_server: u64,
    pub server_to_client: u64,
}

/// How a tunnel ended: the bytes moved, and each direction's own end, so that a caller can tell
/// whose failure it was (a client that reset is not a server that failed).
#[derive(Debug)]
pub struct TunnelEnd {
    pub moved: TunnelBytes,
    /// `None`: still open when the tunnel went quiet for `idle`.
    pub client_to_server: Option<Result<(), RelayError>>,
    pub server_to_client: Option<Result<(), RelayError>>,
    /// The client's direction ended (its close, or a failure) before the server's did.
    pub client_ended_first: bool,
}

impl TunnelEnd {
    /// The first failure of either direction, for the log.
    pub fn failure(&self) -> Option<&RelayError> {
        [&self.client_to_server, &self.server_to_client]
            .into_iter()
            .find_map(|end| end.as_ref().and_then(|r| r.as_ref().err()))
    }
}

/// Joins `client` and `server` both ways after a 101 or a CONNECT (or for TLS passthrough),
/// until both directions have ended or nothing moved either way for `idle`. A direction that
/// ends shuts down the write side of its destination, so half-closed protocols work.
///
/// Going quiet for `idle` is a normal end (a WebSocket nobody uses).
pub async fn tunnel(
    client: &impl Io,
    client_buf: &mut IoBuf,
    server: &impl Io,
    server_buf: &mut IoBuf,
    use_splice: bool,
    idle: Duration,
) -> TunnelEnd {
    const NONE: u8 = 0;
    const CLIENT: u8 = 1;
    const SERVER: u8 = 2;
    let up = Meter::default();
    let down = Meter::default();
    // Which direction ended first (set once, by the first to end).
    let first = std::sync::atomic::AtomicU8::new(NONE);
    let mark = |who: u8| {
        let _ = first.compare_exchange(NONE, who, Ordering::Relaxed, Ordering::Relaxed);
    };
    let mut upstream_end = None;
    let mut downstream_end = None;
    let upstream = async {
        let result = pump(
            client,
            client_buf,
            server,
            use_splice,
            TimeLimit::Never,
            &up,
        )
        .await;
        mark(CLIENT);
        let _ = server.shutdown_write().await;
        upstream_end = Some(result);
    };
    let downstream = async {
        let result = pump(
            server,
            server_buf,
            client,
            use_splice,
            TimeLimit::Never,
            &down,
        )
        .await;
        mark(SERVER);
        let _ = client.shutdown_write().await;
        downstream_end = Some(result);
    };
    let watchdog = async {
        let tick = (idle / 8).max(Duration::from_millis(10));
        let mut last = (up.get(), down.get());
        let mut quiet_since = tokio::time::Instant::now();
        loop {
            tokio::time::sleep(tick).await;
            let now = (up.get(), down.get());
            if now != last {
                last = now;
                quiet_since = tokio::time::Instant::now();
            } else if quiet_since.elapsed() >= idle {
                return;
            }
        }
    };
    tokio::select! {
        _ = async { tokio::join!(upstream, downstream) } => {}
        _ = watchdog => {}
    }
    TunnelEnd {
        moved: TunnelBytes {
            client_to_server: up.get(),
            server_to_client: down.get(),
        },
        client_to_server: upstream_end,
        server_to_client: downstream_end,
        client_ended_first: first.load(Ordering::Relaxed) == CLIENT,
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn hex_chunk_sizes() {
        for n in [0usize, 1, 15, 16, 255, 4096, 0x1234_abcd, usize::MAX] {
            let mut out = Vec::new();
            super::push_hex(&mut out, n);
            assert_eq!(String::from_utf8(out).unwrap(), format!("{n:x}"));
        }
    }
}
