//! Scheduling modules through the switch: cookie persistence, hashing on a path capture, LARD
//! locality, and max_conns.

mod common;

use common::*;
use std::collections::{HashMap, HashSet};

fn pool_rules(scheduler_lines: &str, servers: &[&Backend]) -> String {
    let list: Vec<String> = servers
        .iter()
        .map(|b| format!("{{ addr = \"{}\" }}", b.addr))
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
    // Without the cookie, the inner wlc spreads new clients.
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
async fn a_full_server_is_skipped_and_a_full_pool_answers_503() {
    let (a, b) = (backend().await, backend().await);
    let rules = format!(
        "[switch]\naccess_log = false\n[virtual.web]\nlisten = \"127.0.0.1:0\"\ndefault_pool = \"p\"\n\
         [pool.p]\nscheduler = \"rr\"\nservers = [{{ addr = \"{}\", max_conns = 1 }}, {{ addr = \"{}\", max_conns = 1 }}]\n",
        a.addr, b.addr
    );
    let switch = start_switch(&rules, &[]).await;
    let addr = switch.local_addr("web").unwrap();
    // Two slow requests occupy both servers...
    let mut slow1 = Client::connect(addr).await;
    slow1
        .send(b"GET /slow/1500 HTTP/1.1\r\nHost: t\r\n\r\n")
        .await;
    let mut slow2 = Client::connect(addr).await;
    slow2
        .send(b"GET /slow/1500 HTTP/1.1\r\nHost: t\r\n\r\n")
        .await;
    // ...as soon as the switch has counted them.
    for _ in 0..200 {
        if switch.stats().servers.iter().all(|s| s.active == 1) {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    assert!(switch.stats().servers.iter().all(|s| s.active == 1));
    let mut third = Client::connect(addr).await;
    let r = third.get("/").await;
    assert_eq!(r.status, 503);
    assert!(r.text().contains("connection limit"), "{}", r.text());
    let (r1, r2) = (slow1.response(false).await, slow2.response(false).await);
    assert_ne!(
        r1.served_by(),
        r2.served_by(),
        "one slow request per server"
    );
    assert_eq!(third.get("/").await.status, 200);
}
