//! Rates over the last 10 seconds (`ipvsadm --rate`): the admin endpoint samples the counters
//! once a second and keeps the last eleven samples; a rate is the difference between now and
//! the oldest sample, over the time between them. Nothing of this runs on the data path.

use crate::shared::Shared;
use crate::state::stats;
use serde::{Deserialize, Serialize};
use std::collections::{HashMap, VecDeque};
use std::net::SocketAddr;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// The window rates are computed over.
pub const WINDOW: Duration = Duration::from_secs(10);

/// Counters of one moment, keyed by name (not by index, so that a reload that reorders pools
/// keeps the rates of what stayed).
#[derive(Clone, Debug, Default)]
pub struct Counters {
    pub services: HashMap<String, ServiceCounts>,
    pub servers: HashMap<(String, SocketAddr), ServerCounts>,
}

#[derive(Clone, Copy, Debug, Default)]
pub struct ServiceCounts {
    pub requests: u64,
    /// Connections accepted.
    pub connections: u64,
}

#[derive(Clone, Copy, Debug, Default)]
pub struct ServerCounts {
    pub requests: u64,
    pub bytes_out: u64,
}

impl Counters {
    pub fn read(shared: &Shared) -> Counters {
        let generation = shared.generation.load();
        let services = generation
            .services
            .iter()
            .map(|s| {
                let counts = ServiceCounts {
                    requests: stats::read(&s.stats.requests),
                    connections: stats::read(&s.stats.accepted),
                };
                (s.name.clone(), counts)
            })
            .collect();
        let mut servers = HashMap::new();
        for pool in generation.pools.iter() {
            for backend in pool.backends.iter() {
                let counts = ServerCounts {
                    requests: stats::read(&backend.stats.requests),
                    bytes_out: stats::read(&backend.stats.bytes_out),
                };
                servers.insert((pool.name.clone(), backend.addr), counts);
            }
        }
        Counters { services, servers }
    }
}

/// Per-second rates over the window.
#[derive(Clone, Debug, Default)]
pub struct Rates {
    pub services: HashMap<String, ServiceRate>,
    pub servers: HashMap<(String, SocketAddr), ServerRate>,
}

/// A service's rates, as `/stats` shows them.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct ServiceRate {
    pub requests: f64,
    pub connections: f64,
}

/// A server's rates, as `/stats` shows them.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct ServerRate {
    pub requests: f64,
    pub bytes_out: f64,
}

/// The last samples, oldest first.
#[derive(Debug, Default)]
pub struct Sampler {
    samples: Mutex<VecDeque<(Instant, Counters)>>,
}

impl Sampler {
    /// Records the counters of `now`, dropping samples older than the window needs.
    pub fn record(&self, now: Instant, counters: Counters) {
        let mut samples = self.lock();
        while samples.front().is_some_and(|(at, _)| {
            now.saturating_duration_since(*at) > WINDOW + Duration::from_millis(500)
        }) {
            samples.pop_front();
        }
        samples.push_back((now, counters));
    }

    /// Rates between the oldest sample of the window and `current` (read at `now`). Empty
    /// before the first sample, or when the oldest is less than 100 ms old.
    pub fn rates(&self, now: Instant, current: &Counters) -> Rates {
        let samples = self.lock();
        let Some((at, old)) = samples.front() else {
            return Rates::default();
        };
        let seconds = now.saturating_duration_since(*at).as_secs_f64();
        if seconds < 0.1 {
            return Rates::default();
        }
        let per_second = |new: u64, old: u64| new.saturating_sub(old) as f64 / seconds;
        let services = current
            .services
            .iter()
            .filter_map(|(name, now)| {
                let then = old.services.get(name)?;
                let rate = ServiceRate {
                    requests: per_second(now.requests, then.requests),
                    connections: per_second(now.connections, then.connections),
                };
                Some((name.clone(), rate))
            })
            .collect();
        let servers = current
            .servers
            .iter()
            .filter_map(|(key, now)| {
                let then = old.servers.get(key)?;
                let rate = ServerRate {
                    requests: per_second(now.requests, then.requests),
                    bytes_out: per_second(now.bytes_out, then.bytes_out),
                };
                Some((key.clone(), rate))
            })
            .collect();
        Rates { services, servers }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, VecDeque<(Instant, Counters)>> {
        self.samples
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn counters(requests: u64) -> Counters {
        let mut c = Counters::default();
        let service = ServiceCounts {
            requests,
            connections: requests / 10,
        };
        c.services.insert("web".into(), service);
        let server = ServerCounts {
            requests,
            bytes_out: requests * 100,
        };
        let key = ("p".to_string(), "127.0.0.1:1".parse().unwrap());
        c.servers.insert(key, server);
        c
    }

    #[test]
    fn a_rate_spans_the_oldest_sample_in_the_window() {
        let sampler = Sampler::default();
        let start = Instant::now();
        for second in 0..=15u64 {
            sampler.record(start + Duration::from_secs(second), counters(second * 50));
        }
        // Samples older than 10.5 s are gone: the oldest left is second 5.
        let now = start + Duration::from_secs(15);
        let rates = sampler.rates(now, &counters(15 * 50));
        assert_eq!(rates.services["web"].requests, 50.0);
        assert_eq!(rates.services["web"].connections, 5.0);
        let server = &rates.servers[&("p".into(), "127.0.0.1:1".parse().unwrap())];
        assert_eq!((server.requests, server.bytes_out), (50.0, 5000.0));
    }

    #[test]
    fn no_rates_without_a_sample_old_enough() {
        let sampler = Sampler::default();
        let now = Instant::now();
        assert!(sampler.rates(now, &counters(5)).services.is_empty());
        sampler.record(now, counters(0));
        assert!(sampler.rates(now, &counters(5)).services.is_empty());
    }
}
