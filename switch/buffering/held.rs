//! One request body held by the switch: a chain of pooled buffers (recycle.rs), charged to the
//! switch's budget as each is taken. A body by Content-Length is held as it came; a chunked
//! body is held as its data, without its framing, and the decoder that read it goes with it
//! (where the rest of the body, if any, is to be read from).

use super::{BufferLease, BufferMemory};
use crate::buffer::IoBuf;
use crate::http::chunked::ChunkedDecoder;
use crate::recycle::BUFFER_BYTES;

/// The body received so far, in order.
#[derive(Debug)]
pub struct HeldBody<'m> {
    chunks: Vec<IoBuf>,
    lease: BufferLease<'m>,
    len: u64,
    /// `Some` when the body is chunked: what is held is its data, and this is where its
    /// decoding stands (done: the whole body, trailers included, is held).
    chunked: Option<ChunkedDecoder>,
    /// The first buffer [`HeldBody::push`] has room in.
    open: usize,
}

impl<'m> HeldBody<'m> {
    pub fn new(memory: &'m BufferMemory) -> Self {
        HeldBody {
            chunks: Vec::new(),
            lease: BufferLease::new(memory),
            len: 0,
            chunked: None,
            open: 0,
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

    /// Makes room for `n` more bytes, taking buffers from the budget: `false` (nothing taken
    /// beyond what has room already) when it has not enough. Room reserved and not yet filled
    /// counts: reserving again for the same bytes takes nothing more.
    pub fn reserve(&mut self, n: usize) -> bool {
        let room = self.room_reserved();
        let buffers = n.saturating_sub(room).div_ceil(BUFFER_BYTES);
        if buffers == 0 {
            return true;
        }
        if !self.lease.grow((buffers * BUFFER_BYTES) as u64) {
            return false;
        }
        self.chunks
            .extend(std::iter::repeat_with(IoBuf::unallocated).take(buffers));
        true
    }

    /// The room left in the buffers from the first that is not full (the ones after it are
    /// empty: [`HeldBody::push`] fills them in order).
    fn room_reserved(&self) -> usize {
        match self.chunks.get(self.open..) {
            Some([first, rest @ ..]) => {
                BUFFER_BYTES - first.len().min(BUFFER_BYTES) + rest.len() * BUFFER_BYTES
            }
            _ => 0,
        }
    }

    /// Gives back to the budget the buffers reserved and left empty.
    pub fn trim(&mut self) {
        let mut freed = 0;
        while self.chunks.len() > self.open && self.chunks.last().is_some_and(IoBuf::is_empty) {
            self.chunks.pop();
            freed += BUFFER_BYTES as u64;
        }
        self.lease.shrink(freed);
    }

    /// Holds a copy of `data` in the room [`HeldBody::reserve`] made; returns the bytes held
    /// (fewer only if less room was reserved). From the first buffer that is not full: no
    /// walk over the full ones, whatever the size held.
    pub fn push(&mut self, mut data: &[u8]) -> usize {
        let mut held = 0;
        while let (false, Some(chunk)) = (data.is_empty(), self.chunks.get_mut(self.open)) {
            let room = BUFFER_BYTES.saturating_sub(chunk.len());
            let spare = chunk.spare();
            let n = spare.len().min(room).min(data.len());
            spare[..n].copy_from_slice(&data[..n]);
            chunk.fill(n);
            data = &data[n..];
            held += n;
            if chunk.len() >= BUFFER_BYTES {
                self.open += 1;
            }
        }
        self.len += held as u64;
        held
    }

    /// The body held is chunked: its data is held, and `decoder` says where the rest starts.
    pub fn set_chunked(&mut self, decoder: ChunkedDecoder) {
        self.chunked = Some(decoder);
    }

    /// The decoder of a chunked body held (`None`: not chunked, or nothing held).
    pub fn take_chunked(&mut self) -> Option<ChunkedDecoder> {
        self.chunked.take()
    }

    /// A body found the budget spent and streams without (the rest of) its buffer.
    pub fn count_fallback(&self) {
        self.lease.count_fallback();
    }

    /// The bytes held when they are in one buffer.
    pub fn single(&self) -> Option<&[u8]> {
        match &self.chunks[..] {
            [one] => Some(one.filled()),
            _ => None,
        }
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
        self.chunked = None;
        self.open = 0;
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

    #[test]
    fn reserved_room_takes_whole_buffers_and_pushes_fill_them_in_order() {
        let memory = BufferMemory::new(2 * BUFFER_BYTES as u64);
        let mut body = HeldBody::new(&memory);
        assert!(body.reserve(10));
        assert_eq!(memory.in_use(), BUFFER_BYTES as u64);
        assert_eq!(body.push(b"0123456789"), 10);
        // The first buffer has BUFFER_BYTES - 10 left: this takes one more buffer.
        assert!(body.reserve(BUFFER_BYTES));
        assert_eq!(memory.in_use(), 2 * BUFFER_BYTES as u64);
        let big = vec![7u8; BUFFER_BYTES];
        assert_eq!(body.push(&big), BUFFER_BYTES);
        assert!(!body.reserve(BUFFER_BYTES), "past the budget");
        assert_eq!(body.len(), BUFFER_BYTES as u64 + 10);
        let joined: Vec<u8> = body.slices().flatten().copied().collect();
        assert_eq!(&joined[..10], b"0123456789");
        assert!(joined[10..].iter().all(|&b| b == 7));
        // Room reserved and not filled counts: reserving it again takes nothing.
        assert!(body.reserve(BUFFER_BYTES - 10));
        assert_eq!(memory.in_use(), 2 * BUFFER_BYTES as u64);
        let rest = vec![9u8; BUFFER_BYTES];
        assert_eq!(
            body.push(&rest),
            BUFFER_BYTES - 10,
            "only the room reserved is filled"
        );
        assert_eq!(body.push(b"x"), 0);
        assert_eq!(body.len(), 2 * BUFFER_BYTES as u64);
    }

    #[test]
    fn many_small_pieces_are_charged_by_the_bytes_they_hold() {
        // An attacker's probe: one-byte chunks, each reserved for the whole input left, made
        // every reservation take new buffers (80 MiB charged for 6.6 KB held).
        let memory = BufferMemory::new(1 << 30);
        let mut body = HeldBody::new(&memory);
        let input = 47 * 1024;
        for i in 0..input {
            assert!(body.reserve(input - i));
            assert_eq!(body.push(&[i as u8]), 1);
        }
        assert_eq!(body.len(), input as u64);
        assert_eq!(
            memory.in_use(),
            3 * BUFFER_BYTES as u64,
            "47 KiB in three buffers"
        );
        // Room reserved for more than came is given back.
        assert!(body.reserve(5 * BUFFER_BYTES));
        assert_eq!(memory.in_use(), 8 * BUFFER_BYTES as u64);
        body.trim();
        assert_eq!(memory.in_use(), 3 * BUFFER_BYTES as u64);
        let joined: Vec<u8> = body.slices().flatten().copied().collect();
        assert!(joined.iter().enumerate().all(|(i, &b)| b == i as u8));
    }
}
