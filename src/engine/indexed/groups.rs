//! The index's count of holders per group and of exclusive holders, and the
//! journal of decreases behind [`HoldingsStamp`]: what a grant with
//! GROUPLIMIT or MODE asks, in O(1) instead of a walk.

use std::sync::atomic::{AtomicU64, Ordering};

use super::super::group::{group_hash, holding_hash};
use super::Indexed;

/// How many of the latest decreases of a group's count an index names.
pub(super) const JOURNAL: usize = 32;

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
pub(super) struct Stamp(pub(super) u64);

/// The next [`Stamp`]: a 64-bit count does not wrap.
static NEXT_STAMP: AtomicU64 = AtomicU64::new(1);

impl Stamp {
    pub(super) fn fresh() -> Self {
        Self(NEXT_STAMP.fetch_add(1, Ordering::Relaxed))
    }
}

impl Clone for Stamp {
    fn clone(&self) -> Self {
        Self::fresh()
    }
}

/// What a group's entry counts in MEMORY USAGE: its name and its count,
/// with the table's share.
pub(super) fn group_entry_bytes(name: &[u8]) -> usize {
    name.len() + 3 * std::mem::size_of::<usize>()
}

impl Indexed {
    /// Counts a holder of `group` (exclusive or not) in (`added`) or out of
    /// the per-group and exclusive counts.
    pub(super) fn count(&mut self, group: Option<&[u8]>, exclusive: bool, added: bool) {
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
    pub(in crate::engine) fn holdings_stamp(&self) -> HoldingsStamp {
        HoldingsStamp {
            epoch: self.epoch.0,
            decreases: self.decreases,
        }
    }

    /// Shows `each` the [`holding_hash`] of every group whose count went
    /// down since `since` (a group once a decrease, in no promised order);
    /// false, having shown nothing, when this index cannot say: `since` is
    /// another index's, or more went down than it remembers.
    pub(in crate::engine) fn decreased_since(
        &self,
        since: HoldingsStamp,
        mut each: impl FnMut(u64),
    ) -> bool {
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
    pub(in crate::engine) fn group_holding(&self, group: Option<&[u8]>) -> usize {
        match group {
            Some(g) => self.named_holding(g, group_hash(g)),
            None => self.len - self.grouped,
        }
    }

    /// How many holders the group `name` has, `hash` its [`group_hash`].
    pub(in crate::engine) fn named_holding(&self, name: &[u8], hash: u64) -> usize {
        self.groups
            .find(hash, |(g, _)| **g == *name)
            .map_or(0, |&(_, n)| n)
    }

    /// Per group (`None`: no group), how many holders it has, from the
    /// counts kept: no walk over the holders.
    pub(in crate::engine) fn groups_holding(&self) -> impl Iterator<Item = (Option<&[u8]>, usize)> {
        let ungrouped = (self.len > self.grouped).then(|| (None, self.len - self.grouped));
        ungrouped
            .into_iter()
            .chain(self.groups.iter().map(|(g, n)| (Some(&**g), *n)))
    }

    /// How many holders hold exclusively.
    pub(in crate::engine) fn exclusive_holders(&self) -> usize {
        self.exclusive
    }
}
