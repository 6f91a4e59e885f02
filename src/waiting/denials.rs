//! What one serving pass learned from its denials, so that a long queue of
//! alike waiters costs the pass one retry, not one per waiter.
//!
//! A waiter whose jid holds nothing is granted or denied by the key's state
//! and by its own LIMIT, RATE, GROUP, GROUPLIMIT and MODE alone (the
//! engine's `admits`, then the rate; its TTL, TYPE, OWNER and META play no
//! part). Within a pass the key only fills up: a retry's grant adds a holder
//! and spends the rate, and nothing else runs in between. So once a waiter
//! of one kind is denied, every later waiter of that kind would be denied
//! too, with the same earliest end of lease: it keeps its place without a
//! retry, and the wake-up armed at that end of lease starts the next pass.
//! (A lease that ends in the middle of a pass is thus left to that wake-up,
//! which comes at once, instead of being seen by a later retry.) And once a
//! waiter is denied by its LIMIT (the key holds that many or more), every
//! later waiter with a LIMIT no larger would be denied too, of whatever
//! group or kind: a queue of many tenants costs the pass one retry there,
//! not one per tenant.
//!
//! Always retried, whatever was denied: a call that does not say its kind
//! ([`Admission`]: a TTL so long that a later clock could overflow its end;
//! a multi-key call), and a
//! waiter whose jid was granted earlier in the pass (its retry renews). A
//! jid that came to hold the key through another call while it waited is
//! renewed when it is retried: at the first pass where no waiter of its kind
//! before it is denied, the key is not found full for its LIMIT, and its
//! group is not found holding the largest GROUPLIMIT its waiters gave (a
//! pass tries no such group: `serve_pass`).

use std::collections::{BTreeMap, HashMap, HashSet};

use super::types::{Admission, Served, Share, earliest, gate};
use crate::engine::{ByGroupName, GroupName};

/// What decides a waiter's new hold besides its group (and its jid, and its
/// weight, which orders the groups and admits nothing). A kind of waiter is
/// a group with these terms.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Terms {
    limit: u32,
    rate: Option<[i64; 3]>,
    group_limit: Option<u32>,
    exclusive: bool,
}

impl Terms {
    /// Whether no GROUPLIMIT holds a waiter of this kind back ([`gate`]).
    fn ungated(&self) -> bool {
        gate(self.group_limit, self.exclusive).is_none()
    }

    fn of(a: &Admission<'_>, share: &Share) -> Self {
        Self {
            limit: a.limit,
            rate: a.rate,
            group_limit: share.group_limit,
            exclusive: share.exclusive,
        }
    }
}

/// Kinds of waiter, each with a `T`: by group, found by hashing the group a
/// waiter already carries (a queue of many tenants costs no search of the
/// others), then the few terms a group's waiters give, in a list.
type ByGroup<T> = GroupMap<Vec<(Terms, T)>>;

/// A map by group, which hashes a group by the hash its name carries.
type GroupMap<V> = HashMap<Option<GroupName>, V, ByGroupName>;

fn find<'m, T>(map: &'m ByGroup<T>, group: &Option<GroupName>, terms: Terms) -> Option<&'m T> {
    map.get(group)?
        .iter()
        .find(|(t, _)| *t == terms)
        .map(|(_, v)| v)
}

/// The kinds denied in one pass, each with the earliest end of lease its
/// denial gave, how full a denial by LIMIT found the key, and the jids the
/// pass granted.
#[derive(Default)]
pub(super) struct Denials<'a> {
    denied: ByGroup<Option<i64>>,
    /// How many kinds `denied` holds.
    kinds: usize,
    /// The most live holders a denial by LIMIT found, and the earliest end
    /// of lease such denials gave: every waiter with a LIMIT no larger is
    /// denied too, whatever its group (a queue of many tenants then costs a
    /// pass one retry, not one per tenant).
    full: Option<(usize, Option<i64>)>,
    granted: HashSet<Box<[u8]>>,
    /// The groups the pass does not try (see [`Denials::pass_over`]), and
    /// how many kinds wait in them.
    passed: HashSet<&'a Option<GroupName>, ByGroupName>,
    passed_kinds: usize,
    /// What [`Denials::cover`] looks through once it must look at each
    /// kind (see [`Walk`]).
    walk: Option<Walk<'a>>,
}

/// The kinds waiting when [`Denials::cover`] first had to look at each,
/// and how many of them, from the first, it found answered. Within a pass a
/// kind once answered stays so (denials and how full the key was found only
/// grow, and a kind that stopped waiting needs no answer), so a look starts
/// where the last one stopped: a pass pays one look a kind in all, not one
/// a kind at each turn.
struct Walk<'a> {
    kinds: Vec<(&'a Option<GroupName>, Terms)>,
    answered: usize,
    /// [`Kinds::added`] when the list was taken: a kind added since (no
    /// pass adds one, but a caller may) takes a new list.
    added: u64,
    /// The kinds looked at, for the tests.
    #[cfg(test)]
    looks: usize,
}

impl<'a> Denials<'a> {
    /// The pass tries no waiter of `group` (it holds the GROUPLIMIT its
    /// waiters gave): its kinds need no denial of their own for the pass
    /// to stop, or a group passed over would keep the pass turning through
    /// every other group.
    pub(super) fn pass_over(&mut self, group: &'a Option<GroupName>, kinds: &Kinds) {
        if self.passed.insert(group) {
            self.passed_kinds += kinds.known.get(group).map_or(0, Vec::len);
        }
    }

    /// `kinds` kinds wait in groups parked before the pass (see
    /// `parked`): answered as those of a group passed over are.
    pub(super) fn parked(&mut self, kinds: usize) {
        self.passed_kinds += kinds;
    }

    /// The denial a waiter gets without a retry (its earliest end of
    /// lease), when a waiter of its kind was denied earlier in this pass,
    /// or the key was found full for its LIMIT.
    pub(super) fn answer(&self, call: Option<Admission<'_>>, share: &Share) -> Option<Option<i64>> {
        if self.kinds == 0 && self.full.is_none() {
            return None;
        }
        let call = call?;
        let lease_end = match find(&self.denied, &share.group, Terms::of(&call, share)) {
            Some(&lease_end) => lease_end,
            None => self.full.filter(|_| self.fills(call.limit))?.1,
        };
        (!self.granted.contains(call.jid)).then_some(lease_end)
    }

    /// Whether the key was found too full for a new holder of LIMIT `limit`.
    fn fills(&self, limit: u32) -> bool {
        limit != 0 && self.full.is_some_and(|(n, _)| limit as usize <= n)
    }

    /// Learns from what a retry of a waiter of this call and share gave.
    pub(super) fn record(&mut self, call: Option<Admission<'_>>, share: &Share, served: &Served) {
        let Some(call) = call else {
            return;
        };
        match *served {
            Served::Granted(_) => {
                self.granted.insert(call.jid.into());
            }
            Served::Denied { lease_end, full } => {
                if let Some(n) = full {
                    self.full = Some(match self.full {
                        Some((m, at)) => (m.max(n), earliest(at, lease_end)),
                        None => (n, lease_end),
                    });
                }
                let terms = Terms::of(&call, share);
                let list = match self.denied.get_mut(&share.group) {
                    Some(list) => list,
                    None => self.denied.entry(share.group.clone()).or_default(),
                };
                if !list.iter().any(|(t, _)| *t == terms) {
                    list.push((terms, lease_end));
                    self.kinds += 1;
                }
            }
            Served::Failed(_) | Served::Lapsed => {}
        }
    }

    /// Whether every waiter counted in `kinds` would be answered without a
    /// retry, or is of a group passed over: then the pass may stop, the
    /// waiters it did not visit keeping their place (a jid granted in this
    /// pass among them included: it is renewed when next tried).
    /// `groups`: the name of every group waiting, lent by the pass for as
    /// long as it lasts (read only if the kinds must be looked at).
    pub(super) fn cover(
        &mut self,
        kinds: &Kinds,
        groups: impl IntoIterator<Item = &'a Option<GroupName>>,
    ) -> bool {
        if kinds.has_unknown() {
            return false;
        }
        // The key full for the largest LIMIT waiting, and every kind with
        // one: all answered, without a look at each group's kinds (what a
        // pass of many tenants ends on, once a retry finds the key full).
        if let (Some((&least, _)), Some((&most, _))) = (
            kinds.limits.first_key_value(),
            kinds.limits.last_key_value(),
        ) && least != 0
            && self.fills(most)
        {
            return true;
        }
        // Each kind waiting must be one denied, or the key full for it:
        // with too few denied and the key not full, no need to look.
        let answered = self.kinds + self.passed_kinds;
        if self.full.is_none() && (self.kinds == 0 || answered < kinds.waiting) {
            return false;
        }
        let mut walk = match self.walk.take() {
            Some(walk) if walk.added == kinds.added => walk,
            _ => Walk {
                kinds: groups
                    .into_iter()
                    .filter_map(|group| Some((group, kinds.known.get(group)?)))
                    .flat_map(|(group, list)| list.iter().map(move |(t, _)| (group, *t)))
                    .collect(),
                answered: 0,
                added: kinds.added,
                #[cfg(test)]
                looks: 0,
            },
        };
        while let Some((group, terms)) = walk.kinds.get(walk.answered) {
            #[cfg(test)]
            {
                walk.looks += 1;
            }
            let answered = self.answers(group, *terms)
                || self.passed.contains(group)
                || find(&kinds.known, group, *terms).is_none();
            if !answered {
                break;
            }
            walk.answered += 1;
        }
        let covered = walk.answered == walk.kinds.len();
        self.walk = Some(walk);
        covered
    }

    /// Whether every waiter of `group` counted in `kinds` would be answered
    /// without a retry: the pass then tries that group no more (its kinds
    /// being denied, it is not the one to take a slot, however little it
    /// holds).
    pub(super) fn cover_group(&self, kinds: &Kinds, group: &Option<GroupName>) -> bool {
        (self.kinds > 0 || self.full.is_some())
            && !kinds.has_unknown()
            && kinds
                .known
                .get(group)
                .is_none_or(|list| self.cover_list(group, list))
    }

    fn cover_list(&self, group: &Option<GroupName>, list: &[(Terms, usize)]) -> bool {
        list.iter().all(|&(terms, _)| self.answers(group, terms))
    }

    /// Whether a waiter of this kind is answered without a retry: its kind
    /// was denied, or the key was found full for its LIMIT.
    fn answers(&self, group: &Option<GroupName>, terms: Terms) -> bool {
        self.fills(terms.limit) || find(&self.denied, group, terms).is_some()
    }
}

/// The kinds of the waiters of one queue, counted as they come and go: what
/// lets a pass stop once every kind left is denied without visiting the
/// rest.
#[derive(Debug, Default, Clone)]
pub(super) struct Kinds {
    /// Each kind waiting, with how many of its waiters do (never 0: a kind
    /// whose last waiter leaves is removed, so that a queue that lives long
    /// over ever new groups keeps only those that wait).
    known: ByGroup<usize>,
    /// How many kinds `known` holds.
    waiting: usize,
    /// How many of them no GROUPLIMIT holds back ([`gate`]): while there is
    /// one, a newcomer queues behind them whatever the groups hold.
    ungated: usize,
    /// How many of them give each LIMIT (0: none), never 0: the smallest
    /// and the largest waiting, for [`Denials::cover`].
    limits: BTreeMap<u32, usize>,
    /// The waiters whose call says no kind (see [`Admission`]): their
    /// GROUPLIMITs as [`gate`] reads them (`None`: nothing but the
    /// key holds such a waiter back), by group, each with how many gave
    /// it: their shares are known, so a newcomer asks them what it asks the
    /// others, without a walk of the queue.
    unknown_gates: GroupMap<Vec<(Option<u32>, usize)>>,
    /// How many of them no GROUPLIMIT holds back.
    unknown_ungated: usize,
    /// How many times a kind was added (it only grows): a list of the
    /// kinds taken at one count is all of them while the count stays.
    added: u64,
}

impl Kinds {
    pub(super) fn add(&mut self, call: Option<Admission<'_>>, share: &Share) {
        let Some(call) = call else {
            let gate = gate(share.group_limit, share.exclusive);
            self.unknown_ungated += usize::from(gate.is_none());
            let list = match self.unknown_gates.get_mut(&share.group) {
                Some(list) => list,
                None => self.unknown_gates.entry(share.group.clone()).or_default(),
            };
            match list.iter_mut().find(|(g, _)| *g == gate) {
                Some((_, n)) => *n += 1,
                None => list.push((gate, 1)),
            }
            return;
        };
        let terms = Terms::of(&call, share);
        let list = match self.known.get_mut(&share.group) {
            Some(list) => list,
            None => self.known.entry(share.group.clone()).or_default(),
        };
        match list.iter_mut().find(|(t, _)| *t == terms) {
            Some((_, n)) => *n += 1,
            None => {
                list.push((terms, 1));
                self.waiting += 1;
                self.added += 1;
                self.ungated += usize::from(terms.ungated());
                *self.limits.entry(terms.limit).or_default() += 1;
            }
        }
    }

    pub(super) fn remove(&mut self, call: Option<Admission<'_>>, share: &Share) {
        let found = call.and_then(|call| {
            let terms = Terms::of(&call, share);
            let list = self.known.get_mut(&share.group)?;
            let i = list.iter().position(|(t, _)| *t == terms)?;
            Some((list, i))
        });
        // Not found: it was counted without a kind.
        let Some((list, i)) = found else {
            self.remove_unknown(share);
            return;
        };
        if let Some((_, n)) = list.get_mut(i)
            && *n > 1
        {
            *n -= 1;
            return;
        }
        let (terms, _) = list.swap_remove(i);
        self.waiting = self.waiting.saturating_sub(1);
        self.ungated = self.ungated.saturating_sub(usize::from(terms.ungated()));
        if let Some(n) = self.limits.get_mut(&terms.limit) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                self.limits.remove(&terms.limit);
            }
        }
        if list.is_empty() {
            self.known.remove(&share.group);
        }
    }

    /// How many kinds wait in `group`.
    pub(super) fn kinds_of(&self, group: &Option<GroupName>) -> usize {
        self.known.get(group).map_or(0, Vec::len)
    }

    /// Whether some waiter's call says no kind.
    pub(super) fn has_unknown(&self) -> bool {
        !self.unknown_gates.is_empty()
    }

    fn remove_unknown(&mut self, share: &Share) {
        let gate = gate(share.group_limit, share.exclusive);
        let Some(list) = self.unknown_gates.get_mut(&share.group) else {
            return;
        };
        let Some(i) = list.iter().position(|(g, _)| *g == gate) else {
            return;
        };
        self.unknown_ungated = self
            .unknown_ungated
            .saturating_sub(usize::from(gate.is_none()));
        if let Some((_, n)) = list.get_mut(i)
            && *n > 1
        {
            *n -= 1;
            return;
        }
        list.swap_remove(i);
        if list.is_empty() {
            self.unknown_gates.remove(&share.group);
        }
    }

    /// No waiter counted.
    #[cfg(test)]
    pub(super) fn is_empty(&self) -> bool {
        self.known.is_empty()
            && self.limits.is_empty()
            && self.unknown_gates.is_empty()
            && self.unknown_ungated == 0
    }

    /// The largest GROUPLIMIT of `group`'s waiters, when a GROUPLIMIT holds
    /// back every one of them ([`gate`]) and every waiter's kind is known:
    /// a group that holds that many has no waiter to grant. `None`
    /// otherwise.
    pub(super) fn group_gate(&self, group: &Option<GroupName>) -> Option<u32> {
        if self.has_unknown() {
            return None;
        }
        self.known.get(group)?.iter().try_fold(0, |max, (t, _)| {
            gate(t.group_limit, t.exclusive).map(|m| max.max(m))
        })
    }

    /// Whether a waiter may be served before a newcomer the key admits, from
    /// the kinds (and the shares of the waiters of no kind) alone: a waiter
    /// that no GROUPLIMIT holds back, or one of `groups` (those that may
    /// have room: every group waiting but those known to hold their
    /// GROUPLIMIT) for which `room` (given the largest GROUPLIMIT its
    /// waiters gave, as [`group_limits`](super::queues::group_limits) finds
    /// it in a walk) says yes; each group asked once (twice if it has
    /// waiters of both), and only until one says yes.
    pub(super) fn hold_back<'g>(
        &self,
        groups: impl IntoIterator<Item = &'g Option<GroupName>>,
        mut room: impl FnMut(&Option<GroupName>, u32) -> bool,
    ) -> bool {
        self.ungated > 0
            || self.unknown_ungated > 0
            || groups.into_iter().any(|group| {
                self.known.get(group).is_some_and(|list| {
                    list.iter()
                        .filter_map(|(t, _)| t.group_limit)
                        .max()
                        .is_some_and(|max| room(group, max))
                })
            })
            || self.unknown_gates.iter().any(|(group, list)| {
                list.iter()
                    .filter_map(|&(g, _)| g)
                    .max()
                    .is_some_and(|max| room(group, max))
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(jid: &[u8], limit: u32) -> Option<Admission<'_>> {
        Some(Admission {
            jid,
            limit,
            rate: None,
        })
    }

    /// [`Denials::cover`], given the names of the groups as a pass lends
    /// them: a copy that lives as long as the test's `Denials` may keep it,
    /// leaked once for each list of names (a test's kinds change between
    /// the calls, but mostly not), not once a call.
    fn covers(d: &mut Denials<'static>, kinds: &Kinds) -> bool {
        thread_local! {
            static LENT: std::cell::Cell<&'static [Option<GroupName>]> =
                const { std::cell::Cell::new(&[]) };
        }
        let names: Vec<Option<GroupName>> = kinds.known.keys().cloned().collect();
        let lent = LENT.get();
        let names = if lent == names.as_slice() {
            lent
        } else {
            let leaked: &'static [Option<GroupName>] = names.leak();
            LENT.set(leaked);
            leaked
        };
        d.cover(kinds, names)
    }

    /// Tenants `t0`, `t1`, ... of GROUPLIMIT 1.
    fn tenants(n: usize) -> Vec<Share> {
        (0..n).map(|i| group(&format!("t{i}"), 1)).collect()
    }

    fn denied(lease_end: Option<i64>, full: Option<usize>) -> Served {
        Served::Denied { lease_end, full }
    }

    fn group(name: &str, limit: u32) -> Share {
        Share {
            group: Some(name.as_bytes().into()),
            group_limit: Some(limit),
            ..Share::default()
        }
    }

    #[test]
    fn a_denied_kind_answers_the_later_waiters_of_that_kind_only() {
        let mut d = Denials::default();
        let plain = Share::default();
        assert_eq!(d.answer(call(b"a", 1), &plain), None, "nothing denied yet");
        d.record(
            call(b"a", 1),
            &plain,
            &Served::Denied {
                lease_end: Some(7),
                full: None,
            },
        );
        assert_eq!(d.answer(call(b"b", 1), &plain), Some(Some(7)));
        // Another LIMIT, RATE, group, GROUPLIMIT or mode is another kind.
        assert_eq!(d.answer(call(b"b", 2), &plain), None);
        let rated = Some(Admission {
            jid: b"b",
            limit: 1,
            rate: Some([1, 10, 0]),
        });
        assert_eq!(d.answer(rated, &plain), None);
        assert_eq!(d.answer(call(b"b", 1), &group("g", 1)), None);
        let exclusive = Share {
            exclusive: true,
            ..Share::default()
        };
        assert_eq!(d.answer(call(b"b", 1), &exclusive), None);
        // The weight decides no admission.
        let heavy = Share {
            weight: 5,
            ..Share::default()
        };
        assert_eq!(d.answer(call(b"b", 1), &heavy), Some(Some(7)));
        // A call that does not say its kind is always retried.
        assert_eq!(d.answer(None, &plain), None);
    }

    #[test]
    fn a_jid_granted_in_the_pass_is_retried_and_errors_teach_nothing() {
        let mut d = Denials::default();
        let share = group("g", 2);
        d.record(call(b"a", 0), &share, &Served::Granted(1));
        d.record(call(b"b", 0), &share, &Served::Failed("ERR".into()));
        assert_eq!(d.answer(call(b"c", 0), &share), None);
        d.record(
            call(b"c", 0),
            &share,
            &Served::Denied {
                lease_end: None,
                full: None,
            },
        );
        assert_eq!(d.answer(call(b"d", 0), &share), Some(None));
        assert_eq!(d.answer(call(b"a", 0), &share), None, "its retry renews");
    }

    #[test]
    fn a_pass_is_covered_once_every_kind_waiting_is_denied() {
        let (plain, g) = (Share::default(), group("g", 1));
        let mut kinds = Kinds::default();
        kinds.add(call(b"a", 1), &plain);
        kinds.add(call(b"b", 1), &plain);
        kinds.add(call(b"c", 1), &g);
        let mut d = Denials::default();
        d.record(
            call(b"a", 1),
            &plain,
            &Served::Denied {
                lease_end: None,
                full: None,
            },
        );
        assert!(!covers(&mut d, &kinds), "the group's kind is not denied");
        assert!(
            d.cover_group(&kinds, &None),
            "the waiters without a group are"
        );
        assert!(!d.cover_group(&kinds, &g.group));
        kinds.remove(call(b"c", 1), &g);
        assert!(covers(&mut d, &kinds));
        kinds.add(None, &plain);
        assert!(
            !covers(&mut d, &kinds),
            "a call of no kind is always retried"
        );
        kinds.remove(None, &plain);
        kinds.remove(call(b"a", 1), &plain);
        kinds.remove(call(b"b", 1), &plain);
        assert!(kinds.is_empty());
    }

    #[test]
    fn any_number_of_kinds_is_counted_in_and_out() {
        let plain = Share::default();
        let mut kinds = Kinds::default();
        for limit in 1..=1000 {
            kinds.add(call(b"x", limit), &plain);
            kinds.add(call(b"y", limit), &group(&limit.to_string(), 1));
        }
        assert_eq!((kinds.has_unknown(), kinds.waiting), (false, 2000));
        let exclusive = Share {
            exclusive: true,
            ..Share::default()
        };
        kinds.add(call(b"x", 1), &exclusive);
        assert_eq!(kinds.waiting, 2001, "a kind of its own");
        kinds.remove(call(b"x", 1), &exclusive);
        assert_eq!(kinds.waiting, 2000);
        for limit in 1..=1000 {
            kinds.remove(call(b"x", limit), &plain);
            kinds.remove(call(b"y", limit), &group(&limit.to_string(), 1));
        }
        assert!(kinds.is_empty());
        assert_eq!(kinds.waiting, 0);
    }

    #[test]
    fn a_queue_of_many_groups_is_covered_once_each_group_s_kind_is_denied() {
        let mut kinds = Kinds::default();
        let groups = tenants(1000);
        for g in &groups {
            kinds.add(call(b"a", 1), g);
            kinds.add(call(b"b", 1), g);
        }
        let mut d = Denials::default();
        for (i, g) in groups.iter().enumerate() {
            assert!(
                !covers(&mut d, &kinds),
                "group {i} of 1000 is not denied yet"
            );
            assert!(!d.cover_group(&kinds, &g.group));
            assert_eq!(d.answer(call(b"b", 1), g), None);
            d.record(
                call(b"a", 1),
                g,
                &Served::Denied {
                    lease_end: Some(7),
                    full: None,
                },
            );
            assert!(d.cover_group(&kinds, &g.group));
            assert_eq!(d.answer(call(b"b", 1), g), Some(Some(7)));
        }
        assert!(covers(&mut d, &kinds));
        assert_eq!(d.answer(call(b"b", 2), &groups[0]), None, "another LIMIT");
    }

    #[test]
    fn a_denial_by_limit_answers_every_group_with_a_limit_no_larger() {
        let mut kinds = Kinds::default();
        let tenants: Vec<Share> = (0..1000).map(|i| group(&format!("t{i}"), 2)).collect();
        for (i, t) in tenants.iter().enumerate() {
            kinds.add(call(b"w", 1 + (i % 3) as u32), t);
        }
        let mut d = Denials::default();
        let full = |n| Served::Denied {
            lease_end: Some(9),
            full: Some(n),
        };
        d.record(call(b"a", 2), &tenants[0], &full(2));
        for limit in [1, 2] {
            assert_eq!(d.answer(call(b"x", limit), &tenants[5]), Some(Some(9)));
        }
        assert_eq!(
            d.answer(call(b"x", 3), &tenants[5]),
            None,
            "room for LIMIT 3"
        );
        assert_eq!(d.answer(call(b"x", 0), &tenants[5]), None, "no LIMIT");
        assert!(d.cover_group(&kinds, &tenants[0].group), "LIMIT 1");
        assert!(d.cover_group(&kinds, &tenants[1].group), "LIMIT 2");
        assert!(!d.cover_group(&kinds, &tenants[2].group), "LIMIT 3");
        assert!(!covers(&mut d, &kinds));
        // The key fills further: a later denial by LIMIT counts more holders,
        // and the earliest end of lease stays.
        d.record(
            call(b"b", 3),
            &tenants[2],
            &Served::Denied {
                lease_end: Some(20),
                full: Some(3),
            },
        );
        assert!(covers(&mut d, &kinds));
        assert_eq!(d.answer(call(b"x", 3), &tenants[7]), Some(Some(9)));
        d.record(call(b"x", 3), &tenants[7], &Served::Granted(1));
        assert_eq!(
            d.answer(call(b"x", 3), &tenants[7]),
            None,
            "its retry renews"
        );
    }

    #[test]
    fn a_pass_looks_at_each_kind_once_however_many_turns_ask_whether_all_are_denied() {
        // 1,000 tenants of LIMIT 5, the key found full for them, and one
        // tenant without a LIMIT, not denied: each turn asks.
        let mut kinds = Kinds::default();
        let tenants = tenants(1000);
        for t in &tenants {
            kinds.add(call(b"w", 5), t);
        }
        let unlimited = group("u", 1);
        kinds.add(call(b"u", 0), &unlimited);
        let mut d = Denials::default();
        d.record(call(b"a", 5), &tenants[0], &denied(None, Some(5)));
        for _ in 0..1000 {
            assert!(!covers(&mut d, &kinds), "the tenant without a LIMIT waits");
        }
        let looks = d.walk.as_ref().map_or(0, |w| w.looks);
        assert!(looks <= 1001 + 1000, "{looks} looks");
        // Its kind denied, or gone: all covered, still without a walk again.
        d.record(call(b"u", 0), &unlimited, &denied(None, None));
        assert!(covers(&mut d, &kinds));
        assert!(d.walk.as_ref().is_some_and(|w| w.looks <= looks + 1001));
        // A kind added after the list was taken is looked at too.
        kinds.add(call(b"v", 7), &unlimited);
        assert!(
            !covers(&mut d, &kinds),
            "a new kind (LIMIT 7: room), not denied"
        );
        kinds.remove(call(b"v", 7), &unlimited);
        assert!(covers(&mut d, &kinds), "gone again");
    }

    #[test]
    fn a_group_passed_over_needs_no_denial_for_the_pass_to_stop() {
        // Tenants of LIMIT 5, and one without a LIMIT at its GROUPLIMIT,
        // which the pass does not try.
        let mut kinds = Kinds::default();
        let tenants = tenants(100);
        for t in &tenants {
            kinds.add(call(b"w", 5), t);
        }
        let at_limit: &'static Share = Box::leak(Box::new(group("z", 1)));
        kinds.add(call(b"z", 0), at_limit);
        kinds.add(call(b"y", 0), at_limit);
        let mut d = Denials::default();
        d.pass_over(&at_limit.group, &kinds);
        assert!(!covers(&mut d, &kinds), "nothing denied yet");
        d.record(call(b"a", 5), &tenants[0], &denied(None, Some(5)));
        assert!(covers(&mut d, &kinds), "the key full for the rest");
        // Without the key full, each other kind must be denied.
        let mut d = Denials::default();
        d.pass_over(&at_limit.group, &kinds);
        for (i, t) in tenants.iter().enumerate() {
            assert!(!covers(&mut d, &kinds), "tenant {i} not denied yet");
            d.record(call(b"w", 5), t, &denied(None, None));
        }
        assert!(covers(&mut d, &kinds));
    }

    #[test]
    fn the_key_full_covers_every_kind_with_a_limit_and_none_without() {
        let mut kinds = Kinds::default();
        let tenants: Vec<Share> = (0..100).map(|i| group(&format!("t{i}"), 2)).collect();
        for (i, t) in tenants.iter().enumerate() {
            kinds.add(call(b"w", 1 + (i % 4) as u32), t);
        }
        let mut d = Denials::default();
        let full = |n| Served::Denied {
            lease_end: None,
            full: Some(n),
        };
        d.record(call(b"a", 3), &tenants[2], &full(3));
        assert!(!covers(&mut d, &kinds), "room for LIMIT 4");
        d.record(call(b"b", 4), &tenants[3], &full(4));
        assert!(covers(&mut d, &kinds));
        // A kind without LIMIT is answered only by its own denial.
        let unlimited = group("u", 1);
        kinds.add(call(b"c", 0), &unlimited);
        assert!(!covers(&mut d, &kinds));
        d.record(
            call(b"c", 0),
            &unlimited,
            &Served::Denied {
                lease_end: None,
                full: None,
            },
        );
        assert!(covers(&mut d, &kinds));
        kinds.remove(call(b"c", 0), &unlimited);
        for (i, t) in tenants.iter().enumerate() {
            kinds.remove(call(b"w", 1 + (i % 4) as u32), t);
        }
        assert!(kinds.is_empty(), "every LIMIT counted out");
    }
}
