//! Headless Chromium driven over the DevTools protocol (`--remote-debugging-pipe`, which
//! Debian's `chromium` has; no WebDriver), for tests that ask the browser itself what it did:
//! a page is opened in a tab that stays open, and JavaScript expressions are evaluated in it as
//! often as the test likes.
//!
//! The protocol's two descriptors (Chromium reads JSON messages ended by a NUL byte on its file
//! descriptor 3, writes on 4) are named pipes in a scratch folder that `sh` opens as 3 and 4
//! before it becomes Chromium, so nothing here needs `unsafe` (`pre_exec`). Every answer is
//! awaited at most [`CHROMIUM_LIMIT`]; the browser and its helpers are killed when the
//! [`Tab`] is dropped. Included with `#[path]` by the tests that use it (the same approach as
//! tests/monitor.rs, which keeps its own copy).

#![allow(dead_code)]

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The longest one wait on Chromium may take before the test fails.
pub const CHROMIUM_LIMIT: Duration = Duration::from_secs(60);

/// The options of every Chromium run.
const HEADLESS: [&str; 7] = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--no-first-run",
    "--hide-scrollbars",
    "--window-size=1400,900",
];

/// Chromium's binary: `TCPVS_CHROMIUM`, else `chromium` or `chromium-browser` on PATH; fails
/// the test saying how to install it.
pub fn find_chromium(test: &str) -> PathBuf {
    if let Some(path) = std::env::var_os("TCPVS_CHROMIUM") {
        return PathBuf::from(path);
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    let found = ["chromium", "chromium-browser"].iter().find_map(|name| {
        std::env::split_paths(&path)
            .map(|dir| dir.join(name))
            .find(|candidate| is_executable(candidate))
    });
    found.unwrap_or_else(|| {
        panic!(
            "{test} needs headless Chromium and found no `chromium` on PATH: install it with \
             `sudo apt-get install chromium` (Debian, Ubuntu; .ci/run does this on CI), or \
             name a Chromium binary in TCPVS_CHROMIUM"
        )
    })
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

/// One Chromium with one page open in it.
pub struct Tab {
    child: std::process::Child,
    group: rustix::process::Pid,
    to_browser: std::fs::File,
    from_browser: std::sync::mpsc::Receiver<serde_json::Value>,
    from_path: PathBuf,
    stderr_path: PathBuf,
    session: String,
    next_id: u64,
}

impl Tab {
    /// Starts `binary` headless with `args` besides the usual ones, a profile of its own in
    /// `scratch`, and opens `url` in a new tab. Returns as soon as the tab is attached: the
    /// page may still be loading (see [`Tab::eval_until`]).
    pub fn open(binary: &Path, scratch: &Path, args: &[&str], url: &str) -> Tab {
        use rustix::fs::{FileType, Mode, CWD};
        let profile = scratch.join("chromium-profile");
        let to_path = scratch.join("devtools.in");
        let from_path = scratch.join("devtools.out");
        let stderr_path = scratch.join("chromium.err");
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
            .expect("the pipe to Chromium");
        let mut command = Command::new("sh");
        command
            .arg("-c")
            .arg(r#"exec "$0" "$@" 3<"$TCPVS_DEVTOOLS_IN" 4>"$TCPVS_DEVTOOLS_OUT""#)
            .arg(binary)
            .args(HEADLESS)
            .arg(format!("--user-data-dir={}", profile.display()))
            .arg("--remote-debugging-pipe")
            .args(args)
            .arg("about:blank")
            .env("TCPVS_DEVTOOLS_IN", &to_path)
            .env("TCPVS_DEVTOOLS_OUT", &from_path)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&stderr_path).expect("Chromium's stderr file"))
            // A process group of its own: the end kills Chromium's helpers too.
            .process_group(0);
        let child = command.spawn().unwrap_or_else(|e| {
            panic!(
                "cannot start {} ({e}): install Chromium with `sudo apt-get install chromium`",
                binary.display()
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
        let mut tab = Tab {
            child,
            group,
            to_browser,
            from_browser,
            from_path,
            stderr_path,
            session: String::new(),
            next_id: 0,
        };
        let target = tab
            .call("Target.createTarget", serde_json::json!({ "url": url }))
            .unwrap_or_else(|e| panic!("{e}"));
        let attached = tab
            .call(
                "Target.attachToTarget",
                serde_json::json!({ "targetId": target["targetId"], "flatten": true }),
            )
            .unwrap_or_else(|e| panic!("{e}"));
        tab.session = attached["sessionId"]
            .as_str()
            .unwrap_or_else(|| panic!("no sessionId in {attached}"))
            .to_string();
        tab
    }

    /// Sends one command (to the page once attached) and returns its result, or Chromium's
    /// error answer; events that come meanwhile are skipped. Fails the test when Chromium
    /// exits or does not answer within [`CHROMIUM_LIMIT`].
    fn call(
        &mut self,
        method: &str,
        params: serde_json::Value,
    ) -> Result<serde_json::Value, String> {
        use std::io::Write;
        self.next_id += 1;
        let id = self.next_id;
        let mut message = serde_json::json!({ "id": id, "method": method, "params": params });
        if !self.session.is_empty() {
            message["sessionId"] = self.session.clone().into();
        }
        let mut bytes = serde_json::to_vec(&message).expect("JSON");
        bytes.push(0);
        self.to_browser
            .write_all(&bytes)
            .expect("a command to Chromium");
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
                return Err(format!("{method} {message}: Chromium answered {error}"));
            }
            return Ok(answer["result"].clone());
        }
    }

    /// The value of the JavaScript expression `expression` in the page (a promise is
    /// awaited), or why there is none: an exception, or no page to evaluate it in (while one
    /// document replaces another).
    pub fn try_eval(&mut self, expression: &str) -> Result<serde_json::Value, String> {
        let result = self.call(
            "Runtime.evaluate",
            serde_json::json!({
                "expression": expression,
                "returnByValue": true,
                "awaitPromise": true,
            }),
        )?;
        if let Some(exception) = result.get("exceptionDetails") {
            return Err(format!("{expression}: {exception}"));
        }
        Ok(result["result"]["value"].clone())
    }

    /// The value of `expression`; an exception fails the test.
    pub fn eval(&mut self, expression: &str) -> serde_json::Value {
        self.try_eval(expression).unwrap_or_else(|e| panic!("{e}"))
    }

    /// Evaluates `expression` until it is `true`, or fails the test saying `what` did not
    /// happen within [`CHROMIUM_LIMIT`] (with the last answer and Chromium's stderr). The
    /// deadline only ends a wait that would never end; it decides nothing.
    pub fn eval_until(&mut self, what: &str, expression: &str) {
        let deadline = Instant::now() + CHROMIUM_LIMIT;
        loop {
            let answer = self.try_eval(expression);
            if answer == Ok(serde_json::Value::Bool(true)) {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "{what} did not happen within {CHROMIUM_LIMIT:?}: {expression} gave {answer:?}; \
                 Chromium's stderr:\n{}",
                tail(&self.stderr_path)
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Tab {
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
