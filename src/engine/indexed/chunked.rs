//! A vector kept in chunks of at most [`CHUNK`] elements: growing it never
//! copies more than one chunk.
//!
//! Why: a `Vec` grows by allocating a larger block and copying everything
//! into it (in Redis a module's reallocation is exactly that), so the one
//! grant that finds it full would copy every holder's slot (4 MB at 100,000
//! holders) on the server's thread. In chunks, a grant
//! past the end of the last chunk starts a new one; only the last chunk
//! grows in place of a copy of itself (by an eighth, to the end of the
//! allocator's size class, as `grow` does), so a key of few holders takes no
//! more memory than a vector would. An element is found by its index's high
//! bits (its chunk, from a table of a few hundred bytes that stays in the
//! cache) and low bits.

use super::{grow_up_to, size_class};

/// The elements in a chunk: 2,048 slots of 40 bytes are 80 KB, one of
/// jemalloc's size classes (and 2,048 links of 8 bytes 16 KB).
const CHUNK_BITS: u32 = 11;
pub(super) const CHUNK: usize = 1 << CHUNK_BITS;

#[derive(Debug, Clone)]
pub(super) struct Chunked<T> {
    /// Every chunk before the one that element `len` falls in is full
    /// ([`CHUNK`] elements); those after it, allocated ahead
    /// ([`Chunked::with_capacity`]), are empty.
    chunks: Vec<Vec<T>>,
    len: usize,
}

impl<T> Default for Chunked<T> {
    fn default() -> Self {
        Self {
            chunks: Vec::new(),
            len: 0,
        }
    }
}

impl<T> Chunked<T> {
    pub(super) fn len(&self) -> usize {
        self.len
    }

    #[inline]
    pub(super) fn get(&self, i: usize) -> Option<&T> {
        self.chunks.get(i >> CHUNK_BITS)?.get(i & (CHUNK - 1))
    }

    #[inline]
    pub(super) fn get_mut(&mut self, i: usize) -> Option<&mut T> {
        self.chunks
            .get_mut(i >> CHUNK_BITS)?
            .get_mut(i & (CHUNK - 1))
    }

    /// Appends `value`: into the chunk its index falls in (grown if full,
    /// up to a chunk), started if need be.
    pub(super) fn push(&mut self, value: T) {
        let at = self.len >> CHUNK_BITS;
        if at >= self.chunks.len() {
            self.chunks.push(Vec::new());
        }
        if let Some(chunk) = self.chunks.get_mut(at) {
            // Never past a chunk: pushed only where there is room for one.
            grow_up_to(chunk, CHUNK);
            chunk.push(value);
            self.len += 1;
        }
    }

    /// Room for `n` elements, each chunk allocated once (a key loaded
    /// whole): full chunks, the last to the end of its size class.
    pub(super) fn with_capacity(n: usize) -> Self {
        let size = std::mem::size_of::<T>().max(1);
        let mut chunks = Vec::with_capacity(n.div_ceil(CHUNK));
        let mut left = n;
        while left > 0 {
            let wanted = left.min(CHUNK);
            let capacity = (size_class(wanted.saturating_mul(size)) / size).clamp(wanted, CHUNK);
            chunks.push(Vec::with_capacity(capacity));
            left -= wanted;
        }
        Self { chunks, len: 0 }
    }

    /// Elements allocated (for MEMORY USAGE), and the bytes of the table of
    /// chunks.
    pub(super) fn capacity(&self) -> (usize, usize) {
        (
            self.chunks.iter().map(Vec::capacity).sum(),
            self.chunks.capacity() * std::mem::size_of::<Vec<T>>(),
        )
    }

    pub(super) fn iter(&self) -> impl Iterator<Item = &T> {
        self.chunks.iter().flatten()
    }
}

impl<T> IntoIterator for Chunked<T> {
    type Item = T;
    type IntoIter = std::iter::Flatten<std::vec::IntoIter<Vec<T>>>;

    fn into_iter(self) -> Self::IntoIter {
        self.chunks.into_iter().flatten()
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    proptest! {
        /// As a `Vec`: the same elements at the same indexes, whatever the
        /// pushes, a reservation first or not.
        #[test]
        fn holds_what_a_vec_holds(n in 0usize..(3 * CHUNK + 100), reserved in 0usize..(3 * CHUNK)) {
            let mut chunked = Chunked::with_capacity(reserved);
            let mut vec = Vec::new();
            for i in 0..n {
                chunked.push(i as u64);
                vec.push(i as u64);
                if let Some(x) = chunked.get_mut(i / 2) {
                    *x += 1;
                }
                vec[i / 2] += 1;
            }
            prop_assert_eq!(chunked.len(), vec.len());
            for i in 0..n + 3 {
                prop_assert_eq!(chunked.get(i), vec.get(i));
            }
            prop_assert!(chunked.iter().eq(vec.iter()));
            let full = n / CHUNK;
            prop_assert!(chunked.chunks.iter().take(full).all(|c| c.len() == CHUNK));
            prop_assert!(chunked.chunks.iter().skip(full + 1).all(Vec::is_empty));
            prop_assert!(chunked.chunks.iter().all(|c| c.capacity() <= CHUNK));
            prop_assert!(chunked.clone().into_iter().eq(vec.into_iter()));
        }
    }

    #[test]
    fn a_reserved_key_takes_its_elements_without_growing() {
        let mut chunked = Chunked::with_capacity(2 * CHUNK + 5);
        let (before, _) = chunked.capacity();
        for i in 0..2 * CHUNK + 5 {
            chunked.push(i);
        }
        assert_eq!(chunked.capacity().0, before);
        assert!(before < 2 * CHUNK + 16, "{before}");
    }

    #[test]
    fn a_small_one_takes_what_a_vector_would() {
        let mut chunked = Chunked::default();
        for i in 0..1000u64 {
            chunked.push([i; 5]);
        }
        let (elements, _) = chunked.capacity();
        assert!(elements < 1000 + 1000 / 8 + 8, "{elements}");
    }
}
