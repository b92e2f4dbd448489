//! A read buffer with a consumed front and a filled middle. Its storage comes from the
//! thread's free list when bytes are to be read and goes back when the buffer is empty and the
//! connection idles ([`IoBuf::release`]).

use crate::recycle;

/// Bytes read from a socket and not yet processed live in `data[start..end]`.
#[derive(Debug)]
pub struct IoBuf {
    data: Box<[u8]>,
    start: usize,
    end: usize,
}

impl IoBuf {
    /// A buffer without storage yet: it takes a pooled one at its first read.
    pub fn unallocated() -> Self {
        IoBuf {
            data: Box::default(),
            start: 0,
            end: 0,
        }
    }

    /// Gives the storage back to the thread's free list if no bytes are pending.
    pub fn release(&mut self) {
        if self.is_empty() && !self.data.is_empty() {
            recycle::give_buffer(std::mem::take(&mut self.data));
            self.start = 0;
            self.end = 0;
        }
    }

    pub fn is_allocated(&self) -> bool {
        !self.data.is_empty()
    }

    pub fn with_capacity(capacity: usize) -> Self {
        IoBuf {
            data: vec![0; capacity].into_boxed_slice(),
            start: 0,
            end: 0,
        }
    }

    pub fn filled(&self) -> &[u8] {
        &self.data[self.start..self.end]
    }

    pub fn filled_mut(&mut self) -> &mut [u8] {
        &mut self.data[self.start..self.end]
    }

    pub fn len(&self) -> usize {
        self.end - self.start
    }

    pub fn is_empty(&self) -> bool {
        self.start == self.end
    }

    pub fn capacity(&self) -> usize {
        self.data.len()
    }

    /// Room left after the filled bytes without moving them.
    pub fn spare_len(&self) -> usize {
        self.data.len() - self.end
    }

    /// Marks `n` filled bytes as processed.
    pub fn consume(&mut self, n: usize) {
        debug_assert!(n <= self.len());
        self.start = (self.start + n).min(self.end);
        if self.start == self.end {
            self.start = 0;
            self.end = 0;
        }
    }

    /// Free space after the filled bytes, moving them to the front first if that frees room
    /// (and taking storage from the free list if there is none).
    pub fn spare(&mut self) -> &mut [u8] {
        if self.data.is_empty() {
            self.data = recycle::take_buffer();
        }
        if self.end == self.data.len() && self.start > 0 {
            self.data.copy_within(self.start..self.end, 0);
            self.end -= self.start;
            self.start = 0;
        }
        &mut self.data[self.end..]
    }

    /// Records that `n` bytes were written into [`IoBuf::spare`].
    pub fn fill(&mut self, n: usize) {
        debug_assert!(self.end + n <= self.data.len());
        self.end = (self.end + n).min(self.data.len());
    }

    /// Makes sure a head of up to `limit` bytes can sit contiguously: grows the buffer (never
    /// past `limit`) and moves the filled bytes to the front.
    pub fn make_room_for_head(&mut self, limit: usize) {
        if self.data.is_empty() {
            self.data = recycle::take_buffer();
        }
        if self.start > 0 && self.end == self.data.len() {
            self.spare();
        }
        if self.end == self.data.len() && self.data.len() < limit {
            let mut bigger = vec![0; limit].into_boxed_slice();
            let len = self.len();
            bigger[..len].copy_from_slice(self.filled());
            self.data = bigger;
            self.start = 0;
            self.end = len;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::IoBuf;

    #[test]
    fn fill_consume_compact() {
        let mut b = IoBuf::with_capacity(8);
        b.spare()[..6].copy_from_slice(b"abcdef");
        b.fill(6);
        b.consume(4);
        assert_eq!(b.filled(), b"ef");
        assert_eq!(b.spare().len(), 2);
        b.spare()[..2].copy_from_slice(b"gh");
        b.fill(2);
        // Full at the end: spare() compacts.
        assert_eq!(b.spare().len(), 4);
        assert_eq!(b.filled(), b"efgh");
        b.consume(4);
        assert!(b.is_empty());
        assert_eq!(b.spare().len(), 8);
    }

    #[test]
    fn storage_comes_and_goes() {
        let mut b = IoBuf::unallocated();
        assert!(!b.is_allocated());
        assert_eq!(b.spare().len(), crate::recycle::BUFFER_BYTES);
        b.spare()[..3].copy_from_slice(b"abc");
        b.fill(3);
        b.release();
        assert!(b.is_allocated(), "pending bytes keep their storage");
        b.consume(3);
        b.release();
        assert!(!b.is_allocated());
        assert_eq!(b.filled(), b"");
    }

    #[test]
    fn grows_for_heads_up_to_the_limit() {
        let mut b = IoBuf::with_capacity(4);
        b.spare().copy_from_slice(b"wxyz");
        b.fill(4);
        b.consume(1);
        b.make_room_for_head(16);
        assert_eq!(b.filled(), b"xyz");
        assert_eq!(b.capacity(), 4, "compacting was enough");
        b.spare()[..1].copy_from_slice(b"!");
        b.fill(1);
        b.make_room_for_head(16);
        assert_eq!(b.capacity(), 16);
        assert_eq!(b.filled(), b"xyz!");
    }
}
