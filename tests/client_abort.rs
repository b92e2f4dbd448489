//! A client that breaks off after the response head began (a reset, a closed connection, an
//! HTTP/2 stream cancelled) is not a failure of the server (issue 46; RELIABILITY.md's
//! `BrokeOff` blame). Before, each one raised the server's `response_errors`, and HTTP/2
//! multiplied it by the streams of a connection. A server that breaks its own response off
//! still counts, once.
//!
//! Verdicts wait for the statistics to settle; timers only guard against hangs.

mod common;
#[path = "common/h2.rs"]
mod h2c;

use common::*;
use h2c::{request, H2};
use std::net::SocketAddr;
use tcpvs::state::status::State;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// What `/big` answers: more than the kernel's buffers hold, so the relay is still writing when
/// the client goes.
const BIG: usize = 8 << 20;

/// A server that answers `/big` with [`BIG`] bytes, and `/cut` by announcing [`BIG`] and closing
/// after 1 KiB of them (its own failure).
async fn big_answers() -> (SocketAddr, tokio::task::JoinHandle<()>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let task = tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut buf = Vec::new();
                while let Some(end) = read_head(&mut stream, &mut buf).await {
                    let cut = buf.starts_with(b"GET /cut ");
                    buf.drain(..end);
                    let head = format!("HTTP/1.1 200 OK\r\nContent-Length: {BIG}\r\n\r\n");
                    if stream.write_all(head.as_bytes()).await.is_err() {
                        return;
                    }
                    let body = vec![b'x'; if cut { 1024 } else { BIG }];
                    if stream.write_all(&body).await.is_err() || cut {
                        return;
                    }
                }
            });
        }
    });
    (addr, task)
}

/// Asks for `/big` over HTTP/1.1, reads the head and a little of the body, then resets the
/// connection.
async fn reset_after_head(addr: SocketAddr) {
    let mut client = TcpStream::connect(addr).await.unwrap();
    client
        .write_all(b"GET /big HTTP/1.1\r\nHost: t\r\n\r\n")
        .await
        .unwrap();
    let mut got = Vec::new();
    while !got.windows(4).any(|w| w == b"\r\n\r\n") || got.len() < 64 * 1024 {
        let mut chunk = [0u8; 16 * 1024];
        let n = client.read(&mut chunk).await.unwrap();
        assert!(
            n > 0,
            "the response came: {:?}",
            String::from_utf8_lossy(&got)
        );
        got.extend_from_slice(&chunk[..n]);
    }
    assert!(got.starts_with(b"HTTP/1.1 200 OK\r\n"));
    client.set_zero_linger().unwrap();
    drop(client);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_breaking_off_a_response_is_not_the_servers_failure() {
    let (server, task) = big_answers().await;
    let switch = start_switch(
        r#"
[switch]
access_log = false
[virtual.web]
listen = "127.0.0.1:0"
default_pool = "p"
[pool.p]
servers = [{ addr = "{server}" }]
[pool.p.health]
max_fails = 1
fail_timeout = "1h"
"#,
        &[("server", server.to_string())],
    )
    .await;
    let addr = switch.local_addr("web").unwrap();
    for _ in 0..3 {
        reset_after_head(addr).await;
    }
    // HTTP/2: streams cancelled after their head, then a whole connection dropped.
    let mut h2 = H2::plain(addr).await;
    for _ in 0..3 {
        let (response, _upload) = h2
            .streams()
            .open_stalled(request("GET", "t", "/big", &[]))
            .await;
        let response = response.await.expect("the head");
        assert_eq!(response.status(), 200);
        drop(response); // RST_STREAM CANCEL
    }
    let (response, _upload) = h2
        .streams()
        .open_stalled(request("GET", "t", "/big", &[]))
        .await;
    assert_eq!(response.await.expect("the head").status(), 200);
    h2.abort().await;
    let snap = settle(&switch).await;
    let counted = snap.server(server).unwrap();
    assert_eq!(
        (counted.state, counted.requests, counted.response_errors),
        (State::Up, 7, 0),
        "clients breaking off are not the server's failure: {counted:?}"
    );
    // The server breaking its own answer off is its failure: counted once (never heard by
    // passive health, as before: it answered).
    let mut client = TcpStream::connect(addr).await.unwrap();
    client
        .write_all(b"GET /cut HTTP/1.1\r\nHost: t\r\n\r\n")
        .await
        .unwrap();
    let mut got = Vec::new();
    let _ = tokio::time::timeout(PATIENCE, client.read_to_end(&mut got)).await;
    assert!(got.starts_with(b"HTTP/1.1 200 OK\r\n"));
    assert!(
        got.len() < BIG,
        "the body was cut: the client's connection closed"
    );
    let snap = wait_until(&switch, "the cut counted", |s| {
        s.server(server).is_some_and(|c| c.response_errors == 1)
    })
    .await;
    assert_eq!(snap.server(server).unwrap().state, State::Up);
    task.abort();
}
