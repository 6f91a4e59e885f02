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
                    let jid = [b'j', jid];
                    lock.prune(now);
                    let before = live(&lock, now);
                    let rate_before = lock.rate().copied();
                    let held = before.iter().find(|h| h.jid() == jid).map(|h| h.token);
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
                            prop_assert_eq!(h.map(|h| (h.token, h.acquired_at)), Some((t, now)));
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
                    let was = live(&lock, now).iter().any(|h| h.jid() == [b'j', jid]);
                    prop_assert_eq!(lock.release(&[b'j', jid]).is_some(), was);
                    prop_assert!(lock.holder(&[b'j', jid]).is_none());
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
            let tokens: Vec<i64> = lock.holders().map(|h| h.token).collect();
            prop_assert!(tokens.windows(2).all(|w| w[0] < w[1]));
            let mut jids: Vec<&[u8]> = lock.holders().map(|h| h.jid()).collect();
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
