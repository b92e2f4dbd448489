//! Live reload over loopback: the next generation swapped in with `Switch::reload`, `POST
//! /reload` and SIGHUP; requests in flight and kept-alive clients; servers that stay keep their
//! counters and admin changes; a refused file changes nothing; listeners kept, added and
//! removed; settings that need a restart reported; and 50 reloads under load without one failed
//! request.
//!
//! Verdicts never depend on elapsed time: each step waits for an answer, a log line or the
//! switch's statistics.

mod common;

use common::*;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// One service `web` on `listen`: `/x...` to pool `x_pool`, the rest to `default`; pools as
/// given (`name = [servers]`).
fn rules(listen: &str, x_pool: &str, default: &str, pools: &[(&str, &[SocketAddr])]) -> String {
    let mut text = format!(
        "[switch]\naccess_log = false\n[admin]\nlisten = \"127.0.0.1:0\"\n\
         [virtual.web]\nlisten = \"{listen}\"\ndefault_pool = \"{default}\"\n\
         [[virtual.web.rule]]\npath = \"^/x\"\npool = \"{x_pool}\"\n"
    );
    for (name, servers) in pools {
        let list: Vec<String> = servers
            .iter()
            .map(|a| format!("{{ addr = \"{a}\" }}"))
            .collect();
        text.push_str(&format!(
            "[pool.{name}]\nscheduler = \"rr\"\nservers = [{}]\n",
            list.join(", ")
        ));
    }
    text
}

async fn start(path: &std::path::Path) -> tcpvs::Switch {
    let config = tcpvs::Config::load(path).unwrap_or_else(|e| panic!("{e}"));
    tcpvs::Switch::start(config).await.unwrap()
}

/// `POST /reload` on the admin endpoint: the status and the body.
async fn post_reload(admin: SocketAddr) -> (u16, serde_json::Value) {
    let mut stream = TcpStream::connect(admin).await.unwrap();
    let request = format!(
        "POST /reload HTTP/1.1\r\nHost: {admin}\r\nContent-Type: application/json\r\n\
         Content-Length: 2\r\nConnection: close\r\n\r\n{{}}"
    );
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut raw = Vec::new();
    tokio::time::timeout(PATIENCE, stream.read_to_end(&mut raw))
        .await
        .expect("an answer")
        .unwrap();
    let text = String::from_utf8(raw).unwrap();
    let status: u16 = text[9..12].parse().unwrap();
    let body = text.split_once("\r\n\r\n").unwrap().1;
    (status, serde_json::from_str(body).unwrap())
}

#[tokio::test]
async fn a_reload_moves_kept_alive_clients_to_the_new_rules_and_keeps_servers() {
    let (a, b, c) = (backend().await, backend().await, backend().await);
    let scratch = Scratch::new("reload_basic");
    let file = scratch.file(
        "rules.toml",
        &rules(
            "127.0.0.1:0",
            "xs",
            "main",
            &[("main", &[a.addr]), ("xs", &[b.addr])],
        ),
    );
    let switch = start(&file).await;
    let web = switch.local_addr("web").unwrap();
    let mut client = Client::connect(web).await;
    assert_eq!(client.get("/x1").await.served_by(), b.addr.to_string());
    assert_eq!(client.get("/page").await.served_by(), a.addr.to_string());

    // /x now goes to `main`, which gains c; `xs` is gone; a's line is unchanged.
    std::fs::write(
        &file,
        rules(
            "127.0.0.1:0",
            "main",
            "main",
            &[("main", &[a.addr, c.addr])],
        ),
    )
    .unwrap();
    let done = switch.reload().expect("the new file is valid");
    assert_eq!(done.generation, 2);
    assert!(done.restart_needed.is_empty(), "{:?}", done.restart_needed);

    // The same connection, its next requests: the new rules (rr over a and c).
    let mut seen = std::collections::HashSet::new();
    for _ in 0..4 {
        let response = client.get("/x2").await;
        assert_eq!(response.status, 200);
        seen.insert(response.served_by());
    }
    let want: std::collections::HashSet<String> = [a.addr.to_string(), c.addr.to_string()].into();
    assert_eq!(seen, want);
    drop(client);
    let snapshot = settle(&switch).await;
    assert_eq!(snapshot.generation, 2);
    // a stayed: its counters went on (1 before, 2 of the 4 after); b left with its pool.
    let a_stats = snapshot.server(a.addr).expect("a is still there");
    assert_eq!(a_stats.requests, 3);
    assert_eq!(a_stats.requests, a.requests() as u64);
    assert!(snapshot.server(b.addr).is_none());
    assert_eq!(
        snapshot.services[0].requests, 6,
        "the service's counters carry on"
    );
}

#[tokio::test]
async fn admin_changes_survive_a_reload_until_the_servers_line_changes() {
    let (a, b) = (backend().await, backend().await);
    let scratch = Scratch::new("reload_admin");
    let pools: &[(&str, &[SocketAddr])] = &[("main", &[a.addr, b.addr])];
    let file = scratch.file("rules.toml", &rules("127.0.0.1:0", "main", "main", pools));
    let switch = start(&file).await;
    let admin = switch.admin_addr().unwrap();
    let drain = format!(
        "PUT /pools/main/servers/{} HTTP/1.1\r\nHost: {admin}\r\nContent-Type: application/json\r\n\
         Content-Length: 17\r\nConnection: close\r\n\r\n{{\"state\":\"drain\"}}",
        a.addr
    );
    let mut stream = TcpStream::connect(admin).await.unwrap();
    stream.write_all(drain.as_bytes()).await.unwrap();
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw).await.unwrap();
    assert!(
        raw.starts_with(b"HTTP/1.1 200"),
        "{}",
        String::from_utf8_lossy(&raw)
    );

    // A reload that changes another pool: a stays drained.
    let mut text = rules("127.0.0.1:0", "main", "main", pools);
    text.push_str(&format!(
        "[pool.spare]\nservers = [{{ addr = \"{}\" }}]\n",
        b.addr
    ));
    std::fs::write(&file, &text).unwrap();
    let (status, body) = post_reload(admin).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["generation"], 2);
    let state = |snap: &tcpvs::state::snapshot::Snapshot| {
        snap.servers
            .iter()
            .find(|s| s.pool == "main" && s.addr == a.addr)
            .map(|s| s.state)
    };
    assert_eq!(
        state(&switch.stats()),
        Some(tcpvs::state::status::State::Drain)
    );

    // Its line changes (a weight): the rule file speaks again, the drain ends.
    let text = text.replacen(
        &format!("{{ addr = \"{}\" }}", a.addr),
        &format!("{{ addr = \"{}\", weight = 3 }}", a.addr),
        1,
    );
    std::fs::write(&file, &text).unwrap();
    let (status, body) = post_reload(admin).await;
    assert_eq!(status, 200, "{body}");
    let snapshot = switch.stats();
    assert_eq!(state(&snapshot), Some(tcpvs::state::status::State::Up));
    let a_main = snapshot
        .servers
        .iter()
        .find(|s| s.pool == "main" && s.addr == a.addr)
        .unwrap();
    assert_eq!((a_main.weight, a_main.configured_weight), (3, 3));
}

#[tokio::test]
async fn a_refused_file_changes_nothing_and_says_every_error() {
    let (a, b) = (backend().await, backend().await);
    let scratch = Scratch::new("reload_refused");
    let good = rules(
        "127.0.0.1:0",
        "xs",
        "main",
        &[("main", &[a.addr]), ("xs", &[b.addr])],
    );
    let file = scratch.file("rules.toml", &good);
    let switch = start(&file).await;
    let web = switch.local_addr("web").unwrap();
    let admin = switch.admin_addr().unwrap();
    let bad = good
        .replace("pool = \"xs\"", "pool = \"nowhere\"")
        .replace("scheduler = \"rr\"", "scheduler = \"fastest\"");
    std::fs::write(&file, &bad).unwrap();
    let (status, body) = post_reload(admin).await;
    assert_eq!(status, 422, "{body}");
    let errors: Vec<&str> = body["errors"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e.as_str().unwrap())
        .collect();
    let path = file.display().to_string();
    assert!(errors.len() >= 3, "{errors:?}");
    for error in &errors {
        assert!(error.starts_with(&format!("{path}:")), "{error}");
    }
    assert!(errors.iter().any(|e| e.contains("nowhere")), "{errors:?}");
    assert!(errors.iter().any(|e| e.contains("fastest")), "{errors:?}");
    // The old rules still route.
    let mut client = Client::connect(web).await;
    assert_eq!(client.get("/x").await.served_by(), b.addr.to_string());
    assert_eq!(switch.stats().generation, 1);
}

/// A loopback address with a port free right now.
fn free_address() -> SocketAddr {
    let probe = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    probe.local_addr().unwrap()
}

#[tokio::test]
async fn listeners_are_kept_added_and_removed() {
    let a = backend().await;
    let scratch = Scratch::new("reload_listeners");
    let first = free_address();
    let pools: &[(&str, &[SocketAddr])] = &[("main", &[a.addr])];
    let file = scratch.file(
        "rules.toml",
        &rules(&first.to_string(), "main", "main", pools),
    );
    let switch = start(&file).await;
    assert_eq!(switch.local_addr("web"), Some(first));
    let mut kept = Client::connect(first).await;
    assert_eq!(kept.get("/a").await.status, 200);

    // Same address, other rules: the listener stays (a connection made now is served).
    let mut text = rules(&first.to_string(), "main", "main", pools);
    let second = free_address();
    text.push_str(&format!(
        "[virtual.more]\nlisten = \"{second}\"\ndefault_pool = \"main\"\n"
    ));
    std::fs::write(&file, &text).unwrap();
    switch.reload().unwrap();
    let mut added = Client::connect(second).await;
    assert_eq!(added.get("/b").await.status, 200);
    assert_eq!(
        kept.get("/c").await.status,
        200,
        "the kept listener's client goes on"
    );
    let mut fresh = Client::connect(first).await;
    assert_eq!(fresh.get("/d").await.status, 200);

    // `web` goes: its listener closes; its client gets the answer to its request, then the close.
    std::fs::write(
        &file,
        rules(&second.to_string(), "main", "main", pools).replace("virtual.web", "virtual.more"),
    )
    .unwrap();
    let done = switch.reload().unwrap();
    assert_eq!(done.generation, 3);
    let response = kept.get("/e").await;
    assert_eq!(response.status, 200);
    assert!(
        kept.is_closed().await,
        "the removed service's connection closes after its request"
    );
    let deadline = tokio::time::Instant::now() + PATIENCE;
    while TcpStream::connect(first).await.is_ok() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "{first} still accepts"
        );
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    assert_eq!(
        added.get("/f").await.status,
        200,
        "`more` kept its listener"
    );
}

#[tokio::test]
async fn settings_that_need_a_restart_are_reported_and_kept() {
    let (a, b) = (backend().await, backend().await);
    let scratch = Scratch::new("reload_restart");
    let pools: &[(&str, &[SocketAddr])] = &[("main", &[a.addr])];
    let text = rules("127.0.0.1:0", "main", "main", pools);
    let file = scratch.file("rules.toml", &text);
    let switch = start(&file).await;
    let admin = switch.admin_addr().unwrap();
    let web = switch.local_addr("web").unwrap();
    // The new file changes three process settings (idle_timeout from the default 180s to 1s)
    // and the rules (`/x` to a new pool `xs`).
    let pools: &[(&str, &[SocketAddr])] = &[("main", &[a.addr]), ("xs", &[b.addr])];
    std::fs::write(
        &file,
        rules("127.0.0.1:0", "xs", "main", pools).replace(
            "access_log = false",
            "access_log = false\nidle_timeout = \"1s\"\nworkers = 3\ncpu_affinity = \"auto\"",
        ),
    )
    .unwrap();
    let (status, body) = post_reload(admin).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["generation"], 2);
    assert_eq!(
        body["restart_needed"],
        serde_json::json!([
            "[switch] workers",
            "[switch] idle_timeout",
            "[switch] cpu_affinity"
        ])
    );
    // The rules are the new file's...
    let mut client = Client::connect(web).await;
    assert_eq!(client.get("/x1").await.served_by(), b.addr.to_string());
    assert_eq!(client.get("/page").await.served_by(), a.addr.to_string());
    // ...the process settings the running ones: a server silent for 2.5 s is waited for (the
    // running idle_timeout, 180s), where the new file's 1s would have answered 504.
    let slow = client.get("/slow/2500").await;
    assert_eq!(slow.status, 200, "{}", slow.text());
    assert_eq!(slow.body, b"0123456789");
    assert_eq!(slow.served_by(), a.addr.to_string());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sighup_reloads_the_running_binary() {
    let (a, b) = (backend().await, backend().await);
    let scratch = Scratch::new("reload_sighup");
    let file = scratch.file(
        "rules.toml",
        &rules("127.0.0.1:0", "main", "main", &[("main", &[a.addr])]),
    );
    let switch = Process::start(&["run".as_ref(), "-c".as_ref(), file.as_os_str()]);
    let (web, _) = switch.address_after("listening on ");
    let mut client = Client::connect(web).await;
    assert_eq!(client.get("/x").await.served_by(), a.addr.to_string());
    std::fs::write(
        &file,
        rules(
            "127.0.0.1:0",
            "xs",
            "main",
            &[("main", &[a.addr]), ("xs", &[b.addr])],
        ),
    )
    .unwrap();
    signal(&switch, rustix::process::Signal::HUP);
    let (switch, line, _) = line_with(switch, "reloaded: generation 2").await;
    assert!(line.contains("INFO"), "{line}");
    assert_eq!(client.get("/x").await.served_by(), b.addr.to_string());
    drop(client);
    let (_, status) = stop(switch).await;
    assert!(status.success(), "{status:?}");
}

/// The claim of the issue: 50 reloads under load (kept-alive clients and a new connection per
/// request; pools renamed, servers added and removed) and not one request fails.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifty_reloads_under_load_fail_no_request() {
    let servers = [backend().await, backend().await, backend().await];
    let addrs: Vec<SocketAddr> = servers.iter().map(|s| s.addr).collect();
    let scratch = Scratch::new("reload_fifty");
    let files = [
        rules("127.0.0.1:0", "p1", "p1", &[("p1", &[addrs[0], addrs[1]])]),
        rules(
            "127.0.0.1:0",
            "p2",
            "q",
            &[("p2", &[addrs[1], addrs[2]]), ("q", &[addrs[0]])],
        ),
    ];
    let file = scratch.file("rules.toml", &files[0]);
    let config = tcpvs::Config::load(&file).unwrap();
    let switch = tcpvs::Switch::start_workers(config, 2).unwrap();
    let web = switch.local_addr("web").unwrap();

    let running = Arc::new(AtomicBool::new(true));
    let answered = Arc::new(AtomicUsize::new(0));
    let mut clients = Vec::new();
    for n in 0..6 {
        let (running, answered) = (Arc::clone(&running), Arc::clone(&answered));
        clients.push(tokio::spawn(async move {
            let keep_alive = n < 4;
            let mut client = Client::connect(web).await;
            // Bounded: at most 200 000 requests per client.
            for i in 0..200_000u32 {
                if !running.load(Ordering::Relaxed) {
                    break;
                }
                if !keep_alive {
                    client = Client::connect(web).await;
                }
                // `/x` goes by the rule, `/bytes/64` to the default pool.
                let (path, body) = if i % 2 == 0 {
                    ("/x", b"path /x\n".to_vec())
                } else {
                    ("/bytes/64", pattern(64, 64))
                };
                let response = client.get(path).await;
                assert_eq!(response.status, 200, "request {i} of client {n}");
                assert_eq!(response.body, body, "request {i} of client {n}");
                answered.fetch_add(1, Ordering::Relaxed);
            }
        }));
    }
    for round in 0..50 {
        // Wait for traffic between reloads, so each one lands under load.
        let before = answered.load(Ordering::Relaxed);
        let deadline = tokio::time::Instant::now() + PATIENCE;
        while answered.load(Ordering::Relaxed) < before + 20 {
            assert!(
                tokio::time::Instant::now() < deadline,
                "traffic stalled at reload {round}"
            );
            tokio::time::sleep(std::time::Duration::from_millis(1)).await;
        }
        std::fs::write(&file, &files[(round + 1) % 2]).unwrap();
        let done = switch
            .reload()
            .unwrap_or_else(|e| panic!("reload {round}: {e}"));
        assert_eq!(done.generation, round as u64 + 2);
    }
    running.store(false, Ordering::Relaxed);
    join_all(clients).await;
    let total = answered.load(Ordering::Relaxed);
    assert!(total >= 50 * 20, "{total} requests answered");
    let snapshot = switch.stats();
    assert_eq!(snapshot.generation, 51);
    assert_eq!(
        snapshot.services[0].local_errors, 0,
        "the switch refused nothing"
    );
    switch.shutdown(std::time::Duration::from_secs(5)).await;
}

/// LARD's table (which server holds which target) survives a reload that changes a pool's
/// checks but not its servers or module; a change of a server's line builds the module anew.
#[test]
fn a_pool_whose_servers_and_module_stay_keeps_its_modules_state() {
    let text = |pool_extra: &str, second_weight: u32| {
        format!(
            "[virtual.web]\nlisten = \"127.0.0.1:0\"\ndefault_pool = \"p\"\n[pool.p]\n\
             scheduler = \"lard\"\nservers = [{{ addr = \"127.0.0.1:9001\" }}, \
             {{ addr = \"127.0.0.1:9002\", weight = {second_weight} }}]\n{pool_extra}"
        )
    };
    let config = |text: String| tcpvs::Config::parse("rules.toml", &text).unwrap();
    let before = config(text("", 1));
    let checks_only = config(text("[pool.p.health]\nmax_fails = 5\n", 1));
    let new_weight = config(text("", 2));
    let clock: Arc<dyn tcpvs_modules::Clock> = Arc::new(tcpvs_modules::MonotonicClock::new());
    let old = tcpvs::state::pool::Pool::new(&before.pools[0], Arc::clone(&clock), 1).unwrap();
    let kept = tcpvs::state::pool::Pool::with_servers_of(
        &checks_only.pools[0],
        Arc::clone(&clock),
        1,
        Some(&old),
    )
    .unwrap();
    assert!(
        Arc::ptr_eq(&old.scheduler, &kept.scheduler),
        "the module and its table stay"
    );
    assert_eq!(kept.health.health.max_fails, 5, "the new checks apply");
    let rebuilt =
        tcpvs::state::pool::Pool::with_servers_of(&new_weight.pools[0], clock, 1, Some(&old))
            .unwrap();
    assert!(
        !Arc::ptr_eq(&old.scheduler, &rebuilt.scheduler),
        "a changed line builds it anew"
    );
    // Either way the servers themselves are the same ones, load and all.
    assert!(rebuilt.servers[1].same_as(&old.servers[1]));
}

/// A reload whose new listen address is taken is refused before anything changes: the kept
/// server's line (its weight here) stays as it was.
#[tokio::test]
async fn a_reload_that_cannot_listen_changes_nothing() {
    let a = backend().await;
    let scratch = Scratch::new("reload_taken");
    let pools: &[(&str, &[SocketAddr])] = &[("main", &[a.addr])];
    let text = rules("127.0.0.1:0", "main", "main", pools);
    let file = scratch.file("rules.toml", &text);
    let switch = start(&file).await;
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let mut next = text.replacen(
        &format!("{{ addr = \"{}\" }}", a.addr),
        &format!("{{ addr = \"{}\", weight = 9 }}", a.addr),
        1,
    );
    next.push_str(&format!(
        "[virtual.more]\nlisten = \"{}\"\ndefault_pool = \"main\"\n",
        taken.local_addr().unwrap()
    ));
    std::fs::write(&file, &next).unwrap();
    let refused = switch.reload().expect_err("the address is taken");
    assert!(
        refused.to_string().contains("cannot listen on"),
        "{refused}"
    );
    let snapshot = switch.stats();
    assert_eq!(snapshot.generation, 1);
    let server = snapshot.server(a.addr).unwrap();
    assert_eq!((server.weight, server.configured_weight), (1, 1));
    drop(taken);
}
