//! Request bodies received before a server is picked (`[pool.NAME] request_buffer`), so that a
//! client that uploads slowly holds only the switch's memory, never a server's worker (a CGI
//! or application server often has few): nginx's request buffering, HAProxy's
//! `http-buffer-request`. What every buffered body holds together is bounded by
//! `[switch] buffer_memory` ([`BufferMemory`]); a body that finds the budget spent streams as
//! without a buffer, counted (`buffer_fallbacks`), never refused for it. A body is held in
//! pooled 16 KiB buffers taken from and given back to the thread's free lists
//! ([`held::HeldBody`]), never one allocation of its size. Responses are read ahead of a slow
//! client the same way, within the same budget (`response_buffer`: [`read_ahead`]). A body, held or not, that arrives
//! slower than `[switch] min_body_rate` is the client's `408` ([`rate`]).

pub mod held;
pub mod rate;
pub(crate) mod read_ahead;

use std::sync::atomic::{AtomicU64, Ordering};

/// The switch-wide budget of buffered bodies.
#[derive(Debug)]
pub struct BufferMemory {
    limit: u64,
    in_use: AtomicU64,
    fallbacks: AtomicU64,
}

impl BufferMemory {
    pub fn new(limit: u64) -> Self {
        BufferMemory {
            limit,
            in_use: AtomicU64::new(0),
            fallbacks: AtomicU64::new(0),
        }
    }

    /// Takes `n` bytes of the budget if they fit.
    fn take(&self, n: u64) -> bool {
        self.in_use
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |used| {
                used.checked_add(n).filter(|&after| after <= self.limit)
            })
            .is_ok()
    }

    fn give_back(&self, n: u64) {
        self.in_use.fetch_sub(n, Ordering::AcqRel);
    }

    /// A body found the budget spent and streams without its buffer.
    pub fn count_fallback(&self) {
        self.fallbacks.fetch_add(1, Ordering::Relaxed);
    }

    /// Bytes held by buffered bodies now (`/stats` `buffered_bytes`).
    pub fn in_use(&self) -> u64 {
        self.in_use.load(Ordering::Relaxed)
    }

    /// Bodies that streamed because the budget was spent (`/stats` `buffer_fallbacks`).
    pub fn fallbacks(&self) -> u64 {
        self.fallbacks.load(Ordering::Relaxed)
    }
}

/// The part of the budget one body holds, given back when it is dropped.
#[derive(Debug)]
pub struct BufferLease<'m> {
    memory: &'m BufferMemory,
    held: u64,
}

impl<'m> BufferLease<'m> {
    pub fn new(memory: &'m BufferMemory) -> Self {
        BufferLease { memory, held: 0 }
    }

    /// Takes `n` more bytes; `false` when the budget has no room for them.
    pub fn grow(&mut self, n: u64) -> bool {
        let taken = self.memory.take(n);
        if taken {
            self.held += n;
        }
        taken
    }

    pub fn held(&self) -> u64 {
        self.held
    }

    /// Gives back `n` of the bytes held (or all, if it holds fewer).
    pub fn shrink(&mut self, n: u64) {
        let n = n.min(self.held);
        if n > 0 {
            self.held -= n;
            self.memory.give_back(n);
        }
    }

    /// Gives back everything held.
    pub fn release(&mut self) {
        // Nothing held (every request that is not buffered): no write to the shared count.
        if self.held > 0 {
            self.memory.give_back(std::mem::take(&mut self.held));
        }
    }

    /// A body found the budget spent and streams without (the rest of) its buffer.
    pub fn count_fallback(&self) {
        self.memory.count_fallback();
    }
}

impl Drop for BufferLease<'_> {
    fn drop(&mut self) {
        self.release();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_budget_is_never_exceeded_and_comes_back() {
        let memory = BufferMemory::new(40);
        let mut a = BufferLease::new(&memory);
        let mut b = BufferLease::new(&memory);
        assert!(a.grow(16));
        assert!(b.grow(16));
        assert!(!a.grow(16), "48 > 40");
        assert!(a.grow(8), "exactly the limit");
        assert_eq!((memory.in_use(), a.held(), b.held()), (40, 24, 16));
        drop(a);
        assert_eq!(memory.in_use(), 16);
        assert!(b.grow(24));
        drop(b);
        assert_eq!(memory.in_use(), 0);
    }
}
