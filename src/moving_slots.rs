//! The hash slots whose keys may leave this node without having expired:
//! slots being imported (a failed import deletes their keys) and slots moved
//! away (the old owner deletes their keys after the flip). The type's
//! `unlink2` asks [`counts_as_expired`]; `migration.rs` records the steps.
//! Plain data on Redis's main thread.

use std::cell::RefCell;

/// An inclusive range of hash slots.
pub type SlotRange = (u16, u16);

/// The number of hash slots of a cluster.
const SLOTS: usize = 16384;

/// A set of hash slots.
#[derive(Clone)]
pub struct SlotSet {
    words: Vec<u64>,
    len: usize,
}

impl Default for SlotSet {
    fn default() -> Self {
        Self {
            words: vec![0; SLOTS / 64],
            len: 0,
        }
    }
}

impl SlotSet {
    pub fn contains(&self, slot: u16) -> bool {
        let slot = usize::from(slot);
        self.words
            .get(slot / 64)
            .is_some_and(|w| w & (1 << (slot % 64)) != 0)
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Adds (`true`) or removes every slot of `ranges`.
    pub fn set(&mut self, ranges: &[SlotRange], present: bool) {
        for &(start, end) in ranges {
            for slot in start..=end.min((SLOTS - 1) as u16) {
                let slot = usize::from(slot);
                let Some(word) = self.words.get_mut(slot / 64) else {
                    continue;
                };
                let bit = 1 << (slot % 64);
                if (*word & bit != 0) != present {
                    *word ^= bit;
                    if present {
                        self.len += 1;
                    } else {
                        self.len -= 1;
                    }
                }
            }
        }
    }
}

/// The slots being imported, and those moved away (until they come back).
#[derive(Default)]
struct InFlight {
    importing: SlotSet,
    moved_away: SlotSet,
}

impl InFlight {
    fn import_started(&mut self, ranges: &[SlotRange]) {
        self.importing.set(ranges, true);
        self.moved_away.set(ranges, false);
    }

    /// Completed or failed: a failed import's keys are deleted before the
    /// server says so, while their slots still count as importing.
    fn import_ended(&mut self, ranges: &[SlotRange]) {
        self.importing.set(ranges, false);
    }

    fn moved_away(&mut self, ranges: &[SlotRange]) {
        self.moved_away.set(ranges, true);
    }

    fn in_flight(&self, slot: u16) -> bool {
        self.importing.contains(slot) || self.moved_away.contains(slot)
    }

    fn is_empty(&self) -> bool {
        self.importing.is_empty() && self.moved_away.is_empty()
    }
}

thread_local! {
    /// Server events and the type's unlink run on Redis's main thread.
    static IN_FLIGHT: RefCell<InFlight> = RefCell::new(InFlight::default());
}

fn with_in_flight<T>(f: impl FnOnce(&mut InFlight) -> T) -> T {
    IN_FLIGHT.with(|s| f(&mut s.borrow_mut()))
}

/// An import of `ranges` to this node started.
pub fn import_started(ranges: &[SlotRange]) {
    with_in_flight(|s| s.import_started(ranges));
}

/// An import of `ranges` completed or failed.
pub fn import_ended(ranges: &[SlotRange]) {
    with_in_flight(|s| s.import_ended(ranges));
}

/// `ranges` now belong to another node.
pub fn moved_away(ranges: &[SlotRange]) {
    with_in_flight(|s| s.moved_away(ranges));
}

/// Whether the holders of a key of `slot`, leaving this node with every
/// lease ended, count as expired: not when the key leaves because its slot
/// is moving. (`slot` is computed only when some slot is in flight.)
pub fn counts_as_expired(slot: impl FnOnce() -> u16) -> bool {
    with_in_flight(|s| s.is_empty() || !s.in_flight(slot()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_slot_set_adds_and_removes_ranges_and_counts_them() {
        let mut set = SlotSet::default();
        assert!(set.is_empty());
        set.set(&[(0, 100), (16383, 16383)], true);
        assert!(set.contains(0) && set.contains(100) && set.contains(16383));
        assert!(!set.contains(101));
        set.set(&[(50, 60)], true); // already in: counted once
        set.set(&[(0, 100)], false);
        assert!(!set.contains(50) && set.contains(16383) && !set.is_empty());
        set.set(&[(16383, 16383)], false);
        assert!(set.is_empty());
    }

    #[test]
    fn keys_of_moving_slots_do_not_count_as_expired_until_the_slots_come_back() {
        let mut f = InFlight::default();
        assert!(f.is_empty() && !f.in_flight(5));
        f.moved_away(&[(0, 10)]);
        assert!(f.in_flight(5));
        f.import_started(&[(5, 5)]);
        assert!(f.in_flight(5), "importing again");
        f.import_ended(&[(5, 5)]);
        assert!(!f.in_flight(5) && f.in_flight(6));
        f.import_started(&[(20, 30)]);
        assert!(f.in_flight(25));
        f.import_ended(&[(20, 30)]);
        assert!(!f.in_flight(25));
    }
}
