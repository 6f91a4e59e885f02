//! LOCKALL's decision with plain values: every key or none, one rule with
//! LOCK, and random sequences against a model.

use proptest::prelude::*;

use super::*;
use crate::engine::{LockError, Mode, RateLimit};

const NOW: i64 = 1_700_000_000_000;

/// Tokens counting up from 100, and the counters counted.
#[derive(Default)]
struct Recorder {
    last_token: i64,
    counted: Vec<Event>,
}

impl Outside for Recorder {
    fn next_token(&mut self, now: i64) -> i64 {
        self.last_token = crate::fencing::next_after(self.last_token, now);
        self.last_token
    }

    fn count(&mut self, _now: i64, _lock_type: Option<&str>, event: Event) {
        self.counted.push(event);
    }
}

fn reqs<'a>(jid: &'a str, limits: &[u32]) -> Vec<LockRequest<'a>> {
    limits
        .iter()
        .map(|&limit| LockRequest {
            limit,
            ..LockRequest::new(jid.as_bytes())
        })
        .collect()
}

fn decide(
    locks: &mut [Lock],
    reqs: &[LockRequest<'_>],
    now: i64,
    out: &mut Recorder,
) -> AllDecision {
    let mut refs: Vec<&mut Lock> = locks.iter_mut().collect();
    let queued = vec![false; refs.len()];
    decide_all(&mut refs, reqs, now, &queued, out)
}

fn jids(lock: &Lock) -> Vec<Vec<u8>> {
    lock.holders().map(|h| h.jid().to_vec()).collect()
}

#[test]
fn free_keys_are_granted_together_with_one_token() {
    let mut locks = vec![Lock::default(), Lock::default()];
    let mut out = Recorder::default();
    let d = decide(&mut locks, &reqs("j", &[1, 1]), NOW, &mut out);
    let AllAttempt::Granted(grants) = d.attempt else {
        panic!("refused: {d:?}");
    };
    assert_eq!(grants.len(), 2);
    assert!(grants.iter().all(|g| g.new && g.token == grants[0].token));
    assert_eq!(out.counted, vec![Event::Acquired, Event::Acquired]);
    assert!(locks.iter().all(|l| jids(l) == vec![b"j".to_vec()]));
}

#[test]
fn one_full_key_refuses_the_whole_call_and_changes_nothing() {
    let mut locks = vec![Lock::default(), Lock::default(), Lock::default()];
    let mut out = Recorder::default();
    // The third key is held by someone else, with a lease.
    let other = LockRequest {
        expires_at: Some(NOW + 500),
        ..LockRequest::new(b"other")
    };
    locks[2].acquire(&other, NOW, || 1);
    let before = locks.clone();
    let d = decide(&mut locks, &reqs("j", &[1, 1, 1]), NOW, &mut out);
    assert_eq!(
        d.attempt,
        AllAttempt::Denied(Refusal {
            key: 2,
            lease_end: Some(NOW + 500),
            rate_limited: false,
            partial: false,
            upgrade: false,
            error: None
        })
    );
    assert_eq!(locks, before);
    assert!(out.counted.is_empty());
    // With room on the third key (its LIMIT 2), all three are granted.
    let d = decide(&mut locks, &reqs("j", &[1, 1, 2]), NOW, &mut out);
    assert!(matches!(d.attempt, AllAttempt::Granted(_)));
}

#[test]
fn a_rate_is_spent_only_when_every_key_grants() {
    let rate = RateLimit::new(1, 1000, 0);
    let mut locks = vec![Lock::default(), Lock::default()];
    locks[1].acquire(&LockRequest::new(b"other"), NOW, || 1);
    let mut out = Recorder::default();
    let mut r = reqs("j", &[1, 1]);
    r[0].rate = rate;
    let d = decide(&mut locks, &r, NOW, &mut out);
    assert!(matches!(d.attempt, AllAttempt::Denied(_)));
    assert_eq!(locks[0].rate(), None, "a refused call spends no rate");
    locks[1].release(b"other");
    let d = decide(&mut locks, &r, NOW, &mut out);
    let AllAttempt::Granted(grants) = d.attempt else {
        panic!("refused: {d:?}");
    };
    assert!(grants[0].spent_rate && !grants[1].spent_rate);
    assert!(locks[0].rate().is_some());
    // The rate now refuses the next grant at once, whatever the room.
    let d = decide(
        &mut locks,
        &reqs("k", &[2, 2])
            .into_iter()
            .zip([rate, None])
            .map(|(r, rate)| LockRequest { rate, ..r })
            .collect::<Vec<_>>(),
        NOW,
        &mut out,
    );
    let AllAttempt::Denied(refusal) = d.attempt else {
        panic!("granted: {d:?}");
    };
    assert!(refusal.rate_limited && refusal.key == 0);
    assert_eq!(refusal.lease_end, Some(NOW + 1000));
}

#[test]
fn a_renewal_renews_every_key_and_keeps_each_token() {
    let mut locks = vec![Lock::default(), Lock::default()];
    locks[1].acquire(&LockRequest::new(b"first"), NOW - 5, || 7);
    let mut out = Recorder::default();
    let granted = decide(&mut locks, &reqs("j", &[1, 2]), NOW, &mut out);
    let AllAttempt::Granted(first) = granted.attempt else {
        panic!("refused");
    };
    out.counted.clear();
    let mut r = reqs("j", &[1, 1]); // the second key is full for a newcomer: a renewal passes
    for r in &mut r {
        r.expires_at = Some(NOW + 10_000);
    }
    let d = decide(&mut locks, &r, NOW + 1, &mut out);
    let AllAttempt::Granted(renewed) = d.attempt else {
        panic!("refused: {d:?}");
    };
    assert_eq!(
        renewed.iter().map(|g| g.token).collect::<Vec<_>>(),
        first.iter().map(|g| g.token).collect::<Vec<_>>()
    );
    assert!(renewed.iter().all(|g| !g.new));
    assert_eq!(out.counted, vec![Event::Renewed, Event::Renewed]);
    for lock in &locks {
        assert_eq!(
            lock.holder(b"j").and_then(Holder::expires_at),
            Some(NOW + 10_000)
        );
    }
}

#[test]
fn a_partial_renewal_is_refused_and_changes_nothing() {
    let mut locks = vec![Lock::default(), Lock::default()];
    let mut out = Recorder::default();
    let mut r = reqs("j", &[1, 1]);
    r[1].expires_at = Some(NOW + 10);
    let AllAttempt::Granted(_) = decide(&mut locks, &r, NOW, &mut out).attempt else {
        panic!("refused");
    };
    // The hold on the second key ran out (with room for it again).
    let before: Vec<Lock> = locks
        .iter()
        .cloned()
        .map(|mut l| {
            l.prune(NOW + 20);
            l
        })
        .collect();
    let d = decide(&mut locks, &reqs("j", &[1, 1]), NOW + 20, &mut out);
    assert_eq!(d.expired, vec![0, 1]);
    assert_eq!(
        d.attempt,
        AllAttempt::Denied(Refusal {
            key: 1,
            lease_end: None,
            rate_limited: false,
            partial: true,
            upgrade: false,
            error: None
        })
    );
    assert_eq!(locks, before);
}

#[test]
fn waiters_ahead_refuse_a_new_hold_but_not_a_renewal() {
    let mut locks = [Lock::default(), Lock::default()];
    let mut out = Recorder::default();
    let r = reqs("j", &[0, 0]);
    let mut refs: Vec<&mut Lock> = locks.iter_mut().collect();
    let d = decide_all(&mut refs, &r, NOW, &[false, true], &mut out);
    assert!(matches!(
        d.attempt,
        AllAttempt::Denied(Refusal { key: 1, .. })
    ));
    assert!(locks.iter().all(|l| l.holders().next().is_none()));
    let mut refs: Vec<&mut Lock> = locks.iter_mut().collect();
    assert!(matches!(
        decide_all(&mut refs, &r, NOW, &[false, false], &mut out).attempt,
        AllAttempt::Granted(_)
    ));
    let mut refs: Vec<&mut Lock> = locks.iter_mut().collect();
    assert!(matches!(
        decide_all(&mut refs, &r, NOW, &[true, true], &mut out).attempt,
        AllAttempt::Granted(_)
    ));
}

/// One step of a random sequence on three keys.
#[derive(Debug, Clone)]
enum Step {
    /// LOCKALL of the keys picked by the mask (at least one), jid, a limit
    /// per key, a TTL, a rate on the first key or not.
    All {
        mask: u8,
        jid: u8,
        limits: [u32; 3],
        ttl: i64,
        rate: bool,
    },
    /// A single-key LOCK.
    One { key: usize, jid: u8, limit: u32 },
    /// An UNLOCK of one key.
    Unlock { key: usize, jid: u8 },
    /// Time passes.
    Sleep(i64),
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        4 => (1u8..8, 0u8..4, [0u32..3, 0u32..3, 0u32..3], 1i64..50, any::<bool>())
            .prop_map(|(mask, jid, limits, ttl, rate)| Step::All { mask, jid, limits, ttl, rate }),
        2 => (0usize..3, 0u8..4, 1u32..3).prop_map(|(key, jid, limit)| Step::One { key, jid, limit }),
        2 => (0usize..3, 0u8..4).prop_map(|(key, jid)| Step::Unlock { key, jid }),
        1 => (1i64..30).prop_map(Step::Sleep),
    ]
}

proptest! {
    /// Every LOCKALL changes every key it names or none (besides pruning),
    /// never takes a new hold past a key's LIMIT, gives its new holds one
    /// token above every token the keys had, and spends rates only on a
    /// grant.
    #[test]
    fn every_key_or_none(steps in prop::collection::vec(step(), 1..60)) {
        let mut locks = vec![Lock::default(), Lock::default(), Lock::default()];
        let mut out = Recorder::default();
        let mut now = NOW;
        for step in steps {
            match step {
                Step::All { mask, jid, limits, ttl, rate } => {
                    let jid = [b'a' + jid];
                    let picked: Vec<usize> = (0..3).filter(|i| mask & (1 << i) != 0).collect();
                    let reqs: Vec<LockRequest<'_>> = picked
                        .iter()
                        .enumerate()
                        .map(|(pos, &i)| LockRequest {
                            limit: limits[i],
                            expires_at: Some(now + ttl),
                            rate: if rate && pos == 0 { RateLimit::new(1, 20, 0) } else { None },
                            ..LockRequest::new(&jid)
                        })
                        .collect();
                    for lock in &mut locks {
                        lock.prune(now);
                    }
                    let before = locks.clone();
                    let held: Vec<bool> = picked.iter().map(|&i| locks[i].holder(&jid).is_some()).collect();
                    let max_before = picked.iter().map(|&i| locks[i].max_token()).max().unwrap_or(0);
                    let mut refs: Vec<&mut Lock> = locks
                        .iter_mut()
                        .enumerate()
                        .filter(|(i, _)| picked.contains(i))
                        .map(|(_, l)| l)
                        .collect();
                    let queued = vec![false; refs.len()];
                    let d = decide_all(&mut refs, &reqs, now, &queued, &mut out);
                    match d.attempt {
                        AllAttempt::Denied(refusal) => {
                            prop_assert_eq!(&locks, &before, "a refusal changed a key");
                            prop_assert_eq!(refusal.partial, held.iter().any(|&h| h) && !held.iter().all(|&h| h));
                        }
                        AllAttempt::Granted(grants) => {
                            prop_assert!(!held.iter().any(|&h| h) || held.iter().all(|&h| h), "a partial renewal granted");
                            let mut new_token = None;
                            for ((&i, grant), was_held) in picked.iter().zip(&grants).zip(&held) {
                                let lock = &locks[i];
                                prop_assert_eq!(lock.holder(&jid).map(|h| h.token()), Some(grant.token));
                                prop_assert_eq!(grant.new, !was_held);
                                if grant.new {
                                    prop_assert!(limits[i] == 0 || lock.len() <= limits[i] as usize);
                                    prop_assert!(grant.token > max_before);
                                    prop_assert!(*new_token.get_or_insert(grant.token) == grant.token);
                                    prop_assert_eq!(lock.len(), before[i].len() + 1);
                                } else {
                                    prop_assert_eq!(lock.len(), before[i].len());
                                }
                            }
                            // Keys not named are untouched.
                            for i in (0..3).filter(|i| !picked.contains(i)) {
                                prop_assert_eq!(&locks[i], &before[i]);
                            }
                        }
                    }
                }
                Step::One { key, jid, limit } => {
                    let jid = [b'a' + jid];
                    locks[key].prune(now);
                    let r = LockRequest { limit, expires_at: Some(now + 20), ..LockRequest::new(&jid) };
                    let token = crate::fencing::next_after(out.last_token, now);
                    if matches!(locks[key].acquire(&r, now, || token), Acquired::Granted(_)) {
                        out.last_token = token;
                    }
                }
                Step::Unlock { key, jid } => {
                    locks[key].prune(now);
                    locks[key].release(&[b'a' + jid]);
                }
                Step::Sleep(ms) => now += ms,
            }
        }
    }
}

/// A request on one key with its group, group limit and mode.
fn shared<'a>(
    jid: &'a str,
    group: Option<&'a str>,
    group_limit: Option<u32>,
    mode: Option<Mode>,
) -> LockRequest<'a> {
    LockRequest {
        limit: 0,
        group: group.map(str::as_bytes),
        group_limit,
        mode,
        ..LockRequest::new(jid.as_bytes())
    }
}

#[test]
fn a_full_group_on_one_key_refuses_the_whole_grant() {
    let mut locks = vec![Lock::default(), Lock::default()];
    let mut out = Recorder::default();
    locks[1].acquire(&shared("x", Some("acme"), Some(1), None), NOW, || 1);
    let before = locks.clone();
    let call = |jid, group| {
        vec![
            shared(jid, Some(group), Some(5), None),
            shared(jid, Some(group), Some(1), None),
        ]
    };
    let d = decide(&mut locks, &call("j", "acme"), NOW, &mut out);
    assert!(
        matches!(
            d.attempt,
            AllAttempt::Denied(Refusal {
                key: 1,
                upgrade: false,
                error: None,
                ..
            })
        ),
        "{d:?}"
    );
    assert_eq!(locks, before);
    // Another group has room on both keys.
    let d = decide(&mut locks, &call("k", "other"), NOW, &mut out);
    assert!(matches!(d.attempt, AllAttempt::Granted(_)), "{d:?}");
    for lock in &locks {
        let holder = lock.holder(b"k").expect("held");
        assert_eq!(holder.group(), Some(&b"other"[..]));
    }
}

#[test]
fn each_key_has_its_own_mode() {
    let mut locks = vec![Lock::default(), Lock::default()];
    let mut out = Recorder::default();
    let both = |jid| {
        vec![
            shared(jid, None, None, Some(Mode::Exclusive)),
            shared(jid, None, None, Some(Mode::Shared)),
        ]
    };
    let d = decide(&mut locks, &both("a"), NOW, &mut out);
    assert!(matches!(d.attempt, AllAttempt::Granted(_)));
    assert_eq!(
        locks[0].holder(b"a").and_then(Holder::mode),
        Some(Mode::Exclusive)
    );
    assert_eq!(
        locks[1].holder(b"a").and_then(Holder::mode),
        Some(Mode::Shared)
    );
    // The exclusive key refuses a second holder: nothing changes.
    let before = locks.clone();
    let d = decide(&mut locks, &both("b"), NOW, &mut out);
    assert!(matches!(
        d.attempt,
        AllAttempt::Denied(Refusal { key: 0, .. })
    ));
    assert_eq!(locks, before);
    // The shared key alone takes it.
    let mut second = [&mut locks[1]];
    let d = decide_all(
        &mut second,
        &[shared("b", None, None, Some(Mode::Shared))],
        NOW,
        &[false],
        &mut out,
    );
    assert!(matches!(d.attempt, AllAttempt::Granted(_)));
    // An upgrade the shared key cannot grant refuses the whole renewal,
    // and does not wait; a downgrade of the exclusive key is told.
    let before = locks.clone();
    let upgrade = vec![
        shared("a", None, None, Some(Mode::Shared)),
        shared("a", None, None, Some(Mode::Exclusive)),
    ];
    let d = decide(&mut locks, &upgrade, NOW, &mut out);
    let AllAttempt::Denied(refusal) = d.attempt else {
        panic!("granted: {d:?}");
    };
    assert_eq!((refusal.key, refusal.upgrade), (1, true));
    assert!(!refusal.may_wait());
    assert_eq!(locks, before, "the downgrade of key 0 was undone");
    let downgrade = vec![
        shared("a", None, None, Some(Mode::Shared)),
        shared("a", None, None, None),
    ];
    let d = decide(&mut locks, &downgrade, NOW, &mut out);
    let AllAttempt::Granted(grants) = d.attempt else {
        panic!("refused: {d:?}");
    };
    assert_eq!(
        grants.iter().map(|g| g.downgraded).collect::<Vec<_>>(),
        [true, false]
    );
}

#[test]
fn a_renewal_keeps_each_keys_group() {
    let mut locks = vec![Lock::default(), Lock::default()];
    let mut out = Recorder::default();
    let call = |g0, g1| {
        vec![
            shared("j", Some(g0), None, None),
            shared("j", Some(g1), None, None),
        ]
    };
    let d = decide(&mut locks, &call("a", "b"), NOW, &mut out);
    assert!(matches!(d.attempt, AllAttempt::Granted(_)));
    let d = decide(&mut locks, &call("a", "b"), NOW + 1, &mut out);
    assert!(matches!(d.attempt, AllAttempt::Granted(_)));
    let before = locks.clone();
    let d = decide(&mut locks, &call("a", "c"), NOW + 2, &mut out);
    let AllAttempt::Denied(refusal) = d.attempt else {
        panic!("granted: {d:?}");
    };
    assert_eq!(refusal.error, Some(LockError::GroupChanged));
    assert!(!refusal.may_wait());
    assert_eq!(locks, before);
}

proptest! {
    /// With a GROUP, GROUPLIMIT and MODE per key: every key or none, a
    /// new hold never past its group's limit nor beside an exclusive hold,
    /// and a renewal keeps each key's group.
    #[test]
    fn groups_and_modes_every_key_or_none(
        steps in prop::collection::vec(
            (0u8..4, [(0u8..3, 1u32..3, 0u8..3), (0u8..3, 1u32..3, 0u8..3)], any::<bool>()),
            1..60,
        )
    ) {
        let mut locks = vec![Lock::default(), Lock::default()];
        let mut out = Recorder::default();
        let groups = ["g0", "g1"];
        let modes = [None, Some(Mode::Shared), Some(Mode::Exclusive)];
        for (jid, keys, release) in steps {
            let jid = [b'a' + jid];
            if release {
                for lock in &mut locks {
                    lock.release(&jid);
                }
                continue;
            }
            let reqs: Vec<LockRequest<'_>> = keys
                .iter()
                .map(|&(g, m, mode)| LockRequest {
                    limit: 0,
                    group: groups.get(usize::from(g)).map(|g| g.as_bytes()),
                    group_limit: (g < 2).then_some(m),
                    mode: modes[usize::from(mode)],
                    ..LockRequest::new(&jid)
                })
                .collect();
            let before = locks.clone();
            let d = decide(&mut locks, &reqs, NOW, &mut out);
            match d.attempt {
                AllAttempt::Denied(refusal) => {
                    prop_assert_eq!(&locks, &before, "a refusal changed a key");
                    if let Some(e) = refusal.error {
                        prop_assert_eq!(e, LockError::GroupChanged);
                    }
                }
                AllAttempt::Granted(grants) => {
                    for ((lock, req), (grant, was)) in
                        locks.iter().zip(&reqs).zip(grants.iter().zip(&before))
                    {
                        let holder = lock.holder(&jid);
                        prop_assert!(holder.is_some());
                        let exclusive = lock.holders().any(Holder::is_exclusive);
                        prop_assert!(!exclusive || lock.len() == 1, "an exclusive hold shared");
                        if grant.new {
                            if let (Some(g), Some(m)) = (req.group, req.group_limit) {
                                prop_assert!(lock.group_holding(Some(g)) <= m as usize || was.is_empty());
                            }
                        } else if let Some(g) = req.group {
                            let old = was.holder(&jid).and_then(Holder::group);
                            prop_assert_eq!(old, Some(g), "a renewal changed its group");
                        }
                        prop_assert_eq!(holder.and_then(Holder::group), req.group.or_else(|| {
                            was.holder(&jid).and_then(Holder::group)
                        }));
                    }
                }
            }
        }
    }
}
