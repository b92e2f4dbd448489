//! Who is blamed when an exchange fails (issue 22, part 1): a client must never be able to take
//! a healthy server down. A request whose body is still incomplete on the client's side when
//! the exchange fails ends as the client's failure (408), whatever the server did meanwhile:
//! waited for the body until the switch gave up, closed because its own body timeout ran out,
//! or answered `100 Continue` and waited. Each test runs with `max_fails = 1`, so a single
//! failure counted at the server would take it down, and checks that the server stays up, has
//! no failure counted, and serves the next client.
//!
//! Nor can a client blame a server through other clients: one that trickles its upload or
//! reads its answer slowly holds a one-worker server, and the others' requests time out
//! meanwhile; the server is busy, not dead, and stays up.
//!
//! Also here: what a server alone can be blamed for (a server streaming interim responses
//! forever), and the request-side limits that keep a client from holding the switch
//! (chunk extensions).
//!
//! Verdicts wait for events (an answer, a close, the statistics reaching a state); timers only
//! guard against hangs.

mod common;

use common::*;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use tcpvs::state::status::State;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Notify;

/// One pool of `server`, one failure enough to take it down, and a short `idle_timeout` so
/// that a stalled exchange ends soon.
async fn switch_for(server: SocketAddr) -> tcpvs::Switch {
    start_switch(
        r#"
[switch]
access_log = false
idle_timeout = "500ms"
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
    .await
}

/// Sends `head` (announcing a body that never comes) from three clients at once; each must get
/// `status` and see its connection closed. Then the server must be up with no failure counted,
/// and a GET must reach it.
async fn stall_three_bodies(switch: &tcpvs::Switch, server: SocketAddr, head: &[u8]) {
    let addr = switch.local_addr("web").unwrap();
    let mut tasks = Vec::new();
    for _ in 0..3 {
        let head = head.to_vec();
        tasks.push(tokio::spawn(async move {
            let mut client = Client::connect(addr).await;
            client.send(&head).await;
            let mut response = client.response(false).await;
            if response.status == 100 {
                response = client.response(false).await;
            }
            assert_eq!(response.status, 408, "{}", response.text());
            assert!(client.is_closed().await, "the body was not read: closed");
        }));
    }
    join_all(tasks).await;
    let snap = settle(switch).await;
    let counted = snap.server(server).unwrap();
    assert_eq!(
        (
            counted.state,
            counted.connect_errors,
            counted.response_errors
        ),
        (State::Up, 0, 0),
        "the server is not blamed: {counted:?}"
    );
    assert_eq!(snap.services[0].classes[3], 3, "three 4xx answers");
    let mut honest = Client::connect(addr).await;
    let answer = honest.get("/after").await;
    assert_eq!(
        (answer.status, answer.text()),
        (200, "path /after\n".into())
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_content_length_body_that_never_comes_is_the_clients_408() {
    let server = backend().await;
    let switch = switch_for(server.addr).await;
    stall_three_bodies(
        &switch,
        server.addr,
        b"POST /sha256 HTTP/1.1\r\nHost: t\r\nContent-Length: 10\r\n\r\n",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_chunked_body_that_never_comes_is_the_clients_408() {
    let server = backend().await;
    let switch = switch_for(server.addr).await;
    stall_three_bodies(
        &switch,
        server.addr,
        b"POST /sha256 HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_that_never_follows_100_continue_is_the_clients_408() {
    let server = backend().await;
    let switch = switch_for(server.addr).await;
    // The backend's /continue answers 100 Continue at once, then waits for the body.
    stall_three_bodies(
        &switch,
        server.addr,
        b"POST /continue HTTP/1.1\r\nHost: t\r\nContent-Length: 10\r\nExpect: 100-continue\r\n\r\n",
    )
    .await;
}

/// A body that stalls half-way, after the server had the head: the bytes that went up keep the
/// server's silence from counting as late (exchange/response_head.rs), so the client's own
/// idle timeout ends the exchange, in the upload's branch of exchange/attempt.rs; that too is
/// the client's 408, byte for byte, with nothing counted at the server, which stays up and
/// serves the next client. (The three tests above stall before the first body byte, where the
/// wait for the server's answer runs out first.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_that_stalls_half_way_is_the_clients_408() {
    let server = backend().await;
    let switch = switch_for(server.addr).await;
    let addr = switch.local_addr("web").unwrap();
    let mut client = TcpStream::connect(addr).await.unwrap();
    client
        .write_all(b"POST /sha256 HTTP/1.1\r\nHost: t\r\nContent-Length: 10\r\n\r\n")
        .await
        .unwrap();
    // The head is at the server, which waits for the body; half of it follows, then nothing.
    server.wait_for_requests(1).await;
    client.write_all(b"hello").await.unwrap();
    let mut answer = Vec::new();
    tokio::time::timeout(PATIENCE, client.read_to_end(&mut answer))
        .await
        .expect("an answer and a close within PATIENCE")
        .expect("reading the answer");
    let body = "408 Request Timeout: request body not received in time\n";
    assert_eq!(
        String::from_utf8_lossy(&answer),
        format!(
            "HTTP/1.1 408 Request Timeout\r\nContent-Type: text/plain\r\nContent-Length: {}\r\n\
             Cache-Control: no-store\r\nConnection: close\r\n\r\n{body}",
            body.len()
        )
    );
    let snap = settle(&switch).await;
    let counted = snap.server(server.addr).unwrap();
    assert_eq!(
        (
            counted.state,
            counted.connect_errors,
            counted.response_errors,
            counted.timeouts
        ),
        (State::Up, 0, 0, 0),
        "the server is not blamed: {counted:?}"
    );
    assert_eq!(snap.services[0].classes[3], 1, "one 4xx answer");
    let mut honest = Client::connect(addr).await;
    let answer = honest.get("/after").await;
    assert_eq!(
        (answer.status, answer.text()),
        (200, "path /after\n".into())
    );
}

/// A server that closes without answering as soon as a request announcing a body arrives and
/// the body does not follow, as nginx does when its `client_body_timeout` runs out, and answers
/// bodiless requests normally.
async fn gives_up_on_bodies() -> (SocketAddr, tokio::task::JoinHandle<()>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let task = tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut buf = Vec::new();
                loop {
                    let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") else {
                        let mut chunk = [0u8; 4096];
                        match stream.read(&mut chunk).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => buf.extend_from_slice(&chunk[..n]),
                        }
                        continue;
                    };
                    let head = String::from_utf8_lossy(&buf[..end]).to_ascii_lowercase();
                    buf.drain(..end + 4);
                    if head.contains("content-length") || head.contains("transfer-encoding") {
                        return; // closed, unanswered: "closed before any response byte"
                    }
                    let body = "fine\n";
                    let answer = format!(
                        "HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n{body}",
                        body.len()
                    );
                    if stream.write_all(answer.as_bytes()).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    (addr, task)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_closing_on_a_stalled_body_is_not_blamed() {
    let (server, task) = gives_up_on_bodies().await;
    let switch = switch_for(server).await;
    let addr = switch.local_addr("web").unwrap();
    for head in [
        &b"POST /upload HTTP/1.1\r\nHost: t\r\nContent-Length: 10\r\n\r\n"[..],
        b"POST /upload HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n",
    ] {
        for _ in 0..3 {
            let mut client = Client::connect(addr).await;
            client.send(head).await;
            let response = client.response(false).await;
            assert_eq!(response.status, 408, "{}", response.text());
        }
    }
    let snap = settle(&switch).await;
    let counted = snap.server(server).unwrap();
    assert_eq!(
        (
            counted.state,
            counted.connect_errors,
            counted.response_errors
        ),
        (State::Up, 0, 0),
        "{counted:?}"
    );
    let mut honest = Client::connect(addr).await;
    assert_eq!(honest.get("/").await.text(), "fine\n");
    // The same server closing on a request without body is its own failure: blamed, and with
    // max_fails = 1 it goes down (the rule above is about incomplete bodies only).
    let mut client = Client::connect(addr).await;
    client
        .send(b"DELETE /x HTTP/1.1\r\nHost: t\r\nContent-Length: 0\r\n\r\n")
        .await;
    assert_eq!(client.response(false).await.status, 502);
    let snap = wait_until(&switch, "the server down", |s| {
        s.server(server).is_some_and(|c| c.state == State::Down)
    })
    .await;
    // (Two errors when the first attempt went over the kept connection and was retried.)
    assert!(snap.server(server).unwrap().response_errors >= 1);
    task.abort();
}

/// A server that answers every request with `100 Continue` forever (bounded here by the write
/// failing once the switch is gone, or by 100 000 of them).
async fn endless_continue() -> (SocketAddr, tokio::task::JoinHandle<()>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let task = tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut head = Vec::new();
                while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                    let mut chunk = [0u8; 4096];
                    match stream.read(&mut chunk).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => head.extend_from_slice(&chunk[..n]),
                    }
                }
                for _ in 0..100_000 {
                    if stream
                        .write_all(b"HTTP/1.1 100 Continue\r\n\r\n")
                        .await
                        .is_err()
                    {
                        return;
                    }
                }
            });
        }
    });
    (addr, task)
}

/// A server streaming interim responses never holds the client: after 100 of them the switch
/// gives up with 502, and that is the server's failure.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn interim_responses_are_bounded() {
    let (server, task) = endless_continue().await;
    let switch = switch_for(server).await;
    let mut client = Client::connect(switch.local_addr("web").unwrap()).await;
    client.send(b"GET / HTTP/1.1\r\nHost: t\r\n\r\n").await;
    let mut interim = 0;
    let last = loop {
        let response = client.response(false).await;
        if response.status != 100 {
            break response;
        }
        interim += 1;
        assert!(interim <= 100, "more than 100 interim responses relayed");
    };
    assert_eq!((last.status, interim), (502, 100), "{}", last.text());
    wait_until(&switch, "the server blamed", |s| {
        s.server(server).is_some_and(|c| c.response_errors == 1)
    })
    .await;
    task.abort();
}

/// A chunk extension without end is refused (400) once it passes 4 KiB, without blaming the
/// server that waited for the body.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_endless_chunk_extension_is_400() {
    let server = backend().await;
    let switch = switch_for(server.addr).await;
    let mut client = Client::connect(switch.local_addr("web").unwrap()).await;
    client
        .send(b"POST /sha256 HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n5;ext=")
        .await;
    server.wait_for_requests(1).await;
    // 8 KiB of extension, in pieces, after the head went to the server.
    for _ in 0..8 {
        client.send(&[b'x'; 1024]).await;
    }
    let response = client.response(false).await;
    assert_eq!(response.status, 400, "{}", response.text());
    let snap = settle(&switch).await;
    let counted = snap.server(server.addr).unwrap();
    assert_eq!(
        (counted.state, counted.response_errors),
        (State::Up, 0),
        "{counted:?}"
    );
}

/// A server with one worker: it serves one connection at a time, to its end (each answer
/// closes), and the others wait in its listen queue. `POST /upload` reads a chunked body to
/// its end, `GET /big` answers 1 GiB; anything else is answered at once. `held` is told when
/// the worker begins one of those two, which a slow client can make last.
async fn single_worker() -> (SocketAddr, Arc<Notify>, tokio::task::JoinHandle<()>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let held = Arc::new(Notify::new());
    let told = Arc::clone(&held);
    let task = tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            let mut buf = Vec::new();
            let head = loop {
                if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                    let head = String::from_utf8_lossy(&buf[..end]).into_owned();
                    buf.drain(..end + 4);
                    break Some(head);
                }
                let mut chunk = [0u8; 4096];
                match stream.read(&mut chunk).await {
                    Ok(0) | Err(_) => break None,
                    Ok(n) => buf.extend_from_slice(&chunk[..n]),
                }
            };
            let Some(head) = head else { continue };
            if head.starts_with("POST /upload ") {
                told.notify_one();
                // The chunked body, to its last chunk.
                while !buf.windows(5).any(|w| w == b"0\r\n\r\n") {
                    let mut chunk = [0u8; 4096];
                    match stream.read(&mut chunk).await {
                        Ok(0) | Err(_) => break,
                        Ok(n) => buf.extend_from_slice(&chunk[..n]),
                    }
                }
            }
            let big = head.starts_with("GET /big ");
            let length = if big { 1 << 30 } else { 5 };
            let answer =
                format!("HTTP/1.1 200 OK\r\nContent-Length: {length}\r\nConnection: close\r\n\r\n");
            if stream.write_all(answer.as_bytes()).await.is_err() {
                continue;
            }
            if big {
                told.notify_one();
                let block = vec![b'x'; 1 << 20];
                for _ in 0..1024 {
                    if stream.write_all(&block).await.is_err() {
                        break;
                    }
                }
            } else {
                let _ = stream.write_all(b"fine\n").await;
            }
        }
    });
    (addr, held, task)
}

/// While one client holds a one-worker server (`held` says when it does), three others' GETs
/// wait in its listen queue until the switch gives up on them (504): the server is busy with
/// that client, not dead, and none of it is counted. Then `release` lets the held exchange
/// end, and the server, up with no failure counted, serves the next GET.
async fn others_wait_while_one_holds(
    switch: &tcpvs::Switch,
    server: SocketAddr,
    held: &Notify,
    release: impl FnOnce(),
) {
    let addr = switch.local_addr("web").unwrap();
    tokio::time::timeout(std::time::Duration::from_secs(30), held.notified())
        .await
        .expect("the worker took the slow client");
    let mut tasks = Vec::new();
    for _ in 0..3 {
        tasks.push(tokio::spawn(async move {
            let mut client = Client::connect(addr).await;
            let response = client.get("/waiting").await;
            assert_eq!(response.status, 504, "{}", response.text());
        }));
    }
    join_all(tasks).await;
    let snap = wait_until(switch, "three timeouts counted", |snap| {
        snap.server(server).is_some_and(|s| s.timeouts == 3)
    })
    .await;
    let counted = snap.server(server).unwrap();
    assert_eq!(counted.state, State::Up, "not blamed: {counted:?}");
    release();
    let mut honest = Client::connect(addr).await;
    let answer = honest.get("/after").await;
    assert_eq!((answer.status, answer.text()), (200, "fine\n".into()));
    assert_eq!(switch.stats().server(server).unwrap().state, State::Up);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_trickling_its_upload_does_not_take_the_server_down() {
    let (server, held, _task) = single_worker().await;
    let switch = switch_for(server).await;
    let mut slow = Client::connect(switch.local_addr("web").unwrap()).await;
    slow.send(b"POST /upload HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n1\r\na\r\n")
        .await;
    // One byte every 200 ms, within the switch's idle_timeout (500 ms), until released.
    let done = Arc::new(AtomicBool::new(false));
    let stop = Arc::clone(&done);
    let trickle = tokio::spawn(async move {
        for _ in 0..3000 {
            if stop.load(Ordering::Acquire) {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(200)).await;
            slow.send(b"1\r\na\r\n").await;
        }
        slow.send(b"0\r\n\r\n").await;
        let response = slow.response(false).await;
        assert_eq!(response.status, 200, "{}", response.text());
    });
    others_wait_while_one_holds(&switch, server, &held, || {
        done.store(true, Ordering::Release)
    })
    .await;
    trickle.await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_reading_its_answer_slowly_does_not_take_the_server_down() {
    let (server, held, _task) = single_worker().await;
    let switch = switch_for(server).await;
    let mut slow = TcpStream::connect(switch.local_addr("web").unwrap())
        .await
        .unwrap();
    slow.write_all(b"GET /big HTTP/1.1\r\nHost: t\r\n\r\n")
        .await
        .unwrap();
    // It reads 1 MiB every 100 ms (enough for the kernel to open its window each time: bytes
    // move within the switch's idle_timeout), so the 1 GiB keeps the server writing until it
    // leaves.
    let done = Arc::new(AtomicBool::new(false));
    let stop = Arc::clone(&done);
    let reader = tokio::spawn(async move {
        let mut block = vec![0u8; 1 << 20];
        for _ in 0..3000 {
            if stop.load(Ordering::Acquire) {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
            if slow.read_exact(&mut block).await.is_err() {
                panic!("the switch closed a client that reads");
            }
        }
    });
    others_wait_while_one_holds(&switch, server, &held, || {
        done.store(true, Ordering::Release)
    })
    .await;
    reader.await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn checks_that_wait_behind_a_trickling_upload_do_not_take_the_server_down() {
    let (server, held, _task) = single_worker().await;
    let switch = start_switch(
        r#"
[switch]
access_log = false
idle_timeout = "5s"
[virtual.web]
listen = "127.0.0.1:0"
default_pool = "p"
[pool.p]
servers = [{ addr = "{server}" }]
[pool.p.health]
check = "http"
path = "/check"
interval = "100ms"
timeout = "300ms"
fall = 1
rise = 1
max_fails = 1
"#,
        &[("server", server.to_string())],
    )
    .await;
    wait_until(&switch, "a first check passed", |snap| {
        snap.server(server)
            .is_some_and(|s| s.check.last.as_ref().is_some_and(|last| last.0))
    })
    .await;
    let mut slow = Client::connect(switch.local_addr("web").unwrap()).await;
    slow.send(b"POST /upload HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n1\r\na\r\n")
        .await;
    tokio::time::timeout(std::time::Duration::from_secs(30), held.notified())
        .await
        .expect("the worker took the slow client");
    // Checks wait in the listen queue and time out, one after the other, while the upload
    // goes on (a byte every 200 ms): each is busy, none is counted (`fall = 1`).
    let mut timed_out = 0;
    let mut last_ago = std::time::Duration::MAX;
    for _ in 0..200 {
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
        slow.send(b"1\r\na\r\n").await;
        let snap = switch.stats();
        let counted = snap.server(server).unwrap();
        assert_eq!(counted.state, State::Up, "{counted:?}");
        if let Some((false, why, ago)) = &counted.check.last {
            // A result newer than the one seen last time.
            if *ago < last_ago {
                assert!(why.contains("not counted"), "{why}");
                timed_out += 1;
            }
            last_ago = *ago;
        }
        if timed_out >= 2 {
            break;
        }
    }
    assert!(
        timed_out >= 2,
        "checks timed out while the upload held the server"
    );
    slow.send(b"0\r\n\r\n").await;
    let response = slow.response(false).await;
    assert_eq!(response.status, 200, "{}", response.text());
    assert_eq!(switch.stats().server(server).unwrap().state, State::Up);
}
