//! The turns of a key's waiting groups: a virtual clock, self-clocked fair
//! queuing (Golestani's SCFQ).
//!
//! Counted only in the slots held now, fairness is first come, first served
//! on a key of LIMIT 1 (every group holds none when the slot frees) and on a
//! key whose jobs are short against the time between releases. So among the
//! groups that hold the fewest for their weight, the next slot goes to the
//! one with the earliest *finish tag*: the virtual time at which its next
//! grant would be over were every waiting group served in proportion to its
//! weight. A grant to a group moves its tag on by `TURN / weight` (a group
//! of weight 2 takes two turns to another's one) and the key's clock to the
//! tag of that grant. A group that starts waiting starts at the clock, its
//! first tag one turn (for its weight) on: it joins at the current turn,
//! with no credit banked from before and no debt either. A group that stops
//! waiting leaves nothing behind: its start is kept with its waiters and
//! goes with the last of them, and the clock itself goes with the key's last
//! waiter (it is kept in the queue's tally).
//!
//! Tags equal are taken in the order they were given (a stamp, counted on
//! with each tag): a group that started waiting before another was served
//! again is served first. Hence the bound: with G groups waiting, a group's
//! first waiter is served within G - 1 grants to groups of a weight no
//! greater than its own (a heavier one may take more, in proportion).
//!
//! Why a virtual clock and not deficit round robin: every grant is one slot,
//! so a deficit's quantum would be the weight itself, and DRR's bound is a
//! round of all the groups' quanta; finish tags give each waiting group its
//! place in one comparison (O(log G) in the kept heap of turns, `order`),
//! interleave the weights within a round (2:1:1 serves A A B C, not A A
//! then B C in a separate round) and need no "active list" walked in order.

/// One turn of virtual time: what a grant to a group of weight 1 moves its
/// tag on by. A multiple of every weight up to 16 (720,720 = lcm(1..=16))
/// and of a large power of two, so that the turns of the common weights add
/// up exactly; other weights are off by less than 2^-59 of a turn a grant.
/// It fits 64 bits, so a turn for a weight is a 64-bit division (a tag
/// is 128: room for 2^68 grants while some group waits).
pub(super) const TURN: u64 = 720_720 << 40;

/// A waiting group's place among the others: the finish tag of its next
/// grant, then the stamp of when that tag was given (the smaller first).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(super) struct Tag {
    pub(super) finish: u128,
    pub(super) stamp: u64,
}

/// A waiting group's start: the finish tag of its last grant, or the clock
/// when it started waiting; with the stamp of when it was set. Kept with the
/// group's waiters (`GroupWaiters`), so it goes with its last waiter.
pub(super) type Start = (u128, u64);

/// A key's virtual clock.
#[derive(Debug, Default)]
pub(super) struct Clock {
    /// The finish tag of the latest grant (never going back).
    now: u128,
    /// The stamp of the latest tag given.
    stamps: u64,
}

impl Clock {
    /// The start of a group that starts waiting: at the clock, stamped now.
    pub(super) fn join(&mut self) -> Start {
        self.stamps += 1;
        (self.now, self.stamps)
    }

    /// The place of a group's next waiter, of `weight`, the group's start
    /// being `start`.
    pub(super) fn tag(start: Start, weight: u32) -> Tag {
        Tag {
            finish: start
                .0
                .saturating_add(u128::from(TURN / u64::from(weight.max(1)))),
            stamp: start.1,
        }
    }

    /// A group's waiter of `weight` was granted a slot, the group's start
    /// being `start`: the clock moves to that grant's finish tag, and the
    /// group's next start is returned.
    pub(super) fn granted(&mut self, start: Start, weight: u32) -> Start {
        let finish = Self::tag(start, weight).finish;
        self.now = self.now.max(finish);
        self.stamps += 1;
        (finish, self.stamps)
    }
}
