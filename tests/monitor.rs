//! The admin endpoint's monitor page (`GET /` of `[admin] listen`) in a real browser: headless
//! Chromium keeps the page open, driven over the DevTools protocol (`--remote-debugging-pipe`,
//! which Debian's `chromium` has; no WebDriver), and the test reads the live DOM as often as it
//! needs: one `tr.server` row per server with the exact request counters; the counters rising
//! from one of the page's own polls to a later one while requests flow, without a reload; then
//! a weight typed into a server's box and its Set button and another server's Drain button
//! clicked with Chromium's input events, and the switch's `/stats` (and the page) showing both
//! changes.
//!
//! Chromium is required: without it the test fails and says how to install it (`.ci/run`
//! installs it on CI). `TCPVS_CHROMIUM` names another Chromium binary; `TCPVS_MONITOR_SCREENSHOT`
//! keeps a screenshot of the page at that path. Every wait on Chromium is bounded (60 s, which
//! fails the test); the verdict rests on the DOM and on `/stats`, never on timing: the test
//! waits for what the page shows, the deadline only ends a wait that would never end.

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

/// The options of every Chromium run.
const HEADLESS: [&str; 6] = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--no-first-run",
    "--hide-scrollbars",
];

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
            .args(HEADLESS)
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

// ---------------------------------------------------------------- driving the page

/// A Chromium that stays open on a page and is driven through the DevTools protocol over
/// `--remote-debugging-pipe` (JSON messages ended by a NUL byte, read by Chromium on its file
/// descriptor 3, written on 4): the test reads the page's DOM as it is now, as often as it
/// likes, and types and clicks in it as a user does, with Chromium's own input events.
///
/// The two descriptors are named pipes in the scratch folder that `sh` opens as 3 and 4 before
/// it becomes Chromium, so nothing here needs `unsafe` (`pre_exec`). Every answer is awaited
/// at most [`CHROMIUM_LIMIT`]; the browser and its helpers are killed when this is dropped.
struct Devtools {
    child: std::process::Child,
    group: rustix::process::Pid,
    to_browser: std::fs::File,
    from_browser: std::sync::mpsc::Receiver<serde_json::Value>,
    from_path: PathBuf,
    stderr_path: PathBuf,
    session: String,
    next_id: u64,
}

impl Devtools {
    /// Starts Chromium (`browser`'s binary, a profile of its own) and opens `url` in a
    /// 1400x900 window.
    fn open(browser: &mut Browser, url: &str) -> Devtools {
        use rustix::fs::{FileType, Mode, CWD};
        browser.runs += 1;
        let scratch = &browser.scratch;
        let profile = scratch.join(format!("chromium-profile-{}", browser.runs));
        let to_path = scratch.join(format!("devtools-{}.in", browser.runs));
        let from_path = scratch.join(format!("devtools-{}.out", browser.runs));
        let stderr_path = scratch.join(format!("chromium-{}.err", browser.runs));
        for fifo in [&to_path, &from_path] {
            rustix::fs::mknodat(CWD, fifo, FileType::Fifo, Mode::RUSR | Mode::WUSR, 0)
                .unwrap_or_else(|e| panic!("mkfifo {}: {e}", fifo.display()));
        }
        // Read and write: opening never waits for Chromium, and Chromium's end never sees an
        // end of file before the test is done.
        let to_browser = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(&to_path)
            .unwrap();
        let mut command = Command::new("sh");
        command
            .arg("-c")
            .arg(r#"exec "$0" "$@" 3<"$TCPVS_DEVTOOLS_IN" 4>"$TCPVS_DEVTOOLS_OUT""#)
            .arg(&browser.binary)
            .args(HEADLESS)
            .arg(format!("--user-data-dir={}", profile.display()))
            .args(["--remote-debugging-pipe", "--window-size=1400,900"])
            .arg("about:blank")
            .env("TCPVS_DEVTOOLS_IN", &to_path)
            .env("TCPVS_DEVTOOLS_OUT", &from_path)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&stderr_path).unwrap())
            .process_group(0);
        let child = command.spawn().unwrap_or_else(|e| {
            panic!(
                "cannot start {} ({e}): install Chromium with `sudo apt-get install chromium`",
                browser.binary.display()
            )
        });
        let group = rustix::process::Pid::from_child(&child);
        let (tx, from_browser) = std::sync::mpsc::channel();
        let reading = from_path.clone();
        std::thread::spawn(move || {
            use std::io::Read;
            // Waits until `sh` has opened the other end; ends at Chromium's exit.
            let Ok(mut pipe) = std::fs::File::open(&reading) else {
                return;
            };
            let mut buf = Vec::new();
            let mut chunk = [0u8; 65536];
            loop {
                while let Some(end) = buf.iter().position(|&b| b == 0) {
                    let message: Vec<u8> = buf.drain(..=end).collect();
                    let value = serde_json::from_slice(&message[..end])
                        .unwrap_or_else(|e| panic!("not JSON from Chromium ({e}): {message:?}"));
                    if tx.send(value).is_err() {
                        return;
                    }
                }
                match pipe.read(&mut chunk) {
                    Ok(0) | Err(_) => return,
                    Ok(n) => buf.extend_from_slice(&chunk[..n]),
                }
            }
        });
        let mut devtools = Devtools {
            child,
            group,
            to_browser,
            from_browser,
            from_path,
            stderr_path,
            session: String::new(),
            next_id: 0,
        };
        let target = devtools.call("Target.createTarget", serde_json::json!({ "url": url }));
        let target = target["targetId"].clone();
        let attached = devtools.call(
            "Target.attachToTarget",
            serde_json::json!({ "targetId": target, "flatten": true }),
        );
        devtools.session = attached["sessionId"]
            .as_str()
            .unwrap_or_else(|| panic!("no sessionId in {attached}"))
            .to_string();
        // Loaded: the page's own script has run (it starts its polls at the end).
        let deadline = Instant::now() + CHROMIUM_LIMIT;
        let loaded = format!(
            "location.href === {url:?} && document.readyState === 'complete' && \
             document.documentElement.hasAttribute('data-updated')"
        );
        while devtools.eval(&loaded) != true {
            assert!(
                Instant::now() < deadline,
                "Chromium did not load {url} within {CHROMIUM_LIMIT:?}; stderr:\n{}",
                tail(&devtools.stderr_path)
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        devtools
    }

    /// Sends one command (to the page once attached) and returns its result; events that
    /// come meanwhile are skipped. Fails the test on an error answer, or when Chromium exits
    /// or does not answer within [`CHROMIUM_LIMIT`].
    fn call(&mut self, method: &str, params: serde_json::Value) -> serde_json::Value {
        use std::io::Write;
        self.next_id += 1;
        let id = self.next_id;
        let mut message = serde_json::json!({ "id": id, "method": method, "params": params });
        if !self.session.is_empty() {
            message["sessionId"] = self.session.clone().into();
        }
        let mut bytes = serde_json::to_vec(&message).unwrap();
        bytes.push(0);
        self.to_browser.write_all(&bytes).unwrap();
        let deadline = Instant::now() + CHROMIUM_LIMIT;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let answer = match self.from_browser.recv_timeout(left) {
                Ok(answer) => answer,
                Err(e) => panic!(
                    "no answer to {method} from Chromium ({e}); stderr:\n{}",
                    tail(&self.stderr_path)
                ),
            };
            if answer["id"] != id {
                continue;
            }
            if let Some(error) = answer.get("error") {
                panic!("{method} {message}: Chromium answered {error}");
            }
            return answer["result"].clone();
        }
    }

    /// The value of the JavaScript expression `expression` in the page (a promise is awaited).
    fn eval(&mut self, expression: &str) -> serde_json::Value {
        let result = self.call(
            "Runtime.evaluate",
            serde_json::json!({
                "expression": expression,
                "returnByValue": true,
                "awaitPromise": true,
            }),
        );
        if let Some(exception) = result.get("exceptionDetails") {
            panic!("{expression}: {exception}");
        }
        result["result"]["value"].clone()
    }

    /// The page's DOM as it is now (the root element's outer HTML).
    fn dom(&mut self) -> String {
        let dom = self.eval("document.documentElement.outerHTML");
        dom.as_str()
            .unwrap_or_else(|| panic!("no DOM: {dom}"))
            .to_string()
    }

    /// Reads the DOM until `reached` holds for it and returns that DOM; fails the test with
    /// `what` and the last DOM read after [`CHROMIUM_LIMIT`]. The page polls every second:
    /// the deadline only bounds a failure, it decides nothing.
    fn dom_until(&mut self, what: &str, reached: impl Fn(&str) -> bool) -> String {
        let deadline = Instant::now() + CHROMIUM_LIMIT;
        loop {
            let dom = self.dom();
            if reached(&dom) {
                return dom;
            }
            if Instant::now() >= deadline {
                panic!("the page never showed {what} within {CHROMIUM_LIMIT:?}; it shows:\n{dom}");
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Clicks the element `selector` as a user does: scrolled into view, the left button
    /// pressed and released at its centre.
    fn click(&mut self, selector: &str) {
        let centre = self.eval(&format!(
            "(() => {{ const e = document.querySelector({selector:?}); if (!e) return null; \
             e.scrollIntoView({{block: 'center', inline: 'center'}}); \
             const r = e.getBoundingClientRect(); \
             return [r.left + r.width / 2, r.top + r.height / 2]; }})()"
        ));
        let (x, y) = (
            centre[0]
                .as_f64()
                .unwrap_or_else(|| panic!("no {selector} on the page")),
            centre[1].as_f64().unwrap(),
        );
        for kind in ["mousePressed", "mouseReleased"] {
            self.call(
                "Input.dispatchMouseEvent",
                serde_json::json!({
                    "type": kind, "x": x, "y": y, "button": "left", "clickCount": 1,
                }),
            );
        }
    }

    /// Types `text` into the input `selector` as a user does: clicked into, its content
    /// selected, `text` typed over it.
    fn type_into(&mut self, selector: &str, text: &str) {
        self.click(selector);
        let selected = self.eval(&format!(
            "(() => {{ const e = document.querySelector({selector:?}); \
             if (document.activeElement !== e) return false; e.select(); return true; }})()"
        ));
        assert_eq!(selected, true, "a click did not focus {selector}");
        self.call("Input.insertText", serde_json::json!({ "text": text }));
    }
}

impl Drop for Devtools {
    fn drop(&mut self) {
        let _ = rustix::process::kill_process_group(self.group, rustix::process::Signal::KILL);
        let _ = self.child.wait();
        // A reader still waiting for Chromium to open its end (it never started) is let go.
        use std::os::unix::fs::OpenOptionsExt;
        let _ = std::fs::OpenOptions::new()
            .write(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(&self.from_path);
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

/// The switch's `/stats` document, read over HTTP as any client of the endpoint reads it.
async fn stats(admin: SocketAddr) -> serde_json::Value {
    let mut raw = Client::connect(admin).await;
    raw.send(b"GET /stats HTTP/1.1\r\nHost: localhost\r\n\r\n")
        .await;
    let r = raw.response(false).await;
    assert_eq!(r.status, 200, "GET /stats: {}", r.text());
    serde_json::from_slice(&r.body).unwrap_or_else(|e| panic!("/stats: {e}: {}", r.text()))
}

/// The server `addr` of pool `pool` in a `/stats` document.
fn stats_server(stats: &serde_json::Value, pool: &str, addr: SocketAddr) -> serde_json::Value {
    let pools = stats["pools"].as_array().expect("pools in /stats");
    let servers = pools
        .iter()
        .find(|p| p["name"] == pool)
        .unwrap_or_else(|| panic!("no pool {pool} in {stats}"))["servers"]
        .as_array()
        .expect("servers in /stats");
    servers
        .iter()
        .find(|s| s["addr"] == addr.to_string())
        .unwrap_or_else(|| panic!("no server {addr} in pool {pool}: {stats}"))
        .clone()
}

/// The requests the page shows for all its servers.
fn requests_shown(dom: &str) -> u64 {
    server_rows(dom).iter().map(|r| r.number("requests")).sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_monitor_page_updates_its_figures_live_and_its_controls_change_the_switch() {
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
    let web = switch.local_addr("web").unwrap();

    // 20 requests through the switch, all counted before the page looks.
    let mut client = Client::connect(web).await;
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

    // The page in the browser, open for the rest of the test: a row per server with the
    // exact counters once its first poll of /stats is in.
    let mut tab = tokio::task::block_in_place(|| Devtools::open(&mut browser, &page));
    let dom = tokio::task::block_in_place(|| {
        // Set in this document: still there at the end, the page was never loaded again.
        tab.eval("window.tcpvsTestMark = 'same document'; true");
        tab.dom_until("its first figures", |dom| polls(dom) >= 1)
    });
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
    assert_eq!(requests_shown(&dom), 20, "{rows:#?}");

    // Live figures: while requests flow, the same page shows the counters rising from one of
    // its polls to a later one, without being loaded again.
    let flowing = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(true));
    let traffic = tokio::spawn({
        let flowing = std::sync::Arc::clone(&flowing);
        async move {
            let mut client = Client::connect(web).await;
            let mut sent = 0u64;
            while flowing.load(std::sync::atomic::Ordering::SeqCst) {
                let r = client.get(&format!("/live/{sent}")).await;
                assert_eq!(r.status, 200, "live request {sent}: {}", r.text());
                sent += 1;
                // About 100 requests a second: steady traffic that leaves the CPUs to the
                // browser.
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            sent
        }
    });
    let (rising, risen) = tokio::task::block_in_place(|| {
        let rising = tab.dom_until("more than the first 20 requests", |dom| {
            requests_shown(dom) > 20
        });
        let (shown, poll) = (requests_shown(&rising), polls(&rising));
        let risen = tab.dom_until(
            &format!("more than the {shown} requests of its poll {poll}"),
            |dom| requests_shown(dom) > shown && polls(dom) > poll,
        );
        (rising, risen)
    });
    flowing.store(false, std::sync::atomic::Ordering::SeqCst);
    let sent = traffic.await.unwrap();
    assert!(
        polls(&risen) > polls(&rising) && requests_shown(&risen) > requests_shown(&rising),
        "{rising}\n{risen}"
    );
    // The traffic over, the page settles on the exact counts of the switch and the servers.
    let total = 20 + sent;
    wait_until(&switch, "every live request counted", |s| {
        s.servers.iter().map(|s| s.requests).sum::<u64>() == total
    })
    .await;
    settle(&switch).await;
    assert_eq!((one.requests() + two.requests()) as u64, total);
    let (one_count, two_count) = (one.requests() as u64, two.requests() as u64);
    let dom = tokio::task::block_in_place(|| {
        tab.dom_until(&format!("{one_count} and {two_count} requests"), |dom| {
            let rows = server_rows(dom);
            row(&rows, "p", one.addr).number("requests") == one_count
                && row(&rows, "p", two.addr).number("requests") == two_count
        })
    });
    assert_eq!(requests_shown(&dom), total);

    // The page's own controls: the weight typed into the box of the first server and its Set
    // button clicked, the second server's Drain button clicked. The switch's /stats shows the
    // changes, and so does the page at its next polls.
    let weight_box = format!(
        r#"tr.server[data-addr="{}"] input[data-action="weight-input"]"#,
        one.addr
    );
    let set = format!(
        r#"tr.server[data-addr="{}"] button[data-action="weight"]"#,
        one.addr
    );
    let drain = format!(
        r#"tr.server[data-addr="{}"] button[data-action="drain"]"#,
        two.addr
    );
    tokio::task::block_in_place(|| {
        tab.type_into(&weight_box, "7");
        tab.click(&set);
        tab.dom_until("that weight 7 was set", |dom| {
            dom.contains(&format!("p {}: weight 7 set.", one.addr))
        });
        tab.click(&drain);
        tab.dom_until("that the state drain was set", |dom| {
            dom.contains(&format!("p {}: state drain set.", two.addr))
        });
    });
    let now = stats(admin).await;
    let first = stats_server(&now, "p", one.addr);
    assert_eq!(first["weight"], 7, "the weight in force: {first}");
    assert_eq!(first["weight_configured"], 1, "the file's weight: {first}");
    assert_eq!(first["state"], "up", "{first}");
    let second = stats_server(&now, "p", two.addr);
    assert_eq!(second["state"], "drain", "{second}");
    assert_eq!(second["weight"], 2, "{second}");

    let dom = tokio::task::block_in_place(|| {
        tab.dom_until("weight 7 and the drain", |dom| {
            let rows = server_rows(dom);
            row(&rows, "p", one.addr).number("weight") == 7
                && row(&rows, "p", two.addr).attr("state") == "drain"
        })
    });
    let rows = server_rows(&dom);
    let first = row(&rows, "p", one.addr);
    assert_eq!(
        first.number("weight_configured"),
        1,
        "the rule file's weight stays: {first:?}"
    );
    assert_eq!(row(&rows, "p", two.addr).number("weight"), 2, "{rows:#?}");
    assert_eq!(first.number("requests"), one.requests() as u64, "{first:?}");
    let mark = tokio::task::block_in_place(|| tab.eval("window.tcpvsTestMark"));
    assert_eq!(mark, "same document", "the page was loaded again");
    drop(tab);

    // A screenshot, for whoever asks for one (not asserted).
    if let Some(keep) = std::env::var_os("TCPVS_MONITOR_SCREENSHOT") {
        let shot = scratch.0.join("monitor.png");
        tokio::task::block_in_place(|| browser.screenshot(&page, &shot));
        std::fs::copy(&shot, &keep).unwrap();
        eprintln!("monitor page screenshot: {}", PathBuf::from(keep).display());
    }
}
