//! The access log in a file (`access_log = "path"`) and as JSON lines
//! (`access_log_format = "json"`), on the real binary: one line per request, byte for byte;
//! the file reopened by its path on SIGUSR1 as logrotate's `postrotate` asks, a failed reopen
//! keeping the old file; SIGUSR1 logged and harmless when the log is not a file; JSON that a
//! JSON parser reads back, on stderr too; the combined format, a client that left before the
//! answer in it as 499; the rule-file errors; and whole lines from four workers writing at once.
//!
//! Verdicts rest on events: the files are read after the process exited from a graceful stop
//! (`shutdown_timeout = "1h"`: it exits only once every connection ended, so after every line
//! it would write for them), or, mid-run, once they hold the lines awaited; a reopen is awaited
//! by its log line. Timeouts only guard against hangs.

mod common;

use common::*;
use serde_json::{json, Value};
use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::path::Path;
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// A rule file: `[switch]` with `keys`, a graceful stop without deadline, and one virtual
/// service `web` without default pool: `/page...`, `/status/...` and `/q...` go to the pool
/// `web` (the one server), anything else gets the switch's own 503.
fn rules(keys: &str, server: SocketAddr) -> String {
    format!(
        "[switch]\nshutdown_timeout = \"1h\"\n{keys}\n\n\
         [virtual.web]\nlisten = \"127.0.0.1:0\"\n\n\
         [[virtual.web.rule]]\npath = \"^/(page|status/|q)\"\npool = \"web\"\n\n\
         [pool.web]\nservers = [{{ addr = \"{server}\" }}]\n"
    )
}

/// Starts `tcpvs run -c RULES` and waits for its `listening on` line.
async fn start(rules: &Path) -> (Process, SocketAddr, Vec<String>) {
    let rules = rules.to_owned();
    tokio::task::spawn_blocking(move || {
        let switch = Process::start(&["run".as_ref(), "-c".as_ref(), rules.as_os_str()]);
        let (addr, seen) = switch.address_after("listening on ");
        (switch, addr, seen)
    })
    .await
    .unwrap()
}

/// Sends `request` and reads one response framed by Content-Length: its status and the bytes
/// it took on the wire (head and body, as the access log counts them).
async fn exchange(stream: &mut TcpStream, request: &str, buf: &mut Vec<u8>) -> (u16, usize) {
    let (status, bytes, _) = counted_exchange(stream, request, buf).await;
    (status, bytes)
}

fn get(target: &str) -> String {
    format!("GET {target} HTTP/1.1\r\nHost: test\r\n\r\n")
}

/// The lines of a log file; each must end with a newline.
fn lines_of(path: &Path) -> Vec<String> {
    let text = std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    assert!(
        text.is_empty() || text.ends_with('\n'),
        "{}: the last line is cut: {text:?}",
        path.display()
    );
    text.lines().map(str::to_string).collect()
}

/// Waits until the file at `path` holds `n` complete lines (more fail the test) and returns
/// them; panics after [`PATIENCE`].
async fn wait_for_lines(path: &Path, n: usize) -> Vec<String> {
    let deadline = tokio::time::Instant::now() + PATIENCE;
    loop {
        let text = std::fs::read_to_string(path).unwrap_or_default();
        let complete = text.rfind('\n').map_or("", |end| &text[..=end]);
        let lines: Vec<String> = complete.lines().map(str::to_string).collect();
        assert!(lines.len() <= n, "more than {n} lines: {lines:#?}");
        if lines.len() == n {
            return lines;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{} has {} lines, not {n}, after {PATIENCE:?}: {lines:#?}",
            path.display(),
            lines.len()
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Milliseconds since the epoch.
fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

/// Days from 1970-01-01 to a date (the inverse of the switch's conversion, written apart).
fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let year = if month <= 2 { year - 1 } else { year };
    let era = year.div_euclid(400);
    let yoe = year - era * 400;
    let doy = (153 * ((month + 9) % 12) + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// Checks an RFC 3339 UTC time with milliseconds (`2025-01-31T12:00:00.123Z`) and that it
/// falls within `[from, to]` (milliseconds since the epoch, a second of slack each side).
fn assert_time(time: &str, from: i64, to: i64) {
    let b = time.as_bytes();
    let shape = b.len() == 24
        && b.iter().enumerate().all(|(i, &c)| match i {
            4 | 7 => c == b'-',
            10 => c == b'T',
            13 | 16 => c == b':',
            19 => c == b'.',
            23 => c == b'Z',
            _ => c.is_ascii_digit(),
        });
    assert!(shape, "{time:?} is not RFC 3339 UTC with milliseconds");
    let n = |range: std::ops::Range<usize>| time[range].parse::<i64>().unwrap();
    let days = days_from_civil(n(0..4), n(5..7), n(8..10));
    let ms = ((days * 24 + n(11..13)) * 60 + n(14..16)) * 60_000 + n(17..19) * 1000 + n(20..23);
    assert!(
        (from - 1000..=to + 1000).contains(&ms),
        "{time} is not between the start and the end of the test"
    );
}

/// Checks a text line of the file: the time, then `expected`, then (unless `expected` ends
/// the line, as a refusal's reason does) a duration in microseconds.
fn assert_text_line(line: &str, expected: &str, from: i64, to: i64) {
    let (time, rest) = line
        .split_once(' ')
        .unwrap_or_else(|| panic!("no time in {line:?}"));
    assert_time(time, from, to);
    let tail = rest
        .strip_prefix(expected)
        .unwrap_or_else(|| panic!("line {line:?} does not go on with {expected:?}"));
    if expected.ends_with(' ') {
        let micros = tail
            .strip_suffix("us")
            .unwrap_or_else(|| panic!("{line:?}: duration not in `us`"));
        assert!(
            !micros.is_empty() && micros.bytes().all(|b| b.is_ascii_digit()),
            "{line:?}: duration {tail:?} is not a number of microseconds"
        );
    } else {
        assert!(tail.is_empty(), "{line:?} goes on after {expected:?}");
    }
}

/// The one line of `lines` containing `needle`.
fn the_line<'l>(lines: &'l [String], needle: &str) -> &'l str {
    let found: Vec<&String> = lines.iter().filter(|l| l.contains(needle)).collect();
    assert_eq!(found.len(), 1, "lines with {needle:?}: {lines:#?}");
    found[0]
}

/// What [`four_requests`] sent and received.
struct Sent {
    /// The client address of the keep-alive connection and of the refused one.
    client: SocketAddr,
    refused_client: SocketAddr,
    /// Bytes on the wire of each answer, in the order below.
    bytes: [usize; 4],
}

/// The four requests the file tests log: on one keep-alive connection `GET /page?x=1` (200
/// from the server), `GET /status/404` (404 from the server), `GET /nowhere` (503 from the
/// switch: no rule, no default pool); then, on a second connection, a request the switch
/// refuses before routing it (400, fragment in the target) and closes.
async fn four_requests(addr: SocketAddr, second: &str) -> Sent {
    let mut stream = TcpStream::connect(addr).await.unwrap();
    let client = stream.local_addr().unwrap();
    let mut buf = Vec::new();
    let mut bytes = [0; 4];
    let mut statuses = [0; 4];
    for (i, target) in ["/page?x=1", second, "/nowhere"].into_iter().enumerate() {
        (statuses[i], bytes[i]) = exchange(&mut stream, &get(target), &mut buf).await;
    }
    drop(stream);
    let mut refused = TcpStream::connect(addr).await.unwrap();
    let refused_client = refused.local_addr().unwrap();
    let mut buf = Vec::new();
    (statuses[3], bytes[3]) = exchange(&mut refused, &get("/a#b"), &mut buf).await;
    // The switch closes a refused connection.
    let mut rest = [0u8; 16];
    let n = tokio::time::timeout(PATIENCE, refused.read(&mut rest))
        .await
        .expect("the switch closes after a refusal")
        .unwrap_or(0);
    assert_eq!(n, 0, "bytes after the refusal");
    let second_status = if second.starts_with("/status/404") {
        404
    } else {
        200
    };
    assert_eq!(statuses, [200, second_status, 503, 400]);
    Sent {
        client,
        refused_client,
        bytes,
    }
}

// ---------------------------------------------------------------- a file, text

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_gets_one_timed_line_per_request_and_stderr_none() {
    let server = backend().await;
    let scratch = Scratch::new("access_file_text");
    // A relative path: from the rule file's folder, not from the current directory.
    std::fs::create_dir(scratch.0.join("logs")).unwrap();
    let keys = "workers = 2\naccess_log = \"logs/access.log\"";
    let file = scratch.file("rules.toml", &rules(keys, server.addr));
    let from = now_ms();
    let (switch, addr, seen) = start(&file).await;
    let sent = four_requests(addr, "/status/404").await;
    let (rest, status) = stop(switch).await;
    let to = now_ms();
    assert!(status.success(), "{status:?}");
    let log: Vec<String> = seen.into_iter().chain(rest).collect();
    assert!(
        !log.iter()
            .any(|line| line.contains(&sent.client.to_string())
                || line.contains(&sent.refused_client.to_string())),
        "an access line went to stderr: {log:#?}"
    );

    let lines = lines_of(&scratch.0.join("logs/access.log"));
    assert_eq!(lines.len(), 4, "{lines:#?}");
    let (client, [page, missing, nowhere, refused]) = (sent.client, sent.bytes);
    let server = server.addr;
    // time, service, client, "METHOD target PROTOCOL", status, bytes sent, pool/server,
    // duration
    assert_text_line(
        the_line(&lines, "\"GET /page?x=1 HTTP/1.1\""),
        &format!("web {client} \"GET /page?x=1 HTTP/1.1\" 200 {page} web/{server} "),
        from,
        to,
    );
    assert_text_line(
        the_line(&lines, "\"GET /status/404 HTTP/1.1\""),
        &format!("web {client} \"GET /status/404 HTTP/1.1\" 404 {missing} web/{server} "),
        from,
        to,
    );
    // The switch's own answer: no pool, no server.
    assert_text_line(
        the_line(&lines, "\"GET /nowhere HTTP/1.1\""),
        &format!("web {client} \"GET /nowhere HTTP/1.1\" 503 {nowhere} -/- "),
        from,
        to,
    );
    // Refused before routing: no request, the reason instead of a duration.
    assert_text_line(
        the_line(&lines, " \"-\" "),
        &format!(
            "web {} \"-\" 400 {refused} -/- fragment in request target",
            sent.refused_client
        ),
        from,
        to,
    );
}

// ---------------------------------------------------------------- SIGUSR1

/// Sends `GET /page/N` for each N on one connection; every answer must be 200.
async fn pages(addr: SocketAddr, numbers: std::ops::RangeInclusive<usize>) {
    let mut stream = TcpStream::connect(addr).await.unwrap();
    let mut buf = Vec::new();
    for n in numbers {
        let (status, _) = exchange(&mut stream, &get(&format!("/page/{n}")), &mut buf).await;
        assert_eq!(status, 200, "/page/{n}");
    }
}

/// The page numbers of the lines, in order; each line must be a 200 for `/page/N`.
fn page_numbers(lines: &[String]) -> Vec<usize> {
    lines
        .iter()
        .map(|line| {
            let target = line
                .split_once("\"GET /page/")
                .and_then(|(_, rest)| rest.split_once(" HTTP/1.1\" 200 "))
                .unwrap_or_else(|| panic!("not a 200 for /page/N: {line:?}"))
                .0;
            target.parse().unwrap()
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigusr1_reopens_the_file_by_its_path_after_a_rename() {
    let server = backend().await;
    let scratch = Scratch::new("access_file_rotate");
    let keys = "workers = 2\naccess_log = \"access.log\"";
    let file = scratch.file("rules.toml", &rules(keys, server.addr));
    let (path, rotated) = (scratch.0.join("access.log"), scratch.0.join("access.log.1"));
    let (switch, addr, _) = start(&file).await;
    pages(addr, 1..=3).await;
    wait_for_lines(&path, 3).await;

    // What logrotate does: rename, then `postrotate kill -USR1`.
    std::fs::rename(&path, &rotated).unwrap();
    signal(&switch, rustix::process::Signal::USR1);
    let (switch, reopened, _) = line_with(switch, "access log reopened").await;
    assert!(
        reopened.ends_with(&format!("access log reopened: {}", path.display())),
        "{reopened}"
    );
    assert!(path.exists(), "the file was not created again");
    // One request on a new connection, one on a connection from before the reopen.
    let mut old = TcpStream::connect(addr).await.unwrap();
    let mut buf = Vec::new();
    assert_eq!(exchange(&mut old, &get("/page/4"), &mut buf).await.0, 200);
    pages(addr, 5..=6).await;
    assert_eq!(exchange(&mut old, &get("/page/7"), &mut buf).await.0, 200);
    drop(old);

    // The process lived through the signal and stops as usual.
    let (log, status) = stop(switch).await;
    assert!(status.success(), "{status:?}: {log:#?}");
    assert_eq!(page_numbers(&lines_of(&rotated)), [1, 2, 3]);
    let mut new = page_numbers(&lines_of(&path));
    new.sort_unstable();
    assert_eq!(new, [4, 5, 6, 7]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reopen_that_fails_keeps_the_old_file_until_one_succeeds() {
    let server = backend().await;
    let scratch = Scratch::new("access_file_reopen_fails");
    // One worker: the signal is handled on the main thread, beside the sessions.
    let keys = "workers = 1\naccess_log = \"access.log\"\naccess_log_format = \"text\"";
    let file = scratch.file("rules.toml", &rules(keys, server.addr));
    let (path, rotated) = (scratch.0.join("access.log"), scratch.0.join("access.log.1"));
    let (switch, addr, _) = start(&file).await;
    pages(addr, 1..=1).await;
    wait_for_lines(&path, 1).await;

    // The path cannot be opened as a file: a folder took its place.
    std::fs::rename(&path, &rotated).unwrap();
    std::fs::create_dir(&path).unwrap();
    signal(&switch, rustix::process::Signal::USR1);
    let (switch, warning, _) = line_with(switch, "cannot reopen").await;
    assert!(
        warning.contains(" WARN ")
            && warning.contains(&format!("access log {}: cannot reopen: ", path.display()))
            && warning.ends_with("; still writing to the old file"),
        "{warning}"
    );
    pages(addr, 2..=2).await;
    wait_for_lines(&rotated, 2).await;

    // Once the path can be opened again, the next signal moves the log there.
    std::fs::remove_dir(&path).unwrap();
    signal(&switch, rustix::process::Signal::USR1);
    let (switch, _, between) = line_with(switch, "access log reopened").await;
    pages(addr, 3..=3).await;

    let (rest, status) = stop(switch).await;
    let log: Vec<String> = between.into_iter().chain(rest).collect();
    assert!(status.success(), "{status:?}: {log:#?}");
    assert!(
        !log.iter().any(|line| line.contains("cannot reopen")),
        "a second warning: {log:#?}"
    );
    assert_eq!(page_numbers(&lines_of(&rotated)), [1, 2]);
    assert_eq!(page_numbers(&lines_of(&path)), [3]);
}

/// With the log on stderr (or off), SIGUSR1 has nothing to reopen: each one logs that, and the
/// switch goes on serving (the signal's default action would end it). The text line on stderr
/// escapes a `"` and a `\\` of the target as nginx does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigusr1_without_a_file_is_logged_and_ends_nothing() {
    const NOTHING: &str = "SIGUSR1: the access log is not a file, nothing to reopen";
    let server = backend().await;
    let scratch = Scratch::new("access_stderr_usr1");
    for (workers, on) in [(1, true), (2, true), (2, false)] {
        let keys = format!("workers = {workers}\naccess_log = {on}");
        let file = scratch.file("rules.toml", &rules(&keys, server.addr));
        let (switch, addr, _) = start(&file).await;
        let mut log = Vec::new();
        let mut switch = switch;
        let mut stream = TcpStream::connect(addr).await.unwrap();
        let client = stream.local_addr().unwrap().to_string();
        let mut buf = Vec::new();
        for round in 0..2 {
            signal(&switch, rustix::process::Signal::USR1);
            let (alive, line, before) = line_with(switch, NOTHING).await;
            switch = alive;
            log.extend(before);
            assert!(
                line.contains(" INFO ") && line.ends_with(NOTHING),
                "{keys}: {line}"
            );
            // Still serving, on the connection from before the signal.
            let (status, _) = exchange(&mut stream, &get(r#"/q?a="b\c""#), &mut buf).await;
            assert_eq!(status, 200, "{keys}, round {round}");
        }
        drop(stream);
        let (rest, status) = stop(switch).await;
        log.extend(rest);
        assert!(status.success(), "{keys}: {status:?}: {log:#?}");
        assert!(
            !log.iter().any(|line| line.contains("SIGUSR1")),
            "{keys}: more than one line per signal: {log:#?}"
        );
        let access: Vec<&String> = log.iter().filter(|l| l.contains(&client)).collect();
        if on {
            assert_eq!(access.len(), 2, "{keys}: {log:#?}");
            for line in access {
                assert!(
                    line.contains(r#" "GET /q?a=\x22b\x5Cc\x22 HTTP/1.1" 200 "#),
                    "{keys}: {line}"
                );
            }
        } else {
            assert!(access.is_empty(), "{keys}: {log:#?}");
        }
    }
}

// ---------------------------------------------------------------- JSON

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_lines_parse_with_every_field_and_escaped_targets() {
    let server = backend().await;
    let scratch = Scratch::new("access_file_json");
    let keys = "workers = 2\naccess_log = \"access.log\"\naccess_log_format = \"json\"";
    let file = scratch.file("rules.toml", &rules(keys, server.addr));
    let from = now_ms();
    let (switch, addr, _) = start(&file).await;
    // A quote and a backslash in the target.
    let tricky = r#"/q?a="b\c""#;
    let sent = four_requests(addr, tricky).await;
    let (log, status) = stop(switch).await;
    let to = now_ms();
    assert!(status.success(), "{status:?}: {log:#?}");

    let lines = lines_of(&scratch.0.join("access.log"));
    assert_eq!(lines.len(), 4, "{lines:#?}");
    let mut objects: Vec<Value> = lines
        .iter()
        .map(|line| {
            serde_json::from_str(line).unwrap_or_else(|e| panic!("{line:?} is not JSON: {e}"))
        })
        .collect();
    for object in &mut objects {
        let object = object.as_object_mut().expect("each line is an object");
        let time = object.remove("time").expect("a time");
        assert_time(time.as_str().expect("the time is a string"), from, to);
        let duration = object.remove("duration_us").expect("a duration_us");
        let refused = object.contains_key("error");
        assert!(
            if refused {
                duration.is_null()
            } else {
                duration.is_u64()
            },
            "duration_us {duration} in {object:?}"
        );
    }
    let (client, server) = (sent.client.to_string(), server.addr.to_string());
    let find = |method: Value, target: Value| {
        let found: Vec<&Value> = objects
            .iter()
            .filter(|o| o["method"] == method && o["target"] == target)
            .collect();
        assert_eq!(found.len(), 1, "{method} {target}: {objects:#?}");
        found[0].clone()
    };
    let [page, second, nowhere, refused] = sent.bytes;
    assert_eq!(
        find(json!("GET"), json!("/page?x=1")),
        json!({"service": "web", "client": client, "method": "GET", "target": "/page?x=1",
               "protocol": "HTTP/1.1", "status": 200, "bytes": page, "pool": "web",
               "server": server})
    );
    assert_eq!(
        find(json!("GET"), json!(tricky)),
        json!({"service": "web", "client": client, "method": "GET", "target": tricky,
               "protocol": "HTTP/1.1", "status": 200, "bytes": second, "pool": "web",
               "server": server})
    );
    assert_eq!(
        find(json!("GET"), json!("/nowhere")),
        json!({"service": "web", "client": client, "method": "GET", "target": "/nowhere",
               "protocol": "HTTP/1.1", "status": 503, "bytes": nowhere, "pool": null,
               "server": null})
    );
    assert_eq!(
        find(Value::Null, Value::Null),
        json!({"service": "web", "client": sent.refused_client.to_string(), "method": null,
               "target": null, "protocol": null, "status": 400, "bytes": refused, "pool": null,
               "server": null, "error": "fragment in request target"})
    );
    // The raw line escapes the quote and the backslash.
    assert!(
        lines
            .iter()
            .any(|l| l.contains(r#""target":"/q?a=\"b\\c\"""#)),
        "{lines:#?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_on_stderr_is_one_bare_object_per_line() {
    let server = backend().await;
    let scratch = Scratch::new("access_stderr_json");
    let keys = "workers = 1\naccess_log = true\naccess_log_format = \"json\"";
    let file = scratch.file("rules.toml", &rules(keys, server.addr));
    let (switch, addr, _) = start(&file).await;
    let mut stream = TcpStream::connect(addr).await.unwrap();
    let client = stream.local_addr().unwrap().to_string();
    let mut buf = Vec::new();
    let (status, bytes) = exchange(&mut stream, &get("/page?x=1"), &mut buf).await;
    assert_eq!(status, 200);
    drop(stream);
    let (log, status) = stop(switch).await;
    assert!(status.success(), "{status:?}: {log:#?}");
    let access: Vec<&String> = log.iter().filter(|l| l.contains(&client)).collect();
    assert_eq!(access.len(), 1, "{log:#?}");
    // Not through the log's formatter: no time and level before the object.
    assert!(access[0].starts_with("{\"time\":\""), "{}", access[0]);
    let object: Value = serde_json::from_str(access[0]).unwrap();
    assert_eq!(object["target"], "/page?x=1");
    assert_eq!(object["status"], 200);
    assert_eq!(object["bytes"], bytes);
    assert_eq!(object["server"], server.addr.to_string());
}

// ---------------------------------------------------------------- spoofing bytes

/// What a client sends to spoof a log viewer: U+202E RIGHT-TO-LEFT OVERRIDE (the rest of the
/// line shows backwards), U+2028 LINE SEPARATOR (a viewer breaks the line there), a quote; and
/// in field values bytes that are not UTF-8 (the head parser refuses them in a target).
const RLO: &str = "\u{202e}";
const LS: &str = "\u{2028}";

/// Sends raw request bytes on `stream` and reads the answer: its status and bytes on the wire.
async fn raw_exchange(stream: &mut TcpStream, request: &[u8], buf: &mut Vec<u8>) -> (u16, usize) {
    use tokio::io::AsyncWriteExt;
    stream.write_all(request).await.unwrap();
    let (status, bytes, _) = counted_exchange(stream, "", buf).await;
    (status, bytes)
}

/// The requests the spoofing tests send on one connection: a target with U+202E for the pool
/// (200), a target with `é` and U+2028 for the switch's own 503. Returns the client's address
/// and the bytes of each answer.
async fn spoofing_requests(addr: SocketAddr) -> (SocketAddr, [usize; 2]) {
    let mut stream = TcpStream::connect(addr).await.unwrap();
    let client = stream.local_addr().unwrap();
    let mut buf = Vec::new();
    let first = format!("GET /q?{RLO}gpj.exe\" HTTP/1.1\r\nHost: test\r\n\r\n");
    let (status, first) = raw_exchange(&mut stream, first.as_bytes(), &mut buf).await;
    assert_eq!(status, 200);
    let mut second = "GET /nowhereé".as_bytes().to_vec();
    second.extend_from_slice(LS.as_bytes());
    second.extend_from_slice(b"x HTTP/1.1\r\nHost: test\r\n\r\n");
    let (status, second) = raw_exchange(&mut stream, &second, &mut buf).await;
    assert_eq!(status, 503);
    (client, [first, second])
}

/// The text line escapes every byte from 0x80 as `\xHH`, as nginx does: a viewer gets ASCII.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn text_lines_escape_every_byte_from_0x80() {
    let server = backend().await;
    let scratch = Scratch::new("access_spoof_text");
    let keys = "workers = 1\naccess_log = \"access.log\"";
    let file = scratch.file("rules.toml", &rules(keys, server.addr));
    let from = now_ms();
    let (switch, addr, _) = start(&file).await;
    let (client, [first, second]) = spoofing_requests(addr).await;
    let (log, status) = stop(switch).await;
    let to = now_ms();
    assert!(status.success(), "{status:?}: {log:#?}");
    let bytes = std::fs::read(scratch.0.join("access.log")).unwrap();
    assert!(
        bytes
            .iter()
            .all(|&b| b == b'\n' || (b' '..=b'~').contains(&b)),
        "not printable ASCII: {:?}",
        String::from_utf8_lossy(&bytes)
    );
    let lines = lines_of(&scratch.0.join("access.log"));
    assert_eq!(lines.len(), 2, "{lines:#?}");
    let server = server.addr;
    assert_text_line(
        &lines[0],
        &format!(
            r#"web {client} "GET /q?\xE2\x80\xAEgpj.exe\x22 HTTP/1.1" 200 {first} web/{server} "#
        ),
        from,
        to,
    );
    assert_text_line(
        &lines[1],
        &format!(r#"web {client} "GET /nowhere\xC3\xA9\xE2\x80\xA8x HTTP/1.1" 503 {second} -/- "#),
        from,
        to,
    );
}

/// JSON lines escape every character beyond ASCII as `\uXXXX`: the line is ASCII, and a JSON
/// parser gives the target back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_lines_are_ascii_and_parse_back_to_the_target() {
    let server = backend().await;
    let scratch = Scratch::new("access_spoof_json");
    let keys = "workers = 1\naccess_log = \"access.log\"\naccess_log_format = \"json\"";
    let file = scratch.file("rules.toml", &rules(keys, server.addr));
    let (switch, addr, _) = start(&file).await;
    spoofing_requests(addr).await;
    let (log, status) = stop(switch).await;
    assert!(status.success(), "{status:?}: {log:#?}");
    let bytes = std::fs::read(scratch.0.join("access.log")).unwrap();
    assert!(
        bytes
            .iter()
            .all(|&b| b == b'\n' || (b' '..=b'~').contains(&b)),
        "not printable ASCII: {:?}",
        String::from_utf8_lossy(&bytes)
    );
    let lines = lines_of(&scratch.0.join("access.log"));
    assert_eq!(lines.len(), 2, "{lines:#?}");
    assert!(
        lines[0].contains(r#","target":"/q?\u202egpj.exe\"","#),
        "{}",
        lines[0]
    );
    assert!(
        lines[1].contains(r#","target":"/nowhere\u00e9\u2028x","#),
        "{}",
        lines[1]
    );
    let targets: Vec<String> = lines
        .iter()
        .map(|line| {
            let object: Value = serde_json::from_str(line).unwrap();
            object["target"].as_str().unwrap().to_string()
        })
        .collect();
    assert_eq!(
        targets,
        [format!("/q?{RLO}gpj.exe\""), format!("/nowhereé{LS}x")]
    );
}

// ---------------------------------------------------------------- combined

/// Checks a combined line: `host - - [date] ` with a date within the test, then `rest` byte
/// for byte.
fn assert_combined_line(line: &str, host: &str, rest: &str, from: i64, to: i64) {
    let prefix = format!("{host} - - [");
    let after = line
        .strip_prefix(&prefix)
        .unwrap_or_else(|| panic!("{line:?} does not begin with {prefix:?}"));
    let (date, tail) = after
        .split_once("] ")
        .unwrap_or_else(|| panic!("no date in {line:?}"));
    // `01/Mar/2024:00:00:00 +0000`
    const MONTHS: [&str; 12] = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ];
    let b = date.as_bytes();
    let shape = b.len() == 26
        && date.ends_with(" +0000")
        && [2, 6].iter().all(|&i| b[i] == b'/')
        && [11, 14, 17].iter().all(|&i| b[i] == b':');
    assert!(shape, "{date:?} is not a CLF date in UTC");
    let n = |range: std::ops::Range<usize>| date[range].parse::<i64>().unwrap();
    let month = MONTHS
        .iter()
        .position(|m| *m == &date[3..6])
        .unwrap_or_else(|| panic!("month {:?}", &date[3..6])) as i64
        + 1;
    let days = days_from_civil(n(7..11), month, n(0..2));
    let ms = ((days * 24 + n(12..14)) * 60 + n(15..17)) * 60_000 + n(18..20) * 1000;
    assert!(
        (from - 2000..=to + 1000).contains(&ms),
        "{date} is not between the start and the end of the test"
    );
    assert_eq!(tail, rest, "{line:?}");
}

/// `access_log_format = "combined"`: NCSA Combined Log Format lines, byte for byte: the
/// request line with its protocol, the first Referer and User-Agent (escaped as nginx escapes
/// them, `-` when absent, `""` when empty), `"-"` for a request refused before it was read,
/// and nothing after the user agent. When goaccess is installed, it reads every line as a
/// valid request with `--log-format=COMBINED` (the suite does not need it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn combined_lines_are_ncsa_combined_byte_for_byte() {
    let server = backend().await;
    let scratch = Scratch::new("access_combined");
    let keys = "workers = 2\naccess_log = \"access.log\"\naccess_log_format = \"combined\"";
    let file = scratch.file("rules.toml", &rules(keys, server.addr));
    let from = now_ms();
    let (switch, addr, _) = start(&file).await;

    let mut stream = TcpStream::connect(addr).await.unwrap();
    let mut buf = Vec::new();
    let browser = format!(
        "GET /page?x=1 HTTP/1.1\r\nHost: test\r\nReferer: https://example.com/{RLO}gpj.exe\r\n\
         User-Agent: Mozilla/5.0 \"x\" {LS}evil\r\nReferer: https://second.example/\r\n\r\n"
    );
    let (status, page) = raw_exchange(&mut stream, browser.as_bytes(), &mut buf).await;
    assert_eq!(status, 200);
    let (status, nowhere) = raw_exchange(
        &mut stream,
        b"GET /nowhere HTTP/1.1\r\nHost: test\r\nuser-agent: curl/8.5 \xff\xc3(\r\n\r\n",
        &mut buf,
    )
    .await;
    assert_eq!(status, 503);
    // HTTP/1.0, an empty User-Agent; the switch closes after it.
    let (status, old) = raw_exchange(
        &mut stream,
        b"GET /status/404 HTTP/1.0\r\nHost: test\r\nUser-Agent:\r\n\r\n",
        &mut buf,
    )
    .await;
    assert_eq!(status, 404);
    drop(stream);
    let mut refused = TcpStream::connect(addr).await.unwrap();
    let mut buf = Vec::new();
    let (status, bad) = exchange(&mut refused, &get("/a#b"), &mut buf).await;
    assert_eq!(status, 400);
    let mut rest = [0u8; 16];
    let n = tokio::time::timeout(PATIENCE, refused.read(&mut rest))
        .await
        .expect("the switch closes after a refusal")
        .unwrap_or(0);
    assert_eq!(n, 0);

    let (log, status) = stop(switch).await;
    let to = now_ms();
    assert!(status.success(), "{status:?}: {log:#?}");
    let path = scratch.0.join("access.log");
    let lines = lines_of(&path);
    assert_eq!(lines.len(), 4, "{lines:#?}");
    let expected = [
        format!(
            r#""GET /page?x=1 HTTP/1.1" 200 {page} "https://example.com/\xE2\x80\xAEgpj.exe" "Mozilla/5.0 \x22x\x22 \xE2\x80\xA8evil""#
        ),
        format!(r#""GET /nowhere HTTP/1.1" 503 {nowhere} "-" "curl/8.5 \xFF\xC3(""#),
        format!(r#""GET /status/404 HTTP/1.0" 404 {old} "-" """#),
        format!(r#""-" 400 {bad} "-" "-""#),
    ];
    for (line, rest) in lines.iter().zip(&expected) {
        assert_combined_line(line, "127.0.0.1", rest, from, to);
    }
    // Nothing on stderr but the switch's own log.
    assert!(
        !log.iter().any(|line| line.contains("GET /")),
        "an access line went to stderr: {log:#?}"
    );

    // goaccess, when it is there, takes every line for a valid request.
    match std::process::Command::new("goaccess")
        .arg(&path)
        .args(["--log-format=COMBINED", "--no-global-config", "-o"])
        .arg(scratch.0.join("report.json"))
        .output()
    {
        Err(e) => {
            eprintln!("goaccess not run ({e}): the combined format was checked byte for byte only")
        }
        Ok(run) => {
            assert!(run.status.success(), "goaccess: {run:?}");
            let report: Value =
                serde_json::from_slice(&std::fs::read(scratch.0.join("report.json")).unwrap())
                    .unwrap();
            let general = &report["general"];
            assert_eq!(general["total_requests"], 4, "{general}");
            assert_eq!(general["valid_requests"], 4, "{general}");
            assert_eq!(general["failed_requests"], 0, "{general}");
        }
    }
}

/// A client that leaves before any answer is logged `499` in the combined format, as nginx
/// writes it (the other formats say 0, which readers of the combined format refuse): here a
/// client announces a body, sends half of it once the server holds the request, and closes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn combined_logs_a_client_that_left_before_the_answer_as_499() {
    let server = backend().await;
    let scratch = Scratch::new("access_combined_499");
    let keys = "workers = 1\naccess_log = \"access.log\"\naccess_log_format = \"combined\"";
    let file = scratch.file("rules.toml", &rules(keys, server.addr));
    let from = now_ms();
    let (switch, addr, _) = start(&file).await;
    let mut stream = TcpStream::connect(addr).await.unwrap();
    stream
        .write_all(
            b"POST /page/upload HTTP/1.1\r\nHost: test\r\nContent-Length: 10\r\n\
              User-Agent: leaving/1\r\n\r\n",
        )
        .await
        .unwrap();
    server.wait_for_requests(1).await;
    stream.write_all(b"hello").await.unwrap();
    drop(stream);
    // The switch ends the exchange with the server once it sees the client gone.
    server.wait_for_closed(1).await;
    let (log, status) = stop(switch).await;
    let to = now_ms();
    assert!(status.success(), "{status:?}: {log:#?}");
    let lines = lines_of(&scratch.0.join("access.log"));
    assert_eq!(lines.len(), 1, "{lines:#?}");
    assert_combined_line(
        &lines[0],
        "127.0.0.1",
        r#""POST /page/upload HTTP/1.1" 499 0 "-" "leaving/1""#,
        from,
        to,
    );
}

/// On stderr, combined lines are bare, as JSON lines are: no time and level before them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn combined_on_stderr_is_one_bare_line_per_request() {
    let server = backend().await;
    let scratch = Scratch::new("access_stderr_combined");
    let keys = "workers = 1\naccess_log = true\naccess_log_format = \"combined\"";
    let file = scratch.file("rules.toml", &rules(keys, server.addr));
    let from = now_ms();
    let (switch, addr, _) = start(&file).await;
    let mut stream = TcpStream::connect(addr).await.unwrap();
    let mut buf = Vec::new();
    let (status, bytes) = exchange(&mut stream, &get("/page?x=1"), &mut buf).await;
    assert_eq!(status, 200);
    drop(stream);
    let (log, status) = stop(switch).await;
    let to = now_ms();
    assert!(status.success(), "{status:?}: {log:#?}");
    let access: Vec<&String> = log.iter().filter(|l| l.contains("GET /page")).collect();
    assert_eq!(access.len(), 1, "{log:#?}");
    assert_combined_line(
        access[0],
        "127.0.0.1",
        &format!(r#""GET /page?x=1 HTTP/1.1" 200 {bytes} "-" "-""#),
        from,
        to,
    );
}

// ---------------------------------------------------------------- the rule file

/// Runs `tcpvs ARGS` to its end with `RUST_LOG=off`.
fn run_to_end(args: &[&std::ffi::OsStr]) -> std::process::Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_tcpvs"))
        .args(args)
        .env("RUST_LOG", "off")
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap()
}

#[test]
fn bad_values_are_refused_at_their_place() {
    let scratch = Scratch::new("access_check");
    let server: SocketAddr = "127.0.0.1:9".parse().unwrap();
    for (keys, needle, message) in [
        (
            "access_log = 3",
            "3",
            "access_log must be true, false or a file path",
        ),
        (
            "access_log = [\"a.log\"]",
            "[\"a.log\"]",
            "access_log must be true, false or a file path",
        ),
        ("access_log = \"\"", "\"\"", "access_log file path is empty"),
        (
            "access_log_format = \"xml\"",
            "\"xml\"",
            "access_log_format must be \"text\", \"json\" or \"combined\", not \"xml\"",
        ),
    ] {
        let text = rules(keys, server);
        let file = scratch.file("bad.toml", &text);
        let check = run_to_end(&["check".as_ref(), file.as_os_str()]);
        let stderr = String::from_utf8_lossy(&check.stderr);
        assert_eq!(check.status.code(), Some(1), "{keys}: {stderr}");
        let (line, col) = position_of(&text, keys);
        let col = col + keys.find(needle).unwrap();
        assert_eq!(
            stderr,
            format!("{}:{line}:{col}: {message}\n", file.display()),
            "{keys}"
        );
    }
}

#[test]
fn a_file_that_cannot_be_opened_stops_the_start_not_the_check() {
    let scratch = Scratch::new("access_cannot_open");
    let server: SocketAddr = "127.0.0.1:9".parse().unwrap();
    for workers in [1, 2] {
        let keys = format!("workers = {workers}\naccess_log = \"no/such/folder/access.log\"");
        let file = scratch.file("rules.toml", &rules(&keys, server));
        let check = run_to_end(&["check".as_ref(), file.as_os_str()]);
        assert!(check.status.success(), "{check:?}");
        let run = run_to_end(&["run".as_ref(), "-c".as_ref(), file.as_os_str()]);
        let stderr = String::from_utf8_lossy(&run.stderr);
        assert_eq!(run.status.code(), Some(1), "workers = {workers}: {stderr}");
        let expected = format!(
            "tcpvs: cannot open the access log {}: ",
            scratch.0.join("no/such/folder/access.log").display()
        );
        assert!(
            stderr.starts_with(&expected) && stderr.lines().count() == 1,
            "workers = {workers}: expected {expected}..., got {stderr}"
        );
    }
}

// ---------------------------------------------------------------- concurrency

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn four_workers_write_whole_lines_one_per_request() {
    const CLIENTS: usize = 8;
    const REQUESTS: usize = 200;
    let server = backend().await;
    let scratch = Scratch::new("access_file_concurrent");
    let keys = "workers = 4\naccess_log = \"access.log\"";
    let file = scratch.file("rules.toml", &rules(keys, server.addr));
    let from = now_ms();
    let (switch, addr, _) = start(&file).await;
    // Long lines (about 2 KB), so that lines cut into each other could not go unnoticed.
    let pad = "x".repeat(2000);
    let mut tasks = Vec::new();
    let mut clients = Vec::new();
    for c in 0..CLIENTS {
        let mut client = Client::connect(addr).await;
        clients.push(client.stream.local_addr().unwrap());
        let pad = pad.clone();
        tasks.push(tokio::spawn(async move {
            for i in 0..REQUESTS {
                let response = client.get(&format!("/page/{c}/{i}?pad={pad}")).await;
                assert_eq!(response.status, 200, "client {c}, request {i}");
            }
        }));
    }
    join_all(tasks).await;
    let (log, status) = stop(switch).await;
    let to = now_ms();
    assert!(status.success(), "{status:?}: {log:#?}");

    let lines = lines_of(&scratch.0.join("access.log"));
    assert_eq!(lines.len(), CLIENTS * REQUESTS);
    let mut seen = BTreeSet::new();
    for line in &lines {
        let (time, rest) = line.split_once(' ').expect("a time");
        assert_time(time, from, to);
        let (client, rest) = rest
            .strip_prefix("web ")
            .and_then(|rest| rest.split_once(" \"GET /page/"))
            .unwrap_or_else(|| panic!("malformed line {line:?}"));
        let (c, rest) = rest.split_once('/').expect("client number");
        let (i, rest) = rest.split_once("?pad=").expect("request number");
        let (c, i): (usize, usize) = (c.parse().unwrap(), i.parse().unwrap());
        assert_eq!(client, clients[c].to_string(), "{line:?}");
        let body = format!("path /page/{c}/{i}\n");
        let tail = rest
            .strip_prefix(&pad)
            .and_then(|rest| rest.strip_prefix(" HTTP/1.1\" 200 "))
            .and_then(|rest| rest.split_once(' '))
            .and_then(|(bytes, rest)| Some((bytes.parse::<usize>().ok()?, rest)))
            .unwrap_or_else(|| panic!("malformed line {line:?}"));
        let (bytes, rest) = tail;
        assert!(bytes > body.len(), "{line:?}");
        let micros = rest
            .strip_prefix(&format!("web/{} ", server.addr))
            .and_then(|rest| rest.strip_suffix("us"))
            .unwrap_or_else(|| panic!("malformed line {line:?}"));
        assert!(micros.bytes().all(|b| b.is_ascii_digit()) && !micros.is_empty());
        assert!(seen.insert((c, i)), "two lines for client {c}, request {i}");
    }
    assert_eq!(seen.len(), CLIENTS * REQUESTS);
}
