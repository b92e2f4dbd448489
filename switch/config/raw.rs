//! The rule file as written: every value keeps its span for messages. Read by hand from the
//! spanned TOML tree (`walk.rs` says why not serde): every unknown key and every value of the
//! wrong kind is reported, and reading goes on. A value that is missing or of the wrong kind is
//! `None` here and already reported, so the checks of `mod.rs` skip it without a second message.
//! Module options (any other key beside `scheduler` in a pool) are kept for the module to judge.

mod compress;
mod discover;
mod policy;
mod pool_tls;
mod rule;

use compress::read_compress;
pub(crate) use compress::RawCompress;
pub(crate) use discover::RawDiscover;
use policy::{read_error_pages, read_header_actions, read_limit};
pub(crate) use policy::{RawErrorPages, RawHeaderActions, RawLimit, RawRedirect, RawRespond};
use pool_tls::read_pool_tls;
pub(crate) use pool_tls::RawPoolTls;
use rule::read_rule;
pub(crate) use rule::{RawHeaderCondition, RawRule};

use super::error::ErrorSink;
use super::walk::{self, Scalar, Table};
use toml::de::DeTable;
use toml::Spanned;

pub(crate) const TOP_KEYS: &[&str] = &["switch", "admin", "virtual", "pool", "limit"];
pub(crate) const SWITCH_KEYS: &[&str] = &[
    "workers",
    "max_clients",
    "header_timeout",
    "idle_timeout",
    "keepalive_timeout",
    "connect_timeout",
    "shutdown_timeout",
    "access_log",
    "access_log_format",
    "splice",
    "splice_threshold",
    "connect_attempts",
    "server_idle_max",
    "server_idle_timeout",
    "cpu_affinity",
    "buffer_memory",
    "min_body_rate",
    "compress_memory",
    "trace",
    "request_id",
    "otlp",
];
const ADMIN_KEYS: &[&str] = &["listen", "token", "token_file", "mode"];
const SERVICE_KEYS: &[&str] = &[
    "listen",
    "default_pool",
    "defer_accept",
    "proxy_protocol",
    "connect",
    "http2",
    "tls",
    "mode",
    "max_conns_per_source",
    "compress",
    "request_headers",
    "response_headers",
    "error_pages",
    "rule",
];
const CERTIFICATE_KEYS: &[&str] = &["cert", "key"];
const SERVER_KEYS: &[&str] = &["addr", "weight", "max_conns", "backup"];
/// The switch's own keys of a pool table; any other key is an option of the module.
pub(crate) const POOL_KEYS: &[&str] = &[
    "scheduler",
    "servers",
    "queue_timeout",
    "slow_start",
    "send_proxy",
    "request_buffer",
    "response_buffer",
    "health",
    "protocol",
    "tls",
    "discover",
    "interval",
    "resolvers",
];
const HEALTH_KEYS: &[&str] = &[
    "check",
    "service",
    "path",
    "host",
    "expect",
    "interval",
    "timeout",
    "rise",
    "fall",
    "max_fails",
    "fail_timeout",
    "agent_port",
    "agent_interval",
    "panic_threshold",
];

const LISTEN: &str = "an address like \"127.0.0.1:8080\"";
const ADMIN_LISTEN: &str =
    "an address like \"127.0.0.1:9090\" or a Unix socket like \"unix:/run/tcpvs/admin.sock\"";
const POOL_NAME: &str = "a pool name like \"static\"";
const REGEX: &str = "a regex like \"^/images/\"";
const SERVERS: &str = "a list of servers like [{ addr = \"127.0.0.1:9001\" }]";
const SERVER: &str = "a server like { addr = \"127.0.0.1:9001\" }";
const CERTIFICATES: &str = "a list like [{ cert = \"site.pem\", key = \"site.key\" }]";
const CERTIFICATE: &str = "a certificate like { cert = \"site.pem\", key = \"site.key\" }";

#[derive(Default)]
pub(crate) struct RawFile {
    pub switch: Option<RawSwitch>,
    pub admin: Option<RawAdmin>,
    /// `virtual` or one of its services is not a table (reported).
    pub virtual_broken: bool,
    /// In file order.
    pub services: Vec<(Spanned<String>, RawService)>,
    /// In name order.
    pub pools: Vec<(Spanned<String>, RawPool)>,
    /// `[limit.NAME]`, in name order.
    pub limits: Vec<(Spanned<String>, RawLimit)>,
}

#[derive(Default)]
pub(crate) struct RawSwitch {
    pub workers: Option<Spanned<i64>>,
    pub max_clients: Option<Spanned<i64>>,
    pub header_timeout: Option<Spanned<String>>,
    pub idle_timeout: Option<Spanned<String>>,
    pub keepalive_timeout: Option<Spanned<String>>,
    pub connect_timeout: Option<Spanned<String>>,
    pub shutdown_timeout: Option<Spanned<String>>,
    /// `true`, `false` or a file path.
    pub access_log: Option<Spanned<Scalar>>,
    pub access_log_format: Option<Spanned<String>>,
    pub splice: Option<bool>,
    /// A number of bytes or a size string.
    pub splice_threshold: Option<Spanned<Scalar>>,
    pub connect_attempts: Option<Spanned<i64>>,
    pub server_idle_max: Option<Spanned<i64>>,
    pub server_idle_timeout: Option<Spanned<String>>,
    pub cpu_affinity: Option<Spanned<String>>,
    /// A number of bytes or a size string.
    pub buffer_memory: Option<Spanned<Scalar>>,
    /// Bytes a second, as a string like "1KiB/s".
    pub min_body_rate: Option<Spanned<String>>,
    /// A number of bytes or a size string.
    pub compress_memory: Option<Spanned<Scalar>>,
    /// `"off"` or `"w3c"`.
    pub trace: Option<Spanned<String>>,
    pub request_id: Option<bool>,
    /// The OTLP/HTTP collector's URL.
    pub otlp: Option<Spanned<String>>,
}

pub(crate) struct RawAdmin {
    pub listen: Option<Spanned<String>>,
    pub token: Option<Spanned<String>>,
    pub token_file: Option<Spanned<String>>,
    /// The permissions of a `unix:` socket, an octal string.
    pub mode: Option<Spanned<String>>,
}

pub(crate) struct RawService {
    /// Every key was known and `default_pool`, if given, read.
    pub whole: bool,
    pub listen: Option<Spanned<String>>,
    pub default_pool: Option<Spanned<String>>,
    pub defer_accept: Option<bool>,
    pub proxy_protocol: Option<bool>,
    /// `connect = true`: CONNECT requests go through to the routed pool.
    pub connect: Option<bool>,
    /// `http2 = false`: HTTP/1.x only (no ALPN `h2`, no prior-knowledge preface).
    pub http2: Option<bool>,
    /// `tls`: the certificates, in file order; `None` when missing or not a list.
    pub tls: Option<Spanned<Vec<RawCertificate>>>,
    pub mode: Option<Spanned<String>>,
    /// Client connections open at once per client address; 0: no cap.
    pub max_conns_per_source: Option<Spanned<i64>>,
    /// `[virtual.NAME.compress]`, with where it is written.
    pub compress: Option<(std::ops::Range<usize>, RawCompress)>,
    /// The service's own policy: what its requests and answers all get, before a rule's.
    pub request_headers: Option<Spanned<RawHeaderActions>>,
    pub response_headers: Option<Spanned<RawHeaderActions>>,
    pub error_pages: Option<Spanned<RawErrorPages>>,
    pub rule: Vec<Spanned<RawRule>>,
}

/// One `{ cert, key }` of a `tls` list.
pub(crate) struct RawCertificate {
    pub span: std::ops::Range<usize>,
    pub cert: Option<Spanned<String>>,
    pub key: Option<Spanned<String>>,
}

pub(crate) struct RawServer {
    pub addr: Option<Spanned<String>>,
    pub weight: Option<Spanned<i64>>,
    pub max_conns: Option<Spanned<i64>>,
    pub backup: Option<bool>,
}

/// `[pool.NAME.health]`.
#[derive(Default)]
pub(crate) struct RawHealth {
    pub check: Option<Spanned<String>>,
    pub service: Option<Spanned<String>>,
    pub path: Option<Spanned<String>>,
    pub host: Option<Spanned<String>>,
    pub expect: Option<Spanned<String>>,
    pub interval: Option<Spanned<String>>,
    pub timeout: Option<Spanned<String>>,
    pub rise: Option<Spanned<i64>>,
    pub fall: Option<Spanned<i64>>,
    pub max_fails: Option<Spanned<i64>>,
    pub fail_timeout: Option<Spanned<String>>,
    pub agent_port: Option<Spanned<i64>>,
    pub agent_interval: Option<Spanned<String>>,
    pub panic_threshold: Option<Spanned<i64>>,
}

/// A pool table: `scheduler`, `servers`, the switch's own pool keys, and any other key as an
/// option of the module.
#[derive(Default)]
pub(crate) struct RawPool {
    pub scheduler: Option<Spanned<String>>,
    /// `None` when missing or not a list (both reported).
    pub servers: Option<Spanned<Vec<RawServer>>>,
    pub queue_timeout: Option<Spanned<String>>,
    pub slow_start: Option<Spanned<String>>,
    pub send_proxy: Option<Spanned<String>>,
    /// A number of bytes or a size string.
    pub request_buffer: Option<Spanned<Scalar>>,
    /// A number of bytes or a size string.
    pub response_buffer: Option<Spanned<Scalar>>,
    pub health: Option<RawHealth>,
    /// What the servers are spoken to in (`protocol`).
    pub protocol: Option<Spanned<String>>,
    /// `[pool.NAME.tls]`: TLS to the servers.
    pub tls: Option<RawPoolTls>,
    /// Servers found by DNS (`discover`), asked every `interval` of `resolvers`.
    pub discover: Option<RawDiscover>,
    pub interval: Option<Spanned<String>>,
    pub resolvers: Option<Spanned<Vec<Spanned<String>>>>,
    /// In name order, as the module sees them.
    pub options: Vec<(Spanned<String>, Spanned<Scalar>)>,
}

/// Reads the document's tables into a [`RawFile`], reporting what does not fit.
pub(crate) fn read(doc: &Spanned<DeTable<'_>>, sink: &mut ErrorSink<'_>) -> RawFile {
    let top = Table::new(doc.get_ref(), doc.span(), "the file");
    check_top_keys(&top, sink);
    let mut file = RawFile {
        switch: top
            .table("switch", "a table [switch]", "[switch]", sink)
            .map(|t| read_switch(&t, sink)),
        admin: top
            .table("admin", "a table [admin]", "[admin]", sink)
            .map(|t| read_admin(&t, sink)),
        ..RawFile::default()
    };
    let services = "virtual services like [virtual.web]";
    if let Some(virtual_) = top.table("virtual", services, "[virtual]", sink) {
        for (name, value) in virtual_.entries() {
            let place = format!("[virtual.{}]", name.get_ref());
            let expected = format!("a virtual service table {place} with `listen`");
            match Table::of(value, name.get_ref(), &expected, place, sink) {
                Some(t) => {
                    let service = read_service(name.get_ref(), &t, sink);
                    file.services.push((spanned_key(name), service));
                }
                None => file.virtual_broken = true,
            }
        }
    } else if top.get("virtual").is_some() {
        file.virtual_broken = true;
    }
    if let Some(pools) = top.table("pool", "pools like [pool.static]", "[pool]", sink) {
        let mut list = Vec::new();
        for (name, value) in pools.entries() {
            let place = format!("[pool.{}]", name.get_ref());
            let expected = format!("a pool table {place} with `servers`");
            if let Some(t) = Table::of(value, name.get_ref(), &expected, place, sink) {
                list.push((spanned_key(name), read_pool(name.get_ref(), &t, sink)));
            }
        }
        list.sort_by(|(a, _), (b, _)| a.get_ref().cmp(b.get_ref()));
        file.pools = list;
    }
    let limits = "rate limits like [limit.per-client]";
    if let Some(table) = top.table("limit", limits, "[limit]", sink) {
        let mut list = Vec::new();
        for (name, value) in table.entries() {
            let place = format!("[limit.{}]", name.get_ref());
            let expected = format!("a limit table {place} with `key` and `rate`");
            if let Some(t) = Table::of(value, name.get_ref(), &expected, place, sink) {
                list.push((spanned_key(name), read_limit(&t, sink)));
            }
        }
        list.sort_by(|(a, _), (b, _)| a.get_ref().cmp(b.get_ref()));
        file.limits = list;
    }
    file
}

fn spanned_key(key: &Spanned<toml::de::DeString<'_>>) -> Spanned<String> {
    Spanned::new(key.span(), key.get_ref().to_string())
}

/// Unknown top-level keys; a `[switch]` key written before any table gets that hint.
fn check_top_keys(top: &Table<'_, '_>, sink: &mut ErrorSink<'_>) {
    for (key, value) in top.entries() {
        let key_text = key.get_ref().as_ref();
        if TOP_KEYS.contains(&key_text) {
            continue;
        }
        let is_table = matches!(value.get_ref(), toml::de::DeValue::Table(_));
        let message = if SWITCH_KEYS.contains(&key_text) {
            format!("unknown field `{key_text}` at the top of the file: it belongs in [switch]")
        } else if let Some(close) = walk::suggest(key_text, TOP_KEYS) {
            if is_table {
                format!("unknown table `[{key_text}]`: did you mean `[{close}]`?")
            } else {
                format!(
                    "unknown field `{key_text}` at the top of the file: did you mean `{close}`?"
                )
            }
        } else {
            let what = if is_table {
                format!("table `[{key_text}]`")
            } else {
                format!("field `{key_text}`")
            };
            format!(
                "unknown {what} at the top of the file (a rule file has [switch], [admin], \
                 [virtual.NAME], [pool.NAME] and [limit.NAME])"
            )
        };
        sink.at(key.span(), message);
    }
}

fn read_switch(t: &Table<'_, '_>, sink: &mut ErrorSink<'_>) -> RawSwitch {
    t.check_keys(SWITCH_KEYS, sink);
    RawSwitch {
        workers: t.integer("workers", sink),
        max_clients: t.integer("max_clients", sink),
        header_timeout: t.duration("header_timeout", sink),
        idle_timeout: t.duration("idle_timeout", sink),
        keepalive_timeout: t.duration("keepalive_timeout", sink),
        connect_timeout: t.duration("connect_timeout", sink),
        shutdown_timeout: t.duration("shutdown_timeout", sink),
        access_log: t.scalar("access_log", sink),
        access_log_format: t.string(
            "access_log_format",
            "\"text\", \"json\" or \"combined\"",
            sink,
        ),
        splice: t.boolean("splice", sink),
        splice_threshold: t.scalar("splice_threshold", sink),
        connect_attempts: t.integer("connect_attempts", sink),
        server_idle_max: t.integer("server_idle_max", sink),
        server_idle_timeout: t.duration("server_idle_timeout", sink),
        cpu_affinity: t.string("cpu_affinity", "\"off\" or \"auto\"", sink),
        buffer_memory: t.scalar("buffer_memory", sink),
        min_body_rate: t.string("min_body_rate", "a rate like \"1KiB/s\"", sink),
        compress_memory: t.scalar("compress_memory", sink),
        trace: t.string("trace", "\"off\" or \"w3c\"", sink),
        request_id: t.boolean("request_id", sink),
        otlp: t.string("otlp", "a URL like \"http://127.0.0.1:4318\"", sink),
    }
}

/// Only the `[admin]` table of a document, the rest unread: the command line's admin verbs
/// find the endpoint with it in a file that may have errors elsewhere.
pub(crate) fn read_admin_only(
    doc: &Spanned<DeTable<'_>>,
    sink: &mut ErrorSink<'_>,
) -> Option<RawAdmin> {
    let top = Table::new(doc.get_ref(), doc.span(), "the file");
    top.table("admin", "a table [admin]", "[admin]", sink)
        .map(|t| read_admin(&t, sink))
}

fn read_admin(t: &Table<'_, '_>, sink: &mut ErrorSink<'_>) -> RawAdmin {
    t.check_keys(ADMIN_KEYS, sink);
    let listen = t.string("listen", ADMIN_LISTEN, sink);
    if t.get("listen").is_none() {
        sink.at(
            t.span.clone(),
            "[admin] has no `listen`: add the address of the admin endpoint, like \"127.0.0.1:9090\" or \"unix:/run/tcpvs/admin.sock\"",
        );
    }
    RawAdmin {
        listen,
        token: t.string("token", "a string", sink),
        token_file: t.string("token_file", "a file path", sink),
        mode: t.string("mode", "an octal string like \"0600\"", sink),
    }
}

fn read_service(name: &str, t: &Table<'_, '_>, sink: &mut ErrorSink<'_>) -> RawService {
    let keys_known = t.check_keys(SERVICE_KEYS, sink);
    let default_pool = t.string("default_pool", POOL_NAME, sink);
    let listen = t.string("listen", LISTEN, sink);
    if t.get("listen").is_none() {
        sink.at(
            t.span.clone(),
            format!("[virtual.{name}] has no `listen`: add the address to accept clients on, like \"127.0.0.1:8080\""),
        );
    }
    let mut rules = Vec::new();
    let expected = format!("rules written as [[virtual.{name}.rule]] tables");
    if let Some((list, _)) = t.array("rule", &expected, sink) {
        for value in list.iter() {
            if let Some(rule) = read_rule(name, value, sink) {
                rules.push(rule);
            }
        }
    }
    let tls = t.array("tls", CERTIFICATES, sink).map(|(list, span)| {
        let place = format!("a certificate of [virtual.{name}]");
        let certificates = list
            .iter()
            .filter_map(|v| {
                let entry = Table::of(v, "tls", CERTIFICATE, place.as_str(), sink)?;
                Some(read_certificate(&entry, sink))
            })
            .collect();
        Spanned::new(span, certificates)
    });
    RawService {
        whole: keys_known && (default_pool.is_some() || t.get("default_pool").is_none()),
        listen,
        default_pool,
        defer_accept: t.boolean("defer_accept", sink),
        proxy_protocol: t.boolean("proxy_protocol", sink),
        connect: t.boolean("connect", sink),
        http2: t.boolean("http2", sink),
        tls,
        mode: t.string("mode", "\"http\" or \"tls-passthrough\"", sink),
        max_conns_per_source: t.integer("max_conns_per_source", sink),
        compress: t
            .table(
                "compress",
                "a table like { types = [\"text/html\"], min_size = \"1KiB\" }",
                format!("[virtual.{name}.compress]"),
                sink,
            )
            .map(|c| (c.span.clone(), read_compress(&c, sink))),
        request_headers: read_header_actions(t, "request_headers", sink),
        response_headers: read_header_actions(t, "response_headers", sink),
        error_pages: read_error_pages(t, sink),
        rule: rules,
    }
}

fn read_certificate(t: &Table<'_, '_>, sink: &mut ErrorSink<'_>) -> RawCertificate {
    t.check_keys(CERTIFICATE_KEYS, sink);
    let cert = t.string("cert", "a PEM file path like \"site.pem\"", sink);
    let key = t.string("key", "a PEM file path like \"site.key\"", sink);
    for (name, got) in [("cert", t.get("cert")), ("key", t.get("key"))] {
        if got.is_none() {
            sink.at(
                t.span.clone(),
                format!(
                    "a certificate has no `{name}`: write {{ cert = \"site.pem\", key = \"site.key\" }}"
                ),
            );
        }
    }
    RawCertificate {
        span: t.span.clone(),
        cert,
        key,
    }
}

fn read_pool(name: &str, t: &Table<'_, '_>, sink: &mut ErrorSink<'_>) -> RawPool {
    let mut pool = RawPool {
        scheduler: t.string("scheduler", "a module name like \"wlc\"", sink),
        queue_timeout: t.duration("queue_timeout", sink),
        slow_start: t.duration("slow_start", sink),
        send_proxy: t.string("send_proxy", "\"v1\" or \"v2\"", sink),
        request_buffer: t.scalar("request_buffer", sink),
        response_buffer: t.scalar("response_buffer", sink),
        health: t
            .table(
                "health",
                "a table [pool.NAME.health]",
                format!("[pool.{name}.health]"),
                sink,
            )
            .map(|h| read_health(&h, sink)),
        protocol: t.string("protocol", "\"http/1.1\"", sink),
        tls: t
            .table(
                "tls",
                "a table [pool.NAME.tls]",
                format!("[pool.{name}.tls]"),
                sink,
            )
            .map(|tls| read_pool_tls(&tls, sink)),
        ..RawPool::default()
    };
    discover::read_discovery(name, t, &mut pool, sink);
    match t.array("servers", SERVERS, sink) {
        Some((list, span)) => {
            let place = format!("a server of [pool.{name}]");
            let servers = list
                .iter()
                .filter_map(|v| {
                    let server = Table::of(v, "servers", SERVER, place.as_str(), sink)?;
                    Some(read_server(&server, sink))
                })
                .collect();
            pool.servers = Some(Spanned::new(span, servers));
        }
        // A pool may have its servers from DNS alone.
        None if t.get("servers").is_none() && pool.discover.is_none() => sink.at(
            t.span.clone(),
            format!("pool `{name}` has no `servers`: list them like servers = [{{ addr = \"127.0.0.1:9001\" }}], or find them with discover = {{ dns = \"NAME:PORT\" }}"),
        ),
        None => {}
    }
    // Everything else is the module's: checked when the module is built.
    let mut options: Vec<_> = t
        .entries()
        .filter(|(k, _)| !POOL_KEYS.contains(&k.get_ref().as_ref()))
        .filter_map(|(k, v)| Some((spanned_key(k), walk::scalar(k.get_ref(), v, sink)?)))
        .collect();
    options.sort_by(|(a, _), (b, _)| a.get_ref().cmp(b.get_ref()));
    pool.options = options;
    pool
}

fn read_server(t: &Table<'_, '_>, sink: &mut ErrorSink<'_>) -> RawServer {
    t.check_keys(SERVER_KEYS, sink);
    let addr = t.string("addr", "an address like \"127.0.0.1:9001\"", sink);
    if t.get("addr").is_none() {
        sink.at(
            t.span.clone(),
            "a server has no `addr`: write it like { addr = \"127.0.0.1:9001\" }",
        );
    }
    RawServer {
        addr,
        weight: t.integer("weight", sink),
        max_conns: t.integer("max_conns", sink),
        backup: t.boolean("backup", sink),
    }
}

fn read_health(t: &Table<'_, '_>, sink: &mut ErrorSink<'_>) -> RawHealth {
    t.check_keys(HEALTH_KEYS, sink);
    RawHealth {
        check: t.string("check", "\"http\", \"tcp\", \"grpc\" or \"none\"", sink),
        service: t.string(
            "service",
            "a gRPC service name like \"pkg.Service\" (or \"\")",
            sink,
        ),
        path: t.string("path", "a path like \"/health\"", sink),
        host: t.string("host", "a host name like \"www.example.com\"", sink),
        expect: t.string("expect", "statuses like \"200-399\"", sink),
        interval: t.duration("interval", sink),
        timeout: t.duration("timeout", sink),
        rise: t.integer("rise", sink),
        fall: t.integer("fall", sink),
        max_fails: t.integer("max_fails", sink),
        fail_timeout: t.duration("fail_timeout", sink),
        agent_port: t.integer("agent_port", sink),
        agent_interval: t.duration("agent_interval", sink),
        panic_threshold: t.integer("panic_threshold", sink),
    }
}
