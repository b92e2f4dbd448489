//! An emulated server's memory cache: least recently used objects leave first, bounded in
//! bytes (the `lru` crate keeps the order; this keeps the byte count).

use lru::LruCache;

pub struct ByteLru {
    entries: LruCache<u32, u64>,
    used: u64,
    capacity: u64,
}

impl ByteLru {
    pub fn new(capacity: u64) -> ByteLru {
        ByteLru {
            entries: LruCache::unbounded(),
            used: 0,
            capacity,
        }
    }

    /// Looks `object` up and makes it the most recently used; a miss brings it in (the disk
    /// read that follows fills the cache), evicting the least recently used objects until it
    /// fits. An object larger than the whole cache is never kept. True for a hit.
    pub fn access(&mut self, object: u32, size: u64) -> bool {
        if self.entries.get(&object).is_some() {
            return true;
        }
        if size > self.capacity {
            return false;
        }
        while self.used + size > self.capacity {
            match self.entries.pop_lru() {
                Some((_, evicted)) => self.used -= evicted,
                None => break,
            }
        }
        self.entries.put(object, size);
        self.used += size;
        false
    }

    /// The objects held, in no particular order.
    pub fn objects(&self) -> impl Iterator<Item = u32> + '_ {
        self.entries.iter().map(|(&id, _)| id)
    }

    #[cfg(test)]
    pub fn used(&self) -> u64 {
        self.used
    }
}

#[cfg(test)]
mod tests {
    use super::ByteLru;

    #[test]
    fn evicts_least_recently_used_by_bytes() {
        let mut cache = ByteLru::new(100);
        assert!(!cache.access(1, 40));
        assert!(!cache.access(2, 40));
        assert!(cache.access(1, 40), "1 is now the most recent");
        assert!(!cache.access(3, 40), "evicts 2, the least recent");
        assert!(cache.access(1, 40));
        assert!(!cache.access(2, 40));
        assert_eq!(cache.used(), 80);
        assert!(!cache.access(4, 101), "larger than the cache: never kept");
        assert_eq!(cache.used(), 80);
    }
}
