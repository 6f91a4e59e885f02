//! The index's holders with a lease, by end of lease, in two places:
//!
//! - a list linked through `links` (each slot's previous and next), kept
//!   sorted: a lease that ends no earlier than the last one listed (a grant
//!   or renewal of the key's usual TTL: now plus the same TTL) joins at its
//!   tail, one that ends no later than the first at its head, in O(1);
//! - a min-max heap (`leases`) of the others' slots, each with its place in
//!   the heap where the list keeps its neighbours.
//!
//! The ended leases come from the earlier of the list's head and the heap's
//! smallest end, and the key's expiry is the later of the list's tail and
//! the heap's largest end. A renewal leaves its neighbours and joins the
//! tail: no walk through a heap, each step of which would read a lease
//! elsewhere in megabytes of slots.

use super::super::Holder;
use super::{IN_HEAP, Indexed, NIL, NOWHERE, UNLEASED, grow};

/// Which end of the heap a level of it orders: the earliest end of lease at
/// the even levels (the root is the earliest), the latest at the odd ones.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Side {
    Soonest,
    Latest,
}

impl Indexed {
    /// Shows `ended` every holder whose lease ended at `now`, in no
    /// particular order, visiting only those and a few of their neighbours:
    /// the list from its head, and in the heap the places below an ended
    /// lease (a lease at an even level ends no later than any below it, so
    /// one that has not ended closes its subtree; an odd level, the latest
    /// of its subtree, is passed through). Returns the earliest end of a
    /// lease that has not ended: one of the neighbours visited, since every
    /// lease not visited ends no earlier than one that was.
    pub(in crate::engine) fn for_each_ended<'a>(
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

    /// Removes one holder whose lease ended at `now`, the earliest first.
    pub(in crate::engine) fn pop_ended(&mut self, now: i64) -> Option<Holder> {
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

    /// The earliest end of lease, if any holder has one.
    pub(in crate::engine) fn earliest_lease(&self) -> Option<i64> {
        self.earliest_slot().map(|s| self.lease(s))
    }

    /// The latest end of lease, if any holder has one.
    pub(in crate::engine) fn latest_lease(&self) -> Option<i64> {
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
    pub(in crate::engine) fn has_unleased(&self) -> bool {
        self.no_lease > 0
    }

    pub(super) fn link(&self, slot: u32) -> [u32; 2] {
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
    pub(super) fn enlist(&mut self, slot: u32) {
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
    pub(super) fn delist(&mut self, slot: u32) {
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

    /// The end of lease of the holder in `slot` (`i64::MAX` for none: it is
    /// not in the heap, so that is never compared).
    pub(super) fn lease(&self, slot: u32) -> i64 {
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
    pub(super) fn beats(&self, side: Side, a: usize, b: usize) -> bool {
        match side {
            Side::Soonest => self.lease_at(a) < self.lease_at(b),
            Side::Latest => self.lease_at(a) > self.lease_at(b),
        }
    }

    /// The side a heap place orders: even levels the earliest, odd the latest.
    pub(super) fn side(at: usize) -> Side {
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
    pub(super) fn place(&self, slot: u32) -> u32 {
        match self.link(slot) {
            [at, IN_HEAP] => at,
            _ => NOWHERE,
        }
    }

    pub(super) fn push(&mut self, slot: u32) {
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
}
