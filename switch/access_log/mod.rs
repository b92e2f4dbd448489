//! The access log: one line per request, on stderr (the default) or in a file, as text, as
//! JSON lines or in the NCSA Combined Log Format.
//!
//! - **stderr, text**: through `tracing` (target `tcpvs::access`), after its time and level, as
//!   always: `web 127.0.0.1:50312 "GET /page?x=1 HTTP/1.1" 200 148 web/127.0.0.1:9001 312us`.
//! - **a file, text**: the same fields after an RFC 3339 UTC time with milliseconds, as nginx
//!   writes them: `2025-01-31T12:00:00.123Z web 127.0.0.1:50312 "GET /page?x=1 HTTP/1.1" 200 ...`.
//! - **JSON** (file or stderr): one object per line with `time`, `service`, `client`,
//!   `method`, `target`, `protocol`, `status`, `bytes`, `pool`, `server`, `duration_us`
//!   (`null` where the text line has `-`); a request refused before it was read whole adds
//!   `error`, its reason.
//!
//! Bytes are what the client was sent, the head included, over every protocol: an HTTP/2
//! head counts as its HTTP/1.1 text would (`http/status.rs` `head_size_as_http1`), so that one
//! answer logs alike over both.
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
//!
//! Here the log itself: where lines go, the file and its reopening. `entry.rs` holds what a
//! line tells, `format.rs` the three formats, `escape.rs` the escaping above, `time.rs` the
//! times.

mod entry;
mod escape;
mod format;
mod time;

pub use entry::{End, Entry, Request};

use crate::config::{AccessLogFormat, AccessLogTarget, SwitchSettings};
use crate::http::{RequestHead, Version};
use arc_swap::ArcSwap;
use format::{write_combined, write_json, Text};
use std::cell::RefCell;
use std::fmt;
use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::SystemTime;
use time::write_time;
use tokio::sync::watch;

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

#[cfg(test)]
mod tests;
