//! Scheduling modules through the switch, from rule file to module to server over loopback
//! sockets: every module and request key the README documents (`wlc`, the default, is in
//! gateway.rs), and max_conns. The modules crate tests the algorithms; these prove the wiring.
//!
//! Verdicts never depend on elapsed time: load is made with requests held by the backend's
//! `/hold`, and each step waits for an event (the switch counts the request, the backend parses
//! it) before the next.

mod common;

use common::*;
use std::collections::{HashMap, HashSet};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use tcpvs::state::snapshot::Snapshot;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

fn pool_rules(scheduler_lines: &str, servers: &[&Backend]) -> String {
    let servers: Vec<(&Backend, &str)> = servers.iter().map(|&b| (b, "")).collect();
    pool_rules_with(scheduler_lines, &servers)
}

/// One virtual service whose every request goes to pool `p`; each server with extra fields
/// (`"weight = 4"`, `"max_conns = 1"`, or nothing).
fn pool_rules_with(scheduler_lines: &str, servers: &[(&Backend, &str)]) -> String {
    let list: Vec<String> = servers
        .iter()
        .map(|(b, fields)| {
            if fields.is_empty() {
                format!("{{ addr = \"{}\" }}", b.addr)
            } else {
                format!("{{ addr = \"{}\", {fields} }}", b.addr)
            }
        })
        .collect();
    format!(
        "[switch]\naccess_log = false\n[virtual.web]\nlisten = \"127.0.0.1:0\"\ndefault_pool = \"p\"\n\
         [pool.p]\n{scheduler_lines}\nservers = [{}]\n",
        list.join(", ")
    )
}

fn set_cookie_value(r: &Response, name: &str) -> Option<String> {
    let v = r.header("set-cookie")?;
    let pair = v.split(';').next()?;
    pair.strip_prefix(&format!("{name}=")).map(str::to_string)
}

/// Requests in flight at `backend` as the switch counts them.
fn active(snap: &Snapshot, backend: &Backend) -> u32 {
    snap.server(backend.addr)
        .unwrap_or_else(|| panic!("{} is not in the statistics", backend.addr))
        .active
}

fn total_active(snap: &Snapshot) -> u32 {
    snap.servers.iter().map(|s| s.active).sum()
}

/// Waits until no request is in flight at any server, so the next pick sees an idle pool (a
/// request's count is dropped just after its response went out, so a client may read the
/// response first).
async fn idle(switch: &tcpvs::Switch) {
    wait_until(switch, "no request in flight", |s| total_active(s) == 0).await;
}

/// A new connection with a `/hold` request on it: the backend keeps it until `release`.
async fn hold(addr: SocketAddr) -> Client {
    let mut client = Client::connect(addr).await;
    client.send(b"GET /hold HTTP/1.1\r\nHost: t\r\n\r\n").await;
    client
}

/// Sends one `/hold` request and waits until the switch counts it, `before` being the count
/// in flight until then; returns the statistics of that moment.
async fn hold_one_more(switch: &tcpvs::Switch, held: &mut Vec<Client>, before: u32) -> Snapshot {
    held.push(hold(switch.local_addr("web").unwrap()).await);
    wait_until(switch, "one more request in flight", |s| {
        total_active(s) == before + 1
    })
    .await
}

/// One request on a new connection from `source` (any address of 127.0.0.0/8 is local on
/// Linux, so a test can be many clients), read until the switch closes the connection.
async fn request_from(source: Ipv4Addr, to: SocketAddr, target: &str, fields: &str) -> Response {
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket
        .bind(SocketAddr::new(IpAddr::V4(source), 0))
        .unwrap_or_else(|e| panic!("binding a client socket to {source}: {e}"));
    let mut stream = socket.connect(to).await.unwrap();
    stream
        .write_all(
            format!("GET {target} HTTP/1.1\r\nHost: t\r\n{fields}Connection: close\r\n\r\n")
                .as_bytes(),
        )
        .await
        .unwrap();
    let mut raw = Vec::new();
    loop {
        let mut chunk = [0u8; 4096];
        let n = tokio::time::timeout(PATIENCE, stream.read(&mut chunk))
            .await
            .unwrap_or_else(|_| panic!("nothing from the switch within {PATIENCE:?}: {raw:?}"))
            .unwrap();
        if n == 0 {
            break;
        }
        raw.extend_from_slice(&chunk[..n]);
    }
    let mut fields = [httparse::EMPTY_HEADER; 32];
    let mut head = httparse::Response::new(&mut fields);
    let Ok(httparse::Status::Complete(len)) = head.parse(&raw) else {
        panic!("no complete response: {:?}", String::from_utf8_lossy(&raw));
    };
    let response = Response {
        status: head.code.unwrap(),
        headers: head
            .headers
            .iter()
            .map(|h| {
                (
                    h.name.to_string(),
                    String::from_utf8_lossy(h.value).into_owned(),
                )
            })
            .collect(),
        body: raw[len..].to_vec(),
        trailers: Vec::new(),
    };
    let length: usize = response.header("content-length").unwrap().parse().unwrap();
    assert_eq!(response.body.len(), length, "{response:?}");
    response
}

/// Loopback client addresses other than 127.0.0.1.
fn sources(count: u8) -> impl Iterator<Item = Ipv4Addr> {
    (2..2 + count).map(|host| Ipv4Addr::new(127, 0, 0, host))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cookie_keeps_a_client_on_its_server_and_moves_it_when_the_server_dies() {
    let backends = [backend().await, backend().await, backend().await];
    let refs: Vec<&Backend> = backends.iter().collect();
    let rules = pool_rules(
        "scheduler = \"cookie\"\nname = \"SRV\"\nsecret = \"test secret\"",
        &refs,
    );
    let switch = start_switch(&rules, &[]).await;
    let addr = switch.local_addr("web").unwrap();

    let mut client = Client::connect(addr).await;
    let first = client.get("/login").await;
    let cookie = set_cookie_value(&first, "SRV").expect("the first response sets the cookie");
    assert!(first
        .header("set-cookie")
        .unwrap()
        .ends_with("; Path=/; HttpOnly"));
    let home = first.served_by();
    assert!(
        !cookie.contains("127.0.0.1"),
        "the cookie must not reveal the server address"
    );

    // 50 requests over fresh connections, all with the cookie: all on the same server, and
    // no new cookie while it holds.
    for i in 0..50 {
        let mut c = Client::connect(addr).await;
        c.send(
            format!("GET /page/{i} HTTP/1.1\r\nHost: t\r\nCookie: a=b; SRV={cookie}\r\n\r\n")
                .as_bytes(),
        )
        .await;
        let r = c.response(false).await;
        assert_eq!(r.served_by(), home, "request {i}");
        assert_eq!(r.header("set-cookie"), None);
    }
    // Without the cookie, the inner wlc spreads new clients. Once the sessions of those 50
    // connections have let their server go: one still finishing would count as load on it
    // and steer the next picks away (seen once in 40 runs under stress).
    wait_until(&switch, "the 50 requests ended", |s| {
        s.servers.iter().all(|server| server.active == 0)
    })
    .await;
    let mut spread = HashSet::new();
    for _ in 0..9 {
        spread.insert(client.get("/").await.served_by());
    }
    assert_eq!(spread.len(), 3);

    // The home server dies: the client lands elsewhere and gets a new cookie for it.
    backends
        .iter()
        .find(|b| b.addr.to_string() == home)
        .unwrap()
        .stop()
        .await;
    let mut c = Client::connect(addr).await;
    c.send(format!("GET /after HTTP/1.1\r\nHost: t\r\nCookie: SRV={cookie}\r\n\r\n").as_bytes())
        .await;
    let r = c.response(false).await;
    assert_eq!(r.status, 200);
    assert_ne!(r.served_by(), home);
    let new_cookie = set_cookie_value(&r, "SRV").expect("the cookie is re-issued");
    assert_ne!(new_cookie, cookie);
    // And sticks to the new server.
    c.send(
        format!("GET /again HTTP/1.1\r\nHost: t\r\nCookie: SRV={new_cookie}\r\n\r\n").as_bytes(),
    )
    .await;
    let again = c.response(false).await;
    assert_eq!(again.served_by(), r.served_by());
    assert_eq!(again.header("set-cookie"), None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hash_on_a_path_capture_sends_each_user_to_one_server() {
    let backends = [backend().await, backend().await, backend().await];
    let refs: Vec<&Backend> = backends.iter().collect();
    let rules = pool_rules(
        "scheduler = \"hash\"\nkey = \"regex\"\npattern = \"^/users/([^/]+)/\"",
        &refs,
    );
    let switch = start_switch(&rules, &[]).await;
    let mut client = Client::connect(switch.local_addr("web").unwrap()).await;
    let mut home: HashMap<String, String> = HashMap::new();
    for round in 0..3 {
        for user in 0..30 {
            for page in ["profile", "photos/1.jpg?size=big", "friends"] {
                let r = client.get(&format!("/users/user{user}/{page}")).await;
                let server = r.served_by();
                let expected = home
                    .entry(format!("user{user}"))
                    .or_insert_with(|| server.clone());
                assert_eq!(&server, expected, "user{user} /{page} in round {round}");
            }
        }
    }
    let used: HashSet<&String> = home.values().collect();
    assert_eq!(used.len(), 3, "users spread over every server");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_switches_with_the_same_rules_agree() {
    let backends = [
        backend().await,
        backend().await,
        backend().await,
        backend().await,
    ];
    let refs: Vec<&Backend> = backends.iter().collect();
    let rules = pool_rules("scheduler = \"hash\"\nkey = \"uri\"", &refs);
    let (one, two) = (
        start_switch(&rules, &[]).await,
        start_switch(&rules, &[]).await,
    );
    let mut a = Client::connect(one.local_addr("web").unwrap()).await;
    let mut b = Client::connect(two.local_addr("web").unwrap()).await;
    for i in 0..60 {
        let path = format!("/object/{i}?v=2");
        assert_eq!(
            a.get(&path).await.served_by(),
            b.get(&path).await.served_by(),
            "{path}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lard_keeps_each_target_on_one_server_and_spreads_targets() {
    let backends = [backend().await, backend().await];
    let refs: Vec<&Backend> = backends.iter().collect();
    let switch = start_switch(&pool_rules("scheduler = \"lard\"", &refs), &[]).await;
    let mut client = Client::connect(switch.local_addr("web").unwrap()).await;
    let mut home: HashMap<String, String> = HashMap::new();
    for _ in 0..3 {
        for t in 0..40 {
            let path = format!("/static/file{t}.html");
            let server = client.get(&path).await.served_by();
            assert_eq!(
                home.entry(path.clone()).or_insert_with(|| server.clone()),
                &server,
                "{path}"
            );
        }
    }
    assert_eq!(home.values().collect::<HashSet<_>>().len(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lc_counts_requests_in_flight_whatever_the_weight() {
    let (heavy, light, quiet) = (backend().await, backend().await, backend().await);
    let rules = pool_rules_with(
        "scheduler = \"lc\"",
        &[
            (&heavy, "weight = 10"),
            (&light, "weight = 1"),
            (&quiet, "weight = 0"),
        ],
    );
    let switch = start_switch(&rules, &[]).await;
    // Four held requests, each counted before the next is sent. The second goes to the server
    // the first left empty and the fourth to the one the third did not take, whatever the ties:
    // two each. The quiescent server, with nothing in flight, gets none.
    let mut held = Vec::new();
    for n in 0..4 {
        let snap = hold_one_more(&switch, &mut held, n).await;
        assert_eq!(active(&snap, &quiet), 0, "weight 0 gets no new request");
        if n % 2 == 1 {
            assert_eq!(
                (active(&snap, &heavy), active(&snap, &light)),
                (n / 2 + 1, n / 2 + 1),
                "request {n} goes to the server with fewer in flight"
            );
        }
    }
    // One of the light server's two finishes: 2 in flight on weight 10 against 1 on weight 1.
    // Per unit of weight (wlc) the heavy server is far less loaded; lc counts requests only.
    light.release(1);
    wait_until(&switch, "heavy 2, light 1", |s| {
        (active(s, &heavy), active(s, &light)) == (2, 1)
    })
    .await;
    let mut client = Client::connect(switch.local_addr("web").unwrap()).await;
    let r = client.get("/next").await;
    assert_eq!(r.status, 200);
    assert_eq!(
        r.served_by(),
        light.addr.to_string(),
        "fewest in flight wins"
    );

    heavy.release(2);
    light.release(1);
    let mut by_server: HashMap<String, usize> = HashMap::new();
    for mut c in held {
        let r = c.response(false).await;
        assert_eq!(r.status, 200);
        *by_server.entry(r.served_by()).or_default() += 1;
    }
    assert_eq!(by_server.get(&heavy.addr.to_string()), Some(&2));
    assert_eq!(by_server.get(&light.addr.to_string()), Some(&2));
    assert_eq!(
        quiet.connections(),
        0,
        "the quiescent server was never used"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wrr_interleaves_servers_by_weight() {
    let (a, b, c) = (backend().await, backend().await, backend().await);
    let rules = pool_rules_with(
        "scheduler = \"wrr\"",
        &[(&a, "weight = 4"), (&b, "weight = 3"), (&c, "weight = 2")],
    );
    let switch = start_switch(&rules, &[]).await;
    let letter: HashMap<String, char> = [(&a, 'A'), (&b, 'B'), (&c, 'C')]
        .into_iter()
        .map(|(backend, l)| (backend.addr.to_string(), l))
        .collect();
    let mut client = Client::connect(switch.local_addr("web").unwrap()).await;
    let mut sequence = String::new();
    for i in 0..18 {
        let r = client.get(&format!("/{i}")).await;
        assert_eq!(r.status, 200);
        sequence.push(letter[&r.served_by()]);
    }
    assert_eq!(
        sequence, "AABABCABCAABABCABC",
        "the README's sequence, twice"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lard_r_gives_a_hot_target_a_second_server() {
    let backends = [backend().await, backend().await, backend().await];
    let refs: Vec<&Backend> = backends.iter().collect();
    // k is a day: the sets only grow while the test runs (shrinking is a matter of time).
    let rules = pool_rules(
        "scheduler = \"lard-r\"\nt_low = 1\nt_high = 2\nk = 86400",
        &refs,
    );
    let switch = start_switch(&rules, &[]).await;
    let addr = switch.local_addr("web").unwrap();

    // Targets of an unloaded pool keep their server, and new ones spread.
    let mut client = Client::connect(addr).await;
    let mut home: HashMap<String, String> = HashMap::new();
    for _ in 0..3 {
        for t in 0..30 {
            let path = format!("/page/{t}");
            let server = client.get(&path).await.served_by();
            assert_eq!(
                home.entry(path.clone()).or_insert_with(|| server.clone()),
                &server,
                "{path}"
            );
        }
    }
    assert_eq!(home.values().collect::<HashSet<_>>().len(), 3);
    drop(client);
    idle(&switch).await;

    // The hot target `/hold` stays on its first server up to t_high (2) in flight there:
    // the third request still goes there, making it 3.
    let mut held = Vec::new();
    let mut snap = hold_one_more(&switch, &mut held, 0).await;
    let first = backends
        .iter()
        .find(|b| active(&snap, b) == 1)
        .expect("a server took the hot target");
    for n in 1..3 {
        snap = hold_one_more(&switch, &mut held, n).await;
        assert_eq!(active(&snap, first), n + 1, "the target keeps its server");
    }
    // Loaded above t_high while the others are below t_low (1): the next request goes to
    // the least loaded server, which joins the target's set.
    snap = hold_one_more(&switch, &mut held, 3).await;
    assert_eq!(active(&snap, first), 3, "the fourth goes elsewhere");
    let second = backends
        .iter()
        .find(|b| active(&snap, b) == 1)
        .expect("a second server took the hot target");
    let third = backends
        .iter()
        .find(|b| b.addr != first.addr && b.addr != second.addr)
        .unwrap();

    // Both now serve the target, each taking it while it is the less loaded member. The first
    // one's requests finish: the target goes back to it (LARD would have moved it to the
    // second server for good).
    first.release(3);
    wait_until(&switch, "only the second server busy", |s| {
        active(s, first) == 0 && total_active(s) == 1
    })
    .await;
    snap = hold_one_more(&switch, &mut held, 1).await;
    assert_eq!(
        active(&snap, first),
        1,
        "the first member is the less loaded"
    );
    // The second member's request finishes: the target goes to it, and never to the third
    // server, idle as it is: it is no member.
    second.release(1);
    wait_until(&switch, "only the first server busy", |s| {
        active(s, second) == 0 && total_active(s) == 1
    })
    .await;
    snap = hold_one_more(&switch, &mut held, 1).await;
    assert_eq!(
        active(&snap, second),
        1,
        "the second member is the less loaded"
    );
    assert_eq!(active(&snap, third), 0);

    first.release(1);
    second.release(1);
    for mut c in held {
        let r = c.response(false).await;
        assert_eq!(r.status, 200);
        assert_ne!(r.served_by(), third.addr.to_string());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn source_hash_keeps_each_client_address_on_one_server() {
    let backends = [backend().await, backend().await, backend().await];
    let refs: Vec<&Backend> = backends.iter().collect();
    let rules = pool_rules("scheduler = \"source-hash\"", &refs);
    let (one, two) = (
        start_switch(&rules, &[]).await,
        start_switch(&rules, &[]).await,
    );
    let (one_addr, two_addr) = (
        one.local_addr("web").unwrap(),
        two.local_addr("web").unwrap(),
    );

    // 127.0.0.1: one server, whatever the connection and the path.
    let mut servers = HashSet::new();
    for i in 0..20 {
        let mut c = Client::connect(one_addr).await;
        servers.insert(c.get(&format!("/item/{i}?q={i}")).await.served_by());
        drop(c);
        idle(&one).await;
    }
    assert_eq!(servers.len(), 1, "{servers:?}");

    // Other addresses: each keeps its server over connections and paths, the two switches
    // agree, and the addresses spread over the pool.
    let mut placed: HashMap<Ipv4Addr, String> = HashMap::new();
    for source in sources(64) {
        for (switch, to) in [(&one, one_addr), (&two, two_addr)] {
            for target in ["/a", "/b/c?d=e"] {
                let r = request_from(source, to, target, "").await;
                assert_eq!(r.status, 200);
                let server = r.served_by();
                assert_eq!(
                    placed.entry(source).or_insert_with(|| server.clone()),
                    &server,
                    "{source} {target} at {to}"
                );
                idle(switch).await;
            }
        }
    }
    assert_eq!(placed.values().collect::<HashSet<_>>().len(), 3);
}

fn x_user(user: &str) -> String {
    format!("X-User: {user}\r\n")
}

fn uid_cookie(user: &str) -> String {
    format!("Cookie: theme=dark; uid={user}; lang=en\r\n")
}

/// Sends the requests of 40 users, each on 3 paths, twice, over one connection: each user must
/// stay on one server and the users must spread over the 3 servers. Then requests without the
/// key (`keyless` fields) from this client stay on one server.
async fn each_user_on_one_server(key_lines: &str, user_field: fn(&str) -> String, keyless: &str) {
    let backends = [backend().await, backend().await, backend().await];
    let refs: Vec<&Backend> = backends.iter().collect();
    let switch = start_switch(&pool_rules(key_lines, &refs), &[]).await;
    let mut client = Client::connect(switch.local_addr("web").unwrap()).await;
    let mut home: HashMap<String, String> = HashMap::new();
    for round in 0..2 {
        for user in 0..40 {
            let user = format!("user{user}");
            for path in ["/", "/cart?item=7", "/static/logo.png"] {
                client
                    .send(
                        format!(
                            "GET {path} HTTP/1.1\r\nHost: t\r\n{}\r\n",
                            user_field(&user)
                        )
                        .as_bytes(),
                    )
                    .await;
                let r = client.response(false).await;
                assert_eq!(r.status, 200);
                let server = r.served_by();
                assert_eq!(
                    home.entry(user.clone()).or_insert_with(|| server.clone()),
                    &server,
                    "{user} {path} in round {round}"
                );
            }
        }
    }
    assert_eq!(home.values().collect::<HashSet<_>>().len(), 3);

    let mut keyless_servers = HashSet::new();
    for i in 0..20 {
        client
            .send(format!("GET /anon/{i} HTTP/1.1\r\nHost: t\r\n{keyless}\r\n").as_bytes())
            .await;
        keyless_servers.insert(client.response(false).await.served_by());
    }
    assert_eq!(keyless_servers.len(), 1, "{keyless_servers:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hash_on_a_header_keeps_each_user_on_one_server() {
    each_user_on_one_server(
        "scheduler = \"hash\"\nkey = \"header\"\nheader = \"X-User\"",
        x_user,
        "X-Other: user1\r\n",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hash_on_a_cookie_keeps_each_user_on_one_server() {
    each_user_on_one_server(
        "scheduler = \"hash\"\nkey = \"cookie\"\ncookie = \"uid\"",
        uid_cookie,
        "Cookie: theme=dark; xuid=user1\r\n",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hash_on_the_uri_tells_queries_apart() {
    let backends = [backend().await, backend().await, backend().await];
    let refs: Vec<&Backend> = backends.iter().collect();
    let by_uri = start_switch(
        &pool_rules("scheduler = \"hash\"\nkey = \"uri\"", &refs),
        &[],
    )
    .await;
    let by_path = start_switch(
        &pool_rules("scheduler = \"hash\"\nkey = \"path\"", &refs),
        &[],
    )
    .await;
    let mut uri_client = Client::connect(by_uri.local_addr("web").unwrap()).await;
    let mut path_client = Client::connect(by_path.local_addr("web").unwrap()).await;
    let mut home: HashMap<String, String> = HashMap::new();
    let mut by_path_servers = HashSet::new();
    for _ in 0..2 {
        for v in 0..40 {
            let target = format!("/object?v={v}");
            let server = uri_client.get(&target).await.served_by();
            assert_eq!(
                home.entry(target.clone()).or_insert_with(|| server.clone()),
                &server,
                "{target}"
            );
            by_path_servers.insert(path_client.get(&target).await.served_by());
        }
    }
    assert_eq!(
        home.values().collect::<HashSet<_>>().len(),
        3,
        "the query is part of the key"
    );
    assert_eq!(by_path_servers.len(), 1, "with key = \"path\" it is not");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hash_places_a_request_without_its_key_by_client_address_like_source_hash() {
    let backends = [backend().await, backend().await, backend().await];
    let refs: Vec<&Backend> = backends.iter().collect();
    let source = start_switch(&pool_rules("scheduler = \"source-hash\"", &refs), &[]).await;
    let header = start_switch(
        &pool_rules(
            "scheduler = \"hash\"\nkey = \"header\"\nheader = \"X-User\"",
            &refs,
        ),
        &[],
    )
    .await;
    let cookie = start_switch(
        &pool_rules(
            "scheduler = \"hash\"\nkey = \"cookie\"\ncookie = \"uid\"",
            &refs,
        ),
        &[],
    )
    .await;
    let mut used = HashSet::new();
    for client in sources(40) {
        let expected = request_from(client, source.local_addr("web").unwrap(), "/x", "")
            .await
            .served_by();
        idle(&source).await;
        used.insert(expected.clone());
        for (switch, fields) in [
            (&header, "X-Other: 1\r\n"),
            (&header, ""),
            (&cookie, "Cookie: theme=dark; xuid=1\r\n"),
            (&cookie, ""),
        ] {
            for target in ["/x", "/y?z=1"] {
                let r =
                    request_from(client, switch.local_addr("web").unwrap(), target, fields).await;
                assert_eq!(r.status, 200);
                assert_eq!(r.served_by(), expected, "{client} {target} {fields:?}");
                idle(switch).await;
            }
        }
    }
    assert_eq!(used.len(), 3, "clients spread");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cookie_without_a_secret_has_a_key_of_its_own_per_switch() {
    let backends = [backend().await, backend().await, backend().await];
    let refs: Vec<&Backend> = backends.iter().collect();
    let rules = pool_rules("scheduler = \"cookie\"", &refs);
    let (one, two) = (
        start_switch(&rules, &[]).await,
        start_switch(&rules, &[]).await,
    );

    // Switch one: the default name, and the cookie holds (without it the inner wlc would take
    // sequential requests round the three servers).
    let mut c1 = Client::connect(one.local_addr("web").unwrap()).await;
    let first = c1.get("/login").await;
    let cookie = set_cookie_value(&first, "TCPVS").expect("Set-Cookie: TCPVS=...");
    assert!(first
        .header("set-cookie")
        .unwrap()
        .ends_with("; Path=/; HttpOnly"));
    let home = first.served_by();
    for i in 0..12 {
        c1.send(
            format!("GET /page/{i} HTTP/1.1\r\nHost: t\r\nCookie: TCPVS={cookie}\r\n\r\n")
                .as_bytes(),
        )
        .await;
        let r = c1.response(false).await;
        assert_eq!(r.served_by(), home, "request {i}");
        assert_eq!(r.header("set-cookie"), None);
    }

    // Switch two drew another key: the cookie names no server of its own, so each request is
    // placed by wlc and gets that switch's cookie for the server it went to.
    let mut c2 = Client::connect(two.local_addr("web").unwrap()).await;
    let mut issued: HashMap<String, String> = HashMap::new();
    for i in 0..6 {
        c2.send(
            format!("GET /page/{i} HTTP/1.1\r\nHost: t\r\nCookie: TCPVS={cookie}\r\n\r\n")
                .as_bytes(),
        )
        .await;
        let r = c2.response(false).await;
        assert_eq!(r.status, 200);
        let reissued = set_cookie_value(&r, "TCPVS").expect("switch two re-issues the cookie");
        assert_eq!(
            issued
                .entry(r.served_by())
                .or_insert_with(|| reissued.clone()),
            &reissued
        );
    }
    assert_eq!(issued.len(), 3, "placed by wlc, not kept by the cookie");
    assert_ne!(
        issued[&home], cookie,
        "the two switches name the same server differently"
    );
    // Switch two's own cookie holds there.
    c2.send(
        format!(
            "GET /mine HTTP/1.1\r\nHost: t\r\nCookie: TCPVS={}\r\n\r\n",
            issued[&home]
        )
        .as_bytes(),
    )
    .await;
    let r = c2.response(false).await;
    assert_eq!(r.served_by(), home);
    assert_eq!(r.header("set-cookie"), None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cookie_with_the_same_secret_is_honoured_by_another_switch() {
    let backends = [backend().await, backend().await, backend().await];
    let refs: Vec<&Backend> = backends.iter().collect();
    let rules = pool_rules("scheduler = \"cookie\"\nsecret = \"shared\"", &refs);
    let (one, two) = (
        start_switch(&rules, &[]).await,
        start_switch(&rules, &[]).await,
    );
    let mut c1 = Client::connect(one.local_addr("web").unwrap()).await;
    let mut c2 = Client::connect(two.local_addr("web").unwrap()).await;
    for i in 0..3 {
        let first = c1.get(&format!("/login/{i}")).await;
        let cookie = set_cookie_value(&first, "TCPVS").expect("Set-Cookie: TCPVS=...");
        for _ in 0..3 {
            c2.send(
                format!("GET /page HTTP/1.1\r\nHost: t\r\nCookie: TCPVS={cookie}\r\n\r\n")
                    .as_bytes(),
            )
            .await;
            let r = c2.response(false).await;
            assert_eq!(r.served_by(), first.served_by());
            assert_eq!(r.header("set-cookie"), None);
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_server_is_skipped_and_a_full_pool_answers_503() {
    let (a, b) = (backend().await, backend().await);
    let rules = pool_rules_with(
        "scheduler = \"rr\"",
        &[(&a, "max_conns = 1"), (&b, "max_conns = 1")],
    );
    let switch = start_switch(&rules, &[]).await;
    let addr = switch.local_addr("web").unwrap();
    // A held request fills one server...
    let mut held = Vec::new();
    let snap = hold_one_more(&switch, &mut held, 0).await;
    let (full, free) = if active(&snap, &a) == 1 {
        (&a, &b)
    } else {
        (&b, &a)
    };
    // ...so round robin's turns for it go to the other one.
    let mut client = Client::connect(addr).await;
    for i in 0..4 {
        let r = client.get(&format!("/{i}")).await;
        assert_eq!(r.status, 200);
        assert_eq!(r.served_by(), free.addr.to_string(), "request {i}");
    }
    // A second held request fills the other server: the pool is full.
    wait_until(&switch, "only the held request in flight", |s| {
        total_active(s) == 1
    })
    .await;
    let snap = hold_one_more(&switch, &mut held, 1).await;
    assert_eq!((active(&snap, &a), active(&snap, &b)), (1, 1));
    full.wait_for_requests(1).await;
    free.wait_for_requests(5).await;
    let mut third = Client::connect(addr).await;
    let r = third.get("/").await;
    assert_eq!(r.status, 503);
    assert!(r.text().contains("connection limit"), "{}", r.text());

    a.release(1);
    b.release(1);
    let (r1, r2) = (held[0].response(false).await, held[1].response(false).await);
    assert_eq!((r1.status, r2.status), (200, 200));
    assert_eq!(r1.served_by(), full.addr.to_string());
    assert_eq!(r2.served_by(), free.addr.to_string());
    // Once they are done, the same connection is served again.
    idle(&switch).await;
    assert_eq!(third.get("/").await.status, 200);
}
