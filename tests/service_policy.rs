//! A service's own policy (issue 47; README, `[virtual.NAME]` `request_headers`,
//! `response_headers`, `error_pages`), end to end over loopback sockets: the service's field
//! actions on what servers answer and on every answer of the switch's own (a redirect, a
//! `respond`, a limit's 429, a 502 and a 503), over HTTP/1.1 and HTTP/2, a rule's actions after
//! the service's; its request fields as the server receives them; its error pages for 502, 503
//! and 504 (HEAD: the head only; gRPC calls keep their form), read again by a reload, and a
//! missing page refusing `tcpvs check` and a reload with FILE:LINE:COL.
//!
//! Verdicts rest on bytes: the head the echo server received, and the answer the client read,
//! byte for byte where the switch writes it all itself.

mod common;
#[path = "common/h2.rs"]
mod h2c;
#[path = "common/policy.rs"]
mod policy_common;

use common::*;
use policy_common::*;
use std::net::SocketAddr;
use tcpvs::state::status::State;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// A service with its own field actions, and rules of every kind. `down` is an address nobody
/// listens on: one failure takes it down for an hour (and no panic mode sends requests to it
/// anyway), so its first request gets 502 and the next ones 503.
const FIELDS: &str = r#"
[switch]
access_log = false
[virtual.web]
listen = "127.0.0.1:0"
default_pool = "app"
request_headers = { set = { "X-Site" = "web" }, add = { "Via" = "1.1 svc" }, remove = ["Cookie"] }
response_headers = { set = { "Strict-Transport-Security" = "max-age=60" }, add = { "X-Svc" = "1" }, remove = ["Server"] }
[[virtual.web.rule]]
path = "^/old"
redirect = { scheme = "https", code = 301 }
[[virtual.web.rule]]
path = "^/forbidden"
respond = { status = 403, body = "forbidden\n" }
[[virtual.web.rule]]
path = "^/limited"
pool = "app"
limit = "one"
[[virtual.web.rule]]
path = "^/down"
pool = "down"
[[virtual.web.rule]]
path = "^/rule"
pool = "app"
request_headers = { set = { "X-Site" = "rule" }, add = { "Via" = "1.1 rule" } }
response_headers = { set = { "X-Svc" = "rule" }, add = { "X-Rule" = "r" }, remove = ["Strict-Transport-Security"] }
[limit.one]
key = "source"
rate = "1/h"
burst = 1
[pool.app]
servers = [{ addr = "{app}" }]
[pool.down]
servers = [{ addr = "{down}" }]
[pool.down.health]
max_fails = 1
fail_timeout = "1h"
panic_threshold = 0
"#;

async fn fields_switch(app: SocketAddr) -> (tcpvs::Switch, SocketAddr) {
    let down = dead_address().await;
    let switch = start_switch(
        FIELDS,
        &[("app", app.to_string()), ("down", down.to_string())],
    )
    .await;
    (switch, down)
}

/// Waits until the server at `down` is down (its failure is reported to the pool's one
/// writer, state/control.rs, and seen by the next pick).
async fn until_down(switch: &tcpvs::Switch, down: SocketAddr) {
    wait_until(switch, "the server down", |s| {
        s.server(down).is_some_and(|c| c.state == State::Down)
    })
    .await;
}

/// Sends `request` on a new connection and reads until the switch closes it: the answer as
/// it came, byte for byte.
async fn raw_exchange(addr: SocketAddr, request: &str) -> String {
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut raw = Vec::new();
    tokio::time::timeout(PATIENCE, stream.read_to_end(&mut raw))
        .await
        .expect("the switch closes within PATIENCE")
        .unwrap();
    String::from_utf8(raw).unwrap()
}

/// The names and values of a response head's fields, in order.
fn head_fields(raw: &str) -> Vec<(String, String)> {
    let head = raw.split_once("\r\n\r\n").expect("a whole head").0;
    head.lines()
        .skip(1)
        .map(|line| {
            let (name, value) = line.split_once(": ").expect("a field");
            (name.to_string(), value.to_string())
        })
        .collect()
}

fn owned(fields: &[(&str, &str)]) -> Vec<(String, String)> {
    fields
        .iter()
        .map(|(n, v)| (n.to_string(), v.to_string()))
        .collect()
}

/// An HTTP/2 reply's values of `name`, in order.
fn h2_values(reply: &h2c::Reply, name: &str) -> Vec<String> {
    reply
        .headers
        .get_all(name)
        .iter()
        .map(|v| v.to_str().unwrap().to_string())
        .collect()
}

#[tokio::test]
async fn the_services_fields_reach_proxied_answers_the_rules_after_them() {
    let app = echo_with(&["Strict-Transport-Security: origin", "X-Svc: origin"]).await;
    let (switch, _) = fields_switch(app.addr).await;
    let web = switch.local_addr("web").unwrap();

    let plain = raw_exchange(web, &get_request("/", &[])).await;
    let fields = head_fields(&plain);
    let length = fields[0].1.clone();
    assert_eq!(
        fields,
        owned(&[
            ("Content-Length", &length),
            ("X-Svc", "origin"),
            ("Strict-Transport-Security", "max-age=60"),
            ("X-Svc", "1"),
            ("Connection", "close"),
        ]),
        "{plain}"
    );

    // The rule's actions after the service's: its set replaces the service's X-Svc, its remove
    // takes away what the service set, its add comes last.
    let ruled = raw_exchange(web, &get_request("/rule", &[])).await;
    let fields = head_fields(&ruled);
    let length = fields[0].1.clone();
    assert_eq!(
        fields,
        owned(&[
            ("Content-Length", &length),
            ("X-Svc", "rule"),
            ("X-Rule", "r"),
            ("Connection", "close"),
        ]),
        "{ruled}"
    );

    let h2 = h2c::H2::plain(web).await;
    let reply = h2.get("test", "/").await;
    assert_eq!(reply.status, 200);
    assert_eq!(h2_values(&reply, "server"), Vec::<String>::new());
    assert_eq!(
        h2_values(&reply, "strict-transport-security"),
        ["max-age=60"]
    );
    assert_eq!(h2_values(&reply, "x-svc"), ["origin", "1"]);
    let reply = h2.get("test", "/rule").await;
    assert_eq!(
        h2_values(&reply, "strict-transport-security"),
        Vec::<String>::new()
    );
    assert_eq!(h2_values(&reply, "x-svc"), ["rule"]);
    assert_eq!(h2_values(&reply, "x-rule"), ["r"]);
}

#[tokio::test]
async fn the_services_request_fields_reach_the_server_the_rules_after_them() {
    let app = echo().await;
    let (switch, _) = fields_switch(app.addr).await;
    let web = switch.local_addr("web").unwrap();

    let request = get_request("/", &["Cookie: a=1", "X-Site: client", "Via: 1.0 client"]);
    exchange(web, &request).await;
    assert_eq!(
        app.last_head(),
        "GET / HTTP/1.1\r\nHost: test\r\nVia: 1.0 client\r\n\
         X-Forwarded-For: 127.0.0.1\r\nX-Site: web\r\nVia: 1.1 svc\r\n\r\n"
    );
    let request = get_request("/rule", &["Cookie: a=1", "X-Site: client"]);
    exchange(web, &request).await;
    assert_eq!(
        app.last_head(),
        "GET /rule HTTP/1.1\r\nHost: test\r\n\
         X-Forwarded-For: 127.0.0.1\r\nVia: 1.1 svc\r\nX-Site: rule\r\nVia: 1.1 rule\r\n\r\n"
    );

    let h2 = h2c::H2::plain(web).await;
    let request = h2c::request("GET", "test", "/rule", &[("cookie", "b=2")]);
    h2.exchange(request, h2c::Upload::None).await.unwrap();
    let head = app.last_head();
    assert_eq!(values(&head, "cookie"), Vec::<String>::new(), "{head}");
    assert_eq!(values(&head, "x-site"), ["rule"], "{head}");
    assert_eq!(values(&head, "via"), ["1.1 svc", "1.1 rule"], "{head}");
}

#[tokio::test]
async fn the_services_fields_reach_the_switchs_own_answers() {
    let app = echo().await;
    let (switch, down) = fields_switch(app.addr).await;
    let web = switch.local_addr("web").unwrap();
    const SERVICE: &str = "Strict-Transport-Security: max-age=60\r\nX-Svc: 1\r\n";

    assert_eq!(
        raw_exchange(web, &get_request("/old/a?b", &[])).await,
        format!(
            "HTTP/1.1 301 Moved Permanently\r\nLocation: https://test/old/a?b\r\n{SERVICE}\
             Content-Length: 0\r\nConnection: close\r\n\r\n"
        )
    );
    assert_eq!(
        raw_exchange(web, &get_request("/forbidden", &[])).await,
        format!(
            "HTTP/1.1 403 Forbidden\r\nContent-Type: text/plain\r\n{SERVICE}\
             Content-Length: 10\r\nConnection: close\r\n\r\nforbidden\n"
        )
    );
    assert_eq!(
        raw_exchange(web, &get_request("/down", &[])).await,
        format!(
            "HTTP/1.1 502 Bad Gateway\r\nContent-Type: text/plain\r\nCache-Control: no-store\r\n\
             {SERVICE}Content-Length: 51\r\nConnection: close\r\n\r\n\
             502 Bad Gateway: no server accepted the connection\n"
        )
    );
    // One failure took the only server down.
    until_down(&switch, down).await;
    assert_eq!(
        raw_exchange(web, &get_request("/down", &[])).await,
        format!(
            "HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain\r\n\
             Cache-Control: no-store\r\n{SERVICE}Content-Length: 45\r\nConnection: close\r\n\r\n\
             503 Service Unavailable: no server available\n"
        )
    );
    assert!(raw_exchange(web, &get_request("/limited", &[]))
        .await
        .starts_with("HTTP/1.1 200 OK\r\n"));
    let refused = raw_exchange(web, &get_request("/limited", &[])).await;
    let names: Vec<String> = head_fields(&refused).into_iter().map(|(n, _)| n).collect();
    assert_eq!(
        names,
        [
            "Content-Type",
            "Retry-After",
            "RateLimit-Policy",
            "RateLimit",
            "Strict-Transport-Security",
            "X-Svc",
            "Content-Length",
            "Connection"
        ],
        "{refused}"
    );
    assert!(refused.starts_with("HTTP/1.1 429 Too Many Requests\r\n"));

    // HTTP/2: the same answers with the same fields (the limit's key is spent already).
    let h2 = h2c::H2::plain(web).await;
    for (path, status) in [
        ("/old", 301),
        ("/forbidden", 403),
        ("/limited", 429),
        ("/down", 503),
    ] {
        let reply = h2.get("test", path).await;
        assert_eq!(reply.status, status, "{path}");
        assert_eq!(
            h2_values(&reply, "strict-transport-security"),
            ["max-age=60"],
            "{path}"
        );
        assert_eq!(h2_values(&reply, "x-svc"), ["1"], "{path}");
    }
}

/// A service with pages for its 502, 503 and 504: `down` as in [`FIELDS`], `silent` a server
/// that never answers, within an `idle_timeout` short enough for the 504 to come soon.
const PAGES: &str = r#"
[switch]
access_log = false
idle_timeout = "1s"
[virtual.web]
listen = "127.0.0.1:0"
default_pool = "down"
error_pages = { 502 = "502.html", 503 = "503.html", 504 = "504.html" }
[[virtual.web.rule]]
path = "^/silent"
pool = "silent"
[pool.down]
servers = [{ addr = "{down}" }]
[pool.down.health]
max_fails = 1
fail_timeout = "1h"
panic_threshold = 0
[pool.silent]
servers = [{ addr = "{silent}" }]
"#;

const PAGE_502: &str = "<!doctype html>\n<h1>Our servers are having a moment</h1>\n";
const PAGE_503: &str = "<!doctype html>\n<h1>Back soon</h1>\n";
const PAGE_504: &str = "<!doctype html>\n<h1>That took too long</h1>\n";

/// The rule file and its pages in `scratch`, the file's path.
/// The rule file and its pages in `scratch`: the file's path, and the address nobody listens
/// on.
async fn write_pages_file(
    scratch: &Scratch,
    silent: SocketAddr,
) -> (std::path::PathBuf, SocketAddr) {
    scratch.file("502.html", PAGE_502);
    scratch.file("503.html", PAGE_503);
    scratch.file("504.html", PAGE_504);
    let down = dead_address().await;
    let text = PAGES
        .replace("{down}", &down.to_string())
        .replace("{silent}", &silent.to_string());
    (scratch.file("rules.toml", &text), down)
}

async fn start_from(path: &std::path::Path) -> tcpvs::Switch {
    let config = tcpvs::Config::load(path).unwrap_or_else(|e| panic!("{e}"));
    tcpvs::Switch::start(config).await.unwrap()
}

fn page_answer(status: &str, page: &str) -> String {
    format!(
        "HTTP/1.1 {status}\r\nContent-Type: text/html\r\nCache-Control: no-store\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{page}",
        page.len()
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn error_pages_answer_the_switchs_own_502_503_504() {
    let silent = backend().await;
    let scratch = Scratch::new("service_pages");
    let (file, down) = write_pages_file(&scratch, silent.addr).await;
    let switch = start_from(&file).await;
    let web = switch.local_addr("web").unwrap();

    let head = "HEAD / HTTP/1.1\r\nHost: test\r\nConnection: close\r\n\r\n";
    let head_only = raw_exchange(web, head).await;
    let whole = page_answer("502 Bad Gateway", PAGE_502);
    assert_eq!(head_only, whole.strip_suffix(PAGE_502).unwrap());
    until_down(&switch, down).await;
    assert_eq!(
        raw_exchange(web, &get_request("/", &[])).await,
        page_answer("503 Service Unavailable", PAGE_503)
    );
    assert_eq!(
        raw_exchange(web, &get_request("/silent", &[])).await,
        page_answer("504 Gateway Timeout", PAGE_504)
    );

    let h2 = h2c::H2::plain(web).await;
    let reply = h2.get("test", "/").await;
    assert_eq!(reply.status, 503);
    assert_eq!(reply.header("content-type"), Some("text/html"));
    assert_eq!(reply.text(), PAGE_503);
    let request = h2c::request("HEAD", "test", "/", &[]);
    let reply = h2.exchange(request, h2c::Upload::None).await.unwrap();
    assert_eq!(reply.status, 503);
    assert_eq!(
        reply.header("content-length"),
        Some(PAGE_503.len().to_string().as_str())
    );
    assert!(reply.body.is_empty());
    // A gRPC call keeps the gRPC form: no page.
    let request = h2c::request("POST", "test", "/", &[("content-type", "application/grpc")]);
    let reply = h2.exchange(request, h2c::Upload::None).await.unwrap();
    assert_eq!(reply.header("content-type"), Some("application/grpc"));
    assert!(reply.header("grpc-status").is_some());
    assert!(reply.body.is_empty(), "{}", reply.text());
}

#[tokio::test]
async fn a_reload_reads_the_pages_again_and_a_missing_one_keeps_the_old_config() {
    let silent = backend().await;
    let scratch = Scratch::new("service_pages_reload");
    let (file, down) = write_pages_file(&scratch, silent.addr).await;
    let switch = start_from(&file).await;
    let web = switch.local_addr("web").unwrap();
    // The first request takes the server down: 503s from then on.
    raw_exchange(web, &get_request("/", &[])).await;
    until_down(&switch, down).await;
    assert_eq!(
        raw_exchange(web, &get_request("/", &[])).await,
        page_answer("503 Service Unavailable", PAGE_503)
    );

    let changed = "<!doctype html>\n<h1>Maintenance until noon</h1>\n";
    scratch.file("503.html", changed);
    switch.reload().expect("the pages are there");
    assert_eq!(
        raw_exchange(web, &get_request("/", &[])).await,
        page_answer("503 Service Unavailable", changed)
    );

    std::fs::remove_file(scratch.0.join("503.html")).unwrap();
    let refused = switch.reload().expect_err("a page is missing").to_string();
    let text = std::fs::read_to_string(&file).unwrap();
    let (line, col) = position_of(&text, "\"503.html\"");
    let at = format!(
        "{}:{line}:{col}: `error_pages`: 503.html: cannot read it",
        file.display()
    );
    assert!(refused.contains(&at), "{refused}\nwants {at}");
    assert_eq!(
        raw_exchange(web, &get_request("/", &[])).await,
        page_answer("503 Service Unavailable", changed),
        "the old configuration stays"
    );
}

#[test]
fn check_reads_the_pages_and_their_statuses() {
    let scratch = Scratch::new("service_pages_check");
    scratch.file("503.html", PAGE_503);
    let text = "[virtual.web]\nlisten = \"127.0.0.1:18571\"\ndefault_pool = \"app\"\n\
                error_pages = { 503 = \"503.html\", 502 = \"gone.html\", 404 = \"503.html\" }\n\
                [pool.app]\nservers = [{ addr = \"127.0.0.1:9001\" }]\n";
    let file = scratch.file("rules.toml", text);
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_tcpvs"))
        .arg("check")
        .arg(&file)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_ne!(out.status.code(), Some(0), "{stderr}");
    let (line, col) = position_of(text, "\"gone.html\"");
    let missing = format!(
        "{}:{line}:{col}: `error_pages`: gone.html: cannot read it",
        file.display()
    );
    assert!(stderr.contains(&missing), "{stderr}\nwants {missing}");
    let (line, col) = position_of(text, "404");
    let status = format!(
        "{}:{line}:{col}: `error_pages`: \"404\" is not a status",
        file.display()
    );
    assert!(stderr.contains(&status), "{stderr}\nwants {status}");
    assert!(!stderr.contains("503.html"), "{stderr}");
}

/// An HTTP/2 stream refused at once (over `max_conns_per_source`) carries the service's
/// fields and the body its `content-length` announces: a client would otherwise reset the
/// stream as malformed (the body was left out once, when the answer was dressed).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_http2_stream_refused_at_once_is_whole_with_the_services_fields() {
    let app = backend().await;
    let switch = start_switch(
        r#"
[switch]
access_log = false
[virtual.web]
listen = "127.0.0.1:0"
default_pool = "app"
max_conns_per_source = 1
response_headers = { add = { "X-Svc" = "1" } }
[pool.app]
servers = [{ addr = "{app}" }]
"#,
        &[("app", app.addr.to_string())],
    )
    .await;
    let addr = switch.local_addr("web").unwrap();
    let h2 = h2c::H2::plain(addr).await;
    // One stream held at the server takes the address's one place.
    let held = {
        let streams = h2.streams();
        tokio::spawn(async move { streams.get("test", "/hold").await })
    };
    app.wait_for_requests(1).await;
    let refused = h2.get("test", "/next").await;
    assert_eq!(refused.status, 503);
    assert_eq!(h2_values(&refused, "x-svc"), ["1"]);
    let length: usize = h2_values(&refused, "content-length")[0].parse().unwrap();
    assert!(length > 0);
    assert_eq!(refused.body.len(), length, "{:?}", refused.text());
    app.release(1);
    let held = held.await.unwrap();
    assert_eq!((held.status, held.text().as_str()), (200, "0123456789"));
}
