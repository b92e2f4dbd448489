//! The admin endpoint's monitor page (`GET /` of `[admin] listen`) in a real browser: headless
//! Chromium loads it from a running switch, lets it poll `/stats` a few times (virtual time), and
//! the test reads the DOM Chromium dumps: one `tr.server` row per server, live figures
//! (`data-updated`), the exact request counters, and a weight changed with `PUT
//! /pools/{pool}/servers/{addr}` showing on the next load.
//!
//! Chromium is required: without it the test fails and says how to install it (`.ci/run`
//! installs it on CI). `TCPVS_CHROMIUM` names another Chromium binary; `TCPVS_MONITOR_SCREENSHOT`
//! keeps a screenshot of the page at that path. Every Chromium run is bounded (killed after 60 s,
//! which fails the test); the verdict rests on the dumped DOM, never on timing.

mod common;

use common::*;
use regex::Regex;
use std::collections::HashMap;
use std::net::SocketAddr;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The longest one Chromium run may take before it is killed and the test fails.
const CHROMIUM_LIMIT: Duration = Duration::from_secs(60);

/// Virtual time a page gets before its DOM is dumped: the page polls at once, then every
/// second, so this is four polls. Virtual time stands still while a fetch is in flight, so a
/// slow machine gets the same number of polls.
const VIRTUAL_TIME_MS: u32 = 3500;

// ---------------------------------------------------------------- the browser

/// A headless Chromium for one test: each run gets a profile folder of its own in `scratch`.
struct Browser {
    binary: PathBuf,
    scratch: PathBuf,
    runs: usize,
}

impl Browser {
    /// Finds Chromium (`TCPVS_CHROMIUM`, else `chromium` or `chromium-browser` on PATH), or
    /// fails the test saying how to install it.
    fn find(scratch: &Path) -> Browser {
        let binary = match std::env::var_os("TCPVS_CHROMIUM") {
            Some(path) => PathBuf::from(path),
            None => {
                let path = std::env::var_os("PATH").unwrap_or_default();
                let found = ["chromium", "chromium-browser"].iter().find_map(|name| {
                    std::env::split_paths(&path)
                        .map(|dir| dir.join(name))
                        .find(|candidate| is_executable(candidate))
                });
                found.unwrap_or_else(|| {
                    panic!(
                        "the monitor page test needs headless Chromium and found no `chromium` \
                         on PATH: install it with `sudo apt-get install chromium` (Debian, \
                         Ubuntu; .ci/run does this on CI), or name a Chromium binary in \
                         TCPVS_CHROMIUM"
                    )
                })
            }
        };
        Browser {
            binary,
            scratch: scratch.to_path_buf(),
            runs: 0,
        }
    }

    /// Runs Chromium headless on `url` with `args` and returns what it printed on stdout. Fails
    /// the test when it exits unsuccessfully or runs longer than [`CHROMIUM_LIMIT`] (it is
    /// then killed, with every process it started).
    fn run(&mut self, args: &[String], url: &str) -> String {
        self.runs += 1;
        let profile = self.scratch.join(format!("chromium-profile-{}", self.runs));
        let stdout_path = self.scratch.join(format!("chromium-{}.out", self.runs));
        let stderr_path = self.scratch.join(format!("chromium-{}.err", self.runs));
        let mut command = Command::new(&self.binary);
        command
            .args([
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-dev-shm-usage",
                "--no-first-run",
                "--hide-scrollbars",
            ])
            .arg(format!("--user-data-dir={}", profile.display()))
            .args(args)
            .arg(url)
            .stdin(Stdio::null())
            .stdout(std::fs::File::create(&stdout_path).unwrap())
            .stderr(std::fs::File::create(&stderr_path).unwrap())
            // A process group of its own: a timeout kills Chromium's helpers too.
            .process_group(0);
        let mut child = command.spawn().unwrap_or_else(|e| {
            panic!(
                "cannot start {} ({e}): install Chromium with `sudo apt-get install chromium`",
                self.binary.display()
            )
        });
        let group = rustix::process::Pid::from_child(&child);
        let deadline = Instant::now() + CHROMIUM_LIMIT;
        let status = loop {
            if let Some(status) = child.try_wait().unwrap() {
                break status;
            }
            if Instant::now() >= deadline {
                let _ = rustix::process::kill_process_group(group, rustix::process::Signal::KILL);
                let _ = child.wait();
                panic!(
                    "{} did not finish within {CHROMIUM_LIMIT:?} on {url}; it was killed. \
                     stderr:\n{}",
                    self.binary.display(),
                    tail(&stderr_path)
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        // Helpers that outlived the browser (crash handler) go with it.
        let _ = rustix::process::kill_process_group(group, rustix::process::Signal::KILL);
        assert!(
            status.success(),
            "{} {args:?} {url} failed ({status}); stderr:\n{}",
            self.binary.display(),
            tail(&stderr_path)
        );
        std::fs::read_to_string(&stdout_path).unwrap()
    }

    /// The page at `url` as Chromium has it after [`VIRTUAL_TIME_MS`] of virtual time.
    fn dump_dom(&mut self, url: &str) -> String {
        let dom = self.run(
            &[
                format!("--virtual-time-budget={VIRTUAL_TIME_MS}"),
                "--dump-dom".into(),
            ],
            url,
        );
        assert!(
            dom.contains("</html>"),
            "Chromium dumped no page for {url}: {dom:?}"
        );
        dom
    }

    /// A 1400x900 screenshot of the page at `url` into `path`.
    fn screenshot(&mut self, url: &str, path: &Path) {
        self.run(
            &[
                format!("--virtual-time-budget={VIRTUAL_TIME_MS}"),
                "--window-size=1400,900".into(),
                format!("--screenshot={}", path.display()),
            ],
            url,
        );
    }
}

fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    path.metadata()
        .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// The last lines of a file (Chromium's stderr), for failure messages.
fn tail(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(30)..].join("\n")
}

// ---------------------------------------------------------------- reading the dumped page

/// A `tr.server` row of the page: its `data-*` attributes and the text of its `data-field`
/// cells.
#[derive(Debug)]
struct ServerRow {
    attrs: HashMap<String, String>,
    fields: HashMap<String, String>,
}

impl ServerRow {
    fn attr(&self, name: &str) -> &str {
        self.attrs
            .get(name)
            .unwrap_or_else(|| panic!("no data-{name} on {self:?}"))
    }

    fn field(&self, name: &str) -> &str {
        self.fields
            .get(name)
            .unwrap_or_else(|| panic!("no data-field=\"{name}\" cell in {self:?}"))
    }

    /// A numeric cell as a number (thousands separators dropped).
    fn number(&self, name: &str) -> u64 {
        let text: String = self.field(name).chars().filter(|c| *c != ',').collect();
        text.trim()
            .parse()
            .unwrap_or_else(|_| panic!("data-field=\"{name}\" is not a number in {self:?}"))
    }
}

fn server_rows(dom: &str) -> Vec<ServerRow> {
    let row = Regex::new(r#"(?s)<tr class="server"([^>]*)>(.*?)</tr>"#).unwrap();
    let attr = Regex::new(r#"data-([a-z_-]+)="([^"]*)""#).unwrap();
    let cell = Regex::new(r#"(?s)<td data-field="([a-z0-9_]+)"[^>]*>(.*?)</td>"#).unwrap();
    let tag = Regex::new(r"<[^>]*>").unwrap();
    row.captures_iter(dom)
        .map(|r| ServerRow {
            attrs: attr
                .captures_iter(&r[1])
                .map(|a| (a[1].to_string(), a[2].to_string()))
                .collect(),
            fields: cell
                .captures_iter(&r[2])
                .map(|c| {
                    (
                        c[1].to_string(),
                        tag.replace_all(&c[2], "").trim().to_string(),
                    )
                })
                .collect(),
        })
        .collect()
}

/// The successful polls the page counted (`data-updated` of its root element).
fn polls(dom: &str) -> u64 {
    let updated = Regex::new(r#"<html[^>]*\sdata-updated="(\d+)""#).unwrap();
    updated
        .captures(dom)
        .unwrap_or_else(|| panic!("no data-updated on the page's root element:\n{dom}"))[1]
        .parse()
        .unwrap()
}

/// The row of `addr` in pool `pool`.
fn row<'a>(rows: &'a [ServerRow], pool: &str, addr: SocketAddr) -> &'a ServerRow {
    rows.iter()
        .find(|r| r.attr("pool") == pool && r.attr("addr") == addr.to_string())
        .unwrap_or_else(|| panic!("no row for {pool}/{addr} in {rows:#?}"))
}

// ---------------------------------------------------------------- the test

const RULES: &str = r#"[switch]
access_log = false

[admin]
listen = "127.0.0.1:0"

[virtual.web]
listen = "127.0.0.1:0"
default_pool = "p"

[pool.p]
servers = [{ addr = "{one}", weight = 1 }, { addr = "{two}", weight = 2 }]
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_monitor_page_shows_live_figures_and_a_changed_weight_in_a_real_browser() {
    let scratch = Scratch::new("monitor");
    // Before anything starts: a machine without Chromium fails here, saying what to install.
    let mut browser = Browser::find(&scratch.0);

    let one = backend().await;
    let two = backend().await;
    let switch = start_switch(
        RULES,
        &[("one", one.addr.to_string()), ("two", two.addr.to_string())],
    )
    .await;
    let admin = switch
        .admin_addr()
        .expect("[admin] listen gives the switch an admin address");
    let page = format!("http://{admin}/");

    // 20 requests through the switch, all counted before the page looks.
    let mut client = Client::connect(switch.local_addr("web").unwrap()).await;
    for i in 0..20 {
        let r = client.get(&format!("/monitor/{i}")).await;
        assert_eq!(r.status, 200, "request {i}: {}", r.text());
    }
    drop(client);
    wait_until(&switch, "20 requests counted", |s| {
        s.servers.iter().map(|s| s.requests).sum::<u64>() == 20
    })
    .await;
    settle(&switch).await;
    assert_eq!(one.requests() + two.requests(), 20);

    // The page itself is served as HTML.
    let mut raw = Client::connect(admin).await;
    let r = raw.get_local("/").await;
    assert_eq!(r.status, 200, "GET / of the admin endpoint: {}", r.text());
    assert!(
        r.header("content-type")
            .is_some_and(|t| t.starts_with("text/html")),
        "GET / is not text/html: {:?}",
        r.headers
    );
    drop(raw);

    // The page in the browser: a row per server with the exact counters.
    let dom = tokio::task::block_in_place(|| browser.dump_dom(&page));
    let updated = polls(&dom);
    assert!(updated >= 1, "no poll of /stats succeeded:\n{dom}");
    let rows = server_rows(&dom);
    assert_eq!(rows.len(), 2, "one tr.server per server: {rows:#?}\n{dom}");
    let (first, second) = (row(&rows, "p", one.addr), row(&rows, "p", two.addr));
    for (r, weight) in [(first, 1), (second, 2)] {
        assert_eq!(r.attr("state"), "up", "{r:?}");
        assert_eq!(r.number("weight"), weight, "{r:?}");
        assert_eq!(r.number("active"), 0, "{r:?}");
        assert!(r.field("state").contains("up"), "{r:?}");
    }
    assert_eq!(first.number("requests"), one.requests() as u64, "{first:?}");
    assert_eq!(
        second.number("requests"),
        two.requests() as u64,
        "{second:?}"
    );
    assert_eq!(
        first.number("requests") + second.number("requests"),
        20,
        "{rows:#?}"
    );

    // A weight changed at run time, as the page's Set button sends it (the address
    // %-encoded), shows on the next load.
    let mut raw = Client::connect(admin).await;
    let body = r#"{"weight": 7}"#;
    let path = format!(
        "/pools/p/servers/{}",
        one.addr.to_string().replace(':', "%3A")
    );
    raw.send(
        format!(
            "PUT {path} HTTP/1.1\r\nHost: {admin}\r\nContent-Type: application/json\r\n\
             Content-Length: {}\r\n\r\n{body}",
            body.len()
        )
        .as_bytes(),
    )
    .await;
    let r = raw.response(false).await;
    assert_eq!(r.status, 200, "PUT {path} {body}: {}", r.text());
    drop(raw);

    let dom = tokio::task::block_in_place(|| browser.dump_dom(&page));
    assert!(polls(&dom) >= 1, "no poll of /stats succeeded:\n{dom}");
    let rows = server_rows(&dom);
    assert_eq!(rows.len(), 2, "{rows:#?}");
    let first = row(&rows, "p", one.addr);
    assert_eq!(first.number("weight"), 7, "the weight in force: {first:?}");
    assert_eq!(
        first.number("weight_configured"),
        1,
        "the rule file's weight stays: {first:?}"
    );
    assert_eq!(row(&rows, "p", two.addr).number("weight"), 2, "{rows:#?}");
    assert_eq!(first.number("requests"), one.requests() as u64, "{first:?}");

    // A screenshot, for whoever looks (not asserted).
    let shot = scratch.0.join("monitor.png");
    tokio::task::block_in_place(|| browser.screenshot(&page, &shot));
    if let Some(keep) = std::env::var_os("TCPVS_MONITOR_SCREENSHOT") {
        std::fs::copy(&shot, &keep).unwrap();
        eprintln!("monitor page screenshot: {}", PathBuf::from(keep).display());
    }
}
