//! The `/stats` document: written by the endpoint from a snapshot, read by the command line
//! (`tcpvs list`). One definition for both sides; the keys fixed in the design notes
//! (`generation`, `uptime_s`, `services`, `pools` with their `servers`) and more beside them.
//! Every field has a default, so the command line also reads an endpoint that sends fewer
//! fields (an older switch) or more (a newer one).

pub use super::rates::{Rates, ServerRate, ServiceRate};
use crate::state::snapshot::{LimitSnapshot, ServerSnapshot, ServiceSnapshot, Snapshot};
use crate::state::stats::counters::{counter_literal, server_counters, service_counters};
use crate::state::stats::LatencySnapshot;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct StatsJson {
    pub version: String,
    pub generation: u64,
    pub uptime_s: f64,
    pub clients: usize,
    /// Bytes of request bodies held and responses read ahead now (`request_buffer`, `response_buffer`; within `buffer_memory`).
    pub buffered_bytes: u64,
    /// Request bodies that streamed because `buffer_memory` was spent.
    pub buffer_fallbacks: u64,
    /// `trace_spans_dropped`, `trace_spans_exported` as top-level keys (trace/counters.rs).
    #[serde(flatten)]
    pub trace: crate::trace::counters::TraceCounts,
    /// The rule file the switch runs and a reload reads again (its canonical path; `null` for
    /// rules built in): `tcpvs reload -c FILE` checks that FILE is this one.
    pub rule_file: Option<String>,
    pub services: Vec<ServiceJson>,
    pub pools: Vec<PoolJson>,
    /// `[limit.NAME]` by name (each `{allowed, limited, keys, dry_run, store_up}`, as the
    /// README's `[limit.NAME]` section documents it).
    pub limits: BTreeMap<String, LimitJson>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct LimitJson {
    /// Requests let through; under `dry_run`, every request.
    pub allowed: u64,
    /// Requests refused; under `dry_run`, those that would have been.
    pub limited: u64,
    /// Keys held now (at most `max_keys`).
    pub keys: usize,
    pub dry_run: bool,
    /// With a `store`: whether it works now (`null` without one).
    pub store_up: Option<bool>,
}

fn limit_json(l: &LimitSnapshot) -> LimitJson {
    LimitJson {
        allowed: l.allowed,
        limited: l.limited,
        keys: l.keys,
        dry_run: l.dry_run,
        store_up: l.store_up,
    }
}

/// [`ServiceJson`]: its name and address, the counters of the table (under their JSON keys),
/// then what is not a plain counter.
macro_rules! declare_service_json {
    (; counters { $( $(#[doc = $doc:literal])* $field:ident { json: $key:literal, $($spec:tt)* } )* }) => {
        #[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
        #[serde(default)]
        pub struct ServiceJson {
            pub name: String,
            pub listen: String,
            $( $(#[doc = $doc])* #[serde(rename = $key)] pub $field: u64, )*
            pub responses: Classes,
            pub latency_ms: Option<Percentiles>,
            pub rate: ServiceRate,
        }
    };
}

service_counters!(declare_service_json);

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct PoolJson {
    pub name: String,
    pub scheduler: String,
    pub requests: u64,
    pub active: u64,
    pub queued: usize,
    /// Below its `panic_threshold`: health does not decide (requests go to down servers too).
    pub panic: bool,
    /// What its servers are found by (`dns NAME:PORT`, `srv NAME`); `null`: listed only.
    pub discover: Option<String>,
    pub servers: Vec<ServerJson>,
}

/// [`ServerJson`]: the server's state and weights first, then its counters (under their JSON
/// keys) by group, with the derived `failures` and the status classes between the groups: the
/// order `/stats` has always had, which readers of the text may rely on.
macro_rules! declare_server_json {
    (;
        $( $group:ident {
            $( $(#[doc = $doc:literal])* $field:ident { json: $key:literal, $($spec:tt)* } )*
        } )*
    ) => {
        declare_server_json! {
            @declare $( $group [ $( $(#[doc = $doc])* #[serde(rename = $key)] pub $field: u64, )* ] )*
        }
    };
    (@declare traffic [ $($traffic:tt)* ] errors [ $($errors:tt)* ] bytes [ $($bytes:tt)* ]) => {
        #[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
        #[serde(default)]
        pub struct ServerJson {
            pub addr: String,
            pub state: String,
            pub reason: String,
            pub since_s: f64,
            pub backup: bool,
            /// Found by the pool's `discover` (DNS), not listed in the rule file.
            pub discovered: bool,
            pub offered: bool,
            pub weight: u32,
            pub weight_configured: u32,
            pub weight_effective: u32,
            pub max_conns: u32,
            /// What its connections speak: `http/1.1`.
            pub protocol: String,
            /// Its connections are TLS (`[pool.NAME.tls]`).
            pub tls: bool,
            pub active: u32,
            pub idle: usize,
            $($traffic)*
            /// `connect_errors` + `response_errors`.
            pub failures: u64,
            $($errors)*
            pub responses: Classes,
            $($bytes)*
            pub latency_ms: Option<Percentiles>,
            pub rate: ServerRate,
            pub check: CheckJson,
        }
    };
}

server_counters!(declare_server_json);

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct CheckJson {
    /// `http`, `tcp` or `none`.
    pub kind: String,
    /// `passed`, `failed`, or null before the first check.
    pub last: Option<String>,
    pub detail: String,
    pub age_s: Option<f64>,
    pub successes: u32,
    pub failures: u32,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Classes {
    #[serde(rename = "1xx")]
    pub informational: u64,
    #[serde(rename = "2xx")]
    pub success: u64,
    #[serde(rename = "3xx")]
    pub redirection: u64,
    #[serde(rename = "4xx")]
    pub client_error: u64,
    #[serde(rename = "5xx")]
    pub server_error: u64,
}

impl From<[u64; 5]> for Classes {
    fn from([informational, success, redirection, client_error, server_error]: [u64; 5]) -> Self {
        Classes {
            informational,
            success,
            redirection,
            client_error,
            server_error,
        }
    }
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Percentiles {
    pub p50: f64,
    pub p90: f64,
    pub p99: f64,
}

impl Percentiles {
    /// In milliseconds, rounded to the microsecond; `None` before the first recording.
    pub fn of(latency: &LatencySnapshot) -> Option<Percentiles> {
        let ms = |q| latency.quantile_micros(q).map(|us| (us).round() / 1000.0);
        Some(Percentiles {
            p50: ms(0.5)?,
            p90: ms(0.9)?,
            p99: ms(0.99)?,
        })
    }
}

/// Seconds with millisecond precision, as JSON numbers.
fn seconds(d: Duration) -> f64 {
    (d.as_secs_f64() * 1000.0).round() / 1000.0
}

/// A rate rounded to 0.01, so the JSON stays readable.
fn rounded(rate: f64) -> f64 {
    (rate * 100.0).round() / 100.0
}

pub fn stats_json(
    snapshot: &Snapshot,
    rates: &Rates,
    generation: u64,
    uptime: Duration,
) -> StatsJson {
    let services = snapshot
        .services
        .iter()
        .map(|s| service_json(s, rates))
        .collect();
    let mut by_pool: HashMap<&str, Vec<&ServerSnapshot>> = HashMap::new();
    for server in &snapshot.servers {
        by_pool
            .entry(server.pool.as_str())
            .or_default()
            .push(server);
    }
    let pools = snapshot
        .pools
        .iter()
        .map(|pool| {
            let servers = by_pool.remove(pool.name.as_str()).unwrap_or_default();
            PoolJson {
                name: pool.name.clone(),
                scheduler: pool.scheduler.clone(),
                requests: servers.iter().map(|s| s.requests).sum(),
                active: servers.iter().map(|s| u64::from(s.active)).sum(),
                queued: pool.queued,
                panic: pool.panic,
                discover: pool.discover.clone(),
                servers: servers.into_iter().map(|s| server_json(s, rates)).collect(),
            }
        })
        .collect();
    StatsJson {
        version: env!("CARGO_PKG_VERSION").to_string(),
        generation,
        uptime_s: seconds(uptime),
        clients: snapshot.clients,
        buffered_bytes: snapshot.buffered_bytes,
        buffer_fallbacks: snapshot.buffer_fallbacks,
        trace: snapshot.trace,
        rule_file: None,
        services,
        pools,
        limits: snapshot
            .limits
            .iter()
            .map(|l| (l.name.clone(), limit_json(l)))
            .collect(),
    }
}

fn service_json(s: &ServiceSnapshot, rates: &Rates) -> ServiceJson {
    let rate = rates.services.get(&s.name).cloned().unwrap_or_default();
    service_counters!(
        counter_literal,
        ServiceJson {
            name: s.name.clone(),
            listen: s.listen.to_string(),
            responses: s.classes.into(),
            latency_ms: Percentiles::of(&s.duration),
            rate: ServiceRate {
                requests: rounded(rate.requests),
                connections: rounded(rate.connections),
            },
        }
        copied,
        s
    )
}

pub fn server_json(s: &ServerSnapshot, rates: &Rates) -> ServerJson {
    let rate = rates
        .servers
        .get(&(s.pool.clone(), s.addr))
        .cloned()
        .unwrap_or_default();
    let (last, detail, age_s) = match &s.check.last {
        Some((true, _, age)) => (Some("passed".into()), String::new(), Some(seconds(*age))),
        Some((false, why, age)) => (Some("failed".into()), why.clone(), Some(seconds(*age))),
        None => (None, String::new(), None),
    };
    server_counters!(
        counter_literal,
        ServerJson {
            addr: s.addr.to_string(),
            state: s.state.to_string(),
            reason: s.reason.clone(),
            since_s: seconds(s.since),
            backup: s.backup,
            discovered: s.discovered,
            offered: s.offered,
            weight: s.admin_weight.unwrap_or(s.configured_weight),
            weight_configured: s.configured_weight,
            weight_effective: s.weight,
            max_conns: s.max_conns,
            protocol: s.protocol.to_string(),
            tls: s.tls,
            active: s.active,
            idle: s.idle,
            failures: s.connect_errors + s.response_errors,
            responses: s.classes.into(),
            latency_ms: Percentiles::of(&s.latency),
            rate: ServerRate {
                requests: rounded(rate.requests),
                bytes_out: rounded(rate.bytes_out),
            },
            check: CheckJson {
                kind: s.check.kind.to_string(),
                last,
                detail,
                age_s,
                successes: s.check.successes,
                failures: s.check.failures,
            },
        }
        copied,
        s
    )
}

/// A counter of the snapshot, as the JSON holds it.
fn copied(count: &u64) -> u64 {
    *count
}
