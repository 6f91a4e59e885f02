//! The waiting groups that a pass found holding the largest GROUPLIMIT
//! their waiters gave, kept between passes: a group at its GROUPLIMIT stays
//! there until its count of holders goes down (or a waiter asks it for
//! more), and the key names the groups whose count went down since a stamp
//! of its own. So a pass looks again at those groups only, not at every
//! group that waits: a release past 1,000 tenants at their GROUPLIMIT costs
//! what the tenant it freed does.
//!
//! Parked groups are not tried, as a group found at its GROUPLIMIT is not
//! (no retry would grant one of its waiters: a pass only adds holders);
//! their waiters keep their place and their kinds count as answered. A
//! group goes back to the others (unparked) when:
//! - the key says its count may have gone down since the stamp the parked
//!   groups were found at: a holder released, pruned, reaped or moved to
//!   another group, or one whose lease ended, not removed yet;
//! - the key cannot say (another key by that name, a compact key, more
//!   decreases than it remembers): then every parked group does;
//! - a waiter joins it (it may give a larger GROUPLIMIT, or none);
//! - some waiter's kind is unknown (see `Admission`): the groups' GROUPLIMITs
//!   are then not all known, and every parked group does.

use hashbrown::HashTable;

use super::denials::Kinds;
use super::types::{GroupQueues, GroupWaiters, KeyHoldings};
use crate::engine::{GroupName, HoldingsStamp, holding_hash_of};

/// The groups found at their GROUPLIMIT, with their waiters, found by
/// [`holding_hash_of`] their name: what the key names when a count goes
/// down.
#[derive(Default)]
pub(super) struct Parked {
    groups: HashTable<(Option<GroupName>, GroupWaiters)>,
    /// How many kinds wait in them (see [`Kinds`]).
    kinds: usize,
    /// The key's stamp as of which each of them held its GROUPLIMIT.
    at: Option<HoldingsStamp>,
}

impl Parked {
    pub(super) fn is_empty(&self) -> bool {
        self.groups.is_empty()
    }

    /// How many kinds wait in the parked groups: answered without a look.
    pub(super) fn kinds(&self) -> usize {
        self.kinds
    }

    /// Each parked group and its waiters, in no particular order.
    pub(super) fn iter(&self) -> impl Iterator<Item = (&Option<GroupName>, &GroupWaiters)> {
        self.groups.iter().map(|(name, waiters)| (name, waiters))
    }

    /// Parks `group` with its waiters, found at its GROUPLIMIT by the pass
    /// that ends with [`Parked::settle`] (every group parked must be so as
    /// of the one stamp it records).
    pub(super) fn park(&mut self, group: Option<GroupName>, waiters: GroupWaiters, kinds: &Kinds) {
        self.kinds += kinds.kinds_of(&group);
        let hash = holding_hash_of(&group);
        self.groups
            .insert_unique(hash, (group, waiters), |(name, _)| holding_hash_of(name));
    }

    /// Every parked group holds its GROUPLIMIT as of `at`.
    pub(super) fn settle(&mut self, at: HoldingsStamp) {
        self.at = Some(at);
    }

    /// Moves `group` back among `into`, if it is parked: whether it was.
    pub(super) fn unpark(
        &mut self,
        group: &Option<GroupName>,
        kinds: &Kinds,
        into: &mut GroupQueues,
    ) -> bool {
        if self.groups.is_empty() {
            return false;
        }
        let is = |name: &Option<GroupName>| name == group;
        let mut moved = false;
        self.unpark_where(holding_hash_of(group), is, kinds, into, &mut |_| {
            moved = true
        });
        moved
    }

    /// Moves back every parked group that `hash` may name.
    fn unpark_hash(
        &mut self,
        hash: u64,
        kinds: &Kinds,
        into: &mut GroupQueues,
        moved: &mut dyn FnMut(usize),
    ) {
        let named = |name: &Option<GroupName>| holding_hash_of(name) == hash;
        self.unpark_where(hash, named, kinds, into, moved);
    }

    /// Moves back among `into` every parked group of `hash` that `is` picks,
    /// its kinds counted out, showing `moved` each one's first waiter.
    fn unpark_where(
        &mut self,
        hash: u64,
        is: impl Fn(&Option<GroupName>) -> bool,
        kinds: &Kinds,
        into: &mut GroupQueues,
        moved: &mut dyn FnMut(usize),
    ) {
        while let Ok(entry) = self.groups.find_entry(hash, |(name, _)| is(name)) {
            let ((name, waiters), _) = entry.remove();
            self.kinds = self.kinds.saturating_sub(kinds.kinds_of(&name));
            moved(waiters.first().0);
            into.insert(name, waiters);
        }
    }

    /// Moves every parked group back among `into`.
    pub(super) fn unpark_all(&mut self, into: &mut GroupQueues) {
        for (name, waiters) in self.groups.drain() {
            into.insert(name, waiters);
        }
        self.kinds = 0;
        self.at = None;
    }

    /// At the start of a pass, given its key's holders: moves back among
    /// `into` each parked group that may hold fewer than it did, showing
    /// `moved` its first waiter; false when the key cannot say which, and
    /// all of them moved back.
    pub(super) fn wake(
        &mut self,
        key: &dyn KeyHoldings,
        kinds: &Kinds,
        into: &mut GroupQueues,
        moved: &mut dyn FnMut(usize),
    ) -> bool {
        if self.groups.is_empty() {
            return true;
        }
        let mut freed = Vec::new();
        let told = self.at.is_some_and(|at| {
            !kinds.has_unknown() && key.freed_since(at, &mut |hash| freed.push(hash))
        });
        if !told {
            self.unpark_all(into);
            return false;
        }
        for hash in freed {
            self.unpark_hash(hash, kinds, into, moved);
        }
        true
    }

    /// The parked groups that may hold fewer than they did, given the key's
    /// holders now: those it names freed since they were parked, or all
    /// when it cannot say. The others still hold their GROUPLIMIT.
    pub(super) fn freed(&self, key: &dyn KeyHoldings) -> Vec<&Option<GroupName>> {
        let mut named = Vec::new();
        let told = self.at.is_some_and(|at| {
            key.freed_since(at, &mut |hash| {
                named.extend(
                    self.groups
                        .iter_hash(hash)
                        .map(|(name, _)| name)
                        .filter(|name| holding_hash_of(name) == hash),
                );
            })
        });
        if told {
            named
        } else {
            self.groups.iter().map(|(name, _)| name).collect()
        }
    }

    /// Waiter `seq` of parked `group` left, taking `gone` kinds with it
    /// (its kind, if it was the last of it): whether it was here.
    pub(super) fn leave(&mut self, group: &Option<GroupName>, seq: usize, gone: usize) -> bool {
        let hash = holding_hash_of(group);
        let Ok(mut entry) = self.groups.find_entry(hash, |(name, _)| name == group) else {
            return false;
        };
        self.kinds = self.kinds.saturating_sub(gone);
        if entry.get_mut().1.remove(seq) {
            entry.remove();
        }
        true
    }
}
