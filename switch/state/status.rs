//! What is recorded of a server's health and admin state ([`ServerStatus`]), and the state
//! it is shown in. Written only by `control::apply`.

use std::fmt;
use std::time::Instant;

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
    /// A check has passed since the server joined the switch: until then one passing check
    /// brings it up (see `Change::CheckPassed`).
    pub check_passed_once: bool,
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
            check_passed_once: false,
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
