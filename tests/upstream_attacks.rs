//! What an attacker's review of TLS and HTTP/2 to servers (issue 44) found, kept as tests:
//! connections verified for one server name never reused for another after a reload; clients
//! that stop reading never freeze the other streams of a shared HTTP/2 connection; a server
//! that drops every new HTTP/2 connection unanswered is blamed and taken down.

mod common;

use common::h2_origin::{H2Options, H2Origin};
use common::tls_origin::{toml_path, OriginCa, TlsOrigin};
use common::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

fn tls_rules(addr: &str, ca: &str, protocol: &str) -> String {
    format!(
        "[switch]\naccess_log = false\nworkers = 1\n\n\
         [virtual.web]\nlisten = \"127.0.0.1:0\"\ndefault_pool = \"api\"\n\n\
         [pool.api]\nservers = [{{ addr = \"{addr}\" }}]\n{protocol}\n\n[pool.api.tls]\nca = {ca}\n"
    )
}

/// The certificate names `localhost` only: renamed `127.0.0.1` (the same address) at a reload,
/// the server must be verified again, and fails (no IP name), over HTTP/1.1 and HTTP/2 alike.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_renamed_at_a_reload_is_verified_again_under_its_new_name() {
    for protocol in ["", "protocol = \"h2\""] {
        let scratch = Scratch::new(&format!("attack-rename-{}", protocol.len()));
        let ca = OriginCa::new("internal CA");
        let ca_path = toml_path(&ca.write(&scratch, "ca.pem"));
        let leaf = ca.issue(&["localhost"]);
        let (h1, h2) = match protocol {
            "" => (Some(TlsOrigin::start(&leaf).await), None),
            _ => (
                None,
                Some(H2Origin::start_tls(&leaf, H2Options::default()).await),
            ),
        };
        let port = h1
            .as_ref()
            .map(|o| o.addr.port())
            .or(h2.as_ref().map(|o| o.addr.port()))
            .unwrap();
        let rules = |host: &str| tls_rules(&format!("{host}:{port}"), &ca_path, protocol);
        let file = scratch.file("rules.toml", &rules("localhost"));
        let switch = tcpvs::Switch::start(tcpvs::Config::load(&file).unwrap())
            .await
            .unwrap();
        let web = switch.local_addr("web").unwrap();
        let mut client = Client::connect(web).await;
        assert_eq!(client.get("/size/10").await.status, 200, "[{protocol}]");
        std::fs::write(&file, rules("127.0.0.1")).unwrap();
        switch.reload().expect("reload");
        let mut client = Client::connect(web).await;
        assert_eq!(
            client.get("/size/10").await.status,
            502,
            "[{protocol}] a connection verified for `localhost` was reused for 127.0.0.1"
        );
    }
}

/// Six clients ask for a large answer over one HTTP/2 connection and stop reading; a seventh's
/// small request on the same connection is still answered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clients_that_stop_reading_never_freeze_the_other_streams() {
    let origin = H2Origin::start(H2Options::default()).await;
    let rules = format!(
        "[switch]\naccess_log = false\nworkers = 1\nidle_timeout = \"60s\"\n\n\
         [virtual.web]\nlisten = \"127.0.0.1:0\"\ndefault_pool = \"api\"\n\n\
         [pool.api]\nservers = [{{ addr = \"{}\" }}]\nprotocol = \"h2\"\n",
        origin.addr
    );
    let switch = start_switch(&rules, &[]).await;
    let web = switch.local_addr("web").unwrap();
    let mut stalled = Vec::new();
    for _ in 0..6 {
        // A small receive buffer: the client's side fills at once.
        let socket = tokio::net::TcpSocket::new_v4().unwrap();
        socket.set_recv_buffer_size(4096).unwrap();
        let mut s = socket.connect(web).await.unwrap();
        s.write_all(b"GET /size/100000000 HTTP/1.1\r\nHost: app.example\r\n\r\n")
            .await
            .unwrap();
        stalled.push(s);
    }
    origin
        .wait_for("six large answers begun", |s| s.requests.len() >= 6)
        .await;
    // The stalled streams' windows fill with what their clients do not read. Time only sets
    // the stage here: too short a pause could let this test pass without the stall, never
    // fail without one.
    tokio::time::sleep(std::time::Duration::from_secs(1)).await;
    let mut client = Client::connect(web).await;
    let answer = tokio::time::timeout(PATIENCE, client.get("/size/1000"))
        .await
        .expect("the other stream is frozen behind the stalled ones");
    assert_eq!((answer.status, answer.body.len()), (200, 1000));
    assert_eq!(
        origin.seen().connections.len(),
        1,
        "the streams shared one connection"
    );
}

/// A server that sends SETTINGS and drops each connection when a request comes: the POSTs get
/// 502, and the failures are the server's, so passive detection takes it down.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_h2_server_that_drops_every_new_connection_is_taken_down() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = listener.accept().await {
            tokio::spawn(async move {
                // SETTINGS (empty), and an ACK of the client's.
                let _ = s.write_all(&[0, 0, 0, 4, 0, 0, 0, 0, 0]).await;
                let _ = s.write_all(&[0, 0, 0, 4, 1, 0, 0, 0, 0]).await;
                let mut buf = vec![0u8; 65536];
                let mut all = Vec::new();
                while let Ok(n @ 1..) = s.read(&mut buf).await {
                    all.extend_from_slice(&buf[..n]);
                    let mut at = 24; // past the client's preface
                    while all.len() >= at + 9 {
                        if all[at + 3] == 1 {
                            return; // a HEADERS frame: closed unanswered
                        }
                        let len = usize::from(all[at]) << 16
                            | usize::from(all[at + 1]) << 8
                            | usize::from(all[at + 2]);
                        at += 9 + len;
                    }
                }
            });
        }
    });
    let rules = format!(
        "[switch]\naccess_log = false\nworkers = 1\n\n\
         [virtual.web]\nlisten = \"127.0.0.1:0\"\ndefault_pool = \"api\"\n\n\
         [pool.api]\nservers = [{{ addr = \"{addr}\" }}]\nprotocol = \"h2\"\n\n\
         [pool.api.health]\nmax_fails = 3\npanic_threshold = 0\n"
    );
    let switch = start_switch(&rules, &[]).await;
    let web = switch.local_addr("web").unwrap();
    for _ in 0..3 {
        let mut client = Client::connect(web).await;
        client
            .send(b"POST /x HTTP/1.1\r\nHost: app.example\r\nContent-Length: 3\r\n\r\nabc")
            .await;
        let status = client.response(false).await.status;
        assert!(status == 502 || status == 503, "{status}");
    }
    wait_until(&switch, "the server down", |snap| {
        snap.servers
            .iter()
            .all(|s| s.state == tcpvs::state::status::State::Down)
    })
    .await;
}
