use std::net::IpAddr;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};

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
    /// The host the request is for, without port, lower case.
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
#[derive(Debug)]
pub struct ServerState {
    weight: AtomicU32,
    up: AtomicBool,
    active: AtomicU32,
    /// Most requests in flight at once; 0 means no limit.
    max_active: u32,
}

impl ServerState {
    pub fn new(weight: u32) -> Self {
        Self::with_limit(weight, 0)
    }

    pub fn with_limit(weight: u32, max_active: u32) -> Self {
        ServerState {
            weight: AtomicU32::new(weight),
            up: AtomicBool::new(true),
            active: AtomicU32::new(0),
            max_active,
        }
    }

    /// The `max_conns` limit; 0 means none.
    pub fn max_active(&self) -> u32 {
        self.max_active
    }

    /// At its `max_conns` limit: the switch skips it for new requests.
    pub fn is_full(&self) -> bool {
        self.max_active > 0 && self.active() >= self.max_active
    }

    pub fn weight(&self) -> u32 {
        self.weight.load(Ordering::Relaxed)
    }

    pub fn set_weight(&self, weight: u32) {
        self.weight.store(weight, Ordering::Relaxed);
    }

    pub fn is_up(&self) -> bool {
        self.up.load(Ordering::Relaxed)
    }

    pub fn set_up(&self, up: bool) {
        self.up.store(up, Ordering::Relaxed);
    }

    /// Requests in flight at this server (LVS "ActiveConn").
    pub fn active(&self) -> u32 {
        self.active.load(Ordering::Relaxed)
    }

    /// Up and not quiescent: may receive new work.
    pub fn is_usable(&self) -> bool {
        self.is_up() && self.weight() > 0
    }

    pub fn add_active(&self) {
        self.active.fetch_add(1, Ordering::Relaxed);
    }

    /// Counts one more active request unless the server is at its limit; true if counted.
    pub fn try_add_active(&self) -> bool {
        let limit = self.max_active;
        self.active
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| {
                (limit == 0 || n < limit).then_some(n + 1)
            })
            .is_ok()
    }

    pub fn remove_active(&self) {
        // A saturating decrement: a bookkeeping slip elsewhere must not wrap the counter and
        // make the server look infinitely loaded.
        let _ = self
            .active
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1));
    }
}

/// The servers of one pool, in rule-file order; a server's index is its identity for modules.
#[derive(Clone, Copy, Debug)]
pub struct PoolView<'a> {
    pub servers: &'a [ServerState],
}
