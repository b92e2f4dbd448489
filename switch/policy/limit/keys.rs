//! The keys of one limit in bounded memory: an LRU of at most `max_keys` entries, and beside it
//! a fixed array of overflow slots that remembers, conservatively, the buckets of keys evicted.
//!
//! When the LRU is full, the least recently used key is evicted and its `tat` goes into slot
//! `hash(key) % SLOTS` as `max(slot, tat)`. A key that is not in the LRU (new, or evicted and
//! back) starts from that slot's value: an evicted key resumes at least where it was, so that
//! a client cannot win a fresh burst by pushing itself out with a stream of other keys (or by
//! waiting for other clients to). Keys sharing a slot can only be stricter, never freer: a
//! slot holds the latest `tat` of the keys that fell into it, and a new key whose slot is
//! ahead of now starts with less than its burst. Slots decay by time alone (a `tat` in the
//! past is a full bucket), so a slot constrains for at most `burst * T` after its last key
//! left. The hash is std's SipHash with a per-table random key: a client cannot choose keys
//! that land on a victim's slot, nor that collide in the LRU's map.
//!
//! The LRU (the `lru` crate) holds each key once as a `Box<[u8]>`: a new key allocates it (and
//! its node, until the table is full: from then on an evicted key's node is freed and a new
//! one made); a known key's check hashes, finds and relinks it, and allocates nothing.

use std::collections::hash_map::RandomState;
use std::hash::BuildHasher;

use lru::LruCache;

use super::Nanos;

/// Overflow slots per table: 4096 `u64` (32 KiB), a fixed cost per limit. Keys evicted while
/// their bucket is not yet full share these; with fewer such keys than slots, most have a
/// slot of their own.
pub(super) const SLOTS: usize = 4096;

/// The state of one key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Entry {
    /// Its bucket's theoretical arrival time (`bucket.rs`), in nanoseconds since the epoch.
    pub tat: Nanos,
    /// Requests admitted here since the store's last exchange for this key (only counted while
    /// the store is reachable: `touched.rs`).
    pub pending: u32,
    /// Listed for the store's next exchange.
    pub touched: bool,
}

impl Entry {
    pub fn new(tat: Nanos) -> Entry {
        Entry {
            tat,
            pending: 0,
            touched: false,
        }
    }
}

/// The keys of one limit.
pub(super) struct Table {
    lru: LruCache<Box<[u8]>, Entry, RandomState>,
    max_keys: usize,
    overflow: Box<[Nanos]>,
    overflow_hasher: RandomState,
}

impl Table {
    /// A table for at most `max_keys` keys (0 is taken as 1). Nothing is reserved for them:
    /// the map grows with the keys it meets.
    pub fn new(max_keys: usize) -> Table {
        Table {
            lru: LruCache::unbounded_with_hasher(RandomState::new()),
            max_keys: max_keys.max(1),
            overflow: vec![0; SLOTS].into_boxed_slice(),
            overflow_hasher: RandomState::new(),
        }
    }

    /// Keys held.
    pub fn len(&self) -> usize {
        self.lru.len()
    }

    /// Runs `visit` on the entry of `key`, made when the key is not held (starting from its
    /// overflow slot, after evicting the least recently used key if the table is full), and
    /// marks the key as the most recently used.
    #[inline]
    pub fn visit<R>(&mut self, key: &[u8], visit: impl FnOnce(&mut Entry) -> R) -> R {
        if let Some(entry) = self.lru.get_mut(key) {
            return visit(entry);
        }
        self.make_room();
        let start = self.overflow[self.slot(key)];
        let entry = self
            .lru
            .get_or_insert_mut(Box::from(key), || Entry::new(start));
        visit(entry)
    }

    /// The entry of `key` if it is held, without changing its place in the LRU (the sync task
    /// reads and merges entries; only requests make a key recent).
    pub fn peek_mut(&mut self, key: &[u8]) -> Option<&mut Entry> {
        self.lru.peek_mut(key)
    }

    /// Forgets every entry's `pending` count and `touched` mark: the store went away, or the
    /// list of touched keys was dropped.
    pub fn clear_sync_marks(&mut self) {
        for (_, entry) in self.lru.iter_mut() {
            entry.pending = 0;
            entry.touched = false;
        }
    }

    /// Evicts least recently used keys until one more fits, each one's `tat` kept in its slot.
    fn make_room(&mut self) {
        while self.lru.len() >= self.max_keys {
            let Some((key, entry)) = self.lru.pop_lru() else {
                break;
            };
            let slot = self.slot(&key);
            self.overflow[slot] = self.overflow[slot].max(entry.tat);
        }
    }

    fn slot(&self, key: &[u8]) -> usize {
        // The remainder of a division by SLOTS fits in usize.
        (self.overflow_hasher.hash_one(key) % SLOTS as u64) as usize
    }
}

#[cfg(test)]
mod tests {
    use super::super::bucket::Gcra;
    use super::super::Rate;
    use super::*;
    use std::time::Duration;

    const SECOND: Nanos = 1_000_000_000;

    fn gcra() -> Gcra {
        // 10/s, burst 10: T = 100 ms, tolerance 900 ms.
        Gcra::new(
            &Rate {
                count: 10,
                per: Duration::from_secs(1),
            },
            10,
        )
    }

    /// Requests of `key` at `now` until one is refused: how many were admitted.
    fn drain(table: &mut Table, gcra: &Gcra, key: &[u8], now: Nanos) -> u32 {
        let mut admitted = 0;
        while table
            .visit(key, |entry| gcra.admit(&mut entry.tat, now))
            .is_ok()
        {
            admitted += 1;
            assert!(admitted <= 1000, "the bucket never ran dry");
        }
        admitted
    }

    #[test]
    fn the_bound_holds_under_ten_times_the_keys() {
        let gcra = gcra();
        let mut table = Table::new(100);
        let now = 1_000 * SECOND;
        for n in 0..1000u32 {
            let admitted = table.visit(&n.to_be_bytes(), |e| gcra.admit(&mut e.tat, now));
            assert!(table.len() <= 100, "{} keys after {n}", table.len());
            // Each new key has at most its own burst; slots shared by earlier keys (each of
            // which sent one request) may make it stricter, never refuse a first request
            // outright: one request leaves a slot at now + T, within the tolerance.
            assert_eq!(admitted, Ok(()), "key {n}");
        }
        assert_eq!(table.len(), 100);
    }

    #[test]
    fn an_evicted_key_comes_back_with_no_free_burst() {
        let gcra = gcra();
        let mut table = Table::new(10);
        let now = 1_000 * SECOND;
        assert_eq!(
            drain(&mut table, &gcra, b"client", now),
            10,
            "a fresh burst"
        );
        // Ten other keys push it out (each sends one request).
        for n in 0..10u32 {
            let _ = table.visit(&n.to_be_bytes(), |e| gcra.admit(&mut e.tat, now));
        }
        assert!(table.peek_mut(b"client").is_none(), "evicted");
        // Back at once: nothing left, as if it had never left.
        assert_eq!(drain(&mut table, &gcra, b"client", now), 0);
        // Evicted again, and back 300 ms later: three intervals' worth, exactly what a key
        // never evicted has (its tat is now + 1 s, the tolerance 900 ms), not a burst of 10.
        for n in 100..110u32 {
            let _ = table.visit(&n.to_be_bytes(), |e| gcra.admit(&mut e.tat, now));
        }
        assert!(table.peek_mut(b"client").is_none(), "evicted again");
        assert_eq!(drain(&mut table, &gcra, b"client", now + 300_000_000), 3);
        let mut kept = Table::new(10);
        assert_eq!(drain(&mut kept, &gcra, b"client", now), 10);
        assert_eq!(drain(&mut kept, &gcra, b"client", now + 300_000_000), 3);
    }

    #[test]
    fn keys_sharing_a_slot_are_only_stricter() {
        let gcra = gcra();
        let mut table = Table::new(1);
        let now = 1_000 * SECOND;
        // Find two keys with the same slot.
        let first = b"first".to_vec();
        let slot = table.slot(&first);
        let twin = (0u32..)
            .map(|n| format!("twin-{n}").into_bytes())
            .find(|key| table.slot(key) == slot)
            .expect("a key with the same slot among the first few thousand");
        let other = (0u32..)
            .map(|n| format!("other-{n}").into_bytes())
            .find(|key| table.slot(key) != slot)
            .expect("a key with another slot");
        assert_eq!(drain(&mut table, &gcra, &first, now), 10);
        // `first` is evicted by `other` (max_keys 1): its tat goes to the shared slot.
        assert_eq!(drain(&mut table, &gcra, &other, now), 10);
        // The twin, never seen, starts from the slot: nothing now, and never more than a key
        // of its own would have (a full burst once the slot is in the past).
        assert_eq!(drain(&mut table, &gcra, &twin, now), 0);
        assert_eq!(drain(&mut table, &gcra, b"first", now + 200_000_000), 2);
        assert_eq!(drain(&mut table, &gcra, &twin, now + 5 * SECOND), 10);
        // A key of another slot is untouched by all this: a fresh burst.
        let mut fresh = Table::new(1);
        fresh.overflow_hasher = table.overflow_hasher.clone();
        assert_eq!(drain(&mut fresh, &gcra, &twin, now), 10);
    }
}
