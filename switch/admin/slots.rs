//! The endpoint's connections, at most [`MAX_CONNECTIONS`] at once, and who makes room when a
//! new one comes to a full house.
//!
//! Refusing the newcomer (as the endpoint once did, with a 503) let any local user lock the
//! operators out: 64 connections that never send a head, send one a byte at a time, or read
//! `/stats` in a loop kept a `POST /reload` with the right token at 503 for as long as they
//! stayed. A cap per peer would not help, as every local user is 127.0.0.1. So the newcomer is
//! always taken, and the connection that has waited longest is closed to make room: for a
//! request (an idle one, or one whose head is still arriving) or for a reader to take its
//! answer. A connection whose handler is running (a reload in
//! progress) is never closed, nor one whose request carries the valid token: that request is
//! served to the end. Only when every connection is one of those is the newcomer refused (503),
//! and only token holders (or, without a token, whoever may make changes at all) can bring that
//! about. Memory and descriptors stay bounded by the cap.
//!
//! A connection learns that it was closed through its [`Slot`] (`evicted`), at its next read or
//! write; its task then ends and drops the socket.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use tokio::sync::Notify;

/// Connections served at once; beyond, the one that has waited longest makes room.
pub const MAX_CONNECTIONS: usize = 64;

/// What a connection is doing, for the choice of the one that makes room. The number says
/// since when, in the order things began here (a counter, not a clock: two connections never
/// tie, and the order is the order of events).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    /// Waiting for a request (a head or a body to arrive, or idle between requests).
    Waiting(u64),
    /// Writing an answer (the peer may not be reading it).
    Writing(u64),
    /// Never closed to make room: its handler runs, or its request carries the valid token.
    Kept,
}

struct Entry {
    id: u64,
    phase: Phase,
    evicted: Arc<Eviction>,
}

/// Set once, when the connection is closed to make room; its task wakes on it.
#[derive(Default)]
struct Eviction {
    done: AtomicBool,
    notify: Notify,
}

/// The registry of the endpoint's connections.
pub struct Slots {
    capacity: usize,
    inner: Mutex<Inner>,
}

#[derive(Default)]
struct Inner {
    next_id: u64,
    /// The order of the phases' beginnings.
    ticks: u64,
    entries: Vec<Entry>,
}

impl Inner {
    fn tick(&mut self) -> u64 {
        self.ticks += 1;
        self.ticks
    }
}

/// A new connection's fate.
pub enum Admission {
    /// Served; the slot goes when the connection ends. `made_room`: another connection was
    /// closed for it.
    Admitted { slot: Slot, made_room: bool },
    /// Every connection is kept: answer 503.
    Full,
}

impl Slots {
    pub fn new(capacity: usize) -> Arc<Slots> {
        Arc::new(Slots {
            capacity,
            inner: Mutex::new(Inner::default()),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        // The registry holds no invariant a panic elsewhere could break halfway.
        self.inner
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Takes a new connection, closing the one that has waited longest if the house is full.
    pub fn admit(self: &Arc<Slots>) -> Admission {
        let mut inner = self.lock();
        let mut made_room = false;
        if inner.entries.len() >= self.capacity {
            match victim(&inner.entries) {
                Some(index) => {
                    let entry = inner.entries.swap_remove(index);
                    entry.evicted.done.store(true, Ordering::Release);
                    entry.evicted.notify.notify_waiters();
                    made_room = true;
                }
                None => return Admission::Full,
            }
        }
        let id = inner.next_id;
        inner.next_id += 1;
        let evicted = Arc::new(Eviction::default());
        let since = inner.tick();
        inner.entries.push(Entry {
            id,
            phase: Phase::Waiting(since),
            evicted: Arc::clone(&evicted),
        });
        Admission::Admitted {
            slot: Slot {
                slots: Arc::clone(self),
                id,
                evicted,
            },
            made_room,
        }
    }

    /// Connections held now.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.lock().entries.len()
    }
}

/// The connection that makes room: the one that has been waiting longest, for a request or
/// for a reader of its answer alike; never a kept one. Waiting ones once went first, whatever
/// their age: with every other connection writing to a reader that never reads, an operator's
/// connection, just opened and its token still on the way, was the only one waiting, and the
/// next newcomer closed it (found by an attacker's probe). The newest connection is now the
/// last to go, so a token sent at once arrives before its connection's turn comes.
fn victim(entries: &[Entry]) -> Option<usize> {
    entries
        .iter()
        .enumerate()
        .filter_map(|(i, e)| match e.phase {
            Phase::Waiting(since) | Phase::Writing(since) => Some((since, i)),
            Phase::Kept => None,
        })
        .min()
        .map(|(_, i)| i)
}

/// A connection's place in the registry; it leaves when dropped.
pub struct Slot {
    slots: Arc<Slots>,
    id: u64,
    evicted: Arc<Eviction>,
}

impl Slot {
    fn set(&self, phase: impl FnOnce(u64) -> Phase) {
        let mut inner = self.slots.lock();
        let since = inner.tick();
        if let Some(entry) = inner.entries.iter_mut().find(|e| e.id == self.id) {
            entry.phase = phase(since);
        }
    }

    /// Waiting for the next request from now (after an answer was written).
    pub fn waiting(&self) {
        self.set(Phase::Waiting);
    }

    /// Writing an answer from now.
    pub fn writing(&self) {
        self.set(Phase::Writing);
    }

    /// Never closed to make room until the next [`Slot::waiting`] or [`Slot::writing`].
    /// `false` when it was closed already (the caller stops).
    pub fn keep(&self) -> bool {
        let mut inner = self.slots.lock();
        match inner.entries.iter_mut().find(|e| e.id == self.id) {
            Some(entry) => {
                entry.phase = Phase::Kept;
                true
            }
            None => false,
        }
    }

    /// Completes when the connection was closed to make room for another.
    pub async fn evicted(&self) {
        loop {
            // Registered before the flag is read, so that an eviction in between wakes it.
            let notified = self.evicted.notify.notified();
            if self.evicted.done.load(Ordering::Acquire) {
                return;
            }
            notified.await;
        }
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut inner = self.slots.lock();
        if let Some(index) = inner.entries.iter().position(|e| e.id == self.id) {
            inner.entries.swap_remove(index);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn admitted(slots: &Arc<Slots>) -> (Slot, bool) {
        match slots.admit() {
            Admission::Admitted { slot, made_room } => (slot, made_room),
            Admission::Full => panic!("refused"),
        }
    }

    #[tokio::test]
    async fn the_connection_waiting_longest_makes_room_and_kept_ones_never_do() {
        let slots = Slots::new(3);
        let (a, _) = admitted(&slots);
        let (b, _) = admitted(&slots);
        let (c, _) = admitted(&slots);
        // a writes, b waits (since before a began writing), c is kept: b goes first.
        a.writing();
        assert!(c.keep());
        let (d, made_room) = admitted(&slots);
        assert!(made_room);
        assert_eq!(slots.len(), 3);
        assert!(!b.keep(), "b was closed");
        tokio::time::timeout(std::time::Duration::from_secs(10), b.evicted())
            .await
            .expect("b learns it");
        // d kept: a, writing, is the only one left to go.
        assert!(d.keep());
        let (e, made_room) = admitted(&slots);
        assert!(made_room);
        assert!(!a.keep(), "a was closed");
        // b's slot, dropped, frees nothing twice.
        drop(b);
        assert_eq!(slots.len(), 3);
        // c, d, e kept: a newcomer is refused, until one leaves.
        assert!(e.keep());
        assert!(matches!(slots.admit(), Admission::Full));
        drop(c);
        assert!(matches!(
            slots.admit(),
            Admission::Admitted {
                made_room: false,
                ..
            }
        ));
        // A connection waiting again after its answer waited less than one that waits still.
        let slots = Slots::new(2);
        let (f, _) = admitted(&slots);
        let (g, _) = admitted(&slots);
        assert!(f.keep());
        f.waiting();
        let (_h, made_room) = admitted(&slots);
        assert!(made_room);
        assert!(!g.keep(), "g had waited since before f's answer");
        assert!(f.keep());
    }

    #[tokio::test]
    async fn a_newcomer_is_not_closed_for_the_next_one_while_older_ones_write() {
        // Every other connection writes an answer nobody reads; the operator's connection,
        // just opened, waits for its head (and the token in it).
        let slots = Slots::new(3);
        let (a, _) = admitted(&slots);
        let (b, _) = admitted(&slots);
        a.writing();
        b.writing();
        let (operator, _) = admitted(&slots);
        let (_next, made_room) = admitted(&slots);
        assert!(made_room);
        assert!(!a.keep(), "the one writing longest made room");
        assert!(operator.keep(), "the operator's connection is still there");
    }
}
