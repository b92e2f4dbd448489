//! Module options through the switch, end to end: a rule file's option reaches the module and
//! changes where requests go, as seen by real backends answering with `X-Served-By`. Each test
//! sets an option to a value other than its default and observes a choice the default would
//! not make, so a switch that ignored the option (its default used instead) fails it:
//! `lard-r` `k`, lard `thresholds`, `group` of `key = "regex"`, cookie `inner`, `balance_factor`, `max_targets`,
//! `key = "source"` and `key = "host"`.
//!
//! Load is made with requests held by the backend's `/hold`; each step waits for the switch to
//! count a request (or for the pool to be idle) before the next, so no verdict depends on
//! timing, except `k`, whose property is time (margins of seconds), and lard's `thresholds`,
//! whose loads are averaged over 10 ms (100 ms between requests).

mod common;

use common::*;
use std::collections::{HashMap, HashSet};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::Duration;
use tcpvs::state::snapshot::Snapshot;

/// One virtual service `web` whose every request goes to pool `p`, with these scheduler lines
/// and servers.
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

async fn backends(n: usize) -> Vec<Backend> {
    let mut all = Vec::new();
    for _ in 0..n {
        all.push(backend().await);
    }
    all
}

fn active(snap: &Snapshot, backend: &Backend) -> u32 {
    snap.server(backend.addr)
        .unwrap_or_else(|| panic!("{} is not in the statistics", backend.addr))
        .active
}

fn total_active(snap: &Snapshot) -> u32 {
    snap.servers.iter().map(|s| s.active).sum()
}

/// Waits until exactly `n` requests are in flight in the pool (a request's count is dropped
/// just after its response went out, so a client may read the response first).
async fn in_flight(switch: &tcpvs::Switch, n: u32) -> Snapshot {
    wait_until(switch, &format!("{n} requests in flight"), |s| {
        total_active(s) == n
    })
    .await
}

/// Sends one more `/hold` request on a new connection and waits until the switch counts it
/// (`before` in flight until then). Returns the server it went to.
async fn hold_one_more(
    switch: &tcpvs::Switch,
    backends: &[Backend],
    held: &mut Vec<(Client, SocketAddr)>,
    before: u32,
) -> SocketAddr {
    let old = switch.stats();
    let mut client = Client::connect(switch.local_addr("web").unwrap()).await;
    client.send(b"GET /hold HTTP/1.1\r\nHost: t\r\n\r\n").await;
    let snap = in_flight(switch, before + 1).await;
    let went = backends
        .iter()
        .find(|b| active(&snap, b) == active(&old, b) + 1)
        .expect("a server took the held request")
        .addr;
    held.push((client, went));
    went
}

/// Lets every held request finish (one permit per request at its server), reads the answers
/// and waits until the pool is idle.
async fn release_all(
    switch: &tcpvs::Switch,
    backends: &[Backend],
    held: &mut Vec<(Client, SocketAddr)>,
) {
    for (_, at) in held.iter() {
        backends.iter().find(|b| b.addr == *at).unwrap().release(1);
    }
    for (mut c, at) in held.drain(..) {
        let response = c.response(false).await;
        assert_eq!(response.status, 200);
        assert_eq!(response.served_by(), at.to_string());
    }
    in_flight(switch, 0).await;
}

/// One request on `client`, then a wait until the pool is idle again, so the next pick sees no
/// load left by this one. Returns the server.
async fn get_idle(switch: &tcpvs::Switch, client: &mut Client, request: &str) -> String {
    client.send(request.as_bytes()).await;
    let response = client.response(false).await;
    assert_eq!(response.status, 200, "{request:?}");
    in_flight(switch, 0).await;
    response.served_by()
}

// ---------------------------------------------------------------- lard-r k

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lard_r_k_shrinks_a_set_left_unchanged_for_k_seconds() {
    let servers = backends(2).await;
    let refs: Vec<&Backend> = servers.iter().collect();
    // k = 2 s; the default (20 s) would keep the set whole for the whole test.
    let rules = pool_rules(
        "scheduler = \"lard-r\"\nt_low = 1\nt_high = 2\nk = 2",
        &refs,
    );
    let switch = start_switch(&rules, &[]).await;
    let mut held = Vec::new();

    // The hot target `/hold`: three requests on its first server, the fourth (its server is
    // above t_high while the other is below t_low) adds the other server to its set.
    let first = hold_one_more(&switch, &servers, &mut held, 0).await;
    for n in 1..3 {
        let to = hold_one_more(&switch, &servers, &mut held, n).await;
        assert_eq!(to, first, "the target keeps its server up to t_high");
    }
    let second = hold_one_more(&switch, &servers, &mut held, 3).await;
    let grown = std::time::Instant::now();
    assert_ne!(second, first, "the set grew by the other server");
    release_all(&switch, &servers, &mut held).await;

    // Within k the set has both members: two requests at once take one each.
    let a = hold_one_more(&switch, &servers, &mut held, 0).await;
    let b = hold_one_more(&switch, &servers, &mut held, 1).await;
    assert!(
        grown.elapsed() < Duration::from_secs(2),
        "the check within k took {:?}: the machine is too slow for this test's margins",
        grown.elapsed()
    );
    assert_eq!(
        HashSet::from([a, b]),
        HashSet::from([first, second]),
        "both members serve the target"
    );
    release_all(&switch, &servers, &mut held).await;

    // Unchanged for more than k: the next pick drops the set's most loaded other member, and
    // from then on the target has one server: two requests at once both go to it.
    tokio::time::sleep(
        (grown + Duration::from_millis(4500)).saturating_duration_since(std::time::Instant::now()),
    )
    .await;
    let c = hold_one_more(&switch, &servers, &mut held, 0).await;
    let d = hold_one_more(&switch, &servers, &mut held, 1).await;
    assert_eq!(
        c, d,
        "after k seconds unchanged the set shrank to one server ({c} then {d})"
    );
    release_all(&switch, &servers, &mut held).await;
}

// ---------------------------------------------------------------- key = "regex", group

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hash_on_regex_group_2_keys_by_the_second_capture() {
    let servers = backends(3).await;
    let refs: Vec<&Backend> = servers.iter().collect();
    // Two captures: the section, then the user. group = 2 keys by the user; the default
    // (group 1) would key by the section.
    let rules = pool_rules(
        "scheduler = \"hash\"\nkey = \"regex\"\npattern = '^/(\\w+)/(\\w+)'\ngroup = 2",
        &refs,
    );
    let switch = start_switch(&rules, &[]).await;
    let mut client = Client::connect(switch.local_addr("web").unwrap()).await;
    let mut home: HashMap<String, String> = HashMap::new();
    let mut by_section: HashMap<&str, HashSet<String>> = HashMap::new();
    for user in 0..30 {
        let user = format!("user{user}");
        for section in ["shop", "cart", "photos", "mail", "news", "help"] {
            let request = format!("GET /{section}/{user}/page HTTP/1.1\r\nHost: t\r\n\r\n");
            let server = get_idle(&switch, &mut client, &request).await;
            assert_eq!(
                home.entry(user.clone()).or_insert_with(|| server.clone()),
                &server,
                "/{section}/{user}: each user on one server, whatever the section"
            );
            by_section.entry(section).or_default().insert(server);
        }
    }
    assert_eq!(
        home.values().collect::<HashSet<_>>().len(),
        3,
        "users spread"
    );
    assert!(
        by_section.values().all(|servers| servers.len() == 3),
        "each section's requests spread with their users: {by_section:?}"
    );
}

// ---------------------------------------------------------------- cookie inner

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cookie_places_new_clients_with_its_inner_module() {
    let servers = backends(3).await;
    let refs: Vec<&Backend> = servers.iter().collect();
    // inner = "hash" (on the path): a client without the cookie is placed by its path. The
    // default inner (wlc) would spread consecutive requests over the idle pool.
    let rules = pool_rules("scheduler = \"cookie\"\ninner = \"hash\"", &refs);
    let switch = start_switch(&rules, &[]).await;
    let mut client = Client::connect(switch.local_addr("web").unwrap()).await;
    let mut home: HashMap<String, String> = HashMap::new();
    for round in 0..2 {
        for page in 0..20 {
            let path = format!("/page/{page}");
            // Twice in a row: wlc would take the second to another server.
            for _ in 0..2 {
                client
                    .send(format!("GET {path} HTTP/1.1\r\nHost: t\r\n\r\n").as_bytes())
                    .await;
                let response = client.response(false).await;
                assert_eq!(response.status, 200);
                let set_cookie = response.header("set-cookie").unwrap_or("");
                assert!(
                    set_cookie.starts_with("TCPVS=") && set_cookie.ends_with("; Path=/; HttpOnly"),
                    "a client without the cookie gets one: {set_cookie:?}"
                );
                let server = response.served_by();
                in_flight(&switch, 0).await;
                assert_eq!(
                    home.entry(path.clone()).or_insert_with(|| server.clone()),
                    &server,
                    "{path} in round {round}: placed by the inner hash"
                );
            }
        }
    }
    assert_eq!(
        home.values().collect::<HashSet<_>>().len(),
        3,
        "paths spread over the pool"
    );
}

// ---------------------------------------------------------------- hash balance_factor

/// Holds `count` requests for one key (`/hold`), one after the other, and returns the server
/// each went to.
async fn hold_same_key(scheduler_lines: &str, count: u32) -> Vec<SocketAddr> {
    hold_same_key_paced(scheduler_lines, count, Duration::ZERO).await
}

/// `hold_same_key` with `pause` before each request.
async fn hold_same_key_paced(
    scheduler_lines: &str,
    count: u32,
    pause: Duration,
) -> Vec<SocketAddr> {
    let servers = backends(3).await;
    let refs: Vec<&Backend> = servers.iter().collect();
    let switch = start_switch(&pool_rules(scheduler_lines, &refs), &[]).await;
    let mut held = Vec::new();
    let mut went = Vec::new();
    for n in 0..count {
        tokio::time::sleep(pause).await;
        went.push(hold_one_more(&switch, &servers, &mut held, n).await);
    }
    release_all(&switch, &servers, &mut held).await;
    went
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn balance_factor_2_lets_a_key_take_twice_its_share_before_it_spills() {
    // 3 servers: a key's server takes the request while its load stays below
    // balance_factor * (in flight + 1) / 3. With 2: the first two, not the third. With the
    // default 1.25 the second would spill already.
    let went = hold_same_key("scheduler = \"hash\"\nbalance_factor = 2", 3).await;
    assert_eq!(went[1], went[0], "the second request stays: {went:?}");
    assert_ne!(went[2], went[0], "the third spills: {went:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn balance_factor_0_never_spills() {
    let went = hold_same_key("scheduler = \"hash\"\nbalance_factor = 0", 6).await;
    assert!(
        went.iter().all(|&s| s == went[0]),
        "no bound: every request for the key on its server: {went:?}"
    );
}

// ---------------------------------------------------------------- lard thresholds

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lard_thresholds_auto_moves_a_hot_target_under_a_light_load_and_fixed_does_not() {
    // One target held again and again on 3 servers, nothing else in flight. Auto (the
    // default) calls its server overloaded once it carries more than 4 (the quiet floor)
    // while the others are idle; the paper's fixed t_high = 65 is never reached here. Spills
    // (below) are off: they would lend the third request to an idle server.
    let auto = hold_same_key_slowly("scheduler = \"lard\"\nspill = \"off\"", 6).await;
    assert!(
        auto[..5].iter().all(|&s| s == auto[0]),
        "up to 4 in flight the target stays: {auto:?}"
    );
    assert_ne!(auto[5], auto[0], "with 5 in flight it moves: {auto:?}");
    let fixed = hold_same_key_slowly("scheduler = \"lard\"\nthresholds = \"fixed\"", 6).await;
    assert!(
        fixed.iter().all(|&s| s == fixed[0]),
        "fixed thresholds (25, 65) keep it: {fixed:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lard_spill_lends_a_request_to_an_idle_server_and_the_target_stays() {
    // Two requests of one target in flight at its server and two idle servers, in a light
    // pool: nothing has measured spills yet, so the third is the first probe, to an idle
    // server. The target does not move: once the pool is idle its next request goes home.
    // With spill = "off" the third stays.
    for (lines, lends) in [
        ("scheduler = \"lard\"", true),
        ("scheduler = \"lard\"\nspill = \"off\"", false),
    ] {
        let servers = backends(3).await;
        let refs: Vec<&Backend> = servers.iter().collect();
        let switch = start_switch(&pool_rules(lines, &refs), &[]).await;
        let mut held = Vec::new();
        let home = hold_one_more(&switch, &servers, &mut held, 0).await;
        assert_eq!(hold_one_more(&switch, &servers, &mut held, 1).await, home);
        let third = hold_one_more(&switch, &servers, &mut held, 2).await;
        assert_eq!(third != home, lends, "{lines}: home {home}, third {third}");
        release_all(&switch, &servers, &mut held).await;
        let again = hold_one_more(&switch, &servers, &mut held, 0).await;
        assert_eq!(again, home, "{lines}: the target stayed home");
        release_all(&switch, &servers, &mut held).await;
    }
}

/// `hold_same_key` with 100 ms before each request: auto judges loads averaged over 10 ms, so
/// each pick sees the requests held before it to within a tenth of one, however fast the machine.
async fn hold_same_key_slowly(scheduler_lines: &str, count: u32) -> Vec<SocketAddr> {
    hold_same_key_paced(scheduler_lines, count, Duration::from_millis(100)).await
}

// ---------------------------------------------------------------- lard max_targets

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lard_forgets_the_least_recently_used_target_past_max_targets() {
    let servers = backends(2).await;
    let refs: Vec<&Backend> = servers.iter().collect();
    // Fixed thresholds, so that loads of the moment decide: a server with more than 2 in
    // flight is overloaded while the other has none; one with 1 is not below t_low.
    let switch = start_switch(
        &pool_rules(
            "scheduler = \"lard\"\nmax_targets = 8\nt_low = 1\nt_high = 2",
            &refs,
        ),
        &[],
    )
    .await;
    let addr = switch.local_addr("web").unwrap();

    // Three requests held on one server (`/hold` stays on its server up to t_high): it is
    // overloaded, so 24 new targets, one at a time, all start on the other, whichever of the
    // two their place on the ring names.
    let mut held = Vec::new();
    let busy = hold_one_more(&switch, &servers, &mut held, 0).await;
    for n in 1..3 {
        assert_eq!(hold_one_more(&switch, &servers, &mut held, n).await, busy);
    }
    let free = servers
        .iter()
        .find(|b| b.addr != busy)
        .unwrap()
        .addr
        .to_string();
    let mut client = Client::connect(addr).await;
    let targets: Vec<String> = (1..=24).map(|t| format!("/file/{t}.html")).collect();
    for target in &targets {
        client
            .send(format!("GET {target} HTTP/1.1\r\nHost: t\r\n\r\n").as_bytes())
            .await;
        let response = client.response(false).await;
        assert_eq!(
            response.served_by(),
            free,
            "{target}: away from the overloaded server"
        );
        in_flight(&switch, 3).await;
    }
    release_all(&switch, &servers, &mut held).await;

    // One request held on the first server: neither overloaded nor below t_low, so nothing
    // goes back to it and new targets may start there. `/hold` (forgotten, placed again)
    // takes one of the 8 places, so the 7 targets used last are the ones remembered.
    assert_eq!(hold_one_more(&switch, &servers, &mut held, 0).await, busy);
    for target in targets[17..].iter().rev() {
        client
            .send(format!("GET {target} HTTP/1.1\r\nHost: t\r\n\r\n").as_bytes())
            .await;
        assert_eq!(
            client.response(false).await.served_by(),
            free,
            "{target} is remembered"
        );
        in_flight(&switch, 1).await;
    }
    // The 16 first were forgotten (only 8 targets are kept): placed again as new targets, on
    // their ring server, which is the busy one for about half of them (all 16 on the other
    // one: 1 chance in 65536). Remembered, as the default max_targets would keep them, all
    // would stay.
    let mut moved = Vec::new();
    for target in targets[..16].iter().rev() {
        client
            .send(format!("GET {target} HTTP/1.1\r\nHost: t\r\n\r\n").as_bytes())
            .await;
        if client.response(false).await.served_by() != free {
            moved.push(target.clone());
        }
        in_flight(&switch, 1).await;
    }
    release_all(&switch, &servers, &mut held).await;
    assert!(
        !moved.is_empty(),
        "targets past max_targets are forgotten and placed again"
    );
}

// ---------------------------------------------------------------- key = "source"

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hash_on_the_source_keeps_each_client_address_on_one_server_whatever_the_path() {
    let servers = backends(3).await;
    let refs: Vec<&Backend> = servers.iter().collect();
    let switch = start_switch(
        &pool_rules("scheduler = \"hash\"\nkey = \"source\"", &refs),
        &[],
    )
    .await;
    let addr = switch.local_addr("web").unwrap();
    let mut home: HashMap<Ipv4Addr, String> = HashMap::new();
    for host in 2..26u8 {
        let source = Ipv4Addr::new(127, 0, 0, host);
        // Two connections per address, several paths on each.
        for connection in 0..2 {
            let mut client = Client::connect_from(IpAddr::V4(source), addr).await;
            for page in 0..4 {
                let request =
                    format!("GET /c{connection}/item/{page}?q={host} HTTP/1.1\r\nHost: t\r\n\r\n");
                let server = get_idle(&switch, &mut client, &request).await;
                assert_eq!(
                    home.entry(source).or_insert_with(|| server.clone()),
                    &server,
                    "{source}: connection {connection}, page {page}"
                );
            }
        }
    }
    assert_eq!(
        home.values().collect::<HashSet<_>>().len(),
        3,
        "client addresses spread"
    );
}

// ---------------------------------------------------------------- key = "host"

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hash_on_the_host_keeps_each_site_on_one_server_whatever_the_path_port_or_case() {
    let servers = backends(3).await;
    let refs: Vec<&Backend> = servers.iter().collect();
    let switch = start_switch(
        &pool_rules("scheduler = \"hash\"\nkey = \"host\"", &refs),
        &[],
    )
    .await;
    let mut client = Client::connect(switch.local_addr("web").unwrap()).await;
    let mut home: HashMap<String, String> = HashMap::new();
    for site in 0..30 {
        let name = format!("site{site}.example");
        // The port is not part of the key, nor the case (the README: "the host, port
        // excluded, lower case").
        let spellings = [
            name.clone(),
            format!("{name}:8080"),
            format!("{name}:443"),
            name.to_uppercase(),
        ];
        for (i, host) in spellings.iter().enumerate() {
            let request = format!("GET /page/{site}/{i}.html HTTP/1.1\r\nHost: {host}\r\n\r\n");
            let server = get_idle(&switch, &mut client, &request).await;
            assert_eq!(
                home.entry(name.clone()).or_insert_with(|| server.clone()),
                &server,
                "Host: {host}, path /page/{site}/{i}.html"
            );
        }
    }
    assert_eq!(
        home.values().collect::<HashSet<_>>().len(),
        3,
        "sites spread"
    );
}
