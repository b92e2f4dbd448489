//! A real browser speaks HTTP/2 to the demo (issue 25): `tcpvs demo --tls` serves its page
//! over HTTPS with a self-signed certificate it makes at start (browsers speak HTTP/2 only over
//! TLS, by ALPN), headless Chromium loads it (`--ignore-certificate-errors`: nobody vouches for
//! that certificate), and the test asks the page itself, through the DevTools protocol
//! (tests/common/chromium.rs), what happened:
//!
//! - the navigation's `nextHopProtocol` is `h2`, and so is the resource entry of each of the
//!   six pictures (one entry each);
//! - each picture decodes to 64x64 pixels of one server's colour with its white stripe (the
//!   demo's image servers colour what they draw by their position in the pool), read back from
//!   a canvas; the access log names that same server of the `images` pool for that picture,
//!   and `/stats` shows the pool runs `lard` and counts, per server, exactly the pictures in
//!   its colour;
//! - a reload gets every picture again over `h2`, each in the colour it had (LARD keeps each
//!   target on its server), and `/stats` counts twice as many.
//!
//! With `http2 = false` in rules/demo.toml the page comes over `http/1.1` and this test fails at
//! its first check. Chromium is required as for tests/monitor.rs (`.ci/run` installs it;
//! `TCPVS_CHROMIUM` names another binary). Every wait is bounded; none decides a verdict.

#[path = "common/chromium.rs"]
mod chromium;
mod common;

use common::*;
use serde_json::Value;
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::Path;
use std::time::{Duration, Instant};

/// The demo page's pictures (`/images/tile1.png` .. `tile6.png`).
const PICTURES: usize = 6;

/// The colour of the pictures drawn by the first and the second server of a demo pool
/// (`PALETTE` in switch/cli/demo.rs); the rest of each picture is a white stripe.
const SERVER_COLOURS: [&str; 2] = ["#1f77b4", "#ff7f0e"];
const WHITE: &str = "#ffffff";

/// A 64x64 picture: each row has 8 white pixels of the stripe.
const PIXELS: u64 = 64 * 64;
const STRIPE_PIXELS: u64 = 8 * 64;

/// What the page reports about itself: where it came from and over what, and for each
/// picture its resource entries' protocols, its size and the colours of its pixels (drawn on
/// a canvas and read back).
const REPORT: &str = r#"(() => {
  const hex = v => v.toString(16).padStart(2, '0');
  const navigation = performance.getEntriesByType('navigation')[0];
  const pictures = [...document.images].map(img => {
    const canvas = document.createElement('canvas');
    canvas.width = img.naturalWidth;
    canvas.height = img.naturalHeight;
    const context = canvas.getContext('2d', { willReadFrequently: true });
    context.drawImage(img, 0, 0);
    const data = context.getImageData(0, 0, canvas.width, canvas.height).data;
    const colours = {};
    for (let i = 0; i < data.length; i += 4) {
      const colour = '#' + hex(data[i]) + hex(data[i + 1]) + hex(data[i + 2]);
      colours[colour] = (colours[colour] || 0) + 1;
    }
    return {
      path: new URL(img.src).pathname,
      width: img.naturalWidth,
      height: img.naturalHeight,
      colours,
      protocols: performance.getEntriesByName(img.src, 'resource').map(r => r.nextHopProtocol),
    };
  });
  return {
    url: location.href,
    navigation: navigation.type,
    protocol: navigation.nextHopProtocol,
    encoded: navigation.encodedBodySize,
    decoded: navigation.decodedBodySize,
    text: document.body.innerText,
    pictures,
  };
})()"#;

/// The page loaded: this document, complete, its six pictures decoded.
fn loaded(url: &str, navigation: &str) -> String {
    format!(
        "location.href === {url:?} && document.readyState === 'complete' && \
         performance.getEntriesByType('navigation')[0].type === {navigation:?} && \
         document.images.length === {PICTURES} && \
         [...document.images].every(i => i.complete && i.naturalWidth > 0)"
    )
}

/// One load of the page as the browser saw it: per picture path, the server (index in the
/// `images` pool) whose colour it has. Checks that the page and every picture came over `h2`.
fn check_report(report: &Value, url: &str, navigation: &str) -> BTreeMap<String, usize> {
    assert_eq!(report["url"], url, "{report:#}");
    assert_eq!(report["navigation"], navigation, "{report:#}");
    assert_eq!(
        report["protocol"], "h2",
        "the page did not come over HTTP/2: {report:#}"
    );
    assert!(
        report["text"]
            .as_str()
            .is_some_and(|t| t.contains("came from pool static")),
        "the page is not the demo's page from its static pool: {report:#}"
    );
    let pictures = report["pictures"].as_array().expect("pictures");
    assert_eq!(pictures.len(), PICTURES, "{report:#}");
    let mut servers = BTreeMap::new();
    for (i, picture) in pictures.iter().enumerate() {
        let path = picture["path"].as_str().expect("a picture path");
        assert_eq!(path, format!("/images/tile{}.png", i + 1), "{report:#}");
        assert_eq!(
            picture["protocols"],
            serde_json::json!(["h2"]),
            "{path} did not come over HTTP/2 (one resource entry, h2): {picture:#}"
        );
        assert_eq!(
            (&picture["width"], &picture["height"]),
            (&Value::from(64), &Value::from(64)),
            "{picture:#}"
        );
        // The server's colour and the white stripe, nothing else: a picture drawn whole by
        // one of the pool's servers and decoded exactly.
        let colours = picture["colours"].as_object().expect("colours");
        assert_eq!(colours.len(), 2, "{path}: {picture:#}");
        assert_eq!(colours[WHITE], STRIPE_PIXELS, "{path}: {picture:#}");
        let (colour, count) = colours
            .iter()
            .find(|(colour, _)| *colour != WHITE)
            .expect("a colour besides white");
        assert_eq!(count, &Value::from(PIXELS - STRIPE_PIXELS), "{picture:#}");
        let server = SERVER_COLOURS
            .iter()
            .position(|c| c == colour)
            .unwrap_or_else(|| panic!("{path}: {colour} is no image server's colour"));
        servers.insert(path.to_string(), server);
    }
    servers
}

/// The demo's `/stats`, read over HTTP from its admin endpoint.
async fn stats(admin: SocketAddr) -> Value {
    let mut client = Client::connect(admin).await;
    let r = client.get_local("/stats").await;
    assert_eq!(r.status, 200, "GET /stats: {}", r.text());
    serde_json::from_slice(&r.body).unwrap_or_else(|e| panic!("/stats: {e}: {}", r.text()))
}

fn named<'a>(list: &'a Value, name: &str) -> &'a Value {
    list.as_array()
        .expect("a list")
        .iter()
        .find(|item| item["name"] == name)
        .unwrap_or_else(|| panic!("no {name} in {list}"))
}

/// The requests each server of the `images` pool counted, in pool order, once the pool has
/// counted `total` (a request is counted when its exchange ends, which may be just after the
/// browser has the picture; the wait only bounds a count that never comes).
async fn image_requests(admin: SocketAddr, servers: &[SocketAddr], total: u64) -> Vec<u64> {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let stats = stats(admin).await;
        let pool = named(&stats["pools"], "images");
        assert_eq!(pool["scheduler"], "lard", "{pool:#}");
        if pool["requests"] == total {
            return servers
                .iter()
                .map(|addr| {
                    pool["servers"]
                        .as_array()
                        .expect("servers")
                        .iter()
                        .find(|s| s["addr"] == addr.to_string())
                        .unwrap_or_else(|| panic!("no server {addr} in {pool:#}"))["requests"]
                        .as_u64()
                        .expect("requests")
                })
                .collect();
        }
        assert!(
            Instant::now() < deadline,
            "the images pool never counted {total} requests: {pool:#}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// How many pictures each server drew, in pool order.
fn per_server(servers: &BTreeMap<String, usize>) -> Vec<u64> {
    let mut counts = vec![0; SERVER_COLOURS.len()];
    for &server in servers.values() {
        counts[server] += 1;
    }
    counts
}

/// Reads the demo's log until it holds an access-log line for each picture, and checks that
/// each names the `images` server whose colour the browser saw.
fn check_access_log(
    demo: &Process,
    pictures: &BTreeMap<String, usize>,
    servers: &[SocketAddr],
    log: &mut Vec<String>,
) {
    let deadline = Instant::now() + LOG_PATIENCE;
    let mut found: BTreeMap<String, String> = BTreeMap::new();
    let mut next = 0;
    while found.len() < pictures.len() {
        while next < log.len() {
            let line = &log[next];
            next += 1;
            for path in pictures.keys() {
                if line.contains(&format!("\"GET {path} HTTP/2.0\" 200 ")) {
                    let pool_server = line
                        .split(' ')
                        .find(|field| field.starts_with("images/"))
                        .unwrap_or_else(|| panic!("{path} not from the images pool: {line}"));
                    found.insert(path.clone(), pool_server.to_string());
                }
            }
        }
        if found.len() == pictures.len() {
            break;
        }
        let left = deadline.saturating_duration_since(Instant::now());
        match demo.log.recv_timeout(left) {
            Ok(line) => log.push(line),
            Err(e) => panic!("no access-log line for every picture ({e}): {found:?}\n{log:#?}"),
        }
    }
    for (path, &server) in pictures {
        assert_eq!(
            found[path],
            format!("images/{}", servers[server]),
            "the browser saw {path} in the colour of {}; the access log: {log:#?}",
            servers[server]
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chromium_loads_the_demo_over_http2_and_its_pictures_from_the_lard_pool() {
    let scratch = Scratch::new("browser-h2");
    // Before anything starts: a machine without Chromium fails here, saying what to install.
    let chromium = chromium::find_chromium("the HTTP/2 browser test");

    // The servers of the demo's `images` pool, in the order that gives them their colours.
    let rules =
        tcpvs::config::Config::load(&Path::new(env!("CARGO_MANIFEST_DIR")).join("rules/demo.toml"))
            .expect("the demo's rules");
    let images = rules
        .pools
        .iter()
        .find(|p| p.name == "images")
        .expect("an images pool");
    assert_eq!(images.scheduler, "lard");
    let servers: Vec<SocketAddr> = images.servers.iter().map(|s| s.addr).collect();
    assert_eq!(servers.len(), SERVER_COLOURS.len(), "{servers:?}");

    let demo = Process::start(&[
        "demo".as_ref(),
        "--tls".as_ref(),
        "--listen".as_ref(),
        "127.0.0.1:0".as_ref(),
        "--admin".as_ref(),
        "127.0.0.1:0".as_ref(),
    ]);
    let (addr, mut log) = demo.address_after("open ");
    assert!(
        log.last()
            .is_some_and(|l| l.contains(&format!("open https://{addr}/"))),
        "the demo does not offer HTTPS: {log:#?}"
    );
    let (admin, more) = demo.address_after("the monitor: ");
    log.extend(more);
    let url = format!("https://{addr}/");

    let mut tab = tokio::task::block_in_place(|| {
        let mut tab = chromium::Tab::open(
            &chromium,
            &scratch.0,
            &["--ignore-certificate-errors"],
            &url,
        );
        tab.eval_until("the demo page with its pictures", &loaded(&url, "navigate"));
        tab
    });
    let first = tokio::task::block_in_place(|| tab.eval(REPORT));
    let pictures = check_report(&first, &url, "navigate");

    // The pool's own counts: lard, and per server exactly the pictures in its colour.
    let counted = image_requests(admin, &servers, PICTURES as u64).await;
    assert_eq!(
        counted,
        per_server(&pictures),
        "/stats against the colours the browser saw: {pictures:?}"
    );
    let stats_now = stats(admin).await;
    let web = named(&stats_now["services"], "web");
    assert!(
        web["h2_connections"].as_u64() >= Some(1)
            && web["h2_streams"].as_u64() >= Some(1 + PICTURES as u64),
        "the service counted no HTTP/2 connection or too few streams: {web:#}"
    );
    // The page came compressed (rules/demo.toml compresses pages), in whichever coding the
    // browser asked for best, and the browser decoded it.
    assert!(
        web["compressed"].as_u64() >= Some(1),
        "the page was not compressed: {web:#}"
    );
    assert!(
        first["decoded"].as_u64() > first["encoded"].as_u64(),
        "the browser got the page uncompressed: {first:#}"
    );
    tokio::task::block_in_place(|| check_access_log(&demo, &pictures, &servers, &mut log));

    // A reload: every picture again over HTTP/2, from the server that drew it the first time.
    let again = tokio::task::block_in_place(|| {
        tab.eval("location.reload(); true");
        tab.eval_until("the page loaded again", &loaded(&url, "reload"));
        tab.eval(REPORT)
    });
    let pictures_again = check_report(&again, &url, "reload");
    assert_eq!(
        pictures_again, pictures,
        "LARD moved pictures to another server"
    );
    let counted = image_requests(admin, &servers, 2 * PICTURES as u64).await;
    let twice: Vec<u64> = per_server(&pictures).iter().map(|n| 2 * n).collect();
    assert_eq!(counted, twice, "{pictures:?}");
    drop(tab);

    let (rest, status) = stop(demo).await;
    assert!(status.success(), "{status:?}: {rest:#?}");
    eprintln!(
        "pictures by server (0: {}, 1: {}): {pictures:?}",
        servers[0], servers[1]
    );
}
