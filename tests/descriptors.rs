//! Open-file descriptors (issue 13): the soft limit raised at start to what `max_clients`
//! needs, `max_clients` lowered (with one warning) when the hard limit is too small, accept
//! backing off when descriptors run out anyway (serving the connections already open, stopping
//! promptly, logging at most once a second), and a server connection that cannot be opened for
//! lack of descriptors answered 503 without counting against the server.
//!
//! The in-process test fills this test process's own descriptor table, so the tests of this
//! file run one at a time (`SERIAL`); the others start the binary under `ulimit`.

mod common;

use common::*;
use std::net::SocketAddr;
use std::time::Duration;

/// One test at a time: the in-process one leaves no descriptor free for a while.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

const RULES: &str = r#"
[switch]
workers = 1
{switch}
shutdown_timeout = "2s"
access_log = false

[virtual.web]
listen = "127.0.0.1:0"
default_pool = "p"

[pool.p]
servers = [{ addr = "{server}" }]
"#;

fn rules(server: SocketAddr, switch: &str) -> String {
    RULES
        .replace("{server}", &server.to_string())
        .replace("{switch}", switch)
}

/// The soft and hard "Max open files" of a process, from /proc.
fn open_file_limits(pid: u32) -> (u64, u64) {
    let limits = std::fs::read_to_string(format!("/proc/{pid}/limits")).unwrap();
    let line = limits
        .lines()
        .find(|l| l.starts_with("Max open files"))
        .expect("a Max open files line");
    let numbers: Vec<u64> = line
        .split_whitespace()
        .filter_map(|w| w.parse().ok())
        .collect();
    (numbers[0], numbers[1])
}

/// The number after `marker` in `line`.
fn number_after(line: &str, marker: &str) -> u64 {
    line.split(marker)
        .nth(1)
        .and_then(|rest| {
            rest.split(|c: char| !c.is_ascii_digit())
                .find(|w| !w.is_empty())
        })
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no number after {marker:?} in {line:?}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_short_soft_limit_is_raised_to_what_max_clients_needs() {
    let _serial = SERIAL.lock().await;
    let server = backend().await;
    let scratch = Scratch::new("raise");
    let file = scratch.file("rules.toml", &rules(server.addr, "max_clients = 1000"));
    let process = Process::start_under(
        "-S -n 256",
        &["run".as_ref(), "-c".as_ref(), file.as_os_str()],
    );
    let (process, line, _) = line_with(process, "open-file limit raised from 256 to").await;
    let need = number_after(&line, "needs ");
    let raised = number_after(&line, " to ");
    let (soft, hard) = open_file_limits(process.id());
    // Raised exactly to the need (or to the hard limit if that is lower), not beyond.
    assert_eq!(raised, need.min(hard), "{line}");
    assert_eq!(soft, raised);
    assert!(
        need > 2000,
        "two descriptors per client and a reserve: {line}"
    );
    let (process, _, _) = line_with(process, "listening on http://").await;
    let (log, status) = stop(process).await;
    assert!(status.success());
    assert!(
        !log.iter().any(|l| l.contains("max_clients lowered")),
        "{log:#?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hard_limit_too_small_lowers_max_clients_and_every_client_is_answered() {
    let _serial = SERIAL.lock().await;
    let server = backend().await;
    let scratch = Scratch::new("lower");
    let file = scratch.file("rules.toml", &rules(server.addr, "max_clients = 5000"));
    let process =
        Process::start_under("-n 200", &["run".as_ref(), "-c".as_ref(), file.as_os_str()]);
    let (process, warning, _) = line_with(process, "max_clients lowered to").await;
    assert!(warning.contains("WARN"), "{warning}");
    assert!(
        warning.contains("max_clients = 5000 needs") && warning.contains("the limit is 200"),
        "the numbers are named: {warning}"
    );
    let lowered = number_after(&warning, "lowered to ") as usize;
    assert!((1..100).contains(&lowered), "{warning}");
    let (addr, _) = process.address_after("listening on ");

    // Four times as many clients as may be served at once, all at the same moment, each with
    // one request. Every one gets a complete answer: 200, or 503 beyond max_clients. Some
    // connections wait in the kernel's queue while the switch has no descriptor to take them.
    // Each from an address of its own, as a crowd comes: one address is kept out of the last
    // quarter of max_clients once it holds its share (capacity/share.rs).
    let clients = 4 * lowered + 100;
    let burst = std::time::Instant::now();
    let mut tasks = Vec::new();
    for i in 0..clients {
        let source = std::net::Ipv4Addr::new(127, 1, (i / 250) as u8, (i % 250 + 1) as u8);
        tasks.push(tokio::spawn(async move {
            let mut client = Client::connect_from(source.into(), addr).await;
            client.send(b"GET / HTTP/1.1\r\nHost: t\r\n\r\n").await;
            client.response(false).await.status
        }));
    }
    let mut served = 0;
    let mut busy = 0;
    for task in tasks {
        match task.await.unwrap() {
            200 => served += 1,
            503 => busy += 1,
            other => panic!("status {other}"),
        }
    }
    let burst_seconds = burst.elapsed().as_secs();
    assert_eq!(served + busy, clients);
    assert!(served >= lowered, "{served} served, {busy} refused");

    let (log, status) = stop(process).await;
    assert!(status.success(), "{log:#?}");
    // Said once at start, and never again.
    assert!(!log.iter().any(|l| l.contains("max_clients lowered")));
    // Out of descriptors: at most one line a second (and one for the start of the burst).
    let accept_lines = log.iter().filter(|l| l.contains("accept failed")).count() as u64;
    assert!(
        accept_lines <= burst_seconds + 2,
        "{accept_lines} accept warnings in {burst_seconds} s"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn out_of_descriptors_a_stopping_switch_closes_its_listener_at_once() {
    let _serial = SERIAL.lock().await;
    let server = backend().await;
    let scratch = Scratch::new("stop");
    let file = scratch
        .file(
            "rules.toml",
            &rules(server.addr, "max_clients = 5000\nheader_timeout = \"60s\""),
        )
        .to_path_buf();
    // A long grace, kept by a request in flight: the process is still running while the
    // verdict is read.
    let text = std::fs::read_to_string(&file)
        .unwrap()
        .replace("\"2s\"", "\"60s\"");
    std::fs::write(&file, text).unwrap();
    let process =
        Process::start_under("-n 150", &["run".as_ref(), "-c".as_ref(), file.as_os_str()]);
    let (addr, _) = process.address_after("listening on ");
    let mut held = Client::connect(addr).await;
    held.send(b"GET /hold HTTP/1.1\r\nHost: t\r\n\r\n").await;
    server.wait_for_requests(1).await;
    // Silent connections until every descriptor is taken and accept fails.
    let mut silent = Vec::new();
    for _ in 0..200 {
        silent.push(tokio::net::TcpStream::connect(addr).await.unwrap());
    }
    let (process, _, _) = line_with(process, "accept failed").await;
    // Complete requests that wait in the kernel's queue.
    let mut queued = Vec::new();
    for _ in 0..10 {
        let mut client = Client::connect(addr).await;
        client.send(b"GET / HTTP/1.1\r\nHost: t\r\n\r\n").await;
        queued.push(client);
    }
    signal(&process, rustix::process::Signal::TERM);
    let (process, _, _) = line_with(process, "stopping").await;
    // The listener closed at the stop, so the queued connections are reset, not taken in
    // and served during the grace period as the descriptors of the let-go silent clients
    // come back (a listener failing every accept used to hide the stop from its loop).
    for mut client in queued {
        let mut answer = Vec::new();
        let _ = tokio::time::timeout(
            LOG_PATIENCE,
            tokio::io::AsyncReadExt::read_to_end(&mut client.stream, &mut answer),
        )
        .await
        .expect("closed or reset");
        assert!(answer.is_empty(), "{}", String::from_utf8_lossy(&answer));
    }
    // The request in flight is finished, and then the process ends.
    server.release(1);
    assert_eq!(held.response(false).await.status, 200);
    drop(silent);
    let (log, status) = log_to_end(process).await;
    assert!(status.success(), "{log:#?}");
}

/// Opens /dev/null until the process is out of descriptors; the files are closed when dropped.
fn use_every_descriptor() -> Vec<std::fs::File> {
    let mut files = Vec::new();
    loop {
        match std::fs::File::open("/dev/null") {
            Ok(f) => files.push(f),
            Err(e) if e.raw_os_error() == Some(libc_emfile()) => return files,
            Err(e) => panic!("{e}"),
        }
    }
}

fn libc_emfile() -> i32 {
    rustix::io::Errno::MFILE.raw_os_error()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn out_of_descriptors_for_a_server_connection_is_a_503_that_does_not_blame_the_server() {
    let _serial = SERIAL.lock().await;
    let server = backend().await;
    // Passive detection at its default: three failed exchanges would take the server down.
    let switch = start_switch(&rules(server.addr, ""), &[]).await;
    let addr = switch.local_addr("web").unwrap();
    // The switch raised the soft limit for its max_clients; a small one makes filling quick.
    let limit = rustix::process::getrlimit(rustix::process::Resource::Nofile);
    rustix::process::setrlimit(
        rustix::process::Resource::Nofile,
        rustix::process::Rlimit {
            current: Some(1024),
            maximum: limit.maximum,
        },
    )
    .unwrap();

    let mut client = Client::connect(addr).await;
    wait_until(&switch, "the client accepted", |s| s.clients == 1).await;
    let mut fillers = use_every_descriptor();
    for round in 0..4 {
        client.send(b"GET /a HTTP/1.1\r\nHost: t\r\n\r\n").await;
        let r = client.response(false).await;
        assert_eq!(r.status, 503, "round {round}: {}", r.text());
    }
    let snap = switch.stats();
    let s = &snap.servers[0];
    assert_eq!(s.state, tcpvs::state::status::State::Up, "{s:?}");
    assert_eq!(
        (s.connect_errors, s.response_errors, s.connections),
        (0, 0, 0),
        "{s:?}"
    );

    // Descriptors back: the same client is served, and its server connection is kept idle.
    fillers.clear();
    client.send(b"GET /b HTTP/1.1\r\nHost: t\r\n\r\n").await;
    assert_eq!(client.response(false).await.status, 200);
    wait_until(&switch, "the server connection idle", |s| {
        s.servers[0].idle == 1
    })
    .await;

    // Out of descriptors again, one left for a new client of ours: the switch cannot accept
    // it (it waits in the kernel's queue), but goes on serving the open connection, over the
    // idle server connection.
    let mut fillers = use_every_descriptor();
    fillers.pop();
    let mut queued = Client::connect(addr).await;
    queued.send(b"GET /c HTTP/1.1\r\nHost: t\r\n\r\n").await;
    client.send(b"GET /d HTTP/1.1\r\nHost: t\r\n\r\n").await;
    assert_eq!(client.response(false).await.status, 200);
    assert_eq!(
        switch.stats().clients,
        1,
        "the new connection is still queued"
    );

    // Descriptors back: the queued connection is accepted and served.
    fillers.clear();
    assert_eq!(queued.response(false).await.status, 200);
    let s = &switch.stats().servers[0];
    assert_eq!(s.state, tcpvs::state::status::State::Up);
    assert_eq!((s.connect_errors, s.response_errors), (0, 0), "{s:?}");
    drop(queued);
    drop(client);
    switch.shutdown(Duration::from_secs(1)).await;
    rustix::process::setrlimit(rustix::process::Resource::Nofile, limit).unwrap();
}
