//! The shape of a running `tcpvs run` process: how many threads its `workers` setting gives it.
//! One worker is the main thread itself, as HAProxy's `nbthread 1` is one thread: the kernel
//! then takes single-threaded shortcuts, such as looking file descriptors up without reference
//! counts on every socket call; measured 0.4-1 µs less CPU per request (BENCHMARKS.md).
//!
//! Then what only the real process shows, the binary run as an operator runs it: `workers = 0`
//! (one per CPU), several workers on one port (SO_REUSEPORT), the stop on SIGTERM within
//! `shutdown_timeout`, the access log on stderr, the pipes `splice` takes (by
//! `splice_threshold`), and errors at startup. Verdicts rest on events (log lines, EOFs, the
//! backend holding a request, the end of the log when the process exits), never on elapsed
//! time; timeouts only guard against hangs.

mod common;

use common::*;
use std::io::Write;
use std::net::SocketAddr;
use std::time::Duration;

/// Starts `tcpvs run` on a rule file with `workers` and one pool, and returns the process and
/// the address it listens on (read from its log).
fn run_switch(dir: &std::path::Path, workers: usize, server: SocketAddr) -> (Process, SocketAddr) {
    let rules = dir.join(format!("workers{workers}.toml"));
    let mut file = std::fs::File::create(&rules).unwrap();
    write!(
        file,
        "[switch]\nworkers = {workers}\n\n[virtual.web]\nlisten = \"127.0.0.1:0\"\n\
         default_pool = \"web\"\n\n[pool.web]\nservers = [{{ addr = \"{server}\" }}]\n"
    )
    .unwrap();
    let switch = Process::start(&["run".as_ref(), "-c".as_ref(), rules.as_os_str()]);
    let (addr, _) = switch.address_after("listening on ");
    (switch, addr)
}

/// The names of the process's threads, from /proc.
fn thread_names(pid: u32) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(format!("/proc/{pid}/task"))
        .unwrap()
        .filter_map(Result::ok)
        .filter_map(|task| std::fs::read_to_string(task.path().join("comm")).ok())
        .map(|name| name.trim().to_string())
        .collect();
    names.sort();
    names
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_worker_is_the_main_thread_and_more_get_threads_of_their_own() {
    let server = backend().await;
    let dir = std::env::temp_dir().join(format!("tcpvs-process-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for workers in [1, 2] {
        let (switch, addr) = run_switch(&dir, workers, server.addr);
        // It serves before and after the count (the threads are not still starting).
        let mut client = Client::connect(addr).await;
        assert_eq!(client.get("/before").await.status, 200);
        let pid = switch.id();
        let names = tokio::task::spawn_blocking(move || thread_names(pid))
            .await
            .unwrap();
        assert_eq!(client.get("/after").await.status, 200);
        let expected: Vec<String> = match workers {
            1 => vec!["tcpvs".into()],
            _ => vec![
                "tcpvs".into(),
                "tcpvs-worker-0".into(),
                "tcpvs-worker-1".into(),
            ],
        };
        assert_eq!(names, expected, "workers = {workers}");
        drop(client);
        let status = tokio::task::spawn_blocking(move || {
            let mut switch = switch;
            switch.terminate()
        })
        .await
        .unwrap();
        assert!(status.success(), "workers = {workers}: {status:?}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

// ---------------------------------------------------------------- helpers for the tests below

/// A rule file: the `[switch]` keys given, one virtual service `web` on a free port of
/// 127.0.0.1 whose default pool `web` is the one server.
fn rules(switch_keys: &str, server: SocketAddr) -> String {
    format!(
        "[switch]\n{switch_keys}\n\n[virtual.web]\nlisten = \"127.0.0.1:0\"\n\
         default_pool = \"web\"\n\n[pool.web]\nservers = [{{ addr = \"{server}\" }}]\n"
    )
}

/// Starts `tcpvs run -c RULES` and waits for its `listening on` line: the process, the address
/// it serves and the log lines so far.
async fn start(rules: &std::path::Path) -> (Process, SocketAddr, Vec<String>) {
    let rules = rules.to_owned();
    tokio::task::spawn_blocking(move || {
        let switch = Process::start(&["run".as_ref(), "-c".as_ref(), rules.as_os_str()]);
        let (addr, seen) = switch.address_after("listening on ");
        (switch, addr, seen)
    })
    .await
    .unwrap()
}

/// Waits until connecting to `addr` is refused or reset (the listeners are closed). A connection that
/// still succeeds is dropped unused and the next try follows shortly; only a listener still
/// open after [`PATIENCE`] fails the test.
async fn wait_until_refused(addr: SocketAddr) {
    let deadline = tokio::time::Instant::now() + PATIENCE;
    loop {
        match tokio::net::TcpStream::connect(addr).await {
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused => return,
            // A connection caught in the accept queue as the listener closed is reset: closed
            // as well.
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return,
            Err(e) => panic!("connecting to {addr} failed otherwise than refused: {e}"),
            Ok(stream) => drop(stream),
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{addr} still accepts connections {PATIENCE:?} after the stop"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// The pipes the process has open (`/proc/PID/fd` entries that link to `pipe:[...]`).
async fn pipes(pid: u32) -> usize {
    tokio::task::spawn_blocking(move || {
        std::fs::read_dir(format!("/proc/{pid}/fd"))
            .unwrap()
            .filter_map(Result::ok)
            .filter_map(|fd| std::fs::read_link(fd.path()).ok())
            .filter(|target| target.to_string_lossy().starts_with("pipe:"))
            .count()
    })
    .await
    .unwrap()
}

/// The access-log lines (INFO, after the timestamp and level) of an HTTP/1.1 request line
/// `"METHOD target HTTP/1.1"`.
fn access_lines<'l>(log: &'l [String], request: &str) -> Vec<&'l str> {
    let quoted = format!(" \"{request} HTTP/1.1\" ");
    log.iter()
        .filter(|line| line.contains(&quoted))
        .map(|line| {
            line.split_once(" INFO ")
                .unwrap_or_else(|| panic!("an access line is INFO: {line}"))
                .1
        })
        .collect()
}

/// Checks an access-log line against everything but the duration, then that the duration is
/// microseconds: `<expected><digits>us`.
fn assert_access_line(line: &str, expected: &str) {
    let duration = line
        .strip_prefix(expected)
        .unwrap_or_else(|| panic!("access line {line:?} does not start with {expected:?}"));
    let micros = duration
        .strip_suffix("us")
        .unwrap_or_else(|| panic!("{line:?}: duration not in `us`"));
    assert!(
        !micros.is_empty() && micros.bytes().all(|b| b.is_ascii_digit()),
        "{line:?}: duration {duration:?} is not a number of microseconds"
    );
}

// ---------------------------------------------------------------- workers

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zero_workers_means_one_worker_per_cpu() {
    let server = backend().await;
    let scratch = Scratch::new("zero_workers");
    let file = scratch.file("rules.toml", &rules("workers = 0", server.addr));
    let (switch, addr, seen) = start(&file).await;
    // As switch/cli/run.rs counts them.
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let listening = seen.last().unwrap();
    let plural = if cpus == 1 { "" } else { "s" };
    assert!(
        listening.ends_with(&format!(" ({}, {cpus} worker{plural})", file.display())),
        "{listening}"
    );
    let mut client = Client::connect(addr).await;
    assert_eq!(client.get("/before").await.status, 200);
    let pid = switch.id();
    let names = tokio::task::spawn_blocking(move || thread_names(pid))
        .await
        .unwrap();
    assert_eq!(client.get("/after").await.status, 200);
    // One worker is the main thread itself; more get threads of their own.
    let mut expected = vec!["tcpvs".to_string()];
    if cpus > 1 {
        expected.extend((0..cpus).map(|i| format!("tcpvs-worker-{i}")));
    }
    expected.sort();
    assert_eq!(names, expected, "{cpus} CPUs");
    drop(client);
    let (_, status) = stop(switch).await;
    assert!(status.success(), "{status:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn workers_share_the_port_and_serve_many_concurrent_clients() {
    const CLIENTS: usize = 40;
    const REQUESTS: usize = 5;
    let server = backend().await;
    let scratch = Scratch::new("share_the_port");
    // Three workers, three listening sockets on one port: the kernel spreads the 40
    // connections over them (by their address hash), so a worker that failed to serve its
    // share would leave clients unanswered.
    let file = scratch.file("rules.toml", &rules("workers = 3", server.addr));
    let (switch, addr, _) = start(&file).await;
    let mut tasks = Vec::new();
    for client in 0..CLIENTS {
        tasks.push(tokio::spawn(async move {
            let mut connection = Client::connect(addr).await;
            for request in 0..REQUESTS {
                // Sizes from a few bytes to 300 KB: copied and spliced bodies alike.
                let n = 1 + (client * 7919 + request * 104_729) % 300_000;
                let response = connection.get(&format!("/bytes/{n}")).await;
                assert_eq!(response.status, 200, "client {client}, request {request}");
                assert_eq!(response.body.len(), n, "client {client}, request {request}");
                assert_eq!(
                    sha256_hex(&response.body),
                    sha256_hex(&pattern(n, n as u64)),
                    "client {client}, request {request}: the body differs"
                );
            }
        }));
    }
    join_all(tasks).await;
    assert_eq!(server.requests(), CLIENTS * REQUESTS);
    let (log, status) = stop(switch).await;
    assert!(status.success(), "{status:?}; log: {log:#?}");
}

// ---------------------------------------------------------------- shutdown_timeout

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_lets_requests_in_flight_finish_and_lets_idle_clients_go() {
    for workers in [1, 2] {
        let server = backend().await;
        let scratch = Scratch::new(&format!("graceful_stop_{workers}"));
        // A grace no test run reaches: whatever the machine's speed, the request in flight is
        // waited for.
        let keys = format!("workers = {workers}\nshutdown_timeout = \"1h\"");
        let file = scratch.file("rules.toml", &rules(&keys, server.addr));
        let (switch, addr, _) = start(&file).await;
        let mut idle = Client::connect(addr).await;
        assert_eq!(idle.get("/first").await.status, 200);
        let mut held = Client::connect(addr).await;
        held.send(b"GET /hold HTTP/1.1\r\nHost: test\r\n\r\n").await;
        server.wait_for_requests(2).await;

        signal(&switch, rustix::process::Signal::TERM);
        let (switch, stopping, _) = line_with(switch, "stopping: ").await;
        assert!(
            stopping.ends_with(
                "stopping: no new connections; waiting up to 3600s for requests in flight"
            ),
            "workers = {workers}: the rule file's shutdown_timeout: {stopping}"
        );
        // The idle keep-alive client is let go at once (an EOF, not silence), while the
        // request in flight is still held at the server.
        assert!(idle.is_closed().await, "workers = {workers}: idle client");
        // New connections are refused once the listeners close.
        wait_until_refused(addr).await;

        // The request in flight gets its whole answer, told that the connection ends.
        server.release(1);
        let response = held.response(false).await;
        assert_eq!(response.status, 200, "workers = {workers}");
        assert_eq!(response.body, b"0123456789", "workers = {workers}");
        assert_eq!(
            response.header("connection"),
            Some("close"),
            "workers = {workers}: {:?}",
            response.headers
        );
        assert!(held.is_closed().await, "workers = {workers}: held client");

        let (log, status) = log_to_end(switch).await;
        assert!(status.success(), "workers = {workers}: {status:?}");
        assert!(
            !log.iter()
                .any(|line| line.contains("still open at the deadline")),
            "workers = {workers}: nothing was cut: {log:#?}"
        );
        assert_eq!(server.requests(), 2, "workers = {workers}");
    }
}

/// SIGINT (Ctrl-C) stops the switch as SIGTERM does: the listeners close, an idle client is let
/// go, the request in flight gets its whole answer, and the process exits 0. Without a handler
/// for it, SIGINT would kill the process at once: the held request would get no answer and the
/// exit status would be the signal's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigint_stops_the_switch_gracefully_as_sigterm_does() {
    let server = backend().await;
    let scratch = Scratch::new("sigint_stop");
    let file = scratch.file(
        "rules.toml",
        &rules("workers = 2\nshutdown_timeout = \"1h\"", server.addr),
    );
    let (switch, addr, _) = start(&file).await;
    let mut idle = Client::connect(addr).await;
    assert_eq!(idle.get("/first").await.status, 200);
    let mut held = Client::connect(addr).await;
    held.send(b"GET /hold HTTP/1.1\r\nHost: test\r\n\r\n").await;
    server.wait_for_requests(2).await;

    signal(&switch, rustix::process::Signal::INT);
    let (switch, stopping, _) = line_with(switch, "stopping: ").await;
    assert!(
        stopping
            .ends_with("stopping: no new connections; waiting up to 3600s for requests in flight"),
        "{stopping}"
    );
    assert!(idle.is_closed().await, "the idle client is let go");
    wait_until_refused(addr).await;
    server.release(1);
    let response = held.response(false).await;
    assert_eq!(response.status, 200);
    assert_eq!(response.body, b"0123456789");
    assert_eq!(response.header("connection"), Some("close"));
    let (log, status) = log_to_end(switch).await;
    assert_eq!(status.code(), Some(0), "{status:?}: {log:#?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn past_shutdown_timeout_the_process_cuts_what_is_left_and_exits() {
    for workers in [1, 2] {
        let server = backend().await;
        let scratch = Scratch::new(&format!("stop_deadline_{workers}"));
        let keys = format!("workers = {workers}\nshutdown_timeout = \"300ms\"");
        let file = scratch.file("rules.toml", &rules(&keys, server.addr));
        let (switch, addr, _) = start(&file).await;
        // Held by the server for good: only the deadline can end it.
        let mut held = Client::connect(addr).await;
        held.send(b"GET /hold HTTP/1.1\r\nHost: test\r\n\r\n").await;
        server.wait_for_requests(1).await;

        signal(&switch, rustix::process::Signal::TERM);
        let (switch, stopping, _) = line_with(switch, "stopping: ").await;
        assert!(
            stopping.ends_with(
                "stopping: no new connections; waiting up to 300ms for requests in flight"
            ),
            "workers = {workers}: the rule file's shutdown_timeout: {stopping}"
        );
        // The process says what it cut (the verdict is this event, not a measured time).
        let (switch, cut, _) = line_with(switch, "still open at the deadline").await;
        assert!(
            cut.contains(" WARN ")
                && cut.ends_with(" 1 client connections were still open at the deadline"),
            "workers = {workers}: {cut}"
        );
        // The held client's connection is closed with no response at all.
        assert!(
            held.try_response(false).await.is_none(),
            "workers = {workers}: the cut client got a response"
        );
        let (log, status) = log_to_end(switch).await;
        assert!(
            status.success(),
            "workers = {workers}: {status:?}; {log:#?}"
        );
        assert_eq!(server.requests(), 1, "workers = {workers}");
    }
}

// ---------------------------------------------------------------- access_log

/// Rules with two pools: `web` (the server) by default, `dead` (nothing listening) for paths
/// under /dead.
async fn access_rules(access_log: bool, server: SocketAddr) -> String {
    let dead = dead_address().await;
    // shutdown_timeout: the stop is always graceful, so the log ends only after every
    // connection ended (see `requests_and_their_access_lines`).
    let keys = format!("workers = 2\nshutdown_timeout = \"1h\"\naccess_log = {access_log}");
    format!(
        "{}\n[[virtual.web.rule]]\npath = \"^/dead\"\npool = \"dead\"\n\n\
         [pool.dead]\nservers = [{{ addr = \"{dead}\" }}]\n",
        rules(&keys, server)
    )
}

/// What [`requests_and_their_access_lines`] did and saw.
struct Logged {
    client: SocketAddr,
    /// Bytes on the wire of the answer to `GET /page?x=1` (relayed from the server) and of
    /// the answer to `GET /dead` (a 502 made by the switch).
    page_bytes: usize,
    dead_bytes: usize,
    log: Vec<String>,
}

/// Starts tcpvs, makes two requests on one connection (one served by the server, one the
/// switch answers 502 itself), closes it, stops tcpvs and returns its whole log.
///
/// Why the whole log, read to its end, is a fair place to look for (or miss) access lines: a
/// request's line is written by its connection's task right after the exchange, before the
/// task waits for the next request or ends; the stop is graceful (`shutdown_timeout = "1h"`),
/// so the process exits only once every client connection ended, hence after every line it
/// would ever write for them. The end of stderr is that exit. So "no line" means none was
/// written, not "not written yet", with no timing involved.
async fn requests_and_their_access_lines(access_log: bool, test: &str) -> (Logged, Backend) {
    let server = backend().await;
    let scratch = Scratch::new(test);
    let file = scratch.file("rules.toml", &access_rules(access_log, server.addr).await);
    let (switch, addr, seen) = start(&file).await;
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let client = stream.local_addr().unwrap();
    let mut buf = Vec::new();
    let (status, page_bytes, body) = counted_exchange(
        &mut stream,
        "GET /page?x=1 HTTP/1.1\r\nHost: test\r\n\r\n",
        &mut buf,
    )
    .await;
    assert_eq!((status, body.as_slice()), (200, b"path /page\n".as_slice()));
    let (status, dead_bytes, _) = counted_exchange(
        &mut stream,
        "GET /dead HTTP/1.1\r\nHost: test\r\n\r\n",
        &mut buf,
    )
    .await;
    assert_eq!(status, 502);
    drop(stream);
    let (rest, status) = stop(switch).await;
    assert!(status.success(), "{status:?}");
    let mut log = seen;
    log.extend(rest);
    assert!(
        !log.iter()
            .any(|line| line.contains("still open at the deadline")),
        "{log:#?}"
    );
    let logged = Logged {
        client,
        page_bytes,
        dead_bytes,
        log,
    };
    (logged, server)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_access_log_has_one_line_per_request() {
    let (logged, server) = requests_and_their_access_lines(true, "access_log_on").await;
    let Logged {
        client,
        page_bytes,
        dead_bytes,
        log,
    } = logged;
    let page = access_lines(&log, "GET /page?x=1");
    assert_eq!(page.len(), 1, "{log:#?}");
    // service, client, "METHOD target PROTOCOL", status, bytes sent to the client,
    // pool/server, duration
    assert_access_line(
        page[0],
        &format!(
            "web {client} \"GET /page?x=1 HTTP/1.1\" 200 {page_bytes} web/{} ",
            server.addr
        ),
    );
    // An answer the switch made itself: the pool, no server.
    let dead = access_lines(&log, "GET /dead");
    assert_eq!(dead.len(), 1, "{log:#?}");
    assert_access_line(
        dead[0],
        &format!("web {client} \"GET /dead HTTP/1.1\" 502 {dead_bytes} dead/- "),
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn access_log_false_writes_no_request_lines() {
    let (logged, _server) = requests_and_their_access_lines(false, "access_log_off").await;
    let log = logged.log;
    // The log was read, and the requests happened: the failed connect is logged all the same.
    assert!(
        log.iter().any(|line| line.contains("connect failed")),
        "{log:#?}"
    );
    for request in ["GET /page?x=1", "GET /dead"] {
        assert_eq!(access_lines(&log, request), Vec::<&str>::new(), "{log:#?}");
    }
    assert!(
        !log.iter()
            .any(|line| line.contains(&logged.client.to_string())),
        "a line names the client: {log:#?}"
    );
}

// ---------------------------------------------------------------- splice

/// Uploads `n` pattern bytes to `/sha256` and checks the server got them exactly.
async fn upload(client: &mut Client, n: usize) {
    let body = pattern(n, 7);
    client
        .send(
            format!("POST /sha256 HTTP/1.1\r\nHost: test\r\nContent-Length: {n}\r\n\r\n")
                .as_bytes(),
        )
        .await;
    client.send(&body).await;
    let response = client.response(false).await;
    assert_eq!(response.status, 200, "upload of {n}");
    assert_eq!(response.text(), format!("{} {n}\n", sha256_hex(&body)));
}

/// Downloads `/bytes/n` and checks it byte for byte.
async fn download(client: &mut Client, n: usize) {
    let response = client.get(&format!("/bytes/{n}")).await;
    assert_eq!(response.status, 200, "download of {n}");
    assert_eq!(response.body.len(), n, "download of {n}");
    assert!(
        response.body == pattern(n, n as u64),
        "download of {n}: the body differs"
    );
}

// A pipe is taken for a body before its first byte is spliced and goes back to the worker's
// spare list afterwards (switch/relay/splice.rs), so once a response is in, the pipe of its body (if
// it had one) is open and stays open: counting after each exchange is not a race. With
// `workers = 1` every body moves on the main thread, whose spare list is the only one.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bodies_from_splice_threshold_up_take_a_pipe_smaller_ones_do_not() {
    const MIB: usize = 1 << 20;
    let server = backend().await;
    let scratch = Scratch::new("splice_threshold");
    let keys = "workers = 1\nsplice_threshold = \"1MiB\"";
    let file = scratch.file("rules.toml", &rules(keys, server.addr));
    // Twice, a process each: the first big body, upload or download, must be the one that
    // opens the pipe (the others reuse it).
    for upload_first in [false, true] {
        let (switch, addr, _) = start(&file).await;
        let pid = switch.id();
        // The process's own pipes (its stderr to this test, maybe its stdin): counted, and
        // only differences from them are judged.
        let base = pipes(pid).await;
        let mut client = Client::connect(addr).await;
        assert_eq!(pipes(pid).await, base, "a new connection");

        download(&mut client, 100_000).await;
        assert_eq!(pipes(pid).await, base, "a body of 100000 bytes is copied");
        download(&mut client, MIB - 1).await;
        assert_eq!(pipes(pid).await, base, "a body of 1 MiB - 1 is copied");
        upload(&mut client, MIB - 1).await;
        assert_eq!(pipes(pid).await, base, "an upload of 1 MiB - 1 is copied");

        if upload_first {
            upload(&mut client, MIB).await;
            assert_eq!(pipes(pid).await, base + 2, "an upload of 1 MiB is spliced");
            download(&mut client, MIB).await;
        } else {
            download(&mut client, MIB).await;
            assert_eq!(pipes(pid).await, base + 2, "a body of 1 MiB is spliced");
            upload(&mut client, MIB).await;
        }
        // The next ones reuse the pipe the thread keeps.
        assert_eq!(pipes(pid).await, base + 2, "the pipe is reused");
        download(&mut client, 3 * MIB).await;
        download(&mut client, 1000).await;
        assert_eq!(pipes(pid).await, base + 2, "the pipe is reused");

        drop(client);
        let (_, status) = stop(switch).await;
        assert!(status.success(), "{status:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn splice_false_copies_every_body() {
    const MIB: usize = 1 << 20;
    let server = backend().await;
    let scratch = Scratch::new("splice_false");
    let keys = "workers = 1\nsplice = false\nsplice_threshold = \"64KiB\"";
    let file = scratch.file("rules.toml", &rules(keys, server.addr));
    let (switch, addr, _) = start(&file).await;
    let pid = switch.id();
    let base = pipes(pid).await;
    let mut client = Client::connect(addr).await;
    download(&mut client, 3 * MIB).await;
    upload(&mut client, 3 * MIB).await;
    download(&mut client, 100_000).await;
    assert_eq!(pipes(pid).await, base, "splice = false opened a pipe");
    drop(client);
    let (_, status) = stop(switch).await;
    assert!(status.success(), "{status:?}");
}

// ---------------------------------------------------------------- startup errors

/// Runs `tcpvs ARGS` to its end with `RUST_LOG=off`: errors at startup are printed whatever
/// the log filter says.
fn run_to_end(args: &[&std::ffi::OsStr]) -> std::process::Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_tcpvs"))
        .args(args)
        .env("RUST_LOG", "off")
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap()
}

#[test]
fn run_refuses_a_broken_rule_file_as_check_does() {
    let scratch = Scratch::new("run_broken_file");
    let text = rules(
        "workers = 1\nshutdown_timeout = \"soon\"",
        "127.0.0.1:9".parse().unwrap(),
    );
    let file = scratch.file("broken.toml", &text);
    let run = run_to_end(&["run".as_ref(), "-c".as_ref(), file.as_os_str()]);
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert_eq!(run.status.code(), Some(1), "{stderr}");
    assert!(run.stdout.is_empty());
    let (line, col) = position_of(&text, "\"soon\"");
    let lines: Vec<&str> = stderr.lines().collect();
    assert_eq!(lines.len(), 1, "{stderr}");
    assert!(
        lines[0].starts_with(&format!("{}:{line}:{col}: ", file.display())),
        "{stderr}"
    );
    assert!(lines[0].contains("invalid duration"), "{stderr}");
    // The same words as `tcpvs check`.
    let check = run_to_end(&["check".as_ref(), file.as_os_str()]);
    assert_eq!(check.status.code(), Some(1));
    assert_eq!(String::from_utf8_lossy(&check.stderr), stderr);
}

#[test]
fn run_on_a_taken_address_exits_1_naming_the_listen_line() {
    let scratch = Scratch::new("run_taken_address");
    // Bound without SO_REUSEPORT: no other socket may join it, with or without the option.
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap();
    for workers in [1, 2] {
        let text = rules(
            &format!("workers = {workers}"),
            "127.0.0.1:9".parse().unwrap(),
        )
        .replace("listen = \"127.0.0.1:0\"", &format!("listen = \"{addr}\""));
        let file = scratch.file(&format!("taken{workers}.toml"), &text);
        let run = run_to_end(&["run".as_ref(), "-c".as_ref(), file.as_os_str()]);
        let stderr = String::from_utf8_lossy(&run.stderr);
        assert_eq!(run.status.code(), Some(1), "workers = {workers}: {stderr}");
        let (line, col) = position_of(&text, &format!("\"{addr}\""));
        let expected = format!(
            "tcpvs: {}:{line}:{col}: virtual service `web`: cannot listen on {addr}: ",
            file.display()
        );
        assert_eq!(stderr.lines().count(), 1, "workers = {workers}: {stderr}");
        assert!(
            stderr.starts_with(&expected) && stderr.contains("in use"),
            "workers = {workers}: expected {expected}... (address in use), got {stderr}"
        );
    }
    drop(taken);
}

/// With several workers the listeners use SO_REUSEPORT, which would let a second tcpvs started
/// by mistake join the port and take part of the traffic. It is refused instead.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_tcpvs_on_the_same_address_is_refused() {
    let backend = backend().await;
    let scratch = Scratch::new("second_instance");
    let addr = {
        let probe = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        probe.local_addr().unwrap()
    };
    let text = rules("workers = 2", backend.addr)
        .replace("listen = \"127.0.0.1:0\"", &format!("listen = \"{addr}\""));
    let file = scratch.file("rules.toml", &text);
    let (first, served, _) = start(&file).await;
    assert_eq!(served, addr);
    let second = tokio::task::spawn_blocking({
        let file = file.clone();
        move || run_to_end(&["run".as_ref(), "-c".as_ref(), file.as_os_str()])
    })
    .await
    .unwrap();
    let stderr = String::from_utf8_lossy(&second.stderr);
    assert_eq!(second.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains(&format!("cannot listen on {addr}")),
        "{stderr}"
    );
    assert!(stderr.contains("a second tcpvs?"), "{stderr}");
    // The first one still serves every request.
    let mut client = Client::connect(addr).await;
    for _ in 0..4 {
        assert_eq!(client.get("/bytes/8").await.status, 200);
    }
    drop(client);
    let (_, status) = stop(first).await;
    assert!(status.success());
}
