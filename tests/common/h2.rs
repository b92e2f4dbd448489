//! An HTTP/2 client for the tests, on the h2 crate (client side; the switch uses its server
//! side), over TCP with prior knowledge or over TLS with ALPN `h2` (tokio-rustls). Every byte
//! the client reads is also kept, so that tests can look at the frames the switch sent (a
//! GOAWAY and its error code, which the h2 crate does not show), and a small raw-frame writer
//! serves the tests that must send what no well-behaved client sends.
//!
//! A test file includes it beside `mod common;` as `#[path = "common/h2.rs"] mod h2c;` (a
//! module named `h2` would hide the crate).

#![allow(dead_code)]

use crate::common::PATIENCE;
use bytes::Bytes;
use h2::client::SendRequest;
use http::{HeaderMap, Request};
use std::future::poll_fn;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;

/// The client connection preface (RFC 9113 section 3.4).
pub const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

pub const DATA: u8 = 0x0;
pub const HEADERS: u8 = 0x1;
pub const RST_STREAM: u8 = 0x3;
pub const SETTINGS: u8 = 0x4;
pub const GOAWAY: u8 = 0x7;

pub const NO_ERROR: u32 = 0x0;
pub const PROTOCOL_ERROR: u32 = 0x1;

/// One frame as it came from the switch.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Frame {
    pub kind: u8,
    pub flags: u8,
    pub stream: u32,
    pub payload: Vec<u8>,
}

impl Frame {
    /// The error code of a GOAWAY (after the last stream id) or an RST_STREAM.
    pub fn error_code(&self) -> Option<u32> {
        let at = match self.kind {
            GOAWAY => 4,
            RST_STREAM => 0,
            _ => return None,
        };
        let code = self.payload.get(at..at + 4)?;
        Some(u32::from_be_bytes([code[0], code[1], code[2], code[3]]))
    }

    /// A GOAWAY's last stream id.
    pub fn last_stream(&self) -> Option<u32> {
        if self.kind != GOAWAY || self.payload.len() < 4 {
            return None;
        }
        let p = &self.payload;
        Some(u32::from_be_bytes([p[0], p[1], p[2], p[3]]) & 0x7fff_ffff)
    }
}

/// Splits `bytes` (what a server sent, from its first frame) into complete frames; a partial
/// frame at the end is left out.
pub fn parse_frames(bytes: &[u8]) -> Vec<Frame> {
    let mut frames = Vec::new();
    let mut at = 0;
    while bytes.len() >= at + 9 {
        let h = &bytes[at..at + 9];
        let len = u32::from_be_bytes([0, h[0], h[1], h[2]]) as usize;
        if bytes.len() < at + 9 + len {
            break;
        }
        frames.push(Frame {
            kind: h[3],
            flags: h[4],
            stream: u32::from_be_bytes([h[5], h[6], h[7], h[8]]) & 0x7fff_ffff,
            payload: bytes[at + 9..at + 9 + len].to_vec(),
        });
        at += 9 + len;
    }
    frames
}

/// A frame's bytes: header and payload.
pub fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let mut out = (payload.len() as u32).to_be_bytes()[1..].to_vec();
    out.push(kind);
    out.push(flags);
    out.extend_from_slice(&stream.to_be_bytes());
    out.extend_from_slice(payload);
    out
}

/// A stream that keeps a copy of every byte read through it.
pub struct Tap<S> {
    inner: S,
    seen: Arc<Mutex<Vec<u8>>>,
}

impl<S: AsyncRead + Unpin> AsyncRead for Tap<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.inner).poll_read(cx, buf);
        if let Poll::Ready(Ok(())) = polled {
            let new = &buf.filled()[before..];
            self.seen
                .lock()
                .expect("the tap's lock")
                .extend_from_slice(new);
        }
        polled
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Tap<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// A client's ALPN offer: `h2` alone, `h2` then `http/1.1`, ...
pub fn offering(
    config: &Arc<rustls::ClientConfig>,
    protocols: &[&[u8]],
) -> Arc<rustls::ClientConfig> {
    let mut config = (**config).clone();
    config.alpn_protocols = protocols.iter().map(|p| p.to_vec()).collect();
    Arc::new(config)
}

/// An HTTP/2 connection to the switch.
pub struct H2 {
    pub send: SendRequest<Bytes>,
    connection: Option<tokio::task::JoinHandle<Result<(), h2::Error>>>,
    seen: Arc<Mutex<Vec<u8>>>,
    /// The protocol the TLS handshake chose (`None` over plain TCP).
    pub alpn: Option<Vec<u8>>,
}

impl H2 {
    /// HTTP/2 with prior knowledge over TCP.
    pub async fn plain(addr: SocketAddr) -> H2 {
        let tcp = TcpStream::connect(addr)
            .await
            .expect("connect to the switch");
        tcp.set_nodelay(true).expect("TCP_NODELAY");
        H2::over(tcp, None).await
    }

    /// HTTP/2 with prior knowledge over TCP from the loopback address `source`, so that tests
    /// can tell clients apart by address.
    pub async fn plain_from(source: std::net::IpAddr, addr: SocketAddr) -> H2 {
        let socket = match source {
            std::net::IpAddr::V4(_) => tokio::net::TcpSocket::new_v4(),
            std::net::IpAddr::V6(_) => tokio::net::TcpSocket::new_v6(),
        }
        .expect("a socket");
        socket
            .bind(SocketAddr::new(source, 0))
            .unwrap_or_else(|e| panic!("bind to {source}: {e}"));
        let tcp = tokio::time::timeout(PATIENCE, socket.connect(addr))
            .await
            .expect("a connection within PATIENCE")
            .expect("connect to the switch");
        tcp.set_nodelay(true).expect("TCP_NODELAY");
        H2::over(tcp, None).await
    }

    /// HTTP/2 over TLS for `name`, with `config` (which must offer `h2`, see [`offering`]);
    /// panics unless the handshake chose `h2`.
    pub async fn tls(addr: SocketAddr, name: &str, config: &Arc<rustls::ClientConfig>) -> H2 {
        let tcp = TcpStream::connect(addr)
            .await
            .expect("connect to the switch");
        tcp.set_nodelay(true).expect("TCP_NODELAY");
        let server = rustls::pki_types::ServerName::try_from(name.to_string()).expect("a name");
        let connector = tokio_rustls::TlsConnector::from(Arc::clone(config));
        let tls = tokio::time::timeout(PATIENCE, connector.connect(server, tcp))
            .await
            .expect("a TLS handshake within PATIENCE")
            .expect("the TLS handshake succeeds");
        let alpn = tls.get_ref().1.alpn_protocol().map(<[u8]>::to_vec);
        assert_eq!(alpn.as_deref(), Some(&b"h2"[..]), "ALPN chose h2");
        H2::over(tls, alpn).await
    }

    async fn over<S>(io: S, alpn: Option<Vec<u8>>) -> H2
    where
        S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let tap = Tap {
            inner: io,
            seen: Arc::clone(&seen),
        };
        // Windows larger than the default 64 KiB, so that megabytes come at speed.
        let handshake = h2::client::Builder::new()
            .initial_window_size(1 << 20)
            .initial_connection_window_size(4 << 20)
            .handshake::<_, Bytes>(tap);
        let (send, connection) = tokio::time::timeout(PATIENCE, handshake)
            .await
            .expect("an HTTP/2 handshake within PATIENCE")
            .expect("the HTTP/2 handshake succeeds");
        H2 {
            send,
            connection: Some(tokio::spawn(connection)),
            seen,
            alpn,
        }
    }

    /// The frames the switch sent so far.
    pub fn frames(&self) -> Vec<Frame> {
        parse_frames(&self.seen.lock().expect("the tap's lock"))
    }

    /// The GOAWAY frames the switch sent so far.
    pub fn goaways(&self) -> Vec<Frame> {
        self.frames()
            .into_iter()
            .filter(|f| f.kind == GOAWAY)
            .collect()
    }

    /// Waits until the switch has sent a GOAWAY and returns the GOAWAYs; panics after
    /// [`PATIENCE`].
    pub async fn wait_for_goaway(&self) -> Vec<Frame> {
        let deadline = tokio::time::Instant::now() + PATIENCE;
        loop {
            let goaways = self.goaways();
            if !goaways.is_empty() {
                return goaways;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "no GOAWAY within {PATIENCE:?}; frames: {:?}",
                self.frames()
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    /// Waits until the connection ended (the switch closed it) and returns how; panics after
    /// [`PATIENCE`].
    pub async fn closed(&mut self) -> Result<(), h2::Error> {
        let task = self.connection.take().expect("awaited once");
        tokio::time::timeout(PATIENCE, task)
            .await
            .expect("the connection ends within PATIENCE")
            .expect("the connection task does not panic")
    }

    /// Closes the connection at once (no GOAWAY from this side), and waits until it is gone.
    pub async fn abort(&mut self) {
        let task = self.connection.take().expect("aborted once");
        task.abort();
        let _ = tokio::time::timeout(PATIENCE, task).await;
    }

    /// A handle that opens streams on this connection, for tasks of their own.
    pub fn streams(&self) -> Streams {
        Streams(self.send.clone())
    }

    /// A GET of `path` for `authority` (scheme `http`).
    pub async fn get(&self, authority: &str, path: &str) -> Reply {
        self.streams().get(authority, path).await
    }

    /// See [`Streams::exchange`].
    pub async fn exchange(
        &self,
        request: Request<()>,
        upload: Upload<'_>,
    ) -> Result<Reply, h2::Error> {
        self.streams().exchange(request, upload).await
    }
}

/// Opens streams on a connection.
#[derive(Clone)]
pub struct Streams(SendRequest<Bytes>);

impl Streams {
    /// A GET of `path` for `authority` (over `scheme` `http`).
    pub async fn get(&self, authority: &str, path: &str) -> Reply {
        let request = request("GET", authority, path, &[]);
        self.exchange(request, Upload::None)
            .await
            .unwrap_or_else(|e| panic!("GET {authority}{path}: {e}"))
    }

    /// Opens a stream for `request`, which should announce a body (`content-length`), and
    /// sends none of it: the response's future, and the body's sender, which keeps the stream
    /// open while the test holds it.
    pub async fn open_stalled(
        &self,
        request: Request<()>,
    ) -> (h2::client::ResponseFuture, h2::SendStream<Bytes>) {
        let mut send = tokio::time::timeout(PATIENCE, self.0.clone().ready())
            .await
            .expect("room for a stream within PATIENCE")
            .expect("the connection takes streams");
        send.send_request(request, false).expect("the stream opens")
    }

    /// Sends `request` with `upload` and reads the whole response (informational responses
    /// first, then the final one, its body and trailers).
    pub async fn exchange(
        &self,
        request: Request<()>,
        upload: Upload<'_>,
    ) -> Result<Reply, h2::Error> {
        tokio::time::timeout(PATIENCE * 3, self.exchange_unbounded(request, upload))
            .await
            .expect("the exchange ends within 3 x PATIENCE")
    }

    async fn exchange_unbounded(
        &self,
        request: Request<()>,
        upload: Upload<'_>,
    ) -> Result<Reply, h2::Error> {
        let mut send = self.0.clone().ready().await?;
        let no_body = matches!(upload, Upload::None);
        let (mut response, mut stream) = send.send_request(request, no_body)?;
        let mut informational = Vec::new();
        if let Upload::AfterContinue(data) = upload {
            // The body waits for the 100 (or for the final answer, which then comes alone).
            let first = poll_fn(|cx| response.poll_informational(cx)).await;
            match first {
                Some(interim) => {
                    informational.push(interim?.status().as_u16());
                    send_body(&mut stream, data, 16 * 1024, None).await?;
                }
                None => stream.send_reset(h2::Reason::CANCEL),
            }
        } else {
            match upload {
                Upload::None | Upload::AfterContinue(_) => {}
                Upload::Body { data, piece } => send_body(&mut stream, data, piece, None).await?,
                Upload::WithTrailers { data, trailers } => {
                    send_body(&mut stream, data, 16 * 1024, Some(trailers)).await?
                }
            }
        }
        let response = response.await?;
        let (parts, mut body) = response.into_parts();
        let ended_with_headers = body.is_end_stream();
        let mut data = Vec::new();
        while let Some(piece) = body.data().await {
            let piece = piece?;
            data.extend_from_slice(&piece);
            let _ = body.flow_control().release_capacity(piece.len());
        }
        let trailers = body.trailers().await?;
        Ok(Reply {
            status: parts.status.as_u16(),
            headers: parts.headers,
            body: data,
            trailers,
            informational,
            ended_with_headers,
        })
    }
}

/// Sends `data` in pieces of at most `piece` bytes as the switch's windows allow, then the
/// trailers or the end of the stream.
async fn send_body(
    stream: &mut h2::SendStream<Bytes>,
    data: &[u8],
    piece: usize,
    trailers: Option<HeaderMap>,
) -> Result<(), h2::Error> {
    let mut left = Bytes::copy_from_slice(data);
    while !left.is_empty() {
        let want = piece.min(left.len());
        stream.reserve_capacity(want);
        let granted = match poll_fn(|cx| stream.poll_capacity(cx)).await {
            Some(granted) => granted?,
            None => return Err(h2::Error::from(h2::Reason::STREAM_CLOSED)),
        };
        if granted == 0 {
            continue;
        }
        let chunk = left.split_to(granted.min(want));
        let last = left.is_empty() && trailers.is_none();
        stream.send_data(chunk, last)?;
    }
    match trailers {
        Some(trailers) => stream.send_trailers(trailers),
        None if data.is_empty() => stream.send_data(Bytes::new(), true),
        None => Ok(()),
    }
}

/// What goes up with a request.
pub enum Upload<'a> {
    /// Nothing: HEADERS ends the stream.
    None,
    /// `data` in DATA frames of at most `piece` bytes.
    Body { data: &'a [u8], piece: usize },
    /// `data`, then HEADERS with `trailers`.
    WithTrailers { data: &'a [u8], trailers: HeaderMap },
    /// `data` once a 100 came (`expect: 100-continue`).
    AfterContinue(&'a [u8]),
}

/// A response as the client saw it.
#[derive(Debug)]
pub struct Reply {
    pub status: u16,
    pub headers: HeaderMap,
    pub body: Vec<u8>,
    pub trailers: Option<HeaderMap>,
    /// Statuses of the informational responses before it.
    pub informational: Vec<u16>,
    /// The HEADERS frame ended the stream (no DATA at all).
    pub ended_with_headers: bool,
}

impl Reply {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }

    pub fn served_by(&self) -> String {
        self.header("x-served-by").unwrap_or("-").to_string()
    }

    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

/// A request for `http://authority/path` with `fields` (several with one name are kept).
pub fn request(method: &str, authority: &str, path: &str, fields: &[(&str, &str)]) -> Request<()> {
    let mut builder = Request::builder()
        .method(method)
        .uri(format!("http://{authority}{path}"));
    for (name, value) in fields {
        builder = builder.header(*name, *value);
    }
    builder.body(()).expect("a valid request")
}

/// A raw HTTP/2 connection: the preface and an empty SETTINGS are sent, then whatever the test
/// writes; what comes back is read as frames.
pub struct RawH2 {
    pub stream: TcpStream,
    received: Vec<u8>,
}

impl RawH2 {
    pub async fn connect(addr: SocketAddr) -> RawH2 {
        use tokio::io::AsyncWriteExt;
        let mut stream = TcpStream::connect(addr)
            .await
            .expect("connect to the switch");
        stream.set_nodelay(true).expect("TCP_NODELAY");
        let mut hello = PREFACE.to_vec();
        hello.extend(frame(SETTINGS, 0, 0, &[]));
        stream.write_all(&hello).await.expect("send the preface");
        RawH2 {
            stream,
            received: Vec::new(),
        }
    }

    pub async fn send(&mut self, bytes: &[u8]) {
        use tokio::io::AsyncWriteExt;
        self.stream
            .write_all(bytes)
            .await
            .expect("send to the switch");
    }

    /// Reads until the switch closes the connection (or resets it) and returns every frame it
    /// sent; panics if it is still open after [`PATIENCE`].
    pub async fn frames_until_close(&mut self) -> Vec<Frame> {
        use tokio::io::AsyncReadExt;
        let mut chunk = vec![0u8; 65536];
        loop {
            match tokio::time::timeout(PATIENCE, self.stream.read(&mut chunk)).await {
                Ok(Ok(0)) | Ok(Err(_)) => return parse_frames(&self.received),
                Ok(Ok(n)) => self.received.extend_from_slice(&chunk[..n]),
                Err(_) => panic!(
                    "the switch did not close within {PATIENCE:?}; frames: {:?}",
                    parse_frames(&self.received)
                ),
            }
        }
    }
}
