//! Random trace, span and request ids. A trace id must be unique across every service a trace
//! crosses (W3C trace context, section 3.2.2.3: "randomly generated"), so each thread draws
//! from a generator seeded from the operating system's (ring's `SystemRandom`, already the
//! TLS stack's), then steps a 64-bit wyrand: two multiplications per id rather than a
//! `getrandom` system call per request on the data path. The ids are not secrets (they travel
//! in clear in every request's head), so a fast non-cryptographic stream is enough.

use ring::rand::{SecureRandom, SystemRandom};
use std::cell::Cell;

thread_local! {
    /// The thread's generator state; 0 until first used (then seeded).
    static STATE: Cell<u64> = const { Cell::new(0) };
}

/// The next 64 random bits of this thread's stream.
fn next_u64() -> u64 {
    STATE.with(|state| {
        let mut s = state.get();
        if s == 0 {
            s = seed();
        }
        // wyrand (Wang Yi): a Weyl sequence mixed by one 128-bit multiplication.
        s = s.wrapping_add(0xa076_1d64_78bd_642f);
        state.set(s);
        let mixed = u128::from(s) * u128::from(s ^ 0xe703_7ed1_a0b4_28db);
        ((mixed >> 64) as u64) ^ (mixed as u64)
    })
}

/// A seed from the operating system; a clock-derived one only if it cannot give one (it can
/// on every system ring supports), never 0 (the "unseeded" mark).
fn seed() -> u64 {
    let mut bytes = [0u8; 8];
    if SystemRandom::new().fill(&mut bytes).is_err() {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
        bytes = (nanos ^ u64::from(std::process::id())).to_le_bytes();
    }
    u64::from_le_bytes(bytes) | 1
}

/// A new trace id: 16 random bytes, never all zero (an invalid id, W3C 3.2.2.3).
pub fn trace_id() -> [u8; 16] {
    loop {
        let mut id = [0u8; 16];
        id[..8].copy_from_slice(&next_u64().to_le_bytes());
        id[8..].copy_from_slice(&next_u64().to_le_bytes());
        if id != [0; 16] {
            return id;
        }
    }
}

/// A new span id: 8 random bytes, never all zero (W3C 3.2.2.4).
pub fn span_id() -> [u8; 8] {
    loop {
        let id = next_u64().to_le_bytes();
        if id != [0; 8] {
            return id;
        }
    }
}

/// Lowercase hex of `bytes` appended to `out` (W3C trace context allows only lowercase).
pub fn push_hex(out: &mut Vec<u8>, bytes: &[u8]) {
    let start = out.len();
    out.resize(start + 2 * bytes.len(), 0);
    write_hex(bytes, &mut out[start..]);
}

/// Lowercase hex of `bytes` into `out`, two digits a byte (as far as `out` reaches): written
/// in place, without a capacity check per digit.
pub fn write_hex(bytes: &[u8], out: &mut [u8]) {
    for (b, pair) in bytes.iter().zip(out.chunks_exact_mut(2)) {
        pair.copy_from_slice(&HEX_PAIRS[usize::from(*b)]);
    }
}

/// The two hex digits of every byte, looked up at once rather than a nibble at a time.
const HEX_PAIRS: [[u8; 2]; 256] = {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut pairs = [[0u8; 2]; 256];
    let mut b = 0;
    while b < 256 {
        pairs[b] = [DIGITS[b >> 4], DIGITS[b & 0xf]];
        b += 1;
    }
    pairs
};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_differ_and_are_never_zero() {
        let mut seen = std::collections::HashSet::new();
        for _ in 0..10_000 {
            let id = trace_id();
            assert_ne!(id, [0; 16]);
            assert!(seen.insert(id), "a trace id came twice");
            assert_ne!(span_id(), [0; 8]);
        }
    }

    #[test]
    fn threads_draw_different_streams() {
        let here = trace_id();
        let there = std::thread::spawn(trace_id).join().unwrap_or_default();
        assert_ne!(here, there);
    }

    #[test]
    fn hex_is_lowercase() {
        let mut out = Vec::new();
        push_hex(&mut out, &[0x0a, 0xbc, 0xff]);
        assert_eq!(out, b"0abcff");
    }
}
