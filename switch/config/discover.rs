//! A pool's `discover`, `interval` and `resolvers`: which DNS name its servers are found under,
//! how often to ask, and whom (switch/discovery/ asks).

use super::error::ErrorSink;
use super::raw::{RawDiscover, RawPool};
use super::server_addr::{self, Written};
use super::units::parse_duration;
use std::fmt;
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

/// How often a pool's name is asked when `interval` is not given.
pub const DEFAULT_INTERVAL: Duration = Duration::from_secs(5);
/// No lookup more often than this, whatever `interval` or the record's TTL says.
pub const MIN_INTERVAL: Duration = Duration::from_secs(1);
/// `interval` at most a day: longer is surely a mistake of units.
const MAX_INTERVAL: Duration = Duration::from_secs(86_400);

/// What a pool's servers are found from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Discover {
    pub lookup: Lookup,
    /// How often to ask (the answer's TTL when shorter, never under [`MIN_INTERVAL`]).
    pub interval: Duration,
    /// The DNS servers asked; empty: those of `/etc/resolv.conf` (and `/etc/hosts` first).
    pub resolvers: Vec<SocketAddr>,
}

/// The question asked.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Lookup {
    /// `dns = "NAME:PORT"`: every A and AAAA address of `host` is a server at `port`.
    Dns { host: String, port: u16 },
    /// `srv = "NAME"`: each SRV record's target, port and weight is a server; records of a
    /// priority above the lowest are backups.
    Srv { name: String },
}

impl fmt::Display for Lookup {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Lookup::Dns { host, port } => write!(f, "dns {host}:{port}"),
            Lookup::Srv { name } => write!(f, "srv {name}"),
        }
    }
}

/// The pool's discovery, or `None` (without `discover`; `interval` or `resolvers` alone are
/// reported: they would do nothing).
pub(super) fn build_discover(pool: &RawPool, sink: &mut ErrorSink<'_>) -> Option<Discover> {
    let Some(raw) = &pool.discover else {
        for (key, span) in [
            ("interval", pool.interval.as_ref().map(|v| v.span())),
            ("resolvers", pool.resolvers.as_ref().map(|v| v.span())),
        ] {
            if let Some(span) = span {
                sink.at(
                    span,
                    format!("`{key}` is read only beside `discover = {{ dns = ... }}` or `{{ srv = ... }}`"),
                );
            }
        }
        return None;
    };
    let lookup = lookup_of(raw, sink);
    let interval = interval_of(pool, sink);
    let resolvers = resolvers_of(pool, sink);
    Some(Discover {
        lookup: lookup?,
        interval: interval?,
        resolvers,
    })
}

/// The question: `dns` or `srv`, exactly one.
fn lookup_of(raw: &RawDiscover, sink: &mut ErrorSink<'_>) -> Option<Lookup> {
    match (&raw.dns, &raw.srv) {
        (Some(dns), None) => match server_addr::parse(dns.get_ref()) {
            Ok(Written::Name { host, port }) => Some(Lookup::Dns {
                host: host.to_string(),
                port,
            }),
            Ok(Written::Literal(addr)) => {
                sink.at(
                    dns.span(),
                    format!("`discover.dns` takes a name to look up; {addr} is an address: list it in `servers`"),
                );
                None
            }
            Err(message) => {
                sink.at(dns.span(), format!("`discover.dns`: {message}"));
                None
            }
        },
        (None, Some(srv)) => {
            let name = srv.get_ref();
            if server_addr::is_resolvable_name(name) {
                return Some(Lookup::Srv { name: name.clone() });
            }
            sink.at(
                srv.span(),
                format!("`discover.srv`: {name:?} is not a DNS name like \"_http._tcp.api.service.consul\" (no port: the records give it)"),
            );
            None
        }
        (Some(_), Some(srv)) => {
            sink.at(srv.span(), "`discover` takes `dns` or `srv`, not both");
            None
        }
        (None, None) => {
            sink.at(
                raw.span.clone(),
                "`discover` needs `dns = \"NAME:PORT\"` or `srv = \"NAME\"`",
            );
            None
        }
    }
}

fn interval_of(pool: &RawPool, sink: &mut ErrorSink<'_>) -> Option<Duration> {
    let Some(v) = &pool.interval else {
        return Some(DEFAULT_INTERVAL);
    };
    match parse_duration(v.get_ref()) {
        Ok(d) if (MIN_INTERVAL..=MAX_INTERVAL).contains(&d) => Some(d),
        Ok(_) => {
            sink.at(v.span(), "`interval` must be 1s to 24h");
            None
        }
        Err(e) => {
            sink.at(v.span(), e);
            None
        }
    }
}

/// The resolvers listed, each once; empty when none is (or all are wrong: reported).
fn resolvers_of(pool: &RawPool, sink: &mut ErrorSink<'_>) -> Vec<SocketAddr> {
    let mut resolvers = Vec::new();
    let Some(list) = &pool.resolvers else {
        return resolvers;
    };
    if list.get_ref().is_empty() {
        sink.at(
            list.span(),
            "`resolvers` is empty: leave it out to ask those of /etc/resolv.conf",
        );
    }
    for entry in list.get_ref() {
        match resolver_addr(entry.get_ref()) {
            Some(addr) if !resolvers.contains(&addr) => resolvers.push(addr),
            Some(addr) => sink.at(entry.span(), format!("resolver {addr} is listed twice")),
            None => sink.at(
                entry.span(),
                format!(
                    "invalid resolver {:?}: expected IP or IP:PORT like \"127.0.0.1:8600\" (port 53 when left out)",
                    entry.get_ref()
                ),
            ),
        }
    }
    resolvers
}

/// `IP:PORT`, `[IPv6]:PORT`, or an IP alone (port 53).
fn resolver_addr(text: &str) -> Option<SocketAddr> {
    if let Ok(addr) = text.parse::<SocketAddr>() {
        return (addr.port() != 0).then_some(addr);
    }
    let ip: IpAddr = text.parse().ok()?;
    Some(SocketAddr::new(ip, 53))
}

#[cfg(test)]
mod tests {
    use super::resolver_addr;

    #[test]
    fn resolvers_take_port_53_when_left_out() {
        assert_eq!(
            resolver_addr("127.0.0.1"),
            Some("127.0.0.1:53".parse().unwrap())
        );
        assert_eq!(resolver_addr("::1"), Some("[::1]:53".parse().unwrap()));
        assert_eq!(
            resolver_addr("[::1]:8600"),
            Some("[::1]:8600".parse().unwrap())
        );
        assert_eq!(resolver_addr("127.0.0.1:0"), None);
        assert_eq!(resolver_addr("dns.internal:53"), None);
    }
}
