//! Per-thread free lists for the memory a request needs only while it is in flight: read
//! buffers, byte vectors, header-field tables. An idle keep-alive connection gives all of it
//! back, so ten thousand idle clients cost little more than their sockets, and a busy one takes
//! it from here without touching the allocator (BENCHMARKS.md, "memory").

use crate::http::Field;
use std::cell::RefCell;

/// Size of a pooled read buffer (a connection's normal buffer; larger ones, grown for a big
/// head, are freed instead of pooled).
pub const BUFFER_BYTES: usize = 16 * 1024;
/// Size of the buffer a client's request head is first read into. A connection waiting for
/// the rest of its head holds only this (slow clients are the cheapest attack there is: 1500
/// of them cost 27.5 KiB each with a 16 KiB buffer, BENCHMARKS.md); a head that outgrows it
/// moves to a [`BUFFER_BYTES`] one, and so does a request body relayed through it.
pub const HEAD_BUFFER_BYTES: usize = 4 * 1024;
/// Free objects kept per thread, per kind; beyond, they go back to the allocator.
const KEEP: usize = 256;

thread_local! {
    static BUFFERS: RefCell<Vec<Box<[u8]>>> = const { RefCell::new(Vec::new()) };
    static HEAD_BUFFERS: RefCell<Vec<Box<[u8]>>> = const { RefCell::new(Vec::new()) };
    static BYTES: RefCell<Vec<Vec<u8>>> = const { RefCell::new(Vec::new()) };
    static FIELDS: RefCell<Vec<Vec<Field>>> = const { RefCell::new(Vec::new()) };
    static TRIED: RefCell<Vec<Vec<usize>>> = const { RefCell::new(Vec::new()) };
}

fn take<T>(list: &'static std::thread::LocalKey<RefCell<Vec<T>>>) -> Option<T> {
    list.try_with(|l| l.borrow_mut().pop()).ok().flatten()
}

fn give<T>(list: &'static std::thread::LocalKey<RefCell<Vec<T>>>, item: T) {
    let _ = list.try_with(|l| {
        let mut l = l.borrow_mut();
        if l.len() < KEEP {
            l.push(item);
        }
    });
}

/// A read buffer of `size` bytes: [`BUFFER_BYTES`] or [`HEAD_BUFFER_BYTES`] come from the
/// thread's free lists.
pub fn take_buffer(size: usize) -> Box<[u8]> {
    let pooled = match size {
        BUFFER_BYTES => take(&BUFFERS),
        HEAD_BUFFER_BYTES => take(&HEAD_BUFFERS),
        _ => None,
    };
    pooled.unwrap_or_else(|| vec![0; size].into_boxed_slice())
}

pub fn give_buffer(buffer: Box<[u8]>) {
    match buffer.len() {
        BUFFER_BYTES => give(&BUFFERS, buffer),
        HEAD_BUFFER_BYTES => give(&HEAD_BUFFERS, buffer),
        _ => {}
    }
}

/// An empty byte vector, with the capacity it had when given back.
pub fn take_bytes() -> Vec<u8> {
    take(&BYTES).unwrap_or_else(|| Vec::with_capacity(1024))
}

/// Gives `bytes` back, leaving an empty vector without capacity in its place.
pub fn give_bytes(bytes: &mut Vec<u8>) {
    if bytes.capacity() == 0 {
        return;
    }
    let mut taken = std::mem::take(bytes);
    if taken.capacity() <= 64 * 1024 {
        taken.clear();
        give(&BYTES, taken);
    }
}

pub fn take_fields() -> Vec<Field> {
    take(&FIELDS).unwrap_or_else(|| Vec::with_capacity(32))
}

pub fn give_fields(fields: &mut Vec<Field>) {
    give_emptied(&FIELDS, fields);
}

/// Gives `items`' memory back to `list` emptied, leaving a vector without capacity in its
/// place (nothing to give when it never had any).
fn give_emptied<T>(list: &'static std::thread::LocalKey<RefCell<Vec<Vec<T>>>>, items: &mut Vec<T>) {
    if items.capacity() == 0 {
        return;
    }
    let mut taken = std::mem::take(items);
    taken.clear();
    give(list, taken);
}

/// A list for the servers an HTTP/2 stream's request tried (an HTTP/1 connection keeps its
/// own between requests): from the free list, not an allocation and a free per stream (270
/// user-space instructions of an HTTP/2 request, `H2=1 benches/instructions.sh`).
pub fn take_tried() -> Vec<usize> {
    take(&TRIED).unwrap_or_default()
}

pub fn give_tried(tried: &mut Vec<usize>) {
    give_emptied(&TRIED, tried);
}
