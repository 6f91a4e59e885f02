//! The order of a key's waiting groups, kept from one pass to the next.
//!
//! A pass offers the next slot to the group that holds the fewest slots for
//! its weight, then to the one whose turn comes first on the key's clock,
//! then to the one whose first waiter came first (a [`Turn`]). Made afresh,
//! that order costs a look at every waiting group; kept in a heap between
//! passes, it costs a pass the groups whose place may have changed since
//! the last, looked at again at its start ([`Order::start`]):
//!
//! - a group whose count of holders went down: the key names those (the
//!   groups it names freed since the stamp kept, or, for a key of a few
//!   holders that keeps no stamp, every group that held then or holds now);
//! - a group that came, whose first waiter left, that came back from the
//!   parked, or that the last pass tried ([`Order::note`]).
//!
//! A group whose count went up (a grant from outside the queue) is not told
//! of: a turn kept from an earlier pass is checked against the key when it
//! comes out of the heap first, and goes back in with the count found if
//! that differs (a count that only grew puts a group later, never earlier,
//! so none is tried before its time).
//!
//! Turns that no longer stand (the group's first waiter changed, the group
//! left or was parked, it was looked at again) stay in the heap until they
//! come out, and are dropped then. When the turns outnumber the groups
//! twice over (and 64), or the key cannot say what went down, the order is
//! made afresh: that pass looks at every group.

use std::collections::BinaryHeap;

use hashbrown::HashTable;

use super::clock::Tag;
use super::types::{GroupQueues, GroupWaiters, KeyHoldings, Queue};
use crate::engine::{GroupName, HoldingsStamp, holding_hash_of};

/// A group's first waiter as a candidate for the next slot: the greatest
/// in a [`BinaryHeap`] is the group that holds the fewest slots for its
/// weight (`held / weight`, compared in integers), then the one whose turn
/// comes first on the key's virtual clock (its [`Tag`], see `clock`), then
/// the one whose waiter came first.
#[derive(Debug, Clone, Copy)]
pub(super) struct Turn {
    pub(super) held: usize,
    pub(super) weight: u32,
    /// The group's place on the key's clock, as of when the turn was made
    /// (it changes only with a grant to the group, which ends this turn).
    pub(super) tag: Tag,
    pub(super) seq: usize,
    /// The pass that counted `held` (see [`Order::pass`]): a turn of an
    /// earlier pass is checked against the key before it is taken.
    pub(super) pass: u64,
    /// The group's place among those its pass tried, once it tried it
    /// (`None`: a turn kept between passes, the group found by its waiter).
    pub(super) group: Option<usize>,
}

impl Ord for Turn {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        // A count of holders times a WEIGHT (at most 1,000) fits 64 bits.
        let mine = (self.held as u64).saturating_mul(u64::from(other.weight));
        let theirs = (other.held as u64).saturating_mul(u64::from(self.weight));
        // The smaller share, then the earlier tag, then the older waiter,
        // is the greater.
        theirs
            .cmp(&mine)
            .then(other.tag.cmp(&self.tag))
            .then(other.seq.cmp(&self.seq))
    }
}

impl PartialOrd for Turn {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl PartialEq for Turn {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other).is_eq()
    }
}

impl Eq for Turn {}

/// Up to how many groups a pass looks at every one of them, keeping no
/// `known` (finding which changed would cost more).
const FEW: usize = 4;

/// How many changes are noted between two passes at most (see
/// [`Order::note`]).
const NOTED_MOST: usize = 4096;

/// What the key is asked at the next pass's start about the counts that
/// went down since the turns were counted.
#[derive(Debug, Default)]
enum Since {
    /// Nothing to ask: the order is made afresh.
    #[default]
    Unknown,
    /// The key's stamp at the start of the last pass.
    Stamp(HoldingsStamp),
    /// The groups holding at the start of the last pass (by
    /// [`holding_hash_of`]), for a key that keeps no stamp but lists them.
    Holding(Vec<u64>),
}

/// The waiting groups' turns, kept with a queue's tally between passes.
#[derive(Debug)]
pub(super) struct Order {
    /// The turns, best first; some no longer stand (see the module's doc).
    pub(super) turns: BinaryHeap<Turn>,
    /// Each group that got a turn, by its name's hash, through a waiter of
    /// it (its first then): how a group the key names is found. Some
    /// entries are of waiters gone or groups parked since: skipped.
    known: HashTable<(u64, usize)>,
    /// First waiters of groups to look at again at the next start.
    noted: Vec<usize>,
    since: Since,
    /// The groups the key names at a start (kept for its room).
    named: Vec<u64>,
    /// Up to how many groups every one is looked at ([`FEW`]).
    few: usize,
    /// This pass's number: the turns counted at its start are exact.
    pass: u64,
}

impl Default for Order {
    fn default() -> Self {
        Self {
            turns: BinaryHeap::new(),
            known: HashTable::new(),
            noted: Vec::new(),
            since: Since::Unknown,
            named: Vec::new(),
            few: FEW,
            pass: 0,
        }
    }
}

impl Order {
    /// Keeps the order of any number of groups (the tests of the kept
    /// order, whose queues have a few).
    #[cfg(test)]
    pub(super) fn keep_every_order(&mut self) {
        self.few = 0;
    }

    /// Waiter `seq` is now the first of its group, or its group's place may
    /// have changed otherwise: looked at again at the next start.
    pub(super) fn note(&mut self, seq: usize) {
        if self.noted.len() >= NOTED_MOST {
            // Waiters came and went for long with no pass (a key held
            // long, its waiters timing out and back): rather than keep
            // each, the next start makes the order afresh.
            self.noted.clear();
            self.since = Since::Unknown;
        }
        self.noted.push(seq);
    }

    /// The next start makes the order afresh (some group has no turn).
    pub(super) fn forget(&mut self) {
        self.since = Since::Unknown;
    }

    /// Numbers a new pass, before its [`Order::start`]: what it marks the
    /// groups it takes with, and the turns it counts.
    pub(super) fn next_pass(&mut self) -> u64 {
        self.pass += 1;
        self.pass
    }

    /// Starts the pass [`Order::next_pass`] numbered: brings the turns up to
    /// date in the pass's look at its `key`, `groups` being those the pass
    /// looks at, none of whose waiters after `last` is tried. Made afresh
    /// when `afresh`, when the key cannot say which counts went down, or when
    /// dropped turns pile up. Each group looked at is shown to `full` with
    /// what it holds: one that holds its GROUPLIMIT (`full` says so) gets no
    /// turn.
    pub(super) fn start<'g, C>(
        &mut self,
        key: &dyn KeyHoldings,
        queue: &Queue<C>,
        groups: &'g GroupQueues,
        last: Option<usize>,
        afresh: bool,
        full: &mut dyn FnMut(&'g Option<GroupName>, &'g GroupWaiters, usize) -> bool,
    ) {
        // A few groups are looked at afresh: as cheap as finding which.
        let few = groups.len() <= self.few;
        let afresh = afresh || few;
        let most = 2 * groups.len() + 64;
        let mut named = std::mem::take(&mut self.named);
        named.clear();
        let since = std::mem::take(&mut self.since);
        let told = !afresh
            && self.turns.len() <= most
            && self.known.len() <= most
            && self.noted.len() <= most
            && match &since {
                Since::Unknown => false,
                Since::Stamp(at) => key.freed_since(*at, &mut |hash| named.push(hash)),
                Since::Holding(then) => {
                    named.extend_from_slice(then);
                    key.holding_hashes(&mut |hash| named.push(hash))
                }
            };
        self.since = match key.stamp() {
            _ if few => Since::Unknown,
            Some(at) => Since::Stamp(at),
            None => {
                let mut now = match since {
                    Since::Holding(then) => then,
                    _ => Vec::new(),
                };
                now.clear();
                if key.holding_hashes(&mut |hash| now.push(hash)) {
                    Since::Holding(now)
                } else {
                    Since::Unknown
                }
            }
        };
        let pass = self.pass;
        let mut complete = true;
        let mut turn = |name: &'g Option<GroupName>, waiters: &'g GroupWaiters| {
            let (seq, weight) = waiters.first();
            if last.is_none_or(|last| seq > last) {
                complete = false;
                return None;
            }
            let held = key.held(name.as_ref());
            (!full(name, waiters, held)).then(|| Turn {
                held,
                weight,
                tag: waiters.tag(weight),
                seq,
                pass,
                group: None,
            })
        };
        if few {
            self.turns.clear();
            self.known.clear();
            self.noted.clear();
            for (name, waiters) in groups {
                self.turns.extend(turn(name, waiters));
            }
        } else if !told {
            self.turns.clear();
            self.known.clear();
            self.noted.clear();
            self.turns.reserve(groups.len());
            self.known.reserve(groups.len(), |&(h, _)| h);
            for (name, waiters) in groups {
                let hash = holding_hash_of(name);
                let seq = waiters.first().0;
                self.known.insert_unique(hash, (hash, seq), |&(h, _)| h);
                self.turns.extend(turn(name, waiters));
            }
        } else {
            let group_of = |seq: usize| {
                let waiter = queue.get(&seq)?;
                groups.get_key_value(&waiter.share.group)
            };
            // A waiter noted is still its group's first unless it left
            // (then the next first was noted too): one look a group.
            let mut noted = std::mem::take(&mut self.noted);
            noted.sort_unstable();
            noted.dedup();
            let (turns, known) = (&mut self.turns, &mut self.known);
            noted.retain(|&seq| {
                let Some((name, waiters)) = group_of(seq).filter(|(_, w)| w.first().0 == seq)
                else {
                    return false;
                };
                let hash = holding_hash_of(name);
                if known.find(hash, |&e| e == (hash, seq)).is_none() {
                    known.insert_unique(hash, (hash, seq), |&(h, _)| h);
                }
                turns.extend(turn(name, waiters));
                true
            });
            named.sort_unstable();
            named.dedup();
            for &hash in &named {
                for &(_, seq) in self.known.iter_hash(hash).filter(|&&(h, _)| h == hash) {
                    if noted.binary_search(&seq).is_ok() {
                        continue;
                    }
                    if let Some((name, waiters)) = group_of(seq)
                        && waiters.first().0 == seq
                    {
                        self.turns.extend(turn(name, waiters));
                    }
                }
            }
            noted.clear();
            self.noted = noted;
        }
        self.named = named;
        if !complete || few {
            // Some group got no turn, or none is known: made afresh next.
            self.since = Since::Unknown;
        }
    }
}
