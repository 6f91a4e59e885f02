//! The background reaper: a module timer that removes holders whose lease ran
//! out, `unique.reap-batch` keys per tick every `unique.reap-interval` ms, on
//! primaries only, so that nobody has to schedule REAP for expired leases.
//!
//! It walks every database with a persistent `RM_Scan` cursor, one bounded
//! batch per tick, and hands each lock key to the same `reap_key` that
//! UNIQUE.REAP uses: replication, events and counters are identical.

use std::cell::RefCell;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::{Duration, Instant};

use redis_module::{Context, ContextFlags};

use crate::commands::reap::reap_key;
use crate::config;
use crate::datatype::LOCKS;
use crate::engine::Lock;
use crate::ffi::{self, ScanCursor, now_ms, select_db};

/// How often an idle reaper (interval 0) looks at its configuration again.
const IDLE_CHECK: Duration = Duration::from_secs(1);

/// How long the last tick took, and the longest so far, in µs (INFO unique).
static LAST_TICK_MICROS: AtomicI64 = AtomicI64::new(0);
static MAX_TICK_MICROS: AtomicI64 = AtomicI64::new(0);
/// Ticks that did work, and the keys they examined (INFO unique).
static TICKS: AtomicI64 = AtomicI64::new(0);
static KEYS_SCANNED: AtomicI64 = AtomicI64::new(0);

pub fn tick_micros() -> (i64, i64) {
    (
        LAST_TICK_MICROS.load(Ordering::Relaxed),
        MAX_TICK_MICROS.load(Ordering::Relaxed),
    )
}

/// Ticks that walked the keyspace, and the keys they examined, since start.
pub fn work_done() -> (i64, i64) {
    (
        TICKS.load(Ordering::Relaxed),
        KEYS_SCANNED.load(Ordering::Relaxed),
    )
}

/// Where the walk through the keyspace stands. Timers run on Redis's main
/// thread, so the state lives there.
struct Walk {
    db: i32,
    cursor: Option<ScanCursor>,
}

thread_local! {
    static WALK: RefCell<Walk> = const { RefCell::new(Walk { db: 0, cursor: None }) };
}

/// Arms the first tick; every tick arms the next one.
pub fn start(ctx: &Context) {
    schedule(ctx);
}

fn schedule(ctx: &Context) {
    let interval = config::REAP_INTERVAL.get();
    let period = if interval > 0 {
        Duration::from_millis(interval as u64)
    } else {
        IDLE_CHECK
    };
    ctx.create_timer(period, tick, ());
}

fn tick(ctx: &Context, (): ()) {
    let flags = ctx.get_flags();
    let primary = flags.contains(ContextFlags::MASTER) && !flags.contains(ContextFlags::LOADING);
    // While the server pauses writes (CLIENT PAUSE WRITE, a failover, the
    // end of a slot migration) nothing may be replicated: the next tick
    // after the pause removes what ended during it.
    if primary && config::REAP_INTERVAL.get() > 0 && !ffi::writes_paused() {
        let start = Instant::now();
        // A bug here must not stop the reaper, nor unwind into Redis.
        let _ = catch_unwind(AssertUnwindSafe(|| reap_batch(ctx, config::reap_batch())));
        let micros = i64::try_from(start.elapsed().as_micros()).unwrap_or(i64::MAX);
        LAST_TICK_MICROS.store(micros, Ordering::Relaxed);
        MAX_TICK_MICROS.fetch_max(micros, Ordering::Relaxed);
    }
    schedule(ctx);
}

/// Examines up to `batch` keys, continuing where the last tick stopped and
/// moving on to the next database when one is done. Returns the holders removed.
pub fn reap_batch(ctx: &Context, batch: usize) -> usize {
    let now = now_ms();
    WALK.with(|walk| {
        let walk = &mut *walk.borrow_mut();
        if walk.cursor.is_none() {
            walk.cursor = ScanCursor::new();
        }
        let Some(cursor) = walk.cursor.as_mut() else {
            return 0;
        };
        let (mut budget, mut removed, mut wrapped) = (batch, 0, false);
        while budget > 0 {
            if !select_db(ctx, walk.db) {
                // Past the last database: start over, once per tick.
                if wrapped || walk.db == 0 {
                    break;
                }
                walk.db = 0;
                cursor.restart();
                wrapped = true;
                continue;
            }
            let mut expired = Vec::new();
            let mut more = true;
            while more && budget > 0 {
                let mut seen = 0usize;
                // Read the lock where the scan already opened it: most have
                // nothing to remove and need no second lookup.
                more = cursor.scan(ctx, &LOCKS, &mut |name, lock: Option<&Lock>| {
                    seen += 1;
                    if lock.is_some_and(|lock| lock.has_expired(now)) {
                        expired.push(name.to_vec());
                    }
                });
                budget = budget.saturating_sub(seen);
                KEYS_SCANNED.fetch_add(seen as i64, Ordering::Relaxed);
            }
            for name in expired {
                removed += reap_key(ctx, &ctx.create_string(name), now, None);
            }
            if !more {
                walk.db += 1;
                cursor.restart();
            }
        }
        TICKS.fetch_add(1, Ordering::Relaxed);
        removed
    })
}
