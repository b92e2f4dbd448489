//! Test backends and a raw HTTP client for the integration tests. Written independently of the
//! switch's own HTTP code (httparse plus a small chunked reader here), so a framing bug in the
//! switch cannot hide behind the same bug in the tests.

#![allow(dead_code)]

use sha2::{Digest, Sha256};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// Generous upper bound for any single read in a test: it prevents hangs, it does not decide
/// verdicts.
pub const PATIENCE: Duration = Duration::from_secs(10);

pub fn sha256_hex(data: &[u8]) -> String {
    Sha256::digest(data)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// Deterministic pseudo-random bytes (xorshift), so sizes and contents are reproducible.
pub fn pattern(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    let mut out = Vec::with_capacity(len);
    while out.len() < len {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        out.extend_from_slice(&x.to_le_bytes());
    }
    out.truncate(len);
    out
}

/// Reads from `stream` into `buf` until it holds a whole head (up to its blank line); the head's
/// length with that line, or `None` if the stream ended first.
pub async fn read_head(
    stream: &mut (impl tokio::io::AsyncRead + Unpin),
    buf: &mut Vec<u8>,
) -> Option<usize> {
    loop {
        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            return Some(end + 4);
        }
        let mut chunk = [0u8; 16 * 1024];
        match stream.read(&mut chunk).await {
            Ok(0) | Err(_) => return None,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
}

// ---------------------------------------------------------------- backend

/// What a backend saw: every request head it parsed, per accepted connection, and what went
/// wrong inside it.
pub struct Record {
    pub connections: AtomicUsize,
    pub heads: Mutex<Vec<String>>,
    /// The number of request heads parsed so far, for tests that wait until the backend holds a
    /// request (an event, not a sleep).
    heads_seen: tokio::sync::watch::Sender<usize>,
    /// Connections the backend has closed (its task ended), for tests that wait for a close.
    closed: tokio::sync::watch::Sender<usize>,
    /// Requests to `/hold` wait here for a permit the test gives with [`Backend::release`].
    gate: tokio::sync::Semaphore,
    /// Panics of connection tasks (an invalid request, a broken assertion in the backend): the
    /// test that caused them fails when the backend is dropped.
    failures: Mutex<Vec<String>>,
}

impl Default for Record {
    fn default() -> Record {
        Record {
            connections: AtomicUsize::new(0),
            heads: Mutex::default(),
            heads_seen: tokio::sync::watch::channel(0).0,
            closed: tokio::sync::watch::channel(0).0,
            gate: tokio::sync::Semaphore::new(0),
            failures: Mutex::default(),
        }
    }
}

pub struct Backend {
    pub addr: SocketAddr,
    pub record: Arc<Record>,
    task: tokio::task::JoinHandle<()>,
    connections: Arc<Mutex<Vec<tokio::task::AbortHandle>>>,
}

impl Backend {
    /// Connections accepted so far.
    pub fn connections(&self) -> usize {
        self.record.connections.load(Ordering::SeqCst)
    }

    /// Request heads parsed so far.
    pub fn requests(&self) -> usize {
        *self.record.heads_seen.borrow()
    }

    /// Waits until the backend has parsed `n` request heads in all; panics after [`PATIENCE`].
    pub async fn wait_for_requests(&self, n: usize) {
        let mut seen = self.record.heads_seen.subscribe();
        let reached = tokio::time::timeout(PATIENCE, seen.wait_for(|&count| count >= n)).await;
        if !matches!(reached, Ok(Ok(_))) {
            panic!(
                "backend {} saw {} requests, not {n}, within {PATIENCE:?}",
                self.addr,
                self.requests()
            );
        }
    }

    /// Waits until the backend has closed `n` connections in all; panics after [`PATIENCE`].
    pub async fn wait_for_closed(&self, n: usize) {
        let mut closed = self.record.closed.subscribe();
        let reached = tokio::time::timeout(PATIENCE, closed.wait_for(|&count| count >= n)).await;
        if !matches!(reached, Ok(Ok(_))) {
            panic!(
                "backend {} closed {} connections, not {n}, within {PATIENCE:?}",
                self.addr,
                *self.record.closed.borrow()
            );
        }
    }

    /// Lets `n` requests waiting in `/hold` answer.
    pub fn release(&self, n: usize) {
        self.record.gate.add_permits(n);
    }

    /// Panics if a connection task of the backend panicked.
    pub fn check(&self) {
        let failures = self.record.failures.lock().unwrap();
        if !failures.is_empty() {
            panic!("backend {} failed: {failures:?}", self.addr);
        }
    }

    /// Stops the server and returns once the listener and every open connection are closed.
    pub async fn stop(&self) {
        self.task.abort();
        let connections: Vec<_> = self.connections.lock().unwrap().drain(..).collect();
        for c in &connections {
            c.abort();
        }
        // An aborted task drops its socket when it is next polled: wait (bounded) for each.
        for c in connections {
            for _ in 0..1000 {
                if c.is_finished() {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
            assert!(c.is_finished(), "a backend connection did not stop");
        }
        for _ in 0..1000 {
            if self.task.is_finished() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        panic!("the backend's listener did not stop");
    }
}

impl Drop for Backend {
    fn drop(&mut self) {
        self.task.abort();
        for c in self.connections.lock().unwrap().iter() {
            c.abort();
        }
        if !std::thread::panicking() {
            self.check();
        }
    }
}

/// Behaviour switches for a backend.
#[derive(Clone, Copy, Default)]
pub struct BackendOptions {
    /// Close each connection after this long idle between requests, without telling.
    pub close_idle_after: Option<Duration>,
    /// Close a connection, without answering, when its Nth request head (counted from 1)
    /// arrives: a server connection that breaks after the request went up and before any
    /// response byte, which no check before use can see coming.
    pub drop_request: Option<usize>,
}

/// A test web server. Paths:
/// - `/bytes/N`: N pattern bytes with Content-Length (HEAD: headers only)
/// - `/chunked/N`: N pattern bytes, chunked in uneven pieces
/// - `/close/N`: N pattern bytes delimited by closing the connection
/// - `/sha256`: reads the request body (Content-Length or chunked), answers its SHA-256 and length
/// - `/headers`: answers the request head it received, verbatim
/// - `/status/N`: answers status N without body (304, 204) or with a small body
/// - `/upgrade`: 101 Switching Protocols, then echoes bytes until the client closes
/// - `/continue`: sends 100 Continue first, then behaves like `/sha256`
/// - `/slow/MS`: waits MS milliseconds, then answers `0123456789`
/// - `/hold`: waits until the test calls [`Backend::release`], then answers `0123456789`
/// - `/bye/N`: N pattern bytes with Content-Length and `Connection: close`, then closes
/// - `/hangup`: a small keep-alive answer (no `Connection: close`), then the server closes
/// - `/silent`: never answers
/// - anything else: a small body naming the path
///
/// Every response carries `X-Served-By: <addr>`.
pub async fn backend() -> Backend {
    backend_with(BackendOptions::default()).await
}

pub async fn backend_with(options: BackendOptions) -> Backend {
    serve_backend(TcpListener::bind("127.0.0.1:0").await.unwrap(), options)
}

/// [`backend`] on `addr`, a [`reserved_address`] (SO_REUSEADDR, so it may share the port
/// with the socket that reserved it).
pub async fn backend_at(addr: SocketAddr) -> Backend {
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.set_reuseaddr(true).unwrap();
    socket.bind(addr).unwrap();
    serve_backend(socket.listen(1024).unwrap(), BackendOptions::default())
}

/// A loopback port that refuses connections until a server is started on it. A socket bound to
/// it (SO_REUSEADDR, never listening) keeps it for the test: the kernel gives it to no listener
/// bound to port 0 meanwhile, while a listener bound to it by name (SO_REUSEADDR too) may share
/// it.
pub struct Reserved {
    pub addr: SocketAddr,
    _socket: tokio::net::TcpSocket,
}

pub fn reserved_address() -> Reserved {
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.set_reuseaddr(true).unwrap();
    socket.bind("127.0.0.1:0".parse().unwrap()).unwrap();
    Reserved {
        addr: socket.local_addr().unwrap(),
        _socket: socket,
    }
}

fn serve_backend(listener: TcpListener, options: BackendOptions) -> Backend {
    let addr = listener.local_addr().unwrap();
    let record = Arc::new(Record::default());
    let rec = Arc::clone(&record);
    let connections: Arc<Mutex<Vec<tokio::task::AbortHandle>>> = Arc::default();
    let conns = Arc::clone(&connections);
    let task = tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                return;
            };
            rec.connections.fetch_add(1, Ordering::SeqCst);
            let failures = Arc::clone(&rec);
            let rec = Arc::clone(&rec);
            // I/O errors are the peer's doing (a reset, a close mid-body) and end the
            // connection; a panic is the test's failure and is kept for `Backend::check`.
            let handle = tokio::spawn(async move {
                let _ = serve_connection(stream, addr, Arc::clone(&rec), options).await;
                rec.closed.send_modify(|count| *count += 1);
            });
            let abort = handle.abort_handle();
            tokio::spawn(async move {
                if let Err(e) = handle.await {
                    if e.is_panic() {
                        failures.failures.lock().unwrap().push(panic_text(e));
                    }
                }
            });
            conns.lock().unwrap().push(abort);
        }
    });
    Backend {
        addr,
        record,
        task,
        connections,
    }
}

/// The message of a task's panic.
pub fn panic_text(e: tokio::task::JoinError) -> String {
    let payload = e.into_panic();
    payload
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| payload.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_else(|| "a panic without a message".into())
}

/// Awaits every task and fails with the first panic's message: a failed assertion inside a
/// spawned client must fail the test, not vanish with its task.
pub async fn join_all(tasks: Vec<tokio::task::JoinHandle<()>>) {
    for t in tasks {
        if let Err(e) = t.await {
            panic!("a task of the test failed: {}", panic_text(e));
        }
    }
}

/// A loopback address that refuses connections. Its port stays reserved for the life of the
/// test process (the socket is bound, never listening, and never closed): a port merely freed
/// could be taken again by a listener bound to port 0 meanwhile, even the test's own switch,
/// which would then serve as the "dead" server.
pub async fn dead_address() -> SocketAddr {
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let addr = socket.local_addr().unwrap();
    std::mem::forget(socket);
    addr
}

struct RequestSeen {
    method: String,
    path: String,
    headers: Vec<(String, String)>,
    raw_head: Vec<u8>,
    keep_alive: bool,
}

async fn serve_connection(
    mut stream: TcpStream,
    me: SocketAddr,
    record: Arc<Record>,
    options: BackendOptions,
) -> std::io::Result<()> {
    let mut buf: Vec<u8> = Vec::new();
    let mut served = 0;
    loop {
        // Read a head.
        let (req, head_len) = loop {
            if let Some(found) = parse_request(&buf) {
                break found;
            }
            let mut chunk = [0u8; 16384];
            let read = match options.close_idle_after {
                Some(idle) if buf.is_empty() => {
                    match tokio::time::timeout(idle, stream.read(&mut chunk)).await {
                        Ok(r) => r?,
                        Err(_) => return Ok(()), // close silently while idle
                    }
                }
                _ => stream.read(&mut chunk).await?,
            };
            if read == 0 {
                return Ok(());
            }
            buf.extend_from_slice(&chunk[..read]);
        };
        record
            .heads
            .lock()
            .unwrap()
            .push(String::from_utf8_lossy(&req.raw_head).into_owned());
        record.heads_seen.send_modify(|count| *count += 1);
        buf.drain(..head_len);
        served += 1;
        if options.drop_request == Some(served) {
            return Ok(());
        }
        let header = |name: &str| {
            req.headers
                .iter()
                .find(|(n, _)| n.eq_ignore_ascii_case(name))
                .map(|(_, v)| v.clone())
        };
        let served_by = format!("X-Served-By: {me}\r\n");
        let path = req.path.clone();

        if path == "/continue" {
            stream.write_all(b"HTTP/1.1 100 Continue\r\n\r\n").await?;
        }
        if path == "/duplex" {
            // Full duplex: the response head goes out at once, then every piece of the
            // Content-Length body is echoed as a chunk as soon as it arrives.
            let n: usize = header("content-length").unwrap().trim().parse().unwrap();
            stream
                .write_all(
                    format!("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n{served_by}\r\n")
                        .as_bytes(),
                )
                .await?;
            let mut left = n;
            while left > 0 {
                if buf.is_empty() {
                    let mut chunk = vec![0u8; 65536];
                    let read = stream.read(&mut chunk).await?;
                    if read == 0 {
                        return Ok(());
                    }
                    buf.extend_from_slice(&chunk[..read]);
                }
                let take = buf.len().min(left);
                let piece: Vec<u8> = buf.drain(..take).collect();
                left -= take;
                stream
                    .write_all(format!("{:x}\r\n", piece.len()).as_bytes())
                    .await?;
                stream.write_all(&piece).await?;
                stream.write_all(b"\r\n").await?;
            }
            stream.write_all(b"0\r\n\r\n").await?;
            continue;
        }
        // Read the body.
        let body = if let Some(te) = header("transfer-encoding") {
            assert!(te.to_ascii_lowercase().ends_with("chunked"));
            read_chunked(&mut stream, &mut buf).await?
        } else if let Some(cl) = header("content-length") {
            let n: usize = cl.trim().parse().unwrap();
            while buf.len() < n {
                let mut chunk = vec![0u8; 65536];
                let read = stream.read(&mut chunk).await?;
                if read == 0 {
                    return Ok(());
                }
                buf.extend_from_slice(&chunk[..read]);
            }
            buf.drain(..n).collect()
        } else {
            Vec::new()
        };

        let is_head = req.method == "HEAD";
        let mut out: Vec<u8> = Vec::new();
        let segments: Vec<&str> = path.trim_start_matches('/').split('/').collect();
        match segments.as_slice() {
            ["bytes", n] => {
                let n: usize = n.parse().unwrap();
                let data = pattern(n, n as u64);
                out.extend_from_slice(
                    format!("HTTP/1.1 200 OK\r\nContent-Length: {n}\r\n{served_by}\r\n").as_bytes(),
                );
                if !is_head {
                    out.extend_from_slice(&data);
                }
            }
            ["chunked", n] => {
                let n: usize = n.parse().unwrap();
                let data = pattern(n, n as u64);
                out.extend_from_slice(
                    format!("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n{served_by}\r\n")
                        .as_bytes(),
                );
                let mut at = 0;
                let mut size = 1;
                while at < data.len() {
                    let end = (at + size).min(data.len());
                    out.extend_from_slice(format!("{:x}\r\n", end - at).as_bytes());
                    out.extend_from_slice(&data[at..end]);
                    out.extend_from_slice(b"\r\n");
                    at = end;
                    size = size * 3 + 7;
                    if size > 300_000 {
                        size = 1;
                    }
                }
                out.extend_from_slice(b"0\r\nX-Trailer: done\r\n\r\n");
            }
            ["sendfile", n] => {
                // The body leaves from the page cache (sendfile), as static servers send
                // files: the socket then carries page fragments, unlike write()n bytes.
                let n: usize = n.parse().unwrap();
                // A file of its own, unlinked once open: nothing is left in the temp dir.
                static FILES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
                let unique = FILES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let path = std::env::temp_dir().join(format!(
                    "tcpvs-test-sendfile-{}-{unique}",
                    std::process::id()
                ));
                std::fs::write(&path, pattern(n, n as u64))?;
                let file = std::fs::File::open(&path)?;
                std::fs::remove_file(&path)?;
                stream
                    .write_all(
                        format!("HTTP/1.1 200 OK\r\nContent-Length: {n}\r\n{served_by}\r\n")
                            .as_bytes(),
                    )
                    .await?;
                let mut offset = 0u64;
                while (offset as usize) < n {
                    let left = n - offset as usize;
                    let sent = stream.try_io(tokio::io::Interest::WRITABLE, || {
                        rustix::fs::sendfile(&stream, &file, Some(&mut offset), left)
                            .map_err(std::io::Error::from)
                    });
                    match sent {
                        Ok(_) => {}
                        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                            stream.writable().await?
                        }
                        Err(e) => return Err(e),
                    }
                }
            }
            ["close", n] => {
                let n: usize = n.parse().unwrap();
                out.extend_from_slice(
                    format!("HTTP/1.1 200 OK\r\n{served_by}Connection: close\r\n\r\n").as_bytes(),
                );
                out.extend_from_slice(&pattern(n, n as u64));
                stream.write_all(&out).await?;
                return Ok(());
            }
            ["sha256"] | ["continue"] => {
                let text = format!("{} {}\n", sha256_hex(&body), body.len());
                out.extend_from_slice(
                    format!(
                        "HTTP/1.1 200 OK\r\nContent-Length: {}\r\n{served_by}\r\n{text}",
                        text.len()
                    )
                    .as_bytes(),
                );
            }
            ["headers"] => {
                out.extend_from_slice(
                    format!(
                        "HTTP/1.1 200 OK\r\nContent-Length: {}\r\n{served_by}\r\n",
                        req.raw_head.len()
                    )
                    .as_bytes(),
                );
                out.extend_from_slice(&req.raw_head);
            }
            ["status", code] => {
                let code: u16 = code.parse().unwrap();
                if code == 304 || code == 204 {
                    out.extend_from_slice(
                        format!("HTTP/1.1 {code} X\r\nETag: \"abc\"\r\nContent-Length: 5\r\n{served_by}\r\n").as_bytes(),
                    );
                } else {
                    out.extend_from_slice(
                        format!("HTTP/1.1 {code} X\r\nContent-Length: 2\r\n{served_by}\r\nok")
                            .as_bytes(),
                    );
                }
            }
            ["upgrade"] => {
                stream
                    .write_all(format!("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n{served_by}\r\n").as_bytes())
                    .await?;
                if !buf.is_empty() {
                    stream.write_all(&buf).await?;
                }
                let mut chunk = vec![0u8; 65536];
                loop {
                    let n = stream.read(&mut chunk).await?;
                    if n == 0 {
                        stream.shutdown().await?;
                        return Ok(());
                    }
                    stream.write_all(&chunk[..n]).await?;
                }
            }
            ["processing", n, ms] => {
                // N interim 102s, MS milliseconds apart, before the answer: the server works.
                for _ in 0..n.parse::<usize>().unwrap() {
                    tokio::time::sleep(Duration::from_millis(ms.parse().unwrap())).await;
                    stream.write_all(b"HTTP/1.1 102 Processing\r\n\r\n").await?;
                }
                let text = format!("{} {}\n", sha256_hex(&body), body.len());
                out.extend_from_slice(
                    format!(
                        "HTTP/1.1 200 OK\r\nContent-Length: {}\r\n{served_by}\r\n{text}",
                        text.len()
                    )
                    .as_bytes(),
                );
            }
            ["slow", ms] => {
                tokio::time::sleep(Duration::from_millis(ms.parse().unwrap())).await;
                out.extend_from_slice(
                    format!("HTTP/1.1 200 OK\r\nContent-Length: 10\r\n{served_by}\r\n0123456789")
                        .as_bytes(),
                );
            }
            ["hold"] => {
                record
                    .gate
                    .acquire()
                    .await
                    .expect("the gate stays open")
                    .forget();
                out.extend_from_slice(
                    format!("HTTP/1.1 200 OK\r\nContent-Length: 10\r\n{served_by}\r\n0123456789")
                        .as_bytes(),
                );
            }
            ["bye", n] => {
                let n: usize = n.parse().unwrap();
                out.extend_from_slice(
                    format!(
                        "HTTP/1.1 200 OK\r\nContent-Length: {n}\r\nConnection: close\r\n{served_by}\r\n"
                    )
                    .as_bytes(),
                );
                out.extend_from_slice(&pattern(n, n as u64));
                stream.write_all(&out).await?;
                return Ok(());
            }
            ["hangup"] => {
                out.extend_from_slice(
                    format!("HTTP/1.1 200 OK\r\nContent-Length: 6\r\n{served_by}\r\nhangup")
                        .as_bytes(),
                );
                stream.write_all(&out).await?;
                return Ok(());
            }
            ["silent"] => {
                tokio::time::sleep(Duration::from_secs(3600)).await;
            }
            _ => {
                let text = format!("path {path}\n");
                out.extend_from_slice(
                    format!(
                        "HTTP/1.1 200 OK\r\nContent-Length: {}\r\n{served_by}\r\n{text}",
                        text.len()
                    )
                    .as_bytes(),
                );
            }
        }
        stream.write_all(&out).await?;
        if !req.keep_alive {
            return Ok(());
        }
    }
}

fn parse_request(buf: &[u8]) -> Option<(RequestSeen, usize)> {
    let mut headers = [httparse::EMPTY_HEADER; 128];
    let mut req = httparse::Request::new(&mut headers);
    match req.parse(buf) {
        Ok(httparse::Status::Complete(len)) => {
            let headers: Vec<(String, String)> = req
                .headers
                .iter()
                .map(|h| {
                    (
                        h.name.to_string(),
                        String::from_utf8_lossy(h.value).into_owned(),
                    )
                })
                .collect();
            let close = headers.iter().any(|(n, v)| {
                n.eq_ignore_ascii_case("connection") && v.to_ascii_lowercase().contains("close")
            });
            let keep_alive = req.version == Some(1) && !close;
            Some((
                RequestSeen {
                    method: req.method.unwrap().to_string(),
                    path: req.path.unwrap().split('?').next().unwrap().to_string(),
                    headers,
                    raw_head: buf[..len].to_vec(),
                    keep_alive,
                },
                len,
            ))
        }
        Ok(httparse::Status::Partial) => None,
        Err(e) => panic!(
            "backend got an invalid request: {e}: {:?}",
            String::from_utf8_lossy(buf)
        ),
    }
}

/// Reads a chunked body from `buf` + `stream`; returns the decoded bytes. Test-side decoder.
async fn read_chunked(stream: &mut TcpStream, buf: &mut Vec<u8>) -> std::io::Result<Vec<u8>> {
    let mut body = Vec::new();
    loop {
        let line_end = loop {
            if let Some(i) = buf.windows(2).position(|w| w == b"\r\n") {
                break i;
            }
            fill(stream, buf).await?;
        };
        let line = String::from_utf8_lossy(&buf[..line_end]).into_owned();
        let size = usize::from_str_radix(line.split(';').next().unwrap().trim(), 16).unwrap();
        buf.drain(..line_end + 2);
        if size == 0 {
            // Trailers until an empty line.
            loop {
                let end = loop {
                    if let Some(i) = buf.windows(2).position(|w| w == b"\r\n") {
                        break i;
                    }
                    fill(stream, buf).await?;
                };
                buf.drain(..end + 2);
                if end == 0 {
                    return Ok(body);
                }
            }
        }
        while buf.len() < size + 2 {
            fill(stream, buf).await?;
        }
        body.extend_from_slice(&buf[..size]);
        assert_eq!(&buf[size..size + 2], b"\r\n");
        buf.drain(..size + 2);
    }
}

async fn fill(stream: &mut TcpStream, buf: &mut Vec<u8>) -> std::io::Result<()> {
    let mut chunk = vec![0u8; 65536];
    let n = tokio::time::timeout(PATIENCE, stream.read(&mut chunk))
        .await
        .map_err(|_| std::io::Error::from(std::io::ErrorKind::TimedOut))??;
    if n == 0 {
        return Err(std::io::ErrorKind::UnexpectedEof.into());
    }
    buf.extend_from_slice(&chunk[..n]);
    Ok(())
}

// ---------------------------------------------------------------- client

#[derive(Debug)]
pub struct Response {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
    pub trailers: Vec<u8>,
}

impl Response {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    pub fn served_by(&self) -> String {
        self.header("x-served-by").unwrap_or("-").to_string()
    }

    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

/// A raw HTTP/1.x client over one connection: TCP, or TLS over TCP (`tls::connect`).
pub struct Client<S = TcpStream> {
    pub stream: S,
    buf: Vec<u8>,
}

impl Client {
    pub async fn connect(addr: SocketAddr) -> Client {
        let stream = TcpStream::connect(addr).await.unwrap();
        stream.set_nodelay(true).unwrap();
        Client::over(stream)
    }

    /// Connects from the loopback address `source` (any of 127.0.0.0/8; the port is the
    /// kernel's), so that tests can tell clients apart by address, as servers behind a chain
    /// of proxies must.
    pub async fn connect_from(source: std::net::IpAddr, addr: SocketAddr) -> Client {
        let socket = match source {
            std::net::IpAddr::V4(_) => tokio::net::TcpSocket::new_v4(),
            std::net::IpAddr::V6(_) => tokio::net::TcpSocket::new_v6(),
        }
        .unwrap();
        socket
            .bind(SocketAddr::new(source, 0))
            .unwrap_or_else(|e| panic!("bind to {source}: {e}"));
        let stream = socket.connect(addr).await.unwrap();
        stream.set_nodelay(true).unwrap();
        Client {
            stream,
            buf: Vec::new(),
        }
    }
}

impl<S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin> Client<S> {
    /// A client on a connection made already.
    pub fn over(stream: S) -> Client<S> {
        Client {
            stream,
            buf: Vec::new(),
        }
    }

    pub async fn send(&mut self, bytes: &[u8]) {
        self.stream.write_all(bytes).await.unwrap();
        // A TLS stream holds records until flushed; a TCP one flushes at once.
        self.stream.flush().await.unwrap();
    }

    pub async fn get(&mut self, path: &str) -> Response {
        self.send(format!("GET {path} HTTP/1.1\r\nHost: test\r\n\r\n").as_bytes())
            .await;
        self.response(false).await
    }

    /// A GET naming `localhost`, as the admin endpoint wants of requests from this machine.
    pub async fn get_local(&mut self, path: &str) -> Response {
        self.send(format!("GET {path} HTTP/1.1\r\nHost: localhost\r\n\r\n").as_bytes())
            .await;
        self.response(false).await
    }

    /// Reads one response; `head_request` says the request was HEAD (no body follows).
    pub async fn response(&mut self, head_request: bool) -> Response {
        self.try_response(head_request).await.expect("a response")
    }

    /// Reads one response, or `None` if the connection closed cleanly before any byte of it.
    /// Silence for [`PATIENCE`] panics: a close is never inferred from a timeout.
    pub async fn try_response(&mut self, head_request: bool) -> Option<Response> {
        let (status, headers, head_len) = loop {
            let mut hs = [httparse::EMPTY_HEADER; 128];
            let mut resp = httparse::Response::new(&mut hs);
            if let Ok(httparse::Status::Complete(len)) = resp.parse(&self.buf) {
                let headers = resp
                    .headers
                    .iter()
                    .map(|h| {
                        (
                            h.name.to_string(),
                            String::from_utf8_lossy(h.value).into_owned(),
                        )
                    })
                    .collect::<Vec<_>>();
                break (resp.code.unwrap(), headers, len);
            }
            if !self.fill().await {
                assert!(
                    self.buf.is_empty(),
                    "connection closed inside a response head: {:?}",
                    String::from_utf8_lossy(&self.buf)
                );
                return None;
            }
        };
        self.buf.drain(..head_len);
        let find = |name: &str| {
            headers
                .iter()
                .find(|(n, _)| n.eq_ignore_ascii_case(name))
                .map(|(_, v)| v.clone())
        };
        let mut trailers = Vec::new();
        let body = if head_request || status == 204 || status == 304 || (100..200).contains(&status)
        {
            Vec::new()
        } else if find("transfer-encoding").is_some() {
            let mut body = Vec::new();
            loop {
                let line_end = loop {
                    if let Some(i) = self.buf.windows(2).position(|w| w == b"\r\n") {
                        break i;
                    }
                    assert!(self.fill().await, "eof inside chunked body");
                };
                let line = String::from_utf8_lossy(&self.buf[..line_end]).into_owned();
                let size = usize::from_str_radix(line.trim(), 16).expect("chunk size");
                self.buf.drain(..line_end + 2);
                if size == 0 {
                    loop {
                        let end = loop {
                            if let Some(i) = self.buf.windows(2).position(|w| w == b"\r\n") {
                                break i;
                            }
                            assert!(self.fill().await, "eof in trailers");
                        };
                        let line: Vec<u8> = self.buf.drain(..end + 2).collect();
                        if end == 0 {
                            break;
                        }
                        trailers.extend_from_slice(&line);
                    }
                    break body;
                }
                while self.buf.len() < size + 2 {
                    assert!(self.fill().await, "eof inside chunk");
                }
                body.extend_from_slice(&self.buf[..size]);
                assert_eq!(
                    &self.buf[size..size + 2],
                    b"\r\n",
                    "chunk data must end in CRLF"
                );
                self.buf.drain(..size + 2);
            }
        } else if let Some(cl) = find("content-length") {
            let n: usize = cl.trim().parse().unwrap();
            while self.buf.len() < n {
                assert!(self.fill().await, "eof inside content-length body");
            }
            self.buf.drain(..n).collect()
        } else {
            while self.fill().await {}
            std::mem::take(&mut self.buf)
        };
        Some(Response {
            status,
            headers,
            body,
            trailers,
        })
    }

    /// Reads more: true when bytes came, false when the peer closed (EOF or reset). Panics
    /// when nothing comes within [`PATIENCE`].
    async fn fill(&mut self) -> bool {
        let mut chunk = vec![0u8; 65536];
        match tokio::time::timeout(PATIENCE, self.stream.read(&mut chunk)).await {
            Ok(Ok(0)) => false,
            Ok(Ok(n)) => {
                self.buf.extend_from_slice(&chunk[..n]);
                true
            }
            Ok(Err(e)) if is_close(&e) => false,
            Ok(Err(e)) => panic!("read from the switch failed: {e}"),
            Err(_) => panic!(
                "nothing from the switch within {PATIENCE:?} (have {:?})",
                String::from_utf8_lossy(&self.buf)
            ),
        }
    }

    /// Reads until `bytes` have arrived (they stay buffered for the next `response`); panics
    /// if the switch closes first or sends nothing for [`PATIENCE`].
    pub async fn wait_for_bytes(&mut self, bytes: &[u8]) {
        while !self.buf.windows(bytes.len()).any(|w| w == bytes) {
            assert!(
                self.fill().await,
                "closed before {:?} arrived",
                String::from_utf8_lossy(bytes)
            );
        }
    }

    /// Bytes already read past the last response (e.g. tunnel data that came with a 101).
    pub fn take_buffered(&mut self) -> Vec<u8> {
        std::mem::take(&mut self.buf)
    }

    /// True when the switch closed the connection (EOF or reset) with nothing more to read;
    /// false when bytes came instead. Panics when neither happens within [`PATIENCE`]: a
    /// close is observed, never inferred from silence.
    pub async fn is_closed(&mut self) -> bool {
        if !self.buf.is_empty() {
            return false;
        }
        let mut byte = [0u8; 1];
        match tokio::time::timeout(PATIENCE, self.stream.read(&mut byte)).await {
            Ok(Ok(0)) => true,
            Ok(Ok(_)) => {
                self.buf.push(byte[0]);
                false
            }
            Ok(Err(e)) if is_close(&e) => true,
            Ok(Err(e)) => panic!("read from the switch failed: {e}"),
            Err(_) => {
                panic!("the switch neither closed the connection nor sent within {PATIENCE:?}")
            }
        }
    }
}

/// Through a tunnel on `stream`: sends `data` and then ends this side, while reading all the
/// other side sends until it ends. Returns `already` (bytes read with the 101) and what came.
pub async fn through_tunnel<S>(stream: S, already: Vec<u8>, data: &[u8]) -> Vec<u8>
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite,
{
    let (mut reader, mut writer) = tokio::io::split(stream);
    let send = async {
        writer.write_all(data).await.unwrap();
        writer.shutdown().await.unwrap();
    };
    let receive = async {
        let mut got = already;
        tokio::time::timeout(PATIENCE, reader.read_to_end(&mut got))
            .await
            .expect("the tunnel ends within PATIENCE")
            .expect("reading the tunnel to its end");
        got
    };
    let ((), got) = tokio::join!(send, receive);
    got
}

/// Errors that mean the peer closed the connection.
fn is_close(e: &std::io::Error) -> bool {
    matches!(
        e.kind(),
        std::io::ErrorKind::ConnectionReset
            | std::io::ErrorKind::ConnectionAborted
            | std::io::ErrorKind::BrokenPipe
    )
}

/// Sends `request` on a raw connection and reads one response framed by Content-Length:
/// its status, the number of bytes it took on the wire (head and body, as the access log counts
/// them) and its body. Written here rather than taken from `Client`, which does not tell how
/// long the head was.
pub async fn counted_exchange(
    stream: &mut tokio::net::TcpStream,
    request: &str,
    buf: &mut Vec<u8>,
) -> (u16, usize, Vec<u8>) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut chunk = vec![0u8; 65536];
    loop {
        let mut fields = [httparse::EMPTY_HEADER; 64];
        let mut response = httparse::Response::new(&mut fields);
        if let httparse::Status::Complete(head_len) = response.parse(buf).unwrap() {
            let length: usize = response
                .headers
                .iter()
                .find(|h| h.name.eq_ignore_ascii_case("content-length"))
                .map(|h| {
                    std::str::from_utf8(h.value)
                        .unwrap()
                        .trim()
                        .parse()
                        .unwrap()
                })
                .expect("a response with Content-Length");
            if buf.len() >= head_len + length {
                let status = response.code.unwrap();
                let body = buf[head_len..head_len + length].to_vec();
                buf.drain(..head_len + length);
                return (status, head_len + length, body);
            }
        }
        let n = tokio::time::timeout(PATIENCE, stream.read(&mut chunk))
            .await
            .expect("the switch answers within PATIENCE")
            .unwrap();
        assert!(n > 0, "the switch closed inside a response: {buf:?}");
        buf.extend_from_slice(&chunk[..n]);
    }
}

// ---------------------------------------------------------------- switch

/// Starts a switch from rule-file text; `{name}` placeholders are replaced by `vars`.
pub async fn start_switch(rules: &str, vars: &[(&str, String)]) -> tcpvs::Switch {
    let mut text = rules.to_string();
    for (name, value) in vars {
        text = text.replace(&format!("{{{name}}}"), value);
    }
    let config =
        tcpvs::Config::parse("test.toml", &text).unwrap_or_else(|e| panic!("rules:\n{text}\n{e}"));
    tcpvs::Switch::start(config).await.unwrap()
}

/// Waits until the switch has no client connection and no active request; panics if that
/// does not happen within [`PATIENCE`].
pub async fn settle(switch: &tcpvs::Switch) -> tcpvs::state::snapshot::Snapshot {
    wait_until(switch, "no client and no request active", |snap| {
        snap.clients == 0 && snap.servers.iter().all(|s| s.active == 0)
    })
    .await
}

/// Waits until the switch's statistics satisfy `reached` and returns them; panics with `what`
/// if they do not within [`PATIENCE`]. Tests synchronise on the switch's state this way.
pub async fn wait_until(
    switch: &tcpvs::Switch,
    what: &str,
    reached: impl Fn(&tcpvs::state::snapshot::Snapshot) -> bool,
) -> tcpvs::state::snapshot::Snapshot {
    let deadline = tokio::time::Instant::now() + PATIENCE;
    loop {
        let snap = switch.stats();
        if reached(&snap) {
            return snap;
        }
        if tokio::time::Instant::now() >= deadline {
            panic!("the switch never reached `{what}` within {PATIENCE:?}: {snap:?}");
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

pub mod dns;
pub mod grpc_origin;
pub mod h2_origin;
pub mod tls;
pub mod tls_origin;

// ---------------------------------------------------------------- the tcpvs binary

/// A folder of the test's own under the temporary directory (process id and test name), removed
/// when dropped, so a failed assertion leaves nothing behind either.
pub struct Scratch(pub std::path::PathBuf);

impl Scratch {
    pub fn new(test: &str) -> Scratch {
        let dir = std::env::temp_dir().join(format!("tcpvs-test-{}-{test}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        Scratch(dir)
    }

    /// Writes `text` to the file `name` in the folder and returns its path.
    pub fn file(&self, name: &str, text: &str) -> std::path::PathBuf {
        let path = self.0.join(name);
        std::fs::write(&path, text).unwrap();
        path
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Line and column (1-based) of the first occurrence of `needle` in `text`.
pub fn position_of(text: &str, needle: &str) -> (usize, usize) {
    let at = text
        .find(needle)
        .unwrap_or_else(|| panic!("{needle:?} not in the file"));
    let line = text[..at].matches('\n').count() + 1;
    let col = at - text[..at].rfind('\n').map_or(0, |i| i + 1) + 1;
    (line, col)
}

/// The resident memory (VmRSS) of process `pid`, in KiB: what a test bounds a process's memory by.
pub fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("/proc/PID/status");
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmRSS in /proc/PID/status")
}

/// A `tcpvs` process started by a test, with its log lines (stderr) as they come. Killed when
/// dropped, so a failed assertion leaves no process behind.
pub struct Process {
    child: Option<std::process::Child>,
    pub log: std::sync::mpsc::Receiver<String>,
}

impl Process {
    /// Starts the binary with `args` and `RUST_LOG=info`.
    pub fn start(args: &[&std::ffi::OsStr]) -> Process {
        let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_tcpvs"));
        command.args(args);
        Process::spawn(command)
    }

    /// [`Process::start`] under the open-file limit that `sh`'s `ulimit` sets with `options`
    /// (`"-S -n 256"`: the soft limit only; `"-n 200"`: soft and hard).
    pub fn start_under(ulimit_options: &str, args: &[&std::ffi::OsStr]) -> Process {
        let mut command = std::process::Command::new("sh");
        command
            .arg("-c")
            .arg(format!("ulimit {ulimit_options} && exec \"$0\" \"$@\""))
            .arg(env!("CARGO_BIN_EXE_tcpvs"))
            .args(args);
        Process::spawn(command)
    }

    fn spawn(mut command: std::process::Command) -> Process {
        use std::io::BufRead;
        let mut child = command
            .env("RUST_LOG", "info")
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let stderr = child.stderr.take().unwrap();
        let (tx, log) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(stderr)
                .lines()
                .map_while(Result::ok)
            {
                let _ = tx.send(line);
            }
        });
        Process {
            child: Some(child),
            log,
        }
    }

    pub fn id(&self) -> u32 {
        self.child.as_ref().map_or(0, std::process::Child::id)
    }

    /// The address in the first log line that has `http://` right after `marker`; the lines
    /// read before it are returned too.
    pub fn address_after(&self, marker: &str) -> (SocketAddr, Vec<String>) {
        let mut seen = Vec::new();
        loop {
            let line = self
                .log
                .recv_timeout(Duration::from_secs(20))
                .unwrap_or_else(|_| panic!("no `{marker}http[s]://` line from tcpvs: {seen:?}"));
            let addr = ["http://", "https://"].iter().find_map(|scheme| {
                line.split(&format!("{marker}{scheme}"))
                    .nth(1)
                    .and_then(|rest| rest.split('/').next())
                    .and_then(|a| a.parse().ok())
            });
            seen.push(line);
            if let Some(addr) = addr {
                return (addr, seen);
            }
        }
    }

    /// Stops it as an operator does (SIGTERM) and returns how it exited. Blocks: call it from
    /// `spawn_blocking` in async tests.
    pub fn terminate(&mut self) -> std::process::ExitStatus {
        let mut child = self.child.take().expect("terminated once");
        let pid = rustix::process::Pid::from_child(&child);
        rustix::process::kill_process(pid, rustix::process::Signal::TERM).unwrap();
        child.wait().unwrap()
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// How long a test waits for a log line (or for the log to end) before it fails: a guard
/// against hangs, as generous as [`Process::address_after`]'s.
pub const LOG_PATIENCE: Duration = Duration::from_secs(20);

/// Sends `signal` to the process (without waiting for what it does).
pub fn signal(process: &Process, signal: rustix::process::Signal) {
    let pid = rustix::process::Pid::from_raw(process.id() as i32).expect("a running process");
    rustix::process::kill_process(pid, signal).unwrap();
}

/// Reads the process's log up to the first line containing `needle`: that line, and the
/// lines before it. The process moves into the blocking task and back, so that a failure here
/// drops (kills) it.
pub async fn line_with(process: Process, needle: &str) -> (Process, String, Vec<String>) {
    let needle = needle.to_string();
    tokio::task::spawn_blocking(move || {
        let mut seen = Vec::new();
        loop {
            match process.log.recv_timeout(LOG_PATIENCE) {
                Ok(line) if line.contains(&needle) => return (process, line, seen),
                Ok(line) => seen.push(line),
                Err(e) => panic!("no log line with {needle:?} ({e}); lines: {seen:#?}"),
            }
        }
    })
    .await
    .unwrap()
}

/// Reads the rest of the log until the process closes its stderr by exiting, then returns
/// those lines and how it exited. It must be stopping already (SIGTERM sent): a process still
/// running after [`LOG_PATIENCE`] fails the test, and is killed, instead of hanging it.
pub async fn log_to_end(process: Process) -> (Vec<String>, std::process::ExitStatus) {
    tokio::task::spawn_blocking(move || {
        let mut process = process;
        let mut lines = Vec::new();
        loop {
            match process.log.recv_timeout(LOG_PATIENCE) {
                Ok(line) => lines.push(line),
                Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => break,
                Err(e) => panic!("tcpvs did not end its log ({e}); lines: {lines:#?}"),
            }
        }
        // It has exited (a zombie until waited for): the SIGTERM terminate sends is harmless,
        // and the wait returns at once.
        let status = process.terminate();
        (lines, status)
    })
    .await
    .unwrap()
}

/// SIGTERM, then the rest of the log and the exit status.
pub async fn stop(process: Process) -> (Vec<String>, std::process::ExitStatus) {
    signal(&process, rustix::process::Signal::TERM);
    log_to_end(process).await
}
