//! Helpers for the traffic-policy tests (tests/policy.rs, tests/policy_limits.rs): an echo
//! server that answers every request with the exact head it received, field lookups on heads,
//! one-shot exchanges from a chosen loopback address, and the admin endpoint's `/stats` and
//! `/metrics` read as JSON and Prometheus text.
//!
//! A test file includes it beside `mod common;` as
//! `#[path = "common/policy.rs"] mod policy_common;`, so that the other test binaries, which
//! include `common/mod.rs`, are left as they are.

#![allow(dead_code)]

use crate::common::{Client, Response, PATIENCE};
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

// ---------------------------------------------------------------- the echo server

/// A server that answers every request `200` with the request head it received, byte for byte,
/// as the body (nothing for HEAD), and with `Server: echo/1.0` plus the response fields the test
/// chose. It keeps every head it received, in order, so tests can look at what the server saw
/// even for answers the client never read as text.
pub struct Echo {
    pub addr: SocketAddr,
    heads: Arc<Mutex<Vec<String>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Echo {
    /// Every request head received so far, in order.
    pub fn heads(&self) -> Vec<String> {
        self.heads.lock().expect("the heads' lock").clone()
    }

    /// The last request head received; panics when there is none.
    pub fn last_head(&self) -> String {
        self.heads()
            .last()
            .cloned()
            .unwrap_or_else(|| panic!("the echo server {} received no request", self.addr))
    }

    /// How many requests it received.
    pub fn requests(&self) -> usize {
        self.heads.lock().expect("the heads' lock").len()
    }
}

impl Drop for Echo {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// An echo server with no response fields beyond `Content-Length` and `Server: echo/1.0`.
pub async fn echo() -> Echo {
    echo_with(&[]).await
}

/// An echo server whose answers carry `fields` (`"Name: value"`, CRLF added) after
/// `Server: echo/1.0`.
pub async fn echo_with(fields: &[&str]) -> Echo {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("an address");
    let extra: String = fields.iter().map(|f| format!("{f}\r\n")).collect();
    let heads: Arc<Mutex<Vec<String>>> = Arc::default();
    let record = Arc::clone(&heads);
    let task = tokio::spawn(async move {
        let mut connections = tokio::task::JoinSet::new();
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                return;
            };
            let record = Arc::clone(&record);
            let extra = extra.clone();
            // The set is dropped with this task, which aborts every connection.
            connections.spawn(async move {
                let _ = serve_echo(stream, record, extra).await;
            });
            while connections.try_join_next().is_some() {}
        }
    });
    Echo { addr, heads, task }
}

async fn serve_echo(
    mut stream: TcpStream,
    heads: Arc<Mutex<Vec<String>>>,
    extra: String,
) -> std::io::Result<()> {
    let mut buf: Vec<u8> = Vec::new();
    loop {
        let (head_len, is_head, body_len, close) = loop {
            let mut fields = [httparse::EMPTY_HEADER; 128];
            let mut request = httparse::Request::new(&mut fields);
            match request.parse(&buf) {
                Ok(httparse::Status::Complete(len)) => {
                    let value = |name: &str| {
                        request
                            .headers
                            .iter()
                            .find(|h| h.name.eq_ignore_ascii_case(name))
                            .map(|h| String::from_utf8_lossy(h.value).trim().to_ascii_lowercase())
                    };
                    let body_len: usize = value("content-length")
                        .and_then(|v| v.parse().ok())
                        .unwrap_or(0);
                    assert!(
                        value("transfer-encoding").is_none(),
                        "the echo server reads only Content-Length bodies"
                    );
                    let close = request.version != Some(1)
                        || value("connection").is_some_and(|v| v.contains("close"));
                    break (len, request.method == Some("HEAD"), body_len, close);
                }
                Ok(httparse::Status::Partial) => {}
                Err(e) => panic!(
                    "the echo server got an invalid request ({e}): {:?}",
                    String::from_utf8_lossy(&buf)
                ),
            }
            let mut chunk = [0u8; 16384];
            let n = stream.read(&mut chunk).await?;
            if n == 0 {
                return Ok(());
            }
            buf.extend_from_slice(&chunk[..n]);
        };
        let head: Vec<u8> = buf.drain(..head_len).collect();
        while buf.len() < body_len {
            let mut chunk = [0u8; 16384];
            let n = stream.read(&mut chunk).await?;
            if n == 0 {
                return Ok(());
            }
            buf.extend_from_slice(&chunk[..n]);
        }
        buf.drain(..body_len);
        heads
            .lock()
            .expect("the heads' lock")
            .push(String::from_utf8_lossy(&head).into_owned());
        let mut out = format!(
            "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nServer: echo/1.0\r\n{extra}\r\n",
            head.len()
        )
        .into_bytes();
        if !is_head {
            out.extend_from_slice(&head);
        }
        stream.write_all(&out).await?;
        if close {
            return Ok(());
        }
    }
}

// ---------------------------------------------------------------- heads

/// The request line of a head (without CRLF).
pub fn request_line(head: &str) -> &str {
    head.split("\r\n").next().unwrap_or("")
}

/// The values of the field `name` (any case) in an HTTP/1.1 head, in order, each exactly as it
/// was written after `": "`.
pub fn values(head: &str, name: &str) -> Vec<String> {
    head.split("\r\n")
        .skip(1)
        .filter_map(|line| line.split_once(':'))
        .filter(|(n, _)| n.eq_ignore_ascii_case(name))
        .map(|(_, v)| v.trim_start_matches(' ').to_string())
        .collect()
}

/// The field names of a head, lower-cased, in order (repeated names repeated).
pub fn field_names(head: &str) -> Vec<String> {
    head.split("\r\n")
        .skip(1)
        .filter_map(|line| line.split_once(':'))
        .map(|(n, _)| n.to_ascii_lowercase())
        .collect()
}

/// The values of the field `name` in a response as the client read it, in order.
pub fn response_values(response: &Response, name: &str) -> Vec<String> {
    response
        .headers
        .iter()
        .filter(|(n, _)| n.eq_ignore_ascii_case(name))
        .map(|(_, v)| v.clone())
        .collect()
}

// ---------------------------------------------------------------- one-shot exchanges

/// Sends `request` (bytes as they go on the wire) on a new connection from the loopback
/// address `source` and reads one response. A connection of its own per request keeps each
/// verdict independent of whether the switch keeps a connection open after a refusal.
pub async fn exchange_from(source: IpAddr, addr: SocketAddr, request: &str) -> Response {
    let mut client = Client::connect_from(source, addr).await;
    client.send(request.as_bytes()).await;
    client.response(request.starts_with("HEAD ")).await
}

/// [`exchange_from`] from 127.0.0.1.
pub async fn exchange(addr: SocketAddr, request: &str) -> Response {
    exchange_from(IpAddr::from([127, 0, 0, 1]), addr, request).await
}

/// A GET of `path` with `fields` (`"Name: value"`) and `Connection: close`.
pub fn get_request(path: &str, fields: &[&str]) -> String {
    let mut request = format!("GET {path} HTTP/1.1\r\nHost: test\r\n");
    for field in fields {
        request.push_str(field);
        request.push_str("\r\n");
    }
    request.push_str("Connection: close\r\n\r\n");
    request
}

// ---------------------------------------------------------------- the admin endpoint

/// One GET on the admin endpoint with `Connection: close`: status and body.
pub async fn admin_get(admin: SocketAddr, path: &str) -> (u16, String) {
    let mut stream = TcpStream::connect(admin)
        .await
        .expect("the admin endpoint accepts");
    let request = format!("GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n");
    stream
        .write_all(request.as_bytes())
        .await
        .expect("write to the admin endpoint");
    let mut raw = Vec::new();
    tokio::time::timeout(PATIENCE, stream.read_to_end(&mut raw))
        .await
        .expect("the admin endpoint answers and closes within PATIENCE")
        .expect("read from the admin endpoint");
    let mut fields = [httparse::EMPTY_HEADER; 64];
    let mut response = httparse::Response::new(&mut fields);
    let head_len = match response.parse(&raw) {
        Ok(httparse::Status::Complete(len)) => len,
        other => panic!(
            "the admin endpoint's answer to {path} is not a response head ({other:?}): {:?}",
            String::from_utf8_lossy(&raw)
        ),
    };
    (
        response.code.unwrap_or(0),
        String::from_utf8_lossy(&raw[head_len..]).into_owned(),
    )
}

/// `/stats` as JSON.
pub async fn stats(admin: SocketAddr) -> serde_json::Value {
    let (status, body) = admin_get(admin, "/stats").await;
    assert_eq!(status, 200, "/stats: {body}");
    serde_json::from_str(&body).unwrap_or_else(|e| panic!("/stats is not JSON ({e}): {body}"))
}

/// The `{allowed, limited, keys}` of limit `name` in `/stats`, as numbers (`None` for a
/// missing one).
pub fn limit_counts(
    stats: &serde_json::Value,
    name: &str,
) -> (Option<u64>, Option<u64>, Option<u64>) {
    let limit = &stats["limits"][name];
    (
        limit["allowed"].as_u64(),
        limit["limited"].as_u64(),
        limit["keys"].as_u64(),
    )
}

/// Waits until `/stats` shows limit `name` with exactly `allowed`, `limited` and `keys`, and
/// returns the last `/stats`; panics with what it showed last after [`PATIENCE`]. (Counting
/// may trail the answer by a moment; the wait is for an exact value, never for an absence.)
pub async fn wait_for_limit(
    admin: SocketAddr,
    name: &str,
    allowed: u64,
    limited: u64,
    keys: u64,
) -> serde_json::Value {
    let deadline = tokio::time::Instant::now() + PATIENCE;
    loop {
        let stats = stats(admin).await;
        if limit_counts(&stats, name) == (Some(allowed), Some(limited), Some(keys)) {
            return stats;
        }
        if tokio::time::Instant::now() >= deadline {
            panic!(
                "/stats limits.{name}: expected {{allowed: {allowed}, limited: {limited}, keys: \
                 {keys}}}, got {} (all limits: {})",
                stats["limits"][name], stats["limits"]
            );
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}

/// `/metrics` parsed as Prometheus text.
pub async fn metrics(admin: SocketAddr) -> prometheus_parse::Scrape {
    let (status, body) = admin_get(admin, "/metrics").await;
    assert_eq!(status, 200, "/metrics: {body}");
    prometheus_parse::Scrape::parse(body.lines().map(|l| Ok(l.to_string())))
        .unwrap_or_else(|e| panic!("/metrics is not Prometheus text ({e}): {body}"))
}

/// The value of the sample `name` whose labels include `labels`; `None` when there is none.
pub fn sample(
    scrape: &prometheus_parse::Scrape,
    name: &str,
    labels: &[(&str, &str)],
) -> Option<f64> {
    scrape
        .samples
        .iter()
        .find(|s| s.metric == name && labels.iter().all(|(k, v)| s.labels.get(k) == Some(v)))
        .map(|s| match s.value {
            prometheus_parse::Value::Counter(v)
            | prometheus_parse::Value::Gauge(v)
            | prometheus_parse::Value::Untyped(v) => v,
            ref other => panic!("{name} is not a single value: {other:?}"),
        })
}
