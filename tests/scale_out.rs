//! Scale-out (issue 14): two `tcpvs run` processes on one rule file behind an L4 director that
//! sends the PROXY protocol, version 2. HAProxy 2.6 in `mode tcp` with `send-proxy-v2` and TCP
//! checks stands in for an LVS/IPVS director and keepalived, which this machine's kernel cannot
//! run (README.md, "Past one machine", has the keepalived equivalent). The claims:
//!
//! - The servers see the real client addresses. Clients connect from addresses of their own
//!   (127.0.0.2, 127.0.0.3, ...); HAProxy reaches tcpvs, and tcpvs the servers, from 127.0.0.1.
//!   The servers of pool `xff` read X-Forwarded-For; those of pool `pp` (`send_proxy = "v2"`)
//!   read the PROXY header tcpvs sends, compared byte for byte with the one expected (the
//!   client's address and port, and the address the client connected to: HAProxy's). Each
//!   instance's access log names the client, with its port, too.
//! - `hash` placement agrees: every key is served through both instances (their access logs
//!   say which instance served which client, and their /stats count exactly that), and lands
//!   on the same server whichever instance placed it.
//! - One instance killed (SIGKILL) costs only its own requests in flight: they are cut (their
//!   clients see the connection close, without a response), those held on the other instance
//!   complete byte for byte, and once HAProxy's checks mark the dead one down, every new
//!   connection succeeds through the survivor, each key on the server it had before.
//!
//! Verdicts rest on events: each request's access line, /stats counts, HAProxy's own view of its
//! servers (`show stat` on its stats socket), EOFs, requests held at the servers. Polls are
//! bounded by PATIENCE and decide nothing by their timing. HAProxy is required: without it the
//! tests fail, saying how to install it.

mod common;

use common::*;
use serde_json::Value;
use std::collections::{BTreeSet, HashMap};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::time::Instant;

/// Keys asked for per pool: with 3 servers, all 12 on one server by chance has a probability
/// of 3^-11, so "the keys use at least two servers" tells a real placement from a constant one.
const KEYS: usize = 12;
const SERVERS: usize = 3;
/// HAProxy's names of the two instances, in order.
const NAMES: [&str; 2] = ["a", "b"];

// ---------------------------------------------------------------- HAProxy, the L4 director

/// Debian's haproxy is in /usr/sbin, which a user's PATH may lack.
fn haproxy_binary() -> PathBuf {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain([PathBuf::from("/usr/sbin"), PathBuf::from("/usr/local/sbin")])
        .map(|dir| dir.join("haproxy"))
        .find(|candidate| candidate.is_file())
        .unwrap_or_else(|| {
            panic!(
                "tests/scale_out.rs runs HAProxy as the L4 director and found no `haproxy` \
                 (PATH, /usr/sbin, /usr/local/sbin): install haproxy: apt-get install haproxy"
            )
        })
}

/// An HAProxy process of the test's own: its configuration and stats socket in the test's
/// folder, in the foreground (`-db`), as the test's user; killed when dropped, its log printed
/// when a test fails.
struct HaProxy {
    child: std::process::Child,
    socket: PathBuf,
    log: PathBuf,
}

impl HaProxy {
    /// Starts HAProxy (`binary`) in front of `instances` and returns it with the address
    /// clients use.
    ///
    /// The frontend's listening socket is the test's, bound to a free port and handed over as
    /// HAProxy's standard input (`bind fd@0`): no port is freed and guessed again.
    ///
    /// How HAProxy stops using a dead instance: `check` (a TCP connection every 500 ms, two
    /// failures in a row make it DOWN), as keepalived's TCP_CHECK takes a dead real server out
    /// of IPVS. No `option redispatch`: IPVS has nothing like it (a connection sent to a dead
    /// real server is lost), so the test gives the director no second chance either, and sends
    /// new connections only once HAProxy shows the dead instance DOWN. The checks carry a
    /// PROXY v2 header too (HAProxy's default with `send-proxy-v2`), which tcpvs takes without
    /// a word.
    fn start(binary: &Path, dir: &Path, instances: &[SocketAddr]) -> (HaProxy, SocketAddr) {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let front = listener.local_addr().unwrap();
        let socket = dir.join("haproxy.sock");
        let servers: String = NAMES
            .iter()
            .zip(instances)
            .map(|(name, addr)| format!("    server {name} {addr}\n"))
            .collect();
        let config = format!(
            r#"global
    nbthread 1
    stats socket {socket} mode 600 level admin

defaults
    mode tcp
    timeout connect 1s
    timeout client 60s
    timeout server 60s

frontend clients
    bind fd@0
    default_backend tcpvs

backend tcpvs
    balance roundrobin
    default-server send-proxy-v2 check inter 500ms fall 2 rise 1
{servers}"#,
            socket = socket.display()
        );
        let file = dir.join("haproxy.cfg");
        std::fs::write(&file, config).unwrap();
        let log = dir.join("haproxy.log");
        let out = std::fs::File::create(&log).unwrap();
        let child = std::process::Command::new(binary)
            .arg("-db")
            .arg("-f")
            .arg(&file)
            .stdin(std::process::Stdio::from(std::os::fd::OwnedFd::from(
                listener,
            )))
            .stdout(out.try_clone().unwrap())
            .stderr(out)
            .spawn()
            .unwrap_or_else(|e| panic!("starting haproxy: {e}"));
        (HaProxy { child, socket, log }, front)
    }

    fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// `show stat` on the stats socket: HAProxy's CSV of its proxies and servers.
    async fn show_stat(&self) -> std::io::Result<String> {
        let mut stream = tokio::net::UnixStream::connect(&self.socket).await?;
        stream.write_all(b"show stat\n").await?;
        let mut text = String::new();
        tokio::time::timeout(PATIENCE, stream.read_to_string(&mut text))
            .await
            .map_err(|_| std::io::Error::from(std::io::ErrorKind::TimedOut))??;
        Ok(text)
    }

    /// Waits until HAProxy shows each named server of backend `tcpvs` in the state given:
    /// `UP` (and its last check passed: `L4OK`) or `DOWN`. Panics after [`PATIENCE`], or at
    /// once if HAProxy has exited.
    async fn wait_for(&mut self, want: &[(&str, &str)]) {
        let deadline = Instant::now() + PATIENCE;
        let mut seen = HashMap::new();
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                panic!("haproxy exited ({status}); its log:\n{}", self.log_text());
            }
            // Until HAProxy has made its socket, there is nothing to ask.
            if let Ok(text) = self.show_stat().await {
                seen = server_states(&text);
                if want
                    .iter()
                    .all(|(name, state)| seen.get(*name).map(String::as_str) == Some(*state))
                {
                    return;
                }
            }
            assert!(
                Instant::now() < deadline,
                "HAProxy never showed {want:?} within {PATIENCE:?}; it shows {seen:?}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

impl Drop for HaProxy {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if std::thread::panicking() {
            eprintln!("haproxy's log:\n{}", self.log_text());
        }
    }
}

/// The state of each server of backend `tcpvs` in `show stat`'s CSV: its `status`, but `UP`
/// only once a check passed (`check_status` L4OK; before the first check HAProxy says UP too).
fn server_states(csv: &str) -> HashMap<String, String> {
    let mut lines = csv.lines();
    let Some(header) = lines.next().and_then(|l| l.strip_prefix("# ")) else {
        return HashMap::new();
    };
    let columns: Vec<&str> = header.split(',').collect();
    let column = |name: &str| columns.iter().position(|c| *c == name);
    let (Some(px), Some(sv), Some(status), Some(check)) = (
        column("pxname"),
        column("svname"),
        column("status"),
        column("check_status"),
    ) else {
        return HashMap::new();
    };
    lines
        .map(|line| line.split(',').collect::<Vec<_>>())
        .filter(|f| f.len() == columns.len() && f[px] == "tcpvs" && NAMES.contains(&f[sv]))
        .map(|f| {
            let state = match (f[status], f[check]) {
                ("UP", "L4OK") => "UP".to_string(),
                ("UP", other) => format!("UP (check {other})"),
                (other, _) => other.to_string(),
            };
            (f[sv].to_string(), state)
        })
        .collect()
}

// ---------------------------------------------------------------- servers that read PROXY

/// A server that reads the PROXY protocol itself, as servers behind a pool with `send_proxy`
/// do. Each connection must start with a version 2 header; the answer's body is that header
/// in hex and the request line, so the test compares the header byte for byte with the one it
/// expects. Its parsing is its own (neither the switch's nor the `ppp` crate's).
struct ProxyReader {
    addr: SocketAddr,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for ProxyReader {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn proxy_reader() -> ProxyReader {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let task = tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            tokio::spawn(answer_proxied(stream, addr));
        }
    });
    ProxyReader { addr, task }
}

/// Reads one connection's PROXY header and request head, answers, and closes (a `send_proxy`
/// connection carries one request).
async fn answer_proxied(mut stream: TcpStream, me: SocketAddr) {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    let answer = loop {
        if let Some(answer) = proxied_answer(&buf, me) {
            break answer;
        }
        if buf.len() > 65536 {
            break http_answer(
                400,
                me,
                "no complete PROXY header and request head in 64 KiB",
            );
        }
        match tokio::time::timeout(PATIENCE, stream.read(&mut chunk)).await {
            Ok(Ok(n)) if n > 0 => buf.extend_from_slice(&chunk[..n]),
            _ => return,
        }
    };
    let _ = stream.write_all(&answer).await;
}

const V2_SIGNATURE: &[u8; 12] = b"\r\n\r\n\0\r\nQUIT\n";

/// The answer to what a connection sent so far, or `None` while it is incomplete.
fn proxied_answer(buf: &[u8], me: SocketAddr) -> Option<Vec<u8>> {
    if buf.len() >= V2_SIGNATURE.len() && !buf.starts_with(V2_SIGNATURE) {
        let start = String::from_utf8_lossy(&buf[..buf.len().min(40)]).into_owned();
        return Some(http_answer(
            400,
            me,
            &format!("no PROXY v2 header: {start:?}"),
        ));
    }
    if buf.len() < 16 {
        return None;
    }
    let header_len = 16 + usize::from(u16::from_be_bytes([buf[14], buf[15]]));
    let rest = buf.get(header_len..)?;
    rest.windows(4).position(|w| w == b"\r\n\r\n")?;
    let line_end = rest.windows(2).position(|w| w == b"\r\n")?;
    let body = format!(
        "{} {}\n",
        hex(&buf[..header_len]),
        String::from_utf8_lossy(&rest[..line_end])
    );
    Some(http_answer(200, me, &body))
}

fn http_answer(status: u16, me: SocketAddr, body: &str) -> Vec<u8> {
    format!(
        "HTTP/1.1 {status} X\r\nContent-Length: {}\r\nX-Served-By: {me}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The version 2 header (PROXY command, TCP over IPv4) naming `client` connected to
/// `destination`, as proxy-protocol.txt lays it out.
fn v2_header(client: SocketAddr, destination: SocketAddr) -> Vec<u8> {
    let (SocketAddr::V4(c), SocketAddr::V4(d)) = (client, destination) else {
        panic!("IPv4 only here");
    };
    let mut header = V2_SIGNATURE.to_vec();
    header.extend_from_slice(&[0x21, 0x11, 0x00, 0x0c]);
    header.extend_from_slice(&c.ip().octets());
    header.extend_from_slice(&d.ip().octets());
    header.extend_from_slice(&c.port().to_be_bytes());
    header.extend_from_slice(&d.port().to_be_bytes());
    header
}

// ---------------------------------------------------------------- the tcpvs instances

/// One rule file for both instances, as every instance of a cluster has the same. Its
/// listeners and admin endpoints are on port 0, so both processes can run it on one machine.
/// `balance_factor = 0`: placement depends on the file alone; with a bound, a key spills past
/// a server loaded with *this instance's* requests (README.md), which this test does not claim
/// to agree. Pool `xff` keys on the URI, as the test servers answer `/headers` and `/hold`
/// whatever the query; pool `pp` on the path.
fn rules(xff: &[Backend], pp: &[ProxyReader]) -> String {
    let list = |addrs: Vec<SocketAddr>| {
        addrs
            .iter()
            .map(|a| format!("{{ addr = \"{a}\" }}"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let xff = list(xff.iter().map(|b| b.addr).collect());
    let pp = list(pp.iter().map(|p| p.addr).collect());
    format!(
        r#"[admin]
listen = "127.0.0.1:0"

[virtual.web]
listen = "127.0.0.1:0"
proxy_protocol = true
default_pool = "xff"

[[virtual.web.rule]]
path = "^/pp/"
pool = "pp"

[pool.xff]
scheduler = "hash"
key = "uri"
balance_factor = 0
servers = [{xff}]

[pool.pp]
scheduler = "hash"
key = "path"
balance_factor = 0
send_proxy = "v2"
servers = [{pp}]
"#
    )
}

struct Instance {
    process: Process,
    addr: SocketAddr,
    admin: SocketAddr,
}

/// Starts `tcpvs run -c RULES`, reads its addresses from its log, and from then on forwards
/// its log lines, tagged with `index`, to `logs`.
async fn start_instance(
    rules: &Path,
    index: usize,
    logs: &tokio::sync::mpsc::UnboundedSender<(usize, String)>,
) -> Instance {
    let rules = rules.to_owned();
    let (mut process, addr, admin) = tokio::task::spawn_blocking(move || {
        let process = Process::start(&["run".as_ref(), "-c".as_ref(), rules.as_os_str()]);
        let (addr, _) = process.address_after("listening on ");
        let (admin, _) = process.address_after("admin endpoint on ");
        (process, addr, admin)
    })
    .await
    .unwrap();
    let log = std::mem::replace(&mut process.log, std::sync::mpsc::channel().1);
    let logs = logs.clone();
    // Ends when the process's stderr does (its exit, or its kill when dropped).
    std::thread::spawn(move || {
        for line in log.iter() {
            if logs.send((index, line)).is_err() {
                return;
            }
        }
    });
    Instance {
        process,
        addr,
        admin,
    }
}

/// The log lines of both instances as they come.
struct Logs {
    incoming: tokio::sync::mpsc::UnboundedReceiver<(usize, String)>,
    lines: Vec<(usize, String)>,
}

/// An access line: which instance wrote it, and what it says.
#[derive(Debug)]
struct Access {
    instance: usize,
    status: u16,
    pool: String,
    server: String,
}

impl Logs {
    /// The access line of the HTTP/1.1 `request` ("METHOD target") from `client`, in
    /// whichever instance's log it is. A connection reaches one instance, and its line is
    /// written right after its response: it is waited for, up to [`LOG_PATIENCE`].
    async fn access(&mut self, client: SocketAddr, request: &str) -> Access {
        let needle = format!(" INFO web {client} \"{request} HTTP/1.1\" ");
        let deadline = Instant::now() + LOG_PATIENCE;
        let mut next = 0;
        loop {
            if let Some((instance, line)) = self.lines[next..]
                .iter()
                .find(|(_, line)| line.contains(&needle))
            {
                let after = &line[line.find(&needle).unwrap() + needle.len()..];
                let fields: Vec<&str> = after.split(' ').collect();
                let (pool, server) = fields
                    .get(2)
                    .and_then(|f| f.split_once('/'))
                    .unwrap_or_else(|| panic!("an access line without pool/server: {line}"));
                return Access {
                    instance: *instance,
                    status: fields[0].parse().unwrap(),
                    pool: pool.to_string(),
                    server: server.to_string(),
                };
            }
            next = self.lines.len();
            let left = deadline.saturating_duration_since(Instant::now());
            match tokio::time::timeout(left, self.incoming.recv()).await {
                Ok(Some(line)) => self.lines.push(line),
                Ok(None) => panic!("both instances' logs ended without {needle:?}"),
                Err(_) => panic!(
                    "no access line {needle:?} in either instance's log within {LOG_PATIENCE:?} \
                     (the client's own address and port are expected): {:#?}",
                    self.lines
                ),
            }
        }
    }
}

/// The instance's `/stats` document.
async fn stats(admin: SocketAddr) -> Value {
    let mut client = Client::connect(admin).await;
    let response = client.get_local("/stats").await;
    assert_eq!(response.status, 200, "{}", response.text());
    serde_json::from_slice(&response.body).unwrap()
}

/// Waits until the instance's `/stats` satisfy `reached`; panics with `what` after [`PATIENCE`].
async fn wait_for_stats(admin: SocketAddr, what: &str, reached: impl Fn(&Value) -> bool) {
    let deadline = Instant::now() + PATIENCE;
    loop {
        let stats = stats(admin).await;
        if reached(&stats) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "the instance at {admin} never reached `{what}` within {PATIENCE:?}: {stats}"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Requests in flight at the instance, all pools.
fn in_flight(stats: &Value) -> u64 {
    stats["pools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|pool| pool["active"].as_u64().unwrap())
        .sum()
}

/// Requests the instance sent each server, as `pool/server`, servers without any left out.
fn requests_per_server(stats: &Value) -> HashMap<String, u64> {
    let mut counts = HashMap::new();
    for pool in stats["pools"].as_array().unwrap() {
        for server in pool["servers"].as_array().unwrap() {
            let n = server["requests"].as_u64().unwrap();
            if n > 0 {
                let name = format!(
                    "{}/{}",
                    pool["name"].as_str().unwrap(),
                    server["addr"].as_str().unwrap()
                );
                counts.insert(name, n);
            }
        }
    }
    counts
}

// ---------------------------------------------------------------- the cluster

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Pool {
    /// Servers that take the client from X-Forwarded-For.
    Xff,
    /// Servers that read a PROXY header themselves (`send_proxy = "v2"`).
    Pp,
}

impl Pool {
    fn name(self) -> &'static str {
        match self {
            Pool::Xff => "xff",
            Pool::Pp => "pp",
        }
    }

    fn target(self, key: usize) -> String {
        match self {
            Pool::Xff => format!("/headers?key={key}"),
            Pool::Pp => format!("/pp/key{key}"),
        }
    }
}

/// HAProxy in front of two tcpvs instances in front of two pools of servers. Fields drop in
/// order: HAProxy and the instances are killed before the servers stop and the folder goes.
struct Cluster {
    haproxy: HaProxy,
    front: SocketAddr,
    instances: Vec<Instance>,
    logs: Logs,
    xff: Vec<Backend>,
    _pp: Vec<ProxyReader>,
    clients: u32,
    _scratch: Scratch,
}

impl Cluster {
    /// Starts everything and waits until HAProxy's checks passed for both instances.
    async fn start(test: &str) -> Cluster {
        // Before anything starts: without HAProxy the test fails at once, saying why.
        let haproxy = haproxy_binary();
        let scratch = Scratch::new(test);
        let mut xff = Vec::new();
        let mut pp = Vec::new();
        for _ in 0..SERVERS {
            xff.push(backend().await);
            pp.push(proxy_reader().await);
        }
        let file = scratch.file("rules.toml", &rules(&xff, &pp));
        let (tx, incoming) = tokio::sync::mpsc::unbounded_channel();
        let mut instances = Vec::new();
        for index in 0..NAMES.len() {
            instances.push(start_instance(&file, index, &tx).await);
        }
        let addrs: Vec<SocketAddr> = instances.iter().map(|i| i.addr).collect();
        let (mut haproxy, front) = HaProxy::start(&haproxy, &scratch.0, &addrs);
        haproxy.wait_for(&[("a", "UP"), ("b", "UP")]).await;
        Cluster {
            haproxy,
            front,
            instances,
            logs: Logs {
                incoming,
                lines: Vec::new(),
            },
            xff,
            _pp: pp,
            clients: 0,
            _scratch: scratch,
        }
    }

    /// A new connection to HAProxy from a loopback address no other client of the test had:
    /// 127.0.0.2, 127.0.0.3, ... (never 127.0.0.1, the address of HAProxy's and tcpvs's own
    /// connections).
    async fn client(&mut self) -> Client {
        let n = self.clients;
        self.clients += 1;
        let source = Ipv4Addr::new(127, 0, (n / 200) as u8, (2 + n % 200) as u8);
        Client::connect_from(IpAddr::V4(source), self.front).await
    }

    /// One request for `key` of `pool`, on a new connection from a new client address through
    /// HAProxy. Checks that the server saw that client (X-Forwarded-For, or the PROXY header
    /// byte for byte) and that the instance's access line names the client and the server
    /// that answered; returns that server and the instance that placed the request.
    async fn place(&mut self, pool: Pool, key: usize) -> (String, usize) {
        let mut client = self.client().await;
        let me = client.stream.local_addr().unwrap();
        let target = pool.target(key);
        client
            .send(format!("GET {target} HTTP/1.1\r\nHost: test\r\n\r\n").as_bytes())
            .await;
        let response = client.try_response(false).await.unwrap_or_else(|| {
            panic!("{target} from {me}: the connection closed without a response")
        });
        assert_eq!(
            response.status,
            200,
            "{target} from {me}: {}",
            response.text()
        );
        match pool {
            Pool::Xff => {
                let text = response.text();
                let forwarded: Vec<&str> = text
                    .lines()
                    .filter_map(|l| l.strip_prefix("X-Forwarded-For: "))
                    .map(str::trim)
                    .collect();
                assert_eq!(
                    forwarded,
                    vec![me.ip().to_string()],
                    "{target} from {me}: the server should see the client alone: {text}"
                );
            }
            Pool::Pp => assert_eq!(
                response.text(),
                format!(
                    "{} GET {target} HTTP/1.1\n",
                    hex(&v2_header(me, self.front))
                ),
                "{target} from {me}: the PROXY header should name the client and HAProxy's \
                 address (expected {}, the server read what precedes the request line)",
                hex(&v2_header(me, self.front))
            ),
        }
        let server = response.served_by();
        let access = self.logs.access(me, &format!("GET {target}")).await;
        assert_eq!(
            (access.status, access.pool.as_str(), access.server.as_str()),
            (200, pool.name(), server.as_str()),
            "{target} from {me}: {access:?}"
        );
        (server, access.instance)
    }
}

// ---------------------------------------------------------------- the tests

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn servers_see_the_real_clients_and_hash_placement_agrees_across_instances() {
    let mut cluster = Cluster::start("scale_out_agree").await;
    // Requests each instance's log showed, per `pool/server`.
    let mut logged: Vec<HashMap<String, u64>> = vec![HashMap::new(); NAMES.len()];
    for pool in [Pool::Xff, Pool::Pp] {
        let mut homes = BTreeSet::new();
        for key in 0..KEYS {
            let mut home: Option<String> = None;
            let mut served = [0usize; 2];
            // A connection per request: HAProxy's roundrobin alternates the instances, so two
            // in a row normally reach both; up to 8 leave room for any order it may take.
            for _ in 0..8 {
                let (server, instance) = cluster.place(pool, key).await;
                *logged[instance]
                    .entry(format!("{}/{server}", pool.name()))
                    .or_default() += 1;
                served[instance] += 1;
                match &home {
                    None => home = Some(server),
                    Some(home) => assert_eq!(
                        &server,
                        home,
                        "pool {} key {key}: instance {} placed it on another server than before",
                        pool.name(),
                        NAMES[instance]
                    ),
                }
                if served.iter().all(|&n| n > 0) {
                    break;
                }
            }
            assert!(
                served.iter().all(|&n| n > 0),
                "pool {} key {key}: served {served:?} times by instances {NAMES:?}: both \
                 must serve it for their placements to be compared",
                pool.name()
            );
            homes.extend(home);
        }
        // Not the agreement of a module that sends every key to the same server.
        assert!(
            homes.len() >= 2,
            "pool {}: all {KEYS} keys on {homes:?}",
            pool.name()
        );
    }
    // Each instance counted, server by server, exactly the requests its log showed.
    for (instance, want) in cluster.instances.iter().zip(&logged) {
        wait_for_stats(
            instance.admin,
            &format!("requests per server {want:?}"),
            |stats| requests_per_server(stats) == *want,
        )
        .await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_instance_costs_only_its_own_requests_in_flight() {
    let mut cluster = Cluster::start("scale_out_kill").await;
    // Where each key lives while both instances serve.
    let mut homes = HashMap::new();
    for pool in [Pool::Xff, Pool::Pp] {
        for key in 0..KEYS {
            let (server, _) = cluster.place(pool, key).await;
            homes.insert((pool, key), server);
        }
    }
    let admins: Vec<SocketAddr> = cluster.instances.iter().map(|i| i.admin).collect();
    for &admin in &admins {
        wait_for_stats(admin, "no request in flight", |s| in_flight(s) == 0).await;
    }

    // Requests held at the servers until each instance has two in flight. Which instance has
    // a request: the one whose /stats count one more in flight once the server holds it.
    let base: usize = cluster.xff.iter().map(Backend::requests).sum();
    let mut held: Vec<(Client, usize)> = Vec::new();
    let mut counts = [0u64; 2];
    for n in 0..16 {
        if counts.iter().all(|&c| c >= 2) {
            break;
        }
        let mut client = cluster.client().await;
        client
            .send(format!("GET /hold?n={n} HTTP/1.1\r\nHost: test\r\n\r\n").as_bytes())
            .await;
        let deadline = Instant::now() + PATIENCE;
        let now = loop {
            let at_servers: usize = cluster.xff.iter().map(Backend::requests).sum();
            let mut now = [0u64; 2];
            for (count, &admin) in now.iter_mut().zip(&admins) {
                *count = in_flight(&stats(admin).await);
            }
            if at_servers == base + held.len() + 1
                && now.iter().sum::<u64>() == held.len() as u64 + 1
            {
                break now;
            }
            assert!(
                Instant::now() < deadline,
                "request {n} not held: {at_servers} requests at the servers (base {base}), \
                 in flight {now:?}"
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        };
        let instance = (0..2)
            .find(|&i| now[i] == counts[i] + 1)
            .unwrap_or_else(|| panic!("in flight {now:?} after {counts:?}"));
        counts = now;
        held.push((client, instance));
    }
    assert!(
        counts.iter().all(|&c| c >= 2),
        "requests in flight per instance: {counts:?}"
    );

    // Instance a dies at once: no goodbye to anyone.
    signal(&cluster.instances[0].process, rustix::process::Signal::KILL);
    // Its requests in flight are lost: each client sees its connection close, no response.
    for (client, _) in held.iter_mut().filter(|(_, i)| *i == 0) {
        assert!(
            client.try_response(false).await.is_none(),
            "a request held on the killed instance got a response"
        );
    }
    // HAProxy's checks take it out.
    cluster
        .haproxy
        .wait_for(&[("a", "DOWN"), ("b", "UP")])
        .await;

    // The servers answer what they hold: the survivor's requests complete, byte for byte, and
    // their connections go on.
    for server in &cluster.xff {
        server.release(16);
    }
    for (index, (client, _)) in held.iter_mut().filter(|(_, i)| *i == 1).enumerate() {
        let response = client.response(false).await;
        assert_eq!(
            (response.status, response.body.as_slice()),
            (200, &b"0123456789"[..]),
            "a request held on the survivor"
        );
        let n = 300_000 + index;
        let response = client.get(&format!("/bytes/{n}")).await;
        assert_eq!(response.status, 200);
        assert_eq!(
            sha256_hex(&response.body),
            sha256_hex(&pattern(n, n as u64)),
            "{n} bytes after a held request on the survivor"
        );
    }

    // Every new connection succeeds, through the survivor, each key on the server it had.
    for pool in [Pool::Xff, Pool::Pp] {
        for key in 0..KEYS {
            for _ in 0..2 {
                let (server, instance) = cluster.place(pool, key).await;
                assert_eq!(instance, 1, "a new connection reached the killed instance");
                assert_eq!(
                    server,
                    homes[&(pool, key)],
                    "pool {} key {key} moved when the other instance died",
                    pool.name()
                );
            }
        }
    }
}
