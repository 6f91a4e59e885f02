//! How many live holders each group of a lock has, as a grant with
//! GROUPLIMIT or MODE asks: read from the index's counts or counted once.

use super::super::group::{GroupName, holding_hash};
use super::super::indexed::{HoldingsStamp, Indexed};

/// How many live holders each group of a lock has (`None`: the holders
/// without a group), as [`Lock::group_counts`](crate::engine::Lock::group_counts)
/// found them.
pub struct GroupCounts<'a> {
    pub(super) counts: Counts<'a>,
    /// The earliest end of a lease that has not ended.
    pub(super) next_lease_end: Option<i64>,
}

pub(super) enum Counts<'a> {
    /// The counts the index keeps, less its holders whose lease has ended
    /// (not pruned yet), by group in order of name: found without a walk
    /// over the others, and most often none.
    Kept(&'a Indexed, Vec<(Option<&'a [u8]>, usize)>),
    /// Counted in one walk, by group in order of name.
    Counted(Vec<(Option<&'a [u8]>, usize)>),
}

/// The count of `group` in `counts` (sorted by group), 0 if not there.
fn count_of(counts: &[(Option<&[u8]>, usize)], group: Option<&[u8]>) -> usize {
    counts
        .binary_search_by(|(g, _)| g.cmp(&group))
        .ok()
        .and_then(|at| counts.get(at))
        .map_or(0, |&(_, n)| n)
}

impl GroupCounts<'_> {
    /// How many live holders `group` has: as [`Self::of`], without hashing
    /// the name again for the counts an index keeps.
    #[inline(always)]
    pub fn of_group(&self, group: Option<&GroupName>) -> usize {
        match (&self.counts, group) {
            (Counts::Kept(index, ended), Some(g)) => index
                .named_holding(g, g.hash())
                .saturating_sub(count_of(ended, Some(g))),
            _ => self.of(group.map(|g| &**g)),
        }
    }

    /// What stays the same only while no group's count of holders goes
    /// down, and that no other lock shares: while it stays, whatever was
    /// found full (a group at its GROUPLIMIT) still is; after, the groups
    /// that [`Self::freed_since`] does not name still are. `None` for a
    /// lock of a few holders, whose groups are few enough to count again.
    pub fn stamp(&self) -> Option<HoldingsStamp> {
        match &self.counts {
            Counts::Kept(index, _) => Some(index.holdings_stamp()),
            Counts::Counted(_) => None,
        }
    }

    /// Shows `each` the [`holding_hash`](crate::engine::holding_hash) of every group
    /// that may hold fewer live holders than it did under `since`: its count
    /// went down since, or a holder of it was counted out as its lease
    /// ended (not removed yet). False, having shown what it may, when the
    /// key cannot say (another key's or a compact lock's stamp, or more
    /// went down than it remembers): then any group may.
    pub fn freed_since(&self, since: HoldingsStamp, mut each: impl FnMut(u64)) -> bool {
        let Counts::Kept(index, ended) = &self.counts else {
            return false;
        };
        if !index.decreased_since(since, &mut each) {
            return false;
        }
        for &(group, _) in ended {
            each(holding_hash(group));
        }
        true
    }

    /// Shows `each` the [`holding_hash`](crate::engine::holding_hash) of every group
    /// with a live holder, when the lock has few holders (a compact lock:
    /// counted in a walk); false for an index, whose groups may be many.
    /// What a caller that kept counts of its own asks instead of
    /// [`Self::freed_since`] where the lock keeps no stamp: a group that
    /// held none then and holds none now holds as many.
    pub fn holding_hashes(&self, mut each: impl FnMut(u64)) -> bool {
        let Counts::Counted(counts) = &self.counts else {
            return false;
        };
        for &(group, n) in counts {
            if n > 0 {
                each(holding_hash(group));
            }
        }
        true
    }

    /// The earliest end of a lease that had not ended when counted: when a
    /// holder that is counted may leave first (what a denial now gives as
    /// the time to try again).
    pub fn next_lease_end(&self) -> Option<i64> {
        self.next_lease_end
    }

    /// How many live holders `group` has.
    #[inline(always)]
    pub fn of(&self, group: Option<&[u8]>) -> usize {
        match &self.counts {
            Counts::Kept(index, ended) => index
                .group_holding(group)
                .saturating_sub(count_of(ended, group)),
            Counts::Counted(counts) => count_of(counts, group),
        }
    }
}
