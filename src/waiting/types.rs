//! The types every part of the waiting layer shares: what a blocked call
//! is to the serving rule ([`Call`], [`Share`], [`Served`]), how a pass sees
//! a key's holders ([`KeyHoldings`]), and one key's waiters ([`Waiter`],
//! [`Queue`], [`GroupWaiters`]). The modules of `waiting/` import these and
//! each other only downwards: `types` and `clock` below `denials`, `order`
//! and `parked`, those below `queues`.

use std::cell::Cell;
use std::collections::{BTreeMap, HashMap};
use std::ops::Bound;

use redis_module::Context;

use super::clock::{Clock, Start, Tag};
use crate::engine::{ByGroupName, GroupName, HoldingsStamp};
use crate::ffi::{TimerId, WaiterReply};

/// What retrying one waiter gave.
pub enum Served {
    /// Its token: a grant (or a renewal, if its jid got the lock meanwhile).
    Granted(i64),
    /// Still no slot; the earliest end of lease among the holders, if any,
    /// and the key's live holders when its LIMIT is what denied it (a
    /// waiter of any kind with a LIMIT no larger would be denied too).
    Denied {
        lease_end: Option<i64>,
        full: Option<usize>,
    },
    /// Its call fails now (say its key permissions were revoked): this error
    /// ends the wait.
    Failed(String),
    /// The lease it asks for ended while it waited (its PXAT passed): a
    /// grant would be over already, so the wait ends with nil, as when it
    /// runs out. (Its deadline timer ends it at that PXAT; a pass may come
    /// first by a millisecond.) Not a denial: it says nothing about the
    /// waiters that ask alike.
    Lapsed,
}

/// A blocked call, as its command parsed it when it blocked: serving it runs
/// exactly what the client asked for, whatever changed in the configuration
/// meanwhile.
pub trait Call {
    /// Runs the call again, as the longest waiter in its key's queue.
    fn retry(&self, ctx: &Context) -> Served;

    /// How many live holders each group (`None`: no group) has on the key
    /// now, what fair serving weighs: shown to `each` as one lookup, so that
    /// a pass over many groups opens the key once, not once a group; with
    /// the earliest end of a live lease on the key, when a group found at
    /// its GROUPLIMIT may hold fewer. A call that knows no groups says 0 for
    /// all.
    fn holdings(&self, _ctx: &Context, each: Holdings<'_>) {
        each(&NoHolders)
    }

    /// Whether the lease the call asks for is over by `now` (a PXAT that
    /// passed): what ended its wait when its deadline timer fires, if not
    /// its WAIT.
    fn lapsed(&self, _now: i64) -> bool {
        false
    }

    /// What decides this call's new hold besides its [`Share`], when nothing
    /// else does (see `denials`): a pass that saw a waiter of the same kind
    /// denied keeps this one waiting without a retry. `None`: always retried.
    fn admission(&self) -> Option<Admission<'_>> {
        None
    }

    /// What a waiter granted `token` is told: by default the token; a call
    /// that can say how gives a [`Held`](crate::ffi::Held), checked again as the reply
    /// goes out.
    fn granted(&self, token: i64) -> WaiterReply {
        WaiterReply::Token(token)
    }
}

/// What [`Call::holdings`] shows its key's holders to.
pub type Holdings<'a> = &'a mut dyn FnMut(&dyn KeyHoldings);

/// A key's holders as a serving pass weighs them, looked at once a pass.
pub trait KeyHoldings {
    /// How many live holders `group` has (`None`: the holders without one).
    fn held(&self, group: Option<&GroupName>) -> usize;

    /// The earliest end of a live lease: when a group found at its
    /// GROUPLIMIT may hold fewer.
    fn next_lease_end(&self) -> Option<i64>;

    /// The key's [`HoldingsStamp`], if it keeps one: what a pass keeps
    /// with the groups it found at their GROUPLIMIT.
    fn stamp(&self) -> Option<HoldingsStamp> {
        None
    }

    /// Shows `each` the [`holding_hash`](crate::engine::holding_hash) of
    /// every group that may hold fewer live holders than under `since`;
    /// false when the key cannot say (then any group may).
    fn freed_since(&self, _since: HoldingsStamp, _each: &mut dyn FnMut(u64)) -> bool {
        false
    }

    /// Shows `each` the [`holding_hash`](crate::engine::holding_hash) of
    /// every group with a live holder, if the key has few enough to list
    /// (where it keeps no stamp); false when it does not list them.
    fn holding_hashes(&self, _each: &mut dyn FnMut(u64)) -> bool {
        false
    }
}

/// A key without holders (or a call that knows no groups): 0 for all.
pub struct NoHolders;

impl KeyHoldings for NoHolders {
    fn held(&self, _: Option<&GroupName>) -> usize {
        0
    }

    fn next_lease_end(&self) -> Option<i64> {
        None
    }

    fn holding_hashes(&self, _each: &mut dyn FnMut(u64)) -> bool {
        true
    }
}

/// What the serving rule needs to know of a waiter besides its call: the
/// group it waits for (`None`: the waiters without GROUP, which compete as
/// one group of their own), its weight, its GROUPLIMIT, and whether it asks
/// to hold alone (MODE exclusive).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Share {
    pub group: Option<GroupName>,
    pub weight: u32,
    pub group_limit: Option<u32>,
    pub exclusive: bool,
}

impl Default for Share {
    fn default() -> Self {
        Self {
            group: None,
            weight: 1,
            group_limit: None,
            exclusive: false,
        }
    }
}

/// The earlier of two ends of lease (`None`: no lease ends).
pub(super) fn earliest(a: Option<i64>, b: Option<i64>) -> Option<i64> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// A waiter's call as far as a new hold is decided, besides its [`Share`]:
/// its jid, LIMIT and RATE (`[n, per, burst]`: this layer knows no engine).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Admission<'a> {
    pub jid: &'a [u8],
    pub limit: u32,
    pub rate: Option<[i64; 3]>,
}

/// One blocked call: its client, its call, and the lock type it asked for
/// (counted if its wait runs out).
pub(super) struct Waiter<C> {
    pub(super) client: C,
    pub(super) call: Box<dyn Call>,
    /// Its group, weight, GROUPLIMIT and mode, for the serving rule.
    pub(super) share: Share,
    pub(super) lock_type: Box<str>,
    /// Its number, which its deadline timer carries.
    pub(super) seq: usize,
    /// The timer that ends its wait, if one could be armed.
    pub(super) deadline: Option<TimerId>,
    /// Its client's ACL user, whose key permissions each retry checks
    /// again (`None` where the server cannot say).
    pub(super) user: Option<Box<[u8]>>,
}

/// `waiter` leaves its group's waiters in `groups` (the group goes with its
/// last); the group's first waiter after, if any is left.
pub(super) fn leave_group<C>(groups: &mut GroupQueues, waiter: &Waiter<C>) -> Option<usize> {
    let seqs = groups.get_mut(&waiter.share.group)?;
    if seqs.remove(waiter.seq) {
        groups.remove(&waiter.share.group);
        return None;
    }
    Some(seqs.first().0)
}

/// A key: its database and name.
pub(super) type KeyId = (i32, Vec<u8>);

/// The numbers of each group's waiters on a key (`None`: those without a
/// group), each with its weight, never an empty map: how many wait in each
/// (WAITERS ... GROUPS reads it without a walk), and each group's next
/// waiter and its weight, found by a serving pass without a walk past the
/// other groups' waiters or a look into the queue. Kept in no order (a
/// pass orders the groups by their turns, see `order`): found by the name's
/// hash, worked out once, not by comparing names down a tree.
pub(super) type GroupQueues = HashMap<Option<GroupName>, GroupWaiters, ByGroupName>;

/// One group's waiters on a key: their numbers with their weights, the
/// first of them also kept apart, beside the group's name: a pass reads
/// every group's first at its start, without a descent into each group's
/// map.
#[derive(Debug)]
pub(super) struct GroupWaiters {
    first: (usize, u32),
    seqs: BTreeMap<usize, u32>,
    /// The last pass that took the group's turn (tried it or passed it
    /// over): marked through the shared borrow the pass holds, so that the
    /// group's other turns are dropped without a map of its own.
    taken: Cell<u64>,
    /// The group's start on the key's clock (see `clock`), moved on by a
    /// pass's grant to it through the shared borrow the pass holds.
    start: Cell<Start>,
}

impl PartialEq for GroupWaiters {
    fn eq(&self, other: &Self) -> bool {
        (self.first, &self.seqs) == (other.first, &other.seqs)
    }
}

impl Eq for GroupWaiters {}

impl GroupWaiters {
    pub(super) fn new(seq: usize, weight: u32, start: Start) -> Self {
        Self {
            first: (seq, weight),
            seqs: BTreeMap::from([(seq, weight)]),
            taken: Cell::new(0),
            start: Cell::new(start),
        }
    }

    /// The place of its next waiter, of `weight`, on the key's clock.
    pub(super) fn tag(&self, weight: u32) -> Tag {
        Clock::tag(self.start.get(), weight)
    }

    /// Its start on the key's clock.
    #[cfg(test)]
    pub(super) fn start(&self) -> Start {
        self.start.get()
    }

    /// Its waiter of `weight` was granted a slot: its next turn comes once
    /// the others had theirs.
    pub(super) fn granted(&self, clock: &mut Clock, weight: u32) {
        self.start.set(clock.granted(self.start.get(), weight));
    }

    /// Sets its start on the key's clock (a tally counted afresh, in the
    /// tests, given what a kept one keeps).
    #[cfg(test)]
    pub(super) fn set_start(&self, start: Start) {
        self.start.set(start);
    }

    /// Whether `pass` took the group's turn (passes are numbered from 1).
    pub(super) fn taken_in(&self, pass: u64) -> bool {
        self.taken.get() == pass
    }

    /// `pass` took the group's turn.
    pub(super) fn take(&self, pass: u64) {
        self.taken.set(pass);
    }

    pub(super) fn insert(&mut self, seq: usize, weight: u32) {
        self.seqs.insert(seq, weight);
        if seq <= self.first.0 {
            self.first = (seq, weight);
        }
    }

    /// Removes waiter `seq`; whether none is left.
    pub(super) fn remove(&mut self, seq: usize) -> bool {
        self.seqs.remove(&seq);
        if seq == self.first.0
            && let Some((&next, &weight)) = self.seqs.first_key_value()
        {
            self.first = (next, weight);
        }
        self.seqs.is_empty()
    }

    /// The first waiter's number and weight.
    pub(super) fn first(&self) -> (usize, u32) {
        self.first
    }

    /// The waiter after `seq`, with its weight.
    pub(super) fn after(&self, seq: usize) -> Option<(usize, u32)> {
        self.seqs
            .range((Bound::Excluded(seq), Bound::Unbounded))
            .next()
            .map(|(&seq, &weight)| (seq, weight))
    }

    pub(super) fn len(&self) -> usize {
        self.seqs.len()
    }
}

/// A key's waiters by their number, which grows with every waiter: arrival
/// order, and one waiter found by its number (a timeout, a disconnect) in
/// O(log n) however long the queue.
pub(super) type Queue<C> = BTreeMap<usize, Waiter<C>>;

/// The GROUPLIMIT that holds a waiter back from a slot its group cannot
/// take; `None` for a waiter that nothing but the key's LIMIT holds back (no
/// GROUPLIMIT) or that waits for the key to empty (exclusive).
pub(super) fn gate(group_limit: Option<u32>, exclusive: bool) -> Option<u32> {
    group_limit.filter(|_| !exclusive)
}
