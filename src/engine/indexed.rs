//! The layout of a lock with many holders, where every operation must cost
//! the same on a key of a hundred thousand holders as on a key of a few.
//!
//! Small locks keep their holders in a vector, in grant order, and look
//! through it: for a few holders nothing is faster or smaller. Past a
//! threshold (see `holder.rs`) the holders move here, as Redis's own types
//! move from a listpack to a hash table:
//!
//! - `slots`: the holders, each in a slot that never moves while it holds, a
//!   freed slot reused by the next grant (`free`), kept in chunks (as the
//!   links below: `chunked.rs`) so that a growing key never copies them all;
//! - `by_jid`: a hash table of slot numbers, each tagged with bits of its
//!   jid's hash, to find a holder by its jid in one read of the table (see
//!   `jids.rs`);
//! - the holders with a lease, in order of end of lease, in two places:
//!   - a list linked through `links` (each slot's previous and next), kept
//!     sorted: a lease that ends no earlier than the last one listed (what a
//!     grant or renewal of the key's usual TTL gives: now plus the same TTL)
//!     joins at its tail, and one that ends no later than the first at its
//!     head, in O(1), touching only its neighbours;
//!   - a min-max heap (`leases`) of the slots of the others, by end of lease,
//!     each with its place in the heap where the list keeps its neighbours;
//!
//!   the ended leases are taken from the earlier of the list's head and the
//!   heap's smallest end, without a sweep, and the key's expiry (the latest
//!   lease) is the later of the list's tail and the heap's largest end. A
//!   renewal leaves its neighbours and joins the tail: no walk down and up
//!   a heap, each step of which would read a lease elsewhere in megabytes
//!   of slots. A holder costs its 40 bytes and 13 to 16 more (its two
//!   links, which a holder in the heap uses for its place, and its share of
//!   the hash table, 5 to 8 bytes; 4 more in the heap), which keeps a big
//!   lock about as small as the vector it replaces.
//!
//! - `groups`: how many holders each GROUP has (an entry only while it has
//!   one), and how many hold exclusively: what a grant with GROUPLIMIT or
//!   MODE asks, in O(1) instead of a walk.
//!
//! - `owners`: the slots of each OWNER (see `owners.rs`), for REAP ...
//!   OWNER; a holder without an owner is not in it and costs it nothing.
//!
//! Finding, granting, renewing and releasing a holder cost O(log n); pruning
//! costs O(log n) for each holder whose lease ended, and removing an
//! owner's holders O(1) for each of them (and a sort of them, to go in grant
//! order). Grant order is token
//! order here (every grant gets a larger token than any before it on the
//! server), so the holders are listed in grant order by sorting them: only
//! what lists every holder anyway (saving, LOCKEDBY without COUNT) pays it.

use std::cell::Cell;
#[cfg(test)]
use std::collections::HashMap;
use std::hash::{BuildHasher, RandomState};
use std::sync::atomic::{AtomicU64, Ordering};

use hashbrown::HashTable;

use super::Holder;
use super::group::{group_hash, holding_hash};
use chunked::Chunked;
use jids::Jids;
use owners::Owners;

/// A holder's slot (its place in the heap is kept apart, so that a slot is
/// the holder's 40 bytes and nothing more).
type Slot = Option<Holder>;

/// Which end of the heap a level of it orders: the earliest end of lease at
/// the even levels (the root is the earliest), the latest at the odd ones.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Side {
    Soonest,
    Latest,
}

/// The holders of a lock with many, indexed by jid and by end of lease.
#[derive(Debug, Clone)]
pub(super) struct Indexed {
    slots: Chunked<Slot>,
    /// Each slot's previous and next in the list of leases (`NIL` at an
    /// end), or its place in the heap and `IN_HEAP`, or `[0, UNLEASED]`.
    links: Chunked<[u32; 2]>,
    /// The first and last of the list of leases (`NIL` when empty).
    head: u32,
    tail: u32,
    free: Vec<u32>,
    by_jid: Jids,
    hasher: RandomState,
    /// The slot of the jid last found or seated: one command looks its jid
    /// up several times (to check it, to decide, to change it, to replicate
    /// it), and a hash of it costs more than all the rest of a lookup.
    /// Checked against the slot's jid before use, so a stale one only misses.
    last_found: Cell<u32>,
    /// The jid last hashed and its hash: a grant hashes its jid to look for
    /// a holder to renew, then to seat one; a release to find the holder,
    /// then to take it out of the table. Hashed once each.
    last_hashed: Cell<Option<Hashed>>,
    leases: Vec<u32>,
    /// Holders without a lease: while there is one the key never expires.
    no_lease: usize,
    /// The largest token ever held here: a new holder must come after it to
    /// keep grant order equal to token order.
    newest: i64,
    len: usize,
    /// Holders per group, an entry only while the group has one (empty,
    /// and unallocated, when no holder has a group), by [`group_hash`]: a
    /// caller that hashed the name once asks without hashing it again.
    groups: HashTable<(Box<[u8]>, usize)>,
    /// Holders with a group.
    grouped: usize,
    /// Bytes of the holders' texts kept apart from their slots (a META, a
    /// jid of another shape), as MEMORY USAGE counts them: kept as holders
    /// come, change and go, so that it walks none.
    texts: usize,
    /// Bytes of the group entries ([`group_entry_bytes`]), kept alike.
    group_bytes: usize,
    /// Holders in MODE exclusive.
    exclusive: usize,
    /// The slots of each owner.
    owners: Owners,
    /// This index's own number, taken afresh by a copy (see
    /// [`Indexed::holdings_stamp`]).
    epoch: Stamp,
    /// How many times a group's count went down, and the groups of the
    /// last [`JOURNAL`] of them (by [`holding_hash`], at `decreases %
    /// JOURNAL`; allocated at the first): who asks what went down since
    /// a stamp it kept reads it here, and only when more did must it look
    /// at every group again.
    decreases: u64,
    journal: Option<Box<[u64; JOURNAL]>>,
}

/// How many of the latest decreases of a group's count an index names.
const JOURNAL: usize = 32;

/// One state of one index's group counts (see `GroupCounts::stamp`):
/// what stays while no group's count of holders goes down.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HoldingsStamp {
    epoch: u64,
    decreases: u64,
}

#[cfg(test)]
impl HoldingsStamp {
    /// A stamp made up by a test of the waiting layer.
    pub fn made_up(epoch: u64, decreases: u64) -> Self {
        Self { epoch, decreases }
    }
}

/// A number that names one index: no two share it. A copy of an index
/// (COPY, a clone kept by a test) takes a number of its own, since the two
/// go their own ways.
#[derive(Debug)]
struct Stamp(u64);

/// The next [`Stamp`]: a 64-bit count does not wrap.
static NEXT_STAMP: AtomicU64 = AtomicU64::new(1);

impl Stamp {
    fn fresh() -> Self {
        Self(NEXT_STAMP.fetch_add(1, Ordering::Relaxed))
    }
}

impl Clone for Stamp {
    fn clone(&self) -> Self {
        Self::fresh()
    }
}

/// A heap place that no slot has (a holder not in the heap).
const NOWHERE: u32 = u32::MAX;
/// No neighbour in the list of leases.
const NIL: u32 = u32::MAX;
/// The second link of a slot in the heap (its first is its place there).
const IN_HEAP: u32 = u32::MAX - 1;
/// The second link of a slot without a lease, or not yet placed.
const UNLEASED: u32 = u32::MAX - 2;
/// Slot numbers stay below the markers.
const MAX_SLOTS: u32 = UNLEASED;

impl Indexed {
    /// The holders given, in grant order, when every token is larger than
    /// the one before it; otherwise they are handed back.
    pub(super) fn from_ordered(holders: Vec<Holder>) -> Result<Self, Vec<Holder>> {
        if !in_token_order(&holders) || u32::try_from(holders.len()).is_err() {
            return Err(holders);
        }
        let mut indexed = Self::empty();
        // Each chunk allocated once.
        indexed.slots = Chunked::with_capacity(holders.len());
        indexed.links = Chunked::with_capacity(holders.len());
        indexed.by_jid.reserve(holders.len());
        let mut leased = Vec::with_capacity(holders.len());
        for h in holders {
            // In token order, so each one goes in.
            if let Ok((slot, Some(end))) = indexed.seat(h) {
                leased.push((end, slot));
            }
        }
        // Listed in order of end of lease, each joins the tail: none is left
        // to the heap, whatever renewals reordered them.
        leased.sort_unstable();
        for (_, slot) in leased {
            indexed.enlist(slot);
        }
        Ok(indexed)
    }

    /// No holder.
    pub(super) fn empty() -> Self {
        Self {
            slots: Chunked::default(),
            free: Vec::new(),
            by_jid: Jids::default(),
            hasher: RandomState::new(),
            last_found: Cell::new(NIL),
            last_hashed: Cell::new(None),
            links: Chunked::default(),
            head: NIL,
            tail: NIL,
            leases: Vec::new(),
            no_lease: 0,
            newest: 0,
            len: 0,
            groups: HashTable::new(),
            grouped: 0,
            texts: 0,
            group_bytes: 0,
            exclusive: 0,
            owners: Owners::default(),
            epoch: Stamp::fresh(),
            decreases: 0,
            journal: None,
        }
    }

    /// The holders in grant order, leaving this empty.
    pub(super) fn into_ordered(self) -> Vec<Holder> {
        let mut holders: Vec<Holder> = self.slots.into_iter().flatten().collect();
        holders.sort_by_key(|h| h.token());
        holders
    }

    pub(super) fn len(&self) -> usize {
        self.len
    }

    /// Every holder, in no particular order.
    pub(super) fn iter(&self) -> impl Iterator<Item = &Holder> {
        self.slots.iter().filter_map(Option::as_ref)
    }

    /// Every holder in grant order (a sort: for what lists them all).
    pub(super) fn ordered(&self) -> Vec<&Holder> {
        let mut holders: Vec<&Holder> = self.iter().collect();
        holders.sort_by_key(|h| h.token());
        holders
    }

    /// Up to about `count` holders from slot `cursor` on, and the slot to go
    /// on from (0 when done). A holder keeps its slot while it holds, so a
    /// walk from 0 to 0 meets every holder present all along, once.
    pub(super) fn page(&self, cursor: usize, count: usize) -> (usize, Vec<&Holder>) {
        let mut found = Vec::with_capacity(count.min(1024));
        let mut at = cursor;
        while let Some(slot) = self.slots.get(at) {
            at += 1;
            if let Some(h) = slot {
                found.push(h);
                if found.len() >= count {
                    break;
                }
            }
        }
        let next = if at >= self.slots.len() { 0 } else { at };
        (next, found)
    }

    fn hash(&self, jid: &[u8]) -> u64 {
        if let Some(hashed) = self.last_hashed.get().filter(|h| h.jid() == Some(jid)) {
            return hashed.hash;
        }
        let hash = self.hasher.hash_one(jid);
        self.last_hashed.set(Hashed::of(jid, hash));
        hash
    }

    fn holder_at(&self, slot: u32) -> Option<&Holder> {
        self.slots.get(slot as usize).and_then(Option::as_ref)
    }

    fn find_slot(&self, jid: &[u8]) -> Option<u32> {
        let holds = |s: u32| self.holder_at(s).is_some_and(|h| h.is(jid));
        let last = self.last_found.get();
        if holds(last) {
            return Some(last);
        }
        let slot = self.by_jid.find(self.hash(jid), holds)?;
        self.last_found.set(slot);
        Some(slot)
    }

    pub(super) fn find(&self, jid: &[u8]) -> Option<&Holder> {
        self.find_slot(jid).and_then(|s| self.holder_at(s))
    }

    /// Adds a holder of a jid not held here. A token not larger than every
    /// token before it would break grant order: the holder is handed back.
    pub(super) fn insert(&mut self, holder: Holder) -> Result<(), Holder> {
        if let (slot, Some(_)) = self.seat(holder)? {
            self.enlist(slot);
        }
        Ok(())
    }

    /// Puts a new holder in a slot and the hash table, not yet in order of
    /// end of lease: its slot, and its end of lease if it has one.
    fn seat(&mut self, holder: Holder) -> Result<(u32, Option<i64>), Holder> {
        if holder.token() <= self.newest && self.len > 0 {
            return Err(holder);
        }
        let slot = match self.free.pop() {
            Some(slot) => slot,
            None => match u32::try_from(self.slots.len()) {
                Ok(slot) if slot < MAX_SLOTS => {
                    self.slots.push(None);
                    self.links.push([0, UNLEASED]);
                    slot
                }
                _ => return Err(holder),
            },
        };
        let hash = self.hash(&holder.jid());
        self.newest = if self.len == 0 {
            holder.token()
        } else {
            self.newest.max(holder.token())
        };
        let leased = holder.expires_at();
        self.count(holder.group(), holder.is_exclusive(), true);
        self.texts += holder.heap_bytes();
        if let Some(s) = self.slots.get_mut(slot as usize) {
            *s = Some(holder);
        }
        if let Some(owner) = self.slots.get(slot as usize).and_then(owner_in) {
            self.owners.add(&self.slots, &self.hasher, owner, slot);
        }
        let (slots, hasher) = (&self.slots, &self.hasher);
        self.by_jid
            .insert(hash, slot, |s| jid_hash(slots, hasher, s));
        // The command that seats a holder asks for it again (to answer, to
        // replicate it).
        self.last_found.set(slot);
        self.len += 1;
        if leased.is_none() {
            self.no_lease += 1;
        }
        Ok((slot, leased))
    }

    /// Removes the holder of `jid`.
    pub(super) fn remove(&mut self, jid: &[u8]) -> Option<Holder> {
        let slot = self.find_slot(jid)?;
        self.remove_slot(slot)
    }

    fn remove_slot(&mut self, slot: u32) -> Option<Holder> {
        if let Some(owner) = self.slots.get(slot as usize).and_then(owner_in) {
            self.owners.remove(&self.slots, &self.hasher, owner, slot);
        }
        self.vacate(slot)
    }

    /// Takes the holder out of `slot` and every index but the owners'.
    fn vacate(&mut self, slot: u32) -> Option<Holder> {
        let hash = self.hash(&self.holder_at(slot)?.jid());
        let (slots, hasher) = (&self.slots, &self.hasher);
        self.by_jid
            .remove(hash, slot, |s| jid_hash(slots, hasher, s));
        self.delist(slot);
        let holder = self.slots.get_mut(slot as usize)?.take()?;
        self.count(holder.group(), holder.is_exclusive(), false);
        self.texts = self.texts.saturating_sub(holder.heap_bytes());
        if holder.expires_at().is_none() {
            self.no_lease -= 1;
        }
        self.free.push(slot);
        self.len -= 1;
        Some(holder)
    }

    /// Changes the holder of `jid` with `change`, then puts it back in its
    /// place by end of lease; returns its token.
    pub(super) fn update(&mut self, jid: &[u8], change: impl FnOnce(&mut Holder)) -> Option<i64> {
        let slot = self.find_slot(jid)?;
        let holder = self.slots.get_mut(slot as usize)?.as_mut()?;
        let before = holder.expires_at();
        // A renewal keeps the group; only a replayed holder may bring
        // another (copied only then, when there is a group at all).
        let (old_group, old_exclusive) =
            (holder.group().map(<[u8]>::to_vec), holder.is_exclusive());
        // The owner before the change, to move the slot in the owners' index
        // if it changes.
        let old_owner = SavedOwner::of(holder.owner());
        let old_text = holder.heap_bytes();
        change(holder);
        self.texts = (self.texts + holder.heap_bytes()).saturating_sub(old_text);
        if holder.owner() != old_owner.get() {
            if let Some(old) = old_owner.get() {
                self.owners.remove(&self.slots, &self.hasher, old, slot);
            }
            if let Some(new) = self.slots.get(slot as usize).and_then(owner_in) {
                self.owners.add(&self.slots, &self.hasher, new, slot);
            }
        }
        let holder = self.slots.get(slot as usize)?.as_ref()?;
        debug_assert_eq!(holder.jid(), jid);
        let (after, token) = (holder.expires_at(), holder.token());
        let (new_group, new_exclusive) =
            (holder.group().map(<[u8]>::to_vec), holder.is_exclusive());
        if old_group != new_group || old_exclusive != new_exclusive {
            self.count(old_group.as_deref(), old_exclusive, false);
            self.count(new_group.as_deref(), new_exclusive, true);
        }
        match (before, after) {
            (Some(_), Some(_)) => {
                self.delist(slot);
                self.enlist(slot);
            }
            (Some(_), None) => {
                self.delist(slot);
                self.no_lease += 1;
            }
            (None, Some(_)) => {
                self.no_lease -= 1;
                self.enlist(slot);
            }
            (None, None) => {}
        }
        Some(token)
    }

    /// Counts a holder of `group` (exclusive or not) in (`added`) or out of
    /// the per-group and exclusive counts.
    fn count(&mut self, group: Option<&[u8]>, exclusive: bool, added: bool) {
        if exclusive {
            self.exclusive = if added {
                self.exclusive + 1
            } else {
                self.exclusive.saturating_sub(1)
            };
        }
        let Some(group) = group else {
            if !added {
                self.note_decrease(holding_hash(None));
            }
            return;
        };
        // The name's hash is its holding hash too: hashed once.
        let hash = group_hash(group);
        if !added {
            self.note_decrease(hash);
        }
        let named = |(g, _): &(Box<[u8]>, usize)| **g == *group;
        if added {
            self.grouped += 1;
            // The name copied only for a group new here.
            match self.groups.find_mut(hash, named) {
                Some((_, n)) => *n += 1,
                None => {
                    self.group_bytes += group_entry_bytes(group);
                    self.groups
                        .insert_unique(hash, (group.into(), 1), |(g, _)| group_hash(g));
                }
            }
        } else {
            self.grouped = self.grouped.saturating_sub(1);
            if let Ok(mut entry) = self.groups.find_entry(hash, named) {
                let n = &mut entry.get_mut().1;
                *n = n.saturating_sub(1);
                if *n == 0 {
                    // An idle group keeps no state.
                    let ((name, _), _) = entry.remove();
                    self.group_bytes = self.group_bytes.saturating_sub(group_entry_bytes(&name));
                }
            }
        }
    }

    /// What stays the same only while no group's count goes down (a holder
    /// released, pruned, reaped or moved to another group; `None` counts as
    /// a group): under the same stamp every group holds at least what it
    /// held. What the waiters keep of a look at every waiting group's
    /// holdings is good while it stays, and for the groups that
    /// [`Indexed::decreased_since`] does not name after that.
    pub(super) fn holdings_stamp(&self) -> HoldingsStamp {
        HoldingsStamp {
            epoch: self.epoch.0,
            decreases: self.decreases,
        }
    }

    /// Shows `each` the [`holding_hash`] of every group whose count went
    /// down since `since` (a group once a decrease, in no promised order);
    /// false, having shown nothing, when this index cannot say: `since` is
    /// another index's, or more went down than it remembers.
    pub(super) fn decreased_since(&self, since: HoldingsStamp, mut each: impl FnMut(u64)) -> bool {
        let Some(n) = self.decreases.checked_sub(since.decreases) else {
            return false;
        };
        if since.epoch != self.epoch.0 || n > JOURNAL as u64 {
            return false;
        }
        if n > 0 {
            let Some(journal) = &self.journal else {
                return false;
            };
            for d in since.decreases..self.decreases {
                if let Some(&hash) = journal.get((d % JOURNAL as u64) as usize) {
                    each(hash);
                }
            }
        }
        true
    }

    fn note_decrease(&mut self, hash: u64) {
        let at = (self.decreases % JOURNAL as u64) as usize;
        let journal = self.journal.get_or_insert_with(|| Box::new([0; JOURNAL]));
        if let Some(entry) = journal.get_mut(at) {
            *entry = hash;
        }
        self.decreases += 1;
    }

    /// How many holders `group` has (`None`: the holders without a group).
    pub(super) fn group_holding(&self, group: Option<&[u8]>) -> usize {
        match group {
            Some(g) => self.named_holding(g, group_hash(g)),
            None => self.len - self.grouped,
        }
    }

    /// How many holders the group `name` has, `hash` its [`group_hash`].
    pub(super) fn named_holding(&self, name: &[u8], hash: u64) -> usize {
        self.groups
            .find(hash, |(g, _)| **g == *name)
            .map_or(0, |&(_, n)| n)
    }

    /// Per group (`None`: no group), how many holders it has, from the
    /// counts kept: no walk over the holders.
    pub(super) fn groups_holding(&self) -> impl Iterator<Item = (Option<&[u8]>, usize)> {
        let ungrouped = (self.len > self.grouped).then(|| (None, self.len - self.grouped));
        ungrouped
            .into_iter()
            .chain(self.groups.iter().map(|(g, n)| (Some(&**g), *n)))
    }

    /// Shows `ended` every holder whose lease ended at `now`, in no
    /// particular order, visiting only those and a few of their neighbours:
    /// the list from its head, and in the heap the places below an ended
    /// lease (a lease at an even level ends no later than any below it, so
    /// one that has not ended closes its subtree; an odd level, the latest
    /// of its subtree, is passed through). Returns the earliest end of a
    /// lease that has not ended: one of the neighbours visited, since every
    /// lease not visited ends no earlier than one that was.
    pub(super) fn for_each_ended<'a>(
        &'a self,
        now: i64,
        mut ended: impl FnMut(&'a Holder),
    ) -> Option<i64> {
        let mut next: Option<i64> = None;
        let mut live = |end: i64| next = Some(next.map_or(end, |n| n.min(end)));
        let mut at = self.head;
        while at != NIL {
            let Some(h) = self.holder_at(at) else {
                break;
            };
            match h.expires_at() {
                Some(end) if end <= now => ended(h),
                Some(end) => {
                    live(end);
                    break;
                }
                None => break,
            }
            at = self.link(at)[1];
        }
        let mut places = vec![0usize];
        while let Some(place) = places.pop() {
            let Some(h) = self.leases.get(place).and_then(|&s| self.holder_at(s)) else {
                continue;
            };
            match h.expires_at() {
                Some(end) if end <= now => ended(h),
                not_ended => {
                    if let Some(end) = not_ended {
                        live(end);
                    }
                    if Self::side(place) == Side::Soonest {
                        continue;
                    }
                }
            }
            places.extend([2 * place + 1, 2 * place + 2]);
        }
        next
    }

    /// How many holders hold exclusively.
    pub(super) fn exclusive_holders(&self) -> usize {
        self.exclusive
    }

    /// Removes one holder whose lease ended at `now`, the earliest first.
    pub(super) fn pop_ended(&mut self, now: i64) -> Option<Holder> {
        let slot = self.earliest_slot()?;
        if self.lease(slot) > now {
            return None;
        }
        self.remove_slot(slot)
    }

    /// The slot of the earliest end of lease: the list's head or the heap's
    /// root.
    fn earliest_slot(&self) -> Option<u32> {
        let listed = (self.head != NIL).then_some(self.head);
        match (listed, self.leases.first().copied()) {
            (Some(a), Some(b)) => Some(if self.lease(b) < self.lease(a) { b } else { a }),
            (a, b) => a.or(b),
        }
    }

    /// Removes every holder of `owner`, in grant order, showing each to
    /// `removed`: only those are visited.
    pub(super) fn remove_owner(&mut self, owner: &[u8], mut removed: impl FnMut(&Holder)) -> usize {
        let mut picked = self.owners.take(&self.slots, &self.hasher, owner);
        picked.sort_unstable_by_key(|&s| self.holder_at(s).map_or(0, |h| h.token()));
        for &slot in &picked {
            if let Some(h) = self.vacate(slot) {
                removed(&h);
            }
        }
        picked.len()
    }

    /// Removes every holder `matches` picks, showing each to `removed`
    /// (a walk over every holder).
    pub(super) fn remove_where(
        &mut self,
        mut matches: impl FnMut(&Holder) -> bool,
        mut removed: impl FnMut(&Holder),
    ) -> usize {
        let picked: Vec<u32> = (0..self.slots.len())
            .filter_map(|s| u32::try_from(s).ok())
            .filter(|&s| self.holder_at(s).is_some_and(&mut matches))
            .collect();
        for slot in &picked {
            if let Some(h) = self.remove_slot(*slot) {
                removed(&h);
            }
        }
        picked.len()
    }

    /// The earliest end of lease, if any holder has one.
    pub(super) fn earliest_lease(&self) -> Option<i64> {
        self.earliest_slot().map(|s| self.lease(s))
    }

    /// The latest end of lease, if any holder has one.
    pub(super) fn latest_lease(&self) -> Option<i64> {
        // The heap's root alone, or the later of its children (the odd level).
        let at = match self.leases.len() {
            0 => None,
            1 => Some(0),
            2 => Some(1),
            _ => Some(1 + usize::from(self.after(2, 1))),
        };
        let heaped = at.map(|at| self.lease_at(at));
        let listed = (self.tail != NIL).then(|| self.lease(self.tail));
        match (listed, heaped) {
            (Some(a), Some(b)) => Some(a.max(b)),
            (a, b) => a.or(b),
        }
    }

    /// Whether some holder has no lease.
    pub(super) fn has_unleased(&self) -> bool {
        self.no_lease > 0
    }

    /// Bytes held, for MEMORY USAGE.
    pub(super) fn mem_usage(&self) -> usize {
        std::mem::size_of::<Self>()
            + chunked_bytes(&self.slots)
            + chunked_bytes(&self.links)
            + (self.free.capacity() + self.leases.capacity()) * 4
            // a slot number and its tag an entry
            + self.by_jid.capacity() * 4
            + self.texts
            + self.group_bytes
            + self.owners.mem_usage()
            + self
                .journal
                .as_ref()
                .map_or(0, |j| std::mem::size_of_val(&**j))
    }

    // ---- the list of leases ------------------------------------------------

    fn link(&self, slot: u32) -> [u32; 2] {
        self.links
            .get(slot as usize)
            .copied()
            .unwrap_or([0, UNLEASED])
    }

    fn set_link(&mut self, slot: u32, link: [u32; 2]) {
        if let Some(l) = self.links.get_mut(slot as usize) {
            *l = link;
        }
    }

    /// Sets the previous (`which` 0) or next (1) link of `slot`, or the
    /// list's head or tail when `slot` is `NIL`.
    fn relink(&mut self, slot: u32, which: usize, to: u32) {
        if slot == NIL {
            if which == 0 {
                self.tail = to;
            } else {
                self.head = to;
            }
        } else if let Some(l) = self
            .links
            .get_mut(slot as usize)
            .and_then(|l| l.get_mut(which))
        {
            *l = to;
        }
    }

    /// Puts the leased holder of `slot` in order: at an end of the list when
    /// its lease goes there, in the heap otherwise.
    fn enlist(&mut self, slot: u32) {
        let end = self.lease(slot);
        if self.tail == NIL {
            self.set_link(slot, [NIL, NIL]);
            (self.head, self.tail) = (slot, slot);
        } else if self.lease(self.tail) <= end {
            self.set_link(slot, [self.tail, NIL]);
            self.relink(self.tail, 1, slot);
            self.tail = slot;
        } else if end <= self.lease(self.head) {
            self.set_link(slot, [NIL, self.head]);
            self.relink(self.head, 0, slot);
            self.head = slot;
        } else {
            self.push(slot);
        }
    }

    /// Takes `slot` out of the list or the heap (a holder that leaves or
    /// whose lease changes).
    fn delist(&mut self, slot: u32) {
        match self.link(slot) {
            [_, UNLEASED] => return,
            [_, IN_HEAP] => self.unlease(slot),
            [prev, next] => {
                // A neighbour's link to it, or the list's end, skips it.
                self.relink(prev, 1, next);
                self.relink(next, 0, prev);
            }
        }
        self.set_link(slot, [0, UNLEASED]);
    }

    // ---- the min-max heap of leases ----------------------------------------

    /// The end of lease of the holder in `slot` (`i64::MAX` for none: it is
    /// not in the heap, so that is never compared).
    fn lease(&self, slot: u32) -> i64 {
        self.holder_at(slot)
            .and_then(Holder::expires_at)
            .unwrap_or(i64::MAX)
    }

    /// The end of lease at heap place `at`.
    fn lease_at(&self, at: usize) -> i64 {
        self.leases.get(at).map_or(i64::MAX, |&s| self.lease(s))
    }

    /// Whether the lease at place `a` ends strictly after the one at `b`.
    fn after(&self, a: usize, b: usize) -> bool {
        self.lease_at(a) > self.lease_at(b)
    }

    /// Whether the lease at `a` belongs nearer the `side` end than `b`'s.
    fn beats(&self, side: Side, a: usize, b: usize) -> bool {
        match side {
            Side::Soonest => self.lease_at(a) < self.lease_at(b),
            Side::Latest => self.lease_at(a) > self.lease_at(b),
        }
    }

    /// The side a heap place orders: even levels the earliest, odd the latest.
    fn side(at: usize) -> Side {
        if (at + 1).ilog2().is_multiple_of(2) {
            Side::Soonest
        } else {
            Side::Latest
        }
    }

    fn swap(&mut self, a: usize, b: usize) {
        self.leases.swap(a, b);
        for at in [a, b] {
            if let Some(&slot) = self.leases.get(at) {
                self.set_place(slot, at);
            }
        }
    }

    fn set_place(&mut self, slot: u32, at: usize) {
        self.set_link(slot, [u32::try_from(at).unwrap_or(NOWHERE), IN_HEAP]);
    }

    /// The place of `slot` in the heap (`NOWHERE`: not there).
    fn place(&self, slot: u32) -> u32 {
        match self.link(slot) {
            [at, IN_HEAP] => at,
            _ => NOWHERE,
        }
    }

    fn push(&mut self, slot: u32) {
        grow(&mut self.leases);
        self.leases.push(slot);
        let at = self.leases.len() - 1;
        self.set_place(slot, at);
        self.bubble_up(at);
    }

    /// Takes `slot` out of the heap (a holder that leaves or loses its lease).
    fn unlease(&mut self, slot: u32) {
        let at = self.place(slot);
        if at == NOWHERE {
            return;
        }
        let last = self.leases.len().saturating_sub(1);
        self.swap(at as usize, last);
        self.leases.pop();
        self.set_link(slot, [0, UNLEASED]);
        if let Some(&moved) = self.leases.get(at as usize) {
            self.fix(moved);
        }
    }

    /// Moves `slot` to its place after its lease changed: down among what
    /// is below it, then up from wherever that left it (going down first,
    /// a swap with the parent never lands a lease above one it should not).
    fn fix(&mut self, slot: u32) {
        let at = self.place(slot) as usize;
        self.trickle_down(at);
        let at = self.place(slot) as usize;
        self.bubble_up(at);
    }

    fn bubble_up(&mut self, at: usize) {
        if at == 0 {
            return;
        }
        let parent = (at - 1) / 2;
        let side = Self::side(at);
        let other = match side {
            Side::Soonest => Side::Latest,
            Side::Latest => Side::Soonest,
        };
        if self.beats(other, at, parent) {
            self.swap(at, parent);
            self.bubble_up_on(other, parent);
        } else {
            self.bubble_up_on(side, at);
        }
    }

    /// Up the levels of `side` (grandparent by grandparent).
    fn bubble_up_on(&mut self, side: Side, mut at: usize) {
        while at > 2 {
            let grand = ((at - 1) / 2 - 1) / 2;
            if !self.beats(side, at, grand) {
                break;
            }
            self.swap(at, grand);
            at = grand;
        }
    }

    fn trickle_down(&mut self, mut at: usize) {
        let side = Self::side(at);
        let len = self.leases.len();
        loop {
            let first = 2 * at + 1;
            if first >= len {
                break;
            }
            // The best of the children and the grandchildren.
            let mut best = first;
            for c in [first + 1, 4 * at + 3, 4 * at + 4, 4 * at + 5, 4 * at + 6] {
                if c < len && self.beats(side, c, best) {
                    best = c;
                }
            }
            if !self.beats(side, best, at) {
                break;
            }
            self.swap(best, at);
            if best <= first + 1 {
                break;
            }
            let parent = (best - 1) / 2;
            if self.beats(side, parent, best) {
                self.swap(best, parent);
            }
            at = best;
        }
    }

    /// Every invariant of the layout, for the tests.
    #[cfg(test)]
    pub(super) fn check(&self) -> Result<(), String> {
        let holders: Vec<&Holder> = self.iter().collect();
        if holders.len() != self.len || self.by_jid.len() != self.len {
            return Err(format!("{} holders, len {}", holders.len(), self.len));
        }
        for h in &holders {
            if self.find(&h.jid()).map(|f| f.token()) != Some(h.token()) {
                return Err("a holder not found by its jid".into());
            }
        }
        let leased = holders.iter().filter(|h| h.expires_at().is_some()).count();
        if self.no_lease != self.len - leased {
            return Err("no_lease miscounted".into());
        }
        let mut listed = 0;
        let (mut prev, mut at) = (NIL, self.head);
        while at != NIL {
            let [p, next] = self.link(at);
            if p != prev || next == IN_HEAP || next == UNLEASED {
                return Err(format!("slot {at} mislinked"));
            }
            if prev != NIL && self.lease(prev) > self.lease(at) {
                return Err(format!("slot {at} listed out of order"));
            }
            listed += 1;
            if listed > self.len {
                return Err("the list loops".into());
            }
            (prev, at) = (at, next);
        }
        if prev != self.tail {
            return Err("the list's tail is not its last".into());
        }
        if self.leases.len() + listed != leased {
            return Err(format!(
                "{} in the heap and {listed} listed of {leased}",
                self.leases.len()
            ));
        }
        for (at, &slot) in self.leases.iter().enumerate() {
            if self.place(slot) as usize != at {
                return Err(format!("slot {slot} misplaced"));
            }
            // Within its parent (the other side) and its grandparent (the same).
            let side = Self::side(at);
            if at > 0 && self.beats(side, (at - 1) / 2, at) {
                return Err(format!("{side:?} at {at}: beats its parent"));
            }
            if at > 2 && self.beats(side, at, ((at - 1) / 2 - 1) / 2) {
                return Err(format!("{side:?} at {at}: beats its grandparent"));
            }
        }
        let mut groups: HashMap<Box<[u8]>, usize> = HashMap::new();
        for h in &holders {
            if let Some(g) = h.group() {
                *groups.entry(g.into()).or_default() += 1;
            }
        }
        let grouped: usize = groups.values().sum();
        let kept: HashMap<Box<[u8]>, usize> = self.groups.iter().cloned().collect();
        if groups != kept
            || grouped != self.grouped
            || self
                .groups
                .iter()
                .any(|(g, n)| self.named_holding(g, group_hash(g)) != *n)
        {
            return Err("groups miscounted".into());
        }
        if holders.iter().filter(|h| h.is_exclusive()).count() != self.exclusive {
            return Err("exclusive holders miscounted".into());
        }
        let texts: usize = holders.iter().map(|h| h.heap_bytes()).sum();
        let group_bytes: usize = self.groups.iter().map(|(g, _)| group_entry_bytes(g)).sum();
        if (texts, group_bytes) != (self.texts, self.group_bytes) {
            return Err(format!(
                "texts and group entries of {texts} and {group_bytes} bytes kept as {} and {}",
                self.texts, self.group_bytes
            ));
        }
        if !in_token_order(&self.ordered().into_iter().cloned().collect::<Vec<_>>()) {
            return Err("tokens repeat".into());
        }
        self.owners.check(&self.slots, &self.hasher)
    }
}

/// What a group's entry counts in MEMORY USAGE: its name and its count,
/// with the table's share.
fn group_entry_bytes(name: &[u8]) -> usize {
    name.len() + 3 * std::mem::size_of::<usize>()
}

/// The longest jid [`Hashed`] keeps: a UUID's 36 characters and more.
const HASHED_BYTES: usize = 46;

/// A jid of up to [`HASHED_BYTES`] bytes and its hash.
#[derive(Debug, Clone, Copy)]
struct Hashed {
    hash: u64,
    len: u8,
    bytes: [u8; HASHED_BYTES],
}

impl Hashed {
    /// `jid` and its `hash`, if it is short enough to keep.
    fn of(jid: &[u8], hash: u64) -> Option<Self> {
        let mut bytes = [0; HASHED_BYTES];
        bytes.get_mut(..jid.len())?.copy_from_slice(jid);
        Some(Self {
            hash,
            len: u8::try_from(jid.len()).ok()?,
            bytes,
        })
    }

    fn jid(&self) -> Option<&[u8]> {
        self.bytes.get(..usize::from(self.len))
    }
}

/// The hash of the jid in `slot` (0 for an empty slot, which the jids'
/// table never holds), as `hasher` makes it.
fn jid_hash(slots: &Chunked<Slot>, hasher: &RandomState, slot: u32) -> u64 {
    slots
        .get(slot as usize)
        .and_then(Option::as_ref)
        .map_or(0, |h| hasher.hash_one(&*h.jid()))
}

/// The bytes a chunked vector holds: its elements' and its table of chunks.
fn chunked_bytes<T>(v: &Chunked<T>) -> usize {
    let (elements, table) = v.capacity();
    elements * std::mem::size_of::<T>() + table
}

/// Makes room for one more by at least an eighth, not Vec's doubling, and
/// up to the end of the allocator's size class: what the allocator would
/// round the block up to anyway is used rather than wasted (with jemalloc's
/// four classes a doubling, a block sized by an eighth could otherwise end
/// up a quarter larger than asked). Each element is still moved a bounded
/// number of times on average.
fn grow<T>(v: &mut Vec<T>) {
    grow_up_to(v, usize::MAX);
}

/// As [`grow`], never past `most` elements (a chunk of `chunked.rs`).
fn grow_up_to<T>(v: &mut Vec<T>, most: usize) {
    if v.len() == v.capacity() {
        let size = std::mem::size_of::<T>().max(1);
        let wanted = (v.len() + (v.len() / 8).max(4)).min(most);
        let capacity = (size_class(wanted.saturating_mul(size)) / size).clamp(wanted, most);
        v.reserve_exact(capacity - v.len());
    }
}

/// The size jemalloc (Redis's allocator) gives a request of `bytes`: a
/// multiple of 16 up to 128, then four classes between one power of two and
/// the next.
fn size_class(bytes: usize) -> usize {
    if bytes <= 128 {
        return bytes.div_ceil(16).max(1) * 16;
    }
    let step = 1usize << ((bytes - 1).ilog2() - 2);
    bytes.div_ceil(step).saturating_mul(step)
}

/// A copy of a holder's owner across a change of the holder: on the stack
/// unless long, and nothing at all for a holder without one (most).
enum SavedOwner {
    None,
    Short(u8, [u8; 64]),
    Long(Box<[u8]>),
}

impl SavedOwner {
    fn of(owner: Option<&[u8]>) -> Self {
        let Some(owner) = owner else {
            return Self::None;
        };
        let mut bytes = [0u8; 64];
        match (bytes.get_mut(..owner.len()), u8::try_from(owner.len())) {
            (Some(to), Ok(len)) => {
                to.copy_from_slice(owner);
                Self::Short(len, bytes)
            }
            _ => Self::Long(owner.into()),
        }
    }

    fn get(&self) -> Option<&[u8]> {
        match self {
            Self::None => None,
            Self::Short(len, bytes) => bytes.get(..usize::from(*len)),
            Self::Long(bytes) => Some(bytes),
        }
    }
}

/// The owner of the holder in a slot, if any.
fn owner_in(slot: &Slot) -> Option<&[u8]> {
    slot.as_ref().and_then(Holder::owner)
}

/// Whether every token is larger than the one before it (grant order is then
/// token order).
pub(super) fn in_token_order(holders: &[Holder]) -> bool {
    holders.windows(2).all(|w| match w {
        [a, b] => a.token() < b.token(),
        _ => true,
    })
}

mod chunked;
mod jids;
mod owners;

#[cfg(test)]
mod tests;
