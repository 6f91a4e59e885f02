//! The layout of a lock with many holders, where every operation must cost
//! the same on a key of a hundred thousand holders as on a key of a few.
//! Past a threshold (see `holder/holders.rs`) the holders move here from a
//! vector, as Redis's own types move from a listpack to a hash table:
//!
//! - `slots`: the holders, each in a slot that never moves while it holds, a
//!   freed slot reused by the next grant (`free`), kept in chunks
//!   (`chunked.rs`) so that a growing key never copies them all;
//! - `by_jid`: slot numbers by jid, one read of the table a lookup
//!   (`jids.rs`);
//! - the holders with a lease, by end of lease: a sorted list through
//!   `links` and a min-max heap (`leases.rs`), so that ended leases are taken
//!   without a sweep and the key's expiry is the latest lease;
//! - `groups`: holders per GROUP and exclusive ones, with a journal of
//!   decreases (`groups.rs`);
//! - `owners`: the slots of each OWNER (`owners.rs`), for REAP ... OWNER.
//!
//! A holder costs its 40 bytes and 13 to 16 more (two links, its share of
//! the table), about what the vector it replaces costs. Finding, granting,
//! renewing and releasing cost O(log n); pruning O(log n) per ended lease;
//! removing an owner's holders O(1) each (and a sort, for grant order).
//! Grant order is token order here (every grant gets a larger token than
//! any before it on the server), so listing every holder in grant order
//! (saving, LOCKEDBY without COUNT) sorts them, and nothing else pays that.

use std::cell::Cell;
#[cfg(test)]
use std::collections::HashMap;
use std::hash::{BuildHasher, RandomState};

use hashbrown::HashTable;

use super::Holder;
#[cfg(test)]
use super::group::group_hash;
use chunked::Chunked;
pub use groups::HoldingsStamp;
#[cfg(test)]
use groups::group_entry_bytes;
use groups::{JOURNAL, Stamp};
use jids::Jids;
use owners::Owners;

/// A holder's slot (its place in the heap is kept apart, so that a slot is
/// the holder's 40 bytes and nothing more).
type Slot = Option<Holder>;

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
    /// and unallocated, when no holder has a group), by `group_hash`: a
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
mod groups;
mod jids;
mod leases;
mod owners;

#[cfg(test)]
mod tests;
