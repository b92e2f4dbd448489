//! Rule files: TOML in the format of the design notes, read into a spanned tree, walked by hand
//! (`walk.rs`, `raw.rs`) and checked as a whole.
//!
//! A file is either accepted completely or refused with every problem found, each as
//! `FILE:LINE:COL: message`, in file order. A valid file may also get warnings (`lint.rs`):
//! rules that can never match, pools nothing uses.

pub mod admin;
mod certificates;
mod compress;
mod cpu_affinity;
pub use cpu_affinity::CpuAffinity;
pub mod discover;
mod error;
pub mod health;
mod lint;
mod listen;
mod policy;
mod pool_tls;
mod pools;
mod rate_limits;
mod raw;
pub mod scheduler;
mod server_addr;
pub use server_addr::is_resolvable_name;
mod service_policy;
mod services;
mod trace;
pub mod units;
mod walk;

pub use error::{ConfigError, ConfigErrors, ConfigWarning};

use crate::rules::RuleSet;
use error::ErrorSink;
use listen::ListenRegistry;
use pools::build_pools;
use raw::{RawFile, RawSwitch};
use services::build_services;
use std::collections::HashMap;
use std::fmt;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;
use tcpvs_modules::OptionValue;
use toml::Spanned;
use walk::Scalar;

/// Process-wide settings, `[switch]`.
#[derive(Clone, Debug, PartialEq)]
pub struct SwitchSettings {
    /// Worker threads; 0 means one per CPU.
    pub workers: usize,
    pub max_clients: usize,
    /// Whether the file sets `max_clients` (a default is fitted to the open-file limit quietly,
    /// a chosen value that does not fit is lowered with a warning: capacity/descriptors.rs).
    pub max_clients_given: bool,
    pub header_timeout: Duration,
    pub idle_timeout: Duration,
    pub keepalive_timeout: Duration,
    pub connect_timeout: Duration,
    pub shutdown_timeout: Duration,
    pub access_log: AccessLogTarget,
    pub access_log_format: AccessLogFormat,
    pub splice: bool,
    pub splice_threshold: u64,
    pub connect_attempts: usize,
    pub server_idle_max: usize,
    pub server_idle_timeout: Duration,
    pub cpu_affinity: CpuAffinity,
    /// The most memory all request bodies buffered at once may take (`buffer_memory`); past
    /// it, bodies stream as without a buffer (counted as `buffer_fallbacks`).
    pub buffer_memory: u64,
    /// The most memory all response encoders at once may take (`compress_memory`); past it,
    /// responses go uncompressed (counted as `compress_skipped`).
    pub compress_memory: u64,
    /// A request body that arrives slower than this on average (bytes a second), after a
    /// grace of 5 s, is the client's `408` (`min_body_rate`; 0: no floor).
    pub min_body_rate: u64,
    pub trace: crate::trace::TraceSettings,
}

impl Default for SwitchSettings {
    fn default() -> Self {
        SwitchSettings {
            workers: 0,
            max_clients: 10_000,
            max_clients_given: false,
            header_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(180),
            keepalive_timeout: Duration::from_secs(30),
            connect_timeout: Duration::from_secs(3),
            shutdown_timeout: Duration::from_secs(10),
            access_log: AccessLogTarget::Stderr,
            access_log_format: AccessLogFormat::Text,
            splice: true,
            splice_threshold: 64 * 1024,
            connect_attempts: 3,
            server_idle_max: 64,
            server_idle_timeout: Duration::from_secs(30),
            cpu_affinity: CpuAffinity::Off,
            buffer_memory: 256 << 20,
            compress_memory: 256 << 20,
            min_body_rate: 0,
            trace: crate::trace::TraceSettings::off(),
        }
    }
}

/// Where the access log goes, `[switch] access_log`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AccessLogTarget {
    /// `false`: no access log.
    Off,
    /// `true`: stderr, beside the other log lines.
    Stderr,
    /// A file path: appended to, reopened on SIGUSR1. A relative path in the rule file is
    /// taken from the rule file's folder; this is the path as resolved.
    File(PathBuf),
}

impl AccessLogTarget {
    /// Whether requests are logged at all.
    pub fn is_on(&self) -> bool {
        !matches!(self, AccessLogTarget::Off)
    }
}

/// How access-log lines are written, `[switch] access_log_format`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AccessLogFormat {
    /// `"text"`: service, client, `"METHOD target"`, status, bytes, `pool/server`, duration
    /// (in a file, after an RFC 3339 UTC time).
    Text,
    /// `"json"`: one JSON object per line.
    Json,
    /// `"combined"`: NCSA Combined Log Format, as Apache's and nginx's `combined` (with the
    /// Referer and User-Agent fields, captured only in this format).
    Combined,
}

/// A virtual service: one listener and its rules.
#[derive(Debug)]
pub struct ServiceConfig {
    pub name: String,
    pub listen: SocketAddr,
    /// `FILE:LINE:COL` of the listen address, for errors binding it.
    pub listen_at: String,
    /// Accept a connection only once its first bytes arrived (TCP_DEFER_ACCEPT).
    pub defer_accept: bool,
    /// Every connection starts with a PROXY protocol header naming the client (edge/).
    pub proxy_protocol: bool,
    /// CONNECT requests are routed and tunnelled; `false` (the default): refused with 405,
    /// since a tunnel carries any bytes past routing, X-Forwarded-For and framing checks.
    pub connect: bool,
    /// HTTP/2 from clients (`http2`, default `true`): ALPN `h2` on TLS, the prior-knowledge
    /// preface on plain connections (connection/h2/).
    pub http2: bool,
    /// Client connections open at once per client address (`max_conns_per_source`); 0: no
    /// cap.
    pub max_conns_per_source: u32,
    pub mode: ServiceMode,
    /// `tls`: its certificates, read and checked; empty for a service without TLS.
    pub certificates: Vec<crate::edge::tls::Certificate>,
    /// `[virtual.NAME.compress]`: its answers compressed for clients that accept it.
    pub compress: Option<crate::compress::CompressConfig>,
    pub rules: RuleSet,
    /// `response_headers` and `error_pages` for the switch's own answers (policy/own_answers.rs).
    pub own_answers: crate::policy::own_answers::OwnAnswers,
}

/// What a virtual service's connections carry, `mode`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ServiceMode {
    /// `"http"`: HTTP/1.x and HTTP/2 (`http2`), every request routed (over TLS when the service
    /// has `tls`).
    Http,
    /// `"tls-passthrough"`: TLS, routed by the ClientHello's server name and relayed to the
    /// server undecrypted.
    TlsPassthrough,
}

impl ServiceMode {
    /// What a pool's servers take from a service of this mode, for messages.
    pub fn protocol(self) -> &'static str {
        match self {
            ServiceMode::Http => "HTTP",
            ServiceMode::TlsPassthrough => "TLS passthrough",
        }
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct ServerConfig {
    pub addr: SocketAddr,
    /// The host name `addr` was written with (`None`: an IP address), which TLS asks the
    /// server for and checks its certificate against.
    pub host: Option<String>,
    pub weight: u32,
    /// Most requests in flight at this server; 0 means no limit.
    pub max_conns: u32,
    /// Used only while no other server of the pool is usable.
    pub backup: bool,
    pub discovered: bool, // found by the pool's `discover` (discovery/), not listed
}

#[derive(Clone, Debug, PartialEq)]
pub struct PoolConfig {
    pub name: String,
    pub scheduler: String,
    pub options: Vec<(String, OptionValue)>,
    pub servers: Vec<ServerConfig>,
    /// Health checks, passive detection, queue and slow start.
    pub health: health::PoolHealth,
    /// A PROXY protocol header of this version starts each server connection (`send_proxy`).
    pub send_proxy: Option<crate::edge::proxy_protocol::Version>,
    /// Bytes of a request body received before a server is picked (`request_buffer`; 0: the
    /// body streams as it comes).
    pub request_buffer: u64,
    /// Bytes of a response read ahead of a slow client (`response_buffer`; 0: the response
    /// moves at the client's pace).
    pub response_buffer: u64,
    /// `[pool.NAME.tls]`: TLS to the servers; `None`: plain TCP.
    pub tls: Option<std::sync::Arc<crate::upstream::tls::PoolTls>>,
    /// What the servers are spoken to in (`protocol`).
    pub protocol: ServerProtocol,
    /// `discover` (DNS): `servers` holds its last answer after the listed servers.
    pub discover: Option<discover::Discover>,
}

/// A pool's `protocol`: what its servers are spoken to in.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ServerProtocol {
    /// `"http/1.1"` (the default).
    #[default]
    Http1,
    /// `"h2"`: HTTP/2 to every server (prior knowledge on plain TCP, ALPN `h2` over TLS).
    H2,
    /// `"auto"` (TLS only): what each server chooses by ALPN among `h2` and `http/1.1`.
    Auto,
}

impl ServerProtocol {
    /// The ALPN protocols offered to servers, in order of preference.
    pub fn alpn(self) -> &'static [&'static [u8]] {
        match self {
            ServerProtocol::Http1 => &[b"http/1.1"],
            ServerProtocol::H2 => &[b"h2"],
            ServerProtocol::Auto => &[b"h2", b"http/1.1"],
        }
    }
}

/// A checked rule file.
#[derive(Debug)]
pub struct Config {
    pub file: String,
    /// The file it was read from (`Config::load`), which a reload reads again; `None` for
    /// rules given as text.
    pub path: Option<std::path::PathBuf>,
    pub switch: SwitchSettings,
    pub admin: Option<admin::AdminConfig>,
    pub services: Vec<ServiceConfig>,
    pub pools: Vec<PoolConfig>,
    /// `[limit.NAME]`, in name order (rules name them by index).
    pub limits: Vec<crate::policy::rate_limit::LimitSpec>,
    /// What is valid but almost surely not meant, in file order: `tcpvs check` prints these,
    /// `tcpvs run` and reloads log them ([`Config::log_warnings`]).
    pub warnings: Vec<ConfigWarning>,
}

/// Everything checking a rule file found: the configuration or the errors that refuse it, and
/// the warnings either way (in a refused file too, so that one run shows every problem).
#[derive(Debug)]
pub struct Checked {
    pub config: Result<Config, ConfigErrors>,
    pub warnings: Vec<ConfigWarning>,
}

#[derive(Debug)]
pub enum LoadError {
    Read(String, std::io::Error),
    Invalid(ConfigErrors),
}

impl fmt::Display for LoadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LoadError::Read(file, e) => write!(f, "{file}: cannot read: {e}"),
            LoadError::Invalid(errors) => write!(f, "{errors}"),
        }
    }
}

impl std::error::Error for LoadError {}

impl Config {
    pub fn load(path: &Path) -> Result<Config, LoadError> {
        let mut config = Config::check_file(path)?
            .config
            .map_err(LoadError::Invalid)?;
        config.path = Some(path.to_path_buf());
        Ok(config)
    }

    /// Reads and checks the file at `path`, keeping the warnings of a refused file too (for
    /// `tcpvs check`). `Err` only when the file cannot be read.
    pub fn check_file(path: &Path) -> Result<Checked, LoadError> {
        let file = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|e| LoadError::Read(file.clone(), e))?;
        Ok(Config::check(&file, &text))
    }

    /// Checks `text`, naming it `file` in error messages. The warnings are in
    /// [`Config::warnings`].
    pub fn parse(file: &str, text: &str) -> Result<Config, ConfigErrors> {
        Config::check(file, text).config
    }

    /// Checks `text`, naming it `file` in messages: every error and every warning.
    pub fn check(file: &str, text: &str) -> Checked {
        let mut sink = ErrorSink::new(file, text);
        let config = Config::build(file, text, &mut sink);
        let (errors, warnings) = sink.finish();
        let config = match config {
            Some(mut config) if errors.0.is_empty() => {
                config.warnings = warnings.clone();
                Ok(config)
            }
            _ => Err(errors),
        };
        Checked { config, warnings }
    }

    /// Logs the warnings (at start and at each reload), one line each.
    pub fn log_warnings(&self) {
        for warning in &self.warnings {
            tracing::warn!("{warning}");
        }
    }

    /// `None` when TOML syntax made the file unreadable; else a configuration that is valid
    /// only if `sink` holds no error.
    fn build(file: &str, text: &str, sink: &mut ErrorSink<'_>) -> Option<Config> {
        let (doc, syntax) = toml::de::DeTable::parse_recoverable(text);
        if !syntax.is_empty() {
            report_syntax_errors(syntax, text, sink);
            return None;
        }
        let raw: RawFile = raw::read(&doc, sink);
        lint::lint(&raw, file, sink);
        let switch = build_switch(raw.switch.as_ref(), file, sink);
        let pools = build_pools(&raw.pools, file, sink);
        let pool_index: HashMap<&str, usize> = pools
            .iter()
            .enumerate()
            .map(|(i, p)| (p.name.as_str(), i))
            .collect();
        let limits = rate_limits::build_limits(&raw.limits, sink);
        // Every limit by name, those with errors too: a rule naming one is not "unknown".
        let limit_index: HashMap<&str, usize> = raw
            .limits
            .iter()
            .enumerate()
            .map(|(i, (name, _))| (name.get_ref().as_str(), i))
            .collect();
        let names = policy::Names {
            pools: &pool_index,
            limits: &limit_index,
        };
        let mut listens = ListenRegistry::default();
        let services = build_services(&raw.services, &pools, &names, &mut listens, file, sink);
        let admin = raw
            .admin
            .as_ref()
            .and_then(|raw| admin::build_admin(raw, file, text, &mut listens, sink));
        if raw.services.is_empty() && !raw.virtual_broken {
            sink.at(
                0..0,
                "no virtual service: add a [virtual.NAME] table with `listen` and `default_pool`",
            );
        }
        Some(Config {
            file: file.to_string(),
            path: None,
            switch,
            admin,
            services,
            pools,
            // With one missing, the file has errors and is refused.
            limits: limits.into_iter().flatten().collect(),
            warnings: Vec::new(),
        })
    }

    /// One line for `tcpvs check`.
    pub fn summary(&self) -> String {
        let servers: usize = self.pools.iter().map(|p| p.servers.len()).sum();
        let rules: usize = self.services.iter().map(|s| s.rules.rules().len()).sum();
        format!(
            "{}: ok: {} virtual service{}, {} pool{}, {} server{}, {} rule{}",
            self.file,
            self.services.len(),
            plural(self.services.len()),
            self.pools.len(),
            plural(self.pools.len()),
            servers,
            plural(servers),
            rules,
            plural(rules),
        )
    }
}

/// TOML syntax errors, one per line: the parser goes on after a syntax error, but what follows
/// one is often only its echo ("expected newline" after a stray `=`).
fn report_syntax_errors(syntax: Vec<toml::de::Error>, text: &str, sink: &mut ErrorSink<'_>) {
    let mut lines_seen = Vec::new();
    for e in syntax {
        let span = e.span().unwrap_or(0..0);
        let (line, _) = error::line_and_column(text, span.start);
        if !lines_seen.contains(&line) {
            lines_seen.push(line);
            let mut message = e.message().trim().to_string();
            if message == "duplicate key" {
                // Name it: the span is the key.
                if let Some(key) = text.get(span.clone()).filter(|k| !k.contains('\n')) {
                    message = format!("duplicate key `{key}`: already defined above");
                }
            }
            sink.at(span, message);
        }
    }
}

fn plural(n: usize) -> &'static str {
    match n {
        1 => "",
        _ => "s",
    }
}

fn build_switch(raw: Option<&RawSwitch>, file: &str, sink: &mut ErrorSink<'_>) -> SwitchSettings {
    let mut s = SwitchSettings::default();
    let Some(raw) = raw else { return s };
    if let Some(v) = &raw.workers {
        s.workers = int_in(v, 0, 1024, "workers", sink).unwrap_or(s.workers);
    }
    if let Some(v) = &raw.max_clients {
        s.max_clients = int_in(v, 1, 10_000_000, "max_clients", sink).unwrap_or(s.max_clients);
        s.max_clients_given = true;
    }
    if let Some(v) = &raw.connect_attempts {
        s.connect_attempts =
            int_in(v, 1, 100, "connect_attempts", sink).unwrap_or(s.connect_attempts);
    }
    if let Some(v) = &raw.server_idle_max {
        s.server_idle_max =
            int_in(v, 0, 1_000_000, "server_idle_max", sink).unwrap_or(s.server_idle_max);
    }
    let durations = [
        (&raw.header_timeout, &mut s.header_timeout),
        (&raw.idle_timeout, &mut s.idle_timeout),
        (&raw.keepalive_timeout, &mut s.keepalive_timeout),
        (&raw.connect_timeout, &mut s.connect_timeout),
        (&raw.shutdown_timeout, &mut s.shutdown_timeout),
        (&raw.server_idle_timeout, &mut s.server_idle_timeout),
    ];
    for (value, slot) in durations {
        if let Some(v) = value {
            match units::parse_duration(v.get_ref()) {
                Ok(d) if d.is_zero() => sink.at(v.span(), "a timeout must be longer than 0"),
                Ok(d) => *slot = d,
                Err(e) => sink.at(v.span(), e),
            }
        }
    }
    read_access_log(raw, file, &mut s, sink);
    read_splice(raw, &mut s, sink);
    trace::read_trace(raw, &mut s.trace, sink);
    if let Some(v) = &raw.min_body_rate {
        match units::parse_rate(v.get_ref()) {
            Ok(rate) => s.min_body_rate = rate,
            Err(e) => sink.at(v.span(), e),
        }
    }
    if let Some(v) = &raw.cpu_affinity {
        match v.get_ref().as_str() {
            "off" => s.cpu_affinity = CpuAffinity::Off,
            "auto" => s.cpu_affinity = CpuAffinity::Auto,
            other => sink.at(
                v.span(),
                format!("cpu_affinity must be \"off\" or \"auto\", not {other:?}"),
            ),
        }
    }
    s
}

/// `access_log` (on, off, or a file relative to the rule file's folder), `access_log_format`.
fn read_access_log(raw: &RawSwitch, file: &str, s: &mut SwitchSettings, sink: &mut ErrorSink<'_>) {
    if let Some(v) = &raw.access_log {
        match v.get_ref() {
            Scalar::Boolean(true) => s.access_log = AccessLogTarget::Stderr,
            Scalar::Boolean(false) => s.access_log = AccessLogTarget::Off,
            Scalar::String(path) if path.is_empty() => {
                sink.at(v.span(), "access_log file path is empty")
            }
            Scalar::String(path) => {
                // Relative to the rule file's folder, as the operator reads the file.
                let folder = Path::new(file).parent().unwrap_or(Path::new(""));
                s.access_log = AccessLogTarget::File(folder.join(path));
            }
            _ => sink.at(v.span(), "access_log must be true, false or a file path"),
        }
    }
    if let Some(v) = &raw.access_log_format {
        match v.get_ref().as_str() {
            "text" => s.access_log_format = AccessLogFormat::Text,
            "json" => s.access_log_format = AccessLogFormat::Json,
            "combined" => s.access_log_format = AccessLogFormat::Combined,
            other => sink.at(
                v.span(),
                format!(
                    "access_log_format must be \"text\", \"json\" or \"combined\", not {other:?}"
                ),
            ),
        }
    }
}

/// `splice` and `splice_threshold` (bytes, or a size like "64KiB").
fn read_splice(raw: &RawSwitch, s: &mut SwitchSettings, sink: &mut ErrorSink<'_>) {
    if let Some(v) = raw.splice {
        s.splice = v;
    }
    if let Some(n) = size_of(raw.splice_threshold.as_ref(), "splice_threshold", sink) {
        s.splice_threshold = n;
    }
    if let Some(n) = size_of(raw.buffer_memory.as_ref(), "buffer_memory", sink) {
        s.buffer_memory = n;
    }
    if let Some(n) = size_of(raw.compress_memory.as_ref(), "compress_memory", sink) {
        s.compress_memory = n;
    }
}

/// A size key's value (bytes, or a size like "64KiB"); `None` when absent or wrong (reported).
pub(super) fn size_of(
    v: Option<&Spanned<Scalar>>,
    key: &str,
    sink: &mut ErrorSink<'_>,
) -> Option<u64> {
    let v = v?;
    let parsed = match v.get_ref() {
        Scalar::Integer(n) => u64::try_from(*n).map_err(|_| format!("{key} cannot be negative")),
        Scalar::String(text) => units::parse_size(text),
        _ => Err(format!(
            "{key} must be a size in bytes, like 65536 or \"64KiB\""
        )),
    };
    match parsed {
        Ok(n) => Some(n),
        Err(e) => {
            sink.at(v.span(), e);
            None
        }
    }
}

fn int_in(
    v: &Spanned<i64>,
    min: i64,
    max: i64,
    key: &str,
    sink: &mut ErrorSink<'_>,
) -> Option<usize> {
    let n = *v.get_ref();
    if n < min || n > max {
        sink.at(
            v.span(),
            format!("{key} = {n} is out of range {min}..={max}"),
        );
        return None;
    }
    usize::try_from(n).ok()
}

fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
}
