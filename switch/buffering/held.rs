//! One request body held by the switch: a chain of pooled buffers (recycle.rs), charged to the
//! switch's budget as each is taken.

use super::{BufferLease, BufferMemory};
use crate::buffer::IoBuf;
use crate::recycle::BUFFER_BYTES;

/// The body received so far, in order.
#[derive(Debug)]
pub struct HeldBody<'m> {
    chunks: Vec<IoBuf>,
    lease: BufferLease<'m>,
    len: u64,
}

impl<'m> HeldBody<'m> {
    pub fn new(memory: &'m BufferMemory) -> Self {
        HeldBody {
            chunks: Vec::new(),
            lease: BufferLease::new(memory),
            len: 0,
        }
    }

    /// Bytes held.
    pub fn len(&self) -> u64 {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// A buffer with room to read more into: the last one, or a new one if the budget has room
    /// for it (`None`: it has not).
    pub fn room(&mut self) -> Option<&mut IoBuf> {
        let full = self
            .chunks
            .last()
            .is_none_or(|c| c.is_allocated() && c.spare_len() == 0 || c.len() >= BUFFER_BYTES);
        if full {
            if !self.lease.grow(BUFFER_BYTES as u64) {
                return None;
            }
            self.chunks.push(IoBuf::unallocated());
        }
        self.chunks.last_mut()
    }

    /// `n` bytes were read into the buffer [`HeldBody::room`] gave.
    pub fn filled(&mut self, n: usize) {
        self.len += n as u64;
    }

    /// Holds `bytes` (what came with the head) in an empty body, all of it or nothing: `false`
    /// when the budget has no room for all of it.
    pub fn hold_first(&mut self, bytes: &[u8]) -> bool {
        let buffers = bytes.len().div_ceil(BUFFER_BYTES);
        if !self.is_empty() || !self.lease.grow((buffers * BUFFER_BYTES) as u64) {
            return false;
        }
        for piece in bytes.chunks(BUFFER_BYTES) {
            let mut chunk = IoBuf::unallocated();
            chunk.spare()[..piece.len()].copy_from_slice(piece);
            chunk.fill(piece.len());
            self.chunks.push(chunk);
        }
        self.len = bytes.len() as u64;
        true
    }

    /// A body found the budget spent and streams without (the rest of) its buffer.
    pub fn count_fallback(&self) {
        self.lease.count_fallback();
    }

    /// The bytes held, in order.
    pub fn slices(&self) -> impl Iterator<Item = &[u8]> + Clone {
        self.chunks.iter().map(IoBuf::filled)
    }

    /// Gives the buffers back to the free lists and the bytes back to the budget.
    pub fn release(&mut self) {
        if self.chunks.is_empty() {
            return;
        }
        for chunk in &mut self.chunks {
            chunk.consume(chunk.len());
            chunk.release();
        }
        self.chunks.clear();
        self.len = 0;
        self.lease.release();
    }
}

impl Drop for HeldBody<'_> {
    fn drop(&mut self) {
        self.release();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_body_is_held_in_pooled_buffers_within_the_budget() {
        let memory = BufferMemory::new(3 * BUFFER_BYTES as u64);
        let mut body = HeldBody::new(&memory);
        let bytes: Vec<u8> = (0..40_000u32).map(|i| i as u8).collect();
        assert!(body.hold_first(&bytes));
        assert_eq!(body.len(), 40_000);
        assert_eq!(memory.in_use(), 3 * BUFFER_BYTES as u64);
        let joined: Vec<u8> = body.slices().flatten().copied().collect();
        assert_eq!(joined, bytes);
        // The third buffer fills up; a fourth is past the budget.
        let third = body.room().expect("room left in the third buffer");
        let spare = third.spare().len();
        third.fill(spare);
        body.filled(spare);
        assert!(body.room().is_none(), "a fourth buffer is past the budget");
        body.release();
        assert_eq!((body.len(), memory.in_use()), (0, 0));
    }
}
