//! One lookup of a pool's name, with hickory-resolver (a well-kept resolver: UDP with TCP on
//! truncation, several servers, `/etc/resolv.conf` and `/etc/hosts`), and its answer as the
//! servers it makes.

use crate::config::discover::{Discover, Lookup, MIN_INTERVAL};
use crate::config::ServerConfig;
use hickory_resolver::config::{ConnectionConfig, NameServerConfig, ResolverConfig};
use hickory_resolver::net::runtime::TokioRuntimeProvider;
use hickory_resolver::proto::rr::RData;
use hickory_resolver::TokioResolver;
use std::net::SocketAddr;
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
    // Both families: every address is a server.
    options.ip_strategy = hickory_resolver::config::LookupIpStrategy::Ipv4AndIpv6;
    builder.build().map_err(|e| e.to_string())
}

/// Asks `lookup` once. `Ok` with no servers: the name has no address (or no record).
pub async fn lookup(resolver: &TokioResolver, lookup: &Lookup) -> Result<Answer, String> {
    let now = Instant::now();
    let mut servers = Vec::new();
    let ttl = match lookup {
        Lookup::Dns { host, port } => {
            let Some(found) = addresses(resolver, host).await? else {
                return Ok(Answer::empty());
            };
            for ip in found.iter() {
                servers.push(server(SocketAddr::new(ip, *port), host, 1, false));
            }
            found.valid_until().saturating_duration_since(now)
        }
        Lookup::Srv { name } => {
            let records = match resolver.srv_lookup(name.as_str()).await {
                Ok(records) => records,
                Err(e) if e.is_no_records_found() => return Ok(Answer::empty()),
                Err(e) => return Err(e.to_string()),
            };
            let mut ttl = records.valid_until().saturating_duration_since(now);
            let srvs: Vec<_> = records
                .answers()
                .iter()
                .filter_map(|record| match &record.data {
                    RData::SRV(srv) => Some(srv.clone()),
                    _ => None,
                })
                .collect();
            // RFC 2782: the lowest priority is tried first; the others only when it cannot be
            // reached, which is what a backup server is.
            let first = srvs.iter().map(|srv| srv.priority).min();
            for srv in &srvs {
                // "." as target: the service is decidedly not available at this name.
                if srv.target.is_root() {
                    continue;
                }
                let target = srv.target.to_ascii();
                let target = target.trim_end_matches('.');
                let Some(found) = addresses(resolver, target).await? else {
                    continue;
                };
                ttl = ttl.min(found.valid_until().saturating_duration_since(now));
                // Weight 0 means "very rarely" in SRV (RFC 2782), never "not at all".
                let weight = u32::from(srv.weight.max(1));
                let backup = Some(srv.priority) != first;
                for ip in found.iter() {
                    servers.push(server(
                        SocketAddr::new(ip, srv.port),
                        target,
                        weight,
                        backup,
                    ));
                }
            }
            ttl
        }
    };
    servers.sort_by_key(|s| s.addr);
    // An address named twice (two records, two targets) is one server: the first record.
    servers.dedup_by_key(|s| s.addr);
    servers.truncate(MAX_FOUND);
    Ok(Answer { servers, ttl })
}

/// The addresses of `host`; `None` when it has none.
async fn addresses(
    resolver: &TokioResolver,
    host: &str,
) -> Result<Option<hickory_resolver::lookup_ip::LookupIp>, String> {
    match resolver.lookup_ip(host).await {
        Ok(found) if found.iter().next().is_some() => Ok(Some(found)),
        Ok(_) => Ok(None),
        Err(e) if e.is_no_records_found() => Ok(None),
        Err(e) => Err(e.to_string()),
    }
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
