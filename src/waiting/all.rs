//! Blocking and serving the calls over several keys (`UNIQUE.LOCKALL ...
//! WAIT`): the Redis side of the rule in `multi.rs`. A multi-key waiter has
//! callbacks of its own ([`AllCallbacks`]), so the single-key waiters'
//! bookkeeping does not change; it draws its arrival number from the same
//! count, and its timers are counted with theirs.

use std::cell::RefCell;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::time::Duration;

use redis_module::{Context, RedisResult, RedisValue};

use super::multi::{AllCall, Multi, MultiWaiter, ServedAll};
use super::{
    INTERNAL_ERROR, KeyId, LONGEST_TIMER_MS, NO_KEY_PERMISSION, arm_wake_up, serve_key,
    serve_queue, stop_deadline, wake_at, with_waiters,
};
use crate::engine::GroupName;
use crate::ffi::{
    self, AclUser, BlockHandler, Blocked, TimerHandler, WaiterReply, now_ms, selected_db,
};
use crate::logging;
use crate::metrics::{self, Event};

thread_local! {
    /// On Redis's main thread, as the single-key waiters.
    static MULTI: RefCell<Multi<Blocked>> = RefCell::new(Multi::default());
}

/// Runs `f` on the multi-key waiters; `f` must not call out.
fn with_multi<T>(f: impl FnOnce(&mut Multi<Blocked>) -> T) -> T {
    MULTI.with(|m| {
        let m = &mut m.borrow_mut();
        let out = f(m);
        super::WAITING[1].store(m.len(), std::sync::atomic::Ordering::Relaxed);
        out
    })
}

pub(super) fn waiting_on(db: i32, key: &[u8]) -> usize {
    with_multi(|m| {
        if m.len() == 0 {
            0 // the common case, on every LOCK: no lookup, no copy
        } else {
            m.waiting_on(&(db, key.to_vec()))
        }
    })
}

/// Multi-key waiters on `key`, per group they wait under there.
pub(super) fn waiting_by_group(db: i32, key: &[u8]) -> Vec<(Option<GroupName>, usize)> {
    with_multi(|m| {
        if m.len() == 0 {
            Vec::new()
        } else {
            m.by_group_on(&(db, key.to_vec()))
        }
    })
}

pub(super) fn waiting() -> usize {
    with_multi(|m| m.len())
}

pub(super) fn has_key(id: &KeyId) -> bool {
    with_multi(|m| m.has_key(id))
}

pub(super) fn keys() -> Vec<KeyId> {
    with_multi(|m| m.keys())
}

/// The arrival number of the multi-key waiter `id`'s capacity is reserved
/// for, if any.
pub(super) fn reserved_for(id: &KeyId) -> Option<usize> {
    with_multi(|m| {
        if m.len() == 0 {
            None
        } else {
            m.reserved_for(id)
        }
    })
}

/// Blocks the calling client for up to `timeout_ms` on every one of `keys`
/// (selected database, distinct), to be served by retrying `call` when all
/// of them can grant at once; `lock_type` is counted if the wait runs out.
/// `wake`: the key (its position) that refused and when it may have room.
/// `groups`: its GROUP on each key (counted by WAITERS GROUPS).
/// False when the client could not block.
pub fn block_all(
    ctx: &Context,
    keys: &[&[u8]],
    groups: Vec<Option<GroupName>>,
    call: Box<dyn AllCall>,
    timeout_ms: i64,
    wake: Option<(usize, i64)>,
    lock_type: &str,
) -> bool {
    let Some(client) = ffi::block_client::<AllCallbacks>(ctx) else {
        return false;
    };
    let seq = with_waiters(|w| w.next_seq());
    let deadline = if timeout_ms <= LONGEST_TIMER_MS {
        ffi::arm_timer::<AllCallbacks>(ctx, timeout_ms, seq)
    } else {
        None
    };
    if deadline.is_some() {
        with_waiters(|w| w.count_timer(true));
    }
    let db = selected_db(ctx);
    with_multi(|m| {
        m.push(MultiWaiter {
            client,
            call,
            keys: keys.iter().map(|k| (db, k.to_vec())).collect(),
            groups,
            lock_type: lock_type.into(),
            seq,
            deadline,
            user: ffi::caller_name(ctx).ok().map(Vec::into_boxed_slice),
        });
    });
    if let Some((i, at)) = wake
        && let Some(key) = keys.get(i)
    {
        wake_at(ctx, key, at);
    }
    true
}

/// Tries the multi-key waiter that the capacity of `key` (selected
/// database) is reserved for, if it is the oldest multi-key waiter on every
/// one of its keys: first the single-key waiters that came before it on its
/// other keys get their turn, then its call is run again on every key at
/// once. Returns its other keys when its wait ended (granted, or an error):
/// their reservation moved on, so they are to be served too; `None` when
/// nobody was served.
pub(super) fn serve_reserved(ctx: &Context, key: &[u8]) -> Option<Vec<Vec<u8>>> {
    let id = (selected_db(ctx), key.to_vec());
    let seq = reserved_for(&id)?;
    let keys = with_multi(|m| {
        m.eligible(seq)
            .then(|| m.waiters.get(&seq).map(|w| w.keys.clone()))
            .flatten()
    })?;
    for other in keys.iter().filter(|k| **k != id) {
        serve_queue(ctx, &other.1);
    }
    // Out of the queues while its call runs, back in its place if refused.
    let waiter = with_multi(|m| m.remove(seq))?;
    let allowed = waiter.user.as_deref().is_none_or(|user| {
        AclUser::by_name(ctx, user).is_some_and(|acl| {
            waiter
                .keys
                .iter()
                .all(|(_, key)| acl.may_lock(&ctx.create_string(key.as_slice())))
        })
    });
    let served = if allowed {
        catch_unwind(AssertUnwindSafe(|| waiter.call.retry(ctx)))
            .unwrap_or_else(|_| ServedAll::Failed(INTERNAL_ERROR.to_owned()))
    } else {
        ServedAll::Failed(NO_KEY_PERMISSION.to_owned())
    };
    let reply = match served {
        ServedAll::Granted(tokens) => Some(waiter.call.granted(tokens)),
        ServedAll::Failed(e) => Some(WaiterReply::Error(e)),
        ServedAll::Lapsed => {
            metrics::record(now_ms(), Some(&waiter.lock_type), Event::TimedOut);
            None
        }
        ServedAll::Denied { wake } => {
            if let Some((i, at)) = wake
                && let Some((_, key)) = waiter.keys.get(i)
            {
                wake_at(ctx, key, at);
            }
            with_multi(|m| m.push(waiter));
            return None;
        }
    };
    stop_deadline(ctx, waiter.deadline);
    ffi::unblock(waiter.client, reply);
    Some(
        waiter
            .keys
            .into_iter()
            .filter(|k| *k != id)
            .map(|(_, key)| key)
            .collect(),
    )
}

/// Ends the wait of every multi-key waiter one of whose keys `moved` picks,
/// with the error `reply` gives for that key; returns how many.
pub(super) fn redirect(
    ctx: &Context,
    moved: &impl Fn(&[u8]) -> bool,
    reply: &mut impl FnMut(&[u8]) -> String,
) -> usize {
    let taken = with_multi(|m| m.take_where(moved));
    let n = taken.len();
    for ((_, key), waiter) in taken {
        stop_deadline(ctx, waiter.deadline);
        ffi::unblock(waiter.client, Some(WaiterReply::Error(reply(&key))));
    }
    n
}

/// A wait that ended without a grant (`why`): counted as timed out, and the
/// waiter's keys are served soon after, since their reservation moved on.
fn gave_up(ctx: &Context, waiter: &MultiWaiter<Blocked>, why: &str) {
    metrics::record(now_ms(), Some(&waiter.lock_type), Event::TimedOut);
    for id in &waiter.keys {
        arm_wake_up(ctx, Duration::from_millis(1), serve_key, id.clone());
    }
    logging::verbose(ctx, || {
        format!(
            "a client waiting on {} keys (db {}) got nil: {why}",
            waiter.keys.len(),
            waiter.keys.first().map_or(0, |k| k.0)
        )
    });
}

/// What Redis calls back for a multi-key waiter, and its deadline timer.
struct AllCallbacks;

impl TimerHandler for AllCallbacks {
    /// The deadline of waiter `seq` came: nil, and nothing was added.
    fn fired(ctx: &Context, seq: usize) {
        with_waiters(|w| w.count_timer(false));
        if let Some(mut waiter) = with_multi(|m| m.remove(seq)) {
            waiter.deadline = None; // it fired: nothing to stop
            let why = super::deadline_reason(waiter.call.lapsed(now_ms()));
            gave_up(ctx, &waiter, why);
            ffi::unblock(waiter.client, None);
        }
    }
}

impl BlockHandler for AllCallbacks {
    /// CLIENT UNBLOCK ended the wait: nil, and nothing was added.
    fn on_timeout(ctx: &Context, blocked: Option<Blocked>) -> RedisResult {
        let waiter = blocked.and_then(|b| with_multi(|m| m.seq_of(b).and_then(|s| m.remove(s))));
        if let Some(waiter) = waiter {
            stop_deadline(ctx, waiter.deadline);
            gave_up(ctx, &waiter, "CLIENT UNBLOCK");
            // The reply is this callback's; unblocking only frees the handle.
            ffi::unblock(waiter.client, None);
        }
        Ok(RedisValue::Null)
    }

    /// The client went away while waiting: forget it, free its handle.
    fn on_disconnect(ctx: &Context, blocked: Blocked) {
        let waiter = with_multi(|m| m.seq_of(blocked).and_then(|s| m.remove(s)));
        if let Some(waiter) = waiter {
            stop_deadline(ctx, waiter.deadline);
            for id in &waiter.keys {
                arm_wake_up(ctx, Duration::from_millis(1), serve_key, id.clone());
            }
            ffi::unblock(blocked, None);
        }
    }
}
