//! A TLS HTTP/1.1 origin server for the tests of TLS to servers (issue 44), written with
//! tokio-rustls apart from the switch's own TLS code, and a certificate authority whose own
//! certificate a test can write to a file (the `ca` of a pool; `TestCa` of tls.rs keeps its
//! certificate to itself).
//!
//! The origin records, per accepted TCP connection, what the client did: the server name it
//! sent (read from the ClientHello, so a refused handshake has it too), the ALPN protocols it
//! offered, whether the handshake completed and how (full or resumed), whether it presented a
//! certificate, the raw bytes that came over TCP (the first [`RAW_KEPT`] of them) and the
//! application bytes that came out of TLS; and every request it parsed (method, path, head,
//! body length and SHA-256).
//!
//! It answers keep-alive HTTP/1.1:
//! - `GET /size/N`: N bytes of `pattern(N, N)` with Content-Length (HEAD: the head only)
//! - `GET /bye/N`: the same with `Connection: close`, then it closes (close_notify and FIN)
//! - `GET /health`: 200 `ok`
//! - `POST` or `PUT` to any path: the body's SHA-256 and length, `"<hex> <len>\n"`
//! - anything else: 200 with a body naming the path
//!
//! Request bodies come with Content-Length or chunked. A request with `Connection: close` (or an
//! HTTP/1.0 one) is answered with `Connection: close`, then the connection closes. Every answer
//! carries `X-Served-By: <the origin's address>`.

use super::tls::Leaf;
use super::{pattern, sha256_hex, Scratch, PATIENCE};
use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, ExtendedKeyUsagePurpose, IsCa, KeyPair,
};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::WebPkiClientVerifier;
use rustls::{ClientConfig, HandshakeKind, RootCertStore, ServerConfig, SupportedProtocolVersion};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

/// Raw bytes kept per connection, from its start: enough for a ClientHello and a request head,
/// to show that nothing of a request went over TCP in the clear.
pub const RAW_KEPT: usize = 64 * 1024;

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

// ---------------------------------------------------------------- certificates

/// A certificate authority of the test's own, whose certificate can be written to a file.
pub struct OriginCa {
    issuer: CertifiedIssuer<'static, KeyPair>,
}

impl OriginCa {
    /// A CA called `name` (its common name), ECDSA P-256.
    pub fn new(name: &str) -> OriginCa {
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, name);
        OriginCa {
            issuer: CertifiedIssuer::self_signed(params, KeyPair::generate().unwrap()).unwrap(),
        }
    }

    /// The CA's certificate, PEM.
    pub fn cert_pem(&self) -> String {
        self.issuer.pem()
    }

    pub fn der(&self) -> CertificateDer<'static> {
        self.issuer.der().clone()
    }

    /// Writes the CA's certificate to `name` in `scratch`; its absolute path.
    pub fn write(&self, scratch: &Scratch, name: &str) -> PathBuf {
        scratch.file(name, &self.cert_pem())
    }

    /// A server certificate for `names`. rcgen makes an IP address SAN of a name that parses as
    /// an IP address (`"127.0.0.1"`), a DNS name SAN of any other.
    pub fn issue(&self, names: &[&str]) -> Leaf {
        self.sign(params_for(names))
    }

    /// A server certificate for `names` that expired in 2020.
    pub fn issue_expired(&self, names: &[&str]) -> Leaf {
        let mut params = params_for(names);
        params.not_before = rcgen::date_time_ymd(2019, 1, 1);
        params.not_after = rcgen::date_time_ymd(2020, 1, 1);
        self.sign(params)
    }

    /// A client certificate (extended key usage: client authentication) for `name`.
    pub fn issue_client(&self, name: &str) -> Leaf {
        let mut params = params_for(&[name]);
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        self.sign(params)
    }

    fn sign(&self, params: CertificateParams) -> Leaf {
        let key = KeyPair::generate().unwrap();
        let cert = params.signed_by(&key, &self.issuer).unwrap();
        Leaf {
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
            der: cert.der().clone(),
        }
    }

    /// Roots holding this CA only.
    pub fn roots(&self) -> RootCertStore {
        let mut roots = RootCertStore::empty();
        roots.add(self.der()).unwrap();
        roots
    }

    /// A client (tokio-rustls) that trusts this CA, offers ALPN `http/1.1`, with `versions`.
    pub fn client_config(
        &self,
        versions: &[&'static SupportedProtocolVersion],
    ) -> Arc<ClientConfig> {
        let mut config = ClientConfig::builder_with_provider(provider())
            .with_protocol_versions(versions)
            .unwrap()
            .with_root_certificates(self.roots())
            .with_no_client_auth();
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Arc::new(config)
    }

    /// [`OriginCa::client_config`] presenting `client` as its certificate.
    pub fn client_config_with_cert(
        &self,
        versions: &[&'static SupportedProtocolVersion],
        client: &Leaf,
    ) -> Arc<ClientConfig> {
        let key = PrivateKeyDer::from_pem_slice(client.key_pem.as_bytes()).unwrap();
        let mut config = ClientConfig::builder_with_provider(provider())
            .with_protocol_versions(versions)
            .unwrap()
            .with_root_certificates(self.roots())
            .with_client_auth_cert(vec![client.der.clone()], key)
            .unwrap();
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Arc::new(config)
    }
}

fn params_for(names: &[&str]) -> CertificateParams {
    CertificateParams::new(names.iter().map(|n| n.to_string()).collect::<Vec<_>>()).unwrap()
}

/// A self-signed certificate for `names` (no CA vouches for it).
pub fn self_signed(names: &[&str]) -> Leaf {
    let key = KeyPair::generate().unwrap();
    let cert = params_for(names).self_signed(&key).unwrap();
    Leaf {
        cert_pem: cert.pem(),
        key_pem: key.serialize_pem(),
        der: cert.der().clone(),
    }
}

/// Writes `leaf`'s certificate and key to `NAME.pem` and `NAME.key` in `scratch`; their paths.
pub fn write_leaf(scratch: &Scratch, name: &str, leaf: &Leaf) -> (PathBuf, PathBuf) {
    (
        scratch.file(&format!("{name}.pem"), &leaf.cert_pem),
        scratch.file(&format!("{name}.key"), &leaf.key_pem),
    )
}

/// `path` as a TOML basic string, quotes included.
pub fn toml_path(path: &Path) -> String {
    format!("{:?}", path.to_str().expect("a UTF-8 temporary path"))
}

// ---------------------------------------------------------------- what the origin saw

/// How a connection's handshake went.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Handshake {
    /// Not over yet.
    Pending,
    /// Refused or broken, with rustls' or the socket's error.
    Failed(String),
    Full,
    Resumed,
}

impl Handshake {
    pub fn completed(&self) -> bool {
        matches!(self, Handshake::Full | Handshake::Resumed)
    }

    pub fn ended(&self) -> bool {
        !matches!(self, Handshake::Pending)
    }
}

/// One accepted TCP connection.
#[derive(Clone, Debug)]
pub struct ConnectionSeen {
    /// A ClientHello was read.
    pub hello: bool,
    /// The server name the ClientHello asked for, if any.
    pub sni: Option<String>,
    /// The ALPN protocols the ClientHello offered (empty: none).
    pub alpn: Vec<Vec<u8>>,
    pub handshake: Handshake,
    /// TLS version negotiated, once the handshake completed.
    pub version: Option<rustls::ProtocolVersion>,
    /// The client presented a certificate (that the origin accepted).
    pub client_cert: bool,
    /// Bytes read over TCP, all of them, and the first [`RAW_KEPT`].
    pub raw_bytes: u64,
    pub raw: Vec<u8>,
    /// Application bytes read out of TLS.
    pub app_bytes: u64,
    /// Request heads parsed on this connection.
    pub requests: usize,
}

impl ConnectionSeen {
    fn new() -> ConnectionSeen {
        ConnectionSeen {
            hello: false,
            sni: None,
            alpn: Vec::new(),
            handshake: Handshake::Pending,
            version: None,
            client_cert: false,
            raw_bytes: 0,
            raw: Vec::new(),
            app_bytes: 0,
            requests: 0,
        }
    }

    /// `needle` was among the raw bytes kept.
    pub fn raw_contains(&self, needle: &[u8]) -> bool {
        self.raw.windows(needle.len()).any(|w| w == needle)
    }
}

/// One request the origin parsed, with its body.
#[derive(Clone, Debug)]
pub struct OriginRequest {
    /// Index of its connection in [`TlsOrigin::connections`].
    pub connection: usize,
    pub method: String,
    pub path: String,
    pub head: String,
    pub body_len: usize,
    pub body_sha256: String,
}

#[derive(Default)]
struct Seen {
    connections: Vec<ConnectionSeen>,
    requests: Vec<OriginRequest>,
    /// Panics of connection tasks: the test fails when the origin is dropped.
    failures: Vec<String>,
}

struct Record {
    seen: Mutex<Seen>,
    /// Bumped on every change of `seen`, for tests that wait for an event.
    changed: watch::Sender<u64>,
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

// ---------------------------------------------------------------- the origin

/// What the origin requires of its clients.
#[derive(Clone, Default)]
pub struct OriginOptions {
    /// Require a client certificate issued by this CA (a handshake without one fails).
    pub client_ca: Option<CertificateDer<'static>>,
}

pub struct TlsOrigin {
    pub addr: SocketAddr,
    record: Arc<Record>,
    task: tokio::task::JoinHandle<()>,
    tasks: Arc<Mutex<Vec<tokio::task::AbortHandle>>>,
}

impl TlsOrigin {
    /// An origin on 127.0.0.1 serving `leaf`, any client accepted.
    pub async fn start(leaf: &Leaf) -> TlsOrigin {
        TlsOrigin::start_with(leaf, OriginOptions::default()).await
    }

    pub async fn start_with(leaf: &Leaf, options: OriginOptions) -> TlsOrigin {
        let config = Arc::new(server_config(leaf, &options));
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let record = Arc::new(Record {
            seen: Mutex::default(),
            changed: watch::channel(0).0,
        });
        let tasks: Arc<Mutex<Vec<tokio::task::AbortHandle>>> = Arc::default();
        let (rec, spawned) = (Arc::clone(&record), Arc::clone(&tasks));
        let task = tokio::spawn(async move {
            while let Ok((tcp, _)) = listener.accept().await {
                let _ = tcp.set_nodelay(true);
                let index = rec.update(|seen| {
                    seen.connections.push(ConnectionSeen::new());
                    seen.connections.len() - 1
                });
                let (rec, config) = (Arc::clone(&rec), Arc::clone(&config));
                let failures = Arc::clone(&rec);
                let handle = tokio::spawn(async move {
                    accept(tcp, index, addr, rec, config).await;
                });
                spawned.lock().unwrap().push(handle.abort_handle());
                tokio::spawn(async move {
                    if let Err(e) = handle.await {
                        if e.is_panic() {
                            let text = super::panic_text(e);
                            failures.update(|seen| seen.failures.push(text));
                        }
                    }
                });
            }
        });
        TlsOrigin {
            addr,
            record,
            task,
            tasks,
        }
    }

    /// Every connection accepted so far, in accept order.
    pub fn connections(&self) -> Vec<ConnectionSeen> {
        self.record.seen.lock().unwrap().connections.clone()
    }

    /// Every request parsed so far, in order.
    pub fn requests(&self) -> Vec<OriginRequest> {
        self.record.seen.lock().unwrap().requests.clone()
    }

    /// Application bytes received over every connection.
    pub fn app_bytes(&self) -> u64 {
        self.connections().iter().map(|c| c.app_bytes).sum()
    }

    /// Connections whose handshake completed (full or resumed).
    pub fn handshakes(&self) -> Vec<ConnectionSeen> {
        self.connections()
            .into_iter()
            .filter(|c| c.handshake.completed())
            .collect()
    }

    /// Waits until `reached` holds for the connections and requests seen; panics after
    /// [`PATIENCE`] with `what`.
    pub async fn wait_for(
        &self,
        what: &str,
        reached: impl Fn(&[ConnectionSeen], &[OriginRequest]) -> bool,
    ) {
        let mut changed = self.record.changed.subscribe();
        let done = tokio::time::timeout(PATIENCE, async {
            loop {
                {
                    let seen = self.record.seen.lock().unwrap();
                    if reached(&seen.connections, &seen.requests) {
                        return;
                    }
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
                "origin {}: `{what}` not reached within {PATIENCE:?}: connections {:#?}, requests {:#?}",
                self.addr,
                summary(&seen.connections),
                seen.requests
            );
        }
    }

    /// Waits until `n` requests in all were parsed.
    pub async fn wait_for_requests(&self, n: usize) {
        self.wait_for(&format!("{n} requests"), |_, requests| requests.len() >= n)
            .await;
    }

    /// Waits until at least one connection was accepted and every accepted one has ended its
    /// handshake (completed or failed); returns the connections then.
    pub async fn wait_for_handshakes_to_end(&self) -> Vec<ConnectionSeen> {
        self.wait_for("every handshake over", |connections, _| {
            !connections.is_empty() && connections.iter().all(|c| c.handshake.ended())
        })
        .await;
        self.connections()
    }

    /// Panics if a connection task panicked (an invalid request, say).
    pub fn check(&self) {
        let seen = self.record.seen.lock().unwrap();
        if !seen.failures.is_empty() {
            panic!("origin {} failed: {:?}", self.addr, seen.failures);
        }
    }
}

impl Drop for TlsOrigin {
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

/// The connections without their raw bytes, for failure messages.
fn summary(connections: &[ConnectionSeen]) -> Vec<String> {
    connections
        .iter()
        .map(|c| {
            format!(
                "sni {:?}, alpn {:?}, {:?}, {:?}, client cert {}, raw {} bytes, app {} bytes, {} requests",
                c.sni,
                c.alpn
                    .iter()
                    .map(|p| String::from_utf8_lossy(p).into_owned())
                    .collect::<Vec<_>>(),
                c.handshake,
                c.version,
                c.client_cert,
                c.raw_bytes,
                c.app_bytes,
                c.requests
            )
        })
        .collect()
}

fn server_config(leaf: &Leaf, options: &OriginOptions) -> ServerConfig {
    let builder = ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .unwrap();
    let builder = match &options.client_ca {
        Some(ca) => {
            let mut roots = RootCertStore::empty();
            roots.add(ca.clone()).unwrap();
            let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider())
                .build()
                .unwrap();
            builder.with_client_cert_verifier(verifier)
        }
        None => builder.with_no_client_auth(),
    };
    let key = PrivateKeyDer::from_pem_slice(leaf.key_pem.as_bytes()).unwrap();
    let mut config = builder
        .with_single_cert(vec![leaf.der.clone()], key)
        .unwrap();
    // Stateless tickets (TLS 1.3 and 1.2), so resumption does not hang on a server-side cache.
    config.ticketer = rustls::crypto::ring::Ticketer::new().unwrap();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    config
}

/// The TCP stream, counting and keeping the raw bytes read.
struct Counted {
    tcp: TcpStream,
    index: usize,
    record: Arc<Record>,
}

impl AsyncRead for Counted {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.tcp).poll_read(cx, buf);
        if let Poll::Ready(Ok(())) = polled {
            let got = &buf.filled()[before..];
            if !got.is_empty() {
                self.record.connection(self.index, |c| {
                    c.raw_bytes += got.len() as u64;
                    let room = RAW_KEPT.saturating_sub(c.raw.len());
                    c.raw.extend_from_slice(&got[..got.len().min(room)]);
                });
            }
        }
        polled
    }
}

impl AsyncWrite for Counted {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.tcp).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.tcp).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.tcp).poll_shutdown(cx)
    }
}

/// Reads the ClientHello, records what it asked for, completes (or fails) the handshake, and
/// serves HTTP/1.1 on it.
async fn accept(
    tcp: TcpStream,
    index: usize,
    me: SocketAddr,
    record: Arc<Record>,
    config: Arc<ServerConfig>,
) {
    let counted = Counted {
        tcp,
        index,
        record: Arc::clone(&record),
    };
    let failed = |why: String| {
        record.connection(index, |c| c.handshake = Handshake::Failed(why));
    };
    let acceptor =
        tokio_rustls::LazyConfigAcceptor::new(rustls::server::Acceptor::default(), counted);
    let start = match acceptor.await {
        Ok(start) => start,
        Err(e) => return failed(format!("no ClientHello: {e}")),
    };
    {
        let hello = start.client_hello();
        let sni = hello.server_name().map(str::to_string);
        let alpn: Vec<Vec<u8>> = hello
            .alpn()
            .map(|protocols| protocols.map(<[u8]>::to_vec).collect())
            .unwrap_or_default();
        record.connection(index, |c| {
            c.hello = true;
            c.sni = sni;
            c.alpn = alpn;
        });
    }
    let stream = match start.into_stream(config).await {
        Ok(stream) => stream,
        Err(e) => return failed(e.to_string()),
    };
    {
        let connection = stream.get_ref().1;
        let kind = match connection.handshake_kind() {
            Some(HandshakeKind::Resumed) => Handshake::Resumed,
            _ => Handshake::Full,
        };
        let version = connection.protocol_version();
        let client_cert = connection
            .peer_certificates()
            .is_some_and(|c| !c.is_empty());
        record.connection(index, |c| {
            c.handshake = kind;
            c.version = version;
            c.client_cert = client_cert;
        });
    }
    // I/O errors are the client's doing (a reset, a close mid-body) and end the connection; a
    // panic (an invalid request) is the test's failure.
    let _ = serve(stream, index, me, record).await;
}

/// The connection's stream and what was read of it but not used yet.
struct Reader<S> {
    stream: S,
    buf: Vec<u8>,
    index: usize,
    record: Arc<Record>,
}

impl<S: AsyncRead + AsyncWrite + Unpin> Reader<S> {
    /// Reads more; false at the end of the stream.
    async fn fill(&mut self) -> std::io::Result<bool> {
        let mut chunk = vec![0u8; 64 * 1024];
        let n = self.stream.read(&mut chunk).await?;
        if n > 0 {
            self.buf.extend_from_slice(&chunk[..n]);
            self.record
                .connection(self.index, |c| c.app_bytes += n as u64);
        }
        Ok(n > 0)
    }

    async fn fill_or_eof(&mut self) -> std::io::Result<()> {
        if self.fill().await? {
            Ok(())
        } else {
            Err(std::io::ErrorKind::UnexpectedEof.into())
        }
    }

    async fn line(&mut self) -> std::io::Result<Vec<u8>> {
        loop {
            if let Some(i) = self.buf.windows(2).position(|w| w == b"\r\n") {
                let line = self.buf[..i].to_vec();
                self.buf.drain(..i + 2);
                return Ok(line);
            }
            self.fill_or_eof().await?;
        }
    }

    async fn exactly(&mut self, n: usize) -> std::io::Result<Vec<u8>> {
        while self.buf.len() < n {
            self.fill_or_eof().await?;
        }
        Ok(self.buf.drain(..n).collect())
    }

    /// A chunked body, decoded; trailers are read and dropped.
    async fn chunked(&mut self) -> std::io::Result<Vec<u8>> {
        let mut body = Vec::new();
        loop {
            let line = String::from_utf8_lossy(&self.line().await?).into_owned();
            let size = usize::from_str_radix(line.split(';').next().unwrap().trim(), 16)
                .unwrap_or_else(|_| panic!("origin: a bad chunk size line {line:?}"));
            if size == 0 {
                while !self.line().await?.is_empty() {}
                return Ok(body);
            }
            body.extend_from_slice(&self.exactly(size).await?);
            assert_eq!(
                self.exactly(2).await?,
                b"\r\n",
                "origin: chunk data ends in CRLF"
            );
        }
    }
}

struct Head {
    method: String,
    path: String,
    text: String,
    fields: Vec<(String, String)>,
    close: bool,
}

impl Head {
    fn field(&self, name: &str) -> Option<&str> {
        self.fields
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// A request head at the start of `buf`, and its length.
fn parse_head(buf: &[u8]) -> Option<(Head, usize)> {
    let mut fields = [httparse::EMPTY_HEADER; 128];
    let mut request = httparse::Request::new(&mut fields);
    let len = match request.parse(buf) {
        Ok(httparse::Status::Complete(len)) => len,
        Ok(httparse::Status::Partial) => return None,
        Err(e) => panic!(
            "origin got an invalid request: {e}: {:?}",
            String::from_utf8_lossy(buf)
        ),
    };
    let fields: Vec<(String, String)> = request
        .headers
        .iter()
        .map(|h| {
            (
                h.name.to_string(),
                String::from_utf8_lossy(h.value).into_owned(),
            )
        })
        .collect();
    let connection = |word: &str| {
        fields.iter().any(|(n, v)| {
            n.eq_ignore_ascii_case("connection") && v.to_ascii_lowercase().contains(word)
        })
    };
    let close = match request.version {
        Some(1) => connection("close"),
        _ => !connection("keep-alive"),
    };
    let head = Head {
        method: request.method.unwrap().to_string(),
        path: request.path.unwrap().split('?').next().unwrap().to_string(),
        text: String::from_utf8_lossy(&buf[..len]).into_owned(),
        fields,
        close,
    };
    Some((head, len))
}

async fn serve<S: AsyncRead + AsyncWrite + Unpin>(
    stream: S,
    index: usize,
    me: SocketAddr,
    record: Arc<Record>,
) -> std::io::Result<()> {
    let mut reader = Reader {
        stream,
        buf: Vec::new(),
        index,
        record: Arc::clone(&record),
    };
    loop {
        let (head, len) = loop {
            if let Some(found) = parse_head(&reader.buf) {
                break found;
            }
            if !reader.fill().await? {
                return Ok(());
            }
        };
        reader.buf.drain(..len);
        let body = if head
            .field("transfer-encoding")
            .is_some_and(|te| te.to_ascii_lowercase().contains("chunked"))
        {
            reader.chunked().await?
        } else if let Some(length) = head.field("content-length") {
            let n: usize = length.trim().parse().expect("origin: a Content-Length");
            reader.exactly(n).await?
        } else {
            Vec::new()
        };
        record.update(|seen| {
            seen.connections[index].requests += 1;
            seen.requests.push(OriginRequest {
                connection: index,
                method: head.method.clone(),
                path: head.path.clone(),
                head: head.text.clone(),
                body_len: body.len(),
                body_sha256: sha256_hex(&body),
            });
        });
        let (answer, close) = answer(&head, &body, me);
        reader.stream.write_all(&answer).await?;
        reader.stream.flush().await?;
        if close {
            reader.stream.shutdown().await?;
            return Ok(());
        }
    }
}

/// The response to `head` (with its `body`), and whether the connection closes after it.
fn answer(head: &Head, body: &[u8], me: SocketAddr) -> (Vec<u8>, bool) {
    let segments: Vec<&str> = head.path.trim_start_matches('/').split('/').collect();
    let mut close = head.close;
    let (content, send_body) = match (head.method.as_str(), segments.as_slice()) {
        ("POST" | "PUT", _) => (
            format!("{} {}\n", sha256_hex(body), body.len()).into_bytes(),
            true,
        ),
        ("GET" | "HEAD", ["size", n]) => {
            let n: usize = n.parse().expect("origin: /size/N");
            (pattern(n, n as u64), head.method == "GET")
        }
        ("GET", ["bye", n]) => {
            let n: usize = n.parse().expect("origin: /bye/N");
            close = true;
            (pattern(n, n as u64), true)
        }
        ("GET", ["health"]) => (b"ok\n".to_vec(), true),
        _ => (
            format!("path {}\n", head.path).into_bytes(),
            head.method != "HEAD",
        ),
    };
    let mut out = format!(
        "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nX-Served-By: {me}\r\n{}\r\n",
        content.len(),
        if close { "Connection: close\r\n" } else { "" }
    )
    .into_bytes();
    if send_body {
        out.extend_from_slice(&content);
    }
    (out, close)
}
