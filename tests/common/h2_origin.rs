//! An HTTP/2 origin server for the tests of HTTP/2 to servers (issue 44), on the h2 crate's
//! server side (the switch's h2 code is its client side toward servers, its server side toward
//! clients, and neither is used here), over TCP with prior knowledge (h2c) or over TLS with ALPN
//! (tokio-rustls; certificates from `tls_origin::OriginCa`).
//!
//! It records, per accepted TCP connection: the TLS server name and ALPN offer (TLS only), the
//! protocol ALPN chose, whether the HTTP/2 preface came (or why not), the streams accepted, those
//! it refused, those that came after its GOAWAY, and the most streams it was serving at once; per
//! request: method, `:scheme`, `:authority`, `:path` (query included), every header field as it
//! came (names lower case, repeated names kept), the body's length and SHA-256, and its trailers.
//! Across connections it records the most streams it was serving at once in total.
//!
//! A stream counts as being served from the moment the origin accepts it until just before the
//! origin queues its last frame (END_STREAM or the reset): always within the time the client
//! counts it in flight, so a client that keeps to a limit is never seen above it.
//!
//! It answers:
//! - `GET /size/N`: N bytes of `pattern(N, N)` with `content-length`
//! - `/trailers`: the request body's `"<sha256 hex> <len>\n"`, then trailers `grpc-status: 0`,
//!   `x-t: 1` (no `content-length`)
//! - `/trailers/N`: N bytes of `pattern(N, N)`, then the same trailers
//! - `/trailers-only`: a response HEADERS, then the trailers, and no DATA frame at all
//! - `/health`: 200 `ok\n`
//! - `/empty`: 200 in one HEADERS frame with END_STREAM, no `content-length`
//! - `/204-with-data`: a malformed answer, 204 then DATA holding what reads as another
//!   HTTP/1.1 response (`X-Smuggled: yes`)
//! - `/hold`: waits until the test calls [`H2Origin::release`], then 200 `held\n`
//! - `POST` or `PUT` to any other path: the body's `"<sha256 hex> <len>\n"`
//! - anything else: 200 `path <path>\n`
//!
//! Every answer carries `x-served-by: <the origin's address>` and `x-connection: <index of its
//! connection>`. Options ([`H2Options`]): `SETTINGS_MAX_CONCURRENT_STREAMS`, refusing the first N
//! streams (RST_STREAM REFUSED_STREAM, across connections), a graceful GOAWAY once a connection
//! has accepted N streams (the h2 crate's: GOAWAY with the highest stream id and a PING, then,
//! after its answer, GOAWAY with the last stream id; streams accepted before that are served), and
//! a delay before each answer.

use super::tls::Leaf;
use super::{pattern, sha256_hex, PATIENCE};
use bytes::Bytes;
use h2::server::SendResponse;
use h2::{Reason, RecvStream, SendStream};
use http::{HeaderMap, HeaderValue, Request, Response};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::PrivateKeyDer;
use rustls::ServerConfig;
use std::future::poll_fn;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{watch, Semaphore};

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

// ---------------------------------------------------------------- options

/// How the origin behaves; the default serves every stream at once, with no stream limit.
#[derive(Clone, Default)]
pub struct H2Options {
    /// SETTINGS_MAX_CONCURRENT_STREAMS announced (and enforced by the h2 crate, which refuses a
    /// stream beyond it).
    pub max_concurrent_streams: Option<u32>,
    /// The first N streams the origin accepts, counted across its connections, are refused with
    /// RST_STREAM REFUSED_STREAM (their request is not read).
    pub refuse_first: usize,
    /// A connection that has accepted this many streams says GOAWAY (gracefully).
    pub goaway_after: Option<usize>,
    /// Waited before each answer.
    pub delay: Option<Duration>,
    /// ALPN protocols the origin takes over TLS, most preferred first; empty: `h2` alone.
    pub alpn: Vec<Vec<u8>>,
}

// ---------------------------------------------------------------- what the origin saw

/// One accepted TCP connection.
#[derive(Clone, Debug, Default)]
pub struct ConnectionSeen {
    /// The connection is TLS.
    pub tls: bool,
    /// The server name of the ClientHello (TLS only).
    pub sni: Option<String>,
    /// The ALPN protocols the ClientHello offered (TLS only; empty: none).
    pub alpn_offered: Vec<Vec<u8>>,
    /// The protocol ALPN chose (TLS only).
    pub alpn: Option<Vec<u8>>,
    /// The HTTP/2 connection preface came and the connection was set up.
    pub h2: bool,
    /// Why the TLS handshake, the HTTP/2 preface or the connection failed, if one did.
    pub error: Option<String>,
    /// Streams accepted, refused ones included.
    pub streams: usize,
    /// Streams refused with REFUSED_STREAM by the origin itself.
    pub refused: usize,
    /// The origin said GOAWAY on this connection.
    pub goaway: bool,
    /// Streams accepted after the origin said GOAWAY on this connection.
    pub after_goaway: usize,
    /// Streams being served now, and the most at once.
    pub active: usize,
    pub max_active: usize,
    /// The connection has ended.
    pub ended: bool,
}

/// One request the origin read whole (body and trailers) and answered.
#[derive(Clone, Debug)]
pub struct OriginRequest {
    /// Index of its connection in [`H2Origin::connections`].
    pub connection: usize,
    pub stream: u32,
    pub method: String,
    /// `:scheme`. The h2 crate keeps it only beside an `:authority` (an `http::Uri` has no
    /// scheme without one): `None` when either was absent.
    pub scheme: Option<String>,
    pub authority: Option<String>,
    /// `:path`, query included.
    pub path: String,
    /// Every header field as it came, names lower case, in order.
    pub headers: Vec<(String, String)>,
    pub body_len: usize,
    pub body_sha256: String,
    /// The trailers that ended the request, if any.
    pub trailers: Option<Vec<(String, String)>>,
}

impl OriginRequest {
    /// The first value of the field `name` (lower case).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    /// Whether a field `name` (lower case) came.
    pub fn has(&self, name: &str) -> bool {
        self.header(name).is_some()
    }

    /// The first value of the trailer `name` (lower case).
    pub fn trailer(&self, name: &str) -> Option<&str> {
        self.trailers
            .as_ref()?
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}

/// A stream the origin refused.
#[derive(Clone, Debug)]
pub struct RefusedStream {
    pub connection: usize,
    pub stream: u32,
    pub method: String,
    pub path: String,
}

/// Everything the origin saw so far.
#[derive(Clone, Debug, Default)]
pub struct Seen {
    pub connections: Vec<ConnectionSeen>,
    pub requests: Vec<OriginRequest>,
    pub refused: Vec<RefusedStream>,
    /// Streams being served now on every connection, and the most at once.
    pub active: usize,
    pub max_active: usize,
    /// Panics of the origin's tasks: the test fails when the origin is dropped.
    failures: Vec<String>,
}

impl Seen {
    /// Streams accepted on every connection so far, refused ones included.
    pub fn streams(&self) -> usize {
        self.connections.iter().map(|c| c.streams).sum()
    }
}

struct Record {
    seen: Mutex<Seen>,
    /// Bumped on every change of `seen`, for tests that wait for an event.
    changed: watch::Sender<u64>,
    /// Requests to `/hold` wait here for a permit the test gives with [`H2Origin::release`].
    gate: Semaphore,
}

impl Record {
    fn update<T>(&self, f: impl FnOnce(&mut Seen) -> T) -> T {
        let out = f(&mut self.seen.lock().unwrap());
        self.changed.send_modify(|n| *n += 1);
        out
    }

    fn connection(&self, index: usize, f: impl FnOnce(&mut ConnectionSeen)) {
        self.update(|seen| f(&mut seen.connections[index]));
    }
}

/// A stream being served: counted on its connection and in total until dropped.
struct Active {
    record: Arc<Record>,
    connection: usize,
}

impl Active {
    /// Counts a stream just accepted on `connection`.
    fn start(record: &Arc<Record>, connection: usize) -> Active {
        record.update(|seen| {
            let c = &mut seen.connections[connection];
            c.active += 1;
            c.max_active = c.max_active.max(c.active);
            seen.active += 1;
            seen.max_active = seen.max_active.max(seen.active);
        });
        Active {
            record: Arc::clone(record),
            connection,
        }
    }
}

impl Drop for Active {
    fn drop(&mut self) {
        self.record.update(|seen| {
            seen.connections[self.connection].active -= 1;
            seen.active -= 1;
        });
    }
}

// ---------------------------------------------------------------- the origin

pub struct H2Origin {
    pub addr: SocketAddr,
    record: Arc<Record>,
    task: tokio::task::JoinHandle<()>,
    tasks: Arc<Mutex<Vec<tokio::task::AbortHandle>>>,
}

impl H2Origin {
    /// An HTTP/2 origin with prior knowledge (h2c) on 127.0.0.1.
    pub async fn start(options: H2Options) -> H2Origin {
        H2Origin::listen(None, options).await
    }

    /// An HTTP/2 origin over TLS on 127.0.0.1, serving `leaf`, ALPN as `options.alpn` says.
    pub async fn start_tls(leaf: &Leaf, options: H2Options) -> H2Origin {
        let config = Arc::new(server_config(leaf, &options));
        H2Origin::listen(Some(config), options).await
    }

    async fn listen(tls: Option<Arc<ServerConfig>>, options: H2Options) -> H2Origin {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let record = Arc::new(Record {
            seen: Mutex::default(),
            changed: watch::channel(0).0,
            gate: Semaphore::new(0),
        });
        let tasks: Arc<Mutex<Vec<tokio::task::AbortHandle>>> = Arc::default();
        let origin = Origin {
            me: addr,
            record: Arc::clone(&record),
            options: Arc::new(options),
            tasks: Arc::clone(&tasks),
        };
        let task = tokio::spawn(async move {
            while let Ok((tcp, _)) = listener.accept().await {
                let _ = tcp.set_nodelay(true);
                let index = origin.record.update(|seen| {
                    seen.connections.push(ConnectionSeen {
                        tls: tls.is_some(),
                        ..ConnectionSeen::default()
                    });
                    seen.connections.len() - 1
                });
                let (origin2, tls) = (origin.clone(), tls.clone());
                origin.spawn(async move {
                    match tls {
                        Some(config) => origin2.accept_tls(tcp, index, config).await,
                        None => origin2.serve(tcp, index).await,
                    }
                    origin2.record.connection(index, |c| c.ended = true);
                });
            }
        });
        H2Origin {
            addr,
            record,
            task,
            tasks,
        }
    }

    /// Everything seen so far.
    pub fn seen(&self) -> Seen {
        self.record.seen.lock().unwrap().clone()
    }

    /// Every connection accepted so far, in accept order.
    pub fn connections(&self) -> Vec<ConnectionSeen> {
        self.seen().connections
    }

    /// Every request read and answered so far, in the order they were read whole.
    pub fn requests(&self) -> Vec<OriginRequest> {
        self.seen().requests
    }

    /// Every stream refused so far.
    pub fn refused(&self) -> Vec<RefusedStream> {
        self.seen().refused
    }

    /// Lets `n` requests waiting in `/hold` answer.
    pub fn release(&self, n: usize) {
        self.record.gate.add_permits(n);
    }

    /// Waits until `reached` holds for what the origin saw; panics after [`PATIENCE`] with
    /// `what`.
    pub async fn wait_for(&self, what: &str, reached: impl Fn(&Seen) -> bool) {
        let mut changed = self.record.changed.subscribe();
        let done = tokio::time::timeout(PATIENCE, async {
            loop {
                if reached(&self.record.seen.lock().unwrap()) {
                    return;
                }
                if changed.changed().await.is_err() {
                    return;
                }
            }
        })
        .await;
        if done.is_err() {
            let seen = self.record.seen.lock().unwrap();
            panic!(
                "h2 origin {}: `{what}` not reached within {PATIENCE:?}: connections {:#?}, \
                 requests {:#?}, refused {:#?}",
                self.addr,
                seen.connections,
                summary(&seen.requests),
                seen.refused
            );
        }
    }

    /// Waits until `n` requests in all were read whole.
    pub async fn wait_for_requests(&self, n: usize) {
        self.wait_for(&format!("{n} requests"), |seen| seen.requests.len() >= n)
            .await;
    }

    /// Panics if a task of the origin panicked.
    pub fn check(&self) {
        let seen = self.record.seen.lock().unwrap();
        if !seen.failures.is_empty() {
            panic!("h2 origin {} failed: {:?}", self.addr, seen.failures);
        }
    }
}

impl Drop for H2Origin {
    fn drop(&mut self) {
        self.task.abort();
        for t in self.tasks.lock().unwrap().iter() {
            t.abort();
        }
        if !std::thread::panicking() {
            self.check();
        }
    }
}

/// Requests without their header fields, for failure messages.
fn summary(requests: &[OriginRequest]) -> Vec<String> {
    requests
        .iter()
        .map(|r| {
            format!(
                "conn {} stream {} {} {:?} {:?} {} body {} trailers {:?}",
                r.connection,
                r.stream,
                r.method,
                r.scheme,
                r.authority,
                r.path,
                r.body_len,
                r.trailers
            )
        })
        .collect()
}

fn server_config(leaf: &Leaf, options: &H2Options) -> ServerConfig {
    let key = PrivateKeyDer::from_pem_slice(leaf.key_pem.as_bytes()).unwrap();
    let mut config = ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(vec![leaf.der.clone()], key)
        .unwrap();
    config.alpn_protocols = if options.alpn.is_empty() {
        vec![b"h2".to_vec()]
    } else {
        options.alpn.clone()
    };
    config
}

/// What every task of the origin shares.
#[derive(Clone)]
struct Origin {
    me: SocketAddr,
    record: Arc<Record>,
    options: Arc<H2Options>,
    tasks: Arc<Mutex<Vec<tokio::task::AbortHandle>>>,
}

impl Origin {
    /// Spawns `work`, aborted when the origin is dropped; its panic fails the test.
    fn spawn(&self, work: impl std::future::Future<Output = ()> + Send + 'static) {
        let handle = tokio::spawn(work);
        self.tasks.lock().unwrap().push(handle.abort_handle());
        let record = Arc::clone(&self.record);
        tokio::spawn(async move {
            if let Err(e) = handle.await {
                if e.is_panic() {
                    let text = super::panic_text(e);
                    record.update(|seen| seen.failures.push(text));
                }
            }
        });
    }

    /// Reads the ClientHello, records what it asked for, completes the handshake and serves
    /// HTTP/2 over it (whatever ALPN chose: a client that did not choose `h2` fails the
    /// preface).
    async fn accept_tls(&self, tcp: TcpStream, index: usize, config: Arc<ServerConfig>) {
        let failed = |why: String| self.record.connection(index, |c| c.error = Some(why));
        let acceptor =
            tokio_rustls::LazyConfigAcceptor::new(rustls::server::Acceptor::default(), tcp);
        let start = match acceptor.await {
            Ok(start) => start,
            Err(e) => return failed(format!("no ClientHello: {e}")),
        };
        {
            let hello = start.client_hello();
            let sni = hello.server_name().map(str::to_string);
            let offered: Vec<Vec<u8>> = hello
                .alpn()
                .map(|protocols| protocols.map(<[u8]>::to_vec).collect())
                .unwrap_or_default();
            self.record.connection(index, |c| {
                c.sni = sni;
                c.alpn_offered = offered;
            });
        }
        let stream = match start.into_stream(config).await {
            Ok(stream) => stream,
            Err(e) => return failed(format!("TLS handshake: {e}")),
        };
        let chosen = stream.get_ref().1.alpn_protocol().map(<[u8]>::to_vec);
        self.record.connection(index, |c| c.alpn = chosen);
        self.serve(stream, index).await;
    }

    /// HTTP/2 on `io`: accepts streams until the connection ends, each answered by a task of
    /// its own.
    async fn serve<S>(&self, io: S, index: usize)
    where
        S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        let mut builder = h2::server::Builder::new();
        // Windows larger than the default 64 KiB, so that megabytes come at speed.
        builder
            .initial_window_size(1 << 20)
            .initial_connection_window_size(4 << 20);
        if let Some(max) = self.options.max_concurrent_streams {
            builder.max_concurrent_streams(max);
        }
        let mut connection = match builder.handshake::<_, Bytes>(io).await {
            Ok(connection) => connection,
            Err(e) => {
                let why = format!("no HTTP/2 preface: {e}");
                return self.record.connection(index, |c| c.error = Some(why));
            }
        };
        self.record.connection(index, |c| c.h2 = true);
        let mut accepted = 0;
        while let Some(next) = connection.accept().await {
            let (request, respond) = match next {
                Ok(stream) => stream,
                Err(e) => {
                    let why = format!("connection error: {e}");
                    self.record.connection(index, |c| c.error = Some(why));
                    break;
                }
            };
            accepted += 1;
            let stream = respond.stream_id().as_u32();
            let refuse_first = self.options.refuse_first;
            let goaway_now = self.options.goaway_after == Some(accepted);
            let refuse = self.record.update(|seen| {
                let refuse = seen.refused.len() < refuse_first;
                if refuse {
                    seen.refused.push(RefusedStream {
                        connection: index,
                        stream,
                        method: request.method().to_string(),
                        path: path_of(&request),
                    });
                }
                let c = &mut seen.connections[index];
                c.streams += 1;
                c.refused += usize::from(refuse);
                c.after_goaway += usize::from(c.goaway);
                c.goaway |= goaway_now;
                refuse
            });
            // Counted before the GOAWAY and the task: the stream is served from here.
            let active = Active::start(&self.record, index);
            if goaway_now {
                // Buffered as the connection's next frame, before any frame of this stream's
                // answer (whose task starts below).
                connection.graceful_shutdown();
            }
            if refuse {
                let mut respond = respond;
                drop(active);
                respond.send_reset(Reason::REFUSED_STREAM);
                continue;
            }
            let origin = self.clone();
            self.spawn(async move {
                // An h2 error is the client's doing (a reset, a closed connection) and ends the
                // stream; a panic is the test's failure.
                let _ = origin.answer(request, respond, index, active).await;
            });
        }
    }

    /// Reads `request` whole, records it and answers it.
    async fn answer(
        &self,
        request: Request<RecvStream>,
        mut respond: SendResponse<Bytes>,
        index: usize,
        active: Active,
    ) -> Result<(), h2::Error> {
        let stream = respond.stream_id().as_u32();
        let (parts, mut body) = request.into_parts();
        let path = parts
            .uri
            .path_and_query()
            .map_or_else(|| parts.uri.path().to_string(), |p| p.as_str().to_string());
        let mut data = Vec::new();
        while let Some(piece) = body.data().await {
            let piece = piece?;
            data.extend_from_slice(&piece);
            let _ = body.flow_control().release_capacity(piece.len());
        }
        let trailers = body.trailers().await?.map(|t| fields(&t));
        let method = parts.method.to_string();
        self.record.update(|seen| {
            seen.requests.push(OriginRequest {
                connection: index,
                stream,
                method: method.clone(),
                scheme: parts.uri.scheme_str().map(str::to_string),
                authority: parts.uri.authority().map(|a| a.as_str().to_string()),
                path: path.clone(),
                headers: fields(&parts.headers),
                body_len: data.len(),
                body_sha256: sha256_hex(&data),
                trailers,
            })
        });

        let route = path.split('?').next().unwrap_or("").to_string();
        let segments: Vec<&str> = route.trim_start_matches('/').split('/').collect();
        let digest = format!("{} {}\n", sha256_hex(&data), data.len()).into_bytes();
        let grpc_trailers = || {
            let mut t = HeaderMap::new();
            t.insert("grpc-status", HeaderValue::from_static("0"));
            t.insert("x-t", HeaderValue::from_static("1"));
            t
        };
        // (body, its length announced, trailers)
        let (content, announce, trailers): (Vec<u8>, bool, Option<HeaderMap>) =
            match (method.as_str(), segments.as_slice()) {
                (_, ["trailers-only"]) => (Vec::new(), false, Some(grpc_trailers())),
                (_, ["trailers"]) => (digest, false, Some(grpc_trailers())),
                (_, ["trailers", n]) => {
                    let n: usize = n.parse().expect("h2 origin: /trailers/N");
                    (pattern(n, n as u64), false, Some(grpc_trailers()))
                }
                (_, ["health"]) => (b"ok\n".to_vec(), true, None),
                (_, ["empty"]) => (Vec::new(), false, None),
                (_, ["hold"]) => {
                    self.record
                        .gate
                        .acquire()
                        .await
                        .expect("the gate stays open")
                        .forget();
                    (b"held\n".to_vec(), true, None)
                }
                ("GET" | "HEAD", ["size", n]) => {
                    let n: usize = n.parse().expect("h2 origin: /size/N");
                    (pattern(n, n as u64), true, None)
                }
                ("POST" | "PUT", _) => (digest, true, None),
                _ => (format!("path {route}\n").into_bytes(), true, None),
            };
        if let Some(delay) = self.options.delay {
            tokio::time::sleep(delay).await;
        }
        let status = if route == "/204-with-data" { 204 } else { 200 };
        let content = match status {
            204 => {
                b"HTTP/1.1 200 OK\r\nContent-Length: 7\r\nX-Smuggled: yes\r\n\r\nSMUGGLE".to_vec()
            }
            _ => content,
        };
        let mut head = Response::builder()
            .status(status)
            .header("x-served-by", self.me.to_string())
            .header("x-connection", index.to_string());
        if announce {
            head = head.header("content-length", content.len().to_string());
        }
        let head = head.body(()).unwrap();
        if method == "HEAD" || route == "/empty" {
            drop(active);
            respond.send_response(head, true)?;
            return Ok(());
        }
        let mut send = respond.send_response(head, false)?;
        send_body(&mut send, content, trailers, active).await
    }
}

/// `:path` of a request, query included.
fn path_of<B>(request: &Request<B>) -> String {
    request.uri().path_and_query().map_or_else(
        || request.uri().path().to_string(),
        |p| p.as_str().to_string(),
    )
}

/// Every field of `map`, names lower case (as the h2 crate keeps them), in order.
fn fields(map: &HeaderMap) -> Vec<(String, String)> {
    map.iter()
        .map(|(n, v)| {
            (
                n.as_str().to_string(),
                String::from_utf8_lossy(v.as_bytes()).into_owned(),
            )
        })
        .collect()
}

/// Sends `data` as the peer's windows allow, then `trailers` or the end of the stream; `active`
/// is let go just before the last frame is queued.
async fn send_body(
    stream: &mut SendStream<Bytes>,
    data: Vec<u8>,
    trailers: Option<HeaderMap>,
    active: Active,
) -> Result<(), h2::Error> {
    let mut active = Some(active);
    let mut left = Bytes::from(data);
    let mut ended = false;
    while !left.is_empty() {
        stream.reserve_capacity(left.len().min(256 * 1024));
        let granted = match poll_fn(|cx| stream.poll_capacity(cx)).await {
            Some(granted) => granted?,
            None => return Err(h2::Error::from(Reason::STREAM_CLOSED)),
        };
        if granted == 0 {
            continue;
        }
        let chunk = left.split_to(granted.min(left.len()));
        ended = left.is_empty() && trailers.is_none();
        if ended {
            active.take();
        }
        stream.send_data(chunk, ended)?;
    }
    active.take();
    match trailers {
        Some(trailers) => stream.send_trailers(trailers),
        // An empty body: the end of the stream alone.
        None if !ended => stream.send_data(Bytes::new(), true),
        None => Ok(()),
    }
}
