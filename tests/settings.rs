//! The `[switch]` settings that shape connections, end to end over loopback sockets:
//! `keepalive_timeout` and `header_timeout` on kept-alive client connections, `connect_timeout`
//! against a black-holed (loopback) server, `connect_attempts`, `server_idle_max` and
//! `server_idle_timeout` for parked server connections; and the connection rules the README
//! states beside them: a server's `Connection: close` ends reuse, a reused connection that
//! breaks before any response byte is retried only for idempotent requests without body,
//! `CONNECT` tunnels (byte-exact, half-close passed on), and the idle end of tunnels.
//!
//! Verdicts rest on events (a response, an EOF, the switch's statistics, what a backend saw);
//! the timeouts under test are set short, and only their effect is asserted, never a duration.

mod common;

use common::*;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

const ONE_POOL: &str = r#"
[switch]
access_log = false
{extra}
[virtual.web]
listen = "127.0.0.1:0"
default_pool = "main"
[pool.main]
servers = [{ addr = "{server}" }]
"#;

/// A switch with one pool of one server at `server`; `extra` goes into `[switch]`.
async fn one_pool(server: SocketAddr, extra: &str) -> tcpvs::Switch {
    start_switch(
        ONE_POOL,
        &[("server", server.to_string()), ("extra", extra.to_string())],
    )
    .await
}

/// [`one_pool`] on a service that lets CONNECT through (`connect = true`).
async fn one_pool_with_connect(server: SocketAddr) -> tcpvs::Switch {
    let rules = ONE_POOL.replace(
        "default_pool = \"main\"",
        "default_pool = \"main\"\nconnect = true",
    );
    start_switch(
        &rules,
        &[("server", server.to_string()), ("extra", String::new())],
    )
    .await
}

/// The statistics of the server at `addr` in `pool`.
fn server_in<'a>(
    snap: &'a tcpvs::state::snapshot::Snapshot,
    pool: &str,
    addr: SocketAddr,
) -> &'a tcpvs::state::snapshot::ServerSnapshot {
    snap.servers
        .iter()
        .find(|s| s.pool == pool && s.addr == addr)
        .unwrap_or_else(|| panic!("no server {addr} in pool {pool}: {snap:?}"))
}

/// Reads a response head byte-exact from `stream`: the head (through its blank line) and
/// whatever came after it in the same reads.
async fn read_raw_head(stream: &mut TcpStream) -> (Vec<u8>, Vec<u8>) {
    let mut got = Vec::new();
    loop {
        if let Some(end) = got.windows(4).position(|w| w == b"\r\n\r\n") {
            let rest = got.split_off(end + 4);
            return (got, rest);
        }
        let mut chunk = [0u8; 4096];
        let n = tokio::time::timeout(PATIENCE, stream.read(&mut chunk))
            .await
            .expect("a response head within PATIENCE")
            .expect("reading a response head");
        assert!(
            n > 0,
            "closed inside a response head: {:?}",
            String::from_utf8_lossy(&got)
        );
        got.extend_from_slice(&chunk[..n]);
    }
}

// ---------------------------------------------------------------- scripted servers

/// What a [`Scripted`] server does on each connection.
#[derive(Clone, Copy)]
enum Script {
    /// Answers every request `200` with `Connection: close`, then leaves the connection open
    /// and goes on reading, as a server may: only the switch's own rule keeps it from sending
    /// another request there. A request that still comes is answered (and logged).
    SaysCloseStaysOpen,
    /// Answers the first request of each connection and keeps the connection; closes it,
    /// without answering, as soon as the head of its second request arrives: a server that
    /// gave up on an idle connection just as the switch reused it. No check before use can see
    /// that coming.
    ClosesOnSecondRequest,
    /// Answers `CONNECT` with `200 Connection Established` and a greeting, then echoes what
    /// arrives; at end of stream it still sends [`AFTER_EOF`], then ends its side. For a
    /// target with `server-ends-first` it ends its side right after the greeting instead and
    /// notes what it receives until the end of stream (see [`ScriptLog::received`]).
    ConnectEcho,
}

const GREETING: &[u8] = b"greetings from the far end\n";
const AFTER_EOF: &[u8] = b"the server saw your end of stream\n";

/// What a [`Scripted`] server saw.
#[derive(Default)]
struct ScriptLog {
    connections: AtomicUsize,
    /// Every request head received, with its connection's number (counted from 1).
    heads: Mutex<Vec<(usize, String)>>,
    /// Connections the peer (the switch) ended, by number.
    ended: Mutex<Vec<usize>>,
    /// `SHA-256 length` of what a `server-ends-first` tunnel received after its server ended
    /// its side.
    received: Mutex<Vec<String>>,
}

/// A small test server with scripted, test-specific behaviour the common backend lacks.
struct Scripted {
    addr: SocketAddr,
    log: Arc<ScriptLog>,
    tasks: Arc<Mutex<Vec<tokio::task::AbortHandle>>>,
}

impl Scripted {
    async fn start(script: Script) -> Scripted {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let log = Arc::new(ScriptLog::default());
        let tasks: Arc<Mutex<Vec<tokio::task::AbortHandle>>> = Arc::default();
        let (log2, tasks2) = (Arc::clone(&log), Arc::clone(&tasks));
        let accept = tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let number = log2.connections.fetch_add(1, Ordering::SeqCst) + 1;
                let log = Arc::clone(&log2);
                let task = tokio::spawn(serve_scripted(stream, number, script, log));
                tasks2.lock().unwrap().push(task.abort_handle());
            }
        });
        tasks.lock().unwrap().push(accept.abort_handle());
        Scripted { addr, log, tasks }
    }

    fn connections(&self) -> usize {
        self.log.connections.load(Ordering::SeqCst)
    }

    /// `(connection, request line)` of every request head received, in order.
    fn requests(&self) -> Vec<(usize, String)> {
        self.log
            .heads
            .lock()
            .unwrap()
            .iter()
            .map(|(c, head)| (*c, head.lines().next().unwrap_or("").to_string()))
            .collect()
    }

    fn heads(&self) -> Vec<(usize, String)> {
        self.log.heads.lock().unwrap().clone()
    }

    /// Waits until connection `number` has been ended by the switch; panics after PATIENCE.
    async fn wait_for_end_of(&self, number: usize) {
        let deadline = tokio::time::Instant::now() + PATIENCE;
        while !self.log.ended.lock().unwrap().contains(&number) {
            assert!(
                tokio::time::Instant::now() < deadline,
                "the switch never closed server connection {number}"
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
}

impl Drop for Scripted {
    fn drop(&mut self) {
        for task in self.tasks.lock().unwrap().iter() {
            task.abort();
        }
    }
}

/// Reads until `buf` holds a complete request head; returns its length, or `None` at end of
/// stream (or error) first.
async fn read_request_head(stream: &mut TcpStream, buf: &mut Vec<u8>) -> Option<usize> {
    loop {
        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            return Some(end + 4);
        }
        let mut chunk = [0u8; 16384];
        match stream.read(&mut chunk).await {
            Ok(0) | Err(_) => return None,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
}

fn content_length(head: &str) -> usize {
    head.lines()
        .filter_map(|line| line.split_once(':'))
        .find(|(name, _)| name.trim().eq_ignore_ascii_case("content-length"))
        .and_then(|(_, value)| value.trim().parse().ok())
        .unwrap_or(0)
}

async fn serve_scripted(mut stream: TcpStream, number: usize, script: Script, log: Arc<ScriptLog>) {
    let ended = |log: &ScriptLog| log.ended.lock().unwrap().push(number);
    let mut buf = Vec::new();
    let mut served = 0;
    loop {
        let Some(head_len) = read_request_head(&mut stream, &mut buf).await else {
            ended(&log);
            return;
        };
        let head = String::from_utf8_lossy(&buf[..head_len]).into_owned();
        buf.drain(..head_len);
        log.heads.lock().unwrap().push((number, head.clone()));
        served += 1;
        match script {
            Script::ClosesOnSecondRequest if served > 1 => return, // closed, unanswered
            Script::ConnectEcho if head.contains("server-ends-first") => {
                let _ = connect_then_listen(stream, buf, number, &log).await;
                return;
            }
            Script::ConnectEcho => {
                let _ = connect_echo(stream, buf, number, &log).await;
                return;
            }
            _ => {}
        }
        // The request's body, if it has one.
        let body = content_length(&head);
        while buf.len() < body {
            let mut chunk = [0u8; 16384];
            match stream.read(&mut chunk).await {
                Ok(0) | Err(_) => {
                    ended(&log);
                    return;
                }
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
            }
        }
        buf.drain(..body);
        let text = format!("connection {number}\n");
        let close = match script {
            Script::SaysCloseStaysOpen => "Connection: close\r\n",
            _ => "",
        };
        let response = format!(
            "HTTP/1.1 200 OK\r\nContent-Length: {}\r\n{close}\r\n{text}",
            text.len()
        );
        if stream.write_all(response.as_bytes()).await.is_err() {
            ended(&log);
            return;
        }
    }
}

/// The tunnel end of [`Script::ConnectEcho`], after the CONNECT head was read.
async fn connect_echo(
    mut stream: TcpStream,
    early: Vec<u8>,
    number: usize,
    log: &ScriptLog,
) -> std::io::Result<()> {
    let mut out = b"HTTP/1.1 200 Connection Established\r\n\r\n".to_vec();
    out.extend_from_slice(GREETING);
    out.extend_from_slice(&early);
    stream.write_all(&out).await?;
    let mut chunk = vec![0u8; 65536];
    loop {
        let n = stream.read(&mut chunk).await?;
        if n == 0 {
            break;
        }
        stream.write_all(&chunk[..n]).await?;
    }
    log.ended.lock().unwrap().push(number);
    // The client's half of the tunnel has ended; ours is still open.
    stream.write_all(AFTER_EOF).await?;
    stream.shutdown().await
}

/// The tunnel end of [`Script::ConnectEcho`] for `server-ends-first`: the server ends its side
/// at once, then takes what still comes.
async fn connect_then_listen(
    mut stream: TcpStream,
    early: Vec<u8>,
    number: usize,
    log: &ScriptLog,
) -> std::io::Result<()> {
    let mut out = b"HTTP/1.1 200 Connection Established\r\n\r\n".to_vec();
    out.extend_from_slice(GREETING);
    stream.write_all(&out).await?;
    stream.shutdown().await?;
    let mut received = early;
    stream.read_to_end(&mut received).await?;
    log.received
        .lock()
        .unwrap()
        .push(format!("{} {}", sha256_hex(&received), received.len()));
    log.ended.lock().unwrap().push(number);
    Ok(())
}

// ---------------------------------------------------------------- keepalive_timeout

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_client_connection_is_closed_silently_after_keepalive_timeout() {
    let server = backend().await;
    let switch = one_pool(server.addr, "keepalive_timeout = \"3s\"").await;
    let mut client = Client::connect(switch.local_addr("web").unwrap()).await;
    assert_eq!(client.get("/a").await.status, 200);
    // A pause seconds inside the keep-alive time, past the switch's short burst grace (so the
    // connection waits in its idle state): the next request is served.
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(client.get("/b").await.status, 200);
    // Then silence: the switch closes, without a byte (no 408, nothing), after the 3 s it
    // was given, long before the default 30 s.
    let closed = tokio::time::timeout(Duration::from_secs(8), client.try_response(false))
        .await
        .expect("the idle connection closed within 8 s, not after the default 30 s");
    assert!(closed.is_none(), "an idle connection ends with no response");
    let snap = settle(&switch).await;
    assert_eq!(snap.services[0].local_errors, 0, "no refusal was made");
    assert_eq!(server.requests(), 2);
}

// ---------------------------------------------------------------- header_timeout

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_later_request_is_timed_from_its_first_byte_not_from_the_last_response() {
    let server = backend().await;
    // keepalive_timeout stays at its 30 s default. Each head comes whole in one write: a
    // second is far more than the switch needs to read it, however loaded the machine.
    let switch = one_pool(server.addr, "header_timeout = \"1s\"").await;
    let mut client = Client::connect(switch.local_addr("web").unwrap()).await;
    assert_eq!(client.get("/a").await.status, 200);
    // Idle for 2.5 times header_timeout: were the next head timed from the end of the last
    // response, it would be late; it is timed from its first byte, and arrives whole.
    tokio::time::sleep(Duration::from_millis(2500)).await;
    let r = client.get("/b").await;
    assert_eq!((r.status, r.text()), (200, "path /b\n".to_string()));
    assert_eq!(server.requests(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_later_request_head_that_stalls_gets_408_though_keepalive_timeout_is_shorter() {
    let server = backend().await;
    // The head's own time (from its first byte) outlasts the keep-alive time, which ends
    // with the first byte: a stalled head gets its 408, not the keep-alive's silent close.
    // Both are seconds apart from each other, from the test's pauses and from the default
    // header_timeout (10 s), so that the 408 comes at 4 s whatever the load, and ignoring
    // header_timeout would make it late.
    let switch = one_pool(
        server.addr,
        "header_timeout = \"4s\"\nkeepalive_timeout = \"2s\"",
    )
    .await;
    let mut client = Client::connect(switch.local_addr("web").unwrap()).await;
    assert_eq!(client.get("/a").await.status, 200);
    tokio::time::sleep(Duration::from_millis(150)).await; // past the burst grace: idle
    client.send(b"GET /b HTTP/1.1\r\nHost: t\r\n").await;
    let r = tokio::time::timeout(Duration::from_secs(7), client.response(false))
        .await
        .expect("the 408 within 7 s of the stalled head, not after the default 10 s");
    assert_eq!(r.status, 408);
    assert!(client.is_closed().await);
    assert_eq!(server.requests(), 1, "the stalled request never went on");
}

// ---------------------------------------------------------------- connect_timeout

/// A loopback address whose connection attempts get no answer: a listener with a backlog of
/// 0 that never accepts, its accept queue filled, so the kernel drops further SYNs and a
/// connect stays pending (retransmitting) until its caller gives up.
struct BlackHole {
    addr: SocketAddr,
    _listener: TcpListener,
    _queued: Vec<TcpStream>,
}

async fn black_hole() -> BlackHole {
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let listener = socket.listen(0).unwrap();
    let addr = listener.local_addr().unwrap();
    // A backlog of 0 holds one connection: this one completes.
    let first = tokio::time::timeout(PATIENCE, TcpStream::connect(addr))
        .await
        .expect("the first connection within PATIENCE")
        .expect("the first connection");
    let mut queued = vec![first];
    // Then the queue is full and the next attempt stays pending: 300 ms without an answer
    // is taken as that (setup only; were it wrong, the switch's connect would be answered and
    // the test would fail, not pass). Should the kernel queue more, they are added.
    for _ in 0..16 {
        match tokio::time::timeout(Duration::from_millis(300), TcpStream::connect(addr)).await {
            Ok(Ok(stream)) => queued.push(stream),
            Ok(Err(e)) => panic!("connect to the black hole failed: {e}"),
            Err(_) => {
                return BlackHole {
                    addr,
                    _listener: listener,
                    _queued: queued,
                }
            }
        }
    }
    panic!("a full accept queue did not drop connection attempts on this kernel");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connect_that_gets_no_answer_fails_after_connect_timeout_and_the_next_server_is_tried() {
    let hole = black_hole().await;
    let live = backend().await;
    // Pool "both" lists the hole first: a fresh wlc picks it first (ties go by list order).
    let rules = r#"
[switch]
access_log = false
connect_timeout = "300ms"
connect_attempts = 2
[virtual.web]
listen = "127.0.0.1:0"
default_pool = "both"
[[virtual.web.rule]]
path = "^/hole/"
pool = "hole"
[pool.hole]
servers = [{ addr = "{hole}" }]
[pool.both]
servers = [{ addr = "{hole}" }, { addr = "{live}" }]
"#;
    let switch = start_switch(
        rules,
        &[
            ("hole", hole.addr.to_string()),
            ("live", live.addr.to_string()),
        ],
    )
    .await;
    let mut client = Client::connect(switch.local_addr("web").unwrap()).await;

    // Only the hole: the attempt times out, no server is left, 502 (a connect failure, not
    // a silent server's 504).
    let r = client.get("/hole/x").await;
    assert_eq!(r.status, 502);
    let snap = switch.stats();
    let counted = server_in(&snap, "hole", hole.addr);
    assert_eq!((counted.connections, counted.connect_errors), (1, 1));

    // The hole, then the live server: the client never notices.
    let r = client.get("/y").await;
    assert_eq!((r.status, r.served_by()), (200, live.addr.to_string()));
    drop(client);
    let snap = settle(&switch).await;
    let counted = server_in(&snap, "both", hole.addr);
    assert_eq!((counted.connections, counted.connect_errors), (1, 1));
    let counted = server_in(&snap, "both", live.addr);
    assert_eq!((counted.connect_errors, counted.requests), (0, 1));
}

/// `connect_timeout` bounds each connection attempt: six requests in a row to a server whose
/// address never answers an attempt, each given up after 200 ms, are all answered (502)
/// within seconds, where the default (3 s) would take eighteen. Time is the property; the
/// bound (8 s) is seconds away from both.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_connect_attempt_is_given_up_after_connect_timeout_not_the_default() {
    let hole = black_hole().await;
    let rules = r#"
[switch]
access_log = false
connect_timeout = "200ms"
connect_attempts = 1
[virtual.web]
listen = "127.0.0.1:0"
default_pool = "hole"
[pool.hole]
servers = [{ addr = "{hole}" }]
[pool.hole.health]
max_fails = 0
"#;
    let switch = start_switch(rules, &[("hole", hole.addr.to_string())]).await;
    let mut client = Client::connect(switch.local_addr("web").unwrap()).await;
    let six = async {
        for i in 0..6 {
            let r = client.get(&format!("/{i}")).await;
            assert_eq!(r.status, 502, "request {i}: {}", r.text());
        }
    };
    tokio::time::timeout(Duration::from_secs(8), six)
        .await
        .expect("six attempts of 200 ms each within 8 s, not 3 s each");
    drop(client);
    let snap = settle(&switch).await;
    let counted = snap.server(hole.addr).unwrap();
    assert_eq!(
        (
            counted.connections,
            counted.connect_errors,
            counted.responses
        ),
        (6, 6, 0),
        "one attempt per request, each timed out: {counted:?}"
    );
}

// ---------------------------------------------------------------- connect_attempts

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connect_attempts_bounds_the_servers_tried_for_one_request() {
    let first = dead_address().await;
    let second = dead_address().await;
    let live = backend().await;
    let rules = r#"
[switch]
access_log = false
connect_attempts = {attempts}
[virtual.web]
listen = "127.0.0.1:0"
default_pool = "p"
[pool.p]
servers = [{ addr = "{first}" }, { addr = "{second}" }, { addr = "{live}" }]
"#;
    // A fresh wlc tries servers in list order: dead, dead, live.
    for attempts in 1..=3 {
        let switch = start_switch(
            rules,
            &[
                ("attempts", attempts.to_string()),
                ("first", first.to_string()),
                ("second", second.to_string()),
                ("live", live.addr.to_string()),
            ],
        )
        .await;
        let mut client = Client::connect(switch.local_addr("web").unwrap()).await;
        let r = client.get("/x").await;
        drop(client);
        let snap = settle(&switch).await;
        let errors: Vec<u64> = [first, second, live.addr]
            .iter()
            .map(|&a| snap.server(a).unwrap().connect_errors)
            .collect();
        if attempts < 3 {
            assert_eq!(
                r.status, 502,
                "{attempts} attempt(s) reach only dead servers"
            );
        } else {
            assert_eq!((r.status, r.served_by()), (200, live.addr.to_string()));
        }
        let expected: Vec<u64> = match attempts {
            1 => vec![1, 0, 0],
            _ => vec![1, 1, 0],
        };
        assert_eq!(
            errors, expected,
            "connect errors with {attempts} attempt(s)"
        );
        assert_eq!(live.connections(), if attempts < 3 { 0 } else { 1 });
        switch.shutdown(Duration::from_secs(1)).await;
    }
}

// ---------------------------------------------------------------- server_idle_max

/// Sends `GET /hold` on each client, then waits until the backend holds `total` requests.
async fn hold_on_each(clients: &mut [Client], server: &Backend, total: usize) {
    for client in clients.iter_mut() {
        client.send(b"GET /hold HTTP/1.1\r\nHost: t\r\n\r\n").await;
    }
    server.wait_for_requests(total).await;
}

async fn release_and_read(clients: &mut [Client], server: &Backend) {
    server.release(clients.len());
    for client in clients.iter_mut() {
        assert_eq!(client.response(false).await.text(), "0123456789");
    }
}

/// Waits until no request is active at `server` (every exchange parked or dropped its
/// connection by then) and returns its idle connection count.
async fn idle_after_requests(switch: &tcpvs::Switch, server: SocketAddr) -> usize {
    let snap = wait_until(switch, "no request active", |snap| {
        snap.server(server).is_some_and(|s| s.active == 0)
    })
    .await;
    snap.server(server).unwrap().idle
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_idle_max_bounds_the_connections_kept_for_reuse() {
    let server = backend().await;
    let switch = one_pool(server.addr, "server_idle_max = 1").await;
    let addr = switch.local_addr("web").unwrap();
    let mut clients = Vec::new();
    for _ in 0..3 {
        clients.push(Client::connect(addr).await);
    }
    // Three requests at once take three server connections; one is kept afterwards.
    hold_on_each(&mut clients, &server, 3).await;
    assert_eq!(server.connections(), 3);
    release_and_read(&mut clients, &server).await;
    assert_eq!(idle_after_requests(&switch, server.addr).await, 1);

    // Three at once again: the kept one is reused, two are opened anew.
    hold_on_each(&mut clients, &server, 6).await;
    assert_eq!(server.connections(), 5);
    release_and_read(&mut clients, &server).await;
    assert_eq!(idle_after_requests(&switch, server.addr).await, 1);

    // Sequential requests go over the one kept.
    for client in clients.iter_mut() {
        assert_eq!(client.get("/s").await.status, 200);
    }
    assert_eq!(server.connections(), 5);
}

// ---------------------------------------------------------------- server_idle_timeout

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_idle_timeout_retires_old_idle_connections_and_reuses_young_ones() {
    let server = backend().await;
    // Three seconds: the requests that must find the connection young follow their previous
    // one at once, seconds inside the limit however loaded the machine.
    let switch = one_pool(server.addr, "server_idle_timeout = \"3s\"").await;
    let mut client = Client::connect(switch.local_addr("web").unwrap()).await;
    assert_eq!(client.get("/a").await.status, 200);
    // Parked an instant ago: reused.
    assert_eq!(client.get("/b").await.status, 200);
    assert_eq!(server.connections(), 1);
    assert_eq!(idle_after_requests(&switch, server.addr).await, 1);
    // Left idle, it ages past server_idle_timeout and is closed, not kept for reuse.
    wait_until(&switch, "the idle connection retired", |snap| {
        snap.server(server.addr).is_some_and(|s| s.idle == 0)
    })
    .await;
    assert_eq!(client.get("/c").await.status, 200);
    assert_eq!(
        server.connections(),
        2,
        "a new connection after the old one aged"
    );
    assert_eq!(client.get("/d").await.status, 200);
    assert_eq!(
        server.connections(),
        2,
        "and that one is reused while young"
    );
}

// ---------------------------------------------------------------- Connection: close

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_connection_that_said_close_is_not_reused() {
    // The server says `Connection: close` but leaves the connection open: were the switch to
    // keep it, the next request would arrive there.
    let server = Scripted::start(Script::SaysCloseStaysOpen).await;
    let switch = one_pool(server.addr, "").await;
    let mut client = Client::connect(switch.local_addr("web").unwrap()).await;
    let r = client.get("/a").await;
    assert_eq!((r.status, r.text()), (200, "connection 1\n".to_string()));
    // The client's connection goes on; the next request goes over a new server connection,
    // and the switch closes the one that said close.
    let r = client.get("/b").await;
    assert_eq!((r.status, r.text()), (200, "connection 2\n".to_string()));
    server.wait_for_end_of(1).await;
    assert_eq!(
        server.requests(),
        [
            (1, "GET /a HTTP/1.1".to_string()),
            (2, "GET /b HTTP/1.1".to_string())
        ]
    );
    drop(client);
    let snap = settle(&switch).await;
    let counted = snap.server(server.addr).unwrap();
    assert_eq!((counted.idle, counted.connections), (0, 2));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_says_close_and_closes_is_left_and_the_client_goes_on() {
    let server = backend().await;
    let switch = one_pool(server.addr, "").await;
    let mut client = Client::connect(switch.local_addr("web").unwrap()).await;
    let r = client.get("/bye/1000").await;
    assert_eq!((r.status, r.body.clone()), (200, pattern(1000, 1000)));
    assert_eq!(
        r.header("connection"),
        None,
        "the server's close is not the client's"
    );
    assert_eq!(
        idle_after_requests(&switch, server.addr).await,
        0,
        "a connection that said close is not parked"
    );
    let r = client.get("/bytes/10").await;
    assert_eq!((r.status, r.body), (200, pattern(10, 10)));
    assert_eq!(server.connections(), 2);
    drop(client);
    let snap = settle(&switch).await;
    let counted = snap.server(server.addr).unwrap();
    // No failed reuse and no retry on the way.
    assert_eq!((counted.requests, counted.response_errors), (2, 0));
}

// ---------------------------------------------------------------- reuse and retry

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idempotent_request_on_a_reused_connection_that_breaks_is_retried() {
    let server = Scripted::start(Script::ClosesOnSecondRequest).await;
    let switch = one_pool(server.addr, "").await;
    let mut client = Client::connect(switch.local_addr("web").unwrap()).await;
    assert_eq!(client.get("/first").await.text(), "connection 1\n");
    // Reuses connection 1, which breaks on the head: the GET goes again on a new one.
    let r = client.get("/again").await;
    assert_eq!((r.status, r.text()), (200, "connection 2\n".to_string()));
    assert_eq!(
        server.requests(),
        [
            (1, "GET /first HTTP/1.1".to_string()),
            (1, "GET /again HTTP/1.1".to_string()),
            (2, "GET /again HTTP/1.1".to_string()),
        ]
    );
    assert_eq!(server.connections(), 2);
    drop(client);
    let snap = settle(&switch).await;
    let counted = snap.server(server.addr).unwrap();
    assert_eq!(
        (
            counted.connections,
            counted.requests,
            counted.response_errors
        ),
        (2, 3, 1),
        "the broken attempt is counted, and the retry: {counted:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_non_idempotent_request_on_a_reused_connection_that_breaks_is_not_retried() {
    let server = Scripted::start(Script::ClosesOnSecondRequest).await;
    let switch = one_pool(server.addr, "").await;
    let mut client = Client::connect(switch.local_addr("web").unwrap()).await;
    assert_eq!(client.get("/first").await.text(), "connection 1\n");
    // A POST without body on the reused connection 1: 502, and it went up once only.
    client
        .send(b"POST /form HTTP/1.1\r\nHost: t\r\nContent-Length: 0\r\n\r\n")
        .await;
    assert_eq!(client.response(false).await.status, 502);
    // Without a body the client connection goes on; the next request opens connection 2.
    assert_eq!(client.get("/after").await.text(), "connection 2\n");
    // A POST with a body on the reused connection 2: 502 as well, and the client connection
    // closes (its body was not all relayed).
    client
        .send(b"POST /upload HTTP/1.1\r\nHost: t\r\nContent-Length: 7\r\n\r\npayload")
        .await;
    assert_eq!(client.response(false).await.status, 502);
    assert!(client.is_closed().await);
    drop(client);
    assert_eq!(
        server.requests(),
        [
            (1, "GET /first HTTP/1.1".to_string()),
            (1, "POST /form HTTP/1.1".to_string()),
            (2, "GET /after HTTP/1.1".to_string()),
            (2, "POST /upload HTTP/1.1".to_string()),
        ],
        "each POST reached the server once"
    );
    assert_eq!(
        server.connections(),
        2,
        "no connection was opened for a retry"
    );
    let snap = settle(&switch).await;
    assert_eq!(snap.server(server.addr).unwrap().connections, 2);
}

// ---------------------------------------------------------------- tunnels

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connect_answered_2xx_becomes_a_byte_exact_tunnel_that_passes_half_closes() {
    let server = Scripted::start(Script::ConnectEcho).await;
    let switch = one_pool_with_connect(server.addr).await;
    let mut client = Client::connect(switch.local_addr("web").unwrap()).await;
    client
        .send(b"CONNECT tunnel.test:443 HTTP/1.1\r\nHost: tunnel.test:443\r\n\r\n")
        .await;
    let (head, already) = read_raw_head(&mut client.stream).await;
    let head_text = String::from_utf8_lossy(&head).into_owned();
    assert!(
        head_text.starts_with("HTTP/1.1 200 "),
        "the server's answer: {head_text:?}"
    );

    // 1 MiB up and echoed down at once; then the client ends its half. The server still
    // answers after seeing that end (the tunnel's other half stays open), then ends its own,
    // which reaches the client as end of stream.
    let data = pattern(1 << 20, 42);
    let got = through_tunnel(client.stream, already, &data).await;
    let expected = [GREETING, &data, AFTER_EOF].concat();
    assert_eq!(got.len(), expected.len());
    assert_eq!(
        sha256_hex(&got),
        sha256_hex(&expected),
        "byte-exact both ways"
    );

    let snap = settle(&switch).await;
    let heads = server.heads();
    assert_eq!(heads.len(), 1);
    assert!(
        heads[0]
            .1
            .starts_with("CONNECT tunnel.test:443 HTTP/1.1\r\n"),
        "{heads:?}"
    );
    let counted = snap.server(server.addr).unwrap();
    assert_eq!(
        (counted.bytes_in, counted.bytes_out),
        (
            (heads[0].1.len() + data.len()) as u64,
            (head.len() + expected.len()) as u64
        ),
        "tunnel bytes counted both ways"
    );
}

/// Issue 22, part 4: a CONNECT that a server answers 2xx turns the connection into a raw tunnel
/// past routing, X-Forwarded-For and framing checks. Without `connect = true` the switch answers
/// 405 itself, no server sees the request, and the connection goes on carrying requests that
/// are routed as usual.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connect_is_refused_with_405_unless_the_service_lets_it_through() {
    let server = backend().await;
    let switch = one_pool(server.addr, "").await;
    let mut client = Client::connect(switch.local_addr("web").unwrap()).await;
    client
        .send(b"CONNECT tunnel.test:443 HTTP/1.1\r\nHost: tunnel.test:443\r\n\r\n")
        .await;
    let refused = client.response(false).await;
    assert_eq!(refused.status, 405, "{}", refused.text());
    // The connection stays an HTTP connection: the next request is routed, not tunnelled.
    let next = client.get("/next").await;
    assert_eq!(next.text(), "path /next\n");
    assert_eq!(server.requests(), 1, "the server saw only the GET");
    assert!(server.record.heads.lock().unwrap()[0].starts_with("GET /next HTTP/1.1\r\n"));
    drop(client);
    let snap = settle(&switch).await;
    assert_eq!(
        snap.services[0].local_errors, 1,
        "the 405 is the switch's own answer"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connect_tunnel_passes_the_servers_half_close_and_still_carries_the_clients_bytes() {
    let server = Scripted::start(Script::ConnectEcho).await;
    let switch = one_pool_with_connect(server.addr).await;
    let mut client = Client::connect(switch.local_addr("web").unwrap()).await;
    client
        .send(b"CONNECT server-ends-first.test:443 HTTP/1.1\r\nHost: server-ends-first.test:443\r\n\r\n")
        .await;
    let (head, mut got) = read_raw_head(&mut client.stream).await;
    assert!(head.starts_with(b"HTTP/1.1 200 "));
    // The server ended its side: the client reads to the end while its own side is open.
    tokio::time::timeout(PATIENCE, client.stream.read_to_end(&mut got))
        .await
        .expect("the server's end of stream within PATIENCE")
        .expect("reading the tunnel");
    assert_eq!(got, GREETING);
    // The other direction still carries bytes, all of them, until the client ends it too.
    let data = pattern(1 << 20, 43);
    client.send(&data).await;
    client.stream.shutdown().await.unwrap();
    server.wait_for_end_of(1).await;
    assert_eq!(
        *server.log.received.lock().unwrap(),
        [format!("{} {}", sha256_hex(&data), data.len())]
    );
    drop(client);
    assert_eq!(settle(&switch).await.clients, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tunnel_with_no_byte_moving_for_idle_timeout_is_closed() {
    let server = backend().await;
    // Long enough that the 101 and the echo, which come at once, never meet it however loaded
    // the machine; short enough for the close to come seconds before PATIENCE ends.
    let switch = one_pool(server.addr, "idle_timeout = \"2s\"").await;
    let mut client = Client::connect(switch.local_addr("web").unwrap()).await;
    client
        .send(b"GET /upgrade HTTP/1.1\r\nHost: t\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n")
        .await;
    let (head, already) = read_raw_head(&mut client.stream).await;
    assert!(head.starts_with(b"HTTP/1.1 101 "));
    assert!(already.is_empty(), "nothing was sent yet to be echoed");
    // Bytes move, then nothing does: the switch ends the tunnel, and the client sees the end.
    let data = pattern(1000, 5);
    client.send(&data).await;
    let mut echoed = vec![0u8; data.len()];
    tokio::time::timeout(PATIENCE, client.stream.read_exact(&mut echoed))
        .await
        .expect("the echo within PATIENCE")
        .expect("reading the echo");
    assert_eq!(echoed, data);
    assert!(client.is_closed().await, "the idle tunnel was closed");
    let snap = settle(&switch).await;
    let counted = snap.server(server.addr).unwrap();
    let upstream_head = server.record.heads.lock().unwrap()[0].len();
    assert_eq!(
        (counted.bytes_in, counted.bytes_out),
        (
            (upstream_head + data.len()) as u64,
            (head.len() + data.len()) as u64
        ),
        "the bytes the tunnel moved are counted"
    );
}
