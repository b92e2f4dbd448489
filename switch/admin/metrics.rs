//! `GET /metrics`: the snapshot in the Prometheus text format (0.0.4, or OpenMetrics when the
//! scraper asks for it), encoded by `prometheus-client` from a collector that reads the
//! snapshot at scrape time. The data path keeps its own relaxed atomics (state/stats.rs); nothing
//! here is updated per request.
//!
//! Names begin `tcpvs_`; labels are `service`, `pool`, `server` (the server's address), and
//! `class` (1xx..5xx) or `state` where a family is split. Counters end in `_total` (the
//! encoder adds it). Beside them: `tcpvs_build_info{version="..."} 1`, and the process
//! metrics every Prometheus client library exports under the same names (`process_cpu_seconds_total`,
//! `process_resident_memory_bytes`, ...), read from /proc/self at scrape time as the Go and
//! Python clients read them (see [`ProcessFigures`]).

use crate::state::snapshot::{
    LimitSnapshot, PoolSnapshot, ServerSnapshot, ServiceSnapshot, Snapshot,
};
use crate::state::stats::counters::{server_counters, service_counters};
use crate::state::stats::latency::PROMETHEUS_BOUNDS;
use crate::state::stats::LatencySnapshot;
use crate::state::status::State;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::info::Info;
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Registry;
use std::fmt;

/// What one scrape shows: the snapshot and the process-wide figures beside it.
#[derive(Debug)]
struct Scrape {
    snapshot: Snapshot,
    generation: u64,
    uptime_s: f64,
}

/// The text of a scrape; `openmetrics` picks that format (its content type is the caller's).
pub fn render(snapshot: Snapshot, generation: u64, uptime_s: f64, openmetrics: bool) -> String {
    let mut registry = Registry::default();
    registry.register_collector(Box::new(Scrape {
        snapshot,
        generation,
        uptime_s,
    }));
    let mut text = String::with_capacity(16 * 1024);
    let encoded = if openmetrics {
        prometheus_client::encoding::text::encode(&mut text, &registry)
    } else {
        prometheus_client::encoding::prometheus_text::encode(&mut text, &registry)
    };
    // Writing into a String cannot fail; an error would be a bug of ours in a label.
    if let Err(e) = encoded {
        tracing::warn!("encoding /metrics failed: {e}");
    }
    text
}

const CLASSES: [&str; 5] = ["1xx", "2xx", "3xx", "4xx", "5xx"];
const STATES: [&str; 4] = ["up", "down", "drain", "maint"];

/// One family: its name, help, type, then a value per label set.
fn family<L: EncodeLabelSet, M: EncodeMetric>(
    encoder: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    rows: impl IntoIterator<Item = (L, M)>,
) -> fmt::Result {
    let mut rows = rows.into_iter().peekable();
    let Some((_, first)) = rows.peek() else {
        return Ok(());
    };
    let metric_type = first.metric_type();
    let mut metric = encoder.encode_descriptor(name, help, None, metric_type)?;
    for (labels, value) in rows {
        value.encode(metric.encode_family(&labels)?)?;
    }
    Ok(())
}

fn counter(v: u64) -> ConstCounter<u64> {
    ConstCounter::new(v)
}

fn gauge(v: i64) -> ConstGauge<i64> {
    ConstGauge::new(v)
}

/// A histogram from our buckets, in seconds.
#[derive(Debug)]
struct Histogram<'a> {
    latency: &'a LatencySnapshot,
}

impl EncodeMetric for Histogram<'_> {
    fn encode(&self, mut encoder: prometheus_client::encoding::MetricEncoder) -> fmt::Result {
        let (cumulative, count) = self.latency.cumulative_at_bounds();
        let mut buckets: Vec<(f64, u64)> = Vec::with_capacity(PROMETHEUS_BOUNDS.len() + 1);
        // prometheus-client wants per-bucket counts and accumulates them itself.
        let mut below = 0;
        for (bound, &at_or_below) in PROMETHEUS_BOUNDS.iter().zip(cumulative.iter()) {
            buckets.push((*bound, at_or_below - below));
            below = at_or_below;
        }
        buckets.push((f64::INFINITY, count - below));
        encoder.encode_histogram::<prometheus_client::encoding::NoLabelSet>(
            self.latency.sum_us as f64 / 1e6,
            count,
            &buckets,
            None,
        )
    }

    fn metric_type(&self) -> MetricType {
        MetricType::Histogram
    }
}

type ServiceLabel<'a> = [(&'static str, &'a str); 1];
type ServerLabels<'a> = [(&'static str, String); 2];

fn service_label(s: &ServiceSnapshot) -> ServiceLabel<'_> {
    [("service", s.name.as_str())]
}

fn server_labels(s: &ServerSnapshot) -> ServerLabels<'_> {
    [("pool", s.pool.clone()), ("server", s.addr.to_string())]
}

/// The process's own figures, as the Prometheus client libraries export them (client_golang's
/// process collector, client_python's `ProcessCollector`): read from /proc/self at each scrape,
/// Linux only, as tcpvs is. Hand-written: prometheus-client has no process collector, and the
/// crates that have one serve other metric libraries (`prometheus`' `ProcessCollector`,
/// `metrics-process` for `metrics`, the latter bringing `procfs`); what is read here is a few
/// numbers of two files and one system call.
#[derive(Debug, Default, PartialEq)]
struct ProcessFigures {
    /// User and system CPU time, in seconds.
    cpu_seconds: Option<f64>,
    resident_bytes: Option<u64>,
    virtual_bytes: Option<u64>,
    /// Seconds since the Unix epoch.
    start_time: Option<f64>,
    open_fds: Option<u64>,
    /// The soft RLIMIT_NOFILE; `None` when unlimited.
    max_fds: Option<u64>,
}

impl ProcessFigures {
    /// What can be read now; a figure that cannot be read is left out of the scrape.
    fn read() -> ProcessFigures {
        let ticks = rustix::param::clock_ticks_per_second() as f64;
        let page = rustix::param::page_size() as u64;
        let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
        let boot = std::fs::read_to_string("/proc/stat")
            .ok()
            .and_then(|text| boot_time(&text));
        let mut figures = from_stat(&stat, ticks, page, boot);
        figures.open_fds = std::fs::read_dir("/proc/self/fd")
            .ok()
            .map(|entries| entries.count() as u64);
        let limit = rustix::process::getrlimit(rustix::process::Resource::Nofile);
        figures.max_fds = limit.current;
        figures
    }
}

/// The figures of `/proc/self/stat` (proc(5): `utime`, `stime` and `starttime` in clock ticks,
/// `vsize` in bytes, `rss` in pages), with the boot time of `/proc/stat` for the start time.
fn from_stat(stat: &str, ticks: f64, page: u64, boot: Option<u64>) -> ProcessFigures {
    // The command name (field 2) is in parentheses and may hold spaces and `)`: the fields
    // after the last `)` begin with field 3, `state`.
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .map_or(Vec::new(), |(_, rest)| rest.split_whitespace().collect());
    let field = |n: usize| fields.get(n - 3).and_then(|f| f.parse::<u64>().ok());
    let valid_ticks = ticks > 0.0;
    ProcessFigures {
        cpu_seconds: match (field(14), field(15)) {
            (Some(user), Some(system)) if valid_ticks => Some((user + system) as f64 / ticks),
            _ => None,
        },
        resident_bytes: field(24).map(|pages| pages.saturating_mul(page)),
        virtual_bytes: field(23),
        start_time: match (field(22), boot) {
            (Some(start), Some(boot)) if valid_ticks => Some(boot as f64 + start as f64 / ticks),
            _ => None,
        },
        open_fds: None,
        max_fds: None,
    }
}

/// `btime` of `/proc/stat`: the boot time, in seconds since the Unix epoch.
fn boot_time(text: &str) -> Option<u64> {
    text.lines()
        .find_map(|line| line.strip_prefix("btime "))
        .and_then(|value| value.trim().parse().ok())
}

/// The process families, under the names every Prometheus client library uses.
fn encode_process(e: &mut DescriptorEncoder, p: &ProcessFigures) -> fmt::Result {
    let none: [(&str, &str); 0] = [];
    if let Some(v) = p.cpu_seconds {
        family(
            e,
            "process_cpu_seconds",
            "Total user and system CPU time spent in seconds.",
            [(none, ConstCounter::new(v))],
        )?;
    }
    let gauges = [
        (
            "process_resident_memory_bytes",
            "Resident memory size in bytes.",
            p.resident_bytes.map(|v| v as f64),
        ),
        (
            "process_virtual_memory_bytes",
            "Virtual memory size in bytes.",
            p.virtual_bytes.map(|v| v as f64),
        ),
        (
            "process_start_time_seconds",
            "Start time of the process since unix epoch in seconds.",
            p.start_time,
        ),
        (
            "process_open_fds",
            "Number of open file descriptors.",
            p.open_fds.map(|v| v as f64),
        ),
        (
            "process_max_fds",
            "Maximum number of open file descriptors.",
            p.max_fds.map(|v| v as f64),
        ),
    ];
    for (name, help, value) in gauges {
        if let Some(v) = value {
            family(e, name, help, [(none, ConstGauge::new(v))])?;
        }
    }
    Ok(())
}

/// Whether a family of the counter tables is a counter or a gauge (a value that goes down too).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Counter,
    Gauge,
}

/// A family of a counter table: one value per service or server.
struct Plain<S> {
    name: &'static str,
    help: &'static str,
    kind: Kind,
    value: fn(&S) -> u64,
}

/// `$holder`: the families of one counter table, a slice per group of the table, and the
/// constant `$name` of it.
macro_rules! plain_families {
    ($holder:ident, $name:ident: $snapshot:ty;
        $( $group:ident { $( $(#[doc = $doc:literal])* $field:ident {
            json: $key:literal,
            metric: $kind:ident $metric:literal $help:literal,
            $($list:tt)*
        } )* } )*
    ) => {
        struct $holder {
            $( $group: &'static [Plain<$snapshot>], )*
        }

        const $name: $holder = $holder {
            $( $group: &[ $( Plain {
                name: $metric,
                help: $help,
                kind: Kind::$kind,
                value: |s| s.$field,
            }, )* ], )*
        };
    };
}

service_counters!(plain_families, ServiceFamilies, SERVICE: ServiceSnapshot);
server_counters!(plain_families, ServerFamilies, SERVER: ServerSnapshot);

/// `families`, each with a row per item of `items`, labelled by `labels`.
fn encode_plain<'a, S, L: EncodeLabelSet>(
    e: &mut DescriptorEncoder,
    families: impl IntoIterator<Item = &'static Plain<S>>,
    items: &'a [S],
    labels: impl Fn(&'a S) -> L,
) -> fmt::Result
where
    S: 'static,
{
    for plain in families {
        let value = |s| (plain.value)(s);
        match plain.kind {
            Kind::Counter => family(
                e,
                plain.name,
                plain.help,
                items.iter().map(|s| (labels(s), counter(value(s)))),
            )?,
            Kind::Gauge => family(
                e,
                plain.name,
                plain.help,
                items.iter().map(|s| (labels(s), gauge(value(s) as i64))),
            )?,
        }
    }
    Ok(())
}

impl Collector for Scrape {
    fn encode(&self, mut encoder: DescriptorEncoder) -> fmt::Result {
        let e = &mut encoder;
        self.encode_switch(e)?;
        encode_services(e, &self.snapshot.services)?;
        encode_pools(e, &self.snapshot.pools)?;
        encode_servers(e, &self.snapshot.servers)?;
        encode_limits(e, &self.snapshot.limits)
    }
}

/// The rate limits (`tcpvs_limit_allowed_total`, `tcpvs_limit_limited_total`,
/// `tcpvs_limit_keys`, as the README's `[limit.NAME]` section names them).
fn encode_limits(e: &mut DescriptorEncoder, limits: &[LimitSnapshot]) -> fmt::Result {
    let label = |l: &LimitSnapshot| [("limit", l.name.clone())];
    family(
        e,
        "tcpvs_limit_allowed",
        "Requests a rate limit let through (under dry_run: every request)",
        limits.iter().map(|l| (label(l), counter(l.allowed))),
    )?;
    family(
        e,
        "tcpvs_limit_limited",
        "Requests a rate limit refused (under dry_run: would have refused)",
        limits.iter().map(|l| (label(l), counter(l.limited))),
    )?;
    family(
        e,
        "tcpvs_limit_keys",
        "Keys a rate limit holds now (at most its max_keys)",
        limits.iter().map(|l| (label(l), gauge(l.keys as i64))),
    )
}

impl Scrape {
    /// The switch as a whole: its build, its process, uptime, generation and clients.
    fn encode_switch(&self, e: &mut DescriptorEncoder) -> fmt::Result {
        let none: [(&str, &str); 0] = [];
        family(
            e,
            "tcpvs_build",
            "The running build: its version; the value is 1",
            [(none, Info::new([("version", env!("CARGO_PKG_VERSION"))]))],
        )?;
        encode_process(e, &ProcessFigures::read())?;
        family(
            e,
            "tcpvs_uptime_seconds",
            "Seconds since the switch started",
            [(none, ConstGauge::new(self.uptime_s))],
        )?;
        family(
            e,
            "tcpvs_generation",
            "Configuration generation: 1 at start, +1 per reload",
            [(none, gauge(self.generation as i64))],
        )?;
        family(
            e,
            "tcpvs_clients",
            "Client connections open now",
            [(none, gauge(self.snapshot.clients as i64))],
        )?;
        family(
            e,
            "tcpvs_buffered_bytes",
            "Bytes of request bodies held and responses read ahead now (request_buffer, response_buffer; within buffer_memory)",
            [(none, gauge(self.snapshot.buffered_bytes as i64))],
        )?;
        family(
            e,
            "tcpvs_buffer_fallbacks",
            "Request bodies that streamed because buffer_memory was spent",
            [(none, counter(self.snapshot.buffer_fallbacks))],
        )?;
        for (name, help, value) in self.snapshot.trace.metrics() {
            family(e, name, help, [(none, counter(value))])?;
        }
        Ok(())
    }
}

/// The services: the counters of their table (its gauges after its counters), answers by
/// status class, request durations.
fn encode_services(e: &mut DescriptorEncoder, services: &[ServiceSnapshot]) -> fmt::Result {
    let (counters, gauges): (Vec<_>, Vec<_>) = SERVICE
        .counters
        .iter()
        .partition(|plain| plain.kind == Kind::Counter);
    encode_plain(e, counters, services, service_label)?;
    encode_plain(e, gauges, services, service_label)?;
    family(
        e,
        "tcpvs_service_responses",
        "Requests answered, by status class",
        services.iter().flat_map(|s| {
            CLASSES.iter().zip(s.classes).map(move |(class, n)| {
                (
                    [("service", s.name.as_str()), ("class", *class)],
                    counter(n),
                )
            })
        }),
    )?;
    family(
        e,
        "tcpvs_request_duration_seconds",
        "From a request's head read to its response relayed (or refused)",
        services.iter().map(|s| {
            (
                service_label(s),
                Histogram {
                    latency: &s.duration,
                },
            )
        }),
    )
}

fn encode_pools(e: &mut DescriptorEncoder, pools: &[PoolSnapshot]) -> fmt::Result {
    family(
        e,
        "tcpvs_pool_queued_requests",
        "Requests waiting for a server slot",
        pools
            .iter()
            .map(|p| ([("pool", p.name.as_str())], gauge(p.queued as i64))),
    )?;
    family(
        e,
        "tcpvs_pool_panic",
        "1 while the pool is below its panic_threshold: health does not decide",
        pools
            .iter()
            .map(|p| ([("pool", p.name.as_str())], gauge(i64::from(p.panic)))),
    )
}

/// The servers: state and weights, the counters of their table with the status classes,
/// checks, response times.
fn encode_servers(e: &mut DescriptorEncoder, servers: &[ServerSnapshot]) -> fmt::Result {
    encode_server_states(e, servers)?;
    encode_plain(e, SERVER.traffic, servers, server_labels)?;
    family(
        e,
        "tcpvs_server_responses",
        "Response heads received, by status class",
        servers.iter().flat_map(|s| {
            CLASSES.iter().zip(s.classes).map(move |(class, n)| {
                let [pool, server] = server_labels(s);
                ([pool, server, ("class", class.to_string())], counter(n))
            })
        }),
    )?;
    encode_plain(e, SERVER.bytes, servers, server_labels)?;
    encode_plain(e, SERVER.errors, servers, server_labels)?;
    encode_server_checks(e, servers)?;
    family(
        e,
        "tcpvs_server_state_seconds",
        "Seconds since the server's state last changed",
        servers
            .iter()
            .map(|s| (server_labels(s), ConstGauge::new(s.since.as_secs_f64()))),
    )?;
    family(
        e,
        "tcpvs_server_response_seconds",
        "From a request's head read to the server's response head (connection set-up included)",
        servers.iter().map(|s| {
            (
                server_labels(s),
                Histogram {
                    latency: &s.latency,
                },
            )
        }),
    )
}

/// A gauge per server.
fn server_gauge(
    servers: &[ServerSnapshot],
    value: fn(&ServerSnapshot) -> i64,
) -> impl Iterator<Item = (ServerLabels<'_>, ConstGauge<i64>)> {
    servers
        .iter()
        .map(move |s| (server_labels(s), gauge(value(s))))
}

/// Whether each server is up, its state, weights and load now.
fn encode_server_states(e: &mut DescriptorEncoder, servers: &[ServerSnapshot]) -> fmt::Result {
    family(
        e,
        "tcpvs_server_up",
        "1 when the server is up (not down, draining or in maintenance)",
        server_gauge(servers, |s| i64::from(s.state == State::Up)),
    )?;
    family(
        e,
        "tcpvs_server_state",
        "1 for the server's current state",
        servers.iter().flat_map(|s| {
            let current = s.state.to_string();
            STATES.iter().map(move |state| {
                let [pool, server] = server_labels(s);
                (
                    [pool, server, ("state", state.to_string())],
                    gauge(i64::from(current == *state)),
                )
            })
        }),
    )?;
    family(
        e,
        "tcpvs_server_weight",
        "The weight in force: set at run time, else configured",
        server_gauge(servers, |s| {
            i64::from(s.admin_weight.unwrap_or(s.configured_weight))
        }),
    )?;
    family(
        e,
        "tcpvs_server_effective_weight",
        "The weight the scheduler uses now (agent, slow start applied)",
        server_gauge(servers, |s| i64::from(s.weight)),
    )?;
    family(
        e,
        "tcpvs_server_active_requests",
        "Requests in progress",
        server_gauge(servers, |s| i64::from(s.active)),
    )?;
    family(
        e,
        "tcpvs_server_idle_connections",
        "Idle keep-alive connections kept for reuse",
        server_gauge(servers, |s| s.idle as i64),
    )
}

/// What the active checks last said of each server.
fn encode_server_checks(e: &mut DescriptorEncoder, servers: &[ServerSnapshot]) -> fmt::Result {
    family(
        e,
        "tcpvs_server_check_passed",
        "The last active check: 1 passed, 0 failed (absent before the first)",
        servers.iter().filter_map(|s| {
            let (passed, _, _) = s.check.last.as_ref()?;
            Some((server_labels(s), gauge(i64::from(*passed))))
        }),
    )?;
    family(
        e,
        "tcpvs_server_check_successes",
        "Consecutive successful active checks",
        server_gauge(servers, |s| i64::from(s.check.successes)),
    )?;
    family(
        e,
        "tcpvs_server_check_failures",
        "Consecutive failed active checks",
        server_gauge(servers, |s| i64::from(s.check.failures)),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proc_stat_fields_are_read_by_their_place() {
        // A command name with a space and `)`, as proc(5) allows; 100 ticks per second.
        let stat = "4242 (tcp vs) x) S 1 4242 4242 0 -1 4194560 3000 0 0 0 \
                    250 150 0 0 20 0 3 0 12345 104857600 2560 18446744073709551615 \
                    1 1 0 0 0 0 0 4096 0 0 0 0 17 1 0 0 0 0 0";
        let figures = from_stat(stat, 100.0, 4096, Some(1_700_000_000));
        assert_eq!(
            figures,
            ProcessFigures {
                cpu_seconds: Some(4.0),
                resident_bytes: Some(2560 * 4096),
                virtual_bytes: Some(104_857_600),
                start_time: Some(1_700_000_123.45),
                open_fds: None,
                max_fds: None,
            }
        );
        assert_eq!(from_stat("", 100.0, 4096, None), ProcessFigures::default());
        assert_eq!(
            boot_time("cpu  1 2 3\nintr 5\nbtime 1700000000\nprocesses 9\n"),
            Some(1_700_000_000)
        );
    }

    #[test]
    fn this_process_has_figures() {
        let figures = ProcessFigures::read();
        assert!(figures.cpu_seconds.is_some_and(|s| s >= 0.0), "{figures:?}");
        assert!(figures.resident_bytes.is_some_and(|b| b > 0), "{figures:?}");
        assert!(figures.open_fds.is_some_and(|n| n >= 3), "{figures:?}");
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs_f64();
        assert!(
            figures
                .start_time
                .is_some_and(|t| t <= now + 1.0 && t > now - 86_400.0 * 365.0),
            "{figures:?}"
        );
    }
}
