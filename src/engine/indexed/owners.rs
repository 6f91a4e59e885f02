//! Which slots each OWNER holds, for REAP ... OWNER: the holders of one
//! owner found without a walk over the others.
//!
//! A holder without an owner costs nothing here, and its slot nothing more:
//! the index keeps only the slots of holders with an owner. Each owner is an
//! entry of a hash table, keyed by the owner of one of its holders (`first`,
//! read from that holder's slot: the owner's bytes are not copied); its other
//! slots, when it has more, are a set of slot numbers beside it. An owner
//! with one holder costs an entry (16 bytes and a control byte, at the
//! table's load), one with many about 6 to 11 bytes a holder more (a slot
//! number and a control byte, at its set's load).

use std::hash::{BuildHasher, RandomState};

use hashbrown::HashTable;
use hashbrown::hash_table::Entry;

use super::{Chunked, Holder, Slot};

/// One owner's slots: `first`, whose holder's owner keys the entry, and the
/// others, if any.
#[derive(Debug, Clone)]
struct Owned {
    first: u32,
    rest: Option<Box<HashTable<u32>>>,
}

/// The slots of the holders with an owner, by owner.
#[derive(Debug, Clone, Default)]
pub(super) struct Owners {
    table: HashTable<Owned>,
    /// Holders with an owner.
    owned: usize,
    /// Bytes of the owners' sets of other slots ([`set_bytes`]), kept as
    /// they grow, shrink and go, so that MEMORY USAGE walks no table.
    sets: usize,
}

/// The owner of the holder in `slot`, if it has one.
fn owner_of(slots: &Chunked<Slot>, slot: u32) -> Option<&[u8]> {
    slots
        .get(slot as usize)
        .and_then(Option::as_ref)
        .and_then(Holder::owner)
}

/// A slot number's hash in an owner's set: slots are dense small numbers,
/// which a multiplication by an odd constant spreads over the low bits (a
/// bijection on them) and mixes into the high ones (the table's tags).
fn slot_hash(slot: &u32) -> u64 {
    u64::from(*slot).wrapping_mul(0x9E37_79B9_7F4A_7C15)
}

/// A table much larger than what it holds is rebuilt smaller: a set whose
/// owner lost most of its holders, the table after a REAP took many owners
/// out. What it costs is paid by the removals that emptied it.
fn oversized(capacity: usize, len: usize) -> bool {
    capacity > 8 * len.max(4)
}

impl Owners {
    /// Adds `slot`, whose holder (already in `slots`) has `owner`.
    pub(super) fn add(
        &mut self,
        slots: &Chunked<Slot>,
        hasher: &RandomState,
        owner: &[u8],
        slot: u32,
    ) {
        let hash = hasher.hash_one(owner);
        let entry = self.table.entry(
            hash,
            |o| owner_of(slots, o.first) == Some(owner),
            |o| owner_of(slots, o.first).map_or(0, |ow| hasher.hash_one(ow)),
        );
        match entry {
            Entry::Occupied(mut e) => {
                let rest = &mut e.get_mut().rest;
                let before = set_bytes(rest);
                rest.get_or_insert_with(Default::default).insert_unique(
                    slot_hash(&slot),
                    slot,
                    slot_hash,
                );
                self.sets = (self.sets + set_bytes(rest)).saturating_sub(before);
            }
            Entry::Vacant(e) => {
                e.insert(Owned {
                    first: slot,
                    rest: None,
                });
            }
        }
        self.owned += 1;
    }

    /// Takes `slot` out of the entry of `owner`, the owner its holder had
    /// when it was added. Its holder may have another owner by now (a
    /// renewal that changed it): the entry is then the one whose `first` it
    /// is, or the one keyed by `owner` through another of its slots.
    pub(super) fn remove(
        &mut self,
        slots: &Chunked<Slot>,
        hasher: &RandomState,
        owner: &[u8],
        slot: u32,
    ) {
        let hash = hasher.hash_one(owner);
        let Ok(mut entry) = self.table.find_entry(hash, |o| {
            o.first == slot || owner_of(slots, o.first) == Some(owner)
        }) else {
            return;
        };
        self.owned = self.owned.saturating_sub(1);
        let owned = entry.get_mut();
        let before = set_bytes(&owned.rest);
        if owned.first == slot {
            // Another of its slots keys the entry now, if it has one.
            let next = owned
                .rest
                .as_ref()
                .and_then(|rest| rest.iter().next().copied());
            match next {
                Some(next) => {
                    owned.first = next;
                    take_from(&mut owned.rest, next);
                }
                None => {
                    entry.remove();
                    return;
                }
            }
        } else {
            take_from(&mut owned.rest, slot);
        }
        self.sets = (self.sets + set_bytes(&owned.rest)).saturating_sub(before);
    }

    /// Takes out every slot of `owner` (in no particular order).
    pub(super) fn take(
        &mut self,
        slots: &Chunked<Slot>,
        hasher: &RandomState,
        owner: &[u8],
    ) -> Vec<u32> {
        let hash = hasher.hash_one(owner);
        let Ok(entry) = self
            .table
            .find_entry(hash, |o| owner_of(slots, o.first) == Some(owner))
        else {
            return Vec::new();
        };
        let (owned, _) = entry.remove();
        self.sets = self.sets.saturating_sub(set_bytes(&owned.rest));
        let mut taken = vec![owned.first];
        if let Some(rest) = owned.rest {
            taken.reserve_exact(rest.len());
            taken.extend(*rest);
        }
        self.owned = self.owned.saturating_sub(taken.len());
        if oversized(self.table.capacity(), self.table.len()) {
            self.table.shrink_to(self.table.len(), |o| {
                owner_of(slots, o.first).map_or(0, |ow| hasher.hash_one(ow))
            });
        }
        taken
    }

    /// Bytes held, for MEMORY USAGE.
    pub(super) fn mem_usage(&self) -> usize {
        // an entry and a control byte a bucket
        self.table.capacity() * (std::mem::size_of::<Owned>() + 1) + self.sets
    }

    /// Every invariant of the index against the holders in `slots`, for the
    /// tests.
    #[cfg(test)]
    pub(super) fn check(&self, slots: &Chunked<Slot>, hasher: &RandomState) -> Result<(), String> {
        let mut seen = std::collections::HashSet::new();
        for o in &self.table {
            let owner = owner_of(slots, o.first).ok_or("an entry's first slot has no owner")?;
            let found = self
                .table
                .find(hasher.hash_one(owner), |e| {
                    owner_of(slots, e.first) == Some(owner)
                })
                .map(|e| e.first);
            if found != Some(o.first) {
                return Err(format!("owner {owner:?} not found at its hash, or twice"));
            }
            if o.rest.as_ref().is_some_and(|rest| rest.is_empty()) {
                return Err("an empty set kept".into());
            }
            let members =
                std::iter::once(o.first).chain(o.rest.iter().flat_map(|r| r.iter().copied()));
            for s in members {
                if owner_of(slots, s) != Some(owner) {
                    return Err(format!("slot {s} listed under another owner"));
                }
                if !seen.insert(s) {
                    return Err(format!("slot {s} listed twice"));
                }
                let set = o.rest.as_deref();
                if s != o.first
                    && set
                        .and_then(|r| r.find(slot_hash(&s), |&x| x == s))
                        .is_none()
                {
                    return Err(format!("slot {s} not found at its hash"));
                }
            }
        }
        let owned = (0..slots.len())
            .filter_map(|s| u32::try_from(s).ok())
            .filter(|&s| owner_of(slots, s).is_some())
            .count();
        let sets: usize = self.table.iter().map(|o| set_bytes(&o.rest)).sum();
        if self.sets != sets {
            return Err(format!("{} bytes of sets kept, {sets} held", self.sets));
        }
        if seen.len() != owned || self.owned != owned {
            return Err(format!(
                "{} slots indexed, {} counted, of {owned} with an owner",
                seen.len(),
                self.owned
            ));
        }
        Ok(())
    }
}

/// Bytes of an owner's set of other slots: the table and a slot number and
/// a control byte a bucket.
fn set_bytes(rest: &Option<Box<HashTable<u32>>>) -> usize {
    rest.as_deref().map_or(0, |set| {
        std::mem::size_of::<HashTable<u32>>() + set.capacity() * 5
    })
}

/// Takes `slot` out of an owner's other slots; the set goes when emptied.
fn take_from(rest: &mut Option<Box<HashTable<u32>>>, slot: u32) {
    let Some(set) = rest else {
        return;
    };
    if let Ok(found) = set.find_entry(slot_hash(&slot), |&s| s == slot) {
        found.remove();
    }
    if set.is_empty() {
        *rest = None;
    } else if oversized(set.capacity(), set.len()) {
        set.shrink_to(set.len(), slot_hash);
    }
}
