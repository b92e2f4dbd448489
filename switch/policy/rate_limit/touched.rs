//! The keys checked since the store's last exchange: what the sync task sends to Redis.
//!
//! Each key is listed once per exchange (its entry's `touched` mark), its bytes copied into one
//! growing buffer whose capacity is kept from one exchange to the next: once warm, listing a
//! key allocates nothing. While the store is not reachable nothing is listed (and entries keep
//! no `pending` count), so that the list cannot grow without bound and a count collected
//! during an outage is not added, long after, as if it had just happened.

use super::key_table::Entry;

/// At most this many keys wait for the next exchange; past it a key is not listed this time
/// (its `touched` mark stays off, so its next check tries again). With the exchange every
/// few milliseconds, only millions of distinct keys a second reach it.
const MAX_LISTED: usize = 65_536;

/// Keys as bytes, one after the other.
#[derive(Debug, Default)]
pub(super) struct KeyList {
    bytes: Vec<u8>,
    ends: Vec<usize>,
}

impl KeyList {
    pub fn len(&self) -> usize {
        self.ends.len()
    }

    pub fn is_empty(&self) -> bool {
        self.ends.is_empty()
    }

    pub fn clear(&mut self) {
        self.bytes.clear();
        self.ends.clear();
    }

    pub fn push(&mut self, key: &[u8]) {
        self.bytes.extend_from_slice(key);
        self.ends.push(self.bytes.len());
    }

    pub fn iter(&self) -> impl Iterator<Item = &[u8]> + '_ {
        let starts = std::iter::once(0).chain(self.ends.iter().copied());
        starts
            .zip(self.ends.iter().copied())
            .map(|(start, end)| &self.bytes[start..end])
    }

    /// Moves the first `count` keys (at most all) to the end of `out`, oldest first.
    pub fn move_front(&mut self, count: usize, out: &mut KeyList) {
        let count = count.min(self.len());
        if count == 0 {
            return;
        }
        let split = self.ends[count - 1];
        let base = out.bytes.len();
        out.bytes.extend_from_slice(&self.bytes[..split]);
        out.ends
            .extend(self.ends[..count].iter().map(|end| base + end));
        self.bytes.drain(..split);
        self.ends.drain(..count);
        for end in &mut self.ends {
            *end -= split;
        }
    }
}

/// The keys touched since the last exchange, and whether they are being listed at all.
#[derive(Debug, Default)]
pub(super) struct Touched {
    recording: bool,
    keys: KeyList,
}

impl Touched {
    /// Counts one check of `key` for the store: `admitted` requests go into the entry's
    /// `pending`, and the key is listed once. True when the list was empty until now: the sync
    /// task, asleep, is to be woken.
    #[inline]
    pub fn note(&mut self, key: &[u8], entry: &mut Entry, admitted: bool) -> bool {
        if !self.recording {
            return false;
        }
        if admitted {
            entry.pending = entry.pending.saturating_add(1);
        }
        if entry.touched || self.keys.len() >= MAX_LISTED {
            return false;
        }
        entry.touched = true;
        let wake = self.keys.is_empty();
        self.keys.push(key);
        wake
    }

    /// Starts or stops listing; stopping forgets the list (the caller clears the entries'
    /// marks and counts, [`super::key_table::Table::clear_sync_marks`]).
    pub fn set_recording(&mut self, on: bool) {
        self.recording = on;
        if !on {
            self.keys.clear();
        }
    }

    pub fn len(&self) -> usize {
        self.keys.len()
    }

    /// Moves up to `count` of the oldest listed keys to `out`.
    pub fn take(&mut self, count: usize, out: &mut KeyList) {
        self.keys.move_front(count, out);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_move_out_oldest_first_and_the_rest_stays() {
        let mut list = KeyList::default();
        for key in [&b"a"[..], b"bb", b"", b"dddd"] {
            list.push(key);
        }
        let mut out = KeyList::default();
        out.push(b"x");
        list.move_front(2, &mut out);
        assert_eq!(out.iter().collect::<Vec<_>>(), [&b"x"[..], b"a", b"bb"]);
        assert_eq!(list.iter().collect::<Vec<_>>(), [&b""[..], b"dddd"]);
        list.move_front(10, &mut out);
        assert!(list.is_empty());
        assert_eq!(out.len(), 5);
        assert_eq!(out.iter().last(), Some(&b"dddd"[..]));
    }

    #[test]
    fn a_key_is_listed_once_and_only_while_recording() {
        let mut touched = Touched::default();
        let mut entry = Entry::new(0);
        assert!(!touched.note(b"k", &mut entry, true), "not recording");
        assert_eq!((entry.pending, entry.touched), (0, false));
        touched.set_recording(true);
        assert!(touched.note(b"k", &mut entry, true), "first: wake the task");
        assert!(!touched.note(b"k", &mut entry, true));
        assert!(
            !touched.note(b"k", &mut entry, false),
            "refused: not pending"
        );
        assert_eq!((entry.pending, entry.touched, touched.len()), (2, true, 1));
    }
}
