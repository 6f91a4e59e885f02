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

use super::{Served, Share};
use crate::engine::RateLimit;

/// A waiter's call as far as a new hold is decided, besides its [`Share`]:
/// its jid, LIMIT and RATE.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Admission<'a> {
    pub jid: &'a [u8],
    pub limit: u32,
    pub rate: Option<RateLimit>,
}

/// The most kinds of denied waiter a pass remembers: a queue of that many
/// different kinds is retried as before past them.
const MOST_KINDS: usize = 32;

/// One kind of waiter: what decides its new hold, but its jid (and its
/// weight, which orders the groups and admits nothing).
#[derive(Debug, PartialEq, Eq)]
struct Kind {
    limit: u32,
    rate: Option<RateLimit>,
    group: Option<Box<[u8]>>,
    group_limit: Option<u32>,
    exclusive: bool,
}

impl Kind {
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
                    let kind = Kind {
                        limit: call.limit,
                        rate: call.rate,
                        group: share.group.clone(),
                        group_limit: share.group_limit,
                        exclusive: share.exclusive,
                    };
                    self.denied.push((kind, lease_end));
                }
            }
            Served::Denied { .. } | Served::Failed(_) => {}
        }
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
            rate: RateLimit::new(1, 10, 0),
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
