//! The keys of one limit in bounded memory: an LRU of at most `max_keys` entries, and beside it
//! a fixed table of overflow slots that remembers the buckets of keys evicted, each beside a
//! fingerprint of its key.
//!
//! A keyed hash of each key (std's SipHash, a random key per table) gives its set (4 slots,
//! one cache line; from the hash's low 32 bits) and its fingerprint (the high 32 bits). When
//! the LRU is full, the least recently used key is evicted, and if its bucket is not full
//! (`tat` after now) its `tat` is written with its fingerprint into a slot of its set: the
//! slot of the same fingerprint if there is one, else the slot of the earliest `tat`, when
//! that one has passed (nothing left to protect) or is earlier than the evicted key's (the
//! slots keep the most state). A key that is not in the LRU (new, or evicted and back) starts
//! from the slot of its set that carries its fingerprint, and frees it; with none, it starts
//! with a full bucket.
//!
//! - A key seen for the first time gets its full `burst`: other keys' history reaches it only
//!   if one of the 4 fingerprints of its set equals its own, a chance of 4 in 2^32 per new key
//!   (a client cannot aim at it: the hash is keyed with a secret of this process).
//! - An evicted key that comes back gets **no free burst**: it resumes where it was, as long
//!   as its slot was not taken. Its slot is taken only when 4 other evicted keys whose `tat`
//!   is later than its own, and still ahead of now, fall into its set: only while more keys
//!   with part of their bucket used than the table holds plus the slots are in play. Then it does start afresh, and
//!   that gives a client nothing it does not have already: pushing its key out takes
//!   `max_keys` other keys, taking its slot about as many more as there are slots, all with
//!   their buckets used up; with that many keys it has that many fresh bursts anyway. The
//!   LRU's keys and the slots are sized from `max_keys`, so this holds at every size.
//! - Slots decay by time alone: a `tat` in the past is a full bucket, and such a slot is the
//!   first to be written over.
//!
//! Memory: the slots are `max(4096, max_keys / 2)`, rounded up to whole sets of 4, 16 bytes
//! each (64 KiB at least; 800 KB at the default `max_keys` of 100000), fixed once the table
//! is made.
//!
//! The LRU (the `lru` crate) holds each key once as a `Box<[u8]>`: a new key allocates it (and
//! its node, until the table is full: from then on an evicted key's node is freed and a new
//! one made); a known key's check hashes, finds and relinks it, and allocates nothing.

use std::collections::hash_map::RandomState;
use std::hash::BuildHasher;

use lru::LruCache;

use super::Nanos;

/// Slots per set: four of 16 bytes are one 64-byte cache line.
const WAYS: usize = 4;
/// Overflow slots at least, whatever `max_keys`.
const MIN_SLOTS: usize = 4096;
/// Sets at most: the set is taken from 32 bits of the hash (and `max_keys` is at most 10^8,
/// which asks for 1.25 * 10^7 sets).
const MAX_SETS: usize = 1 << 30;

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

/// One overflow slot: an evicted key's fingerprint and `tat`. A `tat` of 0 (long past) is a
/// free slot.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Slot {
    tat: Nanos,
    fingerprint: u32,
}

/// The slots one key may use.
#[derive(Clone, Copy, Debug, Default)]
#[repr(align(64))]
struct Set([Slot; WAYS]);

/// Where a key's evicted state goes: its set and its fingerprint.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Place {
    set: usize,
    fingerprint: u32,
}

/// The keys of one limit.
pub(super) struct Table {
    lru: LruCache<Box<[u8]>, Entry, RandomState>,
    max_keys: usize,
    overflow: Box<[Set]>,
    overflow_hasher: RandomState,
}

impl Table {
    /// A table for at most `max_keys` keys (0 is taken as 1). Nothing is reserved for them:
    /// the map grows with the keys it meets. The overflow slots are made at once.
    pub fn new(max_keys: usize) -> Table {
        let slots = MIN_SLOTS.max(max_keys / 2);
        let sets = slots.div_ceil(WAYS).min(MAX_SETS);
        Table {
            lru: LruCache::unbounded_with_hasher(RandomState::new()),
            max_keys: max_keys.max(1),
            overflow: vec![Set::default(); sets].into_boxed_slice(),
            overflow_hasher: RandomState::new(),
        }
    }

    /// Keys held.
    pub fn len(&self) -> usize {
        self.lru.len()
    }

    /// Runs `visit` on the entry of `key`, made when the key is not held (from its overflow
    /// slot, after evicting the least recently used key if the table is full), and marks the
    /// key as the most recently used. `now` tells which evicted buckets are full again (they
    /// need no slot).
    #[inline]
    pub fn visit<R>(&mut self, key: &[u8], now: Nanos, visit: impl FnOnce(&mut Entry) -> R) -> R {
        if let Some(entry) = self.lru.get_mut(key) {
            return visit(entry);
        }
        // Its slot first: making room may write another key's state into the same set.
        let start = self.take_slot(self.place(key));
        self.make_room(now);
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

    /// Evicts least recently used keys until one more fits, each one's bucket kept in a slot.
    fn make_room(&mut self, now: Nanos) {
        while self.lru.len() >= self.max_keys {
            let Some((key, entry)) = self.lru.pop_lru() else {
                break;
            };
            let place = self.place(&key);
            self.keep_in_slot(place, entry.tat, now);
        }
    }

    /// Keeps an evicted key's `tat` in its set, unless its bucket is full again (nothing to
    /// remember) or every slot holds a later `tat` still ahead of now (then the key's own is
    /// the least state, and it is the one let go: see the header).
    fn keep_in_slot(&mut self, place: Place, tat: Nanos, now: Nanos) {
        if tat <= now {
            return;
        }
        let set = &mut self.overflow[place.set].0;
        if let Some(slot) = set.iter_mut().find(|s| s.fingerprint == place.fingerprint) {
            // The same key (it took its slot when it came back, so this is one left over from
            // an older eviction) or, 4 times in 2^32, another one: keep the stricter.
            slot.tat = slot.tat.max(tat);
            return;
        }
        let Some(earliest) = set.iter_mut().min_by_key(|slot| slot.tat) else {
            return; // WAYS > 0: never
        };
        if earliest.tat <= now || earliest.tat < tat {
            *earliest = Slot {
                tat,
                fingerprint: place.fingerprint,
            };
        }
    }

    /// The `tat` a key that is not held starts from: the one its slot kept, if its set has its
    /// fingerprint with a `tat` still ahead (the slot is then freed: the state moves back into
    /// the LRU), else 0, a full bucket.
    fn take_slot(&mut self, place: Place) -> Nanos {
        let set = &mut self.overflow[place.set].0;
        match set
            .iter_mut()
            .find(|slot| slot.fingerprint == place.fingerprint && slot.tat > 0)
        {
            Some(slot) => std::mem::take(slot).tat,
            None => 0,
        }
    }

    /// The set of `key` (from the hash's low 32 bits, by multiplying and shifting rather than
    /// dividing) and its fingerprint (the high 32 bits, so independent of the set).
    fn place(&self, key: &[u8]) -> Place {
        let hash = self.overflow_hasher.hash_one(key);
        let low = hash & u64::from(u32::MAX);
        // sets <= 2^30, so low * sets < 2^62 and the result < sets: it fits in usize.
        let set = ((low * self.overflow.len() as u64) >> 32) as usize;
        Place {
            set,
            fingerprint: (hash >> 32) as u32,
        }
    }

    /// Overflow slots in all.
    #[cfg(test)]
    fn slots(&self) -> usize {
        self.overflow.len() * WAYS
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
            .visit(key, now, |entry| gcra.admit(&mut entry.tat, now))
            .is_ok()
        {
            admitted += 1;
            assert!(admitted <= 1000, "the bucket never ran dry");
        }
        admitted
    }

    /// One request of `key` at `now`.
    fn one(table: &mut Table, gcra: &Gcra, key: &[u8], now: Nanos) -> Result<(), Nanos> {
        table.visit(key, now, |entry| gcra.admit(&mut entry.tat, now))
    }

    #[test]
    fn the_bound_holds_under_ten_times_the_keys() {
        let gcra = gcra();
        let mut table = Table::new(100);
        let now = 1_000 * SECOND;
        for n in 0..1000u32 {
            let admitted = one(&mut table, &gcra, &n.to_be_bytes(), now);
            assert!(table.len() <= 100, "{} keys after {n}", table.len());
            assert_eq!(admitted, Ok(()), "key {n}");
        }
        assert_eq!(table.len(), 100);
    }

    #[test]
    fn the_slots_grow_with_max_keys_in_whole_sets() {
        assert_eq!(Table::new(1).slots(), 4096);
        assert_eq!(Table::new(8192).slots(), 4096);
        assert_eq!(Table::new(100_000).slots(), 50_000);
        assert_eq!(Table::new(100_003).slots(), 50_004);
        assert_eq!(std::mem::size_of::<Set>(), 64, "one cache line");
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
            let _ = one(&mut table, &gcra, &n.to_be_bytes(), now);
        }
        assert!(table.peek_mut(b"client").is_none(), "evicted");
        // Back at once: nothing left, as if it had never left.
        assert_eq!(drain(&mut table, &gcra, b"client", now), 0);
        // Evicted again, and back 300 ms later: three intervals' worth, exactly what a key
        // never evicted has (its tat is now + 1 s, the tolerance 900 ms), not a burst of 10.
        for n in 100..110u32 {
            let _ = one(&mut table, &gcra, &n.to_be_bytes(), now);
        }
        assert!(table.peek_mut(b"client").is_none(), "evicted again");
        assert_eq!(drain(&mut table, &gcra, b"client", now + 300_000_000), 3);
        let mut kept = Table::new(10);
        assert_eq!(drain(&mut kept, &gcra, b"client", now), 10);
        assert_eq!(drain(&mut kept, &gcra, b"client", now + 300_000_000), 3);
    }

    #[test]
    fn a_key_sharing_a_set_with_an_evicted_key_keeps_its_burst() {
        let gcra = gcra();
        let mut table = Table::new(1);
        let now = 1_000 * SECOND;
        let first = b"first".to_vec();
        let set = table.place(&first).set;
        let twin = (0u32..100_000)
            .map(|n| format!("twin-{n}").into_bytes())
            .find(|key| table.place(key).set == set)
            .expect("a key of the same set among the first 100000 (1024 sets)");
        assert_ne!(table.place(&twin), table.place(&first));
        let other = (0u32..100_000)
            .map(|n| format!("other-{n}").into_bytes())
            .find(|key| table.place(key).set != set)
            .expect("a key of another set");
        assert_eq!(drain(&mut table, &gcra, &first, now), 10);
        // `first` is evicted by `other` (max_keys 1): its tat goes to a slot of the set.
        assert_eq!(drain(&mut table, &gcra, &other, now), 10);
        // The twin, never seen, is not `first`: a full burst.
        assert_eq!(drain(&mut table, &gcra, &twin, now), 10);
        // `first`, back 200 ms later, has exactly what it earned since: two requests.
        assert_eq!(drain(&mut table, &gcra, &first, now + 200_000_000), 2);
    }

    /// The attack of issue 26's review: the table full, a flood of keys that each use up their
    /// bucket and are evicted, then clients never seen before. Each must get its full burst.
    #[test]
    fn new_keys_get_their_full_burst_after_a_flood_of_drained_keys() {
        // 6/m, burst 3: T = 10 s, an evicted drained key's tat is 30 s ahead.
        let gcra = Gcra::new(
            &Rate {
                count: 6,
                per: Duration::from_secs(60),
            },
            3,
        );
        let mut table = Table::new(1000);
        let start = 1_000 * SECOND;
        let mut now = start;
        for n in 0..13_000u32 {
            now = start + u64::from(n) * 1000; // a microsecond apart
            let key = format!("198.18.{}.{}", n / 256, n % 256).into_bytes();
            assert_eq!(drain(&mut table, &gcra, &key, now), 3, "flood key {n}");
        }
        assert_eq!(table.len(), 1000);
        let mut short = Vec::new();
        for n in 0..200u32 {
            let key = format!("203.0.113.{n}").into_bytes();
            let admitted = drain(&mut table, &gcra, &key, now);
            if admitted != 3 {
                short.push((n, admitted));
            }
        }
        assert!(short.is_empty(), "new keys short of their burst: {short:?}");
    }

    /// Keys evicted with their bucket used up, while the slots have room for them (here 500
    /// keys for 4096 slots), come back with nothing: no free burst. Pushing them out with
    /// keys that each sent one request (whose tat is earlier) does not take their slots.
    #[test]
    fn drained_keys_evicted_come_back_with_nothing() {
        let gcra = gcra();
        let mut table = Table::new(1000);
        let now = 1_000 * SECOND;
        for n in 0..500u32 {
            assert_eq!(drain(&mut table, &gcra, &n.to_be_bytes(), now), 10);
        }
        for n in 10_000..11_000u32 {
            assert_eq!(one(&mut table, &gcra, &n.to_be_bytes(), now), Ok(()));
        }
        let mut freed = Vec::new();
        for n in 0..500u32 {
            assert!(table.peek_mut(&n.to_be_bytes()).is_none(), "{n} evicted");
            let admitted = drain(&mut table, &gcra, &n.to_be_bytes(), now);
            if admitted != 0 {
                freed.push((n, admitted));
            }
        }
        // A key loses its slot only if 4 others of the 500 share its set of 4 (1024 sets):
        // 0.15 keys expected; 6 or more has a chance below 10^-8.
        assert!(
            freed.len() <= 5,
            "keys that came back with a burst: {freed:?}"
        );
    }

    #[test]
    fn a_key_evicted_with_a_full_bucket_leaves_nothing_and_old_slots_give_way() {
        let gcra = gcra();
        let mut table = Table::new(1);
        let now = 1_000 * SECOND;
        assert_eq!(drain(&mut table, &gcra, b"a", now), 10);
        // `a` is evicted 2 s later, its bucket full again: no slot is written.
        assert_eq!(one(&mut table, &gcra, b"b", now + 2 * SECOND), Ok(()));
        let place = table.place(b"a");
        assert!(table.overflow[place.set]
            .0
            .iter()
            .all(|slot| slot.fingerprint != place.fingerprint || slot.tat == 0));
        // A full set whose tats have passed takes a new one; a full set of later tats still
        // ahead keeps them, and the earlier newcomer is the one let go.
        let place = Place {
            set: 0,
            fingerprint: 7,
        };
        table.overflow[0] = Set([Slot {
            tat: now,
            fingerprint: 1,
        }; WAYS]);
        table.keep_in_slot(place, now + SECOND, now + 1);
        assert_eq!(table.take_slot(place), now + SECOND);
        table.overflow[0] = Set([Slot {
            tat: now + 5 * SECOND,
            fingerprint: 1,
        }; WAYS]);
        table.keep_in_slot(place, now + SECOND, now);
        assert_eq!(table.take_slot(place), 0);
        table.keep_in_slot(place, now + 6 * SECOND, now);
        assert_eq!(table.take_slot(place), now + 6 * SECOND);
        assert_eq!(
            table.take_slot(place),
            0,
            "taken once: the state is back in the LRU"
        );
    }
}
