//! `[pool.NAME.health]` and the pool keys that shape how a pool lives with failing servers
//! (`queue_timeout`, `slow_start`): read and checked here, used by `health/` and `control`.

use super::error::ErrorSink;
use super::raw::{RawHealth, RawPool};
use super::units::parse_duration;
use std::ops::RangeInclusive;
use std::time::Duration;
use toml::Spanned;

/// How a pool's servers are checked.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CheckKind {
    /// Passive detection only (failed exchanges).
    None,
    /// A TCP connection is opened and closed.
    Tcp,
    /// `GET path` with `Host: host`; success when the status is in `expect`.
    Http,
    /// grpc.health.v1 `Health/Check` for `service`; success when it answers `SERVING`
    /// (pools spoken to in HTTP/2 only).
    Grpc,
}

/// Statuses that count as a successful HTTP check: "200-399", "200", "200,204".
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StatusSet(pub Vec<RangeInclusive<u16>>);

impl StatusSet {
    pub fn contains(&self, status: u16) -> bool {
        self.0.iter().any(|r| r.contains(&status))
    }

    pub fn parse(text: &str) -> Result<StatusSet, String> {
        let mut ranges = Vec::new();
        for part in text.split(',') {
            let part = part.trim();
            let (low, high) = part.split_once('-').unwrap_or((part, part));
            let low: u16 = low.trim().parse().map_err(|_| bad_expect(text))?;
            let high: u16 = high.trim().parse().map_err(|_| bad_expect(text))?;
            if !(100..=599).contains(&low) || !(100..=599).contains(&high) || low > high {
                return Err(bad_expect(text));
            }
            ranges.push(low..=high);
        }
        Ok(StatusSet(ranges))
    }
}

fn bad_expect(text: &str) -> String {
    format!("invalid expect {text:?}: statuses 100-599 like \"200-399\", \"200\" or \"200,204\"")
}

#[derive(Clone, Debug, PartialEq)]
pub struct HealthConfig {
    pub check: CheckKind,
    pub path: String,
    /// The Host field of HTTP checks; `None`: the server's address.
    pub host: Option<String>,
    pub expect: StatusSet,
    /// The service a `grpc` check asks about (`service`; `""`: the server as a whole).
    pub service: String,
    pub interval: Duration,
    pub timeout: Duration,
    pub rise: u32,
    pub fall: u32,
    /// Consecutive failed exchanges that take a server down; 0 turns passive detection off.
    pub max_fails: u32,
    /// Without active checks: how long a server taken down by failed exchanges rests before
    /// one trial request.
    pub fail_timeout: Duration,
    /// HAProxy's agent-check protocol on this port of each server's address; 0: none.
    pub agent_port: u16,
    pub agent_interval: Duration,
    /// Percent of the pool's primaries (not in maintenance) that must be up for health to
    /// decide; below it, with no backup up, the pool balances over every server not in
    /// maintenance (see `control::in_panic`). 0: never.
    pub panic_threshold: u32,
}

impl Default for HealthConfig {
    fn default() -> Self {
        HealthConfig {
            check: CheckKind::None,
            service: String::new(),
            path: "/".into(),
            host: None,
            expect: StatusSet(vec![200..=399]),
            interval: Duration::from_secs(2),
            timeout: Duration::from_secs(1),
            rise: 2,
            fall: 3,
            max_fails: 3,
            fail_timeout: Duration::from_secs(10),
            agent_port: 0,
            agent_interval: Duration::from_secs(2),
            panic_threshold: 50,
        }
    }
}

/// The pool keys of this module, with their defaults.
#[derive(Clone, Debug, PartialEq, Default)]
pub struct PoolHealth {
    /// All usable servers at `max_conns`: wait this long for a slot, then 503. Zero: no wait.
    pub queue_timeout: Duration,
    /// A server that comes up ramps from ~0 to its weight over this. Zero: at once.
    pub slow_start: Duration,
    pub health: HealthConfig,
}

pub(crate) fn build_pool_health(pool: &RawPool, sink: &mut ErrorSink<'_>) -> PoolHealth {
    let mut out = PoolHealth::default();
    if let Some(v) = &pool.queue_timeout {
        out.queue_timeout = duration(v, true, sink).unwrap_or_default();
    }
    if let Some(v) = &pool.slow_start {
        out.slow_start = duration(v, true, sink).unwrap_or_default();
    }
    if let Some(raw) = &pool.health {
        out.health = build_health(raw, sink);
    }
    out
}

fn build_health(raw: &RawHealth, sink: &mut ErrorSink<'_>) -> HealthConfig {
    let mut h = HealthConfig::default();
    read_probe(raw, &mut h, sink);
    read_timing(raw, &mut h, sink);
    read_limits(raw, &mut h, sink);
    h
}

/// What a check sends and expects: `check`, `path`, `host`, `expect`.
fn read_probe(raw: &RawHealth, h: &mut HealthConfig, sink: &mut ErrorSink<'_>) {
    if let Some(v) = &raw.check {
        match v.get_ref().as_str() {
            "none" => h.check = CheckKind::None,
            "tcp" => h.check = CheckKind::Tcp,
            "http" => h.check = CheckKind::Http,
            "grpc" => h.check = CheckKind::Grpc,
            other => sink.at(
                v.span(),
                format!("unknown check {other:?}: use \"http\", \"tcp\", \"grpc\" or \"none\""),
            ),
        }
    }
    if let Some(v) = &raw.service {
        h.service = v.get_ref().clone();
    }
    if let Some(v) = &raw.path {
        let path = v.get_ref();
        if !path.starts_with('/') || !path.bytes().all(|b| b.is_ascii_graphic()) {
            sink.at(
                v.span(),
                format!("invalid check path {path:?}: it must start with `/` and hold no spaces"),
            );
        } else {
            h.path = path.clone();
        }
    }
    if let Some(v) = &raw.host {
        let host = v.get_ref();
        if !host.bytes().all(|b| b.is_ascii_graphic()) {
            sink.at(
                v.span(),
                format!("invalid check host {host:?}: no spaces or control bytes"),
            );
        } else if !host.is_empty() {
            h.host = Some(host.clone());
        }
    }
    if let Some(v) = &raw.expect {
        match StatusSet::parse(v.get_ref()) {
            Ok(set) => h.expect = set,
            Err(e) => sink.at(v.span(), e),
        }
    }
}

/// How often and how long: `interval`, `timeout`, `agent_interval`, `fail_timeout`.
fn read_timing(raw: &RawHealth, h: &mut HealthConfig, sink: &mut ErrorSink<'_>) {
    if let Some(v) = &raw.interval {
        h.interval = duration(v, false, sink).unwrap_or(h.interval);
    }
    if let Some(v) = &raw.timeout {
        h.timeout = duration(v, false, sink).unwrap_or(h.timeout);
    }
    if let Some(v) = &raw.agent_interval {
        h.agent_interval = duration(v, false, sink).unwrap_or(h.agent_interval);
    }
    if let Some(v) = &raw.fail_timeout {
        h.fail_timeout = duration(v, false, sink).unwrap_or(h.fail_timeout);
    }
}

/// The counts and bounds: `rise`, `fall`, `max_fails`, `panic_threshold`, `agent_port`.
fn read_limits(raw: &RawHealth, h: &mut HealthConfig, sink: &mut ErrorSink<'_>) {
    let counts = [
        (&raw.rise, &mut h.rise, 1, "rise"),
        (&raw.fall, &mut h.fall, 1, "fall"),
        (&raw.max_fails, &mut h.max_fails, 0, "max_fails"),
    ];
    for (value, slot, min, key) in counts {
        if let Some(v) = value {
            match u32::try_from(*v.get_ref()) {
                Ok(n) if n >= min && n <= 1000 => *slot = n,
                _ => sink.at(
                    v.span(),
                    format!("{key} = {} is out of range {min}..=1000", v.get_ref()),
                ),
            }
        }
    }
    if let Some(v) = &raw.panic_threshold {
        match u32::try_from(*v.get_ref()) {
            Ok(percent) if percent <= 100 => h.panic_threshold = percent,
            _ => sink.at(
                v.span(),
                format!(
                    "panic_threshold = {} is out of range 0..=100 (a percentage)",
                    v.get_ref()
                ),
            ),
        }
    }
    if let Some(v) = &raw.agent_port {
        match u16::try_from(*v.get_ref()) {
            Ok(port) => h.agent_port = port,
            Err(_) => sink.at(
                v.span(),
                format!("agent_port = {} is out of range 0..=65535", v.get_ref()),
            ),
        }
    }
}

fn duration(v: &Spanned<String>, zero_ok: bool, sink: &mut ErrorSink<'_>) -> Option<Duration> {
    match parse_duration(v.get_ref()) {
        Ok(d) if d.is_zero() && !zero_ok => {
            sink.at(v.span(), "a duration here must be longer than 0");
            None
        }
        Ok(d) => Some(d),
        Err(e) => {
            sink.at(v.span(), e);
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::StatusSet;

    #[test]
    fn expect_sets() {
        let set = StatusSet::parse("200-299, 304").unwrap();
        assert!(set.contains(200) && set.contains(299) && set.contains(304));
        assert!(!set.contains(300) && !set.contains(500));
        assert!(StatusSet::parse("200").unwrap().contains(200));
        for bad in ["", "2xx", "300-200", "99", "200-600", "200,"] {
            assert!(StatusSet::parse(bad).is_err(), "{bad:?}");
        }
    }
}
