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
//! which comes at once, instead of being seen by a later retry.)
//!
//! Retried as before, whatever was denied: a call that does not say its kind
//! ([`Admission`]: a PXAT, which may have passed; a multi-key call), and a
//! waiter whose jid was granted earlier in the pass (its retry renews). A
//! jid that came to hold the key through another call while it waited is
//! renewed when it is retried: at the first pass where no waiter of its kind
//! before it is denied.

use std::collections::HashSet;

use super::queues::held_back;
use super::{Queued, Served, Share};

/// A waiter's call as far as a new hold is decided, besides its [`Share`]:
/// its jid, LIMIT and RATE (`[n, per, burst]`: this layer knows no engine).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Admission<'a> {
    pub jid: &'a [u8],
    pub limit: u32,
    pub rate: Option<[i64; 3]>,
}

/// The most kinds of denied waiter a pass remembers: a queue of that many
/// different kinds is retried as before past them.
const MOST_KINDS: usize = 32;

/// One kind of waiter: what decides its new hold, but its jid (and its
/// weight, which orders the groups and admits nothing).
#[derive(Debug, Clone, PartialEq, Eq)]
struct Kind {
    limit: u32,
    rate: Option<[i64; 3]>,
    group: Option<Box<[u8]>>,
    group_limit: Option<u32>,
    exclusive: bool,
}

impl Kind {
    fn of(a: &Admission<'_>, share: &Share) -> Self {
        Self {
            limit: a.limit,
            rate: a.rate,
            group: share.group.clone(),
            group_limit: share.group_limit,
            exclusive: share.exclusive,
        }
    }

    fn is(&self, a: &Admission<'_>, share: &Share) -> bool {
        self.limit == a.limit
            && self.rate == a.rate
            && self.exclusive == share.exclusive
            && self.group_limit == share.group_limit
            && self.group == share.group
    }
}

/// The kinds denied in one pass, each with the earliest end of lease its
/// denial gave, and the jids the pass granted.
#[derive(Default)]
pub(super) struct Denials {
    denied: Vec<(Kind, Option<i64>)>,
    granted: HashSet<Box<[u8]>>,
}

impl Denials {
    /// The denial a waiter gets without a retry (its earliest end of
    /// lease), when a waiter of its kind was denied earlier in this pass.
    pub(super) fn answer(&self, call: Option<Admission<'_>>, share: &Share) -> Option<Option<i64>> {
        if self.denied.is_empty() {
            return None;
        }
        let call = call?;
        let &(_, lease_end) = self.denied.iter().find(|(kind, _)| kind.is(&call, share))?;
        (!self.granted.contains(call.jid)).then_some(lease_end)
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
            Served::Denied { lease_end } if self.denied.len() < MOST_KINDS => {
                if !self.denied.iter().any(|(kind, _)| kind.is(&call, share)) {
                    self.denied.push((Kind::of(&call, share), lease_end));
                }
            }
            Served::Denied { .. } | Served::Failed(_) => {}
        }
    }

    /// Whether every waiter counted in `kinds` would be answered without a
    /// retry: then the pass may stop, the waiters it did not visit keeping
    /// their place (a jid granted in this pass among them included: it is
    /// renewed when next tried).
    pub(super) fn cover(&self, kinds: &Kinds) -> bool {
        self.cover_where(kinds, |_| true)
    }

    /// Whether every waiter of `group` counted in `kinds` would be answered
    /// without a retry: the pass then tries that group no more (its kinds
    /// being denied, it is not the one to take a slot, however little it
    /// holds).
    pub(super) fn cover_group(&self, kinds: &Kinds, group: &Option<Box<[u8]>>) -> bool {
        self.cover_where(kinds, |kind| kind.group == *group)
    }

    fn cover_where(&self, kinds: &Kinds, of: impl Fn(&Kind) -> bool) -> bool {
        !self.denied.is_empty()
            && kinds.unknown == 0
            && kinds
                .known
                .iter()
                .filter(|(kind, _)| of(kind))
                .all(|(kind, n)| *n == 0 || self.denied.iter().any(|(d, _)| d == kind))
    }
}

/// The kinds of the waiters of one queue, counted as they come and go, and
/// how many ask to hold alone: what lets a pass stop once every kind left is
/// denied without visiting the rest, and skip looking for exclusive waiters
/// when there are none.
#[derive(Debug, Default, Clone)]
pub(super) struct Kinds {
    /// At most [`MOST_KINDS`] kinds; an entry stays (at 0) while its queue
    /// lives, so that a waiter counted out finds the entry it was counted in.
    known: Vec<(Kind, usize)>,
    /// Waiters whose call says no kind, or past [`MOST_KINDS`] kinds.
    unknown: usize,
    /// Waiters that ask to hold alone (MODE exclusive).
    exclusive: usize,
}

impl Kinds {
    pub(super) fn add(&mut self, call: Option<Admission<'_>>, share: &Share) {
        if share.exclusive {
            self.exclusive += 1;
        }
        let Some(call) = call else {
            self.unknown += 1;
            return;
        };
        let full = self.known.len() >= MOST_KINDS;
        match self
            .known
            .iter_mut()
            .find(|(kind, _)| kind.is(&call, share))
        {
            Some((_, n)) => *n += 1,
            None if full => self.unknown += 1,
            None => self.known.push((Kind::of(&call, share), 1)),
        }
    }

    pub(super) fn remove(&mut self, call: Option<Admission<'_>>, share: &Share) {
        if share.exclusive {
            self.exclusive = self.exclusive.saturating_sub(1);
        }
        let found = call.and_then(|call| {
            self.known
                .iter_mut()
                .find(|(kind, n)| *n > 0 && kind.is(&call, share))
        });
        match found {
            Some((_, n)) => *n -= 1,
            None => self.unknown = self.unknown.saturating_sub(1),
        }
    }

    /// No waiter counted.
    #[cfg(test)]
    pub(super) fn is_empty(&self) -> bool {
        self.unknown == 0 && self.known.iter().all(|(_, n)| *n == 0)
    }

    /// Some waiter asks to hold alone.
    pub(super) fn any_exclusive(&self) -> bool {
        self.exclusive > 0
    }

    /// The waiters as a new call sees them ([`Queued`]), from the kinds
    /// alone; `None` when some waiter's kind is not known (then the queue is
    /// walked).
    pub(super) fn queued(&self) -> Option<Queued> {
        (self.unknown == 0).then(|| {
            held_back(
                self.known
                    .iter()
                    .filter(|(_, n)| *n > 0)
                    .map(|(k, _)| (&k.group, k.group_limit, k.exclusive)),
            )
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
            &Served::Denied { lease_end: Some(7) },
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
        d.record(call(b"c", 0), &share, &Served::Denied { lease_end: None });
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
        d.record(call(b"a", 1), &plain, &Served::Denied { lease_end: None });
        assert!(!d.cover(&kinds), "the group's kind is not denied");
        assert!(
            d.cover_group(&kinds, &None),
            "the waiters without a group are"
        );
        assert!(!d.cover_group(&kinds, &g.group));
        kinds.remove(call(b"c", 1), &g);
        assert!(d.cover(&kinds));
        kinds.add(None, &plain);
        assert!(!d.cover(&kinds), "a call of no kind is always retried");
        kinds.remove(None, &plain);
        kinds.remove(call(b"a", 1), &plain);
        kinds.remove(call(b"b", 1), &plain);
        assert!(kinds.is_empty());
    }

    #[test]
    fn kinds_past_the_most_count_as_unknown_in_and_out() {
        let plain = Share::default();
        let mut kinds = Kinds::default();
        for limit in 1..=(MOST_KINDS as u32 + 2) {
            kinds.add(call(b"x", limit), &plain);
        }
        assert_eq!(kinds.unknown, 2);
        let exclusive = Share {
            exclusive: true,
            ..Share::default()
        };
        kinds.add(call(b"x", 1), &exclusive);
        assert!(kinds.any_exclusive());
        kinds.remove(call(b"x", 1), &exclusive);
        assert!(!kinds.any_exclusive());
        for limit in 1..=(MOST_KINDS as u32 + 2) {
            kinds.remove(call(b"x", limit), &plain);
        }
        assert!(kinds.is_empty());
    }

    #[test]
    fn at_most_so_many_kinds_are_kept() {
        let mut d = Denials::default();
        let plain = Share::default();
        for limit in 1..=(MOST_KINDS as u32 + 5) {
            d.record(
                call(b"x", limit),
                &plain,
                &Served::Denied { lease_end: None },
            );
        }
        assert_eq!(d.denied.len(), MOST_KINDS);
        assert_eq!(d.answer(call(b"y", 1), &plain), Some(None));
        assert_eq!(d.answer(call(b"y", MOST_KINDS as u32 + 1), &plain), None);
    }
}
