//! The module's configuration (`unique.<name>`): settable as module arguments,
//! in redis.conf and with CONFIG SET. Redis enforces the ranges.

use std::sync::atomic::{AtomicI64, Ordering};

pub const MAX_META_BYTES_DEFAULT: i64 = 16 * 1024;
pub const MAX_META_BYTES_MAX: i64 = 1024 * 1024;

/// unique.max-meta-bytes: the largest META accepted.
pub static MAX_META_BYTES: AtomicI64 = AtomicI64::new(MAX_META_BYTES_DEFAULT);

pub fn max_meta_bytes() -> usize {
    usize::try_from(MAX_META_BYTES.load(Ordering::Relaxed)).unwrap_or(0)
}
