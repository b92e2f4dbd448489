//! What a pool's module is offered of its servers, recomputed from their statuses after every
//! change: a server's own state (health, admin, agent), its weight (configured or the admin's,
//! the agent's share, slow start), and the pool's rules over them all: a backup is offered only
//! while no primary is usable, and a pool in panic offers its down servers too.

use super::Pool;
use crate::state::server::Backend;
use crate::state::status::State;
use std::time::Instant;

impl Pool {
    /// Recomputes what the module sees of every server from their statuses, logs the
    /// transitions and tells the module and the queue. Called by `control::apply` after each
    /// change, and once when a pool is built on its own ([`Pool::new`]).
    pub(crate) fn show(&self, now: Instant) {
        // One recomputation at a time over these servers (see `Pool::offering`); the servers'
        // own locks are taken under it, one at a time, never the other way round.
        let _offering = self
            .offering
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        show(self, now);
    }
}

fn show(pool: &Pool, now: Instant) {
    let own: Vec<Own> = pool
        .backends
        .iter()
        .map(|server| own_view(pool, server, now))
        .collect();
    let panic = in_panic(&own, pool.health.health.panic_threshold);
    let panic_changed = pool.set_panic(panic);
    // In panic, health does not decide: a down server is offered as if it were up.
    let offered = |o: &Own| match o.state {
        State::Down if panic => State::Up,
        state => state,
    };
    let primary_usable = own
        .iter()
        .any(|o| !o.backup && offered(o) == State::Up && o.weight > 0);
    let mut changed = false;
    for ((server, view), o) in pool
        .backends
        .iter()
        .zip(pool.servers.iter())
        .zip(own.iter())
    {
        // A backup is offered only while no primary is usable. A draining server stays up for
        // the clients that persist on it, marked so that it gets no new ones.
        let shown = offered(o);
        let usable = matches!(shown, State::Up | State::Drain);
        let up = usable && (!o.backup || !primary_usable);
        let weight = if usable { o.weight } else { 0 };
        let draining = shown == State::Drain;
        let load = view.load();
        if load.up != up || load.weight != weight || load.draining != draining {
            changed = true;
        }
        view.set_weight(weight);
        view.set_draining(draining);
        view.set_up(up);
        view.set_max_active(o.limit);
        if let Ok(mut status) = server.status.lock() {
            status.effective_weight = weight;
            if status.shown != o.state {
                log_transition(pool, server.addr, status.shown, o.state, &status.reason);
                status.shown = o.state;
                status.since = now;
            }
        }
    }
    // After the servers' own transitions, which explain it.
    if panic_changed {
        log_panic(pool, &own, panic);
    }
    if changed {
        pool.scheduler.servers_changed(&pool.view());
        pool.wake_queue();
    }
}

/// What one server's status says, before the pool's rules (backup, panic) apply.
struct Own {
    state: State,
    /// The weight it has when offered: configured or set by the admin, the agent's share and
    /// slow start applied; 0 in maintenance.
    weight: u32,
    /// Most requests in flight (0: no limit); 1 on trial.
    limit: u32,
    backup: bool,
}

fn own_view(pool: &Pool, server: &Backend, now: Instant) -> Own {
    let Ok(mut status) = server.status.lock() else {
        return Own {
            state: State::Down,
            weight: 0,
            limit: server.max_conns(),
            backup: server.is_backup(),
        };
    };
    let state = status.state();
    let mut weight = match state {
        State::Maint => 0,
        State::Up | State::Drain | State::Down => status.admin_weight.unwrap_or(server.weight()),
    };
    if let Some(percent) = status.agent.weight_percent {
        weight = ((u64::from(weight) * u64::from(percent)) / 100).min(0xffff) as u32;
    }
    let slow_start = pool.health.slow_start;
    if let Some(from) = status.ramp_from {
        let ramped = now.saturating_duration_since(from);
        if ramped >= slow_start || slow_start.is_zero() {
            status.ramp_from = None;
        } else if weight > 0 {
            let share = ramped.as_secs_f64() / slow_start.as_secs_f64();
            weight = ((f64::from(weight) * share).ceil() as u32).clamp(1, weight);
        }
    }
    Own {
        state,
        weight,
        limit: if status.on_trial {
            1
        } else {
            server.max_conns()
        },
        backup: server.is_backup(),
    }
}

/// Whether the pool is in panic (Envoy's healthy panic threshold): fewer than
/// `threshold` percent of its primaries not in maintenance are up, and no backup is up to
/// take over. Health then stops deciding: when most servers look down at once, the likelier
/// cause is a load the survivors cannot carry either, or checks that fail for a reason of
/// their own, and sending everything to the last survivors (or answering 503) turns a
/// partial failure into an outage. Backups come first: they are the admin's own plan for
/// losing the primaries. `threshold` 0: never.
fn in_panic(own: &[Own], threshold: u32) -> bool {
    let primaries = own.iter().filter(|o| !o.backup && o.state != State::Maint);
    let (candidates, healthy) = primaries.fold((0u64, 0u64), |(all, up), o| {
        (all + 1, up + u64::from(o.state != State::Down))
    });
    let backup_up = own
        .iter()
        .any(|o| o.backup && o.state == State::Up && o.weight > 0);
    threshold > 0
        && candidates > 0
        && healthy * 100 < u64::from(threshold) * candidates
        && !backup_up
}

fn log_panic(pool: &Pool, own: &[Own], panic: bool) {
    let primaries = own.iter().filter(|o| !o.backup && o.state != State::Maint);
    let (all, up) = primaries.fold((0, 0), |(all, up), o| {
        (all + 1, up + usize::from(o.state != State::Down))
    });
    let threshold = pool.health.health.panic_threshold;
    if panic {
        tracing::warn!(pool = %pool.name, "pool in panic: {up} of {all} servers up, below panic_threshold {threshold}%: balancing over every server not in maint");
    } else {
        tracing::info!(pool = %pool.name, "pool out of panic: {up} of {all} servers up: health decides again");
    }
}

fn log_transition(pool: &Pool, addr: std::net::SocketAddr, from: State, to: State, reason: &str) {
    if to == State::Down {
        tracing::warn!(pool = %pool.name, server = %addr, "server {from} -> {to}: {reason}");
    } else {
        tracing::info!(pool = %pool.name, server = %addr, "server {from} -> {to}: {reason}");
    }
}
