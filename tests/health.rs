//! Health of servers through the switch, over loopback sockets: passive detection (failed
//! exchanges take a server down after `max_fails`, a trial request after `fail_timeout`), retries
//! of idempotent requests past a failing server, active `tcp` and `http` checks (`rise`, `fall`,
//! the first check decisive), backup servers, the per-pool queue (`queue_timeout`), slow start,
//! the HAProxy agent protocol, the log of the real binary, and the rule-file errors of the keys.
//!
//! Verdicts never depend on elapsed time: each step waits for an event (the switch's statistics
//! reaching a state, a server accepting a connection or parsing a request head, a log line, the
//! end of the log), and timeouts only guard against hangs. Where a timer is the behaviour under
//! test (`fail_timeout`, an http check's `timeout`, `queue_timeout`), the test waits for what the
//! timer causes. Servers that misbehave in a particular way (reset at once, never answer, answer a
//! chosen status, come back on the same port, answer only when the test says) are written here.

mod common;

use common::*;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tcpvs::state::snapshot::{ServerSnapshot, Snapshot};
use tcpvs::state::status::State;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpSocket, TcpStream};
use tokio::sync::{watch, Semaphore};
use tokio::task::JoinHandle;

// ---------------------------------------------------------------- rule files

/// One virtual service `web` whose every request goes to pool `p`: `pool_keys` in the pool
/// table, `servers` as written in its list, and `health` as the `[pool.p.health]` table.
fn rules(pool_keys: &str, servers: &[String], health: &str) -> String {
    format!(
        "[switch]\naccess_log = false\n[virtual.web]\nlisten = \"127.0.0.1:0\"\n\
         default_pool = \"p\"\n[pool.p]\n{pool_keys}\nservers = [{}]\n[pool.p.health]\n{health}\n",
        servers.join(", ")
    )
}

/// A server of a pool list: its address and more fields (`"weight = 100"`, `"backup = true"`).
fn server(addr: SocketAddr, fields: &str) -> String {
    if fields.is_empty() {
        format!("{{ addr = \"{addr}\" }}")
    } else {
        format!("{{ addr = \"{addr}\", {fields} }}")
    }
}

/// The server at `addr` in `snap`.
fn at(snap: &Snapshot, addr: SocketAddr) -> &ServerSnapshot {
    snap.server(addr)
        .unwrap_or_else(|| panic!("{addr} is not in the statistics: {snap:?}"))
}

/// Sends a GET on `client` and asserts it is answered 200.
async fn get_ok(client: &mut Client, path: &str) -> Response {
    let r = client.get(path).await;
    assert_eq!(r.status, 200, "GET {path}: {}", r.text());
    r
}

/// Sends GETs (each must be answered 200) until `done` holds for the statistics after one,
/// at most `limit` of them; returns those statistics and how many were sent.
async fn get_until(
    switch: &tcpvs::Switch,
    client: &mut Client,
    limit: usize,
    what: &str,
    done: impl Fn(&Snapshot) -> bool,
) -> (Snapshot, usize) {
    for sent in 1..=limit {
        get_ok(client, &format!("/until/{sent}")).await;
        let snap = switch.stats();
        if done(&snap) {
            return (snap, sent);
        }
    }
    panic!(
        "`{what}` not reached after {limit} requests: {:?}",
        switch.stats()
    );
}

/// Waits until `reached` holds, looking every few milliseconds; panics after [`PATIENCE`].
async fn wait_for(what: &str, reached: impl Fn() -> bool) {
    let deadline = tokio::time::Instant::now() + PATIENCE;
    while !reached() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "`{what}` not reached within {PATIENCE:?}"
        );
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

/// [`wait_until`] with a bound of its own: for a timer under test that is set seconds apart
/// from its default, so that `reached` comes well within `limit` when the configured value is
/// used and well after it when the default is. Panics when `limit` passes first.
async fn wait_until_within(
    switch: &tcpvs::Switch,
    what: &str,
    limit: Duration,
    reached: impl Fn(&Snapshot) -> bool,
) -> Snapshot {
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        let snap = switch.stats();
        if reached(&snap) {
            return snap;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "`{what}` not reached within {limit:?}: {snap:?}"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// How long after a server went down its trial request may come, in the test of a 300 ms
/// `fail_timeout`: seconds of margin either way (the default is 10 s).
const FAIL_TIMEOUT_BOUND: Duration = Duration::from_secs(5);

// ---------------------------------------------------------------- servers written here

/// What a [`Tiny`] server does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Behaviour {
    /// Answers each request head with this status and a 2-byte body, keep-alive, naming
    /// itself in `X-Served-By`.
    Status(u16),
    /// Accepts, then resets the connection at once (SO_LINGER 0), before reading anything.
    Reset,
    /// Reads request heads and never answers.
    Silent,
    /// Answers each request head with bytes that are not an HTTP response head.
    Garbage,
}

/// A small server at an address of the test's choice (so a dead port can come back), whose
/// behaviour the test changes while it runs. Gated: each answer waits for [`Tiny::release`].
struct Tiny {
    addr: SocketAddr,
    shared: Arc<TinyShared>,
    /// `None` once stopped.
    accept: Option<JoinHandle<()>>,
}

struct TinyShared {
    behaviour: Mutex<Behaviour>,
    gated: bool,
    gate: Semaphore,
    accepted: watch::Sender<usize>,
    heads: Mutex<Vec<String>>,
    heads_seen: watch::Sender<usize>,
    connections: Mutex<Vec<JoinHandle<()>>>,
}

impl Tiny {
    async fn start(addr: SocketAddr, behaviour: Behaviour) -> Tiny {
        Tiny::start_with(addr, behaviour, false).await
    }

    async fn start_with(addr: SocketAddr, behaviour: Behaviour, gated: bool) -> Tiny {
        // SO_REUSEADDR: the port may be held by a [`Reserved`] socket, or have connections of
        // an earlier server in TIME_WAIT.
        let socket = TcpSocket::new_v4().unwrap();
        socket.set_reuseaddr(true).unwrap();
        socket
            .bind(addr)
            .unwrap_or_else(|e| panic!("binding {addr}: {e}"));
        let listener = socket.listen(1024).unwrap();
        let addr = listener.local_addr().unwrap();
        let shared = Arc::new(TinyShared {
            behaviour: Mutex::new(behaviour),
            gated,
            gate: Semaphore::new(0),
            accepted: watch::channel(0).0,
            heads: Mutex::default(),
            heads_seen: watch::channel(0).0,
            connections: Mutex::default(),
        });
        let state = Arc::clone(&shared);
        let accept = tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    return;
                };
                state.accepted.send_modify(|n| *n += 1);
                if *state.behaviour.lock().unwrap() == Behaviour::Reset {
                    stream.set_zero_linger().unwrap();
                    drop(stream);
                    continue;
                }
                let connection = tokio::spawn(tiny_connection(stream, addr, Arc::clone(&state)));
                state.connections.lock().unwrap().push(connection);
            }
        });
        Tiny {
            addr,
            shared,
            accept: Some(accept),
        }
    }

    fn set(&self, behaviour: Behaviour) {
        *self.shared.behaviour.lock().unwrap() = behaviour;
    }

    /// Lets `n` gated answers go.
    fn release(&self, n: usize) {
        self.shared.gate.add_permits(n);
    }

    fn accepted(&self) -> usize {
        *self.shared.accepted.borrow()
    }

    fn heads(&self) -> Vec<String> {
        self.shared.heads.lock().unwrap().clone()
    }

    /// Waits until `n` request heads have arrived in all; panics after [`PATIENCE`].
    async fn wait_for_heads(&self, n: usize) {
        let mut seen = self.shared.heads_seen.subscribe();
        let reached = tokio::time::timeout(PATIENCE, seen.wait_for(|&c| c >= n)).await;
        assert!(
            matches!(reached, Ok(Ok(_))),
            "{} saw {} request heads, not {n}",
            self.addr,
            self.heads().len()
        );
    }

    /// Closes the listener and every connection, and returns once they are closed: the port
    /// refuses connections from then on.
    async fn stop(mut self) {
        if let Some(accept) = self.accept.take() {
            accept.abort();
            let listener = tokio::time::timeout(PATIENCE, accept).await;
            assert!(
                listener.is_ok(),
                "the listener of {} did not stop",
                self.addr
            );
        }
        let connections: Vec<_> = self.shared.connections.lock().unwrap().drain(..).collect();
        for c in connections {
            c.abort();
            assert!(
                tokio::time::timeout(PATIENCE, c).await.is_ok(),
                "a connection of {} did not stop",
                self.addr
            );
        }
    }
}

impl Drop for Tiny {
    fn drop(&mut self) {
        if let Some(accept) = &self.accept {
            accept.abort();
        }
        for c in self.shared.connections.lock().unwrap().iter() {
            c.abort();
        }
    }
}

async fn tiny_connection(mut stream: TcpStream, me: SocketAddr, shared: Arc<TinyShared>) {
    let mut buf = Vec::new();
    loop {
        let end = loop {
            if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                break i + 4;
            }
            let mut chunk = [0u8; 4096];
            match stream.read(&mut chunk).await {
                Ok(0) | Err(_) => return,
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
            }
        };
        let head: Vec<u8> = buf.drain(..end).collect();
        shared
            .heads
            .lock()
            .unwrap()
            .push(String::from_utf8_lossy(&head).into_owned());
        shared.heads_seen.send_modify(|n| *n += 1);
        if shared.gated {
            shared.gate.acquire().await.unwrap().forget();
        }
        let behaviour = *shared.behaviour.lock().unwrap();
        match behaviour {
            Behaviour::Status(code) => {
                let answer = format!(
                    "HTTP/1.1 {code} X\r\nContent-Length: 2\r\nX-Served-By: {me}\r\n\r\nok"
                );
                if stream.write_all(answer.as_bytes()).await.is_err() {
                    return;
                }
            }
            Behaviour::Silent => std::future::pending::<()>().await,
            Behaviour::Garbage => {
                if stream.write_all(b"this is not HTTP\r\n\r\n").await.is_err() {
                    return;
                }
            }
            Behaviour::Reset => {
                let _ = stream.set_zero_linger();
                return;
            }
        }
    }
}

/// An agent as HAProxy's agent-check expects one: each connection gets the current line and
/// a newline, then is closed.
struct Agent {
    port: u16,
    line: Arc<Mutex<String>>,
    asked: Arc<AtomicUsize>,
    task: JoinHandle<()>,
}

impl Agent {
    async fn start(line: &str) -> Agent {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let line = Arc::new(Mutex::new(line.to_string()));
        let asked = Arc::new(AtomicUsize::new(0));
        let (said, count) = (Arc::clone(&line), Arc::clone(&asked));
        let task = tokio::spawn(async move {
            loop {
                let Ok((mut stream, _)) = listener.accept().await else {
                    return;
                };
                count.fetch_add(1, Ordering::SeqCst);
                let text = format!("{}\n", said.lock().unwrap());
                let _ = stream.write_all(text.as_bytes()).await;
            }
        });
        Agent {
            port,
            line,
            asked,
            task,
        }
    }

    fn say(&self, line: &str) {
        *self.line.lock().unwrap() = line.to_string();
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        self.task.abort();
    }
}

// ---------------------------------------------------------------- passive detection

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_server_costs_get_clients_nothing_and_is_dropped_after_max_fails_connect_failures() {
    let (a, b) = (backend().await, backend().await);
    let dead = dead_address().await;
    let rules = rules(
        "scheduler = \"wlc\"",
        &[server(a.addr, ""), server(dead, ""), server(b.addr, "")],
        "check = \"none\"\nmax_fails = 3\nfail_timeout = \"1h\"",
    );
    let switch = start_switch(&rules, &[]).await;
    let mut client = Client::connect(switch.local_addr("web").unwrap()).await;
    // Sequential requests: no two can find the dead server up at once.
    let (snap, _) = get_until(&switch, &mut client, 60, "the dead server down", |s| {
        at(s, dead).state == State::Down
    })
    .await;
    let down = at(&snap, dead);
    assert_eq!(
        down.connect_errors, 3,
        "down after exactly max_fails: {down:?}"
    );
    assert!(!down.offered, "{down:?}");
    assert!(
        down.reason.contains("3 failed exchanges") && down.reason.contains("connect"),
        "{down:?}"
    );
    for i in 0..40 {
        let r = get_ok(&mut client, &format!("/after/{i}")).await;
        assert_ne!(r.served_by(), dead.to_string());
    }
    let snap = switch.stats();
    let down = at(&snap, dead);
    assert_eq!(
        (down.connect_errors, down.connections, down.state),
        (3, 3, State::Down),
        "no connection attempt after it went down: {down:?}"
    );
    for live in [&a, &b] {
        assert_eq!(at(&snap, live.addr).state, State::Up);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_fails_zero_turns_passive_detection_off() {
    let live = backend().await;
    let dead = dead_address().await;
    let rules = rules(
        "",
        &[server(dead, ""), server(live.addr, "")],
        "max_fails = 0\nfail_timeout = \"1h\"",
    );
    let switch = start_switch(&rules, &[]).await;
    let mut client = Client::connect(switch.local_addr("web").unwrap()).await;
    let (snap, sent) = get_until(&switch, &mut client, 100, "ten connect errors", |s| {
        at(s, dead).connect_errors >= 10
    })
    .await;
    let dead_one = at(&snap, dead);
    assert_eq!(
        dead_one.state,
        State::Up,
        "after {sent} requests: {dead_one:?}"
    );
    assert!(dead_one.offered, "{dead_one:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn servers_that_reset_or_close_without_answering_are_retried_past_and_taken_down() {
    let reset = Tiny::start("127.0.0.1:0".parse().unwrap(), Behaviour::Reset).await;
    // Reads each connection's first request and closes it unanswered: killed while working.
    let closing = backend_with(BackendOptions {
        drop_request: Some(1),
        ..BackendOptions::default()
    })
    .await;
    let good = backend().await;
    let rules = rules(
        "scheduler = \"wlc\"",
        &[
            server(reset.addr, ""),
            server(closing.addr, ""),
            server(good.addr, ""),
        ],
        "max_fails = 3\nfail_timeout = \"1h\"\npanic_threshold = 0",
    );
    let switch = start_switch(&rules, &[]).await;
    let mut client = Client::connect(switch.local_addr("web").unwrap()).await;
    let (snap, _) = get_until(&switch, &mut client, 60, "both failing servers down", |s| {
        at(s, reset.addr).state == State::Down && at(s, closing.addr).state == State::Down
    })
    .await;
    for bad in [reset.addr, closing.addr] {
        let s = at(&snap, bad);
        // A reset may come before the switch saw its connect complete: then the connect
        // failed. Either way, three failed exchanges and no response.
        assert_eq!(
            (s.response_errors + s.connect_errors, s.responses),
            (3, 0),
            "{s:?}"
        );
        assert!(s.reason.contains("3 failed exchanges"), "{s:?}");
    }
    assert_eq!(at(&snap, closing.addr).response_errors, 3);
    assert_eq!(reset.accepted(), 3, "the resetting server saw three tries");
    assert_eq!(
        closing.requests(),
        3,
        "the closing server read three requests"
    );
    for i in 0..30 {
        let r = get_ok(&mut client, &format!("/after/{i}")).await;
        assert_eq!(r.served_by(), good.addr.to_string());
    }
    assert_eq!((reset.accepted(), closing.requests()), (3, 3));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_post_with_a_body_to_a_server_that_closes_without_answering_gets_502_once() {
    let closing = backend_with(BackendOptions {
        drop_request: Some(1),
        ..BackendOptions::default()
    })
    .await;
    let good = backend().await;
    // wlc with nothing picked yet sends the first request to the first server.
    let rules = rules(
        "scheduler = \"wlc\"",
        &[server(closing.addr, ""), server(good.addr, "")],
        "max_fails = 3\nfail_timeout = \"1h\"",
    );
    let switch = start_switch(&rules, &[]).await;
    let mut client = Client::connect(switch.local_addr("web").unwrap()).await;
    client
        .send(b"POST /sha256 HTTP/1.1\r\nHost: t\r\nContent-Length: 5\r\n\r\nhello")
        .await;
    let r = client.response(false).await;
    assert_eq!(r.status, 502, "{}", r.text());
    assert_eq!(closing.requests(), 1, "sent to the closing server once");
    assert_eq!(good.requests(), 0, "and not retried on the other one");
    let snap = settle(&switch).await;
    assert_eq!(at(&snap, closing.addr).response_errors, 1);
    assert_eq!(
        at(&snap, closing.addr).state,
        State::Up,
        "one failure of three"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_get_tries_at_most_connect_attempts_servers() {
    let live = backend().await;
    let dead = [
        dead_address().await,
        dead_address().await,
        dead_address().await,
    ];
    for (attempts, status) in [(3, 502), (4, 200)] {
        // wlc with nothing picked yet takes the servers in list order: the live one is last.
        let text = rules(
            "scheduler = \"wlc\"",
            &[
                server(dead[0], ""),
                server(dead[1], ""),
                server(dead[2], ""),
                server(live.addr, ""),
            ],
            "max_fails = 3\nfail_timeout = \"1h\"",
        )
        .replace(
            "access_log = false",
            &format!("access_log = false\nconnect_attempts = {attempts}"),
        );
        let switch = start_switch(&text, &[]).await;
        let mut client = Client::connect(switch.local_addr("web").unwrap()).await;
        let r = client.get("/").await;
        assert_eq!(
            r.status,
            status,
            "connect_attempts = {attempts}: {}",
            r.text()
        );
        let snap = switch.stats();
        let errors: Vec<u64> = dead.iter().map(|&d| at(&snap, d).connect_errors).collect();
        assert_eq!(errors, [1, 1, 1], "connect_attempts = {attempts}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unparsable_answer_or_none_within_idle_timeout_is_a_failed_exchange() {
    // The garbage comes at once and is refused as soon as it is read: its idle_timeout is
    // far longer than any stall of a loaded machine, so it cannot turn into a 504. The silent
    // server's 504 is what its short idle_timeout causes.
    for (behaviour, status, idle) in [
        (Behaviour::Garbage, 502, "60s"),
        (Behaviour::Silent, 504, "200ms"),
    ] {
        let bad = Tiny::start("127.0.0.1:0".parse().unwrap(), behaviour).await;
        let text = rules(
            "",
            &[server(bad.addr, "")],
            // Its only server down: 503, as no panic threshold sends requests there anyway.
            "max_fails = 2\nfail_timeout = \"1h\"\npanic_threshold = 0",
        )
        .replace(
            "access_log = false",
            &format!("access_log = false\nidle_timeout = \"{idle}\""),
        );
        let switch = start_switch(&text, &[]).await;
        for i in 0..2 {
            // A response began (or may yet begin): not retried, whatever the method.
            let mut client = Client::connect(switch.local_addr("web").unwrap()).await;
            let r = client.get(&format!("/{i}")).await;
            assert_eq!(r.status, status, "{behaviour:?}: {}", r.text());
        }
        let snap = switch.stats();
        let s = at(&snap, bad.addr);
        assert_eq!((s.state, s.response_errors), (State::Down, 2), "{s:?}");
        assert!(s.reason.contains("2 failed exchanges"), "{s:?}");
        let mut client = Client::connect(switch.local_addr("web").unwrap()).await;
        assert_eq!(client.get("/after").await.status, 503, "{behaviour:?}");
        assert_eq!(bad.heads().len(), 2, "{behaviour:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_checks_a_down_server_gets_one_trial_per_fail_timeout_and_is_back_when_it_works() {
    let good = backend().await;
    let reserved = reserved_address();
    let dead = reserved.addr;
    let rules = rules(
        "scheduler = \"rr\"",
        &[server(dead, ""), server(good.addr, "")],
        "check = \"none\"\nmax_fails = 2\nfail_timeout = \"300ms\"",
    );
    let switch = start_switch(&rules, &[]).await;
    let mut client = Client::connect(switch.local_addr("web").unwrap()).await;
    let (snap, _) = get_until(&switch, &mut client, 60, "the dead server down", |s| {
        at(s, dead).state == State::Down
    })
    .await;
    assert_eq!(at(&snap, dead).connect_errors, 2);

    // Two trials while it is still dead: each costs one connection attempt and leaves it down.
    // Each comes fail_timeout (300 ms) after the server went down: within seconds, where the
    // default fail_timeout (10 s) would not be over yet.
    for trial in 1..=2u64 {
        let snap = wait_until_within(
            &switch,
            "the dead server on trial",
            FAIL_TIMEOUT_BOUND,
            |s| at(s, dead).state == State::Up && at(s, dead).reason.contains("on trial"),
        )
        .await;
        assert_eq!(at(&snap, dead).connect_errors, 1 + trial, "trial {trial}");
        let (snap, _) = get_until(&switch, &mut client, 60, "the trial failed", |s| {
            at(s, dead).state == State::Down
        })
        .await;
        let s = at(&snap, dead);
        assert_eq!(s.connect_errors, 2 + trial, "trial {trial}: {s:?}");
        assert!(s.reason.contains("trial request failed"), "{s:?}");
    }

    // It comes back on the same port, answering only when the test says: the next trial
    // request is held there, and meanwhile the server takes no second request (limit 1), even
    // on its turns (round robin tries it first every other request).
    let revived = Tiny::start_with(dead, Behaviour::Status(200), true).await;
    wait_until_within(
        &switch,
        "the revived server on trial",
        FAIL_TIMEOUT_BOUND,
        |s| at(s, dead).reason.contains("on trial"),
    )
    .await;
    let addr = switch.local_addr("web").unwrap();
    let mut trial = None;
    for i in 0..4 {
        let served = good.requests() + revived.heads().len();
        let mut c = Client::connect(addr).await;
        c.send(format!("GET /trial/{i} HTTP/1.1\r\nHost: t\r\n\r\n").as_bytes())
            .await;
        wait_for("the request at either server", || {
            good.requests() + revived.heads().len() > served
        })
        .await;
        if revived.heads().len() == 1 {
            trial = Some(c);
            break;
        }
        assert_eq!(c.response(false).await.served_by(), good.addr.to_string());
    }
    let mut trial = trial.expect("the trial request reached the revived server");
    for i in 0..4 {
        let r = get_ok(&mut client, &format!("/during/{i}")).await;
        assert_eq!(r.served_by(), good.addr.to_string(), "during the trial");
    }
    assert_eq!(revived.heads().len(), 1, "one request at a time on trial");
    revived.release(1000);
    assert_eq!(trial.response(false).await.status, 200);
    let snap = wait_until(&switch, "the trial succeeded", |s| {
        at(s, dead).reason == "trial request succeeded"
    })
    .await;
    let s = at(&snap, dead);
    assert_eq!((s.state, s.offered, s.connect_errors), (State::Up, true, 4));
    get_until(
        &switch,
        &mut client,
        60,
        "three requests at the revived server",
        |_| revived.heads().len() >= 3,
    )
    .await;
}

// ---------------------------------------------------------------- active checks

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tcp_check_takes_a_dead_server_down_before_any_request_and_back_at_its_first_pass() {
    let good = backend().await;
    let reserved = reserved_address();
    let dead = reserved.addr;
    let rules = rules(
        "",
        &[server(dead, ""), server(good.addr, "")],
        "check = \"tcp\"\ninterval = \"100ms\"\nrise = 2\nfall = 3",
    );
    let switch = start_switch(&rules, &[]).await;
    let snap = wait_until(&switch, "the dead server down", |s| {
        at(s, dead).state == State::Down
    })
    .await;
    let s = at(&snap, dead);
    assert!(s.reason.contains("check failed"), "{s:?}");
    assert!(!s.offered);
    assert_eq!(
        (s.connect_errors, s.connections, s.requests),
        (0, 0, 0),
        "checks are not requests: {s:?}"
    );
    assert_eq!(at(&snap, good.addr).state, State::Up);

    let mut client = Client::connect(switch.local_addr("web").unwrap()).await;
    for i in 0..10 {
        let r = get_ok(&mut client, &format!("/{i}")).await;
        assert_eq!(r.served_by(), good.addr.to_string());
    }
    assert_eq!(switch.stats().server(dead).unwrap().connect_errors, 0);

    let revived = Tiny::start(dead, Behaviour::Status(200)).await;
    let snap = wait_until(&switch, "the revived server up", |s| {
        at(s, dead).state == State::Up
    })
    .await;
    // A server that never passed a check (it started after the switch) is up at its first
    // pass, not `rise` passes later: nothing says it failed once it ran.
    assert_eq!(at(&snap, dead).reason, "its first check passed");
    // The check's connection was complete before the server accepted it.
    wait_for("the check accepted", || revived.accepted() >= 1).await;
    get_until(
        &switch,
        &mut client,
        60,
        "a request at the revived server",
        |s| at(s, dead).responses >= 1,
    )
    .await;
    assert!(revived.heads().iter().any(|h| h.starts_with("GET /until/")));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_http_check_takes_down_a_server_answering_a_wrong_status_or_nothing() {
    let any: SocketAddr = "127.0.0.1:0".parse().unwrap();
    let failing = Tiny::start(any, Behaviour::Status(500)).await;
    let silent = Tiny::start(any, Behaviour::Silent).await;
    let healthy = Tiny::start(any, Behaviour::Status(200)).await;
    let rules = rules(
        "",
        &[
            server(failing.addr, ""),
            server(silent.addr, ""),
            server(healthy.addr, ""),
        ],
        // Two of three down is below the default panic threshold: 0 lets health alone decide.
        // The timeout is far above what a loaded machine takes to answer on loopback: the
        // healthy server's first check, which decides at once, must not fail for being slow.
        "check = \"http\"\npath = \"/health\"\nexpect = \"200\"\ninterval = \"100ms\"\n\
         timeout = \"2s\"\npanic_threshold = 0",
    );
    let switch = start_switch(&rules, &[]).await;
    let snap = wait_until(&switch, "both bad servers down", |s| {
        at(s, failing.addr).state == State::Down && at(s, silent.addr).state == State::Down
    })
    .await;
    let reason = |addr| at(&snap, addr).reason.clone();
    assert!(reason(failing.addr).contains("status 500"), "{snap:?}");
    assert!(reason(silent.addr).contains("no answer"), "{snap:?}");
    // The healthy one was checked and stays up: a second check has come, so the first one's
    // result is in.
    healthy.wait_for_heads(2).await;
    assert_eq!(
        switch.stats().server(healthy.addr).unwrap().state,
        State::Up
    );
    let check = &healthy.heads()[0];
    assert!(check.starts_with("GET /health HTTP/1.1\r\n"), "{check:?}");
    assert!(
        check.contains(&format!("\r\nHost: {}\r\n", healthy.addr)),
        "{check:?}"
    );
    let mut client = Client::connect(switch.local_addr("web").unwrap()).await;
    for i in 0..5 {
        let r = get_ok(&mut client, &format!("/{i}")).await;
        assert_eq!(r.served_by(), healthy.addr.to_string());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_first_check_decides_then_fall_failures_take_a_server_down_and_rise_passes_bring_it_up()
{
    let any: SocketAddr = "127.0.0.1:0".parse().unwrap();
    // Each check waits for the test's word: check N+1 arriving means check N's result is in
    // (one check at a time per server: connect, answer, record, interval, connect...).
    let first_fails = Tiny::start_with(any, Behaviour::Status(500), true).await;
    let steady = Tiny::start_with(any, Behaviour::Status(200), true).await;
    let rules = rules(
        "",
        &[server(first_fails.addr, ""), server(steady.addr, "")],
        // A check waits at the gate while the test works on the other server: the timeout
        // is far beyond any such wait, so no held check ever times out.
        "check = \"http\"\nhost = \"check.example\"\ninterval = \"20ms\"\ntimeout = \"60s\"\n\
         rise = 2\nfall = 3",
    );
    let switch = start_switch(&rules, &[]).await;
    let state = |addr| switch.stats().server(addr).unwrap().state;
    // The first check decides at once.
    first_fails.wait_for_heads(1).await;
    first_fails.release(1);
    first_fails.wait_for_heads(2).await;
    assert_eq!(
        state(first_fails.addr),
        State::Down,
        "one failed first check"
    );

    steady.wait_for_heads(1).await;
    steady.release(1);
    steady.wait_for_heads(2).await;
    assert_eq!(state(steady.addr), State::Up);
    // Then it takes `fall` failures in a row.
    steady.set(Behaviour::Status(503));
    for failures in 1..=3 {
        steady.release(1);
        steady.wait_for_heads(2 + failures).await;
        let expected = if failures < 3 { State::Up } else { State::Down };
        assert_eq!(
            state(steady.addr),
            expected,
            "after {failures} failed checks"
        );
    }
    assert!(switch
        .stats()
        .server(steady.addr)
        .unwrap()
        .reason
        .contains("status 503"));
    // And `rise` successes in a row to come back.
    steady.set(Behaviour::Status(200));
    for passes in 1..=2 {
        steady.release(1);
        steady.wait_for_heads(5 + passes).await;
        let expected = if passes < 2 { State::Down } else { State::Up };
        assert_eq!(state(steady.addr), expected, "after {passes} passed checks");
    }
    // A server that has never passed a check is up at its first pass (it may have started
    // after the switch); once it has passed, `rise` rules.
    first_fails.set(Behaviour::Status(200));
    first_fails.release(1);
    first_fails.wait_for_heads(3).await;
    assert_eq!(state(first_fails.addr), State::Up, "its first pass");
    first_fails.set(Behaviour::Status(500));
    for failures in 1..=3 {
        first_fails.release(1);
        first_fails.wait_for_heads(3 + failures).await;
    }
    assert_eq!(state(first_fails.addr), State::Down, "fall");
    // A failure between successes starts the count again.
    first_fails.set(Behaviour::Status(200));
    first_fails.release(1);
    first_fails.wait_for_heads(7).await;
    first_fails.set(Behaviour::Status(500));
    first_fails.release(1);
    first_fails.wait_for_heads(8).await;
    first_fails.set(Behaviour::Status(200));
    first_fails.release(1);
    first_fails.wait_for_heads(9).await;
    assert_eq!(state(first_fails.addr), State::Down, "pass, fail, pass");
    first_fails.release(1);
    first_fails.wait_for_heads(10).await;
    assert_eq!(state(first_fails.addr), State::Up, "two passes in a row");
    assert!(
        steady.heads()[0].contains("\r\nHost: check.example\r\n"),
        "{:?}",
        steady.heads()[0]
    );
    // Let the checks run free until the switch goes.
    first_fails.release(1000);
    steady.release(1000);
}

/// The statuses `expect` names pass and no others: a server answering a status the default
/// (`200-399`) rejects stays up, one answering the default's own 200 goes down. Each server's
/// first check decides at once; its second arriving means the first one's result is in.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expect_lets_exactly_its_statuses_pass_whatever_the_default_would_say() {
    let any: SocketAddr = "127.0.0.1:0".parse().unwrap();
    let teapot = Tiny::start(any, Behaviour::Status(418)).await;
    let range_end = Tiny::start(any, Behaviour::Status(503)).await;
    let plain_ok = Tiny::start(any, Behaviour::Status(200)).await;
    let past_range = Tiny::start(any, Behaviour::Status(504)).await;
    let rules = rules(
        "",
        &[
            server(teapot.addr, ""),
            server(range_end.addr, ""),
            server(plain_ok.addr, ""),
            server(past_range.addr, ""),
        ],
        "check = \"http\"\nexpect = \"418, 500-503\"\ninterval = \"50ms\"\ntimeout = \"10s\"\n\
         panic_threshold = 0",
    );
    let switch = start_switch(&rules, &[]).await;
    for tiny in [&teapot, &range_end, &plain_ok, &past_range] {
        tiny.wait_for_heads(2).await;
    }
    let snap = switch.stats();
    for (tiny, state) in [
        (&teapot, State::Up),
        (&range_end, State::Up),
        (&plain_ok, State::Down),
        (&past_range, State::Down),
    ] {
        let s = at(&snap, tiny.addr);
        assert_eq!(s.state, state, "{s:?}");
    }
    assert!(
        at(&snap, plain_ok.addr).reason.contains("status 200"),
        "{snap:?}"
    );
    assert!(
        at(&snap, past_range.addr).reason.contains("status 504"),
        "{snap:?}"
    );
    // Requests go to the servers that pass, and are relayed whatever their status.
    let mut client = Client::connect(switch.local_addr("web").unwrap()).await;
    for i in 0..8 {
        let r = client.get(&format!("/{i}")).await;
        let by = r.served_by();
        assert!(
            (r.status == 418 && by == teapot.addr.to_string())
                || (r.status == 503 && by == range_end.addr.to_string()),
            "{} from {by}",
            r.status
        );
    }
}

/// `fall` failures in a row take an up server down and `rise` successes bring it back, at
/// values other than the defaults (3 and 2): the server is still up after four failed
/// checks, down at the fifth, still down after three passes, up at the fourth; the counts of
/// consecutive results in the statistics follow. Each check waits for the test's word, and
/// check N+1 arriving means check N's result is in: no verdict depends on time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fall_and_rise_count_the_checks_they_are_set_to() {
    let any: SocketAddr = "127.0.0.1:0".parse().unwrap();
    let gated = Tiny::start_with(any, Behaviour::Status(200), true).await;
    let peer = Tiny::start(any, Behaviour::Status(200)).await;
    let rules = rules(
        "",
        &[server(gated.addr, ""), server(peer.addr, "")],
        // No held check may time out: the timeout is far beyond any wait of the test.
        "check = \"http\"\ninterval = \"20ms\"\ntimeout = \"60s\"\nrise = 4\nfall = 5\n\
         panic_threshold = 0",
    );
    let switch = start_switch(&rules, &[]).await;
    let checked = |addr| switch.stats().server(addr).unwrap().clone();
    gated.wait_for_heads(1).await;
    gated.release(1);
    gated.wait_for_heads(2).await;
    let s = checked(gated.addr);
    assert_eq!((s.state, s.check.successes), (State::Up, 1), "{s:?}");

    gated.set(Behaviour::Status(500));
    for failures in 1..=5u32 {
        gated.release(1);
        gated.wait_for_heads(2 + failures as usize).await;
        let s = checked(gated.addr);
        let expected = if failures < 5 { State::Up } else { State::Down };
        assert_eq!(s.state, expected, "after {failures} failed checks: {s:?}");
        assert_eq!(
            (s.check.failures, s.check.successes),
            (failures, 0),
            "after {failures} failed checks: {s:?}"
        );
    }
    assert!(checked(gated.addr).reason.contains("status 500"));

    gated.set(Behaviour::Status(200));
    for passes in 1..=4u32 {
        gated.release(1);
        gated.wait_for_heads(7 + passes as usize).await;
        let s = checked(gated.addr);
        let expected = if passes < 4 { State::Down } else { State::Up };
        assert_eq!(s.state, expected, "after {passes} passed checks: {s:?}");
        assert_eq!(
            (s.check.successes, s.check.failures),
            (passes, 0),
            "after {passes} passed checks: {s:?}"
        );
    }
    // Let the checks run free until the switch goes.
    gated.release(1000);
}

/// An http check waits for its answer up to `timeout`: set far above the default (1 s), a
/// check held 3 s by the server has failed by then under the default and is still running
/// under the setting, and passes when the server answers. Time is the property here; the
/// margins are seconds on both sides (1 s against 3 s, 3 s against 30 s).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_check_waits_for_its_answer_as_long_as_timeout_says() {
    let any: SocketAddr = "127.0.0.1:0".parse().unwrap();
    let slow = Tiny::start_with(any, Behaviour::Status(200), true).await;
    let rules = rules(
        "",
        &[server(slow.addr, "")],
        "check = \"http\"\ninterval = \"50ms\"\ntimeout = \"30s\"\npanic_threshold = 0",
    );
    let switch = start_switch(&rules, &[]).await;
    slow.wait_for_heads(1).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let s = switch.stats().server(slow.addr).unwrap().clone();
    assert_eq!(
        (s.state, &s.check.last),
        (State::Up, &None),
        "the first check, held 3 s, is still waiting: {s:?}"
    );
    slow.release(1);
    slow.wait_for_heads(2).await;
    let s = switch.stats().server(slow.addr).unwrap().clone();
    assert_eq!(s.state, State::Up, "{s:?}");
    assert!(matches!(s.check.last, Some((true, _, _))), "{s:?}");
    assert_eq!(
        slow.accepted(),
        2,
        "one connection per check, none given up: {s:?}"
    );
    slow.release(1000);
}

/// Checks come every `interval`: twenty checks of a server at 50 ms arrive within seconds,
/// where the default interval (2 s) would take some forty. Counted by the server, bounded
/// with seconds of margin both ways.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn checks_come_every_interval() {
    let any: SocketAddr = "127.0.0.1:0".parse().unwrap();
    let checked = Tiny::start(any, Behaviour::Status(200)).await;
    let rules = rules(
        "",
        &[server(checked.addr, "")],
        "check = \"http\"\ninterval = \"50ms\"\ntimeout = \"10s\"",
    );
    let switch = start_switch(&rules, &[]).await;
    let mut seen = checked.shared.heads_seen.subscribe();
    let twenty = tokio::time::timeout(Duration::from_secs(8), seen.wait_for(|&n| n >= 20)).await;
    assert!(
        matches!(twenty, Ok(Ok(_))),
        "{} checks in 8 s at a 50 ms interval",
        checked.heads().len()
    );
    assert!(checked
        .heads()
        .iter()
        .all(|h| h.starts_with("GET / HTTP/1.1\r\n")));
    assert_eq!(
        switch.stats().server(checked.addr).unwrap().state,
        State::Up
    );
}

/// The agent is asked every `agent_interval`: twenty times within seconds at 50 ms, where
/// the default (2 s) would take some forty. Bounded with seconds of margin both ways.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_agent_is_asked_every_agent_interval() {
    let agent = Agent::start("up").await;
    let controlled = backend().await;
    let rules = rules(
        "",
        &[server(controlled.addr, "")],
        &format!("agent_port = {}\nagent_interval = \"50ms\"", agent.port),
    );
    let switch = start_switch(&rules, &[]).await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(8);
    while agent.asked.load(Ordering::SeqCst) < 20 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the agent was asked {} times in 8 s at a 50 ms interval",
            agent.asked.load(Ordering::SeqCst)
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(
        switch.stats().server(controlled.addr).unwrap().state,
        State::Up
    );
}

// ---------------------------------------------------------------- backup servers

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backup_serves_only_while_the_primary_is_down() {
    let reserved = reserved_address();
    let primary_addr = reserved.addr;
    let primary = Tiny::start(primary_addr, Behaviour::Status(200)).await;
    let backup = backend().await;
    let rules = rules(
        "",
        &[
            server(primary_addr, ""),
            server(backup.addr, "backup = true"),
        ],
        "check = \"tcp\"\ninterval = \"100ms\"\nrise = 1",
    );
    let switch = start_switch(&rules, &[]).await;
    let mut client = Client::connect(switch.local_addr("web").unwrap()).await;
    for i in 0..10 {
        let r = get_ok(&mut client, &format!("/{i}")).await;
        assert_eq!(r.served_by(), primary_addr.to_string());
    }
    let snap = switch.stats();
    let b = at(&snap, backup.addr);
    assert!(b.backup && !b.offered && b.requests == 0, "{b:?}");
    assert!(at(&snap, primary_addr).offered);

    primary.stop().await;
    let snap = wait_until(&switch, "the primary down", |s| {
        at(s, primary_addr).state == State::Down
    })
    .await;
    assert!(at(&snap, backup.addr).offered, "{snap:?}");
    for i in 0..10 {
        let r = get_ok(&mut client, &format!("/down/{i}")).await;
        assert_eq!(r.served_by(), backup.addr.to_string());
    }

    let primary = Tiny::start(primary_addr, Behaviour::Status(200)).await;
    let snap = wait_until(&switch, "the primary up", |s| {
        at(s, primary_addr).state == State::Up
    })
    .await;
    assert!(!at(&snap, backup.addr).offered, "{snap:?}");
    let before = backup.requests();
    for i in 0..10 {
        let r = get_ok(&mut client, &format!("/back/{i}")).await;
        assert_eq!(r.served_by(), primary_addr.to_string());
    }
    assert_eq!(backup.requests(), before);
    assert_eq!(primary.heads().len(), 10);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_get_refused_by_the_only_primary_goes_to_the_backup_before_the_primary_is_down() {
    let backup = backend().await;
    let dead = dead_address().await;
    let rules = rules(
        "",
        &[server(dead, ""), server(backup.addr, "backup = true")],
        "check = \"none\"\nmax_fails = 3\nfail_timeout = \"1h\"",
    );
    let switch = start_switch(&rules, &[]).await;
    let mut client = Client::connect(switch.local_addr("web").unwrap()).await;
    let r = get_ok(&mut client, "/first").await;
    assert_eq!(r.served_by(), backup.addr.to_string());
    let snap = switch.stats();
    let (p, b) = (at(&snap, dead), at(&snap, backup.addr));
    assert_eq!((p.state, p.connect_errors), (State::Up, 1), "{p:?}");
    assert!(!b.offered, "the backup was not offered yet: {b:?}");
    for i in 0..2 {
        get_ok(&mut client, &format!("/{i}")).await;
    }
    let snap = switch.stats();
    assert_eq!(at(&snap, dead).state, State::Down);
    assert!(at(&snap, backup.addr).offered);
    assert_eq!(backup.requests(), 3);
}

// ---------------------------------------------------------------- queue

/// Sends `GET target` on a new connection without reading the answer.
async fn send_get(switch: &tcpvs::Switch, target: &str) -> Client {
    let mut client = Client::connect(switch.local_addr("web").unwrap()).await;
    client
        .send(format!("GET {target} HTTP/1.1\r\nHost: t\r\n\r\n").as_bytes())
        .await;
    client
}

/// Waits until the virtual service has counted `n` requests.
async fn requests_counted(switch: &tcpvs::Switch, n: u64) {
    wait_until(switch, "requests counted", |s| s.services[0].requests == n).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_finding_every_server_full_wait_and_are_served_in_arrival_order() {
    let server_ = backend().await;
    let rules = rules(
        "queue_timeout = \"10s\"",
        &[server(server_.addr, "max_conns = 1")],
        "",
    );
    let switch = start_switch(&rules, &[]).await;
    let mut first = send_get(&switch, "/hold?n=1").await;
    server_.wait_for_requests(1).await;
    // A request is counted and queued in one poll of its session (no await in between), so
    // once it is counted the next one queues behind it.
    let mut second = send_get(&switch, "/hold?n=2").await;
    requests_counted(&switch, 2).await;
    let mut third = send_get(&switch, "/hold?n=3").await;
    requests_counted(&switch, 3).await;
    assert_eq!(server_.requests(), 1, "the others wait in the switch");

    server_.release(1);
    assert_eq!(first.response(false).await.status, 200);
    server_.wait_for_requests(2).await;
    server_.release(1);
    assert_eq!(second.response(false).await.status, 200);
    server_.wait_for_requests(3).await;
    server_.release(1);
    assert_eq!(third.response(false).await.status, 200);
    let heads = server_.record.heads.lock().unwrap().clone();
    let order: Vec<&str> = heads
        .iter()
        .map(|h| h.split_whitespace().nth(1).unwrap())
        .collect();
    assert_eq!(order, ["/hold?n=1", "/hold?n=2", "/hold?n=3"]);
    assert_eq!(switch.stats().services[0].local_errors, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_waiting_past_queue_timeout_gets_503() {
    let server_ = backend().await;
    let rules = rules(
        "queue_timeout = \"200ms\"",
        &[server(server_.addr, "max_conns = 1")],
        "",
    );
    let switch = start_switch(&rules, &[]).await;
    let mut first = send_get(&switch, "/hold").await;
    server_.wait_for_requests(1).await;
    let mut second = send_get(&switch, "/second").await;
    // Guarded by PATIENCE: the answer comes when queue_timeout runs out.
    let r = second.response(false).await;
    assert_eq!(r.status, 503, "{}", r.text());
    assert!(r.text().contains("queue timeout"), "{}", r.text());
    assert_eq!(server_.requests(), 1);
    server_.release(1);
    assert_eq!(first.response(false).await.status, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_primary_makes_requests_queue_rather_than_spill_onto_the_backup() {
    let primary = backend().await;
    let backup = backend().await;
    let rules = rules(
        "queue_timeout = \"10s\"",
        &[
            server(primary.addr, "max_conns = 1"),
            server(backup.addr, "backup = true"),
        ],
        "",
    );
    let switch = start_switch(&rules, &[]).await;
    let mut held = send_get(&switch, "/hold").await;
    primary.wait_for_requests(1).await;
    // The primary is up, only full: the backup is for when no primary is usable.
    let mut second = send_get(&switch, "/second").await;
    requests_counted(&switch, 2).await;
    primary.release(1);
    assert_eq!(held.response(false).await.status, 200);
    let r = second.response(false).await;
    assert_eq!(r.status, 200);
    assert_eq!(
        r.served_by(),
        primary.addr.to_string(),
        "the backup took a request while the primary was up"
    );
    assert_eq!(backup.requests(), 0);
}

// ---------------------------------------------------------------- slow start

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_coming_back_starts_with_a_small_weight_while_its_peer_keeps_its_own() {
    let peer = backend().await;
    let reserved = reserved_address();
    let dead = reserved.addr;
    let rules = rules(
        "slow_start = \"1h\"",
        &[
            server(dead, "weight = 100"),
            server(peer.addr, "weight = 100"),
        ],
        "check = \"tcp\"\ninterval = \"100ms\"\nrise = 1",
    );
    let switch = start_switch(&rules, &[]).await;
    wait_until(&switch, "the dead server down", |s| {
        at(s, dead).state == State::Down
    })
    .await;
    let _revived = Tiny::start(dead, Behaviour::Status(200)).await;
    let snap = wait_until(&switch, "the revived server up", |s| {
        at(s, dead).state == State::Up
    })
    .await;
    // A tenth of the weight takes six minutes of a one-hour ramp.
    let s = at(&snap, dead);
    assert!((1..=10).contains(&s.weight) && s.offered, "{s:?}");
    assert_eq!(at(&snap, peer.addr).weight, 100);
}

// ---------------------------------------------------------------- agent

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_agent_drains_reweights_and_takes_down_its_server() {
    let agent = Agent::start("ready").await;
    // The agent is asked on each server's own address: the controlled server is on 127.0.0.1
    // with the agent, its peer on 127.0.0.2, where no agent answers (which changes nothing).
    let controlled = backend().await;
    let peer = Tiny::start("127.0.0.2:0".parse().unwrap(), Behaviour::Status(200)).await;
    let rules = rules(
        "",
        &[
            server(controlled.addr, "weight = 100"),
            server(peer.addr, "weight = 100"),
        ],
        &format!("agent_port = {}\nagent_interval = \"50ms\"", agent.port),
    );
    let switch = start_switch(&rules, &[]).await;
    let mut client = Client::connect(switch.local_addr("web").unwrap()).await;

    agent.say("drain");
    let snap = wait_until(&switch, "the server drained", |s| {
        at(s, controlled.addr).state == State::Drain
    })
    .await;
    assert!(!at(&snap, controlled.addr).offered);
    assert_eq!(at(&snap, peer.addr).state, State::Up);
    let before = controlled.requests();
    for i in 0..10 {
        let r = get_ok(&mut client, &format!("/{i}")).await;
        assert_eq!(r.served_by(), peer.addr.to_string());
    }
    assert_eq!(
        controlled.requests(),
        before,
        "no new request while draining"
    );

    agent.say("ready 50%");
    let snap = wait_until(&switch, "the server ready at half weight", |s| {
        at(s, controlled.addr).state == State::Up && at(s, controlled.addr).weight == 50
    })
    .await;
    assert!(at(&snap, controlled.addr).offered);
    assert_eq!(at(&snap, peer.addr).weight, 100);
    get_until(
        &switch,
        &mut client,
        60,
        "a request at the ready server",
        |_| controlled.requests() > before,
    )
    .await;

    agent.say("down");
    let snap = wait_until(&switch, "the server down", |s| {
        at(s, controlled.addr).state == State::Down
    })
    .await;
    assert!(!at(&snap, controlled.addr).offered);

    agent.say("up maint");
    wait_until(&switch, "the server in maintenance", |s| {
        at(s, controlled.addr).state == State::Maint && !at(s, controlled.addr).offered
    })
    .await;
    agent.say("ready 100%");
    wait_until(&switch, "the server back at full weight", |s| {
        let s = at(s, controlled.addr);
        s.state == State::Up && s.weight == 100 && s.offered
    })
    .await;
    assert!(agent.asked.load(Ordering::SeqCst) >= 5);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_the_agent_drains_keeps_its_persistent_clients() {
    let agent = Agent::start("ready").await;
    let controlled = backend().await;
    let peer = Tiny::start("127.0.0.2:0".parse().unwrap(), Behaviour::Status(200)).await;
    let rules = rules(
        "scheduler = \"cookie\"\nname = \"SRV\"\nsecret = \"s\"",
        &[server(controlled.addr, ""), server(peer.addr, "")],
        &format!("agent_port = {}\nagent_interval = \"50ms\"", agent.port),
    );
    let switch = start_switch(&rules, &[]).await;
    let addr = switch.local_addr("web").unwrap();
    // A client placed on the controlled server gets its cookie.
    let mut cookie = None;
    for i in 0..20 {
        let mut client = Client::connect(addr).await;
        let r = get_ok(&mut client, &format!("/new/{i}")).await;
        if r.served_by() == controlled.addr.to_string() {
            let set = r.header("set-cookie").expect("a new client gets a cookie");
            cookie = Some(set.split(';').next().unwrap().to_string());
            break;
        }
    }
    let cookie = cookie.expect("a client placed on the controlled server");

    agent.say("drain");
    wait_until(&switch, "the server drained", |s| {
        at(s, controlled.addr).state == State::Drain
    })
    .await;
    let mut client = Client::connect(addr).await;
    let r = get_ok(&mut client, "/newcomer").await;
    assert_eq!(r.served_by(), peer.addr.to_string(), "no new client");
    client
        .send(format!("GET /persistent HTTP/1.1\r\nHost: t\r\nCookie: {cookie}\r\n\r\n").as_bytes())
        .await;
    let r = client.response(false).await;
    assert_eq!(
        r.served_by(),
        controlled.addr.to_string(),
        "a client with the drained server's cookie stays there (README: drain keeps its \
         persistent clients)"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_state_the_agent_set_gives_the_agent_as_its_reason() {
    let agent = Agent::start("ready").await;
    let controlled = backend().await;
    let rules = rules(
        "",
        &[server(controlled.addr, "")],
        &format!("agent_port = {}\nagent_interval = \"50ms\"", agent.port),
    );
    let switch = start_switch(&rules, &[]).await;
    for (word, state) in [("drain", State::Drain), ("ready down", State::Down)] {
        agent.say(word);
        let snap = wait_until(&switch, "the agent's state", |s| {
            at(s, controlled.addr).state == state
        })
        .await;
        let s = at(&snap, controlled.addr);
        assert!(
            s.reason.contains("agent") && s.reason.contains(word.split(' ').next_back().unwrap()),
            "the reason for {state} after the agent said {word:?} is {:?}",
            s.reason
        );
    }
}

// ---------------------------------------------------------------- the log of the binary

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_server_behind_200_requests_is_logged_down_once_and_warned_about_a_few_times() {
    let live = backend().await;
    let dead = dead_address().await;
    let scratch = Scratch::new("log");
    let file = scratch.file(
        "rules.toml",
        &rules(
            "",
            &[server(dead, ""), server(live.addr, "")],
            "check = \"none\"\nmax_fails = 3\nfail_timeout = \"1h\"",
        )
        .replace("access_log = false", "access_log = false\nworkers = 2"),
    );
    let (switch, addr) = tokio::task::spawn_blocking(move || {
        let switch = Process::start(&["run".as_ref(), "-c".as_ref(), file.as_os_str()]);
        let (addr, _) = switch.address_after("listening on ");
        (switch, addr)
    })
    .await
    .unwrap();
    let mut clients = Vec::new();
    for c in 0..4 {
        clients.push(tokio::spawn(async move {
            let mut client = Client::connect(addr).await;
            for i in 0..50 {
                let r = client.get(&format!("/{c}/{i}")).await;
                assert_eq!(r.status, 200, "request {c}/{i}: {}", r.text());
            }
        }));
    }
    join_all(clients).await;
    assert_eq!(live.requests(), 200);

    // The whole log: SIGTERM, then every line until the process closes its stderr.
    let (lines, status) = tokio::task::spawn_blocking(move || {
        let mut switch = switch;
        let pid = rustix::process::Pid::from_raw(switch.id() as i32).unwrap();
        rustix::process::kill_process(pid, rustix::process::Signal::TERM).unwrap();
        let mut lines = Vec::new();
        loop {
            match switch.log.recv_timeout(Duration::from_secs(20)) {
                Ok(line) => lines.push(line),
                Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => break,
                Err(e) => panic!("tcpvs did not end its log ({e}): {lines:#?}"),
            }
        }
        (lines, switch.terminate())
    })
    .await
    .unwrap();
    assert!(status.success(), "{status:?}: {lines:#?}");
    let about_dead: Vec<&String> = lines
        .iter()
        .filter(|l| l.contains(&format!("server={dead}")))
        .collect();
    let transitions = about_dead
        .iter()
        .filter(|l| l.contains("server up -> down: "))
        .count();
    assert_eq!(transitions, 1, "{about_dead:#?}");
    // The three failed exchanges are each warned about or counted in the next warning, at
    // most one warning a second. How many warnings that makes depends on how the three fell
    // in time (a loaded machine may spread them), so the count is checked against what was
    // accounted for, and the rate against the times the switch itself wrote on the lines.
    let failure_warnings: Vec<&&String> = about_dead
        .iter()
        .filter(|l| l.contains(" WARN ") && !l.contains("server up -> down: "))
        .collect();
    let held: u64 = failure_warnings
        .iter()
        .filter_map(|l| {
            let (_, rest) = l.split_once(" (")?;
            rest.split_once(" more failures since the last warning)")?
                .0
                .parse::<u64>()
                .ok()
        })
        .sum();
    let warned = failure_warnings.len() as u64;
    assert!(
        warned >= 1,
        "the first failure is warned about: {about_dead:#?}"
    );
    assert!(
        warned + held <= 3,
        "three failed exchanges, each said once at most: {about_dead:#?}"
    );
    // A second apart on the switch's coarse clock (20 ms ticks, one per worker): far more
    // than half a second apart on the wall clock, whatever the load.
    let times: Vec<f64> = failure_warnings.iter().map(|l| log_seconds(l)).collect();
    for pair in times.windows(2) {
        let gap = (pair[1] - pair[0]).rem_euclid(86_400.0);
        assert!(
            gap >= 0.5,
            "two warnings {gap:.3} s apart: {failure_warnings:#?}"
        );
    }
    assert!(
        !lines
            .iter()
            .any(|l| l.contains(&format!("server={}", live.addr))),
        "{lines:#?}"
    );
}

/// The time of day, in seconds, that the log line begins with (`2026-12-01T10:00:00.123456Z`).
fn log_seconds(line: &str) -> f64 {
    let stamp = line.split_whitespace().next().unwrap_or("");
    let time = stamp
        .split_once('T')
        .map(|(_, t)| t.trim_end_matches('Z'))
        .unwrap_or_else(|| panic!("no timestamp at the start of {line:?}"));
    let parts: Vec<f64> = time
        .split(':')
        .map(|p| {
            p.parse()
                .unwrap_or_else(|_| panic!("bad timestamp in {line:?}"))
        })
        .collect();
    assert_eq!(parts.len(), 3, "bad timestamp in {line:?}");
    parts[0] * 3600.0 + parts[1] * 60.0 + parts[2]
}

// ---------------------------------------------------------------- rule-file errors

/// `tcpvs check FILE` on `text`: exit code, stderr and the file's path.
fn check(scratch: &Scratch, name: &str, text: &str) -> (Option<i32>, String, String) {
    let path = scratch.file(name, text);
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_tcpvs"))
        .arg("check")
        .arg(&path)
        .output()
        .unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
        path.display().to_string(),
    )
}

const HEALTH_RULES: &str = r#"[virtual.web]
listen = "127.0.0.1:18666"
default_pool = "p"

[pool.p]
queue_timeout = "1s"
servers = [{ addr = "127.0.0.1:9001" }, { addr = "127.0.0.1:9002", backup = true }]

[pool.p.health]
check = "http"
expect = "200-299"
rise = 2
"#;

#[test]
fn wrong_health_values_are_each_reported_with_file_line_and_column() {
    let scratch = Scratch::new("check");
    let (code, stderr, _) = check(&scratch, "valid.toml", HEALTH_RULES);
    assert_eq!(code, Some(0), "{stderr}");

    let broken = HEALTH_RULES
        .replacen("\"1s\"", "\"soon\"", 1)
        .replacen("\"http\"", "\"ping\"", 1)
        .replacen("\"200-299\"", "\"2xx\"", 1)
        .replacen("rise = 2", "rise = 0", 1);
    let (code, stderr, file) = check(&scratch, "values.toml", &broken);
    assert_eq!(code, Some(1), "{stderr}");
    let lines: Vec<&str> = stderr.lines().collect();
    // Each error points at the value: (text before it, the value, words of the message).
    let expected = [
        ("queue_timeout = ", "\"soon\"", "invalid duration"),
        ("check = ", "\"ping\"", "unknown check"),
        ("expect = ", "\"2xx\"", "invalid expect"),
        ("rise = ", "0", "rise = 0 is out of range"),
    ];
    assert_eq!(lines.len(), expected.len(), "every error at once: {stderr}");
    for (line, (key, value, words)) in lines.iter().zip(expected) {
        let (l, c) = position_of(&broken, &format!("{key}{value}"));
        let c = c + key.len();
        assert!(
            line.starts_with(&format!("{file}:{l}:{c}: ")) && line.contains(words),
            "expected {file}:{l}:{c}: ...{words}..., got {line:?}"
        );
    }

    let unknown = HEALTH_RULES.replacen("rise = 2", "rise = 2\nintervall = \"1s\"", 1);
    let (code, stderr, file) = check(&scratch, "unknown.toml", &unknown);
    assert_eq!(code, Some(1), "{stderr}");
    let (l, c) = position_of(&unknown, "intervall");
    let first = stderr.lines().next().unwrap_or("");
    assert!(
        first.starts_with(&format!("{file}:{l}:{c}: ")) && first.contains("unknown field"),
        "expected {file}:{l}:{c}: unknown field..., got {first:?}"
    );
}
