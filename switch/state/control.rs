//! The one writer of a server's run-time state.
//!
//! Health checks, passive failure detection, the agent, slow start, the admin endpoint and
//! reloads all describe what happened as a [`Change`]; [`apply`] records it in the server's
//! [`ServerStatus`] under the server's own lock (a server kept by a reload belongs to the pools
//! of two generations for a while, and has one state), then has the pool recompute what its
//! module sees of every server (usable or not, effective weight, in-flight limit: state/pool/
//! offer.rs), which tells the module once (`servers_changed`), wakes requests queued for a
//! slot, and logs each transition once with its reason. As in HAProxy (`srv_update_status`),
//! the operator's state (`admin`) is kept apart from the measured one (`health`), and backup
//! servers are shown to the module only while no other server of the pool is usable.

use crate::config::health::{CheckKind, HealthConfig};
use crate::state::generation::Generation;
use crate::state::pool::Pool;
use crate::state::status::{AdminState, AgentReport, Health, ServerStatus};
use arc_swap::ArcSwap;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A failed check or exchange: why, and what it says of the server.
#[derive(Clone, Debug)]
pub struct Failure {
    pub why: String,
    pub evidence: Evidence,
}

impl Failure {
    /// A failure that shows the server is not working (see [`Evidence::Broken`]).
    pub fn broken(why: impl Into<String>) -> Failure {
        Failure {
            why: why.into(),
            evidence: Evidence::Broken,
        }
    }
}

/// What a failure says of the server. A refusal and a timeout are not the same evidence: a
/// dead server (or host) is refused or stays silent, but an overloaded one also makes
/// connections time out (its listen queue is full, so the kernel drops their SYNs) while it
/// goes on answering the requests it has. Counting those timeouts took healthy servers down
/// one after the other under load (issue 22: 101 492 of 109 513 requests answered 503).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Evidence {
    /// Refused, reset, closed before a complete response head, an answer that is not HTTP, a
    /// check's wrong status or invalid answer: the server is not working. Counts toward
    /// `max_fails` and `fall`.
    Broken,
    /// No answer in time (connect or response), and the server answered nothing else through
    /// this switch meanwhile, nor was it moving another exchange's body: it may be dead.
    /// Counts.
    Silent,
    /// No answer in time while the server answered other requests meanwhile, or was moving
    /// another exchange's body (a slow client's upload or download holds it): alive, only busy
    /// or slow on this one. Does not count (nor clear the count): the request was retried or
    /// refused, the server keeps its state.
    Busy,
    /// A request answered with a head the switch cannot relay (a control byte where none may
    /// be, a bad length), after a valid status line: the server is alive and speaks HTTP, and
    /// what is wrong may be what its application put in a field from the request, so any
    /// client could send it. Does not count (nor clear the count), as `Busy`; its active check,
    /// which no client steers, still counts an invalid answer.
    Answered,
}

impl Evidence {
    /// For a timeout: `Busy` when the server showed itself alive while the attempt waited
    /// ([`crate::state::stats::ServerStats::alive_since`]), else `Silent`.
    pub fn of_timeout(alive: bool) -> Evidence {
        if alive {
            Evidence::Busy
        } else {
            Evidence::Silent
        }
    }
}

/// Something that happened to a server.
#[derive(Clone, Debug)]
pub enum Change {
    /// An active check succeeded.
    CheckPassed,
    /// An active check failed, and why.
    CheckFailed(Failure),
    /// A request's exchange with the server failed (passive detection), and why.
    ExchangeFailed(Failure),
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
    /// A reload, or a discovery's answer, added the server to a pool that was running: it
    /// ramps in over `slow_start` as a server coming back up does (HAProxy's slow start after
    /// maintenance), rather than taking its whole share of a busy pool at once.
    Joined,
}

/// Applies `change` to `server` of `pool` as `generation` holds it: a writer that found the
/// pool under an earlier configuration reports to the pool that now has the server, and
/// nothing happens if the server is gone. Reached through [`apply_latest`] by every writer but
/// the commit, so a retired pool never writes the state that the current one shows.
fn apply_current(generation: &Generation, pool: &Pool, server: usize, change: Change) {
    if generation.has_pool(pool) {
        apply(pool, server, change);
        return;
    }
    let Some(backend) = pool.backends.get(server) else {
        return;
    };
    if let Some(current) = generation.pool(&pool.name) {
        if let Some(index) = current
            .backends
            .iter()
            .position(|b| Arc::ptr_eq(b, backend))
        {
            apply(current, index, change);
        }
    }
}

/// Applies `change` to `server` of `pool` as the running generation holds it, whoever writes:
/// a request, a check, the agent, the admin endpoint, housekeeping. Each of those found its
/// pool a moment earlier, and a reload may have committed since: recorded on the retired pool,
/// the change reached the server's state (one for both pools) but not the current module, its
/// queue or its backup and panic state. So the pool is found again in the running generation,
/// and if a commit swapped generations while the change was applied, the new pool recomputes
/// what its module sees (the commit's own recompute may have run before the change).
pub fn apply_latest(current: &ArcSwap<Generation>, pool: &Pool, server: usize, change: Change) {
    let generation = current.load();
    apply_current(&generation, pool, server, change);
    let now = current.load();
    if !Arc::ptr_eq(&now, &generation) {
        apply_current(&now, pool, server, Change::Tick);
    }
}

/// A request's exchange with `server` failed: connect refused or timed out, reset or closed
/// before a complete response head, an unparsable head, no head in time.
pub fn exchange_failed(
    current: &ArcSwap<Generation>,
    pool: &Pool,
    server: usize,
    failure: Failure,
) {
    apply_latest(current, pool, server, Change::ExchangeFailed(failure));
}

/// A request's exchange with `server` went well. Costs one relaxed load unless failures were
/// counted or the server is on trial.
pub fn exchange_succeeded(current: &ArcSwap<Generation>, pool: &Pool, server: usize) {
    if pool.backends[server].report_success.load(Ordering::Relaxed) {
        apply_latest(current, pool, server, Change::ExchangeSucceeded);
    }
}

/// Records `change` for server `index` of `pool` and updates what the module sees.
///
/// Locks, in this order only: the server's own `status` alone while the change is recorded
/// (whichever pool reports it: during a reload a kept server belongs to the pools of two
/// generations, and its state is one), released; then the pool's offer lock while what its
/// module sees is recomputed from every server's status (state/pool/offer.rs), which takes
/// each server's `status` in turn under it. Nothing takes a pool's lock while holding a
/// server's, so two pools that share servers never wait on each other in a circle.
pub fn apply(pool: &Pool, index: usize, change: Change) {
    let Some(server) = pool.backends.get(index) else {
        return;
    };
    {
        // A panic elsewhere while the lock was held leaves a status worth keeping.
        let mut status = server
            .status
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let now = Instant::now();
        let was = status.health;
        let health = &pool.health.health;
        match change {
            Change::CheckPassed => check_passed(&mut status, health, now),
            Change::CheckFailed(failure) => check_failed(&mut status, health, failure, now),
            Change::ExchangeFailed(failure) => {
                exchange_failed_by(&mut status, health, failure, now)
            }
            Change::ExchangeSucceeded => exchange_succeeded_by(&mut status, pool),
            Change::TrialDue => trial_due(&mut status, health, now),
            Change::Agent(report) => {
                if report != status.agent {
                    status.reason = format!("agent: {}", describe(report));
                }
                status.agent = report;
            }
            Change::Admin { state, weight } => admin(&mut status, state, weight),
            Change::Tick => {}
            Change::Joined if !pool.health.slow_start.is_zero() => status.ramp_from = Some(now),
            Change::Joined => {}
            Change::LineChanged => {
                // The pool of the new generation says what the line is now.
                if let Some(line) = pool.config.servers.get(index) {
                    server.reconfigure(line);
                }
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
        // Without checks, a down server's good exchange (in panic) brings it back: reported.
        let passive_down = status.health == Health::Down && health.check == CheckKind::None;
        server.report_success.store(
            status.exchange_failures > 0 || status.on_trial || passive_down,
            Ordering::Relaxed,
        );
    }
    pool.show(Instant::now());
}

fn check_passed(status: &mut ServerStatus, health: &HealthConfig, now: Instant) {
    status.check_successes = status.check_successes.saturating_add(1);
    status.check_failures = 0;
    // Until a server has passed a check once, one passing check brings it up: a server
    // started a moment after the switch failed its first check (which decides at once), and
    // `rise` more checks would hold it out for `rise x interval` although it never failed
    // once it ran. Later, `rise` rules.
    let first = !status.check_passed_once;
    status.check_passed_once = true;
    status.checked = true;
    status.last_check = Some((true, "passed".into(), now));
    if status.health == Health::Down && (first || status.check_successes >= health.rise) {
        status.health = Health::Up;
        status.reason = if first {
            "its first check passed".into()
        } else {
            format!("{} checks passed", status.check_successes)
        };
        status.exchange_failures = 0;
    }
}

fn check_failed(status: &mut ServerStatus, health: &HealthConfig, failure: Failure, now: Instant) {
    let Failure { why, evidence } = failure;
    // The first check decides at once: a pool is not trusted blindly until `fall` checks
    // have failed.
    let first = !status.checked;
    status.checked = true;
    if evidence == Evidence::Busy {
        // No verdict: a check that timed out while the server answered requests shows a
        // busy server, not a dead one.
        status.last_check = Some((
            false,
            format!("{why} (busy: it answered requests or moved bodies meanwhile; not counted)"),
            now,
        ));
        return;
    }
    status.check_failures = status.check_failures.saturating_add(1);
    status.check_successes = 0;
    if status.health == Health::Up && (first || status.check_failures >= health.fall) {
        status.health = Health::Down;
        status.reason = format!("check failed: {why}");
    }
    status.last_check = Some((false, why, now));
}

fn exchange_failed_by(
    status: &mut ServerStatus,
    health: &HealthConfig,
    failure: Failure,
    now: Instant,
) {
    let Failure { why, evidence } = failure;
    if matches!(evidence, Evidence::Busy | Evidence::Answered) {
        // Alive (answering others, or this one): neither counted nor clearing the count.
        return;
    }
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
        if health.check == CheckKind::None {
            status.trial_at = Some(now + health.fail_timeout);
        }
    }
    status.on_trial = false;
}

fn exchange_succeeded_by(status: &mut ServerStatus, pool: &Pool) {
    status.exchange_failures = 0;
    if status.on_trial {
        status.on_trial = false;
        status.reason = "trial request succeeded".into();
    } else if status.health == Health::Down
        && pool.health.health.check == CheckKind::None
        && pool.in_panic()
    {
        // A pool in panic sends requests to its down servers too; without checks, a request
        // answered is the evidence that brings one back.
        status.health = Health::Up;
        status.trial_at = None;
        status.reason = "answered a request while its pool was in panic".into();
    }
}

fn trial_due(status: &mut ServerStatus, health: &HealthConfig, now: Instant) {
    if status.health == Health::Down && status.trial_at.is_some_and(|at| at <= now) {
        status.trial_at = None;
        status.health = Health::Up;
        status.on_trial = true;
        status.exchange_failures = 0;
        status.reason = format!("on trial after {:?} (fail_timeout)", health.fail_timeout);
    }
}

fn admin(status: &mut ServerStatus, state: Option<AdminState>, weight: Option<u32>) {
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

/// How often the housekeeping of [`crate::health`] looks at trials and ramps.
pub const TICK: Duration = Duration::from_millis(100);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;
    use crate::state::status::State;
    use std::sync::Arc;

    /// The pool of rule-file text with servers :1 (of weight `first`), :2 and the backup :9.
    fn config(first: u32, extra: &str) -> crate::config::PoolConfig {
        let text = format!(
            "[virtual.web]\nlisten = \"127.0.0.1:0\"\ndefault_pool = \"p\"\n[pool.p]\n\
             servers = [{{ addr = \"127.0.0.1:1\", weight = {first} }}, {{ addr = \"127.0.0.1:2\", weight = 10 }}, \
             {{ addr = \"127.0.0.1:9\", backup = true }}]\n{extra}"
        );
        let config = Config::parse("test.toml", &text).unwrap();
        config.pools[0].clone()
    }

    fn clock() -> Arc<dyn tcpvs_modules::Clock> {
        Arc::new(tcpvs_modules::MonotonicClock::new())
    }

    /// A pool with servers :1, :2 and the backup :9.
    fn pool(extra: &str) -> Pool {
        Pool::new(&config(10, extra), clock(), 1).unwrap()
    }

    /// The pool a reload builds over `old`'s servers for `config`, made ready as its commit
    /// does: the kept servers' changed lines, then the pool shown to its module.
    fn reloaded(old: &Pool, config: &crate::config::PoolConfig) -> Pool {
        let next = Pool::with_servers_of(config, clock(), 1, Some(old)).unwrap();
        let changed: Vec<usize> = next.lines_changed().collect();
        for server in changed {
            apply(&next, server, Change::LineChanged);
        }
        apply(&next, 0, Change::Tick);
        next
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
            apply(&p, 0, Change::ExchangeFailed(Failure::broken("refused")));
            assert_eq!(
                p.backends[0].status.lock().unwrap().health,
                Health::Up,
                "{i}"
            );
        }
        apply(&p, 0, Change::ExchangeFailed(Failure::broken("refused")));
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
            apply(&p, 0, Change::ExchangeFailed(Failure::broken("reset")));
            apply(&p, 0, Change::ExchangeFailed(Failure::broken("reset")));
            assert!(p.backends[0].report_success.load(Ordering::Relaxed));
            apply(&p, 0, Change::ExchangeSucceeded);
            assert!(!p.backends[0].report_success.load(Ordering::Relaxed));
        }
        assert_eq!(shown(&p)[0].0, State::Up);
    }

    #[test]
    fn without_checks_a_trial_takes_one_request_at_a_time() {
        let p = pool("[pool.p.health]\nmax_fails = 1\nfail_timeout = \"1ms\"\n");
        apply(&p, 0, Change::ExchangeFailed(Failure::broken("refused")));
        assert_eq!(shown(&p)[0].0, State::Down);
        std::thread::sleep(Duration::from_millis(2));
        apply(&p, 0, Change::TrialDue);
        assert_eq!(shown(&p)[0], (State::Up, true, 10));
        assert_eq!(p.servers[0].max_active(), 1, "one request at a time");
        apply(
            &p,
            0,
            Change::ExchangeFailed(Failure::broken("refused again")),
        );
        assert_eq!(shown(&p)[0].0, State::Down, "a failed trial: down again");
        assert!(p.backends[0].status.lock().unwrap().trial_at.is_some());
        std::thread::sleep(Duration::from_millis(2));
        apply(&p, 0, Change::TrialDue);
        apply(&p, 0, Change::ExchangeSucceeded);
        assert_eq!(shown(&p)[0], (State::Up, true, 10));
        assert_eq!(p.servers[0].max_active(), 0, "the limit is back");
    }

    #[test]
    fn checks_rise_and_fall_and_the_first_ones_decide() {
        let p = pool("[pool.p.health]\ncheck = \"tcp\"\nrise = 2\nfall = 3\n");
        let refused = || Change::CheckFailed(Failure::broken("refused"));
        apply(&p, 0, refused());
        assert_eq!(shown(&p)[0].0, State::Down, "the first check decides");
        apply(&p, 0, Change::CheckPassed);
        assert_eq!(
            shown(&p)[0].0,
            State::Up,
            "so does the first pass: a server started late joins at its next check"
        );
        assert_eq!(
            p.backends[0].status.lock().unwrap().reason,
            "its first check passed"
        );
        for _ in 0..2 {
            apply(&p, 0, refused());
        }
        assert_eq!(shown(&p)[0].0, State::Up);
        apply(&p, 0, refused());
        assert_eq!(shown(&p)[0].0, State::Down, "fall");
        assert_eq!(
            p.backends[0].status.lock().unwrap().reason,
            "check failed: refused"
        );
        apply(&p, 0, Change::CheckPassed);
        assert_eq!(
            shown(&p)[0].0,
            State::Down,
            "once it has passed, rise rules"
        );
        apply(&p, 0, Change::CheckPassed);
        assert_eq!(shown(&p)[0].0, State::Up, "rise");
    }

    #[test]
    fn timeouts_of_a_server_that_answers_meanwhile_are_not_counted() {
        let p = pool("[pool.p.health]\ncheck = \"http\"\nfall = 1\nmax_fails = 1\n");
        let busy = |why: &str| Failure {
            why: why.into(),
            evidence: Evidence::Busy,
        };
        for _ in 0..10 {
            apply(
                &p,
                0,
                Change::ExchangeFailed(busy("connect failed: timed out")),
            );
            apply(&p, 0, Change::CheckFailed(busy("no answer within 1s")));
        }
        assert_eq!(shown(&p)[0].0, State::Up, "busy, not dead");
        let status = p.backends[0].status.lock().unwrap();
        assert_eq!((status.exchange_failures, status.check_failures), (0, 0));
        assert!(status
            .last_check
            .as_ref()
            .is_some_and(|(passed, why, _)| !passed && why.contains("busy")));
        drop(status);
        let silent = Failure {
            why: "connect failed: timed out".into(),
            evidence: Evidence::Silent,
        };
        apply(&p, 0, Change::ExchangeFailed(silent));
        assert_eq!(shown(&p)[0].0, State::Down, "a silent server is counted");
        let server = crate::state::stats::ServerStats::default();
        let answered = crate::state::stats::read(&server.responses);
        let evidence = || Evidence::of_timeout(server.alive_since(answered));
        assert_eq!(evidence(), Evidence::Silent, "nothing answered meanwhile");
        let upload = server.relaying();
        assert_eq!(evidence(), Evidence::Busy, "another exchange's body moves");
        drop(upload);
        assert_eq!(evidence(), Evidence::Silent, "the body moved no more");
        crate::state::stats::bump(&server.responses);
        assert_eq!(evidence(), Evidence::Busy, "another request was answered");
    }

    #[test]
    fn below_the_panic_threshold_health_stops_deciding() {
        // Two primaries of weight 10 and the backup :9 (see `pool`), threshold 50%.
        let p = pool("[pool.p.health]\nmax_fails = 1\npanic_threshold = 50\n");
        let refused = || Change::ExchangeFailed(Failure::broken("refused"));
        apply(&p, 0, refused());
        assert!(!p.in_panic(), "1 of 2 primaries up: 50%, not below");
        assert_eq!(shown(&p)[0], (State::Down, false, 0));
        // The backup is the admin's plan for losing primaries: while it is up, no panic.
        apply(&p, 1, refused());
        assert!(!p.in_panic());
        assert_eq!(shown(&p)[2], (State::Up, true, 1), "the backup takes over");
        apply(&p, 2, refused());
        assert!(p.in_panic(), "no primary and no backup up");
        assert_eq!(
            shown(&p),
            [
                (State::Down, true, 10),
                (State::Down, true, 10),
                (State::Down, false, 1)
            ],
            "every primary offered with its weight, shown as it is"
        );
        // Maintenance is the admin's word: never offered, and not counted.
        apply(
            &p,
            1,
            Change::Admin {
                state: Some(AdminState::Maint),
                weight: None,
            },
        );
        assert_eq!(shown(&p)[1], (State::Maint, false, 0));
        assert!(p.in_panic(), "0 of 1 primary up");
        // Without checks, a request answered in panic brings the server back.
        apply(&p, 0, Change::ExchangeSucceeded);
        assert_eq!(shown(&p)[0], (State::Up, true, 10));
        assert!(!p.in_panic(), "1 of 1 primary up");
        assert!(!shown(&p)[2].1, "the backup is hidden again");
    }

    #[test]
    fn panic_threshold_zero_never_panics() {
        let p = pool("[pool.p.health]\nmax_fails = 1\npanic_threshold = 0\n");
        for server in 0..3 {
            apply(
                &p,
                server,
                Change::ExchangeFailed(Failure::broken("refused")),
            );
        }
        assert!(!p.in_panic());
        assert!(shown(&p)
            .iter()
            .all(|&(state, offered, _)| state == State::Down && !offered));
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
        apply(&p, 0, Change::CheckFailed(Failure::broken("refused")));
        apply(&p, 0, Change::CheckPassed);
        let (state, offered, weight) = shown(&p)[0];
        assert_eq!((state, offered), (State::Up, true));
        assert_eq!(weight, 1, "a second into an hour-long ramp");
        assert_eq!(shown(&p)[1].2, 10);
    }

    #[test]
    fn a_server_that_joins_a_running_pool_ramps_in_over_slow_start() {
        let p = pool("slow_start = \"1h\"\n");
        apply(&p, 1, Change::Joined);
        assert_eq!(
            shown(&p)[1],
            (State::Up, true, 1),
            "a second into an hour-long ramp"
        );
        assert_eq!(shown(&p)[0].2, 10, "the others keep their weight");
        let p = pool("");
        apply(&p, 1, Change::Joined);
        assert_eq!(shown(&p)[1].2, 10, "without slow_start, its weight at once");
    }

    #[tokio::test]
    async fn a_request_queued_under_one_generation_is_woken_by_the_next() {
        let old = pool("");
        let next = Pool::with_servers_of(&config(20, ""), clock(), 1, Some(&old)).unwrap();
        let ticket = old.queued();
        assert_eq!(next.waiting(), 1, "one queue for the pools of one name");
        let woken = ticket.notified();
        next.wake_queue();
        let waited = tokio::time::timeout(Duration::from_secs(5), woken).await;
        assert!(waited.is_ok(), "a request ending in the next pool wakes it");
    }

    #[test]
    fn building_the_next_pool_changes_no_server_and_a_changed_line_ends_the_admins_changes() {
        let old = pool("");
        let admin = |weight| Change::Admin {
            state: None,
            weight: Some(weight),
        };
        apply(&old, 0, admin(40));
        apply(&old, 1, admin(30));
        let next = Pool::with_servers_of(&config(20, ""), clock(), 1, Some(&old)).unwrap();
        assert_eq!(shown(&old)[0], (State::Up, true, 40), "built, not applied");
        assert_eq!(old.backends[0].weight(), 10);
        assert_eq!(
            next.lines_changed().collect::<Vec<_>>(),
            [0],
            ":1 weighs 20 now"
        );
        apply(&next, 0, Change::LineChanged);
        assert_eq!(shown(&next)[0], (State::Up, true, 20), "the line's weight");
        assert_eq!(
            next.backends[0].status.lock().unwrap().reason,
            "its line in the rule file changed"
        );
        assert_eq!(
            shown(&next)[1],
            (State::Up, true, 30),
            "same line: the admin's stays"
        );
        assert!(
            Arc::ptr_eq(&old.backends[1], &next.backends[1]),
            "one server"
        );
    }

    #[test]
    fn a_server_kept_by_a_reload_has_one_state_in_both_pools() {
        let old = pool("[pool.p.health]\nmax_fails = 2\n");
        let next = reloaded(
            &old,
            &config(
                10,
                "[pool.p.health]\nmax_fails = 2\nfail_timeout = \"1h\"\n",
            ),
        );
        let refused = || Change::ExchangeFailed(Failure::broken("refused"));
        // A request of the old generation and one of the new fail on :1.
        apply(&old, 0, refused());
        apply(&next, 0, refused());
        assert_eq!(shown(&old)[0].0, State::Down, "two failures, one count");
        assert_eq!(shown(&next)[0], (State::Down, false, 0));
        // Writers through both pools at once (a check of the old generation, requests of the
        // new) lose no change: the server's own lock records each.
        std::thread::scope(|scope| {
            for pool in [&old, &next] {
                scope.spawn(move || {
                    for _ in 0..500 {
                        apply(pool, 0, refused());
                    }
                });
            }
        });
        assert_eq!(
            old.backends[0].status.lock().unwrap().exchange_failures,
            1002
        );
    }

    /// The admin endpoint, a check, the agent or housekeeping found the pool before a reload
    /// committed: the change reaches the pool that runs now, and its module.
    #[test]
    fn a_change_found_through_a_retired_pool_reaches_the_running_one() {
        let old = pool("");
        let next = Arc::new(reloaded(
            &old,
            &config(10, "[pool.p.health]\nmax_fails = 4\n"),
        ));
        let current = ArcSwap::from_pointee(Generation {
            pools: Box::new([Arc::clone(&next)]),
            ..Generation::empty()
        });
        let drain = Change::Admin {
            state: Some(AdminState::Drain),
            weight: None,
        };
        apply_latest(&current, &old, 0, drain);
        assert!(!shown(&next)[0].1, "the running pool's module is told");
        let weight = Change::Admin {
            state: Some(AdminState::Ready),
            weight: Some(3),
        };
        apply_latest(&current, &old, 0, weight);
        assert_eq!(shown(&next)[0], (State::Up, true, 3));
        // A server the running generation no longer has: nothing happens.
        let gone = ArcSwap::from_pointee(Generation::empty());
        apply_latest(
            &gone,
            &old,
            1,
            Change::Admin {
                state: Some(AdminState::Maint),
                weight: None,
            },
        );
        assert_eq!(shown(&old)[1], (State::Up, true, 10));
    }
}
