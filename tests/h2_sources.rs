//! What one client address may hold of the switch over HTTP/2 (connection/h2/admission.rs):
//! an attacker's few connections of POST streams that announce a body and never send it once
//! took the whole budget (`max_clients`), and every other HTTP/2 client got no answer at all.
//! Now streams count under `max_conns_per_source`, the budget's last quarter is kept for light
//! clients, and a stream that does not fit is answered `503` at once.
//!
//! Verdicts rest on events: each refused stream's `503` arriving, the backend holding the
//! admitted ones (`wait_for_requests`), the victim's answer. A switch that lets the streams
//! wait instead fails on a bounded wait for an answer that never comes.

mod common;
#[path = "common/h2.rs"]
mod h2c;

use common::*;
use h2c::{request, H2};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};

const ATTACKER: IpAddr = IpAddr::V4(Ipv4Addr::new(127, 0, 0, 1));
const VICTIM: IpAddr = IpAddr::V4(Ipv4Addr::new(127, 0, 0, 2));
const NEWCOMER: IpAddr = IpAddr::V4(Ipv4Addr::new(127, 0, 0, 3));

/// One plain service `web` on the backend `{web}`, with `settings` in `[switch]` and
/// `service` in `[virtual.web]`.
async fn switch_with(web: &Backend, settings: &str, service: &str) -> tcpvs::Switch {
    let rules = format!(
        r#"
[switch]
access_log = false
{settings}
[virtual.web]
listen = "127.0.0.1:0"
default_pool = "web"
{service}
[pool.web]
servers = [{{ addr = "{addr}" }}]
"#,
        addr = web.addr
    );
    start_switch(&rules, &[]).await
}

/// The attacker's streams: a POST announcing 1000 bytes that never come, held by the backend
/// (`/hold`) so that none ends while the test runs. The streams' senders
/// are kept so that they stay open.
struct Stalled {
    responses: Vec<h2::client::ResponseFuture>,
    _bodies: Vec<h2::SendStream<bytes::Bytes>>,
}

async fn open_stalled(client: &H2, n: usize) -> Stalled {
    let mut stalled = Stalled {
        responses: Vec::new(),
        _bodies: Vec::new(),
    };
    for i in 0..n {
        let post = request(
            "POST",
            "a.test",
            &format!("/hold?upload={i}"),
            &[("content-length", "1000")],
        );
        let (response, body) = client.streams().open_stalled(post).await;
        stalled.responses.push(response);
        stalled._bodies.push(body);
    }
    stalled
}

/// The status and body of the first `answered` responses to come (each within PATIENCE),
/// and of any other that came meanwhile; the rest (streams held at the server) stay open.
async fn answers(stalled: &mut Stalled, answered: usize) -> Vec<(u16, String)> {
    let (done, mut came) = tokio::sync::mpsc::unbounded_channel();
    for response in stalled.responses.drain(..) {
        let done = done.clone();
        tokio::spawn(async move {
            let Ok(response) = response.await else {
                return;
            };
            let status = response.status().as_u16();
            let mut body = response.into_body();
            let mut text = Vec::new();
            while let Some(Ok(piece)) = body.data().await {
                text.extend_from_slice(&piece);
            }
            let _ = done.send((status, String::from_utf8_lossy(&text).into_owned()));
        });
    }
    let mut got = Vec::new();
    while got.len() < answered {
        match tokio::time::timeout(PATIENCE, came.recv()).await {
            Ok(Some(answer)) => got.push(answer),
            _ => panic!(
                "{} streams answered at once, not {answered}: {got:?}",
                got.len()
            ),
        }
    }
    while let Ok(answer) = came.try_recv() {
        got.push(answer);
    }
    got
}

fn web_addr(switch: &tcpvs::Switch) -> SocketAddr {
    switch.local_addr("web").expect("the service listens")
}

/// The issue's attack, scaled down: `max_conns_per_source = 4`, the attacker's 4 connections
/// open 10 stalled uploads each. Each connection counts for its streams: its first stream
/// rides the connection's place, the other 9 are answered `503` at once, and the server holds
/// 4 requests, not 40. A client of another address is served.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streams_count_against_max_conns_per_source() {
    let web = backend().await;
    let switch = switch_with(&web, "max_clients = 400", "max_conns_per_source = 4").await;
    let addr = web_addr(&switch);
    let mut attackers = Vec::new();
    for _ in 0..4 {
        // All four counted before any stream is held: an answer on each shows the switch
        // serves it (the client's handshake does not wait for the switch).
        let attacker = H2::plain_from(ATTACKER, addr).await;
        assert_eq!(attacker.get("a.test", "/counted").await.status, 200);
        attackers.push(attacker);
    }
    let mut refused = Vec::new();
    let mut held = Vec::new();
    for client in &attackers {
        let mut stalled = open_stalled(client, 10).await;
        refused.extend(answers(&mut stalled, 9).await);
        held.push(stalled);
    }
    assert_eq!(refused.len(), 36, "{refused:?}");
    for (status, text) in &refused {
        assert_eq!(*status, 503);
        assert!(
            text.contains("too many connections and requests from your address"),
            "{text}"
        );
    }
    web.wait_for_requests(8).await;

    let victim = H2::plain_from(VICTIM, addr).await;
    let reply = victim.get("a.test", "/hello").await;
    assert_eq!(reply.status, 200, "{}", reply.text());
    assert_eq!(
        web.requests(),
        9,
        "4 GETs, the attacker's 4 held streams, the victim's"
    );
    let service = &switch.stats().services[0];
    assert_eq!(service.h2_streams_refused, 36);
    drop((held, attackers));
}

/// With no cap per source, one address's streams take the budget (`max_clients = 40`) only up
/// to its last quarter: from 30 connections and streams on, a client that runs 2 streams (a
/// sixteenth of 40) or more is refused at once, and a client of another address is served.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_source_cannot_take_the_last_quarter_of_the_budget() {
    let web = backend().await;
    let switch = switch_with(&web, "max_clients = 40", "").await;
    let addr = web_addr(&switch);
    let attacker = H2::plain_from(ATTACKER, addr).await;
    // 1 connection + 29 streams reach 30: the other 21 are refused.
    let mut stalled = open_stalled(&attacker, 50).await;
    let refused = answers(&mut stalled, 21).await;
    assert_eq!(refused.len(), 21, "{refused:?}");
    assert!(refused.iter().all(|(status, text)| *status == 503
        && text.contains("too many requests from your address while the switch is busy")));
    web.wait_for_requests(29).await;

    let victim = H2::plain_from(VICTIM, addr).await;
    let reply = victim.get("a.test", "/hello").await;
    assert_eq!(reply.status, 200, "{}", reply.text());
    assert_eq!(web.requests(), 30);
    assert_eq!(switch.stats().services[0].h2_streams_refused, 21);
    drop((stalled, attacker));
}

/// The streams of every connection and the client connections share `max_clients`, the
/// descriptor budget (each stream may hold a server connection). With `max_clients = 4`, one
/// connection runs 2 streams (the third would enter the last quarter as a heavy client) and
/// its other 8 are answered `503` at once; a newcomer on a second connection finds the budget
/// full (2 connections + 2 streams) and is answered `503` at once too. Once the streams end,
/// every client is served again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_budget_answers_new_streams_at_once() {
    let web = backend().await;
    let switch = switch_with(&web, "max_clients = 4", "").await;
    let addr = web_addr(&switch);
    let client = H2::plain_from(ATTACKER, addr).await;
    let mut tasks = Vec::new();
    let (done, mut answered) = tokio::sync::mpsc::unbounded_channel();
    for i in 0..10usize {
        let streams = client.streams();
        let done = done.clone();
        tasks.push(tokio::spawn(async move {
            let reply = streams.get("a.test", &format!("/hold?stream={i}")).await;
            let _ = done.send(reply.status);
        }));
    }
    let mut statuses = Vec::new();
    for _ in 0..8 {
        let status = tokio::time::timeout(PATIENCE, answered.recv()).await;
        statuses.push(
            status
                .expect("8 streams answered at once")
                .expect("a status"),
        );
    }
    assert_eq!(statuses, [503; 8]);
    web.wait_for_requests(2).await;

    let newcomer = H2::plain_from(NEWCOMER, addr).await;
    let reply = newcomer.get("a.test", "/hello").await;
    assert_eq!(reply.status, 503);
    assert!(
        reply.text().contains("the switch is full"),
        "{}",
        reply.text()
    );

    web.release(2);
    for _ in 0..2 {
        let status = tokio::time::timeout(PATIENCE, answered.recv()).await;
        assert_eq!(
            status.expect("the held streams end").expect("a status"),
            200
        );
    }
    join_all(tasks).await;
    let reply = newcomer.get("a.test", "/hello").await;
    assert_eq!(reply.status, 200, "{}", reply.text());
    assert_eq!(web.requests(), 3);
    let service = &switch.stats().services[0];
    assert_eq!(service.h2_streams_refused, 9);
    assert_eq!(service.h2_streams, 3, "the streams that ran");
}

/// A client that keeps opening streams the switch refuses is calmed: after a budget's worth
/// of refusals (1000 at once), GOAWAY with ENHANCE_YOUR_CALM, and the connection ends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_keeps_opening_refused_streams_is_calmed() {
    let web = backend().await;
    let switch = switch_with(&web, "max_clients = 4", "").await;
    let addr = web_addr(&switch);
    let mut client = H2::plain_from(ATTACKER, addr).await;
    let mut held = open_stalled(&client, 2).await;
    web.wait_for_requests(2).await;
    let mut refused = 0u32;
    // Bounded: the budget is 1000 refusals and 100 more a second.
    for _ in 0..20_000 {
        let Ok(mut send) = client.send.clone().ready().await else {
            break;
        };
        let Ok((response, _)) = send.send_request(request("GET", "a.test", "/x", &[]), true) else {
            break;
        };
        match tokio::time::timeout(PATIENCE, response).await {
            Ok(Ok(response)) => {
                assert_eq!(response.status(), 503);
                refused += 1;
                // Read to its end: a body dropped unread would make this client reset the
                // stream (RST_STREAM, a frame charged to its other budget, of free frames),
                // and a loaded machine then ended the connection before 1000 refusals.
                let mut body = response.into_body();
                while let Some(Ok(data)) = body.data().await {
                    let _ = body.flow_control().release_capacity(data.len());
                }
            }
            Ok(Err(_)) => break,
            Err(_) => panic!("a refused stream answered at once"),
        }
    }
    assert!(
        refused >= 1000,
        "the budget is 1000 refusals at once: {refused}"
    );
    let goaways = client.wait_for_goaway().await;
    assert!(
        goaways.iter().any(|g| g.error_code() == Some(0xb)),
        "ENHANCE_YOUR_CALM: {goaways:?}"
    );
    let _ = client.closed().await;
    assert_eq!(web.requests(), 2, "no refused stream reached the server");
    drop(held.responses.drain(..));
}
