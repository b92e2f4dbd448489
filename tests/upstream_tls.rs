//! TLS to servers (issue 44, first slice): `[pool.NAME.tls]` turns TLS on to a pool's servers,
//! verified against `ca` (or the system's roots), with the server name as written in `addr`
//! (none for an IP address) or `sni`; `verify = false` takes any certificate; `cert` and `key`
//! present a client certificate. A server whose certificate does not verify gets no byte of a
//! request (502, `tls_failures` in `/stats`); connections are kept and reused, and new ones
//! resume the TLS session; health checks run over TLS; the rule-file keys are checked at their
//! place.
//!
//! The servers are `common::tls_origin::TlsOrigin` (tokio-rustls), which records what each TLS
//! client did: its server name, the handshake (full, resumed, refused), its certificate, the
//! bytes that came. The origin is first tested alone, with a tokio-rustls client, so that a bug
//! of its own is not blamed on the switch.

mod common;

use common::tls::{self, TestCa};
use common::tls_origin::{
    self_signed, toml_path, write_leaf, ConnectionSeen, Handshake, OriginCa, OriginOptions,
    TlsOrigin,
};
use common::*;
use rustls::version::{TLS12, TLS13};
use serde_json::Value;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tcpvs::state::status::State;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

// ---------------------------------------------------------------- requests

/// A POST of `body` with Content-Length.
fn post(path: &str, body: &[u8]) -> Vec<u8> {
    let mut request = format!(
        "POST {path} HTTP/1.1\r\nHost: test\r\nContent-Length: {}\r\n\r\n",
        body.len()
    )
    .into_bytes();
    request.extend_from_slice(body);
    request
}

/// A POST of `body`, chunked in pieces of `piece` bytes.
fn post_chunked(path: &str, body: &[u8], piece: usize) -> Vec<u8> {
    let mut request =
        format!("POST {path} HTTP/1.1\r\nHost: test\r\nTransfer-Encoding: chunked\r\n\r\n")
            .into_bytes();
    for part in body.chunks(piece) {
        request.extend_from_slice(format!("{:x}\r\n", part.len()).as_bytes());
        request.extend_from_slice(part);
        request.extend_from_slice(b"\r\n");
    }
    request.extend_from_slice(b"0\r\n\r\n");
    request
}

/// What the origin answers a POST of `body`.
fn digest_of(body: &[u8]) -> String {
    format!("{} {}\n", sha256_hex(body), body.len())
}

/// Sends `request` on `client` and returns the answer, which must be 200.
async fn ok<S>(client: &mut Client<S>, request: &[u8]) -> Response
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
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
async fn get_size<S>(client: &mut Client<S>, n: usize) -> Response
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    let r = ok(
        client,
        format!("GET /size/{n} HTTP/1.1\r\nHost: test\r\n\r\n").as_bytes(),
    )
    .await;
    assert_eq!(r.body.len(), n, "GET /size/{n}: length");
    assert!(
        sha256_hex(&r.body) == sha256_hex(&pattern(n, n as u64)),
        "GET /size/{n}: other bytes"
    );
    r
}

// ---------------------------------------------------------------- the origin alone

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn origin_alone_serves_keep_alive_http_over_tls_and_records_it() {
    let ca = OriginCa::new("origin test CA");
    let origin = TlsOrigin::start(&ca.issue(&["localhost"])).await;
    let mut client = tls::connect(origin.addr, "localhost", &ca.client_config(&[&TLS13])).await;
    let mut sent = 0;
    let r = get_size(&mut client, 100_000).await;
    sent += "GET /size/100000 HTTP/1.1\r\nHost: test\r\n\r\n".len();
    assert_eq!(r.served_by(), origin.addr.to_string());
    assert_eq!(r.header("connection"), None, "keep-alive");
    let upload = pattern(300_000, 3);
    let request = post("/up", &upload);
    sent += request.len();
    assert_eq!(ok(&mut client, &request).await.text(), digest_of(&upload));
    let chunked = pattern(200_001, 4);
    let request = post_chunked("/up/chunked", &chunked, 65_536);
    sent += request.len();
    assert_eq!(ok(&mut client, &request).await.text(), digest_of(&chunked));
    let request = b"GET /health HTTP/1.1\r\nHost: test\r\n\r\n";
    sent += request.len();
    assert_eq!(ok(&mut client, request).await.text(), "ok\n");
    let request = b"HEAD /size/50 HTTP/1.1\r\nHost: test\r\n\r\n";
    sent += request.len();
    client.send(request).await;
    let head = client.response(true).await;
    assert_eq!(
        (head.status, head.header("content-length")),
        (200, Some("50"))
    );
    // Connection: close is answered in kind, then the origin closes.
    let request = b"GET /last HTTP/1.1\r\nHost: test\r\nConnection: close\r\n\r\n";
    sent += request.len();
    let r = ok(&mut client, request).await;
    assert_eq!(r.header("connection"), Some("close"));
    assert_eq!(r.text(), "path /last\n");
    assert!(client.is_closed().await, "closed after Connection: close");

    let connections = origin.connections();
    assert_eq!(connections.len(), 1, "{connections:#?}");
    let c = &connections[0];
    assert!(c.hello);
    assert_eq!(c.sni.as_deref(), Some("localhost"));
    assert_eq!(c.alpn, vec![b"http/1.1".to_vec()]);
    assert_eq!(c.handshake, Handshake::Full);
    assert_eq!(c.version, Some(rustls::ProtocolVersion::TLSv1_3));
    assert!(!c.client_cert);
    assert_eq!(c.requests, 6);
    assert_eq!(
        c.app_bytes, sent as u64,
        "every byte sent, as application data"
    );
    assert!(c.raw_bytes > c.app_bytes, "TLS costs bytes");
    assert!(
        !c.raw_contains(b"/size/100000"),
        "nothing in the clear on the wire"
    );
    let requests = origin.requests();
    let seen: Vec<(&str, &str, usize)> = requests
        .iter()
        .map(|r| (r.method.as_str(), r.path.as_str(), r.body_len))
        .collect();
    assert_eq!(
        seen,
        [
            ("GET", "/size/100000", 0),
            ("POST", "/up", 300_000),
            ("POST", "/up/chunked", 200_001),
            ("GET", "/health", 0),
            ("HEAD", "/size/50", 0),
            ("GET", "/last", 0),
        ]
    );
    assert_eq!(requests[1].body_sha256, sha256_hex(&upload));
    assert_eq!(requests[2].body_sha256, sha256_hex(&chunked));
    assert!(requests.iter().all(|r| r.connection == 0));
    assert!(requests[0]
        .head
        .starts_with("GET /size/100000 HTTP/1.1\r\n"));

    // GET /bye/N: N bytes, Connection: close, and the origin closes.
    let mut client = tls::connect(origin.addr, "localhost", &ca.client_config(&[&TLS13])).await;
    let r = ok(&mut client, b"GET /bye/1000 HTTP/1.1\r\nHost: test\r\n\r\n").await;
    assert_eq!(r.body, pattern(1000, 1000));
    assert_eq!(r.header("connection"), Some("close"));
    assert!(client.is_closed().await, "closed after /bye");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn origin_alone_tells_resumed_handshakes_names_and_refused_handshakes() {
    let ca = OriginCa::new("origin test CA");
    // One certificate for a name and an address: rcgen makes an IP SAN of "127.0.0.1".
    let origin = TlsOrigin::start(&ca.issue(&["localhost", "127.0.0.1"])).await;
    // Two connections per version with one client configuration: the second resumes (a TLS 1.3
    // ticket, a TLS 1.2 ticket), and both sides say so.
    for versions in [&[&TLS13][..], &[&TLS12][..]] {
        let config = ca.client_config(versions);
        for round in 0..2 {
            let mut client = tls::connect(origin.addr, "localhost", &config).await;
            get_size(&mut client, 10).await;
            assert_eq!(
                tls::resumed(&client),
                round == 1,
                "{versions:?} round {round}"
            );
        }
    }
    let kinds: Vec<(Handshake, Option<rustls::ProtocolVersion>)> = origin
        .connections()
        .iter()
        .map(|c| (c.handshake.clone(), c.version))
        .collect();
    use rustls::ProtocolVersion::{TLSv1_2, TLSv1_3};
    assert_eq!(
        kinds,
        [
            (Handshake::Full, Some(TLSv1_3)),
            (Handshake::Resumed, Some(TLSv1_3)),
            (Handshake::Full, Some(TLSv1_2)),
            (Handshake::Resumed, Some(TLSv1_2)),
        ]
    );

    // An IP address: no server name sent, and the certificate verifies by its IP SAN.
    let mut client = tls::connect(origin.addr, "127.0.0.1", &ca.client_config(&[&TLS13])).await;
    get_size(&mut client, 10).await;
    let last = origin.connections().pop().unwrap();
    assert!(last.hello && last.handshake.completed());
    assert_eq!(last.sni, None);

    // A client that trusts another CA gives up: the origin sees the hello, a failed handshake
    // and no application byte.
    let stranger = OriginCa::new("another CA");
    let refused =
        tls::try_connect(origin.addr, "localhost", &stranger.client_config(&[&TLS13])).await;
    assert!(refused.is_err(), "the client refuses the certificate");
    origin
        .wait_for("6 connections, every handshake over", |c, _| {
            c.len() == 6 && c.iter().all(|c| c.handshake.ended())
        })
        .await;
    let last = origin.connections().pop().unwrap();
    assert!(last.hello);
    assert_eq!(last.sni.as_deref(), Some("localhost"));
    assert!(
        matches!(last.handshake, Handshake::Failed(_)),
        "{:?}",
        last.handshake
    );
    assert_eq!(last.app_bytes, 0);
}

/// A client with `config` is refused by an origin that wants a certificate it does not have: at
/// the handshake, or (TLS 1.3, whose client finishes before the server has judged its
/// certificate) with an alert instead of an answer.
async fn refused_by(origin: SocketAddr, config: &Arc<rustls::ClientConfig>) {
    let Ok(mut client) = tls::try_connect(origin, "localhost", config).await else {
        return;
    };
    let _ = client
        .stream
        .write_all(b"GET / HTTP/1.1\r\nHost: test\r\n\r\n")
        .await;
    let _ = client.stream.flush().await;
    let mut buf = [0u8; 1024];
    let read = tokio::time::timeout(PATIENCE, client.stream.read(&mut buf))
        .await
        .expect("the origin answers or closes within PATIENCE");
    assert!(
        matches!(read, Ok(0) | Err(_)),
        "the origin answered: {read:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn origin_alone_requires_a_client_certificate_of_its_ca_when_told() {
    let ca = OriginCa::new("server CA");
    let clients = OriginCa::new("client CA");
    let options = OriginOptions {
        client_ca: Some(clients.der()),
    };
    let origin = TlsOrigin::start_with(&ca.issue(&["localhost"]), options).await;
    let mine = clients.issue_client("switch.test");
    let with_cert = ca.client_config_with_cert(&[&TLS13], &mine);
    let mut client = tls::connect(origin.addr, "localhost", &with_cert).await;
    get_size(&mut client, 100).await;
    refused_by(origin.addr, &ca.client_config(&[&TLS13])).await;
    let foreign = OriginCa::new("another client CA").issue_client("switch.test");
    refused_by(
        origin.addr,
        &ca.client_config_with_cert(&[&TLS13], &foreign),
    )
    .await;
    refused_by(origin.addr, &ca.client_config(&[&TLS12])).await;
    origin
        .wait_for("4 connections, every handshake over", |c, _| {
            c.len() == 4 && c.iter().all(|c| c.handshake.ended())
        })
        .await;
    let connections = origin.connections();
    assert!(connections[0].handshake.completed() && connections[0].client_cert);
    for c in &connections[1..] {
        assert!(matches!(c.handshake, Handshake::Failed(_)), "{c:?}");
        assert!(!c.client_cert);
        assert_eq!(c.app_bytes, 0, "{c:?}");
    }
    assert_eq!(origin.requests().len(), 1);
}

// ---------------------------------------------------------------- the switch

/// A rule file: admin endpoint, service `web` whose requests go to pool `api` by default, the
/// pool's `servers` (as written in `addr`), `[pool.api.tls]` holding `tls`, and `more` after it
/// (other tables: `[pool.api.health]`, rules, pools).
fn rules(servers: &[String], tls: &str, more: &str) -> String {
    let servers: Vec<String> = servers
        .iter()
        .map(|s| format!("{{ addr = \"{s}\" }}"))
        .collect();
    format!(
        "[switch]\naccess_log = false\n\n[admin]\nlisten = \"127.0.0.1:0\"\n\n\
         [virtual.web]\nlisten = \"127.0.0.1:0\"\ndefault_pool = \"api\"\n\n\
         [pool.api]\nservers = [{}]\n\n[pool.api.tls]\n{tls}\n\n{more}\n",
        servers.join(", ")
    )
}

/// `localhost:PORT` of `origin`: a server written by name.
fn by_name(origin: &TlsOrigin) -> String {
    format!("localhost:{}", origin.addr.port())
}

/// `ca = "PATH"`, `ca`'s certificate written to the scratch folder.
fn ca_key(scratch: &Scratch, ca: &OriginCa) -> String {
    format!("ca = {}", toml_path(&ca.write(scratch, "ca.pem")))
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

/// The server `addr` of `pool` in a `/stats` document.
fn server_in<'a>(stats: &'a Value, pool: &str, addr: SocketAddr) -> &'a Value {
    let pool = stats["pools"]
        .as_array()
        .expect("pools")
        .iter()
        .find(|p| p["name"] == pool)
        .unwrap_or_else(|| panic!("no pool {pool} in {stats}"));
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
        let server = server_in(&stats, "api", addr);
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

/// Every connection completed its handshake and asked for `sni`; none offered `h2` (the pool
/// speaks HTTP/1.1).
fn all_verified_with_sni(connections: &[ConnectionSeen], sni: Option<&str>) {
    assert!(!connections.is_empty());
    for c in connections {
        assert!(c.hello && c.handshake.completed(), "{c:?}");
        assert_eq!(c.sni.as_deref(), sni, "{c:?}");
        assert!(
            !c.alpn.iter().any(|p| p == b"h2"),
            "an http/1.1 pool offers no h2: {c:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_verified_by_the_pools_ca_gets_requests_byte_exact_and_its_name_as_sni() {
    let scratch = Scratch::new("upstream-tls-verified");
    let ca = OriginCa::new("internal CA");
    let origin = TlsOrigin::start(&ca.issue(&["localhost"])).await;
    let plain = backend().await;
    // Besides pool `api` over TLS, pool `plain` without, for /plain/...
    let more = format!(
        "[[virtual.web.rule]]\npath = '^/plain/'\npool = \"plain\"\n\n\
         [pool.plain]\nservers = [{{ addr = \"{}\" }}]\n",
        plain.addr
    );
    let switch = start_switch(
        &rules(&[by_name(&origin)], &ca_key(&scratch, &ca), &more),
        &[],
    )
    .await;
    let mut client = Client::connect(switch.local_addr("web").unwrap()).await;

    let r = get_size(&mut client, 1000).await;
    assert_eq!(r.served_by(), origin.addr.to_string());
    get_size(&mut client, 5 << 20).await;
    let upload = pattern(5 << 20, 11);
    assert_eq!(
        ok(&mut client, &post("/upload", &upload)).await.text(),
        digest_of(&upload)
    );
    let chunked = pattern((1 << 20) + 3, 12);
    assert_eq!(
        ok(
            &mut client,
            &post_chunked("/upload/chunked", &chunked, 100_000)
        )
        .await
        .text(),
        digest_of(&chunked)
    );
    let r = client.get("/plain/page").await;
    assert_eq!(
        (r.status, r.served_by()),
        (200, plain.addr.to_string()),
        "{}",
        r.text()
    );

    all_verified_with_sni(&origin.connections(), Some("localhost"));
    let requests = origin.requests();
    let seen: Vec<(&str, &str, usize, &str)> = requests
        .iter()
        .map(|r| {
            (
                r.method.as_str(),
                r.path.as_str(),
                r.body_len,
                r.body_sha256.as_str(),
            )
        })
        .collect();
    let (up, up_chunked) = (sha256_hex(&upload), sha256_hex(&chunked));
    let empty = sha256_hex(b"");
    assert_eq!(
        seen,
        [
            ("GET", "/size/1000", 0, empty.as_str()),
            ("GET", "/size/5242880", 0, empty.as_str()),
            ("POST", "/upload", 5 << 20, up.as_str()),
            (
                "POST",
                "/upload/chunked",
                (1 << 20) + 3,
                up_chunked.as_str()
            ),
        ]
    );

    // Counted once each exchange has ended, which may come after the client has its answer.
    let server = wait_for_server(&switch, origin.addr, "4 requests counted", |s| {
        s["requests"].as_u64() == Some(4)
    })
    .await;
    assert_eq!(server["tls"], true, "{server}");
    assert_eq!(server["protocol"], "http/1.1", "{server}");
    assert_eq!(count(&server["tls_failures"]), 0, "{server}");
    assert_eq!(count(&server["connect_errors"]), 0, "{server}");
    let stats = stats(&switch).await;
    let plain_server = server_in(&stats, "plain", plain.addr);
    assert_eq!(plain_server["tls"], false, "{plain_server}");
    assert_eq!(plain_server["protocol"], "http/1.1", "{plain_server}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_written_as_an_ip_address_gets_no_sni_and_is_verified_by_its_ip_san() {
    let scratch = Scratch::new("upstream-tls-ip");
    let ca = OriginCa::new("internal CA");
    let origin = TlsOrigin::start(&ca.issue(&["127.0.0.1"])).await;
    let switch = start_switch(
        &rules(&[origin.addr.to_string()], &ca_key(&scratch, &ca), ""),
        &[],
    )
    .await;
    let mut client = Client::connect(switch.local_addr("web").unwrap()).await;
    get_size(&mut client, 70_000).await;
    all_verified_with_sni(&origin.connections(), None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_explicit_sni_is_sent_and_the_certificate_verified_for_it() {
    let scratch = Scratch::new("upstream-tls-sni");
    let ca = OriginCa::new("internal CA");
    let origin = TlsOrigin::start(&ca.issue(&["api.internal"])).await;
    let tls_keys = format!("{}\nsni = \"api.internal\"", ca_key(&scratch, &ca));
    let switch = start_switch(&rules(&[origin.addr.to_string()], &tls_keys, ""), &[]).await;
    let mut client = Client::connect(switch.local_addr("web").unwrap()).await;
    get_size(&mut client, 70_000).await;
    all_verified_with_sni(&origin.connections(), Some("api.internal"));
}

/// Pool `api` has the one server `origin` (written as `server`) with these `tls` keys, and its
/// certificate does not verify: a GET is answered 502, the origin completed no handshake and got
/// no byte of the request, not even in the clear, and `/stats` counts the failure in
/// `tls_failures` and `connect_errors`.
async fn refused_by_the_switch(origin: &TlsOrigin, server: String, tls: &str) {
    let switch = start_switch(&rules(&[server], tls, ""), &[]).await;
    let mut client = Client::connect(switch.local_addr("web").unwrap()).await;
    let path = "/a-path-the-origin-never-sees";
    let r = client.get(path).await;
    assert_eq!(r.status, 502, "{}", r.text());
    let connections = origin.wait_for_handshakes_to_end().await;
    for c in &connections {
        assert!(c.hello, "the switch spoke TLS: {c:?}");
        assert!(!c.handshake.completed(), "{c:?}");
        assert_eq!(c.app_bytes, 0, "{c:?}");
        assert!(!c.raw_contains(path.as_bytes()), "the request in the clear");
    }
    assert!(origin.requests().is_empty());
    let server = wait_for_server(&switch, origin.addr, "tls_failures counted", |s| {
        s["tls_failures"].as_u64().unwrap_or(0) >= 1
    })
    .await;
    assert!(count(&server["connect_errors"]) >= 1, "{server}");
    assert_eq!(count(&server["requests"]), 0, "{server}");
    assert_eq!(server["tls"], true, "{server}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_certificate_of_another_ca_gets_502_and_no_byte_of_the_request() {
    let scratch = Scratch::new("upstream-tls-other-ca");
    let trusted = OriginCa::new("internal CA");
    let origin = TlsOrigin::start(&TestCa::new().issue(&["localhost"])).await;
    refused_by_the_switch(&origin, by_name(&origin), &ca_key(&scratch, &trusted)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_ca_the_systems_roots_do_not_trust_a_private_ca() {
    let origin = TlsOrigin::start(&OriginCa::new("private CA").issue(&["localhost"])).await;
    refused_by_the_switch(&origin, by_name(&origin), "").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_certificate_for_another_name_gets_502_and_no_byte_of_the_request() {
    let scratch = Scratch::new("upstream-tls-other-name");
    let ca = OriginCa::new("internal CA");
    let origin = TlsOrigin::start(&ca.issue(&["other.test"])).await;
    refused_by_the_switch(&origin, by_name(&origin), &ca_key(&scratch, &ca)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_expired_certificate_gets_502_and_no_byte_of_the_request() {
    let scratch = Scratch::new("upstream-tls-expired");
    let ca = OriginCa::new("internal CA");
    let origin = TlsOrigin::start(&ca.issue_expired(&["localhost"])).await;
    refused_by_the_switch(&origin, by_name(&origin), &ca_key(&scratch, &ca)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn verify_false_accepts_a_self_signed_certificate_for_another_name() {
    let origin = TlsOrigin::start(&self_signed(&["other.test"])).await;
    let switch = start_switch(&rules(&[by_name(&origin)], "verify = false", ""), &[]).await;
    let mut client = Client::connect(switch.local_addr("web").unwrap()).await;
    get_size(&mut client, 100_000).await;
    let upload = pattern(100_000, 5);
    assert_eq!(
        ok(&mut client, &post("/up", &upload)).await.text(),
        digest_of(&upload)
    );
    all_verified_with_sni(&origin.connections(), Some("localhost"));
    let server = server_in(&stats(&switch).await, "api", origin.addr).clone();
    assert_eq!(count(&server["tls_failures"]), 0, "{server}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mutual_tls_presents_the_pools_client_certificate_and_without_one_gets_502() {
    let scratch = Scratch::new("upstream-tls-mutual");
    let ca = OriginCa::new("internal CA");
    let clients = OriginCa::new("client CA");
    let options = OriginOptions {
        client_ca: Some(clients.der()),
    };
    let origin = TlsOrigin::start_with(&ca.issue(&["localhost"]), options).await;
    let (cert, key) = write_leaf(&scratch, "client", &clients.issue_client("switch.internal"));
    let with_cert = format!(
        "{}\ncert = {}\nkey = {}",
        ca_key(&scratch, &ca),
        toml_path(&cert),
        toml_path(&key)
    );
    let switch = start_switch(&rules(&[by_name(&origin)], &with_cert, ""), &[]).await;
    let mut client = Client::connect(switch.local_addr("web").unwrap()).await;
    get_size(&mut client, 50_000).await;
    let upload = pattern(50_000, 6);
    assert_eq!(
        ok(&mut client, &post("/up", &upload)).await.text(),
        digest_of(&upload)
    );
    let connections = origin.connections();
    all_verified_with_sni(&connections, Some("localhost"));
    assert!(connections.iter().all(|c| c.client_cert), "{connections:?}");
    drop(client);
    drop(switch);

    // The same origin, a pool without cert and key: refused by the origin, 502.
    let before = connections.len();
    let switch = start_switch(&rules(&[by_name(&origin)], &ca_key(&scratch, &ca), ""), &[]).await;
    let mut client = Client::connect(switch.local_addr("web").unwrap()).await;
    let r = client.get("/without-a-certificate").await;
    assert_eq!(r.status, 502, "{}", r.text());
    let connections = origin.wait_for_handshakes_to_end().await;
    assert!(
        connections.len() > before,
        "the switch tried: {connections:?}"
    );
    for c in &connections[before..] {
        assert!(!c.handshake.completed() && !c.client_cert, "{c:?}");
        assert_eq!(c.app_bytes, 0, "{c:?}");
    }
    assert_eq!(origin.requests().len(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sequential_requests_share_one_kept_tls_connection() {
    let scratch = Scratch::new("upstream-tls-reuse");
    let ca = OriginCa::new("internal CA");
    let origin = TlsOrigin::start(&ca.issue(&["localhost"])).await;
    let switch = start_switch(&rules(&[by_name(&origin)], &ca_key(&scratch, &ca), ""), &[]).await;
    let mut client = Client::connect(switch.local_addr("web").unwrap()).await;
    for i in 1..=5 {
        get_size(&mut client, i * 1000).await;
    }
    let connections = origin.connections();
    assert_eq!(connections.len(), 1, "one handshake: {connections:?}");
    assert_eq!(connections[0].requests, 5);
    assert_eq!(connections[0].handshake, Handshake::Full);
    wait_for_server(
        &switch,
        origin.addr,
        "5 requests, the connection parked",
        |s| s["idle"].as_u64() == Some(1) && s["requests"].as_u64() == Some(5),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_connection_to_a_server_resumes_the_tls_session() {
    let scratch = Scratch::new("upstream-tls-resume");
    let ca = OriginCa::new("internal CA");
    let origin = TlsOrigin::start(&ca.issue(&["localhost"])).await;
    let switch = start_switch(&rules(&[by_name(&origin)], &ca_key(&scratch, &ca), ""), &[]).await;
    let mut client = Client::connect(switch.local_addr("web").unwrap()).await;
    // The origin closes after each answer (`Connection: close`): every request needs a new
    // connection to it.
    for _ in 0..4 {
        let r = ok(&mut client, b"GET /bye/1000 HTTP/1.1\r\nHost: test\r\n\r\n").await;
        assert_eq!(r.body, pattern(1000, 1000));
    }
    let handshakes = origin.handshakes();
    assert!(handshakes.len() >= 4, "{handshakes:#?}");
    assert_eq!(handshakes[0].handshake, Handshake::Full, "{handshakes:#?}");
    for (i, c) in handshakes.iter().enumerate().skip(1) {
        assert_eq!(
            c.handshake,
            Handshake::Resumed,
            "handshake {i} of {handshakes:#?}"
        );
    }
    all_verified_with_sni(&origin.connections(), Some("localhost"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn twenty_clients_in_parallel_are_served_byte_exact_over_tls() {
    let scratch = Scratch::new("upstream-tls-parallel");
    let ca = OriginCa::new("internal CA");
    let origin = TlsOrigin::start(&ca.issue(&["localhost"])).await;
    let switch = start_switch(&rules(&[by_name(&origin)], &ca_key(&scratch, &ca), ""), &[]).await;
    let web = switch.local_addr("web").unwrap();
    let tasks = (0..20)
        .map(|c: usize| {
            tokio::spawn(async move {
                let mut client = Client::connect(web).await;
                for i in 0..10 {
                    let n = 1 + (c * 10 + i) * 7919 % 150_000;
                    if i % 2 == 0 {
                        get_size(&mut client, n).await;
                    } else {
                        let body = pattern(n, (c * 100 + i) as u64);
                        let answer = ok(&mut client, &post("/up", &body)).await;
                        assert_eq!(answer.text(), digest_of(&body), "client {c} request {i}");
                    }
                }
            })
        })
        .collect();
    join_all(tasks).await;
    assert_eq!(origin.requests().len(), 200);
    all_verified_with_sni(&origin.connections(), Some("localhost"));
    let server = wait_for_server(&switch, origin.addr, "200 requests counted", |s| {
        s["requests"].as_u64() == Some(200)
    })
    .await;
    assert_eq!(count(&server["tls_failures"]), 0, "{server}");
}

/// Checks of `kind` in a pool of two TLS servers by name, one whose certificate verifies and
/// one from another CA: the second is taken down by its checks, the first is up and gets every
/// request. Returns the two origins.
async fn checks_over_tls(kind: &str) -> (TlsOrigin, TlsOrigin) {
    let scratch = Scratch::new(&format!("upstream-tls-check-{kind}"));
    let ca = OriginCa::new("internal CA");
    let good = TlsOrigin::start(&ca.issue(&["localhost"])).await;
    let bad = TlsOrigin::start(&TestCa::new().issue(&["localhost"])).await;
    // panic_threshold = 0: health alone decides. The timeout is far above what a loaded machine
    // takes on loopback: the first check decides at once.
    let path = if kind == "http" {
        "path = \"/health\"\n"
    } else {
        ""
    };
    let health = format!(
        "[pool.api.health]\ncheck = \"{kind}\"\n{path}interval = \"100ms\"\n\
         timeout = \"3s\"\npanic_threshold = 0\n"
    );
    let switch = start_switch(
        &rules(
            &[by_name(&good), by_name(&bad)],
            &ca_key(&scratch, &ca),
            &health,
        ),
        &[],
    )
    .await;
    let snap = wait_until(
        &switch,
        "the bad server down, the good one checked up",
        |s| {
            let (Some(g), Some(b)) = (s.server(good.addr), s.server(bad.addr)) else {
                return false;
            };
            b.state == State::Down
                && matches!(b.check.last, Some((false, _, _)))
                && g.state == State::Up
                && matches!(g.check.last, Some((true, _, _)))
        },
    )
    .await;
    // The checks made TLS connections to both; the bad one got no byte.
    good.wait_for("a check's handshake", |c, _| {
        c.iter().any(|c| c.handshake.completed())
    })
    .await;
    all_verified_with_sni(&good.handshakes(), Some("localhost"));
    let refused = bad.wait_for_handshakes_to_end().await;
    for c in &refused {
        assert!(c.hello && !c.handshake.completed(), "{c:?}");
        assert_eq!(c.app_bytes, 0, "{c:?}");
    }
    // Requests go to the good server only.
    let mut client = Client::connect(switch.local_addr("web").unwrap()).await;
    for _ in 0..6 {
        let r = get_size(&mut client, 100).await;
        assert_eq!(r.served_by(), good.addr.to_string(), "{snap:?}");
    }
    assert!(
        bad.requests().is_empty(),
        "{:?}",
        switch.stats().server(bad.addr)
    );
    (good, bad)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_checks_run_over_tls_and_a_certificate_that_does_not_verify_takes_its_server_down() {
    let (good, _bad) = checks_over_tls("http").await;
    good.wait_for("a check request", |_, r| {
        r.iter().any(|r| r.path == "/health")
    })
    .await;
    let connections = good.connections();
    for r in good.requests().iter().filter(|r| r.path == "/health") {
        assert_eq!(r.method, "GET");
        assert!(connections[r.connection].handshake.completed());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tcp_checks_run_over_tls_and_a_certificate_that_does_not_verify_takes_its_server_down() {
    checks_over_tls("tcp").await;
}

// ---------------------------------------------------------------- the rule file

/// A rule file whose pool `api` has `pool_keys` and `[pool.api.tls]` with `tls`.
fn rule_file(pool_keys: &str, tls: &str) -> String {
    format!(
        "[virtual.web]\nlisten = \"127.0.0.1:0\"\ndefault_pool = \"api\"\n\n\
         [pool.api]\nservers = [{{ addr = \"localhost:8443\" }}]\n{pool_keys}\n\n\
         [pool.api.tls]\n{tls}\n"
    )
}

/// Errors and warnings of the library's check of `text`, written to `rules.toml` in `scratch`.
struct Checked {
    file: String,
    errors: Vec<String>,
    warnings: Vec<String>,
}

fn check(scratch: &Scratch, text: &str) -> Checked {
    let path = scratch.file("rules.toml", text);
    let checked = tcpvs::Config::check_file(&path).unwrap();
    let errors = match checked.config {
        Ok(_) => Vec::new(),
        Err(errors) => errors.0.iter().map(|e| e.to_string()).collect(),
    };
    Checked {
        file: path.display().to_string(),
        errors,
        warnings: checked.warnings.iter().map(|w| w.to_string()).collect(),
    }
}

/// `FILE:LINE:COL: ` of the first `needle` in `text`.
fn place(file: &str, text: &str, needle: &str) -> String {
    let (line, col) = position_of(text, needle);
    format!("{file}:{line}:{col}: ")
}

/// Certificate files for the rule-file tests: a CA, a client certificate and key, a file with
/// no certificate, one with only a key.
struct Files {
    ca: String,
    cert: String,
    key: String,
    garbage: String,
    key_only: String,
    missing: String,
    folder: String,
}

fn files(scratch: &Scratch) -> Files {
    let ca = OriginCa::new("internal CA");
    let client = ca.issue_client("switch.internal");
    let (cert, key) = write_leaf(scratch, "client", &client);
    Files {
        ca: toml_path(&ca.write(scratch, "ca.pem")),
        cert: toml_path(&cert),
        key: toml_path(&key),
        garbage: toml_path(&scratch.file("garbage.pem", "hello\n")),
        key_only: toml_path(&scratch.file("key-only.pem", &client.key_pem)),
        missing: toml_path(&scratch.0.join("missing-ca.pem")),
        folder: toml_path(&scratch.0),
    }
}

#[test]
fn tls_keys_that_are_right_are_accepted_without_warning() {
    let scratch = Scratch::new("upstream-tls-check-ok");
    let f = files(&scratch);
    for (pool_keys, tls) in [
        (String::new(), format!("ca = {}", f.ca)),
        (String::new(), String::new()),
        (
            "protocol = \"http/1.1\"".to_string(),
            format!(
                "ca = {}\nverify = true\nsni = \"api.internal\"\ncert = {}\nkey = {}",
                f.ca, f.cert, f.key
            ),
        ),
    ] {
        let text = rule_file(&pool_keys, &tls);
        let c = check(&scratch, &text);
        assert_eq!(
            (c.errors.clone(), c.warnings.clone()),
            (Vec::new(), Vec::new()),
            "{text}"
        );
    }
}

#[test]
fn tls_key_mistakes_are_errors_at_their_place() {
    let scratch = Scratch::new("upstream-tls-check-errors");
    let f = files(&scratch);
    // (what, tls keys, the places the error may point at (first found in the text), a word the
    // message must hold)
    let ca = format!("ca = {}", f.ca);
    let cases: Vec<(&str, String, Vec<String>, &str)> = vec![
        (
            "a ca file that is not there",
            format!("ca = {}", f.missing),
            vec![f.missing.clone()],
            "",
        ),
        (
            "a ca that is a folder",
            format!("ca = {}", f.folder),
            vec![f.folder.clone()],
            "",
        ),
        (
            "a ca file with no certificate",
            format!("ca = {}", f.garbage),
            vec![f.garbage.clone()],
            "",
        ),
        (
            "a ca file with a key only",
            format!("ca = {}", f.key_only),
            vec![f.key_only.clone()],
            "",
        ),
        // Where an absent key is named is not fixed: at the key present, its value, or the table.
        (
            "cert without key",
            format!("{ca}\ncert = {}", f.cert),
            vec!["cert = ".into(), f.cert.clone(), "[pool.api.tls]".into()],
            "key",
        ),
        (
            "key without cert",
            format!("{ca}\nkey = {}", f.key),
            vec!["key = ".into(), f.key.clone(), "[pool.api.tls]".into()],
            "cert",
        ),
        (
            "an unknown key",
            format!("{ca}\nverfiy = true"),
            vec!["verfiy".into()],
            "verfiy",
        ),
        (
            "sni with a space",
            format!("{ca}\nsni = \"api internal\""),
            vec!["\"api internal\"".into()],
            "",
        ),
        (
            "sni with an empty label",
            format!("{ca}\nsni = \"api..internal\""),
            vec!["\"api..internal\"".into()],
            "",
        ),
    ];
    for (what, tls, places, word) in cases {
        let text = rule_file("", &tls);
        let c = check(&scratch, &text);
        assert_eq!(c.errors.len(), 1, "{what}: {text}\n=> {:#?}", c.errors);
        let error = &c.errors[0];
        let expected: Vec<String> = places
            .iter()
            .map(|needle| place(&c.file, &text, needle))
            .collect();
        assert!(
            expected.iter().any(|p| error.starts_with(p.as_str())),
            "{what}: expected one of {expected:?}, got {error}"
        );
        assert!(
            !error.contains("warning"),
            "{what}: an error, not a warning: {error}"
        );
        assert!(error.contains(word), "{what}: {error} names {word:?}");
    }

    // Several at once: every one, in file order.
    let tls = format!("ca = {}\nsni = \"api internal\"\nverfiy = true", f.missing);
    let text = rule_file("", &tls);
    let c = check(&scratch, &text);
    let expected = [
        place(&c.file, &text, &f.missing),
        place(&c.file, &text, "\"api internal\""),
        place(&c.file, &text, "verfiy"),
    ];
    assert_eq!(c.errors.len(), 3, "{:#?}", c.errors);
    for (error, place) in c.errors.iter().zip(&expected) {
        assert!(error.starts_with(place.as_str()), "{place} => {error}");
    }
}

#[test]
fn a_protocol_other_than_the_three_is_an_error_at_its_value() {
    // "h2" and "auto" are accepted since HTTP/2 to servers landed (tests/upstream_h2.rs).
    let scratch = Scratch::new("upstream-tls-check-protocol");
    let f = files(&scratch);
    for (protocol, errors) in [("h2", 0), ("auto", 0), ("h3", 1)] {
        let text = rule_file(
            &format!("protocol = \"{protocol}\""),
            &format!("ca = {}", f.ca),
        );
        let c = check(&scratch, &text);
        assert_eq!(c.errors.len(), errors, "{text}\n=> {:#?}", c.errors);
        if errors == 1 {
            let at = place(&c.file, &text, &format!("\"{protocol}\""));
            assert!(
                c.errors[0].starts_with(&at) && c.errors[0].contains(protocol),
                "expected {at}... {protocol}, got {}",
                c.errors[0]
            );
        }
    }
}

#[test]
fn verify_false_is_a_warning_at_its_place_and_tcpvs_check_prints_it() {
    let scratch = Scratch::new("upstream-tls-check-verify");
    let text = rule_file("", "verify = false");
    let c = check(&scratch, &text);
    assert!(c.errors.is_empty(), "{:#?}", c.errors);
    assert_eq!(c.warnings.len(), 1, "{:#?}", c.warnings);
    let places = [
        format!("{}warning: ", place(&c.file, &text, "verify")),
        format!("{}warning: ", place(&c.file, &text, "false")),
    ];
    assert!(
        places.iter().any(|p| c.warnings[0].starts_with(p.as_str())),
        "expected one of {places:?}, got {}",
        c.warnings[0]
    );

    // The binary: exit 0, the summary, the warning on stderr; --strict refuses the file.
    let path = scratch.file("verify-false.toml", &text);
    let run = |args: &[&str]| {
        std::process::Command::new(env!("CARGO_BIN_EXE_tcpvs"))
            .arg("check")
            .args(args)
            .arg(&path)
            .output()
            .unwrap()
    };
    let out = run(&[]);
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let file = path.display().to_string();
    let places = [
        format!("{}warning: ", place(&file, &text, "verify")),
        format!("{}warning: ", place(&file, &text, "false")),
    ];
    assert!(
        places.iter().any(|p| stderr.trim().starts_with(p.as_str())) && stderr.lines().count() == 1,
        "{stderr}"
    );
    assert_eq!(run(&["--strict"]).status.code(), Some(1));
}
