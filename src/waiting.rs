//! Blocking acquire: `UNIQUE.LOCK ... WAIT ms`.
//!
//! A denied caller is blocked (`RM_BlockClient`) and queued on its key, in
//! arrival order. Whenever a slot may have freed, the module serves that
//! key's queue on the spot: each waiter, oldest first, gets its own LOCK run
//! again (its own LIMIT, TTL, TYPE, OWNER, META) and, if granted, is
//! unblocked with its token. Granting in the context of the change that
//! freed the slot keeps replication in order and lets nobody slip in between.
//!
//! A slot may free on UNLOCK, REAP and the background reaper (they call
//! [`slot_freed`]), when the key is deleted (the `del` and `evicted` keyspace
//! events, FLUSHDB/FLUSHALL) and when a lease runs out: a module timer is
//! armed for the earliest lease of a key that has waiters, so that a waiter
//! is served with no other client touching the key.
//!
//! (Redis 7.0 only serves clients blocked *on keys* while the key exists,
//! and a lock's key goes with its last holder: hence this queue of our own.)

use std::cell::{Cell, RefCell};
use std::collections::{HashMap, VecDeque};
use std::time::Duration;

use redis_module::{Context, RedisResult, RedisString, RedisValue};

use crate::commands::lock::{self, Served};
use crate::ffi::{self, Blocked, WaiterReply, now_ms, select_db, selected_db};
use crate::metrics::{self, Event};

/// One blocked LOCK: its client and its own arguments (key, jid, options).
struct Waiter {
    blocked: Blocked,
    args: Vec<Vec<u8>>,
    /// When its WAIT runs out (ms, taken just before blocking: never later
    /// than Redis's own deadline for it).
    deadline: i64,
}

type KeyId = (i32, Vec<u8>);

thread_local! {
    /// Waiters per key, oldest first. Redis calls every callback on its main
    /// thread, so the queues live there.
    static QUEUES: RefCell<HashMap<KeyId, VecDeque<Waiter>>> = RefCell::new(HashMap::new());
    /// Which key each blocked client waits on.
    static BLOCKED: RefCell<HashMap<Blocked, KeyId>> = RefCell::new(HashMap::new());
    /// Clients waiting in all, for the checks on every command and event.
    static TOTAL: Cell<usize> = const { Cell::new(0) };
    /// The earliest time a wake-up timer is armed for, per key.
    static TIMERS: RefCell<HashMap<KeyId, i64>> = RefCell::new(HashMap::new());
    /// Set while a queue is being served: grants made for waiters must not
    /// start serving again.
    static SERVING: Cell<bool> = const { Cell::new(false) };
    /// Wake-up timers armed and not yet fired (INFO `unique_timers_armed`).
    static ARMED: Cell<usize> = const { Cell::new(0) };
}

/// How many of this file's timers are armed and have not fired yet.
pub fn timers_armed() -> usize {
    ARMED.get()
}

/// `ctx.create_timer`, counted in [`timers_armed`] until it fires.
fn arm<T: 'static>(ctx: &Context, delay: Duration, callback: fn(&Context, T), data: T) {
    ARMED.set(ARMED.get() + 1);
    ctx.create_timer(
        delay,
        move |ctx: &Context, data: T| {
            ARMED.set(ARMED.get().saturating_sub(1));
            callback(ctx, data);
        },
        data,
    );
}

/// How many clients wait on `key` of the selected database.
pub fn waiting_on(ctx: &Context, key: &[u8]) -> usize {
    QUEUES.with(|q| {
        let queues = q.borrow();
        if queues.is_empty() {
            return 0; // the common case, on every LOCK: no lookup, no copy
        }
        queues
            .get(&(selected_db(ctx), key.to_vec()))
            .map_or(0, VecDeque::len)
    })
}

/// How many clients wait, on every key.
pub fn waiting() -> usize {
    TOTAL.get()
}

/// Blocks the calling client (the LOCK `args`) for up to `timeout_ms` at the
/// end of its key's queue. `lease_end` is the earliest end of lease among the
/// key's holders, if any has one. False when the client could not block.
pub fn block(ctx: &Context, args: &[RedisString], timeout_ms: i64, lease_end: Option<i64>) -> bool {
    let Some(key) = args.get(1) else {
        return false;
    };
    let deadline = now_ms().saturating_add(timeout_ms);
    let Some(blocked) = ffi::block_client(ctx, timeout_ms) else {
        return false;
    };
    let id = (selected_db(ctx), key.to_vec());
    let args = args.iter().map(|a| a.to_vec()).collect();
    BLOCKED.with(|b| b.borrow_mut().insert(blocked, id.clone()));
    QUEUES.with(|q| {
        q.borrow_mut().entry(id).or_default().push_back(Waiter {
            blocked,
            args,
            deadline,
        })
    });
    TOTAL.set(TOTAL.get() + 1);
    if let Some(at) = lease_end {
        wake_at(ctx, key, at);
    }
    true
}

/// A change may have freed a slot of `key` (selected database): serve its
/// waiters.
pub fn slot_freed(ctx: &Context, key: &[u8]) {
    if !SERVING.get() && waiting_on(ctx, key) > 0 {
        serve(ctx, key);
    }
}

/// Serves the queue of `key` (selected database), oldest waiter first; each
/// waiter gets or not according to its own call. Those still denied stay, in
/// order, and a wake-up is armed for the next lease to end.
fn serve(ctx: &Context, key: &[u8]) {
    let id = (selected_db(ctx), key.to_vec());
    let Some(queue) = QUEUES.with(|q| q.borrow_mut().remove(&id)) else {
        return;
    };
    SERVING.set(true);
    let mut still = VecDeque::with_capacity(queue.len());
    let mut next_lease_end: Option<i64> = None;
    let now = now_ms();
    for waiter in queue {
        // Its wait has run out: Redis times it out (nil) before it would
        // deliver a grant made now, and then drops that grant's reply, so
        // the hold would stay with a client that never learns of it.
        if now >= waiter.deadline {
            still.push_back(waiter);
            continue;
        }
        let reply = match lock::serve_waiter(ctx, &waiter.args) {
            Served::Granted(token) => WaiterReply::Token(token),
            Served::Failed(e) => WaiterReply::Error(e),
            Served::Denied { lease_end } => {
                next_lease_end = match (next_lease_end, lease_end) {
                    (Some(a), Some(b)) => Some(a.min(b)),
                    (a, b) => a.or(b),
                };
                still.push_back(waiter);
                continue;
            }
        };
        BLOCKED.with(|b| b.borrow_mut().remove(&waiter.blocked));
        TOTAL.set(TOTAL.get().saturating_sub(1));
        ffi::unblock(waiter.blocked, Some(reply));
    }
    SERVING.set(false);
    if !still.is_empty() {
        // No waiter could block in between: nothing to merge.
        QUEUES.with(|q| q.borrow_mut().insert(id, still));
        if let Some(at) = next_lease_end {
            wake_at(ctx, key, at);
        }
    }
}

/// Serves the waiters of `key` (selected database) at `at`, unless a wake-up
/// at or before `at` is armed already.
fn wake_at(ctx: &Context, key: &[u8], at: i64) {
    let id = (selected_db(ctx), key.to_vec());
    let armed = TIMERS.with(|t| t.borrow().get(&id).is_some_and(|&when| when <= at));
    if armed {
        return;
    }
    TIMERS.with(|t| t.borrow_mut().insert(id.clone(), at));
    // A lease is live while now < expires_at: wake at expires_at exactly.
    let delay = u64::try_from(at.saturating_sub(now_ms()))
        .unwrap_or(0)
        .max(1);
    arm(ctx, Duration::from_millis(delay), wake, (id, at));
}

fn wake(ctx: &Context, ((db, key), at): (KeyId, i64)) {
    TIMERS.with(|t| {
        let mut timers = t.borrow_mut();
        if timers.get(&(db, key.clone())) == Some(&at) {
            timers.remove(&(db, key.clone()));
        }
    });
    serve_key(ctx, (db, key));
}

/// `key` of database `db` was deleted (DEL, UNLINK, eviction, expiry): serve
/// its waiters, soon after from a timer, since a keyspace notification must
/// not write.
pub fn key_gone(ctx: &Context, db: i32, key: &[u8]) {
    let id = (db, key.to_vec());
    if QUEUES.with(|q| q.borrow().contains_key(&id)) {
        arm(ctx, Duration::from_millis(1), serve_key, id);
    }
}

/// A database or all of them were flushed: serve every waiter, soon after.
pub fn flushed(ctx: &Context) {
    let ids: Vec<KeyId> = QUEUES.with(|q| q.borrow().keys().cloned().collect());
    for id in ids {
        arm(ctx, Duration::from_millis(1), serve_key, id);
    }
}

fn serve_key(ctx: &Context, (db, key): KeyId) {
    if select_db(ctx, db) {
        slot_freed(ctx, &key);
    }
}

/// Removes `blocked` from its queue; true when it was waiting there.
fn forget(blocked: Blocked) -> bool {
    let Some(id) = BLOCKED.with(|b| b.borrow_mut().remove(&blocked)) else {
        return false;
    };
    TOTAL.set(TOTAL.get().saturating_sub(1));
    QUEUES.with(|q| {
        let mut queues = q.borrow_mut();
        if let Some(queue) = queues.get_mut(&id) {
            queue.retain(|w| w.blocked != blocked);
            if queue.is_empty() {
                queues.remove(&id);
            }
        }
    });
    true
}

/// The wait ran out: nil, and nothing was added.
pub fn on_timeout(_ctx: &Context, blocked: Option<Blocked>, args: &[RedisString]) -> RedisResult {
    if let Some(blocked) = blocked
        && forget(blocked)
    {
        // The reply is this callback's; unblocking only frees the handle.
        ffi::unblock(blocked, None);
    }
    metrics::record(now_ms(), Some(&lock::requested_type(args)), Event::TimedOut);
    Ok(RedisValue::Null)
}

/// The client went away while waiting: forget it, free its handle.
pub fn on_disconnect(blocked: Blocked) {
    if forget(blocked) {
        ffi::unblock(blocked, None);
    }
}
