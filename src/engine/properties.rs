//! Random sequences of operations against the rules of the spec.

use proptest::prelude::*;

use super::*;
use crate::codec::{self, ItemReader, Items};

/// The one RATE the sequences use (3 per 50 ms, a burst of 1), so that
/// every window of its grants can be checked against it.
const RATE: RateLimit = RateLimit {
    n: 3,
    per: 50,
    burst: 1,
};

#[derive(Debug, Clone)]
enum Op {
    Lock {
        jid: u8,
        limit: u32,
        ttl: Option<i64>,
        rated: bool,
    },
    Unlock {
        jid: u8,
    },
    Prune,
    Advance(i64),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        // Jids enough to cross the threshold of the indexed layout (LIMIT
        // 0 and 40 let them in), so that both layouts meet the same rules.
        4 => (0u8..48, prop_oneof![2 => Just(0u32), 2 => 1u32..4, 1 => Just(40)], prop::option::of(1i64..60), any::<bool>())
            .prop_map(|(jid, limit, ttl, rated)| Op::Lock { jid, limit, ttl, rated }),
        2 => (0u8..48).prop_map(|jid| Op::Unlock { jid }),
        1 => Just(Op::Prune),
        2 => (0i64..40).prop_map(Op::Advance),
    ]
}

/// Jid `n` of the sequences: a short one, or one that is kept packed (a
/// Sidekiq jid, a UUID), so that packed jids meet every rule and layout.
fn jid_name(n: u8) -> Vec<u8> {
    match n % 3 {
        0 => vec![b'j', n],
        1 => format!("{n:024x}").into_bytes(),
        _ => format!("{n:08x}-0000-4000-8000-{n:012x}").into_bytes(),
    }
}

fn live(lock: &Lock, now: i64) -> Vec<Holder> {
    lock.live_holders(now).cloned().collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(600))]

    #[test]
    fn every_sequence_keeps_every_rule(ops in prop::collection::vec(op(), 1..160)) {
        let mut lock = Lock::default();
        let mut now = 1_700_000_000_000i64;
        let (mut counter, mut last_granted) = (0i64, 0i64);
        // When each grant that gave RATE was made.
        let mut rated_grants: Vec<i64> = Vec::new();
        for op in ops {
            match op {
                Op::Lock { jid, limit, ttl, rated } => {
                    let jid = jid_name(jid);
                    lock.prune(now);
                    let before = live(&lock, now);
                    let rate_before = lock.rate().copied();
                    let held = before.iter().find(|h| h.is(&jid)).map(|h| h.token());
                    let req = LockRequest {
                        limit,
                        expires_at: ttl.map(|t| now + t),
                        rate: rated.then_some(RATE),
                        ..LockRequest::new(&jid)
                    };
                    let acquired = lock.acquire(&req, now, || { counter += 1; counter });
                    if !matches!(acquired, Acquired::Granted(_)) || !rated {
                        prop_assert_eq!(lock.rate().copied(), rate_before, "only a rated grant spends");
                    }
                    match acquired {
                        Acquired::Granted(t) => {
                            if rated {
                                rated_grants.push(now);
                                let window = rated_grants.iter().filter(|&&g| g > now - RATE.per).count();
                                prop_assert!(window as i64 <= RATE.n + RATE.burst,
                                    "{} rated grants in the {} ms before {}", window, RATE.per, now);
                            }
                            prop_assert!(held.is_none(), "a holder is renewed, not granted again");
                            prop_assert!(t > last_granted, "tokens only increase");
                            last_granted = t;
                            let after = live(&lock, now);
                            if limit > 0 {
                                prop_assert!(after.len() <= limit as usize, "more holders than LIMIT {limit}");
                            }
                            let h = lock.holder(&jid);
                            prop_assert_eq!(h.map(|h| (h.token(), h.acquired_at())), Some((t, now)));
                        }
                        Acquired::Renewed(t) => prop_assert_eq!(held, Some(t)),
                        Acquired::Denied => {
                            prop_assert!(held.is_none());
                            prop_assert!(limit > 0 && before.len() >= limit as usize);
                        }
                        Acquired::Refused(e) => prop_assert!(false, "refused: {}", e),
                        Acquired::RateLimited(at) => {
                            prop_assert!(rated && held.is_none() && at > now);
                            prop_assert!(limit == 0 || before.len() < limit as usize, "a full lock says so first");
                            let rate = lock.rate().copied();
                            prop_assert!(rate.is_some_and(|r| r.check(at).is_ok() && r.check(at - 1).is_err()));
                        }
                    }
                }
                Op::Unlock { jid } => {
                    lock.prune(now);
                    let was = live(&lock, now).iter().any(|h| *h.jid() == *jid_name(jid));
                    prop_assert_eq!(lock.release(&jid_name(jid)).is_some(), was);
                    prop_assert!(lock.holder(&jid_name(jid)).is_none());
                }
                Op::Prune => {
                    lock.prune(now);
                    prop_assert!(lock.holders().all(|h| h.is_live(now)));
                }
                Op::Advance(ms) => now += ms,
            }
            // Never shown once its lease has run out; one hold per jid;
            // oldest grant first; the key expires with the latest lease.
            prop_assert!(lock.live_holders(now).all(|h| h.expires_at().is_none_or(|at| now < at)));
            let tokens: Vec<i64> = lock.holders().map(|h| h.token()).collect();
            prop_assert!(tokens.windows(2).all(|w| w[0] < w[1]));
            let mut jids: Vec<Vec<u8>> = lock.holders().map(|h| h.jid().to_vec()).collect();
            jids.sort();
            jids.dedup();
            prop_assert_eq!(jids.len(), lock.len());
            let expiry = if lock.holders().all(|h| h.expires_at().is_some()) {
                lock.holders()
                    .filter_map(|h| h.expires_at())
                    .chain(lock.rate().map(Rate::idle_at))
                    .max()
            } else {
                None
            };
            prop_assert_eq!(lock.key_expiry(), expiry);
            if !lock.is_empty() {
                let mut items = Items::default();
                codec::encode(&lock, &mut items);
                prop_assert_eq!(codec::decode(codec::ENCODING_VERSION, &mut ItemReader::new(&items)), Ok(lock.clone()));
            }
        }
    }
}

/// A LOCK with GROUP, GROUPLIMIT and MODE (a jid's group is fixed, so
/// that its renewals name the same one).
#[derive(Debug, Clone)]
enum FairOp {
    Lock {
        jid: u8,
        limit: u32,
        group_limit: Option<u32>,
        mode: Option<Mode>,
        ttl: Option<i64>,
    },
    Unlock {
        jid: u8,
    },
    Advance(i64),
}

fn fair_op() -> impl Strategy<Value = FairOp> {
    let mode = prop::sample::select(vec![None, Some(Mode::Shared), Some(Mode::Exclusive)]);
    prop_oneof![
        // Up to 60 jids under LIMIT 0 or 50: the indexed layout (past 32)
        // and back, with its counts per group.
        5 => (0u8..60, prop_oneof![Just(0u32), Just(50), 1u32..4], prop::option::of(1u32..12), mode, prop::option::of(1i64..60))
            .prop_map(|(jid, limit, group_limit, mode, ttl)| FairOp::Lock { jid, limit, group_limit, mode, ttl }),
        2 => (0u8..60).prop_map(|jid| FairOp::Unlock { jid }),
        1 => (0i64..40).prop_map(FairOp::Advance),
    ]
}

/// The group of jid `j`: one of three, or none.
fn group_of(jid: u8) -> Option<[u8; 2]> {
    (jid % 4 != 3).then_some([b'g', jid % 4])
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]

    /// Groups and modes through random sequences, in both layouts: no grant
    /// exceeds LIMIT or its GROUPLIMIT, an exclusive holder holds alone, a
    /// renewal keeps its group, an upgrade happens only for the sole holder;
    /// the counts per group and of exclusive holders (kept by the indexed
    /// layout) equal a walk; and the lock encodes and decodes whole.
    #[test]
    fn groups_and_modes_keep_their_rules(ops in prop::collection::vec(fair_op(), 1..200)) {
        let mut lock = Lock::default();
        let mut now = 1_700_000_000_000i64;
        let mut counter = 0i64;
        for op in ops {
            match op {
                FairOp::Lock { jid, limit, group_limit, mode, ttl } => {
                    lock.prune(now);
                    let name = jid_name(jid);
                    let group = group_of(jid);
                    let before = live(&lock, now);
                    let held = lock.holder(&name).cloned();
                    let req = LockRequest {
                        limit,
                        expires_at: ttl.map(|t| now + t),
                        group: group.as_ref().map(|g| g.as_slice()),
                        group_limit: group.and(group_limit),
                        mode,
                        ..LockRequest::new(&name)
                    };
                    let acquired = lock.acquire(&req, now, || { counter += 1; counter });
                    let after = live(&lock, now);
                    let in_group = |hs: &[Holder]| hs.iter().filter(|h| h.group() == req.group).count();
                    match acquired {
                        Acquired::Granted(_) => {
                            prop_assert!(held.is_none());
                            if limit > 0 {
                                prop_assert!(after.len() <= limit as usize);
                            }
                            if let Some(m) = req.group_limit {
                                prop_assert!(in_group(&after) <= m as usize, "over GROUPLIMIT {}", m);
                            }
                            if mode == Some(Mode::Exclusive) {
                                prop_assert_eq!(after.len(), 1, "a writer alone");
                            }
                            prop_assert!(!before.iter().any(Holder::is_exclusive), "beside a writer");
                            let h = lock.holder(&name);
                            prop_assert_eq!(h.and_then(Holder::group), req.group);
                            prop_assert_eq!(h.and_then(Holder::mode), mode);
                        }
                        Acquired::Renewed(_) => {
                            let (Some(old), Some(new)) = (held.as_ref(), lock.holder(&name)) else {
                                return Err(TestCaseError::fail("a renewal of nothing"));
                            };
                            prop_assert_eq!(new.group(), old.group(), "a renewal keeps its group");
                            prop_assert_eq!(new.token(), old.token());
                            prop_assert_eq!(new.mode(), mode.or(old.mode()));
                            if mode == Some(Mode::Exclusive) && !old.is_exclusive() {
                                prop_assert_eq!(before.len(), 1, "an upgrade beside others");
                            }
                        }
                        Acquired::Denied => {
                            if let Some(old) = &held {
                                prop_assert!(mode == Some(Mode::Exclusive) && !old.is_exclusive() && before.len() > 1);
                                prop_assert_eq!(lock.holder(&name), Some(old), "a refused upgrade changes nothing");
                            } else {
                                let full = limit > 0 && before.len() >= limit as usize;
                                let capped = req.group_limit.is_some_and(|m| in_group(&before) >= m as usize);
                                let conflict = before.iter().any(Holder::is_exclusive)
                                    || (mode == Some(Mode::Exclusive) && !before.is_empty());
                                prop_assert!(full || capped || conflict, "denied for nothing");
                            }
                        }
                        other => prop_assert!(false, "{:?}", other),
                    }
                }
                FairOp::Unlock { jid } => {
                    lock.prune(now);
                    lock.release(&jid_name(jid));
                }
                FairOp::Advance(ms) => now += ms,
            }
            // The counts, against a walk of every holder (pruned or not).
            let all: Vec<Holder> = lock.holders().cloned().collect();
            for g in [None, Some(&b"g\x00"[..]), Some(b"g\x01"), Some(b"g\x02")] {
                let walked = all.iter().filter(|h| h.group() == g).count();
                prop_assert_eq!(lock.group_holding(g), walked, "{:?}", g);
            }
            prop_assert_eq!(lock.exclusive_held(), all.iter().any(Holder::is_exclusive));
            // The live holders per group (what WAITERS ... GROUPS shows),
            // the ended ones not pruned yet, against a walk.
            let mut walked: Vec<(Option<Vec<u8>>, usize)> = Vec::new();
            for h in all.iter().filter(|h| h.is_live(now)) {
                match walked.iter_mut().find(|(g, _)| g.as_deref() == h.group()) {
                    Some((_, n)) => *n += 1,
                    None => walked.push((h.group().map(<[u8]>::to_vec), 1)),
                }
            }
            let mut counted: Vec<(Option<Vec<u8>>, usize)> = lock.live_by_group(now).into_iter().map(|(g, n)| (g.map(<[u8]>::to_vec), n)).collect();
            walked.sort();
            counted.sort();
            // What a serving pass asks of every waiting group, the same:
            // asked in order of name (as a pass does), out of it, and in
            // order again, of one set of counts.
            let counts = lock.group_counts(now);
            let live_ends = all.iter().filter(|h| h.is_live(now)).filter_map(Holder::expires_at);
            prop_assert_eq!(counts.next_lease_end(), live_ends.min());
            let asked = [None, Some(&b"a"[..]), Some(b"g\x00"), Some(b"g\x01"), Some(b"g\x01\x00"), Some(b"g\x02"), Some(b"none")];
            for &g in asked.iter().chain(asked.iter().rev()).chain(&asked) {
                let live = walked.iter().find(|(w, _)| w.as_deref() == g).map_or(0, |&(_, n)| n);
                prop_assert_eq!(counts.of(g), live, "{:?}", g);
                prop_assert_eq!(counts.of_group(g.map(GroupName::new).as_ref()), live, "{:?}", g);
            }
            prop_assert_eq!(counted, walked);
        }
        // An empty lock is no key: nothing to save.
        if !lock.is_empty() {
            let mut items = Items::default();
            codec::encode(&lock, &mut items);
            prop_assert_eq!(codec::decode(codec::ENCODING_VERSION, &mut ItemReader::new(&items)), Ok(lock.clone()));
        }
    }
}

/// Grants, renewals that may change the OWNER, releases, replays of a
/// primary's holder, prunes, REAP by owner and a round trip through the
/// encoding (what RDB, AOF and DUMP/RESTORE do), on jids enough to cross
/// into the indexed layout and back.
#[derive(Debug, Clone)]
enum OwnerOp {
    Lock {
        jid: u8,
        owner: Option<u8>,
        ttl: Option<i64>,
    },
    Put {
        jid: u8,
        owner: Option<u8>,
    },
    Unlock {
        jid: u8,
    },
    Reap {
        owner: u8,
    },
    Reload,
    Advance(i64),
}

fn owner_op() -> impl Strategy<Value = OwnerOp> {
    let owner = prop::option::of(0u8..4);
    prop_oneof![
        // Leases long enough, mostly, for the holders to pass 32.
        6 => (0u8..80, owner.clone(), prop_oneof![Just(None), (1i64..40).prop_map(Some), (200i64..2000).prop_map(Some)])
            .prop_map(|(jid, owner, ttl)| OwnerOp::Lock { jid, owner, ttl }),
        1 => (0u8..80, owner).prop_map(|(jid, owner)| OwnerOp::Put { jid, owner }),
        2 => (0u8..80).prop_map(|jid| OwnerOp::Unlock { jid }),
        1 => (0u8..4).prop_map(|owner| OwnerOp::Reap { owner }),
        1 => Just(OwnerOp::Reload),
        2 => (0i64..30).prop_map(OwnerOp::Advance),
    ]
}

/// Owner `o` of the sequences (a long one too, past the inline text).
fn owner_name(o: u8) -> Vec<u8> {
    if o == 3 {
        vec![b'w'; 100]
    } else {
        vec![b'w', o]
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]

    /// REAP by owner removes exactly that owner's holders, in grant order,
    /// whatever renewals and replays did to the owners, in both layouts;
    /// the indexed layout's index of owners stays exact throughout.
    #[test]
    fn reaping_by_owner_removes_exactly_its_holders(
        start in prop::collection::vec(prop::option::of(0u8..4), 0..70),
        ops in prop::collection::vec(owner_op(), 1..250),
    ) {
        let mut lock = Lock::default();
        let mut model: Vec<Holder> = Vec::new();
        let mut now = 1_700_000_000_000i64;
        let mut counter = 0i64;
        // Started with holders of jids 100 and up, often past 32.
        let start = (100u8..).zip(start).map(|(jid, owner)| OwnerOp::Lock { jid, owner, ttl: None });
        for op in start.chain(ops) {
            lock.prune(now);
            model.retain(|h| h.is_live(now));
            match op {
                OwnerOp::Lock { jid, owner, ttl } => {
                    let (name, owner) = (jid_name(jid), owner.map(owner_name));
                    let req = LockRequest {
                        limit: 0,
                        expires_at: ttl.map(|t| now + t),
                        owner: owner.as_deref(),
                        ..LockRequest::new(&name)
                    };
                    match lock.acquire(&req, now, || { counter += 1; counter }) {
                        Acquired::Granted(t) => model.push(Holder::new(&name, t, now, req.expires_at, DEFAULT_TYPE, req.owner, None)),
                        Acquired::Renewed(t) => {
                            let at = model.iter().position(|h| h.is(&name));
                            let old = at.and_then(|at| model.get_mut(at));
                            let Some(old) = old else {
                                return Err(TestCaseError::fail("a renewal of nothing"));
                            };
                            prop_assert_eq!(old.token(), t);
                            let owner = req.owner.or(old.owner()).map(<[u8]>::to_vec);
                            let expires = req.expires_at.or(old.expires_at());
                            *old = Holder::new(&name, t, old.acquired_at(), expires, DEFAULT_TYPE, owner.as_deref(), None);
                        }
                        other => prop_assert!(false, "{:?}", other),
                    }
                }
                OwnerOp::Put { jid, owner } => {
                    // A primary's holder replayed: a renewal replaces it whole
                    // (its owner may go), a new one comes last.
                    let name = jid_name(jid);
                    let owner = owner.map(owner_name);
                    let token = match model.iter().find(|h| h.is(&name)) {
                        Some(h) => h.token(),
                        None => { counter += 1; counter }
                    };
                    let h = Holder::new(&name, token, now, Some(now + 50), DEFAULT_TYPE, owner.as_deref(), None);
                    lock.put(h.clone());
                    match model.iter_mut().find(|m| m.is(&name)) {
                        Some(m) => *m = h,
                        None => model.push(h),
                    }
                }
                OwnerOp::Unlock { jid } => {
                    let at = model.iter().position(|h| *h.jid() == *jid_name(jid));
                    prop_assert_eq!(lock.release(&jid_name(jid)), at.map(|at| model.remove(at)));
                }
                OwnerOp::Reap { owner } => {
                    let owner = owner_name(owner);
                    let mut seen = Vec::new();
                    let n = lock.remove_owner_each(&owner, |h| seen.push(h.clone()));
                    let expected: Vec<Holder> = model.iter().filter(|h| h.owner() == Some(owner.as_slice())).cloned().collect();
                    model.retain(|h| h.owner() != Some(owner.as_slice()));
                    prop_assert_eq!(n, expected.len());
                    prop_assert_eq!(seen, expected, "that owner's holders, in grant order");
                }
                OwnerOp::Reload => {
                    if !lock.is_empty() {
                        let mut items = Items::default();
                        codec::encode(&lock, &mut items);
                        let decoded = codec::decode(codec::ENCODING_VERSION, &mut ItemReader::new(&items));
                        prop_assert_eq!(decoded.as_ref(), Ok(&lock));
                        if let Ok(decoded) = decoded {
                            lock = decoded;
                        }
                    }
                }
                OwnerOp::Advance(ms) => now += ms,
            }
            prop_assert_eq!(lock.holders().collect::<Vec<_>>(), model.iter().collect::<Vec<_>>());
            if let Holders::Indexed(i) = &lock.holders {
                prop_assert_eq!(i.check(), Ok(()));
            }
            // What a REAP of each owner would take, on a copy.
            for o in 0..4 {
                let owner = owner_name(o);
                let mut copy = lock.clone();
                let mut seen = Vec::new();
                copy.remove_owner_each(&owner, |h| seen.push(h.token()));
                let expected: Vec<i64> = model.iter().filter(|h| h.owner() == Some(owner.as_slice())).map(|h| h.token()).collect();
                prop_assert_eq!(seen, expected);
                prop_assert!(copy.holders().all(|h| h.owner() != Some(owner.as_slice())));
                if let Holders::Indexed(i) = &copy.holders {
                    prop_assert_eq!(i.check(), Ok(()));
                }
            }
        }
    }
}
