//! Response buffering (`[pool.NAME] response_buffer`, issue 46): a client that reads its answer
//! slowly holds the switch's memory, never the server's worker. The server here has one worker
//! (one connection at a time); clients with small receive buffers ask for 16 MiB, more than
//! the kernel's socket buffers on the way hold, and stop reading after the head. Without read-ahead the worker stays stuck
//! writing to the first of them and every other client waits. The verdicts wait for events;
//! nothing is decided by a timer.

mod common;
#[path = "common/h2.rs"]
mod h2c;

use common::*;
use h2c::{request, H2};
use std::net::SocketAddr;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};

/// What `/big` and `/chunked` answer.
const BIG: usize = 16 << 20;

/// One worker: `/big` is [`BIG`] bytes by Content-Length, `/chunked` the
/// same bytes chunked, anything else `small\n`; each answer closes its connection.
async fn one_worker() -> (SocketAddr, tokio::task::JoinHandle<()>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let body = pattern(BIG, 13);
    let task = tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            let mut head = Vec::new();
            if read_head(&mut stream, &mut head).await.is_some() {
                let _ = answer(&mut stream, &head, &body).await;
            }
        }
    });
    (addr, task)
}

async fn answer(stream: &mut TcpStream, head: &[u8], body: &[u8]) -> std::io::Result<()> {
    if head.starts_with(b"GET /big ") {
        let head = format!("HTTP/1.1 200 OK\r\nContent-Length: {BIG}\r\nConnection: close\r\n\r\n");
        stream.write_all(head.as_bytes()).await?;
        return stream.write_all(body).await;
    }
    if head.starts_with(b"GET /chunked ") {
        let head = "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n";
        stream.write_all(head.as_bytes()).await?;
        for piece in body.chunks(60_000) {
            stream
                .write_all(format!("{:x}\r\n", piece.len()).as_bytes())
                .await?;
            stream.write_all(piece).await?;
            stream.write_all(b"\r\n").await?;
        }
        return stream.write_all(b"0\r\nx-sum: done\r\n\r\n").await;
    }
    let small = "HTTP/1.1 200 OK\r\nContent-Length: 6\r\nConnection: close\r\n\r\nsmall\n";
    stream.write_all(small.as_bytes()).await
}

/// A client with a small receive buffer that asks for `path` and reads only the head.
async fn slow_reader(addr: SocketAddr, path: &str) -> (TcpStream, Vec<u8>) {
    let socket = TcpSocket::new_v4().unwrap();
    socket.set_recv_buffer_size(4096).unwrap();
    let mut stream = socket.connect(addr).await.unwrap();
    let request = format!("GET {path} HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut got = Vec::new();
    read_head(&mut stream, &mut got)
        .await
        .expect("the head came");
    (stream, got)
}

/// Reads the rest of a slow reader's answer; its body (decoded if chunked).
async fn read_rest((mut stream, mut got): (TcpStream, Vec<u8>)) -> (String, Vec<u8>) {
    // The hold is over: a usual receive buffer, to read the rest at a usual pace.
    rustix::net::sockopt::set_socket_recv_buffer_size(&stream, 1 << 20).unwrap();
    tokio::time::timeout(4 * PATIENCE, stream.read_to_end(&mut got))
        .await
        .expect("the rest within PATIENCE")
        .unwrap();
    let end = got.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
    let head = String::from_utf8_lossy(&got[..end]).into_owned();
    let mut body = got.split_off(end);
    if head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked")
    {
        body = dechunk(&body);
    }
    (head, body)
}

fn dechunk(mut wire: &[u8]) -> Vec<u8> {
    let mut body = Vec::new();
    loop {
        let line = wire.windows(2).position(|w| w == b"\r\n").unwrap();
        let size = usize::from_str_radix(std::str::from_utf8(&wire[..line]).unwrap(), 16).unwrap();
        if size == 0 {
            return body;
        }
        body.extend_from_slice(&wire[line + 2..line + 2 + size]);
        wire = &wire[line + 2 + size + 2..];
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_readers_do_not_hold_a_one_worker_server() {
    let (server, task) = one_worker().await;
    let switch = start_switch(
        r#"
[switch]
access_log = false
[virtual.web]
listen = "127.0.0.1:0"
default_pool = "p"
[pool.p]
servers = [{ addr = "{server}" }]
response_buffer = "20MiB"
"#,
        &[("server", server.to_string())],
    )
    .await;
    let addr = switch.local_addr("web").unwrap();
    let mut slow = Vec::new();
    for path in ["/big", "/chunked", "/big"] {
        slow.push(slow_reader(addr, path).await);
    }
    // An HTTP/2 client that reads nothing of its answer.
    let mut h2 = H2::plain(addr).await;
    let (response, _upload) = h2
        .streams()
        .open_stalled(request("GET", "t", "/big", &[]))
        .await;
    let stalled_h2 = response.await.expect("the head");
    // Meanwhile the one worker serves the others.
    for _ in 0..5 {
        let served = tokio::time::timeout(PATIENCE, async {
            let mut honest = Client::connect(addr).await;
            honest.get("/small").await.text()
        })
        .await
        .expect("an honest client served while slow readers hold their answers");
        assert_eq!(served, "small\n");
    }
    assert!(
        switch.stats().buffered_bytes > 1 << 20,
        "answers read ahead"
    );
    // The slow readers then get their answers whole, byte for byte.
    let expected = pattern(BIG, 13);
    for reader in slow {
        let (head, body) = read_rest(reader).await;
        assert!(head.starts_with("HTTP/1.1 200 OK\r\n"), "{head}");
        assert!(body == expected, "{} bytes, not the {BIG} sent", body.len());
    }
    let mut stream = stalled_h2.into_body();
    let mut got = Vec::new();
    while let Some(data) = stream.data().await {
        let data = data.unwrap();
        let _ = stream.flow_control().release_capacity(data.len());
        got.extend_from_slice(&data);
    }
    assert!(got == expected, "HTTP/2: {} bytes", got.len());
    h2.abort().await;
    let snap = settle(&switch).await;
    assert_eq!((snap.buffered_bytes, snap.buffer_fallbacks), (0, 0));
    assert_eq!(snap.server(server).unwrap().response_errors, 0);
    task.abort();
}

/// One worker that keeps its connections (HTTP/1.1 keep-alive): it serves one connection's
/// requests until the peer closes it or a request says `Connection: close`, then takes the
/// next connection. `/big` is [`BIG`] bytes, anything else `small\n`. The count of
/// connections it took is shared. `/chunked-small` is `small\n` chunked.
async fn keep_alive_worker() -> (
    SocketAddr,
    std::sync::Arc<WorkerCounts>,
    tokio::task::JoinHandle<()>,
) {
    use std::sync::atomic::Ordering;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let taken = std::sync::Arc::new(WorkerCounts::default());
    let count = taken.clone();
    let body = pattern(BIG, 13);
    let task = tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            count.connections.fetch_add(1, Ordering::SeqCst);
            let mut buf = Vec::new();
            let mut close = false;
            while let (false, Some(end)) = (close, read_head(&mut stream, &mut buf).await) {
                let big = buf.starts_with(b"GET /big ");
                let chunked = buf.starts_with(b"GET /chunked-small ");
                close = String::from_utf8_lossy(&buf[..end])
                    .to_ascii_lowercase()
                    .contains("\r\nconnection: close\r\n");
                buf.drain(..end);
                if close {
                    count.told_to_close.fetch_add(1, Ordering::SeqCst);
                }
                let (length, body) = if big {
                    (BIG, &body[..])
                } else if chunked {
                    (0, &b"6\r\nsmall\n\r\n0\r\n\r\n"[..])
                } else {
                    (6, &b"small\n"[..])
                };
                let framing = match chunked {
                    true => "Transfer-Encoding: chunked".to_string(),
                    false => format!("Content-Length: {length}"),
                };
                let head = format!("HTTP/1.1 200 OK\r\n{framing}\r\n\r\n");
                if stream.write_all(head.as_bytes()).await.is_err()
                    || stream.write_all(body).await.is_err()
                {
                    break;
                }
            }
        }
    });
    (addr, taken, task)
}

/// What [`keep_alive_worker`] saw.
#[derive(Default)]
struct WorkerCounts {
    /// Connections taken.
    connections: std::sync::atomic::AtomicUsize,
    /// Requests that said `Connection: close`.
    told_to_close: std::sync::atomic::AtomicUsize,
}

/// A switch in front of `server` with `response_buffer` and one place at the server
/// (`max_conns = 1`), the others waiting in the queue for it.
async fn switch_with_one_place(server: SocketAddr) -> tcpvs::Switch {
    switch_with(server, ", max_conns = 1", "").await
}

/// A switch in front of `server` (with `server_keys`) with `response_buffer`, and
/// `switch_keys`.
async fn switch_with(server: SocketAddr, server_keys: &str, switch_keys: &str) -> tcpvs::Switch {
    start_switch(
        r#"
[switch]
access_log = false
{switch}
[virtual.web]
listen = "127.0.0.1:0"
default_pool = "p"
[pool.p]
servers = [{ addr = "{server}"{server_keys} }]
queue_timeout = "30s"
response_buffer = "20MiB"
"#,
        &[
            ("server", server.to_string()),
            ("server_keys", server_keys.to_string()),
            ("switch", switch_keys.to_string()),
        ],
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_switch_that_keeps_no_server_connection_tells_the_server_to_close() {
    let (server, taken, task) = keep_alive_worker().await;
    let switch = switch_with(server, "", "server_idle_max = 0").await;
    let addr = switch.local_addr("web").unwrap();
    // Ten clients at once, one worker that keeps connections unless told: each request is
    // answered and its connection closed by the worker, which takes the next.
    let clients = (0..10).map(|_| {
        tokio::spawn(async move {
            let mut client = Client::connect(addr).await;
            let mut texts = Vec::new();
            for _ in 0..3 {
                texts.push(client.get("/small").await.text());
            }
            texts
        })
    });
    for client in clients {
        let texts = tokio::time::timeout(PATIENCE, client)
            .await
            .expect("served within PATIENCE")
            .unwrap();
        assert_eq!(texts, ["small\n"; 3]);
    }
    let seen = |n: &std::sync::atomic::AtomicUsize| n.load(std::sync::atomic::Ordering::SeqCst);
    assert_eq!(
        (seen(&taken.connections), seen(&taken.told_to_close)),
        (30, 30)
    );
    task.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_is_let_go_once_its_answer_is_read_ahead_of_a_slow_reader() {
    let (server, _, task) = keep_alive_worker().await;
    let switch = switch_with_one_place(server).await;
    let addr = switch.local_addr("web").unwrap();
    // Three slow readers in turn: each answer is read ahead whole, then the server's
    // connection is closed (the worker takes the next) and its one place given back.
    let mut slow = Vec::new();
    for _ in 0..3 {
        slow.push(slow_reader(addr, "/big").await);
    }
    for _ in 0..5 {
        let served = tokio::time::timeout(PATIENCE, async {
            let mut honest = Client::connect(addr).await;
            honest.get("/small").await.text()
        })
        .await
        .expect("an honest client served while slow readers hold their answers");
        assert_eq!(served, "small\n");
    }
    let snap = switch.stats();
    assert!(snap.buffered_bytes > 2 * BIG as u64, "answers read ahead");
    assert_eq!(snap.server(server).unwrap().active, 0, "no place held");
    let expected = pattern(BIG, 13);
    for reader in slow {
        let (head, body) = read_rest(reader).await;
        assert!(head.starts_with("HTTP/1.1 200 OK\r\n"), "{head}");
        assert!(body == expected, "{} bytes, not the {BIG} sent", body.len());
    }
    let snap = settle(&switch).await;
    let counted = snap.server(server).unwrap();
    assert_eq!((counted.requests, counted.response_errors), (8, 0));
    assert_eq!((snap.buffered_bytes, snap.buffer_fallbacks), (0, 0));
    task.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_takes_its_answer_at_once_leaves_the_connection_kept() {
    let (server, taken, task) = keep_alive_worker().await;
    let switch = switch_with_one_place(server).await;
    let addr = switch.local_addr("web").unwrap();
    let mut client = Client::connect(addr).await;
    // Small answers of known length come whole with their head (not read ahead); chunked
    // ones are read ahead, and taken at once.
    for path in ["/small", "/chunked-small"].repeat(5) {
        assert_eq!(client.get(path).await.text(), "small\n");
    }
    let seen = |n: &std::sync::atomic::AtomicUsize| n.load(std::sync::atomic::Ordering::SeqCst);
    assert_eq!(
        (seen(&taken.connections), seen(&taken.told_to_close)),
        (1, 0),
        "one server connection, kept and reused"
    );
    task.abort();
}
