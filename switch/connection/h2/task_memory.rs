//! The memory of a stream's task, reused from the streams that ended before it on the same
//! thread. A stream's future is several kilobytes (the exchange's state), too large for the
//! allocator's per-thread caches: each stream's allocation and free went through glibc's
//! slower paths, 880 user-space instructions of an HTTP/2 request (`H2=1
//! benches/instructions.sh`, BENCHMARKS.md, "HTTP/2 requests as they came"). Written by hand
//! because a `Box` cannot be given back to a pool of ours, and the future's type is an
//! `async` block's, which no `thread_local!` can name: slots are kept by their layout.
//!
//! The future is built in its slot's memory (`Box::pin(future)` builds it on the stack and
//! copies its kilobytes in), and never moves from there until it is dropped.

use std::alloc::{alloc, dealloc, handle_alloc_error, Layout};
use std::cell::RefCell;
use std::future::Future;
use std::pin::Pin;
use std::ptr::NonNull;
use std::task::{Context, Poll};

/// Slots kept per thread. A connection runs at most 100 streams; the slots a burst of them
/// leaves are few kilobytes each, and those beyond go back to the allocator.
const KEEP: usize = 32;

thread_local! {
    static SLOTS: RefCell<Slots> = const { RefCell::new(Slots(Vec::new())) };
}

/// Memory of ended tasks, each with the layout it was allocated with; freed when its thread
/// ends.
struct Slots(Vec<(Layout, NonNull<u8>)>);

impl Drop for Slots {
    fn drop(&mut self) {
        for (layout, memory) in self.0.drain(..) {
            // SAFETY: each slot was allocated with its layout (`InSlot::new`) and holds no
            // value (its future was dropped before it was kept).
            unsafe { dealloc(memory.as_ptr(), layout) };
        }
    }
}

/// A future in memory of its own, taken from the thread's slots when one of its layout is
/// there. Polled where it lies; dropping it drops the future and keeps the memory.
pub(super) struct InSlot<F: Future> {
    future: NonNull<F>,
}

// SAFETY: `InSlot` owns its future as a `Box` would; sending it sends the future, which is
// `Send`. The memory may end in another thread's slots: it came from the global allocator,
// which any thread may free or reuse.
unsafe impl<F: Future + Send> Send for InSlot<F> {}

impl<F: Future> InSlot<F> {
    /// The future `make` makes, built in a slot. `F` must not be zero-sized (a stream's task
    /// never is).
    pub(super) fn new(make: impl FnOnce() -> F) -> InSlot<F> {
        let layout = Layout::new::<F>();
        assert!(layout.size() > 0, "a task of no size needs no slot");
        let memory = take(layout).unwrap_or_else(|| {
            // SAFETY: `layout` has a non-zero size (asserted above).
            let raw = unsafe { alloc(layout) };
            NonNull::new(raw).unwrap_or_else(|| handle_alloc_error(layout))
        });
        let future = memory.cast::<F>();
        // SAFETY: `memory` is valid for writes of `layout`, `F`'s size and alignment, and
        // holds no value: it is fresh, or its last future was dropped before it was kept.
        unsafe { future.as_ptr().write(make()) };
        InSlot { future }
    }
}

impl<F: Future> Future for InSlot<F> {
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        // SAFETY: the future was written in `new` and is dropped only in `drop`; it never
        // moves from its memory (only the pointer to it does), so pinning it is sound, and
        // `&mut self` makes this the only reference to it.
        let future = unsafe { Pin::new_unchecked(&mut *self.future.as_ptr()) };
        future.poll(cx)
    }
}

impl<F: Future> Drop for InSlot<F> {
    fn drop(&mut self) {
        // SAFETY: the future is live (written in `new`, dropped only here).
        unsafe { std::ptr::drop_in_place(self.future.as_ptr()) };
        give(Layout::new::<F>(), self.future.cast());
    }
}

fn take(layout: Layout) -> Option<NonNull<u8>> {
    SLOTS
        .try_with(|slots| {
            let slots = &mut slots.borrow_mut().0;
            match slots.last() {
                Some(&(kept, memory)) if kept == layout => {
                    slots.pop();
                    Some(memory)
                }
                _ => None,
            }
        })
        .ok()
        .flatten()
}

fn give(layout: Layout, memory: NonNull<u8>) {
    let kept = SLOTS
        .try_with(|slots| {
            let slots = &mut slots.borrow_mut().0;
            if slots.len() < KEEP {
                slots.push((layout, memory));
                true
            } else {
                false
            }
        })
        .unwrap_or(false);
    if !kept {
        // SAFETY: `memory` was allocated with `layout` (`InSlot::new`) and holds no value.
        unsafe { dealloc(memory.as_ptr(), layout) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;
    use std::task::Waker;

    struct CountsDrop(Arc<AtomicUsize>, [u8; 4096]);

    impl Drop for CountsDrop {
        fn drop(&mut self) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    #[test]
    fn a_slot_is_reused_and_its_futures_run_and_drop_once() {
        let drops = Arc::new(AtomicUsize::new(0));
        let make = |n: u8| {
            let guard = CountsDrop(Arc::clone(&drops), [n; 4096]);
            async move { guard.1[4095] }
        };
        let mut cx = Context::from_waker(Waker::noop());
        let mut first = InSlot::new(|| make(7));
        let first_at = first.future.as_ptr() as usize;
        assert_eq!(Pin::new(&mut first).poll(&mut cx), Poll::Ready(7));
        drop(first);
        assert_eq!(drops.load(Ordering::SeqCst), 1);
        // The next future of that layout takes the same memory, and sees its own value.
        let mut second = InSlot::new(|| make(9));
        assert_eq!(second.future.as_ptr() as usize, first_at);
        assert_eq!(Pin::new(&mut second).poll(&mut cx), Poll::Ready(9));
        // One never polled is dropped all the same.
        let third = InSlot::new(|| make(1));
        drop(second);
        drop(third);
        assert_eq!(drops.load(Ordering::SeqCst), 3);
    }
}
