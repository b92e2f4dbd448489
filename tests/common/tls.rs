//! TLS for the tests: a certificate authority made by the test (rcgen), certificates it issues
//! for given names, TLS clients over `Client`, and a TLS web server for passthrough. Written
//! with tokio-rustls, apart from the switch's own TLS code.

use super::{pattern, Client, PATIENCE};
use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, IsCa, KeyPair};
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::{ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

pub type TlsClient = Client<tokio_rustls::client::TlsStream<TcpStream>>;

/// A certificate authority of the test's own.
pub struct TestCa {
    issuer: CertifiedIssuer<'static, KeyPair>,
}

/// A certificate the test CA issued, with its key.
#[derive(Clone)]
pub struct Leaf {
    pub cert_pem: String,
    pub key_pem: String,
    pub der: CertificateDer<'static>,
}

impl Default for TestCa {
    fn default() -> Self {
        TestCa::new()
    }
}

impl TestCa {
    pub fn new() -> TestCa {
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, "tcpvs test CA");
        let key = KeyPair::generate().unwrap();
        TestCa {
            issuer: CertifiedIssuer::self_signed(params, key).unwrap(),
        }
    }

    /// A certificate for `names` (DNS names, wildcards allowed), ECDSA P-256.
    pub fn issue(&self, names: &[&str]) -> Leaf {
        self.issue_with(names, KeyPair::generate().unwrap())
    }

    /// A certificate for `names` with a 2048-bit RSA key (made by `openssl`: ring makes no
    /// RSA keys).
    pub fn issue_rsa(&self, names: &[&str]) -> Leaf {
        self.issue_with(names, rsa_key_from_openssl())
    }

    /// A certificate for `names` that expired in 2020.
    pub fn issue_expired(&self, names: &[&str]) -> Leaf {
        let mut params =
            CertificateParams::new(names.iter().map(|n| n.to_string()).collect::<Vec<_>>())
                .unwrap();
        params.not_before = rcgen::date_time_ymd(2019, 1, 1);
        params.not_after = rcgen::date_time_ymd(2020, 1, 1);
        self.sign(params, KeyPair::generate().unwrap())
    }

    fn issue_with(&self, names: &[&str], key: KeyPair) -> Leaf {
        let names: Vec<String> = names.iter().map(|n| n.to_string()).collect();
        let mut params = CertificateParams::new(names.clone()).unwrap();
        if names.is_empty() {
            // No common name either: a certificate that names no host at all.
            params.distinguished_name = rcgen::DistinguishedName::new();
        }
        self.sign(params, key)
    }

    fn sign(&self, params: CertificateParams, key: KeyPair) -> Leaf {
        let cert = params.signed_by(&key, &self.issuer).unwrap();
        Leaf {
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
            der: cert.der().clone(),
        }
    }

    /// Clients that trust this CA, offering ALPN `http/1.1`, with these TLS versions.
    pub fn client_config(
        &self,
        versions: &[&'static rustls::SupportedProtocolVersion],
    ) -> Arc<ClientConfig> {
        let mut roots = RootCertStore::empty();
        roots.add(self.issuer.der().clone()).unwrap();
        let mut config = ClientConfig::builder_with_provider(provider())
            .with_protocol_versions(versions)
            .unwrap()
            .with_root_certificates(roots)
            .with_no_client_auth();
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Arc::new(config)
    }
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// An RSA key made by `openssl genrsa` (PKCS#8 PEM), for tests of RSA certificates.
fn rsa_key_from_openssl() -> KeyPair {
    let out = std::process::Command::new("openssl")
        .args([
            "genpkey",
            "-algorithm",
            "RSA",
            "-pkeyopt",
            "rsa_keygen_bits:2048",
        ])
        .output()
        .expect("openssl genpkey");
    assert!(out.status.success(), "openssl genpkey failed");
    let pem = String::from_utf8(out.stdout).unwrap();
    KeyPair::from_pem(&pem).unwrap()
}

/// A PKCS#8 key in the older form OpenSSL calls traditional: PKCS#1 (`BEGIN RSA PRIVATE KEY`)
/// for RSA, SEC1 (`BEGIN EC PRIVATE KEY`) for EC.
pub fn traditional_key_pem(pkcs8_pem: &str) -> String {
    let mut child = std::process::Command::new("openssl")
        .args(["pkey", "-traditional"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("openssl pkey");
    std::io::Write::write_all(&mut child.stdin.take().unwrap(), pkcs8_pem.as_bytes()).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "openssl pkey -traditional failed");
    String::from_utf8(out.stdout).unwrap()
}

/// Clients that accept any certificate, to see which one the switch chose for a name it
/// does not hold.
pub fn any_certificate_client() -> Arc<ClientConfig> {
    let mut config = ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .unwrap()
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(AcceptAnything(provider())))
        .with_no_client_auth();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Arc::new(config)
}

#[derive(Debug)]
struct AcceptAnything(Arc<rustls::crypto::CryptoProvider>);

impl ServerCertVerifier for AcceptAnything {
    fn verify_server_cert(
        &self,
        _: &CertificateDer<'_>,
        _: &[CertificateDer<'_>],
        _: &ServerName<'_>,
        _: &[u8],
        _: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

/// A TLS client connection to `addr` for `name` (a DNS name is sent as SNI; an IP address
/// sends none). Panics if the handshake fails.
pub async fn connect(addr: SocketAddr, name: &str, config: &Arc<ClientConfig>) -> TlsClient {
    try_connect(addr, name, config)
        .await
        .unwrap_or_else(|e| panic!("TLS handshake with {addr} for {name}: {e}"))
}

/// As [`connect`], or the handshake's error.
pub async fn try_connect(
    addr: SocketAddr,
    name: &str,
    config: &Arc<ClientConfig>,
) -> std::io::Result<TlsClient> {
    let tcp = TcpStream::connect(addr).await?;
    tcp.set_nodelay(true)?;
    over(tcp, name, config).await
}

/// A TLS client over a TCP connection made already (after a PROXY header, say).
pub async fn over(
    tcp: TcpStream,
    name: &str,
    config: &Arc<ClientConfig>,
) -> std::io::Result<TlsClient> {
    let server = ServerName::try_from(name.to_string()).unwrap();
    let connector = tokio_rustls::TlsConnector::from(Arc::clone(config));
    let stream = tokio::time::timeout(PATIENCE, connector.connect(server, tcp))
        .await
        .expect("a TLS handshake within PATIENCE")?;
    Ok(Client::over(stream))
}

/// The first flight of a TLS client for `name`: its ClientHello record(s).
pub fn client_hello_bytes(name: &str) -> Vec<u8> {
    let config = TestCa::new().client_config(&[&rustls::version::TLS13]);
    let server = ServerName::try_from(name.to_string()).unwrap();
    let mut client = rustls::ClientConnection::new(config, server).unwrap();
    let mut out = Vec::new();
    while client.wants_write() {
        client.write_tls(&mut out).unwrap();
    }
    out
}

/// The certificate the server presented on `client`'s connection.
pub fn presented(client: &TlsClient) -> CertificateDer<'static> {
    let (_, connection) = client.stream.get_ref();
    connection.peer_certificates().expect("a certificate")[0].clone()
}

/// The connection resumed a session.
pub fn resumed(client: &TlsClient) -> bool {
    let (_, connection) = client.stream.get_ref();
    connection.handshake_kind() == Some(rustls::HandshakeKind::Resumed)
}

/// A TLS web server with its own certificate, as the server behind a passthrough service:
/// it answers `/bytes/N` with N pattern bytes, anything else with a body naming itself and
/// the server name the client asked for (`<addr> <sni>`). Keep-alive; every response has
/// `X-Served-By`.
pub struct TlsBackend {
    pub addr: SocketAddr,
    connections: Arc<AtomicUsize>,
    /// With `start_behind_proxy`: the source address of each connection's PROXY v2 header.
    proxied_clients: Arc<std::sync::Mutex<Vec<SocketAddr>>>,
    task: tokio::task::JoinHandle<()>,
}

impl TlsBackend {
    pub async fn start(leaf: &Leaf) -> TlsBackend {
        TlsBackend::start_with(leaf, false).await
    }

    /// A TLS server whose connections start with a PROXY protocol v2 header (TCP over IPv4),
    /// then TLS, as a pool with `send_proxy = "v2"` sends them.
    pub async fn start_behind_proxy(leaf: &Leaf) -> TlsBackend {
        TlsBackend::start_with(leaf, true).await
    }

    /// The clients the PROXY headers named, in order.
    pub fn proxied_clients(&self) -> Vec<SocketAddr> {
        self.proxied_clients.lock().unwrap().clone()
    }

    async fn start_with(leaf: &Leaf, behind_proxy: bool) -> TlsBackend {
        let chain = vec![leaf.der.clone()];
        let key = PrivateKeyDer::from_pem_slice(leaf.key_pem.as_bytes()).unwrap();
        let config = rustls::ServerConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(chain, key)
            .unwrap();
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let connections = Arc::new(AtomicUsize::new(0));
        let proxied_clients = Arc::new(std::sync::Mutex::new(Vec::new()));
        let counted = Arc::clone(&connections);
        let proxied = Arc::clone(&proxied_clients);
        let task = tokio::spawn(async move {
            while let Ok((mut tcp, _)) = listener.accept().await {
                counted.fetch_add(1, Ordering::SeqCst);
                let acceptor = acceptor.clone();
                let proxied = Arc::clone(&proxied);
                tokio::spawn(async move {
                    if behind_proxy {
                        let client = read_proxy_v2(&mut tcp).await;
                        proxied.lock().unwrap().push(client);
                    }
                    if let Ok(stream) = acceptor.accept(tcp).await {
                        let _ = serve_tls(stream, addr).await;
                    }
                });
            }
        });
        TlsBackend {
            addr,
            connections,
            proxied_clients,
            task,
        }
    }

    /// TCP connections accepted so far.
    pub fn connections(&self) -> usize {
        self.connections.load(Ordering::SeqCst)
    }
}

impl Drop for TlsBackend {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Reads exactly one PROXY v2 header (TCP over IPv4) and returns the source it names.
async fn read_proxy_v2(tcp: &mut TcpStream) -> SocketAddr {
    const SIGNATURE: &[u8; 12] = b"\r\n\r\n\0\r\nQUIT\n";
    let mut fixed = [0u8; 16];
    tcp.read_exact(&mut fixed).await.unwrap();
    assert_eq!(&fixed[..12], SIGNATURE, "a PROXY v2 signature");
    assert_eq!(fixed[12], 0x21, "version 2, PROXY command");
    assert_eq!(fixed[13], 0x11, "TCP over IPv4");
    let len = usize::from(u16::from_be_bytes([fixed[14], fixed[15]]));
    let mut rest = vec![0u8; len];
    tcp.read_exact(&mut rest).await.unwrap();
    let ip = std::net::Ipv4Addr::new(rest[0], rest[1], rest[2], rest[3]);
    let port = u16::from_be_bytes([rest[8], rest[9]]);
    SocketAddr::from((ip, port))
}

async fn serve_tls(
    mut stream: tokio_rustls::server::TlsStream<TcpStream>,
    addr: SocketAddr,
) -> std::io::Result<()> {
    let sni = stream.get_ref().1.server_name().unwrap_or("-").to_string();
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        let end = loop {
            if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                break i + 4;
            }
            let n = stream.read(&mut chunk).await?;
            if n == 0 {
                return Ok(());
            }
            buf.extend_from_slice(&chunk[..n]);
        };
        let head = String::from_utf8_lossy(&buf[..end]).into_owned();
        buf.drain(..end);
        let path = head.split(' ').nth(1).unwrap_or("/").to_string();
        let body = match path.strip_prefix("/bytes/").and_then(|n| n.parse().ok()) {
            Some(n) => pattern(n, 7),
            None => format!("{addr} {sni}").into_bytes(),
        };
        let response = format!(
            "HTTP/1.1 200 OK\r\nX-Served-By: {addr}\r\nContent-Length: {}\r\n\r\n",
            body.len()
        );
        stream.write_all(response.as_bytes()).await?;
        stream.write_all(&body).await?;
        stream.flush().await?;
    }
}
