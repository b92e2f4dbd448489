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
    /// The size of the storage taken at the first read after a release.
    first_size: usize,
}

impl IoBuf {
    /// A buffer without storage yet: it takes a pooled one of [`recycle::BUFFER_BYTES`] at its
    /// first read.
    pub fn unallocated() -> Self {
        IoBuf::unallocated_of(recycle::BUFFER_BYTES)
    }

    /// A buffer for request heads: it takes [`recycle::HEAD_BUFFER_BYTES`] at its first read,
    /// and grows when a head or a body needs more ([`IoBuf::make_room_for_head`],
    /// [`IoBuf::make_room_for_body`]).
    pub fn unallocated_for_heads() -> Self {
        IoBuf::unallocated_of(recycle::HEAD_BUFFER_BYTES)
    }

    fn unallocated_of(first_size: usize) -> Self {
        IoBuf {
            data: Box::default(),
            start: 0,
            end: 0,
            first_size,
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
            first_size: capacity,
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
            self.data = recycle::take_buffer(self.first_size);
        }
        if self.end == self.data.len() && self.start > 0 {
            self.data.copy_within(self.start..self.end, 0);
            self.end -= self.start;
            self.start = 0;
        }
        &mut self.data[self.end..]
    }

    /// Keeps the first `len` filled bytes and drops the rest.
    pub fn truncate(&mut self, len: usize) {
        if len < self.len() {
            self.end = self.start + len;
        }
    }

    /// Records that `n` bytes were written into [`IoBuf::spare`].
    pub fn fill(&mut self, n: usize) {
        debug_assert!(self.end + n <= self.data.len());
        self.end = (self.end + n).min(self.data.len());
    }

    /// Makes sure a head of up to `limit` bytes can sit contiguously: when the buffer is full,
    /// moves the filled bytes to the front, or grows it in steps (a head buffer to the pooled
    /// size first, then to `limit`), so a connection holds only as much as its head has
    /// grown to.
    pub fn make_room_for_head(&mut self, limit: usize) {
        if self.data.is_empty() {
            self.data = recycle::take_buffer(self.first_size);
        }
        if self.start > 0 && self.end == self.data.len() {
            self.spare();
        }
        if self.end == self.data.len() && self.data.len() < limit {
            let next = if self.data.len() < recycle::BUFFER_BYTES {
                recycle::BUFFER_BYTES.min(limit)
            } else {
                limit
            };
            self.move_to(recycle::take_buffer(next));
        }
    }

    /// Gives a head buffer the pooled size before a body is relayed through it: a body moved
    /// 4 KiB at a time would cost four times the reads and writes.
    pub fn make_room_for_body(&mut self) {
        if self.is_allocated() && self.data.len() < recycle::BUFFER_BYTES {
            self.move_to(recycle::take_buffer(recycle::BUFFER_BYTES));
        }
    }

    /// Moves the filled bytes to the front of `bigger`, which becomes the storage; the old
    /// storage goes back to the free list.
    fn move_to(&mut self, mut bigger: Box<[u8]>) {
        let len = self.len();
        bigger[..len].copy_from_slice(self.filled());
        recycle::give_buffer(std::mem::replace(&mut self.data, bigger));
        self.start = 0;
        self.end = len;
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
    fn a_head_buffer_grows_by_steps() {
        use crate::recycle::{BUFFER_BYTES, HEAD_BUFFER_BYTES};
        let mut b = IoBuf::unallocated_for_heads();
        assert_eq!(b.spare().len(), HEAD_BUFFER_BYTES);
        b.fill(HEAD_BUFFER_BYTES);
        b.make_room_for_head(64 * 1024);
        assert_eq!(b.capacity(), BUFFER_BYTES, "the pooled size next");
        assert_eq!(b.len(), HEAD_BUFFER_BYTES);
        b.fill(b.spare_len());
        b.make_room_for_head(64 * 1024);
        assert_eq!(b.capacity(), 64 * 1024, "then the limit");
        assert_eq!(b.len(), BUFFER_BYTES);
        // Back to the small size once released empty.
        b.consume(b.len());
        b.release();
        assert_eq!(b.spare().len(), HEAD_BUFFER_BYTES);
        // A body gets the pooled size, its bytes kept.
        b.spare()[..3].copy_from_slice(b"abc");
        b.fill(3);
        b.make_room_for_body();
        assert_eq!((b.capacity(), b.filled()), (BUFFER_BYTES, &b"abc"[..]));
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
