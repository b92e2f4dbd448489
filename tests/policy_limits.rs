//! Rate limits and per-source connection caps (issue 26; README, `[limit.NAME]`),
//! end to end over loopback sockets: a fresh key's `burst`, then `status` (429) with
//! `Retry-After` and the IETF `RateLimit-Policy` / `RateLimit` fields, `Retry-After` following
//! the rate's unit; keys by source, header, cookie, host (in its normal form) and path (in its
//! normal form), each independent, a request without the key's field not limited (and
//! counted allowed); `dry_run`; `/stats` `limits.NAME` `{allowed, limited, keys}` and `/metrics`
//! `tcpvs_limit_allowed_total` / `tcpvs_limit_limited_total`; `max_keys`; `max_conns_per_source`
//! with and without PROXY; and two `tcpvs run` processes sharing one limit through a Redis of
//! the test's own, which is killed and started again.
//!
//! Written from the interface alone. Rates are low ("1/m" where a count must be exact: no token
//! comes back during a test; "2/s" and "10/s" where refilling is the point) and requests are
//! fast, so that counts are deterministic; elapsed time decides only where it is the subject (a
//! token back after `Retry-After`, the rate two instances admit together), with wide margins.

mod common;
#[path = "common/h2.rs"]
mod h2c;
#[path = "common/policy.rs"]
mod policy_common;
#[path = "common/redis.rs"]
mod redis;

use common::*;
use policy_common::*;
use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};

/// A switch with an admin endpoint; service `web` sends `/limited...` to pool `app` under limit
/// `{name}` (declared by `{limit}`), every other path to `app` without a limit.
const LIMITED: &str = r#"
[switch]
access_log = false
[admin]
listen = "127.0.0.1:0"
[virtual.web]
listen = "127.0.0.1:0"
default_pool = "app"
{service}
[[virtual.web.rule]]
path = "^/limited"
pool = "app"
limit = "{name}"
{more_rules}
[limit.{name}]
{limit}
{more_limits}
[pool.app]
servers = [{ addr = "{app}" }]
"#;

struct Limited {
    switch: tcpvs::Switch,
    web: SocketAddr,
    admin: SocketAddr,
    app: Echo,
}

/// A switch with limit `name` whose keys are `limit`, and `extra` pieces (`service` keys, more
/// rules, more limits).
async fn limited(name: &str, limit: &str) -> Limited {
    limited_with(name, limit, "", "", "").await
}

async fn limited_with(
    name: &str,
    limit: &str,
    service: &str,
    more_rules: &str,
    more_limits: &str,
) -> Limited {
    let app = echo().await;
    let switch = start_switch(
        LIMITED,
        &[
            ("name", name.to_string()),
            ("limit", limit.to_string()),
            ("service", service.to_string()),
            ("more_rules", more_rules.to_string()),
            ("more_limits", more_limits.to_string()),
            ("app", app.addr.to_string()),
        ],
    )
    .await;
    let web = switch.local_addr("web").expect("service web");
    let admin = switch.admin_addr().expect("an admin endpoint");
    Limited {
        switch,
        web,
        admin,
        app,
    }
}

/// Statuses of `n` requests of `path` with `fields`, each on a connection of its own from
/// `source`, one after the other.
async fn statuses_from(
    source: IpAddr,
    addr: SocketAddr,
    n: usize,
    path: &str,
    fields: &[&str],
) -> Vec<u16> {
    let mut statuses = Vec::with_capacity(n);
    for _ in 0..n {
        statuses.push(
            exchange_from(source, addr, &get_request(path, fields))
                .await
                .status,
        );
    }
    statuses
}

async fn statuses(addr: SocketAddr, n: usize, path: &str, fields: &[&str]) -> Vec<u16> {
    statuses_from(IpAddr::from([127, 0, 0, 1]), addr, n, path, fields).await
}

/// The `Retry-After` of a refusal as whole seconds; panics unless it is a whole number >= 1.
fn retry_after(response: &Response) -> u64 {
    let value = response
        .header("retry-after")
        .unwrap_or_else(|| panic!("a refusal without Retry-After: {:?}", response.headers));
    let seconds: u64 = value
        .trim()
        .parse()
        .unwrap_or_else(|_| panic!("Retry-After {value:?} is not whole seconds"));
    assert!(seconds >= 1, "Retry-After {seconds} is less than 1");
    seconds
}

// ---------------------------------------------------------------- bursts and refusals

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fresh_key_gets_its_burst_then_429_with_retry_after_and_ratelimit_fields() {
    let s = limited("api", "key = \"source\"\nrate = \"1/m\"\nburst = 3").await;
    assert_eq!(
        statuses(s.web, 3, "/limited/a", &[]).await,
        [200, 200, 200],
        "the burst"
    );
    for _ in 0..2 {
        let r = exchange(s.web, &get_request("/limited/b?x=1", &[])).await;
        assert_eq!(r.status, 429, "past the burst: {:?}", r.headers);
        // One request a minute: the next token is at most 60 s away.
        let seconds = retry_after(&r);
        assert!(seconds <= 60, "Retry-After {seconds} at 1/m");
        for field in ["ratelimit-policy", "ratelimit"] {
            let values = response_values(&r, field);
            assert_eq!(values.len(), 1, "one {field}: {:?}", r.headers);
            assert!(!values[0].trim().is_empty(), "{field} is empty");
        }
    }
    // Paths without the limit are not limited.
    assert_eq!(
        statuses(s.web, 5, "/free", &[]).await,
        [200; 5],
        "no limit on /free"
    );
    assert_eq!(
        s.app.requests(),
        3 + 5,
        "a refused request reaches no server"
    );
    wait_for_limit(s.admin, "api", 3, 2, 1).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_retry_after_the_key_is_admitted_again() {
    let s = limited("api", "key = \"source\"\nrate = \"2/s\"\nburst = 3").await;
    let mut client = Client::connect(s.web).await;
    // On one keep-alive connection: fast enough that no token comes back (one per 500 ms).
    for i in 0..3 {
        let r = client.get(&format!("/limited/{i}")).await;
        assert_eq!(r.status, 200, "request {i} of the burst");
    }
    let refused = client.get("/limited/3").await;
    assert_eq!(refused.status, 429);
    let seconds = retry_after(&refused);
    assert_eq!(
        seconds, 1,
        "at 2/s the next token is at most 500 ms away, rounded up"
    );
    tokio::time::sleep(Duration::from_secs(seconds) + Duration::from_millis(100)).await;
    let r = exchange(s.web, &get_request("/limited/after", &[])).await;
    assert_eq!(r.status, 200, "Retry-After seconds later, a token is back");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_chooses_the_refusal() {
    let s = limited(
        "api",
        "key = \"source\"\nrate = \"1/m\"\nburst = 1\nstatus = 503",
    )
    .await;
    let first = exchange(s.web, &get_request("/limited", &[])).await;
    assert_eq!(first.status, 200);
    let r = exchange(s.web, &get_request("/limited", &[])).await;
    assert_eq!(r.status, 503);
    retry_after(&r);
    wait_for_limit(s.admin, "api", 1, 1, 1).await;
}

// ---------------------------------------------------------------- keys

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_by_source_are_independent() {
    let s = limited("per-client", "key = \"source\"\nrate = \"1/m\"\nburst = 2").await;
    let (one, two) = (IpAddr::from([127, 0, 0, 2]), IpAddr::from([127, 0, 0, 3]));
    assert_eq!(
        statuses_from(one, s.web, 3, "/limited", &[]).await,
        [200, 200, 429]
    );
    assert_eq!(
        statuses_from(two, s.web, 3, "/limited", &[]).await,
        [200, 200, 429]
    );
    assert_eq!(
        statuses_from(one, s.web, 1, "/limited", &[]).await,
        [429],
        "127.0.0.2 is still out of tokens"
    );
    wait_for_limit(s.admin, "per-client", 4, 3, 2).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_by_header_are_independent_and_a_request_without_the_header_is_not_limited() {
    let s = limited(
        "api",
        "key = \"header\"\nheader = \"X-Api-Key\"\nrate = \"1/m\"\nburst = 2",
    )
    .await;
    assert_eq!(
        statuses(s.web, 3, "/limited", &["X-Api-Key: a"]).await,
        [200, 200, 429]
    );
    assert_eq!(
        statuses(s.web, 3, "/limited", &["X-Api-Key: b"]).await,
        [200, 200, 429]
    );
    // The field's name in any case is the same field.
    assert_eq!(
        statuses(s.web, 1, "/limited", &["x-api-key: a"]).await,
        [429]
    );
    // Without the field: not limited by this limit, counted as allowed.
    assert_eq!(statuses(s.web, 6, "/limited", &[]).await, [200; 6]);
    wait_for_limit(s.admin, "api", 2 + 2 + 6, 2 + 1, 2).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_by_cookie_are_independent_and_a_request_without_the_cookie_is_not_limited() {
    let s = limited(
        "sessions",
        "key = \"cookie\"\ncookie = \"session\"\nrate = \"1/m\"\nburst = 2",
    )
    .await;
    assert_eq!(
        statuses(s.web, 3, "/limited", &["Cookie: session=abc"]).await,
        [200, 200, 429]
    );
    // Another session, among other cookies.
    assert_eq!(
        statuses(s.web, 2, "/limited", &["Cookie: theme=dark; session=xyz"]).await,
        [200, 200]
    );
    // Other cookies only, or none: not limited.
    assert_eq!(
        statuses(s.web, 4, "/limited", &["Cookie: theme=dark"]).await,
        [200; 4]
    );
    assert_eq!(statuses(s.web, 2, "/limited", &[]).await, [200; 2]);
    // The first session is still out of tokens, wherever its cookie stands.
    assert_eq!(
        statuses(s.web, 1, "/limited", &["Cookie: a=1; session=abc; b=2"]).await,
        [429]
    );
    wait_for_limit(s.admin, "sessions", 2 + 2 + 4 + 2, 2, 2).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_by_host_are_independent() {
    let s = limited("vhost", "key = \"host\"\nrate = \"1/m\"\nburst = 2").await;
    let get =
        |host: &str| format!("GET /limited HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n");
    let mut seen = Vec::new();
    for host in ["a.test", "a.test", "a.test", "b.test", "b.test", "b.test"] {
        seen.push(exchange(s.web, &get(host)).await.status);
    }
    assert_eq!(seen, [200, 200, 429, 200, 200, 429]);
    wait_for_limit(s.admin, "vhost", 4, 2, 2).await;
}

/// Host keys are counted in the host's normal form (http/host.rs): `Example.org`,
/// `example.org`, `EXAMPLE.ORG.` and `example.org:80` are one key. Fails if the key were the
/// host as sent (case kept: three keys of their own; the trailing dot kept: a fourth).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn host_keys_are_counted_without_case_dot_or_port() {
    let s = limited("vhost", "key = \"host\"\nrate = \"1/m\"\nburst = 2").await;
    let get =
        |host: &str| format!("GET /limited HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n");
    let mut seen = Vec::new();
    for host in [
        "Example.org",
        "example.org",
        "EXAMPLE.ORG",
        "example.org.",
        "example.org:80",
    ] {
        seen.push((host, exchange(s.web, &get(host)).await.status));
    }
    assert_eq!(
        seen.iter().map(|(_, status)| *status).collect::<Vec<_>>(),
        [200, 200, 429, 429, 429],
        "{seen:?}"
    );
    // Another host has a bucket of its own.
    assert_eq!(exchange(s.web, &get("Other.org")).await.status, 200);
    wait_for_limit(s.admin, "vhost", 3, 3, 2).await;
}

/// `key = "path"`: one bucket per path, whoever sends it, and the path in its normal form
/// (http/path.rs: `/limited//a`, `/limited/./a` and `/limited/%61` are `/limited/a`), its query
/// left out. Fails if the key fell back to the client's address (a second client would have
/// its own bucket), to anything the paths share (`/limited/b` refused), or to the path as sent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn path_keys_are_one_bucket_per_normal_path_whoever_sends_it() {
    let s = limited("per-path", "key = \"path\"\nrate = \"1/m\"\nburst = 1").await;
    let (one, two) = (IpAddr::from([127, 0, 0, 2]), IpAddr::from([127, 0, 0, 3]));
    assert_eq!(statuses_from(one, s.web, 1, "/limited/a", &[]).await, [200]);
    assert_eq!(
        statuses_from(two, s.web, 1, "/limited/a", &[]).await,
        [429],
        "the same path from another client is the same key"
    );
    assert_eq!(
        statuses_from(one, s.web, 1, "/limited/b", &[]).await,
        [200],
        "another path is another key"
    );
    for spelling in [
        "/limited//a",
        "/limited/./a",
        "/limited/%61",
        "/limited/a?page=2",
    ] {
        assert_eq!(
            statuses_from(two, s.web, 1, spelling, &[]).await,
            [429],
            "{spelling} is /limited/a's key"
        );
    }
    assert_eq!(s.app.requests(), 2, "{:?}", s.app.heads());
    wait_for_limit(s.admin, "per-path", 2, 5, 2).await;
}

/// The rate's unit read from `N/s`, `N/m` and `N/h`, pinned by what a refusal says rather than
/// by the `RateLimit-Policy` text alone: with `burst = 1` the second request of a fresh key is
/// refused, and its `Retry-After` is the time until the next token, one emission interval
/// (`per / N`) less the moment between the two requests, rounded up to whole seconds. So
/// `1/h` says more than a minute (at most 3600), `1/m` more than a second (at most 60) and
/// `2/m` at most 30 (`N/s` is `after_retry_after_the_key_is_admitted_again`'s): a unit read as another (`m` as `s` or `h`, `h` as `m`) or the
/// count ignored gives a value outside the range. The two requests follow each other at once;
/// the ranges leave them tens of seconds (or, for `1/h`, 59 minutes) before a correct switch
/// could give a value outside them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retry_after_follows_the_rates_unit() {
    for (rate, window, range) in [
        ("1/h", 3600, 61..=3600),
        ("1/m", 60, 2..=60),
        ("2/m", 60, 2..=30),
    ] {
        let s = limited(
            "unit",
            &format!("key = \"source\"\nrate = \"{rate}\"\nburst = 1"),
        )
        .await;
        let mut client = Client::connect(s.web).await;
        assert_eq!(client.get("/limited/1").await.status, 200, "{rate}");
        let refused = client.get("/limited/2").await;
        assert_eq!(refused.status, 429, "{rate}");
        let seconds = retry_after(&refused);
        assert!(
            range.contains(&seconds),
            "{rate}: Retry-After {seconds}, expected within {range:?}"
        );
        // The RateLimit fields agree with Retry-After and the window.
        let count = rate.split('/').next().unwrap_or("?");
        assert_eq!(
            response_values(&refused, "ratelimit-policy"),
            [format!("\"unit\";q={count};w={window}")],
            "{rate}"
        );
        assert_eq!(
            response_values(&refused, "ratelimit"),
            [format!("\"unit\";r=0;t={seconds}")],
            "{rate}"
        );
    }
}

// ---------------------------------------------------------------- dry run, counters

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dry_run_refuses_nothing_and_counts_what_it_would_have_refused() {
    let s = limited(
        "trial",
        "key = \"source\"\nrate = \"1/m\"\nburst = 2\ndry_run = true",
    )
    .await;
    for i in 0..5 {
        let r = exchange(s.web, &get_request(&format!("/limited/{i}"), &[])).await;
        assert_eq!(r.status, 200, "request {i}: dry run refuses nothing");
        assert!(
            r.header("retry-after").is_none(),
            "request {i}: no Retry-After on an answer that was served"
        );
    }
    assert_eq!(s.app.requests(), 5);
    // Under dry_run, `allowed` counts every request and `limited` those it would have refused.
    wait_for_limit(s.admin, "trial", 5, 3, 1).await;
    let scrape = metrics(s.admin).await;
    let labels = [("limit", "trial")];
    assert_eq!(
        sample(&scrape, "tcpvs_limit_allowed_total", &labels),
        Some(5.0)
    );
    assert_eq!(
        sample(&scrape, "tcpvs_limit_limited_total", &labels),
        Some(3.0)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stats_and_metrics_count_each_limit_exactly() {
    let s = limited_with(
        "api",
        "key = \"source\"\nrate = \"1/m\"\nburst = 3",
        "",
        "[[virtual.web.rule]]\npath = \"^/never\"\npool = \"app\"\nlimit = \"idle\"\n",
        "[limit.idle]\nkey = \"source\"\nrate = \"1/m\"\nburst = 1\n",
    )
    .await;
    assert_eq!(
        statuses(s.web, 5, "/limited", &[]).await,
        [200, 200, 200, 429, 429]
    );
    let stats = wait_for_limit(s.admin, "api", 3, 2, 1).await;
    // The top-level object: one entry per limit, the unused one at zero.
    let limits = stats["limits"]
        .as_object()
        .unwrap_or_else(|| panic!("/stats has no `limits` object: {stats}"));
    let mut names: Vec<&String> = limits.keys().collect();
    names.sort();
    assert_eq!(names, ["api", "idle"], "{}", stats["limits"]);
    assert_eq!(
        limit_counts(&stats, "idle"),
        (Some(0), Some(0), Some(0)),
        "{}",
        stats["limits"]
    );
    let scrape = metrics(s.admin).await;
    let api = [("limit", "api")];
    assert_eq!(
        sample(&scrape, "tcpvs_limit_allowed_total", &api),
        Some(3.0)
    );
    assert_eq!(
        sample(&scrape, "tcpvs_limit_limited_total", &api),
        Some(2.0)
    );
    let idle = [("limit", "idle")];
    for name in ["tcpvs_limit_allowed_total", "tcpvs_limit_limited_total"] {
        let value = sample(&scrape, name, &idle);
        assert!(
            matches!(value, None | Some(0.0)),
            "{name}{{limit=\"idle\"}} = {value:?}"
        );
    }
}

// ---------------------------------------------------------------- max_keys

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_keys_bounds_the_keys_held() {
    let s = limited(
        "api",
        "key = \"header\"\nheader = \"X-Api-Key\"\nrate = \"1/m\"\nburst = 2\nmax_keys = 10",
    )
    .await;
    let mut seen = Vec::new();
    for i in 0..40 {
        let key = format!("X-Api-Key: k{i}");
        seen.push(statuses(s.web, 1, "/limited", &[&key]).await[0]);
    }
    assert_eq!(&seen[..10], [200; 10], "the first keys fit: {seen:?}");
    let deadline = tokio::time::Instant::now() + PATIENCE;
    let stats = loop {
        let stats = stats(s.admin).await;
        if let (Some(allowed), Some(limited), Some(_)) = limit_counts(&stats, "api") {
            if allowed + limited == 40 {
                break stats;
            }
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "/stats never counted 40 requests: {}",
            stats["limits"]
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let (_, _, keys) = limit_counts(&stats, "api");
    let keys = keys.expect("keys");
    assert!(
        (1..=10).contains(&keys),
        "max_keys = 10, /stats holds {keys} keys: {}",
        stats["limits"]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_evicted_key_gets_no_free_burst() {
    let s = limited(
        "api",
        "key = \"header\"\nheader = \"X-Api-Key\"\nrate = \"1/m\"\nburst = 2\nmax_keys = 10",
    )
    .await;
    assert_eq!(
        statuses(s.web, 3, "/limited", &["X-Api-Key: hot"]).await,
        [200, 200, 429]
    );
    // Many other keys push the table past its bound: `hot` may be evicted...
    for i in 0..40 {
        let key = format!("X-Api-Key: other{i}");
        statuses(s.web, 1, "/limited", &[&key]).await;
    }
    // ...but coming back it has no more tokens than it had (none come back at 1/m so soon).
    assert_eq!(
        statuses(s.web, 1, "/limited", &["X-Api-Key: hot"]).await,
        [429],
        "an evicted key must not come back with a fresh burst"
    );
}

// ---------------------------------------------------------------- max_conns_per_source

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_conns_per_source_refuses_the_one_over_the_cap_and_frees_a_slot_on_close() {
    let s = limited_with(
        "api",
        "key = \"source\"\nrate = \"1/m\"\nburst = 1",
        "max_conns_per_source = 2",
        "",
        "",
    )
    .await;
    let local = IpAddr::from([127, 0, 0, 1]);
    // Two connections, idle and kept alive after a request each: both count.
    let mut first = Client::connect_from(local, s.web).await;
    let mut second = Client::connect_from(local, s.web).await;
    assert_eq!(first.get("/a").await.status, 200);
    assert_eq!(second.get("/b").await.status, 200);
    // The third from the same address: 503 and closed.
    let mut third = Client::connect_from(local, s.web).await;
    third.send(b"GET /c HTTP/1.1\r\nHost: test\r\n\r\n").await;
    let r = third.response(false).await;
    assert_eq!(r.status, 503);
    assert!(third.is_closed().await, "the one over the cap is closed");
    // Another address has caps of its own.
    let mut other = Client::connect_from(IpAddr::from([127, 0, 0, 2]), s.web).await;
    assert_eq!(other.get("/d").await.status, 200);
    // The two first are still served.
    assert_eq!(first.get("/a2").await.status, 200);
    assert_eq!(second.get("/b2").await.status, 200);
    assert_eq!(s.app.requests(), 5, "the refused request reached no server");

    // One closes: a new connection from the address is served once the switch saw the close.
    drop(first);
    wait_until(&s.switch, "the closed client gone", |snap| {
        snap.clients == 2
    })
    .await;
    let mut served = None;
    for _ in 0..100 {
        let mut again = Client::connect_from(local, s.web).await;
        again.send(b"GET /e HTTP/1.1\r\nHost: test\r\n\r\n").await;
        if again.response(false).await.status == 200 {
            served = Some(again);
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let mut again = served.expect("after a close, a new connection from the address is served");
    assert_eq!(again.get("/f").await.status, 200);
    drop(second);
    drop(other);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_conns_per_source_counts_the_client_named_by_proxy() {
    let s = limited_with(
        "api",
        "key = \"source\"\nrate = \"1/m\"\nburst = 1",
        "proxy_protocol = true\nmax_conns_per_source = 1",
        "",
        "",
    )
    .await;
    let mut held = proxied(s.web, "192.0.2.7").await;
    assert_eq!(held.get("/a").await.status, 200);
    // Every connection comes from 127.0.0.1; the cap is per client the PROXY header names.
    let mut same = proxied(s.web, "192.0.2.7").await;
    same.send(b"GET /b HTTP/1.1\r\nHost: test\r\n\r\n").await;
    assert_eq!(same.response(false).await.status, 503);
    assert!(same.is_closed().await);
    let mut another = proxied(s.web, "192.0.2.8").await;
    assert_eq!(another.get("/c").await.status, 200);
    assert_eq!(held.get("/a2").await.status, 200);
}

/// A connection to `addr` that starts with a PROXY v1 header naming `client`.
async fn proxied(addr: SocketAddr, client: &str) -> Client {
    let mut c = Client::connect(addr).await;
    c.send(format!("PROXY TCP4 {client} 10.0.0.1 40000 80\r\n").as_bytes())
        .await;
    c
}

// ---------------------------------------------------------------- two instances and Redis

/// The shared limit: 10 a second, a burst of 10, per `X-Api-Key`, counted in Redis.
const RATE: f64 = 10.0;
const BURST: f64 = 10.0;

const SHARED: &str = r#"
[switch]
access_log = false
[virtual.web]
listen = "127.0.0.1:0"
default_pool = "app"
[[virtual.web.rule]]
path = "^/"
pool = "app"
limit = "shared"
[limit.shared]
key = "header"
header = "X-Api-Key"
rate = "10/s"
burst = 10
store = "{store}"
[pool.app]
servers = [{ addr = "{app}" }]
"#;

/// What requests alternating between two instances got.
#[derive(Debug)]
struct Round {
    admitted: [usize; 2],
    refused: [usize; 2],
    elapsed: Duration,
}

impl Round {
    fn admitted(&self) -> usize {
        self.admitted[0] + self.admitted[1]
    }

    /// What one limit admits over the round to a fresh key: the burst, then the rate.
    fn expected(&self) -> f64 {
        BURST + RATE * self.elapsed.as_secs_f64()
    }
}

/// Sends requests with `X-Api-Key: key` alternately to `instances[0]` and `instances[1]`, one
/// every `pause`, for `length`; every answer must be 200 or 429.
async fn alternate(instances: [SocketAddr; 2], key: &str, length: Duration) -> Round {
    let pause = Duration::from_millis(5);
    let start = Instant::now();
    let mut round = Round {
        admitted: [0; 2],
        refused: [0; 2],
        elapsed: Duration::ZERO,
    };
    let field = format!("X-Api-Key: {key}");
    // Bounded: at most one request per pause over the round's length, and a few more.
    let most = (length.as_millis() / pause.as_millis()) as usize + 10;
    for i in 0..most {
        if start.elapsed() >= length {
            break;
        }
        let which = i % 2;
        let r = exchange(instances[which], &get_request("/x", &[&field])).await;
        match r.status {
            200 => round.admitted[which] += 1,
            429 => round.refused[which] += 1,
            other => panic!(
                "instance {which} answered {other} for key {key}: {:?}",
                r.headers
            ),
        }
        tokio::time::sleep(pause).await;
    }
    round.elapsed = start.elapsed();
    round
}

/// Starts `tcpvs run -c FILE` and returns it with its service's address.
fn instance(file: &std::path::Path) -> (Process, SocketAddr) {
    let process = Process::start(&["run".as_ref(), "-c".as_ref(), file.as_os_str()]);
    let (addr, _) = process.address_after("listening on ");
    (process, addr)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_instances_share_a_limit_through_redis_and_survive_its_restart() {
    let scratch = Scratch::new("policy-redis");
    let mut redis = redis::Redis::start(&scratch.0);
    let app = echo().await;
    let rules = SHARED
        .replace("{store}", &redis.url())
        .replace("{app}", &app.addr.to_string());
    let file = scratch.file("rules.toml", &rules);
    let (_a, a) = instance(&file);
    let (_b, b) = instance(&file);
    let both = [a, b];

    // Both instances up and talking to Redis: a key of its own, whose counts are not judged.
    alternate(both, "warm-up", Duration::from_secs(1)).await;

    // Shared: together they admit what one limit admits, not twice that.
    let round = alternate(both, "shared-1", Duration::from_secs(3)).await;
    eprintln!(
        "shared: {round:?}, one limit admits {:.1}",
        round.expected()
    );
    let expected = round.expected();
    let admitted = round.admitted() as f64;
    assert!(
        admitted >= 0.75 * expected && admitted <= 1.25 * expected,
        "two instances sharing one limit admitted {admitted} in {:?}, expected {expected:.0} \
         (burst {BURST} + {RATE}/s) within 25%; per instance alone it would be about {:.0}: \
         {round:?}",
        round.elapsed,
        2.0 * expected
    );
    assert!(
        round.admitted[0] > 0 && round.admitted[1] > 0,
        "both instances admit: {round:?}"
    );

    // Redis gone: both still answer, each on its own limits (fail open, never unlimited).
    redis.kill();
    let round = alternate(both, "down-1", Duration::from_secs(2)).await;
    eprintln!(
        "Redis down: {round:?}, one limit admits {:.1}",
        round.expected()
    );
    assert!(
        round.admitted[0] > 0 && round.admitted[1] > 0,
        "with Redis down both instances still admit: {round:?}"
    );
    let admitted = round.admitted() as f64;
    assert!(
        admitted <= 1.25 * 2.0 * round.expected(),
        "with Redis down each instance keeps its own limit: admitted {admitted}, at most about \
         {:.0}: {round:?}",
        2.0 * round.expected()
    );
    assert!(
        round.refused[0] + round.refused[1] > 0,
        "with Redis down the limit still refuses: {round:?}"
    );

    // Redis back (empty): within a bounded time the instances share again by themselves. Each
    // try is a fresh key; one that shows per-instance counts means they have not reconnected
    // yet.
    redis.restart();
    let mut tries = Vec::new();
    let mut shared_again = false;
    for i in 0..10 {
        let round = alternate(both, &format!("back-{i}"), Duration::from_secs(3)).await;
        eprintln!(
            "Redis back, try {i}: {round:?}, one limit admits {:.1}",
            round.expected()
        );
        let expected = round.expected();
        let admitted = round.admitted() as f64;
        let shared = admitted >= 0.75 * expected
            && admitted <= 1.25 * expected
            && round.admitted[0] > 0
            && round.admitted[1] > 0;
        tries.push(round);
        if shared {
            shared_again = true;
            break;
        }
    }
    assert!(
        shared_again,
        "after Redis came back the instances never shared the limit again within 10 rounds of \
         3 s: {tries:#?}"
    );
    drop(app);
}

/// HTTP/2 streams of one connection are one client: they share its bucket, and the refusal is
/// an HTTP/2 answer with the same fields. Under `dry_run` nothing is refused but every stream
/// past the burst is counted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http2_streams_share_the_clients_bucket() {
    let s = limited("api", "key = \"source\"\nrate = \"1/m\"\nburst = 2").await;
    let h2 = h2c::H2::plain(s.web).await;
    let mut got = Vec::new();
    for i in 0..4 {
        got.push(h2.get("test", &format!("/limited/{i}")).await);
    }
    let statuses: Vec<u16> = got.iter().map(|r| r.status).collect();
    assert_eq!(statuses, [200, 200, 429, 429]);
    let refused = &got[2];
    let seconds: u64 = refused
        .header("retry-after")
        .and_then(|v| v.parse().ok())
        .expect("a whole number of seconds in retry-after");
    assert!((1..=60).contains(&seconds), "retry-after {seconds} at 1/m");
    assert_eq!(refused.header("ratelimit-policy"), Some("\"api\";q=1;w=60"));
    assert_eq!(
        refused.header("ratelimit"),
        Some(format!("\"api\";r=0;t={seconds}").as_str())
    );
    // HTTP/1.1 from the same address finds the bucket as the streams left it.
    let r = exchange(s.web, &get_request("/limited/h1", &[])).await;
    assert_eq!(r.status, 429);
    assert_eq!(s.app.requests(), 2, "a refused stream reaches no server");
    wait_for_limit(s.admin, "api", 2, 3, 1).await;

    let dry = limited(
        "trial",
        "key = \"source\"\nrate = \"1/m\"\nburst = 1\ndry_run = true",
    )
    .await;
    let h2 = h2c::H2::plain(dry.web).await;
    for i in 0..3 {
        assert_eq!(h2.get("test", &format!("/limited/{i}")).await.status, 200);
    }
    // allowed counts every request under dry_run, limited those that would have been refused.
    wait_for_limit(dry.admin, "trial", 3, 2, 1).await;
}
