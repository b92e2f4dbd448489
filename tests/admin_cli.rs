//! The admin verbs of the command line (`tcpvs list`, `set-weight`, `set-state`, `reload`), the
//! binary run as an operator runs it, against a fake admin endpoint that the test runs itself:
//! a std `TcpListener` thread that records each request and answers a canned one. What is
//! checked: the table and the JSON printed, the exact request sent (method, path, token, body),
//! the messages and exit codes of the failures (token refused, nothing listening, a word clap
//! refuses); and the verbs driving a running `tcpvs run` end to end. The endpoint's own tests
//! are in tests/admin.rs.

mod common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener};
use std::path::Path;
use std::process::{Command, Output};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

/// A `/stats` document as notes/admin-spec.md describes it: two pools, a server up, one down
/// by its checks, a backup, one drained by the admin with an IPv6 address.
const STATS: &str = r#"{
  "version": "0.1.0",
  "generation": 1,
  "uptime_s": 12.5,
  "clients": 3,
  "services": [
    {"name": "web", "listen": "127.0.0.1:8080", "connections": 40, "open": 3, "refused": 0,
     "requests": 1234, "local_errors": 2,
     "responses": {"1xx": 0, "2xx": 1230, "3xx": 0, "4xx": 2, "5xx": 2},
     "latency_ms": {"p50": 0.41, "p90": 0.9, "p99": 2.1},
     "rate": {"requests": 12.5, "connections": 0.4}},
    {"name": "api", "listen": "[::1]:8443", "connections": 7, "open": 0, "refused": 1,
     "requests": 19, "local_errors": 0,
     "responses": {"1xx": 0, "2xx": 19, "3xx": 0, "4xx": 0, "5xx": 0},
     "latency_ms": null, "rate": {"requests": 0.0, "connections": 0.0}}
  ],
  "pools": [
    {"name": "static", "scheduler": "wlc", "requests": 600, "active": 0, "queued": 0,
     "servers": [
       {"addr": "127.0.0.1:9001", "state": "up", "reason": "configured", "since_s": 12.0,
        "backup": false, "offered": true, "weight": 1, "weight_configured": 1,
        "weight_effective": 1, "max_conns": 0, "active": 0, "idle": 2, "connections": 10,
        "requests": 600, "failures": 0, "connect_errors": 0, "response_errors": 0,
        "timeouts": 0, "retries": 0,
        "responses": {"1xx": 0, "2xx": 600, "3xx": 0, "4xx": 0, "5xx": 0},
        "bytes_in": 1234, "bytes_out": 90112,
        "latency_ms": {"p50": 0.4, "p90": 0.9, "p99": 2.1},
        "rate": {"requests": 12.5, "bytes_out": 1234.0},
        "check": {"kind": "http", "last": "passed", "detail": "", "age_s": 1.2,
                  "successes": 2, "failures": 0}},
       {"addr": "127.0.0.1:9002", "state": "down", "reason": "check failed", "since_s": 75.0,
        "backup": false, "offered": false, "weight": 2, "weight_configured": 2,
        "weight_effective": 2, "max_conns": 0, "active": 0, "idle": 0, "connections": 0,
        "requests": 0, "failures": 3, "connect_errors": 3, "response_errors": 0,
        "timeouts": 0, "retries": 0,
        "responses": {"1xx": 0, "2xx": 0, "3xx": 0, "4xx": 0, "5xx": 0},
        "bytes_in": 0, "bytes_out": 0, "latency_ms": null,
        "rate": {"requests": 0.0, "bytes_out": 0.0},
        "check": {"kind": "http", "last": "failed", "detail": "connection refused",
                  "age_s": 0.5, "successes": 0, "failures": 3}},
       {"addr": "127.0.0.1:9003", "state": "up", "reason": "configured", "since_s": 12.0,
        "backup": true, "offered": false, "weight": 1, "weight_configured": 1,
        "weight_effective": 1, "max_conns": 0, "active": 0, "idle": 0, "connections": 0,
        "requests": 0, "failures": 0, "connect_errors": 0, "response_errors": 0,
        "timeouts": 0, "retries": 0,
        "responses": {"1xx": 0, "2xx": 0, "3xx": 0, "4xx": 0, "5xx": 0},
        "bytes_in": 0, "bytes_out": 0, "latency_ms": null,
        "rate": {"requests": 0.0, "bytes_out": 0.0},
        "check": {"kind": "none", "last": null, "detail": "", "age_s": null,
                  "successes": 0, "failures": 0}}
     ]},
    {"name": "cgi", "scheduler": "rr", "requests": 5, "active": 1, "queued": 0,
     "servers": [
       {"addr": "[::1]:9021", "state": "drain", "reason": "admin", "since_s": 3723.0,
        "backup": false, "offered": false, "weight": 3, "weight_configured": 1,
        "weight_effective": 3, "max_conns": 10, "active": 1, "idle": 0, "connections": 5,
        "requests": 5, "failures": 0, "connect_errors": 0, "response_errors": 0,
        "timeouts": 0, "retries": 0,
        "responses": {"1xx": 0, "2xx": 4, "3xx": 0, "4xx": 0, "5xx": 0},
        "bytes_in": 3221225472, "bytes_out": 5242880,
        "latency_ms": {"p50": 10.0, "p90": 20.0, "p99": 30.0},
        "rate": {"requests": 0.3, "bytes_out": 100.0},
        "check": {"kind": "tcp", "last": "passed", "detail": "", "age_s": 2.0,
                  "successes": 9, "failures": 0}}
     ]}
  ]
}"#;

/// The server object the fake answers to a change.
const SERVER: &str = r#"{"addr": "127.0.0.1:9001", "state": "up", "reason": "admin",
  "since_s": 0.0, "backup": false, "offered": true, "weight": 5, "weight_configured": 1,
  "weight_effective": 5, "max_conns": 0, "active": 0, "idle": 2, "connections": 10,
  "requests": 600, "failures": 0, "connect_errors": 0, "response_errors": 0, "timeouts": 0,
  "retries": 0, "responses": {"1xx": 0, "2xx": 600, "3xx": 0, "4xx": 0, "5xx": 0},
  "bytes_in": 1234, "bytes_out": 90112, "latency_ms": null,
  "rate": {"requests": 0.0, "bytes_out": 0.0},
  "check": {"kind": "none", "last": null, "detail": "", "age_s": null, "successes": 0,
  "failures": 0}}"#;

/// A request as the fake endpoint received it.
#[derive(Debug, Clone)]
struct Seen {
    /// The request line and fields, as sent (CRLF included).
    head: String,
    body: Vec<u8>,
}

impl Seen {
    fn request_line(&self) -> &str {
        self.head.split("\r\n").next().unwrap()
    }

    /// The values of the field `name` (case-insensitive).
    fn field(&self, name: &str) -> Vec<String> {
        self.head
            .split("\r\n")
            .skip(1)
            .filter_map(|line| line.split_once(':'))
            .filter(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.trim().to_string())
            .collect()
    }
}

/// A fake admin endpoint: answers every request with `status` and `body` (JSON,
/// Content-Length, `Connection: close`) and keeps what it received.
struct Fake {
    addr: SocketAddr,
    seen: Arc<Mutex<Vec<Seen>>>,
    _thread: JoinHandle<()>,
}

impl Fake {
    fn start(status: u16, body: &'static str) -> Fake {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let seen: Arc<Mutex<Vec<Seen>>> = Arc::default();
        let record = Arc::clone(&seen);
        let thread = std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(mut stream) = stream else { return };
                stream.set_read_timeout(Some(common::PATIENCE)).unwrap();
                let Some(request) = read_request(&mut stream) else {
                    continue;
                };
                record.lock().unwrap().push(request);
                let reason = match status {
                    200 => "OK",
                    401 => "Unauthorized",
                    404 => "Not Found",
                    501 => "Not Implemented",
                    _ => "Whatever",
                };
                let answer = format!(
                    "HTTP/1.1 {status} {reason}\r\nContent-Type: application/json\r\n\
                     Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = stream.write_all(answer.as_bytes());
            }
        });
        Fake {
            addr,
            seen,
            _thread: thread,
        }
    }

    fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }
}

/// Reads a request head and its Content-Length body.
fn read_request(stream: &mut std::net::TcpStream) -> Option<Seen> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    let head_end = loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
        let n = stream.read(&mut chunk).ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
    };
    let head = String::from_utf8(buf[..head_end].to_vec()).unwrap();
    let mut seen = Seen {
        head,
        body: Vec::new(),
    };
    let length: usize = seen
        .field("content-length")
        .first()
        .map_or(0, |v| v.parse().unwrap());
    while buf.len() < head_end + length {
        let n = stream.read(&mut chunk).ok()?;
        if n == 0 {
            break;
        }
        buf.extend_from_slice(&chunk[..n]);
    }
    seen.body = buf[head_end..].to_vec();
    Some(seen)
}

/// Runs `tcpvs ARGS` with `TCPVS_ADMIN_TOKEN` set to `token` (or unset) and waits for it.
fn tcpvs(args: &[&str], token: Option<&str>) -> Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_tcpvs"));
    command.args(args).env_remove("TCPVS_ADMIN_TOKEN");
    if let Some(token) = token {
        command.env("TCPVS_ADMIN_TOKEN", token);
    }
    command.output().unwrap()
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8(bytes.to_vec()).unwrap()
}

#[test]
fn list_prints_the_ipvsadm_table() {
    let fake = Fake::start(200, STATS);
    let out = tcpvs(&["list", "--admin", &fake.addr.to_string()], None);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(text(&out.stderr), "");
    let expected = "\
tcpvs 0.1.0, generation 1, up 12s, 3 clients
Service  LocalAddress:Port  Conns  Open  Requests  Req/s  Errors
web      127.0.0.1:8080     40     3     1234      12.5   2
api      [::1]:8443         7      0     19        0.0    0

Pool static (wlc): requests 600, active 0, queued 0
  -> RemoteAddress:Port  State  Weight  Active  Idle  Requests  Req/s  BytesIn  BytesOut  Fails
  -> 127.0.0.1:9001      up     1       0       2     600       12.5   1.2K     88.0K     0
  -> 127.0.0.1:9002      down   2       0       0     0         0.0    0        0         3      for 1m15s: check failed; check: connection refused
  -> 127.0.0.1:9003      up     1       0       0     0         0.0    0        0         0      backup

Pool cgi (rr): requests 5, active 1, queued 0
  -> RemoteAddress:Port  State  Weight  Active  Idle  Requests  Req/s  BytesIn  BytesOut  Fails
  -> [::1]:9021          drain  3       1       0     5         0.3    3.0G     5.0M      0      for 1h02m: admin
";
    let stdout = text(&out.stdout);
    // The server lines first, so that a difference there is named plainly.
    let servers = |t: &str| -> Vec<String> {
        t.lines()
            .filter(|l| l.starts_with("  -> ") && !l.contains("RemoteAddress"))
            .map(str::to_string)
            .collect()
    };
    assert_eq!(servers(&stdout), servers(expected));
    assert_eq!(stdout, expected);

    let seen = fake.seen();
    assert_eq!(seen.len(), 1);
    assert_eq!(seen[0].request_line(), "GET /stats HTTP/1.1");
    assert_eq!(seen[0].field("connection"), ["close"]);
    assert_eq!(seen[0].field("host"), [fake.addr.to_string()]);
    assert_eq!(seen[0].field("authorization"), Vec::<String>::new());
}

#[test]
fn list_json_prints_the_stats_document_as_received() {
    let fake = Fake::start(200, STATS);
    let out = tcpvs(&["list", "--json", "--admin", &fake.addr.to_string()], None);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let printed: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let canned: serde_json::Value = serde_json::from_str(STATS).unwrap();
    assert_eq!(printed, canned);
    // The same text as received but for the blanks between tokens: the keys in the order the
    // endpoint sent them, and every number as written (STATS writes each in its shortest form).
    let stdout = text(&out.stdout);
    assert_eq!(without_blanks(&stdout), without_blanks(STATS));
    // Pretty: indented by two spaces, `"key": value`, a line each, a newline at the end.
    assert!(
        stdout.starts_with("{\n  \"version\": \"0.1.0\",\n  \"generation\": 1,\n"),
        "{stdout}"
    );
    assert!(
        stdout.contains("\n      \"rate\": {\n        \"requests\": 12.5,\n"),
        "{stdout}"
    );
    assert!(stdout.ends_with("\n  ]\n}\n"), "{stdout}");
}

/// JSON text without the whitespace between its tokens (strings kept as they are).
fn without_blanks(json: &str) -> String {
    let mut out = String::with_capacity(json.len());
    let (mut in_string, mut escaped) = (false, false);
    for c in json.chars() {
        if in_string {
            in_string = escaped || c != '"';
            escaped = !escaped && c == '\\';
        } else if c == '"' {
            in_string = true;
        } else if c.is_whitespace() {
            continue;
        }
        out.push(c);
    }
    out
}

#[test]
fn set_weight_sends_the_change_with_the_token_and_prints_the_server() {
    let fake = Fake::start(200, SERVER);
    let out = tcpvs(
        &[
            "set-weight",
            "static",
            "127.0.0.1:9001",
            "5",
            "--admin",
            &fake.addr.to_string(),
        ],
        Some("tok-123"),
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(
        text(&out.stdout),
        "static 127.0.0.1:9001: up, weight 5 (configured 1), active 0, idle 2, requests 600\n"
    );
    let seen = fake.seen();
    assert_eq!(seen.len(), 1);
    assert_eq!(
        seen[0].request_line(),
        "PUT /pools/static/servers/127.0.0.1:9001 HTTP/1.1"
    );
    assert_eq!(seen[0].body, br#"{"weight":5}"#);
    assert_eq!(seen[0].field("authorization"), ["Bearer tok-123"]);
    assert_eq!(seen[0].field("content-type"), ["application/json"]);
    assert_eq!(seen[0].field("content-length"), ["12"]);
}

#[test]
fn set_state_finds_the_endpoint_and_its_token_in_the_rule_file_or_a_token_file() {
    let fake = Fake::start(200, SERVER);
    let scratch = common::Scratch::new("admin-cli-rules");
    let rules = scratch.file(
        "rules.toml",
        &format!(
            "[admin]\nlisten = \"{}\"\ntoken = \"from-the-file\"\n\n[virtual.web]\n\
             listen = \"127.0.0.1:0\"\ndefault_pool = \"static\"\n\n[pool.static]\n\
             servers = [{{ addr = \"127.0.0.1:9001\" }}]\n",
            fake.addr
        ),
    );
    let token_file = scratch.file("token", "  from-token-file  \nsecond line\n");
    let rules = path(&rules);
    let token_file = path(&token_file);

    let out = tcpvs(
        &[
            "set-state",
            "static",
            "127.0.0.1:9001",
            "drain",
            "-c",
            rules,
        ],
        None,
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    // The environment's token comes before the rule file's, a token file before both.
    let out = tcpvs(
        &[
            "set-state",
            "static",
            "127.0.0.1:9001",
            "maint",
            "-c",
            rules,
        ],
        Some("from-env"),
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let out = tcpvs(
        &[
            "set-state",
            "static",
            "127.0.0.1:9001",
            "ready",
            "-c",
            rules,
            "--token-file",
            token_file,
        ],
        Some("from-env"),
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));

    let seen = fake.seen();
    let sent: Vec<(&str, &[u8], Vec<String>)> = seen
        .iter()
        .map(|s| {
            (
                s.request_line(),
                s.body.as_slice(),
                s.field("authorization"),
            )
        })
        .collect();
    let put = "PUT /pools/static/servers/127.0.0.1:9001 HTTP/1.1";
    assert_eq!(
        sent,
        [
            (
                put,
                &br#"{"state":"drain"}"#[..],
                vec!["Bearer from-the-file".to_string()]
            ),
            (
                put,
                &br#"{"state":"maint"}"#[..],
                vec!["Bearer from-env".to_string()]
            ),
            (
                put,
                &br#"{"state":"ready"}"#[..],
                vec!["Bearer from-token-file".to_string()]
            ),
        ]
    );
}

#[test]
fn a_refused_token_exits_1_and_says_how_to_give_one() {
    let fake = Fake::start(401, r#"{"error": "a valid token is required"}"#);
    let out = tcpvs(
        &[
            "set-state",
            "static",
            "127.0.0.1:9001",
            "drain",
            "--admin",
            &fake.addr.to_string(),
        ],
        Some("wrong"),
    );
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(text(&out.stdout), "");
    assert_eq!(
        text(&out.stderr),
        "tcpvs: the admin endpoint refused the token: set TCPVS_ADMIN_TOKEN or --token-file\n"
    );
    assert_eq!(fake.seen()[0].field("authorization"), ["Bearer wrong"]);
}

#[test]
fn the_endpoints_own_words_come_with_a_404_and_reload_says_it_is_not_there_yet() {
    let fake = Fake::start(
        404,
        r#"{"error": "pool `static` has no server 127.0.0.1:9009"}"#,
    );
    let out = tcpvs(
        &[
            "set-weight",
            "static",
            "127.0.0.1:9009",
            "0",
            "--admin",
            &fake.addr.to_string(),
        ],
        None,
    );
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        text(&out.stderr),
        "tcpvs: the admin endpoint answered 404 Not Found: pool `static` has no server 127.0.0.1:9009\n"
    );

    let fake = Fake::start(501, r#"{"error": "reload is not available yet"}"#);
    let out = tcpvs(&["reload", "--admin", &fake.addr.to_string()], None);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        text(&out.stderr),
        "tcpvs: this tcpvs does not support reload yet\n"
    );
    let seen = fake.seen();
    assert_eq!(seen[0].request_line(), "POST /reload HTTP/1.1");
    // As JSON, as every change: an endpoint without a token takes no other.
    assert_eq!(seen[0].field("content-type"), ["application/json"]);
    assert_eq!(seen[0].field("content-length"), ["2"]);
    assert_eq!(seen[0].body, b"{}");
}

#[tokio::test]
async fn nothing_listening_exits_1_and_names_the_address_to_check() {
    let dead = common::dead_address().await.to_string();
    for args in [
        vec!["list", "--admin", &dead],
        vec![
            "set-weight",
            "static",
            "127.0.0.1:9001",
            "1",
            "--admin",
            &dead,
        ],
        vec!["reload", "--admin", &dead],
    ] {
        let out = tcpvs(&args, None);
        assert_eq!(out.status.code(), Some(1), "{args:?}");
        assert_eq!(text(&out.stdout), "", "{args:?}");
        assert_eq!(
            text(&out.stderr),
            format!(
                "tcpvs: cannot reach the admin endpoint at {dead}: connection refused - is tcpvs \
                 running with [admin] listen = \"{dead}\"?\n"
            ),
            "{args:?}"
        );
    }
}

#[test]
fn words_clap_refuses_exit_2_and_send_nothing() {
    // A listener nobody accepts on: a connection the command made would wait in its queue.
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    for (args, complaint) in [
        (
            vec![
                "set-state",
                "static",
                "127.0.0.1:9001",
                "sleep",
                "--admin",
                &addr,
            ],
            "invalid value 'sleep'",
        ),
        (
            vec![
                "set-weight",
                "static",
                "127.0.0.1:9001",
                "65536",
                "--admin",
                &addr,
            ],
            "65536 is not in 0..=65535",
        ),
        (
            vec![
                "set-weight",
                "static",
                "127.0.0.1:9001",
                "-1",
                "--admin",
                &addr,
            ],
            "-1",
        ),
        (
            vec!["set-weight", "static", "web1", "1", "--admin", &addr],
            "invalid value 'web1'",
        ),
    ] {
        let out = tcpvs(&args, Some("t"));
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let stderr = text(&out.stderr);
        assert!(stderr.contains(complaint), "{args:?}: {stderr}");
        assert_eq!(text(&out.stdout), "", "{args:?}");
    }
    // The processes have exited: a connection any of them made is in the accept queue now.
    match listener.accept() {
        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
        Err(e) => panic!("accept failed: {e}"),
        Ok((_, peer)) => panic!("a refused command connected anyway (from {peer})"),
    }
}

fn path(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// One request on a connection of its own, with the cookie `cookie` (`NAME=VALUE`) if any.
async fn one_request(web: SocketAddr, path: &str, cookie: Option<&str>) -> common::Response {
    let mut client = common::Client::connect(web).await;
    let cookie = cookie.map_or(String::new(), |c| format!("Cookie: {c}\r\n"));
    client
        .send(format!("GET {path} HTTP/1.1\r\nHost: test\r\n{cookie}\r\n").as_bytes())
        .await;
    let r = client.response(false).await;
    assert_eq!(r.status, 200, "GET {path}: {}", r.text());
    r
}

/// What a drained server must see, checked on the wire: `fresh` clients (no cookie, a
/// connection each) all placed on the servers of `others`, none on `drained`; the client that
/// holds `cookie` (persistent on `drained`) still served by it; `/moved/` served by `moved`
/// when the rules have that rule. `when` names the moment, for the messages.
async fn drained_as_documented(
    web: SocketAddr,
    drained: &common::Backend,
    others: &[&common::Backend],
    cookie: &str,
    moved: Option<&common::Backend>,
    when: &str,
) {
    let before = drained.requests();
    let others: Vec<String> = others.iter().map(|b| b.addr.to_string()).collect();
    for i in 0..12 {
        let r = one_request(web, &format!("/fresh/{i}"), None).await;
        assert!(
            others.contains(&r.served_by()),
            "{when}: a new client went to {}, not to one of {others:?} ({} is drained)",
            r.served_by(),
            drained.addr
        );
    }
    let r = one_request(web, "/persistent", Some(cookie)).await;
    assert_eq!(
        r.served_by(),
        drained.addr.to_string(),
        "{when}: the client persistent on the drained server ({cookie}) was moved"
    );
    if let Some(moved) = moved {
        let r = one_request(web, "/moved/here", None).await;
        assert_eq!(r.served_by(), moved.addr.to_string(), "{when}: /moved/");
    }
    assert_eq!(
        drained.requests(),
        before + 1,
        "{when}: the drained server got a new request besides its persistent client's"
    );
}

/// The server `addr` of pool `pool` in a `/stats` document.
fn server_in(stats: &serde_json::Value, pool: &str, addr: &str) -> serde_json::Value {
    stats["pools"]
        .as_array()
        .and_then(|pools| pools.iter().find(|p| p["name"] == pool))
        .and_then(|p| p["servers"].as_array())
        .and_then(|servers| servers.iter().find(|s| s["addr"] == addr))
        .unwrap_or_else(|| panic!("no server {addr} in pool {pool}: {stats}"))
        .clone()
}

/// The verbs against the real endpoint of a running `tcpvs run`: a weight and a state changed,
/// the table showing them with the requests sent, a missing token refused, a reload taken and
/// broken ones refused. The drain is checked on the wire as the README documents it (no new
/// requests, its persistent clients kept: pool `p` places clients by `cookie`), before the
/// reload, after it (the server's line did not change, so the admin's changes stay, although
/// the pool's servers and rules did), and after two refused reloads (a file with an error, and
/// a file whose new listener cannot be bound, refused after it was read): the rules of
/// generation 2 still route, the drain still holds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_verbs_drive_a_running_switch() {
    let live = common::backend().await;
    let other = common::backend().await;
    let third = common::backend().await;
    let moved = common::backend().await;
    let scratch = common::Scratch::new("cli_end_to_end");
    let head = "[switch]\nworkers = 1\naccess_log = false\n[admin]\nlisten = \"127.0.0.1:0\"\n\
                token = \"end-to-end\"\n[virtual.web]\nlisten = \"127.0.0.1:0\"\n\
                default_pool = \"p\"\n";
    // inner = "rr": while `live` is offered, every other new client goes to it.
    let pool_p = |servers: &[&common::Backend]| {
        let servers: Vec<String> = servers
            .iter()
            .map(|b| format!("{{ addr = \"{}\" }}", b.addr))
            .collect();
        format!(
            "[pool.p]\nscheduler = \"cookie\"\ninner = \"rr\"\nsecret = \"end-to-end\"\n\
             servers = [{}]\n",
            servers.join(", ")
        )
    };
    let rules = scratch.file("rules.toml", &format!("{head}{}", pool_p(&[&live, &other])));
    let switch = common::Process::start(&["run".as_ref(), "-c".as_ref(), rules.as_os_str()]);
    // In the order tcpvs logs them.
    let (web, _) = switch.address_after("listening on ");
    let (admin, _) = switch.address_after("admin endpoint on ");

    // A client persistent on `live`: its first answer from `live` carries the cookie.
    let mut cookie = None;
    for i in 0..4 {
        let r = one_request(web, &format!("/first/{i}"), None).await;
        let set = r
            .header("set-cookie")
            .unwrap_or_else(|| panic!("no Set-Cookie from the cookie module: {:?}", r.headers));
        if r.served_by() == live.addr.to_string() {
            cookie = Some(set.split(';').next().unwrap().trim().to_string());
            break;
        }
    }
    let cookie = cookie.expect("rr placed one of 4 new clients on each server");
    assert!(cookie.starts_with("TCPVS="), "{cookie}");
    let r = one_request(web, "/again", Some(&cookie)).await;
    assert_eq!(r.served_by(), live.addr.to_string(), "the cookie holds");

    let (admin, server) = (admin.to_string(), live.addr.to_string());
    let run = move |args: Vec<String>, token: Option<&'static str>| {
        tokio::task::spawn_blocking(move || {
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            tcpvs(&args, token)
        })
    };
    let verb = |words: &[&str]| -> Vec<String> {
        let mut args: Vec<String> = words.iter().map(|w| w.to_string()).collect();
        args.extend(["--admin".to_string(), admin.clone()]);
        args
    };
    let stats = |out: Output| -> serde_json::Value {
        assert!(out.status.success(), "{}", text(&out.stderr));
        serde_json::from_slice(&out.stdout).unwrap()
    };

    let out = run(verb(&["set-weight", "p", &server, "5"]), Some("end-to-end"))
        .await
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).contains("weight 5 (configured 1)"),
        "{}",
        text(&out.stdout)
    );
    let out = run(
        verb(&["set-state", "p", &server, "drain"]),
        Some("end-to-end"),
    )
    .await
    .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains("drain"), "{}", text(&out.stdout));

    let out = run(verb(&["list"]), None).await.unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    let table = text(&out.stdout);
    let line = table
        .lines()
        .find(|l| l.contains(&server))
        .unwrap_or_else(|| panic!("no line for {server}:\n{table}"));
    let cells: Vec<&str> = line.split_whitespace().collect();
    // -> ADDR State Weight Active Idle Requests ...
    assert_eq!(&cells[1..4], &[server.as_str(), "drain", "5"], "{line}");
    assert_eq!(cells[6], live.requests().to_string(), "requests: {line}");

    // Drained: no new client reaches it, the persistent one does.
    drained_as_documented(web, &live, &[&other], &cookie, None, "drained").await;

    let out = run(verb(&["set-state", "p", &server, "ready"]), None)
        .await
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stderr).contains("token"), "{}", text(&out.stderr));

    // The running switch reads its rule file again, changed: a third server in pool `p` (the
    // pool and its module are built anew over the kept servers) and a rule sending /moved/ to
    // a new pool. `live`'s line is the same: its drain and weight stay.
    let generation_2 = format!(
        "{head}[[virtual.web.rule]]\npath = \"^/moved/\"\npool = \"q\"\n{}\
         [pool.q]\nservers = [{{ addr = \"{}\" }}]\n",
        pool_p(&[&live, &other, &third]),
        moved.addr
    );
    std::fs::write(&rules, &generation_2).unwrap();
    let out = run(verb(&["reload"]), Some("end-to-end")).await.unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    // It names the file the switch read again.
    let canonical = std::fs::canonicalize(&rules).unwrap();
    assert_eq!(
        text(&out.stdout),
        format!("reloaded {}: generation 2\n", canonical.display())
    );
    let out = run(verb(&["list"]), None).await.unwrap();
    assert!(
        text(&out.stdout).contains("generation 2"),
        "{}",
        text(&out.stdout)
    );
    let kept = |stats: &serde_json::Value, when: &str| {
        assert_eq!(stats["generation"], 2, "{when}: {stats}");
        let s = server_in(stats, "p", &server);
        assert_eq!(s["state"], "drain", "{when}: the drain was dropped: {s}");
        assert_eq!(s["weight"], 5, "{when}: the weight set was dropped: {s}");
        assert_eq!(s["weight_configured"], 1, "{when}: {s}");
        assert_eq!(
            server_in(stats, "p", &third.addr.to_string())["state"],
            "up"
        );
    };
    let now = stats(run(verb(&["list", "--json"]), None).await.unwrap());
    kept(&now, "after the reload");
    drained_as_documented(
        web,
        &live,
        &[&other, &third],
        &cookie,
        Some(&moved),
        "after the reload",
    )
    .await;

    // A broken file: exit 1 with its errors, the running rules stay.
    std::fs::write(&rules, "[virtual.web]\nlisten = 3\n").unwrap();
    let out = run(verb(&["reload"]), Some("end-to-end")).await.unwrap();
    assert_eq!(out.status.code(), Some(1));
    let errors = text(&out.stderr);
    assert!(
        errors.contains(&format!("{}:2:", rules.display())),
        "{errors}"
    );
    let now = stats(run(verb(&["list", "--json"]), None).await.unwrap());
    kept(&now, "after a reload refused for an error");
    drained_as_documented(
        web,
        &live,
        &[&other, &third],
        &cookie,
        Some(&moved),
        "after a reload refused for an error",
    )
    .await;

    // A correct file refused late, when its new listener cannot be bound (the test holds the
    // address): it drops the /moved/ rule and `third`, and leaves nothing of it behind.
    let taken = TcpListener::bind("127.0.0.1:0").unwrap();
    let taken_addr = taken.local_addr().unwrap();
    std::fs::write(
        &rules,
        format!(
            "{head}{}[virtual.extra]\nlisten = \"{taken_addr}\"\ndefault_pool = \"p\"\n",
            pool_p(&[&live, &other])
        ),
    )
    .unwrap();
    let out = run(verb(&["reload"]), Some("end-to-end")).await.unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stdout));
    let errors = text(&out.stderr);
    assert!(
        errors.contains(&format!("cannot listen on {taken_addr}")),
        "{errors}"
    );
    let now = stats(run(verb(&["list", "--json"]), None).await.unwrap());
    kept(&now, "after a reload refused at its listener");
    drained_as_documented(
        web,
        &live,
        &[&other, &third],
        &cookie,
        Some(&moved),
        "after a reload refused at its listener",
    )
    .await;
    drop(taken);
    drop(switch);
}

/// `-c FILE` takes the endpoint and the token from FILE's `[admin]` table alone: an error
/// elsewhere in the file (the one a reload is about to be refused for, or a half-done edit)
/// does not stop the verbs; one in `[admin]`, or a TOML syntax error, does, at its
/// FILE:LINE:COL.
#[test]
fn with_c_only_the_admin_table_is_read() {
    let fake = Fake::start(200, STATS);
    let scratch = common::Scratch::new("admin-cli-admin-only");
    let admin = format!(
        "[admin]\nlisten = \"{}\"\ntoken = \"from-the-file\"\n",
        fake.addr
    );
    let broken = scratch.file(
        "broken.toml",
        &format!(
            "{admin}\n[virtual.web]\nlisten = \"127.0.0.1:0\"\ndefault_pool = \"nope\"\n\
             [pool.p]\nservers = [{{ addr = \"not an address\" }}]\nschedular = \"wlc\"\n"
        ),
    );
    let out = tcpvs(&["list", "-c", path(&broken)], None);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(text(&out.stdout).starts_with("tcpvs 0.1.0, generation 1"));
    assert_eq!(
        fake.seen()[0].field("authorization"),
        ["Bearer from-the-file"]
    );

    let syntax = "[virtual.web]\nlisten = \"127.0.0.1:0\"\ndefault_pool = \"p\n";
    let unreadable = scratch.file("syntax.toml", &format!("{admin}{syntax}"));
    let out = tcpvs(&["list", "-c", path(&unreadable)], None);
    assert_eq!(out.status.code(), Some(1));
    let stderr = text(&out.stderr);
    assert!(
        stderr.starts_with(&format!("{}:6:18: ", unreadable.display())),
        "{stderr}"
    );

    let bad_mode = scratch.file(
        "mode.toml",
        "[admin]\nlisten = \"unix:/run/tcpvs/admin.sock\"\nmode = \"0680\"\n",
    );
    let out = tcpvs(
        &[
            "set-weight",
            "p",
            "127.0.0.1:9001",
            "1",
            "-c",
            path(&bad_mode),
        ],
        None,
    );
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        text(&out.stderr),
        format!(
            "{}:3:8: mode \"0680\" is not an octal permission like \"0600\" (owner) or \"0660\" (owner and group)\n",
            bad_mode.display()
        )
    );
    assert_eq!(fake.seen().len(), 1, "nothing sent for the refused ones");
}

/// The verbs over a Unix socket, found by `--admin unix:PATH` or by `-c FILE`; `reload -c`
/// checks that the switch runs that file, and refuses another; the socket goes when tcpvs
/// stops.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_verbs_speak_to_a_unix_socket_and_reload_only_the_file_named() {
    let live = common::backend().await;
    let scratch = common::Scratch::new("cli_unix");
    let rules_text = format!(
        "[switch]\nworkers = 2\naccess_log = false\n[admin]\nlisten = \"unix:admin.sock\"\n\
         [virtual.web]\nlisten = \"127.0.0.1:0\"\ndefault_pool = \"p\"\n\
         [pool.p]\nservers = [{{ addr = \"{}\" }}]\n",
        live.addr
    );
    let rules = scratch.file("rules.toml", &rules_text);
    // Another file, with the same [admin]: the switch does not run it.
    let other = scratch.file(
        "other.toml",
        &rules_text.replace("default_pool = \"p\"", "default_pool = \"nope\""),
    );
    let socket = scratch.0.join("admin.sock");
    let switch = common::Process::start(&["run".as_ref(), "-c".as_ref(), rules.as_os_str()]);
    let (switch, line, _) = common::line_with(switch, "admin endpoint on ").await;
    assert!(
        line.contains(&format!("admin endpoint on unix:{}", socket.display())),
        "{line}"
    );
    let by_socket = format!("unix:{}", socket.display());
    let (rules_arg, other_arg, server) = (
        path(&rules).to_string(),
        path(&other).to_string(),
        live.addr.to_string(),
    );
    let run = move |args: Vec<String>| {
        tokio::task::spawn_blocking(move || {
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            tcpvs(&args, None)
        })
    };
    let words = |w: &[&str]| w.iter().map(|w| w.to_string()).collect::<Vec<_>>();

    let out = run(words(&[
        "set-weight",
        "p",
        &server,
        "4",
        "--admin",
        &by_socket,
    ]))
    .await
    .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).contains("weight 4 (configured 1)"),
        "{}",
        text(&out.stdout)
    );
    let out = run(words(&["list", "-c", &rules_arg])).await.unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    let table = text(&out.stdout);
    assert!(table.contains("generation 1"), "{table}");

    // Another file: refused before anything is sent to reload, and nothing reloaded.
    let out = run(words(&["reload", "-c", &other_arg])).await.unwrap();
    assert_eq!(out.status.code(), Some(1));
    let canonical = std::fs::canonicalize(&rules).unwrap();
    let other_canonical = std::fs::canonicalize(&other).unwrap();
    assert_eq!(
        text(&out.stderr),
        format!(
            "tcpvs: not reloading: the switch at {by_socket} runs {}, not {}; a reload re-reads \
             the switch's own file (use --admin {by_socket} to reload it whatever it is)\n",
            canonical.display(),
            other_canonical.display()
        )
    );
    let out = run(words(&["list", "--json", "--admin", &by_socket]))
        .await
        .unwrap();
    let stats: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(stats["generation"], 1);
    assert_eq!(stats["rule_file"], canonical.display().to_string());

    // The file it runs, named another way (a `..` in the path): reloaded, and named.
    let roundabout = scratch
        .0
        .join("..")
        .join(scratch.0.file_name().unwrap())
        .join("rules.toml");
    let out = run(words(&["reload", "-c", path(&roundabout)]))
        .await
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(
        text(&out.stdout),
        format!("reloaded {}: generation 2\n", canonical.display())
    );

    let (lines, status) = common::stop(switch).await;
    assert!(status.success(), "{lines:?}");
    assert!(
        std::fs::symlink_metadata(&socket).is_err(),
        "removed at exit: {lines:?}"
    );
    let out = run(words(&["list", "--admin", &by_socket])).await.unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        text(&out.stderr),
        format!(
            "tcpvs: cannot reach the admin endpoint at {by_socket}: no such socket - is tcpvs \
             running with [admin] listen = \"{by_socket}\"?\n"
        )
    );
}

/// A connection the endpoint closes before answering (it made room for another, admin/slots.rs)
/// is tried again, a few times; one that answers ends it. Each try sends the whole request.
#[test]
fn a_connection_closed_unanswered_is_tried_again() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let seen: Arc<Mutex<Vec<Seen>>> = Arc::default();
    let record = Arc::clone(&seen);
    // The first two connections are closed unanswered (one before its request is read, one
    // after), the third is answered; then every one is closed unanswered.
    let serving = std::thread::spawn(move || {
        for (n, stream) in listener.incoming().enumerate() {
            let Ok(mut stream) = stream else { return };
            stream.set_read_timeout(Some(common::PATIENCE)).unwrap();
            if n == 0 {
                continue;
            }
            let Some(request) = read_request(&mut stream) else {
                continue;
            };
            record.lock().unwrap().push(request);
            if n == 2 {
                let answer = format!(
                    "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n\
                     Content-Length: {}\r\nConnection: close\r\n\r\n{SERVER}",
                    SERVER.len()
                );
                stream.write_all(answer.as_bytes()).unwrap();
            }
            if n == 7 {
                return;
            }
        }
    });
    let admin = addr.to_string();
    let out = tcpvs(
        &[
            "set-state",
            "static",
            "127.0.0.1:9001",
            "drain",
            "--admin",
            &admin,
        ],
        Some("t"),
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let requests = seen.lock().unwrap().clone();
    assert_eq!(
        requests.len(),
        2,
        "the first connection's request was never read"
    );
    for request in &requests {
        assert_eq!(
            request.request_line(),
            "PUT /pools/static/servers/127.0.0.1:9001 HTTP/1.1"
        );
        assert_eq!(request.body, br#"{"state":"drain"}"#);
    }
    // An endpoint that never answers: five connections, then the error.
    let out = tcpvs(&["reload", "--admin", &admin], Some("t"));
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        text(&out.stderr),
        format!(
            "tcpvs: unexpected answer from the admin endpoint at {admin}: it closed the \
             connection without answering\n"
        )
    );
    serving.join().unwrap();
    assert_eq!(seen.lock().unwrap().len(), 2 + 5);
}
