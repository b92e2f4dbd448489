//! One configuration of the running switch: its virtual services (rules) and pools. A reload
//! builds the next generation and swaps it in (`Shared::generation`, an `ArcSwap`); a session
//! takes the current one at each request's start, so requests in flight finish under the rules
//! they started with and a kept-alive client moves to the new rules at its next request.
//! Servers that stay are shared between generations (state/server.rs `Backend`); so are a
//! service's counters.

use crate::config::{ServiceConfig, ServiceMode};
use crate::edge::tls;
use crate::policy::own_answers::OwnAnswers;
use crate::policy::rate_limit::Limiter;
use crate::policy::source_conns::SourceConns;
use crate::rules::RuleSet;
use crate::state::pool::Pool;
use crate::state::stats::ServiceStats;
use arc_swap::ArcSwap;
use std::net::SocketAddr;
use std::sync::{Arc, OnceLock};

/// A virtual service at run time.
#[derive(Debug)]
pub struct Service {
    pub name: String,
    /// As configured, and as bound (they differ with port 0).
    pub listen: SocketAddr,
    pub bound: Arc<OnceLock<SocketAddr>>,
    /// Where its listen address is written (`FILE:LINE:COL`).
    pub listen_at: String,
    pub defer_accept: bool,
    /// Client connections open at once per client address; 0: no cap.
    pub max_conns_per_source: u32,
    /// Connections start with a PROXY protocol header (edge/proxy_protocol.rs).
    pub proxy_protocol: bool,
    /// CONNECT requests may be tunnelled to the routed pool (`connect = true`).
    pub connect: bool,
    /// Clients may speak HTTP/2 (`http2`): ALPN `h2`, or the preface on a plain connection.
    pub http2: bool,
    pub mode: ServiceMode,
    /// TLS termination with this generation's certificates (edge/tls/).
    pub tls: Option<Arc<rustls::ServerConfig>>,
    pub rules: RuleSet,
    /// `[virtual.NAME.compress]` (switch/compress/).
    pub compress: Option<crate::compress::CompressConfig>,
    /// What it does to the switch's own answers: `response_headers`, `error_pages`.
    pub own_answers: OwnAnswers,
    /// Its counters, kept across reloads while the service keeps its name.
    pub stats: Arc<ServiceStats>,
    /// Its client connections by address (`max_conns_per_source`), kept as its counters are.
    pub source_conns: Arc<SourceConns>,
}

impl Service {
    /// The running service of `config`, with the counters and the bound address of the one it
    /// follows (or new ones), and TLS resuming the process's sessions.
    pub fn new(
        config: ServiceConfig,
        kept: Kept,
        bound: Arc<OnceLock<SocketAddr>>,
        resumption: &tls::Resumption,
    ) -> Result<Service, String> {
        let tls = if config.certificates.is_empty() {
            None
        } else {
            let made = tls::server_config(&config.certificates, resumption, config.http2)
                .map_err(|e| format!("virtual service `{}`: TLS: {e}", config.name))?;
            Some(made)
        };
        Ok(Service {
            name: config.name,
            listen: config.listen,
            bound,
            listen_at: config.listen_at,
            defer_accept: config.defer_accept,
            max_conns_per_source: config.max_conns_per_source,
            proxy_protocol: config.proxy_protocol,
            connect: config.connect,
            http2: config.http2,
            mode: config.mode,
            tls,
            rules: config.rules,
            compress: config.compress,
            own_answers: config.own_answers,
            stats: kept.stats,
            source_conns: kept.source_conns,
        })
    }
}

/// What a service keeps from the one of its name in the generation before.
#[derive(Default)]
pub struct Kept {
    pub stats: Arc<ServiceStats>,
    pub source_conns: Arc<SourceConns>,
}

#[derive(Debug)]
pub struct Generation {
    /// 1 for the configuration the switch started with, one more per reload.
    pub number: u64,
    /// Shared with the next generation when only pools change (a discovery's answer:
    /// discovery/).
    pub services: Box<[Arc<Service>]>,
    /// Shared with the next generation when the pool's configuration did not change.
    pub pools: Box<[Arc<Pool>]>,
    /// `[limit.NAME]` in name order (rules name them by index); a limit whose buckets stay
    /// the same is shared with the next generation, its counts kept.
    pub limits: Box<[Arc<Limiter>]>,
}

impl Generation {
    /// Generation 0, before the start: no service, no pool. The start plans generation 1 from
    /// it as a reload plans the next (reload/plan.rs).
    pub fn empty() -> Generation {
        Generation {
            number: 0,
            services: Box::default(),
            pools: Box::default(),
            limits: Box::default(),
        }
    }

    /// The service named `name`, and its index.
    pub fn service(&self, name: &str) -> Option<(usize, &Service)> {
        self.services
            .iter()
            .enumerate()
            .find(|(_, s)| s.name == name)
            .map(|(index, service)| (index, &**service))
    }

    /// The service whose listener is bound to `bound` (port 0 in the file: the port the kernel
    /// chose).
    pub fn service_at(&self, bound: SocketAddr) -> Option<usize> {
        self.services
            .iter()
            .position(|s| s.bound.get() == Some(&bound))
    }

    pub fn limit(&self, name: &str) -> Option<&Arc<Limiter>> {
        self.limits.iter().find(|l| l.spec().name == name)
    }

    pub fn pool(&self, name: &str) -> Option<&Arc<Pool>> {
        self.pools.iter().find(|p| p.name == name)
    }

    /// `pool` is one of this generation's.
    pub fn has_pool(&self, pool: &Pool) -> bool {
        self.pools
            .iter()
            .any(|p| std::ptr::eq(Arc::as_ptr(p), pool))
    }
}

/// Where a connection's service is in the configuration now in force.
pub enum Followed {
    /// No reload since the connection last looked: the same generation, the same service.
    Unchanged,
    /// A reload kept the service: the generation now in force and the service's index there.
    Moved {
        generation: Arc<Generation>,
        service: usize,
    },
    /// The configuration now in force has no service of that name.
    Gone,
}

/// Finds service `service` of `generation` in `current` (`Shared::generation`) after a reload,
/// by its name: a reload may renumber the services, and a service is the same one as long as
/// it keeps its name (its counters follow it). One atomic load when nothing changed, as every
/// request and every HTTP/2 stream asks.
pub fn follow_reloads(
    current: &ArcSwap<Generation>,
    generation: &Arc<Generation>,
    service: usize,
) -> Followed {
    let now = current.load();
    if Arc::ptr_eq(&now, generation) {
        return Followed::Unchanged;
    }
    match now.service(&generation.services[service].name) {
        Some((service, _)) => Followed::Moved {
            service,
            generation: arc_swap::Guard::into_inner(now),
        },
        None => Followed::Gone,
    }
}
