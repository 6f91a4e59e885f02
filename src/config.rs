//! The module's configuration (`unique.<name>`): settable as module arguments
//! (without the prefix), in redis.conf and with CONFIG SET. Redis enforces the
//! ranges given at registration (`lib.rs`).
//!
//! It imports nothing from the crate: what reads an option lives with its
//! user (the metrics limits in `metrics.rs`).

use std::sync::atomic::{AtomicI64, Ordering};

/// A numeric option: its name without the `unique.` prefix, default and range.
pub struct Numeric {
    pub name: &'static str,
    pub default: i64,
    pub min: i64,
    pub max: i64,
    pub value: AtomicI64,
}

impl Numeric {
    const fn new(name: &'static str, default: i64, min: i64, max: i64) -> Self {
        Self {
            name,
            default,
            min,
            max,
            value: AtomicI64::new(default),
        }
    }

    pub fn get(&self) -> i64 {
        self.value.load(Ordering::Relaxed)
    }

    fn get_usize(&self) -> usize {
        usize::try_from(self.get()).unwrap_or(0)
    }
}

/// Background reaper period in ms; 0 turns it off.
pub static REAP_INTERVAL: Numeric = Numeric::new("reap-interval", 100, 0, 60_000);
/// Lock keys examined per background tick.
pub static REAP_BATCH: Numeric = Numeric::new("reap-batch", 100, 1, 100_000);
/// The largest META accepted, in bytes.
pub static MAX_META_BYTES: Numeric = Numeric::new("max-meta-bytes", 16 * 1024, 0, 1024 * 1024);
/// How many minutes of per-minute counters are kept.
pub static METRICS_MINUTES: Numeric = Numeric::new("metrics-minutes", 60, 1, 1440);
/// Distinct type names counted before `other`.
pub static METRICS_MAX_TYPES: Numeric = Numeric::new("metrics-max-types", 64, 1, 4096);

pub fn max_meta_bytes() -> usize {
    MAX_META_BYTES.get_usize()
}

pub fn reap_batch() -> usize {
    REAP_BATCH.get_usize().max(1)
}

pub fn metrics_minutes() -> usize {
    METRICS_MINUTES.get_usize().max(1)
}

pub fn metrics_max_types() -> usize {
    METRICS_MAX_TYPES.get_usize().max(1)
}
