//! Scheduling modules of tcpvs.
//!
//! A module decides which server of a pool gets a request. It is pure logic: it never touches a
//! socket, never sleeps and never spawns; it sees a read-only [`RequestView`] and a [`PoolView`]
//! whose load counters the switch keeps up to date. This is the KTCPVS `tcp_vs_scheduler` and
//! HAProxy `lbprm` idea, with Pingora's "candidates in preference order" made explicit through
//! the `tried` argument of [`Scheduler::pick`]: the switch asks again, naming the servers it
//! already tried, when a connection fails.
//!
//! One file per module; [`registry`] maps the names used in rule files to constructors.

pub mod clock;
pub mod cookie;
pub mod hash;
pub mod key;
pub mod lard;
mod lard_common;
mod lard_heat;
mod lard_placement;
pub mod lard_r;
mod lard_spill;
mod lard_thresholds;
pub mod lc;
mod load;
mod options;
pub mod registry;
mod ring;
pub mod rr;
pub mod source_hash;
mod suggest;
mod view;
pub mod wlc;
pub mod wrr;

pub use clock::{Clock, ManualClock, MonotonicClock};
pub use options::{OptionError, OptionValue, Options};
pub use registry::{build, BuildContext, BuildError, MODULE_NAMES};
pub use suggest::suggest;
pub use view::{HeaderLookup, Load, PoolView, RequestView, ServerState};

use std::fmt;
use std::num::NonZeroU64;

/// A server-selection policy for one pool.
///
/// Implementations are shared by every worker thread, so they keep their own state in atomics
/// or behind short locks.
pub trait Scheduler: Send + Sync + fmt::Debug {
    /// The name the rule file uses (`wlc`, `rr`, ...).
    fn name(&self) -> &'static str;

    /// The preferred server for `request`, skipping every index in `tried`.
    ///
    /// Calling again with the previous answers appended to `tried` yields the next candidates in
    /// preference order. `None` means no usable server is left: every remaining one is down,
    /// quiescent (weight 0) or already tried.
    fn pick(
        &self,
        request: &RequestView<'_>,
        pool: &PoolView<'_>,
        tried: &[usize],
    ) -> Option<usize>;

    /// [`Scheduler::pick`], with a [`Ticket`] the switch hands back to
    /// [`Scheduler::request_ended`] when the request stops occupying the server it gets: for
    /// modules that learn from how long requests take. The switch calls this one.
    fn pick_with_ticket(
        &self,
        request: &RequestView<'_>,
        pool: &PoolView<'_>,
        tried: &[usize],
    ) -> Option<(usize, Ticket)> {
        self.pick(request, pool, tried).map(|s| (s, Ticket::NONE))
    }

    /// The request that [`Scheduler::pick_with_ticket`] issued `ticket` for stopped occupying
    /// `server`, after [`Scheduler::connection_ended`]. Called only for issued tickets.
    fn request_ended(&self, _server: usize, _ticket: Ticket) {}

    /// A request started occupying `server` (HAProxy `take_conn`). The switch has already
    /// counted it in the server's active connections.
    fn connection_started(&self, _server: usize) {}

    /// A request stopped occupying `server` (HAProxy `drop_conn`).
    fn connection_ended(&self, _server: usize) {}

    /// A server went up or down or changed weight.
    fn servers_changed(&self, _pool: &PoolView<'_>) {}

    /// A field the switch should add to the response of `request`, which went to `server`
    /// (the `cookie` module's Set-Cookie). Asked once per request, after the server is known.
    fn response_field(&self, _request: &RequestView<'_>, _server: usize) -> Option<ResponseField> {
        None
    }
}

/// What a module attached to one of its picks, handed back when the request ends (a time and a
/// flag, for `lard`'s spills). Most picks carry none, and then nothing is handed back.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Ticket(Option<NonZeroU64>);

impl Ticket {
    pub const NONE: Ticket = Ticket(None);

    /// A ticket carrying `value` (any but `u64::MAX`, which saturates to `u64::MAX - 1`).
    pub fn issued(value: u64) -> Ticket {
        Ticket(NonZeroU64::new(value.saturating_add(1)))
    }

    /// The value it carries, if it was issued.
    pub fn get(self) -> Option<u64> {
        self.0.map(|v| v.get() - 1)
    }
}

/// A response header field a module asks for. The switch validates it before sending.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ResponseField {
    pub name: &'static str,
    pub value: String,
}

#[cfg(test)]
pub(crate) mod testing {
    use crate::{HeaderLookup, RequestView, ServerState};
    use std::net::{IpAddr, Ipv4Addr};

    pub struct NoHeaders;
    impl HeaderLookup for NoHeaders {
        fn header(&self, _name: &str) -> Option<&[u8]> {
            None
        }
    }

    /// Header fields for tests: (lower-case name, value).
    pub struct Headers(pub Vec<(&'static str, &'static [u8])>);
    impl HeaderLookup for Headers {
        fn header(&self, name: &str) -> Option<&[u8]> {
            self.0
                .iter()
                .find(|(n, _)| n.eq_ignore_ascii_case(name))
                .map(|(_, v)| *v)
        }
    }

    /// Sets the active counts of the listed servers.
    pub fn set_active(servers: &[ServerState], loads: &[(usize, u32)]) {
        for &(i, n) in loads {
            while servers[i].active() > n {
                servers[i].remove_active();
            }
            while servers[i].active() < n {
                servers[i].add_active();
            }
        }
    }

    pub fn request() -> RequestView<'static> {
        RequestView {
            method: "GET",
            path: b"/",
            query: None,
            host: None,
            headers: &NoHeaders,
            client: IpAddr::V4(Ipv4Addr::LOCALHOST),
        }
    }

    /// What a module is built with for `servers`: addresses 10.0.0.1:80 and up, a manual
    /// clock. The identities are leaked: a test's few bytes.
    pub fn context(servers: &[ServerState]) -> crate::BuildContext<'_> {
        let ids: Vec<String> = (0..servers.len())
            .map(|i| format!("10.0.0.{}:80", i + 1))
            .collect();
        crate::BuildContext {
            pool: crate::PoolView { servers },
            server_ids: Box::leak(ids.into_boxed_slice()),
            clock: std::sync::Arc::new(crate::ManualClock::new()),
        }
    }

    pub fn pool_of(weights: &[u32]) -> Vec<ServerState> {
        weights.iter().map(|&w| ServerState::new(w)).collect()
    }

    /// For `lard` and `lard-r` in an idle pool (`pick` asks for one path): `/hot` asked for
    /// `8 HOT_SHARE` times, then paths until one lands on `/hot`'s server, asked for once, so
    /// that with `auto` it stays cold for a few requests more. Returns `(the cold target's
    /// path, their server)`.
    pub fn hot_and_cold_on_one_server(
        mut pick: impl FnMut(&'static [u8]) -> usize,
    ) -> (&'static [u8], usize) {
        const CANDIDATES: [&[u8]; 16] = [
            b"/c0", b"/c1", b"/c2", b"/c3", b"/c4", b"/c5", b"/c6", b"/c7", b"/c8", b"/c9",
            b"/c10", b"/c11", b"/c12", b"/c13", b"/c14", b"/c15",
        ];
        let home = pick(b"/hot");
        for _ in 1..8 * crate::lard_heat::HOT_SHARE {
            assert_eq!(pick(b"/hot"), home);
        }
        let cold = CANDIDATES
            .into_iter()
            .find(|&path| pick(path) == home)
            .expect("one of 16 targets shares a server with /hot");
        (cold, home)
    }
}
