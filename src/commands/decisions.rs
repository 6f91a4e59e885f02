//! What a command decides, apart from doing it: whether a LOCK is granted,
//! renewed, denied or queued behind waiting clients, which counters it
//! counts, and what follows the change (what to replicate, which keyspace
//! events, whether the key's waiters are served).
//!
//! The decisions are plain values computed from the lock, the call and the
//! time, and the two things a decision needs from the server (a fencing
//! token, a counter) come through the [`Outside`] trait. So the unit and
//! property tests below drive them with no server at all; the command files
//! only open the key, hand the lock over, and carry the decision out
//! (`finish`). Everything here is stack-only and statically dispatched: the
//! LOCK of a free key pays no allocation and no indirection for the seam.

use std::ffi::CStr;

pub mod all;

use super::events;
use crate::codec::ApplyOp;
use crate::engine::{Acquired, Lock, LockError, LockRequest, Mode};
use crate::metrics::Event;
use crate::{fencing, metrics};

/// What a decision needs from the server: a new fencing token and the
/// counters. [`InRedis`] is the real one; the tests record.
pub trait Outside {
    /// A fencing token for a new grant at `now`.
    fn next_token(&mut self, now: i64) -> i64;
    /// Counts `event` at `now` under `lock_type` (`None`: the total only).
    fn count(&mut self, now: i64, lock_type: Option<&str>, event: Event);
}

/// The server's tokens and counters.
pub struct InRedis;

impl Outside for InRedis {
    #[inline]
    fn next_token(&mut self, now: i64) -> i64 {
        fencing::issue(now)
    }

    #[inline]
    fn count(&mut self, now: i64, lock_type: Option<&str>, event: Event) {
        metrics::record(now, lock_type, event);
    }
}

/// The first step of every command that changes a lock: removes the holders
/// whose lease has ended at `now`, counts each as `expired` under its own
/// type, and returns how many went (what `finish` reports as expired).
pub fn prune_expired(lock: &mut Lock, now: i64, out: &mut impl Outside) -> usize {
    lock.prune_each(now, |h| out.count(now, Some(h.lock_type()), Event::Expired))
}

/// What a LOCK call gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Attempt {
    /// A grant or a renewal, with its token.
    Granted(i64),
    /// Denied; when to try again: the earliest end of lease among the
    /// holders, if any has one, or the next instant the key's rate allows
    /// (`rate_limited`).
    Denied {
        lease_end: Option<i64>,
        rate_limited: bool,
        /// The jid holds already (an upgrade to MODE exclusive refused
        /// while others hold): it must not wait, since two upgraders
        /// waiting for each other would wait forever.
        holds: bool,
        /// The key's live holders, when there are as many as the call's
        /// LIMIT or more: any new holder of a LIMIT no larger is denied too
        /// while none leaves (what a serving pass learns from one denial).
        full: Option<usize>,
    },
    /// The call does not fit the hold it renews (another GROUP).
    Refused(LockError),
}

/// The clients already waiting on the key, as a new call sees them.
#[derive(Clone, Copy)]
pub enum Ahead<'q> {
    /// Nobody waits.
    Nobody,
    /// Some waiter may be served before a newcomer: the newcomer queues.
    Waiters,
    /// Whether some waiter may be served before a newcomer depends on the
    /// key's holders (a waiting group holding less than its GROUPLIMIT may
    /// be, one holding that many may not): told by the function, asked only
    /// once the key admits the newcomer, since the answer can cost a look at
    /// every waiting group.
    Depends(&'q dyn Fn(&Lock) -> bool),
}

impl From<bool> for Ahead<'_> {
    fn from(queued: bool) -> Self {
        if queued { Self::Waiters } else { Self::Nobody }
    }
}

impl Ahead<'_> {
    /// Whether a newcomer must queue behind the waiters, `lock` pruned.
    pub fn blocks(self, lock: &Lock) -> bool {
        match self {
            Self::Nobody => false,
            Self::Waiters => true,
            Self::Depends(blocks) => blocks(lock),
        }
    }
}

/// Everything one LOCK decided on its key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LockDecision<'a> {
    pub attempt: Attempt,
    /// Holders removed because their lease had ended (counted already).
    pub expired: usize,
    /// What changed, for `finish`.
    pub change: Change<'a>,
}

/// One LOCK on `lock` (a new, empty one when the key does not exist): prune
/// the ended leases, then grant, renew or deny, and count the outcome.
/// `queued`: the clients waiting on the key ahead of this call; while one
/// of them may take a slot ([`Ahead::blocks`]), this call may renew its own
/// hold but not take a free slot.
pub fn decide_lock<'a, 'q>(
    lock: &mut Lock,
    req: &LockRequest<'a>,
    now: i64,
    queued: impl Into<Ahead<'q>>,
    out: &mut impl Outside,
) -> LockDecision<'a> {
    let expired = prune_expired(lock, now, out);
    let jid = req.jid;
    // Only a renewal to MODE shared can turn an exclusive hold shared.
    let was_exclusive =
        req.mode == Some(Mode::Shared) && lock.holder(jid).is_some_and(|h| h.is_exclusive());
    // Others are waiting for a slot: a newcomer queues behind them.
    let queued = queued.into();
    let acquired = match queued {
        Ahead::Nobody => lock.acquire(req, now, || out.next_token(now)),
        ahead => lock.acquire_behind(req, now, |lock| ahead.blocks(lock), || out.next_token(now)),
    };
    let (attempt, change) = match (acquired, lock.holder(jid)) {
        (Acquired::Granted(token), Some(holder)) => {
            out.count(now, Some(holder.lock_type()), Event::Acquired);
            let change = Change::Hold {
                jid,
                new: true,
                spent_rate: req.rate.is_some(),
                downgraded: false,
            };
            (Attempt::Granted(token), change)
        }
        (Acquired::Renewed(token), Some(holder)) => {
            out.count(now, Some(holder.lock_type()), Event::Renewed);
            // An exclusive hold turned shared makes room for waiters.
            let downgraded = was_exclusive && !holder.is_exclusive();
            let change = Change::Hold {
                jid,
                new: false,
                spent_rate: false,
                downgraded,
            };
            (Attempt::Granted(token), change)
        }
        (Acquired::RateLimited(at), _) => (
            Attempt::Denied {
                lease_end: Some(at),
                rate_limited: true,
                holds: false,
                full: None,
            },
            Change::PruneOnly,
        ),
        (Acquired::Refused(e), _) => (Attempt::Refused(e), Change::PruneOnly),
        (_, held) => (
            // Pruned above: the earliest lease is the next to end.
            Attempt::Denied {
                lease_end: lock.earliest_lease(),
                rate_limited: false,
                holds: held.is_some(),
                full: (req.limit != 0 && lock.len() >= req.limit as usize).then(|| lock.len()),
            },
            Change::PruneOnly,
        ),
    };
    LockDecision {
        attempt,
        expired,
        change,
    }
}

/// One LOCK on a key that does not exist: [`decide_lock`] on an empty lock,
/// with nothing to prune, renew or look up (`Lock::first`). Returns the lock
/// to store, when the call was granted.
pub fn decide_new_key<'a, 'q>(
    req: &LockRequest<'a>,
    now: i64,
    queued: impl Into<Ahead<'q>>,
    out: &mut impl Outside,
) -> (LockDecision<'a>, Option<Lock>) {
    let denied = |lease_end, rate_limited| LockDecision {
        attempt: Attempt::Denied {
            lease_end,
            rate_limited,
            holds: false,
            full: None,
        },
        expired: 0,
        change: Change::PruneOnly,
    };
    // Others are waiting for a slot: a newcomer queues behind them.
    let blocked = match queued.into() {
        Ahead::Nobody => false,
        ahead => ahead.blocks(&Lock::default()),
    };
    if blocked {
        return (denied(None, false), None);
    }
    match Lock::first(req, now, || out.next_token(now)) {
        (lock, Acquired::Granted(token)) => {
            let lock_type = req.lock_type.unwrap_or(crate::engine::DEFAULT_TYPE);
            out.count(now, Some(lock_type), Event::Acquired);
            let change = Change::Hold {
                jid: req.jid,
                new: true,
                spent_rate: req.rate.is_some(),
                downgraded: false,
            };
            let decision = LockDecision {
                attempt: Attempt::Granted(token),
                expired: 0,
                change,
            };
            (decision, Some(lock))
        }
        (_, Acquired::RateLimited(at)) => (denied(Some(at), true), None),
        (_, Acquired::Refused(e)) => (
            LockDecision {
                attempt: Attempt::Refused(e),
                expired: 0,
                change: Change::PruneOnly,
            },
            None,
        ),
        (_, Acquired::Renewed(_) | Acquired::Denied) => (denied(None, false), None),
    }
}

/// Counts a LOCK that got no slot and does not wait for one.
pub fn count_denial(out: &mut impl Outside, now: i64, lock_type: &str, rate_limited: bool) {
    out.count(now, Some(lock_type), Event::Denied);
    if rate_limited {
        out.count(now, Some(lock_type), Event::RateDenied);
    }
}

/// What a command changed on one key, besides removing the holders whose
/// lease had run out (counted apart, see [`Change::effects`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Change<'a> {
    /// Nothing but the removal of ended leases, if any: a denial, an UNLOCK
    /// that found nothing, a bare prune (replicated as `PRUNE` when a lease
    /// ended, and not at all otherwise).
    PruneOnly,
    /// `jid` holds: a new grant (`new`) or a renewal; `spent_rate` when the
    /// grant spent the key's rate; `downgraded` when a renewal turned an
    /// exclusive hold shared (waiters may then be served).
    Hold {
        jid: &'a [u8],
        new: bool,
        spent_rate: bool,
        downgraded: bool,
    },
    /// UNLOCK removed `jid`'s holder.
    Release(&'a [u8]),
    /// REAP OWNER removed at least one holder of this owner.
    Reap(&'a [u8]),
    /// UNIQUE.APPLY replayed a primary's effect, with the event it makes.
    Replayed(Option<&'static CStr>),
}

/// How an effect reaches the replicas and the AOF.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Replicate<'a> {
    /// `UNIQUE.APPLY key GRANT <the holder of jid>` (or `key now LEASE ...`
    /// for a renewal), with the key's rate state in the lease's numbers when
    /// `rate` (the grant spent it).
    Hold { jid: &'a [u8], rate: bool },
    /// `UNIQUE.APPLY key now <op> [arg]`.
    Effect(ApplyOp, Option<&'a [u8]>),
    /// The replayed APPLY itself, as it came (a replica's own AOF).
    Verbatim,
}

/// What follows a change, in `finish`'s order: settle the key, replicate,
/// `unique.expire` when leases ended, the command's own event, then serve
/// the key's waiters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Effects<'a> {
    pub replicate: Replicate<'a>,
    /// `unique.expire`: holders whose lease ran out were removed.
    pub expire_event: bool,
    /// The command's own keyspace event.
    pub event: Option<&'static CStr>,
    /// A slot may have freed: the key's waiters are to be served.
    pub serve_waiters: bool,
}

impl<'a> Change<'a> {
    /// What follows this change when `expired` ended leases were removed
    /// with it; `None` when nothing changed at all. A replayed effect
    /// announces only its own event and serves nobody: grants are the
    /// primary's to make.
    pub fn effects(self, expired: usize) -> Option<Effects<'a>> {
        let replicate = match self {
            Self::PruneOnly if expired == 0 => return None,
            Self::PruneOnly => Replicate::Effect(ApplyOp::PruneOnly, None),
            Self::Hold {
                jid, spent_rate, ..
            } => Replicate::Hold {
                jid,
                rate: spent_rate,
            },
            Self::Release(jid) => Replicate::Effect(ApplyOp::Release, Some(jid)),
            Self::Reap(owner) => Replicate::Effect(ApplyOp::ReapOwner, Some(owner)),
            Self::Replayed(_) => Replicate::Verbatim,
        };
        let replayed = matches!(self, Self::Replayed(_));
        let event = match self {
            Self::Hold { new: true, .. } => Some(events::LOCK),
            Self::Release(_) => Some(events::UNLOCK),
            Self::Reap(_) => Some(events::REAP),
            Self::Replayed(event) => event,
            Self::PruneOnly | Self::Hold { new: false, .. } => None,
        };
        let freed = expired > 0
            || matches!(
                self,
                Self::Release(_)
                    | Self::Reap(_)
                    | Self::Hold {
                        downgraded: true,
                        ..
                    }
            );
        Some(Effects {
            replicate,
            expire_event: expired > 0 && !replayed,
            event,
            serve_waiters: freed && !replayed,
        })
    }
}

#[cfg(test)]
mod tests;
