//! The decisions of LOCK and of `finish`, driven with plain values: no
//! server, a recorder for the tokens and counters.

use proptest::prelude::*;

use super::*;
use crate::engine::RateLimit;

const NOW: i64 = 1_700_000_000_000;

/// Tokens counting up from 100, and every counter counted, in order.
#[derive(Default)]
struct Recorder {
    last_token: i64,
    tokens_drawn: usize,
    counted: Vec<(Option<String>, Event)>,
}

impl Outside for Recorder {
    fn next_token(&mut self, _now: i64) -> i64 {
        self.tokens_drawn += 1;
        self.last_token = self.last_token.max(100) + 1;
        self.last_token
    }

    fn count(&mut self, _now: i64, lock_type: Option<&str>, event: Event) {
        self.counted.push((lock_type.map(str::to_owned), event));
    }
}

impl Recorder {
    fn events(&mut self) -> Vec<Event> {
        self.counted.drain(..).map(|(_, e)| e).collect()
    }
}

fn req(jid: &str) -> LockRequest<'_> {
    LockRequest::new(jid.as_bytes())
}

#[test]
fn a_free_key_is_granted_a_new_token_counted_under_its_type() {
    let (mut lock, mut out) = (Lock::default(), Recorder::default());
    let r = LockRequest {
        lock_type: Some("until_executed"),
        ..req("a")
    };
    let d = decide_lock(&mut lock, &r, NOW, false, &mut out);
    assert_eq!(d.attempt, Attempt::Granted(101));
    assert_eq!(d.expired, 0);
    assert_eq!(
        d.change,
        Change::Hold {
            jid: b"a",
            new: true,
            spent_rate: false,
            downgraded: false
        }
    );
    assert_eq!(
        out.counted,
        [(Some("until_executed".to_owned()), Event::Acquired)]
    );
    let effects = d
        .change
        .effects(d.expired)
        .expect("a grant changes the key");
    assert_eq!(
        effects,
        Effects {
            replicate: Replicate::Hold {
                jid: b"a",
                rate: false
            },
            expire_event: false,
            event: Some(events::LOCK),
            serve_waiters: false,
        }
    );
}

#[test]
fn the_waiters_ahead_are_asked_only_about_a_call_the_key_admits() {
    let (mut lock, mut out) = (Lock::default(), Recorder::default());
    decide_lock(&mut lock, &req("a"), NOW, false, &mut out);
    let asked = std::cell::Cell::new(0);
    let (waiters_first, none_first) = (
        |_: &Lock| {
            asked.set(asked.get() + 1);
            true
        },
        |_: &Lock| {
            asked.set(asked.get() + 1);
            false
        },
    );
    // The key is full at LIMIT 1, and "a" renews: nobody needs asking.
    let full = decide_lock(
        &mut lock,
        &req("b"),
        NOW,
        Ahead::Depends(&waiters_first),
        &mut out,
    );
    let renewal = decide_lock(
        &mut lock,
        &req("a"),
        NOW,
        Ahead::Depends(&waiters_first),
        &mut out,
    );
    assert!(matches!(
        full.attempt,
        Attempt::Denied { full: Some(1), .. }
    ));
    assert_eq!(renewal.attempt, Attempt::Granted(101));
    assert_eq!(asked.get(), 0);
    // At LIMIT 3 the key admits "b": the waiters decide.
    let roomy = LockRequest {
        limit: 3,
        ..req("b")
    };
    let held = decide_lock(
        &mut lock,
        &roomy,
        NOW,
        Ahead::Depends(&waiters_first),
        &mut out,
    );
    assert!(matches!(held.attempt, Attempt::Denied { full: None, .. }));
    let granted = decide_lock(
        &mut lock,
        &roomy,
        NOW,
        Ahead::Depends(&none_first),
        &mut out,
    );
    assert_eq!(granted.attempt, Attempt::Granted(102));
    assert_eq!(asked.get(), 2);
}

#[test]
fn a_renewal_keeps_its_token_and_announces_nothing() {
    let (mut lock, mut out) = (Lock::default(), Recorder::default());
    decide_lock(&mut lock, &req("a"), NOW, false, &mut out);
    out.counted.clear();
    let d = decide_lock(&mut lock, &req("a"), NOW + 5, true, &mut out);
    assert_eq!(
        d.attempt,
        Attempt::Granted(101),
        "queued: a holder still renews"
    );
    assert_eq!(out.tokens_drawn, 1, "a renewal draws no token");
    assert_eq!(out.events(), [Event::Renewed]);
    let effects = d.change.effects(0).expect("a renewal is replicated");
    assert_eq!(effects.event, None);
    assert!(!effects.serve_waiters);
}

#[test]
fn a_full_lock_denies_until_its_earliest_lease_and_draws_no_token() {
    let (mut lock, mut out) = (Lock::default(), Recorder::default());
    let lease = |jid, at| LockRequest {
        limit: 2,
        expires_at: Some(at),
        ..req(jid)
    };
    decide_lock(&mut lock, &lease("a", NOW + 300), NOW, false, &mut out);
    decide_lock(&mut lock, &lease("b", NOW + 100), NOW, false, &mut out);
    out.counted.clear();
    let d = decide_lock(&mut lock, &lease("c", NOW + 50), NOW, false, &mut out);
    assert_eq!(
        d.attempt,
        Attempt::Denied {
            lease_end: Some(NOW + 100),
            rate_limited: false,
            holds: false,
            full: Some(2),
        }
    );
    assert_eq!(out.tokens_drawn, 2);
    assert!(out.counted.is_empty(), "the caller counts a denial");
    assert_eq!(d.change, Change::PruneOnly);
    assert_eq!(
        d.change.effects(0),
        None,
        "nothing changed: nothing follows"
    );
}

#[test]
fn a_newcomer_queues_behind_waiting_clients_even_on_a_free_key() {
    let (mut lock, mut out) = (Lock::default(), Recorder::default());
    let d = decide_lock(&mut lock, &req("a"), NOW, true, &mut out);
    assert_eq!(
        d.attempt,
        Attempt::Denied {
            lease_end: None,
            rate_limited: false,
            holds: false,
            full: None,
        }
    );
    assert!(lock.is_empty(), "no holder, no rate: the key is not stored");
    assert_eq!(out.tokens_drawn, 0);
}

#[test]
fn ended_leases_are_counted_under_their_type_and_serve_the_waiters() {
    let (mut lock, mut out) = (Lock::default(), Recorder::default());
    let r = LockRequest {
        limit: 0,
        expires_at: Some(NOW + 10),
        lock_type: Some("my:type"),
        ..req("a")
    };
    decide_lock(&mut lock, &r, NOW, false, &mut out);
    out.counted.clear();
    // Queued behind waiters, "b" is denied, but the prune freed a slot.
    let d = decide_lock(&mut lock, &req("b"), NOW + 10, true, &mut out);
    assert_eq!(d.expired, 1);
    assert_eq!(out.counted, [(Some("my:type".to_owned()), Event::Expired)]);
    assert_eq!(
        d.change.effects(d.expired),
        Some(Effects {
            replicate: Replicate::Effect(ApplyOp::PruneOnly, None),
            expire_event: true,
            event: None,
            serve_waiters: true,
        })
    );
}

#[test]
fn a_rate_denial_says_when_the_rate_allows_and_is_counted_twice() {
    let (mut lock, mut out) = (Lock::default(), Recorder::default());
    let rate = RateLimit::new(1, 1000, 0);
    let rated = |jid| LockRequest {
        limit: 0,
        rate,
        ..req(jid)
    };
    let d = decide_lock(&mut lock, &rated("a"), NOW, false, &mut out);
    assert!(matches!(
        d.change,
        Change::Hold {
            spent_rate: true,
            ..
        }
    ));
    assert!(matches!(
        d.change.effects(0).map(|e| e.replicate),
        Some(Replicate::Hold { rate: true, .. })
    ));
    let d = decide_lock(&mut lock, &rated("b"), NOW + 1, false, &mut out);
    assert_eq!(
        d.attempt,
        Attempt::Denied {
            lease_end: Some(NOW + 1000),
            rate_limited: true,
            holds: false,
            full: None,
        }
    );
    out.counted.clear();
    count_denial(&mut out, NOW, "lock", true);
    assert_eq!(out.events(), [Event::Denied, Event::RateDenied]);
    count_denial(&mut out, NOW, "lock", false);
    assert_eq!(out.events(), [Event::Denied]);
}

#[test]
fn what_follows_each_change() {
    let effects = |change: Change<'static>, expired| change.effects(expired);
    let release = effects(Change::Release(b"j"), 0).expect("a release");
    assert_eq!(
        release.replicate,
        Replicate::Effect(ApplyOp::Release, Some(&b"j"[..]))
    );
    assert_eq!(release.event, Some(events::UNLOCK));
    assert!(release.serve_waiters && !release.expire_event);
    let reap = effects(Change::Reap(b"w"), 2).expect("a reap");
    assert_eq!(
        reap.replicate,
        Replicate::Effect(ApplyOp::ReapOwner, Some(&b"w"[..]))
    );
    assert_eq!(reap.event, Some(events::REAP));
    assert!(reap.serve_waiters && reap.expire_event);
    // A replica replays: verbatim, its own event only, nobody served.
    for expired in [0, 3] {
        let replayed = effects(Change::Replayed(Some(events::LOCK)), expired)
            .expect("a replayed effect always follows through");
        assert_eq!(replayed.replicate, Replicate::Verbatim);
        assert_eq!(replayed.event, Some(events::LOCK));
        assert!(!replayed.serve_waiters && !replayed.expire_event);
    }
    assert!(effects(Change::Replayed(None), 0).is_some());
    assert_eq!(effects(Change::PruneOnly, 0), None);
}

/// One LOCK of a random sequence: a jid of a few, a limit, a lease, a rate,
/// waiters ahead or not, and time passing.
#[derive(Debug, Clone)]
struct Call {
    jid: u8,
    limit: u32,
    ttl: Option<i64>,
    rated: bool,
    queued: bool,
    advance: i64,
}

fn call() -> impl Strategy<Value = Call> {
    (
        0u8..6,
        prop_oneof![Just(0u32), 1u32..4],
        prop::option::of(1i64..40),
        any::<bool>(),
        any::<bool>(),
        0i64..20,
    )
        .prop_map(|(jid, limit, ttl, rated, queued, advance)| Call {
            jid,
            limit,
            ttl,
            rated,
            queued,
            advance,
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(500))]

    /// Whatever the sequence: a token is drawn for a new grant only, each
    /// outcome is counted once under the holder's type, every ended lease is
    /// counted, a newcomer never passes the queue, and the waiters are served
    /// exactly when a lease ended.
    #[test]
    fn every_lock_decision_keeps_its_promises(calls in prop::collection::vec(call(), 1..80)) {
        let (mut lock, mut out) = (Lock::default(), Recorder::default());
        let mut now = NOW;
        for c in calls {
            now += c.advance;
            let jid = [b'j', c.jid];
            let ending = lock.holders().filter(|h| !h.is_live(now)).count();
            let held = lock.holders().any(|h| h.jid() == jid && h.is_live(now));
            let drawn = out.tokens_drawn;
            let r = LockRequest {
                limit: c.limit,
                expires_at: c.ttl.map(|t| now + t),
                rate: c.rated.then(|| RateLimit::new(2, 30, 0)).flatten(),
                ..LockRequest::new(&jid)
            };
            let d = decide_lock(&mut lock, &r, now, c.queued, &mut out);
            let counted = std::mem::take(&mut out.counted);
            let expired = counted.iter().filter(|(_, e)| *e == Event::Expired).count();
            prop_assert_eq!(d.expired, ending);
            prop_assert_eq!(expired, ending);
            let outcomes: Vec<_> = counted.iter().filter(|(_, e)| *e != Event::Expired).collect();
            match (d.attempt, d.change) {
                (Attempt::Granted(t), Change::Hold { new: true, spent_rate, .. }) => {
                    prop_assert!(!held && !c.queued, "a newcomer waits its turn");
                    prop_assert_eq!(out.tokens_drawn, drawn + 1);
                    prop_assert_eq!(t, out.last_token);
                    prop_assert_eq!(spent_rate, c.rated);
                    let holder_type = lock.holder(&jid).map(|h| h.lock_type().to_owned());
                    prop_assert_eq!(outcomes, [&(holder_type, Event::Acquired)]);
                }
                (Attempt::Granted(t), Change::Hold { new: false, spent_rate, .. }) => {
                    prop_assert!(held && !spent_rate);
                    prop_assert_eq!(out.tokens_drawn, drawn);
                    prop_assert_eq!(lock.holder(&jid).map(|h| h.token()), Some(t));
                    prop_assert_eq!(outcomes.len(), 1);
                    prop_assert_eq!(outcomes[0].1, Event::Renewed);
                }
                (Attempt::Denied { lease_end, rate_limited, .. }, Change::PruneOnly) => {
                    prop_assert!(!held);
                    prop_assert_eq!(out.tokens_drawn, drawn);
                    prop_assert!(outcomes.is_empty());
                    if rate_limited {
                        prop_assert!(c.rated && lease_end.is_some_and(|at| at > now));
                    } else {
                        prop_assert_eq!(lease_end, lock.earliest_lease());
                    }
                }
                other => prop_assert!(false, "an impossible decision: {:?}", other),
            }
            let effects = d.change.effects(d.expired);
            prop_assert_eq!(effects.is_none(), d.change == Change::PruneOnly && ending == 0);
            if let Some(effects) = effects {
                prop_assert_eq!(effects.serve_waiters, ending > 0);
                prop_assert_eq!(effects.expire_event, ending > 0);
            }
            prop_assert!(lock.holders().all(|h| h.is_live(now)), "pruned first");
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    /// A LOCK on a key that does not exist decides, counts and stores exactly
    /// what the general decision does on an empty lock.
    #[test]
    fn a_new_key_is_decided_as_an_empty_lock(
        c in call(),
        typed in any::<bool>(),
        grouped in any::<bool>(),
        mode in prop::option::of(prop_oneof![Just(Mode::Shared), Just(Mode::Exclusive)]),
        burst in 0i64..3,
    ) {
        let jid = [b'j', c.jid];
        let r = LockRequest {
            limit: c.limit,
            expires_at: c.ttl.map(|t| NOW + t),
            lock_type: typed.then_some("until_executed"),
            owner: typed.then_some(&b"w1"[..]),
            rate: c.rated.then(|| RateLimit::new(2, 30, burst)).flatten(),
            group: grouped.then_some(&b"g"[..]),
            group_limit: grouped.then_some(1),
            mode,
            ..LockRequest::new(&jid)
        };
        let (mut general, mut out_general) = (Lock::default(), Recorder::default());
        let expected = decide_lock(&mut general, &r, NOW, c.queued, &mut out_general);
        let mut out = Recorder::default();
        let (decision, lock) = decide_new_key(&r, NOW, c.queued, &mut out);
        prop_assert_eq!(decision, expected);
        prop_assert_eq!(out.counted, out_general.counted);
        prop_assert_eq!(out.tokens_drawn, out_general.tokens_drawn);
        match lock {
            Some(lock) => prop_assert_eq!(lock, general),
            None => prop_assert!(general.is_done(NOW) && !matches!(decision.attempt, Attempt::Granted(_))),
        }
    }
}
