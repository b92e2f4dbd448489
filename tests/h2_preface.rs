//! The HTTP/2 connection preface (RFC 9113 section 3.4), over h2c by prior knowledge and over
//! TLS with ALPN `h2`: a client preface that is not valid (wrong magic, or a first frame after
//! it other than SETTINGS) is a connection error of type `PROTOCOL_ERROR`. The switch answers
//! its own SETTINGS, then `GOAWAY` with last stream id 0 and `PROTOCOL_ERROR`, byte for byte,
//! and closes; nothing reaches a server, no frame sent before SETTINGS is answered, and
//! `/stats` counts the GOAWAY. Issue 45's conformance misses: a corrupt preface was closed
//! without GOAWAY (over h2c, `PRI * HTTP/2.0` with a corrupt rest went to HTTP/1 and got
//! `505`), and a PING right after the magic was answered with a PING ACK.
//!
//! Raw bytes both ways (`tests/common/h2.rs` only splits what came back into frames); waits are
//! bounded by `PATIENCE` only to turn hangs into failures.

mod common;
#[path = "common/h2.rs"]
mod h2c;

use common::tls::TestCa;
use common::*;
use h2c::{frame, offering, parse_frames, Frame, GOAWAY, PREFACE, PROTOCOL_ERROR, SETTINGS};
use rustls::version::TLS13;
use std::net::SocketAddr;
use std::sync::Arc;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;

const PING: u8 = 0x6;
const ACK: u8 = 0x1;

/// What the switch must end a connection with: GOAWAY (length 8, type 0x7, no flags, stream
/// 0), last stream id 0, error code PROTOCOL_ERROR (0x1), no debug data.
const GOAWAY_PROTOCOL_ERROR: [u8; 17] = [0, 0, 8, 7, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1];

/// One backend behind a plain HTTP/2 service (`plain`) and a TLS one (`tls`).
struct Site {
    ca: TestCa,
    web: Backend,
    switch: tcpvs::Switch,
    _scratch: Scratch,
}

impl Site {
    async fn start(test: &str) -> Site {
        let ca = TestCa::new();
        let leaf = ca.issue(&["www.example.test"]);
        let scratch = Scratch::new(test);
        let cert = scratch.file("site.pem", &leaf.cert_pem);
        let key = scratch.file("site.key", &leaf.key_pem);
        let web = backend().await;
        let rules = format!(
            r#"
[switch]
access_log = false
[virtual.plain]
listen = "127.0.0.1:0"
default_pool = "web"
[virtual.tls]
listen = "127.0.0.1:0"
default_pool = "web"
tls = [{{ cert = {cert:?}, key = {key:?} }}]
[pool.web]
servers = [{{ addr = "{}" }}]
"#,
            web.addr
        );
        let switch = start_switch(&rules, &[]).await;
        Site {
            ca,
            web,
            switch,
            _scratch: scratch,
        }
    }

    fn addr(&self, service: &str) -> SocketAddr {
        self.switch
            .local_addr(service)
            .expect("the service listens")
    }

    /// The service's `(h2_protocol_errors, h2_goaways_sent)`.
    fn counters(&self, service: &str) -> (u64, u64) {
        let s = self
            .switch
            .stats()
            .services
            .into_iter()
            .find(|s| s.name == service)
            .expect("the service");
        (s.h2_protocol_errors, s.h2_goaways_sent)
    }

    /// Sends `bytes` on a new connection to `service` (over TLS with ALPN `h2` for `tls`) and
    /// returns everything the switch sent until it closed.
    async fn exchange(&self, service: &str, bytes: &[u8]) -> Vec<u8> {
        let tcp = TcpStream::connect(self.addr(service))
            .await
            .expect("connect to the switch");
        tcp.set_nodelay(true).expect("TCP_NODELAY");
        if service != "tls" {
            return send_and_read_to_close(tcp, bytes).await;
        }
        let config = offering(&self.ca.client_config(&[&TLS13]), &[b"h2"]);
        let name = rustls::pki_types::ServerName::try_from("www.example.test").expect("a name");
        let tls = tokio::time::timeout(
            PATIENCE,
            tokio_rustls::TlsConnector::from(Arc::clone(&config)).connect(name, tcp),
        )
        .await
        .expect("a TLS handshake within PATIENCE")
        .expect("the TLS handshake succeeds");
        assert_eq!(tls.get_ref().1.alpn_protocol(), Some(&b"h2"[..]));
        send_and_read_to_close(tls, bytes).await
    }
}

/// Writes `bytes`, then reads until the peer closes (EOF, a reset, or a TLS close without
/// close_notify); panics if it is still open after `PATIENCE`.
async fn send_and_read_to_close<S: AsyncRead + AsyncWrite + Unpin>(
    mut stream: S,
    bytes: &[u8],
) -> Vec<u8> {
    stream.write_all(bytes).await.expect("send to the switch");
    stream.flush().await.expect("flush");
    let mut got = Vec::new();
    let mut chunk = [0u8; 16384];
    for _ in 0..10_000 {
        match tokio::time::timeout(PATIENCE, stream.read(&mut chunk)).await {
            Ok(Ok(0)) | Ok(Err(_)) => return got,
            Ok(Ok(n)) => got.extend_from_slice(&chunk[..n]),
            Err(_) => panic!(
                "the switch did not close within {PATIENCE:?}; it sent {:?}",
                String::from_utf8_lossy(&got)
            ),
        }
    }
    panic!("more than 10 000 reads before the close");
}

/// Checks that `got` is the switch's SETTINGS, perhaps a WINDOW_UPDATE, and last the GOAWAY
/// with `PROTOCOL_ERROR`, byte for byte, and nothing that answers the client (no PING).
fn is_settings_then_goaway(got: &[u8], case: &str) {
    let frames: Vec<Frame> = parse_frames(got);
    let kinds: Vec<u8> = frames.iter().map(|f| f.kind).collect();
    assert!(
        frames
            .first()
            .is_some_and(|f| f.kind == SETTINGS && f.flags & ACK == 0),
        "{case}: the switch's SETTINGS first; got {:?}",
        String::from_utf8_lossy(got)
    );
    assert!(
        got.ends_with(&GOAWAY_PROTOCOL_ERROR),
        "{case}: GOAWAY(0, PROTOCOL_ERROR) last, byte for byte; frame types {kinds:?}, \
         the last bytes {:?}",
        &got[got.len().saturating_sub(17)..]
    );
    let total: usize = frames.iter().map(|f| 9 + f.payload.len()).sum();
    assert_eq!(total, got.len(), "{case}: whole frames only");
    let goaways: Vec<&Frame> = frames.iter().filter(|f| f.kind == GOAWAY).collect();
    assert_eq!(goaways.len(), 1, "{case}: one GOAWAY");
    assert_eq!(goaways[0].error_code(), Some(PROTOCOL_ERROR));
    assert_eq!(goaways[0].last_stream(), Some(0));
    assert!(
        !kinds.contains(&PING),
        "{case}: nothing answered the client's frames: {kinds:?}"
    );
}

fn ping(payload: [u8; 8]) -> Vec<u8> {
    frame(PING, 0, 0, &payload)
}

fn empty_settings() -> Vec<u8> {
    frame(SETTINGS, 0, 0, &[])
}

/// A request on stream 1 (HPACK: indexed `:method GET`, `:scheme http`, `:path /`, and
/// `:authority` as a literal), ending the stream: were it read, it would reach the backend.
fn get_request() -> Vec<u8> {
    let mut block = vec![0x82, 0x86, 0x84, 0x01, 16];
    block.extend_from_slice(b"www.example.test");
    frame(0x1, 0x4 | 0x1, 1, &block)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_corrupt_preface_gets_settings_then_goaway_protocol_error() {
    let site = Site::start("h2-preface-corrupt").await;
    let with_frames = |start: &[u8]| {
        let mut bytes = start.to_vec();
        bytes.extend(empty_settings());
        bytes.extend(get_request());
        bytes
    };
    let cases: [(&str, &str, Vec<u8>); 5] = [
        // Prior knowledge: the first line decides HTTP/2, the rest is corrupt (it went to
        // HTTP/1 as a request of version 2.0 and got 505).
        (
            "plain",
            "h2c, PRI line then a corrupt rest",
            with_frames(b"PRI * HTTP/2.0\r\n\r\nXX\r\n\r\n"),
        ),
        (
            "plain",
            "h2c, PRI line then an HTTP/1 head",
            b"PRI * HTTP/2.0\r\nHost: www.example.test\r\n\r\n".to_vec(),
        ),
        // ALPN h2: whatever is not the preface (h2spec 3.5's bytes, an HTTP/1 request).
        (
            "tls",
            "TLS h2, h2spec's invalid preface",
            with_frames(b"INVALID CONNECTION PREFACE\r\n\r\n"),
        ),
        (
            "tls",
            "TLS h2, an HTTP/1.1 request",
            b"GET / HTTP/1.1\r\nHost: www.example.test\r\n\r\n".to_vec(),
        ),
        (
            "tls",
            "TLS h2, the magic's last byte wrong",
            with_frames(&[&PREFACE[..23], b"X"].concat()),
        ),
    ];
    for (service, case, bytes) in &cases {
        let got = site.exchange(service, bytes).await;
        is_settings_then_goaway(&got, case);
    }
    // Counted as every other GOAWAY: (h2_protocol_errors, h2_goaways_sent).
    wait_until(&site.switch, "the GOAWAYs counted", |_| {
        site.counters("plain") == (2, 2) && site.counters("tls") == (3, 3)
    })
    .await;
    settle(&site.switch).await;
    assert_eq!(site.web.requests(), 0, "nothing reached the backend");
    // A valid preface is still served on both.
    for service in ["plain", "tls"] {
        let mut bytes = PREFACE.to_vec();
        bytes.extend(empty_settings());
        bytes.extend(get_request());
        bytes.extend(frame(GOAWAY, 0, 0, &[0, 0, 0, 1, 0, 0, 0, 0]));
        let got = site.exchange(service, &bytes).await;
        let frames = parse_frames(&got);
        assert!(
            frames.iter().any(|f| f.kind == 0x1 && f.stream == 1),
            "{service}: a valid preface gets its response; frame types {:?}",
            frames.iter().map(|f| f.kind).collect::<Vec<_>>()
        );
    }
    assert_eq!(site.web.requests(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frame_before_settings_gets_goaway_protocol_error_and_no_answer() {
    let site = Site::start("h2-preface-ping").await;
    for service in ["plain", "tls"] {
        // PING right after the magic (then SETTINGS, a request): PROTOCOL_ERROR, no PING ACK.
        let mut bytes = PREFACE.to_vec();
        bytes.extend(ping(*b"too-soon"));
        bytes.extend(empty_settings());
        bytes.extend(get_request());
        let got = site.exchange(service, &bytes).await;
        is_settings_then_goaway(&got, &format!("{service}: PING before SETTINGS"));
        // A request first: the same, and it never reaches the backend.
        let mut bytes = PREFACE.to_vec();
        bytes.extend(get_request());
        let got = site.exchange(service, &bytes).await;
        is_settings_then_goaway(&got, &format!("{service}: HEADERS before SETTINGS"));
        // The same PING after SETTINGS is answered: only the first frame is held to it.
        let mut bytes = PREFACE.to_vec();
        bytes.extend(empty_settings());
        bytes.extend(ping(*b"in-order"));
        bytes.extend(frame(GOAWAY, 0, 0, &[0, 0, 0, 0, 0, 0, 0, 0]));
        let got = site.exchange(service, &bytes).await;
        let frames = parse_frames(&got);
        assert!(
            frames
                .iter()
                .any(|f| f.kind == PING && f.flags & ACK != 0 && f.payload == b"in-order"),
            "{service}: a PING after SETTINGS gets its ACK; frame types {:?}",
            frames.iter().map(|f| f.kind).collect::<Vec<_>>()
        );
        assert!(
            frames
                .iter()
                .all(|f| f.error_code() != Some(PROTOCOL_ERROR)),
            "{service}: no protocol error for a valid start"
        );
    }
    wait_until(&site.switch, "the GOAWAYs counted", |_| {
        site.counters("plain").0 == 2 && site.counters("tls").0 == 2
    })
    .await;
    settle(&site.switch).await;
    assert_eq!(site.web.requests(), 0, "nothing reached the backend");
    assert_eq!(site.counters("plain").0, 2);
    assert_eq!(site.counters("tls").0, 2);
}
