//! The holders' slots by jid: a hash table of 4-byte entries, each a slot
//! number with the top bits of its jid's hash above it (a tag).
//!
//! Why not a general hash table: finding a holder on a key of 100,000 is
//! memory-bound (its reads miss the cache, each waiting for the last), and a
//! table that keeps its control bytes apart from its entries (hashbrown's)
//! costs a lookup two of those reads before the holder's own: its control
//! bytes, then the slot number. Here the tag sits in the entry: one read
//! finds the slot, and a jid whose tag differs is passed without reading its
//! holder. An entry is 4 bytes and the table grows by doubling its entries,
//! never to a power of two: 5 to 8 bytes a holder, where hashbrown's
//! power-of-two tables take 5 to 11.
//!
//! Open addressing with linear probing, from the place the hash's low half
//! gives (scaled to the table, no power of two needed). A removed entry
//! leaves a tombstone unless it ends a run (the next entry empty): then it,
//! and the tombstones before it, become empty. The table is rebuilt, from
//! the holders' jids read in slot order, when entries and tombstones would
//! fill more than four fifths of it: at twice the entries, which leaves room
//! to grow by three fifths before the next rebuild.

/// An entry never used: a lookup stops here.
const EMPTY: u32 = u32::MAX;
/// An entry removed: a lookup goes on past it.
const TOMB: u32 = u32::MAX - 1;
/// The fewest entries a table is built with.
const MIN_ENTRIES: usize = 16;
/// The fewest bits given to the slot number.
const MIN_SLOT_BITS: u32 = 8;

/// Slot numbers by jid (the jids themselves are in the holders' slots).
#[derive(Debug, Clone)]
pub(super) struct Jids {
    entries: Vec<u32>,
    /// The low bits of an entry that are its slot number; the rest, the tag.
    slot_bits: u32,
    len: usize,
    tombs: usize,
}

impl Default for Jids {
    fn default() -> Self {
        Self {
            entries: Vec::new(),
            slot_bits: MIN_SLOT_BITS,
            len: 0,
            tombs: 0,
        }
    }
}

impl Jids {
    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.len
    }

    /// Entries allocated, for MEMORY USAGE (4 bytes each).
    pub(super) fn capacity(&self) -> usize {
        self.entries.capacity()
    }

    /// The slot whose jid hashes to `hash` and for which `is` says yes.
    pub(super) fn find(&self, hash: u64, mut is: impl FnMut(u32) -> bool) -> Option<u32> {
        let tag = self.tag(hash);
        let mut at = self.home(hash);
        for _ in 0..self.entries.len() {
            let entry = *self.entries.get(at)?;
            if entry == EMPTY {
                return None;
            }
            if entry != TOMB && self.tag_of(entry) == tag && is(self.slot_of(entry)) {
                return Some(self.slot_of(entry));
            }
            at = self.next(at);
        }
        None
    }

    /// Adds `slot`, whose jid hashes to `hash` and is not in the table.
    /// `every` gives each slot held with its jid's hash, `slot` included,
    /// for when the table must be rebuilt: best in slot order, so that the
    /// holders' jids are read one after the other, not all over memory.
    pub(super) fn insert<I>(&mut self, hash: u64, slot: u32, every: impl FnOnce() -> I)
    where
        I: Iterator<Item = (u32, u64)>,
    {
        let full = (self.len + self.tombs + 1) * 5 > self.entries.len() * 4;
        if full || slot > self.largest_slot() {
            self.rebuild(slot, every());
        } else {
            self.put(hash, slot);
        }
    }

    /// Takes `slot`, whose jid hashes to `hash`, out of the table.
    pub(super) fn remove(&mut self, hash: u64, slot: u32) -> bool {
        let mut at = self.home(hash);
        for _ in 0..self.entries.len() {
            match self.entries.get(at).copied() {
                None | Some(EMPTY) => return false,
                Some(TOMB) => {}
                Some(entry) if self.slot_of(entry) == slot => {
                    self.len -= 1;
                    self.vacate(at);
                    return true;
                }
                Some(_) => {}
            }
            at = self.next(at);
        }
        false
    }

    /// Empties the entry at `at`: a tombstone, unless the next is empty (no
    /// run goes on past it), and then the tombstones just before it go too.
    fn vacate(&mut self, at: usize) {
        let next_empty = self.entries.get(self.next(at)) == Some(&EMPTY);
        if !next_empty {
            if let Some(e) = self.entries.get_mut(at) {
                *e = TOMB;
            }
            self.tombs += 1;
            return;
        }
        if let Some(e) = self.entries.get_mut(at) {
            *e = EMPTY;
        }
        let mut back = self.prev(at);
        while self.entries.get(back) == Some(&TOMB) {
            if let Some(e) = self.entries.get_mut(back) {
                *e = EMPTY;
            }
            self.tombs -= 1;
            back = self.prev(back);
        }
    }

    /// Writes an entry at the first free place of its run.
    fn put(&mut self, hash: u64, slot: u32) {
        let entry = self.entry(hash, slot);
        let mut at = self.home(hash);
        for _ in 0..self.entries.len() {
            match self.entries.get_mut(at) {
                Some(e) if *e == EMPTY => {
                    *e = entry;
                    self.len += 1;
                    return;
                }
                Some(e) if *e == TOMB => {
                    *e = entry;
                    self.len += 1;
                    self.tombs -= 1;
                    return;
                }
                _ => at = self.next(at),
            }
        }
    }

    /// A table of twice the entries of `every` (and a slot number as large
    /// as `slot`), without tombstones.
    fn rebuild(&mut self, slot: u32, every: impl Iterator<Item = (u32, u64)>) {
        // Every slot in the table fits its slot bits: only the new one may
        // need more.
        if slot > self.largest_slot() {
            self.slot_bits = bits_for(slot);
        }
        // To the end of the allocator's size class: entries it gives anyway.
        let wanted = ((self.len + 2) * 2).max(MIN_ENTRIES);
        // The old table freed before the new one is taken, not after.
        self.entries = Vec::new();
        self.entries = vec![EMPTY; super::size_class(wanted.saturating_mul(4)) / 4];
        self.len = 0;
        self.tombs = 0;
        for (s, hash) in every {
            self.put(hash, s);
        }
    }

    /// Where the run of `hash` starts: its low half scaled to the table.
    fn home(&self, hash: u64) -> usize {
        ((u64::from(hash as u32) * self.entries.len() as u64) >> 32) as usize
    }

    fn next(&self, at: usize) -> usize {
        if at + 1 >= self.entries.len() {
            0
        } else {
            at + 1
        }
    }

    fn prev(&self, at: usize) -> usize {
        at.checked_sub(1)
            .unwrap_or_else(|| self.entries.len().saturating_sub(1))
    }

    /// The top bits of the hash's high half, as many as the slot number
    /// leaves.
    fn tag(&self, hash: u64) -> u32 {
        ((hash >> 32) as u32)
            .checked_shr(self.slot_bits)
            .unwrap_or(0)
    }

    fn tag_of(&self, entry: u32) -> u32 {
        entry.checked_shr(self.slot_bits).unwrap_or(0)
    }

    fn slot_of(&self, entry: u32) -> u32 {
        slot_number(self.slot_bits, entry)
    }

    fn entry(&self, hash: u64, slot: u32) -> u32 {
        self.tag(hash).checked_shl(self.slot_bits).unwrap_or(0) | slot
    }

    /// The largest slot number an entry can hold without being taken for
    /// `EMPTY` or `TOMB` (whose slot bits are all ones, or all but the last).
    fn largest_slot(&self) -> u32 {
        largest_for(self.slot_bits)
    }

    /// Checks the table against its counts (tests).
    #[cfg(test)]
    pub(super) fn check(&self) -> Result<(), String> {
        let live = self
            .entries
            .iter()
            .filter(|&&e| e != EMPTY && e != TOMB)
            .count();
        let tombs = self.entries.iter().filter(|&&e| e == TOMB).count();
        if (live, tombs) != (self.len, self.tombs) {
            return Err(format!(
                "{live} entries and {tombs} tombstones counted {} and {}",
                self.len, self.tombs
            ));
        }
        if !self.entries.is_empty() && (live + tombs) * 5 > self.entries.len() * 4 {
            return Err(format!("{live} + {tombs} of {}", self.entries.len()));
        }
        Ok(())
    }
}

/// The slot bits of an entry, all ones.
fn slot_mask(slot_bits: u32) -> u32 {
    1u32.checked_shl(slot_bits).map_or(u32::MAX, |b| b - 1)
}

fn slot_number(slot_bits: u32, entry: u32) -> u32 {
    entry & slot_mask(slot_bits)
}

fn largest_for(slot_bits: u32) -> u32 {
    slot_mask(slot_bits) - 2
}

/// The fewest bits (at least `MIN_SLOT_BITS`) that hold `slot` below the
/// markers, with one bit to spare so that a growing key rebuilds rarely for
/// its slot numbers.
fn bits_for(slot: u32) -> u32 {
    let mut bits = MIN_SLOT_BITS;
    while bits < 32 && largest_for(bits) < slot {
        bits += 1;
    }
    (bits + 1).min(32)
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use proptest::prelude::*;

    use super::*;

    /// A hash that the tests choose, so that runs and tags collide.
    fn hash_of(jid: u32, spread: u32) -> u64 {
        let h = u64::from(jid % spread.max(1)).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        h ^ (u64::from(jid) << 61)
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]

        /// Against a map: every jid present is found at its slot, every
        /// absent one is not, and the counts hold, through inserts and
        /// removals that collide on purpose (`spread` small: few hashes).
        #[test]
        fn finds_what_a_map_finds(
            ops in proptest::collection::vec((any::<bool>(), 0u32..400), 1..600),
            spread in 1u32..500,
        ) {
            let mut jids = Jids::default();
            // jid -> slot, and slot -> jid
            let mut model: HashMap<u32, u32> = HashMap::new();
            let mut slots: Vec<Option<u32>> = Vec::new();
            let mut free: Vec<u32> = Vec::new();
            for (add, jid) in ops {
                if add && !model.contains_key(&jid) {
                    let slot = free.pop().unwrap_or_else(|| {
                        slots.push(None);
                        slots.len() as u32 - 1
                    });
                    slots[slot as usize] = Some(jid);
                    let s = &slots;
                    jids.insert(hash_of(jid, spread), slot, || {
                        s.iter().enumerate().filter_map(|(i, j)| Some((i as u32, hash_of((*j)?, spread))))
                    });
                    model.insert(jid, slot);
                } else if let Some(slot) = model.remove(&jid) {
                    prop_assert!(jids.remove(hash_of(jid, spread), slot));
                    slots[slot as usize] = None;
                    free.push(slot);
                }
                jids.check().map_err(TestCaseError::fail)?;
                prop_assert_eq!(jids.len(), model.len());
                for probe in 0..400u32 {
                    let found = jids.find(hash_of(probe, spread), |s| {
                        slots.get(s as usize).copied().flatten() == Some(probe)
                    });
                    prop_assert_eq!(found, model.get(&probe).copied(), "jid {}", probe);
                }
            }
        }
    }

    #[test]
    fn slot_numbers_of_every_width_are_kept_apart_from_the_markers() {
        for slot in [0, 1, 253, 254, 255, 256, 65_533, 1 << 20, u32::MAX - 3] {
            let mut jids = Jids::default();
            jids.insert(7, slot, || [(slot, 7)].into_iter());
            assert!(slot <= jids.largest_slot(), "{slot}");
            assert_eq!(jids.find(7, |s| s == slot), Some(slot), "{slot}");
            assert!(jids.remove(7, slot));
            assert_eq!(jids.find(7, |_| true), None);
        }
    }

    #[test]
    fn a_table_stays_within_its_load_through_churn() {
        let mut jids = Jids::default();
        let hash = |s: u32| u64::from(s).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        let mut held = vec![false; 1000];
        let every = |held: &[bool]| {
            let live: Vec<(u32, u64)> = (0..1000)
                .filter(|&s| held[s as usize])
                .map(|s| (s, hash(s)))
                .collect();
            live.into_iter()
        };
        for s in 0..1000 {
            held[s as usize] = true;
            jids.insert(hash(s), s, || every(&held));
        }
        let size = jids.entries.len();
        // Remove and add back, 100 times over: tombstones come and go, the
        // table does not grow.
        for round in 0..100u32 {
            for s in (round % 7..1000).step_by(7) {
                assert!(jids.remove(hash(s), s));
                held[s as usize] = false;
            }
            for s in (round % 7..1000).step_by(7) {
                held[s as usize] = true;
                jids.insert(hash(s), s, || every(&held));
            }
            jids.check().expect("counts and load");
        }
        assert_eq!(jids.len(), 1000);
        assert!(
            jids.entries.len() <= size * 2,
            "{} from {size}",
            jids.entries.len()
        );
    }
}
