//! Tracing (issue 48): `[switch] trace = "w3c"`, `request_id` and `otlp`, over real loopback
//! sockets with the switch in the test's process.
//!
//! - A client's `traceparent` reaches the server with its trace id and flags and the switch's
//!   own span id as parent, from HTTP/1.1 and HTTP/2 clients, to HTTP/1.1 and HTTP/2 servers;
//!   `tracestate` passes; an absent one is made; an invalid one is replaced; the access log's
//!   line (text and JSON) has the ids the server saw.
//! - `X-Request-Id` kept when sane, replaced when not, made when absent, with or without trace.
//! - Spans exported to an OTLP/HTTP receiver the test runs, decoded by this file's own protobuf
//!   reader (written from opentelemetry-proto's .proto files, not from the switch's encoder)
//!   and checked field by field.
//! - A collector that refuses connections or never answers: every request still answered, every
//!   span counted as dropped in `/stats` and `/metrics`.
//! - The configuration's errors, all at once with FILE:LINE:COL.
//!
//! Verdicts rest on what the servers, the log and the receiver saw and on counters; waits are
//! bounded, and only guard against hangs.

mod common;
#[path = "common/h2.rs"]
mod h2c;

use common::h2_origin::{H2Options, H2Origin};
use common::*;
use h2c::{request, Upload, H2};
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

const GIVEN_TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const GIVEN_SPAN: &str = "00f067aa0ba902b7";

fn given_traceparent() -> String {
    format!("00-{GIVEN_TRACE}-{GIVEN_SPAN}-01")
}

/// A rule file: `[switch]` with `keys`, an admin endpoint, one service `web` whose pool `p`
/// has the one server `{server}` (with `pool_keys`).
fn rules(keys: &str, pool_keys: &str) -> String {
    format!(
        "[switch]\n{keys}\n\n[admin]\nlisten = \"127.0.0.1:0\"\n\n\
         [virtual.web]\nlisten = \"127.0.0.1:0\"\ndefault_pool = \"p\"\n\n\
         [pool.p]\nservers = [{{ addr = \"{{server}}\" }}]\n{pool_keys}\n"
    )
}

async fn start(keys: &str, server: SocketAddr) -> (tcpvs::Switch, SocketAddr) {
    let switch = start_switch(&rules(keys, ""), &[("server", server.to_string())]).await;
    let addr = switch.addresses()[0].1;
    (switch, addr)
}

/// The values of field `name` (any case) in a head as text.
fn field_values(head: &str, name: &str) -> Vec<String> {
    head.split("\r\n")
        .skip(1)
        .filter_map(|line| line.split_once(':'))
        .filter(|(n, _)| n.trim().eq_ignore_ascii_case(name))
        .map(|(_, v)| v.trim().to_string())
        .collect()
}

/// The one value of field `name` in `head`; panics when there is none or several.
fn one_field(head: &str, name: &str) -> String {
    let values = field_values(head, name);
    assert_eq!(values.len(), 1, "one {name} field in\n{head}");
    values[0].clone()
}

/// A `traceparent` value's trace id, parent id and flags, after checking its W3C form:
/// version 00, lowercase hex, ids not all zero.
fn traceparent_parts(value: &str) -> (String, String, String) {
    let parts: Vec<&str> = value.split('-').collect();
    assert_eq!(parts.len(), 4, "{value}");
    let lower_hex = |s: &str, n: usize| {
        s.len() == n
            && s.bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    };
    assert_eq!(parts[0], "00", "{value}");
    assert!(lower_hex(parts[1], 32), "{value}");
    assert!(lower_hex(parts[2], 16), "{value}");
    assert!(lower_hex(parts[3], 2), "{value}");
    assert_ne!(parts[1], "0".repeat(32), "{value}");
    assert_ne!(parts[2], "0".repeat(16), "{value}");
    (parts[1].into(), parts[2].into(), parts[3].into())
}

/// The last request head the backend received.
fn last_head(backend: &Backend) -> String {
    let heads = backend.record.heads.lock().unwrap();
    heads.last().cloned().expect("the backend got a request")
}

/// GET `path` with `fields` (`Name: value` lines) over a new connection; the status.
async fn get(addr: SocketAddr, path: &str, fields: &str) -> u16 {
    let mut client = Client::connect(addr).await;
    client
        .send(format!("GET {path} HTTP/1.1\r\nHost: web\r\n{fields}\r\n").as_bytes())
        .await;
    client.response(false).await.status
}

/// Waits until the file at `path` holds `n` complete lines and returns them.
async fn wait_for_lines(path: &Path, n: usize) -> Vec<String> {
    let deadline = tokio::time::Instant::now() + PATIENCE;
    loop {
        let text = std::fs::read_to_string(path).unwrap_or_default();
        let complete = text.rfind('\n').map_or("", |end| &text[..=end]);
        let lines: Vec<String> = complete.lines().map(str::to_string).collect();
        if lines.len() >= n {
            return lines;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{} has {} lines, not {n}",
            path.display(),
            lines.len()
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// The value of `key=` in a text log line.
fn word(line: &str, key: &str) -> Option<String> {
    line.split(' ')
        .find_map(|w| w.strip_prefix(&format!("{key}=")))
        .map(str::to_string)
}

#[tokio::test]
async fn a_given_traceparent_keeps_its_trace_id_and_gets_the_switchs_span() {
    let backend = backend().await;
    let scratch = Scratch::new("tracing-given");
    let log = scratch.0.join("access.log");
    let keys = format!(
        "trace = \"w3c\"\nrequest_id = true\naccess_log = \"{}\"\naccess_log_format = \"json\"",
        log.display()
    );
    let (_switch, addr) = start(&keys, backend.addr).await;
    let fields = format!(
        "traceparent: {}\r\ntracestate: vendor=abc,other=1\r\nX-Request-Id: order-42\r\n",
        given_traceparent()
    );
    assert_eq!(get(addr, "/a", &fields).await, 200);
    let head = last_head(&backend);
    let (trace_id, parent, flags) = traceparent_parts(&one_field(&head, "traceparent"));
    assert_eq!(trace_id, GIVEN_TRACE, "the trace id is kept");
    assert_ne!(
        parent, GIVEN_SPAN,
        "the parent is the switch's span, not the client's"
    );
    assert_eq!(flags, "01");
    assert_eq!(one_field(&head, "tracestate"), "vendor=abc,other=1");
    assert_eq!(one_field(&head, "x-request-id"), "order-42");

    // Another request of the same trace gets another span of the switch's.
    assert_eq!(get(addr, "/b", &fields).await, 200);
    let (_, second_parent, _) = traceparent_parts(&one_field(&last_head(&backend), "traceparent"));
    assert_ne!(second_parent, parent);

    let lines = wait_for_lines(&log, 2).await;
    let entry: serde_json::Value = serde_json::from_str(&lines[0]).expect("a JSON line");
    assert_eq!(entry["trace_id"], GIVEN_TRACE, "{entry}");
    assert_eq!(entry["request_id"], "order-42", "{entry}");

    // Two requests of the same trace without ids of their own get one each: not the trace's
    // id, which they share (and which the client chose).
    let fields = format!("traceparent: {}\r\n", given_traceparent());
    let mut ids = Vec::new();
    for path in ["/c", "/d"] {
        assert_eq!(get(addr, path, &fields).await, 200);
        ids.push(one_field(&last_head(&backend), "x-request-id"));
    }
    assert!(
        ids[0] != ids[1] && !ids.contains(&GIVEN_TRACE.to_string()),
        "{ids:?}"
    );
}

#[tokio::test]
async fn an_absent_traceparent_is_made_and_an_invalid_one_replaced() {
    let backend = backend().await;
    let scratch = Scratch::new("tracing-made");
    let log = scratch.0.join("access.log");
    let keys = format!(
        "trace = \"w3c\"\nrequest_id = true\naccess_log = \"{}\"",
        log.display()
    );
    let (_switch, addr) = start(&keys, backend.addr).await;
    let invalid = [
        given_traceparent().to_uppercase(),                // uppercase hex
        given_traceparent().replacen("00-", "ff-", 1),     // version ff
        format!("00-{}-{GIVEN_SPAN}-01", "0".repeat(32)),  // zero trace id
        format!("00-{GIVEN_TRACE}-{}-01", "0".repeat(16)), // zero parent id
        given_traceparent()[..54].to_string(),             // short
        format!("{}-", given_traceparent()),               // long for version 00
        given_traceparent().replace('b', "g"),             // not hex
    ];
    let mut cases: Vec<String> = vec![String::new()];
    cases.extend(invalid.iter().map(|v| format!("traceparent: {v}\r\n")));
    // Two traceparent fields: which one is meant cannot be known.
    cases.push(format!(
        "traceparent: {}\r\ntraceparent: {}\r\n",
        given_traceparent(),
        given_traceparent()
    ));
    let mut trace_ids = Vec::new();
    for (i, fields) in cases.iter().enumerate() {
        assert_eq!(get(addr, &format!("/case/{i}"), fields).await, 200);
        let head = last_head(&backend);
        let (trace_id, _, flags) = traceparent_parts(&one_field(&head, "traceparent"));
        assert_ne!(
            trace_id, GIVEN_TRACE,
            "case {i}: a new trace, not the invalid one's"
        );
        assert_eq!(
            flags, "01",
            "case {i}: a trace the switch starts is sampled"
        );
        // No X-Request-Id given: one made for the request, not its trace id.
        let id = one_field(&head, "x-request-id");
        assert!(
            id.len() == 32 && id.bytes().all(|b| b.is_ascii_hexdigit()) && id != trace_id,
            "case {i}: {id}"
        );
        trace_ids.push(trace_id);
    }
    trace_ids.sort();
    trace_ids.dedup();
    assert_eq!(
        trace_ids.len(),
        cases.len(),
        "each request starts a trace of its own"
    );

    // The text line ends with the ids the server saw, after the fields readers know.
    let lines = wait_for_lines(&log, cases.len()).await;
    let heads = backend.record.heads.lock().unwrap().clone();
    for (line, head) in lines.iter().zip(&heads) {
        let (trace_id, _, _) = traceparent_parts(&one_field(head, "traceparent"));
        assert_eq!(
            word(line, "trace").as_deref(),
            Some(trace_id.as_str()),
            "{line}"
        );
        let id = one_field(head, "x-request-id");
        assert_eq!(word(line, "request_id"), Some(id), "{line}");
        assert!(
            line.contains("\" 200 "),
            "the fields before keep their places: {line}"
        );
    }
}

#[tokio::test]
async fn request_ids_without_trace() {
    let backend = backend().await;
    let (_switch, addr) = start("request_id = true\naccess_log = false", backend.addr).await;
    // A sane id is kept; a client's traceparent passes untouched with trace off.
    let fields = format!(
        "X-Request-Id: abc-123\r\ntraceparent: {}\r\n",
        given_traceparent()
    );
    assert_eq!(get(addr, "/", &fields).await, 200);
    let head = last_head(&backend);
    assert_eq!(one_field(&head, "x-request-id"), "abc-123");
    assert_eq!(one_field(&head, "traceparent"), given_traceparent());

    let too_long = "a".repeat(129);
    let longest = "b".repeat(128);
    for (given, kept) in [
        (format!("X-Request-Id: {too_long}\r\n"), false),
        ("X-Request-Id: has\"quote\r\n".to_string(), true),
        ("X-Request-Id: two words\r\n".to_string(), false),
        (format!("X-Request-Id: {longest}\r\n"), true),
        (
            "X-Request-Id: one\r\nX-Request-Id: two\r\n".to_string(),
            false,
        ),
        (String::new(), false),
    ] {
        assert_eq!(get(addr, "/", &given).await, 200);
        let id = one_field(&last_head(&backend), "x-request-id");
        let sent = field_values(&format!("\r\n{given}"), "x-request-id");
        if kept {
            assert_eq!(sent, std::slice::from_ref(&id), "{given:?}");
        } else {
            assert_eq!(id.len(), 32, "a made id is 32 hex digits: {id}");
            assert!(id.bytes().all(|b| b.is_ascii_hexdigit()), "{id}");
            assert!(!sent.contains(&id), "{given:?} was replaced");
        }
    }
}

#[tokio::test]
async fn with_tracing_off_nothing_changes() {
    let backend = backend().await;
    let scratch = Scratch::new("tracing-off");
    let log = scratch.0.join("access.log");
    let keys = format!("access_log = \"{}\"", log.display());
    let (_switch, addr) = start(&keys, backend.addr).await;
    let fields = format!("traceparent: {}\r\n", given_traceparent());
    assert_eq!(get(addr, "/", &fields).await, 200);
    let head = last_head(&backend);
    assert_eq!(one_field(&head, "traceparent"), given_traceparent());
    assert!(field_values(&head, "x-request-id").is_empty(), "{head}");
    let lines = wait_for_lines(&log, 1).await;
    assert_eq!(word(&lines[0], "trace"), None, "{}", lines[0]);
    assert_eq!(word(&lines[0], "request_id"), None, "{}", lines[0]);
}

#[tokio::test]
async fn http2_clients_and_http2_servers_are_traced_alike() {
    // An HTTP/2 client to an HTTP/1.1 server.
    let backend = backend().await;
    let (_switch, addr) = start("trace = \"w3c\"\naccess_log = false", backend.addr).await;
    let h2 = H2::plain(addr).await;
    let traceparent = given_traceparent();
    let fields = [("traceparent", traceparent.as_str()), ("tracestate", "k=v")];
    let reply = h2
        .exchange(request("GET", "web", "/h2", &fields), Upload::None)
        .await
        .expect("an answer");
    assert_eq!(reply.status, 200);
    let head = last_head(&backend);
    let (trace_id, parent, _) = traceparent_parts(&one_field(&head, "traceparent"));
    assert_eq!(trace_id, GIVEN_TRACE);
    assert_ne!(parent, GIVEN_SPAN);
    assert_eq!(one_field(&head, "tracestate"), "k=v");

    // An HTTP/1.1 client to an HTTP/2 server.
    let origin = H2Origin::start(H2Options::default()).await;
    let text = rules("trace = \"w3c\"\naccess_log = false", "protocol = \"h2\"");
    let switch = start_switch(&text, &[("server", origin.addr.to_string())]).await;
    let addr = switch.addresses()[0].1;
    let fields = format!("traceparent: {traceparent}\r\n");
    assert_eq!(get(addr, "/to-h2", &fields).await, 200);
    origin.wait_for_requests(1).await;
    let seen = origin.requests();
    let traceparents: Vec<_> = seen[0]
        .headers
        .iter()
        .filter(|(n, _)| n == "traceparent")
        .collect();
    assert_eq!(traceparents.len(), 1, "{:?}", seen[0].headers);
    let (trace_id, parent, _) = traceparent_parts(&traceparents[0].1);
    assert_eq!(trace_id, GIVEN_TRACE);
    assert_ne!(parent, GIVEN_SPAN);
}

// ---------------------------------------------------------------- OTLP

/// What a collector the test runs was sent: each POST's head and body.
#[derive(Clone, Default)]
struct Received(Arc<Mutex<Vec<Post>>>);

/// A POST's head and body.
type Post = (String, Vec<u8>);

/// An OTLP/HTTP receiver on 127.0.0.1: reads each POST whole and answers 200 (`answer`) or
/// nothing at all, holding the connection open (a collector that hangs).
async fn receiver(answer: bool) -> (SocketAddr, Received) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let received = Received::default();
    let record = received.clone();
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((mut stream, _)) = listener.accept().await {
            let Some((head, body)) = read_post(&mut stream).await else {
                continue;
            };
            record.0.lock().unwrap().push((head, body));
            if answer {
                let _ = stream
                    .write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n")
                    .await;
            } else {
                held.push(stream);
            }
        }
    });
    (addr, received)
}

/// One HTTP/1.1 request with a Content-Length body.
async fn read_post(stream: &mut TcpStream) -> Option<(String, Vec<u8>)> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 16384];
    let head_end = loop {
        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break end;
        }
        let n = stream.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
    };
    let head = String::from_utf8(buf[..head_end].to_vec()).ok()?;
    let length: usize = one_field(&head, "content-length").parse().ok()?;
    let mut body = buf[head_end + 4..].to_vec();
    while body.len() < length {
        let n = stream.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        body.extend_from_slice(&chunk[..n]);
    }
    Some((head, body))
}

/// A protobuf field's value as the wire carries it.
#[derive(Clone, Debug)]
enum Wire {
    Varint(u64),
    Fixed64(u64),
    Bytes(Vec<u8>),
    Fixed32(u32),
}

/// The fields of a protobuf message, in order (protobuf's encoding guide: tag varint = field
/// number << 3 | wire type).
fn fields_of(mut buf: &[u8]) -> Vec<(u64, Wire)> {
    fn varint(buf: &mut &[u8]) -> u64 {
        let mut value = 0u64;
        for shift in (0..64).step_by(7) {
            let (&byte, rest) = buf.split_first().expect("a varint's byte");
            *buf = rest;
            value |= u64::from(byte & 0x7f) << shift;
            if byte & 0x80 == 0 {
                return value;
            }
        }
        panic!("a varint longer than 10 bytes");
    }
    let mut fields = Vec::new();
    while !buf.is_empty() {
        let tag = varint(&mut buf);
        let value = match tag & 7 {
            0 => Wire::Varint(varint(&mut buf)),
            1 => {
                let (bytes, rest) = buf.split_at(8);
                buf = rest;
                Wire::Fixed64(u64::from_le_bytes(bytes.try_into().unwrap()))
            }
            2 => {
                let len = varint(&mut buf) as usize;
                let (bytes, rest) = buf.split_at(len);
                buf = rest;
                Wire::Bytes(bytes.to_vec())
            }
            5 => {
                let (bytes, rest) = buf.split_at(4);
                buf = rest;
                Wire::Fixed32(u32::from_le_bytes(bytes.try_into().unwrap()))
            }
            other => panic!("wire type {other}"),
        };
        fields.push((tag >> 3, value));
    }
    fields
}

fn bytes_fields(message: &[u8], number: u64) -> Vec<Vec<u8>> {
    fields_of(message)
        .into_iter()
        .filter(|(n, _)| *n == number)
        .map(|(_, v)| match v {
            Wire::Bytes(b) => b,
            other => panic!("field {number} is {other:?}, not length-delimited"),
        })
        .collect()
}

fn one_bytes(message: &[u8], number: u64) -> Option<Vec<u8>> {
    let mut all = bytes_fields(message, number);
    assert!(all.len() <= 1, "field {number} more than once");
    all.pop()
}

fn scalar(message: &[u8], number: u64) -> Option<u64> {
    fields_of(message)
        .into_iter()
        .find(|(n, _)| *n == number)
        .map(|(_, v)| match v {
            Wire::Varint(x) | Wire::Fixed64(x) => x,
            Wire::Fixed32(x) => u64::from(x),
            Wire::Bytes(_) => panic!("field {number} is length-delimited"),
        })
}

/// An attribute value (common.proto `AnyValue`: string_value = 1, int_value = 3).
#[derive(Debug, PartialEq)]
enum Attr {
    Text(String),
    Int(i64),
}

/// `KeyValue` messages (key = 1, value = 2) by key.
fn attributes(message: &[u8], number: u64) -> BTreeMap<String, Attr> {
    bytes_fields(message, number)
        .iter()
        .map(|pair| {
            let key = String::from_utf8(one_bytes(pair, 1).expect("a key")).unwrap();
            let any = one_bytes(pair, 2).expect("a value");
            let value = match (one_bytes(&any, 1), scalar(&any, 3)) {
                (Some(text), None) => Attr::Text(String::from_utf8(text).unwrap()),
                (None, Some(n)) => Attr::Int(n as i64),
                other => panic!("{key}: {other:?}"),
            };
            (key, value)
        })
        .collect()
}

/// A decoded span (trace.proto `Span`).
#[derive(Debug)]
struct DecodedSpan {
    trace_id: Vec<u8>,
    span_id: Vec<u8>,
    parent_span_id: Option<Vec<u8>>,
    name: String,
    kind: u64,
    start: u64,
    end: u64,
    attributes: BTreeMap<String, Attr>,
    /// `Status.code` (field 15, its code field 3), 0 when absent.
    status_code: u64,
}

/// Every span of an `ExportTraceServiceRequest` (resource_spans = 1 > scope_spans = 2 >
/// spans = 2), after checking its resource's `service.name` (resource = 1 > attributes = 1).
fn spans_of(body: &[u8]) -> Vec<DecodedSpan> {
    let mut spans = Vec::new();
    for resource_spans in bytes_fields(body, 1) {
        let resource = one_bytes(&resource_spans, 1).expect("a resource");
        assert_eq!(
            attributes(&resource, 1).get("service.name"),
            Some(&Attr::Text("tcpvs".into()))
        );
        for scope_spans in bytes_fields(&resource_spans, 2) {
            for span in bytes_fields(&scope_spans, 2) {
                spans.push(DecodedSpan {
                    trace_id: one_bytes(&span, 1).expect("trace_id"),
                    span_id: one_bytes(&span, 2).expect("span_id"),
                    parent_span_id: one_bytes(&span, 4),
                    name: String::from_utf8(one_bytes(&span, 5).expect("name")).unwrap(),
                    kind: scalar(&span, 6).expect("kind"),
                    start: scalar(&span, 7).expect("start_time_unix_nano"),
                    end: scalar(&span, 8).expect("end_time_unix_nano"),
                    attributes: attributes(&span, 9),
                    status_code: one_bytes(&span, 15)
                        .and_then(|status| scalar(&status, 3))
                        .unwrap_or(0),
                });
            }
        }
    }
    spans
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Every span the receiver got so far, once it has `n` (panics after a long wait).
async fn wait_for_spans(received: &Received, n: usize) -> Vec<DecodedSpan> {
    let deadline = tokio::time::Instant::now() + PATIENCE;
    loop {
        let posts = received.0.lock().unwrap().clone();
        let spans: Vec<DecodedSpan> = posts.iter().flat_map(|(_, body)| spans_of(body)).collect();
        if spans.len() >= n {
            for (head, _) in &posts {
                assert!(head.starts_with("POST /v1/traces HTTP/1.1\r\n"), "{head}");
                assert_eq!(one_field(head, "content-type"), "application/x-protobuf");
            }
            return spans;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{} spans, not {n}",
            spans.len()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn otlp_keys(collector: SocketAddr) -> String {
    format!("trace = \"w3c\"\nrequest_id = true\naccess_log = false\notlp = \"http://{collector}\"")
}

#[tokio::test]
async fn spans_are_exported_to_the_collector_field_by_field() {
    let backend = backend().await;
    let (collector, received) = receiver(true).await;
    let (switch, addr) = start(&otlp_keys(collector), backend.addr).await;
    let before = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64;
    let fields = format!("traceparent: {}\r\n", given_traceparent());
    assert_eq!(get(addr, "/given", &fields).await, 200);
    let given_head = last_head(&backend);
    assert_eq!(get(addr, "/status/503", "").await, 503);
    let made_head = last_head(&backend);

    let spans = wait_for_spans(&received, 2).await;
    assert_eq!(spans.len(), 2, "{spans:#?}");
    let server = Attr::Text(backend.addr.to_string());
    for (span, head) in spans.iter().zip([&given_head, &made_head]) {
        // The ids the server saw: its parent is the span the switch exported.
        let (trace_id, parent_at_server, _) = traceparent_parts(&one_field(head, "traceparent"));
        assert_eq!(hex(&span.trace_id), trace_id);
        assert_eq!(hex(&span.span_id), parent_at_server);
        assert_eq!(span.name, "HTTP GET");
        assert_eq!(span.kind, 2, "SPAN_KIND_SERVER");
        assert!(before <= span.start && span.start <= span.end, "{span:?}");
        let a = &span.attributes;
        assert_eq!(a["http.request.method"], Attr::Text("GET".into()));
        assert_eq!(a["tcpvs.service"], Attr::Text("web".into()));
        assert_eq!(a["tcpvs.pool"], Attr::Text("p".into()));
        assert_eq!(a["tcpvs.server"], server);
        assert_eq!(a["network.protocol.version"], Attr::Text("1.1".into()));
        assert!(
            matches!(a["tcpvs.response_bytes"], Attr::Int(n) if n > 0),
            "{a:?}"
        );
    }
    let (given, made) = (&spans[0], &spans[1]);
    assert_eq!(hex(&given.trace_id), GIVEN_TRACE);
    assert_eq!(
        given.parent_span_id.as_deref().map(hex).as_deref(),
        Some(GIVEN_SPAN)
    );
    assert_eq!(
        given.attributes["http.response.status_code"],
        Attr::Int(200)
    );
    assert_eq!(given.status_code, 0, "a 200 leaves the status unset");
    assert_eq!(
        made.parent_span_id, None,
        "a trace started here: a root span"
    );
    assert_eq!(made.attributes["http.response.status_code"], Attr::Int(503));
    assert_eq!(made.status_code, 2, "a 5xx is STATUS_CODE_ERROR");

    let snap = wait_until(&switch, "2 spans exported", |s| {
        s.trace.trace_spans_exported == 2
    })
    .await;
    assert_eq!(snap.trace.trace_spans_dropped, 0);
}

/// `GET path` on the admin endpoint: the body.
async fn admin_get(admin: SocketAddr, path: &str) -> String {
    let mut stream = TcpStream::connect(admin).await.unwrap();
    let request = format!("GET {path} HTTP/1.1\r\nHost: {admin}\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut raw = Vec::new();
    tokio::time::timeout(PATIENCE, stream.read_to_end(&mut raw))
        .await
        .expect("the endpoint answers")
        .unwrap();
    let text = String::from_utf8(raw).unwrap();
    let (head, body) = text.split_once("\r\n\r\n").expect("a head");
    assert!(head.starts_with("HTTP/1.1 200 "), "{head}");
    body.to_string()
}

/// Sends `n` requests with the collector at `collector` (after the first, waits until
/// `first_posted` says the export thread has sent its batch, when given); every one must be
/// answered 200, and every span ends up counted as dropped (none can be exported), in `/stats`
/// and `/metrics`.
async fn requests_unaffected_and_spans_dropped(
    collector: SocketAddr,
    queue: usize,
    n: usize,
    first_posted: Option<&Received>,
) {
    let backend = backend().await;
    let text = rules(&otlp_keys(collector), "");
    let mut config = tcpvs::Config::parse(
        "test.toml",
        &text.replace("{server}", &backend.addr.to_string()),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    config.switch.trace.queue_spans = queue;
    let switch = tcpvs::Switch::start(config).await.unwrap();
    let addr = switch.addresses()[0].1;
    let admin = switch.admin_addr().expect("an admin endpoint");
    let mut client = Client::connect(addr).await;
    for i in 0..n {
        let response = client.get(&format!("/r/{i}")).await;
        assert_eq!(response.status, 200, "request {i}");
        if let (0, Some(received)) = (i, first_posted) {
            let deadline = tokio::time::Instant::now() + PATIENCE;
            while received.0.lock().unwrap().is_empty() {
                assert!(tokio::time::Instant::now() < deadline, "no batch came");
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
    }
    // Each batch waits at most EXPORT_TIMEOUT (2 s) for the collector: bounded, well within
    // the wait.
    let deadline = tokio::time::Instant::now() + PATIENCE * 3;
    loop {
        let stats: serde_json::Value =
            serde_json::from_str(&admin_get(admin, "/stats").await).unwrap();
        if stats["trace_spans_dropped"] == n {
            assert_eq!(stats["trace_spans_exported"], 0);
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{} of {n} spans counted as dropped",
            stats["trace_spans_dropped"]
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let metrics = admin_get(admin, "/metrics").await;
    assert!(
        metrics
            .lines()
            .any(|l| l == format!("tcpvs_trace_spans_dropped_total {n}")),
        "{metrics}"
    );
}

#[tokio::test]
async fn a_collector_that_refuses_connections_costs_no_request() {
    let closed = reserved_address();
    requests_unaffected_and_spans_dropped(closed.addr, 2048, 20, None).await;
}

#[tokio::test]
async fn a_collector_that_never_answers_costs_no_request() {
    let (collector, received) = receiver(false).await;
    // A queue of 4 spans. The first request's batch reaches the collector, which holds it
    // unanswered: while the export thread waits for it (up to 2 s), the requests after it
    // fill the queue and the rest of their spans are dropped at once; the batch and what the
    // queue held are dropped when their answers time out. Whichever way each span goes, all
    // end up counted (the exact count of a full queue: trace/otlp/export.rs's unit test).
    requests_unaffected_and_spans_dropped(collector, 4, 40, Some(&received)).await;
}

#[test]
fn the_configuration_errors_come_all_at_once() {
    let text = "[switch]\ntrace = \"zipkin\"\notlp = \"https://collector:4318\"\n\n\
                [virtual.web]\nlisten = \"127.0.0.1:0\"\ndefault_pool = \"p\"\n\
                [pool.p]\nservers = [{ addr = \"127.0.0.1:1\" }]\n";
    let error = tcpvs::Config::parse("t.toml", text)
        .expect_err("refused")
        .to_string();
    assert!(
        error.contains("t.toml:2:9: trace must be \"off\" or \"w3c\""),
        "{error}"
    );
    assert!(
        error.contains("t.toml:3:8: otlp must be an http:// URL"),
        "{error}"
    );

    let text = text
        .replace("\"zipkin\"", "\"off\"")
        .replace("https", "http");
    let error = tcpvs::Config::parse("t.toml", &text)
        .expect_err("refused")
        .to_string();
    assert!(
        error.contains("t.toml:3:8: otlp exports the spans of traced requests"),
        "{error}"
    );

    let text = text.replace("\"off\"", "\"w3c\"");
    let config = tcpvs::Config::parse("t.toml", &text).expect("valid");
    assert!(config.switch.trace.w3c && config.switch.trace.otlp.is_some());
    assert!(
        !config.switch.trace.request_id,
        "request_id is off by default"
    );
}
