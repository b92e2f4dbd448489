//! `tcpvs import-ktcpvs`: KTCPVS configurations, written as tcpvsadm(8) and KTCPVS's EXAMPLES
//! write them, converted, checked, and run against real backends: requests that match each
//! KTCPVS rule must reach the servers KTCPVS would have picked (`X-Served-By`). Plus the
//! warnings for what has no equivalent, and errors with line and column for broken files.
//!
//! The KTCPVS files name the test's backends (loopback, ports of the moment) where the
//! originals name 192.168.x.y:80; their listen address is 127.0.0.1:0.

mod common;

use common::*;
use std::collections::{HashMap, HashSet};
use std::net::SocketAddr;
use std::process::Command;
use tcpvs::import_ktcpvs::{import, Report};

/// `text` with `{name}` replaced by each backend's address.
fn fill(text: &str, vars: &[(&str, SocketAddr)]) -> String {
    let mut text = text.to_string();
    for (name, addr) in vars {
        text = text.replace(&format!("{{{name}}}"), &addr.to_string());
    }
    text
}

/// Converts, and checks that the result is a rule file tcpvs accepts without a complaint.
fn convert(ktcpvs: &str) -> Report {
    let report = import("ktcpvs.conf", ktcpvs);
    assert!(
        report.is_ok(),
        "errors for:\n{ktcpvs}\n{:#?}",
        report.errors
    );
    if let Err(e) = tcpvs::Config::parse("converted.toml", &report.rules) {
        panic!("the converted file is refused:\n{}\n{e}", report.rules);
    }
    report
}

async fn start(report: &Report) -> tcpvs::Switch {
    let mut config = tcpvs::Config::parse("converted.toml", &report.rules).unwrap();
    config.switch.access_log = tcpvs::config::AccessLogTarget::Off;
    tcpvs::Switch::start(config).await.unwrap()
}

fn warned(report: &Report, line: usize, words: &str) -> bool {
    report
        .warnings
        .iter()
        .any(|w| w.line == line && w.message.contains(words))
}

/// The servers that answered `paths` on one keep-alive connection.
async fn served(addr: SocketAddr, paths: &[&str]) -> Vec<String> {
    let mut client = Client::connect(addr).await;
    let mut by = Vec::new();
    for path in paths {
        let r = client.get(path).await;
        assert_eq!(r.status, 200, "{path}: {}", r.text());
        by.push(r.served_by());
    }
    by
}

/// The tcpvsadm(8) example: CGI to one server, pictures to another, `.*` for the rest.
const MAN_PAGE: &str = r#"# /etc/tcpvs.conf, as in tcpvsadm(8)
virtual web {
    listen = 127.0.0.1:0
    scheduler = http
    startservers = 8
    maxclients = 256
    minspareservers = 6
    maxspareservers = 18
    server = {rest} 1
    server = {images} 1
    server = {cgi} 1
    rule = pattern "^/cgi-bin/"  use server {cgi}
    rule = pattern "^/images/"  use server {images}
    rule = pattern ".*"  use server {rest}
}
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_man_page_example_routes_cgi_images_and_the_rest_as_ktcpvs_did() {
    let (rest, images, cgi) = (backend().await, backend().await, backend().await);
    let report = convert(&fill(
        MAN_PAGE,
        &[
            ("rest", rest.addr),
            ("images", images.addr),
            ("cgi", cgi.addr),
        ],
    ));
    let switch = start(&report).await;
    let addr = switch.local_addr("web").unwrap();
    let by = served(
        addr,
        &[
            "/cgi-bin/env.pl",
            "/images/logo.png",
            "/index.html",
            "/",
            "/cgi-bin/search?q=/images/",
            "/img/not-images.png",
            "/IMAGES/upper.png",
        ],
    )
    .await;
    let (rest, images, cgi) = (
        rest.addr.to_string(),
        images.addr.to_string(),
        cgi.addr.to_string(),
    );
    assert_eq!(
        by,
        [&cgi, &images, &rest, &rest, &cgi, &rest, &rest].map(String::as_str)
    );
    // The process knobs: a warning each, and a comment; maxclients -> max_clients.
    for (line, knob) in [
        (5, "startservers = 8"),
        (7, "minspareservers = 6"),
        (8, "maxspareservers = 18"),
    ] {
        assert!(
            warned(&report, line, &format!("{knob} has no equivalent")),
            "{:#?}",
            report.warnings
        );
        assert!(
            report
                .rules
                .contains(&format!("# ktcpvs line {line}: {knob} -- no equivalent")),
            "{}",
            report.rules
        );
    }
    assert!(warned(&report, 6, "max_clients = 256"));
    assert!(
        report.rules.contains("\n[switch]\nmax_clients = 256"),
        "{}",
        report.rules
    );
}

/// KTCPVS tried the rule written last first (each went to the front of the list), and `.*`
/// last of all: a picture under /img/ goes to the /img/ server, not the GIF server.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn overlapping_rules_are_tried_in_ktcpvs_order_not_file_order() {
    let (gifs, img, rest) = (backend().await, backend().await, backend().await);
    let report = convert(&fill(
        r#"virtual web {
    listen = 127.0.0.1:0
    scheduler = http
    startservers = 2
    server = {gifs} 1
    server = {img} 1
    server = {rest} 1
    rule = pattern ".*" use server {rest}
    rule = pattern "\.gif$" use server {gifs}
    rule = pattern "^/img/" use server {img}
}
"#,
        &[("gifs", gifs.addr), ("img", img.addr), ("rest", rest.addr)],
    ));
    let at_img = report.rules.find("path = '^/img/'").unwrap();
    let at_gif = report.rules.find(r"path = '\.gif$'").unwrap();
    assert!(at_img < at_gif, "{}", report.rules);
    let switch = start(&report).await;
    let by = served(
        switch.local_addr("web").unwrap(),
        &["/img/a.gif", "/a.gif", "/img/b.png", "/c.png"],
    )
    .await;
    let names = [&img, &gifs, &img, &rest].map(|b| b.addr.to_string());
    assert_eq!(by, names);
    // KTCPVS matched `$` at the end of the whole URI, query included: said, not hidden.
    assert!(warned(&report, 9, "`$`"), "{:#?}", report.warnings);
}

/// KTCPVS's EXAMPLES: `hhttp` hashes capture 1, the user name, so each user's pages stay on
/// one server; requests that match no rule got no server.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hhttp_keeps_each_user_on_one_server_like_the_examples_file() {
    let backends = [backend().await, backend().await, backend().await];
    let report = convert(&fill(
        r#"Virtual web {
    listen = 127.0.0.1:0
    scheduler = hhttp
    startservers = 8
    maxclients = 256
    minspareservers = 6
    maxspareservers = 18
    server = {a} 1
    server = {b} 1
    server = {c} 1
    rule = pattern "/users/([^/]+)/.*" match 1 use server {a}
    rule = pattern "/users/([^/]+)/.*" match 1 use server {b}
    rule = pattern "/users/([^/]+)/.*" match 1 use server {c}
}
"#,
        &[
            ("a", backends[0].addr),
            ("b", backends[1].addr),
            ("c", backends[2].addr),
        ],
    ));
    assert!(
        report.rules.contains("scheduler = \"hash\""),
        "{}",
        report.rules
    );
    let switch = start(&report).await;
    let addr = switch.local_addr("web").unwrap();
    let mut home: HashMap<String, String> = HashMap::new();
    let mut client = Client::connect(addr).await;
    for round in 0..3 {
        for user in 0..40 {
            let r = client
                .get(&format!("/users/user{user}/page{round}.html"))
                .await;
            assert_eq!(r.status, 200);
            let server = home.entry(format!("user{user}")).or_insert(r.served_by());
            assert_eq!(*server, r.served_by(), "user{user} moved in round {round}");
        }
    }
    let used: HashSet<&String> = home.values().collect();
    assert!(used.len() >= 2, "40 users all on one server: {home:?}");
    // KTCPVS closed connections that matched no rule; tcpvs answers 503.
    assert_eq!(client.get("/about.html").await.status, 503);
    assert!(
        warned(&report, 1, "match no rule"),
        "{:#?}",
        report.warnings
    );
}

/// `chttp`: a client keeps its server by the KTCPVS_SID cookie; other paths go by the rules.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chttp_keeps_a_client_on_its_server_by_cookie() {
    let (one, two, rest) = (backend().await, backend().await, backend().await);
    let report = convert(&fill(
        r#"virtual shop {
    listen = 127.0.0.1:0
    scheduler = chttp
    startservers = 4
    server = {one} 1
    server = {two} 1
    server = {rest} 1
    rule = pattern "^/shop/" use server {one}
    rule = pattern "^/shop/" use server {two}
    rule = pattern "^/.*" use server {rest}
}
"#,
        &[("one", one.addr), ("two", two.addr), ("rest", rest.addr)],
    ));
    assert!(
        report.rules.contains("name = \"KTCPVS_SID\""),
        "{}",
        report.rules
    );
    let switch = start(&report).await;
    let addr = switch.local_addr("shop").unwrap();
    let mut homes = HashSet::new();
    for shopper in 0..6 {
        let mut client = Client::connect(addr).await;
        let first = client.get("/shop/cart").await;
        let cookie = first
            .header("set-cookie")
            .and_then(|v| v.split(';').next())
            .and_then(|pair| pair.strip_prefix("KTCPVS_SID="))
            .unwrap_or_else(|| panic!("no KTCPVS_SID cookie: {:?}", first.headers))
            .to_string();
        let home = first.served_by();
        assert_ne!(home, rest.addr.to_string());
        for page in 0..4 {
            let mut c = Client::connect(addr).await;
            c.send(
                format!(
                    "GET /shop/item/{page} HTTP/1.1\r\nHost: t\r\nCookie: KTCPVS_SID={cookie}\r\n\r\n"
                )
                .as_bytes(),
            )
            .await;
            let r = c.response(false).await;
            assert_eq!(r.served_by(), home, "shopper {shopper}, page {page}");
        }
        homes.insert(home);
        wait_until(&switch, "the shopper's requests ended", |s| {
            s.servers.iter().all(|server| server.active == 0)
        })
        .await;
    }
    assert_eq!(homes.len(), 2, "new shoppers are spread over both servers");
    assert_eq!(served(addr, &["/help.html"]).await, [rest.addr.to_string()]);
}

/// `wlc` over all servers by weight; `redirect` takes what no rule matches and what the
/// rule's servers cannot serve (a backup server of each pool).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wlc_weights_and_the_redirect_address() {
    let (light, heavy) = (backend().await, backend().await);
    let report = convert(&fill(
        "virtual plain {\n listen = 127.0.0.1:0\n scheduler = wlc\n startservers = 2\n\
         server = {light} 1\n server = {heavy} 2\n}\n",
        &[("light", light.addr), ("heavy", heavy.addr)],
    ));
    let switch = start(&report).await;
    let mut client = Client::connect(switch.local_addr("plain").unwrap()).await;
    let mut heavy_share = 0;
    for i in 0..30 {
        // Each pick sees an idle pool: weighted least-connection then shares by weight.
        wait_until(&switch, "no request in flight", |s| {
            s.servers.iter().all(|server| server.active == 0)
        })
        .await;
        let r = client.get(&format!("/{i}")).await;
        heavy_share += usize::from(r.served_by() == heavy.addr.to_string());
    }
    assert!(
        (19..=21).contains(&heavy_share),
        "weight 2 of 3 got {heavy_share} of 30"
    );

    let (app, sorry) = (backend().await, backend().await);
    let dead = dead_address().await;
    let report = convert(&fill(
        "virtual web {\n listen = 127.0.0.1:0\n scheduler = http\n startservers = 2\n\
         redirect = {sorry}\n server = {app} 1\n server = {dead} 1\n\
         rule = pattern \"^/app/\" use server {app}\n\
         rule = pattern \"^/broken/\" use server {dead}\n}\n",
        &[("app", app.addr), ("sorry", sorry.addr), ("dead", dead)],
    ));
    let switch = start(&report).await;
    let by = served(
        switch.local_addr("web").unwrap(),
        &["/app/x", "/elsewhere", "/broken/y"],
    )
    .await;
    let sorry = sorry.addr.to_string();
    assert_eq!(by, [app.addr.to_string(), sorry.clone(), sorry]);
}

/// Service names and host names as tcpvsadm resolved them; checked, not run (the ports are
/// the well-known ones).
#[test]
fn service_and_host_names_resolve_as_tcpvsadm_resolved_them() {
    let report = convert(
        "Virtual proxy {\n\
         \tLISTEN = 0.0.0.0:webcache\n\
         \tScheduler = wlc\n\
         \tserver = localhost:www 3   # the local Apache\n\
         \tserver = 10.0.0.7:http-alt 1\n\
         \tserver = 10.2:https 1\n\
         }\n",
    );
    let r = &report.rules;
    assert!(r.contains("listen = \"0.0.0.0:8080\""), "{r}");
    assert!(r.contains("{ addr = \"127.0.0.1:80\", weight = 3 }"), "{r}");
    assert!(
        r.contains("{ addr = \"10.0.0.7:8080\", weight = 1 }"),
        "{r}"
    );
    assert!(r.contains("{ addr = \"10.0.0.2:443\", weight = 1 }"), "{r}");
    assert!(
        warned(&report, 4, "host name `localhost`"),
        "{:#?}",
        report.warnings
    );
    assert!(warned(&report, 6, "as 10.0.0.2"), "{:#?}", report.warnings);
}

fn run_import(name: &str, text: &str) -> (i32, String, String, String) {
    let scratch = Scratch::new(&format!("import-{name}"));
    let path = scratch.file(name, text);
    let out = Command::new(env!("CARGO_BIN_EXE_tcpvs"))
        .arg("import-ktcpvs")
        .arg(&path)
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
        path.display().to_string(),
    )
}

#[test]
fn the_command_prints_the_rule_file_and_warns_on_stderr() {
    let text = fill(
        MAN_PAGE,
        &[
            ("rest", "10.0.0.3:80".parse().unwrap()),
            ("images", "10.0.0.2:80".parse().unwrap()),
            ("cgi", "10.0.0.1:80".parse().unwrap()),
        ],
    );
    let (code, stdout, stderr, file) = run_import("tcpvs.conf", &text);
    assert_eq!(code, 0, "{stderr}");
    tcpvs::Config::parse("out.toml", &stdout).unwrap_or_else(|e| panic!("{stdout}\n{e}"));
    let lines: Vec<&str> = stderr.lines().collect();
    assert_eq!(lines.len(), 4, "{stderr}");
    assert!(
        lines[0].starts_with(&format!(
            "{file}:5: warning: startservers = 8 has no equivalent"
        )),
        "{stderr}"
    );
    assert!(
        lines[1].starts_with(&format!("{file}:6: warning: maxclients")),
        "{stderr}"
    );

    // `tcpvs check` agrees, without a warning.
    let scratch = Scratch::new("import-check");
    let converted = scratch.file("converted.toml", &stdout);
    let check = Command::new(env!("CARGO_BIN_EXE_tcpvs"))
        .arg("check")
        .arg(&converted)
        .output()
        .unwrap();
    assert_eq!(check.status.code(), Some(0));
    assert_eq!(String::from_utf8_lossy(&check.stderr), "");
}

#[test]
fn a_broken_file_gets_every_error_with_line_and_column_and_exit_1() {
    let broken = "# two mistakes per service\n\
                  virtual web {\n\
                  \x20   listen = 0.0.0.0:80\n\
                  \x20   scheduler = http\n\
                  \x20   server = 10.0.0.1:80 1\n\
                  \x20   server=10.0.0.2:80 1\n\
                  \x20   rule = pattern \"^/(img\" use server 10.0.0.1:80\n\
                  }\n\
                  virtual img {\n\
                  \x20   listen = 0.0.0.0:8080\n\
                  \x20   scheduler = hhttp\n\
                  \x20   server = 10.0.0.3:80 0\n\
                  \x20   rule = pattern \"^/\" use server 10.0.0.9:80\n\
                  }\n";
    let (code, stdout, stderr, file) = run_import("broken.conf", broken);
    assert_eq!(code, 1, "{stderr}");
    assert_eq!(stdout, "");
    let lines: Vec<&str> = stderr.lines().collect();
    let expected = [
        (6, 5, "write `server = 10.0.0.2:80` with spaces around `=`"),
        (
            7,
            23,
            "invalid pattern \"^/(img\": unmatched `(` (REG_EPAREN)",
        ),
        (12, 26, "weight `0` is not a number 1..65535"),
        (
            13,
            36,
            "server 10.0.0.9:80 is not a `server` of `virtual img`",
        ),
    ];
    assert_eq!(lines.len(), expected.len(), "{stderr}");
    for ((line, col, message), got) in expected.iter().zip(&lines) {
        let want = format!("{file}:{line}:{col}: {message}");
        assert!(got.starts_with(&want), "expected {want}\n got {got}");
    }
    // The positions are where the text is.
    let (line, col) = position_of(broken, "server=10.0.0.2");
    assert_eq!((line, col), (6, 5));
    assert_eq!(position_of(broken, "(img"), (7, 23));
    assert_eq!(position_of(broken, "80 0\n"), (12, 23));
    assert_eq!(position_of(broken, "10.0.0.9"), (13, 36));
}

#[test]
fn phttp_and_unused_parts_become_comments_and_warnings() {
    let report = convert(
        "virtual app {\n\
         \x20 listen = 10.0.0.100:80\n\
         \x20 scheduler = phttp\n\
         \x20 startservers = 4\n\
         \x20 server = 10.0.0.1:80 1\n\
         \x20 server = 10.0.0.2:80 1\n\
         \x20 server = 10.0.0.3:80 1\n\
         \x20 server = 10.0.0.4:80 1\n\
         \x20 rule = pattern \"^/u/([a-z]+)/\" match 1 use server 10.0.0.1:80\n\
         \x20 rule = pattern \"^/u/([a-z]+)/\" match 1 use server 10.0.0.2:80\n\
         \x20 rule = pattern \"^/static/\" use server 10.0.0.3:80\n\
         }\n",
    );
    let r = &report.rules;
    assert!(
        r.contains("pattern = '^/u/([a-z]+)/'\ngroup = 1\nbalance_factor = 0"),
        "{r}"
    );
    assert!(
        r.contains("# ktcpvs line 8: server = 10.0.0.4:80 1 -- in no rule"),
        "{r}"
    );
    assert!(warned(&report, 8, "in no rule"), "{:#?}", report.warnings);
    assert!(warned(&report, 1, "phttp"), "{:#?}", report.warnings);
    assert!(r.contains("default_pool = \"app-static\""), "{r}");
}

/// The README's one-line form (`virtual NAME { listen = ...; scheduler = ...; server = HOST:PORT
/// WEIGHT; rule = pattern "ERE" use server HOST:PORT; ... }`), two services on one line with
/// `;` between the statements and after the braces: converted by the command, accepted by
/// `tcpvs check` without a warning, and routing as the same file written one statement a line.
/// A `;` that ends an unquoted pattern stays in the pattern, as tcpvsadm read it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_readmes_one_line_form_converts_checks_and_routes() {
    let (rest, images, cgi) = (backend().await, backend().await, backend().await);
    let one_line = fill(
        "virtual web { listen = 127.0.0.1:0; scheduler = http; startservers = 8; \
         server = {rest} 1; server = {images} 2; server = {cgi} 1; \
         rule = pattern \"^/images/\" use server {images}; \
         rule = pattern ^/cgi-bin/a; use server {cgi}; \
         rule = pattern \".*\" use server {rest}; }; \
         virtual all { listen = 127.0.0.1:0; scheduler = wlc; server = {rest} 3; }\n",
        &[
            ("rest", rest.addr),
            ("images", images.addr),
            ("cgi", cgi.addr),
        ],
    );
    let (code, stdout, stderr, _) = run_import("one-line.conf", &one_line);
    assert_eq!(code, 0, "{stderr}");
    // The warnings the same file on several lines gets: startservers, and no thread for `all`.
    assert_eq!(stderr.lines().count(), 2, "{stderr}");
    assert!(
        stderr.contains(":1: warning: startservers = 8 has no equivalent")
            && stderr.contains(":1: warning: KTCPVS started no thread for `virtual all`"),
        "{stderr}"
    );
    let (images, cgi, rest) = (images.addr, cgi.addr, rest.addr);
    // Each comment quotes its own statement, not the whole line.
    for expected in [
        "[virtual.web]  # ktcpvs line 1: virtual web { (scheduler http)\n".to_string(),
        format!(
            "[[virtual.web.rule]]  # ktcpvs line 1: rule = pattern \"^/images/\" use server {images}\n\
             path = '^/images/'\n"
        ),
        format!(
            "[[virtual.web.rule]]  # ktcpvs line 1: rule = pattern ^/cgi-bin/a; use server {cgi}\n\
             path = '^/cgi-bin/a;'\n"
        ),
        format!(
            "  {{ addr = \"{images}\", weight = 2 }},  # ktcpvs line 1: server = {images} 2\n"
        ),
        "# ktcpvs line 1: startservers = 8 -- no equivalent: tcpvs runs no thread per connection\n"
            .to_string(),
        format!("  {{ addr = \"{rest}\", weight = 3 }},  # ktcpvs line 1: server = {rest} 3\n"),
    ] {
        assert!(stdout.contains(&expected), "no {expected:?} in\n{stdout}");
    }

    // `tcpvs check` accepts the output as it is, without a warning.
    let scratch = Scratch::new("import-one-line-check");
    let converted = scratch.file("converted.toml", &stdout);
    let check = Command::new(env!("CARGO_BIN_EXE_tcpvs"))
        .arg("check")
        .arg(&converted)
        .output()
        .unwrap();
    assert_eq!(
        check.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&check.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&check.stderr), "");
    assert!(String::from_utf8_lossy(&check.stdout)
        .ends_with(": ok: 2 virtual services, 4 pools, 4 servers, 2 rules\n"));

    // It routes as KTCPVS did: the last rule written is tried first, `.*` last.
    let report = convert(&one_line);
    assert_eq!(report.rules, stdout);
    let switch = start(&report).await;
    let by = served(
        switch.local_addr("web").unwrap(),
        &[
            "/images/a.png",
            "/cgi-bin/a;b",
            "/cgi-bin/ab",
            "/",
            "/x/images/",
        ],
    )
    .await;
    let (images, cgi, rest) = (images.to_string(), cgi.to_string(), rest.to_string());
    assert_eq!(by, [&images, &cgi, &rest, &rest, &rest].map(String::as_str));
    let by = served(switch.local_addr("all").unwrap(), &["/images/a.png"]).await;
    assert_eq!(by, [rest]);
}

/// A `;` ends a statement: one that ends too early is an error at the word before it, and the
/// next statement is read as usual (a single error).
#[test]
fn a_statement_cut_short_by_a_semicolon_is_an_error_at_its_place() {
    let text = "virtual web { listen = 0.0.0.0:80; scheduler = wlc; server = 10.0.0.1:80; \
                server = 10.0.0.2:80 1; }\n";
    let (code, stdout, stderr, file) = run_import("cut.conf", text);
    assert_eq!(code, 1, "{stderr}");
    assert_eq!(stdout, "");
    let (_, col) = position_of(text, "10.0.0.1:80;");
    assert_eq!(
        stderr,
        format!(
            "{file}:1:{col}: `server = ADDRESS WEIGHT` needs the weight, 1..65535 (tcpvsadm -f \
             has no default) (`;` ends the statement)\n"
        )
    );
}
