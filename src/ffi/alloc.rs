//! The module's allocator inside Redis: Redis's own (`RedisModule_Alloc`
//! and friends), so that Redis counts the module's memory in `used_memory`,
//! `MEMORY USAGE` and maxmemory.
//!
//! `redis-module`'s `RedisAlloc` forwards only allocation and freeing, so
//! Rust makes the other two of them: growing a block as allocating a new one,
//! copying and freeing (even where the allocator would have grown it in
//! place), and a zeroed block as writing zeros over a new one. This one hands
//! those to Redis too (`RedisModule_Realloc`, `RedisModule_Calloc`): a zeroed
//! table of a megabyte then comes from pages the kernel gives zeroed, written
//! only as it fills, not all at once in the command that allocates it.

use std::alloc::{GlobalAlloc, Layout};

use redis_module::alloc::RedisAlloc;
use redis_module::raw;

/// The alignment of every block Redis's allocators give (jemalloc's and the
/// C library's on 64-bit Linux) at least as large: a layout that asks more
/// goes through `RedisAlloc`, which rounds its size to get it.
const MALLOC_ALIGN: usize = 16;

/// Redis's allocator, with its `realloc` and `calloc`.
#[derive(Debug, Default, Clone, Copy)]
pub struct RedisAllocator;

/// `layout`'s size rounded up to its alignment, as `RedisAlloc` rounds it: a
/// block of such a size, in the allocator's size class, is that aligned.
fn rounded(size: usize, align: usize) -> usize {
    (size + align - 1) & !(align - 1)
}

// SAFETY: every block comes from Redis's allocator, through `RedisAlloc` or
// the API's `realloc` and `calloc` (the same allocator: zmalloc), is aligned
// as its layout asks (`MALLOC_ALIGN`, or `RedisAlloc`'s rounding) and is
// freed by `RedisAlloc`, which gives it back to that allocator.
unsafe impl GlobalAlloc for RedisAllocator {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller keeps `alloc`'s contract, which is RedisAlloc's.
        unsafe { RedisAlloc.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from this allocator, hence from Redis's.
        unsafe { RedisAlloc.dealloc(ptr, layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the API's table is filled when the module loads, before
        // any allocation, and never written again: a plain read of it.
        let calloc = unsafe { raw::RedisModule_Calloc };
        match calloc {
            Some(calloc) if layout.align() <= MALLOC_ALIGN => {
                // SAFETY: a size of at least one byte (GlobalAlloc's
                // contract), rounded to the alignment asked for.
                unsafe { calloc(1, rounded(layout.size(), layout.align())) }.cast()
            }
            _ => {
                // SAFETY: `alloc`'s contract is the caller's; the block,
                // when there is one, has `layout.size()` bytes to zero.
                unsafe {
                    let ptr = self.alloc(layout);
                    if !ptr.is_null() {
                        std::ptr::write_bytes(ptr, 0, layout.size());
                    }
                    ptr
                }
            }
        }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: as in `alloc_zeroed`.
        let realloc = unsafe { raw::RedisModule_Realloc };
        match realloc {
            Some(realloc) if layout.align() <= MALLOC_ALIGN => {
                // SAFETY: `ptr` came from Redis's allocator (this one) and
                // `new_size` is not zero (GlobalAlloc's contract).
                unsafe { realloc(ptr.cast(), rounded(new_size, layout.align())) }.cast()
            }
            _ => {
                // SAFETY: GlobalAlloc's contract makes `new_size` with
                // `layout.align()` a valid layout; both blocks hold the
                // smaller size, and the old one is freed once copied.
                unsafe {
                    let new_layout = Layout::from_size_align_unchecked(new_size, layout.align());
                    let new = self.alloc(new_layout);
                    if !new.is_null() {
                        std::ptr::copy_nonoverlapping(ptr, new, layout.size().min(new_size));
                        self.dealloc(ptr, layout);
                    }
                    new
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::rounded;

    #[test]
    fn a_size_is_rounded_up_to_its_alignment() {
        assert_eq!(rounded(1, 1), 1);
        assert_eq!(rounded(8, 16), 16);
        assert_eq!(rounded(17, 16), 32);
        assert_eq!(rounded(48, 16), 48);
        assert_eq!(rounded(4, 8), 8);
    }
}
