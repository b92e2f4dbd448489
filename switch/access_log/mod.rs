//! The access log: one line per request, on stderr (the default) or in a file, as text, as
//! JSON lines or in the NCSA Combined Log Format.
//!
//! - **stderr, text**: through `tracing` (target `tcpvs::access`), after its time and level, as
//!   always: `web 127.0.0.1:50312 "GET /page?x=1" 200 148 web/127.0.0.1:9001 312us`.
//! - **a file, text**: the same fields after an RFC 3339 UTC time with milliseconds, as nginx
//!   writes them: `2025-01-31T12:00:00.123Z web 127.0.0.1:50312 "GET /page?x=1" 200 ...`.
//! - **JSON** (file or stderr): one object per line with `time`, `service`, `client`,
//!   `method`, `target`, `status`, `bytes`, `pool`, `server`, `duration_us` (`null` where the
//!   text line has `-`); a request refused before it was read whole adds `error`, its reason.
//! - **combined** (file or stderr): `host ident authuser [date] "request" status bytes
//!   "referer" "user-agent"`, the shape Apache's and nginx's `combined` write and goaccess
//!   (`--log-format=COMBINED`) and awstats (`LogFormat=1`) read: the client's address, `- -`
//!   (tcpvs authenticates nobody), the UTC time as `[01/Mar/2024:00:00:00 +0000]`, the request
//!   line with its protocol, the status, the bytes sent to the client (head included: what the
//!   switch wrote, nginx's `$bytes_sent`), and the first Referer and User-Agent fields, `-` when
//!   absent. A request whose client left before any answer (status 0 in the other formats) is
//!   499, as nginx writes it. Nothing follows them: the service, pool, server and duration are in the text and
//!   JSON formats, and a parser anchored at the end of the standard fields reads every line.
//!
//! A file is opened with `O_APPEND` and every line goes out in one write(2) from a buffer of
//! the writing thread, so lines of several workers never interleave, and a steady request
//! allocates nothing for its line. On SIGUSR1 (logrotate's `postrotate`) the file is opened
//! again by its path and swapped in (`ArcSwap`): writers take no lock, and lines written
//! meanwhile land whole in the old file or the new one. A reopen that fails keeps the old file.
//! A log that is not a file (stderr, off) handles SIGUSR1 too: one info line, nothing else.
//!
//! What the client sent is written so that it cannot forge or hide anything. The head parser
//! takes any visible ASCII byte and UTF-8 beyond ASCII in a target, and any byte from 0x80 in a
//! field value, so the text and combined lines escape `"`, `\`, control bytes and every byte
//! from 0x80 as
//! `\xHH`, as nginx does: a target cannot close its quotes and forge the fields after them, and
//! no byte reaches a log viewer that it would interpret (U+202E RIGHT-TO-LEFT OVERRIDE turning
//! the rest of a line around, U+2028 LINE SEPARATOR breaking it, invalid UTF-8). JSON lines are
//! ASCII too: every character beyond ASCII is a `\uXXXX` escape (a JSON parser gives the text
//! back), and a byte that is not UTF-8 is U+FFFD, as JSON strings cannot hold bytes.

use crate::config::{AccessLogFormat, AccessLogTarget, SwitchSettings};
use crate::http::{RequestHead, Version};
use arc_swap::ArcSwap;
use std::cell::RefCell;
use std::fmt;
use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::net::SocketAddr;
use std::ops::Range;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tokio::sync::watch;

/// What the access log keeps of a request's head, taken before the head's buffer is reused:
/// `METHOD target` as the client sent them (bytes unchanged: each format escapes them its own
/// way when it writes them), the protocol, and the Referer and User-Agent fields when the
/// format shows them. A session keeps one from request to request, so a steady request
/// allocates nothing for it.
#[derive(Debug, Default)]
pub struct Request {
    line: Vec<u8>,
    /// `HTTP/1.1`; `None` for what is not an HTTP request (a passthrough tunnel's `TLS name`).
    protocol: Option<&'static str>,
    /// The captured field values; `referer` and `user_agent` are ranges of it, `None` when the
    /// request had no such field (or the format does not show them).
    fields: Vec<u8>,
    referer: Option<Range<usize>>,
    user_agent: Option<Range<usize>>,
}

/// Which field a captured value is.
enum Captured {
    Referer,
    UserAgent,
}

impl Request {
    /// Forgets the request: nothing is logged of it until the next capture or `push_str`.
    pub fn clear(&mut self) {
        self.line.clear();
        self.protocol = None;
        self.fields.clear();
        self.referer = None;
        self.user_agent = None;
    }

    /// Appends to what the line shows as the request (a passthrough tunnel's `TLS name`).
    pub fn push_str(&mut self, text: &str) {
        self.line.extend_from_slice(text.as_bytes());
    }

    /// The first Referer and User-Agent fields of `head`, as the combined format shows them.
    fn capture_fields(&mut self, head: &RequestHead, buf: &[u8]) {
        for field in &head.fields {
            let name = field.name.get(buf);
            // By length first, as the head parser dispatches names: most fields cost one
            // comparison.
            let which = match name.len() {
                7 if self.referer.is_none() && name.eq_ignore_ascii_case(b"referer") => {
                    Captured::Referer
                }
                10 if self.user_agent.is_none() && name.eq_ignore_ascii_case(b"user-agent") => {
                    Captured::UserAgent
                }
                _ => continue,
            };
            let start = self.fields.len();
            self.fields.extend_from_slice(field.value.get(buf));
            let range = Some(start..self.fields.len());
            match which {
                Captured::Referer => self.referer = range,
                Captured::UserAgent => self.user_agent = range,
            }
        }
    }

    fn field(&self, range: &Option<Range<usize>>) -> Option<&[u8]> {
        range.clone().and_then(|r| self.fields.get(r))
    }
}

/// One request as the access log tells it.
pub struct Entry<'a> {
    pub service: &'a str,
    pub client: SocketAddr,
    /// What was kept of the request, or `None` for a request refused before its head was
    /// read whole.
    pub request: Option<&'a Request>,
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

    /// Keeps what the line of the request `head` (read into `buf`) will show, before the
    /// head's bytes are dropped. Called on every request: with the log off it returns at once,
    /// and only the combined format looks for the Referer and User-Agent fields, so the text
    /// and JSON formats pay one comparison for them.
    #[inline]
    pub fn capture(&self, request: &mut Request, head: &RequestHead, buf: &[u8]) {
        if matches!(self.out, Out::Off) {
            return;
        }
        request.clear();
        request.line.extend_from_slice(head.method.get(buf));
        request.line.push(b' ');
        request.line.extend_from_slice(head.target.get(buf));
        request.protocol = Some(match head.version {
            Version::Http10 => "HTTP/1.0",
            Version::Http11 => "HTTP/1.1",
        });
        if self.format == AccessLogFormat::Combined {
            request.capture_fields(head, buf);
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
            // Bare lines, without the log's time and level: what a JSON or combined reader
            // expects.
            (Out::Stderr, AccessLogFormat::Json | AccessLogFormat::Combined) => None,
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
                AccessLogFormat::Combined => write_combined(&mut line, entry, SystemTime::now()),
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
/// refusal. The request is escaped ([`Quoted`]).
struct Text<'a, 'e>(&'a Entry<'e>);

impl fmt::Display for Text<'_, '_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let e = self.0;
        write!(
            f,
            "{} {} \"{}\" {} {} {}/{} ",
            e.service,
            e.client,
            Quoted(e.request.map_or(b"-", |r| &r.line)),
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

/// Whether a byte of what the client sent is written `\\xHH` between double quotes: `"` and
/// `\\` (a target could end the quotes and forge the fields after them), control bytes, and
/// every byte from 0x80, as nginx's log escaping does (no character beyond ASCII reaches a log
/// viewer: see the module's documentation).
fn escaped(b: u8) -> bool {
    matches!(b, b'"' | b'\\' | 0..0x20 | 0x7f..=0xff)
}

const HEX_UPPER: &[u8; 16] = b"0123456789ABCDEF";

/// Bytes to be written between double quotes, escaped: [`escaped`] bytes as `\\xHH` (upper
/// case, as nginx writes them), the rest as it is. The output is ASCII.
struct Quoted<'a>(&'a [u8]);

impl fmt::Display for Quoted<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let bytes = self.0;
        let mut plain = 0;
        for (at, &b) in bytes.iter().enumerate() {
            if escaped(b) {
                // What is not escaped is printable ASCII: always UTF-8.
                f.write_str(std::str::from_utf8(&bytes[plain..at]).map_err(|_| fmt::Error)?)?;
                let hex = [
                    b'\\',
                    b'x',
                    HEX_UPPER[usize::from(b >> 4)],
                    HEX_UPPER[usize::from(b & 0xf)],
                ];
                f.write_str(std::str::from_utf8(&hex).map_err(|_| fmt::Error)?)?;
                plain = at + 1;
            }
        }
        f.write_str(std::str::from_utf8(&bytes[plain..]).map_err(|_| fmt::Error)?)
    }
}

/// `bytes` escaped as [`Quoted`] writes them, onto a line.
fn push_quoted(out: &mut Vec<u8>, bytes: &[u8]) {
    let mut plain = 0;
    for (at, &b) in bytes.iter().enumerate() {
        if escaped(b) {
            out.extend_from_slice(&bytes[plain..at]);
            out.extend_from_slice(&[
                b'\\',
                b'x',
                HEX_UPPER[usize::from(b >> 4)],
                HEX_UPPER[usize::from(b & 0xf)],
            ]);
            plain = at + 1;
        }
    }
    out.extend_from_slice(&bytes[plain..]);
}

/// The line of the combined format (without the newline): `host ident authuser [date]
/// "request" status bytes "referer" "user-agent"`, with `-` for an unknown ident and user, a
/// request refused before it was read, and an absent field (a field present but empty is `""`,
/// as nginx writes it).
fn write_combined(out: &mut Vec<u8>, e: &Entry<'_>, now: SystemTime) {
    let _ = write!(out, "{} - - [", e.client.ip());
    write_clf_time(out, now);
    out.extend_from_slice(b"] \"");
    match e.request {
        Some(request) => {
            push_quoted(out, &request.line);
            if let Some(protocol) = request.protocol {
                out.push(b' ');
                out.extend_from_slice(protocol.as_bytes());
            }
        }
        None => out.push(b'-'),
    }
    out.extend_from_slice(b"\" ");
    // Status 0 is a request whose client left before any answer: nginx's 499 (readers of the
    // format refuse a status 0 line). A passthrough tunnel (no protocol) has no HTTP status.
    let status = match e.request {
        Some(request) if e.status == 0 && request.protocol.is_some() => 499,
        _ => e.status,
    };
    let mut number = itoa::Buffer::new();
    out.extend_from_slice(number.format(status).as_bytes());
    out.push(b' ');
    out.extend_from_slice(number.format(e.bytes).as_bytes());
    for field in [
        e.request.and_then(|r| r.field(&r.referer)),
        e.request.and_then(|r| r.field(&r.user_agent)),
    ] {
        out.extend_from_slice(b" \"");
        match field {
            Some(value) => push_quoted(out, value),
            None => out.push(b'-'),
        }
        out.push(b'"');
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
    let (method, target) = match e.request.map(|r| r.line.as_slice()) {
        Some(line) => match line.iter().position(|&b| b == b' ') {
            Some(space) => (Some(&line[..space]), Some(&line[space + 1..])),
            None => (Some(line), None),
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
    json_option(out, e.pool.map(str::as_bytes));
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

fn json_option(out: &mut Vec<u8>, value: Option<&[u8]>) {
    match value {
        Some(text) => json_string(out, text),
        None => out.extend_from_slice(b"null"),
    }
}

/// `text` as a JSON string in ASCII: quotes, backslashes and control characters escaped, every
/// character beyond ASCII as `\\uXXXX` (two, a surrogate pair, beyond U+FFFF), and each byte
/// sequence that is not UTF-8 as `\\ufffd`. Raw, U+2028 and U+2029 end lines for JavaScript
/// and some viewers, and bidirectional controls (U+202E) turn text around on screen; escaped,
/// a JSON parser still gives the request back as sent.
fn json_string(out: &mut Vec<u8>, text: &[u8]) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let unit = |out: &mut Vec<u8>, u: u16| {
        out.extend_from_slice(b"\\u");
        for shift in [12, 8, 4, 0] {
            out.push(HEX[usize::from((u >> shift) & 0xf)]);
        }
    };
    out.push(b'"');
    for chunk in text.utf8_chunks() {
        for c in chunk.valid().chars() {
            match c {
                '"' => out.extend_from_slice(b"\\\""),
                '\\' => out.extend_from_slice(b"\\\\"),
                '\n' => out.extend_from_slice(b"\\n"),
                '\r' => out.extend_from_slice(b"\\r"),
                '\t' => out.extend_from_slice(b"\\t"),
                '\u{8}' => out.extend_from_slice(b"\\b"),
                '\u{c}' => out.extend_from_slice(b"\\f"),
                ' '..='~' => out.push(c as u8),
                _ => {
                    let mut units = [0u16; 2];
                    for &u in c.encode_utf16(&mut units).iter() {
                        unit(out, u);
                    }
                }
            }
        }
        if !chunk.invalid().is_empty() {
            unit(out, 0xfffd);
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

/// `now` as the Common Log Format writes a time, in UTC: `01/Mar/2024:00:00:00 +0000` (the
/// brackets are the caller's).
fn write_clf_time(out: &mut Vec<u8>, now: SystemTime) {
    const MONTHS: [&[u8; 3]; 12] = [
        b"Jan", b"Feb", b"Mar", b"Apr", b"May", b"Jun", b"Jul", b"Aug", b"Sep", b"Oct", b"Nov",
        b"Dec",
    ];
    let secs = now.duration_since(UNIX_EPOCH).unwrap_or_default().as_secs();
    let (year, month, day) = civil_from_days((secs / 86_400) as i64);
    let of_day = secs % 86_400;
    let two = |out: &mut Vec<u8>, n: u64| {
        out.push(b'0' + (n / 10) as u8);
        out.push(b'0' + (n % 10) as u8);
    };
    two(out, day);
    out.push(b'/');
    let index = usize::try_from(month.saturating_sub(1))
        .unwrap_or(0)
        .min(11);
    out.extend_from_slice(MONTHS[index]);
    out.push(b'/');
    let _ = write!(out, "{year:04}");
    for n in [of_day / 3600, of_day / 60 % 60, of_day % 60] {
        out.push(b':');
        two(out, n);
    }
    out.extend_from_slice(b" +0000");
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
    }

    #[test]
    fn json_strings_are_ascii_and_give_the_text_back() {
        // Every character beyond ASCII escaped (a surrogate pair beyond U+FFFF); bytes that
        // are not UTF-8 become U+FFFD, one per bad sequence.
        assert_eq!(json("/é€😀".as_bytes()), r#""/\u00e9\u20ac\ud83d\ude00""#);
        assert_eq!(json(b"/a\xffb\xc3"), r#""/a\ufffdb\ufffd""#);
        assert_eq!(json(b"/\xe2\x82"), r#""/\ufffd""#);
        // What spoofs a viewer: U+202E turns the line around, U+2028 and U+2029 end it.
        let spoof = "/a\u{202e}gpj.exe\u{2028}\u{2029}\u{200b}\u{85}";
        let written = json(spoof.as_bytes());
        assert_eq!(written, r#""/a\u202egpj.exe\u2028\u2029\u200b\u0085""#);
        assert!(written.bytes().all(|b| (b' '..=b'~').contains(&b)));
        let back: String = serde_json::from_str(&written).unwrap();
        assert_eq!(back, spoof);
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

    /// A request as captured from a head with `line` (`METHOD target`), HTTP/1.1.
    fn request(line: &[u8]) -> Request {
        let mut request = Request::default();
        request.line.extend_from_slice(line);
        request.protocol = Some("HTTP/1.1");
        request
    }

    fn entry<'a>(request: Option<&'a Request>, end: End<'a>) -> Entry<'a> {
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
        let get = request(b"GET /x");
        let served = entry(Some(&get), End::Took(Duration::from_micros(345)));
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

    fn quoted(bytes: &[u8]) -> String {
        let shown = Quoted(bytes).to_string();
        // The line buffer's writer escapes alike.
        let mut pushed = Vec::new();
        push_quoted(&mut pushed, bytes);
        assert_eq!(pushed, shown.as_bytes());
        shown
    }

    #[test]
    fn text_lines_escape_quotes_backslashes_and_control_bytes_in_the_request() {
        assert_eq!(quoted(b"GET /plain?a=1"), "GET /plain?a=1");
        assert_eq!(quoted(br#"GET /q?a="b\c""#), r"GET /q?a=\x22b\x5Cc\x22");
        assert_eq!(quoted(b"\x00\n\x1f\x7f"), r"\x00\x0A\x1F\x7F");
        // A target that tries to close the quotes and forge the fields after them.
        let forged = request(b"GET /x\" 200 1 web/10.0.0.9:80 1us\nweb 10.6.6.6:1 \"GET /");
        let line = Text(&entry(Some(&forged), End::Took(Duration::from_micros(7)))).to_string();
        assert_eq!(
            line,
            r#"web 127.0.0.1:5000 "GET /x\x22 200 1 web/10.0.0.9:80 1us\x0Aweb 10.6.6.6:1 \x22GET /" 200 120 images/10.0.0.1:80 7us"#
        );
        assert_eq!(line.matches('"').count(), 2, "{line}");
    }

    #[test]
    fn every_byte_from_0x80_is_escaped_as_nginx_does() {
        // UTF-8 byte by byte, upper case hex: é, €, U+202E RIGHT-TO-LEFT OVERRIDE, U+2028
        // LINE SEPARATOR; bytes that are not UTF-8 alike.
        assert_eq!(quoted("/é€".as_bytes()), r"/\xC3\xA9\xE2\x82\xAC");
        assert_eq!(
            quoted("/a\u{202e}gpj.exe\u{2028}x".as_bytes()),
            r"/a\xE2\x80\xAEgpj.exe\xE2\x80\xA8x"
        );
        assert_eq!(quoted(b"/\x80\xff\xc3\""), r"/\x80\xFF\xC3\x22");
        // Every byte: printable ASCII but `"` and `\\` as it is, the rest escaped.
        let all: Vec<u8> = (0..=255).collect();
        let shown = quoted(&all);
        let mut expected = String::new();
        for b in 0..=255u8 {
            if (b' '..=b'~').contains(&b) && b != b'"' && b != b'\\' {
                expected.push(char::from(b));
            } else {
                expected.push_str(&format!("\\x{b:02X}"));
            }
        }
        assert_eq!(shown, expected);
    }

    #[test]
    fn combined_lines_have_the_ncsa_shape() {
        let at = UNIX_EPOCH + Duration::from_millis(1_709_251_200_040);
        let combined = |e: &Entry<'_>| {
            let mut out = Vec::new();
            write_combined(&mut out, e, at);
            String::from_utf8(out).unwrap()
        };
        let mut get = request(b"GET /a?b=\"c\"");
        get.fields
            .extend_from_slice(b"https://example.com/\xe2\x80\xaeMozilla/5.0 \"x\"");
        get.referer = Some(0..23);
        get.user_agent = Some(23..38);
        let served = entry(Some(&get), End::Took(Duration::from_micros(345)));
        assert_eq!(
            combined(&served),
            r#"127.0.0.1 - - [01/Mar/2024:00:00:00 +0000] "GET /a?b=\x22c\x22 HTTP/1.1" 200 120 "https://example.com/\xE2\x80\xAE" "Mozilla/5.0 \x22x\x22""#
        );
        // No fields: `-`; an empty one: `""`; HTTP/1.0; IPv6 without brackets or port.
        let mut old = request(b"HEAD /");
        old.protocol = Some("HTTP/1.0");
        old.user_agent = Some(0..0);
        let mut e = entry(Some(&old), End::Took(Duration::from_micros(1)));
        e.client = "[2001:db8::1]:4000".parse().unwrap();
        assert_eq!(
            combined(&e),
            r#"2001:db8::1 - - [01/Mar/2024:00:00:00 +0000] "HEAD / HTTP/1.0" 200 120 "-" """#
        );
        // Refused before a request was read.
        let mut refused = entry(None, End::Refused("request head too large"));
        (refused.status, refused.bytes) = (431, 0);
        assert_eq!(
            combined(&refused),
            r#"127.0.0.1 - - [01/Mar/2024:00:00:00 +0000] "-" 431 0 "-" "-""#
        );
        // The client left before any answer: 499, as nginx writes it.
        let mut gone = entry(Some(&get), End::Took(Duration::from_micros(1)));
        (gone.status, gone.bytes) = (0, 0);
        assert!(combined(&gone).contains(r#"HTTP/1.1" 499 0 "#));
        // A passthrough tunnel: no protocol, no HTTP status.
        let mut tunnel = Request::default();
        tunnel.push_str("TLS example.com");
        let mut e = entry(Some(&tunnel), End::Took(Duration::from_micros(1)));
        e.status = 0;
        assert_eq!(
            combined(&e),
            r#"127.0.0.1 - - [01/Mar/2024:00:00:00 +0000] "TLS example.com" 0 120 "-" "-""#
        );
    }

    #[test]
    fn clf_times_name_the_month_in_utc() {
        let clf = |secs: u64| {
            let mut out = Vec::new();
            write_clf_time(&mut out, UNIX_EPOCH + Duration::from_secs(secs));
            String::from_utf8(out).unwrap()
        };
        assert_eq!(clf(0), "01/Jan/1970:00:00:00 +0000");
        assert_eq!(clf(951_782_400), "29/Feb/2000:00:00:00 +0000");
        assert_eq!(clf(1_704_067_199), "31/Dec/2023:23:59:59 +0000");
        assert_eq!(clf(971_186_136), "10/Oct/2000:13:55:36 +0000");
    }

    #[test]
    fn json_lines_hold_every_field() {
        let at = UNIX_EPOCH + Duration::from_millis(1_709_251_200_040);
        let mut out = Vec::new();
        let get = request(b"GET /a\"b");
        let served = entry(Some(&get), End::Took(Duration::from_micros(345)));
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
