//! A counting global allocator: each target measures the peak of live heap bytes during one
//! run and fails when it exceeds a bound proportional to the input, so that an input making a
//! parser allocate without bound is a crash, not merely a slow run (AFL++'s `-m` limit is the
//! second net).
//!
//! The counts are per thread: `cargo test` runs the corpus of each target on a thread of its
//! own, and a process-wide count made one target's reads and buffers the parser's growth in
//! another (a 320 KiB "growth" of `parse_request`, which allocates nothing, failed CI once).
//! Memory freed on another thread than the one that took it counts there: the counts are
//! signed, and only the growth during one measured run is read.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

pub struct Counting;

thread_local! {
    // Const-initialised, without a destructor: reading them never allocates, so the allocator
    // may use them.
    static LIVE: Cell<isize> = const { Cell::new(0) };
    static PEAK: Cell<isize> = const { Cell::new(0) };
}

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            change(layout.size() as isize);
        }
        p
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        let p = unsafe { System.alloc_zeroed(layout) };
        if !p.is_null() {
            change(layout.size() as isize);
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) };
        change(-(layout.size() as isize));
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            change(new_size as isize - layout.size() as isize);
        }
        p
    }
}

/// Counts `delta` bytes on this thread (nothing while the thread's locals are gone, at exit).
fn change(delta: isize) {
    let _ = LIVE.try_with(|live| {
        let now = live.get() + delta;
        live.set(now);
        let _ = PEAK.try_with(|peak| peak.set(peak.get().max(now)));
    });
}

/// Runs `f` and returns its result with the peak heap growth (bytes) on this thread while it
/// ran.
pub fn measure<T>(f: impl FnOnce() -> T) -> (T, usize) {
    let base = LIVE.with(Cell::get);
    PEAK.with(|peak| peak.set(base));
    let out = f();
    let peak = PEAK.with(Cell::get) - base;
    (out, peak.max(0) as usize)
}

/// Runs `f`, panicking if the heap grew by more than `limit` bytes at any moment.
pub fn bounded<T>(what: &str, limit: usize, f: impl FnOnce() -> T) -> T {
    let (out, peak) = measure(f);
    assert!(
        peak <= limit,
        "{what}: peak heap growth {peak} bytes exceeds the bound {limit}"
    );
    out
}
