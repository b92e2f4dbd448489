use std::net::IpAddr;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;

/// Case-insensitive access to the request's header fields, implemented by the switch over its
/// parsed request head so that a module sees headers without any copy.
pub trait HeaderLookup {
    /// The value of the first field named `name` (ASCII case-insensitive).
    fn header(&self, name: &str) -> Option<&[u8]>;
}

/// What a module may know about a request. Everything is borrowed from the switch's buffers.
#[derive(Clone, Copy)]
pub struct RequestView<'a> {
    pub method: &'a str,
    /// The path of the request target, without the query, as sent by the client.
    pub path: &'a [u8],
    /// The query after `?`, if any, without the `?`.
    pub query: Option<&'a [u8]>,
    /// The host the request is for, in the switch's normal form: without port, lower case,
    /// without a trailing dot (`Admin.Example.Org.:80` is `admin.example.org`), so that one
    /// site is one key. A module used elsewhere still folds the case, as `key = "host"` does.
    pub host: Option<&'a [u8]>,
    pub headers: &'a dyn HeaderLookup,
    pub client: IpAddr,
}

impl std::fmt::Debug for RequestView<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RequestView")
            .field("method", &self.method)
            .field("path", &String::from_utf8_lossy(self.path))
            .field("client", &self.client)
            .finish_non_exhaustive()
    }
}

/// The live state of one server that scheduling depends on. The switch owns these and updates
/// them; modules only read them.
///
/// Weight, health and active count share one atomic word, so a module reads a consistent
/// [`Load`] of a server with a single load: picking among 64 servers stays a short loop.
///
/// A `ServerState` is a handle: its clones share one state. When the switch reloads its rule
/// file, a server that stays in its pool keeps its state (requests still in flight under the
/// old rules end on the same count the new rules read), so the next pool's view is made of
/// clones of the last one's.
#[derive(Clone, Debug)]
pub struct ServerState(Arc<Cells>);

#[derive(Debug)]
struct Cells {
    /// Bits 0..32: active requests; bits 32..48: weight; bit 48: down; bit 49: draining.
    state: AtomicU64,
    /// Most requests in flight at once; 0 means no limit. Atomic because the switch lowers it
    /// for a while (a server on trial after a failure takes one request at a time).
    max_active: AtomicU32,
}

const WEIGHT_SHIFT: u32 = 32;
const WEIGHT_MASK: u64 = 0xffff << WEIGHT_SHIFT;
const DOWN: u64 = 1 << 48;
const DRAINING: u64 = 1 << 49;
const ACTIVE_MASK: u64 = 0xffff_ffff;

/// One server's figures, read together.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Load {
    pub active: u32,
    pub weight: u32,
    pub up: bool,
    /// Draining: keeps its requests and its persistent clients, gets no new ones.
    pub draining: bool,
}

impl Load {
    /// Up, not quiescent and not draining: may receive new work.
    pub fn is_usable(self) -> bool {
        self.up && self.weight > 0 && !self.draining
    }

    /// May take a request of a client that persists on it (a cookie): up and not quiescent,
    /// draining or not.
    pub fn keeps_persistent(self) -> bool {
        self.up && self.weight > 0
    }
}

impl ServerState {
    pub fn new(weight: u32) -> Self {
        Self::with_limit(weight, 0)
    }

    /// `weight` is capped at 65535, the rule file's maximum.
    pub fn with_limit(weight: u32, max_active: u32) -> Self {
        ServerState(Arc::new(Cells {
            state: AtomicU64::new(u64::from(weight.min(0xffff)) << WEIGHT_SHIFT),
            max_active: AtomicU32::new(max_active),
        }))
    }

    /// The two handles share one state.
    pub fn same_as(&self, other: &ServerState) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }

    /// Weight, health and active count in one read.
    pub fn load(&self) -> Load {
        let v = self.0.state.load(Ordering::Relaxed);
        Load {
            active: (v & ACTIVE_MASK) as u32,
            weight: ((v & WEIGHT_MASK) >> WEIGHT_SHIFT) as u32,
            up: v & DOWN == 0,
            draining: v & DRAINING != 0,
        }
    }

    /// The limit of requests in flight (`max_conns`); 0 means none.
    pub fn max_active(&self) -> u32 {
        self.0.max_active.load(Ordering::Relaxed)
    }

    /// Sets the limit of requests in flight; 0 means none.
    pub fn set_max_active(&self, limit: u32) {
        self.0.max_active.store(limit, Ordering::Relaxed);
    }

    /// At its limit: the switch skips it for new requests.
    pub fn is_full(&self) -> bool {
        let limit = self.max_active();
        limit > 0 && self.active() >= limit
    }

    pub fn weight(&self) -> u32 {
        self.load().weight
    }

    pub fn set_weight(&self, weight: u32) {
        let w = u64::from(weight.min(0xffff)) << WEIGHT_SHIFT;
        let _ = self
            .0
            .state
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |v| {
                Some((v & !WEIGHT_MASK) | w)
            });
    }

    pub fn is_up(&self) -> bool {
        self.load().up
    }

    pub fn set_up(&self, up: bool) {
        if up {
            self.0.state.fetch_and(!DOWN, Ordering::Relaxed);
        } else {
            self.0.state.fetch_or(DOWN, Ordering::Relaxed);
        }
    }

    pub fn set_draining(&self, draining: bool) {
        if draining {
            self.0.state.fetch_or(DRAINING, Ordering::Relaxed);
        } else {
            self.0.state.fetch_and(!DRAINING, Ordering::Relaxed);
        }
    }

    /// Requests in flight at this server (LVS "ActiveConn").
    pub fn active(&self) -> u32 {
        self.load().active
    }

    /// Up and not quiescent: may receive new work.
    pub fn is_usable(&self) -> bool {
        self.load().is_usable()
    }

    pub fn add_active(&self) {
        let _ = self
            .0
            .state
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |v| {
                ((v & ACTIVE_MASK) < ACTIVE_MASK).then_some(v + 1)
            });
    }

    /// Counts one more active request unless the server is at its limit; true if counted.
    pub fn try_add_active(&self) -> bool {
        let limit = u64::from(self.max_active());
        self.0
            .state
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |v| {
                let active = v & ACTIVE_MASK;
                ((limit == 0 || active < limit) && active < ACTIVE_MASK).then_some(v + 1)
            })
            .is_ok()
    }

    pub fn remove_active(&self) {
        // A saturating decrement: a bookkeeping slip elsewhere must not wrap the counter and
        // make the server look infinitely loaded.
        let _ = self
            .0
            .state
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |v| {
                (v & ACTIVE_MASK > 0).then(|| v - 1)
            });
    }
}

#[cfg(test)]
mod tests {
    use super::ServerState;

    #[test]
    fn packed_fields_stay_apart() {
        let s = ServerState::with_limit(65_535, 2);
        assert!(s.try_add_active() && s.try_add_active());
        assert!(!s.try_add_active(), "at max_conns");
        s.set_up(false);
        s.set_weight(7);
        let l = s.load();
        assert_eq!((l.active, l.weight, l.up), (2, 7, false));
        s.remove_active();
        s.remove_active();
        s.remove_active();
        assert_eq!(s.active(), 0, "never below zero");
        s.set_up(true);
        assert!(s.is_usable());
        s.set_draining(true);
        assert!(!s.is_usable() && s.load().keeps_persistent());
        assert_eq!(s.active(), 0);
        s.set_draining(false);
        assert!(s.is_usable());
        s.set_weight(100_000);
        assert_eq!(s.weight(), 65_535);
    }
}

/// The servers of one pool, in rule-file order; a server's index is its identity for modules.
#[derive(Clone, Copy, Debug)]
pub struct PoolView<'a> {
    pub servers: &'a [ServerState],
}
