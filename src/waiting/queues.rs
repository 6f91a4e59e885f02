//! The bookkeeping of the blocked clients, with no Redis in it: a queue per
//! key in arrival order, the key each client waits on, the wake-ups armed
//! and the timers counted. `C` stands for a blocked client's handle, so the
//! unit tests use plain numbers.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::hash::Hash;

use super::clock::Clock;
use super::denials::Kinds;
use super::order::Order;
use super::parked::Parked;
use super::types::{
    GroupQueues, GroupWaiters, KeyHoldings, KeyId, Queue, Waiter, gate, leave_group,
};
use crate::engine::{GroupName, HoldingsStamp};

/// What is kept of one queue as its waiters come and go: each group's
/// waiters and their kinds (a serving pass stops once every kind left is
/// denied).
#[derive(Default)]
pub(super) struct Tally {
    /// The groups a pass looks at: all that wait but the parked.
    pub(super) groups: GroupQueues,
    /// The groups found at their GROUPLIMIT, not looked at again until
    /// the key may have freed one of their slots.
    pub(super) parked: Parked,
    pub(super) kinds: Kinds,
    /// The key's holdings stamp when every waiting group was last found
    /// holding its GROUPLIMIT, with no waiter joined since: while the key
    /// keeps that stamp (no group's count went down), they all still do,
    /// and a newcomer the key admits passes them without a look at each.
    pub(super) full_at: Option<HoldingsStamp>,
    /// The numbers of the waiters that ask to hold alone (MODE exclusive),
    /// oldest first: the first of them is where a pass stops letting the
    /// waiters behind it in, found without a walk of the queue.
    pub(super) exclusive: BTreeSet<usize>,
    /// The groups' turns, kept for the next pass: told of each group that
    /// comes and of each whose first waiter leaves.
    pub(super) order: Order,
    /// The key's virtual clock: each waiting group's place in the order of
    /// turns among those that hold alike (see `clock`), kept while it waits.
    pub(super) clock: Clock,
}

impl Tally {
    /// Counts `waiter` in.
    pub(super) fn join<C>(&mut self, waiter: &Waiter<C>) {
        // A new waiter, perhaps of a group with room: look again (at its
        // group too, if parked: it may ask for more).
        self.full_at = None;
        let group = &waiter.share.group;
        let unparked = self.parked.unpark(group, &self.kinds, &mut self.groups);
        self.kinds.add(waiter.call.admission(), &waiter.share);
        if waiter.share.exclusive {
            self.exclusive.insert(waiter.seq);
        }
        let weight = waiter.share.weight.max(1);
        match self.groups.get_mut(group) {
            Some(seqs) => {
                seqs.insert(waiter.seq, weight);
                // A group that had a turn keeps it: the waiter joins behind
                // its first (numbers grow). One back from the parked gets one.
                if unparked {
                    self.order.note(seqs.first().0);
                }
            }
            None => {
                // A group that starts waiting joins at the current turn.
                let start = self.clock.join();
                self.groups
                    .insert(group.clone(), GroupWaiters::new(waiter.seq, weight, start));
                self.order.note(waiter.seq);
            }
        }
    }

    /// Counts `waiter` out: its wait ended.
    pub(super) fn leave<C>(&mut self, waiter: &Waiter<C>) {
        let group = &waiter.share.group;
        let kinds = self.kinds.kinds_of(group);
        self.kinds.remove(waiter.call.admission(), &waiter.share);
        if waiter.share.exclusive {
            self.exclusive.remove(&waiter.seq);
        }
        let gone = kinds.saturating_sub(self.kinds.kinds_of(group));
        if !self.parked.leave(group, waiter.seq, gone) {
            // The group's turn was its first waiter's.
            if let Some(first) = leave_group(&mut self.groups, waiter)
                && first > waiter.seq
            {
                self.order.note(first);
            }
        }
    }

    /// The tally of the waiters of `queue`, counted one by one (what the
    /// waiters' bookkeeping keeps as they come and go).
    pub(super) fn of<C>(queue: &Queue<C>) -> Self {
        let mut tally = Self::default();
        for waiter in queue.values() {
            tally.join(waiter);
        }
        tally
    }

    /// No waiter counted.
    pub(super) fn is_empty(&self) -> bool {
        self.groups.is_empty() && self.parked.is_empty()
    }

    /// Whether a waiter counted here may be served before a newcomer that
    /// the key's `holders` admit (see [`Waiters::holds_back`]): the parked
    /// groups asked only if the key names them freed.
    pub(super) fn hold_back(&self, holders: &dyn KeyHoldings) -> bool {
        let room =
            |group: &Option<GroupName>, max: u32| holders.held(group.as_ref()) < max as usize;
        let freed = self.parked.freed(holders);
        self.kinds.hold_back(self.groups.keys().chain(freed), room)
    }

    /// Each group's waiters, parked or not, by name (`None` first).
    pub(super) fn all_groups(&self) -> BTreeMap<&Option<GroupName>, &GroupWaiters> {
        self.groups.iter().chain(self.parked.iter()).collect()
    }
}

/// Every blocked client: a queue per key, oldest first, the key each client
/// waits on, and the wake-ups armed. `C` is the handle of a blocked client
/// (a `ffi::Blocked` in Redis).
pub(super) struct Waiters<C> {
    pub(super) queues: HashMap<KeyId, Queue<C>>,
    /// What is counted of each queue in `queues`, kept with it.
    pub(super) tallies: HashMap<KeyId, Tally>,
    /// The key each blocked client waits on (also while its queue is served)
    /// and its number there.
    pub(super) blocked: HashMap<C, (KeyId, usize)>,
    /// The earliest time a wake-up timer is armed for, per key.
    pub(super) timers: HashMap<KeyId, i64>,
    /// The client of each waiter by its number, for its deadline timer.
    pub(super) by_seq: HashMap<usize, C>,
    /// The number of the next waiter.
    pub(super) next_seq: usize,
    /// Module timers armed and not yet fired or stopped (INFO
    /// `unique_timers_armed`): deadlines and wake-ups.
    pub(super) armed: usize,
}

impl<C> Default for Waiters<C> {
    fn default() -> Self {
        Self {
            queues: HashMap::new(),
            tallies: HashMap::new(),
            blocked: HashMap::new(),
            timers: HashMap::new(),
            by_seq: HashMap::new(),
            next_seq: 0,
            armed: 0,
        }
    }
}

impl<C: Copy + Eq + Hash> Waiters<C> {
    /// Clients waiting, on every key.
    pub(super) fn waiting(&self) -> usize {
        self.blocked.len()
    }

    /// Clients waiting on `key` of database `db`.
    pub(super) fn waiting_on(&self, db: i32, key: &[u8]) -> usize {
        if self.queues.is_empty() {
            return 0; // the common case, on every LOCK: no lookup, no copy
        }
        self.queues
            .get(&(db, key.to_vec()))
            .map_or(0, BTreeMap::len)
    }

    /// Whether a waiter of `key` may be served before a new call that the
    /// key's holders admit (`holders`: the key, pruned): one without
    /// GROUPLIMIT or exclusive, or one of a group that holds fewer than the
    /// largest GROUPLIMIT its waiters gave. From the counted kinds when they
    /// are all known (no walk; a look at each waiting group at most, and
    /// only while each one looked at is full; of the groups parked at their
    /// GROUPLIMIT, only those the key names freed since), from a walk
    /// otherwise. Under the key's holdings stamp of the last answer that
    /// every group was full, the answer is the same, without a look (a
    /// stream of newcomers past a thousand tenants at their GROUPLIMIT pays
    /// one look, not one each).
    pub(super) fn holds_back(&mut self, db: i32, key: &[u8], holders: &dyn KeyHoldings) -> bool {
        let id = (db, key.to_vec());
        let Some(queue) = self.queues.get(&id) else {
            return false;
        };
        let stamp = holders.stamp();
        let mut tally = self.tallies.get_mut(&id);
        if stamp.is_some() && tally.as_ref().is_some_and(|t| t.full_at == stamp) {
            return false;
        }
        let room =
            |group: &Option<GroupName>, max: u32| holders.held(group.as_ref()) < max as usize;
        // Without its tally (never while the queue is in place), a walk.
        let held = match tally.as_ref() {
            Some(t) => t.hold_back(holders),
            None => group_limits(
                queue
                    .values()
                    .map(|w| (&w.share.group, w.share.group_limit, w.share.exclusive)),
            )
            .is_none_or(|limits| limits.into_iter().any(|(group, max)| room(group, max))),
        };
        if let Some(tally) = tally.as_mut() {
            tally.full_at = if held { None } else { stamp };
        }
        held
    }

    /// How many wait on `key`, per group (`None` first, then by name).
    pub(super) fn by_group(&self, db: i32, key: &[u8]) -> Vec<(Option<GroupName>, usize)> {
        if self.tallies.is_empty() {
            return Vec::new();
        }
        self.tallies
            .get(&(db, key.to_vec()))
            .map(|t| {
                let groups = t.all_groups().into_iter();
                groups.map(|(g, s)| (g.clone(), s.len())).collect()
            })
            .unwrap_or_default()
    }

    /// Counts `waiter` in (`joins`) or out of the tally of the queue of
    /// `id` (none while a pass has the queue out: the pass keeps it).
    fn count(&mut self, id: &KeyId, waiter: &Waiter<C>, joins: bool) {
        if joins {
            match self.tallies.get_mut(id) {
                Some(tally) => tally.join(waiter),
                None => self.tallies.entry(id.clone()).or_default().join(waiter),
            }
            return;
        }
        let Some(tally) = self.tallies.get_mut(id) else {
            return;
        };
        tally.leave(waiter);
        if tally.is_empty() {
            self.tallies.remove(id);
        }
    }

    /// A number for the next waiter, larger than any before it (a 64-bit
    /// count does not wrap), so that a queue in number order is in arrival
    /// order.
    pub(super) fn next_seq(&mut self) -> usize {
        self.next_seq = self.next_seq.wrapping_add(1);
        self.next_seq
    }

    /// `waiter` joins the end of the queue of `id`.
    pub(super) fn push(&mut self, id: KeyId, waiter: Waiter<C>) {
        self.by_seq.insert(waiter.seq, waiter.client);
        self.blocked.insert(waiter.client, (id.clone(), waiter.seq));
        self.count(&id, &waiter, true);
        self.queues
            .entry(id)
            .or_default()
            .insert(waiter.seq, waiter);
    }

    /// Takes the queue of `id` out to serve it, with its tally; `None` when
    /// it has none. Its waiters still count as waiting until each is
    /// [`Waiters::served`]; the tally is the pass's to keep (it counts out
    /// the waiters it ends) until [`Waiters::put_back`].
    pub(super) fn take_queue(&mut self, id: &KeyId) -> Option<(Queue<C>, Tally)> {
        let queue = self.queues.remove(id)?;
        Some((queue, self.tallies.remove(id).unwrap_or_default()))
    }

    /// `waiter`, taken out to be served, got its reply: it waits no more.
    pub(super) fn served(&mut self, waiter: &Waiter<C>) {
        if let Some((id, _)) = self.blocked.remove(&waiter.client) {
            self.count(&id, waiter, false);
        }
        self.by_seq.remove(&waiter.seq);
    }

    /// Serving `id` is over: the waiters `still` denied keep their place,
    /// and `tally`, which counts them (and no other: the pass counted out
    /// those it ended), is the queue's again.
    pub(super) fn put_back(&mut self, id: KeyId, still: Queue<C>, tally: Tally) {
        if !still.is_empty() {
            // No waiter could block in between: nothing to merge.
            if !tally.is_empty() {
                self.tallies.insert(id.clone(), tally);
            }
            self.queues.insert(id, still);
        }
    }

    /// Removes `client` from its queue. `None` when it was not waiting;
    /// otherwise the key it waited on and the waiter, as found in its queue.
    pub(super) fn forget(&mut self, client: C) -> Option<(KeyId, Option<Waiter<C>>)> {
        let (id, seq) = self.blocked.remove(&client)?;
        let Some(queue) = self.queues.get_mut(&id) else {
            return Some((id, None));
        };
        let waiter = queue.remove(&seq);
        if queue.is_empty() {
            self.queues.remove(&id);
        }
        if let Some(waiter) = &waiter {
            self.by_seq.remove(&waiter.seq);
            self.count(&id, waiter, false);
        }
        Some((id, waiter))
    }

    /// The deadline of waiter `seq` came: it leaves its queue. `None` when
    /// it is no longer waiting; otherwise its key and itself.
    pub(super) fn deadline_passed(&mut self, seq: usize) -> Option<(KeyId, Waiter<C>)> {
        let client = *self.by_seq.get(&seq)?;
        match self.forget(client)? {
            (id, Some(waiter)) => Some((id, waiter)),
            (_, None) => None,
        }
    }

    /// Whether a wake-up at `at` must be armed for `id` (none is armed at
    /// or before `at`); if so it counts as armed from now on.
    pub(super) fn arm(&mut self, id: &KeyId, at: i64) -> bool {
        if self.timers.get(id).is_some_and(|&when| when <= at) {
            return false;
        }
        self.timers.insert(id.clone(), at);
        true
    }

    /// The wake-up armed for `id` at `at` went off.
    pub(super) fn fired(&mut self, id: &KeyId, at: i64) {
        if self.timers.get(id) == Some(&at) {
            self.timers.remove(id);
        }
    }

    /// A module timer was armed (`true`) or went (fired or stopped).
    pub(super) fn count_timer(&mut self, armed: bool) {
        self.armed = if armed {
            self.armed + 1
        } else {
            self.armed.saturating_sub(1)
        };
    }

    /// Takes out the whole queue of every key that `leaves` picks (a key's
    /// name): those clients wait no more. Oldest first within each key.
    pub(super) fn take_queues(
        &mut self,
        leaves: impl Fn(&[u8]) -> bool,
    ) -> Vec<(KeyId, Waiter<C>)> {
        let ids: Vec<KeyId> = self
            .queues
            .keys()
            .filter(|(_, key)| leaves(key))
            .cloned()
            .collect();
        let mut taken = Vec::new();
        for id in ids {
            self.tallies.remove(&id);
            for waiter in self.queues.remove(&id).unwrap_or_default().into_values() {
                self.served(&waiter);
                taken.push((id.clone(), waiter));
            }
            self.timers.remove(&id);
        }
        taken
    }

    pub(super) fn has_queue(&self, id: &KeyId) -> bool {
        self.queues.contains_key(id)
    }

    pub(super) fn keys(&self) -> Vec<KeyId> {
        self.queues.keys().cloned().collect()
    }
}

/// For waiters given as their group, GROUPLIMIT and whether they are
/// exclusive: the largest GROUPLIMIT each group's waiters gave, when every
/// one gave one and none is exclusive (only then can a newcomer of another
/// group pass them, while each of their groups holds that many); `None`
/// otherwise. The one rule for a walk of a queue and for its counted kinds.
pub(super) fn group_limits<'a>(
    waiters: impl Iterator<Item = (&'a Option<GroupName>, Option<u32>, bool)>,
) -> Option<BTreeMap<&'a Option<GroupName>, u32>> {
    // By group, so that a queue of many tenants costs one lookup a waiter,
    // not a search of every group seen so far.
    let mut groups: BTreeMap<&Option<GroupName>, u32> = BTreeMap::new();
    for (group, group_limit, exclusive) in waiters {
        let max = gate(group_limit, exclusive)?;
        let m = groups.entry(group).or_insert(max);
        *m = (*m).max(max);
    }
    Some(groups)
}
