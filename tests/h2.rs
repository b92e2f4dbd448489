//! HTTP/2 from clients, end to end: an HTTP/2 client (the h2 crate, tests/common/h2.rs) ->
//! tcpvs -> the recording HTTP/1.1 test backends of tests/common. Prior knowledge on plain
//! services and ALPN `h2` on TLS ones (and neither with `http2 = false`, nor an `h2c` upgrade);
//! every stream routed by the rules on its own, fifty of them in flight on one connection;
//! bodies of megabytes both ways under flow control, with and without a length, trailers both
//! ways; `100-continue`, HEAD, 204 and 304; the translation to HTTP/1.1 as the backend reads
//! it; retries and dead pools per stream; the access log, `/stats` and `/metrics`; GOAWAY when
//! the binary stops (a stream in flight still finishes) and when a reload removes the service.
//!
//! Verdicts rest on what the client and the backends received, byte for byte (SHA-256 of the
//! bodies); waits are bounded by `PATIENCE` only to prevent hangs.

mod common;
#[path = "common/h2_frames.rs"]
mod h2_frames;
#[path = "common/h2.rs"]
mod h2c;

use common::tls::{self, Leaf, TestCa};
use common::*;
use h2c::{offering, request, RawH2, Upload, H2};
use rustls::version::TLS13;
use std::net::SocketAddr;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

// ---------------------------------------------------------------- helpers

/// A switch with one plain service `web` whose default pool is `web`: the one server `{web}`.
const ONE_POOL: &str = r#"
[switch]
access_log = false
[virtual.web]
listen = "127.0.0.1:0"
default_pool = "web"
[pool.web]
servers = [{ addr = "{web}" }]
"#;

/// The value of the field `name` in an HTTP/1.1 head as the backend received it, for each
/// time it occurs.
fn field_values(head: &str, name: &str) -> Vec<String> {
    head.split("\r\n")
        .skip(1)
        .filter_map(|line| line.split_once(':'))
        .filter(|(n, _)| n.eq_ignore_ascii_case(name))
        .map(|(_, v)| v.trim().to_string())
        .collect()
}

/// The request heads a backend received, in order.
fn heads(backend: &Backend) -> Vec<String> {
    backend.record.heads.lock().unwrap().clone()
}

/// The one head a backend received whose request line begins with `start`.
fn head_of(backend: &Backend, start: &str) -> String {
    let found: Vec<String> = heads(backend)
        .into_iter()
        .filter(|h| h.starts_with(start))
        .collect();
    assert_eq!(found.len(), 1, "one head starting {start:?} in {found:#?}");
    found[0].clone()
}

/// What `/sha256` answers for `data`.
fn sha_line(data: &[u8]) -> String {
    format!("{} {}\n", sha256_hex(data), data.len())
}

/// Writes a certificate and its key into `scratch` and returns the `tls` list entry naming
/// them.
fn tls_entry(scratch: &Scratch, leaf: &Leaf) -> String {
    let cert = scratch.file("site.pem", &leaf.cert_pem);
    let key = scratch.file("site.key", &leaf.key_pem);
    format!("[{{ cert = {:?}, key = {:?} }}]", cert, key)
}

/// One backend behind four services: `tls` and `plain` speak HTTP/2 (the default), `tls_h1`
/// and `plain_h1` have `http2 = false`.
struct Site {
    ca: TestCa,
    web: Backend,
    switch: tcpvs::Switch,
    _scratch: Scratch,
}

impl Site {
    async fn start(test: &str) -> Site {
        let ca = TestCa::new();
        let leaf = ca.issue(&["www.example.test"]);
        let scratch = Scratch::new(test);
        let tls = tls_entry(&scratch, &leaf);
        let web = backend().await;
        let rules = format!(
            r#"
[switch]
access_log = false
[virtual.tls]
listen = "127.0.0.1:0"
default_pool = "web"
tls = {tls}
[virtual.tls_h1]
listen = "127.0.0.1:0"
default_pool = "web"
tls = {tls}
http2 = false
[virtual.plain]
listen = "127.0.0.1:0"
default_pool = "web"
[virtual.plain_h1]
listen = "127.0.0.1:0"
default_pool = "web"
http2 = false
[pool.web]
servers = [{{ addr = "{}" }}]
"#,
            web.addr
        );
        let switch = start_switch(&rules, &[]).await;
        Site {
            ca,
            web,
            switch,
            _scratch: scratch,
        }
    }

    fn addr(&self, service: &str) -> SocketAddr {
        self.switch
            .local_addr(service)
            .expect("the service listens")
    }

    fn service(&self, name: &str) -> tcpvs::state::snapshot::ServiceSnapshot {
        self.switch
            .stats()
            .services
            .into_iter()
            .find(|s| s.name == name)
            .expect("the service")
    }
}

/// The ALPN protocol a TLS client connection chose.
fn alpn(client: &tls::TlsClient) -> Option<Vec<u8>> {
    client
        .stream
        .get_ref()
        .1
        .alpn_protocol()
        .map(<[u8]>::to_vec)
}

// ---------------------------------------------------------------- 1. how HTTP/2 begins

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prior_knowledge_on_a_plain_service_is_served_in_http2() {
    let site = Site::start("h2-prior").await;
    let client = H2::plain(site.addr("plain")).await;
    let reply = client.get("www.example.test", "/bytes/20000").await;
    assert_eq!(reply.status, 200);
    assert_eq!(sha256_hex(&reply.body), sha256_hex(&pattern(20000, 20000)));
    assert_eq!(reply.header("content-length"), Some("20000"));
    assert_eq!(reply.served_by(), site.web.addr.to_string());
    assert_eq!(
        client.frames()[0].kind,
        h2c::SETTINGS,
        "the switch's first frame is its SETTINGS"
    );
    let head = head_of(&site.web, "GET /bytes/20000 HTTP/1.1\r\n");
    assert_eq!(field_values(&head, "host"), ["www.example.test"]);
    let plain = site.service("plain");
    assert_eq!((plain.h2_connections, plain.h2_streams), (1, 1));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn alpn_h2_on_tls_and_http11_for_a_client_that_offers_only_http11() {
    let site = Site::start("h2-alpn").await;
    let addr = site.addr("tls");
    let base = site.ca.client_config(&[&TLS13]);
    // Offering both, and h2 alone: h2 (H2::tls asserts the ALPN choice).
    for offer in [&[&b"h2"[..], b"http/1.1"][..], &[b"h2"]] {
        let client = H2::tls(addr, "www.example.test", &offering(&base, offer)).await;
        assert_eq!(client.alpn.as_deref(), Some(&b"h2"[..]));
        let reply = client.get("www.example.test", "/bytes/70000").await;
        assert_eq!(reply.status, 200);
        assert_eq!(sha256_hex(&reply.body), sha256_hex(&pattern(70000, 70000)));
    }
    // http/1.1 alone: HTTP/1.1, as before.
    let mut old = tls::connect(addr, "www.example.test", &base).await;
    assert_eq!(alpn(&old).as_deref(), Some(&b"http/1.1"[..]));
    old.send(b"GET /bytes/3000 HTTP/1.1\r\nHost: www.example.test\r\n\r\n")
        .await;
    let response = old.response(false).await;
    assert_eq!(response.status, 200);
    assert_eq!(response.body, pattern(3000, 3000));
    let tls = site.service("tls");
    assert_eq!((tls.h2_connections, tls.h2_streams), (2, 2));
    assert_eq!(tls.requests, 3);
}

/// Reads from `stream` until the peer closes (EOF or reset); returns everything it sent.
async fn read_to_close(stream: &mut TcpStream) -> Vec<u8> {
    let mut got = Vec::new();
    let mut chunk = [0u8; 4096];
    for _ in 0..10_000 {
        match tokio::time::timeout(PATIENCE, stream.read(&mut chunk))
            .await
            .expect("the switch closes within PATIENCE")
        {
            Ok(0) => return got,
            Ok(n) => got.extend_from_slice(&chunk[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return got,
            Err(e) => panic!("reading from the switch: {e}"),
        }
    }
    panic!("more than 10 000 reads before the close");
}

/// With `http2 = false`: a TLS client offering `h2` alone is refused in the handshake with
/// the `no_application_protocol` alert (README, "ALPN"); one offering `h2` and `http/1.1` gets
/// `http/1.1`. On a plain service the preface is an HTTP/1 request line of version 2.0: `505`,
/// byte for byte, and the connection closed, where an HTTP/2 service answers SETTINGS.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http2_false_offers_no_h2_and_does_not_answer_the_preface() {
    let site = Site::start("h2-off").await;
    let base = site.ca.client_config(&[&TLS13]);
    // TLS, h2 alone: refused in the handshake.
    let refused = tls::try_connect(
        site.addr("tls_h1"),
        "www.example.test",
        &offering(&base, &[b"h2"]),
    )
    .await
    .err()
    .expect("the handshake fails");
    let alert = refused
        .get_ref()
        .and_then(|e| e.downcast_ref::<rustls::Error>())
        .unwrap_or_else(|| panic!("not a TLS error: {refused:?}"));
    assert_eq!(
        alert,
        &rustls::Error::AlertReceived(rustls::AlertDescription::NoApplicationProtocol),
        "{refused:?}"
    );
    // TLS, h2 then http/1.1: http/1.1, served.
    let mut client = tls::connect(
        site.addr("tls_h1"),
        "www.example.test",
        &offering(&base, &[b"h2", b"http/1.1"]),
    )
    .await;
    assert_eq!(alpn(&client).as_deref(), Some(&b"http/1.1"[..]));
    client
        .send(b"GET /bytes/10 HTTP/1.1\r\nHost: www.example.test\r\n\r\n")
        .await;
    assert_eq!(client.response(false).await.body, pattern(10, 10));

    // Plain: the preface and a SETTINGS frame are an HTTP/1 request of version 2.0.
    let mut hello = h2c::PREFACE.to_vec();
    hello.extend(h2c::frame(h2c::SETTINGS, 0, 0, &[]));
    let mut raw = TcpStream::connect(site.addr("plain_h1")).await.unwrap();
    raw.write_all(&hello).await.unwrap();
    let answer = read_to_close(&mut raw).await;
    let body = "505 HTTP Version Not Supported: HTTP version not supported\n";
    assert_eq!(
        String::from_utf8_lossy(&answer),
        format!(
            "HTTP/1.1 505 HTTP Version Not Supported\r\nContent-Type: text/plain\r\n\
             Content-Length: {}\r\nCache-Control: no-store\r\nConnection: close\r\n\r\n{body}",
            body.len()
        )
    );
    // The same bytes to the HTTP/2 service: SETTINGS first.
    let mut raw = TcpStream::connect(site.addr("plain")).await.unwrap();
    raw.write_all(&hello).await.unwrap();
    let mut first = [0u8; 9];
    tokio::time::timeout(PATIENCE, raw.read_exact(&mut first))
        .await
        .expect("a frame within PATIENCE")
        .unwrap();
    assert_eq!(first[3], h2c::SETTINGS);

    assert_eq!(
        site.web.requests(),
        1,
        "only the HTTP/1.1 request was served"
    );
    for name in ["tls_h1", "plain_h1"] {
        assert_eq!(site.service(name).h2_connections, 0, "{name}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_h2c_upgrade_is_served_as_http11_and_not_upgraded() {
    let site = Site::start("h2-h2c").await;
    let mut client = Client::connect(site.addr("plain")).await;
    client
        .send(
            b"GET /headers HTTP/1.1\r\nHost: www.example.test\r\nConnection: Upgrade, HTTP2-Settings\r\n\
              Upgrade: h2c\r\nHTTP2-Settings: AAMAAABkAARAAAAAAAIAAAAA\r\n\r\n",
        )
        .await;
    let response = client.response(false).await;
    assert_eq!(response.status, 200, "no 101: {}", response.text());
    let seen = response.text().to_ascii_lowercase();
    assert!(
        !seen.contains("h2c") && !seen.contains("http2-settings"),
        "the upgrade does not reach the server: {seen}"
    );
    // Still HTTP/1.1 on the same connection.
    let again = client.get("/bytes/50").await;
    assert_eq!((again.status, again.body), (200, pattern(50, 50)));
    assert_eq!(site.service("plain").h2_connections, 0);
}

// ---------------------------------------------------------------- 2. routing per stream

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_stream_is_routed_by_its_authority_and_path() {
    let (a, images, other) = (backend().await, backend().await, backend().await);
    let rules = r#"
[switch]
access_log = false
[virtual.web]
listen = "127.0.0.1:0"
default_pool = "other"
[[virtual.web.rule]]
path = "^/img/"
pool = "images"
[[virtual.web.rule]]
host = '^a\.test$'
pool = "a"
[pool.a]
servers = [{ addr = "{a}" }]
[pool.images]
servers = [{ addr = "{images}" }]
[pool.other]
servers = [{ addr = "{other}" }]
"#;
    let vars = [
        ("a", a.addr.to_string()),
        ("images", images.addr.to_string()),
        ("other", other.addr.to_string()),
    ];
    let switch = start_switch(rules, &vars).await;
    let client = H2::plain(switch.local_addr("web").unwrap()).await;
    for (authority, path, expected) in [
        ("a.test", "/page", &a),
        ("a.test", "/img/1", &images),
        ("b.test", "/img/2", &images),
        ("b.test", "/page", &other),
        ("a.test", "/again", &a),
    ] {
        let reply = client.get(authority, path).await;
        assert_eq!(reply.status, 200, "{authority}{path}");
        assert_eq!(
            reply.served_by(),
            expected.addr.to_string(),
            "{authority}{path}"
        );
        assert_eq!(reply.text(), format!("path {path}\n"));
        let head = head_of(expected, &format!("GET {path} HTTP/1.1\r\n"));
        assert_eq!(field_values(&head, "host"), [authority]);
    }
    assert_eq!(
        (a.requests(), images.requests(), other.requests()),
        (2, 2, 1)
    );
    assert_eq!(switch.stats().services[0].h2_connections, 1);
}

/// Five pools chosen by `:authority` (`p0.test` .. `p4.test`) and one by path (`/chunked/`).
async fn six_pools() -> (tcpvs::Switch, Vec<Backend>) {
    let mut pools = Vec::new();
    for _ in 0..6 {
        pools.push(backend().await);
    }
    let mut rules = String::from(
        "[switch]\naccess_log = false\n[virtual.web]\nlisten = \"127.0.0.1:0\"\n\
         [[virtual.web.rule]]\npath = \"^/chunked/\"\npool = \"c\"\n",
    );
    for i in 0..5 {
        rules.push_str(&format!(
            "[[virtual.web.rule]]\nhost = '^p{i}\\.test$'\npool = \"p{i}\"\n"
        ));
    }
    for (i, b) in pools.iter().enumerate() {
        let name = if i == 5 {
            "c".to_string()
        } else {
            format!("p{i}")
        };
        rules.push_str(&format!(
            "[pool.{name}]\nservers = [{{ addr = \"{}\" }}]\n",
            b.addr
        ));
    }
    (start_switch(&rules, &[]).await, pools)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifty_streams_at_once_on_one_connection_each_byte_exact_from_its_pool() {
    let (switch, pools) = six_pools().await;
    let client = H2::plain(switch.local_addr("web").unwrap()).await;
    let mut tasks = Vec::new();
    for i in 0..50usize {
        let streams = client.streams();
        let (authority, path, pool, n) = if i % 6 == 5 {
            let n = 40_000 + i * 1013;
            (format!("p{}.test", i % 5), format!("/chunked/{n}"), 5, n)
        } else {
            let n = 1000 + i * 4099;
            (format!("p{}.test", i % 5), format!("/bytes/{n}"), i % 5, n)
        };
        let expected = pools[pool].addr.to_string();
        tasks.push(tokio::spawn(async move {
            let reply = streams.get(&authority, &path).await;
            assert_eq!(reply.status, 200, "{authority}{path}");
            assert_eq!(reply.served_by(), expected, "{authority}{path}");
            assert_eq!(
                sha256_hex(&reply.body),
                sha256_hex(&pattern(n, n as u64)),
                "{authority}{path}"
            );
        }));
    }
    join_all(tasks).await;
    let per_pool: Vec<usize> = pools.iter().map(Backend::requests).collect();
    assert_eq!(per_pool, [8, 8, 8, 9, 9, 8]);
    let web = &switch.stats().services[0];
    assert_eq!((web.h2_connections, web.h2_streams), (1, 50));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifty_streams_are_in_flight_at_once_on_one_connection() {
    let (switch, pools) = six_pools().await;
    let client = H2::plain(switch.local_addr("web").unwrap()).await;
    let mut tasks = Vec::new();
    for i in 0..50usize {
        let streams = client.streams();
        let authority = format!("p{}.test", i % 5);
        let expected = pools[i % 5].addr.to_string();
        tasks.push(tokio::spawn(async move {
            let reply = streams.get(&authority, &format!("/hold?stream={i}")).await;
            assert_eq!(reply.status, 200);
            assert_eq!(reply.body, b"0123456789");
            assert_eq!(reply.served_by(), expected);
        }));
    }
    // Each pool's server holds ten requests unanswered: all fifty are in flight together.
    for pool in &pools[..5] {
        pool.wait_for_requests(10).await;
    }
    for pool in &pools[..5] {
        pool.release(10);
    }
    join_all(tasks).await;
    for (p, pool) in pools[..5].iter().enumerate() {
        let mut seen: Vec<usize> = heads(pool)
            .iter()
            .map(|h| {
                let target = h.split(' ').nth(1).expect("a target");
                target
                    .strip_prefix("/hold?stream=")
                    .and_then(|n| n.parse().ok())
                    .expect("a held stream")
            })
            .collect();
        seen.sort_unstable();
        let expected: Vec<usize> = (0..50).filter(|i| i % 5 == p).collect();
        assert_eq!(seen, expected, "pool p{p}");
    }
    assert_eq!(switch.stats().services[0].h2_streams, 50);
}

// ---------------------------------------------------------------- 3. bodies

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn uploads_of_one_and_five_mib_with_and_without_length() {
    let web = backend().await;
    let switch = start_switch(ONE_POOL, &[("web", web.addr.to_string())]).await;
    let client = H2::plain(switch.local_addr("web").unwrap()).await;
    for (n, with_length) in [
        (1 << 20, true),
        (1 << 20, false),
        (5 << 20, true),
        (5 << 20, false),
    ] {
        let data = pattern(n, n as u64 + u64::from(with_length));
        let length = n.to_string();
        let fields: &[(&str, &str)] = if with_length {
            &[("content-length", &length)]
        } else {
            &[]
        };
        let reply = client
            .exchange(
                request(
                    "POST",
                    "www.test",
                    &format!("/sha256?n={n}&l={with_length}"),
                    fields,
                ),
                Upload::Body {
                    data: &data,
                    piece: 16 * 1024,
                },
            )
            .await
            .expect("the upload is answered");
        assert_eq!(reply.status, 200);
        assert_eq!(
            reply.text(),
            sha_line(&data),
            "{n} bytes, length {with_length}"
        );
        let head = head_of(&web, &format!("POST /sha256?n={n}&l={with_length} "));
        if with_length {
            assert_eq!(field_values(&head, "content-length"), [length.as_str()]);
            assert!(
                field_values(&head, "transfer-encoding").is_empty(),
                "{head}"
            );
        } else {
            assert_eq!(field_values(&head, "transfer-encoding"), ["chunked"]);
            assert!(field_values(&head, "content-length").is_empty(), "{head}");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn downloads_with_length_chunked_with_trailers_and_until_close() {
    let web = backend().await;
    let switch = start_switch(ONE_POOL, &[("web", web.addr.to_string())]).await;
    let client = H2::plain(switch.local_addr("web").unwrap()).await;

    let n = 1_500_000;
    let reply = client.get("www.test", &format!("/bytes/{n}")).await;
    assert_eq!(reply.status, 200);
    assert_eq!(reply.header("content-length"), Some("1500000"));
    assert_eq!(sha256_hex(&reply.body), sha256_hex(&pattern(n, n as u64)));
    assert!(reply.trailers.is_none());

    // Chunked from the server: DATA without a length, then its trailers as HTTP/2 trailers.
    let n = 1_300_000;
    let reply = client.get("www.test", &format!("/chunked/{n}")).await;
    assert_eq!(reply.status, 200);
    assert_eq!(reply.header("content-length"), None);
    assert_eq!(reply.header("transfer-encoding"), None);
    assert_eq!(sha256_hex(&reply.body), sha256_hex(&pattern(n, n as u64)));
    let trailers = reply.trailers.expect("the server's trailers");
    assert_eq!(
        trailers.get("x-trailer").map(|v| v.as_bytes()),
        Some(&b"done"[..])
    );
    assert_eq!(trailers.len(), 1);

    // Delimited by the server's close.
    let n = 1_200_000;
    let reply = client.get("www.test", &format!("/close/{n}")).await;
    assert_eq!(reply.status, 200);
    assert_eq!(reply.header("content-length"), None);
    assert_eq!(sha256_hex(&reply.body), sha256_hex(&pattern(n, n as u64)));
    assert!(reply.trailers.is_none());
}

/// A server whose answers spell their Content-Length three ways: each reaches an HTTP/2
/// client as the number alone (the value is passed on as the server wrote it only when it is
/// already in that form: h2/response.rs).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_content_length_goes_on_in_its_canonical_form() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let web = listener.local_addr().unwrap();
    let server = tokio::spawn(async move {
        let answers: [&[u8]; 3] = [
            b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello",
            b"HTTP/1.1 200 OK\r\nContent-Length: 0005\r\n\r\nhello",
            b"HTTP/1.1 200 OK\r\nContent-Length: 5, 5\r\n\r\nhello",
        ];
        let (mut stream, _) = listener.accept().await.unwrap();
        let mut buf = Vec::new();
        let mut chunk = vec![0u8; 4096];
        for answer in answers {
            while !buf.windows(4).any(|w| w == b"\r\n\r\n") {
                let n = tokio::time::timeout(PATIENCE, stream.read(&mut chunk))
                    .await
                    .expect("a request within PATIENCE")
                    .unwrap();
                assert!(n > 0, "closed before a request");
                buf.extend_from_slice(&chunk[..n]);
            }
            let end = buf.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
            buf.drain(..end);
            stream.write_all(answer).await.unwrap();
        }
    });
    let switch = start_switch(ONE_POOL, &[("web", web.to_string())]).await;
    let client = H2::plain(switch.local_addr("web").unwrap()).await;
    for path in ["/plain", "/zeros", "/list"] {
        let reply = client.get("www.test", path).await;
        assert_eq!(reply.status, 200, "{path}");
        assert_eq!(reply.header("content-length"), Some("5"), "{path}");
        assert_eq!(reply.body, b"hello", "{path}");
    }
    server.await.unwrap();
}

/// What the trailer server received: the head, the decoded body, the trailer section.
struct Received {
    head: String,
    body: Vec<u8>,
    trailers: String,
}

/// A one-connection HTTP/1.1 server that reads a chunked request whole (trailers included,
/// which the common backend does not keep), answers `ok`, and hands over what it read.
async fn trailer_server() -> (SocketAddr, tokio::task::JoinHandle<Received>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let task = tokio::spawn(async move {
        let (mut stream, _) = listener.accept().await.unwrap();
        let mut buf = Vec::new();
        let mut chunk = vec![0u8; 65536];
        loop {
            if let Some(received) = decode_chunked_request(&buf) {
                stream
                    .write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
                    .await
                    .unwrap();
                return received;
            }
            let n = tokio::time::timeout(PATIENCE, stream.read(&mut chunk))
                .await
                .expect("the request within PATIENCE")
                .unwrap();
            assert!(n > 0, "closed inside the request: {buf:?}");
            buf.extend_from_slice(&chunk[..n]);
        }
    });
    (addr, task)
}

/// A whole chunked request in `buf`, or `None` while it is incomplete.
fn decode_chunked_request(buf: &[u8]) -> Option<Received> {
    let head_end = buf.windows(4).position(|w| w == b"\r\n\r\n")? + 4;
    let mut at = head_end;
    let mut body = Vec::new();
    loop {
        let line_end = at + buf[at..].windows(2).position(|w| w == b"\r\n")?;
        let line = std::str::from_utf8(&buf[at..line_end]).expect("a chunk size line");
        let size = usize::from_str_radix(line, 16).expect("a hexadecimal chunk size");
        at = line_end + 2;
        if size == 0 {
            // The trailer section: field lines up to an empty line.
            let mut end_of_section = at;
            loop {
                let line_end = end_of_section
                    + buf[end_of_section..]
                        .windows(2)
                        .position(|w| w == b"\r\n")?;
                if line_end == end_of_section {
                    break;
                }
                end_of_section = line_end + 2;
            }
            return Some(Received {
                head: String::from_utf8_lossy(&buf[..head_end]).into_owned(),
                body,
                trailers: String::from_utf8_lossy(&buf[at..end_of_section]).into_owned(),
            });
        }
        if buf.len() < at + size + 2 {
            return None;
        }
        body.extend_from_slice(&buf[at..at + size]);
        assert_eq!(
            &buf[at + size..at + size + 2],
            b"\r\n",
            "chunk data ends in CRLF"
        );
        at += size + 2;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn request_trailers_reach_the_server_as_chunked_trailers() {
    let (server, received) = trailer_server().await;
    let switch = start_switch(ONE_POOL, &[("web", server.to_string())]).await;
    let client = H2::plain(switch.local_addr("web").unwrap()).await;
    let data = pattern(300_000, 5);
    let mut trailers = http::HeaderMap::new();
    trailers.insert("x-checksum", sha256_hex(&data).parse().unwrap());
    trailers.insert("x-note", "end".parse().unwrap());
    let reply = client
        .exchange(
            request("PUT", "www.test", "/upload", &[]),
            Upload::WithTrailers {
                data: &data,
                trailers,
            },
        )
        .await
        .expect("the upload is answered");
    assert_eq!((reply.status, reply.text().as_str()), (200, "ok"));
    let received = tokio::time::timeout(PATIENCE, received)
        .await
        .expect("the server is done")
        .unwrap();
    assert!(received.head.starts_with("PUT /upload HTTP/1.1\r\n"));
    assert_eq!(
        field_values(&received.head, "transfer-encoding"),
        ["chunked"]
    );
    assert!(field_values(&received.head, "content-length").is_empty());
    assert_eq!(sha256_hex(&received.body), sha256_hex(&data));
    let mut lines: Vec<&str> = received
        .trailers
        .split("\r\n")
        .filter(|l| !l.is_empty())
        .collect();
    lines.sort_unstable();
    let checksum = format!("x-checksum: {}", sha256_hex(&data));
    assert_eq!(lines, [checksum.as_str(), "x-note: end"]);
}

// ---------------------------------------------------------------- 4. 100-continue, HEAD, 204, 304

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn continue_head_204_and_304_keep_their_http_meaning() {
    let web = backend().await;
    let switch = start_switch(ONE_POOL, &[("web", web.addr.to_string())]).await;
    let client = H2::plain(switch.local_addr("web").unwrap()).await;

    // expect: 100-continue: the 100 comes first, then the body goes, then the answer.
    let data = pattern(200_000, 9);
    let length = data.len().to_string();
    let reply = client
        .exchange(
            request(
                "POST",
                "www.test",
                "/continue",
                &[("expect", "100-continue"), ("content-length", &length)],
            ),
            Upload::AfterContinue(&data),
        )
        .await
        .expect("answered");
    assert_eq!(reply.informational, [100]);
    assert_eq!((reply.status, reply.text()), (200, sha_line(&data)));
    let head = head_of(&web, "POST /continue ");
    assert_eq!(field_values(&head, "expect"), ["100-continue"]);

    // HEAD: the length of what a GET would get, and no DATA.
    let reply = client
        .exchange(
            request("HEAD", "www.test", "/bytes/5000", &[]),
            Upload::None,
        )
        .await
        .expect("answered");
    assert_eq!(reply.status, 200);
    assert_eq!(reply.header("content-length"), Some("5000"));
    assert!(reply.body.is_empty() && reply.ended_with_headers);

    // 204 and 304: no body (the 304 keeps its validator).
    let reply = client.get("www.test", "/status/204").await;
    assert_eq!(reply.status, 204);
    assert!(reply.body.is_empty() && reply.ended_with_headers);
    assert_eq!(reply.header("content-length"), None);
    let reply = client.get("www.test", "/status/304").await;
    assert_eq!(reply.status, 304);
    assert!(reply.body.is_empty() && reply.ended_with_headers);
    assert_eq!(reply.header("etag"), Some("\"abc\""));
    assert_eq!(web.requests(), 4);
}

// ---------------------------------------------------------------- 5. the translation

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_server_reads_one_cookie_field_host_from_authority_and_no_te() {
    let web = backend().await;
    let switch = start_switch(ONE_POOL, &[("web", web.addr.to_string())]).await;
    let client = H2::plain(switch.local_addr("web").unwrap()).await;
    let reply = client
        .exchange(
            request(
                "GET",
                "www.example.test",
                "/headers?q=1",
                &[
                    ("cookie", "a=1"),
                    ("accept", "*/*"),
                    ("cookie", "b=2"),
                    ("te", "trailers"),
                    ("x-custom", "kept"),
                ],
            ),
            Upload::None,
        )
        .await
        .expect("answered");
    assert_eq!(reply.status, 200);
    let head = reply.text();
    assert_eq!(head, head_of(&web, "GET /headers?q=1 HTTP/1.1\r\n"));
    assert_eq!(field_values(&head, "cookie"), ["a=1; b=2"]);
    assert_eq!(field_values(&head, "host"), ["www.example.test"]);
    assert_eq!(field_values(&head, "x-forwarded-for"), ["127.0.0.1"]);
    assert_eq!(field_values(&head, "x-custom"), ["kept"]);
    assert_eq!(field_values(&head, "accept"), ["*/*"]);
    assert!(field_values(&head, "te").is_empty(), "te forwarded: {head}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_that_disagrees_with_the_authority_is_refused_and_never_reaches_a_server() {
    let web = backend().await;
    let switch = start_switch(ONE_POOL, &[("web", web.addr.to_string())]).await;
    let client = H2::plain(switch.local_addr("web").unwrap()).await;
    let refused = client
        .exchange(
            request("GET", "a.test", "/mismatch", &[("host", "b.test")]),
            Upload::None,
        )
        .await;
    match refused {
        Err(e) => assert_eq!(e.reason(), Some(h2::Reason::PROTOCOL_ERROR), "{e}"),
        Ok(reply) => assert!((400..500).contains(&reply.status), "{reply:?}"),
    }
    // The connection goes on; the server saw only the next request.
    let reply = client.get("a.test", "/after").await;
    assert_eq!(reply.status, 200);
    assert_eq!(web.requests(), 1);
    assert_eq!(heads(&web)[0].lines().next(), Some("GET /after HTTP/1.1"));
    assert_eq!(switch.stats().services[0].h2_protocol_errors, 1);
}

// ---------------------------------------------------------------- 6. retries and dead pools

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_server_is_passed_over_and_a_dead_pool_fails_only_its_streams() {
    let live = backend().await;
    let (dead, gone) = (dead_address().await, dead_address().await);
    let rules = r#"
[switch]
access_log = false
[virtual.web]
listen = "127.0.0.1:0"
default_pool = "mixed"
[[virtual.web.rule]]
path = "^/gone"
pool = "gone"
[pool.mixed]
scheduler = "rr"
servers = [{ addr = "{dead}" }, { addr = "{live}" }]
[pool.gone]
servers = [{ addr = "{gone}" }]
[pool.gone.health]
check = "none"
max_fails = 1
fail_timeout = "1h"
panic_threshold = 0
"#;
    let vars = [
        ("dead", dead.to_string()),
        ("live", live.addr.to_string()),
        ("gone", gone.to_string()),
    ];
    let switch = start_switch(rules, &vars).await;
    let client = H2::plain(switch.local_addr("web").unwrap()).await;
    // The first request: rr offers the dead server first, the live one serves it.
    let first = client.get("www.test", "/bytes/777").await;
    assert_eq!(first.served_by(), live.addr.to_string());
    assert_eq!((first.status, first.body), (200, pattern(777, 777)));
    let snap = switch.stats();
    assert!(snap.server(dead).expect("the dead server").connect_errors >= 1);
    // The dead pool: its one server fails the first stream (502, as for HTTP/1.1) and is down
    // from then on (`max_fails = 1`).
    let failed = client.get("www.test", "/gone/first").await;
    assert_eq!(failed.status, 502, "{}", failed.text());
    wait_until(&switch, "the dead pool's server is down", |s| {
        s.server(gone)
            .is_some_and(|s| s.state == tcpvs::state::status::State::Down)
    })
    .await;
    // Then streams to both pools at once on the one connection: 503 where no server is up.
    let mut tasks = Vec::new();
    for i in 0..12usize {
        let streams = client.streams();
        let live_addr = live.addr.to_string();
        tasks.push(tokio::spawn(async move {
            if i % 3 == 0 {
                let reply = streams.get("www.test", &format!("/gone/{i}")).await;
                assert_eq!(reply.status, 503, "{}", reply.text());
            } else {
                let n = 100 + i;
                let reply = streams.get("www.test", &format!("/bytes/{n}")).await;
                assert_eq!(reply.served_by(), live_addr);
                assert_eq!((reply.status, reply.body), (200, pattern(n, n as u64)));
            }
        }));
    }
    join_all(tasks).await;
    assert_eq!(live.requests(), 9);
    let web = &switch.stats().services[0];
    assert_eq!((web.h2_connections, web.h2_streams), (1, 14));
}

// ---------------------------------------------------------------- 7. access log, /stats, /metrics

/// `GET path` on the admin endpoint: the body of its 200.
async fn admin_get(admin: SocketAddr, path: &str) -> String {
    let mut stream = TcpStream::connect(admin).await.unwrap();
    let request = format!("GET {path} HTTP/1.1\r\nHost: {admin}\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut raw = Vec::new();
    tokio::time::timeout(PATIENCE, stream.read_to_end(&mut raw))
        .await
        .expect("the endpoint answers and closes")
        .unwrap();
    let text = String::from_utf8(raw).expect("UTF-8");
    let (head, body) = text.split_once("\r\n\r\n").expect("a head");
    assert!(head.starts_with("HTTP/1.1 200 "), "{head}");
    body.to_string()
}

/// Waits until the file holds `n` complete lines and returns them; panics after PATIENCE.
async fn log_lines(path: &std::path::Path, n: usize) -> Vec<String> {
    let deadline = tokio::time::Instant::now() + PATIENCE;
    loop {
        let text = std::fs::read_to_string(path).unwrap_or_default();
        let complete = text.rfind('\n').map_or("", |end| &text[..=end]);
        let lines: Vec<String> = complete.lines().map(str::to_string).collect();
        assert!(lines.len() <= n, "more than {n} lines: {lines:#?}");
        if lines.len() == n {
            return lines;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{} lines, not {n}: {lines:#?}",
            lines.len()
        );
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_access_log_stats_and_metrics_count_a_scripted_exchange() {
    let web = backend().await;
    let scratch = Scratch::new("h2-counters");
    let log = scratch.0.join("access.log");
    let rules = r#"
[switch]
access_log = "{log}"
access_log_format = "combined"
[admin]
listen = "127.0.0.1:0"
[virtual.web]
listen = "127.0.0.1:0"
default_pool = "web"
[pool.web]
servers = [{ addr = "{web}" }]
"#;
    let vars = [
        ("log", log.to_str().expect("a UTF-8 path").to_string()),
        ("web", web.addr.to_string()),
    ];
    let switch = start_switch(rules, &vars).await;
    let addr = switch.local_addr("web").unwrap();
    let admin = switch.admin_addr().unwrap();

    // Connection 1: three streams served, one refused (Host against :authority).
    let mut first = H2::plain(addr).await;
    assert_eq!(first.get("www.test", "/bytes/100").await.status, 200);
    assert_eq!(first.get("www.test", "/bytes/200").await.status, 200);
    let data = pattern(1000, 1);
    let reply = first
        .exchange(
            request("POST", "www.test", "/sha256", &[("content-length", "1000")]),
            Upload::Body {
                data: &data,
                piece: 400,
            },
        )
        .await
        .expect("answered");
    assert_eq!(reply.text(), sha_line(&data));
    let refused = first
        .exchange(
            request("GET", "www.test", "/mismatch", &[("host", "other.test")]),
            Upload::None,
        )
        .await;
    assert!(refused.is_err(), "reset: {refused:?}");
    first.abort().await;
    // Connection 2: DATA on stream 0 is a connection error: GOAWAY with PROTOCOL_ERROR.
    let mut raw = RawH2::connect(addr).await;
    raw.send(&h2c::frame(h2c::DATA, 0, 0, b"x")).await;
    let frames = raw.frames_until_close().await;
    let goaways: Vec<_> = frames.iter().filter(|f| f.kind == h2c::GOAWAY).collect();
    assert_eq!(goaways.len(), 1, "{frames:?}");
    assert_eq!(goaways[0].error_code(), Some(h2c::PROTOCOL_ERROR));
    // Connection 3: HTTP/1.1.
    let mut old = Client::connect(addr).await;
    assert_eq!(old.get("/bytes/300").await.status, 200);
    drop(old);
    settle(&switch).await;

    let snap = switch.stats();
    let service = &snap.services[0];
    assert_eq!(
        (
            service.h2_connections,
            service.h2_streams,
            service.h2_protocol_errors,
            service.h2_goaways_sent,
            service.requests
        ),
        (2, 4, 2, 1, 5)
    );
    let stats: serde_json::Value =
        serde_json::from_str(&admin_get(admin, "/stats").await).expect("JSON");
    let web_stats = &stats["services"][0];
    assert_eq!(web_stats["name"], "web");
    for (key, value) in [
        ("h2_connections", 2),
        ("h2_streams", 4),
        ("h2_protocol_errors", 2),
        ("h2_goaways_sent", 1),
    ] {
        assert_eq!(web_stats[key], value, "{key} in {web_stats}");
    }
    let metrics = admin_get(admin, "/metrics").await;
    for line in [
        "tcpvs_service_h2_connections_total{service=\"web\"} 2\n",
        "tcpvs_service_h2_streams_total{service=\"web\"} 4\n",
        "tcpvs_service_h2_protocol_errors_total{service=\"web\"} 2\n",
        "tcpvs_service_h2_goaways_sent_total{service=\"web\"} 1\n",
    ] {
        assert!(metrics.contains(line), "{line} in\n{metrics}");
    }

    let lines = log_lines(&log, 5).await;
    for (request, status) in [
        ("\"GET /bytes/100 HTTP/2.0\"", " 200 "),
        ("\"GET /bytes/200 HTTP/2.0\"", " 200 "),
        ("\"POST /sha256 HTTP/2.0\"", " 200 "),
        ("\"GET /mismatch HTTP/2.0\"", " "),
        ("\"GET /bytes/300 HTTP/1.1\"", " 200 "),
    ] {
        let found: Vec<&String> = lines.iter().filter(|l| l.contains(request)).collect();
        assert_eq!(found.len(), 1, "{request} in {lines:#?}");
        assert!(
            found[0].contains(&format!("{request}{status}")),
            "{request}{status} in {}",
            found[0]
        );
    }
}

// ---------------------------------------------------------------- 8. GOAWAY

/// Starts `tcpvs run -c RULES` and waits for the address of its service.
async fn run_binary(rules: std::path::PathBuf) -> (Process, SocketAddr) {
    tokio::task::spawn_blocking(move || {
        let process = Process::start(&["run".as_ref(), "-c".as_ref(), rules.as_os_str()]);
        let (addr, _) = process.address_after("listening on ");
        (process, addr)
    })
    .await
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_sends_goaway_and_a_stream_in_flight_still_completes() {
    let web = backend().await;
    let scratch = Scratch::new("h2-sigterm");
    let rules = scratch.file(
        "rules.toml",
        &format!(
            "[switch]\naccess_log = false\nshutdown_timeout = \"30s\"\n\
             [virtual.web]\nlisten = \"127.0.0.1:0\"\ndefault_pool = \"web\"\n\
             [pool.web]\nservers = [{{ addr = \"{}\" }}]\n",
            web.addr
        ),
    );
    let (process, addr) = run_binary(rules).await;
    let mut idle = H2::plain(addr).await;
    assert_eq!(idle.get("www.test", "/bytes/10").await.status, 200);
    let mut busy = H2::plain(addr).await;
    let streams = busy.streams();
    let in_flight = tokio::spawn(async move { streams.get("www.test", "/hold").await });
    web.wait_for_requests(2).await;

    signal(&process, rustix::process::Signal::TERM);
    // The idle connection: GOAWAY with NO_ERROR, then the close.
    let goaways = idle.wait_for_goaway().await;
    assert!(
        goaways
            .iter()
            .all(|g| g.error_code() == Some(h2c::NO_ERROR)),
        "{goaways:?}"
    );
    idle.closed().await.expect("a clean close after GOAWAY");
    // The busy one: GOAWAY too, and it keeps the stream that was running (id 1).
    let goaways = busy.wait_for_goaway().await;
    assert!(
        goaways
            .iter()
            .all(|g| g.error_code() == Some(h2c::NO_ERROR)),
        "{goaways:?}"
    );
    assert!(
        goaways.iter().all(|g| g.last_stream() >= Some(1)),
        "{goaways:?}"
    );
    web.release(1);
    let reply = tokio::time::timeout(PATIENCE, in_flight)
        .await
        .expect("the stream in flight ends")
        .expect("its task does not panic");
    assert_eq!(
        (reply.status, reply.body.as_slice()),
        (200, &b"0123456789"[..])
    );
    busy.closed()
        .await
        .expect("a clean close after the last stream");
    let (lines, status) = log_to_end(process).await;
    assert!(status.success(), "exit status {status}; log: {lines:#?}");
}

/// An address free now (bound and released), for a rule file that must name it again.
fn free_address() -> SocketAddr {
    let probe = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    probe.local_addr().unwrap()
}

/// `POST /reload` on the admin endpoint; returns the status.
async fn post_reload(admin: SocketAddr) -> u16 {
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
    text[9..12].parse().expect("a status")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_that_removes_the_service_sends_goaway_to_its_connections() {
    let web = backend().await;
    let scratch = Scratch::new("h2-reload");
    let (leaving, staying) = (free_address(), free_address());
    let service = |name: &str, addr: SocketAddr| {
        format!("[virtual.{name}]\nlisten = \"{addr}\"\ndefault_pool = \"web\"\n")
    };
    let base = format!(
        "[switch]\naccess_log = false\n[admin]\nlisten = \"127.0.0.1:0\"\n\
         [pool.web]\nservers = [{{ addr = \"{}\" }}]\n",
        web.addr
    );
    let file = scratch.file(
        "rules.toml",
        &format!(
            "{base}{}{}",
            service("leaving", leaving),
            service("staying", staying)
        ),
    );
    let config = tcpvs::Config::load(&file).unwrap_or_else(|e| panic!("{e}"));
    let switch = tcpvs::Switch::start(config).await.unwrap();
    let admin = switch.admin_addr().unwrap();
    let mut gone = H2::plain(leaving).await;
    assert_eq!(gone.get("www.test", "/bytes/10").await.status, 200);
    let kept = H2::plain(staying).await;
    assert_eq!(kept.get("www.test", "/bytes/20").await.status, 200);

    std::fs::write(&file, format!("{base}{}", service("staying", staying))).unwrap();
    assert_eq!(post_reload(admin).await, 200);
    let goaways = gone.wait_for_goaway().await;
    assert!(
        goaways
            .iter()
            .all(|g| g.error_code() == Some(h2c::NO_ERROR)),
        "{goaways:?}"
    );
    gone.closed().await.expect("a clean close after GOAWAY");
    // The other service's connection goes on, without GOAWAY.
    let reply = kept.get("www.test", "/bytes/30").await;
    assert_eq!((reply.status, reply.body), (200, pattern(30, 30)));
    assert!(kept.goaways().is_empty(), "{:?}", kept.goaways());
    assert_eq!(switch.stats().generation, 2);
}

/// One answer logs alike over HTTP/1.1 and HTTP/2 (issue 45): the text line names the
/// protocol, and its bytes count the head on both (an HTTP/2 head as its HTTP/1.1 text would
/// be): a proxied answer, a redirect and an error of the switch's own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_answer_logs_the_same_bytes_over_http1_and_http2() {
    let web = backend().await;
    let scratch = Scratch::new("h2-log-parity");
    let log = scratch.0.join("access.log");
    let rules = r#"
[switch]
access_log = "{log}"
[virtual.web]
listen = "127.0.0.1:0"
[[virtual.web.rule]]
path = "^/old"
redirect = { host = "www.test", path = "/new", code = 301 }
[[virtual.web.rule]]
path = "^/bytes/"
pool = "web"
[pool.web]
servers = [{ addr = "{web}" }]
"#;
    let vars = [
        ("log", log.to_str().expect("a UTF-8 path").to_string()),
        ("web", web.addr.to_string()),
    ];
    let switch = start_switch(rules, &vars).await;
    let addr = switch.local_addr("web").unwrap();
    let paths = ["/bytes/100", "/old", "/nowhere"];
    let mut h1 = Client::connect(addr).await;
    for path in paths {
        h1.send(format!("GET {path} HTTP/1.1\r\nHost: www.test\r\n\r\n").as_bytes())
            .await;
        h1.response(false).await;
    }
    let h2 = H2::plain(addr).await;
    for path in paths {
        h2.get("www.test", path).await;
    }
    let lines = log_lines(&log, 6).await;
    // The bytes field: after the quoted request and the status.
    let bytes_of = |request: &str| -> (String, u64) {
        let line = lines
            .iter()
            .find(|l| l.contains(request))
            .unwrap_or_else(|| panic!("no {request} in {lines:#?}"));
        let after = line.split_once(&format!("{request} ")).unwrap().1;
        let mut fields = after.split(' ');
        let status = fields.next().unwrap().to_string();
        (status, fields.next().unwrap().parse().unwrap())
    };
    for (path, status) in [("/bytes/100", "200"), ("/old", "301"), ("/nowhere", "503")] {
        let over_h1 = bytes_of(&format!("\"GET {path} HTTP/1.1\""));
        let over_h2 = bytes_of(&format!("\"GET {path} HTTP/2.0\""));
        assert_eq!(over_h1.0, status, "{path}");
        assert_eq!(over_h1, over_h2, "{path}: {lines:#?}");
        assert!(over_h1.1 > 50, "{path}: the head counts: {lines:#?}");
    }
}
