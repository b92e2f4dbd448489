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
mod grpc;

use crate::config::health::CheckKind;
use crate::shared::Shared;
use crate::state::control::{self, Change};
use crate::state::pool::Pool;
use crate::state::status::Health;
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};
use tokio::task::JoinHandle;

/// The first round of checks is spread over at most this long (then every `interval`, in the
/// same phase): servers are not trusted blindly for a whole interval, and do not all get
/// their first check in the same instant.
const FIRST_ROUND: Duration = Duration::from_millis(500);

/// Starts the health tasks of `pools` (new in the generation being committed) on the current
/// runtime.
pub fn spawn(shared: &Arc<Shared>, pools: &[Arc<Pool>]) -> Vec<JoinHandle<()>> {
    let mut tasks = Vec::new();
    let checked: usize = pools
        .iter()
        .filter(|p| p.health.health.check != CheckKind::None)
        .map(|p| p.backends.len())
        .sum();
    let mut nth = 0usize;
    for pool in pools {
        let config = &pool.health.health;
        for server in 0..pool.backends.len() {
            let place = Place {
                shared: Arc::downgrade(shared),
                pool: Arc::downgrade(pool),
                server,
                retired: pool.retirement(),
            };
            if config.check != CheckKind::None {
                let spread = FIRST_ROUND.min(config.interval);
                let offset = spread.mul_f64(nth as f64 / checked.max(1) as f64);
                nth += 1;
                // A server kept from the pool this one replaces goes on in its own phase: a
                // pool that changes every second (a discovery's answers) must not check all
                // its servers every second.
                let offset = next_check(&pool.backends[server], config.interval).unwrap_or(offset);
                tasks.push(tokio::spawn(check::run(place.clone(), offset)));
            }
            if config.agent_port != 0 {
                tasks.push(tokio::spawn(agent::run(place)));
            }
        }
    }
    tasks
}

/// When a server checked before is due again: `interval` after its last check.
fn next_check(server: &crate::state::server::Backend, interval: Duration) -> Option<Duration> {
    let status = server.status.lock().ok()?;
    let (_, _, at) = status.last_check.as_ref()?;
    Some(interval.saturating_sub(at.elapsed()))
}

/// Starts the one task of trials and slow starts (once per switch) on the current runtime.
pub fn spawn_housekeeping(shared: &Arc<Shared>) -> JoinHandle<()> {
    tokio::spawn(housekeeping(Arc::downgrade(shared)))
}

/// Where a health task's server lives. The task ends when the switch goes, or when a reload
/// retires its pool (the pool that replaces it has tasks of its own; a server kept across the
/// reload keeps its counts, which live in its status).
#[derive(Clone)]
pub struct Place {
    shared: Weak<Shared>,
    pool: Weak<Pool>,
    server: usize,
    /// `true` once the pool is retired (state/pool.rs `retire`).
    retired: tokio::sync::watch::Receiver<bool>,
}

impl Place {
    /// The server's pool while it is current, or `None`: the task is over.
    fn get(&self) -> Option<Arc<Pool>> {
        let shared = self.shared.upgrade()?;
        if *shared.shutdown.borrow() {
            return None;
        }
        let pool = self.pool.upgrade()?;
        shared.generation.load().has_pool(&pool).then_some(pool)
    }

    /// Waits `duration`; `false` if the pool was retired meanwhile (or is gone): the task is
    /// over at once, not at its next turn.
    async fn sleep(&mut self, duration: Duration) -> bool {
        tokio::select! {
            () = tokio::time::sleep(duration) => true,
            _ = self.retired.wait_for(|&retired| retired) => false,
        }
    }

    /// Records what the task found, on the server as the running generation holds it (a
    /// reload may commit between `get` and here: control.rs `apply_latest`); `false`: the
    /// task is over.
    fn apply(&self, change: Change) -> bool {
        let Some(pool) = self.get() else {
            return false;
        };
        let Some(shared) = self.shared.upgrade() else {
            return false;
        };
        control::apply_latest(&shared.generation, &pool, self.server, change);
        true
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
        let generation = shared.generation.load();
        for pool in generation.pools.iter() {
            for (index, server) in pool.backends.iter().enumerate() {
                let due = server.status.lock().ok().map(|s| {
                    (
                        s.health == Health::Down && s.trial_at.is_some_and(|at| at <= now),
                        s.ramp_from.is_some(),
                    )
                });
                let change = match due {
                    Some((true, _)) => Change::TrialDue,
                    Some((false, true)) => Change::Tick,
                    _ => continue,
                };
                control::apply_latest(&shared.generation, pool, index, change);
            }
        }
    }
}
