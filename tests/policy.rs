//! Traffic policy in rules (issue 26; README, `[[virtual.NAME.rule]]`), end to end over
//! loopback sockets: `redirect` (scheme, host, port, path with the rule's path captures, the
//! query kept unless the new path sets one, a scheme's default port never written, every code)
//! over HTTP/1.0, HTTP/1.1 keep-alive and HTTP/2; `respond` (status, body, content type and its
//! default; HEAD); `path_rewrite` and `strip_prefix` as the server receives them;
//! `request_headers` and `response_headers` (remove, then set, then add; names in any case, `_`
//! as `-`; a rule's X-Forwarded-For); the `source` condition, with and without PROXY, and for
//! IPv4 clients of a dual-stack listener; and what `tcpvs check` says of a wrong policy, with
//! FILE:LINE:COL.
//!
//! Written from the interface alone, as a test from outside the project would be. Verdicts rest
//! on bytes: the request head the server received (tests/common/policy.rs's echo server), and
//! the response the client read. Waits are bounded by PATIENCE only to prevent hangs.
//! Rate limits are in tests/policy_limits.rs.

mod common;
#[path = "common/h2.rs"]
mod h2c;
#[path = "common/policy.rs"]
mod policy_common;

use common::*;
use policy_common::*;
use std::net::{IpAddr, SocketAddr};

/// A switch whose service `web` has `rules` (rule tables, limit tables) and the default pool
/// `app`: the one server `{app}`; `{service}` adds keys to the service.
const SWITCH: &str = r#"
[switch]
access_log = false
[virtual.web]
listen = "127.0.0.1:0"
default_pool = "app"
{service}
{rules}
[pool.app]
servers = [{ addr = "{app}" }]
"#;

async fn policy_switch(app: SocketAddr, rules: &str) -> tcpvs::Switch {
    policy_switch_with(app, "", rules).await
}

async fn policy_switch_with(app: SocketAddr, service: &str, rules: &str) -> tcpvs::Switch {
    start_switch(
        SWITCH,
        &[
            ("app", app.to_string()),
            ("service", service.to_string()),
            ("rules", rules.to_string()),
        ],
    )
    .await
}

/// The head the echo server receives for a request of `target` with `Host: test` and no other
/// field, from 127.0.0.1: the switch rebuilds it with X-Forwarded-For (tests/gateway.rs,
/// `request_head_is_rebuilt_with_forwarded_for`).
fn plain_head(method: &str, target: &str) -> String {
    format!("{method} {target} HTTP/1.1\r\nHost: test\r\nX-Forwarded-For: 127.0.0.1\r\n\r\n")
}

// ---------------------------------------------------------------- redirect

const REDIRECTS: &str = r#"
[[virtual.web.rule]]
path = "^/secure/"
redirect = { scheme = "https", code = 301 }
[[virtual.web.rule]]
path = "^/port/"
redirect = { scheme = "https", port = 8443, code = 301 }
[[virtual.web.rule]]
host = '^old\.example\.org$'
path = "^/old/(.*)$"
redirect = { host = "www.example.org", path = "/new/$1", code = 308 }
[[virtual.web.rule]]
path = "^/swap/([a-z]+)/([0-9]+)$"
redirect = { path = "/swapped/$2/$1", code = 307 }
[[virtual.web.rule]]
path = "^/query/(.*)$"
redirect = { path = "/q/$1?from=old", code = 302 }
"#;

/// `REDIRECTS` and one rule per code: `/code/N` -> `/moved/N` with code N.
fn redirect_rules() -> String {
    let mut rules = REDIRECTS.to_string();
    for code in [301, 302, 303, 307, 308] {
        rules.push_str(&format!(
            "[[virtual.web.rule]]\npath = \"^/code/{code}$\"\nredirect = {{ path = \"/moved/{code}\", code = {code} }}\n"
        ));
    }
    rules
}

/// A response that is a redirect: `code` and exactly one `Location`, which is returned.
fn location_of(response: &Response, code: u16) -> String {
    assert_eq!(
        response.status,
        code,
        "status; headers {:?}, body {:?}",
        response.headers,
        response.text()
    );
    let locations = response_values(response, "location");
    assert_eq!(locations.len(), 1, "one Location: {:?}", response.headers);
    locations[0].clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scheme_redirect_keeps_path_and_query_and_drops_the_port() {
    let app = echo().await;
    let switch = policy_switch(app.addr, &redirect_rules()).await;
    let mut client = Client::connect(switch.local_addr("web").unwrap()).await;
    // Keep-alive: every redirect is framed, and the connection serves the next request.
    for (host, target, location) in [
        (
            "example.org:8080",
            "/secure/a%20b?x=1&y",
            "https://example.org/secure/a%20b?x=1&y",
        ),
        (
            "example.org",
            "/secure/p?q",
            "https://example.org/secure/p?q",
        ),
        ("example.org:80", "/secure/", "https://example.org/secure/"),
    ] {
        client
            .send(format!("GET {target} HTTP/1.1\r\nHost: {host}\r\n\r\n").as_bytes())
            .await;
        let r = client.response(false).await;
        assert_eq!(location_of(&r, 301), location, "GET {target} Host {host}");
        assert_ne!(r.header("connection"), Some("close"), "kept alive");
    }
    // A `port` given is written out.
    client
        .send(b"GET /port/x?q=1 HTTP/1.1\r\nHost: example.org:8080\r\n\r\n")
        .await;
    let r = client.response(false).await;
    assert_eq!(location_of(&r, 301), "https://example.org:8443/port/x?q=1");
    // The same connection still reaches the pool, and only that request reached the server.
    let r = client.get("/plain?k=v").await;
    assert_eq!(r.status, 200);
    assert_eq!(r.text(), plain_head("GET", "/plain?k=v"));
    assert_eq!(app.requests(), 1, "a redirect never reaches the server");
}

/// A port that is the scheme's default is never written (`:443` for https, `:80` for http),
/// whether the rule gives it or the request's Host carries it; any other port is.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redirect_never_writes_the_default_port_of_its_scheme() {
    let app = echo().await;
    let rules = r#"
[[virtual.web.rule]]
path = "^/tls/"
redirect = { scheme = "https", port = 443, code = 301 }
[[virtual.web.rule]]
path = "^/plain/"
redirect = { scheme = "http", port = 80, code = 301 }
[[virtual.web.rule]]
path = "^/moved/(.*)$"
redirect = { path = "/new/$1", code = 302 }
"#;
    let switch = policy_switch(app.addr, rules).await;
    let mut client = Client::connect(switch.local_addr("web").unwrap()).await;
    for (host, target, code, location) in [
        (
            "example.org:8080",
            "/tls/a?x=1",
            301,
            "https://example.org/tls/a?x=1",
        ),
        ("example.org", "/tls/b", 301, "https://example.org/tls/b"),
        (
            "example.org:8443",
            "/plain/c",
            301,
            "http://example.org/plain/c",
        ),
        // The request's own port is kept when the rule changes neither scheme nor host:
        // written unless it is 80 (plain HTTP here).
        (
            "example.org:80",
            "/moved/d",
            302,
            "http://example.org/new/d",
        ),
        (
            "example.org:81",
            "/moved/e",
            302,
            "http://example.org:81/new/e",
        ),
        ("[::1]:80", "/moved/f", 302, "http://[::1]/new/f"),
    ] {
        client
            .send(format!("GET {target} HTTP/1.1\r\nHost: {host}\r\n\r\n").as_bytes())
            .await;
        let r = client.response(false).await;
        assert_eq!(location_of(&r, code), location, "GET {target} Host {host}");
    }
    assert_eq!(app.requests(), 0, "a redirect never reaches the server");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_and_path_redirect_uses_the_path_captures() {
    let app = echo().await;
    let switch = policy_switch(app.addr, &redirect_rules()).await;
    let mut client = Client::connect(switch.local_addr("web").unwrap()).await;
    client
        .send(b"GET /old/a/b.html?x=1 HTTP/1.1\r\nHost: old.example.org\r\n\r\n")
        .await;
    let r = client.response(false).await;
    // The scheme (plain http here) is kept; host and path are the rule's, `$1` the capture.
    assert_eq!(
        location_of(&r, 308),
        "http://www.example.org/new/a/b.html?x=1"
    );
    // Two captures in another order, without a query.
    client
        .send(b"GET /swap/abc/42 HTTP/1.1\r\nHost: test\r\n\r\n")
        .await;
    let r = client.response(false).await;
    assert_eq!(location_of(&r, 307), "http://test/swapped/42/abc");
    // Another host does not match the rule: it is served.
    client
        .send(b"GET /old/a HTTP/1.1\r\nHost: new.example.org\r\n\r\n")
        .await;
    let r = client.response(false).await;
    assert_eq!(r.status, 200);
    assert_eq!(
        r.text(),
        "GET /old/a HTTP/1.1\r\nHost: new.example.org\r\nX-Forwarded-For: 127.0.0.1\r\n\r\n"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redirect_path_with_its_own_query_replaces_the_request_query() {
    let app = echo().await;
    let switch = policy_switch(app.addr, &redirect_rules()).await;
    let mut client = Client::connect(switch.local_addr("web").unwrap()).await;
    for (target, location) in [
        ("/query/abc?x=1&y=2", "http://test/q/abc?from=old"),
        ("/query/abc", "http://test/q/abc?from=old"),
    ] {
        client
            .send(format!("GET {target} HTTP/1.1\r\nHost: test\r\n\r\n").as_bytes())
            .await;
        let r = client.response(false).await;
        assert_eq!(location_of(&r, 302), location, "GET {target}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_redirect_code_is_answered_as_configured() {
    let app = echo().await;
    let switch = policy_switch(app.addr, &redirect_rules()).await;
    let mut client = Client::connect(switch.local_addr("web").unwrap()).await;
    for code in [301u16, 302, 303, 307, 308] {
        client
            .send(format!("GET /code/{code}?n={code} HTTP/1.1\r\nHost: test\r\n\r\n").as_bytes())
            .await;
        let r = client.response(false).await;
        assert_eq!(
            location_of(&r, code),
            format!("http://test/moved/{code}?n={code}")
        );
    }
    // HEAD gets the same redirect, without a body, on the same connection.
    client
        .send(b"HEAD /code/308 HTTP/1.1\r\nHost: test\r\n\r\n")
        .await;
    let r = client.response(true).await;
    assert_eq!(location_of(&r, 308), "http://test/moved/308");
    let r = client.get("/after").await;
    assert_eq!(r.text(), plain_head("GET", "/after"));
    assert_eq!(app.requests(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redirect_over_http_1_0_then_the_connection_closes() {
    let app = echo().await;
    let switch = policy_switch(app.addr, &redirect_rules()).await;
    let mut client = Client::connect(switch.local_addr("web").unwrap()).await;
    client
        .send(b"GET /secure/p?q HTTP/1.0\r\nHost: example.org:8080\r\n\r\n")
        .await;
    let r = client.response(false).await;
    assert_eq!(location_of(&r, 301), "https://example.org/secure/p?q");
    assert!(
        client.is_closed().await,
        "an HTTP/1.0 request without keep-alive ends its connection"
    );
    assert_eq!(app.requests(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redirect_over_http_2() {
    let app = echo().await;
    let switch = policy_switch(app.addr, &redirect_rules()).await;
    let h2 = h2c::H2::plain(switch.local_addr("web").unwrap()).await;
    let r = h2.get("example.org:8080", "/secure/p?q=1").await;
    assert_eq!(r.status, 301);
    assert_eq!(
        r.header("location"),
        Some("https://example.org/secure/p?q=1")
    );
    let r = h2.get("old.example.org", "/old/x?y").await;
    assert_eq!(r.status, 308);
    assert_eq!(r.header("location"), Some("http://www.example.org/new/x?y"));
    // The connection goes on to the pool.
    let r = h2.get("test", "/fine").await;
    assert_eq!(r.status, 200);
    assert_eq!(
        request_line(&app.last_head()),
        "GET /fine HTTP/1.1",
        "{}",
        app.last_head()
    );
}

// ---------------------------------------------------------------- respond

const RESPONDS: &str = r#"
[[virtual.web.rule]]
path = "^/forbidden"
respond = { status = 403, body = "forbidden\n", content_type = "text/plain" }
[[virtual.web.rule]]
path = "^/health$"
respond = { status = 200, body = '{"ok":true}', content_type = "application/json" }
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn respond_answers_status_body_and_content_type_byte_for_byte() {
    let app = echo().await;
    let switch = policy_switch(app.addr, RESPONDS).await;
    let mut client = Client::connect(switch.local_addr("web").unwrap()).await;
    for _ in 0..2 {
        let r = client.get("/forbidden/x?y=1").await;
        assert_eq!(r.status, 403);
        assert_eq!(r.body, b"forbidden\n");
        assert_eq!(response_values(&r, "content-type"), ["text/plain"]);
        assert_eq!(response_values(&r, "content-length"), ["10"]);
        assert!(r.header("transfer-encoding").is_none());
        let r = client.get("/health").await;
        assert_eq!(r.status, 200);
        assert_eq!(r.body, br#"{"ok":true}"#);
        assert_eq!(response_values(&r, "content-type"), ["application/json"]);
        assert_eq!(response_values(&r, "content-length"), ["11"]);
    }
    assert_eq!(app.requests(), 0, "respond never reaches a server");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn respond_to_head_has_the_length_and_no_body() {
    let app = echo().await;
    let switch = policy_switch(app.addr, RESPONDS).await;
    let mut client = Client::connect(switch.local_addr("web").unwrap()).await;
    client
        .send(b"HEAD /forbidden HTTP/1.1\r\nHost: test\r\n\r\n")
        .await;
    let r = client.response(true).await;
    assert_eq!(r.status, 403);
    assert_eq!(response_values(&r, "content-length"), ["10"]);
    assert_eq!(response_values(&r, "content-type"), ["text/plain"]);
    // Had a body followed the HEAD answer, this response would be read from its bytes.
    let r = client.get("/health").await;
    assert_eq!(r.status, 200);
    assert_eq!(r.body, br#"{"ok":true}"#);
    let r = client.get("/app").await;
    assert_eq!(r.text(), plain_head("GET", "/app"));
    assert!(
        client.take_buffered().is_empty(),
        "nothing after the answers"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn respond_over_http_1_0_and_http_2() {
    let app = echo().await;
    let switch = policy_switch(app.addr, RESPONDS).await;
    let addr = switch.local_addr("web").unwrap();
    let mut client = Client::connect(addr).await;
    client
        .send(b"GET /forbidden HTTP/1.0\r\nHost: test\r\n\r\n")
        .await;
    let r = client.response(false).await;
    assert_eq!(r.status, 403);
    assert_eq!(r.body, b"forbidden\n");
    assert!(client.is_closed().await);

    let h2 = h2c::H2::plain(addr).await;
    let r = h2.get("test", "/forbidden").await;
    assert_eq!(r.status, 403);
    assert_eq!(r.body, b"forbidden\n");
    assert_eq!(r.header("content-type"), Some("text/plain"));
    assert_eq!(app.requests(), 0);
}

/// Sends `request` on a connection of its own and reads everything until the switch closes
/// it: the answer byte for byte.
async fn whole_answer(addr: SocketAddr, request: &[u8]) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    stream.write_all(request).await.unwrap();
    let mut raw = Vec::new();
    tokio::time::timeout(PATIENCE, stream.read_to_end(&mut raw))
        .await
        .expect("the switch answers and closes within PATIENCE")
        .expect("reading the answer");
    String::from_utf8(raw).expect("a text answer")
}

/// `respond` without `content_type`: a body goes with `Content-Type: text/plain` (the
/// documented default), an answer without body with no Content-Type at all. Byte for byte,
/// over HTTP/1.1 and HTTP/2.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn respond_without_content_type_says_text_plain_when_it_has_a_body() {
    let app = echo().await;
    let rules = r#"
[[virtual.web.rule]]
path = "^/maintenance$"
respond = { status = 503, body = "back soon\n" }
[[virtual.web.rule]]
path = "^/gone$"
respond = { status = 410 }
[[virtual.web.rule]]
path = "^/empty$"
respond = { status = 204 }
"#;
    let switch = policy_switch(app.addr, rules).await;
    let addr = switch.local_addr("web").unwrap();
    let close =
        |path: &str| format!("GET {path} HTTP/1.1\r\nHost: test\r\nConnection: close\r\n\r\n");
    assert_eq!(
        whole_answer(addr, close("/maintenance").as_bytes()).await,
        "HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain\r\nContent-Length: 10\r\n\
         Connection: close\r\n\r\nback soon\n"
    );
    assert_eq!(
        whole_answer(addr, close("/gone").as_bytes()).await,
        "HTTP/1.1 410 Gone\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
    );
    assert_eq!(
        whole_answer(addr, close("/empty").as_bytes()).await,
        "HTTP/1.1 204 No Content\r\nConnection: close\r\n\r\n"
    );

    let h2 = h2c::H2::plain(addr).await;
    let r = h2.get("test", "/maintenance").await;
    assert_eq!((r.status, r.text()), (503, "back soon\n".to_string()));
    let types: Vec<_> = r.headers.get_all("content-type").iter().collect();
    assert_eq!(types, ["text/plain"], "{:?}", r.headers);
    let r = h2.get("test", "/gone").await;
    assert_eq!((r.status, r.text()), (410, String::new()));
    assert!(r.header("content-type").is_none(), "{:?}", r.headers);
    assert_eq!(app.requests(), 0, "respond never reaches a server");
}

// ---------------------------------------------------------------- path_rewrite, strip_prefix

const REWRITES: &str = r#"
[[virtual.web.rule]]
path = "^/images/(.*)$"
pool = "app"
path_rewrite = "/img/$1"
[[virtual.web.rule]]
path = "^/two/([^/]+)/([^/]+)$"
pool = "app"
path_rewrite = "/$2/$1"
[[virtual.web.rule]]
path = "^/static"
pool = "app"
strip_prefix = "/static"
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn path_rewrite_fills_in_the_captures_and_keeps_the_query() {
    let app = echo().await;
    let switch = policy_switch(app.addr, REWRITES).await;
    let mut client = Client::connect(switch.local_addr("web").unwrap()).await;
    for (target, server_target) in [
        ("/images/a/b.png?size=2", "/img/a/b.png?size=2"),
        ("/images/logo.svg", "/img/logo.svg"),
        ("/images/", "/img/"),
        ("/two/x/y?z=1&w", "/y/x?z=1&w"),
        ("/other/p?q", "/other/p?q"),
    ] {
        let r = client.get(target).await;
        assert_eq!(r.status, 200, "GET {target}");
        // The echo answers the head it received: the one the switch sent, byte for byte.
        assert_eq!(r.text(), plain_head("GET", server_target), "GET {target}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn strip_prefix_strips_on_a_segment_boundary_only() {
    let app = echo().await;
    let switch = policy_switch(app.addr, REWRITES).await;
    let mut client = Client::connect(switch.local_addr("web").unwrap()).await;
    for (target, server_target) in [
        ("/static", "/"),
        ("/static/", "/"),
        ("/static/a", "/a"),
        ("/static/a/b.css?v=3", "/a/b.css?v=3"),
        ("/static?x=1", "/?x=1"),
        // The rule matches (`^/static`), but `/staticfoo` is not under `/static`.
        ("/staticfoo", "/staticfoo"),
        ("/staticfoo/bar?x", "/staticfoo/bar?x"),
    ] {
        let r = client.get(target).await;
        assert_eq!(r.status, 200, "GET {target}");
        assert_eq!(r.text(), plain_head("GET", server_target), "GET {target}");
    }
    // Other methods and a body: only the target changes.
    client
        .send(b"POST /static/form?a=1 HTTP/1.1\r\nHost: test\r\nContent-Length: 5\r\n\r\nhello")
        .await;
    let r = client.response(false).await;
    assert_eq!(
        r.text(),
        "POST /form?a=1 HTTP/1.1\r\nHost: test\r\nContent-Length: 5\r\nX-Forwarded-For: 127.0.0.1\r\n\r\n"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rewrite_over_http_2_reaches_the_server_rewritten() {
    let app = echo().await;
    let switch = policy_switch(app.addr, REWRITES).await;
    let h2 = h2c::H2::plain(switch.local_addr("web").unwrap()).await;
    let r = h2.get("test", "/static/a?b=c").await;
    assert_eq!(r.status, 200);
    assert_eq!(request_line(&app.last_head()), "GET /a?b=c HTTP/1.1");
    let r = h2.get("test", "/images/x.png").await;
    assert_eq!(r.status, 200);
    assert_eq!(request_line(&app.last_head()), "GET /img/x.png HTTP/1.1");
}

// ---------------------------------------------------------------- header actions

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn request_headers_remove_then_set_then_add_as_the_server_sees_them() {
    let app = echo().await;
    let rules = r#"
[[virtual.web.rule]]
path = "^/h"
pool = "app"
request_headers = { remove = ["COOKIE", "X-Both"], set = { "X-Pool" = "images", "X-Multi" = "s" }, add = { "Via" = "1.1 tcpvs", "X-Both" = "added", "X-Multi" = "a", "X-Keep" = "added" } }
"#;
    let switch = policy_switch(app.addr, rules).await;
    let mut client = Client::connect(switch.local_addr("web").unwrap()).await;
    client
        .send(
            b"GET /h?x=1 HTTP/1.1\r\nHost: test\r\nCookie: a=1\r\nX-Pool: client1\r\nX-Both: from-client\r\n\
              cookie: b=2\r\nX-Keep: yes\r\nx-pool: client2\r\n\r\n",
        )
        .await;
    let r = client.response(false).await;
    assert_eq!(r.status, 200);
    let head = r.text();
    assert_eq!(head, app.last_head());
    assert_eq!(request_line(&head), "GET /h?x=1 HTTP/1.1");
    // remove: every Cookie, whatever the case of its name; X-Both removed, then added anew.
    assert!(values(&head, "cookie").is_empty(), "{head}");
    assert_eq!(values(&head, "x-both"), ["added"], "{head}");
    // set: one field, replacing every occurrence.
    assert_eq!(values(&head, "x-pool"), ["images"], "{head}");
    // set then add on one name: both, the set one first.
    assert_eq!(values(&head, "x-multi"), ["s", "a"], "{head}");
    // add: beside what the client sent.
    assert_eq!(values(&head, "x-keep"), ["yes", "added"], "{head}");
    assert_eq!(values(&head, "via"), ["1.1 tcpvs"], "{head}");
    assert_eq!(values(&head, "host"), ["test"], "{head}");
    assert_eq!(values(&head, "x-forwarded-for"), ["127.0.0.1"], "{head}");
    let mut names = field_names(&head);
    names.sort();
    assert_eq!(
        names,
        [
            "host",
            "via",
            "x-both",
            "x-forwarded-for",
            "x-keep",
            "x-keep",
            "x-multi",
            "x-multi",
            "x-pool"
        ],
        "{head}"
    );
    // A request the rule does not match keeps its fields.
    client
        .send(b"GET /other HTTP/1.1\r\nHost: test\r\nCookie: a=1\r\n\r\n")
        .await;
    let r = client.response(false).await;
    assert_eq!(
        r.text(),
        "GET /other HTTP/1.1\r\nHost: test\r\nCookie: a=1\r\nX-Forwarded-For: 127.0.0.1\r\n\r\n"
    );
}

/// `_` counts as `-` for `remove` and `set` (README, `request_headers`): a client's `X_User`
/// does not ride beside the `X-User` a rule sets, nor `x_debug` past a rule that removes
/// `X-Debug` (CGI and WSGI servers read both spellings alike); an underscored name no rule
/// names passes as sent. Byte for byte, as the server receives it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn request_headers_count_an_underscore_as_a_dash() {
    let app = echo().await;
    let rules = r#"
[[virtual.web.rule]]
path = "^/u"
pool = "app"
request_headers = { set = { "X-User" = "alice" }, remove = ["X-Debug"] }
"#;
    let switch = policy_switch(app.addr, rules).await;
    let mut client = Client::connect(switch.local_addr("web").unwrap()).await;
    client
        .send(
            b"GET /u HTTP/1.1\r\nHost: test\r\nX_User: mallory\r\nx_debug: 1\r\nX_Other: kept\r\n\
              X-User: bob\r\nX-DEBUG: 2\r\n\r\n",
        )
        .await;
    let r = client.response(false).await;
    assert_eq!(r.status, 200);
    assert_eq!(
        r.text(),
        "GET /u HTTP/1.1\r\nHost: test\r\nX_Other: kept\r\nX-Forwarded-For: 127.0.0.1\r\n\
         X-User: alice\r\n\r\n"
    );
}

/// A rule's `X-Forwarded-For` (README, `request_headers`): set or added, it replaces the
/// switch's own, so the server reads the rule's value alone; removed, the client's list goes
/// and the switch starts its own. Without a rule the client's list gets the client appended.
/// Byte for byte, as the server receives it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rules_x_forwarded_for_replaces_the_switchs_own() {
    let app = echo().await;
    let rules = r#"
[[virtual.web.rule]]
path = "^/set"
pool = "app"
request_headers = { set = { "X-Forwarded-For" = "203.0.113.9" } }
[[virtual.web.rule]]
path = "^/add"
pool = "app"
request_headers = { add = { "X-Forwarded-For" = "203.0.113.9" } }
[[virtual.web.rule]]
path = "^/remove"
pool = "app"
request_headers = { remove = ["X-Forwarded-For"] }
"#;
    let switch = policy_switch(app.addr, rules).await;
    let mut client = Client::connect(switch.local_addr("web").unwrap()).await;
    for (target, client_list, server_list) in [
        ("/set", None, "203.0.113.9"),
        ("/set", Some("6.6.6.6"), "203.0.113.9"),
        ("/add", None, "203.0.113.9"),
        ("/remove", Some("6.6.6.6"), "127.0.0.1"),
        ("/remove", None, "127.0.0.1"),
        ("/other", Some("6.6.6.6"), "6.6.6.6, 127.0.0.1"),
    ] {
        let field = client_list.map_or(String::new(), |l| format!("X-Forwarded-For: {l}\r\n"));
        client
            .send(format!("GET {target} HTTP/1.1\r\nHost: test\r\n{field}\r\n").as_bytes())
            .await;
        let r = client.response(false).await;
        assert_eq!(r.status, 200, "GET {target}");
        assert_eq!(
            r.text(),
            format!(
                "GET {target} HTTP/1.1\r\nHost: test\r\nX-Forwarded-For: {server_list}\r\n\r\n"
            ),
            "GET {target} with X-Forwarded-For {client_list:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn response_headers_remove_then_set_then_add_as_the_client_sees_them() {
    let app = echo_with(&[
        "X-Powered-By: test",
        "X-Dup: 1",
        "Strict-Transport-Security: max-age=1",
        "x-dup: 2",
        "X-Untouched: yes",
    ])
    .await;
    let rules = r#"
[[virtual.web.rule]]
path = "^/h"
pool = "app"
response_headers = { set = { "Strict-Transport-Security" = "max-age=31536000", "X-Dup" = "one" }, remove = ["server", "X-POWERED-BY"], add = { "X-Frame-Options" = "DENY", "X-Dup" = "extra" } }
"#;
    let switch = policy_switch(app.addr, rules).await;
    let mut client = Client::connect(switch.local_addr("web").unwrap()).await;
    for method in ["GET", "HEAD", "GET"] {
        client
            .send(format!("{method} /h HTTP/1.1\r\nHost: test\r\n\r\n").as_bytes())
            .await;
        let r = client.response(method == "HEAD").await;
        assert_eq!(r.status, 200);
        assert!(response_values(&r, "server").is_empty(), "{:?}", r.headers);
        assert!(
            response_values(&r, "x-powered-by").is_empty(),
            "{:?}",
            r.headers
        );
        assert_eq!(
            response_values(&r, "strict-transport-security"),
            ["max-age=31536000"]
        );
        assert_eq!(response_values(&r, "x-dup"), ["one", "extra"]);
        assert_eq!(response_values(&r, "x-frame-options"), ["DENY"]);
        assert_eq!(response_values(&r, "x-untouched"), ["yes"]);
        // The body and its length are the server's.
        let sent = plain_head(method, "/h");
        assert_eq!(
            response_values(&r, "content-length"),
            [sent.len().to_string()]
        );
        if method == "GET" {
            assert_eq!(r.text(), sent);
        }
    }
    // Another path: the server's fields as they were.
    let r = client.get("/other").await;
    assert_eq!(response_values(&r, "server"), ["echo/1.0"]);
    assert_eq!(response_values(&r, "x-dup"), ["1", "2"]);
    assert_eq!(
        response_values(&r, "strict-transport-security"),
        ["max-age=1"]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn header_actions_over_http_2() {
    let app = echo_with(&["X-Powered-By: test"]).await;
    let rules = r#"
[[virtual.web.rule]]
path = "^/h"
pool = "app"
request_headers = { set = { "X-Pool" = "images" }, remove = ["Cookie"] }
response_headers = { set = { "Strict-Transport-Security" = "max-age=31536000" }, remove = ["Server", "X-Powered-By"] }
"#;
    let switch = policy_switch(app.addr, rules).await;
    let h2 = h2c::H2::plain(switch.local_addr("web").unwrap()).await;
    let request = h2c::request(
        "GET",
        "test",
        "/h",
        &[("cookie", "a=1"), ("x-pool", "client")],
    );
    let r = h2
        .exchange(request, h2c::Upload::None)
        .await
        .expect("the exchange");
    assert_eq!(r.status, 200);
    let head = app.last_head();
    assert!(values(&head, "cookie").is_empty(), "{head}");
    assert_eq!(values(&head, "x-pool"), ["images"], "{head}");
    assert_eq!(
        r.header("strict-transport-security"),
        Some("max-age=31536000")
    );
    assert!(r.header("server").is_none());
    assert!(r.header("x-powered-by").is_none());
}

// ---------------------------------------------------------------- source

/// `/admin` from an allowed address goes to the pool; from anywhere else, 403.
const ADMIN_ONLY: &str = r#"
[[virtual.web.rule]]
path = "^/admin"
source = ["10.0.0.0/8", "127.0.0.1/32", "127.0.0.4/30", "::1"]
pool = "app"
[[virtual.web.rule]]
path = "^/admin"
respond = { status = 403, body = "forbidden\n", content_type = "text/plain" }
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn source_admits_the_listed_networks_and_the_next_rule_refuses_the_rest() {
    let app = echo().await;
    let switch = policy_switch(app.addr, ADMIN_ONLY).await;
    let addr = switch.local_addr("web").unwrap();
    for (from, admitted) in [
        ([127, 0, 0, 1], true),
        ([127, 0, 0, 2], false),
        ([127, 0, 0, 3], false),
        ([127, 0, 0, 4], true),
        ([127, 0, 0, 7], true),
        ([127, 0, 0, 8], false),
    ] {
        let from = IpAddr::from(from);
        let r = exchange_from(from, addr, &get_request("/admin/x", &[])).await;
        if admitted {
            assert_eq!(r.status, 200, "from {from}: {}", r.text());
            assert_eq!(request_line(&r.text()), "GET /admin/x HTTP/1.1");
        } else {
            assert_eq!(r.status, 403, "from {from}");
            assert_eq!(r.body, b"forbidden\n", "from {from}");
        }
        // Other paths do not look at the source.
        let r = exchange_from(from, addr, &get_request("/public", &[])).await;
        assert_eq!(r.status, 200, "from {from}");
    }
    assert_eq!(app.requests(), 3 + 6);
}

/// On a dual-stack listener (`[::]`) an IPv4 client's socket shows `::ffff:127.0.0.1`: a
/// `source` rule matches it as the IPv4 address it is (README, `source`), and X-Forwarded-For
/// carries `127.0.0.1`; an IPv6 client (`::1`) stays IPv6 for both.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ipv4_client_of_a_dual_stack_listener_is_seen_as_ipv4() {
    let app = echo().await;
    let rules = r#"
[[virtual.web.rule]]
path = "^/inside"
source = ["127.0.0.0/8"]
pool = "app"
[[virtual.web.rule]]
path = "^/inside"
respond = { status = 403, body = "outside\n" }
"#;
    let text = SWITCH.replace("listen = \"127.0.0.1:0\"", "listen = \"[::]:0\"");
    assert_ne!(text, SWITCH);
    let switch = start_switch(
        &text,
        &[
            ("app", app.addr.to_string()),
            ("service", String::new()),
            ("rules", rules.to_string()),
        ],
    )
    .await;
    let port = switch.local_addr("web").unwrap().port();
    let v4 = SocketAddr::from(([127, 0, 0, 1], port));
    let v6 = SocketAddr::from((std::net::Ipv6Addr::LOCALHOST, port));
    let v4_client = IpAddr::from([127, 0, 0, 1]);
    let v6_client = IpAddr::from(std::net::Ipv6Addr::LOCALHOST);

    let r = exchange_from(v4_client, v4, &get_request("/inside", &[])).await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.text(), plain_head("GET", "/inside"));
    let r = exchange_from(
        v4_client,
        v4,
        &get_request("/inside", &["X-Forwarded-For: 192.0.2.1"]),
    )
    .await;
    assert_eq!(
        r.text(),
        "GET /inside HTTP/1.1\r\nHost: test\r\nX-Forwarded-For: 192.0.2.1, 127.0.0.1\r\n\r\n"
    );
    // The IPv6 client is outside 127.0.0.0/8, and X-Forwarded-For names it as it is.
    let r = exchange_from(v6_client, v6, &get_request("/inside", &[])).await;
    assert_eq!((r.status, r.text()), (403, "outside\n".to_string()));
    let r = exchange_from(v6_client, v6, &get_request("/public", &[])).await;
    assert_eq!(
        r.text(),
        "GET /public HTTP/1.1\r\nHost: test\r\nX-Forwarded-For: ::1\r\n\r\n"
    );
    assert_eq!(app.requests(), 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_proxy_protocol_the_address_in_the_header_decides() {
    let app = echo().await;
    let switch = policy_switch_with(app.addr, "proxy_protocol = true", ADMIN_ONLY).await;
    let addr = switch.local_addr("web").unwrap();
    // The connections all come from 127.0.0.1 (admitted on its own); the PROXY header names
    // the client, and that is the address the rule sees.
    for (proxy, admitted) in [
        ("PROXY TCP4 10.1.2.3 10.0.0.1 56324 80\r\n", true),
        ("PROXY TCP4 192.0.2.7 10.0.0.1 56324 80\r\n", false),
        ("PROXY TCP4 127.0.0.2 127.0.0.1 56324 80\r\n", false),
        ("PROXY TCP4 127.0.0.5 127.0.0.1 56324 80\r\n", true),
        ("PROXY TCP6 ::1 ::1 56324 80\r\n", true),
        ("PROXY TCP6 2001:db8::7 2001:db8::1 56324 80\r\n", false),
    ] {
        let mut client = Client::connect(addr).await;
        client.send(proxy.as_bytes()).await;
        client
            .send(b"GET /admin HTTP/1.1\r\nHost: test\r\n\r\n")
            .await;
        let r = client.response(false).await;
        if admitted {
            assert_eq!(r.status, 200, "{proxy:?}: {}", r.text());
        } else {
            assert_eq!(r.status, 403, "{proxy:?}");
            assert_eq!(r.body, b"forbidden\n");
        }
        // The rest of the connection keeps that client.
        client
            .send(b"GET /admin/again HTTP/1.1\r\nHost: test\r\n\r\n")
            .await;
        let again = client.response(false).await;
        assert_eq!(again.status, r.status, "{proxy:?}, second request");
    }
}

// ---------------------------------------------------------------- tcpvs check

/// A valid rule file with one of each policy piece; the cases below break one piece each.
const VALID_POLICY: &str = r#"[switch]
access_log = false

[virtual.web]
listen = "127.0.0.1:18601"
default_pool = "app"

[[virtual.web.rule]]
path = "^/http/"
redirect = { scheme = "https", code = 301 }

[[virtual.web.rule]]
host = '^old\.example\.org$'
path = "^/old/([a-z]+)/([0-9]+)$"
redirect = { host = "www.example.org", path = "/new/$2/$1", code = 308 }

[[virtual.web.rule]]
path = "^/admin"
source = ["10.0.0.0/8", "::1"]
pool = "app"

[[virtual.web.rule]]
path = "^/admin"
respond = { status = 403, body = "forbidden\n", content_type = "text/plain" }

[[virtual.web.rule]]
path = "^/images/(.*)$"
pool = "app"
path_rewrite = "/img/$1"
request_headers = { set = { "X-Pool" = "images" }, add = { "Via" = "1.1 tcpvs" }, remove = ["Cookie"] }
response_headers = { set = { "Strict-Transport-Security" = "max-age=31536000" }, remove = ["Server"] }
limit = "per-client"

[[virtual.web.rule]]
path = "^/static"
pool = "app"
strip_prefix = "/static"

[limit.per-client]
key = "source"
rate = "20/s"
burst = 40
status = 429
dry_run = false
max_keys = 100000

[pool.app]
servers = [{ addr = "127.0.0.1:9001" }]
"#;

struct Checked {
    code: i32,
    stdout: String,
    stderr: String,
    file: String,
}

/// `tcpvs check FILE` on `text` in a scratch file.
fn check(scratch: &Scratch, name: &str, text: &str) -> Checked {
    let path = scratch.file(name, text);
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_tcpvs"))
        .arg("check")
        .arg(&path)
        .output()
        .expect("run tcpvs check");
    Checked {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        file: path.display().to_string(),
    }
}

/// (line, column) of every occurrence of `needle` in `text`, 1-based.
fn positions_of(text: &str, needle: &str) -> Vec<(usize, usize)> {
    text.match_indices(needle)
        .map(|(at, _)| {
            let line = text[..at].matches('\n').count() + 1;
            let col = at - text[..at].rfind('\n').map_or(0, |i| i + 1) + 1;
            (line, col)
        })
        .collect()
}

#[test]
fn the_valid_policy_file_is_accepted() {
    let scratch = Scratch::new("policy-check-valid");
    let c = check(&scratch, "valid.toml", VALID_POLICY);
    assert_eq!(c.code, 0, "{}{}", c.stdout, c.stderr);
    assert!(c.stdout.contains(": ok: "), "{}", c.stdout);
}

/// Each case: what, the text replaced in VALID_POLICY and its replacement, the token the error
/// must point at (its first character, or a character inside it: the first after an opening
/// quote, or where `inner` starts, when not empty), and a word the message must contain (any case).
#[test]
fn each_policy_error_names_file_line_and_column() {
    let scratch = Scratch::new("policy-check-errors");
    let cases: &[[&str; 6]] = &[
        [
            "$3 with two groups (redirect)",
            "\"/new/$2/$1\"",
            "\"/new/$3/$1\"",
            "\"/new/$3/$1\"",
            "$3",
            "$3",
        ],
        [
            "$2 with one group (path_rewrite)",
            "path_rewrite = \"/img/$1\"",
            "path_rewrite = \"/img/$2\"",
            "\"/img/$2\"",
            "$2",
            "$2",
        ],
        [
            "a prefix past 32 bits",
            "\"10.0.0.0/8\"",
            "\"10.0.0.0/33\"",
            "\"10.0.0.0/33\"",
            "",
            "10.0.0.0/33",
        ],
        [
            "not an address",
            "\"::1\"",
            "\"10.0.0.256\"",
            "\"10.0.0.256\"",
            "",
            "10.0.0.256",
        ],
        [
            "a header name with a space",
            "\"X-Pool\" = \"images\"",
            "\"X Pool\" = \"images\"",
            "\"X Pool\"",
            "",
            "X Pool",
        ],
        [
            "a header name with a colon, to remove",
            "remove = [\"Server\"]",
            "remove = [\"Serv:er\"]",
            "\"Serv:er\"",
            "",
            "Serv:er",
        ],
        [
            "setting Host",
            "\"X-Pool\" = \"images\"",
            "\"Host\" = \"images\"",
            "\"Host\"",
            "",
            "host",
        ],
        [
            "adding Content-Length",
            "\"Via\" = \"1.1 tcpvs\"",
            "\"Content-Length\" = \"0\"",
            "\"Content-Length\"",
            "",
            "content-length",
        ],
        [
            "setting Transfer-Encoding on responses",
            "\"Strict-Transport-Security\" = \"max-age=31536000\"",
            "\"transfer-encoding\" = \"chunked\"",
            "\"transfer-encoding\"",
            "",
            "transfer-encoding",
        ],
        [
            "setting Connection",
            "\"X-Pool\" = \"images\"",
            "\"Connection\" = \"close\"",
            "\"Connection\"",
            "",
            "connection",
        ],
        [
            "an unknown limit",
            "limit = \"per-client\"",
            "limit = \"per-clinet\"",
            "\"per-clinet\"",
            "",
            "per-clinet",
        ],
        [
            "a rate without a unit",
            "rate = \"20/s\"",
            "rate = \"fast\"",
            "\"fast\"",
            "",
            "fast",
        ],
        [
            "a rate per fortnight",
            "rate = \"20/s\"",
            "rate = \"20/fortnight\"",
            "\"20/fortnight\"",
            "",
            "20/fortnight",
        ],
        [
            "a redirect code that is not a redirect",
            "code = 301",
            "code = 200",
            "200",
            "",
            "200",
        ],
    ];
    let mut failures = Vec::new();
    for [what, from, to, token, inner, word] in cases {
        assert!(
            VALID_POLICY.contains(from),
            "{what}: the case does not apply"
        );
        let broken = VALID_POLICY.replacen(from, to, 1);
        let c = check(&scratch, "broken.toml", &broken);
        if c.code != 1 {
            failures.push(format!(
                "{what}: exit {} (want 1): {}{}",
                c.code, c.stdout, c.stderr
            ));
            continue;
        }
        let (line, col) = positions_of(&broken, token)[0];
        let mut allowed = vec![col];
        if token.starts_with('"') {
            allowed.push(col + 1);
        }
        if !inner.is_empty() {
            allowed.extend(
                positions_of(&broken, inner)
                    .into_iter()
                    .filter(|(l, _)| *l == line)
                    .map(|(_, c)| c),
            );
        }
        let prefixes: Vec<String> = allowed
            .iter()
            .map(|col| format!("{}:{line}:{col}: ", c.file))
            .collect();
        // The error may come with others (in file order, each on its line): one of them is
        // this one, at its place, naming what is wrong.
        let at_place: Vec<&str> = c
            .stderr
            .lines()
            .filter(|l| prefixes.iter().any(|p| l.starts_with(p.as_str())))
            .collect();
        if at_place.is_empty() {
            failures.push(format!(
                "{what}: expected a line starting with one of {prefixes:?}, got {:?}",
                c.stderr
            ));
            continue;
        }
        if !at_place
            .iter()
            .any(|l| l.to_ascii_lowercase().contains(&word.to_ascii_lowercase()))
        {
            failures.push(format!("{what}: {at_place:?} does not name {word:?}"));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn a_rule_with_two_actions_is_refused() {
    let scratch = Scratch::new("policy-check-two-actions");
    for (what, from, to) in [
        (
            "pool and redirect",
            "redirect = { scheme = \"https\", code = 301 }\n",
            "redirect = { scheme = \"https\", code = 301 }\npool = \"app\"\n",
        ),
        (
            "respond and redirect",
            "respond = { status = 403, body = \"forbidden\\n\", content_type = \"text/plain\" }\n",
            "respond = { status = 403, body = \"forbidden\\n\", content_type = \"text/plain\" }\nredirect = { scheme = \"https\", code = 302 }\n",
        ),
    ] {
        assert!(VALID_POLICY.contains(from), "{what}: the case does not apply");
        let broken = VALID_POLICY.replacen(from, to, 1);
        let c = check(&scratch, "two.toml", &broken);
        assert_eq!(c.code, 1, "{what}: {}{}", c.stdout, c.stderr);
        // The error points into the rule: from its `[[virtual.web.rule]]` line to its last key.
        let last = broken.find(to).expect("the replacement") + to.len();
        let first_line = broken[..broken[..last - to.len()]
            .rfind("[[virtual.web.rule]]")
            .expect("the rule's header")]
            .matches('\n')
            .count()
            + 1;
        let last_line = broken[..last].matches('\n').count();
        // FILE:LINE:COL with LINE in the rule and COL at least 1, naming `redirect`.
        let in_rule = |l: &&str| {
            let Some(rest) = l.strip_prefix(&format!("{}:", c.file)) else {
                return false;
            };
            let mut parts = rest.splitn(3, ':');
            let line = parts.next().and_then(|n| n.parse::<usize>().ok());
            let col = parts.next().and_then(|n| n.parse::<usize>().ok());
            matches!((line, col), (Some(line), Some(col))
                if (first_line..=last_line).contains(&line) && col >= 1)
        };
        assert!(
            c.stderr
                .lines()
                .filter(in_rule)
                .any(|l| l.to_ascii_lowercase().contains("redirect")),
            "{what}: no error in the rule (lines {first_line}..={last_line}) naming `redirect`: {}",
            c.stderr
        );
    }
}

// ---------------------------------------------------------------- the access log

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_access_log_shows_the_target_as_the_client_sent_it() {
    let app = echo().await;
    let scratch = Scratch::new("policy-access-log");
    let log = scratch.0.join("access.log");
    let rules = format!(
        "{REWRITES}{RESPONDS}{REDIRECTS}\
         [[virtual.web.rule]]\npath = \"^/limited\"\npool = \"app\"\nlimit = \"one\"\n\
         [limit.one]\nkey = \"source\"\nrate = \"1/m\"\nburst = 1\n"
    );
    let text = SWITCH
        .replace(
            "access_log = false",
            &format!(
                "access_log = \"{}\"\naccess_log_format = \"json\"",
                log.to_str().expect("a UTF-8 path")
            ),
        )
        .replace("{service}", "")
        .replace("{rules}", &rules)
        .replace("{app}", &app.addr.to_string());
    let switch = start_switch(&text, &[]).await;
    let mut client = Client::connect(switch.local_addr("web").unwrap()).await;
    let sent = [
        ("/static/a?x=1", 200),
        ("/images/p.png", 200),
        ("/secure/p?q", 301),
        ("/forbidden", 403),
        ("/limited", 200),
        ("/limited?again", 429),
    ];
    for (target, status) in sent {
        let r = client.get(target).await;
        assert_eq!(r.status, status, "GET {target}");
        if r.header("connection") == Some("close") {
            client = Client::connect(switch.local_addr("web").unwrap()).await;
        }
    }
    // One line per request; wait (bounded) until all are written.
    let deadline = tokio::time::Instant::now() + PATIENCE;
    let lines: Vec<serde_json::Value> = loop {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        let complete = text.rfind('\n').map_or("", |end| &text[..=end]);
        let lines: Vec<serde_json::Value> = complete
            .lines()
            .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
            .collect();
        if lines.len() >= sent.len() {
            break lines;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{} access log lines of {}: {text}",
            lines.len(),
            sent.len()
        );
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    };
    let logged: Vec<(String, u64)> = lines
        .iter()
        .map(|l| {
            (
                l["target"].as_str().unwrap_or("").to_string(),
                l["status"].as_u64().unwrap_or(0),
            )
        })
        .collect();
    let expected: Vec<(String, u64)> = sent
        .iter()
        .map(|(t, s)| (t.to_string(), *s as u64))
        .collect();
    assert_eq!(logged, expected, "{lines:#?}");
}

/// The forms of one path that servers take for the same resource meet the rules as one: an
/// allow-list on `/admin` holds against `//admin`, `/x/../admin`, `/%61dmin` (the attack round
/// of issue 26 reached the default pool with each); the server still gets the path as sent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_rules_see_the_path_in_its_normal_form() {
    let app = echo().await;
    let switch = policy_switch(app.addr, ADMIN_ONLY).await;
    let addr = switch.local_addr("web").unwrap();
    let outsider = IpAddr::from([127, 0, 0, 2]);
    let insider = IpAddr::from([127, 0, 0, 1]);
    for path in [
        "//admin/x",
        "/./admin/x",
        "/public/../admin/x",
        "/%61dmin/x",
        "/%2e%2E/admin/x",
        "/admin//x",
        "/x/..%2Fadmin/x",
        "/x/..%5Cadmin/x",
    ] {
        let r = exchange_from(outsider, addr, &get_request(path, &[])).await;
        assert_eq!(r.status, 403, "{path} from outside");
        let r = exchange_from(insider, addr, &get_request(path, &[])).await;
        assert_eq!(r.status, 200, "{path} from inside");
        assert_eq!(
            request_line(&r.text()),
            format!("GET {path} HTTP/1.1"),
            "the server gets the path as sent"
        );
    }
    // `%2F` is a `/` to the rules, as nginx takes it.
    let r = exchange_from(outsider, addr, &get_request("/admin%2Fx", &[])).await;
    assert_eq!(r.status, 403);
    assert_eq!(app.requests(), 8);
}
