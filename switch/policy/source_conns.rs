//! What each client address holds at once, counted while it holds it:
//!
//! - `[virtual.NAME] max_conns_per_source`: client connections open at once per client
//!   address (the one a PROXY header names, if the service takes them), idle kept-alive ones
//!   included, and an HTTP/2 connection's streams beyond its first, as nginx's `limit_conn`
//!   keyed by `$binary_remote_addr` (which counts HTTP/2 streams). This count lives beside the
//!   service's counters and is kept across reloads with them;
//! - what each source holds in the whole switch (`Shared::source_load`): its client
//!   connections and running HTTP/2 streams, which decide who may take the last quarter of
//!   `max_clients` (capacity/share.rs). There a source is an IPv6 client's /64 network, not its
//!   address ([`Grouping::Ipv6Networks`]): a /64 is one subscriber's LAN, and its 2^64
//!   addresses would each be a fresh source (HAProxy users key stick tables by
//!   `ipv6_mask(64)` for the same reason). `max_conns_per_source` stays per address, as the
//!   README defines it and nginx's `limit_conn` keys it.
//!
//! Either holds one entry per source with something open, so its memory follows the
//! connections themselves.

use std::collections::hash_map::Entry;
use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex, PoisonError};

/// What clients hold at once, by source.
#[derive(Debug, Default)]
pub struct SourceConns {
    open: Mutex<HashMap<SourceKey, u32>>,
    grouping: Grouping,
}

/// A source as one number: an IPv4 address in its IPv4-mapped IPv6 form, an IPv6 address or
/// /64 as its bits. Every connection enters and leaves the switch-wide table, and hashing an
/// `IpAddr` takes several writes into SipHash where a `u128` takes one: with the entry API
/// (one hash where `get_mut` then `remove` took two), the table's cost per connection fell
/// by 300 of some 1000 user-space instructions (`CLOSE=1 benches/instructions.sh`). The
/// hasher stays std's SipHash: clients choose the keys (a keyed fast hash such as foldhash
/// would save about 300 more, with only "minimal" resistance to crafted collisions).
type SourceKey = u128;

/// What one source is.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Grouping {
    /// Each client address (an IPv4-mapped IPv6 address as its IPv4 one).
    #[default]
    Addresses,
    /// Each IPv4 address, each IPv6 /64 network.
    Ipv6Networks,
}

impl Grouping {
    /// The source `address` belongs to. An IPv4 key has non-zero low 64 bits (`ffff` and the
    /// address), so it is never an IPv6 /64's key, whose low 64 bits are zero.
    fn source(self, address: IpAddr) -> SourceKey {
        match (self, address.to_canonical()) {
            (_, IpAddr::V4(v4)) => u128::from(v4.to_ipv6_mapped()),
            (Grouping::Addresses, IpAddr::V6(v6)) => u128::from(v6),
            (Grouping::Ipv6Networks, IpAddr::V6(v6)) => u128::from(v6) & !u128::from(u64::MAX),
        }
    }
}

/// One open connection, counted until it drops.
#[derive(Debug)]
pub struct SourceGuard {
    conns: Arc<SourceConns>,
    source: SourceKey,
}

impl SourceConns {
    /// A table whose sources are grouped by `grouping`.
    pub fn grouped(grouping: Grouping) -> SourceConns {
        SourceConns {
            open: Mutex::default(),
            grouping,
        }
    }

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
        let source = self.grouping.source(address);
        let mut open = self.open.lock().unwrap_or_else(PoisonError::into_inner);
        match open.entry(source) {
            Entry::Occupied(mut held) => {
                if !admits(*held.get()) {
                    return None;
                }
                *held.get_mut() += 1;
            }
            Entry::Vacant(none) => {
                if !admits(0) {
                    return None;
                }
                none.insert(1);
            }
        }
        Some(SourceGuard {
            conns: Arc::clone(self),
            source,
        })
    }

    /// Connections open now from `address`.
    #[cfg(test)]
    pub(crate) fn open_from(&self, address: IpAddr) -> u32 {
        let open = self.open.lock().unwrap_or_else(PoisonError::into_inner);
        open.get(&self.grouping.source(address))
            .copied()
            .unwrap_or(0)
    }
}

impl Drop for SourceGuard {
    fn drop(&mut self) {
        let mut open = self
            .conns
            .open
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if let Entry::Occupied(mut held) = open.entry(self.source) {
            *held.get_mut() -= 1;
            if *held.get() == 0 {
                held.remove();
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

    #[test]
    fn addresses_are_sources_unless_ipv6_is_grouped_by_network() {
        let one: IpAddr = "2001:db8:1:2:aaaa::1".parse().unwrap();
        let same_lan: IpAddr = "2001:db8:1:2:ffff:ffff:ffff:ffff".parse().unwrap();
        let next_lan: IpAddr = "2001:db8:1:3::1".parse().unwrap();
        let v4: IpAddr = "192.0.2.7".parse().unwrap();
        let mapped: IpAddr = "::ffff:192.0.2.7".parse().unwrap();

        let by_address = Arc::new(SourceConns::default());
        let _first = by_address.enter(one, 1).unwrap();
        assert!(by_address.enter(same_lan, 1).is_some(), "another address");

        let by_network = Arc::new(SourceConns::grouped(Grouping::Ipv6Networks));
        let first = by_network.enter(one, 1).unwrap();
        assert!(by_network.enter(same_lan, 1).is_none(), "the same /64");
        let _other = by_network.enter(next_lan, 1).unwrap();
        assert_eq!(by_network.open_from(same_lan), 1);
        drop(first);
        assert_eq!(by_network.open_from(one), 0);
        // IPv4, mapped or not, is one source per address.
        let _v4 = by_network.enter(v4, 1).unwrap();
        assert!(by_network.enter(mapped, 1).is_none());
        assert!(by_network.enter("192.0.2.8".parse().unwrap(), 1).is_some());
    }
}
