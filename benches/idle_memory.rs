//! Memory of idle keep-alive connections: starts the release binary (`workers = 1`) in front of
//! a small in-process backend, opens N client connections that each make one request and then
//! stay open, waits until they have been idle for a few seconds, and reports how much the
//! switch's resident memory (VmRSS) grew per connection.
//!
//! Three arrival patterns, since they stress the allocator differently: one client at a time,
//! and batches of 1000 and of 5000 clients that all send before any reads its answer (a batch
//! needs one server connection per client, so 5000 is as far as a 20000-descriptor limit goes).
//!
//! Run: `cargo build --release && cargo bench --bench idle_memory` (N = 10 000; the process
//! needs about 2 N + 100 file descriptors). `TCPVS_BIN=PATH` measures another build instead of
//! `target/release/tcpvs` (e.g. one from `benches/build-at.sh COMMIT`).

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// Clients held at once. Each is budgeted two descriptors (its own and a server's:
/// capacity/descriptors.rs), and this machine's hard limit of 20 000 then allows 9 949 clients
/// (the switch lowers `max_clients`); the hard limit cannot be raised here. All come from
/// 127.0.0.1, and the last quarter of `max_clients` is shared by source (capacity/share.rs,
/// issue 42), so they stay within the first three quarters: 7 000 (9 000 before issue 42).
const CONNECTIONS: usize = 7_000;
const REQUEST: &[u8] = b"GET /small HTTP/1.1\r\nHost: bench\r\n\r\n";
const BODY: &[u8] = &[b'a'; 100];

/// A keep-alive backend answering every request with 100 bytes, one thread per connection.
fn start_backend() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").expect("backend bind");
    let addr = listener.local_addr().expect("backend address");
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            std::thread::spawn(move || serve(stream));
        }
    });
    addr
}

fn serve(mut stream: TcpStream) {
    let mut buf = [0u8; 4096];
    let mut pending = Vec::new();
    let response = [
        format!("HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n", BODY.len()).as_bytes(),
        BODY,
    ]
    .concat();
    loop {
        let n = match stream.read(&mut buf) {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        pending.extend_from_slice(&buf[..n]);
        while let Some(end) = pending.windows(4).position(|w| w == b"\r\n\r\n") {
            pending.drain(..end + 4);
            if stream.write_all(&response).is_err() {
                return;
            }
        }
    }
}

fn start_switch(backend: SocketAddr, port: u16) -> Child {
    let dir = std::env::temp_dir().join(format!("tcpvs-idle-memory-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let rules = dir.join("rules.toml");
    std::fs::write(
        &rules,
        format!(
            "[switch]\nworkers = 1\naccess_log = false\nmax_clients = 100000\nkeepalive_timeout = \"300s\"\n\
             [virtual.bench]\nlisten = \"127.0.0.1:{port}\"\ndefault_pool = \"b\"\n\
             [pool.b]\nservers = [{{ addr = \"{backend}\" }}]\n"
        ),
    )
    .expect("rules");
    let binary = std::env::var_os("TCPVS_BIN")
        .unwrap_or_else(|| concat!(env!("CARGO_MANIFEST_DIR"), "/target/release/tcpvs").into());
    let mut child = Command::new(binary)
        .args(["run", "-c"])
        .arg(&rules)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start target/release/tcpvs or TCPVS_BIN (cargo build --release first)");
    for _ in 0..100 {
        if TcpStream::connect(("127.0.0.1", port)).is_ok() {
            return child;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = child.kill();
    let _ = child.wait();
    panic!("the switch did not start listening");
}

fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("/proc status");
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmRSS")
}

fn read_response(stream: &mut TcpStream) {
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    while !got.ends_with(BODY) {
        let n = stream.read(&mut buf).expect("response");
        assert!(n > 0, "connection closed before the response");
        got.extend_from_slice(&buf[..n]);
    }
}

/// Opens `CONNECTIONS` clients in groups of `batch` (each group sends, then reads) and
/// returns them, all idle.
fn open_clients(port: u16, batch: usize) -> Vec<TcpStream> {
    let mut clients = Vec::with_capacity(CONNECTIONS);
    while clients.len() < CONNECTIONS {
        let mut group = Vec::with_capacity(batch);
        for _ in 0..batch.min(CONNECTIONS - clients.len()) {
            let mut s = TcpStream::connect(("127.0.0.1", port)).expect("connect");
            s.write_all(REQUEST).expect("request");
            group.push(s);
        }
        for s in &mut group {
            read_response(s);
        }
        clients.extend(group);
    }
    clients
}

fn main() {
    if std::env::args().any(|a| a == "--list" || a == "--test") {
        return;
    }
    let backend = start_backend();
    println!(
        "idle keep-alive connections, {CONNECTIONS} each, RSS growth of the switch after 3 s idle:"
    );
    for (name, batch, port) in [
        ("one at a time", 1usize, 18711u16),
        ("batches of 1000", 1000, 18712),
        ("batches of 5000", 5000, 18713),
    ] {
        let mut switch = start_switch(backend, port);
        std::thread::sleep(Duration::from_millis(300));
        let before = rss_kib(switch.id());
        let clients = open_clients(port, batch);
        std::thread::sleep(Duration::from_secs(3));
        let after = rss_kib(switch.id());
        let grown = after.saturating_sub(before) * 1024;
        println!(
            "  {name:16} +{:.1} MiB, {} bytes per connection",
            grown as f64 / (1 << 20) as f64,
            grown / CONNECTIONS as u64
        );
        drop(clients);
        let _ = switch.kill();
        let _ = switch.wait();
    }
}
