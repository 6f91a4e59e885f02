//! Where this server's waiters live: the single-key waiters (`Waiters`,
//! `queues.rs`) and the multi-key ones (`Multi`, `multi.rs`), each a
//! thread-local on Redis's main thread (every callback runs there), and
//! how many wait in each, readable without either.

use std::cell::RefCell;
use std::sync::atomic::{AtomicUsize, Ordering};

use super::multi::Multi;
use super::queues::Waiters;
use super::types::KeyId;
use crate::engine::GroupName;
use crate::ffi::Blocked;

thread_local! {
    static WAITERS: RefCell<Waiters<Blocked>> = RefCell::new(Waiters::default());
    static MULTI: RefCell<Multi<Blocked>> = RefCell::new(Multi::default());
}

/// How many clients wait (single-key, multi-key), as of the last change:
/// read by every LOCK and UNLOCK before anything else about waiters (a
/// plain load, where the waiters themselves are a thread-local behind a
/// `RefCell`, two calls away in a loaded module). Kept by [`with_waiters`]
/// and [`with_multi`], the only ways to the waiters.
static WAITING: [AtomicUsize; 2] = [AtomicUsize::new(0), AtomicUsize::new(0)];

/// Runs `f` on the single-key waiters. `f` must not call out (a retry,
/// Redis): what it calls could come back here.
pub(super) fn with_waiters<T>(f: impl FnOnce(&mut Waiters<Blocked>) -> T) -> T {
    WAITERS.with(|w| {
        let w = &mut w.borrow_mut();
        let out = f(w);
        WAITING[0].store(w.waiting(), Ordering::Relaxed);
        out
    })
}

/// Runs `f` on the multi-key waiters; `f` must not call out.
pub(super) fn with_multi<T>(f: impl FnOnce(&mut Multi<Blocked>) -> T) -> T {
    MULTI.with(|m| {
        let m = &mut m.borrow_mut();
        let out = f(m);
        WAITING[1].store(m.len(), Ordering::Relaxed);
        out
    })
}

/// Whether no client waits on any key.
#[inline]
pub(super) fn nobody_waits() -> bool {
    WAITING.iter().all(|n| n.load(Ordering::Relaxed) == 0)
}

/// How many multi-key waiters there are.
pub(super) fn multi_waiting() -> usize {
    WAITING[1].load(Ordering::Relaxed)
}

/// Multi-key waiters on `key` of database `db`.
pub(super) fn multi_waiting_on(db: i32, key: &[u8]) -> usize {
    if multi_waiting() == 0 {
        return 0; // the common case, on every LOCK: no lookup, no copy
    }
    with_multi(|m| m.waiting_on(&(db, key.to_vec())))
}

/// Multi-key waiters on `key` of database `db`, per group they wait under
/// there.
pub(super) fn multi_by_group(db: i32, key: &[u8]) -> Vec<(Option<GroupName>, usize)> {
    if multi_waiting() == 0 {
        return Vec::new();
    }
    with_multi(|m| m.by_group_on(&(db, key.to_vec())))
}

/// The arrival number of the multi-key waiter that `id`'s capacity is
/// reserved for, if any.
pub(super) fn reserved_for(id: &KeyId) -> Option<usize> {
    if multi_waiting() == 0 {
        return None;
    }
    with_multi(|m| m.reserved_for(id))
}

/// Whether anyone, single-key or multi-key, waits on `id`.
pub(super) fn has_key(id: &KeyId) -> bool {
    with_waiters(|w| w.has_queue(id)) || with_multi(|m| m.has_key(id))
}

/// Every key someone waits on, once each.
pub(super) fn keys() -> Vec<KeyId> {
    let mut keys = with_waiters(|w| w.keys());
    keys.extend(with_multi(|m| m.keys()));
    keys.sort();
    keys.dedup();
    keys
}
