//! The holders' slots by jid: a hash table of 4-byte entries, each a slot
//! number with the top bits of its jid's hash above it (a tag), kept
//! complemented so that an empty entry is zero: a new table is allocated
//! zeroed, which the allocator gives from pages no one has written (the
//! kernel's, zero already) without writing a megabyte of markers in the
//! command that takes it over.
//!
//! Why not a general hash table: finding a holder on a big key is
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
//! and the tombstones before it, become empty. When entries and tombstones
//! would fill more than four fifths of the table (or a slot number outgrows
//! its bits), a new table of twice the entries takes over, which leaves room
//! to grow by three fifths; the old one's entries move to it a few at a time,
//! at each insert and removal, as Redis's own dictionaries rehash: no command
//! pays for moving them all. Until they have all moved, a lookup tries the new
//! table, then the old.

/// An entry never used: a lookup stops here. Zero, so that a table of them
/// is a zeroed allocation (entries are complemented: see [`slot_number`]).
const EMPTY: u32 = 0;
/// An entry removed: a lookup goes on past it.
const TOMB: u32 = 1;
/// The fewest entries a table is built with.
const MIN_ENTRIES: usize = 16;
/// The fewest bits given to the slot number.
const MIN_SLOT_BITS: u32 = 8;
/// The most entries that one insert or removal moves from the old table,
/// and the most places of it that it looks through to find them: a few
/// reads of the holders (each entry's jid hashed again), bounded whatever
/// the table's size, and enough that the old table is empty long before the
/// new one can fill (it has room for three fifths more entries than there
/// were; at 4 a step the move is over after a quarter of that many steps).
const MOVES_PER_STEP: usize = 4;
const PLACES_PER_STEP: usize = 64;
/// A table of no more entries than this moves them all at once: tens of
/// microseconds, and a small key does not keep two tables for long. (The
/// unit tests move small tables step by step, to see moves under way.)
#[cfg(not(test))]
const MOVED_AT_ONCE: usize = 1024;
#[cfg(test)]
const MOVED_AT_ONCE: usize = 16;

/// Slot numbers by jid (the jids themselves are in the holders' slots): a
/// table, and while its entries move to a larger one, the one they leave.
#[derive(Debug, Clone, Default)]
pub(super) struct Jids {
    table: Table,
    /// The table being emptied into `table`, and the next place of it to
    /// move from: every place before it is empty or a tombstone.
    old: Option<(Table, usize)>,
}

/// One open-addressing table of tagged slot numbers.
#[derive(Debug, Clone)]
struct Table {
    entries: Vec<u32>,
    /// The low bits of an entry that are its slot number; the rest, the tag.
    slot_bits: u32,
    len: usize,
    tombs: usize,
}

impl Default for Table {
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
    pub(super) fn len(&self) -> usize {
        self.table.len + self.old.as_ref().map_or(0, |(old, _)| old.len)
    }

    /// Entries allocated, for MEMORY USAGE (4 bytes each).
    pub(super) fn capacity(&self) -> usize {
        self.table.entries.capacity()
            + self
                .old
                .as_ref()
                .map_or(0, |(old, _)| old.entries.capacity())
    }

    /// Makes room for `n` entries with slot numbers below `n`, before they
    /// are inserted (a key loaded whole): no table taken over on the way.
    pub(super) fn reserve(&mut self, n: usize) {
        if self.len() == 0 {
            let largest = u32::try_from(n).unwrap_or(u32::MAX);
            self.old = None;
            self.table = Table::sized(n, bits_for(largest));
        }
    }

    /// The slot whose jid hashes to `hash` and for which `is` says yes.
    pub(super) fn find(&self, hash: u64, mut is: impl FnMut(u32) -> bool) -> Option<u32> {
        self.table.find(hash, &mut is).or_else(|| {
            let (old, _) = self.old.as_ref()?;
            old.find(hash, is)
        })
    }

    /// Adds `slot`, whose jid hashes to `hash` and is not in the table.
    /// `hash_of` gives the hash of the jid of any slot in the table (`slot`
    /// included), for the entries that move to a new table.
    pub(super) fn insert(&mut self, hash: u64, slot: u32, hash_of: impl Fn(u32) -> u64) {
        self.step(&hash_of);
        let pending = self.old.as_ref().map_or(0, |(old, _)| old.len);
        let table = &self.table;
        let full = (table.len + table.tombs + pending + 1) * 5 > table.entries.len() * 4;
        if full || slot > table.largest_slot() {
            self.take_over(slot, &hash_of);
        }
        self.table.put(hash, slot);
    }

    /// Takes `slot`, whose jid hashes to `hash`, out of the table; `hash_of`
    /// as for [`Jids::insert`].
    pub(super) fn remove(&mut self, hash: u64, slot: u32, hash_of: impl Fn(u32) -> u64) -> bool {
        let removed = self.table.remove(hash, slot)
            || self
                .old
                .as_mut()
                .is_some_and(|(old, _)| old.remove(hash, slot));
        self.step(&hash_of);
        removed
    }

    /// A new table, of twice the entries (and a slot number as large as
    /// `slot`), takes over; the current one's entries move to it step by
    /// step. A move still under way is finished first: rare, since a move
    /// ends long before the table it fills can (a table mostly emptied by
    /// removals, then filled again, may find it so).
    fn take_over(&mut self, slot: u32, hash_of: &impl Fn(u32) -> u64) {
        while self.old.is_some() {
            self.step(hash_of);
        }
        // Every slot in the table fits its slot bits: only the new one may
        // need more.
        let bits = if slot > self.table.largest_slot() {
            bits_for(slot)
        } else {
            self.table.slot_bits
        };
        let new = Table::sized(self.table.len + 1, bits);
        let old = std::mem::replace(&mut self.table, new);
        if old.len > 0 {
            let at_once = old.len <= MOVED_AT_ONCE;
            self.old = Some((old, 0));
            while at_once && self.old.is_some() {
                self.step(hash_of);
            }
        }
    }

    /// Moves a few entries of the old table to the new one (see
    /// [`MOVES_PER_STEP`]); the old table goes once none is left in it.
    fn step(&mut self, hash_of: &impl Fn(u32) -> u64) {
        let Some((old, next)) = self.old.as_mut() else {
            return;
        };
        let mut moved = 0;
        for _ in 0..PLACES_PER_STEP {
            if moved == MOVES_PER_STEP || old.len == 0 {
                break;
            }
            let Some(place) = old.entries.get_mut(*next) else {
                break;
            };
            if *place != EMPTY && *place != TOMB {
                let slot = slot_number(old.slot_bits, *place);
                // A tombstone, not an empty place: the entries after it in
                // its run are still found past it.
                *place = TOMB;
                old.len -= 1;
                old.tombs += 1;
                self.table.put(hash_of(slot), slot);
                moved += 1;
            }
            *next += 1;
        }
        if old.len == 0 || *next >= old.entries.len() {
            self.old = None;
        }
    }

    /// Checks the tables against their counts (tests).
    #[cfg(test)]
    pub(super) fn check(&self) -> Result<(), String> {
        self.table.check()?;
        if let Some((old, next)) = &self.old {
            old.check()?;
            let moved = old.entries.get(..*next).unwrap_or_default();
            if moved.iter().any(|&e| e != EMPTY && e != TOMB) {
                return Err("an entry left behind the move".into());
            }
            if old.len == 0 {
                return Err("an empty old table kept".into());
            }
        }
        Ok(())
    }
}

impl Table {
    /// An empty table with room for `n` entries and as many more (to the end
    /// of the allocator's size class: entries it gives anyway).
    fn sized(n: usize, slot_bits: u32) -> Self {
        let wanted = (n.saturating_add(1) * 2).max(MIN_ENTRIES);
        Self {
            entries: vec![EMPTY; super::size_class(wanted.saturating_mul(4)) / 4],
            slot_bits,
            len: 0,
            tombs: 0,
        }
    }

    /// The slot whose jid hashes to `hash` and for which `is` says yes.
    fn find(&self, hash: u64, mut is: impl FnMut(u32) -> bool) -> Option<u32> {
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

    /// Takes `slot`, whose jid hashes to `hash`, out of the table.
    fn remove(&mut self, hash: u64, slot: u32) -> bool {
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
        (!entry).checked_shr(self.slot_bits).unwrap_or(0)
    }

    fn slot_of(&self, entry: u32) -> u32 {
        slot_number(self.slot_bits, entry)
    }

    fn entry(&self, hash: u64, slot: u32) -> u32 {
        !(self.tag(hash).checked_shl(self.slot_bits).unwrap_or(0) | slot)
    }

    /// The largest slot number an entry can hold without being taken for
    /// `EMPTY` or `TOMB` (whose complements' slot bits are all ones, or all
    /// but the last).
    fn largest_slot(&self) -> u32 {
        largest_for(self.slot_bits)
    }

    /// Checks the table against its counts (tests).
    #[cfg(test)]
    fn check(&self) -> Result<(), String> {
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

/// The slot number of a kept entry: its complement's low `slot_bits`.
fn slot_number(slot_bits: u32, entry: u32) -> u32 {
    !entry & slot_mask(slot_bits)
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
        /// removals that collide on purpose (`spread` small: few hashes),
        /// and through the moves from one table to the next (slot numbers
        /// that grow past their bits among them: `stride`).
        #[test]
        fn finds_what_a_map_finds(
            ops in proptest::collection::vec((any::<bool>(), 0u32..400), 1..600),
            spread in 1u32..500,
            stride in prop_oneof![Just(1u32), Just(1_000u32)],
        ) {
            let mut jids = Jids::default();
            // jid -> slot, and slot -> jid
            let mut model: HashMap<u32, u32> = HashMap::new();
            let mut slots: HashMap<u32, u32> = HashMap::new();
            let mut free: Vec<u32> = Vec::new();
            let mut next_slot = 0u32;
            let mut moves = 0;
            for (add, jid) in ops {
                if add && !model.contains_key(&jid) {
                    let slot = free.pop().unwrap_or_else(|| {
                        next_slot += stride;
                        next_slot - stride
                    });
                    slots.insert(slot, jid);
                    let s = &slots;
                    jids.insert(hash_of(jid, spread), slot, |slot| hash_of(s[&slot], spread));
                    model.insert(jid, slot);
                } else if let Some(slot) = model.remove(&jid) {
                    let s = &slots;
                    prop_assert!(jids.remove(hash_of(jid, spread), slot, |slot| hash_of(s[&slot], spread)));
                    slots.remove(&slot);
                    free.push(slot);
                }
                moves += usize::from(jids.old.is_some());
                jids.check().map_err(TestCaseError::fail)?;
                prop_assert_eq!(jids.len(), model.len());
                for probe in 0..400u32 {
                    let found = jids.find(hash_of(probe, spread), |s| slots.get(&s) == Some(&probe));
                    prop_assert_eq!(found, model.get(&probe).copied(), "jid {}", probe);
                }
            }
            // Enough operations see a move under way.
            prop_assert!(moves > 0 || model.len() < 100);
        }
    }

    #[test]
    fn a_new_table_is_all_zeros_and_its_entries_never_are() {
        // Zeros, so that it is allocated zeroed: untouched pages, not a
        // megabyte of markers written by the command that grows the key.
        let table = Table::sized(100_000, bits_for(100_000));
        assert!(table.entries.iter().all(|&e| e == 0));
        assert_eq!(table.find(7, |_| true), None);
        // No entry is zero or a tombstone, whatever its slot and tag.
        for slot in [0, 1, table.largest_slot()] {
            for hash in [0, u64::MAX, 1 << 63, 0x0123_4567_89ab_cdef] {
                let entry = table.entry(hash, slot);
                assert!(entry != EMPTY && entry != TOMB, "{slot} {hash:#x}");
                assert_eq!(table.slot_of(entry), slot);
                assert_eq!(table.tag_of(entry), table.tag(hash));
            }
        }
    }

    #[test]
    fn slot_numbers_of_every_width_are_kept_apart_from_the_markers() {
        for slot in [0, 1, 253, 254, 255, 256, 65_533, 1 << 20, u32::MAX - 3] {
            let mut jids = Jids::default();
            jids.insert(7, slot, |_| 7);
            assert!(slot <= jids.table.largest_slot(), "{slot}");
            assert_eq!(jids.find(7, |s| s == slot), Some(slot), "{slot}");
            assert!(jids.remove(7, slot, |_| 7));
            assert_eq!(jids.find(7, |_| true), None);
        }
    }

    /// No insert or removal moves more than a few entries, however many the
    /// table holds, and every move is over before the next begins.
    #[test]
    fn a_table_grows_and_churns_a_few_entries_a_step() {
        let mut jids = Jids::default();
        let hash = |s: u32| u64::from(s).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        let n = 100_000;
        let mut took_over = 0;
        let mut largest = 0;
        let mut step = |jids: &mut Jids, f: &mut dyn FnMut(&mut Jids)| {
            let before = jids.old.as_ref().map(|(old, next)| (old.len, *next));
            let tables = jids.table.entries.len();
            f(jids);
            if jids.table.entries.len() != tables {
                took_over += 1;
                assert!(before.is_none(), "a move under way at a take-over");
            } else if let (Some((len, at)), Some((old, next))) = (before, jids.old.as_ref()) {
                largest = largest.max(len - old.len);
                assert!(*next - at <= PLACES_PER_STEP);
            }
        };
        for s in 0..n {
            step(&mut jids, &mut |j| j.insert(hash(s), s, hash));
        }
        // Remove and add back, over and over: tombstones come and go.
        for round in 0..20u32 {
            for s in (round % 7..n).step_by(7) {
                step(&mut jids, &mut |j| {
                    assert!(j.remove(hash(s), s, hash));
                });
                step(&mut jids, &mut |j| j.insert(hash(s), s, hash));
            }
        }
        jids.check().expect("counts and load");
        assert_eq!(jids.len(), n as usize);
        assert!(took_over > 10, "{took_over} take-overs");
        assert!(largest <= MOVES_PER_STEP, "{largest} moved in one step");
        assert!(
            jids.capacity() <= 3 * n as usize,
            "{} entries for {n}",
            jids.capacity()
        );
    }

    #[test]
    fn a_reserved_table_takes_its_entries_without_a_move() {
        let mut jids = Jids::default();
        jids.reserve(50_000);
        let entries = jids.table.entries.len();
        for s in 0..50_000u32 {
            jids.insert(u64::from(s).wrapping_mul(0x9e37_79b9_7f4a_7c15), s, |_| {
                unreachable!("no entry moves")
            });
        }
        assert_eq!((jids.table.entries.len(), jids.len()), (entries, 50_000));
        assert!(jids.old.is_none());
    }
}
