//! `GET /metrics`: the snapshot in the Prometheus text format (0.0.4, or OpenMetrics when the
//! scraper asks for it), encoded by `prometheus-client` from a collector that reads the
//! snapshot at scrape time. The data path keeps its own relaxed atomics (stats.rs); nothing
//! here is updated per request.
//!
//! Names begin `tcpvs_`; labels are `service`, `pool`, `server` (the server's address), and
//! `class` (1xx..5xx) or `state` where a family is split.

use crate::stats::latency::PROMETHEUS_BOUNDS;
use crate::stats::{LatencySnapshot, ServerSnapshot, Snapshot};
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
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

fn server_labels(s: &ServerSnapshot) -> ServerLabels<'_> {
    [("pool", s.pool.clone()), ("server", s.addr.to_string())]
}

impl Collector for Scrape {
    fn encode(&self, mut encoder: DescriptorEncoder) -> fmt::Result {
        let snap = &self.snapshot;
        let e = &mut encoder;
        let none: [(&str, &str); 0] = [];
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
            [(none, gauge(snap.clients as i64))],
        )?;

        let services = &snap.services;
        let by_service = |f: fn(&crate::stats::ServiceSnapshot) -> u64| {
            services.iter().map(move |s| -> (ServiceLabel<'_>, _) {
                ([("service", s.name.as_str())], counter(f(s)))
            })
        };
        family(
            e,
            "tcpvs_service_connections",
            "Client connections accepted",
            by_service(|s| s.accepted),
        )?;
        family(
            e,
            "tcpvs_service_refused",
            "Client connections turned away at max_clients",
            by_service(|s| s.refused),
        )?;
        family(
            e,
            "tcpvs_service_proxy_refused",
            "Client connections closed for a missing or invalid PROXY protocol header",
            by_service(|s| s.proxy_refused),
        )?;
        family(
            e,
            "tcpvs_service_tls_handshakes",
            "TLS handshakes completed",
            by_service(|s| s.tls_handshakes),
        )?;
        family(
            e,
            "tcpvs_service_tls_resumed",
            "TLS handshakes that resumed a session (ticket or session ID)",
            by_service(|s| s.tls_resumed),
        )?;
        family(
            e,
            "tcpvs_service_tls_handshake_failures",
            "Client connections closed for a failed TLS handshake or an unreadable ClientHello",
            by_service(|s| s.tls_handshake_failures),
        )?;
        family(
            e,
            "tcpvs_service_requests",
            "Requests read",
            by_service(|s| s.requests),
        )?;
        family(
            e,
            "tcpvs_service_local_errors",
            "Answers the switch made itself (refusals, 502, 503, 504)",
            by_service(|s| s.local_errors),
        )?;
        family(
            e,
            "tcpvs_service_open_connections",
            "Client connections open now",
            services
                .iter()
                .map(|s| ([("service", s.name.as_str())], gauge(s.open as i64))),
        )?;
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
                    [("service", s.name.as_str())],
                    Histogram {
                        latency: &s.duration,
                    },
                )
            }),
        )?;

        family(
            e,
            "tcpvs_pool_queued_requests",
            "Requests waiting for a server slot",
            snap.pools
                .iter()
                .map(|p| ([("pool", p.name.as_str())], gauge(p.queued as i64))),
        )?;

        family(
            e,
            "tcpvs_pool_panic",
            "1 while the pool is below its panic_threshold: health does not decide",
            snap.pools
                .iter()
                .map(|p| ([("pool", p.name.as_str())], gauge(i64::from(p.panic)))),
        )?;

        let servers = &snap.servers;
        let by_server = |f: fn(&ServerSnapshot) -> u64| {
            servers
                .iter()
                .map(move |s| (server_labels(s), counter(f(s))))
        };
        let server_gauge = |f: fn(&ServerSnapshot) -> i64| {
            servers.iter().map(move |s| (server_labels(s), gauge(f(s))))
        };
        family(
            e,
            "tcpvs_server_up",
            "1 when the server is up (not down, draining or in maintenance)",
            server_gauge(|s| i64::from(s.state == crate::control::State::Up)),
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
            server_gauge(|s| i64::from(s.admin_weight.unwrap_or(s.configured_weight))),
        )?;
        family(
            e,
            "tcpvs_server_effective_weight",
            "The weight the scheduler uses now (agent, slow start applied)",
            server_gauge(|s| i64::from(s.weight)),
        )?;
        family(
            e,
            "tcpvs_server_active_requests",
            "Requests in progress",
            server_gauge(|s| i64::from(s.active)),
        )?;
        family(
            e,
            "tcpvs_server_idle_connections",
            "Idle keep-alive connections kept for reuse",
            server_gauge(|s| s.idle as i64),
        )?;
        family(
            e,
            "tcpvs_server_connections",
            "Connections opened to the server",
            by_server(|s| s.connections),
        )?;
        family(
            e,
            "tcpvs_server_requests",
            "Requests sent (a retry counts again)",
            by_server(|s| s.requests),
        )?;
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
        family(
            e,
            "tcpvs_server_bytes_in",
            "Bytes of requests sent to the server",
            by_server(|s| s.bytes_in),
        )?;
        family(
            e,
            "tcpvs_server_bytes_out",
            "Bytes of responses relayed to clients",
            by_server(|s| s.bytes_out),
        )?;
        family(
            e,
            "tcpvs_server_connect_errors",
            "Connection attempts that failed or timed out",
            by_server(|s| s.connect_errors),
        )?;
        family(
            e,
            "tcpvs_server_response_errors",
            "Exchanges that failed after connecting",
            by_server(|s| s.response_errors),
        )?;
        family(
            e,
            "tcpvs_server_timeouts",
            "Connection attempts and exchanges that ran out of time",
            by_server(|s| s.timeouts),
        )?;
        family(
            e,
            "tcpvs_server_retries",
            "Failed attempts after which the request was tried again",
            by_server(|s| s.retries),
        )?;
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
            server_gauge(|s| i64::from(s.check.successes)),
        )?;
        family(
            e,
            "tcpvs_server_check_failures",
            "Consecutive failed active checks",
            server_gauge(|s| i64::from(s.check.failures)),
        )?;
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
        )?;
        Ok(())
    }
}
