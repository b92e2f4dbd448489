//! The TLS records of kept-alive responses (issue 28): a small response leaves the switch as one
//! application-data record carrying head and body together, as HAProxy and nginx send it. Two
//! records (the head, then the body) would cost the client a second decryption and, when they
//! leave in two writes, a second segment and wake-up per response: what `benches/tls.sh
//! keepalive` measures. The client here reads the raw TCP stream, cuts it into records itself and
//! hands them to rustls one at a time, so it counts what the switch wrote, not what a TLS library
//! made of it; the bodies are checked byte for byte.

mod common;

use common::tls::TestCa;
use common::*;
use rustls::pki_types::ServerName;
use rustls::version::{TLS12, TLS13};
use rustls::ClientConnection;
use std::io::{Read, Write};
use std::net::SocketAddr;
use std::sync::Arc;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// TLS record header: content type, version, length.
const HEADER: usize = 5;
const APPLICATION_DATA: u8 = 23;

/// A TLS client that sees every record the server sends.
struct RecordClient {
    tcp: TcpStream,
    tls: ClientConnection,
    /// Bytes read from the socket and not yet cut into records.
    raw: Vec<u8>,
}

/// One record as it came from the server.
struct Seen {
    content_type: u8,
    /// The plaintext it carried to the application (none: a handshake message, a ticket).
    plaintext: Vec<u8>,
}

impl RecordClient {
    async fn connect(addr: SocketAddr, config: Arc<rustls::ClientConfig>) -> RecordClient {
        let tcp = TcpStream::connect(addr).await.unwrap();
        tcp.set_nodelay(true).unwrap();
        let name = ServerName::try_from("www.example.test").unwrap();
        let mut client = RecordClient {
            tcp,
            tls: ClientConnection::new(config, name).unwrap(),
            raw: Vec::new(),
        };
        // The handshake, bounded: a few flights each way.
        for _ in 0..20 {
            client.write_pending().await;
            if !client.tls.is_handshaking() {
                return client;
            }
            client.next_record().await;
        }
        panic!("no TLS handshake after 20 records");
    }

    /// Sends what rustls has queued.
    async fn write_pending(&mut self) {
        let mut out = Vec::new();
        while self.tls.wants_write() {
            self.tls.write_tls(&mut out).unwrap();
        }
        if !out.is_empty() {
            self.tcp.write_all(&out).await.unwrap();
        }
    }

    async fn send(&mut self, request: &[u8]) {
        self.tls.writer().write_all(request).unwrap();
        self.write_pending().await;
    }

    /// The next record from the server, decrypted by itself.
    async fn next_record(&mut self) -> Seen {
        loop {
            if self.raw.len() >= HEADER {
                let length = u16::from_be_bytes([self.raw[3], self.raw[4]]) as usize;
                if self.raw.len() >= HEADER + length {
                    let record: Vec<u8> = self.raw.drain(..HEADER + length).collect();
                    return self.open(record);
                }
            }
            let mut chunk = [0u8; 32 * 1024];
            let read = tokio::time::timeout(PATIENCE, self.tcp.read(&mut chunk))
                .await
                .expect("a record within PATIENCE")
                .unwrap();
            assert!(read > 0, "the switch closed the connection");
            self.raw.extend_from_slice(&chunk[..read]);
        }
    }

    fn open(&mut self, record: Vec<u8>) -> Seen {
        let content_type = record[0];
        let mut rest = &record[..];
        while !rest.is_empty() {
            self.tls.read_tls(&mut rest).unwrap();
        }
        self.tls.process_new_packets().unwrap();
        let mut plaintext = Vec::new();
        match self.tls.reader().read_to_end(&mut plaintext) {
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(e) => panic!("reading plaintext: {e}"),
        }
        Seen {
            content_type,
            plaintext,
        }
    }

    /// The response to one request: its bytes, and the records that carried them.
    async fn response(&mut self) -> (Vec<u8>, usize) {
        let mut bytes = Vec::new();
        let mut records = 0;
        // Bounded: more records than a response of these sizes could take is a failure anyway.
        for _ in 0..64 {
            let seen = self.next_record().await;
            if seen.plaintext.is_empty() {
                // A ticket after the handshake: no part of any response.
                continue;
            }
            assert_eq!(seen.content_type, APPLICATION_DATA);
            records += 1;
            bytes.extend_from_slice(&seen.plaintext);
            if let Some(total) = complete_length(&bytes) {
                assert_eq!(bytes.len(), total, "bytes after the response");
                return (bytes, records);
            }
        }
        panic!("no complete response in 64 records");
    }
}

/// The length of head and body once the head is complete (Content-Length framing).
fn complete_length(bytes: &[u8]) -> Option<usize> {
    let end = bytes.windows(4).position(|w| w == b"\r\n\r\n")? + 4;
    let head = std::str::from_utf8(&bytes[..end]).unwrap();
    let length: usize = head
        .lines()
        .find_map(|line| {
            let (name, value) = line.split_once(':')?;
            name.eq_ignore_ascii_case("content-length")
                .then(|| value.trim().parse().unwrap())
        })
        .expect("a Content-Length");
    (bytes.len() >= end + length).then_some(end + length)
}

fn body_of(response: &[u8]) -> &[u8] {
    let end = response.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
    &response[end..]
}

/// A TLS service in front of `web`, its certificate issued by `ca`.
async fn secure_switch(ca: &TestCa, web: &Backend, scratch: &Scratch) -> tcpvs::Switch {
    let leaf = ca.issue(&["www.example.test"]);
    let cert = scratch.file("site.pem", &leaf.cert_pem);
    let key = scratch.file("site.key", &leaf.key_pem);
    let rules = format!(
        r#"
[switch]
access_log = false

[virtual.secure]
listen = "127.0.0.1:0"
default_pool = "web"
tls = [{{ cert = {:?}, key = {:?} }}]

[pool.web]
servers = [{{ addr = "{}" }}]
"#,
        cert.to_str().unwrap(),
        key.to_str().unwrap(),
        web.addr
    );
    start_switch(&rules, &[]).await
}

/// Kept-alive requests for bodies from empty to 4000 bytes, each answered by the backend in
/// one write: every response arrives as exactly one record, byte-exact.
async fn one_record_per_small_response(version: &'static rustls::SupportedProtocolVersion) {
    let ca = TestCa::new();
    let scratch = Scratch::new(&format!("tls-records-{version:?}"));
    let web = backend().await;
    let switch = secure_switch(&ca, &web, &scratch).await;
    let addr = switch.local_addr("secure").unwrap();
    let mut client = RecordClient::connect(addr, ca.client_config(&[version])).await;
    for round in 0..3 {
        for n in [0usize, 1, 100, 1000, 4000] {
            let request = format!("GET /bytes/{n} HTTP/1.1\r\nHost: www.example.test\r\n\r\n");
            client.send(request.as_bytes()).await;
            let (response, records) = client.response().await;
            assert!(
                response.starts_with(b"HTTP/1.1 200 "),
                "{}",
                String::from_utf8_lossy(&response)
            );
            assert_eq!(
                body_of(&response),
                &pattern(n, n as u64)[..],
                "body of /bytes/{n}"
            );
            assert_eq!(
                records, 1,
                "round {round}: /bytes/{n} came in {records} records"
            );
        }
    }
    assert_eq!(switch.stats().services[0].tls_handshakes, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_small_kept_alive_response_is_one_record_over_tls_1_3() {
    one_record_per_small_response(&TLS13).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_small_kept_alive_response_is_one_record_over_tls_1_2() {
    one_record_per_small_response(&TLS12).await;
}
