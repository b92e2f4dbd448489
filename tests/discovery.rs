//! Pools that follow DNS (`discover`), against a real DNS server (dnsmasq, tests/common/dns.rs)
//! whose records each test changes: servers found join and get requests, servers gone get no
//! new request and finish those they hold, a DNS server that stops changes nothing, SRV weights
//! and priorities become weights and backups, and requests never fail while records churn.
//! Waits are for the switch's state (its statistics, its log), never for a time.

mod common;

use common::dns::{Dnsmasq, Srv};
use common::{backend_at, Backend, Client, Scratch};
use std::collections::HashMap;
use std::net::SocketAddr;
use tcpvs::state::snapshot::Snapshot;

/// A port free on 127.0.0.2 (and, as loopback ports go, on the other 127.0.0.x the tests use).
fn free_port() -> u16 {
    let probe = std::net::TcpListener::bind("127.0.0.2:0").unwrap();
    probe.local_addr().unwrap().port()
}

fn at(ip: &str, port: u16) -> SocketAddr {
    format!("{ip}:{port}").parse().unwrap()
}

async fn backends(ips: &[&str], port: u16) -> Vec<Backend> {
    let mut list = Vec::new();
    for ip in ips {
        list.push(backend_at(at(ip, port)).await);
    }
    list
}

fn hosts(name: &str, ips: &[&str]) -> String {
    ips.iter().map(|ip| format!("{ip} {name}\n")).collect()
}

/// The addresses the pool `pool` has now, in the pool's order.
fn pool_servers(snap: &Snapshot, pool: &str) -> Vec<SocketAddr> {
    snap.servers
        .iter()
        .filter(|s| s.pool == pool)
        .map(|s| s.addr)
        .collect()
}

/// Who served `count` GETs of `path` on one connection.
async fn served(addr: SocketAddr, path: &str, count: usize) -> HashMap<String, usize> {
    let mut client = Client::connect(addr).await;
    let mut by = HashMap::new();
    for _ in 0..count {
        let response = client.get(path).await;
        assert_eq!(response.status, 200, "{response:?}");
        *by.entry(response.served_by()).or_insert(0) += 1;
    }
    by
}

/// The `tcpvs` binary with `args`, then `file`, run to its end.
fn tcpvs(args: &[&str], file: &std::path::Path) -> std::process::Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_tcpvs"))
        .args(args)
        .arg(file)
        .output()
        .unwrap()
}

fn rules(lookup: &str, dns: SocketAddr, scheduler: &str) -> String {
    format!(
        "[virtual.web]\nlisten = \"127.0.0.1:0\"\ndefault_pool = \"api\"\n\n\
         [pool.api]\nscheduler = \"{scheduler}\"\ndiscover = {{ {lookup} }}\n\
         interval = \"1s\"\nresolvers = [\"{dns}\"]\n"
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_added_to_the_record_gets_requests_and_a_removed_one_finishes_its_own() {
    let scratch = Scratch::new("discovery-join-leave");
    let port = free_port();
    let servers = backends(&["127.0.0.2", "127.0.0.3"], port).await;
    let dns = Dnsmasq::start(&scratch.0, &hosts("api.test", &["127.0.0.2"]), &[]);
    let lookup = format!("dns = \"api.test:{port}\"");
    let config = tcpvs::Config::parse("t.toml", &rules(&lookup, dns.addr, "wlc")).unwrap();
    let switch = tcpvs::Switch::start(config).await.unwrap();
    let addr = switch.local_addr("web").unwrap();

    // At start: the one address the name has, found (not listed).
    let snap = switch.stats();
    assert_eq!(pool_servers(&snap, "api"), [at("127.0.0.2", port)]);
    assert!(snap.servers.iter().all(|s| s.discovered));
    let by = served(addr, "/", 5).await;
    assert_eq!(by.get(&servers[0].addr.to_string()), Some(&5), "{by:?}");

    // A second address: it joins the pool and gets requests.
    let asked = std::time::Instant::now();
    dns.set_hosts(&hosts("api.test", &["127.0.0.2", "127.0.0.3"]));
    common::wait_until(&switch, "127.0.0.3 found", |snap| {
        pool_servers(snap, "api").len() == 2
    })
    .await;
    eprintln!(
        "a server added to the record joined after {:?}",
        asked.elapsed()
    );
    // Two requests held at once: the least-connection module gives each server one. The
    // second is sent once the first is held: sent together, the switch's two workers could
    // pick both at the same moment, each seeing two idle servers (a clean-clone CI run once
    // sent both to the first server that way).
    let hold = move || {
        tokio::spawn(async move {
            let mut client = Client::connect(addr).await;
            client.get("/hold").await
        })
    };
    let mut holds = vec![hold()];
    // The first is held once a server has its head (it was counted at that server when
    // picked, before it was sent).
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(10);
    while servers.iter().map(|s| s.requests()).sum::<usize>() < 6 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the first held request reached no server within 10 s"
        );
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    holds.push(hold());
    servers[0].wait_for_requests(6).await;
    servers[1].wait_for_requests(1).await;

    // The first address leaves the record: no new request goes to it, and the one it holds
    // finishes whole.
    dns.set_hosts(&hosts("api.test", &["127.0.0.3"]));
    common::wait_until(&switch, "127.0.0.2 gone", |snap| {
        pool_servers(snap, "api") == [at("127.0.0.3", port)]
    })
    .await;
    let by = served(addr, "/", 10).await;
    assert_eq!(by.get(&servers[1].addr.to_string()), Some(&10), "{by:?}");
    assert_eq!(
        servers[0].requests(),
        6,
        "the server gone got a new request"
    );
    servers[0].release(1);
    servers[1].release(1);
    let mut holders = Vec::new();
    for hold in holds {
        let response = hold.await.unwrap();
        assert_eq!(response.status, 200);
        assert_eq!(response.body, b"0123456789");
        holders.push(response.served_by());
    }
    holders.sort();
    let mut expected = vec![servers[0].addr.to_string(), servers[1].addr.to_string()];
    expected.sort();
    assert_eq!(holders, expected);
    switch.shutdown(std::time::Duration::from_secs(1)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn srv_weights_become_weights_and_a_higher_priority_is_a_backup() {
    let scratch = Scratch::new("discovery-srv");
    let port = free_port();
    let servers = backends(&["127.0.0.4", "127.0.0.5", "127.0.0.6"], port).await;
    let name = "_http._tcp.api.test";
    let records = [
        Srv {
            name,
            target: "web1.test",
            port,
            priority: 0,
            weight: 10,
        },
        Srv {
            name,
            target: "web2.test",
            port,
            priority: 0,
            weight: 30,
        },
        Srv {
            name,
            target: "web3.test",
            port,
            priority: 1,
            weight: 5,
        },
    ];
    let hosts = "127.0.0.4 web1.test\n127.0.0.5 web2.test\n127.0.0.6 web3.test\n";
    let dns = Dnsmasq::start(&scratch.0, hosts, &records);
    let lookup = format!("srv = \"{name}\"");
    let config = tcpvs::Config::parse("t.toml", &rules(&lookup, dns.addr, "wrr")).unwrap();
    let switch = tcpvs::Switch::start(config).await.unwrap();
    let addr = switch.local_addr("web").unwrap();

    let snap = switch.stats();
    let seen: Vec<(SocketAddr, u32, bool)> = snap
        .servers
        .iter()
        .map(|s| (s.addr, s.configured_weight, s.backup))
        .collect();
    assert_eq!(
        seen,
        [
            (at("127.0.0.4", port), 10, false),
            (at("127.0.0.5", port), 30, false),
            (at("127.0.0.6", port), 5, true),
        ]
    );
    // Weighted round robin over 10:30: a quarter and three quarters, the backup none.
    let by = served(addr, "/", 80).await;
    assert_eq!(by.get(&servers[0].addr.to_string()), Some(&20), "{by:?}");
    assert_eq!(by.get(&servers[1].addr.to_string()), Some(&60), "{by:?}");
    assert_eq!(servers[2].requests(), 0);
    drop(dns);
    switch.shutdown(std::time::Duration::from_secs(1)).await;
}

/// The binary, its log and `tcpvs list`: a DNS server that stops changes nothing (the log says
/// so once), and the servers found are marked as found.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dns_server_that_stops_changes_nothing() {
    let scratch = Scratch::new("discovery-dns-stops");
    let port = free_port();
    let servers = backends(&["127.0.0.7", "127.0.0.8"], port).await;
    let mut dns = Dnsmasq::start(
        &scratch.0,
        &hosts("api.test", &["127.0.0.7", "127.0.0.8"]),
        &[],
    );
    let admin = common::reserved_address();
    let text = format!(
        "{}\n[admin]\nlisten = \"{}\"\n",
        rules(&format!("dns = \"api.test:{port}\""), dns.addr, "wlc"),
        admin.addr
    );
    let file = scratch.file("rules.toml", &text);
    // `tcpvs check` asks once and says what it found.
    let check = tcpvs(&["check"], &file);
    let said = String::from_utf8_lossy(&check.stdout);
    assert!(check.status.success(), "{said}");
    let found = format!(
        "pool `api`: dns api.test:{port} found 2 servers: 127.0.0.7:{port}, 127.0.0.8:{port}"
    );
    assert!(said.contains(&found), "{said}");

    drop(admin);
    let process = common::Process::start(&["run".as_ref(), "-c".as_ref(), file.as_os_str()]);
    let (service, seen) = process.address_after("listening on ");
    let line = seen
        .iter()
        .find(|l| l.contains("discovery: pool `api`"))
        .unwrap_or_else(|| panic!("no discovery line: {seen:#?}"));
    assert!(line.contains("found 2 servers (+127.0.0.7:"), "{line}");

    dns.stop();
    let (process, line, _) = common::line_with(process, "failed").await;
    assert!(line.contains("the servers found before stay"), "{line}");
    // Still both servers, both serving.
    let by = served(service, "/", 10).await;
    assert_eq!(by.len(), 2, "{by:?}");
    for server in &servers {
        assert!(server.requests() > 0);
    }
    // A reload that keeps the question keeps what was found (nothing asked: DNS is down).
    let reload = tcpvs(&["reload", "-c"], &file);
    assert!(reload.status.success(), "{reload:?}");
    // A reload that changes the question's settings asks again; DNS down, the servers found
    // before stay (an attacker's review: the pool was emptied and every request got 503).
    std::fs::write(
        &file,
        text.replace("interval = \"1s\"", "interval = \"2s\""),
    )
    .unwrap();
    let reload = tcpvs(&["reload", "-c"], &file);
    assert!(reload.status.success(), "{reload:?}");
    let by = served(service, "/", 10).await;
    assert_eq!(by.len(), 2, "{by:?}");
    let list = tcpvs(&["list", "-c"], &file);
    let table = String::from_utf8_lossy(&list.stdout);
    assert!(
        table.contains(&format!("servers found by dns api.test:{port}")),
        "{table}"
    );
    assert_eq!(table.matches("discovered").count(), 2, "{table}");
    let (log, status) = common::stop(process).await;
    assert!(status.success(), "{log:?}");
}

/// h2load over HTTP/2 while the record changes every second (TCPVS_CHURN_SECONDS, 10 by
/// default; RELIABILITY.md has a 60 s run): every request answered 2xx, none failed, and the
/// pool really changed along the way. The servers that leave the record keep running, as a
/// server drained by its orchestrator does while its requests finish.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_request_fails_while_the_record_changes_every_second() {
    let seconds: u64 = std::env::var("TCPVS_CHURN_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(10);
    let scratch = Scratch::new("discovery-churn");
    let port = free_port();
    let ips = ["127.0.0.9", "127.0.0.10", "127.0.0.11", "127.0.0.12"];
    let _servers = backends(&ips, port).await;
    let sets: [&[&str]; 4] = [
        &["127.0.0.9", "127.0.0.10"],
        &["127.0.0.10", "127.0.0.11", "127.0.0.12"],
        &["127.0.0.12"],
        &["127.0.0.9", "127.0.0.11"],
    ];
    let dns = Dnsmasq::start(&scratch.0, &hosts("api.test", sets[0]), &[]);
    // HTTP/2 over plain TCP (prior knowledge): a service's default.
    let text = rules(&format!("dns = \"api.test:{port}\""), dns.addr, "wlc");
    let config = tcpvs::Config::parse("t.toml", &text).unwrap();
    let switch = tcpvs::Switch::start(config).await.unwrap();
    let addr = switch.local_addr("web").unwrap();
    let first = switch.stats().generation;

    let load = tokio::task::spawn_blocking(move || {
        std::process::Command::new("h2load")
            .args(["-c", "2", "-m", "4", "-D"])
            .arg(seconds.to_string())
            .arg(format!("http://{addr}/"))
            .output()
    });
    let churn = async {
        for turn in 1..=seconds {
            tokio::time::sleep(std::time::Duration::from_secs(1)).await;
            dns.set_hosts(&hosts("api.test", sets[turn as usize % sets.len()]));
        }
    };
    let (load, ()) = tokio::join!(load, churn);
    let load = load
        .unwrap()
        .expect("h2load runs (Debian package nghttp2-client: .ci/run installs it)");
    let report = String::from_utf8_lossy(&load.stdout);
    assert!(load.status.success(), "{report}");
    let line = report
        .lines()
        .find(|l| l.starts_with("requests:"))
        .unwrap_or_else(|| panic!("no requests line: {report}"));
    let number = |what: &str| -> u64 {
        line.split(',')
            .find(|part| part.trim().ends_with(what))
            .and_then(|part| part.split_whitespace().find_map(|w| w.parse().ok()))
            .unwrap_or_else(|| panic!("no `{what}` in {line:?}"))
    };
    let (done, succeeded) = (number("done"), number("succeeded"));
    eprintln!("{line}");
    assert!(done > 0, "{report}");
    assert_eq!(succeeded, done, "{report}");
    assert_eq!(number("failed"), 0, "{report}");
    assert_eq!(number("errored"), 0, "{report}");
    let codes = report
        .lines()
        .find(|l| l.starts_with("status codes:"))
        .unwrap_or_default();
    assert!(
        codes.starts_with(&format!("status codes: {done} 2xx")),
        "{report}"
    );
    let changes = switch.stats().generation - first;
    eprintln!("{changes} changes of the pool in {seconds} s");
    assert!(
        changes >= seconds / 2,
        "the pool changed {changes} times: {report}"
    );
    switch.shutdown(std::time::Duration::from_secs(1)).await;
}

/// A name with no address yet: the pool starts empty (its requests get 503, nothing breaks)
/// and fills when the record appears.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pool_that_finds_nothing_yet_answers_503_then_fills() {
    let scratch = Scratch::new("discovery-empty");
    let port = free_port();
    let servers = backends(&["127.0.0.13"], port).await;
    let dns = Dnsmasq::start(&scratch.0, "", &[]);
    let lookup = format!("dns = \"api.test:{port}\"");
    let config = tcpvs::Config::parse("t.toml", &rules(&lookup, dns.addr, "wlc")).unwrap();
    let switch = tcpvs::Switch::start(config).await.unwrap();
    let addr = switch.local_addr("web").unwrap();
    assert!(pool_servers(&switch.stats(), "api").is_empty());
    let mut client = Client::connect(addr).await;
    assert_eq!(client.get("/").await.status, 503);

    dns.set_hosts(&hosts("api.test", &["127.0.0.13"]));
    common::wait_until(&switch, "127.0.0.13 found", |snap| {
        pool_servers(snap, "api").len() == 1
    })
    .await;
    let by = served(addr, "/", 3).await;
    assert_eq!(by.get(&servers[0].addr.to_string()), Some(&3), "{by:?}");
    switch.shutdown(std::time::Duration::from_secs(1)).await;
}

/// Each answer that changes the pool builds a new pool: the servers it keeps go on with their
/// checks in their own phase (one check each here, at an `interval` of an hour), rather than
/// every server checked again at every change (an attacker's review: 1000 servers changing
/// every second took 92 429 checks in 90 s at `interval = "60s"`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kept_servers_are_not_checked_again_at_each_change() {
    let scratch = Scratch::new("discovery-checks");
    let port = free_port();
    let servers = backends(&["127.0.0.14", "127.0.0.15", "127.0.0.16"], port).await;
    let two = hosts("api.test", &["127.0.0.14", "127.0.0.15"]);
    let three = hosts("api.test", &["127.0.0.14", "127.0.0.15", "127.0.0.16"]);
    let dns = Dnsmasq::start(&scratch.0, &two, &[]);
    let text = rules(&format!("dns = \"api.test:{port}\""), dns.addr, "wlc")
        + "[pool.api.health]\ncheck = \"http\"\npath = \"/health\"\ninterval = \"1h\"\n";
    let config = tcpvs::Config::parse("t.toml", &text).unwrap();
    let switch = tcpvs::Switch::start(config).await.unwrap();
    servers[0].wait_for_requests(1).await;
    servers[1].wait_for_requests(1).await;
    for (round, (hosts, count)) in [(&three, 3), (&two, 2), (&three, 3)]
        .into_iter()
        .enumerate()
    {
        dns.set_hosts(hosts);
        common::wait_until(&switch, "the record's servers", |snap| {
            pool_servers(snap, "api").len() == count
        })
        .await;
        if count == 3 {
            // The server new to the pool is checked in the first round: it was (again) new.
            servers[2].wait_for_requests(round / 2 + 1).await;
        }
    }
    assert_eq!(
        servers[0].requests(),
        1,
        "{:?}",
        servers[0].record.heads.lock().unwrap()
    );
    assert_eq!(
        servers[1].requests(),
        1,
        "{:?}",
        servers[1].record.heads.lock().unwrap()
    );
    switch.shutdown(std::time::Duration::from_secs(1)).await;
}

/// A record that names the switch itself (its own listener) would loop every request back
/// into it: such an address is left out of the answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_switchs_own_address_is_never_a_server() {
    let scratch = Scratch::new("discovery-self");
    let listen = common::reserved_address();
    let port = listen.addr.port();
    let servers = backends(&["127.0.0.17"], port).await;
    let dns = Dnsmasq::start(
        &scratch.0,
        &hosts("api.test", &["127.0.0.1", "127.0.0.17"]),
        &[],
    );
    let text = rules(&format!("dns = \"api.test:{port}\""), dns.addr, "wlc")
        .replace("127.0.0.1:0", &listen.addr.to_string());
    let config = tcpvs::Config::parse("t.toml", &text).unwrap();
    let switch = tcpvs::Switch::start(config).await.unwrap();
    assert_eq!(pool_servers(&switch.stats(), "api"), [servers[0].addr]);
    let by = served(listen.addr, "/", 3).await;
    assert_eq!(by.get(&servers[0].addr.to_string()), Some(&3), "{by:?}");
    switch.shutdown(std::time::Duration::from_secs(1)).await;
}
