//! A raw HTTP/2 client for abuse and conformance tests: frames written byte by byte, so a test
//! can send what no well-behaved library would (uppercase names, pseudo-headers in trailers,
//! floods of any frame), and every frame the switch sends read back as it came.
//!
//! Header blocks are written as HPACK "literal without indexing, new name" representations,
//! never Huffman-coded, so any byte goes into a name or a value ([`Block`]); a few other
//! representations exist for HPACK bombs (a literal with incremental indexing, an indexed
//! field). The switch's header blocks are decoded by a small HPACK decoder of its own (static
//! and dynamic table, Huffman codes built from their lengths, RFC 7541), written independently
//! of the h2 crate the switch uses, so a bug there cannot hide behind the same bug here.
//!
//! Written for tests: every wait is bounded by [`PATIENCE`] (a hang fails, it never decides a
//! verdict), every loop by a count.

#![allow(dead_code)]

use std::collections::HashMap;
use std::net::SocketAddr;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// The longest any single wait may take: it prevents hangs, it decides nothing.
pub const PATIENCE: Duration = Duration::from_secs(10);

pub const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

// Frame types (RFC 9113 section 6).
pub const DATA: u8 = 0x0;
pub const HEADERS: u8 = 0x1;
pub const PRIORITY: u8 = 0x2;
pub const RST_STREAM: u8 = 0x3;
pub const SETTINGS: u8 = 0x4;
pub const PUSH_PROMISE: u8 = 0x5;
pub const PING: u8 = 0x6;
pub const GOAWAY: u8 = 0x7;
pub const WINDOW_UPDATE: u8 = 0x8;
pub const CONTINUATION: u8 = 0x9;

// Flags.
pub const END_STREAM: u8 = 0x1;
pub const ACK: u8 = 0x1;
pub const END_HEADERS: u8 = 0x4;

// Settings identifiers (RFC 9113 section 6.5.2).
pub const SETTINGS_HEADER_TABLE_SIZE: u16 = 0x1;
pub const SETTINGS_ENABLE_PUSH: u16 = 0x2;
pub const SETTINGS_MAX_CONCURRENT_STREAMS: u16 = 0x3;
pub const SETTINGS_INITIAL_WINDOW_SIZE: u16 = 0x4;
pub const SETTINGS_MAX_FRAME_SIZE: u16 = 0x5;
pub const SETTINGS_MAX_HEADER_LIST_SIZE: u16 = 0x6;

// Error codes (RFC 9113 section 7).
pub const NO_ERROR: u32 = 0x0;
pub const PROTOCOL_ERROR: u32 = 0x1;
pub const INTERNAL_ERROR: u32 = 0x2;
pub const FLOW_CONTROL_ERROR: u32 = 0x3;
pub const STREAM_CLOSED: u32 = 0x5;
pub const FRAME_SIZE_ERROR: u32 = 0x6;
pub const REFUSED_STREAM: u32 = 0x7;
pub const CANCEL: u32 = 0x8;
pub const COMPRESSION_ERROR: u32 = 0x9;
pub const ENHANCE_YOUR_CALM: u32 = 0xb;

// ---------------------------------------------------------------- writing frames

/// One frame: its 9-byte header, then `payload`.
pub fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    assert!(payload.len() < 1 << 24, "a frame payload fits 24 bits");
    let mut out = Vec::with_capacity(9 + payload.len());
    out.extend_from_slice(&(payload.len() as u32).to_be_bytes()[1..]);
    out.push(kind);
    out.push(flags);
    out.extend_from_slice(&(stream & 0x7fff_ffff).to_be_bytes());
    out.extend_from_slice(payload);
    out
}

pub fn settings(pairs: &[(u16, u32)]) -> Vec<u8> {
    let mut payload = Vec::new();
    for (id, value) in pairs {
        payload.extend_from_slice(&id.to_be_bytes());
        payload.extend_from_slice(&value.to_be_bytes());
    }
    frame(SETTINGS, 0, 0, &payload)
}

pub fn settings_ack() -> Vec<u8> {
    frame(SETTINGS, ACK, 0, &[])
}

pub fn ping(payload: [u8; 8]) -> Vec<u8> {
    frame(PING, 0, 0, &payload)
}

pub fn rst_stream(stream: u32, code: u32) -> Vec<u8> {
    frame(RST_STREAM, 0, stream, &code.to_be_bytes())
}

pub fn window_update(stream: u32, increment: u32) -> Vec<u8> {
    frame(WINDOW_UPDATE, 0, stream, &increment.to_be_bytes())
}

/// PRIORITY: `stream` depends (not exclusively) on `depends_on` with `weight`.
pub fn priority(stream: u32, depends_on: u32, weight: u8) -> Vec<u8> {
    let mut payload = depends_on.to_be_bytes().to_vec();
    payload.push(weight);
    frame(PRIORITY, 0, stream, &payload)
}

pub fn data(stream: u32, bytes: &[u8], end_stream: bool) -> Vec<u8> {
    frame(DATA, if end_stream { END_STREAM } else { 0 }, stream, bytes)
}

/// A HEADERS frame carrying the whole `block` (END_HEADERS).
pub fn headers(stream: u32, block: &[u8], end_stream: bool) -> Vec<u8> {
    let flags = END_HEADERS | if end_stream { END_STREAM } else { 0 };
    frame(HEADERS, flags, stream, block)
}

/// An HPACK header block, written representation by representation.
#[derive(Clone, Debug, Default)]
pub struct Block(pub Vec<u8>);

impl Block {
    pub fn new() -> Block {
        Block::default()
    }

    /// A request's pseudo-header fields: `:method`, `:scheme` (http), `:path`, `:authority`.
    pub fn request(method: &str, path: &str, authority: &str) -> Block {
        Block::new()
            .field(":method", method)
            .field(":scheme", "http")
            .field(":path", path)
            .field(":authority", authority)
    }

    /// A GET of `path` at authority `h2.test`.
    pub fn get(path: &str) -> Block {
        Block::request("GET", path, "h2.test")
    }

    /// "Literal header field without indexing, new name" (RFC 7541 section 6.2.2), neither
    /// string Huffman-coded: any bytes go through as they are.
    pub fn field(self, name: impl AsRef<[u8]>, value: impl AsRef<[u8]>) -> Block {
        self.literal(0x00, 4, name.as_ref(), value.as_ref())
    }

    /// "Literal header field with incremental indexing, new name" (section 6.2.1): the field
    /// also enters the decoder's dynamic table.
    pub fn indexed_field(self, name: impl AsRef<[u8]>, value: impl AsRef<[u8]>) -> Block {
        self.literal(0x40, 6, name.as_ref(), value.as_ref())
    }

    /// "Indexed header field" (section 6.1): entry `index` of the static (1..=61) or dynamic
    /// (62..) table.
    pub fn index(mut self, index: usize) -> Block {
        put_int(&mut self.0, 0x80, 7, index);
        self
    }

    /// [`Block::indexed_field`] with the value Huffman-coded (RFC 7541 section 5.2), as
    /// browsers send theirs: the decoder writes such a value into a buffer of its own.
    pub fn indexed_field_huffman(
        mut self,
        name: impl AsRef<[u8]>,
        value: impl AsRef<[u8]>,
    ) -> Block {
        put_int(&mut self.0, 0x40, 6, 0);
        put_string(&mut self.0, name.as_ref());
        let coded = huffman_encode(value.as_ref());
        put_int(&mut self.0, 0x80, 7, coded.len());
        self.0.extend_from_slice(&coded);
        self
    }

    fn literal(mut self, first: u8, prefix_bits: u8, name: &[u8], value: &[u8]) -> Block {
        put_int(&mut self.0, first, prefix_bits, 0);
        put_string(&mut self.0, name);
        put_string(&mut self.0, value);
        self
    }

    pub fn bytes(&self) -> &[u8] {
        &self.0
    }
}

/// An HPACK integer with an N-bit prefix (RFC 7541 section 5.1); `first` holds the bits above
/// the prefix.
fn put_int(out: &mut Vec<u8>, first: u8, prefix_bits: u8, mut value: usize) {
    let max = (1usize << prefix_bits) - 1;
    if value < max {
        out.push(first | value as u8);
        return;
    }
    out.push(first | max as u8);
    value -= max;
    while value >= 128 {
        out.push((value % 128) as u8 | 0x80);
        value /= 128;
    }
    out.push(value as u8);
}

/// A string literal, not Huffman-coded.
fn put_string(out: &mut Vec<u8>, s: &[u8]) {
    put_int(out, 0x00, 7, s.len());
    out.extend_from_slice(s);
}

// ---------------------------------------------------------------- reading frames

/// A frame the switch sent; `fields` is the decoded header block that a HEADERS frame (or the
/// CONTINUATION that ended it) completed.
#[derive(Clone, Debug)]
pub struct Frame {
    pub kind: u8,
    pub flags: u8,
    pub stream: u32,
    pub payload: Vec<u8>,
    pub fields: Option<Vec<(String, String)>>,
}

impl Frame {
    /// The error code of a RST_STREAM or GOAWAY.
    pub fn error_code(&self) -> Option<u32> {
        let at = match self.kind {
            RST_STREAM => 0,
            GOAWAY => 4,
            _ => return None,
        };
        let code = self.payload.get(at..at + 4)?;
        Some(u32::from_be_bytes([code[0], code[1], code[2], code[3]]))
    }

    /// The last stream id of a GOAWAY.
    pub fn last_stream(&self) -> Option<u32> {
        if self.kind != GOAWAY || self.payload.len() < 4 {
            return None;
        }
        let p = &self.payload;
        Some(u32::from_be_bytes([p[0], p[1], p[2], p[3]]) & 0x7fff_ffff)
    }

    pub fn is(&self, kind: u8, stream: u32) -> bool {
        self.kind == kind && self.stream == stream
    }

    pub fn has(&self, flag: u8) -> bool {
        self.flags & flag != 0
    }

    /// The value of a decoded field of a header block.
    pub fn field(&self, name: &str) -> Option<&str> {
        self.fields
            .as_ref()?
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}

/// How a stream ended, as the client saw it.
#[derive(Debug)]
pub enum Outcome {
    /// A response: its status, fields, body and trailers.
    Response(Response),
    /// RST_STREAM with this error code (and the status, if a response head came first).
    Reset(u32, Option<u16>),
    /// GOAWAY with this error code before the stream ended.
    GoAway(u32),
    /// The connection closed (or was reset) before the stream ended.
    Closed,
}

#[derive(Debug, Default)]
pub struct Response {
    pub status: u16,
    pub fields: Vec<(String, String)>,
    pub body: Vec<u8>,
    pub trailers: Vec<(String, String)>,
}

impl Response {
    pub fn field(&self, name: &str) -> Option<&str> {
        self.fields
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}

/// A client connection speaking raw HTTP/2 (prior knowledge).
pub struct Conn {
    stream: TcpStream,
    inbuf: Vec<u8>,
    hpack: Decoder,
    /// A header block being gathered (HEADERS without END_HEADERS, then CONTINUATION).
    block: Option<(Frame, Vec<u8>)>,
    /// The connection ended (EOF or reset) on the read side.
    pub closed: bool,
    /// Replies with WINDOW_UPDATEs (connection and stream) to each DATA received, so
    /// responses of any size come through; `false` for a reader that never opens its window.
    pub open_windows: bool,
    /// Every frame received, in order.
    pub seen: Vec<Frame>,
}

impl Conn {
    /// Connects, sends the preface and an empty SETTINGS.
    pub async fn open(addr: SocketAddr) -> Conn {
        Conn::open_with(addr, &[]).await
    }

    /// Connects, sends the preface and SETTINGS with `pairs`.
    pub async fn open_with(addr: SocketAddr, pairs: &[(u16, u32)]) -> Conn {
        let stream = tokio::time::timeout(PATIENCE, TcpStream::connect(addr))
            .await
            .expect("connect within PATIENCE")
            .expect("connect to the switch");
        stream.set_nodelay(true).expect("TCP_NODELAY");
        let mut conn = Conn {
            stream,
            inbuf: Vec::new(),
            hpack: Decoder::new(),
            block: None,
            closed: false,
            open_windows: true,
            seen: Vec::new(),
        };
        let mut hello = PREFACE.to_vec();
        hello.extend(settings(pairs));
        conn.send(&hello).await;
        conn
    }

    /// Writes `bytes` while reading what the switch sends meanwhile (a flood the switch stops
    /// reading must not deadlock the test). Stops early, without failing, when the switch
    /// closes or resets the connection; returns how many bytes went out.
    pub async fn send(&mut self, bytes: &[u8]) -> usize {
        let mut sent = 0;
        let deadline = tokio::time::Instant::now() + PATIENCE;
        while sent < bytes.len() && !self.closed {
            let ready = tokio::time::timeout_at(
                deadline,
                self.stream
                    .ready(tokio::io::Interest::READABLE | tokio::io::Interest::WRITABLE),
            )
            .await;
            let Ok(Ok(ready)) = ready else {
                // The switch neither reads nor closes: what went out is what counts.
                return sent;
            };
            if ready.is_readable() {
                self.read_available();
            }
            if ready.is_writable() {
                match self.stream.try_write(&bytes[sent..]) {
                    Ok(n) => sent += n,
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                    Err(_) => return sent,
                }
            }
        }
        sent
    }

    /// Reads what is there without waiting.
    fn read_available(&mut self) {
        let mut chunk = [0u8; 65536];
        for _ in 0..64 {
            match self.stream.try_read(&mut chunk) {
                Ok(0) => {
                    self.closed = true;
                    return;
                }
                Ok(n) => self.inbuf.extend_from_slice(&chunk[..n]),
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return,
                Err(_) => {
                    self.closed = true;
                    return;
                }
            }
        }
    }

    /// The next frame, or `None` once the connection has ended. Answers the switch's
    /// SETTINGS and PINGs with an ACK, and its DATA with WINDOW_UPDATEs when `open_windows`.
    pub async fn next(&mut self) -> Option<Frame> {
        loop {
            if let Some(frame) = self.parse_one() {
                if frame.kind == SETTINGS && !frame.has(ACK) {
                    self.write_quietly(&settings_ack()).await;
                }
                if frame.kind == PING && !frame.has(ACK) {
                    self.write_quietly(&self::frame(PING, ACK, 0, &frame.payload))
                        .await;
                }
                if frame.kind == DATA && !frame.payload.is_empty() && self.open_windows {
                    let n = frame.payload.len() as u32;
                    let mut updates = window_update(0, n);
                    updates.extend(window_update(frame.stream, n));
                    self.write_quietly(&updates).await;
                }
                self.seen.push(frame.clone());
                return Some(frame);
            }
            if self.closed {
                return None;
            }
            let mut chunk = vec![0u8; 65536];
            let Ok(read) = tokio::time::timeout(PATIENCE, self.stream.read(&mut chunk)).await
            else {
                let last: Vec<(u8, u8, u32, Option<u32>)> = self.seen
                    [self.seen.len().saturating_sub(4)..]
                    .iter()
                    .map(|f| (f.kind, f.flags, f.stream, f.error_code()))
                    .collect();
                panic!(
                    "the switch neither sent a frame nor closed within {PATIENCE:?}; {} frames \
                     seen, the last (kind, flags, stream, code): {last:?}",
                    self.seen.len()
                );
            };
            match read {
                Ok(0) | Err(_) => self.closed = true,
                Ok(n) => self.inbuf.extend_from_slice(&chunk[..n]),
            }
        }
    }

    /// Frames until one satisfies `wanted` (returned), or the connection ends (`None`).
    pub async fn until(&mut self, wanted: impl Fn(&Frame) -> bool) -> Option<Frame> {
        for _ in 0..1_000_000 {
            let frame = self.next().await?;
            if wanted(&frame) {
                return Some(frame);
            }
        }
        panic!("a million frames without the one awaited");
    }

    /// Every frame until the connection ends.
    pub async fn until_closed(&mut self) -> Vec<Frame> {
        let mut frames = Vec::new();
        for _ in 0..1_000_000 {
            match self.next().await {
                Some(frame) => frames.push(frame),
                None => return frames,
            }
        }
        panic!("a million frames and the connection still open");
    }

    /// How `stream` ends: its response (head, DATA and trailers), a RST_STREAM, a GOAWAY, or
    /// the connection's end.
    pub async fn outcome(&mut self, stream: u32) -> Outcome {
        let mut ends = self.outcomes(&[stream]).await;
        ends.remove(&stream).expect("the stream's outcome")
    }

    /// How each of `streams` ends, whatever order their frames come in.
    pub async fn outcomes(&mut self, streams: &[u32]) -> HashMap<u32, Outcome> {
        let mut ends: HashMap<u32, Outcome> = HashMap::new();
        let mut partial: HashMap<u32, Response> = HashMap::new();
        for _ in 0..1_000_000 {
            let open: Vec<u32> = streams
                .iter()
                .copied()
                .filter(|s| !ends.contains_key(s))
                .collect();
            if open.is_empty() {
                return ends;
            }
            let Some(frame) = self.next().await else {
                for s in open {
                    ends.insert(s, Outcome::Closed);
                }
                return ends;
            };
            if frame.kind == GOAWAY {
                let code = frame.error_code().unwrap_or(u32::MAX);
                // A graceful GOAWAY still lets the streams it covers end.
                for s in open {
                    if code != NO_ERROR || frame.last_stream() < Some(s) {
                        ends.insert(s, Outcome::GoAway(code));
                    }
                }
                continue;
            }
            if !open.contains(&frame.stream) {
                continue;
            }
            let id = frame.stream;
            match frame.kind {
                RST_STREAM => {
                    let status = partial.remove(&id).map(|r| r.status);
                    ends.insert(
                        id,
                        Outcome::Reset(frame.error_code().unwrap_or(u32::MAX), status),
                    );
                    continue;
                }
                HEADERS => {
                    let fields = frame.fields.clone().expect("a complete header block");
                    match partial.get_mut(&id) {
                        None => {
                            let status: u16 = fields
                                .iter()
                                .find(|(n, _)| n == ":status")
                                .map(|(_, v)| v.parse().expect("a numeric :status"))
                                .expect("a response head with :status");
                            if status >= 200 {
                                partial.insert(
                                    id,
                                    Response {
                                        status,
                                        fields,
                                        ..Response::default()
                                    },
                                );
                            }
                        }
                        Some(r) => r.trailers = fields,
                    }
                }
                DATA => {
                    partial
                        .get_mut(&id)
                        .expect("DATA after a response head")
                        .body
                        .extend_from_slice(&frame.payload);
                }
                _ => {}
            }
            if frame.has(END_STREAM) && matches!(frame.kind, HEADERS | DATA) {
                if let Some(r) = partial.remove(&id) {
                    ends.insert(id, Outcome::Response(r));
                }
            }
        }
        panic!("a million frames without the end of streams {streams:?}");
    }

    /// The response of `stream`; panics on anything else.
    pub async fn response(&mut self, stream: u32) -> Response {
        match self.outcome(stream).await {
            Outcome::Response(r) => r,
            other => panic!("stream {stream}: expected a response, got {other:?}"),
        }
    }

    /// Sends a PING and waits for its ACK: every frame sent before it has been read by the
    /// switch by then. `false` if the connection ended first.
    pub async fn round_trip(&mut self, token: [u8; 8]) -> bool {
        self.send(&ping(token)).await;
        self.until(|f| f.kind == PING && f.has(ACK) && f.payload == token)
            .await
            .is_some()
    }

    async fn write_quietly(&mut self, bytes: &[u8]) {
        if !self.closed {
            let _ = tokio::time::timeout(PATIENCE, self.stream.write_all(bytes)).await;
        }
    }

    /// Splits off one complete frame from the input, decoding header blocks.
    fn parse_one(&mut self) -> Option<Frame> {
        if self.inbuf.len() < 9 {
            return None;
        }
        let h = &self.inbuf;
        let len = u32::from_be_bytes([0, h[0], h[1], h[2]]) as usize;
        if self.inbuf.len() < 9 + len {
            return None;
        }
        let mut frame = Frame {
            kind: h[3],
            flags: h[4],
            stream: u32::from_be_bytes([h[5], h[6], h[7], h[8]]) & 0x7fff_ffff,
            payload: h[9..9 + len].to_vec(),
            fields: None,
        };
        self.inbuf.drain(..9 + len);
        match frame.kind {
            HEADERS => {
                assert!(self.block.is_none(), "HEADERS inside a header block");
                let fragment = header_fragment(&frame);
                if frame.has(END_HEADERS) {
                    frame.fields = Some(self.hpack.decode(&fragment));
                } else {
                    self.block = Some((frame.clone(), fragment));
                }
            }
            CONTINUATION => {
                let (_, gathered) = self.block.as_mut().expect("CONTINUATION after HEADERS");
                gathered.extend_from_slice(&frame.payload);
                if frame.has(END_HEADERS) {
                    let (_, gathered) = self.block.take().expect("a header block");
                    frame.fields = Some(self.hpack.decode(&gathered));
                }
            }
            _ => assert!(
                self.block.is_none(),
                "frame {} inside a header block",
                frame.kind
            ),
        }
        Some(frame)
    }
}

/// The header block fragment of a HEADERS frame, without padding and priority.
fn header_fragment(frame: &Frame) -> Vec<u8> {
    let mut p = &frame.payload[..];
    let mut pad = 0;
    if frame.has(0x8) {
        pad = p[0] as usize;
        p = &p[1..];
    }
    if frame.has(0x20) {
        p = &p[5..];
    }
    p[..p.len() - pad].to_vec()
}

// ---------------------------------------------------------------- HPACK decoding

/// RFC 7541 Appendix A.
const STATIC_TABLE: [(&str, &str); 61] = [
    (":authority", ""),
    (":method", "GET"),
    (":method", "POST"),
    (":path", "/"),
    (":path", "/index.html"),
    (":scheme", "http"),
    (":scheme", "https"),
    (":status", "200"),
    (":status", "204"),
    (":status", "206"),
    (":status", "304"),
    (":status", "400"),
    (":status", "404"),
    (":status", "500"),
    ("accept-charset", ""),
    ("accept-encoding", "gzip, deflate"),
    ("accept-language", ""),
    ("accept-ranges", ""),
    ("accept", ""),
    ("access-control-allow-origin", ""),
    ("age", ""),
    ("allow", ""),
    ("authorization", ""),
    ("cache-control", ""),
    ("content-disposition", ""),
    ("content-encoding", ""),
    ("content-language", ""),
    ("content-length", ""),
    ("content-location", ""),
    ("content-range", ""),
    ("content-type", ""),
    ("cookie", ""),
    ("date", ""),
    ("etag", ""),
    ("expect", ""),
    ("expires", ""),
    ("from", ""),
    ("host", ""),
    ("if-match", ""),
    ("if-modified-since", ""),
    ("if-none-match", ""),
    ("if-range", ""),
    ("if-unmodified-since", ""),
    ("last-modified", ""),
    ("link", ""),
    ("location", ""),
    ("max-forwards", ""),
    ("proxy-authenticate", ""),
    ("proxy-authorization", ""),
    ("range", ""),
    ("referer", ""),
    ("refresh", ""),
    ("retry-after", ""),
    ("server", ""),
    ("set-cookie", ""),
    ("strict-transport-security", ""),
    ("transfer-encoding", ""),
    ("user-agent", ""),
    ("vary", ""),
    ("via", ""),
    ("www-authenticate", ""),
];

/// The bit length of each byte's Huffman code (RFC 7541 Appendix B). The code is canonical:
/// codes of equal length are consecutive in byte order, each length's first code follows the
/// previous length's last, so the lengths alone define it.
const HUFFMAN_LENGTHS: [u8; 256] = [
    13, 23, 28, 28, 28, 28, 28, 28, 28, 24, 30, 28, 28, 30, 28, 28, 28, 28, 28, 28, 28, 28, 30, 28,
    28, 28, 28, 28, 28, 28, 28, 28, 6, 10, 10, 12, 13, 6, 8, 11, 10, 10, 8, 11, 8, 6, 6, 6, 5, 5,
    5, 6, 6, 6, 6, 6, 6, 6, 7, 8, 15, 6, 12, 10, 13, 6, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7,
    7, 7, 7, 7, 7, 7, 7, 7, 8, 7, 8, 13, 19, 13, 14, 6, 15, 5, 6, 5, 6, 5, 6, 6, 6, 5, 7, 7, 6, 6,
    6, 5, 6, 7, 6, 5, 5, 6, 7, 7, 7, 7, 7, 15, 11, 14, 13, 28, 20, 22, 20, 20, 22, 22, 22, 23, 22,
    23, 23, 23, 23, 23, 24, 23, 24, 24, 22, 23, 24, 23, 23, 23, 23, 21, 22, 23, 22, 23, 23, 24, 22,
    21, 20, 22, 22, 23, 23, 21, 23, 22, 22, 24, 21, 22, 23, 23, 21, 21, 22, 21, 23, 22, 23, 23, 20,
    22, 22, 22, 23, 22, 22, 23, 26, 26, 20, 19, 22, 23, 22, 25, 26, 26, 26, 27, 27, 26, 24, 25, 19,
    21, 26, 27, 27, 26, 27, 24, 21, 21, 26, 26, 28, 27, 27, 27, 20, 24, 20, 21, 22, 21, 21, 23, 22,
    22, 25, 25, 24, 24, 26, 23, 26, 27, 26, 26, 27, 27, 27, 27, 27, 28, 27, 27, 27, 27, 27, 26,
];

/// Every byte's Huffman code as (length, code) -> byte.
pub fn huffman_codes() -> HashMap<(u8, u32), u8> {
    let mut order: Vec<usize> = (0..256).collect();
    order.sort_by_key(|&b| (HUFFMAN_LENGTHS[b], b));
    let mut codes = HashMap::new();
    let mut code: u32 = 0;
    let mut length = HUFFMAN_LENGTHS[order[0]];
    for b in order {
        let l = HUFFMAN_LENGTHS[b];
        code <<= l - length;
        length = l;
        codes.insert((l, code), b as u8);
        code += 1;
    }
    codes
}

/// Huffman-codes `bytes`, padded with the most significant bits of EOS (all ones).
pub fn huffman_encode(bytes: &[u8]) -> Vec<u8> {
    let mut code_of = [(0u8, 0u32); 256];
    for ((length, code), byte) in huffman_codes() {
        code_of[byte as usize] = (length, code);
    }
    let mut out = Vec::new();
    let (mut acc, mut bits) = (0u64, 0u32);
    for &byte in bytes {
        let (length, code) = code_of[byte as usize];
        acc = (acc << length) | u64::from(code);
        bits += u32::from(length);
        while bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
        }
    }
    if bits > 0 {
        let pad = 8 - bits;
        out.push(((acc << pad) as u8) | ((1u8 << pad) - 1));
    }
    out
}

/// Decodes a Huffman-coded string; panics on an invalid code or padding.
pub fn huffman_decode(codes: &HashMap<(u8, u32), u8>, bits: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    let (mut code, mut length) = (0u32, 0u8);
    for byte in bits {
        for shift in (0..8).rev() {
            code = (code << 1) | u32::from((byte >> shift) & 1);
            length += 1;
            if let Some(&b) = codes.get(&(length, code)) {
                out.push(b);
                code = 0;
                length = 0;
            }
            assert!(length <= 30, "an invalid Huffman code");
        }
    }
    // Padding: fewer than 8 bits, all ones (the EOS prefix).
    assert!(
        length < 8 && code == (1 << length) - 1,
        "invalid Huffman padding"
    );
    out
}

/// An HPACK decoder (RFC 7541), the dynamic table at the default 4096 octets.
pub struct Decoder {
    dynamic: std::collections::VecDeque<(String, String)>,
    size: usize,
    max_size: usize,
    codes: HashMap<(u8, u32), u8>,
}

impl Default for Decoder {
    fn default() -> Decoder {
        Decoder::new()
    }
}

impl Decoder {
    pub fn new() -> Decoder {
        Decoder {
            dynamic: Default::default(),
            size: 0,
            max_size: 4096,
            codes: huffman_codes(),
        }
    }

    /// Decodes one complete header block; panics on anything invalid.
    pub fn decode(&mut self, mut block: &[u8]) -> Vec<(String, String)> {
        let mut fields = Vec::new();
        while let Some(&first) = block.first() {
            if first & 0x80 != 0 {
                let index = take_int(&mut block, 7);
                fields.push(self.entry(index));
            } else if first & 0xc0 == 0x40 {
                let field = self.literal(&mut block, 6);
                self.insert(field.clone());
                fields.push(field);
            } else if first & 0xe0 == 0x20 {
                let size = take_int(&mut block, 5);
                assert!(size <= 4096, "a table size update above the default");
                self.max_size = size;
                self.evict();
            } else {
                // Without indexing (0000) or never indexed (0001).
                fields.push(self.literal(&mut block, 4));
            }
        }
        fields
    }

    fn entry(&self, index: usize) -> (String, String) {
        assert!(index > 0, "index 0");
        if index <= STATIC_TABLE.len() {
            let (n, v) = STATIC_TABLE[index - 1];
            return (n.to_string(), v.to_string());
        }
        self.dynamic
            .get(index - STATIC_TABLE.len() - 1)
            .cloned()
            .unwrap_or_else(|| panic!("dynamic index {index} out of the table"))
    }

    fn literal(&mut self, block: &mut &[u8], prefix_bits: u8) -> (String, String) {
        let index = take_int(block, prefix_bits);
        let name = if index == 0 {
            self.string(block)
        } else {
            self.entry(index).0
        };
        let value = self.string(block);
        (name, value)
    }

    fn string(&self, block: &mut &[u8]) -> String {
        let huffman = block.first().expect("a string literal") & 0x80 != 0;
        let len = take_int(block, 7);
        assert!(block.len() >= len, "a string past the block's end");
        let raw = &block[..len];
        *block = &block[len..];
        let bytes = if huffman {
            huffman_decode(&self.codes, raw)
        } else {
            raw.to_vec()
        };
        String::from_utf8(bytes).expect("a field of text")
    }

    fn insert(&mut self, field: (String, String)) {
        self.size += field.0.len() + field.1.len() + 32;
        self.dynamic.push_front(field);
        self.evict();
    }

    fn evict(&mut self) {
        while self.size > self.max_size {
            let (n, v) = self.dynamic.pop_back().expect("entries to evict");
            self.size -= n.len() + v.len() + 32;
        }
    }
}

fn take_int(block: &mut &[u8], prefix_bits: u8) -> usize {
    let max = (1usize << prefix_bits) - 1;
    let mut value = (block[0] as usize) & max;
    *block = &block[1..];
    if value < max {
        return value;
    }
    let mut shift = 0;
    loop {
        let b = *block.first().expect("an integer past the block's end");
        *block = &block[1..];
        value += ((b & 0x7f) as usize) << shift;
        shift += 7;
        if b & 0x80 == 0 {
            return value;
        }
        assert!(shift < 35, "an HPACK integer too large");
    }
}
