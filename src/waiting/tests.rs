//! The waiters' bookkeeping and the serving rule, with no server.

use std::cell::RefCell;
use std::collections::HashMap;

use super::pass::Pass;
use super::queues::{Tally, Waiters};
use super::types::Queue;
use super::*;
use crate::engine::HoldingsStamp;

/// A call the tests never retry (serve_pass is given its own retry).
struct Never;
impl Call for Never {
    fn retry(&self, _: &Context) -> Served {
        Served::Failed(String::new())
    }
}

fn waiter(client: u32) -> Waiter<u32> {
    Waiter {
        client,
        call: Box::new(Never),
        share: Share::default(),
        lock_type: "until_executed".into(),
        seq: client as usize,
        deadline: None,
        user: None,
    }
}

/// A key on which no group holds anything.
fn nothing_held<C>(_: &Waiter<C>, each: Holdings<'_>) {
    each(&NoHolders)
}

/// A key whose groups hold what `F` says, its next lease ending at the
/// other field; it keeps no stamp.
pub(super) struct HeldBy<F>(pub(super) F, pub(super) Option<i64>);

impl<F: Fn(Option<&GroupName>) -> usize> KeyHoldings for HeldBy<F> {
    fn held(&self, group: Option<&GroupName>) -> usize {
        (self.0)(group)
    }

    fn next_lease_end(&self) -> Option<i64> {
        self.1
    }
}

fn stamp(n: u64) -> Option<HoldingsStamp> {
    Some(HoldingsStamp::made_up(n, 0))
}

fn key(name: &str) -> KeyId {
    (0, name.as_bytes().to_vec())
}

fn clients(queue: &Queue<u32>) -> Vec<u32> {
    queue.values().map(|w| w.client).collect()
}

/// Serves a taken queue as a pass whose odd clients get their reply and
/// whose even ones are still denied, then puts those back (with the tally,
/// which counts out those served, as a pass does).
fn serve_odd_clients(w: &mut Waiters<u32>, id: KeyId, (mut queue, mut tally): (Queue<u32>, Tally)) {
    let mut still = Queue::new();
    while let Some((_, next)) = queue.pop_first() {
        if next.client % 2 == 1 {
            w.served(&next);
            tally.leave(&next);
        } else {
            still.insert(next.seq, next);
        }
    }
    w.put_back(id, still, tally);
}

#[test]
fn waiters_queue_per_key_in_arrival_order() {
    let mut w = Waiters::default();
    assert_eq!((w.waiting(), w.waiting_on(0, b"k")), (0, 0));
    for c in [1, 2, 3] {
        w.push(key("k"), waiter(c));
    }
    w.push(key("other"), waiter(4));
    w.push((1, b"k".to_vec()), waiter(5));
    assert_eq!(w.waiting(), 5);
    assert_eq!(w.waiting_on(0, b"k"), 3);
    assert_eq!(w.waiting_on(1, b"k"), 1, "databases apart");
    assert_eq!(w.waiting_on(0, b"none"), 0);
    let (queue, _) = w.take_queue(&key("k")).expect("a queue");
    assert_eq!(clients(&queue), [1, 2, 3]);
}

#[test]
fn a_forgotten_client_leaves_its_queue_and_the_counts() {
    let mut w = Waiters::default();
    for c in [1, 2, 3] {
        w.push(key("k"), waiter(c));
    }
    let gone = w.forget(2).and_then(|(_, w)| w).expect("2 waited");
    assert_eq!(&*gone.lock_type, "until_executed");
    assert!(w.forget(2).is_none(), "forgotten once");
    assert_eq!((w.waiting(), w.waiting_on(0, b"k")), (2, 2));
    w.forget(1);
    w.forget(3);
    assert_eq!(w.waiting(), 0);
    assert!(!w.has_queue(&key("k")), "an empty queue goes");
    assert!(w.keys().is_empty());
}

#[test]
fn serving_takes_the_queue_once_and_keeps_the_denied_in_order() {
    let mut w = Waiters::default();
    for c in [1, 2, 3, 4] {
        w.push(key("k"), waiter(c));
    }
    w.push(key("j"), waiter(9));
    let queue = w.take_queue(&key("k")).expect("a queue");
    assert!(w.take_queue(&key("k")).is_none(), "taken once");
    assert_eq!(w.waiting(), 5, "being served still counts as waiting");
    // 1 and 3 get their reply; 2 and 4 are still denied.
    serve_odd_clients(&mut w, key("k"), queue);
    assert_eq!((w.waiting(), w.waiting_on(0, b"k")), (3, 2));
    let (queue, _) = w.take_queue(&key("k")).expect("the rest");
    assert_eq!(clients(&queue), [2, 4]);
    w.put_back(key("k"), Queue::new(), Tally::default());
    assert!(!w.has_queue(&key("k")));
    assert!(w.take_queue(&key("j")).is_some(), "other keys apart");
}

fn queue_of(clients: &[u32]) -> Queue<u32> {
    clients.iter().map(|&c| (c as usize, waiter(c))).collect()
}

#[test]
fn a_pass_serves_oldest_first_and_the_denied_keep_their_order() {
    let mut tried = Vec::new();
    let pass = serve_pass(queue_of(&[1, 2, 3, 4, 5]), None, None, nothing_held, |w| {
        tried.push(w.client);
        match w.client {
            1 => Served::Denied {
                lease_end: Some(300),
                full: None,
            },
            2 => Served::Granted(7),
            3 => Served::Denied {
                lease_end: Some(200),
                full: None,
            },
            4 => Served::Failed("ERR gone".into()),
            _ => Served::Denied {
                lease_end: None,
                full: None,
            },
        }
    });
    assert_eq!(tried, [1, 2, 3, 4, 5], "every waiter, oldest first");
    let ended: Vec<_> = pass.ended.iter().map(|(w, r)| (w.client, r)).collect();
    assert_eq!(
        ended,
        [
            (2, &Some(WaiterReply::Token(7))),
            (4, &Some(WaiterReply::Error("ERR gone".into())))
        ]
    );
    assert_eq!(clients(&pass.still), [1, 3, 5]);
    assert_eq!(pass.wake_at, Some(200), "the earliest lease to end");
}

#[test]
fn a_lapsed_waiter_ends_with_nil_and_answers_for_nobody_else() {
    let mut tried = Vec::new();
    let pass = serve_pass(queue_of(&[1, 2, 3]), None, None, nothing_held, |w| {
        tried.push(w.client);
        match w.client {
            1 => Served::Lapsed,
            2 => Served::Granted(9),
            _ => Served::Denied {
                lease_end: None,
                full: None,
            },
        }
    });
    // Its lease ended while it waited: that says nothing of the waiters of
    // its kind, who are still tried.
    assert_eq!(tried, [1, 2, 3]);
    let ended: Vec<_> = pass.ended.iter().map(|(w, r)| (w.client, r)).collect();
    assert_eq!(ended, [(1, &None), (2, &Some(WaiterReply::Token(9)))]);
    assert_eq!(clients(&pass.still), [3]);
}

#[test]
fn the_waiters_behind_a_multi_key_waiter_keep_their_place_untried() {
    // The key is reserved for a multi-key waiter that came after 2.
    let mut tried = Vec::new();
    let pass = serve_pass(queue_of(&[1, 2, 4, 5]), Some(3), None, nothing_held, |w| {
        tried.push(w.client);
        if w.client == 1 {
            Served::Granted(7)
        } else {
            Served::Denied {
                lease_end: Some(50),
                full: None,
            }
        }
    });
    assert_eq!(tried, [1, 2], "only those before it");
    assert_eq!(clients(&pass.still), [2, 4, 5], "in their order");
    assert_eq!(pass.wake_at, Some(50));
    // Nobody before it: nothing tried, nothing armed, the tally kept.
    let queue = queue_of(&[4, 5]);
    let tally = Tally::of(&queue);
    let pass = serve_pass(queue, Some(3), Some(tally), nothing_held, |_| {
        unreachable!("nobody is tried")
    });
    assert_eq!(clients(&pass.still), [4, 5]);
    assert_eq!(pass.wake_at, None);
    assert!(
        pass.tally
            .is_some_and(|t| t.groups.values().map(|g| g.len()).sum::<usize>() == 2)
    );
    // All of them granted: the wake-up a denial before gave is not armed
    // for the waiters behind.
    let pass = serve_pass(queue_of(&[1, 4]), Some(3), None, nothing_held, |_| {
        Served::Granted(1)
    });
    assert_eq!(clients(&pass.still), [4]);
    assert_eq!(pass.wake_at, None);
}

#[test]
fn a_pass_that_ends_every_wait_arms_no_wake_up() {
    let pass = serve_pass(queue_of(&[1, 2]), None, None, nothing_held, |w| {
        if w.client == 1 {
            Served::Denied {
                lease_end: Some(9),
                full: None,
            }
        } else {
            Served::Granted(1)
        }
    });
    assert_eq!(pass.wake_at, Some(9));
    let pass = serve_pass(queue_of(&[1, 2]), None, None, nothing_held, |_| {
        Served::Granted(1)
    });
    assert!(pass.still.is_empty());
    assert_eq!(pass.wake_at, None);
    let pass = serve_pass(queue_of(&[1]), None, None, nothing_held, |_| {
        Served::Denied {
            lease_end: None,
            full: None,
        }
    });
    assert_eq!(pass.wake_at, None, "no lease ends: no wake-up");
}

#[test]
fn a_wake_up_is_armed_only_when_none_comes_first() {
    let mut w: Waiters<u32> = Waiters::default();
    assert!(w.arm(&key("k"), 100));
    assert!(!w.arm(&key("k"), 100), "armed already");
    assert!(!w.arm(&key("k"), 150), "an earlier one comes first");
    assert!(w.arm(&key("k"), 50), "an earlier lease needs its own");
    assert!(w.arm(&key("j"), 150), "keys apart");
    w.fired(&key("k"), 100); // the stale one: 50 stays armed
    assert!(!w.arm(&key("k"), 60));
    w.fired(&key("k"), 50);
    assert!(w.arm(&key("k"), 60));
}

#[test]
fn a_deadline_takes_its_waiter_out_once_and_only_while_it_waits() {
    let mut w = Waiters::default();
    for c in [1, 2, 3] {
        w.push(key("k"), waiter(c));
    }
    let (id, out) = w.deadline_passed(2).expect("waiter 2 waits");
    assert_eq!(id, key("k"));
    assert_eq!(out.client, 2);
    assert_eq!(w.waiting(), 2);
    assert!(w.deadline_passed(2).is_none(), "once");
    let (mut queue, mut tally) = w.take_queue(&key("k")).expect("a queue");
    assert_eq!(clients(&queue), [1, 3], "the others keep their order");
    let (_, first) = queue.pop_first().expect("waiter 1");
    w.served(&first);
    tally.leave(&first);
    assert!(
        w.deadline_passed(1).is_none(),
        "a served waiter has no deadline"
    );
    w.put_back(key("k"), queue, tally);
    assert_eq!(w.deadline_passed(3).map(|(_, w)| w.client), Some(3));
    assert_eq!((w.waiting(), w.waiting_on(0, b"k")), (0, 0));
    assert!(w.by_seq.is_empty());
}

#[test]
fn waiters_leave_a_long_queue_in_any_order_and_the_rest_keep_theirs() {
    let mut w = Waiters::default();
    for c in 1..=10_000 {
        w.push(key("k"), waiter(c));
    }
    // Every third, from the back: each found by its number.
    for c in (1..=10_000).rev().filter(|c| c % 3 == 0) {
        assert_eq!(w.forget(c).and_then(|(_, w)| w).map(|g| g.client), Some(c));
    }
    assert_eq!(w.waiting_on(0, b"k"), 10_000 - 3_333);
    let (queue, _) = w.take_queue(&key("k")).expect("a queue");
    let expected: Vec<u32> = (1..=10_000).filter(|c| c % 3 != 0).collect();
    assert_eq!(clients(&queue), expected);
}

#[test]
fn a_forgotten_waiter_has_no_deadline_left() {
    let mut w = Waiters::default();
    w.push(key("k"), waiter(7));
    assert!(w.forget(7).is_some());
    assert!(w.deadline_passed(7).is_none());
    assert!(w.by_seq.is_empty());
}

#[test]
fn timers_are_counted_until_they_go() {
    let mut w: Waiters<u32> = Waiters::default();
    w.count_timer(true);
    w.count_timer(true);
    w.count_timer(false);
    assert_eq!(w.armed, 1);
    w.count_timer(false);
    w.count_timer(false);
    assert_eq!(w.armed, 0, "never below zero");
}

mod groups_counted {
    use proptest::prelude::*;

    use super::*;

    #[derive(Debug, Clone)]
    enum Op {
        Push {
            key: u8,
            group: Option<u8>,
        },
        Forget(u32),
        Deadline(u32),
        /// Serves the queue of a key: the waiters whose client is odd get
        /// their reply, the others are put back.
        Serve(u8),
        Leave(u8),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            5 => (0u8..2, prop::option::of(0u8..3)).prop_map(|(key, group)| Op::Push { key, group }),
            2 => (1u32..60).prop_map(Op::Forget),
            1 => (1u32..60).prop_map(Op::Deadline),
            1 => (0u8..2).prop_map(Op::Serve),
            1 => (0u8..2).prop_map(Op::Leave),
        ]
    }

    fn name(key: u8) -> KeyId {
        (0, vec![b'k', key])
    }

    proptest! {
        /// The counts per group that WAITERS ... GROUPS reads equal a walk
        /// of the queue, whichever way its waiters come and go.
        #[test]
        fn the_counts_per_group_follow_the_queues(ops in prop::collection::vec(op(), 0..120)) {
            let mut w = Waiters::default();
            let mut client = 0;
            for op in ops {
                match op {
                    Op::Push { key, group } => {
                        client += 1;
                        let mut waiter = waiter(client);
                        waiter.share.group = group.map(|g| GroupName::new(&[b'g', g]));
                        waiter.share.exclusive = client % 3 == 0;
                        w.push(name(key), waiter);
                    }
                    Op::Forget(c) => {
                        w.forget(c);
                    }
                    Op::Deadline(c) => {
                        w.deadline_passed(c as usize);
                    }
                    Op::Serve(key) => {
                        if let Some(queue) = w.take_queue(&name(key)) {
                            serve_odd_clients(&mut w, name(key), queue);
                        }
                    }
                    Op::Leave(key) => {
                        w.take_queues(|k| k == name(key).1);
                    }
                }
                for key in 0..2 {
                    let mut walked: std::collections::BTreeMap<Option<GroupName>, usize> = Default::default();
                    for waiter in w.queues.get(&name(key)).into_iter().flat_map(|q| q.values()) {
                        *walked.entry(waiter.share.group.clone()).or_default() += 1;
                    }
                    prop_assert_eq!(w.by_group(0, &name(key).1), walked.into_iter().collect::<Vec<_>>());
                    let exclusive: std::collections::BTreeSet<usize> = w.queues.get(&name(key)).into_iter()
                        .flat_map(|q| q.values()).filter(|w| w.share.exclusive).map(|w| w.seq).collect();
                    let kept = w.tallies.get(&name(key)).map(|t| t.exclusive.clone()).unwrap_or_default();
                    prop_assert_eq!(kept, exclusive, "the exclusive waiters kept as they come and go");
                }
                prop_assert_eq!(w.tallies.len(), w.queues.len(), "counts only for the keys that have a queue");
            }
        }
    }
}

/// A LOCK of LIMIT 1 waiting, as the pass sees its kind.
struct Alike(Vec<u8>);
impl Call for Alike {
    fn retry(&self, _: &Context) -> Served {
        Served::Failed(String::new())
    }

    fn admission(&self) -> Option<Admission<'_>> {
        Some(Admission {
            jid: &self.0,
            limit: 1,
            rate: None,
        })
    }
}

/// A pass over `waiters` LOCKs of LIMIT 1 dealt round into `groups` groups
/// (each of GROUPLIMIT `group_limit`), counted as `serve_queue` counts them,
/// on a key with one slot: the first retry is granted, the others denied
/// (as a denial by LIMIT, `full`, when given). How many it retried, and
/// what it decided.
fn pass_after_one_grant(
    waiters: u32,
    groups: u32,
    group_limit: Option<u32>,
    full: Option<usize>,
) -> (usize, Pass<u32>) {
    let mut w: Waiters<u32> = Waiters::default();
    for c in 1..=waiters {
        let seq = w.next_seq();
        let group = format!("g{}", c % groups);
        w.push(
            key("k"),
            Waiter {
                call: Box::new(Alike(format!("j{c}").into_bytes())),
                share: Share {
                    group: Some(group.as_bytes().into()),
                    group_limit,
                    ..Share::default()
                },
                seq,
                ..waiter(c)
            },
        );
    }
    let (queue, tally) = w.take_queue(&key("k")).expect("a queue");
    let mut tried = 0;
    let pass = serve_pass(
        queue,
        None,
        Some(tally),
        nothing_held,
        first_granted(&mut tried, full),
    );
    (tried, pass)
}

/// A retry that grants the first waiter it tries and denies every later one
/// (the key's next lease ending at 50; by LIMIT, `full`, when given),
/// counting them in `tried`.
fn first_granted(
    tried: &mut usize,
    full: Option<usize>,
) -> impl FnMut(&Waiter<u32>) -> Served + '_ {
    move |_| {
        *tried += 1;
        if *tried == 1 {
            Served::Granted(1)
        } else {
            Served::Denied {
                lease_end: Some(50),
                full,
            }
        }
    }
}

#[test]
fn a_pass_over_a_long_queue_of_few_kinds_tries_each_kind_once_after_the_grant() {
    let (tried, pass) = pass_after_one_grant(1000, 4, Some(1), None);
    assert_eq!(tried, 1 + 4, "the grant, then one denial per kind");
    assert_eq!((pass.ended.len(), pass.still.len()), (1, 999));
    assert_eq!(pass.wake_at, Some(50));
}

#[test]
fn a_pass_over_a_thousand_tenants_stops_at_the_first_denial_by_limit() {
    let (tried, pass) = pass_after_one_grant(2000, 1000, None, Some(1));
    assert_eq!(tried, 2, "the grant, then one denial for all 1,000 tenants");
    assert_eq!((pass.ended.len(), pass.still.len()), (1, 1999));
    assert_eq!(pass.wake_at, Some(50));
}

#[test]
fn a_newcomer_is_held_back_alike_whether_the_waiters_kinds_are_known_or_not() {
    let share = |group: Option<&str>, limit: Option<u32>, exclusive: bool| Share {
        group: group.map(|g| g.as_bytes().into()),
        group_limit: limit,
        exclusive,
        ..Share::default()
    };
    // Per case, whether the waiters go first while group "a" holds 0, 1,
    // 2 or 3 and every other group 1.
    let cases: Vec<(Vec<Share>, [bool; 4])> = vec![
        (vec![], [false; 4]),
        (
            vec![
                share(Some("a"), Some(2), false),
                share(Some("a"), Some(3), false),
            ],
            [true, true, true, false],
        ),
        (
            vec![
                share(Some("a"), Some(2), false),
                share(Some("b"), Some(1), false),
            ],
            [true, true, false, false],
        ),
        (
            vec![
                share(Some("a"), Some(2), false),
                share(Some("b"), Some(2), false),
            ],
            [true; 4],
        ),
        (
            vec![share(Some("a"), Some(2), false), share(None, None, false)],
            [true; 4],
        ),
        (vec![share(Some("a"), Some(2), true)], [true; 4]),
    ];
    // What the answer must be, from the waiters' shares alone: some waiter
    // no GROUPLIMIT holds back, or one whose group holds fewer than it.
    let model = |shares: &[Share], a_holds: usize| {
        shares.iter().any(|s| {
            let holds = if s.group.as_deref() == Some(b"a".as_slice()) {
                a_holds
            } else {
                1
            };
            super::types::gate(s.group_limit, s.exclusive).is_none_or(|max| holds < max as usize)
        })
    };
    for (i, (mut shares, expected)) in cases.into_iter().enumerate() {
        for (a_holds, &first) in expected.iter().enumerate() {
            assert_eq!(model(&shares, a_holds), first, "case {i}: the model");
        }
        let mut w: Waiters<u32> = Waiters::default();
        // Each case on three keys: every waiter of a known kind, of none
        // (a PXAT: only its share known), and the two in turn.
        let alike = |c: u32| Box::new(Alike(format!("j{c}").into_bytes())) as Box<dyn Call>;
        for (c, share) in shares.iter().enumerate() {
            let c = c as u32 * 3 + 1;
            let mixed: Box<dyn Call> = if c.is_multiple_of(2) {
                alike(c)
            } else {
                Box::new(Never)
            };
            for (client, name, call) in [
                (c, "known", alike(c)),
                (c + 1, "unknown", Box::new(Never) as Box<dyn Call>),
                (c + 2, "mixed", mixed),
            ] {
                let seq = w.next_seq();
                let waiter = Waiter {
                    call,
                    share: share.clone(),
                    seq,
                    ..waiter(client)
                };
                w.push(key(name), waiter);
            }
        }
        // Then again as the waiters leave, the last first: each leaving
        // must take its share out of what a newcomer asks.
        loop {
            for a_holds in 0..4 {
                let holding = |g: Option<&GroupName>| {
                    if g.is_some_and(|g| **g == *b"a") {
                        a_holds
                    } else {
                        1
                    }
                };
                for name in ["known", "unknown", "mixed"] {
                    assert_eq!(
                        w.holds_back(0, name.as_bytes(), &HeldBy(holding, None)),
                        model(&shares, a_holds),
                        "case {i}, {} waiting, a holds {a_holds}, {name}",
                        shares.len()
                    );
                }
            }
            if shares.pop().is_none() {
                break;
            }
            let c = shares.len() as u32 * 3 + 1;
            for client in c..c + 3 {
                w.forget(client);
            }
        }
        // Counted out as they left: no tally is left behind.
        assert!(w.tallies.is_empty(), "case {i}");
    }
}

/// Client `c` waits on key "k" in tenant `group` at GROUPLIMIT 1 (a LOCK
/// of LIMIT 1 that gives its kind).
fn tenant_waits(w: &mut Waiters<u32>, c: u32, group: &str) {
    let seq = w.next_seq();
    let share = Share {
        group: Some(group.as_bytes().into()),
        group_limit: Some(1),
        ..Share::default()
    };
    let call = Box::new(Alike(format!("j{c}").into_bytes()));
    w.push(
        key("k"),
        Waiter {
            call,
            share,
            seq,
            ..waiter(c)
        },
    );
}

#[test]
fn a_newcomer_passes_groups_found_full_under_the_same_stamp_without_a_look() {
    let mut w: Waiters<u32> = Waiters::default();
    for (c, group) in [(1, "a"), (2, "b"), (3, "a")] {
        tenant_waits(&mut w, c, group);
    }
    let holds_back = |w: &mut Waiters<u32>, stamp, held| {
        let mut key_holds = Stamped::holding(&["a", "b", "c"], held, stamp);
        key_holds.freed = None;
        let first = w.holds_back(0, b"k", &key_holds);
        (first, key_holds.asked().len())
    };
    // Both groups full: asked of each, the answer kept under stamp 7.
    assert_eq!(holds_back(&mut w, stamp(7), 1), (false, 2));
    assert_eq!(holds_back(&mut w, stamp(7), 1), (false, 0), "kept");
    // Another stamp (a count went down): looked at again, and kept anew.
    assert_eq!(holds_back(&mut w, stamp(8), 0), (true, 1));
    assert_eq!(
        holds_back(&mut w, stamp(8), 1),
        (false, 2),
        "room is not kept"
    );
    assert_eq!(holds_back(&mut w, stamp(8), 1), (false, 0));
    // A waiter joins, perhaps of a group with room: looked at again.
    tenant_waits(&mut w, 4, "c");
    assert_eq!(holds_back(&mut w, stamp(8), 1), (false, 3));
    // A lock of a few holders has no stamp: looked at every time.
    assert_eq!(holds_back(&mut w, None, 1), (false, 3));
    assert_eq!(holds_back(&mut w, None, 1), (false, 3));
    // Another key's stamp is not this one's.
    let other = Stamped::holding(&[], 0, stamp(8));
    assert!(!w.holds_back(0, b"other", &other));
}

#[test]
fn a_newcomer_asks_only_the_parked_groups_the_key_names_freed() {
    let g = |name: &str| Some(GroupName::new(name.as_bytes()));
    // Tenants a, b and c at GROUPLIMIT 1, each holding 1: a pass parks
    // them all.
    let mut w: Waiters<u32> = Waiters::default();
    for (c, group) in (1..=6).zip(["a", "b", "c"].iter().cycle()) {
        tenant_waits(&mut w, c, group);
    }
    let full = Stamped::holding(&["a", "b", "c"], 1, stamp(1));
    let (queue, tally) = w.take_queue(&key("k")).expect("a queue");
    let pass = serve_pass(
        queue,
        None,
        Some(tally),
        |_, each| each(&full),
        |_| panic!("a group at its GROUPLIMIT is not retried"),
    );
    w.put_back(key("k"), pass.still, pass.tally.unwrap_or_default());
    let holds_back = |w: &mut Waiters<u32>, at: u64, b_holds: usize, freed: Option<&[&str]>| {
        let mut key_holds = Stamped::holding(&["a", "b", "c"], 1, stamp(at));
        key_holds.held.insert(g("b"), b_holds);
        key_holds.freed = freed.map(|names| names.iter().map(|name| g(name)).collect());
        let first = w.holds_back(0, b"k", &key_holds);
        (first, key_holds.asked())
    };
    // A count went down elsewhere (another stamp), in no group waiting:
    // no group is asked.
    assert_eq!(holds_back(&mut w, 2, 1, Some(&["z"])), (false, vec![]));
    // b is named, and still full; then it has room.
    assert_eq!(
        holds_back(&mut w, 3, 1, Some(&["b"])),
        (false, vec![g("b")])
    );
    assert_eq!(holds_back(&mut w, 4, 0, Some(&["b"])), (true, vec![g("b")]));
    // A key that cannot say: every parked group is asked.
    assert_eq!(
        holds_back(&mut w, 5, 1, None),
        (false, vec![g("a"), g("b"), g("c")])
    );
}

#[test]
fn a_pass_tries_no_group_that_holds_its_grouplimit() {
    // 1,000 tenants, two waiters each, GROUPLIMIT 1 (and 2 for the second
    // waiter of g7): every tenant holds 1 but g3, which holds none, and
    // g7, whose second waiter may take a second slot.
    let mut w: Waiters<u32> = Waiters::default();
    for c in 1..=2000u32 {
        let seq = w.next_seq();
        let g = c % 1000;
        let group_limit = if g == 7 && c > 1000 { 2 } else { 1 };
        w.push(
            key("k"),
            Waiter {
                call: Box::new(Alike(format!("j{c}").into_bytes())),
                share: Share {
                    group: Some(format!("g{g}").as_bytes().into()),
                    group_limit: Some(group_limit),
                    ..Share::default()
                },
                seq,
                ..waiter(c)
            },
        );
    }
    let (queue, tally) = w.take_queue(&key("k")).expect("a queue");
    let held = |_: &Waiter<u32>, each: Holdings<'_>| {
        each(&HeldBy(
            |g: Option<&GroupName>| usize::from(g.is_none_or(|g| **g != *b"g3")),
            Some(70),
        ))
    };
    let mut tried = Vec::new();
    let pass = serve_pass(queue, None, Some(tally), held, |w| {
        tried.push(w.client);
        Served::Denied {
            lease_end: Some(50),
            full: None,
        }
    });
    assert_eq!(tried, [3, 7, 1007], "g3's first, then g7's two");
    assert_eq!(pass.still.len(), 2000);
    assert_eq!(
        pass.wake_at,
        Some(50),
        "the earliest of the denials and the lease"
    );

    // With no retry at all, the earliest end of a live lease wakes the key.
    let mut w: Waiters<u32> = Waiters::default();
    let seq = w.next_seq();
    w.push(
        key("k"),
        Waiter {
            call: Box::new(Alike(b"j".to_vec())),
            share: Share {
                group: Some(b"g".as_slice().into()),
                group_limit: Some(1),
                ..Share::default()
            },
            seq,
            ..waiter(1)
        },
    );
    let (queue, tally) = w.take_queue(&key("k")).expect("a queue");
    let held =
        |_: &Waiter<u32>, each: Holdings<'_>| each(&HeldBy(|_: Option<&GroupName>| 1, Some(70)));
    let pass = serve_pass(queue, None, Some(tally), held, |_| -> Served {
        panic!("a group at its GROUPLIMIT is not retried")
    });
    assert_eq!((pass.still.len(), pass.wake_at), (1, Some(70)));
}

/// A key as a pass sees it, with a stamp: each group's holders, the groups
/// it names as freed since any stamp (`None`: it cannot say), and the
/// groups a pass asked about.
struct Stamped {
    held: HashMap<Option<GroupName>, usize>,
    freed: Option<Vec<Option<GroupName>>>,
    asked: RefCell<Vec<Option<GroupName>>>,
    stamp: Option<HoldingsStamp>,
}

impl Stamped {
    /// Groups `names` holding `n` each, under `stamp`, named freed: none.
    fn holding(names: &[&str], n: usize, stamp: Option<HoldingsStamp>) -> Self {
        Self {
            held: names
                .iter()
                .map(|name| (Some(GroupName::new(name.as_bytes())), n))
                .collect(),
            freed: Some(Vec::new()),
            asked: RefCell::default(),
            stamp,
        }
    }

    /// The groups asked about, in order of name.
    fn asked(&self) -> Vec<Option<GroupName>> {
        let mut asked = self.asked.borrow().clone();
        asked.sort();
        asked
    }
}

impl KeyHoldings for Stamped {
    fn held(&self, group: Option<&GroupName>) -> usize {
        let group = group.cloned();
        let n = self.held.get(&group).copied().unwrap_or(0);
        self.asked.borrow_mut().push(group);
        n
    }

    fn next_lease_end(&self) -> Option<i64> {
        Some(70)
    }

    fn stamp(&self) -> Option<HoldingsStamp> {
        self.stamp
    }

    fn freed_since(&self, _: HoldingsStamp, each: &mut dyn FnMut(u64)) -> bool {
        let Some(freed) = &self.freed else {
            return false;
        };
        freed
            .iter()
            .for_each(|g| each(crate::engine::holding_hash_of(g)));
        true
    }
}

/// One pass over the queue of "k" on `key_holds`, each waiter tried with
/// `retry`: those whose wait ended leave, the others go back with the
/// tally. What it asked the key about (in order of name), whom it served
/// and when it wakes.
fn pass_on(
    w: &mut Waiters<u32>,
    key_holds: &Stamped,
    retry: impl FnMut(&Waiter<u32>) -> Served,
) -> (Vec<Option<GroupName>>, Vec<u32>, Option<i64>) {
    key_holds.asked.borrow_mut().clear();
    let (queue, tally) = w.take_queue(&key("k")).expect("a queue");
    let pass = serve_pass(queue, None, Some(tally), |_, each| each(key_holds), retry);
    let served = pass.ended.iter().map(|(w, _)| w.client).collect();
    for (waiter, _) in &pass.ended {
        w.served(waiter);
    }
    let wake_at = pass.wake_at;
    w.put_back(key("k"), pass.still, pass.tally.unwrap_or_default());
    (key_holds.asked(), served, wake_at)
}

#[test]
fn a_group_at_its_grouplimit_is_parked_until_the_key_frees_one_of_its_slots() {
    let g = |name: &str| Some(GroupName::new(name.as_bytes()));
    // Tenants a, b, c and d, two waiters each, GROUPLIMIT 1; d holds
    // nothing, so its first waiter is tried at every pass (and denied).
    let mut w: Waiters<u32> = Waiters::default();
    for (c, group) in (1..=8).zip(["a", "b", "c", "d"].iter().cycle()) {
        tenant_waits(&mut w, c, group);
    }
    let mut key_holds = Stamped {
        held: [(g("a"), 1), (g("b"), 1), (g("c"), 1), (g("d"), 0)].into(),
        freed: Some(Vec::new()),
        asked: RefCell::default(),
        stamp: stamp(1),
    };
    // One pass, each asked of the key and retried by `serves`: what it
    // asked about, in order of name, and who it tried.
    let pass = |w: &mut Waiters<u32>, key_holds: &Stamped, serves: &[u32]| {
        let mut tried = Vec::new();
        let (asked, _, wake_at) = pass_on(w, key_holds, |w| {
            tried.push(w.client);
            if serves.contains(&w.client) {
                Served::Granted(1)
            } else {
                Served::Denied {
                    lease_end: Some(50),
                    full: None,
                }
            }
        });
        (asked, tried, wake_at)
    };
    // The first pass asks of every group, tries d (denied), passes over
    // the others and parks them; the next asks of d alone.
    let all = vec![g("a"), g("b"), g("c"), g("d")];
    assert_eq!(
        pass(&mut w, &key_holds, &[]),
        (all.clone(), vec![4], Some(50))
    );
    assert_eq!(
        pass(&mut w, &key_holds, &[]),
        (vec![g("d")], vec![4], Some(50))
    );
    // WAITERS still counts the parked groups' waiters.
    let by_group = w.by_group(0, b"k");
    assert_eq!(by_group.iter().map(|(_, n)| n).sum::<usize>(), 8);
    // The key frees one of b's slots: b comes back, its first waiter is
    // served, and its second, denied, keeps b among those looked at.
    key_holds.held.insert(g("b"), 0);
    key_holds.freed = Some(vec![g("b")]);
    assert_eq!(
        pass(&mut w, &key_holds, &[2]),
        (vec![g("b"), g("d")], vec![2, 4, 6], Some(50))
    );
    key_holds.held.insert(g("b"), 1);
    key_holds.freed = Some(Vec::new());
    assert_eq!(
        pass(&mut w, &key_holds, &[]),
        (vec![g("b"), g("d")], vec![4], Some(50))
    );
    assert_eq!(
        pass(&mut w, &key_holds, &[]),
        (vec![g("d")], vec![4], Some(50))
    );
    // A waiter that joins a parked group may ask it for more: looked at.
    tenant_waits(&mut w, 9, "c");
    assert_eq!(
        pass(&mut w, &key_holds, &[]),
        (vec![g("c"), g("d")], vec![4], Some(50))
    );
    // A key that cannot say what it freed: every group is looked at.
    key_holds.freed = None;
    assert_eq!(pass(&mut w, &key_holds, &[]), (all, vec![4], Some(50)));
    // Waiters of a parked group leave (time-outs): counted out of it.
    key_holds.freed = Some(Vec::new());
    for c in [1, 5] {
        assert!(w.forget(c).is_some());
    }
    assert_eq!(
        pass(&mut w, &key_holds, &[]),
        (vec![g("d")], vec![4], Some(50))
    );
    let tally = w.tallies.get(&key("k")).expect("a tally");
    let counted = Tally::of(&w.queues[&key("k")]);
    assert_eq!(tally.all_groups(), counted.all_groups());
    assert!(
        !tally.all_groups().contains_key(&g("a")),
        "a left with its last waiter"
    );
}

#[test]
fn a_pass_on_a_full_key_asks_only_the_groups_whose_place_changed() {
    let g = |i: u32| Some(GroupName::new(format!("t{i}").as_bytes()));
    // 1,000 tenants, two waiters each (no GROUPLIMIT), on a full key: each
    // pass grants one waiter, and the next retry finds the key full.
    let mut w: Waiters<u32> = Waiters::default();
    for c in 0..2000 {
        let seq = w.next_seq();
        w.push(
            key("k"),
            Waiter {
                call: Box::new(Alike(format!("j{c}").into_bytes())),
                share: Share {
                    group: g(c % 1000),
                    ..Share::default()
                },
                seq,
                ..waiter(c)
            },
        );
    }
    let mut key_holds = Stamped {
        held: (0..1000).map(|i| (g(i), 1)).collect(),
        freed: Some(Vec::new()),
        asked: RefCell::default(),
        stamp: stamp(1),
    };
    let pass = |w: &mut Waiters<u32>, key_holds: &Stamped| {
        let mut tried = 0;
        let (asked, served, _) = pass_on(w, key_holds, first_granted(&mut tried, Some(1000)));
        (served, asked)
    };
    // The first pass makes the order: every tenant asked. Tenant 0's first
    // waiter (client 0), the oldest, is served.
    let (served, asked) = pass(&mut w, &key_holds);
    assert_eq!((served, asked.len()), (vec![0], 1000));
    // Then, per pass: the counts that changed since the last (the tenant
    // served, and the one a release freed, which the key names), and who
    // is served: the tenant that holds the fewest, the oldest waiter first.
    // Each pass asks about the tenant served last, the one freed, the one
    // the last pass tried and found the key full for, and the turns it
    // takes that an earlier pass counted: a few, not each tenant.
    let steps = [
        // Tenant 500 freed holds none: its first waiter goes first.
        (vec![(0, 2), (500, 0)], Some(500), 500),
        // All hold one: tenant 1's first waiter is the oldest.
        (vec![(500, 1), (0, 1)], Some(0), 1),
        (vec![(1, 2), (999, 0)], Some(999), 999),
        // Tenant 2 (tried and denied by the last pass: asked again) holds
        // one more, and tenant 3 took four slots from outside the queue,
        // unannounced (no count went down): its turn, kept from the first
        // pass, is checked when it comes first, and tenant 4 goes first.
        (vec![(999, 1), (2, 2), (3, 5)], None, 4),
    ];
    for (i, (counts, freed, expected)) in steps.into_iter().enumerate() {
        for (tenant, n) in counts {
            key_holds.held.insert(g(tenant), n);
        }
        key_holds.freed = Some(freed.into_iter().map(g).collect());
        key_holds.stamp = stamp(2 + i as u64);
        let (served, asked) = pass(&mut w, &key_holds);
        assert_eq!(served, vec![expected], "pass {i}");
        assert!(asked.len() <= 5, "pass {i} asked about {asked:?}");
    }
}
