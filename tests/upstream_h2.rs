//! HTTP/2 to servers (issue 44, second slice): `[pool.NAME] protocol = "h2"` speaks HTTP/2 to
//! the pool's servers, with prior knowledge over TCP (h2c) or with ALPN `h2` over TLS;
//! `protocol = "auto"` (TLS only) speaks what each server chose by ALPN. HTTP/1.1 and HTTP/2
//! clients both reach an h2 pool: bodies byte-exact both ways, trailers both ways (chunked
//! trailers of HTTP/1.1 <-> HTTP/2 trailers), connection-specific fields dropped, Host as
//! `:authority`, X-Forwarded-For added. Requests to one server are multiplexed up to its
//! SETTINGS_MAX_CONCURRENT_STREAMS per connection, under `max_conns`; a refused stream is
//! retried; a GOAWAY drains its connection; checks speak HTTP/2; the rule-file values are
//! checked at their place.
//!
//! The servers are `common::h2_origin::H2Origin` (the h2 crate's server side), which records
//! per connection its streams, refusals, GOAWAY and the most streams served at once, and per
//! request every field, the body's SHA-256 and the trailers. The origin is first tested alone,
//! with the HTTP/2 client of `common/h2.rs`, so that a bug of its own is not blamed on the switch.
//!
//! Waits are on events (the origin's records, the switch's statistics, `/hold` answers released
//! by the test), never on durations.

mod common;
#[path = "common/h2.rs"]
mod h2c;

use common::h2_origin::{H2Options, H2Origin, OriginRequest};
use common::tls;
use common::tls_origin::{toml_path, OriginCa, TlsOrigin};
use common::*;
use h2c::{offering, request, Upload, H2};
use http::{HeaderMap, HeaderValue};
use rustls::version::TLS13;
use serde_json::Value;
use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::time::Duration;
use tcpvs::state::status::State;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

// ---------------------------------------------------------------- requests

/// The Host of every request of the tests: what the origin must see as `:authority`.
const HOST: &str = "app.example";

/// A POST of `body` with Content-Length.
fn post(path: &str, body: &[u8]) -> Vec<u8> {
    let mut request = format!(
        "POST {path} HTTP/1.1\r\nHost: {HOST}\r\nContent-Length: {}\r\n\r\n",
        body.len()
    )
    .into_bytes();
    request.extend_from_slice(body);
    request
}

/// A POST of `body`, chunked in pieces of `piece` bytes, with `fields` in its head and
/// `trailers` (each `"name: value"`) after its last chunk.
fn post_chunked(
    path: &str,
    fields: &str,
    body: &[u8],
    piece: usize,
    trailers: &[String],
) -> Vec<u8> {
    let mut request = format!(
        "POST {path} HTTP/1.1\r\nHost: {HOST}\r\nTransfer-Encoding: chunked\r\n{fields}\r\n"
    )
    .into_bytes();
    for part in body.chunks(piece) {
        request.extend_from_slice(format!("{:x}\r\n", part.len()).as_bytes());
        request.extend_from_slice(part);
        request.extend_from_slice(b"\r\n");
    }
    request.extend_from_slice(b"0\r\n");
    for t in trailers {
        request.extend_from_slice(format!("{t}\r\n").as_bytes());
    }
    request.extend_from_slice(b"\r\n");
    request
}

/// What the origin answers a POST of `body` (and `/trailers`).
fn digest_of(body: &[u8]) -> String {
    format!("{} {}\n", sha256_hex(body), body.len())
}

/// Sends `request` on `client` and returns the answer, which must be 200.
async fn ok(client: &mut Client, request: &[u8]) -> Response {
    client.send(request).await;
    let r = client.response(false).await;
    assert_eq!(
        r.status,
        200,
        "{}: {}",
        String::from_utf8_lossy(&request[..request.len().min(80)]),
        r.text()
    );
    r
}

/// GET /size/N through `client`: 200 and N pattern bytes, exactly.
async fn get_size(client: &mut Client, n: usize) -> Response {
    let r = ok(
        client,
        format!("GET /size/{n} HTTP/1.1\r\nHost: {HOST}\r\n\r\n").as_bytes(),
    )
    .await;
    assert_eq!(r.body.len(), n, "GET /size/{n}: length");
    assert!(r.body == pattern(n, n as u64), "GET /size/{n}: other bytes");
    r
}

/// The trailer section an HTTP/1.1 client read (`name: value` lines), names lower case, sorted
/// (the order of fields of different names carries nothing).
fn trailer_fields(raw: &[u8]) -> Vec<(String, String)> {
    let mut fields: Vec<(String, String)> = String::from_utf8_lossy(raw)
        .split("\r\n")
        .filter(|line| !line.is_empty())
        .map(|line| {
            let (name, value) = line.split_once(':').expect("a trailer line name: value");
            (name.trim().to_ascii_lowercase(), value.trim().to_string())
        })
        .collect();
    fields.sort();
    fields
}

/// The trailers of `/trailers`, `/trailers/N` and `/trailers-only`, as the origin sends them,
/// sorted.
fn origin_trailers() -> Vec<(String, String)> {
    vec![
        ("grpc-status".to_string(), "0".to_string()),
        ("x-t".to_string(), "1".to_string()),
    ]
}

/// The trailers of an HTTP/2 reply, names lower case, sorted.
fn h2_trailers(map: &Option<HeaderMap>) -> Vec<(String, String)> {
    let mut fields: Vec<(String, String)> = map
        .as_ref()
        .map(|m| {
            m.iter()
                .map(|(n, v)| (n.to_string(), v.to_str().unwrap().to_string()))
                .collect()
        })
        .unwrap_or_default();
    fields.sort();
    fields
}

// ---------------------------------------------------------------- the origin alone

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn origin_alone_serves_h2c_bodies_and_trailers_and_records_every_field() {
    let origin = H2Origin::start(H2Options::default()).await;
    let h2 = H2::plain(origin.addr).await;

    let r = h2.get(HOST, "/size/100000?x=1").await;
    assert_eq!(r.status, 200);
    assert!(r.body == pattern(100_000, 100_000), "GET /size/100000");
    assert_eq!(r.header("content-length"), Some("100000"));
    assert_eq!(r.served_by(), origin.addr.to_string());
    assert_eq!(r.header("x-connection"), Some("0"));
    assert!(r.trailers.is_none());

    let upload = pattern(1 << 20, 3);
    let fields = [("x-one", "1"), ("x-many", "a"), ("x-many", "b")];
    let r = h2
        .exchange(
            request("POST", HOST, "/up", &fields),
            Upload::Body {
                data: &upload,
                piece: 16 * 1024,
            },
        )
        .await
        .unwrap();
    assert_eq!((r.status, r.text()), (200, digest_of(&upload)));

    let with_trailers = pattern(70_001, 4);
    let mut trailers = HeaderMap::new();
    trailers.insert(
        "x-checksum",
        HeaderValue::from_str(&sha256_hex(&with_trailers)).unwrap(),
    );
    let r = h2
        .exchange(
            request("POST", HOST, "/trailers", &[]),
            Upload::WithTrailers {
                data: &with_trailers,
                trailers,
            },
        )
        .await
        .unwrap();
    assert_eq!((r.status, r.text()), (200, digest_of(&with_trailers)));
    assert_eq!(h2_trailers(&r.trailers), origin_trailers());
    assert_eq!(r.header("content-length"), None);

    let r = h2.get(HOST, "/trailers/300000").await;
    assert!(r.body == pattern(300_000, 300_000), "GET /trailers/300000");
    assert_eq!(h2_trailers(&r.trailers), origin_trailers());

    let r = h2.get(HOST, "/trailers-only").await;
    assert_eq!((r.status, r.body.len()), (200, 0));
    assert_eq!(h2_trailers(&r.trailers), origin_trailers());

    let r = h2.get(HOST, "/health").await;
    assert_eq!((r.status, r.text().as_str()), (200, "ok\n"));
    let r = h2.get(HOST, "/size/0").await;
    assert_eq!((r.status, r.body.len()), (200, 0));

    let seen = origin.seen();
    assert_eq!(seen.connections.len(), 1, "{:#?}", seen.connections);
    let c = &seen.connections[0];
    assert!(c.h2 && !c.tls && c.error.is_none(), "{c:?}");
    assert_eq!(
        (c.streams, c.refused, c.goaway, c.after_goaway),
        (7, 0, false, 0)
    );
    assert!(c.max_active >= 1);
    assert_eq!(
        seen.active, 0,
        "every stream ended before its last frame went"
    );
    let r = &seen.requests;
    let kinds: Vec<(&str, &str, usize)> = r
        .iter()
        .map(|r| (r.method.as_str(), r.path.as_str(), r.body_len))
        .collect();
    assert_eq!(
        kinds,
        [
            ("GET", "/size/100000?x=1", 0),
            ("POST", "/up", 1 << 20),
            ("POST", "/trailers", 70_001),
            ("GET", "/trailers/300000", 0),
            ("GET", "/trailers-only", 0),
            ("GET", "/health", 0),
            ("GET", "/size/0", 0),
        ]
    );
    for request in r {
        assert_eq!(request.scheme.as_deref(), Some("http"), "{request:?}");
        assert_eq!(request.authority.as_deref(), Some(HOST), "{request:?}");
        assert_eq!(request.connection, 0);
    }
    assert_eq!(r[1].body_sha256, sha256_hex(&upload));
    let many: Vec<&str> = r[1]
        .headers
        .iter()
        .filter(|(n, _)| n == "x-many")
        .map(|(_, v)| v.as_str())
        .collect();
    assert_eq!(many, ["a", "b"], "{:?}", r[1].headers);
    assert_eq!(r[1].header("x-one"), Some("1"));
    assert_eq!(r[1].trailers, None);
    assert_eq!(
        r[2].trailer("x-checksum"),
        Some(sha256_hex(&with_trailers).as_str())
    );

    // `/trailers-only`: a HEADERS, then the trailers' HEADERS, and not one DATA frame.
    let id = r[4].stream;
    let frames: Vec<u8> = h2
        .frames()
        .iter()
        .filter(|f| f.stream == id)
        .map(|f| f.kind)
        .collect();
    assert_eq!(frames, [h2c::HEADERS, h2c::HEADERS], "stream {id}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn origin_alone_keeps_its_stream_limit_and_counts_streams_served_at_once() {
    let origin = H2Origin::start(H2Options {
        max_concurrent_streams: Some(10),
        ..H2Options::default()
    })
    .await;
    let h2 = H2::plain(origin.addr).await;
    // One exchange first: the origin's SETTINGS (10 streams) came before it, so the client
    // knows the limit before it opens 30 streams.
    assert_eq!(h2.get(HOST, "/health").await.status, 200);
    let tasks = (0..30)
        .map(|_| {
            let streams = h2.streams();
            tokio::spawn(async move {
                let r = streams.get(HOST, "/hold").await;
                assert_eq!((r.status, r.text().as_str()), (200, "held\n"));
            })
        })
        .collect();
    // A held stream is counted when accepted, its request once read whole: both, for all 10.
    origin
        .wait_for("10 streams held", |s| {
            s.active == 10 && s.requests.len() == 11
        })
        .await;
    let seen = origin.seen();
    assert_eq!(seen.connections[0].active, 10);
    origin.release(30);
    join_all(tasks).await;
    let seen = origin.seen();
    assert_eq!(seen.requests.len(), 31);
    assert_eq!(seen.connections.len(), 1);
    assert_eq!(seen.connections[0].max_active, 10);
    assert_eq!(seen.max_active, 10);
    assert_eq!(seen.active, 0);
    assert!(seen.refused.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn origin_alone_refuses_its_first_streams() {
    let origin = H2Origin::start(H2Options {
        refuse_first: 2,
        ..H2Options::default()
    })
    .await;
    let h2 = H2::plain(origin.addr).await;
    for _ in 0..2 {
        let refused = h2
            .exchange(request("GET", HOST, "/size/10", &[]), Upload::None)
            .await
            .expect_err("a refused stream");
        assert_eq!(
            refused.reason(),
            Some(h2::Reason::REFUSED_STREAM),
            "{refused}"
        );
    }
    let r = h2.get(HOST, "/size/10").await;
    assert_eq!((r.status, r.body.clone()), (200, pattern(10, 10)));
    let seen = origin.seen();
    let refused: Vec<(u32, &str)> = seen
        .refused
        .iter()
        .map(|r| (r.stream, r.path.as_str()))
        .collect();
    assert_eq!(refused, [(1, "/size/10"), (3, "/size/10")]);
    assert_eq!(seen.requests.len(), 1);
    assert_eq!(seen.requests[0].stream, 5);
    let c = &seen.connections[0];
    assert_eq!((c.streams, c.refused), (3, 2));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn origin_alone_says_goaway_after_n_streams_and_serves_them_first() {
    let origin = H2Origin::start(H2Options {
        goaway_after: Some(3),
        delay: Some(Duration::from_millis(5)),
        ..H2Options::default()
    })
    .await;
    let mut h2 = H2::plain(origin.addr).await;
    for n in [100, 200, 300] {
        let r = h2.get(HOST, &format!("/size/{n}")).await;
        assert_eq!((r.status, r.body.clone()), (200, pattern(n, n as u64)));
    }
    // The h2 crate's graceful GOAWAY: the highest stream id first, then (after the PING the
    // client answers) the last stream it took, 5; then it closes.
    let _ = h2.closed().await;
    let last: Vec<Option<u32>> = h2.goaways().iter().map(|g| g.last_stream()).collect();
    assert_eq!(last.first(), Some(&Some(0x7fff_ffff)), "{last:?}");
    assert!(last.contains(&Some(5)), "{last:?}");
    assert!(h2
        .goaways()
        .iter()
        .all(|g| g.error_code() == Some(h2c::NO_ERROR)));
    origin
        .wait_for("the first connection ended", |s| s.connections[0].ended)
        .await;
    // A new connection is served, and goes away after 3 streams too.
    let h2 = H2::plain(origin.addr).await;
    assert_eq!(h2.get(HOST, "/health").await.status, 200);
    let seen = origin.seen();
    assert_eq!(seen.connections.len(), 2);
    let c = &seen.connections[0];
    assert_eq!((c.streams, c.goaway, c.after_goaway), (3, true, 0), "{c:?}");
    assert_eq!(seen.connections[1].streams, 1);
    assert!(!seen.connections[1].goaway);
    assert_eq!(seen.requests.len(), 4);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn origin_alone_over_tls_takes_only_h2_and_records_the_offer() {
    let ca = OriginCa::new("origin test CA");
    let origin = H2Origin::start_tls(&ca.issue(&["localhost"]), H2Options::default()).await;
    let config = offering(&ca.client_config(&[&TLS13]), &[b"h2", b"http/1.1"]);
    let h2 = H2::tls(origin.addr, "localhost", &config).await;
    let r = h2.get("localhost", "/size/50000").await;
    assert!(r.body == pattern(50_000, 50_000));
    let upload = pattern(200_000, 9);
    let r = h2
        .exchange(
            request("POST", "localhost", "/up", &[]),
            Upload::Body {
                data: &upload,
                piece: 16 * 1024,
            },
        )
        .await
        .unwrap();
    assert_eq!(r.text(), digest_of(&upload));

    // A client that offers only http/1.1 is refused in the handshake, and nothing is served.
    let refused = tls::try_connect(origin.addr, "localhost", &ca.client_config(&[&TLS13])).await;
    if let Ok(mut client) = refused {
        client.send(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n").await;
        let mut byte = [0u8; 1];
        let read = tokio::time::timeout(PATIENCE, client.stream.read(&mut byte))
            .await
            .expect("the origin closes within PATIENCE");
        assert!(matches!(read, Ok(0) | Err(_)), "{read:?}");
    }
    origin
        .wait_for("the second connection failed", |s| {
            s.connections.len() == 2 && s.connections[1].error.is_some()
        })
        .await;
    let seen = origin.seen();
    let c = &seen.connections[0];
    assert!(c.tls && c.h2 && c.error.is_none(), "{c:?}");
    assert_eq!(c.sni.as_deref(), Some("localhost"));
    assert_eq!(c.alpn_offered, [b"h2".to_vec(), b"http/1.1".to_vec()]);
    assert_eq!(c.alpn.as_deref(), Some(&b"h2"[..]));
    let c = &seen.connections[1];
    assert!(c.tls && !c.h2, "{c:?}");
    assert_eq!(c.alpn_offered, [b"http/1.1".to_vec()]);
    assert_eq!(seen.requests.len(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn origin_alone_records_a_client_that_speaks_http11_to_it() {
    let origin = H2Origin::start(H2Options::default()).await;
    let mut tcp = tokio::net::TcpStream::connect(origin.addr).await.unwrap();
    tcp.write_all(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    origin
        .wait_for("the connection failed", |s| {
            s.connections.len() == 1 && s.connections[0].error.is_some()
        })
        .await;
    let seen = origin.seen();
    assert!(!seen.connections[0].h2, "{:?}", seen.connections);
    assert!(seen.requests.is_empty());
}

// ---------------------------------------------------------------- the switch

/// A rule file: `[switch]` with `switch_keys`, an admin endpoint, service `web` whose requests go
/// to pool `api` by default, the pool's `servers` (inline tables) and `pool_keys`, and `more`
/// after it (`[pool.api.tls]`, `[pool.api.health]`).
fn rules(switch_keys: &str, servers: &[String], pool_keys: &str, more: &str) -> String {
    format!(
        "[switch]\naccess_log = false\n{switch_keys}\n\n[admin]\nlisten = \"127.0.0.1:0\"\n\n\
         [virtual.web]\nlisten = \"127.0.0.1:0\"\ndefault_pool = \"api\"\n\n\
         [pool.api]\nservers = [{}]\n{pool_keys}\n\n{more}\n",
        servers.join(", ")
    )
}

/// A server entry for `addr`.
fn server(addr: SocketAddr) -> String {
    format!("{{ addr = \"{addr}\" }}")
}

const PROTOCOL_H2: &str = "protocol = \"h2\"";

/// A switch whose pool `api` is `origin` alone, spoken to in HTTP/2 with prior knowledge.
async fn h2c_switch(origin: &H2Origin) -> tcpvs::Switch {
    start_switch(&rules("", &[server(origin.addr)], PROTOCOL_H2, ""), &[]).await
}

/// `[pool.api.tls]` with `ca = "PATH"`, `ca`'s certificate written to the scratch folder.
fn tls_table(scratch: &Scratch, ca: &OriginCa) -> String {
    format!(
        "[pool.api.tls]\nca = {}\n",
        toml_path(&ca.write(scratch, "ca.pem"))
    )
}

/// `/stats` of the switch's admin endpoint.
async fn stats(switch: &tcpvs::Switch) -> Value {
    let admin = switch.admin_addr().expect("[admin] listen is set");
    let mut stream = tokio::net::TcpStream::connect(admin).await.unwrap();
    stream
        .write_all(b"GET /stats HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
        .await
        .unwrap();
    let mut raw = Vec::new();
    tokio::time::timeout(PATIENCE, stream.read_to_end(&mut raw))
        .await
        .expect("the admin endpoint answers within PATIENCE")
        .unwrap();
    let text = String::from_utf8(raw).unwrap();
    let (head, body) = text.split_once("\r\n\r\n").expect("an answer head");
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    serde_json::from_str(body).unwrap_or_else(|e| panic!("{e}: {body}"))
}

/// The server `addr` of pool `api` in a `/stats` document.
fn server_in(stats: &Value, addr: SocketAddr) -> &Value {
    let pool = stats["pools"]
        .as_array()
        .expect("pools")
        .iter()
        .find(|p| p["name"] == "api")
        .unwrap_or_else(|| panic!("no pool api in {stats}"));
    pool["servers"]
        .as_array()
        .expect("servers")
        .iter()
        .find(|s| s["addr"] == addr.to_string())
        .unwrap_or_else(|| panic!("no server {addr} in {pool}"))
}

fn count(value: &Value) -> u64 {
    value
        .as_u64()
        .unwrap_or_else(|| panic!("not a count: {value}"))
}

/// Reads `/stats` until `reached` holds for the server `addr` of pool `api`; its entry then.
/// Panics after [`PATIENCE`] with `what`.
async fn wait_for_server(
    switch: &tcpvs::Switch,
    addr: SocketAddr,
    what: &str,
    reached: impl Fn(&Value) -> bool,
) -> Value {
    let deadline = tokio::time::Instant::now() + PATIENCE;
    loop {
        let stats = stats(switch).await;
        let server = server_in(&stats, addr);
        if reached(server) {
            return server.clone();
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "`{what}` not reached within {PATIENCE:?}: {server}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Connection-specific fields: none may reach an HTTP/2 server (RFC 9113 section 8.2.2).
const CONNECTION_SPECIFIC: [&str; 5] = [
    "connection",
    "keep-alive",
    "proxy-connection",
    "transfer-encoding",
    "upgrade",
];

/// What every request relayed to an HTTP/2 server must look like: `:authority` the client's
/// Host (and `host`, if sent too, the same), `:scheme` http (the client's), X-Forwarded-For the
/// client's address, no connection-specific field.
fn relayed_as_h2(r: &OriginRequest) {
    // First: without an :authority the origin cannot tell the :scheme either.
    assert_eq!(r.authority.as_deref(), Some(HOST), "{r:#?}");
    assert_eq!(r.scheme.as_deref(), Some("http"), "{r:#?}");
    if let Some(host) = r.header("host") {
        assert_eq!(host, HOST, "{r:#?}");
    }
    assert_eq!(r.header("x-forwarded-for"), Some("127.0.0.1"), "{r:#?}");
    for name in CONNECTION_SPECIFIC {
        assert!(!r.has(name), "{name} reached the server: {r:#?}");
    }
}

/// The origin's requests as (method, path, body length, body SHA-256).
fn kinds(requests: &[OriginRequest]) -> Vec<(String, String, usize, String)> {
    requests
        .iter()
        .map(|r| {
            (
                r.method.clone(),
                r.path.clone(),
                r.body_len,
                r.body_sha256.clone(),
            )
        })
        .collect()
}

fn kind(method: &str, path: &str, body: &[u8]) -> (String, String, usize, String) {
    (
        method.to_string(),
        path.to_string(),
        body.len(),
        sha256_hex(body),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http11_clients_reach_an_h2c_pool_byte_exact_with_authority_and_forwarded_for() {
    let origin = H2Origin::start(H2Options::default()).await;
    let switch = h2c_switch(&origin).await;
    let mut client = Client::connect(switch.local_addr("web").unwrap()).await;

    let r = get_size(&mut client, 1000).await;
    assert_eq!(r.served_by(), origin.addr.to_string());
    get_size(&mut client, 5 << 20).await;
    let r = ok(
        &mut client,
        format!(
            "GET /size/10?x=1 HTTP/1.1\r\nHost: {HOST}\r\nConnection: keep-alive\r\n\
             Keep-Alive: timeout=5\r\nX-Custom: kept\r\n\r\n"
        )
        .as_bytes(),
    )
    .await;
    assert_eq!(r.body, pattern(10, 10));
    let upload = pattern(5 << 20, 11);
    assert_eq!(
        ok(&mut client, &post("/upload", &upload)).await.text(),
        digest_of(&upload)
    );
    let chunked = pattern((1 << 20) + 3, 12);
    let request = post_chunked("/upload/chunked", "", &chunked, 100_000, &[]);
    assert_eq!(ok(&mut client, &request).await.text(), digest_of(&chunked));

    let requests = origin.requests();
    assert_eq!(
        kinds(&requests),
        [
            kind("GET", "/size/1000", b""),
            kind("GET", "/size/5242880", b""),
            kind("GET", "/size/10?x=1", b""),
            kind("POST", "/upload", &upload),
            kind("POST", "/upload/chunked", &chunked),
        ]
    );
    for r in &requests {
        relayed_as_h2(r);
    }
    assert_eq!(requests[2].header("x-custom"), Some("kept"));
    for r in &requests[..3] {
        assert_eq!(r.trailers, None, "{r:#?}");
    }
    let connections = origin.connections();
    assert_eq!(
        connections.len(),
        1,
        "sequential requests share one connection: {connections:#?}"
    );
    assert!(connections[0].h2);

    let server = wait_for_server(&switch, origin.addr, "5 requests counted", |s| {
        s["requests"].as_u64() == Some(5)
    })
    .await;
    assert_eq!(server["protocol"], "h2", "{server}");
    assert_eq!(server["tls"], false, "{server}");
    assert_eq!(count(&server["connections"]), 1, "{server}");
}

/// An answer whose stream ends with its head (no DATA, no `content-length`) is a body of none:
/// an HTTP/1.1 client is told `Content-Length: 0` (without it, it would read to the close),
/// an HTTP/2 client gets the one HEADERS frame with END_STREAM and no length the server did
/// not say; a body of unknown length goes chunked to HTTP/1.1.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_ended_with_its_head_is_length_0_to_http11_and_one_frame_to_http2() {
    let origin = H2Origin::start(H2Options::default()).await;
    let switch = h2c_switch(&origin).await;
    let mut client = Client::connect(switch.local_addr("web").unwrap()).await;
    let get = |path: &str| format!("GET {path} HTTP/1.1\r\nHost: {HOST}\r\n\r\n");
    let r = ok(&mut client, get("/empty").as_bytes()).await;
    assert!(r.body.is_empty(), "{:?}", r.text());
    assert_eq!(r.header("content-length"), Some("0"), "{:?}", r.headers);
    assert_eq!(r.header("transfer-encoding"), None, "{:?}", r.headers);
    // Unknown length: chunked, and the connection still good for the next request.
    let r = ok(&mut client, get("/trailers/1000").as_bytes()).await;
    assert!(r.body == pattern(1000, 1000), "GET /trailers/1000");
    assert_eq!(
        r.header("transfer-encoding"),
        Some("chunked"),
        "{:?}",
        r.headers
    );
    assert_eq!(r.header("content-length"), None, "{:?}", r.headers);
    get_size(&mut client, 10).await;

    let h2 = H2::plain(switch.local_addr("web").unwrap()).await;
    let r = h2.get(HOST, "/empty").await;
    assert_eq!(r.status, 200);
    assert!(r.ended_with_headers && r.body.is_empty(), "{r:?}");
    assert_eq!(r.header("content-length"), None, "{r:?}");
    assert_eq!(r.served_by(), origin.addr.to_string());
}

/// Content in an answer that has none (a 204 with DATA) never reaches an HTTP/1.1 client,
/// which would read it as the answer to its next request (response splitting): the client's
/// connection is closed instead.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn data_in_an_answer_without_content_is_never_relayed() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let origin = H2Origin::start(H2Options::default()).await;
    let switch = h2c_switch(&origin).await;
    let mut client = tokio::net::TcpStream::connect(switch.local_addr("web").unwrap())
        .await
        .unwrap();
    let request = format!("GET /204-with-data HTTP/1.1\r\nHost: {HOST}\r\n\r\n");
    client.write_all(request.as_bytes()).await.unwrap();
    // Everything the client gets, to the close (a bounded wait guards against a hang, which
    // fails the test rather than passing it).
    let mut got = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(30), client.read_to_end(&mut got)).await;
    assert!(
        read.is_ok(),
        "the connection stays open after a malformed answer"
    );
    let text = String::from_utf8_lossy(&got);
    assert!(
        !text.contains("X-Smuggled") && !text.contains("SMUGGLE"),
        "{text}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connection_specific_fields_of_an_http11_client_never_reach_an_h2_server() {
    let origin = H2Origin::start(H2Options::default()).await;
    let switch = h2c_switch(&origin).await;
    let mut client = Client::connect(switch.local_addr("web").unwrap()).await;
    // An h2c upgrade attempt (not a WebSocket: served as a plain request), a field named by
    // Connection, Keep-Alive and Proxy-Connection.
    let r = ok(
        &mut client,
        format!(
            "GET /fields HTTP/1.1\r\nHost: {HOST}\r\n\
             Connection: keep-alive, X-Hop, Upgrade, HTTP2-Settings\r\nKeep-Alive: timeout=5\r\n\
             X-Hop: 1\r\nUpgrade: h2c\r\nHTTP2-Settings: AAMAAABkAAQAAP__\r\n\
             Proxy-Connection: keep-alive\r\nX-Custom: kept\r\n\r\n"
        )
        .as_bytes(),
    )
    .await;
    assert_eq!(r.text(), "path /fields\n");
    let requests = origin.requests();
    assert_eq!(requests.len(), 1);
    let r = &requests[0];
    relayed_as_h2(r);
    for name in ["x-hop", "http2-settings"] {
        assert!(!r.has(name), "{name} reached the server: {r:#?}");
    }
    assert_eq!(r.header("x-custom"), Some("kept"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http2_clients_reach_an_h2c_pool_with_bodies_and_trailers_both_ways() {
    let origin = H2Origin::start(H2Options::default()).await;
    let switch = h2c_switch(&origin).await;
    let h2 = H2::plain(switch.local_addr("web").unwrap()).await;

    let r = h2.get(HOST, "/size/5242880").await;
    assert_eq!(r.status, 200);
    assert!(r.body == pattern(5 << 20, 5 << 20), "GET /size/5242880");
    assert_eq!(r.served_by(), origin.addr.to_string());

    let upload = pattern(5 << 20, 21);
    let r = h2
        .exchange(
            request("POST", HOST, "/upload", &[("x-custom", "kept")]),
            Upload::Body {
                data: &upload,
                piece: 16 * 1024,
            },
        )
        .await
        .unwrap();
    assert_eq!((r.status, r.text()), (200, digest_of(&upload)));

    // Request trailers reach the origin; its trailers reach the client.
    let with_trailers = pattern(100_001, 22);
    let checksum = sha256_hex(&with_trailers);
    let mut trailers = HeaderMap::new();
    trailers.insert("x-checksum", HeaderValue::from_str(&checksum).unwrap());
    let r = h2
        .exchange(
            request("POST", HOST, "/trailers", &[("te", "trailers")]),
            Upload::WithTrailers {
                data: &with_trailers,
                trailers,
            },
        )
        .await
        .unwrap();
    assert_eq!((r.status, r.text()), (200, digest_of(&with_trailers)));
    assert_eq!(h2_trailers(&r.trailers), origin_trailers());

    let r = h2.get(HOST, "/trailers/300000").await;
    assert_eq!(r.status, 200);
    assert!(r.body == pattern(300_000, 300_000), "GET /trailers/300000");
    assert_eq!(h2_trailers(&r.trailers), origin_trailers());

    // Trailers and no body at all.
    let r = h2.get(HOST, "/trailers-only").await;
    assert_eq!((r.status, r.body.len()), (200, 0));
    assert_eq!(h2_trailers(&r.trailers), origin_trailers());

    let requests = origin.requests();
    assert_eq!(
        kinds(&requests),
        [
            kind("GET", "/size/5242880", b""),
            kind("POST", "/upload", &upload),
            kind("POST", "/trailers", &with_trailers),
            kind("GET", "/trailers/300000", b""),
            kind("GET", "/trailers-only", b""),
        ]
    );
    for r in &requests {
        relayed_as_h2(r);
    }
    assert_eq!(requests[1].header("x-custom"), Some("kept"));
    assert_eq!(requests[1].trailers, None);
    assert_eq!(
        requests[2].trailers,
        Some(vec![("x-checksum".to_string(), checksum)]),
        "{:#?}",
        requests[2]
    );
    let server = wait_for_server(&switch, origin.addr, "5 requests counted", |s| {
        s["requests"].as_u64() == Some(5)
    })
    .await;
    assert_eq!(server["protocol"], "h2", "{server}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chunked_trailers_of_http11_clients_cross_to_http2_trailers_and_back() {
    let origin = H2Origin::start(H2Options::default()).await;
    let switch = h2c_switch(&origin).await;
    let mut client = Client::connect(switch.local_addr("web").unwrap()).await;
    // TE is hop-by-hop in HTTP/1.1: a client that sends it names it in Connection, as curl does.
    let te = "TE: trailers\r\nConnection: TE\r\n";

    let body = pattern(200_003, 31);
    let checksum = sha256_hex(&body);
    let request = post_chunked(
        "/trailers",
        &format!("{te}Trailer: x-checksum\r\n"),
        &body,
        30_000,
        &[format!("X-Checksum: {checksum}")],
    );
    let r = ok(&mut client, &request).await;
    assert_eq!(r.text(), digest_of(&body));
    assert!(
        r.header("transfer-encoding")
            .is_some_and(|te| te.eq_ignore_ascii_case("chunked")),
        "trailers need chunked: {:?}",
        r.headers
    );
    assert_eq!(trailer_fields(&r.trailers), origin_trailers());

    let r = ok(
        &mut client,
        format!("GET /trailers/100000 HTTP/1.1\r\nHost: {HOST}\r\n{te}\r\n").as_bytes(),
    )
    .await;
    assert!(r.body == pattern(100_000, 100_000), "GET /trailers/100000");
    assert_eq!(trailer_fields(&r.trailers), origin_trailers());

    // Trailers and no body: an empty chunked body with its trailer section.
    let r = ok(
        &mut client,
        format!("GET /trailers-only HTTP/1.1\r\nHost: {HOST}\r\n{te}\r\n").as_bytes(),
    )
    .await;
    assert!(r.body.is_empty(), "{:?}", r.text());
    assert_eq!(trailer_fields(&r.trailers), origin_trailers());

    // The connection is still good for another request.
    get_size(&mut client, 1000).await;

    let requests = origin.requests();
    assert_eq!(
        kinds(&requests),
        [
            kind("POST", "/trailers", &body),
            kind("GET", "/trailers/100000", b""),
            kind("GET", "/trailers-only", b""),
            kind("GET", "/size/1000", b""),
        ]
    );
    assert_eq!(
        requests[0].trailers,
        Some(vec![("x-checksum".to_string(), checksum)]),
        "{:#?}",
        requests[0]
    );
    for r in &requests {
        relayed_as_h2(r);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_chunked_body_held_by_the_switch_reaches_an_h2_server_whole_with_its_trailers() {
    let origin = H2Origin::start(H2Options::default()).await;
    let pool = format!("{PROTOCOL_H2}\nrequest_buffer = \"64KiB\"");
    let switch = start_switch(&rules("", &[server(origin.addr)], &pool, ""), &[]).await;
    let mut client = Client::connect(switch.local_addr("web").unwrap()).await;
    let te = "TE: trailers\r\nConnection: TE\r\n";
    // Held whole (trailers too), then held in part with the rest streamed after it.
    let bodies = [pattern(5000, 41), pattern(200_003, 42)];
    for body in &bodies {
        let checksum = sha256_hex(body);
        let request = post_chunked(
            "/trailers",
            &format!("{te}Trailer: x-checksum\r\n"),
            body,
            30_000,
            &[format!("X-Checksum: {checksum}")],
        );
        assert_eq!(ok(&mut client, &request).await.text(), digest_of(body));
    }
    let requests = origin.requests();
    assert_eq!(
        kinds(&requests),
        [
            kind("POST", "/trailers", &bodies[0]),
            kind("POST", "/trailers", &bodies[1]),
        ]
    );
    for (request, body) in requests.iter().zip(&bodies) {
        let checksum = sha256_hex(body);
        assert_eq!(
            request.trailers,
            Some(vec![("x-checksum".to_string(), checksum)]),
            "{request:#?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hundred_requests_at_once_share_at_most_ten_connections_of_ten_streams() {
    let origin = H2Origin::start(H2Options {
        max_concurrent_streams: Some(10),
        ..H2Options::default()
    })
    .await;
    // One worker: the switch's connections to the server are all in one place.
    let switch = start_switch(
        &rules("workers = 1", &[server(origin.addr)], PROTOCOL_H2, ""),
        &[],
    )
    .await;
    let web = switch.local_addr("web").unwrap();
    let tasks = (0..100)
        .map(|_| {
            tokio::spawn(async move {
                let mut client = Client::connect(web).await;
                let r = ok(
                    &mut client,
                    format!("GET /hold HTTP/1.1\r\nHost: {HOST}\r\n\r\n").as_bytes(),
                )
                .await;
                assert_eq!(r.text(), "held\n");
            })
        })
        .collect();
    // Every request held at the origin at once: 100 streams open, none answered.
    origin
        .wait_for("100 requests held", |s| s.active == 100)
        .await;
    let seen = origin.seen();
    let shape: Vec<(usize, usize)> = seen
        .connections
        .iter()
        .map(|c| (c.streams, c.max_active))
        .collect();
    assert!(
        seen.connections.len() <= 10,
        "at most 10 connections of 10 streams: (streams, most at once) {shape:?}"
    );
    for c in &seen.connections {
        assert!(c.max_active <= 10, "{shape:?}");
        assert!(c.h2, "{c:?}");
    }
    origin.release(100);
    join_all(tasks).await;
    let seen = origin.seen();
    assert_eq!(seen.requests.len(), 100);
    assert!(seen.connections.len() <= 10, "{:#?}", seen.connections);
    assert!(seen.connections.iter().all(|c| c.max_active <= 10));
    let server = wait_for_server(&switch, origin.addr, "100 requests counted", |s| {
        s["requests"].as_u64() == Some(100)
    })
    .await;
    assert!(count(&server["connections"]) <= 10, "{server}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_conns_caps_the_streams_in_flight_at_an_h2_server() {
    let origin = H2Origin::start(H2Options::default()).await;
    let addr = origin.addr;
    let switch = start_switch(
        &rules(
            "",
            &[format!("{{ addr = \"{addr}\", max_conns = 5 }}")],
            &format!("{PROTOCOL_H2}\nqueue_timeout = \"30s\""),
            "",
        ),
        &[],
    )
    .await;
    let web = switch.local_addr("web").unwrap();
    let tasks = (0..12)
        .map(|_| {
            tokio::spawn(async move {
                let mut client = Client::connect(web).await;
                let r = ok(
                    &mut client,
                    format!("GET /hold HTTP/1.1\r\nHost: {HOST}\r\n\r\n").as_bytes(),
                )
                .await;
                assert_eq!(r.text(), "held\n");
            })
        })
        .collect();
    origin.wait_for("5 requests held", |s| s.active == 5).await;
    // The 7 others wait in the pool's queue, not at the server.
    wait_until(&switch, "7 requests queued", |s| {
        s.pools.iter().any(|p| p.name == "api" && p.queued == 7)
    })
    .await;
    let seen = origin.seen();
    assert_eq!(
        (seen.streams(), seen.active),
        (5, 5),
        "{:#?}",
        seen.connections
    );
    origin.release(12);
    join_all(tasks).await;
    let seen = origin.seen();
    assert_eq!(seen.requests.len(), 12);
    assert!(
        seen.max_active <= 5,
        "at most 5 streams at once in total, saw {}: {:#?}",
        seen.max_active,
        seen.connections
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_stream_is_retried_and_the_client_gets_200() {
    let origin = H2Origin::start(H2Options {
        refuse_first: 1,
        ..H2Options::default()
    })
    .await;
    let switch = h2c_switch(&origin).await;
    let mut client = Client::connect(switch.local_addr("web").unwrap()).await;
    let r = get_size(&mut client, 1000).await;
    assert_eq!(r.served_by(), origin.addr.to_string());
    let seen = origin.seen();
    assert_eq!(seen.refused.len(), 1, "{:#?}", seen.refused);
    assert_eq!(seen.refused[0].path, "/size/1000");
    assert_eq!(kinds(&seen.requests), [kind("GET", "/size/1000", b"")]);
    // Later requests go through at once.
    get_size(&mut client, 2000).await;
    assert_eq!(origin.refused().len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_goaway_drains_its_connection_and_new_requests_take_a_new_one() {
    let origin = H2Origin::start(H2Options {
        goaway_after: Some(3),
        ..H2Options::default()
    })
    .await;
    let switch = h2c_switch(&origin).await;
    let mut client = Client::connect(switch.local_addr("web").unwrap()).await;
    for i in 1..=20 {
        get_size(&mut client, 1000 + i).await;
    }
    let seen = origin.seen();
    assert_eq!(seen.requests.len(), 20);
    assert!(seen.refused.is_empty());
    // Each connection's GOAWAY went out before the answer to its third request: the next request
    // comes after it, on a new connection.
    let shape: Vec<(usize, bool, usize)> = seen
        .connections
        .iter()
        .map(|c| (c.streams, c.goaway, c.after_goaway))
        .collect();
    assert!(seen.connections.len() >= 7, "{shape:?}");
    for c in &seen.connections {
        assert!(
            c.streams <= 3 && c.after_goaway == 0,
            "(streams, goaway, after it) {shape:?}"
        );
    }
    assert_eq!(seen.streams(), 20, "{shape:?}");
    let server = wait_for_server(&switch, origin.addr, "20 requests counted", |s| {
        s["requests"].as_u64() == Some(20)
    })
    .await;
    assert!(count(&server["connections"]) >= 7, "{server}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn goaways_under_concurrent_requests_lose_none() {
    let origin = H2Origin::start(H2Options {
        goaway_after: Some(3),
        delay: Some(Duration::from_millis(20)),
        ..H2Options::default()
    })
    .await;
    let switch = h2c_switch(&origin).await;
    let web = switch.local_addr("web").unwrap();
    let tasks = (0..30)
        .map(|i| {
            tokio::spawn(async move {
                let mut client = Client::connect(web).await;
                get_size(&mut client, 500 + i).await;
            })
        })
        .collect();
    join_all(tasks).await;
    let seen = origin.seen();
    let paths: BTreeSet<String> = seen.requests.iter().map(|r| r.path.clone()).collect();
    let expected: BTreeSet<String> = (0..30).map(|i| format!("/size/{}", 500 + i)).collect();
    assert_eq!(paths, expected);
    assert_eq!(seen.requests.len(), 30, "each served once");
}

// ---------------------------------------------------------------- over TLS

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn protocol_h2_over_tls_offers_only_h2_and_is_served() {
    let scratch = Scratch::new("upstream-h2-tls");
    let ca = OriginCa::new("internal CA");
    let origin = H2Origin::start_tls(&ca.issue(&["localhost"]), H2Options::default()).await;
    let name = format!("{{ addr = \"localhost:{}\" }}", origin.addr.port());
    let switch = start_switch(
        &rules("", &[name], PROTOCOL_H2, &tls_table(&scratch, &ca)),
        &[],
    )
    .await;
    let mut client = Client::connect(switch.local_addr("web").unwrap()).await;
    get_size(&mut client, 100_000).await;
    let upload = pattern(1 << 20, 41);
    assert_eq!(
        ok(&mut client, &post("/upload", &upload)).await.text(),
        digest_of(&upload)
    );
    let connections = origin.connections();
    assert!(!connections.is_empty());
    for c in &connections {
        assert!(c.tls && c.h2 && c.error.is_none(), "{c:?}");
        assert_eq!(c.sni.as_deref(), Some("localhost"), "{c:?}");
        assert_eq!(c.alpn_offered, [b"h2".to_vec()], "only h2 offered: {c:?}");
        assert_eq!(c.alpn.as_deref(), Some(&b"h2"[..]), "{c:?}");
    }
    let requests = origin.requests();
    assert_eq!(
        kinds(&requests),
        [
            kind("GET", "/size/100000", b""),
            kind("POST", "/upload", &upload)
        ]
    );
    for r in &requests {
        assert_eq!(r.authority.as_deref(), Some(HOST), "{r:#?}");
    }
    let server = wait_for_server(&switch, origin.addr, "2 requests counted", |s| {
        s["requests"].as_u64() == Some(2)
    })
    .await;
    assert_eq!(server["protocol"], "h2", "{server}");
    assert_eq!(server["tls"], true, "{server}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn protocol_auto_speaks_http11_to_a_server_that_chose_it() {
    let scratch = Scratch::new("upstream-h2-auto-http11");
    let ca = OriginCa::new("internal CA");
    let origin = TlsOrigin::start(&ca.issue(&["localhost"])).await;
    let name = format!("{{ addr = \"localhost:{}\" }}", origin.addr.port());
    let switch = start_switch(
        &rules(
            "",
            &[name],
            "protocol = \"auto\"",
            &tls_table(&scratch, &ca),
        ),
        &[],
    )
    .await;
    let mut client = Client::connect(switch.local_addr("web").unwrap()).await;
    get_size(&mut client, 1000).await;
    get_size(&mut client, 100_000).await;
    let connections = origin.connections();
    assert!(!connections.is_empty());
    for c in &connections {
        assert!(c.handshake.completed(), "{c:?}");
        assert_eq!(
            c.alpn,
            [b"h2".to_vec(), b"http/1.1".to_vec()],
            "auto offers h2, http/1.1: {c:?}"
        );
    }
    let requests = origin.requests();
    let heads: Vec<&str> = requests
        .iter()
        .map(|r| r.head.lines().next().unwrap_or(""))
        .collect();
    assert_eq!(
        heads,
        ["GET /size/1000 HTTP/1.1", "GET /size/100000 HTTP/1.1"]
    );
    let server = wait_for_server(&switch, origin.addr, "2 requests counted", |s| {
        s["requests"].as_u64() == Some(2)
    })
    .await;
    assert_eq!(server["protocol"], "http/1.1", "{server}");
    assert_eq!(server["tls"], true, "{server}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn protocol_auto_speaks_h2_to_a_server_that_chose_it() {
    let scratch = Scratch::new("upstream-h2-auto-h2");
    let ca = OriginCa::new("internal CA");
    let origin = H2Origin::start_tls(&ca.issue(&["localhost"]), H2Options::default()).await;
    let name = format!("{{ addr = \"localhost:{}\" }}", origin.addr.port());
    let switch = start_switch(
        &rules(
            "",
            &[name],
            "protocol = \"auto\"",
            &tls_table(&scratch, &ca),
        ),
        &[],
    )
    .await;
    let mut client = Client::connect(switch.local_addr("web").unwrap()).await;
    get_size(&mut client, 1000).await;
    let upload = pattern(300_000, 51);
    assert_eq!(
        ok(&mut client, &post("/upload", &upload)).await.text(),
        digest_of(&upload)
    );
    for c in &origin.connections() {
        assert!(c.tls && c.h2 && c.error.is_none(), "{c:?}");
        assert_eq!(
            c.alpn_offered,
            [b"h2".to_vec(), b"http/1.1".to_vec()],
            "auto offers h2, http/1.1: {c:?}"
        );
        assert_eq!(c.alpn.as_deref(), Some(&b"h2"[..]), "{c:?}");
    }
    assert_eq!(
        kinds(&origin.requests()),
        [
            kind("GET", "/size/1000", b""),
            kind("POST", "/upload", &upload)
        ]
    );
    let server = wait_for_server(&switch, origin.addr, "2 requests counted", |s| {
        s["requests"].as_u64() == Some(2)
    })
    .await;
    assert_eq!(server["protocol"], "h2", "{server}");
    assert_eq!(server["tls"], true, "{server}");
}

// ---------------------------------------------------------------- health checks

/// Checks of `kind` in an h2c pool of a live h2 origin and a dead address: the dead one goes
/// down, the live one is checked up and gets every request. Returns the origin.
async fn checks_in_an_h2c_pool(kind: &str) -> H2Origin {
    let origin = H2Origin::start(H2Options::default()).await;
    let dead = dead_address().await;
    let path = if kind == "http" {
        "path = \"/health\"\n"
    } else {
        ""
    };
    // panic_threshold = 0: health alone decides. The timeout is far above what a loaded machine
    // takes on loopback: the first check decides at once.
    let health = format!(
        "[pool.api.health]\ncheck = \"{kind}\"\n{path}interval = \"100ms\"\n\
         timeout = \"3s\"\npanic_threshold = 0\n"
    );
    let switch = start_switch(
        &rules(
            "",
            &[server(origin.addr), server(dead)],
            PROTOCOL_H2,
            &health,
        ),
        &[],
    )
    .await;
    let snap = wait_until(
        &switch,
        "the dead server down, the live one checked up",
        |s| {
            let (Some(live), Some(gone)) = (s.server(origin.addr), s.server(dead)) else {
                return false;
            };
            gone.state == State::Down
                && matches!(gone.check.last, Some((false, _, _)))
                && live.state == State::Up
                && matches!(live.check.last, Some((true, _, _)))
        },
    )
    .await;
    let mut client = Client::connect(switch.local_addr("web").unwrap()).await;
    for i in 0..6 {
        let r = get_size(&mut client, 100 + i).await;
        assert_eq!(r.served_by(), origin.addr.to_string(), "{snap:?}");
    }
    let server = server_in(&stats(&switch).await, origin.addr).clone();
    assert_eq!(server["protocol"], "h2", "{server}");
    assert_eq!(server["state"], "up", "{server}");
    origin
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_checks_to_an_h2c_pool_speak_http2_and_take_a_dead_server_down() {
    let origin = checks_in_an_h2c_pool("http").await;
    origin
        .wait_for("a check request", |s| {
            s.requests.iter().any(|r| r.path == "/health")
        })
        .await;
    let seen = origin.seen();
    for r in seen.requests.iter().filter(|r| r.path == "/health") {
        assert_eq!(r.method, "GET", "{r:#?}");
        assert!(seen.connections[r.connection].h2);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tcp_checks_to_an_h2c_pool_take_a_dead_server_down() {
    checks_in_an_h2c_pool("tcp").await;
}

// ---------------------------------------------------------------- the rule file

/// A rule file whose pool `api` has `pool_keys`, and `[pool.api.tls]` with `tls` when given.
fn rule_file(pool_keys: &str, tls: Option<&str>) -> String {
    let tls = tls.map_or(String::new(), |keys| format!("\n[pool.api.tls]\n{keys}\n"));
    format!(
        "[virtual.web]\nlisten = \"127.0.0.1:0\"\ndefault_pool = \"api\"\n\n\
         [pool.api]\nservers = [{{ addr = \"127.0.0.1:8443\" }}]\n{pool_keys}\n{tls}"
    )
}

/// Errors and warnings of the library's check of `text`, written to `rules.toml` in `scratch`.
fn check(scratch: &Scratch, text: &str) -> (String, Vec<String>, Vec<String>) {
    let path = scratch.file("rules.toml", text);
    let checked = tcpvs::Config::check_file(&path).unwrap();
    let errors = match checked.config {
        Ok(_) => Vec::new(),
        Err(errors) => errors.0.iter().map(|e| e.to_string()).collect(),
    };
    let warnings = checked.warnings.iter().map(|w| w.to_string()).collect();
    (path.display().to_string(), errors, warnings)
}

/// `FILE:LINE:COL: ` of the first `needle` in `text`.
fn place(file: &str, text: &str, needle: &str) -> String {
    let (line, col) = position_of(text, needle);
    format!("{file}:{line}:{col}: ")
}

#[test]
fn protocol_h2_and_auto_with_tls_are_accepted() {
    let scratch = Scratch::new("upstream-h2-check-ok");
    let ca = toml_path(&OriginCa::new("internal CA").write(&scratch, "ca.pem"));
    let ca = format!("ca = {ca}");
    for (protocol, tls) in [
        ("h2", None),
        ("h2", Some(ca.as_str())),
        ("auto", Some(ca.as_str())),
        ("http/1.1", None),
        ("http/1.1", Some(ca.as_str())),
    ] {
        let text = rule_file(&format!("protocol = \"{protocol}\""), tls);
        let (_, errors, warnings) = check(&scratch, &text);
        assert_eq!((errors, warnings), (Vec::new(), Vec::new()), "{text}");
    }
}

#[test]
fn protocol_auto_without_tls_and_unknown_protocols_are_errors_at_their_value() {
    let scratch = Scratch::new("upstream-h2-check-errors");
    let ca = toml_path(&OriginCa::new("internal CA").write(&scratch, "ca.pem"));
    let ca = format!("ca = {ca}");
    // (protocol, tls keys, a word the message must hold, any case)
    for (protocol, tls, word) in [
        ("auto", None, "tls"),
        ("h3", None, "h3"),
        ("h3", Some(ca.as_str()), "h3"),
    ] {
        let text = rule_file(&format!("protocol = \"{protocol}\""), tls);
        let (file, errors, _) = check(&scratch, &text);
        assert_eq!(errors.len(), 1, "{text}\n=> {errors:#?}");
        let at = place(&file, &text, &format!("\"{protocol}\""));
        assert!(
            errors[0].starts_with(&at),
            "expected {at}..., got {}",
            errors[0]
        );
        assert!(
            errors[0]
                .to_ascii_lowercase()
                .contains(&word.to_ascii_lowercase()),
            "{} names {word:?}",
            errors[0]
        );
        assert!(!errors[0].contains("warning"), "{}", errors[0]);
    }
}

// ---------------------------------------------------------------- helpers' own checks

#[test]
fn trailer_fields_reads_a_trailer_section() {
    assert_eq!(
        trailer_fields(b"X-T:1\r\nGrpc-Status: 0\r\n"),
        origin_trailers()
    );
    assert!(trailer_fields(b"").is_empty());
}
