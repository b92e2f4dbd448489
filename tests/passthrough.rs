//! TLS passthrough (`mode = "tls-passthrough"`): connections routed by their ClientHello's
//! server name to TLS servers that terminate TLS themselves, the hello read in pieces, bodies
//! spliced byte-exact, what is not a ClientHello refused, and `send_proxy` before the hello.

mod common;

use common::tls::{self, TestCa, TlsBackend};
use common::*;
use rustls::pki_types::ServerName;
use rustls::version::{TLS12, TLS13};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{ready, Context, Poll};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;

/// Two TLS servers with certificates of their own, for `api.test` and `www.test`, behind a
/// passthrough service that sends `^api\.` to the first and everything else to the second.
struct Site {
    switch: tcpvs::Switch,
    api: TlsBackend,
    www: TlsBackend,
    ca: TestCa,
}

impl Site {
    async fn start(api_pool_extra: &str) -> Site {
        Site::start_with(api_pool_extra, HEADER_TIMEOUT).await
    }

    /// [`Site::start`] with a `header_timeout` of its own.
    async fn start_with(api_pool_extra: &str, header_timeout: &str) -> Site {
        let ca = TestCa::new();
        let api = TlsBackend::start(&ca.issue(&["api.test"])).await;
        let www = TlsBackend::start(&ca.issue(&["www.test"])).await;
        let rules =
            rules(api.addr, www.addr, api_pool_extra).replace(HEADER_TIMEOUT, header_timeout);
        let switch = start_switch(&rules, &[]).await;
        Site {
            switch,
            api,
            www,
            ca,
        }
    }

    fn addr(&self) -> std::net::SocketAddr {
        self.switch.local_addr("edge").unwrap()
    }
}

/// The `header_timeout` line of [`rules`]: short, so that a stalled hello is closed seconds
/// before PATIENCE ends.
const HEADER_TIMEOUT: &str = "header_timeout = \"1s\"";

fn rules(api: std::net::SocketAddr, www: std::net::SocketAddr, api_pool_extra: &str) -> String {
    format!(
        r#"
[switch]
access_log = false
header_timeout = "1s"

[virtual.edge]
listen = "127.0.0.1:0"
mode = "tls-passthrough"
default_pool = "www"

[[virtual.edge.rule]]
sni = '^api\.'
pool = "api"

[pool.api]
servers = [{{ addr = "{api}" }}]
{api_pool_extra}

[pool.www]
scheduler = "hash"
key = "host"
servers = [{{ addr = "{www}" }}]
"#
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_are_routed_by_server_name_and_decrypted_only_by_their_servers() {
    let site = Site::start("").await;
    for versions in [&[&TLS13][..], &[&TLS12][..]] {
        let config = site.ca.client_config(versions);
        // The client verifies the certificate it gets: the server's own, end to end.
        let mut api = tls::connect(site.addr(), "api.test", &config).await;
        let answer = api.get("/who").await;
        assert_eq!(answer.text(), format!("{} api.test", site.api.addr));
        let mut www = tls::connect(site.addr(), "www.test", &config).await;
        assert_eq!(
            www.get("/who").await.text(),
            format!("{} www.test", site.www.addr)
        );
        // Keep-alive inside the tunnel, and 1 MiB byte-exact.
        let n = 1 << 20;
        let body = www.get(&format!("/bytes/{n}")).await.body;
        assert_eq!(sha256_hex(&body), sha256_hex(&pattern(n, 7)));
    }
    // No server name (an IP address): the default pool.
    let any = tls::any_certificate_client();
    let mut nameless = tls::connect(site.addr(), "127.0.0.1", &any).await;
    assert_eq!(
        nameless.get("/who").await.text(),
        format!("{} -", site.www.addr)
    );
    drop(nameless);
    let snap = settle(&site.switch).await;
    assert_eq!(snap.services[0].requests, 5, "one per connection");
    let api_stats = snap.server(site.api.addr).unwrap();
    assert_eq!(api_stats.requests, 2);
    assert!(api_stats.bytes_out > 0 && api_stats.bytes_in > 0);
}

/// Writes the first `until` bytes in pieces of `piece` bytes, pausing between them, so that
/// the switch reads the ClientHello in several reads.
struct Dribble {
    inner: TcpStream,
    sent: usize,
    until: usize,
    piece: usize,
    pause: Option<Pin<Box<tokio::time::Sleep>>>,
}

impl AsyncWrite for Dribble {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let this = self.get_mut();
        if this.sent >= this.until {
            return Pin::new(&mut this.inner).poll_write(cx, buf);
        }
        if let Some(pause) = &mut this.pause {
            ready!(pause.as_mut().poll(cx));
            this.pause = None;
        }
        let n = buf.len().min(this.piece);
        let written = ready!(Pin::new(&mut this.inner).poll_write(cx, &buf[..n]))?;
        this.sent += written;
        this.pause = Some(Box::pin(tokio::time::sleep(Duration::from_millis(15))));
        Poll::Ready(Ok(written))
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
}

impl AsyncRead for Dribble {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_read(cx, buf)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_hello_in_pieces_reaches_each_server() {
    // The hello comes in pieces 15 ms apart, well under a second in all; header_timeout is
    // set far beyond that, so a loaded machine stretching the pauses cannot make it late.
    let site = Site::start_with("", "header_timeout = \"30s\"").await;
    let config = site.ca.client_config(&[&TLS13]);
    for (name, server) in [("api.test", &site.api), ("www.test", &site.www)] {
        let tcp = TcpStream::connect(site.addr()).await.unwrap();
        tcp.set_nodelay(true).unwrap();
        let dribble = Dribble {
            inner: tcp,
            sent: 0,
            until: 4096,
            piece: 40,
            pause: None,
        };
        let connector = tokio_rustls::TlsConnector::from(Arc::clone(&config));
        let stream = tokio::time::timeout(
            PATIENCE,
            connector.connect(ServerName::try_from(name).unwrap(), dribble),
        )
        .await
        .expect("a handshake within PATIENCE")
        .unwrap();
        let mut client = Client::over(stream);
        assert_eq!(
            client.get("/who").await.text(),
            format!("{} {name}", server.addr)
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_is_no_client_hello_is_closed_counted_and_never_routed() {
    let site = Site::start("").await;
    // Plain HTTP.
    let mut plain = Client::connect(site.addr()).await;
    plain
        .send(b"GET / HTTP/1.1\r\nHost: api.test\r\n\r\n")
        .await;
    assert!(plain.is_closed().await);
    // Half a hello, then nothing: closed at header_timeout.
    let hello = tls::client_hello_bytes("api.test");
    let mut stalled = Client::connect(site.addr()).await;
    stalled.send(&hello[..hello.len() / 2]).await;
    assert!(stalled.is_closed().await);
    // A TLS record that is no handshake.
    let mut alert = Client::connect(site.addr()).await;
    alert
        .send(&[0x15, 0x03, 0x03, 0x00, 0x02, 0x02, 0x28])
        .await;
    assert!(alert.is_closed().await);
    // A client that closes before sending anything is not counted.
    drop(Client::connect(site.addr()).await);
    let snap = wait_until(&site.switch, "three refusals, no client", |s| {
        s.services[0].tls_handshake_failures == 3 && s.clients == 0
    })
    .await;
    assert_eq!(snap.services[0].requests, 0);
    assert_eq!(site.api.connections() + site.www.connections(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn send_proxy_puts_a_header_before_the_hello() {
    let ca = TestCa::new();
    let api = TlsBackend::start_behind_proxy(&ca.issue(&["api.test"])).await;
    let www = TlsBackend::start(&ca.issue(&["www.test"])).await;
    let switch = start_switch(&rules(api.addr, www.addr, "send_proxy = \"v2\""), &[]).await;
    let config = ca.client_config(&[&TLS13]);
    let mut client = tls::connect(switch.local_addr("edge").unwrap(), "api.test", &config).await;
    assert_eq!(
        client.get("/who").await.text(),
        format!("{} api.test", api.addr)
    );
    let own = client.stream.get_ref().0.local_addr().unwrap();
    assert_eq!(api.proxied_clients(), [own]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clients_that_reset_after_their_hello_do_not_take_a_server_down() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    // A server that says when the hello reached it and answers 50 ms later: by then the
    // client has reset its connection.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let slow = listener.local_addr().unwrap();
    let (reached, mut hellos) = tokio::sync::mpsc::unbounded_channel();
    let server = tokio::spawn(async move {
        loop {
            let Ok((mut s, _)) = listener.accept().await else {
                return;
            };
            let reached = reached.clone();
            tokio::spawn(async move {
                let mut b = [0u8; 4096];
                let _ = s.read(&mut b).await;
                let _ = reached.send(());
                tokio::time::sleep(Duration::from_millis(50)).await;
                let _ = s.write_all(b"\x16\x03\x03\x00\x04abcd").await;
                let _ = s.read(&mut b).await;
            });
        }
    });
    let www = TlsBackend::start(&TestCa::new().issue(&["www.test"])).await;
    let switch = start_switch(&rules(slow, www.addr, ""), &[]).await;
    let hello = tls::client_hello_bytes("api.test");
    // max_fails is 3 by default: three blamed connections would take the server down.
    for _ in 0..4 {
        let mut tcp = TcpStream::connect(switch.local_addr("edge").unwrap())
            .await
            .unwrap();
        tcp.write_all(&hello).await.unwrap();
        tokio::time::timeout(PATIENCE, hellos.recv())
            .await
            .expect("the hello reaches the server");
        // A reset, not a close.
        rustix::net::sockopt::set_socket_linger(&tcp, Some(Duration::ZERO)).unwrap();
        drop(tcp);
    }
    let snap = wait_until(&switch, "four connections served and ended", |s| {
        s.clients == 0
            && s.servers.iter().all(|s| s.active == 0)
            && s.server(slow).is_some_and(|s| s.requests == 4)
    })
    .await;
    let api = snap.server(slow).unwrap();
    assert_eq!(api.state, tcpvs::state::status::State::Up, "{}", api.reason);
    assert_eq!(api.response_errors, 0);
    server.abort();
}
