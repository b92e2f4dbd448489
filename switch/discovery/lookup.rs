//! One lookup of a pool's name, with hickory-resolver (a well-kept resolver: UDP with TCP on
//! truncation, several servers, `/etc/resolv.conf` and `/etc/hosts`), and its answer as the
//! servers it makes.

use crate::config::discover::{Discover, Lookup, MIN_INTERVAL};
use crate::config::ServerConfig;
use hickory_resolver::config::{ConnectionConfig, NameServerConfig, ResolverConfig};
use hickory_resolver::net::runtime::TokioRuntimeProvider;
use hickory_resolver::proto::rr::RData;
use hickory_resolver::TokioResolver;
use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};

/// Seconds one DNS server has to answer, and how many times each is asked: a lookup gives up
/// within about 4 s per resolver, well before a watcher's next turn at the shortest interval.
const TIMEOUT: Duration = Duration::from_secs(2);
const ATTEMPTS: usize = 2;
/// At most this many servers from one answer: a record set larger than this is surely not a
/// pool (and a pool of more would cost every pick a scan of them).
pub const MAX_FOUND: usize = 1024;

/// What one lookup found.
#[derive(Debug, PartialEq)]
pub struct Answer {
    /// In address order, each address once.
    pub servers: Vec<ServerConfig>,
    /// How long the answer may be kept (its records' smallest TTL).
    pub ttl: Duration,
}

/// The resolver of a pool's discovery: its `resolvers`, or the system's.
pub fn resolver(discover: &Discover) -> Result<TokioResolver, String> {
    let provider = TokioRuntimeProvider::default();
    let mut builder = if discover.resolvers.is_empty() {
        TokioResolver::builder(provider).map_err(|e| format!("/etc/resolv.conf: {e}"))?
    } else {
        let servers = discover
            .resolvers
            .iter()
            .map(|addr| {
                let mut udp = ConnectionConfig::udp();
                udp.port = addr.port();
                let mut tcp = ConnectionConfig::tcp();
                tcp.port = addr.port();
                NameServerConfig::new(addr.ip(), true, vec![udp, tcp])
            })
            .collect();
        TokioResolver::builder_with_config(ResolverConfig::from_name_servers(servers), provider)
    };
    let options = builder.options_mut();
    options.timeout = TIMEOUT;
    options.attempts = ATTEMPTS;
    // Every turn asks the DNS server: the watcher keeps the answer for its TTL itself, and a
    // cache here would answer a turn that comes early (the interval) with what it holds.
    options.cache_size = 0;
    builder.build().map_err(|e| e.to_string())
}

/// The longest one lookup may take, SRV targets included, whatever the answer holds.
const DEADLINE: Duration = Duration::from_secs(10);

/// Asks `lookup` once. `Ok` with no servers: the name has no address (or no record).
pub async fn lookup(resolver: &TokioResolver, lookup: &Lookup) -> Result<Answer, String> {
    match tokio::time::timeout(DEADLINE, ask(resolver, lookup)).await {
        Ok(answer) => answer,
        Err(_) => Err(format!("no whole answer within {DEADLINE:?}")),
    }
}

async fn ask(resolver: &TokioResolver, lookup: &Lookup) -> Result<Answer, String> {
    let now = Instant::now();
    let mut servers = Vec::new();
    let ttl = match lookup {
        Lookup::Dns { host, port } => {
            let (ips, valid_until) = addresses(resolver, host).await?;
            for ip in ips {
                servers.push(server(SocketAddr::new(ip, *port), host, 1, false));
            }
            valid_until.saturating_duration_since(now)
        }
        Lookup::Srv { name } => {
            let records = match resolver.srv_lookup(name.as_str()).await {
                Ok(records) => records,
                Err(e) if e.is_no_records_found() => return Ok(Answer::empty()),
                Err(e) => return Err(e.to_string()),
            };
            let mut ttl = records.valid_until().saturating_duration_since(now);
            // "." as target: the service is decidedly not available at this name; port 0 is
            // no server's.
            let srvs: Vec<_> = records
                .answers()
                .iter()
                .filter_map(|record| match &record.data {
                    RData::SRV(srv) if !srv.target.is_root() && srv.port != 0 => Some(srv.clone()),
                    _ => None,
                })
                .take(MAX_FOUND)
                .collect();
            // RFC 2782: the lowest priority is tried first; the others only when it cannot be
            // reached, which is what a backup server is.
            let first = srvs.iter().map(|srv| srv.priority).min();
            // Over TLS a server is checked against the service's own domain, not against the
            // target an unsigned answer names (RFC 6125 6.2.1): `_https._tcp.pay.internal`
            // is `pay.internal`'s service, whoever the record points at.
            let domain = service_domain(name);
            // The targets' addresses, asked all at once.
            let asks: Vec<_> = srvs
                .iter()
                .map(|srv| {
                    let resolver = resolver.clone();
                    let target = srv.target.to_ascii();
                    tokio::spawn(
                        async move { addresses(&resolver, target.trim_end_matches('.')).await },
                    )
                })
                .collect();
            for (srv, asked) in srvs.iter().zip(asks) {
                let (ips, valid_until) = asked.await.map_err(|e| e.to_string())??;
                ttl = ttl.min(valid_until.saturating_duration_since(now));
                // Weight 0 means "very rarely" in SRV (RFC 2782), never "not at all".
                let weight = u32::from(srv.weight.max(1));
                let backup = Some(srv.priority) != first;
                for ip in ips {
                    servers.push(server(
                        SocketAddr::new(ip, srv.port),
                        domain,
                        weight,
                        backup,
                    ));
                }
            }
            ttl
        }
    };
    // No server at an address nobody can be connected to as one.
    servers.retain(|s| usable(s.addr.ip()));
    servers.sort_by_key(|s| s.addr);
    // An address named twice (two records, two targets) is one server: the first record.
    servers.dedup_by_key(|s| s.addr);
    servers.truncate(MAX_FOUND);
    Ok(Answer { servers, ttl })
}

/// `_https._tcp.pay.internal` -> `pay.internal` (the name itself when nothing is left).
fn service_domain(name: &str) -> &str {
    let mut rest = name;
    while let Some((label, after)) = rest.split_once('.') {
        if !label.starts_with('_') {
            break;
        }
        rest = after;
    }
    if rest.is_empty() || rest.starts_with('_') {
        name
    } else {
        rest
    }
}

fn usable(ip: IpAddr) -> bool {
    let broadcast = matches!(ip, IpAddr::V4(v4) if v4.is_broadcast());
    !(ip.is_unspecified() || ip.is_multicast() || broadcast)
}

/// The A and the AAAA addresses of `host`, asked apart, and until when they hold. A family
/// with no record adds none; any other failure of either fails the whole (hickory's
/// both-families lookup answers with the family that worked, which would silently drop the
/// other family's servers for as long as its DNS server fails).
async fn addresses(resolver: &TokioResolver, host: &str) -> Result<(Vec<IpAddr>, Instant), String> {
    let (v4, v6) = tokio::join!(resolver.ipv4_lookup(host), resolver.ipv6_lookup(host));
    let mut ips = Vec::new();
    let mut valid_until: Option<Instant> = None;
    for family in [v4, v6] {
        match family {
            Ok(found) => {
                ips.extend(
                    found
                        .answers()
                        .iter()
                        .filter_map(|record| match &record.data {
                            RData::A(a) => Some(IpAddr::V4(a.0)),
                            RData::AAAA(aaaa) => Some(IpAddr::V6(aaaa.0)),
                            _ => None,
                        }),
                );
                let until = found.valid_until();
                valid_until = Some(valid_until.map_or(until, |v| v.min(until)));
            }
            Err(e) if e.is_no_records_found() => {}
            Err(e) => return Err(e.to_string()),
        }
    }
    Ok((ips, valid_until.unwrap_or_else(Instant::now)))
}

fn server(addr: SocketAddr, host: &str, weight: u32, backup: bool) -> ServerConfig {
    ServerConfig {
        addr,
        // The name TLS asks the server for and checks its certificate against, as for a
        // server listed by name.
        host: Some(host.to_string()),
        weight,
        max_conns: 0,
        backup,
        discovered: true,
    }
}

impl Answer {
    fn empty() -> Answer {
        Answer {
            servers: Vec::new(),
            ttl: Duration::ZERO,
        }
    }
}

/// When to ask again after an answer kept for `ttl`: the pool's interval, sooner when the TTL
/// is shorter, never under a second.
pub fn next_turn(discover: &Discover, ttl: Duration) -> Duration {
    discover.interval.min(ttl).max(MIN_INTERVAL)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn discover(interval: u64) -> Discover {
        Discover {
            lookup: Lookup::Srv {
                name: "_http._tcp.api.test".into(),
            },
            interval: Duration::from_secs(interval),
            resolvers: Vec::new(),
        }
    }

    #[test]
    fn an_srv_name_is_its_service_domains() {
        assert_eq!(service_domain("_https._tcp.pay.internal"), "pay.internal");
        assert_eq!(
            service_domain("_http._tcp.api.service.consul"),
            "api.service.consul"
        );
        assert_eq!(service_domain("api.internal"), "api.internal");
        assert_eq!(service_domain("_http._tcp"), "_http._tcp");
    }

    #[test]
    fn no_server_at_an_address_nobody_can_be_connected_to() {
        assert!(usable("10.0.0.1".parse().unwrap()) && usable("::1".parse().unwrap()));
        for ip in ["0.0.0.0", "::", "224.0.0.1", "255.255.255.255", "ff02::1"] {
            assert!(!usable(ip.parse().unwrap()), "{ip}");
        }
    }

    #[test]
    fn the_next_turn_is_the_interval_or_the_ttl_when_shorter_and_at_least_a_second() {
        let d = discover(5);
        assert_eq!(
            next_turn(&d, Duration::from_secs(300)),
            Duration::from_secs(5)
        );
        assert_eq!(
            next_turn(&d, Duration::from_secs(2)),
            Duration::from_secs(2)
        );
        assert_eq!(next_turn(&d, Duration::ZERO), Duration::from_secs(1));
    }
}
