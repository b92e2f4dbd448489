//! The first step of a reload, and of the start (from [`Generation::empty`]): what a new
//! configuration makes of the running generation, built beside it without touching it (no live
//! server, no listener, no generation changes here). Sozu's diff: the plan says what the commit
//! will add, keep and remove.

use crate::config::{PoolConfig, ServiceConfig};
use crate::edge::tls::ResumptionByService;
use crate::policy::rate_limit::{LimitSpec, Limiter};
use crate::state::generation::{Generation, Kept, Service};
use crate::state::pool::Pool;
use std::net::SocketAddr;
use std::sync::Arc;
use tcpvs_modules::Clock;

/// What building a generation needs for the life of the switch: the clock of the modules, the
/// TLS resumption state of each service (kept across generations by the service's name:
/// edge/tls/server_config.rs), and the number of workers (each server keeps idle connections
/// per worker).
pub struct Builder {
    clock: Arc<dyn Clock>,
    resumption: ResumptionByService,
    workers: usize,
}

/// The next generation, built and not running yet, and what taking it on changes.
#[derive(Debug)]
pub struct Plan {
    pub generation: Generation,
    /// Services (indexes into `generation.services`) whose address nobody listens on yet:
    /// bound on every worker before the commit.
    pub listen: Vec<usize>,
    /// Addresses listened on that no service keeps: they stop accepting at the commit.
    pub unlisten: Vec<SocketAddr>,
    /// Pools built anew (not kept whole): shown to their modules at the commit, where their
    /// health checks start.
    pub fresh: Vec<Arc<Pool>>,
    /// Kept servers whose line in the rule file changed: the new pool and the server's index.
    pub lines_changed: Vec<(Arc<Pool>, usize)>,
    /// Servers new to a pool that was running (added to the file, or found by DNS): the new
    /// pool and the server's index. They ramp in over the pool's `slow_start`.
    pub joined: Vec<(Arc<Pool>, usize)>,
    /// Limits built anew: their shared stores (Redis) start at the commit.
    pub fresh_limits: Vec<Arc<Limiter>>,
}

impl Builder {
    /// For a switch of `workers` workers.
    pub fn new(workers: usize) -> Builder {
        Builder {
            clock: Arc::new(tcpvs_modules::MonotonicClock::new()),
            resumption: ResumptionByService::default(),
            workers,
        }
    }

    /// Plans the generation of `services` and `pools` after `current`. An error (TLS
    /// certificates that cannot be used, a module that cannot be built) refuses it.
    pub fn plan(
        &self,
        current: &Generation,
        services: Vec<ServiceConfig>,
        pools: &[PoolConfig],
        limits: Vec<LimitSpec>,
    ) -> Result<Plan, String> {
        let services = self.services(current, services)?;
        let pools = self.pools(current, pools)?;
        let (limits, fresh_limits) = Self::limits(current, limits);
        let listen = (0..services.len())
            .filter(|&index| services[index].bound.get().is_none())
            .collect();
        let unlisten = current
            .services
            .iter()
            .filter_map(|old| old.bound.get().copied())
            .filter(|addr| !services.iter().any(|s| s.bound.get() == Some(addr)))
            .collect();
        let generation = Generation {
            number: current.number + 1,
            services,
            pools,
            limits,
        };
        Ok(Self::finish(
            current,
            generation,
            listen,
            unlisten,
            fresh_limits,
        ))
    }

    /// Plans the generation after `current` in which only the pools' configurations change:
    /// a discovery's answer (discovery/), which changes a pool's servers and nothing else. The
    /// services and limits are the running ones, shared.
    pub fn plan_found(&self, current: &Generation, pools: &[PoolConfig]) -> Result<Plan, String> {
        let generation = Generation {
            number: current.number + 1,
            services: current.services.clone(),
            pools: self.pools(current, pools)?,
            limits: current.limits.clone(),
        };
        Ok(Self::finish(
            current,
            generation,
            Vec::new(),
            Vec::new(),
            Vec::new(),
        ))
    }

    /// The plan of `generation` after `current`: which pools are built anew and which kept
    /// servers take a new line.
    fn finish(
        current: &Generation,
        generation: Generation,
        listen: Vec<usize>,
        unlisten: Vec<SocketAddr>,
        fresh_limits: Vec<Arc<Limiter>>,
    ) -> Plan {
        let fresh: Vec<Arc<Pool>> = generation
            .pools
            .iter()
            .filter(|pool| !current.pools.iter().any(|old| Arc::ptr_eq(old, pool)))
            .cloned()
            .collect();
        let lines_changed = fresh
            .iter()
            .flat_map(|pool| pool.lines_changed().map(|index| (Arc::clone(pool), index)))
            .collect();
        let joined = fresh
            .iter()
            .filter_map(|pool| Some((pool, current.pool(&pool.name)?)))
            .flat_map(|(pool, previous)| {
                let new = |(_, b): &(usize, &Arc<_>)| {
                    !previous.backends.iter().any(|old| Arc::ptr_eq(old, b))
                };
                let indexes = pool.backends.iter().enumerate().filter(new);
                indexes.map(|(index, _)| (Arc::clone(pool), index))
            })
            .collect();
        Plan {
            generation,
            listen,
            unlisten,
            fresh,
            lines_changed,
            joined,
            fresh_limits,
        }
    }

    /// A limit whose buckets mean the same (name, key, rate, burst, bound, store) keeps them,
    /// its counts and its store's task, with the new `status` and `dry_run`; any other is
    /// built anew (and listed as fresh), starting with full buckets.
    fn limits(
        current: &Generation,
        specs: Vec<LimitSpec>,
    ) -> (Box<[Arc<Limiter>]>, Vec<Arc<Limiter>>) {
        let mut fresh = Vec::new();
        let limits = specs
            .into_iter()
            .map(|spec| {
                let kept = current
                    .limit(&spec.name)
                    .and_then(|old| old.carry_over(spec.clone()));
                if let Some(kept) = kept {
                    return Arc::new(kept);
                }
                let limiter = Arc::new(Limiter::new(spec));
                fresh.push(Arc::clone(&limiter));
                limiter
            })
            .collect();
        (limits, fresh)
    }

    /// Services keep their counters by name, and the listener (its bound address) while their
    /// listen address stays.
    fn services(
        &self,
        current: &Generation,
        services: Vec<ServiceConfig>,
    ) -> Result<Box<[Arc<Service>]>, String> {
        services
            .into_iter()
            .map(|s| {
                let previous = current.service(&s.name).map(|(_, service)| service);
                // An address with port 0 (the kernel picks) is the same one only for the
                // service of the same name.
                let kept_listen = current
                    .services
                    .iter()
                    .find(|o| o.listen == s.listen && (s.listen.port() != 0 || o.name == s.name));
                let kept = previous
                    .map(|p| Kept {
                        stats: Arc::clone(&p.stats),
                        source_conns: Arc::clone(&p.source_conns),
                    })
                    .unwrap_or_default();
                let bound = kept_listen
                    .map(|o| Arc::clone(&o.bound))
                    .unwrap_or_default();
                let resumes = self.resumption.of(&s.name);
                Service::new(s, kept, bound, &resumes).map(Arc::new)
            })
            .collect()
    }

    /// The same configuration keeps the pool whole; another builds one over the kept servers.
    fn pools(
        &self,
        current: &Generation,
        configs: &[PoolConfig],
    ) -> Result<Box<[Arc<Pool>]>, String> {
        configs
            .iter()
            .map(|config| match current.pool(&config.name) {
                Some(pool) if pool.config == *config => Ok(Arc::clone(pool)),
                previous => {
                    let clock = Arc::clone(&self.clock);
                    let previous = previous.map(|p| &**p);
                    Pool::with_servers_of(config, clock, self.workers, previous)
                        .map(Arc::new)
                        .map_err(|e| format!("pool `{}`: {e}", config.name))
                }
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;

    fn config(servers: &str) -> Config {
        let text = format!(
            "[virtual.v]\nlisten = \"127.0.0.1:0\"\ndefault_pool = \"p\"\n\
             [pool.p]\nslow_start = \"1h\"\nservers = [{servers}]\n"
        );
        Config::parse("t.toml", &text).unwrap()
    }

    #[test]
    fn a_server_new_to_a_running_pool_joins_and_one_kept_does_not() {
        let builder = Builder::new(1);
        let first = config("{ addr = \"127.0.0.1:9001\" }");
        let started = builder
            .plan(
                &Generation::empty(),
                first.services,
                &first.pools,
                first.limits,
            )
            .unwrap();
        assert!(started.joined.is_empty(), "nothing joins at the start");
        let current = started.generation;
        let next = config("{ addr = \"127.0.0.1:9001\" }, { addr = \"127.0.0.1:9002\" }");
        let found = builder.plan_found(&current, &next.pools).unwrap();
        let joined: Vec<_> = found
            .joined
            .iter()
            .map(|(pool, index)| pool.backends[*index].addr.to_string())
            .collect();
        assert_eq!(joined, ["127.0.0.1:9002"]);
        assert!(
            Arc::ptr_eq(&found.generation.services[0], &current.services[0]),
            "an answer shares the services"
        );
    }
}
