//! Binary upgrade: a new tcpvs takes the listening sockets over from the running one
//! (`--take-over`, over its `--upgrade-socket`), the old one drains and exits, and clients
//! running all along lose no request: those on new connections see nothing at all, those on
//! kept-alive connections to the old process see their idle connection closed and open a new
//! one, as HTTP clients do (RFC 9112, 9.3.1: a connection closed before any byte of the answer
//! to an idempotent request is retried).

mod common;

use common::*;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// One GET on `stream`: `Some(status)`, or `None` when the connection was closed or reset
/// before any byte of the answer (the request may be sent again on a new connection).
async fn get(stream: &mut TcpStream, path: &str) -> Option<u16> {
    let request = format!("GET {path} HTTP/1.1\r\nHost: test\r\n\r\n");
    if stream.write_all(request.as_bytes()).await.is_err() {
        return None;
    }
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        let n = match tokio::time::timeout(PATIENCE, stream.read(&mut chunk)).await {
            Ok(Ok(n)) => n,
            Ok(Err(_)) if buf.is_empty() => return None,
            Ok(Err(e)) => panic!("connection broken inside an answer: {e}"),
            Err(_) => panic!("no answer within {PATIENCE:?}"),
        };
        if n == 0 {
            assert!(buf.is_empty(), "closed inside an answer: {buf:?}");
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
        let mut fields = [httparse::EMPTY_HEADER; 32];
        let mut response = httparse::Response::new(&mut fields);
        if let Ok(httparse::Status::Complete(head)) = response.parse(&buf) {
            let length: usize = response
                .headers
                .iter()
                .find(|f| f.name.eq_ignore_ascii_case("content-length"))
                .map(|f| std::str::from_utf8(f.value).unwrap().parse().unwrap())
                .unwrap();
            if buf.len() >= head + length {
                assert_eq!(buf.len(), head + length, "one answer per request");
                return Some(response.code.unwrap());
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_tcpvs_takes_the_listeners_over_and_no_request_is_lost() {
    let backend = backend().await;
    let scratch = Scratch::new("upgrade");
    let addr: SocketAddr = {
        let probe = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        probe.local_addr().unwrap()
    };
    let rules = scratch.file(
        "rules.toml",
        &format!(
            "[switch]\nworkers = 2\naccess_log = false\n[virtual.web]\nlisten = \"{addr}\"\n\
             default_pool = \"p\"\n[pool.p]\nservers = [{{ addr = \"{}\" }}]\n",
            backend.addr
        ),
    );
    let socket = scratch.0.join("upgrade.sock");
    let args = |take_over: bool| {
        let mut args: Vec<std::ffi::OsString> = vec![
            "run".into(),
            "-c".into(),
            rules.clone().into(),
            "--upgrade-socket".into(),
            socket.clone().into(),
        ];
        if take_over {
            args.extend(["--take-over".into(), socket.clone().into()]);
        }
        args
    };
    let old_args = args(false);
    let old = Process::start(&old_args.iter().map(|a| a.as_os_str()).collect::<Vec<_>>());
    let (served, _) = old.address_after("listening on ");
    assert_eq!(served, addr);

    let running = Arc::new(AtomicBool::new(true));
    let answered = Arc::new(AtomicUsize::new(0));
    let reconnected = Arc::new(AtomicUsize::new(0));
    let mut clients = Vec::new();
    for n in 0..4 {
        let (running, answered, reconnected) = (
            Arc::clone(&running),
            Arc::clone(&answered),
            Arc::clone(&reconnected),
        );
        clients.push(tokio::spawn(async move {
            let keep_alive = n < 2;
            let mut stream = TcpStream::connect(addr).await.expect("connect");
            // Bounded: at most 100 000 requests per client.
            for i in 0..100_000u32 {
                if !running.load(Ordering::Relaxed) {
                    break;
                }
                if !keep_alive {
                    stream = TcpStream::connect(addr).await.expect("connect");
                }
                let status = match get(&mut stream, "/bytes/16").await {
                    Some(status) => status,
                    None => {
                        // Only a kept-alive connection may have been let go between requests.
                        assert!(
                            keep_alive,
                            "client {n}: request {i} on a new connection lost"
                        );
                        reconnected.fetch_add(1, Ordering::Relaxed);
                        stream = TcpStream::connect(addr).await.expect("connect");
                        get(&mut stream, "/bytes/16")
                            .await
                            .expect("answered on a new connection")
                    }
                };
                assert_eq!(status, 200, "client {n}: request {i}");
                answered.fetch_add(1, Ordering::Relaxed);
            }
        }));
    }
    let wait_for_traffic = |count: usize| {
        let answered = Arc::clone(&answered);
        async move {
            let deadline = tokio::time::Instant::now() + PATIENCE;
            while answered.load(Ordering::Relaxed) < count {
                assert!(tokio::time::Instant::now() < deadline, "traffic stalled");
                tokio::time::sleep(std::time::Duration::from_millis(2)).await;
            }
        }
    };
    wait_for_traffic(200).await;

    let new_args = args(true);
    let new = Process::start(&new_args.iter().map(|a| a.as_os_str()).collect::<Vec<_>>());
    let (new, _, _) = line_with(new, "upgrade: took the listeners over").await;
    // The old one drains and exits by itself, cleanly.
    let (old_log, status) = log_to_end(old).await;
    assert!(status.success(), "{status:?}: {old_log:#?}");
    assert!(
        old_log
            .iter()
            .any(|l| l.contains("a new tcpvs took the listeners over")),
        "{old_log:#?}"
    );
    // Traffic goes on, served by the new process alone.
    let before = answered.load(Ordering::Relaxed);
    wait_for_traffic(before + 200).await;
    running.store(false, Ordering::Relaxed);
    join_all(clients).await;
    assert!(
        reconnected.load(Ordering::Relaxed) <= 2,
        "at most one reconnection per kept-alive client"
    );

    // The new process serves upgrades in turn: its socket (mode 0600, as the old one's) takes
    // a third process, which then serves the clients while the second drains and exits.
    assert_eq!(mode_of(&socket), 0o600, "the new process's upgrade socket");
    let third_args = args(true);
    let third = Process::start(&third_args.iter().map(|a| a.as_os_str()).collect::<Vec<_>>());
    let (third, _, _) = line_with(third, "upgrade: took the listeners over").await;
    let (new_log, status) = log_to_end(new).await;
    assert!(status.success(), "{status:?}: {new_log:#?}");
    assert!(
        new_log
            .iter()
            .any(|l| l.contains("a new tcpvs took the listeners over")),
        "{new_log:#?}"
    );
    let mut stream = TcpStream::connect(addr).await.unwrap();
    assert_eq!(get(&mut stream, "/bytes/16").await, Some(200));
    drop(stream);
    let (_, status) = stop(third).await;
    assert!(status.success(), "{status:?}");
}

/// Permission bits of a file.
fn mode_of(path: &std::path::Path) -> u32 {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .permissions()
        .mode()
        & 0o7777
}

/// The README: "If the new process fails before it serves (a wrong rule file, an address it
/// cannot bind), the old one goes on as before". A successor receives the listening sockets,
/// then cannot bind a listener of its own rule file and exits: the old process still accepts
/// on its listeners, keeps its kept-alive clients, and serves a later upgrade. Its upgrade
/// socket is its owner's alone (mode 0600) throughout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_successor_that_fails_leaves_the_old_tcpvs_serving_as_before() {
    let backend = backend().await;
    let scratch = Scratch::new("upgrade_fallback");
    let web: SocketAddr = {
        let probe = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        probe.local_addr().unwrap()
    };
    let base = format!(
        "[switch]\nworkers = 2\naccess_log = false\n[virtual.web]\nlisten = \"{web}\"\n\
         default_pool = \"p\"\n[pool.p]\nservers = [{{ addr = \"{}\" }}]\n",
        backend.addr
    );
    let rules = scratch.file("rules.toml", &base);
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let failing = scratch.file(
        "failing.toml",
        &format!(
            "{base}[virtual.extra]\nlisten = \"{}\"\ndefault_pool = \"p\"\n",
            taken.local_addr().unwrap()
        ),
    );
    let socket = scratch.0.join("upgrade.sock");
    let run = |file: &std::path::Path, take_over: bool| {
        let mut args: Vec<std::ffi::OsString> = vec![
            "run".into(),
            "-c".into(),
            file.into(),
            "--upgrade-socket".into(),
            socket.clone().into(),
        ];
        if take_over {
            args.extend(["--take-over".into(), socket.clone().into()]);
        }
        Process::start(&args.iter().map(|a| a.as_os_str()).collect::<Vec<_>>())
    };
    let old = run(&rules, false);
    let (old, _, _) = line_with(old, "listening on").await;
    assert_eq!(
        mode_of(&socket),
        0o600,
        "the upgrade socket is the owner's alone"
    );
    let mut kept = TcpStream::connect(web).await.unwrap();
    assert_eq!(get(&mut kept, "/bytes/16").await, Some(200));

    // The successor gets the sockets, fails to bind its extra listener and exits.
    let (log, status) = log_to_end(run(&failing, true)).await;
    assert!(!status.success(), "{log:#?}");
    assert!(
        log.iter().any(|l| l.contains("cannot listen on")),
        "{log:#?}"
    );
    let (old, line, _) = line_with(old, "upgrade: the new tcpvs did not take over").await;
    assert!(line.contains("WARN"), "{line}");

    // The old process goes on: the kept-alive client's next request on the same connection,
    // and new connections, are served.
    assert_eq!(
        get(&mut kept, "/bytes/16").await,
        Some(200),
        "kept-alive client"
    );
    for i in 0..20 {
        let mut stream = TcpStream::connect(web).await.unwrap();
        assert_eq!(
            get(&mut stream, "/bytes/16").await,
            Some(200),
            "new connection {i}"
        );
    }
    assert_eq!(mode_of(&socket), 0o600, "its upgrade socket is still there");

    // And a successor that works takes over after all.
    let new = run(&rules, true);
    let (new, _, _) = line_with(new, "upgrade: took the listeners over").await;
    let (old_log, status) = log_to_end(old).await;
    assert!(status.success(), "{old_log:#?}");
    drop(kept);
    let mut stream = TcpStream::connect(web).await.unwrap();
    assert_eq!(get(&mut stream, "/bytes/16").await, Some(200));
    drop(stream);
    let (_, status) = stop(new).await;
    assert!(status.success(), "{status:?}");
    drop(taken);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_take_over_without_a_running_tcpvs_fails_clearly() {
    let scratch = Scratch::new("upgrade_nobody");
    let rules = scratch.file(
        "rules.toml",
        "[virtual.web]\nlisten = \"127.0.0.1:0\"\ndefault_pool = \"p\"\n\
         [pool.p]\nservers = [{ addr = \"127.0.0.1:9\" }]\n",
    );
    let socket = scratch.0.join("none.sock");
    let run = std::process::Command::new(env!("CARGO_BIN_EXE_tcpvs"))
        .args([
            "run".as_ref(),
            "-c".as_ref(),
            rules.as_os_str(),
            "--take-over".as_ref(),
            socket.as_os_str(),
        ])
        .output()
        .unwrap();
    assert_eq!(run.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(stderr.contains("taking over from the tcpvs at"), "{stderr}");
    assert!(
        stderr.contains("is it running with --upgrade-socket?"),
        "{stderr}"
    );
}

/// `tcpvs list` against the admin endpoint at `admin`: its exit status and output.
fn list(admin: &str) -> (bool, String) {
    let run = std::process::Command::new(env!("CARGO_BIN_EXE_tcpvs"))
        .args(["list", "--admin", admin])
        .output()
        .unwrap();
    let text =
        String::from_utf8_lossy(&run.stdout).into_owned() + &String::from_utf8_lossy(&run.stderr);
    (run.status.success(), text)
}

/// The admin endpoint goes to the new process with the listeners, on TCP and on a Unix socket:
/// `tcpvs list` answers throughout, and the socket file stays, owned by the new process. A
/// successor that fails after receiving the sockets (it cannot bind a listener of its own rule
/// file) leaves the endpoint, and its file, to the old process. Before, the successor could not
/// bind the admin address the old process held, and every upgrade of a switch with `[admin]`
/// failed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_admin_endpoint_goes_over_with_the_listeners() {
    for unix in [false, true] {
        let scratch = Scratch::new(if unix {
            "upgrade_admin_unix"
        } else {
            "upgrade_admin_tcp"
        });
        let free = || {
            let probe = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            probe.local_addr().unwrap()
        };
        let (web, admin_tcp) = (free(), free());
        let admin_sock = scratch.0.join("admin.sock");
        let (listen, admin) = if unix {
            (
                format!("unix:{}", admin_sock.display()),
                format!("unix:{}", admin_sock.display()),
            )
        } else {
            (admin_tcp.to_string(), admin_tcp.to_string())
        };
        let base = format!(
            "[switch]\naccess_log = false\n[admin]\nlisten = \"{listen}\"\n[virtual.web]\n\
             listen = \"{web}\"\ndefault_pool = \"p\"\n[pool.p]\nservers = [{{ addr = \"127.0.0.1:9\" }}]\n"
        );
        let rules = scratch.file("rules.toml", &base);
        // A successor whose rule file adds a service on an address another process holds.
        let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let failing = scratch.file(
            "failing.toml",
            &format!(
                "{base}[virtual.extra]\nlisten = \"{}\"\ndefault_pool = \"p\"\n",
                taken.local_addr().unwrap()
            ),
        );
        let socket = scratch.0.join("upgrade.sock");
        let run = |file: &std::path::Path, take_over: bool| {
            let mut args: Vec<std::ffi::OsString> = vec![
                "run".into(),
                "-c".into(),
                file.into(),
                "--upgrade-socket".into(),
                socket.clone().into(),
            ];
            if take_over {
                args.extend(["--take-over".into(), socket.clone().into()]);
            }
            Process::start(&args.iter().map(|a| a.as_os_str()).collect::<Vec<_>>())
        };
        let old = run(&rules, false);
        let (old, _, _) = line_with(old, "listening on").await;
        assert!(list(&admin).0, "the old process answers");

        // 1. The successor fails: the old process keeps its endpoint and its file.
        let (log, status) = log_to_end(run(&failing, true)).await;
        assert!(!status.success(), "{log:#?}");
        assert!(
            log.iter().any(|l| l.contains("cannot listen on")),
            "{log:#?}"
        );
        let (answered, text) = list(&admin);
        assert!(answered, "the old process still answers: {text}");
        if unix {
            assert!(admin_sock.exists(), "the failed successor left the file");
        }

        // 2. The successor takes over: the endpoint goes with the listeners.
        let new = run(&rules, true);
        let (new, _, _) = line_with(new, "upgrade: took the listeners over").await;
        let (old_log, status) = log_to_end(old).await;
        assert!(status.success(), "{old_log:#?}");
        let (answered, text) = list(&admin);
        assert!(answered, "the new process answers: {text}");
        assert!(text.contains("generation 1"), "{text}");
        if unix {
            assert!(
                admin_sock.exists(),
                "the old process left the file to the new one"
            );
        }
        let (new_log, status) = stop(new).await;
        assert!(status.success(), "{new_log:#?}");
        if unix {
            assert!(
                !admin_sock.exists(),
                "the new process removed its file at the end"
            );
        }
        drop(taken);
    }
}
