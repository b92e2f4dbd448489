//! The access log: one line per request, on stderr (the default) or in a file, as text or as
//! JSON lines.
//!
//! - **stderr, text**: through `tracing` (target `tcpvs::access`), after its time and level, as
//!   always: `web 127.0.0.1:50312 "GET /page?x=1" 200 148 web/127.0.0.1:9001 312us`.
//! - **a file, text**: the same fields after an RFC 3339 UTC time with milliseconds, as nginx
//!   writes them: `2025-01-31T12:00:00.123Z web 127.0.0.1:50312 "GET /page?x=1" 200 ...`.
//! - **JSON** (file or stderr): one object per line with `time`, `service`, `client`,
//!   `method`, `target`, `status`, `bytes`, `pool`, `server`, `duration_us` (`null` where the
//!   text line has `-`); a request refused before it was read whole adds `error`, its reason.
//!
//! A file is opened with `O_APPEND` and every line goes out in one write(2) from a buffer of
//! the writing thread, so lines of several workers never interleave, and a steady request
//! allocates nothing for its line. On SIGUSR1 (logrotate's `postrotate`) the file is opened
//! again by its path and swapped in (`ArcSwap`): writers take no lock, and lines written
//! meanwhile land whole in the old file or the new one. A reopen that fails keeps the old file.
//! A log that is not a file (stderr, off) handles SIGUSR1 too: one info line, nothing else.
//!
//! The text line writes the request in double quotes. A target may hold `"` and `\` (the head
//! parser takes any visible ASCII byte and bytes from 0x80 in a target), so the text line
//! escapes them, and any control byte, as nginx does: `\x22`, `\x5C`. A line cannot be
//! forged or mis-split by its target.

use crate::config::{AccessLogFormat, AccessLogTarget, SwitchSettings};
use arc_swap::ArcSwap;
use std::cell::RefCell;
use std::fmt;
use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::net::SocketAddr;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tokio::sync::watch;

/// One request as the access log tells it.
pub struct Entry<'a> {
    pub service: &'a str,
    pub client: SocketAddr,
    /// `METHOD target` as received (the target decoded lossily), or `None` for a request
    /// refused before its head was read whole.
    pub request: Option<&'a str>,
    pub status: u16,
    /// Bytes sent to the client.
    pub bytes: u64,
    pub pool: Option<&'a str>,
    pub server: Option<SocketAddr>,
    pub end: End<'a>,
}

/// The last field of a line.
pub enum End<'a> {
    /// The request was carried out in this time.
    Took(Duration),
    /// The request was refused for this reason.
    Refused(&'a str),
}

/// The access log of a running switch.
pub struct AccessLog {
    format: AccessLogFormat,
    out: Out,
}

enum Out {
    Off,
    Stderr,
    File(LogFile),
}

struct LogFile {
    path: PathBuf,
    file: ArcSwap<File>,
    /// A write failed and was reported: the next failures are not, until a write succeeds.
    failing: AtomicBool,
}

impl fmt::Debug for AccessLog {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let out = match &self.out {
            Out::Off => "off".to_string(),
            Out::Stderr => "stderr".to_string(),
            Out::File(log) => log.path.display().to_string(),
        };
        f.debug_struct("AccessLog")
            .field("out", &out)
            .field("format", &self.format)
            .finish()
    }
}

/// Opens `path` for appending, creating it (mode 0644 before the umask).
fn open(path: &Path) -> io::Result<File> {
    OpenOptions::new()
        .append(true)
        .create(true)
        .mode(0o644)
        .open(path)
}

impl AccessLog {
    /// The access log `settings` ask for; a file is opened now. The error names the file.
    pub fn new(settings: &SwitchSettings) -> io::Result<AccessLog> {
        let out = match &settings.access_log {
            AccessLogTarget::Off => Out::Off,
            AccessLogTarget::Stderr => Out::Stderr,
            AccessLogTarget::File(path) => {
                let file = open(path).map_err(|e| {
                    io::Error::new(
                        e.kind(),
                        format!("cannot open the access log {}: {e}", path.display()),
                    )
                })?;
                Out::File(LogFile {
                    path: path.clone(),
                    file: ArcSwap::from_pointee(file),
                    failing: AtomicBool::new(false),
                })
            }
        };
        Ok(AccessLog {
            format: settings.access_log_format,
            out,
        })
    }

    /// Whether requests are logged at all.
    pub fn is_on(&self) -> bool {
        !matches!(self.out, Out::Off)
    }

    /// The file the log goes to, if it goes to one.
    pub fn path(&self) -> Option<&Path> {
        match &self.out {
            Out::File(log) => Some(&log.path),
            _ => None,
        }
    }

    /// Writes the line of one request.
    pub fn write(&self, entry: &Entry<'_>) {
        let file = match (&self.out, self.format) {
            (Out::Off, _) => return,
            (Out::Stderr, AccessLogFormat::Text) => {
                tracing::info!(target: "tcpvs::access", "{}", Text(entry));
                return;
            }
            (Out::Stderr, AccessLogFormat::Json) => None,
            (Out::File(log), _) => Some(log),
        };
        LINE.with(|line| {
            let Ok(mut line) = line.try_borrow_mut() else {
                return;
            };
            line.clear();
            match self.format {
                AccessLogFormat::Text => {
                    write_time(&mut line, SystemTime::now());
                    line.push(b' ');
                    let _ = write!(line, "{}", Text(entry));
                }
                AccessLogFormat::Json => write_json(&mut line, entry, SystemTime::now()),
            }
            line.push(b'\n');
            match file {
                Some(log) => log.write_line(&line),
                // Stderr is not worth a warning: nowhere to report it.
                None => {
                    let _ = write_once(&mut io::stderr(), &line);
                }
            }
            // A very long target once should not keep its buffer for good.
            if line.capacity() > LINE_KEPT {
                *line = Vec::with_capacity(LINE_START);
            }
        });
    }

    /// Opens the file again by its path (after logrotate renamed it) and writes the next lines
    /// there. On failure the old file stays in use. `Ok(false)`: the log is not a file.
    pub fn reopen(&self) -> io::Result<bool> {
        let Out::File(log) = &self.out else {
            return Ok(false);
        };
        let file = open(&log.path)?;
        log.file.store(Arc::new(file));
        log.failing.store(false, Ordering::Relaxed);
        Ok(true)
    }
}

/// The size a line buffer starts with, and the most it keeps between lines.
const LINE_START: usize = 512;
const LINE_KEPT: usize = 64 * 1024;

thread_local! {
    /// The line being written, one per thread: built and written without allocating.
    static LINE: RefCell<Vec<u8>> = RefCell::new(Vec::with_capacity(LINE_START));
}

impl LogFile {
    fn write_line(&self, line: &[u8]) {
        let file = self.file.load();
        match write_once(&mut &**file, line) {
            Ok(()) => {
                if self.failing.load(Ordering::Relaxed) {
                    self.failing.store(false, Ordering::Relaxed);
                }
            }
            Err(e) => {
                if !self.failing.swap(true, Ordering::Relaxed) {
                    tracing::warn!(
                        "access log {}: write failed: {e} (lines are lost until writes succeed)",
                        self.path.display()
                    );
                }
            }
        }
    }
}

/// Writes `line` in one write(2); only a short write (a full disk, a signal) makes it write
/// the rest with more.
fn write_once(out: &mut impl Write, line: &[u8]) -> io::Result<()> {
    let mut done = 0;
    while done < line.len() {
        match out.write(&line[done..]) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(n) => done += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Handles SIGUSR1 while the switch runs, until `stopping` turns true: a task on the current
/// runtime that reopens the access log file, or, when the log is not a file (stderr, off),
/// logs that there is nothing to reopen. The handler is installed before this returns, in
/// every case, so a SIGUSR1 from then on never ends the process (its default action would).
pub fn spawn_reopen(
    log: Arc<AccessLog>,
    mut stopping: watch::Receiver<bool>,
) -> io::Result<tokio::task::JoinHandle<()>> {
    use tokio::signal::unix::{signal, SignalKind};
    let mut usr1 = signal(SignalKind::user_defined1())?;
    let path = log.path().map(|path| path.display().to_string());
    let path = path.unwrap_or_default();
    Ok(tokio::spawn(async move {
        loop {
            tokio::select! {
                received = usr1.recv() => {
                    if received.is_none() {
                        return;
                    }
                }
                _ = stopping.wait_for(|&stop| stop) => return,
            }
            match log.reopen() {
                Ok(true) => tracing::info!("access log reopened: {path}"),
                Ok(false) => {
                    tracing::info!("SIGUSR1: the access log is not a file, nothing to reopen")
                }
                Err(e) => {
                    tracing::warn!(
                        "access log {path}: cannot reopen: {e}; still writing to the old file"
                    )
                }
            }
        }
    }))
}

/// The text line after its time: `service client "METHOD target" status bytes pool/server
/// duration`, with `-` for what is missing, and the reason instead of the duration for a
/// refusal. The request is escaped ([`Quoted`]): a target can hold `"` and `\\`.
struct Text<'a, 'e>(&'a Entry<'e>);

impl fmt::Display for Text<'_, '_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let e = self.0;
        write!(
            f,
            "{} {} \"{}\" {} {} {}/{} ",
            e.service,
            e.client,
            Quoted(e.request.unwrap_or("-")),
            e.status,
            e.bytes,
            e.pool.unwrap_or("-"),
            Dash(e.server),
        )?;
        match e.end {
            End::Took(elapsed) => write!(f, "{}us", elapsed.as_micros()),
            End::Refused(why) => f.write_str(why),
        }
    }
}

/// Text to be written between double quotes: `"`, `\\` and control bytes as `\\xHH` (upper
/// case, as nginx writes them), the rest as it is. The target comes from the head parser,
/// which takes `"` and `\\` in a target (any byte from `!` to `~`, and from 0x80), so without
/// this a target could end the quotes and forge the fields after them.
struct Quoted<'a>(&'a str);

impl fmt::Display for Quoted<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let text = self.0;
        let mut plain = 0;
        for (at, b) in text.bytes().enumerate() {
            if matches!(b, b'"' | b'\\' | 0..0x20 | 0x7f) {
                // Escaped bytes are ASCII: `plain..at` ends on a character boundary.
                f.write_str(&text[plain..at])?;
                write!(f, "\\x{b:02X}")?;
                plain = at + 1;
            }
        }
        f.write_str(&text[plain..])
    }
}

/// An optional value, `-` when absent.
struct Dash<T>(Option<T>);

impl<T: fmt::Display> fmt::Display for Dash<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.0 {
            Some(v) => v.fmt(f),
            None => f.write_str("-"),
        }
    }
}

/// The JSON object of one entry (without the newline).
fn write_json(out: &mut Vec<u8>, e: &Entry<'_>, now: SystemTime) {
    let (method, target) = match e.request {
        Some(request) => match request.split_once(' ') {
            Some((method, target)) => (Some(method), Some(target)),
            None => (Some(request), None),
        },
        None => (None, None),
    };
    let mut number = itoa::Buffer::new();
    out.extend_from_slice(b"{\"time\":\"");
    write_time(out, now);
    out.extend_from_slice(b"\",\"service\":");
    json_string(out, e.service.as_bytes());
    out.extend_from_slice(b",\"client\":\"");
    let _ = write!(out, "{}", e.client);
    out.extend_from_slice(b"\",\"method\":");
    json_option(out, method);
    out.extend_from_slice(b",\"target\":");
    json_option(out, target);
    out.extend_from_slice(b",\"status\":");
    out.extend_from_slice(number.format(e.status).as_bytes());
    out.extend_from_slice(b",\"bytes\":");
    out.extend_from_slice(number.format(e.bytes).as_bytes());
    out.extend_from_slice(b",\"pool\":");
    json_option(out, e.pool);
    out.extend_from_slice(b",\"server\":");
    match e.server {
        Some(server) => {
            out.push(b'"');
            let _ = write!(out, "{server}");
            out.push(b'"');
        }
        None => out.extend_from_slice(b"null"),
    }
    out.extend_from_slice(b",\"duration_us\":");
    match e.end {
        End::Took(elapsed) => {
            out.extend_from_slice(number.format(elapsed.as_micros()).as_bytes());
        }
        End::Refused(why) => {
            out.extend_from_slice(b"null,\"error\":");
            json_string(out, why.as_bytes());
        }
    }
    out.push(b'}');
}

fn json_option(out: &mut Vec<u8>, value: Option<&str>) {
    match value {
        Some(text) => json_string(out, text.as_bytes()),
        None => out.extend_from_slice(b"null"),
    }
}

/// `text` as a JSON string: quotes, backslashes and control bytes escaped, UTF-8 kept, and
/// each byte that is not UTF-8 replaced by U+FFFD (as the text line decodes targets).
fn json_string(out: &mut Vec<u8>, text: &[u8]) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    out.push(b'"');
    for chunk in text.utf8_chunks() {
        for &b in chunk.valid().as_bytes() {
            match b {
                b'"' => out.extend_from_slice(b"\\\""),
                b'\\' => out.extend_from_slice(b"\\\\"),
                b'\n' => out.extend_from_slice(b"\\n"),
                b'\r' => out.extend_from_slice(b"\\r"),
                b'\t' => out.extend_from_slice(b"\\t"),
                0x08 => out.extend_from_slice(b"\\b"),
                0x0c => out.extend_from_slice(b"\\f"),
                0..0x20 | 0x7f => {
                    out.extend_from_slice(b"\\u00");
                    out.push(HEX[usize::from(b >> 4)]);
                    out.push(HEX[usize::from(b & 0xf)]);
                }
                _ => out.push(b),
            }
        }
        if !chunk.invalid().is_empty() {
            out.extend_from_slice("\u{fffd}".as_bytes());
        }
    }
    out.push(b'"');
}

/// `now` as RFC 3339 in UTC with milliseconds: `2025-01-31T12:00:00.123Z`.
fn write_time(out: &mut Vec<u8>, now: SystemTime) {
    let since = now.duration_since(UNIX_EPOCH).unwrap_or_default();
    let secs = since.as_secs();
    let (year, month, day) = civil_from_days((secs / 86_400) as i64);
    let of_day = secs % 86_400;
    let mut year_text = itoa::Buffer::new();
    let year_text = year_text.format(year);
    for _ in year_text.len()..4 {
        out.push(b'0');
    }
    out.extend_from_slice(year_text.as_bytes());
    let two = |out: &mut Vec<u8>, sep: u8, n: u64| {
        out.push(sep);
        out.push(b'0' + (n / 10) as u8);
        out.push(b'0' + (n % 10) as u8);
    };
    two(out, b'-', month);
    two(out, b'-', day);
    two(out, b'T', of_day / 3600);
    two(out, b':', of_day / 60 % 60);
    two(out, b':', of_day % 60);
    let millis = u64::from(since.subsec_millis());
    out.push(b'.');
    out.push(b'0' + (millis / 100) as u8);
    out.push(b'0' + (millis / 10 % 10) as u8);
    out.push(b'0' + (millis % 10) as u8);
    out.push(b'Z');
}

/// Year, month (1-12) and day (1-31) of a day counted from 1970-01-01 (proleptic Gregorian;
/// Howard Hinnant's `civil_from_days`).
fn civil_from_days(days: i64) -> (i64, u64, u64) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u64;
    let month = (if mp < 10 { mp + 3 } else { mp - 9 }) as u64;
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn json(text: &[u8]) -> String {
        let mut out = Vec::new();
        json_string(&mut out, text);
        String::from_utf8(out).expect("JSON output is UTF-8")
    }

    #[test]
    fn json_strings_escape_quotes_backslashes_and_control_bytes() {
        assert_eq!(json(b"/plain"), r#""/plain""#);
        assert_eq!(json(br#"/q?a="x"&b=\y"#), r#""/q?a=\"x\"&b=\\y""#);
        assert_eq!(json(b"\n\r\t\x08\x0c"), r#""\n\r\t\b\f""#);
        assert_eq!(json(b"\x00\x01\x1f\x7f"), r#""\u0000\u0001\u001f\u007f""#);
        // UTF-8 stays as it is; bytes that are not UTF-8 become U+FFFD, one per bad sequence.
        assert_eq!(json("/é€😀".as_bytes()), "\"/é€😀\"");
        assert_eq!(json(b"/a\xffb\xc3"), "\"/a\u{fffd}b\u{fffd}\"");
        assert_eq!(json(b"/\xe2\x82"), "\"/\u{fffd}\"");
    }

    fn time(secs: u64, millis: u64) -> String {
        let mut out = Vec::new();
        let at = UNIX_EPOCH + Duration::from_secs(secs) + Duration::from_millis(millis);
        write_time(&mut out, at);
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn times_are_rfc3339_utc_with_milliseconds() {
        assert_eq!(time(0, 0), "1970-01-01T00:00:00.000Z");
        assert_eq!(time(951_782_400, 7), "2000-02-29T00:00:00.007Z");
        assert_eq!(time(1_709_251_199, 999), "2024-02-29T23:59:59.999Z");
        assert_eq!(time(1_709_251_200, 40), "2024-03-01T00:00:00.040Z");
        assert_eq!(time(4_102_444_800 - 1, 120), "2099-12-31T23:59:59.120Z");
        // Every day of 400 years against a plain count of days.
        let mut days = 0i64;
        for year in 1970..2370i64 {
            let leap = (year % 4 == 0 && year % 100 != 0) || year % 400 == 0;
            let lengths = [
                31,
                if leap { 29 } else { 28 },
                31,
                30,
                31,
                30,
                31,
                31,
                30,
                31,
                30,
                31,
            ];
            for (month, &length) in lengths.iter().enumerate() {
                for day in 1..=length {
                    assert_eq!(
                        civil_from_days(days),
                        (year, month as u64 + 1, day),
                        "day {days}"
                    );
                    days += 1;
                }
            }
        }
    }

    fn entry<'a>(request: Option<&'a str>, end: End<'a>) -> Entry<'a> {
        Entry {
            service: "web",
            client: "127.0.0.1:5000".parse().unwrap(),
            request,
            status: 200,
            bytes: 120,
            pool: Some("images"),
            server: Some("10.0.0.1:80".parse().unwrap()),
            end,
        }
    }

    #[test]
    fn text_lines_name_every_field_and_a_dash_for_what_is_missing() {
        let served = entry(Some("GET /x"), End::Took(Duration::from_micros(345)));
        assert_eq!(
            Text(&served).to_string(),
            "web 127.0.0.1:5000 \"GET /x\" 200 120 images/10.0.0.1:80 345us"
        );
        let mut refused = entry(None, End::Refused("malformed request head"));
        (refused.status, refused.pool, refused.server) = (400, None, None);
        assert_eq!(
            Text(&refused).to_string(),
            "web 127.0.0.1:5000 \"-\" 400 120 -/- malformed request head"
        );
    }

    #[test]
    fn text_lines_escape_quotes_backslashes_and_control_bytes_in_the_request() {
        assert_eq!(Quoted("GET /plain?a=1").to_string(), "GET /plain?a=1");
        assert_eq!(
            Quoted(r#"GET /q?a="b\c""#).to_string(),
            r"GET /q?a=\x22b\x5Cc\x22"
        );
        assert_eq!(Quoted("\x00\n\x1f\x7f").to_string(), r"\x00\x0A\x1F\x7F");
        // UTF-8 (and U+FFFD from a lossy decoding) stays as it is, around escapes too.
        assert_eq!(
            Quoted("/é\"€\u{fffd}\"").to_string(),
            "/é\\x22€\u{fffd}\\x22"
        );
        // A target that tries to close the quotes and forge the fields after them.
        let forged = "GET /x\" 200 1 web/10.0.0.9:80 1us\nweb 10.6.6.6:1 \"GET /";
        let line = Text(&entry(Some(forged), End::Took(Duration::from_micros(7)))).to_string();
        assert_eq!(
            line,
            r#"web 127.0.0.1:5000 "GET /x\x22 200 1 web/10.0.0.9:80 1us\x0Aweb 10.6.6.6:1 \x22GET /" 200 120 images/10.0.0.1:80 7us"#
        );
        assert_eq!(line.matches('"').count(), 2, "{line}");
    }

    #[test]
    fn json_lines_hold_every_field() {
        let at = UNIX_EPOCH + Duration::from_millis(1_709_251_200_040);
        let mut out = Vec::new();
        let served = entry(Some("GET /a\"b"), End::Took(Duration::from_micros(345)));
        write_json(&mut out, &served, at);
        assert_eq!(
            String::from_utf8(out).unwrap(),
            r#"{"time":"2024-03-01T00:00:00.040Z","service":"web","client":"127.0.0.1:5000","method":"GET","target":"/a\"b","status":200,"bytes":120,"pool":"images","server":"10.0.0.1:80","duration_us":345}"#
        );
        let mut out = Vec::new();
        let mut refused = entry(None, End::Refused("request head \"too\" large"));
        (refused.status, refused.pool, refused.server) = (431, None, None);
        write_json(&mut out, &refused, at);
        assert_eq!(
            String::from_utf8(out).unwrap(),
            r#"{"time":"2024-03-01T00:00:00.040Z","service":"web","client":"127.0.0.1:5000","method":null,"target":null,"status":431,"bytes":120,"pool":null,"server":null,"duration_us":null,"error":"request head \"too\" large"}"#
        );
    }
}
