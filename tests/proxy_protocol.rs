//! The PROXY protocol (issue 14, in part): `proxy_protocol = true` on a virtual service takes
//! the client from a version 1 or 2 header (X-Forwarded-For and the log show it), a
//! connection without a valid header is closed and counted, never routed; `send_proxy` on a
//! pool starts each server connection with a header naming its client, and such connections
//! carry one client's requests only.

mod common;

use common::*;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

const PROXIED: &str = r#"
[switch]
access_log = false

[virtual.web]
listen = "127.0.0.1:0"
default_pool = "p"
proxy_protocol = true

[pool.p]
servers = [{ addr = "{server}" }]
{pool}
"#;

async fn proxied_switch(server: SocketAddr, pool: &str) -> tcpvs::Switch {
    start_switch(
        PROXIED,
        &[("server", server.to_string()), ("pool", pool.to_string())],
    )
    .await
}

/// A version 2 header for `client` connected to `destination`.
fn v2_header(client: SocketAddr, destination: SocketAddr) -> Vec<u8> {
    let mut header = b"\r\n\r\n\0\r\nQUIT\n\x21".to_vec();
    match (client, destination) {
        (SocketAddr::V4(c), SocketAddr::V4(d)) => {
            header.extend_from_slice(&[0x11, 0, 12]);
            header.extend_from_slice(&c.ip().octets());
            header.extend_from_slice(&d.ip().octets());
        }
        (SocketAddr::V6(c), SocketAddr::V6(d)) => {
            header.extend_from_slice(&[0x21, 0, 36]);
            header.extend_from_slice(&c.ip().octets());
            header.extend_from_slice(&d.ip().octets());
        }
        _ => panic!("one family"),
    }
    header.extend_from_slice(&client.port().to_be_bytes());
    header.extend_from_slice(&destination.port().to_be_bytes());
    header
}

/// The X-Forwarded-For the server received, from the `/headers` echo.
fn forwarded_for(response: &Response) -> String {
    let text = response.text();
    text.lines()
        .find_map(|l| l.strip_prefix("X-Forwarded-For: "))
        .unwrap_or_else(|| panic!("no X-Forwarded-For in {text}"))
        .trim()
        .to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn version_1_names_the_client() {
    let server = backend().await;
    let switch = proxied_switch(server.addr, "").await;
    let mut client = Client::connect(switch.local_addr("web").unwrap()).await;
    client
        .send(
            b"PROXY TCP4 192.0.2.7 10.0.0.1 56324 443\r\nGET /headers HTTP/1.1\r\nHost: t\r\n\r\n",
        )
        .await;
    let r = client.response(false).await;
    assert_eq!(r.status, 200);
    assert_eq!(forwarded_for(&r), "192.0.2.7");
    // Later requests on the connection keep that client.
    assert_eq!(forwarded_for(&client.get("/headers").await), "192.0.2.7");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn version_2_in_pieces_names_an_ipv6_client_and_local_names_none() {
    let server = backend().await;
    let switch = proxied_switch(server.addr, "").await;
    let addr = switch.local_addr("web").unwrap();
    let header = v2_header(
        "[2001:db8::7]:4000".parse().unwrap(),
        "[2001:db8::1]:443".parse().unwrap(),
    );
    let mut client = Client::connect(addr).await;
    for piece in header.chunks(7) {
        client.send(piece).await;
        tokio::task::yield_now().await;
    }
    assert_eq!(forwarded_for(&client.get("/headers").await), "2001:db8::7");

    // LOCAL (a director's health check): the connection's own address stands.
    let mut local = Client::connect(addr).await;
    local.send(b"\r\n\r\n\0\r\nQUIT\n\x20\x00\x00\x00").await;
    assert_eq!(forwarded_for(&local.get("/headers").await), "127.0.0.1");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_without_a_valid_header_is_closed_and_counted() {
    let server = backend().await;
    let switch = proxied_switch(server.addr, "").await;
    let addr = switch.local_addr("web").unwrap();
    for start in [
        &b"GET / HTTP/1.1\r\nHost: t\r\n\r\n"[..],
        b"PROXY TCP4 192.0.2.7 10.0.0.1 99999 443\r\nGET / HTTP/1.1\r\nHost: t\r\n\r\n",
        b"\r\n\r\n\0\r\nQUIT\n\x31\x11\x00\x0c",
    ] {
        let mut stream = TcpStream::connect(addr).await.unwrap();
        stream.write_all(start).await.unwrap();
        let mut answer = Vec::new();
        let _ = stream.read_to_end(&mut answer).await;
        assert!(answer.is_empty(), "{}", String::from_utf8_lossy(&answer));
    }
    let snap = wait_until(&switch, "three refused", |s| {
        s.services[0].proxy_refused == 3
    })
    .await;
    assert_eq!(snap.servers[0].requests, 0);
    assert_eq!(server.requests(), 0);
}

/// A server that records, per connection, the bytes before each request head's end, and
/// answers each request `ok`.
async fn recording_server() -> (SocketAddr, Arc<Mutex<Vec<Vec<u8>>>>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let seen: Arc<Mutex<Vec<Vec<u8>>>> = Arc::default();
    let record = Arc::clone(&seen);
    tokio::spawn(async move {
        while let Ok((mut s, _)) = listener.accept().await {
            let record = Arc::clone(&record);
            tokio::spawn(async move {
                let id = {
                    let mut all = record.lock().unwrap();
                    all.push(Vec::new());
                    all.len() - 1
                };
                let mut buf = Vec::new();
                let mut tmp = [0u8; 4096];
                loop {
                    while let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                        record.lock().unwrap()[id].extend(buf.drain(..end + 4));
                        let ok = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok";
                        if s.write_all(ok).await.is_err() {
                            return;
                        }
                    }
                    match s.read(&mut tmp).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => buf.extend_from_slice(&tmp[..n]),
                    }
                }
            });
        }
    });
    (addr, seen)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn send_proxy_names_each_client_on_connections_of_its_own() {
    for (version, starts) in [
        (
            "v1",
            [&b"PROXY TCP4 192.0.2.1 "[..], &b"PROXY TCP4 192.0.2.2 "[..]],
        ),
        (
            "v2",
            [
                &b"\r\n\r\n\0\r\nQUIT\n\x21\x11\x00\x0c\xc0\x00\x02\x01"[..],
                &b"\r\n\r\n\0\r\nQUIT\n\x21\x11\x00\x0c\xc0\x00\x02\x02"[..],
            ],
        ),
    ] {
        let (server, seen) = recording_server().await;
        let switch = proxied_switch(server, &format!("send_proxy = \"{version}\"")).await;
        let addr = switch.local_addr("web").unwrap();
        let mut a = Client::connect(addr).await;
        a.send(b"PROXY TCP4 192.0.2.1 10.0.0.1 1111 80\r\n").await;
        let mut b = Client::connect(addr).await;
        b.send(&v2_header(
            "192.0.2.2:2222".parse().unwrap(),
            "10.0.0.1:80".parse().unwrap(),
        ))
        .await;
        // Interleaved, two requests each on their keep-alive connections.
        for _ in 0..2 {
            assert_eq!(a.get("/a").await.status, 200);
            assert_eq!(b.get("/b").await.status, 200);
        }
        let seen = seen.lock().unwrap().clone();
        assert_eq!(
            seen.len(),
            4,
            "{version}: a server connection per request: {seen:?}"
        );
        for connection in &seen {
            let text = String::from_utf8_lossy(connection);
            let (prefix, ok) = if text.contains("GET /a ") {
                (starts[0], connection.starts_with(starts[0]))
            } else {
                (starts[1], connection.starts_with(starts[1]))
            };
            assert!(ok, "{version}: {text:?} should start with {prefix:?}");
            assert_eq!(text.matches("GET /").count(), 1, "{version}: {text:?}");
        }
        switch.shutdown(std::time::Duration::from_secs(1)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn send_proxy_must_name_a_version() {
    let text = "[virtual.web]\nlisten = \"127.0.0.1:0\"\ndefault_pool = \"p\"\n\n[pool.p]\nservers = [{ addr = \"127.0.0.1:9\" }]\nsend_proxy = \"v3\"\n";
    let e = tcpvs::Config::parse("t.toml", text)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("t.toml:7:14: `send_proxy`: expected \"v1\" or \"v2\", found \"v3\""),
        "{e}"
    );
}
