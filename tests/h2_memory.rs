//! What an idle HTTP/2 connection costs the switch: its read, write and HPACK buffers, its
//! stream store and frame queues are given back when its last stream ends, and taken again
//! by its next request (the vendored h2 crate's change, vendor/README.md), as HAProxy's
//! mux_h2 takes its buffers on demand. Before that change one idle connection over h2c held
//! 27.5 KiB of the switch's resident memory; with it, 4.5 KiB (benches/h2_idle_memory.sh).
//!
//! The switch runs as its own process (the test's memory is not in its resident set), with
//! one worker. Every connection has one request answered, byte for byte, before the next
//! opens; then all stay open and idle while the switch's resident memory is read. Verdicts
//! depend on memory, never on time: the waits only let the last connections settle, and
//! `PATIENCE` turns a hang into a failure.

mod common;
#[path = "common/h2_frames.rs"]
mod h2_frames;

use common::{pattern, Process, Scratch};
use h2_frames::{headers, Block, Conn, PATIENCE};
use std::time::Duration;

/// Idle connections held at once: their memory outweighs the allocator's noise many times.
const CONNECTIONS: u64 = 400;
/// The bound per idle connection, in KiB of resident memory: above the 4.5 measured, well below
/// the 27.5 held when the h2 crate kept its buffers for a connection's life.
const BOUND_KIB: u64 = 12;
/// Connections opened, served and closed before the baseline, so that the runtime, the pool's
/// server connection and the allocator's arena exist before it is read.
const WARM_UP: usize = 20;
/// The answer each connection gets (the backend's `/bytes/N`).
const BODY: usize = 100;

/// VmRSS of `pid`, in KiB.
fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("/proc/PID/status");
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmRSS in /proc/PID/status")
}

/// Opens a connection (preface, SETTINGS), has one GET answered, and returns it still open.
async fn served_connection(addr: std::net::SocketAddr) -> Conn {
    let mut conn = Conn::open(addr).await;
    let path = format!("/bytes/{BODY}");
    conn.send(&headers(1, Block::get(&path).bytes(), true))
        .await;
    let response = conn.response(1).await;
    assert_eq!(response.status, 200, "{response:?}");
    assert_eq!(
        response.body,
        pattern(BODY, BODY as u64),
        "the answer byte for byte"
    );
    conn
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_connection_gives_its_buffers_back() {
    let backend = common::backend().await;
    let scratch = Scratch::new("h2_memory");
    let rules = scratch.file(
        "rules.toml",
        &format!(
            "[switch]\nworkers = 1\naccess_log = false\nkeepalive_timeout = \"300s\"\n\n\
             [virtual.h2c]\nlisten = \"127.0.0.1:0\"\ndefault_pool = \"web\"\n\n\
             [pool.web]\nservers = [{{ addr = \"{}\" }}]\n",
            backend.addr
        ),
    );
    let (switch, addr) = tokio::task::spawn_blocking(move || {
        let switch = Process::start(&["run".as_ref(), "-c".as_ref(), rules.as_os_str()]);
        let (addr, _) = switch.address_after("listening on ");
        (switch, addr)
    })
    .await
    .unwrap();
    let pid = switch.id();

    for _ in 0..WARM_UP {
        drop(served_connection(addr).await);
    }
    let before = rss_kib(pid);
    let mut idle = Vec::new();
    for _ in 0..CONNECTIONS {
        idle.push(served_connection(addr).await);
    }

    // Each connection gives its buffers back once its stream has ended in the switch, just
    // after the client has its answer: let the last ones settle.
    let deadline = tokio::time::Instant::now() + PATIENCE;
    let per_connection = loop {
        let per_connection = rss_kib(pid).saturating_sub(before) as f64 / CONNECTIONS as f64;
        if per_connection <= BOUND_KIB as f64 || tokio::time::Instant::now() >= deadline {
            break per_connection;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert!(
        per_connection <= BOUND_KIB as f64,
        "an idle HTTP/2 connection holds {per_connection:.2} KiB of the switch's memory \
         ({CONNECTIONS} connections), more than {BOUND_KIB}"
    );

    // Every connection still serves: the buffers given back are taken again.
    for conn in idle.iter_mut().step_by(40) {
        let path = format!("/bytes/{BODY}");
        conn.send(&headers(3, Block::get(&path).bytes(), true))
            .await;
        let response = conn.response(3).await;
        assert_eq!(response.status, 200, "{response:?}");
        assert_eq!(response.body, pattern(BODY, BODY as u64));
    }
    drop(switch);
}
