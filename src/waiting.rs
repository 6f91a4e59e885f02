//! Blocking acquire: `UNIQUE.LOCK ... WAIT ms`.
//!
//! A denied caller is blocked (`RM_BlockClient`) and queued on its key, in
//! arrival order. Whenever a slot may have freed, the module serves that
//! key's queue on the spot: each waiter, oldest first, gets its own LOCK run
//! again (its own LIMIT, TTL, TYPE, OWNER, META, as parsed when it blocked)
//! and, if granted, is unblocked with its token. Granting in the context of
//! the change that freed the slot keeps replication in order and lets nobody
//! slip in between.
//!
//! Serving is one loop with one owner, [`slot_freed`]: the command or timer
//! whose change may have freed a slot (LOCK or UNLOCK pruning or releasing,
//! REAP, the background reaper, a wake-up) calls it once the change is
//! finished (`commands::Freed`). Inside it, one pass of the serving rule
//! (`serve_pass`) retries each waiter; a retry never starts serving
//! itself, so the loop needs no guard against running inside itself.
//!
//! A slot also frees when the key is deleted (the `del`, `evicted` and
//! `expired` keyspace events, FLUSHDB/FLUSHALL: served soon after from a
//! timer) and when a lease runs out: a module timer is armed for the earliest
//! lease of a key that has waiters, so that a waiter is served with no other
//! client touching the key.
//!
//! (Redis 7.0 only serves clients blocked *on keys* while the key exists,
//! and a lock's key goes with its last holder: hence this queue of our own.)
//!
//! A waiter is served on its own user's authority: its key permissions are
//! checked again before each retry, so a user whose access to the key was
//! revoked while it waited gets `NOPERM` instead of a grant (as Redis 7.2+
//! does for its own blocked commands).
//!
//! The module also keeps each waiter's deadline, with a timer of its own:
//! given a timeout, Redis could time a client out after the module granted
//! it a slot in the same event-loop iteration, and then drop the grant's
//! reply, leaving a hold that nobody knows of. With the module deciding both,
//! a waiter gets exactly one outcome: its token, an error, or nil.
//!
//! This module knows nothing of LOCK: as Redis's own blocked clients keep
//! their command, a waiter keeps what retrying it takes (its call, parsed
//! once when it blocked, as a [`Call`], and the lock type it asked for),
//! given by LOCK when it blocks. The bookkeeping is one `Waiters` value
//! (`queues.rs`), and `serve_pass` a plain function: both are tested
//! without a server (`tests.rs`).

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::time::Duration;

use redis_module::{Context, RedisResult, RedisValue};

use crate::engine::GroupName;
use crate::ffi::{
    self, AclUser, BlockHandler, Blocked, TimerHandler, TimerId, WaiterReply, now_ms, select_db,
    selected_db,
};
use crate::logging;
use crate::metrics::{self, Event};

mod clock;
mod denials;
mod multi;
mod order;
mod parked;
mod pass;
mod queues;
mod state;
mod types;
use multi::MultiWaiter;
pub use multi::{AllCall, ServedAll};
use pass::serve_pass;
use state::{with_multi, with_waiters};
pub use types::{Admission, Call, Holdings, KeyHoldings, NoHolders, Served, Share};
use types::{KeyId, Waiter};

/// The longest delay given to a module timer, about 34.8 years: Redis adds a
/// timer's delay, in microseconds, to a 64-bit clock, so a delay near
/// `i64::MAX` ms would overflow and fire at once. A `WAIT` longer than this
/// waits without a deadline (until served, unblocked or disconnected).
pub const LONGEST_TIMER_MS: i64 = 1 << 40;

/// What a client is told when the module hits a bug: the error reply of a
/// panicking command, and of a waiter whose retry panicked.
pub const INTERNAL_ERROR: &str =
    "ERR internal error in the unique module (a bug: see the server log)";

/// What a waiter is told when its user may no longer lock its key: Redis's
/// text for a key its ACL does not allow.
pub const NO_KEY_PERMISSION: &str =
    "NOPERM this user has no permissions to access one of the keys used as arguments";

/// Whether no client waits on any key: the common case, on every LOCK and
/// UNLOCK, decided before any lookup by key.
#[inline]
pub fn nobody_waits() -> bool {
    state::nobody_waits()
}

/// How many clients wait on `key` of the selected database (LOCK's and
/// LOCKALL's alike).
pub fn waiting_on(ctx: &Context, key: &[u8]) -> usize {
    let db = selected_db(ctx);
    with_waiters(|w| w.waiting_on(db, key)) + state::multi_waiting_on(db, key)
}

/// Whether a client waiting on `key` (selected database) may be served
/// before a new call that the key's holders admit: a multi-key waiter, a
/// waiter without GROUPLIMIT or exclusive, or a waiting group that holds
/// fewer than the largest GROUPLIMIT its waiters gave (`holders`: the key,
/// pruned).
pub fn holds_back(ctx: &Context, key: &[u8], holders: &dyn KeyHoldings) -> bool {
    if nobody_waits() {
        return false;
    }
    let db = selected_db(ctx);
    // A multi-key waiter on the key holds its capacity back from newcomers.
    if state::multi_waiting_on(db, key) > 0 {
        return true;
    }
    with_waiters(|w| w.holds_back(db, key, holders))
}

/// Per group (`None` first, then by name), how many wait on `key`
/// (selected database).
pub fn waiting_by_group(ctx: &Context, key: &[u8]) -> Vec<(Option<GroupName>, usize)> {
    let db = selected_db(ctx);
    let mut groups: std::collections::BTreeMap<_, usize> =
        with_waiters(|w| w.by_group(db, key)).into_iter().collect();
    // Multi-key waiters (UNIQUE.LOCKALL) count under their group on this key.
    for (group, n) in state::multi_by_group(db, key) {
        *groups.entry(group).or_default() += n;
    }
    groups.into_iter().collect()
}

/// How many clients wait, on every key.
pub fn waiting() -> usize {
    with_waiters(|w| w.waiting()) + state::multi_waiting()
}

/// How many of this module's timers are armed: deadlines and wake-ups.
pub fn timers_armed() -> usize {
    with_waiters(|w| w.armed)
}

/// `ctx.create_timer` for a wake-up, counted in [`timers_armed`] until it
/// fires. (Wake-ups are never stopped: one that finds nothing to do is cheap.)
fn arm_wake_up<T: 'static>(ctx: &Context, delay: Duration, callback: fn(&Context, T), data: T) {
    with_waiters(|w| w.count_timer(true));
    ctx.create_timer(
        delay,
        move |ctx: &Context, data: T| {
            with_waiters(|w| w.count_timer(false));
            callback(ctx, data);
        },
        data,
    );
}

/// Stops the deadline timer of a waiter (single-key or multi-key) that got
/// its outcome otherwise.
fn stop_deadline(ctx: &Context, deadline: Option<TimerId>) {
    if let Some(timer) = deadline
        && ffi::stop_timer(ctx, timer)
    {
        with_waiters(|w| w.count_timer(false));
    }
}

/// What a denied call waits for: a slot of one key, or of every one of
/// several keys at once.
pub enum Wait<'a> {
    /// `UNIQUE.LOCK ... WAIT`: queued at the end of `key`'s queue, served by
    /// retrying `call`. `lease_end`: the earliest end of lease among the
    /// key's holders, if any has one.
    One {
        key: &'a [u8],
        call: Box<dyn Call>,
        share: Share,
        lease_end: Option<i64>,
    },
    /// `UNIQUE.LOCKALL ... WAIT`: queued on every one of `keys` (distinct),
    /// served by retrying `call` when all of them can grant at once (the
    /// rule in `multi.rs`). `groups`: its GROUP on each key (counted by
    /// WAITERS GROUPS); `wake`: the key (its position) that refused and when
    /// it may have room.
    All {
        keys: &'a [&'a [u8]],
        groups: Vec<Option<GroupName>>,
        call: Box<dyn AllCall>,
        wake: Option<(usize, i64)>,
    },
}

/// Blocks the calling client (selected database) for up to `timeout_ms`,
/// until `wait` is served; `lock_type` is counted if the wait runs out.
/// Single-key and multi-key waiters draw their arrival number from one
/// count. False when the client could not block.
pub fn block(ctx: &Context, wait: Wait<'_>, timeout_ms: i64, lock_type: &str) -> bool {
    let Some(client) = ffi::block_client::<Callbacks>(ctx) else {
        return false;
    };
    let seq = with_waiters(|w| w.next_seq());
    // Redis keeps a timer's due time in microseconds of a 64-bit clock: a
    // longer wait would overflow it and fire at once. Beyond the longest
    // timer a wait has no deadline at all, so it never ends early.
    let deadline = if timeout_ms <= LONGEST_TIMER_MS {
        ffi::arm_timer::<Callbacks>(ctx, timeout_ms, seq)
    } else {
        None
    };
    if deadline.is_some() {
        with_waiters(|w| w.count_timer(true));
    }
    let db = selected_db(ctx);
    let user = ffi::caller_name(ctx).ok().map(Vec::into_boxed_slice);
    let lock_type: Box<str> = lock_type.into();
    let wake = match wait {
        Wait::One {
            key,
            call,
            share,
            lease_end,
        } => {
            let waiter = Waiter {
                client,
                call,
                share,
                lock_type,
                seq,
                deadline,
                user,
            };
            with_waiters(|w| w.push((db, key.to_vec()), waiter));
            lease_end.map(|at| (key, at))
        }
        Wait::All {
            keys,
            groups,
            call,
            wake,
        } => {
            let waiter = MultiWaiter {
                client,
                call,
                keys: keys.iter().map(|k| (db, k.to_vec())).collect(),
                groups,
                lock_type,
                seq,
                deadline,
                user,
            };
            with_multi(|m| m.push(waiter));
            wake.and_then(|(i, at)| Some((*keys.get(i)?, at)))
        }
    };
    if let Some((key, at)) = wake {
        wake_at(ctx, key, at);
    }
    true
}

/// A change may have freed a slot of `key` (selected database): serve its
/// waiters. The one entry of the serving loop; a key nobody waits on costs
/// one emptiness check.
pub fn slot_freed(ctx: &Context, key: &[u8]) {
    if !nobody_waits() && waiting_on(ctx, key) > 0 {
        serve(ctx, key);
    }
}

/// The serving loop of `key` (selected database): its single-key waiters
/// that came before the multi-key waiter the key is reserved for (all of
/// them when none is), then that multi-key waiter if it may be tried
/// ([`serve_reserved`]); when it is served the reservation moves on, so
/// the key is served again, and so are its other keys. Called by the
/// command or timer that may have freed a slot, never from a retry: a retry
/// reports what it freed instead (its `Freed`, dropped: the waiters after
/// it in this pass see the slot), so the loop never runs inside itself and
/// needs no guard.
fn serve(ctx: &Context, key: &[u8]) {
    let mut keys = vec![key.to_vec()];
    while let Some(key) = keys.pop() {
        loop {
            serve_queue(ctx, &key);
            match serve_reserved(ctx, &key) {
                Some(others) => keys.extend(others),
                None => break,
            }
        }
    }
}

/// One pass over the single-key waiters of `key` (selected database): takes
/// its queue out, runs [`serve_pass`] over the waiters that came before the
/// key's reservation with each waiter's retry, then replies to the waiters
/// whose wait ended, puts the others back and arms a wake-up for the next
/// lease to end.
fn serve_queue(ctx: &Context, key: &[u8]) {
    let id = (selected_db(ctx), key.to_vec());
    let Some((queue, tally)) = with_waiters(|w| w.take_queue(&id)) else {
        return;
    };
    // The waiters after the oldest multi-key waiter on the key wait for it.
    let until = state::reserved_for(&id);
    let mut permissions = Permissions::default();
    let holdings = |waiter: &Waiter<Blocked>, each: Holdings<'_>| {
        // A bug there leaves the counts as they were: the pass goes on.
        let _ = catch_unwind(AssertUnwindSafe(|| waiter.call.holdings(ctx, each)));
    };
    let pass = serve_pass(queue, until, Some(tally), holdings, |waiter| {
        if waiter
            .user
            .as_deref()
            .is_some_and(|u| !permissions.may_lock(ctx, u, key))
        {
            return Served::Failed(NO_KEY_PERMISSION.to_owned());
        }
        // A bug in one retry ends that wait with an error; the queue must
        // survive it.
        catch_unwind(AssertUnwindSafe(|| waiter.call.retry(ctx)))
            .unwrap_or_else(|_| Served::Failed(INTERNAL_ERROR.to_owned()))
    });
    logging::debug(ctx, || {
        format!(
            "served the waiters on {} (db {}): {} done, {} still waiting",
            key.escape_ascii(),
            id.0,
            pass.ended.len(),
            pass.still.len()
        )
    });
    // Unblocking only queues the reply, which Redis sends after this
    // command: replying after the pass is replying in its order.
    for (waiter, reply) in pass.ended {
        with_waiters(|w| w.served(&waiter));
        let client = waiter.client;
        let reply = match reply {
            Some(WaiterReply::Token(token)) => Some(waiter.call.granted(token)),
            other => other,
        };
        if reply.is_none() {
            let lapsed = Leaving::One(id.clone(), Some(waiter));
            leave(ctx, &lapsed, Some(deadline_reason(true)));
        } else {
            stop_deadline(ctx, waiter.deadline);
        }
        ffi::unblock(client, reply);
    }
    with_waiters(|w| w.put_back(id, pass.still, pass.tally.unwrap_or_default()));
    if let Some(at) = pass.wake_at {
        wake_at(ctx, key, at);
    }
}

/// Tries the multi-key waiter that the capacity of `key` (selected
/// database) is reserved for, if it is the oldest multi-key waiter on every
/// one of its keys: first the single-key waiters that came before it on its
/// other keys get their turn, then its call is run again on every key at
/// once. Returns its other keys when its wait ended (granted, or an error):
/// their reservation moved on, so they are to be served too; `None` when
/// nobody was served.
fn serve_reserved(ctx: &Context, key: &[u8]) -> Option<Vec<Vec<u8>>> {
    let id = (selected_db(ctx), key.to_vec());
    let seq = state::reserved_for(&id)?;
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

/// Whether each waiter's user may still lock the key being served, looked
/// up once per user for the whole queue.
#[derive(Default)]
struct Permissions {
    verdicts: Vec<(Box<[u8]>, bool)>,
}

impl Permissions {
    fn may_lock(&mut self, ctx: &Context, user: &[u8], key: &[u8]) -> bool {
        if let Some((_, verdict)) = self.verdicts.iter().find(|(u, _)| **u == *user) {
            return *verdict;
        }
        // A user deleted meanwhile may do nothing (its clients are gone too).
        let verdict =
            AclUser::by_name(ctx, user).is_some_and(|acl| acl.may_lock(&ctx.create_string(key)));
        self.verdicts.push((user.into(), verdict));
        verdict
    }
}

/// Serves the waiters of `key` (selected database) at `at`, unless a wake-up
/// at or before `at` is armed already.
fn wake_at(ctx: &Context, key: &[u8], at: i64) {
    let id = (selected_db(ctx), key.to_vec());
    if !with_waiters(|w| w.arm(&id, at)) {
        return;
    }
    // A lease is live while now < expires_at: wake at expires_at exactly.
    // A lease too far away for a timer wakes the key early, once per
    // LONGEST_TIMER_MS: the waiter is then denied and the wake-up re-armed.
    let delay = u64::try_from(at.saturating_sub(now_ms()).min(LONGEST_TIMER_MS))
        .unwrap_or(0)
        .max(1);
    arm_wake_up(ctx, Duration::from_millis(delay), wake, (id, at));
}

fn wake(ctx: &Context, (id, at): (KeyId, i64)) {
    with_waiters(|w| w.fired(&id, at));
    serve_key(ctx, id);
}

/// How soon a wake-up that found the server's writes paused tries again.
const PAUSED_RETRY: Duration = Duration::from_millis(20);

/// `key` of database `db` was deleted (DEL, UNLINK, eviction, expiry): serve
/// its waiters, soon after from a timer, since a keyspace notification must
/// not write.
pub fn key_gone(ctx: &Context, db: i32, key: &[u8]) {
    let id = (db, key.to_vec());
    if state::has_key(&id) {
        arm_wake_up(ctx, Duration::from_millis(1), serve_key, id);
    }
}

/// A database or all of them were flushed: serve every waiter, soon after.
pub fn flushed(ctx: &Context) {
    for id in state::keys() {
        arm_wake_up(ctx, Duration::from_millis(1), serve_key, id);
    }
}

/// Serves the waiters of a key from a timer. While the server has paused
/// writes (see [`ffi::writes_paused`]) a grant could not be replicated: the
/// wake-up comes back after the pause instead.
fn serve_key(ctx: &Context, (db, key): KeyId) {
    if ffi::writes_paused() {
        let id = (db, key);
        if state::has_key(&id) {
            arm_wake_up(ctx, PAUSED_RETRY, serve_key, id);
        }
        return;
    }
    if select_db(ctx, db) {
        slot_freed(ctx, &key);
    }
}

/// Ends the wait of every client queued on a key that `moved` picks (a
/// multi-key waiter: on one of its keys), each with the error `reply` gives
/// for that key (a redirect): their keys' slots left this node, so their
/// grant can only come from the new owner.
pub fn redirect(
    ctx: &Context,
    moved: impl Fn(&[u8]) -> bool,
    mut reply: impl FnMut(&[u8]) -> String,
) {
    if waiting() == 0 {
        return;
    }
    let one = with_waiters(|w| w.take_queues(&moved));
    let all = with_multi(|m| m.take_where(&moved));
    let redirected = one.len() + all.len();
    let ended = one
        .into_iter()
        .map(|((_, key), w)| (key, w.client, w.deadline))
        .chain(
            all.into_iter()
                .map(|((_, key), w)| (key, w.client, w.deadline)),
        );
    for (key, client, deadline) in ended {
        stop_deadline(ctx, deadline);
        ffi::unblock(client, Some(WaiterReply::Error(reply(&key))));
    }
    if redirected > 0 {
        logging::verbose(ctx, || {
            format!("{redirected} waiting clients redirected: their keys' slots moved")
        });
    }
}

/// What Redis calls back for a waiting client, single-key or multi-key,
/// and its deadline timer.
struct Callbacks;

/// Why a waiter's deadline timer ended its wait, for the log: the timer
/// comes at its WAIT or at the PXAT its lease asked for, whichever is first
/// (`lapsed`: the PXAT came).
fn deadline_reason(lapsed: bool) -> &'static str {
    if lapsed {
        "the end of the lease it asked for came"
    } else {
        "its WAIT ran out"
    }
}

/// A waiter leaving without a grant, found by its deadline or its client.
enum Leaving {
    /// A single-key waiter and its key; the waiter is `None` while a pass
    /// has it out of its queue (that pass drops it).
    One(KeyId, Option<Waiter<Blocked>>),
    /// A multi-key waiter, out of every queue.
    All(MultiWaiter<Blocked>),
}

impl Leaving {
    /// The waiter whose deadline timer carried `seq`, and its client; the
    /// timer fired, so there is nothing left to stop.
    fn by_deadline(seq: usize) -> Option<(Blocked, Self)> {
        if let Some((id, mut waiter)) = with_waiters(|w| w.deadline_passed(seq)) {
            waiter.deadline = None;
            return Some((waiter.client, Leaving::One(id, Some(waiter))));
        }
        let mut waiter = with_multi(|m| m.remove(seq))?;
        waiter.deadline = None;
        Some((waiter.client, Leaving::All(waiter)))
    }

    /// The waiter of `client`.
    fn by_client(client: Blocked) -> Option<Self> {
        if let Some((id, waiter)) = with_waiters(|w| w.forget(client)) {
            return Some(Leaving::One(id, waiter));
        }
        with_multi(|m| m.seq_of(client).and_then(|s| m.remove(s))).map(Leaving::All)
    }

    /// Whether the lease it asked for is over by `now`.
    fn lapsed(&self, now: i64) -> bool {
        match self {
            Leaving::One(_, waiter) => waiter.as_ref().is_some_and(|w| w.call.lapsed(now)),
            Leaving::All(waiter) => waiter.call.lapsed(now),
        }
    }

    /// Who left, for the log.
    fn describe(&self) -> String {
        match self {
            Leaving::One((db, key), _) => {
                format!("a client waiting on {} (db {db})", key.escape_ascii())
            }
            Leaving::All(w) => format!(
                "a client waiting on {} keys (db {})",
                w.keys.len(),
                w.keys.first().map_or(0, |k| k.0)
            ),
        }
    }
}

/// A waiter leaves without a grant: its deadline timer stops, a multi-key
/// waiter's keys are served soon after (their reservation moved on), and a
/// wait that ran out (`why`; `None`: its client went away) is counted as
/// timed out for its lock type.
fn leave(ctx: &Context, leaving: &Leaving, why: Option<&str>) {
    let (lock_type, deadline) = match leaving {
        Leaving::One(_, waiter) => (
            waiter.as_ref().map(|w| &*w.lock_type),
            waiter.as_ref().and_then(|w| w.deadline),
        ),
        Leaving::All(waiter) => {
            for id in &waiter.keys {
                arm_wake_up(ctx, Duration::from_millis(1), serve_key, id.clone());
            }
            (Some(&*waiter.lock_type), waiter.deadline)
        }
    };
    stop_deadline(ctx, deadline);
    match why {
        Some(why) => {
            metrics::record(now_ms(), lock_type, Event::TimedOut);
            logging::verbose(ctx, || format!("{} got nil: {why}", leaving.describe()));
        }
        None => logging::debug(ctx, || format!("{} disconnected", leaving.describe())),
    }
}

impl TimerHandler for Callbacks {
    /// The deadline of waiter `seq` came: nil, and nothing was added.
    fn fired(ctx: &Context, seq: usize) {
        with_waiters(|w| w.count_timer(false));
        if let Some((client, leaving)) = Leaving::by_deadline(seq) {
            leave(
                ctx,
                &leaving,
                Some(deadline_reason(leaving.lapsed(now_ms()))),
            );
            ffi::unblock(client, None);
        }
    }
}

impl BlockHandler for Callbacks {
    /// CLIENT UNBLOCK ended the wait: nil, and nothing was added.
    fn on_timeout(ctx: &Context, blocked: Option<Blocked>) -> RedisResult {
        if let Some((blocked, leaving)) = blocked.and_then(|b| Some((b, Leaving::by_client(b)?))) {
            leave(ctx, &leaving, Some("CLIENT UNBLOCK"));
            // The reply is this callback's; unblocking only frees the handle.
            ffi::unblock(blocked, None);
        }
        Ok(RedisValue::Null)
    }

    /// The client went away while waiting: forget it, free its handle.
    fn on_disconnect(ctx: &Context, blocked: Blocked) {
        if let Some(leaving) = Leaving::by_client(blocked) {
            leave(ctx, &leaving, None);
            ffi::unblock(blocked, None);
        }
    }
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod fair_tests;
