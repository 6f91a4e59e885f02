//! Waiters of a call over several keys (`UNIQUE.LOCKALL ... WAIT`): the
//! bookkeeping, with no Redis in it, and the rule of when one is served.
//!
//! Such a waiter holds nothing while it waits (so it cannot deadlock with
//! anyone), and queues on every one of its keys with one deadline and one
//! arrival number (from the same count as the single-key waiters, so that
//! arrival order spans both). It is served only when every key can grant at
//! once.
//!
//! **The reservation.** On each key, the oldest multi-key waiter queued
//! there holds the key's freed capacity back from every later arrival: the
//! single-key waiters that came after it are not retried, and a new call on
//! the key (LOCK or LOCKALL, waiting or not) is refused because clients
//! wait there, until that multi-key waiter is served or its wait ends.
//! Waiters that arrived before it are served first, in their order. A
//! multi-key waiter is tried only when it is the oldest multi-key
//! waiter on every one of its keys ([`Multi::eligible`]); so the oldest
//! multi-key waiter of all is always eligible, its keys take no new holders
//! but those of earlier waiters, and it is served as soon as the holds that
//! were there when it arrived (and those of the earlier waiters) have ended
//! on every key at once, never later than its last key's last such lease.
//! The next oldest is then protected the same way: multi-key waiters are
//! served in arrival order where they share a key, and independently where
//! they do not.
//!
//! What sits idle meanwhile: capacity freed on a key of a reserved waiter
//! while another of its keys is still full; at most until it is served or
//! its WAIT runs out.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::hash::Hash;

use super::types::KeyId;
use crate::engine::GroupName;
use crate::ffi::TimerId;

/// What retrying a multi-key waiter gave.
pub enum ServedAll {
    /// Every key granted (or renewed): the tokens, in key order.
    Granted(Vec<i64>),
    /// Still refused; when the key that refused (its position) may have
    /// room, if any lease or rate says so.
    Denied { wake: Option<(usize, i64)> },
    /// Its call fails now: this error ends the wait.
    Failed(String),
    /// The lease it asks for ended while it waited (as [`Served::Lapsed`]):
    /// nil ends the wait.
    ///
    /// [`Served::Lapsed`]: super::Served::Lapsed
    Lapsed,
}

/// A blocked call over several keys, as its command parsed it.
pub trait AllCall {
    /// Runs the call again, all keys at once.
    fn retry(&self, ctx: &redis_module::Context) -> ServedAll;

    /// Whether the lease the call asks for is over by `now` (a PXAT that
    /// passed), as [`Call::lapsed`](super::Call::lapsed).
    fn lapsed(&self, _now: i64) -> bool {
        false
    }

    /// What a waiter granted `tokens` is told, as [`Call::granted`](super::Call::granted).
    fn granted(&self, tokens: Vec<i64>) -> crate::ffi::WaiterReply {
        crate::ffi::WaiterReply::Tokens(tokens)
    }
}

/// One blocked call over several keys.
pub(super) struct MultiWaiter<C> {
    pub(super) client: C,
    pub(super) call: Box<dyn AllCall>,
    /// Its keys, in the call's order (distinct, one database).
    pub(super) keys: Vec<KeyId>,
    /// Its GROUP on each key, in the same order (for WAITERS GROUPS only:
    /// it is served by the reservation, not by group order).
    pub(super) groups: Vec<Option<GroupName>>,
    pub(super) lock_type: Box<str>,
    pub(super) seq: usize,
    pub(super) deadline: Option<TimerId>,
    pub(super) user: Option<Box<[u8]>>,
}

/// How many waiters of each group (`None`: without one) a key has.
pub(super) type GroupCounts = BTreeMap<Option<GroupName>, usize>;

/// Every multi-key waiter, by arrival number, and the numbers queued on
/// each key.
pub(super) struct Multi<C> {
    pub(super) waiters: BTreeMap<usize, MultiWaiter<C>>,
    pub(super) on_key: HashMap<KeyId, BTreeSet<usize>>,
    /// Per key in `on_key`, how many of its waiters wait under each group
    /// there: WAITERS ... GROUPS reads it without a walk.
    pub(super) groups_on: HashMap<KeyId, GroupCounts>,
    pub(super) by_client: HashMap<C, usize>,
}

impl<C> Default for Multi<C> {
    fn default() -> Self {
        Self {
            waiters: BTreeMap::new(),
            on_key: HashMap::new(),
            groups_on: HashMap::new(),
            by_client: HashMap::new(),
        }
    }
}

impl<C: Copy + Eq + Hash> Multi<C> {
    pub(super) fn len(&self) -> usize {
        self.waiters.len()
    }

    /// Multi-key waiters queued on `id`.
    pub(super) fn waiting_on(&self, id: &KeyId) -> usize {
        self.on_key.get(id).map_or(0, BTreeSet::len)
    }

    /// Multi-key waiters queued on `id`, per group they wait under there.
    pub(super) fn by_group_on(&self, id: &KeyId) -> Vec<(Option<GroupName>, usize)> {
        self.groups_on
            .get(id)
            .map(|groups| groups.iter().map(|(g, &n)| (g.clone(), n)).collect())
            .unwrap_or_default()
    }

    /// Counts `waiter` in (`joins`) or out of the groups of each of its keys.
    fn count(&mut self, waiter: &MultiWaiter<C>, joins: bool) {
        for (at, id) in waiter.keys.iter().enumerate() {
            let group = waiter.groups.get(at).cloned().flatten();
            if joins {
                *self
                    .groups_on
                    .entry(id.clone())
                    .or_default()
                    .entry(group)
                    .or_default() += 1;
                continue;
            }
            let Some(groups) = self.groups_on.get_mut(id) else {
                continue;
            };
            if let Some(n) = groups.get_mut(&group) {
                *n = n.saturating_sub(1);
                if *n == 0 {
                    groups.remove(&group);
                }
            }
            if groups.is_empty() {
                self.groups_on.remove(id);
            }
        }
    }

    pub(super) fn has_key(&self, id: &KeyId) -> bool {
        self.on_key.contains_key(id)
    }

    /// Every key some multi-key waiter waits on.
    pub(super) fn keys(&self) -> Vec<KeyId> {
        self.on_key.keys().cloned().collect()
    }

    pub(super) fn push(&mut self, waiter: MultiWaiter<C>) {
        for id in &waiter.keys {
            self.on_key
                .entry(id.clone())
                .or_default()
                .insert(waiter.seq);
        }
        self.by_client.insert(waiter.client, waiter.seq);
        self.count(&waiter, true);
        self.waiters.insert(waiter.seq, waiter);
    }

    /// Takes waiter `seq` out of every queue.
    pub(super) fn remove(&mut self, seq: usize) -> Option<MultiWaiter<C>> {
        let waiter = self.waiters.remove(&seq)?;
        for id in &waiter.keys {
            if let Some(set) = self.on_key.get_mut(id) {
                set.remove(&seq);
                if set.is_empty() {
                    self.on_key.remove(id);
                }
            }
        }
        self.by_client.remove(&waiter.client);
        self.count(&waiter, false);
        Some(waiter)
    }

    pub(super) fn seq_of(&self, client: C) -> Option<usize> {
        self.by_client.get(&client).copied()
    }

    /// The arrival number of the oldest multi-key waiter on `id`: the one
    /// the key's capacity is reserved for.
    pub(super) fn reserved_for(&self, id: &KeyId) -> Option<usize> {
        self.on_key.get(id).and_then(|set| set.first().copied())
    }

    /// Whether waiter `seq` may be tried: it is the oldest multi-key waiter
    /// on every one of its keys.
    pub(super) fn eligible(&self, seq: usize) -> bool {
        self.waiters
            .get(&seq)
            .is_some_and(|w| w.keys.iter().all(|id| self.reserved_for(id) == Some(seq)))
    }

    /// Takes out every waiter one of whose keys `leaves` picks, with that key.
    pub(super) fn take_where(
        &mut self,
        leaves: impl Fn(&[u8]) -> bool,
    ) -> Vec<(KeyId, MultiWaiter<C>)> {
        let picked: Vec<(usize, KeyId)> = self
            .waiters
            .values()
            .filter_map(|w| {
                w.keys
                    .iter()
                    .find(|(_, key)| leaves(key))
                    .map(|id| (w.seq, id.clone()))
            })
            .collect();
        picked
            .into_iter()
            .filter_map(|(seq, id)| self.remove(seq).map(|w| (id, w)))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Never;
    impl AllCall for Never {
        fn retry(&self, _: &redis_module::Context) -> ServedAll {
            ServedAll::Failed(String::new())
        }
    }

    fn waiter(client: u32, seq: usize, keys: &[&str]) -> MultiWaiter<u32> {
        MultiWaiter {
            client,
            call: Box::new(Never),
            keys: keys.iter().map(|k| (0, k.as_bytes().to_vec())).collect(),
            // Some group on some of its keys, for the counts per group.
            groups: (0..keys.len())
                .map(|at| {
                    let g = (client as usize + at) % 3;
                    (g != 0).then(|| GroupName::new(&[b'g', g as u8]))
                })
                .collect(),
            lock_type: "lock".into(),
            seq,
            deadline: None,
            user: None,
        }
    }

    fn id(key: &str) -> KeyId {
        (0, key.as_bytes().to_vec())
    }

    #[test]
    fn the_oldest_on_every_key_is_eligible_and_reserves_its_keys() {
        let mut m = Multi::default();
        m.push(waiter(1, 10, &["a", "b"]));
        m.push(waiter(2, 11, &["b", "c"]));
        m.push(waiter(3, 12, &["d"]));
        assert!(m.eligible(10));
        assert!(!m.eligible(11), "behind 10 on b");
        assert!(m.eligible(12), "no key shared: independent");
        assert_eq!(m.reserved_for(&id("b")), Some(10));
        assert_eq!(m.reserved_for(&id("c")), Some(11));
        assert_eq!(m.waiting_on(&id("b")), 2);
        // Served or gone: the next one takes the reservation.
        assert_eq!(m.remove(10).map(|w| w.client), Some(1));
        assert!(m.eligible(11));
        assert_eq!(m.reserved_for(&id("b")), Some(11));
        assert!(!m.has_key(&id("a")));
        assert_eq!(m.seq_of(2), Some(11));
        assert_eq!(m.len(), 2);
    }

    #[test]
    fn a_moved_key_takes_out_every_waiter_on_it_once() {
        let mut m = Multi::default();
        m.push(waiter(1, 1, &["x", "y"]));
        m.push(waiter(2, 2, &["y"]));
        m.push(waiter(3, 3, &["z"]));
        let taken = m.take_where(|k| k == b"y");
        let seqs: Vec<usize> = taken.iter().map(|(_, w)| w.seq).collect();
        assert_eq!(seqs, vec![1, 2]);
        assert!(taken.iter().all(|(id, _)| id.1 == b"y"));
        assert_eq!(m.len(), 1);
        assert!(m.keys() == vec![id("z")]);
    }

    use proptest::prelude::*;

    proptest! {
        /// Whatever the waiters and their keys, the oldest multi-key waiter
        /// is eligible, two eligible waiters share no key, and a key is
        /// reserved for the oldest waiter on it.
        #[test]
        fn the_oldest_is_always_eligible_and_eligible_ones_share_no_key(
            sets in prop::collection::vec(prop::collection::btree_set(0u8..6, 1..4), 1..12),
            gone in prop::collection::vec(any::<bool>(), 12),
        ) {
            let mut m = Multi::default();
            for (i, keys) in sets.iter().enumerate() {
                let names: Vec<String> = keys.iter().map(|k| k.to_string()).collect();
                let names: Vec<&str> = names.iter().map(String::as_str).collect();
                m.push(waiter(i as u32, i + 1, &names));
            }
            for (i, g) in gone.iter().enumerate().take(sets.len()) {
                if *g && i % 3 == 0 {
                    m.remove(i + 1);
                }
            }
            if let Some(&oldest) = m.waiters.keys().next() {
                prop_assert!(m.eligible(oldest));
            }
            let eligible: Vec<usize> = m.waiters.keys().copied().filter(|&s| m.eligible(s)).collect();
            for (i, a) in eligible.iter().enumerate() {
                for b in eligible.iter().skip(i + 1) {
                    let ka = &m.waiters[a].keys;
                    prop_assert!(m.waiters[b].keys.iter().all(|k| !ka.contains(k)));
                }
            }
            for (key, set) in &m.on_key {
                prop_assert_eq!(m.reserved_for(key), set.first().copied());
                // The counts per group, against a walk of the key's waiters.
                let mut walked: BTreeMap<Option<GroupName>, usize> = BTreeMap::new();
                for w in set.iter().filter_map(|seq| m.waiters.get(seq)) {
                    let at = w.keys.iter().position(|k| k == key);
                    *walked.entry(at.and_then(|i| w.groups.get(i).cloned()).flatten()).or_default() += 1;
                }
                prop_assert_eq!(m.by_group_on(key), walked.into_iter().collect::<Vec<_>>());
            }
            prop_assert_eq!(m.groups_on.len(), m.on_key.len());
        }
    }

    /// The serving loop as `waiting.rs` runs it (a key's single-key waiters
    /// before its reservation, then the multi-key waiter it is reserved
    /// for, whose other keys' earlier waiters go first; a grant moves the
    /// reservation and serves its keys again), over this bookkeeping and
    /// keys of a fixed capacity.
    struct Model {
        room: Vec<usize>,
        singles: Vec<BTreeMap<usize, ()>>,
        multi: Multi<u32>,
        next: usize,
        /// (seq, key) of every grant made, in order.
        grants: Vec<(usize, usize)>,
    }

    impl Model {
        fn id(k: usize) -> KeyId {
            (0, vec![b'a' + k as u8])
        }

        fn serve_queue(&mut self, k: usize) {
            let bound = self.multi.reserved_for(&Self::id(k)).unwrap_or(usize::MAX);
            let seqs: Vec<usize> = self.singles[k].range(..bound).map(|(s, _)| *s).collect();
            for seq in seqs {
                if self.room[k] > 0 {
                    self.room[k] -= 1;
                    self.singles[k].remove(&seq);
                    self.grants.push((seq, k));
                }
            }
        }

        fn serve(&mut self, k: usize) {
            let mut todo = vec![k];
            while let Some(k) = todo.pop() {
                loop {
                    self.serve_queue(k);
                    let Some(seq) = self.multi.reserved_for(&Self::id(k)) else {
                        break;
                    };
                    if !self.multi.eligible(seq) {
                        break;
                    }
                    let keys: Vec<usize> = self.multi.waiters[&seq]
                        .keys
                        .iter()
                        .map(|(_, name)| usize::from(name[0] - b'a'))
                        .collect();
                    for &other in keys.iter().filter(|&&o| o != k) {
                        self.serve_queue(other);
                    }
                    if keys.iter().all(|&o| self.room[o] > 0) {
                        for &o in &keys {
                            self.room[o] -= 1;
                            self.grants.push((seq, o));
                        }
                        self.multi.remove(seq);
                        todo.extend(keys.into_iter().filter(|&o| o != k));
                    } else {
                        break;
                    }
                }
            }
        }

        fn waits_on(&self, k: usize) -> bool {
            !self.singles[k].is_empty() || self.multi.waiting_on(&Self::id(k)) > 0
        }
    }

    #[derive(Debug, Clone)]
    enum Event {
        Single(usize),
        Multi(u8),
        Release(usize),
        GiveUp(usize),
    }

    fn event() -> impl Strategy<Value = Event> {
        prop_oneof![
            3 => (0usize..3).prop_map(Event::Single),
            2 => (1u8..8).prop_map(Event::Multi),
            4 => (0usize..3).prop_map(Event::Release),
            1 => (0usize..40).prop_map(Event::GiveUp),
        ]
    }

    proptest! {
        /// Under the serving rule, with single- and multi-key callers
        /// contending: no key is ever over its capacity; once a multi-key
        /// waiter may be tried (the oldest multi-key waiter on each of its
        /// keys) nothing that came after it is granted any of its keys
        /// until it is served or gone; and after every event no such
        /// waiter is left waiting while all its keys have room.
        #[test]
        fn the_reserved_waiter_is_not_overtaken_and_never_left_with_room(
            caps in [1usize..3, 1usize..3, 1usize..3],
            events in prop::collection::vec(event(), 1..120),
        ) {
            let mut m = Model {
                room: caps.to_vec(),
                singles: vec![BTreeMap::new(), BTreeMap::new(), BTreeMap::new()],
                multi: Multi::default(),
                next: 0,
                grants: Vec::new(),
            };
            // Holds taken, per key, to be released later.
            let mut held: Vec<usize> = vec![0; 3];
            for event in events {
                let protected: Vec<(usize, Vec<usize>)> = m
                    .multi
                    .waiters
                    .keys()
                    .copied()
                    .filter(|&s| m.multi.eligible(s))
                    .map(|s| {
                        let keys = m.multi.waiters[&s].keys.iter().map(|(_, n)| usize::from(n[0] - b'a')).collect();
                        (s, keys)
                    })
                    .collect();
                let granted_before = m.grants.len();
                m.next += 1;
                let seq = m.next;
                match event {
                    Event::Single(k) => {
                        if !m.waits_on(k) && m.room[k] > 0 {
                            m.room[k] -= 1;
                            m.grants.push((seq, k));
                        } else {
                            m.singles[k].insert(seq, ());
                        }
                    }
                    Event::Multi(mask) => {
                        let keys: Vec<usize> = (0..3).filter(|k| mask & (1 << k) != 0).collect();
                        if keys.iter().all(|&k| !m.waits_on(k) && m.room[k] > 0) {
                            for &k in &keys {
                                m.room[k] -= 1;
                                m.grants.push((seq, k));
                            }
                        } else {
                            let names: Vec<String> = keys.iter().map(|&k| ((b'a' + k as u8) as char).to_string()).collect();
                            let names: Vec<&str> = names.iter().map(String::as_str).collect();
                            m.multi.push(waiter(seq as u32, seq, &names));
                        }
                    }
                    Event::Release(k) => {
                        if held[k] > 0 {
                            held[k] -= 1;
                            m.room[k] += 1;
                            m.serve(k);
                        }
                    }
                    Event::GiveUp(i) => {
                        if let Some(&s) = m.multi.waiters.keys().nth(i % m.multi.len().max(1)) {
                            let gone = m.multi.remove(s).map(|w| w.keys).unwrap_or_default();
                            for (_, name) in gone {
                                m.serve(usize::from(name[0] - b'a'));
                            }
                        }
                    }
                }
                for &(_, k) in &m.grants[granted_before..] {
                    held[k] += 1;
                }
                for (k, cap) in caps.iter().enumerate() {
                    prop_assert!(held[k] <= *cap, "key {} over its capacity", k);
                }
                for (s, keys) in &protected {
                    let served = !m.multi.waiters.contains_key(s);
                    for &(by, k) in &m.grants[granted_before..] {
                        if keys.contains(&k) && by > *s {
                            // Only once it was served (earlier in this event).
                            prop_assert!(served, "{} overtaken on key {} by {}", s, k, by);
                        }
                    }
                }
                for (&s, w) in &m.multi.waiters {
                    if m.multi.eligible(s) {
                        let keys: Vec<usize> = w.keys.iter().map(|(_, n)| usize::from(n[0] - b'a')).collect();
                        prop_assert!(
                            !keys.iter().all(|&k| m.room[k] > 0),
                            "waiter {} left waiting with room on {:?}", s, keys
                        );
                    }
                }
            }
        }
    }
}
