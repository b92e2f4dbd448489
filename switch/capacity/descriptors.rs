//! The descriptor budget: how many open files the switch needs for its `max_clients`, the soft
//! limit raised to that at start, and the client limit lowered to what the hard limit allows.
//!
//! HAProxy and nginx do the same (HAProxy sizes `ulimit-n` from `maxconn`; nginx has
//! `worker_rlimit_nofile`): a shell or a systemd unit starts a process with a soft limit of
//! 1024, and a switch that keeps it serves a few hundred clients and then fails accepts and
//! server connections alike, in the middle of requests.
//!
//! A client costs two descriptors while its request is in flight: its own connection and the
//! one to the server. Beside them the switch holds a fixed part: the listeners of every worker,
//! each worker's event loop and spare splice pipes, the admin endpoint and its connections, a
//! check connection per server, and the standard streams and log files. Idle keep-alive
//! connections to servers are not budgeted (there may be `server_idle_max` per server and
//! worker, far more than a small limit allows); when descriptors run out they are closed first
//! (`exhaustion.rs`).

use rustix::process::{getrlimit, setrlimit, Resource, Rlimit};

/// Descriptors a client in flight needs: its connection and the server's.
pub const PER_CLIENT: u64 = 2;
/// The part of the fixed reserve that does not depend on the configuration: standard streams,
/// log files, the signal and reload machinery, the upgrade socket, what libraries open.
const BASE: u64 = 64;
/// Per worker: its event loop (epoll and a wake-up descriptor) and the spare splice pipes it
/// keeps (`relay/splice.rs`, two descriptors each).
const PER_WORKER: u64 = 4 + 2 * crate::relay::splice::SPARE_PIPES_PER_THREAD as u64;
/// The admin endpoint: its listener and the connections it serves at once (`admin/mod.rs`).
const ADMIN: u64 = 1 + crate::admin::MAX_CONNECTIONS as u64;

/// What the configuration holds open besides its clients.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Demand {
    /// `max_clients` as the file says (or its default).
    pub max_clients: usize,
    /// Whether the file sets `max_clients`: a default is fitted to the limit quietly (as
    /// HAProxy computes `maxconn` from the limit when none is given); a value the admin chose
    /// and that cannot be honoured is a warning.
    pub max_clients_given: bool,
    pub workers: usize,
    pub listeners: usize,
    /// Servers of every pool: each may have a check connection open.
    pub servers: usize,
    pub admin: bool,
}

impl Demand {
    /// Descriptors held whatever the number of clients.
    pub fn reserve(&self) -> u64 {
        let workers = self.workers.max(1) as u64;
        BASE + workers * (PER_WORKER + self.listeners as u64)
            + self.servers as u64
            + if self.admin { ADMIN } else { 0 }
    }

    /// Descriptors needed for `max_clients` clients in flight at once.
    pub fn need(&self) -> u64 {
        self.reserve() + PER_CLIENT * self.max_clients as u64
    }
}

/// The open-file limit, as `getrlimit` reports it (`None`: unlimited).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OpenFileLimit {
    pub soft: Option<u64>,
    pub hard: Option<u64>,
}

/// What to do about the limit: the soft limit to ask for and the client limit that fits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Budget {
    pub need: u64,
    /// The soft limit to set, when it must grow (never lowered: other code may count on it).
    pub raise_to: Option<u64>,
    /// The limit the switch will run under.
    pub limit: Option<u64>,
    /// `max_clients` in effect: the configured one, or what `limit` allows.
    pub max_clients: usize,
    pub fit: Fit,
}

/// How the configured `max_clients` compares with the descriptors that can be had.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fit {
    /// Enough descriptors (possibly after raising the soft limit).
    Fits,
    /// The default `max_clients` was fitted to the hard limit.
    DefaultLowered,
    /// The configured `max_clients` cannot be honoured: lowered, with a warning.
    Lowered,
}

/// Plans the budget: pure, so the arithmetic is tested without touching the process.
pub fn plan(demand: &Demand, limit: OpenFileLimit) -> Budget {
    let need = demand.need();
    let fits = |l: Option<u64>| l.is_none_or(|l| l >= need);
    if fits(limit.soft) {
        return Budget {
            need,
            raise_to: None,
            limit: limit.soft,
            max_clients: demand.max_clients,
            fit: Fit::Fits,
        };
    }
    // The soft limit is short: raise it as far as needed, at most to the hard limit.
    let target = match limit.hard {
        Some(hard) => need.min(hard),
        None => need,
    };
    let raise_to = limit.soft.filter(|&soft| soft < target).map(|_| target);
    let limit_after = raise_to.or(limit.soft);
    if fits(limit_after) {
        return Budget {
            need,
            raise_to,
            limit: limit_after,
            max_clients: demand.max_clients,
            fit: Fit::Fits,
        };
    }
    let available = limit_after.unwrap_or(u64::MAX);
    let clients = available.saturating_sub(demand.reserve()) / PER_CLIENT;
    let max_clients = usize::try_from(clients)
        .unwrap_or(usize::MAX)
        .clamp(1, demand.max_clients);
    Budget {
        need,
        raise_to,
        limit: limit_after,
        max_clients,
        fit: if demand.max_clients_given {
            Fit::Lowered
        } else {
            Fit::DefaultLowered
        },
    }
}

/// Reads the limit, raises the soft one as planned, and says what came of it once: a warning
/// when a configured `max_clients` had to be lowered, an info line otherwise. Returns the
/// `max_clients` to enforce.
pub fn apply(demand: &Demand) -> usize {
    let current = getrlimit(Resource::Nofile);
    let limit = OpenFileLimit {
        soft: current.current,
        hard: current.maximum,
    };
    let mut budget = plan(demand, limit);
    if let Some(raise_to) = budget.raise_to {
        let raised = Rlimit {
            current: Some(raise_to),
            maximum: current.maximum,
        };
        if let Err(e) = setrlimit(Resource::Nofile, raised) {
            // Not expected (the hard limit bounds the request), but then the old soft limit
            // is what the switch has: plan again without raising.
            tracing::warn!(
                "could not raise the open-file limit from {} to {raise_to}: {e}",
                show(limit.soft)
            );
            budget = plan(
                demand,
                OpenFileLimit {
                    soft: limit.soft,
                    hard: limit.soft,
                },
            );
        } else {
            tracing::info!(
                "open-file limit raised from {} to {raise_to} (max_clients {} needs {})",
                show(limit.soft),
                demand.max_clients,
                budget.need
            );
        }
    }
    let limit_now = show(budget.limit);
    match budget.fit {
        Fit::Fits => {}
        Fit::DefaultLowered => tracing::info!(
            "max_clients {} (the default {} needs {} open files; the limit is {limit_now})",
            budget.max_clients,
            demand.max_clients,
            budget.need
        ),
        Fit::Lowered => tracing::warn!(
            "max_clients = {} needs {} open files but the limit is {limit_now} (hard limit {}): \
             max_clients lowered to {}; raise the hard limit (systemd LimitNOFILE=, ulimit -Hn) \
             to serve more",
            demand.max_clients,
            budget.need,
            show(limit.hard),
            budget.max_clients
        ),
    }
    budget.max_clients
}

fn show(limit: Option<u64>) -> String {
    limit.map_or_else(|| "unlimited".to_string(), |l| l.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn demand(max_clients: usize, given: bool) -> Demand {
        Demand {
            max_clients,
            max_clients_given: given,
            workers: 2,
            listeners: 1,
            servers: 4,
            admin: false,
        }
    }

    fn limit(soft: u64, hard: u64) -> OpenFileLimit {
        OpenFileLimit {
            soft: Some(soft),
            hard: Some(hard),
        }
    }

    #[test]
    fn enough_already_changes_nothing() {
        let d = demand(100, true);
        let b = plan(&d, limit(1_000_000, 1_000_000));
        assert_eq!((b.raise_to, b.max_clients, b.fit), (None, 100, Fit::Fits));
        let unlimited = OpenFileLimit {
            soft: None,
            hard: None,
        };
        assert_eq!(plan(&d, unlimited).raise_to, None);
    }

    #[test]
    fn the_soft_limit_is_raised_to_the_need_not_beyond() {
        let d = demand(5000, true);
        assert_eq!(d.need(), d.reserve() + 10_000);
        let b = plan(&d, limit(1024, 524_288));
        assert_eq!(b.raise_to, Some(d.need()));
        assert_eq!((b.max_clients, b.fit), (5000, Fit::Fits));
        let b = plan(
            &d,
            OpenFileLimit {
                soft: Some(1024),
                hard: None,
            },
        );
        assert_eq!(b.raise_to, Some(d.need()));
    }

    #[test]
    fn short_of_the_hard_limit_max_clients_is_lowered() {
        let d = demand(5000, true);
        let b = plan(&d, limit(1024, 1024));
        assert_eq!(b.raise_to, None);
        assert_eq!(b.max_clients as u64, (1024 - d.reserve()) / 2);
        assert_eq!(b.fit, Fit::Lowered);
        // Raised as far as the hard limit goes, and the rest lowered.
        let b = plan(&d, limit(1024, 4096));
        assert_eq!(b.raise_to, Some(4096));
        assert_eq!(b.max_clients as u64, (4096 - d.reserve()) / 2);
        assert!(d.reserve() + 2 * b.max_clients as u64 <= 4096);
    }

    #[test]
    fn a_default_max_clients_is_fitted_quietly() {
        let b = plan(&demand(10_000, false), limit(20_000, 20_000));
        assert_eq!(b.fit, Fit::DefaultLowered);
        assert!(b.max_clients < 10_000 && b.max_clients > 9_000);
    }

    #[test]
    fn a_tiny_limit_still_leaves_one_client() {
        let b = plan(&demand(5000, true), limit(16, 16));
        assert_eq!(b.max_clients, 1);
    }

    #[test]
    fn the_reserve_counts_what_the_configuration_opens() {
        let mut d = demand(10, true);
        let without_admin = d.reserve();
        d.admin = true;
        assert_eq!(d.reserve(), without_admin + ADMIN);
        d.workers = 3;
        assert_eq!(d.reserve(), BASE + 3 * (PER_WORKER + 1) + 4 + ADMIN);
    }
}
