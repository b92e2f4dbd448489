//! The gateway end to end over loopback sockets: routing per request, scheduling spread,
//! byte-exact bodies both ways, HTTP/1.x semantics, refusals and failures.

mod common;

use common::*;
use std::collections::HashMap;
use std::net::SocketAddr;
use std::time::Duration;

const THREE_POOLS: &str = r#"
[switch]
access_log = false
[virtual.web]
listen = "127.0.0.1:0"
default_pool = "static"
[[virtual.web.rule]]
path = "^/cgi-bin/"
pool = "cgi"
[[virtual.web.rule]]
path = '\.(png|jpe?g|gif)$'
pool = "images"
[pool.static]
servers = [{ addr = "{static}" }]
[pool.images]
scheduler = "rr"
servers = [{ addr = "{images}" }]
[pool.cgi]
servers = [{ addr = "{cgi}" }]
"#;

const ONE_POOL: &str = r#"
[switch]
access_log = false
{extra}
[virtual.web]
listen = "127.0.0.1:0"
default_pool = "main"
{service_extra}
[pool.main]
servers = [{ addr = "{server}" }]
"#;

async fn one_pool(server: &Backend, extra: &str) -> tcpvs::Switch {
    one_pool_with(server, extra, "").await
}

/// `one_pool` with more keys for the virtual service.
async fn one_pool_with(server: &Backend, extra: &str, service_extra: &str) -> tcpvs::Switch {
    one_pool_at(server.addr, extra, service_extra).await
}

/// `one_pool_with` for a server address that may have nothing behind it.
async fn one_pool_at(server: SocketAddr, extra: &str, service_extra: &str) -> tcpvs::Switch {
    start_switch(
        ONE_POOL,
        &[
            ("server", server.to_string()),
            ("extra", extra.to_string()),
            ("service_extra", service_extra.to_string()),
        ],
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_request_on_one_connection_is_routed_again() {
    let (st, im, cg) = (backend().await, backend().await, backend().await);
    let switch = start_switch(
        THREE_POOLS,
        &[
            ("static", st.addr.to_string()),
            ("images", im.addr.to_string()),
            ("cgi", cg.addr.to_string()),
        ],
    )
    .await;
    let mut client = Client::connect(switch.local_addr("web").unwrap()).await;
    for _ in 0..3 {
        let page = client.get("/index.html").await;
        let image = client.get("/images/a.png?size=2").await;
        let cgi = client.get("/cgi-bin/x").await;
        assert_eq!(page.served_by(), st.addr.to_string());
        assert_eq!(image.served_by(), im.addr.to_string());
        assert_eq!(cgi.served_by(), cg.addr.to_string());
        assert_eq!(image.text(), "path /images/a.png\n");
    }
    drop(client);
    let snap = settle(&switch).await;
    // One client connection, one server connection per pool, reused for every request.
    for backend in [&st, &im, &cg] {
        assert_eq!(
            backend
                .record
                .connections
                .load(std::sync::atomic::Ordering::SeqCst),
            1
        );
        let server = snap.server(backend.addr).unwrap();
        assert_eq!(server.requests, 3);
        assert_eq!(server.responses, 3, "every response head counted");
        assert!(server.latency.sum_us > 0, "response times summed");
    }
    assert_eq!(snap.services[0].accepted, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn weights_one_to_two_share_sequential_requests() {
    let (a, b) = (backend().await, backend().await);
    let rules = r#"
[switch]
access_log = false
[virtual.web]
listen = "127.0.0.1:0"
default_pool = "p"
[pool.p]
scheduler = "wlc"
servers = [{ addr = "{a}", weight = 1 }, { addr = "{b}", weight = 2 }]
"#;
    let switch = start_switch(
        rules,
        &[("a", a.addr.to_string()), ("b", b.addr.to_string())],
    )
    .await;
    let mut counts: HashMap<String, usize> = HashMap::new();
    let mut client = Client::connect(switch.local_addr("web").unwrap()).await;
    for i in 0..300 {
        let r = client.get(&format!("/page/{i}")).await;
        *counts.entry(r.served_by()).or_default() += 1;
    }
    let to_a = counts.get(&a.addr.to_string()).copied().unwrap_or(0);
    let to_b = counts.get(&b.addr.to_string()).copied().unwrap_or(0);
    assert_eq!(to_a + to_b, 300);
    assert!((90..=110).contains(&to_a), "weight 1 got {to_a} of 300");
    assert!((190..=210).contains(&to_b), "weight 2 got {to_b} of 300");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn round_robin_takes_turns() {
    let (a, b) = (backend().await, backend().await);
    let rules = r#"
[switch]
access_log = false
[virtual.web]
listen = "127.0.0.1:0"
default_pool = "p"
[pool.p]
scheduler = "rr"
servers = [{ addr = "{a}" }, { addr = "{b}" }]
"#;
    let switch = start_switch(
        rules,
        &[("a", a.addr.to_string()), ("b", b.addr.to_string())],
    )
    .await;
    let mut client = Client::connect(switch.local_addr("web").unwrap()).await;
    let order: Vec<String> = {
        let mut v = Vec::new();
        for _ in 0..6 {
            v.push(client.get("/").await.served_by());
        }
        v
    };
    for pair in order.windows(2) {
        assert_ne!(pair[0], pair[1], "rr alternates: {order:?}");
    }
}

/// Sizes around the splice threshold (64 KiB) and a large one.
const SIZES: [usize; 4] = [0, 1, 64 * 1024 + 1, 8 * 1024 * 1024];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn response_bodies_arrive_byte_exact() {
    let server = backend().await;
    for splice in [true, false] {
        let switch = one_pool(&server, &format!("splice = {splice}")).await;
        let mut client = Client::connect(switch.local_addr("web").unwrap()).await;
        for size in SIZES {
            let expected = sha256_hex(&pattern(size, size as u64));
            let by_length = client.get(&format!("/bytes/{size}")).await;
            assert_eq!(by_length.status, 200);
            assert_eq!(
                by_length.header("content-length"),
                Some(size.to_string().as_str())
            );
            assert_eq!(
                sha256_hex(&by_length.body),
                expected,
                "content-length body of {size} bytes"
            );
            let chunked = client.get(&format!("/chunked/{size}")).await;
            assert_eq!(chunked.header("transfer-encoding"), Some("chunked"));
            assert_eq!(
                sha256_hex(&chunked.body),
                expected,
                "chunked body of {size} bytes"
            );
            assert_eq!(
                chunked.trailers, b"X-Trailer: done\r\n",
                "trailer fields pass"
            );
        }
        switch.shutdown(Duration::from_secs(1)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn request_bodies_arrive_byte_exact() {
    let server = backend().await;
    for splice in [true, false] {
        let switch = one_pool(&server, &format!("splice = {splice}")).await;
        let mut client = Client::connect(switch.local_addr("web").unwrap()).await;
        for size in SIZES {
            let body = pattern(size, 7 + size as u64);
            let expected = format!("{} {}\n", sha256_hex(&body), size);

            let mut request =
                format!("POST /sha256 HTTP/1.1\r\nHost: t\r\nContent-Length: {size}\r\n\r\n")
                    .into_bytes();
            request.extend_from_slice(&body);
            client.send(&request).await;
            assert_eq!(
                client.response(false).await.text(),
                expected,
                "content-length upload of {size}"
            );

            let mut request =
                b"POST /sha256 HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n".to_vec();
            for piece in body.chunks(100_000) {
                request.extend_from_slice(format!("{:X};ext=1\r\n", piece.len()).as_bytes());
                request.extend_from_slice(piece);
                request.extend_from_slice(b"\r\n");
            }
            request.extend_from_slice(b"0\r\n\r\n");
            client.send(&request).await;
            assert_eq!(
                client.response(false).await.text(),
                expected,
                "chunked upload of {size}"
            );
        }
        switch.shutdown(Duration::from_secs(1)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pipelined_requests_to_mixed_pools_are_answered_in_order() {
    let (st, im, cg) = (backend().await, backend().await, backend().await);
    let switch = start_switch(
        THREE_POOLS,
        &[
            ("static", st.addr.to_string()),
            ("images", im.addr.to_string()),
            ("cgi", cg.addr.to_string()),
        ],
    )
    .await;
    let mut client = Client::connect(switch.local_addr("web").unwrap()).await;
    let mut burst = Vec::new();
    let paths = [
        "/a.png",
        "/cgi-bin/1",
        "/b.html",
        "/bytes/70000",
        "/c.gif",
        "/cgi-bin/2",
    ];
    for p in paths {
        burst.extend_from_slice(format!("GET {p} HTTP/1.1\r\nHost: t\r\n\r\n").as_bytes());
    }
    // A POST with a body in the middle of the pipeline.
    burst.extend_from_slice(
        b"POST /cgi-bin/sha256 HTTP/1.1\r\nHost: t\r\nContent-Length: 3\r\n\r\nabc",
    );
    burst.extend_from_slice(b"GET /last.html HTTP/1.1\r\nHost: t\r\n\r\n");
    client.send(&burst).await;
    let expect = [
        (im.addr, "path /a.png\n"),
        (cg.addr, "path /cgi-bin/1\n"),
        (st.addr, "path /b.html\n"),
    ];
    for (addr, text) in expect {
        let r = client.response(false).await;
        assert_eq!(
            (r.served_by(), r.text()),
            (addr.to_string(), text.to_string())
        );
    }
    let big = client.response(false).await;
    assert_eq!(big.body, pattern(70000, 70000));
    assert_eq!(
        client.response(false).await.served_by(),
        im.addr.to_string()
    );
    assert_eq!(client.response(false).await.text(), "path /cgi-bin/2\n");
    let posted = client.response(false).await;
    assert_eq!(posted.served_by(), cg.addr.to_string());
    assert_eq!(posted.text(), "path /cgi-bin/sha256\n");
    assert_eq!(client.response(false).await.text(), "path /last.html\n");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http10_clients_get_keep_alive_only_when_they_ask() {
    let server = backend().await;
    let switch = one_pool(&server, "").await;
    let addr = switch.local_addr("web").unwrap();

    let mut client = Client::connect(addr).await;
    client.send(b"GET /bytes/5 HTTP/1.0\r\n\r\n").await;
    let r = client.response(false).await;
    assert_eq!(r.status, 200);
    assert_eq!(r.body, pattern(5, 5));
    assert_eq!(r.header("connection"), Some("close"));
    assert!(client.is_closed().await);

    let mut client = Client::connect(addr).await;
    for _ in 0..3 {
        client
            .send(b"GET /bytes/5 HTTP/1.0\r\nConnection: keep-alive\r\n\r\n")
            .await;
        let r = client.response(false).await;
        assert_eq!(r.header("connection"), Some("keep-alive"));
        assert_eq!(r.body, pattern(5, 5));
    }

    // A chunked response cannot go to an HTTP/1.0 client: it is decoded and the connection
    // closes to delimit it.
    client
        .send(b"GET /chunked/100000 HTTP/1.0\r\nConnection: keep-alive\r\n\r\n")
        .await;
    let r = client.response(false).await;
    assert_eq!(r.header("transfer-encoding"), None);
    assert_eq!(r.header("connection"), Some("close"));
    assert_eq!(r.body, pattern(100_000, 100_000));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn head_304_and_204_carry_no_body() {
    let server = backend().await;
    let switch = one_pool(&server, "").await;
    let mut client = Client::connect(switch.local_addr("web").unwrap()).await;
    client
        .send(b"HEAD /bytes/100000 HTTP/1.1\r\nHost: t\r\n\r\n")
        .await;
    let r = client.response(true).await;
    assert_eq!(r.header("content-length"), Some("100000"));
    client
        .send(b"GET /status/304 HTTP/1.1\r\nHost: t\r\n\r\n")
        .await;
    let r = client.response(false).await;
    assert_eq!((r.status, r.header("etag")), (304, Some("\"abc\"")));
    client
        .send(b"GET /status/204 HTTP/1.1\r\nHost: t\r\n\r\n")
        .await;
    assert_eq!(client.response(false).await.status, 204);
    // Had any of them carried body bytes, this response would be garbled.
    let r = client.get("/bytes/3").await;
    assert_eq!(r.body, pattern(3, 3));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upgrade_becomes_a_tunnel() {
    let server = backend().await;
    let switch = one_pool(&server, "").await;
    let mut client = Client::connect(switch.local_addr("web").unwrap()).await;
    client
        .send(b"GET /upgrade HTTP/1.1\r\nHost: t\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\nearly")
        .await;
    let r = client.response(true).await;
    assert_eq!(r.status, 101);
    assert_eq!(r.header("upgrade"), Some("websocket"));
    assert_eq!(r.header("connection"), Some("upgrade"));
    // Bytes sent right behind the head, then 1 MiB both ways, all echoed in order.
    let data = pattern(1 << 20, 99);
    let already = client.take_buffered();
    let expected: Vec<u8> = [b"early".as_slice(), &data].concat();
    let got = through_tunnel(client.stream, already, &data).await;
    assert_eq!(
        got.len(),
        expected.len(),
        "start {:?}",
        String::from_utf8_lossy(&got[..40.min(got.len())])
    );
    assert_eq!(sha256_hex(&got), sha256_hex(&expected));
    let snap = settle(&switch).await;
    assert_eq!(snap.clients, 0, "the tunnel ended on both sides");
    let counted = snap.server(server.addr).unwrap();
    assert!(
        counted.bytes_in >= data.len() as u64 && counted.bytes_out >= data.len() as u64,
        "tunnel bytes counted both ways: {counted:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ambiguous_and_malformed_requests_are_refused_and_never_forwarded() {
    let server = backend().await;
    let switch = one_pool(&server, "").await;
    let addr = switch.local_addr("web").unwrap();
    let cases: [(&[u8], u16); 8] = [
        (b"POST / HTTP/1.1\r\nHost: t\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n", 400),
        (b"POST / HTTP/1.1\r\nHost: t\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\nabcd", 400),
        (b"GET / HTTP/1.1 extra\r\nHost: t\r\n\r\n", 400),
        (b"GET / HTTP/1.1\r\nHost: t\r\nBad header\r\n\r\n", 400),
        (b"GET / HTTP/1.1\r\nHost: t\r\nFolded: a\r\n b\r\n\r\n", 400),
        (b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03", 400),
        (b"GET / HTTP/1.1\r\n\r\n", 400),
        (b"GET / HTTP/3.0\r\nHost: t\r\n\r\n", 505),
    ];
    for (request, status) in cases {
        let mut client = Client::connect(addr).await;
        client.send(request).await;
        let r = client.response(false).await;
        assert_eq!(r.status, status, "{:?}", String::from_utf8_lossy(request));
        assert_eq!(r.header("connection"), Some("close"));
        assert!(client.is_closed().await);
    }
    // An invalid chunk size: the head went on, the body is refused and the connection closed.
    let mut client = Client::connect(addr).await;
    client
        .send(b"POST /sha256 HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nabc\r\n0\r\n\r\n")
        .await;
    let r = client.response(false).await;
    assert_eq!(r.status, 400);
    assert!(client.is_closed().await);
    let heads = server.record.heads.lock().unwrap().clone();
    assert!(
        heads.iter().all(|h| h.starts_with("POST /sha256 ")),
        "only the chunked request's head may reach the server: {heads:?}"
    );
    assert_eq!(settle(&switch).await.clients, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oversized_heads_get_431() {
    let server = backend().await;
    let switch = one_pool(&server, "").await;
    let addr = switch.local_addr("web").unwrap();

    let mut big = b"GET / HTTP/1.1\r\nHost: t\r\nX-Big: ".to_vec();
    big.resize(70 * 1024, b'a');
    big.extend_from_slice(b"\r\n\r\n");
    let mut client = Client::connect(addr).await;
    client.send(&big).await;
    assert_eq!(client.response(false).await.status, 431);

    let mut many = b"GET / HTTP/1.1\r\nHost: t\r\n".to_vec();
    for i in 0..120 {
        many.extend_from_slice(format!("X-{i}: v\r\n").as_bytes());
    }
    many.extend_from_slice(b"\r\n");
    let mut client = Client::connect(addr).await;
    client.send(&many).await;
    assert_eq!(client.response(false).await.status, 431);
    assert!(server.record.heads.lock().unwrap().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn incomplete_head_gets_408() {
    let server = backend().await;
    let switch = one_pool(&server, "header_timeout = \"300ms\"").await;
    let mut client = Client::connect(switch.local_addr("web").unwrap()).await;
    client.send(b"GET / HTTP/1.1\r\nHost: t\r\n").await;
    // After the 300 ms set, seconds before the default 10 s would end.
    let r = tokio::time::timeout(Duration::from_secs(5), client.response(false))
        .await
        .expect("the 408 within 5 s, not after the default header_timeout");
    assert_eq!(r.status, 408);
    assert!(client.is_closed().await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dead_server_gives_502_and_a_live_one_takes_over() {
    let dead = dead_address().await;
    let switch = one_pool_at(dead, "", "").await;
    let mut client = Client::connect(switch.local_addr("web").unwrap()).await;
    let r = client.get("/").await;
    assert_eq!(r.status, 502);
    assert_eq!(r.header("content-type"), Some("text/plain"));
    // The connection stays usable after a switch-made error on a request without body.
    assert_eq!(client.get("/").await.status, 502);
    drop(client);
    assert_eq!(
        settle(&switch).await.server(dead).unwrap().connect_errors,
        2
    );

    let live = backend().await;
    let rules = r#"
[switch]
access_log = false
[virtual.web]
listen = "127.0.0.1:0"
default_pool = "p"
[pool.p]
servers = [{ addr = "{dead}" }, { addr = "{live}" }]
"#;
    let switch = start_switch(
        rules,
        &[("dead", dead.to_string()), ("live", live.addr.to_string())],
    )
    .await;
    let mut client = Client::connect(switch.local_addr("web").unwrap()).await;
    for _ in 0..10 {
        let r = client.get("/x").await;
        assert_eq!((r.status, r.served_by()), (200, live.addr.to_string()));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn quiescent_pool_gives_503() {
    let server = backend().await;
    let rules = r#"
[switch]
access_log = false
[virtual.web]
listen = "127.0.0.1:0"
default_pool = "p"
[pool.p]
servers = [{ addr = "{s}", weight = 0 }]
"#;
    let switch = start_switch(rules, &[("s", server.addr.to_string())]).await;
    let mut client = Client::connect(switch.local_addr("web").unwrap()).await;
    assert_eq!(client.get("/").await.status, 503);
    assert_eq!(
        server
            .record
            .connections
            .load(std::sync::atomic::Ordering::SeqCst),
        0
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn silent_server_gives_504() {
    let server = backend().await;
    // Long enough that the next request's answer, which comes at once, never meets it however
    // loaded the machine; short enough for the 504 to come seconds before PATIENCE ends.
    let switch = one_pool(&server, "idle_timeout = \"2s\"").await;
    let mut client = Client::connect(switch.local_addr("web").unwrap()).await;
    let r = client.get("/silent").await;
    assert_eq!(r.status, 504);
    assert_eq!(client.get("/bytes/4").await.body, pattern(4, 4));
    drop(client);
    let snap = settle(&switch).await;
    assert!(snap.server(server.addr).unwrap().response_errors >= 1);
}

/// A server that closes a kept-alive connection while it is idle: the next request must not
/// fail, whether the switch notices the close before using the connection or after.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_connection_closed_while_idle_costs_the_client_nothing() {
    let server = backend().await;
    let switch = one_pool(&server, "").await;
    let mut client = Client::connect(switch.local_addr("web").unwrap()).await;
    for round in 1..=3 {
        // Answered with keep-alive framing, then the server closes: the switch has parked an
        // idle connection that is dead.
        let r = client.get("/hangup").await;
        assert_eq!(r.text(), "hangup");
        server.wait_for_closed(round).await;
        let r = client.get(&format!("/n/{round}")).await;
        assert_eq!((r.status, r.text()), (200, format!("path /n/{round}\n")));
    }
    // Each /hangup and the request after it: one connection each, and nothing sent twice.
    assert_eq!(server.connections(), 4);
    assert_eq!(server.requests(), 6);
}

/// A request that goes up on a reused connection which then breaks before any response byte
/// (the server took the request and closed): no check before use can see that coming, so only
/// a retry on a new connection saves it. GET without body is safe to retry; the server sees it
/// twice, the client once. (Checked against a switch with the retry removed: 502.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_lost_on_a_reused_connection_is_retried_on_a_new_one() {
    let server = backend_with(BackendOptions {
        drop_request: Some(2),
        ..BackendOptions::default()
    })
    .await;
    let switch = one_pool(&server, "").await;
    let mut client = Client::connect(switch.local_addr("web").unwrap()).await;
    assert_eq!(client.get("/first").await.text(), "path /first\n");
    let r = client.get("/second").await;
    assert_eq!((r.status, r.text()), (200, "path /second\n".to_string()));
    assert_eq!(server.connections(), 2, "the retry opened a new connection");
    assert_eq!(server.requests(), 3, "/second reached the server twice");
    drop(client);
    let snap = settle(&switch).await;
    let stats = snap.server(server.addr).unwrap();
    assert_eq!(stats.requests, 3, "the retry is counted as a request");
    assert_eq!(stats.responses, 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_clients_answers_503_beyond_the_limit() {
    let server = backend().await;
    let switch = one_pool(&server, "max_clients = 2").await;
    let addr = switch.local_addr("web").unwrap();
    let mut first = Client::connect(addr).await;
    let mut second = Client::connect(addr).await;
    assert_eq!(first.get("/").await.status, 200);
    assert_eq!(second.get("/").await.status, 200);
    let mut third = Client::connect(addr).await;
    third.send(b"GET / HTTP/1.1\r\nHost: t\r\n\r\n").await;
    let r = third.response(false).await;
    assert_eq!(r.status, 503);
    assert!(third.is_closed().await);
    drop(first);
    // A slot is free again once a client leaves.
    let mut fourth = None;
    for _ in 0..100 {
        let mut c = Client::connect(addr).await;
        c.send(b"GET / HTTP/1.1\r\nHost: t\r\n\r\n").await;
        if c.response(false).await.status == 200 {
            fourth = Some(c);
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(fourth.is_some());
    assert!(switch.stats().services[0].refused >= 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expect_100_continue_is_relayed() {
    let server = backend().await;
    let switch = one_pool(&server, "").await;
    let mut client = Client::connect(switch.local_addr("web").unwrap()).await;
    client
        .send(b"POST /continue HTTP/1.1\r\nHost: t\r\nExpect: 100-continue\r\nContent-Length: 5\r\n\r\n")
        .await;
    // The body is sent only after the interim response arrives.
    let interim = client.response(false).await;
    assert_eq!(interim.status, 100);
    client.send(b"hello").await;
    let r = client.response(false).await;
    assert_eq!(r.text(), format!("{} 5\n", sha256_hex(b"hello")));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn request_head_is_rebuilt_with_forwarded_for() {
    let server = backend().await;
    let switch = one_pool(&server, "").await;
    let mut client = Client::connect(switch.local_addr("web").unwrap()).await;
    client
        .send(b"GET /headers?q=%20x&y HTTP/1.1\nHost: t\nConnection: keep-alive, X-Hop\nX-Hop: 1\nX-Forwarded-For: 10.1.1.1\nX-Odd: caf\xc3\xa9\n\n")
        .await;
    let r = client.response(false).await;
    assert_eq!(
        r.body,
        b"GET /headers?q=%20x&y HTTP/1.1\r\nHost: t\r\nX-Forwarded-For: 10.1.1.1, 127.0.0.1\r\nX-Odd: caf\xc3\xa9\r\n\r\n"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_clients_at_once_get_exact_bytes() {
    let (a, b) = (backend().await, backend().await);
    let rules = r#"
[switch]
access_log = false
[virtual.web]
listen = "127.0.0.1:0"
default_pool = "p"
[pool.p]
servers = [{ addr = "{a}" }, { addr = "{b}", weight = 3 }]
"#;
    let switch = start_switch(
        rules,
        &[("a", a.addr.to_string()), ("b", b.addr.to_string())],
    )
    .await;
    let addr = switch.local_addr("web").unwrap();
    let mut tasks = Vec::new();
    for c in 0..40u64 {
        tasks.push(tokio::spawn(async move {
            let mut client = Client::connect(addr).await;
            for i in 0..15u64 {
                let size = ((c * 7919 + i * 104_729) % 200_000) as usize;
                if i % 3 == 0 {
                    let body = pattern(size, c * 100 + i);
                    let mut req = format!(
                        "POST /sha256 HTTP/1.1\r\nHost: t\r\nContent-Length: {size}\r\n\r\n"
                    )
                    .into_bytes();
                    req.extend_from_slice(&body);
                    client.send(&req).await;
                    let r = client.response(false).await;
                    assert_eq!(r.text(), format!("{} {size}\n", sha256_hex(&body)));
                } else {
                    let path = if i % 3 == 1 { "bytes" } else { "chunked" };
                    let r = client.get(&format!("/{path}/{size}")).await;
                    assert_eq!(r.body, pattern(size, size as u64), "{path}/{size}");
                }
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let snap = settle(&switch).await;
    assert_eq!(snap.clients, 0, "no client connection leaked");
    assert!(
        snap.servers.iter().all(|s| s.active == 0),
        "no request left active"
    );
    let requests: u64 = snap.servers.iter().map(|s| s.requests).sum();
    assert_eq!(requests, 40 * 15);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_finishes_requests_in_flight() {
    let server = backend().await;
    let switch = one_pool(&server, "").await;
    let addr = switch.local_addr("web").unwrap();
    let mut idle = Client::connect(addr).await;
    assert_eq!(idle.get("/").await.status, 200);
    let mut busy = Client::connect(addr).await;
    busy.send(b"GET /hold HTTP/1.1\r\nHost: t\r\n\r\n").await;
    // The server holds the request: it is in flight when the stop comes.
    server.wait_for_requests(2).await;
    let stopping = tokio::spawn(switch.shutdown(Duration::from_secs(30)));
    // The idle keep-alive client is let go; the busy one still gets its answer, told to close.
    assert!(idle.is_closed().await);
    server.release(1);
    let r = busy.response(false).await;
    assert_eq!((r.status, r.body.as_slice()), (200, &b"0123456789"[..]));
    assert_eq!(r.header("connection"), Some("close"));
    assert_eq!(
        stopping.await.unwrap(),
        0,
        "every client connection ended before the deadline"
    );
    assert!(
        tokio::net::TcpStream::connect(addr).await.is_err(),
        "listener closed"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn response_until_close_closes_the_client_too() {
    let server = backend().await;
    let switch = one_pool(&server, "").await;
    let mut client = Client::connect(switch.local_addr("web").unwrap()).await;
    let r = client.get("/close/300000").await;
    assert_eq!(r.body, pattern(300_000, 300_000));
    assert_eq!(r.header("connection"), Some("close"));
    // The body ended because the connection did (the client read until EOF, which panics on
    // silence): nothing more may come.
    assert!(client.is_closed().await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_connection_close_is_honoured() {
    let server = backend().await;
    let switch = one_pool(&server, "").await;
    let mut client = Client::connect(switch.local_addr("web").unwrap()).await;
    client
        .send(b"GET /bytes/10 HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
        .await;
    let r = client.response(false).await;
    assert_eq!(r.header("connection"), Some("close"));
    assert_eq!(r.body, pattern(10, 10));
    assert!(client.is_closed().await);
    // The server connection is still reused by the next client.
    let mut next = Client::connect(switch.local_addr("web").unwrap()).await;
    assert_eq!(next.get("/").await.status, 200);
    assert_eq!(
        server
            .record
            .connections
            .load(std::sync::atomic::Ordering::SeqCst),
        1
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_answered_by_the_switch_is_answered_once() {
    let dead = dead_address().await;
    let live = backend().await;
    let rules = r#"
[switch]
access_log = false
[virtual.web]
listen = "127.0.0.1:0"
default_pool = "dead"
[[virtual.web.rule]]
path = "^/live/"
pool = "live"
[[virtual.web.rule]]
path = "^/nowhere/"
pool = "quiet"
[pool.dead]
servers = [{ addr = "{dead}" }]
[pool.live]
servers = [{ addr = "{live}" }]
[pool.quiet]
servers = [{ addr = "{live}", weight = 0 }]
"#;
    let switch = start_switch(
        rules,
        &[("dead", dead.to_string()), ("live", live.addr.to_string())],
    )
    .await;
    let mut client = Client::connect(switch.local_addr("web").unwrap()).await;
    // Pipelined: each request gets exactly its own answer, in order.
    client
        .send(b"GET /x HTTP/1.1\r\nHost: t\r\n\r\nGET /nowhere/ HTTP/1.1\r\nHost: t\r\n\r\nGET /live/1 HTTP/1.1\r\nHost: t\r\n\r\n")
        .await;
    assert_eq!(client.response(false).await.status, 502);
    assert_eq!(client.response(false).await.status, 503);
    let r = client.response(false).await;
    assert_eq!((r.status, r.text()), (200, "path /live/1\n".to_string()));
    assert_eq!(client.get("/live/2").await.text(), "path /live/2\n");
    drop(client);
    let snap = settle(&switch).await;
    assert_eq!(
        snap.server(dead).unwrap().connect_errors,
        1,
        "the failed request was tried once"
    );
    assert_eq!(snap.services[0].requests, 4);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn switch_errors_to_head_requests_carry_no_body() {
    let server = backend().await;
    let rules = r#"
[switch]
access_log = false
[virtual.web]
listen = "127.0.0.1:0"
[[virtual.web.rule]]
path = "^/ok"
pool = "p"
[pool.p]
servers = [{ addr = "{s}" }]
"#;
    let switch = start_switch(rules, &[("s", server.addr.to_string())]).await;
    let mut client = Client::connect(switch.local_addr("web").unwrap()).await;
    client
        .send(b"HEAD /nomatch HTTP/1.1\r\nHost: t\r\n\r\nGET /ok HTTP/1.1\r\nHost: t\r\n\r\n")
        .await;
    let r = client.response(true).await;
    assert_eq!(r.status, 503);
    assert!(r.header("content-length").is_some());
    // Had the 503 carried its body, this would read the body as a response.
    let next = client.response(false).await;
    assert_eq!((next.status, next.text()), (200, "path /ok\n".to_string()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_may_answer_while_the_body_is_still_coming() {
    let server = backend().await;
    let switch = one_pool(&server, "idle_timeout = \"5s\"").await;
    let mut client = Client::connect(switch.local_addr("web").unwrap()).await;
    client
        .send(b"POST /duplex HTTP/1.1\r\nHost: t\r\nContent-Length: 10\r\n\r\nhello")
        .await;
    // The response head and the echo of the first half arrive while the client still holds
    // the second half back: a switch that waited for the whole body (store and forward) or
    // for the upload to end before relaying would leave this read waiting.
    client.wait_for_bytes(b"5\r\nhello\r\n").await;
    client.send(b"world").await;
    let r = client.response(false).await;
    assert_eq!((r.status, r.text()), (200, "helloworld".to_string()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn interim_responses_keep_a_slow_answer_alive() {
    let server = backend().await;
    let switch = one_pool(&server, "idle_timeout = \"3s\"").await;
    let mut client = Client::connect(switch.local_addr("web").unwrap()).await;
    // Twenty 102s, 200 ms apart: 4 s in all, longer than the idle limit, but never more than
    // a fifteenth of it without a byte. Only a stall of 2.8 s between two 102s could fail
    // this on a sound switch.
    client
        .send(b"PUT /processing/20/200 HTTP/1.1\r\nHost: t\r\nContent-Length: 3\r\n\r\nabc")
        .await;
    let mut interim = 0;
    let mut r = client.response(false).await;
    while r.status == 102 {
        interim += 1;
        r = client.response(false).await;
    }
    assert_eq!(interim, 20, "every 102 relayed");
    assert_eq!(r.status, 200);
    assert_eq!(r.text(), format!("{} 3\n", sha256_hex(b"abc")));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stray_line_end_after_a_body_is_not_a_started_request() {
    let server = backend().await;
    let switch = one_pool(
        &server,
        "header_timeout = \"200ms\"\nkeepalive_timeout = \"400ms\"",
    )
    .await;
    let mut client = Client::connect(switch.local_addr("web").unwrap()).await;
    client
        .send(b"POST /sha256 HTTP/1.1\r\nHost: t\r\nContent-Length: 2\r\n\r\nab\r\n")
        .await;
    assert_eq!(client.response(false).await.status, 200);
    // The connection idles out quietly: no 408 comes before the close.
    assert!(
        client.try_response(false).await.is_none(),
        "no response may follow"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_lets_connections_go_that_sent_nothing() {
    let server = backend().await;
    // Accepted at once, though silent (the kernel would hold them otherwise).
    let switch = one_pool_with(&server, "header_timeout = \"30s\"", "defer_accept = false").await;
    let addr = switch.local_addr("web").unwrap();
    let mut silent = Client::connect(addr).await;
    wait_for_clients(&switch, 1).await;
    assert_eq!(switch.shutdown(Duration::from_secs(3)).await, 0);
    assert!(silent.is_closed().await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn worker_threads_share_the_port_and_the_pools() {
    let (a, b) = (backend().await, backend().await);
    let text = format!(
        "[switch]\naccess_log = false\n[virtual.web]\nlisten = \"127.0.0.1:0\"\ndefault_pool = \"p\"\n\
         [pool.p]\nservers = [{{ addr = \"{}\" }}, {{ addr = \"{}\" }}]\n",
        a.addr, b.addr
    );
    let config = tcpvs::Config::parse("workers.toml", &text).unwrap();
    let switch = tcpvs::Switch::start_workers(config, 3).unwrap();
    let addr = switch.local_addr("web").unwrap();
    let mut tasks = Vec::new();
    for c in 0..30u64 {
        tasks.push(tokio::spawn(async move {
            let mut client = Client::connect(addr).await;
            for i in 0..10u64 {
                let size = ((c * 31 + i * 977) % 100_000) as usize;
                let r = client.get(&format!("/bytes/{size}")).await;
                assert_eq!(r.body, pattern(size, size as u64));
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let snap = settle(&switch).await;
    assert_eq!(snap.clients, 0);
    assert_eq!(snap.servers.iter().map(|s| s.requests).sum::<u64>(), 300);
    assert_eq!(snap.services[0].accepted, 30);
    let mut idle = Client::connect(addr).await;
    assert_eq!(idle.get("/").await.status, 200);
    assert_eq!(switch.shutdown(Duration::from_secs(3)).await, 0);
    assert!(idle.is_closed().await);
    assert!(
        tokio::net::TcpStream::connect(addr).await.is_err(),
        "every worker closed its listener"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spliced_bodies_from_a_sendfile_server_arrive_whole() {
    // Page-fragment sockets fill a pipe's slots before its bytes: a splice then comes back
    // short while the socket still holds data, and must not be taken for "drained".
    let server = backend().await;
    // A stalled relay is cut by the idle timeout and the body comes back short; the outer
    // timeout only keeps a broken build from hanging the suite.
    let switch = one_pool(&server, "idle_timeout = \"2s\"").await;
    let mut client = Client::connect(switch.local_addr("web").unwrap()).await;
    for size in [70_000usize, 1 << 20, 8 << 20] {
        let r = tokio::time::timeout(
            Duration::from_secs(60),
            client.get(&format!("/sendfile/{size}")),
        )
        .await
        .expect("the body arrives without stalling");
        assert_eq!(
            sha256_hex(&r.body),
            sha256_hex(&pattern(size, size as u64)),
            "{size} bytes"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_head_trickled_byte_by_byte_is_parsed_when_its_empty_line_arrives() {
    // The switch parses a partial head again only when new bytes could end it; every split
    // of the empty line, with CRLF and with bare LF, must still be seen.
    let server = backend().await;
    let switch = one_pool(&server, "").await;
    let mut client = Client::connect(switch.local_addr("web").unwrap()).await;
    for head in [
        "GET /one HTTP/1.1\r\nHost: t\r\nX-A: 1\r\n\r\n",
        "GET /two HTTP/1.1\nHost: t\n\n",
    ] {
        for byte in head.as_bytes() {
            client.send(&[*byte]).await;
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        let r = client.response(false).await;
        let path = head.split(' ').nth(1).unwrap();
        assert_eq!(r.text(), format!("path {path}\n"));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_stalling_in_its_body_gets_408_not_504() {
    // The server is waiting for the rest of the body: the silence is the client's, and the
    // server must not be blamed for it.
    let server = backend().await;
    let switch = one_pool(&server, "idle_timeout = \"300ms\"").await;
    let mut client = Client::connect(switch.local_addr("web").unwrap()).await;
    client
        .send(b"POST /sha256 HTTP/1.1\r\nHost: t\r\nContent-Length: 100\r\n\r\nonly ten b")
        .await;
    let r = client.response(false).await;
    assert_eq!(r.status, 408, "{}", r.text());
    let snap = settle(&switch).await;
    assert_eq!(snap.server(server.addr).unwrap().response_errors, 0);
}

/// A new connection is read speculatively before it joins the reactor (switch/socket.rs): a
/// client that sends its request only after the switch found nothing must still be served, on
/// that connection and the next requests, as must one that sends with the connection. With
/// `defer_accept` (the default) the kernel holds a silent connection instead; it must be served
/// all the same once it speaks.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_is_served_whether_its_request_comes_with_the_connection_or_later() {
    let server = backend().await;
    for defer_accept in [false, true] {
        let service_extra = format!("defer_accept = {defer_accept}");
        let switch = one_pool_with(&server, "", &service_extra).await;
        let addr = switch.local_addr("web").unwrap();

        let mut late = Client::connect(addr).await;
        // With defer_accept the kernel holds it until it speaks or a second passes (that it
        // is held is checked, by a bound the load cannot flip, in
        // `a_silent_connection_is_held_by_the_kernel_for_a_second_with_defer_accept`).
        if !defer_accept {
            wait_for_clients(&switch, 1).await;
            // Accepted and found empty; give its session time to have tried its read.
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        for n in [10, 70_000, 3] {
            let r = late.get(&format!("/bytes/{n}")).await;
            assert_eq!(r.status, 200);
            assert_eq!(r.body, pattern(n, n as u64));
        }

        let mut eager = Vec::new();
        for n in 1..=20usize {
            let mut c = Client::connect(addr).await;
            let request =
                format!("GET /bytes/{n} HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n");
            c.send(request.as_bytes()).await;
            eager.push((n, c));
        }
        for (n, mut c) in eager {
            let r = c.response(false).await;
            assert_eq!(r.body, pattern(n, n as u64));
            assert!(c.is_closed().await);
        }
    }
}

/// With `defer_accept`, a client that connects and never speaks is still handed over by the
/// kernel (after about a second) and gets its 408 after header_timeout, like any other.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_client_held_by_defer_accept_still_gets_408() {
    let server = backend().await;
    let switch = one_pool(&server, "header_timeout = \"500ms\"").await;
    let mut silent = Client::connect(switch.local_addr("web").unwrap()).await;
    let r = silent.response(false).await;
    assert_eq!(r.status, 408);
    assert!(silent.is_closed().await);
}

/// `defer_accept = false`: every connection is accepted as soon as its handshake ends, a
/// silent one too. Ten silent clients in a row, each opened once the switch counts the one
/// before it, are all counted within seconds; with `defer_accept` (the default) the kernel
/// holds each silent connection for a second before handing it over, so ten in a row could
/// not take less than ten seconds. The bound (5 s) is seconds away from both.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn defer_accept_false_accepts_each_silent_connection_at_once() {
    let server = backend().await;
    let switch = one_pool_with(&server, "header_timeout = \"60s\"", "defer_accept = false").await;
    let addr = switch.local_addr("web").unwrap();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    let mut silent = Vec::new();
    for n in 1..=10u64 {
        silent.push(tokio::net::TcpStream::connect(addr).await.unwrap());
        loop {
            let snap = switch.stats();
            if snap.services[0].accepted == n {
                assert_eq!(snap.clients as u64, n, "{snap:?}");
                break;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "{} of {n} silent connections accepted within 5 s: {snap:?}",
                snap.services[0].accepted
            );
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    }
    // Each is a session of the switch, served when it speaks.
    let mut client = Client::over(silent.pop().unwrap());
    assert_eq!(client.get("/late").await.text(), "path /late\n");
    assert_eq!(server.requests(), 1);
}

/// With `defer_accept` (the default) a client that connects and says nothing is held by the
/// kernel (TCP_DEFER_ACCEPT) and handed over only when a second has passed: the switch cannot
/// count it earlier. A lower bound that load can only make easier to meet.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_connection_is_held_by_the_kernel_for_a_second_with_defer_accept() {
    let server = backend().await;
    let switch = one_pool(&server, "header_timeout = \"60s\"").await;
    let addr = switch.local_addr("web").unwrap();
    let began = std::time::Instant::now();
    let silent = tokio::net::TcpStream::connect(addr).await.unwrap();
    let snap = wait_until(&switch, "the silent connection handed over", |s| {
        s.services[0].accepted == 1
    })
    .await;
    let held = began.elapsed();
    assert!(
        held >= Duration::from_millis(900),
        "accepted {held:?} after the connect began: {snap:?}"
    );
    // Then served like any other when it speaks.
    let mut client = Client::over(silent);
    assert_eq!(client.get("/late").await.text(), "path /late\n");
}

/// Waits (bounded) until the switch counts `n` client connections; panics if it never does.
async fn wait_for_clients(switch: &tcpvs::Switch, n: usize) {
    for _ in 0..500 {
        if switch.stats().clients == n {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("the switch never counted {n} clients");
}

/// A listen address the system refuses (here: taken) is reported at its place in the rule
/// file, like every other rule-file problem.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_listen_address_in_use_is_reported_with_file_line_and_column() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap();
    let text = format!(
        "[switch]\naccess_log = false\n[virtual.web]\nlisten = \"{addr}\"\ndefault_pool = \"main\"\n\
         [pool.main]\nservers = [{{ addr = \"127.0.0.1:9\" }}]\n"
    );
    let config = tcpvs::Config::parse("site.toml", &text).unwrap();
    let error = match tcpvs::Switch::start(config).await {
        Ok(_) => panic!("started on a taken address"),
        Err(e) => e.to_string(),
    };
    let expected = format!("site.toml:4:10: virtual service `web`: cannot listen on {addr}: ");
    assert!(error.starts_with(&expected), "{error}");
}

/// The switch's own answers tell an HTTP/1.0 client whether the connection stays: one that asked
/// for keep-alive is told so and may go on; one that did not is told it closes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn local_errors_to_http10_clients_say_what_happens_to_the_connection() {
    let dead = dead_address().await;
    let switch = one_pool_at(dead, "", "").await;
    let addr = switch.local_addr("web").unwrap();
    let mut kept = Client::connect(addr).await;
    for _ in 0..2 {
        kept.send(b"GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n")
            .await;
        let r = kept.response(false).await;
        assert_eq!(r.status, 502);
        assert_eq!(r.header("connection"), Some("keep-alive"));
    }
    let mut closed = Client::connect(addr).await;
    closed.send(b"GET / HTTP/1.0\r\n\r\n").await;
    let r = closed.response(false).await;
    assert_eq!(r.status, 502);
    assert_eq!(r.header("connection"), Some("close"));
    assert!(closed.is_closed().await);
}

/// A request that closes the connection, whose client sends more while the switch waits for
/// the server (a pipelined request, a stray CRLF): closing with those bytes unread would reset
/// the connection and could discard the answer. It must arrive whole, HTTP/1.1 and 1.0 alike.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_closing_answer_survives_bytes_the_client_sends_late() {
    let server = backend().await;
    let switch = one_pool(&server, "").await;
    let addr = switch.local_addr("web").unwrap();
    let mut held = 0;
    for late in [&b"\r\n"[..], b"GET / HTTP/1.1\r\nHost: t\r\n\r\n"] {
        for (version, close) in [("HTTP/1.1", "Connection: close\r\n"), ("HTTP/1.0", "")] {
            let mut c = Client::connect(addr).await;
            let request = format!("GET /hold {version}\r\nHost: t\r\n{close}\r\n");
            c.send(request.as_bytes()).await;
            // The late bytes come while the server holds the request.
            held += 1;
            server.wait_for_requests(held).await;
            c.send(late).await;
            server.release(1);
            let r = c.try_response(false).await;
            let got = r.map(|r| (r.status, r.body));
            assert_eq!(got, Some((200, b"0123456789".to_vec())), "{version}");
        }
    }
    // The same with a body and a CRLF after it in a later segment (old browsers did that).
    let mut c = Client::connect(addr).await;
    c.send(
        b"POST /hold HTTP/1.1\r\nHost: t\r\nConnection: close\r\nContent-Length: 5\r\n\r\nhello",
    )
    .await;
    server.wait_for_requests(held + 1).await;
    c.send(b"\r\n").await;
    server.release(1);
    let r = c.try_response(false).await;
    assert_eq!(r.map(|r| r.status), Some(200));
}

/// The first wait of a connection that has not joined the reactor may be a write wait: a big
/// answer to a client that reads late, spliced or copied; then more requests, and a closing one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_late_reader_of_a_big_first_answer_gets_every_byte() {
    let server = backend().await;
    let n = 8 * 1024 * 1024;
    for splice in [true, false] {
        let switch = one_pool(&server, &format!("splice = {splice}")).await;
        let addr = switch.local_addr("web").unwrap();
        let mut c = Client::connect(addr).await;
        c.send(format!("GET /bytes/{n} HTTP/1.1\r\nHost: t\r\n\r\n").as_bytes())
            .await;
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert_eq!(c.response(false).await.body, pattern(n, n as u64));
        assert_eq!(c.get("/bytes/3").await.body, pattern(3, 3));
        let closing = format!("GET /bytes/{n} HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n");
        c.send(closing.as_bytes()).await;
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert_eq!(c.response(false).await.body, pattern(n, n as u64));
        assert!(c.is_closed().await);
    }
}

/// Every condition a rule may hold, through the switch: `path` (query excluded), `host`
/// (port excluded, case-insensitive, from `Host` or an absolute-form target), `method`
/// (exact), `header` (regex on the first field of that name; a missing field does not match),
/// all conditions of a rule together, first match wins, a rule without conditions matches
/// everything, and without `default_pool` a request no rule matches gets 503.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rules_route_by_path_host_method_and_header_first_match_wins() {
    let pools = ["paths", "hosts", "posts", "headers", "both", "rest"];
    let mut servers = Vec::new();
    for _ in pools {
        servers.push(backend().await);
    }
    let rules = r#"
[switch]
access_log = false
[virtual.web]
listen = "127.0.0.1:0"
[[virtual.web.rule]]
path = "^/cgi-bin/"
pool = "paths"
[[virtual.web.rule]]
host = '^img\.example\.com$'
pool = "hosts"
[[virtual.web.rule]]
method = "POST"
pool = "posts"
[[virtual.web.rule]]
header = { name = "X-Pool", value = "^images$" }
pool = "headers"
[[virtual.web.rule]]
host = '^api\.'
method = "PUT"
pool = "both"
[virtual.other]
listen = "127.0.0.1:0"
[[virtual.other.rule]]
path = "^/only/"
pool = "paths"
[[virtual.other.rule]]
pool = "rest"
[pool.paths]
servers = [{ addr = "{paths}" }]
[pool.hosts]
servers = [{ addr = "{hosts}" }]
[pool.posts]
servers = [{ addr = "{posts}" }]
[pool.headers]
servers = [{ addr = "{headers}" }]
[pool.both]
servers = [{ addr = "{both}" }]
[pool.rest]
servers = [{ addr = "{rest}" }]
"#;
    let vars: Vec<(&str, String)> = pools
        .iter()
        .zip(&servers)
        .map(|(name, server)| (*name, server.addr.to_string()))
        .collect();
    let switch = start_switch(rules, &vars).await;
    let by_pool: HashMap<String, &str> = servers
        .iter()
        .zip(pools)
        .map(|(server, name)| (server.addr.to_string(), name))
        .collect();
    let mut web = Client::connect(switch.local_addr("web").unwrap()).await;
    // (request head, the pool it must reach, or None for 503)
    let cases: [(&str, Option<&str>); 14] = [
        ("GET /cgi-bin/x?a=1 HTTP/1.1\r\nHost: t\r\n", Some("paths")),
        ("GET /x?/cgi-bin/ HTTP/1.1\r\nHost: t\r\n", None),
        (
            "GET /x HTTP/1.1\r\nHost: IMG.Example.COM:8080\r\n",
            Some("hosts"),
        ),
        (
            "GET http://img.example.com/x HTTP/1.1\r\nHost: img.example.com\r\n",
            Some("hosts"),
        ),
        ("GET /x HTTP/1.1\r\nHost: img.example.com.evil\r\n", None),
        // First match wins: a POST to /cgi-bin/ is a path match before a method match.
        (
            "POST /cgi-bin/y HTTP/1.1\r\nHost: t\r\nContent-Length: 0\r\n",
            Some("paths"),
        ),
        (
            "POST /y HTTP/1.1\r\nHost: t\r\nContent-Length: 0\r\n",
            Some("posts"),
        ),
        ("post /y HTTP/1.1\r\nHost: t\r\nContent-Length: 0\r\n", None),
        (
            "GET /y HTTP/1.1\r\nHost: t\r\nx-pool: images\r\n",
            Some("headers"),
        ),
        ("GET /y HTTP/1.1\r\nHost: t\r\nX-Pool: images2\r\n", None),
        // The first field of the name decides.
        (
            "GET /y HTTP/1.1\r\nHost: t\r\nX-Pool: no\r\nX-Pool: images\r\n",
            None,
        ),
        // Both conditions of one rule must hold.
        (
            "PUT /z HTTP/1.1\r\nHost: api.example.com\r\nContent-Length: 0\r\n",
            Some("both"),
        ),
        ("GET /z HTTP/1.1\r\nHost: api.example.com\r\n", None),
        (
            "PUT /z HTTP/1.1\r\nHost: www.example.com\r\nContent-Length: 0\r\n",
            None,
        ),
    ];
    for (head, expected) in cases {
        web.send(format!("{head}\r\n").as_bytes()).await;
        let r = web.response(false).await;
        let line = head.lines().next().unwrap();
        match expected {
            Some(pool) => {
                assert_eq!(r.status, 200, "{line}");
                assert_eq!(by_pool.get(&r.served_by()).copied(), Some(pool), "{line}");
            }
            None => assert_eq!(r.status, 503, "{line}: {}", r.text()),
        }
    }
    // A rule without conditions matches everything the rules before it left.
    let mut other = Client::connect(switch.local_addr("other").unwrap()).await;
    for (path, pool) in [("/only/a", "paths"), ("/anything", "rest"), ("/", "rest")] {
        let r = other.get(path).await;
        assert_eq!(by_pool.get(&r.served_by()).copied(), Some(pool), "{path}");
    }
}
