//! The one writer of a server's run-time state.
//!
//! Health checks, passive failure detection, the agent, slow start and (later) the admin
//! endpoint all describe what happened as a [`Change`]; [`apply`] records it in the server's
//! [`ServerStatus`], recomputes what the pool's module sees of every server of the pool
//! (usable or not, effective weight, in-flight limit), tells the module once
//! (`servers_changed`), wakes requests queued for a slot, and logs each transition once with
//! its reason. As in HAProxy (`srv_update_status`), the operator's state (`admin`) is kept
//! apart from the measured one (`health`), and backup servers are shown to the module only
//! while no other server of the pool is usable.

use crate::upstream::Pool;
use std::fmt;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

/// The operator's state of a server (admin endpoint, `tcpvs set-state`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AdminState {
    Ready,
    /// Keeps the requests it has, gets no new ones.
    Drain,
    /// No new requests, not checked.
    Maint,
}

/// What checks and failed exchanges say of a server.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Health {
    Up,
    Down,
}

/// The state a server is shown in: `up`, `down`, `drain` or `maint`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum State {
    Up,
    Down,
    Drain,
    Maint,
}

impl fmt::Display for State {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            State::Up => "up",
            State::Down => "down",
            State::Drain => "drain",
            State::Maint => "maint",
        })
    }
}

/// What the agent on the server last said (HAProxy agent-check words).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AgentReport {
    /// `NN%`: the share of the configured weight to use.
    pub weight_percent: Option<u32>,
    pub drain: bool,
    pub down: bool,
    pub maint: bool,
}

/// Something that happened to a server.
#[derive(Clone, Debug)]
pub enum Change {
    /// An active check succeeded.
    CheckPassed,
    /// An active check failed, and why.
    CheckFailed(String),
    /// A request's exchange with the server failed (passive detection), and why.
    ExchangeFailed(String),
    /// A request's exchange succeeded while the server had failures counted or was on trial.
    ExchangeSucceeded,
    /// Passive only: `fail_timeout` has passed since the server went down; it gets one trial
    /// request.
    TrialDue,
    /// The agent's latest report.
    Agent(AgentReport),
    /// The operator's state and/or weight.
    Admin {
        state: Option<AdminState>,
        weight: Option<u32>,
    },
    /// Time passed: slow start ramps.
    Tick,
    /// A reload changed the server's line in the rule file: the admin's runtime changes end.
    LineChanged,
}

/// A server's run-time state; written only by [`apply`].
#[derive(Debug)]
pub struct ServerStatus {
    pub health: Health,
    /// Why the health is what it is (the last transition's reason).
    pub reason: String,
    /// When the shown state last changed.
    pub since: Instant,
    pub admin: AdminState,
    pub admin_weight: Option<u32>,
    pub agent: AgentReport,
    /// Active checks: consecutive successes and failures, and whether one has run yet.
    pub check_successes: u32,
    pub check_failures: u32,
    pub checked: bool,
    /// The last check's result (`None` before the first), and when it came.
    pub last_check: Option<(bool, String, Instant)>,
    /// Passive: consecutive failed exchanges.
    pub exchange_failures: u32,
    /// Passive only: taking one request at a time to see whether it works again.
    pub on_trial: bool,
    /// Passive only: when a server taken down by failed exchanges gets its trial.
    pub trial_at: Option<Instant>,
    /// Slow start: when the server became usable again.
    pub ramp_from: Option<Instant>,
    /// What the module was last shown, to log each transition once.
    pub shown: State,
    pub effective_weight: u32,
}

impl ServerStatus {
    pub fn new(weight: u32) -> ServerStatus {
        ServerStatus {
            health: Health::Up,
            reason: "configured".into(),
            since: Instant::now(),
            admin: AdminState::Ready,
            admin_weight: None,
            agent: AgentReport::default(),
            check_successes: 0,
            check_failures: 0,
            checked: false,
            last_check: None,
            exchange_failures: 0,
            on_trial: false,
            trial_at: None,
            ramp_from: None,
            shown: State::Up,
            effective_weight: weight,
        }
    }

    /// The state this status shows, before the pool's backup rule.
    pub fn state(&self) -> State {
        if self.admin == AdminState::Maint || self.agent.maint {
            State::Maint
        } else if self.health == Health::Down || self.agent.down {
            State::Down
        } else if self.admin == AdminState::Drain || self.agent.drain {
            State::Drain
        } else {
            State::Up
        }
    }
}

/// Records `change` for server `index` of `pool` and updates what the module sees.
pub fn apply(pool: &Pool, index: usize, change: Change) {
    let Some(server) = pool.backends.get(index) else {
        return;
    };
    // One writer at a time per pool: the backup rule reads every server.
    let _writer = pool.control_lock();
    let health = &pool.health.health;
    {
        let Ok(mut status) = server.status.lock() else {
            return;
        };
        let now = Instant::now();
        let was = status.health;
        match change {
            Change::CheckPassed => {
                status.check_successes = status.check_successes.saturating_add(1);
                status.check_failures = 0;
                let first = !status.checked;
                status.checked = true;
                status.last_check = Some((true, "passed".into(), now));
                if status.health == Health::Down && (first || status.check_successes >= health.rise)
                {
                    status.health = Health::Up;
                    status.reason = format!("{} checks passed", status.check_successes);
                    status.exchange_failures = 0;
                }
            }
            Change::CheckFailed(why) => {
                status.check_failures = status.check_failures.saturating_add(1);
                status.check_successes = 0;
                // The first check decides at once: a pool is not trusted blindly until `fall`
                // checks have failed.
                let first = !status.checked;
                status.checked = true;
                if status.health == Health::Up && (first || status.check_failures >= health.fall) {
                    status.health = Health::Down;
                    status.reason = format!("check failed: {why}");
                }
                status.last_check = Some((false, why, now));
            }
            Change::ExchangeFailed(why) => {
                status.exchange_failures = status.exchange_failures.saturating_add(1);
                let limit = health.max_fails;
                if status.health == Health::Up
                    && (status.on_trial || (limit > 0 && status.exchange_failures >= limit))
                {
                    status.health = Health::Down;
                    status.reason = if status.on_trial {
                        format!("trial request failed: {why}")
                    } else {
                        format!(
                            "{} failed exchanges, the last: {why}",
                            status.exchange_failures
                        )
                    };
                    status.check_successes = 0;
                    if health.check == crate::config::health::CheckKind::None {
                        status.trial_at = Some(now + health.fail_timeout);
                    }
                }
                status.on_trial = false;
            }
            Change::ExchangeSucceeded => {
                status.exchange_failures = 0;
                if status.on_trial {
                    status.on_trial = false;
                    status.reason = "trial request succeeded".into();
                }
            }
            Change::TrialDue => {
                if status.health == Health::Down && status.trial_at.is_some_and(|at| at <= now) {
                    status.trial_at = None;
                    status.health = Health::Up;
                    status.on_trial = true;
                    status.exchange_failures = 0;
                    status.reason =
                        format!("on trial after {:?} (fail_timeout)", health.fail_timeout);
                }
            }
            Change::Agent(report) => {
                if report != status.agent {
                    status.reason = format!("agent: {}", describe(report));
                }
                status.agent = report;
            }
            Change::Admin { state, weight } => {
                if let Some(state) = state {
                    status.reason = match state {
                        AdminState::Ready => "made ready by the admin",
                        AdminState::Drain => "set to drain by the admin",
                        AdminState::Maint => "put in maintenance by the admin",
                    }
                    .to_string();
                    status.admin = state;
                }
                if let Some(weight) = weight {
                    status.admin_weight = Some(weight.min(0xffff));
                }
            }
            Change::Tick => {}
            Change::LineChanged => {
                if status.admin != AdminState::Ready || status.admin_weight.is_some() {
                    status.reason = "its line in the rule file changed".into();
                }
                status.admin = AdminState::Ready;
                status.admin_weight = None;
            }
        }
        if was == Health::Down && status.health == Health::Up && !pool.health.slow_start.is_zero() {
            status.ramp_from = Some(now);
        }
        server.report_success.store(
            status.exchange_failures > 0 || status.on_trial,
            Ordering::Relaxed,
        );
    }
    show(pool, Instant::now());
}

/// Recomputes what the module sees of every server of `pool` from their statuses, logs the
/// transitions and tells the module and the queue.
fn show(pool: &Pool, now: Instant) {
    let slow_start = pool.health.slow_start;
    // Each server's own view: usable, effective weight, limit.
    let mut own: Vec<(State, u32, u32, bool)> = Vec::with_capacity(pool.backends.len());
    for server in pool.backends.iter() {
        let Ok(mut status) = server.status.lock() else {
            own.push((State::Down, 0, server.max_conns(), server.is_backup()));
            continue;
        };
        let state = status.state();
        let mut weight = match state {
            State::Up | State::Drain => status.admin_weight.unwrap_or(server.weight()),
            State::Down | State::Maint => 0,
        };
        if let Some(percent) = status.agent.weight_percent {
            weight = ((u64::from(weight) * u64::from(percent)) / 100).min(0xffff) as u32;
        }
        if let Some(from) = status.ramp_from {
            let ramped = now.saturating_duration_since(from);
            if ramped >= slow_start || slow_start.is_zero() {
                status.ramp_from = None;
            } else if weight > 0 {
                let share = ramped.as_secs_f64() / slow_start.as_secs_f64();
                weight = ((f64::from(weight) * share).ceil() as u32).clamp(1, weight);
            }
        }
        status.effective_weight = weight;
        let limit = if status.on_trial {
            1
        } else {
            server.max_conns()
        };
        own.push((state, weight, limit, server.is_backup()));
    }
    let primary_usable = own
        .iter()
        .any(|&(state, weight, _, backup)| !backup && state == State::Up && weight > 0);
    let mut changed = false;
    for ((server, view), &(state, weight, limit, backup)) in pool
        .backends
        .iter()
        .zip(pool.servers.iter())
        .zip(own.iter())
    {
        // A backup is offered only while no primary is usable. A draining server stays up for
        // the clients that persist on it, marked so that it gets no new ones.
        let up = matches!(state, State::Up | State::Drain) && (!backup || !primary_usable);
        let draining = state == State::Drain;
        let load = view.load();
        if load.up != up || load.weight != weight || load.draining != draining {
            changed = true;
        }
        view.set_weight(weight);
        view.set_draining(draining);
        view.set_up(up);
        view.set_max_active(limit);
        if let Ok(mut status) = server.status.lock() {
            if status.shown != state {
                log_transition(pool, server.addr, status.shown, state, &status.reason);
                status.shown = state;
                status.since = now;
            }
        }
    }
    if changed {
        pool.scheduler.servers_changed(&pool.view());
        pool.wake_queue();
    }
}

/// The agent's report in its own words.
fn describe(report: AgentReport) -> String {
    let mut words = Vec::new();
    if report.down {
        words.push("down".to_string());
    }
    if report.maint {
        words.push("maint".into());
    } else if report.drain {
        words.push("drain".into());
    }
    if words.is_empty() {
        words.push("ready".into());
    }
    if let Some(percent) = report.weight_percent {
        words.push(format!("{percent}%"));
    }
    words.join(" ")
}

fn log_transition(pool: &Pool, addr: std::net::SocketAddr, from: State, to: State, reason: &str) {
    if to == State::Down {
        tracing::warn!(pool = %pool.name, server = %addr, "server {from} -> {to}: {reason}");
    } else {
        tracing::info!(pool = %pool.name, server = %addr, "server {from} -> {to}: {reason}");
    }
}

/// How often the housekeeping of [`crate::health`] looks at trials and ramps.
pub const TICK: Duration = Duration::from_millis(100);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;
    use std::sync::Arc;

    /// A pool from rule-file text with servers :1, :2 and the backup :9.
    fn pool(extra: &str) -> Pool {
        let text = format!(
            "[virtual.web]\nlisten = \"127.0.0.1:0\"\ndefault_pool = \"p\"\n[pool.p]\n\
             servers = [{{ addr = \"127.0.0.1:1\", weight = 10 }}, {{ addr = \"127.0.0.1:2\", weight = 10 }}, \
             {{ addr = \"127.0.0.1:9\", backup = true }}]\n{extra}"
        );
        let config = Config::parse("test.toml", &text).unwrap();
        let clock = Arc::new(tcpvs_modules::MonotonicClock::new());
        Pool::new(&config.pools[0], clock, 1).unwrap()
    }

    /// (state, offered to the module, effective weight) of each server.
    fn shown(pool: &Pool) -> Vec<(State, bool, u32)> {
        pool.backends
            .iter()
            .zip(pool.servers.iter())
            .map(|(b, s)| {
                let status = b.status.lock().unwrap();
                (status.shown, s.load().is_usable(), s.weight())
            })
            .collect()
    }

    #[test]
    fn a_backup_is_offered_only_while_no_primary_is_usable() {
        let p = pool("");
        assert_eq!(
            shown(&p),
            [
                (State::Up, true, 10),
                (State::Up, true, 10),
                (State::Up, false, 1)
            ]
        );
        for i in 0..2 {
            apply(&p, 0, Change::ExchangeFailed("refused".into()));
            assert_eq!(
                p.backends[0].status.lock().unwrap().health,
                Health::Up,
                "{i}"
            );
        }
        apply(&p, 0, Change::ExchangeFailed("refused".into()));
        assert_eq!(
            shown(&p)[0],
            (State::Down, false, 0),
            "down after max_fails"
        );
        assert!(!shown(&p)[2].1, "one primary is left");
        apply(
            &p,
            1,
            Change::Admin {
                state: Some(AdminState::Maint),
                weight: None,
            },
        );
        assert_eq!(shown(&p)[1], (State::Maint, false, 0));
        assert_eq!(shown(&p)[2], (State::Up, true, 1), "the backup takes over");
        apply(
            &p,
            1,
            Change::Admin {
                state: Some(AdminState::Ready),
                weight: None,
            },
        );
        assert_eq!(shown(&p)[1], (State::Up, true, 10));
        assert!(!shown(&p)[2].1, "handed back");
    }

    #[test]
    fn a_good_exchange_resets_the_failure_count() {
        let p = pool("");
        for _ in 0..10 {
            apply(&p, 0, Change::ExchangeFailed("reset".into()));
            apply(&p, 0, Change::ExchangeFailed("reset".into()));
            assert!(p.backends[0].report_success.load(Ordering::Relaxed));
            apply(&p, 0, Change::ExchangeSucceeded);
            assert!(!p.backends[0].report_success.load(Ordering::Relaxed));
        }
        assert_eq!(shown(&p)[0].0, State::Up);
    }

    #[test]
    fn without_checks_a_trial_takes_one_request_at_a_time() {
        let p = pool("[pool.p.health]\nmax_fails = 1\nfail_timeout = \"1ms\"\n");
        apply(&p, 0, Change::ExchangeFailed("refused".into()));
        assert_eq!(shown(&p)[0].0, State::Down);
        std::thread::sleep(Duration::from_millis(2));
        apply(&p, 0, Change::TrialDue);
        assert_eq!(shown(&p)[0], (State::Up, true, 10));
        assert_eq!(p.servers[0].max_active(), 1, "one request at a time");
        apply(&p, 0, Change::ExchangeFailed("refused again".into()));
        assert_eq!(shown(&p)[0].0, State::Down, "a failed trial: down again");
        assert!(p.backends[0].status.lock().unwrap().trial_at.is_some());
        std::thread::sleep(Duration::from_millis(2));
        apply(&p, 0, Change::TrialDue);
        apply(&p, 0, Change::ExchangeSucceeded);
        assert_eq!(shown(&p)[0], (State::Up, true, 10));
        assert_eq!(p.servers[0].max_active(), 0, "the limit is back");
    }

    #[test]
    fn checks_rise_and_fall_and_the_first_one_decides() {
        let p = pool("[pool.p.health]\ncheck = \"tcp\"\nrise = 2\nfall = 3\n");
        apply(&p, 0, Change::CheckFailed("refused".into()));
        assert_eq!(shown(&p)[0].0, State::Down, "the first check decides");
        apply(&p, 0, Change::CheckPassed);
        assert_eq!(shown(&p)[0].0, State::Down);
        apply(&p, 0, Change::CheckPassed);
        assert_eq!(shown(&p)[0].0, State::Up, "rise");
        for _ in 0..2 {
            apply(&p, 0, Change::CheckFailed("refused".into()));
        }
        assert_eq!(shown(&p)[0].0, State::Up);
        apply(&p, 0, Change::CheckFailed("refused".into()));
        assert_eq!(shown(&p)[0].0, State::Down, "fall");
        let status = p.backends[0].status.lock().unwrap();
        assert_eq!(status.reason, "check failed: refused");
    }

    #[test]
    fn drain_and_the_agent_weight_shape_what_the_module_sees() {
        let p = pool("[pool.p.health]\nagent_port = 9777\n");
        apply(
            &p,
            0,
            Change::Admin {
                state: Some(AdminState::Drain),
                weight: None,
            },
        );
        assert_eq!(shown(&p)[0], (State::Drain, false, 10));
        assert!(p.servers[0].load().keeps_persistent(), "drained, not down");
        apply(
            &p,
            0,
            Change::Admin {
                state: Some(AdminState::Ready),
                weight: Some(40),
            },
        );
        assert_eq!(shown(&p)[0], (State::Up, true, 40));
        let half = AgentReport {
            weight_percent: Some(50),
            ..AgentReport::default()
        };
        apply(&p, 0, Change::Agent(half));
        assert_eq!(shown(&p)[0], (State::Up, true, 20));
        let down = AgentReport { down: true, ..half };
        apply(&p, 0, Change::Agent(down));
        assert_eq!(shown(&p)[0].0, State::Down);
    }

    #[test]
    fn slow_start_ramps_from_one() {
        let p = pool("slow_start = \"1h\"\n[pool.p.health]\ncheck = \"tcp\"\nrise = 1\n");
        apply(&p, 0, Change::CheckFailed("refused".into()));
        apply(&p, 0, Change::CheckPassed);
        let (state, offered, weight) = shown(&p)[0];
        assert_eq!((state, offered), (State::Up, true));
        assert_eq!(weight, 1, "a second into an hour-long ramp");
        assert_eq!(shown(&p)[1].2, 10);
    }
}
