//! What one source may hold of `max_clients` in the whole switch (capacity/share.rs): in the
//! budget's last quarter, fewer than a quarter of the free room, its HTTP/1.1 connections,
//! HTTP/2 connections and streams counted together. Before, only HTTP/2 streams counted: one
//! address's HTTP/1.1 connections alone filled `max_clients` (every other client refused),
//! and with a few HTTP/1.1 uploads beside its streams it took every server connection.
//!
//! Verdicts rest on answers: each connection served once shows it counted, the refused one's
//! `503` names why, the backend holds the admitted streams (`wait_for_requests`).

mod common;
#[path = "common/h2.rs"]
mod h2c;

use common::*;
use h2c::{request, H2};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};

const ATTACKER: IpAddr = IpAddr::V4(Ipv4Addr::new(127, 0, 0, 1));
const VICTIM: IpAddr = IpAddr::V4(Ipv4Addr::new(127, 0, 0, 2));

const BUSY: &str = "from your address while the switch is busy";

/// One plain service `web` on `web`, with `max_clients = 40`: the last quarter begins with 30
/// connections and streams taken.
async fn switch_of_40(web: &Backend) -> (tcpvs::Switch, SocketAddr) {
    let rules = format!(
        r#"
[switch]
access_log = false
max_clients = 40
[virtual.web]
listen = "127.0.0.1:0"
default_pool = "web"
[pool.web]
servers = [{{ addr = "{addr}" }}]
"#,
        addr = web.addr
    );
    let switch = start_switch(&rules, &[]).await;
    let addr = switch.local_addr("web").expect("the service listens");
    (switch, addr)
}

/// `n` keep-alive HTTP/1.1 connections from `source`, each served once (so each is counted
/// before the next opens).
async fn served_connections(source: IpAddr, addr: SocketAddr, n: usize) -> Vec<Client> {
    let mut connections = Vec::new();
    for i in 0..n {
        let mut client = Client::connect_from(source, addr).await;
        let reply = client.get(&format!("/counted?c={i}")).await;
        assert_eq!(reply.status, 200, "connection {i}: {}", reply.text());
        connections.push(client);
    }
    connections
}

/// 30 HTTP/1.1 connections of one address reach the last quarter; its 31st holds 30 with 10
/// free (30 x 4 >= 10) and is answered `503` at once, counted as `share_refused`; another
/// address is served. Before, the address could open all 40 and every other client got `503`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_address_http1_connections_stop_at_its_share_of_the_last_quarter() {
    let web = backend().await;
    let (switch, addr) = switch_of_40(&web).await;
    let held = served_connections(ATTACKER, addr, 30).await;

    let mut refused = Client::connect_from(ATTACKER, addr).await;
    refused
        .send(b"GET /one-more HTTP/1.1\r\nHost: t\r\n\r\n")
        .await;
    let reply = refused.response(false).await;
    assert_eq!(reply.status, 503, "{}", reply.text());
    assert!(
        reply
            .text()
            .contains(&format!("too many connections {BUSY}")),
        "{}",
        reply.text()
    );
    assert!(refused.is_closed().await);

    let mut victim = Client::connect_from(VICTIM, addr).await;
    let reply = victim.get("/hello").await;
    assert_eq!(reply.status, 200, "{}", reply.text());
    let service = &switch.stats().services[0];
    assert_eq!(service.share_refused, 1);
    assert_eq!(service.refused, 0, "max_clients was never reached");
    assert_eq!(web.requests(), 31);

    // What the address held is given back with its connections.
    drop((held, refused, victim));
    wait_until(&switch, "every connection closed", |s| s.clients == 0).await;
    let again = served_connections(ATTACKER, addr, 30).await;
    drop(again);
}

/// The finding of the attack's re-run: an address's HTTP/1.1 connections count toward its
/// HTTP/2 streams' share. One HTTP/2 connection and 28 HTTP/1.1 ones hold 29; its first stalled
/// stream takes the 30th place, and in the last quarter (10 free, 30 held) the other four are
/// answered `503` at once. Counting streams only, the address held 1 stream and got a second.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_address_http1_connections_count_toward_its_streams_share() {
    let web = backend().await;
    let (switch, addr) = switch_of_40(&web).await;
    let h2 = H2::plain_from(ATTACKER, addr).await;
    assert_eq!(h2.get("a.test", "/counted").await.status, 200);
    let _h1 = served_connections(ATTACKER, addr, 28).await;

    let mut responses = Vec::new();
    let mut bodies = Vec::new();
    for i in 0..5 {
        let post = request(
            "POST",
            "a.test",
            &format!("/hold?upload={i}"),
            &[("content-length", "1000")],
        );
        let (response, body) = h2.streams().open_stalled(post).await;
        responses.push(response);
        bodies.push(body);
    }
    web.wait_for_requests(30).await;
    // The first stream is held at the server; the other four are answered at once.
    let held = responses.remove(0);
    for response in responses {
        let response = tokio::time::timeout(PATIENCE, response)
            .await
            .expect("a refused stream answered at once")
            .expect("a response");
        assert_eq!(response.status(), 503);
        let mut body = response.into_body();
        let mut text = Vec::new();
        while let Some(Ok(piece)) = body.data().await {
            text.extend_from_slice(&piece);
        }
        let text = String::from_utf8_lossy(&text);
        assert!(
            text.contains(&format!("too many requests {BUSY}")),
            "{text}"
        );
    }

    let mut victim = Client::connect_from(VICTIM, addr).await;
    let reply = victim.get("/hello").await;
    assert_eq!(reply.status, 200, "{}", reply.text());
    let service = &switch.stats().services[0];
    assert_eq!(service.h2_streams_refused, 4);
    assert_eq!(web.requests(), 31, "29 GETs, the held stream, the victim's");
    drop((held, bodies, h2));
}

/// A newcomer's first HTTP/2 stream is let in wherever its connection was: a stream is judged
/// by what its client holds besides its own connection. 30 connections of one address and 6
/// of six others leave 4 places; the newcomer's connection takes one (it holds nothing), and
/// its stream another, though its connection is a quarter of the 3 then free.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_newcomers_first_stream_is_let_in_wherever_its_connection_was() {
    let web = backend().await;
    let (switch, addr) = switch_of_40(&web).await;
    let _heavy = served_connections(ATTACKER, addr, 30).await;
    let mut light = Vec::new();
    for last in 10..16 {
        let source = IpAddr::V4(Ipv4Addr::new(127, 0, 0, last));
        light.extend(served_connections(source, addr, 1).await);
    }
    let newcomer = H2::plain_from(VICTIM, addr).await;
    let reply = newcomer.get("a.test", "/hello").await;
    assert_eq!(reply.status, 200, "{}", reply.text());
    let service = &switch.stats().services[0];
    assert_eq!((service.share_refused, service.h2_streams_refused), (0, 0));
    assert_eq!(web.requests(), 37);
}
