//! The layout of a lock with many holders, where every operation must cost
//! the same on a key of a hundred thousand holders as on a key of a few.
//!
//! Small locks keep their holders in a vector, in grant order, and look
//! through it: for a few holders nothing is faster or smaller. Past a
//! threshold (see `holder.rs`) the holders move here, as Redis's own types
//! move from a listpack to a hash table:
//!
//! - `slots`: the holders, each in a slot that never moves while it holds, a
//!   freed slot reused by the next grant (`free`);
//! - `by_jid`: a hash table of slot numbers, to find a holder by its jid;
//! - `soonest` and `latest`: two heaps of the slots of the holders with a
//!   lease, by end of lease, the earliest and the latest on top, each slot
//!   knowing its place in both: the ended leases are taken from the top of
//!   `soonest` without a sweep, and the key's expiry (the latest lease) is
//!   the top of `latest`.
//!
//! Finding, granting, renewing and releasing a holder cost O(log n); pruning
//! costs O(log n) for each holder whose lease ended. Grant order is token
//! order here (every grant gets a larger token than any before it on the
//! server), so the holders are listed in grant order by sorting them: only
//! what lists every holder anyway (saving, LOCKEDBY without COUNT) pays it.

use std::hash::{BuildHasher, RandomState};

use hashbrown::HashTable;

use super::Holder;

/// A holder's slot and its places in the two heaps.
#[derive(Debug, Clone)]
struct Slot {
    holder: Option<Holder>,
    soonest_at: u32,
    latest_at: u32,
}

/// Which heap: the earliest end of lease on top, or the latest.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Side {
    Soonest,
    Latest,
}

/// The holders of a lock with many, indexed by jid and by end of lease.
#[derive(Debug, Clone)]
pub(super) struct Indexed {
    slots: Vec<Slot>,
    free: Vec<u32>,
    by_jid: HashTable<u32>,
    hasher: RandomState,
    soonest: Vec<u32>,
    latest: Vec<u32>,
    /// Holders without a lease: while there is one the key never expires.
    no_lease: usize,
    /// The largest token ever held here: a new holder must come after it to
    /// keep grant order equal to token order.
    newest: i64,
    len: usize,
}

/// A heap place that no slot has (a holder without a lease).
const NOWHERE: u32 = u32::MAX;

impl Indexed {
    /// The holders given, in grant order, when every token is larger than
    /// the one before it; otherwise they are handed back.
    pub(super) fn from_ordered(holders: Vec<Holder>) -> Result<Self, Vec<Holder>> {
        if !in_token_order(&holders) || u32::try_from(holders.len()).is_err() {
            return Err(holders);
        }
        let mut indexed = Self::empty();
        indexed.slots.reserve_exact(holders.len());
        for h in holders {
            // In token order, so each one goes in.
            let _ = indexed.insert(h);
        }
        Ok(indexed)
    }

    /// No holder.
    pub(super) fn empty() -> Self {
        Self {
            slots: Vec::new(),
            free: Vec::new(),
            by_jid: HashTable::new(),
            hasher: RandomState::new(),
            soonest: Vec::new(),
            latest: Vec::new(),
            no_lease: 0,
            newest: 0,
            len: 0,
        }
    }

    /// The holders in grant order, leaving this empty.
    pub(super) fn into_ordered(self) -> Vec<Holder> {
        let mut holders: Vec<Holder> = self.slots.into_iter().filter_map(|s| s.holder).collect();
        holders.sort_by_key(|h| h.token);
        holders
    }

    pub(super) fn len(&self) -> usize {
        self.len
    }

    /// Every holder, in no particular order.
    pub(super) fn iter(&self) -> impl Iterator<Item = &Holder> {
        self.slots.iter().filter_map(|s| s.holder.as_ref())
    }

    /// Every holder in grant order (a sort: for what lists them all).
    pub(super) fn ordered(&self) -> Vec<&Holder> {
        let mut holders: Vec<&Holder> = self.iter().collect();
        holders.sort_by_key(|h| h.token);
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
            if let Some(h) = &slot.holder {
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
        self.hasher.hash_one(jid)
    }

    fn holder_at(&self, slot: u32) -> Option<&Holder> {
        self.slots
            .get(slot as usize)
            .and_then(|s| s.holder.as_ref())
    }

    fn find_slot(&self, jid: &[u8]) -> Option<u32> {
        let slots = &self.slots;
        self.by_jid
            .find(self.hash(jid), |&s| {
                slots
                    .get(s as usize)
                    .and_then(|s| s.holder.as_ref())
                    .is_some_and(|h| h.jid() == jid)
            })
            .copied()
    }

    pub(super) fn find(&self, jid: &[u8]) -> Option<&Holder> {
        self.find_slot(jid).and_then(|s| self.holder_at(s))
    }

    /// Adds a holder of a jid not held here. A token not larger than every
    /// token before it would break grant order: the holder is handed back.
    pub(super) fn insert(&mut self, holder: Holder) -> Result<(), Holder> {
        if holder.token <= self.newest && self.len > 0 {
            return Err(holder);
        }
        let slot = match self.free.pop() {
            Some(slot) => slot,
            None => match u32::try_from(self.slots.len()) {
                Ok(slot) if slot != NOWHERE => {
                    grow(&mut self.slots);
                    self.slots.push(Slot {
                        holder: None,
                        soonest_at: NOWHERE,
                        latest_at: NOWHERE,
                    });
                    slot
                }
                _ => return Err(holder),
            },
        };
        let hash = self.hash(holder.jid());
        self.newest = if self.len == 0 {
            holder.token
        } else {
            self.newest.max(holder.token)
        };
        let leased = holder.expires_at().is_some();
        if let Some(s) = self.slots.get_mut(slot as usize) {
            s.holder = Some(holder);
        }
        let slots = &self.slots;
        let hasher = &self.hasher;
        self.by_jid.insert_unique(hash, slot, |&s| {
            slots
                .get(s as usize)
                .and_then(|s| s.holder.as_ref())
                .map_or(0, |h| hasher.hash_one(h.jid()))
        });
        self.len += 1;
        if leased {
            self.push(Side::Soonest, slot);
            self.push(Side::Latest, slot);
        } else {
            self.no_lease += 1;
        }
        Ok(())
    }

    /// Removes the holder of `jid`.
    pub(super) fn remove(&mut self, jid: &[u8]) -> Option<Holder> {
        let slot = self.find_slot(jid)?;
        self.remove_slot(slot)
    }

    fn remove_slot(&mut self, slot: u32) -> Option<Holder> {
        let hash = self.hash(self.holder_at(slot)?.jid());
        if let Ok(entry) = self.by_jid.find_entry(hash, |&s| s == slot) {
            entry.remove();
        }
        self.unlease(slot);
        let holder = self.slots.get_mut(slot as usize)?.holder.take()?;
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
        let holder = self.slots.get_mut(slot as usize)?.holder.as_mut()?;
        let before = holder.expires_at();
        change(holder);
        debug_assert_eq!(holder.jid(), jid);
        let (after, token) = (holder.expires_at(), holder.token);
        match (before, after) {
            (Some(_), Some(_)) => {
                self.fix(Side::Soonest, slot);
                self.fix(Side::Latest, slot);
            }
            (Some(_), None) => {
                self.unlease(slot);
                self.no_lease += 1;
            }
            (None, Some(_)) => {
                self.no_lease -= 1;
                self.push(Side::Soonest, slot);
                self.push(Side::Latest, slot);
            }
            (None, None) => {}
        }
        Some(token)
    }

    /// Removes one holder whose lease ended at `now`, the earliest first.
    pub(super) fn pop_ended(&mut self, now: i64) -> Option<Holder> {
        let slot = *self.soonest.first()?;
        if self.lease(slot) > now {
            return None;
        }
        self.remove_slot(slot)
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
        self.soonest.first().map(|&s| self.lease(s))
    }

    /// The latest end of lease, if any holder has one.
    pub(super) fn latest_lease(&self) -> Option<i64> {
        self.latest.first().map(|&s| self.lease(s))
    }

    /// Whether some holder has no lease.
    pub(super) fn has_unleased(&self) -> bool {
        self.no_lease > 0
    }

    /// Bytes held, for MEMORY USAGE.
    pub(super) fn mem_usage(&self) -> usize {
        std::mem::size_of::<Self>()
            + self.slots.capacity() * std::mem::size_of::<Slot>()
            + (self.free.capacity() + self.soonest.capacity() + self.latest.capacity()) * 4
            // a slot number and a control byte a bucket
            + self.by_jid.capacity() * 5
            + self.iter().map(Holder::text_bytes).sum::<usize>()
    }

    // ---- the two heaps ----------------------------------------------------

    /// The end of lease of the holder in `slot` (`i64::MAX` for none: it is
    /// in neither heap, so that is never compared).
    fn lease(&self, slot: u32) -> i64 {
        self.holder_at(slot)
            .and_then(Holder::expires_at)
            .unwrap_or(i64::MAX)
    }

    fn heap(&self, side: Side) -> &[u32] {
        match side {
            Side::Soonest => &self.soonest,
            Side::Latest => &self.latest,
        }
    }

    /// Whether the holder in `a` belongs above the one in `b`.
    fn above(&self, side: Side, a: u32, b: u32) -> bool {
        match side {
            Side::Soonest => self.lease(a) < self.lease(b),
            Side::Latest => self.lease(a) > self.lease(b),
        }
    }

    fn place(&self, side: Side, slot: u32) -> u32 {
        self.slots
            .get(slot as usize)
            .map_or(NOWHERE, |s| match side {
                Side::Soonest => s.soonest_at,
                Side::Latest => s.latest_at,
            })
    }

    /// Puts `slot` at `at` in the heap of `side`.
    fn set(&mut self, side: Side, at: usize, slot: u32) {
        let heap = match side {
            Side::Soonest => &mut self.soonest,
            Side::Latest => &mut self.latest,
        };
        if let Some(cell) = heap.get_mut(at) {
            *cell = slot;
        }
        if let Some(s) = self.slots.get_mut(slot as usize) {
            let at = u32::try_from(at).unwrap_or(NOWHERE);
            match side {
                Side::Soonest => s.soonest_at = at,
                Side::Latest => s.latest_at = at,
            }
        }
    }

    fn push(&mut self, side: Side, slot: u32) {
        let at = match side {
            Side::Soonest => {
                grow(&mut self.soonest);
                self.soonest.push(slot);
                self.soonest.len() - 1
            }
            Side::Latest => {
                grow(&mut self.latest);
                self.latest.push(slot);
                self.latest.len() - 1
            }
        };
        self.set(side, at, slot);
        self.sift_up(side, at);
    }

    /// Takes `slot` out of both heaps (a holder that leaves or loses its lease).
    fn unlease(&mut self, slot: u32) {
        for side in [Side::Soonest, Side::Latest] {
            let at = self.place(side, slot);
            if at == NOWHERE {
                continue;
            }
            let heap = match side {
                Side::Soonest => &mut self.soonest,
                Side::Latest => &mut self.latest,
            };
            let Some(last) = heap.pop() else { continue };
            if let Some(s) = self.slots.get_mut(slot as usize) {
                match side {
                    Side::Soonest => s.soonest_at = NOWHERE,
                    Side::Latest => s.latest_at = NOWHERE,
                }
            }
            if last != slot {
                self.set(side, at as usize, last);
                self.fix(side, last);
            }
        }
    }

    /// Moves `slot` up or down to its place after its lease changed.
    fn fix(&mut self, side: Side, slot: u32) {
        let at = self.place(side, slot) as usize;
        if !self.sift_up(side, at) {
            self.sift_down(side, at);
        }
    }

    /// Returns whether it moved.
    fn sift_up(&mut self, side: Side, mut at: usize) -> bool {
        let Some(&slot) = self.heap(side).get(at) else {
            return false;
        };
        let start = at;
        while at > 0 {
            let up = (at - 1) / 2;
            let Some(&parent) = self.heap(side).get(up) else {
                break;
            };
            if !self.above(side, slot, parent) {
                break;
            }
            self.set(side, at, parent);
            at = up;
        }
        self.set(side, at, slot);
        at != start
    }

    fn sift_down(&mut self, side: Side, mut at: usize) {
        let Some(&slot) = self.heap(side).get(at) else {
            return;
        };
        let len = self.heap(side).len();
        loop {
            let left = 2 * at + 1;
            if left >= len {
                break;
            }
            let mut child = left;
            if let (Some(&l), Some(&r)) = (self.heap(side).get(left), self.heap(side).get(left + 1))
                && self.above(side, r, l)
            {
                child = left + 1;
            }
            let Some(&c) = self.heap(side).get(child) else {
                break;
            };
            if !self.above(side, c, slot) {
                break;
            }
            self.set(side, at, c);
            at = child;
        }
        self.set(side, at, slot);
    }

    /// Every invariant of the layout, for the tests.
    #[cfg(test)]
    pub(super) fn check(&self) -> Result<(), String> {
        let holders: Vec<&Holder> = self.iter().collect();
        if holders.len() != self.len || self.by_jid.len() != self.len {
            return Err(format!("{} holders, len {}", holders.len(), self.len));
        }
        for h in &holders {
            if self.find(h.jid()).map(|f| f.token) != Some(h.token) {
                return Err("a holder not found by its jid".into());
            }
        }
        let leased = holders.iter().filter(|h| h.expires_at().is_some()).count();
        if self.no_lease != self.len - leased {
            return Err("no_lease miscounted".into());
        }
        for side in [Side::Soonest, Side::Latest] {
            let heap = self.heap(side);
            if heap.len() != leased {
                return Err(format!("{side:?}: {} of {leased}", heap.len()));
            }
            for (at, &slot) in heap.iter().enumerate() {
                if self.place(side, slot) as usize != at {
                    return Err(format!("{side:?}: slot {slot} misplaced"));
                }
                if at > 0 && self.above(side, slot, heap[(at - 1) / 2]) {
                    return Err(format!("{side:?}: out of order at {at}"));
                }
            }
        }
        if !in_token_order(&self.ordered().into_iter().cloned().collect::<Vec<_>>()) {
            return Err("tokens repeat".into());
        }
        Ok(())
    }
}

/// Makes room for one more by an eighth, not Vec's doubling: a big lock
/// then holds at most an eighth more than it uses, and each element is still
/// moved a bounded number of times on average.
fn grow<T>(v: &mut Vec<T>) {
    if v.len() == v.capacity() {
        v.reserve_exact((v.len() / 8).max(4));
    }
}

/// Whether every token is larger than the one before it (grant order is then
/// token order).
pub(super) fn in_token_order(holders: &[Holder]) -> bool {
    holders.windows(2).all(|w| match w {
        [a, b] => a.token < b.token,
        _ => true,
    })
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn holder(jid: u16, token: i64, lease: Option<i64>) -> Holder {
        Holder::new(&jid.to_be_bytes(), token, 0, lease, "lock", None, None)
    }

    #[test]
    fn a_slot_costs_a_holder_and_two_places() {
        assert_eq!(std::mem::size_of::<Option<Holder>>(), 48);
        assert_eq!(std::mem::size_of::<Slot>(), 56);
    }

    #[test]
    fn holders_out_of_token_order_are_handed_back() {
        let holders = vec![holder(1, 5, None), holder(2, 4, None)];
        assert_eq!(Indexed::from_ordered(holders.clone()).err(), Some(holders));
        let mut indexed = Indexed::from_ordered(vec![holder(1, 5, None)]).expect("ordered");
        assert_eq!(
            indexed.insert(holder(2, 5, None)),
            Err(holder(2, 5, None)),
            "a token not after the newest"
        );
        assert_eq!(indexed.insert(holder(2, 6, Some(9))), Ok(()));
        assert_eq!(indexed.page(0, 1).1.len(), 1);
    }

    #[derive(Debug, Clone)]
    enum Op {
        Insert(u16, Option<i64>),
        Remove(u16),
        Relet(u16, Option<i64>),
        Prune(i64),
    }

    fn op() -> impl Strategy<Value = Op> {
        let lease = prop::option::of(0i64..50);
        prop_oneof![
            3 => (0u16..64, lease.clone()).prop_map(|(j, l)| Op::Insert(j, l)),
            2 => (0u16..64).prop_map(Op::Remove),
            2 => (0u16..64, lease).prop_map(|(j, l)| Op::Relet(j, l)),
            1 => (0i64..50).prop_map(Op::Prune),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(500))]

        /// The index against a plain vector in grant order.
        #[test]
        fn the_index_behaves_as_a_vector(ops in prop::collection::vec(op(), 0..300)) {
            let mut indexed = Indexed::empty();
            let mut model: Vec<Holder> = Vec::new();
            let mut token = 0;
            for op in ops {
                match op {
                    Op::Insert(jid, lease) => {
                        if model.iter().all(|h| h.jid() != jid.to_be_bytes()) {
                            token += 1;
                            let h = holder(jid, token, lease);
                            prop_assert_eq!(indexed.insert(h.clone()), Ok(()));
                            model.push(h);
                        }
                    }
                    Op::Remove(jid) => {
                        let at = model.iter().position(|h| h.jid() == jid.to_be_bytes());
                        let expected = at.map(|at| model.remove(at));
                        prop_assert_eq!(indexed.remove(&jid.to_be_bytes()), expected);
                    }
                    Op::Relet(jid, lease) => {
                        let relet = |h: &mut Holder| *h = Holder::new(h.jid(), h.token, 0, lease, "lock", None, None);
                        let expected = model.iter_mut().find(|h| h.jid() == jid.to_be_bytes()).map(|h| { relet(h); h.token });
                        prop_assert_eq!(indexed.update(&jid.to_be_bytes(), relet), expected);
                    }
                    Op::Prune(now) => {
                        let mut ended = Vec::new();
                        while let Some(h) = indexed.pop_ended(now) {
                            ended.push(h);
                        }
                        prop_assert!(ended.windows(2).all(|w| w[0].expires_at() <= w[1].expires_at()), "earliest first");
                        let mut expected: Vec<Holder> = model.iter().filter(|h| !h.is_live(now)).cloned().collect();
                        model.retain(|h| h.is_live(now));
                        ended.sort_by_key(|h| h.token);
                        expected.sort_by_key(|h| h.token);
                        prop_assert_eq!(ended, expected);
                    }
                }
                prop_assert_eq!(indexed.check(), Ok(()));
                prop_assert_eq!(indexed.ordered(), model.iter().collect::<Vec<_>>());
                let leases = || model.iter().filter_map(Holder::expires_at);
                prop_assert_eq!(indexed.earliest_lease(), leases().min());
                prop_assert_eq!(indexed.latest_lease(), leases().max());
                prop_assert_eq!(indexed.has_unleased(), model.iter().any(|h| h.expires_at().is_none()));
                // A walk in pages meets every holder once.
                let (mut cursor, mut seen) = (0, Vec::new());
                loop {
                    let (next, page) = indexed.page(cursor, 7);
                    seen.extend(page.into_iter().map(|h| h.token));
                    if next == 0 { break; }
                    cursor = next;
                }
                seen.sort_unstable();
                prop_assert_eq!(seen, model.iter().map(|h| h.token).collect::<Vec<_>>());
            }
            prop_assert_eq!(indexed.into_ordered(), model);
        }
    }
}
