//! The host in its normal form (issue 42, item 3): `host` rules, `key = "host"` limits and the
//! pools' modules see the host lower case, without a trailing dot and without its port, over
//! HTTP/1.1 (`Host`, an absolute-form target) and HTTP/2 (`:authority`) alike; a host with an
//! empty label (`a..b`, `.`) is refused with `400`, as nginx and Apache refuse it; and the server
//! still gets the `Host` the client sent, byte for byte.
//!
//! The attack these pin: `admin.example.org.` (or `Admin.Example.Org.`, `admin.example.org.:80`)
//! is the admin site to the servers behind (nginx and Apache take the dot off and lower the case
//! before they pick a virtual host), but was another host to the rules: it went past a `source`
//! allow-list and its `403` to the default pool, which serves that site; and it escaped a
//! host-scoped `key = "host"` limit the same way.

mod common;
#[path = "common/h2.rs"]
mod h2c;
#[path = "common/policy.rs"]
mod policy_common;

use common::*;
use policy_common::*;
use std::net::IpAddr;

/// Spellings of `admin.example.org` that every server behind reads as that host.
const ADMIN_SPELLINGS: [&str; 7] = [
    "admin.example.org",
    "admin.example.org.",
    "Admin.Example.Org.",
    "ADMIN.EXAMPLE.ORG",
    "admin.example.org:80",
    "admin.example.org.:80",
    "Admin.Example.Org.:8080",
];

/// The issue's site: the admin host is allowed from 127.0.0.2 only, everyone else gets `403`
/// from the switch; every other host goes to `sites`, a virtual-hosting server that would serve
/// the admin site too.
const ADMIN_VHOST: &str = r#"
[switch]
access_log = false
[virtual.web]
listen = "127.0.0.1:0"
default_pool = "sites"
[[virtual.web.rule]]
host = '^admin\.example\.org$'
source = ["127.0.0.2"]
pool = "admin"
[[virtual.web.rule]]
host = '^admin\.example\.org$'
respond = { status = 403, body = "forbidden\n", content_type = "text/plain" }
[pool.sites]
servers = [{ addr = "{sites}" }]
[pool.admin]
servers = [{ addr = "{admin}" }]
"#;

struct AdminSite {
    _switch: tcpvs::Switch,
    web: std::net::SocketAddr,
    sites: Echo,
    admin: Echo,
}

async fn admin_site() -> AdminSite {
    let sites = echo().await;
    let admin = echo().await;
    let switch = start_switch(
        ADMIN_VHOST,
        &[
            ("sites", sites.addr.to_string()),
            ("admin", admin.addr.to_string()),
        ],
    )
    .await;
    let web = switch.local_addr("web").expect("service web");
    AdminSite {
        _switch: switch,
        web,
        sites,
        admin,
    }
}

/// A GET of `/panel` with `Host: host` and `Connection: close`.
fn get_for(host: &str) -> String {
    format!("GET /panel HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n")
}

/// The issue's reproduction: from outside the allow-list, no spelling of the admin host
/// reaches a server (on the old code `admin.example.org.` went to `sites`); from inside it,
/// every spelling reaches the admin pool, which gets the `Host` exactly as sent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_spelling_of_a_refused_host_goes_past_its_source_rule() {
    let site = admin_site().await;
    let outside = IpAddr::from([127, 0, 0, 1]);
    let inside = IpAddr::from([127, 0, 0, 2]);
    for host in ADMIN_SPELLINGS {
        let r = exchange_from(outside, site.web, &get_for(host)).await;
        assert_eq!(
            (r.status, r.text().as_str()),
            (403, "forbidden\n"),
            "Host: {host} from outside the allow-list"
        );
    }
    // The absolute form names the host in the target, which replaces Host.
    for target in [
        "http://Admin.Example.Org./panel",
        "http://admin.example.org.:80/panel",
    ] {
        let request =
            format!("GET {target} HTTP/1.1\r\nHost: www.example.org\r\nConnection: close\r\n\r\n");
        let r = exchange_from(outside, site.web, &request).await;
        assert_eq!(r.status, 403, "GET {target}");
    }
    // HTTP/2: `:authority` is the host, with the same normal form.
    let h2 = h2c::H2::plain(site.web).await;
    for authority in [
        "admin.example.org.",
        "Admin.Example.Org.",
        "admin.example.org.:80",
    ] {
        let r = h2.get(authority, "/panel").await;
        assert_eq!(
            (r.status, r.text().as_str()),
            (403, "forbidden\n"),
            ":authority {authority}"
        );
    }
    assert_eq!(site.sites.requests(), 0, "{:?}", site.sites.heads());
    assert_eq!(site.admin.requests(), 0, "{:?}", site.admin.heads());

    for (i, host) in ADMIN_SPELLINGS.iter().enumerate() {
        let r = exchange_from(inside, site.web, &get_for(host)).await;
        assert_eq!(r.status, 200, "Host: {host} from the allow-list");
        assert_eq!(
            site.admin.requests(),
            i + 1,
            "Host: {host} went to the admin pool"
        );
        // The server gets the host as the client sent it, port and dot and case.
        let head = site.admin.last_head();
        assert_eq!(values(&head, "host"), [*host], "{head}");
    }
    assert_eq!(site.sites.requests(), 0, "{:?}", site.sites.heads());
}

/// What nginx and Apache answer `400` (an empty label) is refused here too, before any rule:
/// no server behind can be handed a host that one server reads one way and the rules another.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hosts_with_an_empty_label_are_refused() {
    let site = admin_site().await;
    for host in [
        "admin.example.org..",
        "admin.example.org..:80",
        "admin..example.org",
        ".",
        ".:80",
    ] {
        let r = exchange(site.web, &get_for(host)).await;
        assert_eq!(r.status, 400, "Host: {host}");
    }
    let request =
        "GET http://admin.example.org../panel HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n";
    assert_eq!(exchange(site.web, request).await.status, 400, "{request}");
    let h2 = h2c::H2::plain(site.web).await;
    for authority in ["admin.example.org..", "admin..example.org"] {
        let r = h2.get(authority, "/panel").await;
        assert_eq!(r.status, 400, ":authority {authority}");
    }
    assert_eq!(site.sites.requests(), 0, "{:?}", site.sites.heads());
    assert_eq!(site.admin.requests(), 0, "{:?}", site.admin.heads());
}

/// A host-scoped rule with a `key = "host"` limit: every spelling of the host is the rule's
/// request and counts in one bucket (on the old code the dotted one skipped the rule and its
/// limit, and each spelling was a key of its own).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_limit_counts_every_spelling_of_the_host_in_one_bucket() {
    let app = echo().await;
    let other = echo().await;
    let switch = start_switch(
        r#"
[switch]
access_log = false
[admin]
listen = "127.0.0.1:0"
[virtual.web]
listen = "127.0.0.1:0"
default_pool = "other"
[[virtual.web.rule]]
host = '^api\.example\.org$'
pool = "app"
limit = "per-host"
[limit.per-host]
key = "host"
rate = "1/m"
burst = 2
[pool.app]
servers = [{ addr = "{app}" }]
[pool.other]
servers = [{ addr = "{other}" }]
"#,
        &[
            ("app", app.addr.to_string()),
            ("other", other.addr.to_string()),
        ],
    )
    .await;
    let web = switch.local_addr("web").expect("service web");
    let admin = switch.admin_addr().expect("an admin endpoint");
    let mut seen = Vec::new();
    for host in ["api.example.org", "API.Example.Org."] {
        seen.push((host, exchange(web, &get_for(host)).await.status));
    }
    for host in [
        "api.example.org.",
        "api.example.org.:80",
        "Api.Example.ORG:443",
    ] {
        seen.push((host, exchange(web, &get_for(host)).await.status));
    }
    let h2 = h2c::H2::plain(web).await;
    seen.push((
        ":authority",
        h2.get("Api.Example.Org.", "/panel").await.status,
    ));
    assert_eq!(
        seen.iter().map(|(_, status)| *status).collect::<Vec<_>>(),
        [200, 200, 429, 429, 429, 429],
        "{seen:?}"
    );
    assert_eq!(app.requests(), 2, "{:?}", app.heads());
    assert_eq!(other.requests(), 0, "{:?}", other.heads());
    // One key: the host in its normal form.
    wait_for_limit(admin, "per-host", 2, 4, 1).await;
}

/// Routing and hashing by host agree on the normal form: a `hash` pool keyed by host puts every
/// spelling of a host on one server (over both protocols), so a cache behind it is not split
/// by how clients spell the name.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hashing_by_host_puts_every_spelling_on_one_server() {
    let mut servers = Vec::new();
    for _ in 0..4 {
        servers.push(backend().await);
    }
    let list: Vec<String> = servers
        .iter()
        .map(|b| format!("{{ addr = \"{}\" }}", b.addr))
        .collect();
    let switch = start_switch(
        &format!(
            "[switch]\naccess_log = false\n[virtual.web]\nlisten = \"127.0.0.1:0\"\n\
             default_pool = \"cache\"\n[pool.cache]\nscheduler = \"hash\"\nkey = \"host\"\n\
             balance_factor = 0\nservers = [{}]\n",
            list.join(", ")
        ),
        &[],
    )
    .await;
    let web = switch.local_addr("web").expect("service web");
    // No load bound (`balance_factor = 0`): the key alone places a request, whatever is in
    // flight.
    let mut client = Client::connect(web).await;
    let h2 = h2c::H2::plain(web).await;
    for name in [
        "a.example",
        "b.example",
        "c.example",
        "d.example",
        "e.example",
    ] {
        let upper = name.to_ascii_uppercase();
        let spellings = [
            name.to_string(),
            format!("{name}."),
            format!("{upper}."),
            format!("{name}.:80"),
            format!("{upper}:8080"),
        ];
        let mut placed = Vec::new();
        for host in &spellings {
            client
                .send(format!("GET /x HTTP/1.1\r\nHost: {host}\r\n\r\n").as_bytes())
                .await;
            let r = client.response(false).await;
            assert_eq!(r.status, 200, "Host: {host}");
            placed.push((host.clone(), r.served_by()));
        }
        let r = h2.get(&format!("{upper}."), "/x").await;
        assert_eq!(r.status, 200);
        placed.push((format!(":authority {upper}."), r.served_by()));
        assert!(
            placed.iter().all(|(_, server)| *server == placed[0].1),
            "{name}: {placed:?}"
        );
    }
}
