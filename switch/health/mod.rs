//! Health: active checks, the agent, passive failure detection, trials and slow start.
//!
//! Everything here runs off the request path, as tasks of the first worker: a check task per
//! checked server (TCP connect or HTTP GET every `interval`, spread so a thousand servers do
//! not fire at once, one at a time per server), an agent task per server when `agent_port` is
//! set, and one housekeeping task for passive trials and slow-start ramps. Tasks hold a weak
//! reference to the switch's state and end when it goes. What they learn goes through
//! `control::apply`, the one writer of server state; the data path reports failed exchanges
//! (and, while it matters, good ones) through [`exchange_failed`] and [`exchange_succeeded`].

pub mod agent;
pub mod check;

use crate::config::health::CheckKind;
use crate::control::{self, Change, Health};
use crate::shared::Shared;
use crate::upstream::Pool;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};
use tokio::task::JoinHandle;

/// The first round of checks is spread over at most this long (then every `interval`, in the
/// same phase): servers are not trusted blindly for a whole interval, and do not all get
/// their first check in the same instant.
const FIRST_ROUND: Duration = Duration::from_millis(500);

/// Starts the health tasks of every pool on the current runtime.
pub fn spawn(shared: &Arc<Shared>) -> Vec<JoinHandle<()>> {
    let mut tasks = Vec::new();
    let checked: usize = shared
        .pools
        .iter()
        .filter(|p| p.health.health.check != CheckKind::None)
        .map(|p| p.backends.len())
        .sum();
    let mut nth = 0usize;
    for (pool_index, pool) in shared.pools.iter().enumerate() {
        let config = &pool.health.health;
        for server in 0..pool.backends.len() {
            let place = Place {
                shared: Arc::downgrade(shared),
                pool: pool_index,
                server,
            };
            if config.check != CheckKind::None {
                let spread = FIRST_ROUND.min(config.interval);
                let offset = spread.mul_f64(nth as f64 / checked.max(1) as f64);
                nth += 1;
                tasks.push(tokio::spawn(check::run(place.clone(), offset)));
            }
            if config.agent_port != 0 {
                tasks.push(tokio::spawn(agent::run(place)));
            }
        }
    }
    tasks.push(tokio::spawn(housekeeping(Arc::downgrade(shared))));
    tasks
}

/// Where a health task's server lives; resolved anew each round, so the task ends with the
/// switch.
#[derive(Clone)]
pub struct Place {
    shared: Weak<Shared>,
    pool: usize,
    server: usize,
}

impl Place {
    /// The switch's state, or `None` once it is gone.
    fn get(&self) -> Option<Arc<Shared>> {
        self.shared.upgrade()
    }
}

/// A request's exchange with `server` failed: connect refused or timed out, reset or closed
/// before a complete response head, an unparsable head, no head in time.
pub fn exchange_failed(pool: &Pool, server: usize, why: String) {
    control::apply(pool, server, Change::ExchangeFailed(why));
}

/// A request's exchange with `server` went well. Costs one relaxed load unless failures were
/// counted or the server is on trial.
pub fn exchange_succeeded(pool: &Pool, server: usize) {
    if pool.backends[server].report_success.load(Ordering::Relaxed) {
        control::apply(pool, server, Change::ExchangeSucceeded);
    }
}

/// Passive trials come due and slow starts ramp.
async fn housekeeping(shared: Weak<Shared>) {
    let mut tick = tokio::time::interval(control::TICK);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let Some(shared) = shared.upgrade() else {
            return;
        };
        let now = Instant::now();
        for pool in shared.pools.iter() {
            for (index, server) in pool.backends.iter().enumerate() {
                let due = server.status.lock().ok().map(|s| {
                    (
                        s.health == Health::Down && s.trial_at.is_some_and(|at| at <= now),
                        s.ramp_from.is_some(),
                    )
                });
                match due {
                    Some((true, _)) => control::apply(pool, index, Change::TrialDue),
                    Some((false, true)) => control::apply(pool, index, Change::Tick),
                    _ => {}
                }
            }
        }
    }
}
