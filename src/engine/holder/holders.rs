//! The holders of one lock, in the layout for their number: none, one in
//! place, a vector in grant order, or an index past [`GROW_AT`].

use super::super::Rate;
#[cfg(test)]
use super::super::indexed::HoldingsStamp;
use super::super::indexed::Indexed;
use super::group_counts::Counts;
use super::{GroupCounts, Holder};

/// Above this many holders a lock's holders are indexed ([`Indexed`]): a
/// vector of a few dozen holders is looked through faster than any index is
/// kept up, and is smaller.
pub(in crate::engine) const GROW_AT: usize = 32;
/// Below this many, an indexed lock's holders are a vector again: half the
/// threshold up, so that a lock near it does not convert at every call.
pub(in crate::engine) const SHRINK_AT: usize = 16;

/// The holders of a lock: none, one in place (the lock is then one
/// allocation), a vector in grant order, or an index past [`GROW_AT`]. A
/// rate and its holders go behind one more pointer, so that a lock without
/// one (most) stays one 40-byte allocation.
#[derive(Debug, Clone, Default)]
pub(in crate::engine) enum Holders {
    #[default]
    None,
    One(Holder),
    Many(Vec<Holder>),
    Indexed(Box<Indexed>),
    Rated(Box<Rated>),
}

/// A rate and the holders beside it (never `Rated` themselves).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(in crate::engine) struct Rated {
    pub(in crate::engine) rate: Rate,
    pub(in crate::engine) holders: Holders,
}

/// Equal when they hold the same holders in the same grant order (whatever
/// their layout) and the same rate.
impl PartialEq for Holders {
    fn eq(&self, other: &Self) -> bool {
        self.rate() == other.rate()
            && self.len() == other.len()
            && self.ordered().eq(other.ordered())
    }
}

impl Eq for Holders {}

/// Holders in grant order: a slice, or the indexed ones sorted.
pub enum Ordered<'a> {
    Slice(std::slice::Iter<'a, Holder>),
    Sorted(std::vec::IntoIter<&'a Holder>),
}

impl<'a> Iterator for Ordered<'a> {
    type Item = &'a Holder;
    fn next(&mut self) -> Option<&'a Holder> {
        match self {
            Self::Slice(it) => it.next(),
            Self::Sorted(it) => it.next(),
        }
    }
}

impl Holders {
    /// Holders in grant order (a decoded value), in the layout for their number.
    pub(in crate::engine) fn from_vec(mut holders: Vec<Holder>) -> Self {
        match holders.len() {
            0 => Self::None,
            1 => holders.pop().map_or(Self::None, Self::One),
            n if n > GROW_AT => match Indexed::from_ordered(holders) {
                Ok(indexed) => Self::Indexed(Box::new(indexed)),
                // Tokens out of grant order (only a forged payload): kept as given.
                Err(holders) => Self::Many(holders),
            },
            _ => Self::Many(holders),
        }
    }

    /// The holders beside the rate, if any.
    fn plain(&self) -> &Self {
        match self {
            Self::Rated(r) => &r.holders,
            other => other,
        }
    }

    fn plain_mut(&mut self) -> &mut Self {
        match self {
            Self::Rated(r) => &mut r.holders,
            other => other,
        }
    }

    /// The compact forms as a slice; `None` when indexed.
    fn slice(&self) -> Option<&[Holder]> {
        match self.plain() {
            Self::None => Some(&[]),
            Self::One(h) => Some(std::slice::from_ref(h)),
            Self::Many(v) => Some(v),
            Self::Indexed(_) | Self::Rated(_) => None,
        }
    }

    fn indexed(&self) -> Option<&Indexed> {
        match self.plain() {
            Self::Indexed(i) => Some(i),
            _ => None,
        }
    }

    pub(in crate::engine) fn len(&self) -> usize {
        match self.plain() {
            Self::None | Self::Rated(_) => 0,
            Self::One(_) => 1,
            Self::Many(v) => v.len(),
            Self::Indexed(i) => i.len(),
        }
    }

    pub(in crate::engine) fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Every holder, in grant order for the compact forms and in no
    /// particular order when indexed: for what only counts or sums.
    pub(in crate::engine) fn iter(&self) -> impl Iterator<Item = &Holder> {
        let slice = self.slice().unwrap_or_default().iter();
        slice.chain(self.indexed().into_iter().flat_map(Indexed::iter))
    }

    /// Every holder in grant order.
    pub(in crate::engine) fn ordered(&self) -> Ordered<'_> {
        match self.indexed() {
            Some(i) => Ordered::Sorted(i.ordered().into_iter()),
            None => Ordered::Slice(self.slice().unwrap_or_default().iter()),
        }
    }

    /// Up to about `count` holders from `cursor` on, and the cursor to go on
    /// from (0 when done). A compact lock is small: all of it at once.
    pub(in crate::engine) fn page(&self, cursor: usize, count: usize) -> (usize, Vec<&Holder>) {
        match self.indexed() {
            Some(i) => i.page(cursor, count),
            None => (0, self.iter().collect()),
        }
    }

    pub(in crate::engine) fn find(&self, jid: &[u8]) -> Option<&Holder> {
        match self.plain() {
            // The common key, first: one holder, no chain of iterators.
            Self::One(h) => h.is(jid).then_some(h),
            Self::Indexed(i) => i.find(jid),
            _ => self.iter().find(|h| h.is(jid)),
        }
    }

    /// Changes the holder of `jid` (never its jid) and returns its token.
    pub(in crate::engine) fn update(
        &mut self,
        jid: &[u8],
        change: impl FnOnce(&mut Holder),
    ) -> Option<i64> {
        let found = match self.plain_mut() {
            Self::One(h) => Some(h).filter(|h| h.is(jid)),
            Self::Many(v) => v.iter_mut().find(|h| h.is(jid)),
            Self::Indexed(i) => return i.update(jid, change),
            Self::None | Self::Rated(_) => None,
        };
        found.map(|h| {
            change(h);
            h.token
        })
    }

    /// Adds a holder of a jid not held yet, as the newest grant.
    pub(in crate::engine) fn push(&mut self, holder: Holder) {
        match self {
            // A key's first holder: nothing to take apart.
            Self::None => {
                self.fill_empty(Self::One(holder));
                return;
            }
            // The holders beside a rate, in place.
            Self::Rated(r) => return r.holders.push(holder),
            _ => {}
        }
        *self = match std::mem::take(self) {
            Self::None => Self::One(holder),
            Self::One(first) => Self::Many(vec![first, holder]),
            Self::Many(mut v) => {
                // Grow one at a time while small, instead of Vec's doubling.
                if v.len() == v.capacity() && v.len() < 4 {
                    v.reserve_exact(1);
                }
                v.push(holder);
                Self::from_vec(v)
            }
            Self::Indexed(mut i) => match i.insert(holder) {
                Ok(()) => Self::Indexed(i),
                // A token before the newest (only replayed forged data):
                // grant order is kept in a vector.
                Err(holder) => {
                    let mut v = i.into_ordered();
                    v.push(holder);
                    Self::Many(v)
                }
            },
            Self::Rated(mut r) => {
                r.holders.push(holder);
                Self::Rated(r)
            }
        };
    }

    /// Puts `new` in place of no holders, forgotten rather than dropped: the
    /// drop is a call the compiler keeps, on every first grant of a key.
    fn fill_empty(&mut self, new: Self) {
        let old = std::mem::replace(self, new);
        debug_assert!(matches!(old, Self::None));
        std::mem::forget(old);
    }

    /// Back to a smaller layout once few holders are left.
    #[inline]
    fn shrink(&mut self) {
        // None and one holder are as small as it gets (most keys), decided
        // here without the call.
        if !matches!(self, Self::None | Self::One(_)) {
            self.shrink_layout();
        }
    }

    fn shrink_layout(&mut self) {
        match self {
            Self::Many(v) if v.len() < 2 => *self = Self::from_vec(std::mem::take(v)),
            Self::Indexed(i) if i.len() < SHRINK_AT => {
                let i = std::mem::replace(i, Box::new(Indexed::empty()));
                *self = Self::from_vec(i.into_ordered());
            }
            Self::Rated(r) => r.holders.shrink(),
            _ => {}
        }
    }

    /// Removes the holder of `jid`.
    pub(in crate::engine) fn remove(&mut self, jid: &[u8]) -> Option<Holder> {
        let removed = match self.plain_mut() {
            one @ Self::One(_) => match std::mem::take(one) {
                Self::One(h) if h.is(jid) => Some(h),
                kept => {
                    *one = kept;
                    None
                }
            },
            Self::Many(v) => v.iter().position(|h| h.is(jid)).map(|at| v.remove(at)),
            Self::Indexed(i) => i.remove(jid),
            _ => None,
        };
        self.shrink();
        removed
    }

    /// Removes the holders whose lease ended at `now`, showing each to
    /// `removed`; indexed, only those are visited, the earliest first.
    pub(in crate::engine) fn prune(&mut self, now: i64, mut removed: impl FnMut(&Holder)) -> usize {
        // One live holder, the most common key: nothing to take apart.
        if let Self::One(h) = self
            && h.is_live(now)
        {
            return 0;
        }
        let count = match self.plain_mut() {
            Self::Indexed(i) => {
                let mut count = 0;
                while let Some(h) = i.pop_ended(now) {
                    removed(&h);
                    count += 1;
                }
                count
            }
            _ => return self.remove_where(|h| !h.is_live(now), removed),
        };
        self.shrink();
        count
    }

    /// Removes every holder `matches` picks, showing each to `removed`.
    pub(in crate::engine) fn remove_where(
        &mut self,
        mut matches: impl FnMut(&Holder) -> bool,
        mut removed: impl FnMut(&Holder),
    ) -> usize {
        let before = self.len();
        match self.plain_mut() {
            Self::One(h) => {
                if matches(h) {
                    removed(h);
                    *self.plain_mut() = Self::None;
                }
            }
            Self::Many(v) => v.retain(|h| {
                let remove = matches(h);
                if remove {
                    removed(h);
                }
                !remove
            }),
            Self::Indexed(i) => {
                i.remove_where(matches, removed);
            }
            Self::None | Self::Rated(_) => {}
        }
        self.shrink();
        before - self.len()
    }

    /// Removes every holder whose owner is `owner`, in grant order, showing
    /// each to `removed`: indexed, only those are visited.
    pub(in crate::engine) fn remove_owner(
        &mut self,
        owner: &[u8],
        removed: impl FnMut(&Holder),
    ) -> usize {
        let count = match self.plain_mut() {
            Self::Indexed(i) => i.remove_owner(owner, removed),
            _ => return self.remove_where(|h| h.owner() == Some(owner), removed),
        };
        self.shrink();
        count
    }

    /// How many holders `group` has (`None`: those without a group): a
    /// look-up when indexed, a walk of a few dozen at most otherwise.
    pub(in crate::engine) fn group_holding(&self, group: Option<&[u8]>) -> usize {
        match self.indexed() {
            Some(i) => i.group_holding(group),
            None => self.iter().filter(|h| h.group() == group).count(),
        }
    }

    /// Per group (`None`: no group), how many holders' leases have not
    /// ended at `now`, groups with none left out, in no particular order.
    /// Indexed: from the counts kept, less the ended holders (found without
    /// a walk over the others).
    pub(in crate::engine) fn live_by_group(&self, now: i64) -> Vec<(Option<&[u8]>, usize)> {
        if let Some(i) = self.indexed() {
            let mut counts: std::collections::HashMap<Option<&[u8]>, usize> =
                i.groups_holding().collect();
            i.for_each_ended(now, |h| {
                if let Some(n) = counts.get_mut(&h.group()) {
                    *n = n.saturating_sub(1);
                }
            });
            return counts.into_iter().filter(|&(_, n)| n > 0).collect();
        }
        // A few dozen at most.
        let mut counts: Vec<(Option<&[u8]>, usize)> = Vec::new();
        for h in self.iter().filter(|h| h.is_live(now)) {
            match counts.iter_mut().find(|(g, _)| *g == h.group()) {
                Some((_, n)) => *n += 1,
                None => counts.push((h.group(), 1)),
            }
        }
        counts
    }

    /// The counts of [`Self::live_by_group`], for many questions in a row (a
    /// serving pass asks for every waiting group): indexed, the index's
    /// counts and the ended holders to take off them.
    pub(in crate::engine) fn group_counts(&self, now: i64) -> GroupCounts<'_> {
        let Some(i) = self.indexed() else {
            let mut counts = self.live_by_group(now);
            counts.sort_unstable_by(|a, b| a.0.cmp(&b.0));
            let live_ends = self.iter().filter_map(Holder::expires_at);
            return GroupCounts {
                counts: Counts::Counted(counts),
                next_lease_end: live_ends.filter(|&end| now < end).min(),
            };
        };
        let mut ended: Vec<(Option<&[u8]>, usize)> = Vec::new();
        let mut next_lease_end = i.earliest_lease();
        if next_lease_end.is_some_and(|at| at <= now) {
            next_lease_end = i.for_each_ended(now, |h| ended.push((h.group(), 1)));
            ended.sort_unstable_by(|a, b| a.0.cmp(&b.0));
            ended.dedup_by(|later, kept| {
                let same = later.0 == kept.0;
                if same {
                    kept.1 += later.1;
                }
                same
            });
        }
        GroupCounts {
            counts: Counts::Kept(i, ended),
            next_lease_end,
        }
    }

    /// The index's [`Indexed::holdings_stamp`]; `None` for a compact lock
    /// (a few dozen holders, looked at again).
    #[cfg(test)]
    pub(in crate::engine) fn holdings_stamp(&self) -> Option<HoldingsStamp> {
        self.indexed().map(Indexed::holdings_stamp)
    }

    /// Whether a holder holds exclusively.
    pub(in crate::engine) fn exclusive_held(&self) -> bool {
        match self.indexed() {
            Some(i) => i.exclusive_holders() > 0,
            None => self.iter().any(Holder::is_exclusive),
        }
    }

    /// The earliest end of lease among the holders.
    pub(in crate::engine) fn earliest_lease(&self) -> Option<i64> {
        match self.indexed() {
            Some(i) => i.earliest_lease(),
            None => self.iter().filter_map(Holder::expires_at).min(),
        }
    }

    /// The key's expiry from its holders: the latest lease, `None` when a
    /// holder has no lease; `Some(None)` when there is no holder.
    pub(in crate::engine) fn latest_lease(&self) -> Option<Option<i64>> {
        if let Self::One(h) = self.plain() {
            return h.expires_at().map(Some);
        }
        match self.indexed() {
            Some(i) if i.has_unleased() => None,
            Some(i) => Some(i.latest_lease()),
            None => self.iter().try_fold(None, |latest: Option<i64>, h| {
                let at = h.expires_at()?;
                Some(Some(latest.map_or(at, |l| l.max(at))))
            }),
        }
    }

    /// Whether every holder's lease ended at `now` (and there is one).
    pub(in crate::engine) fn all_ended(&self, now: i64) -> bool {
        !self.is_empty()
            && self
                .latest_lease()
                .is_some_and(|at| at.is_some_and(|at| at <= now))
    }

    /// Holder slots held (a vector may hold more than it uses).
    #[cfg(test)]
    pub(crate) fn capacity(&self) -> usize {
        match self.plain() {
            Self::None => 0,
            Self::One(_) => 1,
            Self::Many(v) => v.capacity(),
            Self::Indexed(i) => i.len(),
            Self::Rated(_) => 0,
        }
    }

    /// [`crate::engine::Lock::free_effort`]: an indexed lock's holders, 1
    /// for a compact one (at most a vector and a few dozen texts).
    pub(in crate::engine) fn free_effort(&self) -> usize {
        self.indexed().map_or(1, |i| i.len().max(1))
    }

    /// Bytes held beyond the lock itself, for MEMORY USAGE: a lone holder
    /// is inside the lock (or the rate's box), and a text kept in place is
    /// inside its holder, so only a vector and texts on the heap add.
    pub(in crate::engine) fn mem_usage(&self) -> usize {
        let rated = self.rate().map_or(0, |_| std::mem::size_of::<Rated>());
        rated
            + match self.indexed() {
                Some(i) => i.mem_usage(),
                None => {
                    let vector = match self.plain() {
                        Self::Many(v) => v.capacity() * std::mem::size_of::<Holder>(),
                        _ => 0,
                    };
                    vector + self.iter().map(Holder::heap_bytes).sum::<usize>()
                }
            }
    }

    pub(in crate::engine) fn rate(&self) -> Option<&Rate> {
        match self {
            Self::Rated(r) => Some(&r.rate),
            _ => None,
        }
    }

    /// Sets the rate kept beside the holders (`None`: no rate).
    pub(in crate::engine) fn set_rate(&mut self, rate: Option<Rate>) {
        match (&mut *self, rate) {
            // The common case, a rated lock spending again, in place.
            (Self::Rated(r), Some(rate)) => r.rate = rate,
            (Self::Rated(_), None) => {
                if let Self::Rated(r) = std::mem::take(self) {
                    *self = r.holders;
                }
            }
            (_, Some(rate)) => {
                // Allocated first, then swapped: nothing is left to drop.
                let mut rated = Box::new(Rated {
                    rate,
                    holders: Self::None,
                });
                std::mem::swap(&mut rated.holders, self);
                self.fill_empty(Self::Rated(rated));
            }
            (_, None) => {}
        }
    }
}
