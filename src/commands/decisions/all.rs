//! What LOCKALL decides over its keys, apart from doing it: every key
//! changes or none does.
//!
//! Each key is decided with the same `now` by the same rule as a LOCK
//! (`Lock::acquire`: its LIMIT, its RATE, and whatever else a LOCK checks),
//! one key after the other in key order; the first key that refuses undoes
//! what the keys before it did (a new holder released, a renewed holder put
//! back as it was, the rate state put back), so a refused call leaves every
//! lock as it found it, less the leases that had ended. Undoing instead of
//! checking first keeps one rule for LOCK and LOCKALL: a rule added to
//! `Lock::acquire` applies to both.
//!
//! A jid that holds some of the keys and not the others is refused outright
//! (a partial renewal): one of its holds was lost (its lease ran out, or an
//! UNLOCK freed it), and granting the lost key again would hide that loss
//! from a job that believes it held every key all along. Its client reports
//! the lock lost, and a job that released a key early on purpose renews the
//! keys it still holds.
//!
//! Each key keeps LOCK's GROUP and MODE rules: a renewal naming another
//! group is an error for the whole call, and an upgrade to MODE exclusive
//! that a key cannot grant (the jid is not its only holder) refuses the
//! whole call without waiting, as LOCK's does.
//!
//! New holds share one fencing token; a renewed key keeps its own. Tokens
//! still rise per key, since each new token is above every token before it.

use super::{Ahead, Outside, prune_expired};
use crate::engine::{Acquired, Holder, Lock, LockError, LockRequest, Rate};
use crate::metrics::Event;

/// What one key of a granted LOCKALL got.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KeyGrant {
    /// Its token: the new one, or the renewed hold's own.
    pub token: i64,
    /// A new holder (else a renewal).
    pub new: bool,
    /// The grant spent the key's rate.
    pub spent_rate: bool,
    /// A renewal turned the key's exclusive hold shared: its waiters may
    /// now be served.
    pub downgraded: bool,
}

/// What a LOCKALL gets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AllAttempt {
    /// Every key holds, in key order.
    Granted(Vec<KeyGrant>),
    /// Nothing changed (but the removal of ended leases).
    Denied(Refusal),
}

/// Why a LOCKALL was refused, and when to look again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Refusal {
    /// The first key (its position) that refused.
    pub key: usize,
    /// When that key may have room: its earliest end of lease, or the next
    /// instant its rate allows; `None` when nothing of its own will free it
    /// (holders with no lease, or clients waiting ahead).
    pub lease_end: Option<i64>,
    /// Its rate refused while it had room.
    pub rate_limited: bool,
    /// The jid holds some keys and not the others: refused whatever the
    /// room, and waiting cannot change that.
    pub partial: bool,
    /// The jid holds every key and one of them refused its upgrade to MODE
    /// exclusive (another holder shares it): it does not wait, as LOCK's
    /// refused upgrade does not.
    pub upgrade: bool,
    /// The call is wrong for a holder (a renewal naming another GROUP):
    /// this error is the reply.
    pub error: Option<LockError>,
}

impl Refusal {
    /// A refusal at key `key` that waiting may change, with no end in view.
    fn at(key: usize) -> Self {
        Self {
            key,
            lease_end: None,
            rate_limited: false,
            partial: false,
            upgrade: false,
            error: None,
        }
    }

    /// Whether waiting may change the answer.
    pub fn may_wait(&self) -> bool {
        !self.partial && !self.upgrade && self.error.is_none()
    }
}

/// Everything one LOCKALL decided.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AllDecision {
    pub attempt: AllAttempt,
    /// Per key, the holders removed because their lease had ended (counted).
    pub expired: Vec<usize>,
}

/// One LOCKALL on `locks` (an empty lock for a key that does not exist),
/// with `reqs[i]` the call on `locks[i]` (the same jid, TTL, TYPE, OWNER and
/// META; its own LIMIT and RATE): prune every key, then grant or renew on
/// every key or on none, and count what was granted. `queued[i]`: the
/// clients waiting on key i ahead of this call, as LOCK's `decide_lock`
/// takes them: while one of them may take a slot, a new hold there is
/// refused (a renewal is not).
pub fn decide_all<'q>(
    locks: &mut [&mut Lock],
    reqs: &[LockRequest<'_>],
    now: i64,
    queued: &[impl Into<Ahead<'q>> + Copy],
    out: &mut impl Outside,
) -> AllDecision {
    let expired: Vec<usize> = locks
        .iter_mut()
        .map(|lock| prune_expired(lock, now, out))
        .collect();
    let attempt = acquire_all(locks, reqs, now, queued, || out.next_token(now));
    if let AllAttempt::Granted(grants) = &attempt {
        for ((lock, req), grant) in locks.iter().zip(reqs).zip(grants) {
            if let Some(holder) = lock.holder(req.jid) {
                let event = if grant.new {
                    Event::Acquired
                } else {
                    Event::Renewed
                };
                out.count(now, Some(holder.lock_type()), event);
            }
        }
    }
    AllDecision { attempt, expired }
}

/// The all-or-nothing step on locks already pruned at `now`; `next_token`
/// is called at most once, for the first new hold, and its token is shared
/// by every new hold of the call.
pub fn acquire_all<'q>(
    locks: &mut [&mut Lock],
    reqs: &[LockRequest<'_>],
    now: i64,
    queued: &[impl Into<Ahead<'q>> + Copy],
    next_token: impl FnOnce() -> i64,
) -> AllAttempt {
    let held = locks
        .iter()
        .zip(reqs)
        .filter(|(lock, req)| lock.holder(req.jid).is_some())
        .count();
    if held != 0 && held != locks.len() {
        // The first key it does not hold is the one that refuses.
        let key = locks
            .iter()
            .zip(reqs)
            .position(|(lock, req)| lock.holder(req.jid).is_none())
            .unwrap_or(0);
        return AllAttempt::Denied(Refusal {
            partial: true,
            ..Refusal::at(key)
        });
    }
    let mut next_token = Some(next_token);
    let mut token = None;
    // What each key was before it changed, to undo it on a refusal.
    let mut undo: Vec<(Option<Holder>, Option<Rate>)> = Vec::with_capacity(locks.len());
    let mut grants = Vec::with_capacity(locks.len());
    let mut refused = None;
    for (i, (lock, req)) in locks.iter_mut().zip(reqs).enumerate() {
        let before = (lock.holder(req.jid).cloned(), lock.rate().copied());
        // LOCK's own step on this key, behind the same waiters.
        let ahead = queued.get(i).map_or(Ahead::Nobody, |&q| q.into());
        let mut next = || *token.get_or_insert_with(|| next_token.take().map_or(0, |f| f()));
        let acquired = lock.acquire_behind(req, now, |lock| ahead.blocks(lock), &mut next);
        match acquired {
            Acquired::Granted(token) => grants.push(KeyGrant {
                token,
                new: true,
                spent_rate: req.rate.is_some(),
                downgraded: false,
            }),
            Acquired::Renewed(token) => grants.push(KeyGrant {
                token,
                new: false,
                spent_rate: false,
                downgraded: before.0.as_ref().is_some_and(Holder::is_exclusive)
                    && lock.holder(req.jid).is_some_and(|h| !h.is_exclusive()),
            }),
            Acquired::RateLimited(at) => {
                refused = Some(Refusal {
                    lease_end: Some(at),
                    rate_limited: true,
                    ..Refusal::at(i)
                });
                break;
            }
            Acquired::Refused(e) => {
                refused = Some(Refusal {
                    error: Some(e),
                    ..Refusal::at(i)
                });
                break;
            }
            Acquired::Denied => {
                refused = Some(Refusal {
                    lease_end: lock.earliest_lease(),
                    // Only an upgrade refuses a holder.
                    upgrade: before.0.is_some(),
                    ..Refusal::at(i)
                });
                break;
            }
        }
        undo.push(before);
    }
    if let Some(refusal) = refused {
        // The keys before the one that refused go back as they were.
        for (lock, (req, (holder, rate))) in locks.iter_mut().zip(reqs.iter().zip(undo)) {
            match holder {
                Some(holder) => lock.put(holder),
                None => {
                    lock.release(req.jid);
                }
            }
            lock.set_rate(rate);
        }
        return AllAttempt::Denied(refusal);
    }
    AllAttempt::Granted(grants)
}

#[cfg(test)]
mod tests;
