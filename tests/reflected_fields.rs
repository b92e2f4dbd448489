//! A response field an application fills from the request (issue 42, item 4): a filename
//! reflected into `Content-Disposition`, where PHP and Werkzeug refuse only CR, LF and NUL, may
//! carry any other control byte. Such a response reaches the client (as sent over HTTP/1.1, with
//! each such byte as a space over HTTP/2, whose `http` crate refuses them), and never counts
//! against the server: before, each was a `502` and a failed exchange, and six requests took
//! both servers of a pool down, every honest client getting the backup's page.
//!
//! What stays refused (CR, LF or NUL in a value, a control byte in a framing or `Connection`
//! field) is a `502`, counted in `response_errors`, and still never takes a server down: the
//! server answered. (An answer that is not HTTP at all still does: `health.rs`
//! `an_unparsable_answer_or_none_within_idle_timeout_is_a_failed_exchange`.)
//!
//! Each pool: two servers of this file's own (`Reflector`) and a backup (the common backend),
//! `max_fails = 2` and `fail_timeout = "1h"`, so that a failure counted at either primary
//! would show in its state and send later requests to the backup. Verdicts rest on what the
//! client received, byte for byte, and on the statistics once the switch is idle.

mod common;
#[path = "common/h2.rs"]
mod h2c;

use common::*;
use h2c::{GOAWAY, H2, RST_STREAM};
use std::net::SocketAddr;
use tcpvs::state::status::State;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// The body of every answer of a [`Reflector`].
const BODY: &[u8] = b"hello";

/// An application server that puts the query's `name` (percent-decoded) into its answer:
/// - `/download?name=N`: `Content-Disposition: attachment; filename="N"`;
/// - `/raw/FIELD?name=N`: the line `FIELD: N`, whatever N holds (an application that checks
///   nothing);
/// - anything else: no such field.
///
/// Every answer is `200` with `Content-Length: 5`, `X-Served-By: ADDR` and [`BODY`], on
/// kept-alive connections.
struct Reflector {
    addr: SocketAddr,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Reflector {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn reflector() -> Reflector {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let task = tokio::spawn(async move {
        let mut connections = tokio::task::JoinSet::new();
        while let Ok((stream, _)) = listener.accept().await {
            connections.spawn(reflect(stream, addr));
        }
    });
    Reflector { addr, task }
}

/// Answers the requests of one connection (GETs, no body) until it closes.
async fn reflect(mut stream: TcpStream, me: SocketAddr) {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        while let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            let head: Vec<u8> = buf.drain(..end + 4).collect();
            let target = head
                .split(|&b| b == b' ')
                .nth(1)
                .unwrap_or_default()
                .to_vec();
            let mut answer = b"HTTP/1.1 200 OK\r\n".to_vec();
            answer.extend_from_slice(&reflected_line(&target));
            answer.extend_from_slice(
                format!("Content-Length: 5\r\nX-Served-By: {me}\r\n\r\n").as_bytes(),
            );
            answer.extend_from_slice(BODY);
            if stream.write_all(&answer).await.is_err() {
                return;
            }
        }
        match stream.read(&mut chunk).await {
            Ok(0) | Err(_) => return,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
}

/// The field line (with its CRLF) a [`Reflector`] answers `target` with; empty for none.
fn reflected_line(target: &[u8]) -> Vec<u8> {
    let text = String::from_utf8_lossy(target);
    let (path, query) = text.split_once("?name=").unwrap_or((&text, ""));
    let name = percent_decoded(query);
    let mut line = if path == "/download" {
        let mut line = b"Content-Disposition: attachment; filename=\"".to_vec();
        line.extend_from_slice(&name);
        line.push(b'"');
        line
    } else if let Some(field) = path.strip_prefix("/raw/") {
        let mut line = format!("{field}: ").into_bytes();
        line.extend_from_slice(&name);
        line
    } else {
        return Vec::new();
    };
    line.extend_from_slice(b"\r\n");
    line
}

fn percent_decoded(text: &str) -> Vec<u8> {
    let bytes = text.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        let hex = bytes
            .get(i + 1..i + 3)
            .and_then(|h| std::str::from_utf8(h).ok());
        match (bytes[i], hex.and_then(|h| u8::from_str_radix(h, 16).ok())) {
            (b'%', Some(byte)) => {
                out.push(byte);
                i += 3;
            }
            (byte, _) => {
                out.push(byte);
                i += 1;
            }
        }
    }
    out
}

/// A pool of two reflectors and the backup `backup`; a failure counted at either primary would
/// take it down (for an hour), and requests would then go to the backup.
async fn switch_for(primaries: [&Reflector; 2], backup: &Backend) -> tcpvs::Switch {
    start_switch(
        r#"
[switch]
access_log = false
[virtual.web]
listen = "127.0.0.1:0"
default_pool = "p"
[pool.p]
servers = [{ addr = "{a}" }, { addr = "{b}" }, { addr = "{c}", backup = true }]
[pool.p.health]
max_fails = 2
fail_timeout = "1h"
"#,
        &[
            ("a", primaries[0].addr.to_string()),
            ("b", primaries[1].addr.to_string()),
            ("c", backup.addr.to_string()),
        ],
    )
    .await
}

/// More requests than the two primaries' `max_fails` together, twice over.
const ROUNDS: usize = 10;

/// A raw HTTP/1.1 client that reads each response as bytes: the test client of tests/common
/// reads heads with httparse, which refuses control bytes.
struct RawClient {
    stream: TcpStream,
    buf: Vec<u8>,
}

impl RawClient {
    async fn connect(addr: SocketAddr) -> RawClient {
        RawClient {
            stream: TcpStream::connect(addr).await.unwrap(),
            buf: Vec::new(),
        }
    }

    /// Sends a GET of `target` and returns the response's head (through its empty line) and
    /// its body, framed by its `Content-Length`.
    async fn get(&mut self, target: &str) -> (Vec<u8>, Vec<u8>) {
        let request = format!("GET {target} HTTP/1.1\r\nHost: test\r\n\r\n");
        self.stream.write_all(request.as_bytes()).await.unwrap();
        let head_len = loop {
            if let Some(end) = self.buf.windows(4).position(|w| w == b"\r\n\r\n") {
                break end + 4;
            }
            self.fill().await;
        };
        let head: Vec<u8> = self.buf.drain(..head_len).collect();
        let text = String::from_utf8_lossy(&head).to_ascii_lowercase();
        let length: usize = text
            .split("\r\n")
            .find_map(|line| line.strip_prefix("content-length: "))
            .expect("a Content-Length")
            .parse()
            .expect("a length");
        while self.buf.len() < length {
            self.fill().await;
        }
        let body = self.buf.drain(..length).collect();
        (head, body)
    }

    async fn fill(&mut self) {
        let mut chunk = [0u8; 4096];
        let n = tokio::time::timeout(PATIENCE, self.stream.read(&mut chunk))
            .await
            .expect("the switch answers within PATIENCE")
            .expect("reading from the switch");
        assert!(n > 0, "closed: {:?}", String::from_utf8_lossy(&self.buf));
        self.buf.extend_from_slice(&chunk[..n]);
    }
}

/// The status of a raw response head.
fn status_of(head: &[u8]) -> u16 {
    String::from_utf8_lossy(head.get(9..12).unwrap_or_default())
        .parse()
        .unwrap_or(0)
}

/// Both primaries up with `errors` response errors between them and every request counted at
/// them; the backup never asked.
async fn assert_primaries_kept(
    switch: &tcpvs::Switch,
    primaries: [&Reflector; 2],
    backup: &Backend,
    requests: u64,
    errors: u64,
) {
    let snap = settle(switch).await;
    let at = |addr| snap.server(addr).unwrap();
    for primary in primaries {
        let s = at(primary.addr);
        assert_eq!(s.state, State::Up, "{s:?}");
        assert_eq!(s.connect_errors, 0, "{s:?}");
    }
    let [a, b] = primaries.map(|p| at(p.addr));
    assert_eq!(
        (
            a.requests + b.requests,
            a.response_errors + b.response_errors
        ),
        (requests, errors),
        "{a:?} {b:?}"
    );
    let c = at(backup.addr);
    assert!(!c.offered && c.requests == 0, "{c:?}");
    assert_eq!(backup.requests(), 0, "the backup was never asked");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_control_byte_reflected_into_a_field_reaches_the_client_and_blames_no_server() {
    let primaries = [&reflector().await, &reflector().await];
    let backup = backend().await;
    let switch = switch_for(primaries, &backup).await;
    let mut client = RawClient::connect(switch.local_addr("web").unwrap()).await;
    for round in 0..ROUNDS {
        // SOH, DEL, ESC and a bare HT in the middle of the value.
        let target = format!("/download?name=r{round}%01%7F%1B%09q.pdf");
        let (head, body) = client.get(&target).await;
        let expected_from = |server: &Reflector| {
            let mut head =
                b"HTTP/1.1 200 OK\r\nContent-Disposition: attachment; filename=\"r".to_vec();
            head.extend_from_slice(round.to_string().as_bytes());
            head.extend_from_slice(b"\x01\x7f\x1b\tq.pdf\"\r\nContent-Length: 5\r\n");
            head.extend_from_slice(format!("X-Served-By: {}\r\n\r\n", server.addr).as_bytes());
            head
        };
        assert!(
            primaries.iter().any(|p| head == expected_from(p)),
            "{target}: {:?}",
            String::from_utf8_lossy(&head)
        );
        assert_eq!(body, BODY);
    }
    // An honest client is served by a primary.
    let (head, body) = client.get("/").await;
    assert_eq!((status_of(&head), body.as_slice()), (200, BODY));
    drop(client);
    assert_primaries_kept(&switch, primaries, &backup, ROUNDS as u64 + 1, 0).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_http2_the_byte_goes_as_a_space_and_the_connection_serves_on() {
    let primaries = [&reflector().await, &reflector().await];
    let backup = backend().await;
    let switch = switch_for(primaries, &backup).await;
    let h2 = H2::plain(switch.local_addr("web").unwrap()).await;
    for round in 0..ROUNDS {
        let reply = h2
            .get("test", &format!("/download?name=r{round}%01%7F%1B%09q.pdf"))
            .await;
        assert_eq!((reply.status, reply.body.as_slice()), (200, BODY));
        let disposition = reply
            .headers
            .get("content-disposition")
            .map(|v| v.as_bytes().to_vec());
        let expected = format!("attachment; filename=\"r{round}   \tq.pdf\"");
        assert_eq!(disposition, Some(expected.into_bytes()), "{reply:?}");
        assert!(
            primaries
                .iter()
                .any(|p| reply.served_by() == p.addr.to_string()),
            "{reply:?}"
        );
    }
    // At the ends of a value, the spaces go too: an HTTP/2 value has no white space there.
    let reply = h2.get("test", "/raw/X-Note?name=%01note%1F").await;
    assert_eq!(reply.header("x-note"), Some("note"), "{reply:?}");
    let reply = h2.get("test", "/").await;
    assert_eq!(reply.status, 200);
    let resets: Vec<_> = h2
        .frames()
        .into_iter()
        .filter(|f| f.kind == RST_STREAM || f.kind == GOAWAY)
        .collect();
    assert!(resets.is_empty(), "{resets:?}");
    drop(h2);
    assert_primaries_kept(&switch, primaries, &backup, ROUNDS as u64 + 2, 0).await;
}

/// CR, LF or NUL in a value, or a control byte in a field the switch reads, still makes the
/// response a `502`: counted as a response error, never as a failed exchange.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dangerous_bytes_are_still_refused_yet_never_take_a_server_down() {
    let primaries = [&reflector().await, &reflector().await];
    let backup = backend().await;
    let switch = switch_for(primaries, &backup).await;
    let mut client = RawClient::connect(switch.local_addr("web").unwrap()).await;
    let refused = [
        "/raw/X-Name?name=a%00b",
        "/raw/X-Name?name=a%0Db",
        "/raw/X-Name?name=a%0A%01b",
        "/raw/X-Name?name=a%01%00b",
        "/raw/Content-Length?name=5%01",
        "/raw/Transfer-Encoding?name=chunked%01",
        "/raw/Connection?name=close%01",
    ];
    for target in refused.iter().chain(&refused) {
        let (head, body) = client.get(target).await;
        assert_eq!(
            status_of(&head),
            502,
            "{target}: {:?}",
            String::from_utf8_lossy(&head)
        );
        assert_ne!(body, BODY, "{target}: nothing of the answer went on");
    }
    let (head, body) = client.get("/").await;
    assert_eq!((status_of(&head), body.as_slice()), (200, BODY));
    drop(client);
    let answered = 2 * refused.len() as u64;
    assert_primaries_kept(&switch, primaries, &backup, answered + 1, answered).await;
}
