//! What each client address holds at once, counted while it holds it:
//!
//! - `[virtual.NAME] max_conns_per_source`: client connections open at once per client
//!   address (the one a PROXY header names, if the service takes them), idle kept-alive ones
//!   included, and an HTTP/2 connection's streams beyond its first, as nginx's `limit_conn`
//!   keyed by `$binary_remote_addr` (which counts HTTP/2 streams). This count lives beside the
//!   service's counters and is kept across reloads with them;
//! - the HTTP/2 streams running in the whole switch per address (`Shared::stream_sources`),
//!   which decide who may take the last quarter of `max_clients` (connection/h2/admission.rs).
//!
//! Either holds one entry per address with something open, so its memory follows the
//! connections themselves.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex, PoisonError};

/// The open connections of one service, by client address.
#[derive(Debug, Default)]
pub struct SourceConns {
    open: Mutex<HashMap<IpAddr, u32>>,
}

/// One open connection, counted until it drops.
#[derive(Debug)]
pub struct SourceGuard {
    conns: Arc<SourceConns>,
    address: IpAddr,
}

impl SourceConns {
    /// Counts a connection from `address` if fewer than `cap` are open; `None`: it is over.
    pub fn enter(self: &Arc<Self>, address: IpAddr, cap: u32) -> Option<SourceGuard> {
        self.enter_if(address, |held| held < cap)
    }

    /// Counts one more for `address` if `admits` says yes to what it holds now (read and
    /// counted under one lock); `None`: refused.
    pub fn enter_if(
        self: &Arc<Self>,
        address: IpAddr,
        admits: impl FnOnce(u32) -> bool,
    ) -> Option<SourceGuard> {
        let address = address.to_canonical();
        let mut open = self.open.lock().unwrap_or_else(PoisonError::into_inner);
        let count = open.entry(address).or_insert(0);
        if !admits(*count) {
            if *count == 0 {
                open.remove(&address);
            }
            return None;
        }
        *count += 1;
        Some(SourceGuard {
            conns: Arc::clone(self),
            address,
        })
    }

    /// Connections open now from `address`.
    #[cfg(test)]
    pub(crate) fn open_from(&self, address: IpAddr) -> u32 {
        let open = self.open.lock().unwrap_or_else(PoisonError::into_inner);
        open.get(&address.to_canonical()).copied().unwrap_or(0)
    }
}

impl Drop for SourceGuard {
    fn drop(&mut self) {
        let mut open = self
            .conns
            .open
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some(count) = open.get_mut(&self.address) {
            *count -= 1;
            if *count == 0 {
                open.remove(&self.address);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cap_holds_per_address_and_frees_on_drop() {
        let conns = Arc::new(SourceConns::default());
        let a: IpAddr = "10.0.0.1".parse().unwrap();
        let mapped: IpAddr = "::ffff:10.0.0.1".parse().unwrap();
        let b: IpAddr = "10.0.0.2".parse().unwrap();
        let first = conns.enter(a, 2).unwrap();
        let second = conns.enter(mapped, 2).unwrap();
        assert!(conns.enter(a, 2).is_none(), "the third from one address");
        let other = conns.enter(b, 2).unwrap();
        assert_eq!(conns.open_from(a), 2);
        drop(first);
        let third = conns.enter(a, 2).unwrap();
        drop((second, third, other));
        assert_eq!(conns.open_from(a), 0);
        assert!(
            conns.open.lock().unwrap().is_empty(),
            "no entry left behind"
        );
        assert!(conns.enter(a, 0).is_none());
        assert!(conns.open.lock().unwrap().is_empty());
    }
}
