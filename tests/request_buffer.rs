//! Request buffering (`[pool.NAME] request_buffer`, issue 46): a slow uploader holds the
//! switch's memory, never a server's worker. The server here serves one connection at a time
//! (a CGI server with one worker); uploaders that send half their body and stop would hold it
//! without buffering, and every other client would wait behind them. The verdicts wait for
//! events (answers, the statistics); nothing is decided by a timer.

mod common;
#[path = "common/h2.rs"]
mod h2c;

use bytes::Bytes;
use common::*;
use h2c::{request, H2};
use std::net::SocketAddr;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// A server with one worker: it takes one connection at a time, reads one request with its
/// whole body (Content-Length or chunked), answers `LEN HASH` of the body it got and closes.
async fn one_worker() -> (SocketAddr, tokio::task::JoinHandle<()>) {
    echo_server(false).await
}

/// The same server, with one worker (`concurrent = false`) or a worker per connection.
async fn echo_server(concurrent: bool) -> (SocketAddr, tokio::task::JoinHandle<()>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let task = tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let serve = answer_one(stream);
            if concurrent {
                tokio::spawn(serve);
            } else {
                serve.await;
            }
        }
    });
    (addr, task)
}

async fn answer_one(mut stream: TcpStream) {
    let Some(body) = read_request(&mut stream).await else {
        return;
    };
    let text = echo_of(&body);
    let answer = format!(
        "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{text}",
        text.len()
    );
    let _ = stream.write_all(answer.as_bytes()).await;
}

/// One request's body, as the server reads it (`None`: the connection broke first).
async fn read_request(stream: &mut TcpStream) -> Option<Vec<u8>> {
    let mut buf = Vec::new();
    let end = read_head(stream, &mut buf).await?;
    let head = String::from_utf8_lossy(&buf[..end]).to_ascii_lowercase();
    let mut rest = buf.split_off(end);
    if let Some(line) = head.lines().find(|l| l.starts_with("content-length:")) {
        let length: usize = line["content-length:".len()..].trim().parse().ok()?;
        while rest.len() < length {
            read_more(stream, &mut rest).await?;
        }
        rest.truncate(length);
        return Some(rest);
    }
    if head.contains("transfer-encoding: chunked") {
        let mut body = Vec::new();
        loop {
            let Some(line_end) = rest.windows(2).position(|w| w == b"\r\n") else {
                read_more(stream, &mut rest).await?;
                continue;
            };
            let size =
                usize::from_str_radix(std::str::from_utf8(&rest[..line_end]).ok()?, 16).ok()?;
            if size == 0 {
                return Some(body);
            }
            while rest.len() < line_end + 2 + size + 2 {
                read_more(stream, &mut rest).await?;
            }
            body.extend_from_slice(&rest[line_end + 2..line_end + 2 + size]);
            rest.drain(..line_end + 2 + size + 2);
        }
    }
    Some(Vec::new())
}

async fn read_more(stream: &mut TcpStream, buf: &mut Vec<u8>) -> Option<()> {
    let mut chunk = [0u8; 16 * 1024];
    match stream.read(&mut chunk).await {
        Ok(0) | Err(_) => None,
        Ok(n) => {
            buf.extend_from_slice(&chunk[..n]);
            Some(())
        }
    }
}

/// The answer the server gives for `body`.
fn echo_of(body: &[u8]) -> String {
    format!("{} {}\n", body.len(), sha256_hex(body))
}

fn body_of(len: usize, seed: u8) -> Vec<u8> {
    pattern(len, u64::from(seed))
}

async fn switch_for(server: SocketAddr, pool: &str, settings: &str) -> tcpvs::Switch {
    start_switch(
        &format!(
            r#"
[switch]
access_log = false
{settings}
[virtual.web]
listen = "127.0.0.1:0"
default_pool = "p"
[pool.p]
servers = [{{ addr = "{server}" }}]
{pool}
"#
        ),
        &[],
    )
    .await
}

/// A client that sends a POST's head and the first `sent` bytes of its body on the wire, and
/// waits.
struct Stalled {
    stream: TcpStream,
    /// The body, as the server is to get it.
    body: Vec<u8>,
    /// The body as it goes on the wire (chunked, or as it is).
    wire: Vec<u8>,
    sent: usize,
}

impl Stalled {
    async fn start(addr: SocketAddr, body: Vec<u8>, sent: usize, extra: &str) -> Stalled {
        let length = format!("Content-Length: {}\r\n{extra}", body.len());
        Stalled::with_wire(addr, &length, body.clone(), body, sent).await
    }

    /// The body chunked in pieces of `piece` bytes (the first with an extension) and ended
    /// with a trailer; `sent` counts bytes of the wire.
    async fn chunked(addr: SocketAddr, body: Vec<u8>, piece: usize, sent: usize) -> Stalled {
        let wire = chunked_wire(&body, piece);
        let framing = "Transfer-Encoding: chunked\r\n";
        Stalled::with_wire(addr, framing, body, wire, sent).await
    }

    async fn with_wire(
        addr: SocketAddr,
        framing: &str,
        body: Vec<u8>,
        wire: Vec<u8>,
        sent: usize,
    ) -> Stalled {
        let mut stream = TcpStream::connect(addr).await.unwrap();
        let head =
            format!("POST /upload HTTP/1.1\r\nHost: t\r\nConnection: close\r\n{framing}\r\n");
        stream.write_all(head.as_bytes()).await.unwrap();
        stream.write_all(&wire[..sent]).await.unwrap();
        Stalled {
            stream,
            body,
            wire,
            sent,
        }
    }

    /// Sends the rest and reads the answer.
    async fn finish(mut self) -> (u16, String) {
        self.stream
            .write_all(&self.wire[self.sent..])
            .await
            .unwrap();
        let mut got = Vec::new();
        tokio::time::timeout(PATIENCE, self.stream.read_to_end(&mut got))
            .await
            .expect("an answer within PATIENCE")
            .unwrap();
        let text = String::from_utf8_lossy(&got).into_owned();
        let status = text.get(9..12).and_then(|s| s.parse().ok()).unwrap_or(0);
        let body = text.split("\r\n\r\n").nth(1).unwrap_or("").to_string();
        (status, body)
    }
}

/// `body` in chunks of `piece` bytes, the first with an extension, ended by a trailer.
fn chunked_wire(body: &[u8], piece: usize) -> Vec<u8> {
    let mut wire = Vec::new();
    for (i, chunk) in body.chunks(piece).enumerate() {
        let extension = if i == 0 { ";name=first" } else { "" };
        wire.extend_from_slice(format!("{:x}{extension}\r\n", chunk.len()).as_bytes());
        wire.extend_from_slice(chunk);
        wire.extend_from_slice(b"\r\n");
    }
    wire.extend_from_slice(b"0\r\nx-checksum: 42\r\n\r\n");
    wire
}

/// A POST of `body` from a client of its own; its status and answer.
async fn post(addr: SocketAddr, body: &[u8]) -> (u16, String) {
    let stalled = Stalled::start(addr, body.to_vec(), 0, "").await;
    stalled.finish().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_uploaders_do_not_hold_a_one_worker_server() {
    let (server, task) = one_worker().await;
    let switch = switch_for(server, r#"request_buffer = "256KiB""#, "").await;
    let addr = switch.local_addr("web").unwrap();
    // Five uploaders, 100 KB each, stop half-way (one 100-continue client among them).
    let mut slow = Vec::new();
    for i in 0..5u8 {
        let extra = if i == 0 {
            "Expect: 100-continue\r\n"
        } else {
            ""
        };
        let sent = if i == 0 { 0 } else { 50_000 };
        slow.push(Stalled::start(addr, body_of(100_000, i), sent, extra).await);
    }
    // And three chunked ones, stopped in the middle of a chunk's data, of a size line, and
    // after a whole chunk.
    // (The first chunk takes 6019 bytes on the wire, the others 6008 each.)
    for (i, sent) in [
        (5u8, 30_000),
        (6, 6019 + 2 * 6008 + 2),
        (7, 6019 + 3 * 6008),
    ] {
        slow.push(Stalled::chunked(addr, body_of(50_000, i), 6000, sent).await);
    }
    // The 100-continue client is answered by the switch itself.
    let mut interim = [0u8; 25];
    slow[0].stream.read_exact(&mut interim).await.unwrap();
    assert_eq!(&interim, b"HTTP/1.1 100 Continue\r\n\r\n");
    wait_until(&switch, "the seven part bodies held", |s| {
        s.buffered_bytes >= 4 * 64 * 1024 + 3 * 16 * 1024
    })
    .await;
    // Honest clients meanwhile: served, by the one worker, byte for byte.
    for i in 0..10u8 {
        let body = body_of(3000 + usize::from(i) * 1000, 100 + i);
        assert_eq!(post(addr, &body).await, (200, echo_of(&body)));
    }
    let mut honest = Client::connect(addr).await;
    assert_eq!(honest.get("/").await.status, 200);
    drop(honest);
    assert_eq!(switch.stats().server(server).unwrap().requests, 11);
    // The uploaders finish: their whole bodies reach the server, byte for byte.
    for stalled in slow {
        let expected = echo_of(&stalled.body);
        assert_eq!(stalled.finish().await, (200, expected));
    }
    let snap = settle(&switch).await;
    assert_eq!((snap.buffered_bytes, snap.buffer_fallbacks), (0, 0));
    assert_eq!(snap.server(server).unwrap().requests, 19);
    task.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_larger_than_the_buffer_goes_whole_and_in_order() {
    let (server, task) = one_worker().await;
    let switch = switch_for(server, r#"request_buffer = "20KiB""#, "").await;
    let addr = switch.local_addr("web").unwrap();
    // The first 20 KiB held, the rest streamed after them.
    for len in [1, 20 * 1024, 20 * 1024 + 1, 300_000] {
        let body = body_of(len, 7);
        assert_eq!(
            post(addr, &body).await,
            (200, echo_of(&body)),
            "{len} bytes"
        );
    }
    // Chunked bodies too: all held, or the first 20 KiB of their data and the rest streamed
    // from where the decoding stood (a chunk cut in two by the buffer's end included).
    for (len, piece) in [
        (0, 1),
        (5, 5),
        (20 * 1024, 3000),
        (20 * 1024 + 1, 7),
        (300_000, 6000),
    ] {
        let body = body_of(len, 8);
        let stalled = Stalled::chunked(addr, body.clone(), piece, 0).await;
        assert_eq!(
            stalled.finish().await,
            (200, echo_of(&body)),
            "{len} bytes chunked"
        );
    }
    let snap = settle(&switch).await;
    assert_eq!((snap.buffered_bytes, snap.buffer_fallbacks), (0, 0));
    assert_eq!(snap.server(server).unwrap().requests, 9);
    task.abort();
}

/// What a server got: the request head (lower case) and the raw bytes after it, up to the
/// client's close.
async fn recording_server() -> (SocketAddr, tokio::sync::mpsc::Receiver<(String, Vec<u8>)>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (tx, rx) = tokio::sync::mpsc::channel(8);
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            let mut buf = Vec::new();
            let Some(end) = read_head(&mut stream, &mut buf).await else {
                continue;
            };
            let head = String::from_utf8_lossy(&buf[..end]).to_ascii_lowercase();
            let mut rest = buf.split_off(end);
            // A chunked body's last line, then the answer.
            while head.contains("transfer-encoding: chunked") && !rest.ends_with(b"\r\n\r\n") {
                if read_more(&mut stream, &mut rest).await.is_none() {
                    break;
                }
            }
            let answer = "HTTP/1.1 200 OK\r\nContent-Length: 3\r\nConnection: close\r\n\r\nok\n";
            let _ = stream.write_all(answer.as_bytes()).await;
            let _ = tx.send((head, rest)).await;
        }
    });
    (addr, rx)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_held_chunked_body_goes_as_one_chunk_with_its_trailers_and_the_next_request_stays() {
    let (server, mut got) = recording_server().await;
    let switch = switch_for(server, r#"request_buffer = "64KiB""#, "").await;
    let addr = switch.local_addr("web").unwrap();
    // Two requests in one write: a chunked POST held whole, then a GET on the same connection.
    let mut client = TcpStream::connect(addr).await.unwrap();
    let wire = b"POST /c HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n\
        5;a=b\r\nhello\r\n7\r\n, world\r\n0\r\nx-checksum: 42\r\nx-more: yes\r\n\r\n\
        GET /next HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n";
    client.write_all(wire).await.unwrap();
    let (head, body) = got.recv().await.expect("the POST reached the server");
    assert!(head.starts_with("post /c "), "{head}");
    assert!(head.contains("transfer-encoding: chunked"), "{head}");
    assert_eq!(
        String::from_utf8_lossy(&body),
        "c\r\nhello, world\r\n0\r\nx-checksum: 42\r\nx-more: yes\r\n\r\n",
        "one chunk of the data held, the end and the trailers in the same write"
    );
    let (head, _) = got
        .recv()
        .await
        .expect("the GET after it reached the server");
    assert!(head.starts_with("get /next "), "{head}");
    let mut answers = String::new();
    client.read_to_string(&mut answers).await.unwrap();
    assert_eq!(answers.matches("HTTP/1.1 200 OK").count(), 2, "{answers}");
    let snap = settle(&switch).await;
    assert_eq!((snap.buffered_bytes, snap.buffer_fallbacks), (0, 0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_held_chunked_body_is_charged_by_its_data_and_never_held_past_the_buffer() {
    // An attacker's probes: behind a 20 KB head (the client's buffer grown to 64 KiB), 7000
    // chunks of one byte were charged 80 MiB of buffer_memory; and a chunk larger than the
    // buffer was held whole.
    let (server, mut got) = recording_server().await;
    let switch = switch_for(server, r#"request_buffer = "4KiB""#, "").await;
    let addr = switch.local_addr("web").unwrap();
    let mut client = TcpStream::connect(addr).await.unwrap();
    let pad = "p".repeat(20_000);
    let head = format!(
        "POST /tiny HTTP/1.1\r\nHost: t\r\nX-Pad: {pad}\r\nTransfer-Encoding: chunked\r\n\r\n"
    );
    client.write_all(head.as_bytes()).await.unwrap();
    client.write_all(&b"1\r\nx\r\n".repeat(3000)).await.unwrap();
    wait_until(&switch, "the 3000 bytes held", |s| s.buffered_bytes > 0).await;
    let charged = switch.stats().buffered_bytes;
    assert_eq!(charged, 16 * 1024, "3000 bytes of data in one buffer");
    drop(client);
    let snap = settle(&switch).await;
    assert_eq!(snap.buffered_bytes, 0);
    // A chunk of 10 000 bytes against a 4 KiB buffer: 4096 bytes held, the rest relayed.
    let mut client = TcpStream::connect(addr).await.unwrap();
    let data = body_of(10_000, 5);
    let mut wire = b"POST /big HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n2710\r\n".to_vec();
    wire.extend_from_slice(&data);
    wire.extend_from_slice(b"\r\n0\r\n\r\n");
    client.write_all(&wire).await.unwrap();
    let (head, body) = got.recv().await.expect("the POST reached the server");
    assert!(head.starts_with("post /big "), "{head}");
    assert!(
        body.starts_with(b"1000\r\n"),
        "the held part is 4096 bytes: {:?}",
        &body[..8]
    );
    let mut answer = String::new();
    client.read_to_string(&mut answer).await.unwrap();
    assert!(answer.starts_with("HTTP/1.1 200 OK"), "{answer}");
    let mut decoded = Vec::new();
    let mut rest = &body[..];
    loop {
        let line = rest.windows(2).position(|w| w == b"\r\n").unwrap();
        let size = usize::from_str_radix(std::str::from_utf8(&rest[..line]).unwrap(), 16).unwrap();
        if size == 0 {
            break;
        }
        decoded.extend_from_slice(&rest[line + 2..line + 2 + size]);
        rest = &rest[line + 2 + size + 2..];
    }
    assert!(decoded == data, "the body whole and in order");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broken_chunked_body_while_held_is_the_clients_400_and_no_server_is_asked() {
    let (server, task) = one_worker().await;
    let switch = switch_for(server, r#"request_buffer = "64KiB""#, "").await;
    let addr = switch.local_addr("web").unwrap();
    let mut client = TcpStream::connect(addr).await.unwrap();
    client
        .write_all(
            b"POST /c HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n",
        )
        .await
        .unwrap();
    wait_until(&switch, "the first chunk held", |s| s.buffered_bytes > 0).await;
    // The size line of the second chunk is not hexadecimal.
    client.write_all(b"zz\r\nworld\r\n0\r\n\r\n").await.unwrap();
    let mut answer = Vec::new();
    tokio::time::timeout(PATIENCE, client.read_to_end(&mut answer))
        .await
        .expect("answered within PATIENCE")
        .unwrap();
    assert!(
        answer.starts_with(b"HTTP/1.1 400 "),
        "{}",
        String::from_utf8_lossy(&answer)
    );
    let snap = settle(&switch).await;
    assert_eq!(snap.server(server).unwrap().requests, 0);
    assert_eq!(snap.buffered_bytes, 0);
    task.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn past_buffer_memory_bodies_stream_and_are_counted() {
    let (server, task) = one_worker().await;
    // Room for two buffers of 16 KiB.
    let switch = switch_for(
        server,
        r#"request_buffer = "64KiB""#,
        r#"buffer_memory = "32KiB""#,
    )
    .await;
    let addr = switch.local_addr("web").unwrap();
    let holding = Stalled::start(addr, body_of(40_000, 1), 20_000, "").await;
    wait_until(&switch, "two buffers held", |s| {
        s.buffered_bytes == 32 * 1024
    })
    .await;
    // The next body finds the budget spent: it streams (and is served: the worker is free).
    let body = body_of(10_000, 2);
    assert_eq!(post(addr, &body).await, (200, echo_of(&body)));
    assert_eq!(switch.stats().buffer_fallbacks, 1);
    // The first body's rest does not fit either: it streams past its 32 KiB, counted too.
    let expected = echo_of(&holding.body);
    assert_eq!(holding.finish().await, (200, expected));
    let snap = settle(&switch).await;
    assert_eq!((snap.buffered_bytes, snap.buffer_fallbacks), (0, 2));
    task.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_that_stops_while_held_is_the_clients_408_and_no_server_is_asked() {
    let (server, task) = one_worker().await;
    let switch = switch_for(
        server,
        r#"request_buffer = "64KiB""#,
        r#"idle_timeout = "300ms""#,
    )
    .await;
    let addr = switch.local_addr("web").unwrap();
    let mut stalled = Stalled::start(addr, body_of(10_000, 3), 4000, "").await;
    let mut got = Vec::new();
    tokio::time::timeout(PATIENCE, stalled.stream.read_to_end(&mut got))
        .await
        .expect("answered within PATIENCE")
        .unwrap();
    assert!(
        got.starts_with(b"HTTP/1.1 408 "),
        "{}",
        String::from_utf8_lossy(&got)
    );
    let snap = settle(&switch).await;
    let counted = snap.server(server).unwrap();
    assert_eq!((counted.requests, counted.response_errors), (0, 0));
    assert_eq!(snap.buffered_bytes, 0);
    task.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_http2_upload_is_held_too() {
    let (server, task) = one_worker().await;
    let switch = switch_for(server, r#"request_buffer = "256KiB""#, "").await;
    let addr = switch.local_addr("web").unwrap();
    let mut h2 = H2::plain(addr).await;
    let body = body_of(60_000, 9);
    let length = body.len().to_string();
    let (response, mut upload) = h2
        .streams()
        .open_stalled(request("POST", "t", "/h2", &[("content-length", &length)]))
        .await;
    upload.reserve_capacity(30_000);
    upload
        .send_data(Bytes::copy_from_slice(&body[..30_000]), false)
        .unwrap();
    wait_until(&switch, "the half body held", |s| {
        s.buffered_bytes >= 30_000
    })
    .await;
    // Meanwhile the one worker serves others.
    let other = body_of(5000, 10);
    assert_eq!(post(addr, &other).await, (200, echo_of(&other)));
    upload
        .send_data(Bytes::copy_from_slice(&body[30_000..]), true)
        .unwrap();
    let response = response.await.expect("the answer");
    assert_eq!(response.status(), 200);
    let mut answer = response.into_body();
    let mut text = Vec::new();
    while let Some(data) = answer.data().await {
        text.extend_from_slice(&data.unwrap());
    }
    assert_eq!(String::from_utf8_lossy(&text), echo_of(&body));
    h2.abort().await;
    let snap = settle(&switch).await;
    assert_eq!(snap.buffered_bytes, 0);
    task.abort();
}

/// Sends a POST of `body` in pieces of `piece` bytes, one every `pause` (it stops sending when
/// the switch answers first); its status and answer.
async fn trickle(
    addr: SocketAddr,
    body: Vec<u8>,
    piece: usize,
    pause: std::time::Duration,
) -> (u16, String) {
    let mut stream = TcpStream::connect(addr).await.unwrap();
    let head = format!(
        "POST /slow HTTP/1.1\r\nHost: t\r\nConnection: close\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes()).await.unwrap();
    let (mut reader, mut writer) = stream.into_split();
    let sender = tokio::spawn(async move {
        for part in body.chunks(piece) {
            tokio::time::sleep(pause).await;
            if writer.write_all(part).await.is_err() {
                return;
            }
        }
    });
    let mut got = Vec::new();
    let _ = tokio::time::timeout(4 * PATIENCE, reader.read_to_end(&mut got)).await;
    sender.abort();
    let text = String::from_utf8_lossy(&got).into_owned();
    let status = text.get(9..12).and_then(|s| s.parse().ok()).unwrap_or(0);
    let answer = text.split("\r\n\r\n").nth(1).unwrap_or("").to_string();
    (status, answer)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_slower_than_min_body_rate_is_the_clients_408_held_or_not() {
    use std::time::Duration;
    // Held before the server is picked, then streamed to a server of many workers.
    for (pool, concurrent) in [(r#"request_buffer = "64KiB""#, false), ("", true)] {
        let (server, task) = echo_server(concurrent).await;
        let switch = switch_for(server, pool, r#"min_body_rate = "1KiB/s""#).await;
        let addr = switch.local_addr("web").unwrap();
        // 200 bytes a second beside 4 KiB a second.
        let slow = tokio::spawn(trickle(
            addr,
            body_of(8000, 1),
            100,
            Duration::from_millis(500),
        ));
        let honest_body = body_of(20_000, 2);
        let expected = echo_of(&honest_body);
        let honest = tokio::spawn(trickle(addr, honest_body, 1024, Duration::from_millis(250)));
        let (status, _) = slow.await.unwrap();
        assert_eq!(status, 408, "{pool}: the slow body is refused");
        assert_eq!(
            honest.await.unwrap(),
            (200, expected),
            "{pool}: the honest one served"
        );
        let snap = settle(&switch).await;
        let counted = snap.server(server).unwrap();
        assert_eq!(
            (counted.state, counted.response_errors, snap.buffered_bytes),
            (tcpvs::state::status::State::Up, 0, 0),
            "{pool}: the server is not blamed"
        );
        task.abort();
    }
}
