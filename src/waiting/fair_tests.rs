//! The fair serving rule (`serve_pass`) against the real engine: a key's
//! holders in a `Lock`, each waiter's LOCK replayed on it, time moved by
//! hand. (Test code only: the waiting layer itself knows no engine.)

use std::cell::RefCell;
use std::collections::HashMap;

use proptest::prelude::*;

use super::clock::Clock;
use super::pass::Pass;
use super::queues::Tally;
use super::types::Queue;
use super::*;
use crate::engine::{Acquired, Lock, LockRequest, Mode};

/// What a waiter asked for.
#[derive(Debug, Clone)]
struct Ask {
    group: Option<u8>,
    weight: u32,
    group_limit: Option<u32>,
    mode: Option<Mode>,
    /// Its job's length: the lease it takes.
    ttl: i64,
}

impl Ask {
    fn of(group: u8) -> Self {
        Self {
            group: Some(group),
            weight: 1,
            group_limit: None,
            mode: None,
            ttl: 10,
        }
    }
}

/// A waiter's LOCK as the pass sees it: its jid and LIMIT say its kind, so
/// that the pass answers alike waiters from one denial and stops once every
/// kind waiting is denied (what `serve_queue` gives it), checked here
/// against the engine.
struct Asked {
    jid: Vec<u8>,
    limit: u32,
}

impl Call for Asked {
    fn retry(&self, _: &Context) -> Served {
        Served::Failed(String::new())
    }

    fn admission(&self) -> Option<Admission<'_>> {
        Some(Admission {
            jid: &self.jid,
            limit: self.limit,
            rate: None,
        })
    }
}

fn name(group: Option<u8>) -> Option<GroupName> {
    group.map(|g| GroupName::new(&[b'g', g]))
}

/// One key: its lock, its LIMIT (every caller gives the same), its queue.
struct Sim {
    lock: RefCell<Lock>,
    limit: u32,
    now: i64,
    token: i64,
    asks: HashMap<usize, Ask>,
    queue: Queue<u32>,
    next: usize,
    /// Each grant: the waiter and its group, in order.
    granted: Vec<(usize, Option<u8>)>,
    /// When the last pass said to serve the key again.
    wake_at: Option<i64>,
    /// The queue's tally, kept between passes as the waiters' bookkeeping
    /// keeps it (`None`: counted afresh for each pass).
    tally: Option<Tally>,
    keeps_tally: bool,
    /// The key's virtual clock and each waiting group's start on it, where
    /// the tally is counted afresh: the one thing of it a pass keeps for
    /// the next either way (the waiting groups' turns).
    clock: Clock,
    starts: HashMap<Option<GroupName>, clock::Start>,
}

impl Sim {
    fn new(limit: u32) -> Self {
        Self {
            lock: RefCell::new(Lock::default()),
            limit,
            now: 1000,
            token: 0,
            asks: HashMap::new(),
            queue: Queue::new(),
            next: 0,
            granted: Vec::new(),
            wake_at: None,
            tally: None,
            keeps_tally: false,
            clock: Clock::default(),
            starts: HashMap::new(),
        }
    }

    /// A key whose queue's tally is kept between passes (its parked groups
    /// with it), not counted afresh.
    fn keeping_the_tally(limit: u32) -> Self {
        Self {
            tally: Some(Tally::default()),
            keeps_tally: true,
            ..Self::new(limit)
        }
    }

    /// `jid` of `group` takes a slot without waiting (a LOCK from outside
    /// the queue, of LIMIT `limit`), for `ttl`.
    fn hold(&mut self, jid: &str, group: Option<u8>, ttl: i64, limit: u32) {
        let group = name(group);
        let req = LockRequest {
            limit,
            expires_at: Some(self.now + ttl),
            group: group.as_deref(),
            ..LockRequest::new(jid.as_bytes())
        };
        let token = &mut self.token;
        let mut lock = self.lock.borrow_mut();
        lock.prune(self.now);
        lock.acquire(&req, self.now, || {
            *token += 1;
            *token
        });
    }

    /// Waiter `seq` stops waiting (its WAIT ran out).
    fn give_up(&mut self, seq: usize) {
        let Some(waiter) = self.queue.remove(&seq) else {
            return;
        };
        match self.tally.as_mut() {
            Some(tally) => tally.leave(&waiter),
            None if !self
                .queue
                .values()
                .any(|w| w.share.group == waiter.share.group) =>
            {
                self.starts.remove(&waiter.share.group);
            }
            None => {}
        }
    }

    fn wait(&mut self, ask: Ask) -> usize {
        self.next += 1;
        let seq = self.next;
        let waiter = Waiter {
            client: seq as u32,
            call: Box::new(Asked {
                jid: format!("j{seq}").into_bytes(),
                limit: self.limit,
            }),
            share: Share {
                group: name(ask.group),
                weight: ask.weight,
                group_limit: ask.group_limit,
                exclusive: ask.mode == Some(Mode::Exclusive),
            },
            lock_type: "lock".into(),
            seq,
            deadline: None,
            user: None,
        };
        match self.tally.as_mut() {
            Some(tally) => tally.join(&waiter),
            None => {
                if !self
                    .queue
                    .values()
                    .any(|w| w.share.group == waiter.share.group)
                {
                    let start = self.clock.join();
                    self.starts.insert(waiter.share.group.clone(), start);
                }
            }
        }
        self.queue.insert(seq, waiter);
        self.asks.insert(seq, ask);
        seq
    }

    fn held(&self, group: Option<u8>) -> usize {
        let name = name(group);
        let now = self.now;
        let lock = self.lock.borrow();
        lock.live_holders(now)
            .filter(|h| h.group() == name.as_deref())
            .count()
    }

    /// One pass at `now`; every grant checked against LIMIT, GROUPLIMIT
    /// and the exclusive rule as it is made.
    fn pass(&mut self) -> Result<Pass<u32>, TestCaseError> {
        let queue = std::mem::take(&mut self.queue);
        // The queue's kinds and groups, as the waiters' bookkeeping keeps
        // them.
        let tally = self.tally.take().unwrap_or_else(|| {
            let tally = Tally {
                clock: std::mem::take(&mut self.clock),
                ..Tally::of(&queue)
            };
            for (name, waiters) in &tally.groups {
                if let Some(&start) = self.starts.get(name) {
                    waiters.set_start(start);
                }
            }
            tally
        });
        let (now, limit) = (self.now, self.limit);
        let lock = &self.lock;
        let asks = &self.asks;
        let token = &mut self.token;
        let granted = &mut self.granted;
        let mut broken: Option<String> = None;
        let pass = serve_pass(
            queue,
            None,
            Some(tally),
            |_, each| each(&lock.borrow().group_counts(now)),
            |w| {
                let Some(ask) = asks.get(&w.seq) else {
                    return Served::Failed("no ask".into());
                };
                let mut lock = lock.borrow_mut();
                lock.prune(now);
                let jid = format!("j{}", w.seq);
                let group = name(ask.group);
                let req = LockRequest {
                    limit,
                    expires_at: Some(now + ask.ttl),
                    group: group.as_deref(),
                    group_limit: ask.group_limit,
                    mode: ask.mode,
                    ..LockRequest::new(jid.as_bytes())
                };
                match lock.acquire(&req, now, || {
                    *token += 1;
                    *token
                }) {
                    Acquired::Granted(t) => {
                        granted.push((w.seq, ask.group));
                        let n = lock.len();
                        if limit > 0 && n > limit as usize {
                            broken = Some(format!("{n} holders over LIMIT {limit}"));
                        }
                        if lock.exclusive_held() && n > 1 {
                            broken = Some(format!("an exclusive holder among {n}"));
                        }
                        if let Some(m) = ask.group_limit
                            && lock.group_holding(group.as_deref()) > m as usize
                        {
                            broken = Some(format!("{:?} over GROUPLIMIT {m}", ask.group));
                        }
                        Served::Granted(t)
                    }
                    Acquired::Renewed(t) => Served::Granted(t),
                    _ => Served::Denied {
                        lease_end: lock.earliest_lease(),
                        full: (limit != 0 && lock.len() >= limit as usize).then(|| lock.len()),
                    },
                }
            },
        );
        if let Some(b) = broken {
            return Err(TestCaseError::fail(b));
        }
        // The pass counted out exactly the waiters it ended.
        let left = pass.tally.as_ref().map(Tally::all_groups);
        let counted = Tally::of(&pass.still);
        prop_assert_eq!(left, Some(counted.all_groups()));
        let exclusive = pass.tally.as_ref().map(|t| &t.exclusive);
        prop_assert_eq!(exclusive, Some(&Tally::of(&pass.still).exclusive));
        Ok(pass)
    }

    /// A pass whose denied waiters go back in the queue; the seqs it served.
    fn serve(&mut self) -> Result<Vec<usize>, TestCaseError> {
        let mut pass = self.pass()?;
        let served = pass.ended.iter().map(|(w, _)| w.seq).collect();
        self.queue = pass.still;
        self.wake_at = pass.wake_at;
        if self.keeps_tally {
            self.tally = pass.tally.take();
        } else if let Some(tally) = pass.tally.as_mut() {
            self.clock = std::mem::take(&mut tally.clock);
            self.starts = tally
                .all_groups()
                .into_iter()
                .map(|(name, waiters)| (name.clone(), waiters.start()))
                .collect();
        }
        Ok(served)
    }

    /// Time moves to the wake-up the last pass armed.
    fn wake_up(&mut self) -> bool {
        match self.wake_at {
            Some(at) => {
                self.now = self.now.max(at);
                true
            }
            None => false,
        }
    }

    /// Time moves to the next end of lease.
    fn next_lease(&mut self) -> bool {
        match self.lock.borrow().earliest_lease() {
            Some(at) => {
                self.now = self.now.max(at);
                true
            }
            None => false,
        }
    }

    /// Unlocks `seq`'s hold.
    fn release(&mut self, seq: usize) {
        self.lock.borrow_mut().release(format!("j{seq}").as_bytes());
    }
}

#[test]
fn the_group_holding_least_is_served_first_and_equals_take_turns() {
    let mut sim = Sim::new(4);
    // A waits first with 3, B then with 3: equal shares alternate.
    let a: Vec<usize> = (0..3).map(|_| sim.wait(Ask::of(0))).collect();
    let b: Vec<usize> = (0..3).map(|_| sim.wait(Ask::of(1))).collect();
    let served = sim.serve().expect("a pass");
    assert_eq!(served, [a[0], b[0], a[1], b[1]]);
    assert_eq!((sim.held(Some(0)), sim.held(Some(1))), (2, 2));
    // B's job ends: B holds less, B gets the slot though A came first.
    sim.release(b[0]);
    assert_eq!(sim.serve().expect("a pass"), [b[2]]);
    sim.release(a[0]);
    assert_eq!(sim.serve().expect("a pass"), [a[2]]);
}

#[test]
fn free_slots_go_one_to_each_tenant_oldest_first_then_round_again() {
    let mut sim = Sim::new(250);
    // 200 tenants with three waiters each, arriving in turn.
    let asked: Vec<usize> = (0..600)
        .map(|i| sim.wait(Ask::of((i % 200) as u8)))
        .collect();
    let served = sim.serve().expect("a pass");
    // Each tenant's first, in arrival order; then the second of the 50
    // oldest: every tenant holds one, so the oldest heads go first.
    let expected: Vec<usize> = asked.iter().take(250).copied().collect();
    assert_eq!(served, expected);
    assert_eq!((sim.held(Some(0)), sim.held(Some(199))), (2, 1));
    // Tenant 0's first job ends: the slot goes to a tenant holding one, not
    // to tenant 0, which still holds one too and whose next waiter came later.
    sim.release(asked[0]);
    assert_eq!(sim.serve().expect("a pass"), [asked[250]]);
}

#[test]
fn a_waiter_held_back_by_its_grouplimit_blocks_no_other_group() {
    let mut sim = Sim::new(4);
    let capped = |g| Ask {
        group_limit: Some(2),
        ..Ask::of(g)
    };
    let a: Vec<usize> = (0..4).map(|_| sim.wait(capped(0))).collect();
    let b = sim.wait(Ask::of(1));
    let served = sim.serve().expect("a pass");
    assert_eq!(served, [a[0], b, a[1]], "A stops at 2, B passes it");
    assert_eq!(sim.queue.keys().copied().collect::<Vec<_>>(), [a[2], a[3]]);
    assert_eq!(
        sim.lock.borrow().len(),
        3,
        "a slot stays free: A may not take it"
    );
    // A's slot frees: A's next waiter gets it, in order.
    sim.release(a[0]);
    assert_eq!(sim.serve().expect("a pass"), [a[2]]);
}

#[test]
fn weights_share_the_slots_in_proportion() {
    let mut sim = Sim::new(9);
    for _ in 0..10 {
        sim.wait(Ask {
            weight: 2,
            ttl: 1000,
            ..Ask::of(0)
        });
        sim.wait(Ask {
            ttl: 1000,
            ..Ask::of(1)
        });
    }
    sim.serve().expect("a pass");
    assert_eq!((sim.held(Some(0)), sim.held(Some(1))), (6, 3));
}

#[test]
fn ungrouped_waiters_compete_as_one_group() {
    let mut sim = Sim::new(4);
    let plain = |_| Ask {
        group: None,
        ..Ask::of(0)
    };
    let n: Vec<usize> = (0..3).map(plain).map(|a| sim.wait(a)).collect();
    let g: Vec<usize> = (0..3).map(|_| sim.wait(Ask::of(1))).collect();
    assert_eq!(sim.serve().expect("a pass"), [n[0], g[0], n[1], g[1]]);
}

#[test]
fn a_waiting_writer_blocks_the_readers_behind_it_who_then_go_together() {
    let mut sim = Sim::new(5);
    let reader = |ttl| Ask {
        group: None,
        mode: Some(Mode::Shared),
        ttl,
        ..Ask::of(0)
    };
    let r1 = sim.wait(reader(10));
    assert_eq!(sim.serve().expect("a pass"), [r1]);
    let w = sim.wait(Ask {
        mode: Some(Mode::Exclusive),
        ttl: 20,
        ..reader(0)
    });
    let behind: Vec<usize> = (0..3).map(|_| sim.wait(reader(10))).collect();
    // Slots are free, but the readers came after the writer: they wait.
    assert_eq!(sim.serve().expect("a pass"), Vec::<usize>::new());
    assert_eq!(sim.queue.len(), 4);
    // The reader's lease ends: the writer alone.
    assert!(sim.next_lease());
    assert_eq!(sim.serve().expect("a pass"), [w]);
    // The writer's ends: the readers behind it, together.
    assert!(sim.next_lease());
    assert_eq!(sim.serve().expect("a pass"), behind);
}

#[test]
fn a_writer_waits_for_every_earlier_waiter() {
    let mut sim = Sim::new(1);
    let first = sim.wait(Ask::of(0));
    let w = sim.wait(Ask {
        mode: Some(Mode::Exclusive),
        ..Ask::of(1)
    });
    // One pass: the first reader holds, then the writer is denied by it.
    assert_eq!(sim.serve().expect("a pass"), [first]);
    assert!(sim.next_lease());
    assert_eq!(sim.serve().expect("a pass"), [w]);
}

/// The case: LIMIT 10, a tenant of long jobs and one of short jobs,
/// both always waiting. Counting slots held now, they end near 5 and 5
/// (counting grants, the short tenant would take almost every slot; a
/// first-come queue would let the long tenant's backlog fill all ten).
#[test]
fn long_and_short_jobs_share_the_slots_held_now() {
    let mut sim = Sim::new(10);
    let (mut long_sum, mut short_sum, mut samples) = (0, 0, 0);
    for step in 0..3000 {
        // Both tenants keep 20 jobs waiting; the long one arrived first.
        for (group, ttl) in [(0, 60), (1, 1)] {
            let waiting = sim
                .queue
                .values()
                .filter(|w| w.share.group == name(Some(group)))
                .count();
            for _ in waiting..20 {
                sim.wait(Ask {
                    ttl,
                    ..Ask::of(group)
                });
            }
        }
        sim.serve().expect("a pass");
        if step >= 500 {
            long_sum += sim.held(Some(0));
            short_sum += sim.held(Some(1));
            samples += 1;
        }
        sim.now += 1;
    }
    let long = long_sum as f64 / samples as f64;
    let short = short_sum as f64 / samples as f64;
    assert!(
        (long - 5.0).abs() <= 0.5,
        "long jobs held {long:.2} on average"
    );
    assert!(
        (short - 5.0).abs() <= 0.5,
        "short jobs held {short:.2} on average"
    );
}

fn ask() -> impl Strategy<Value = Ask> {
    (
        prop::option::of(0u8..3),
        1u32..4,
        prop::option::of(1u32..3),
        prop::sample::select(vec![None, Some(Mode::Shared), Some(Mode::Exclusive)]),
        1i64..50,
    )
        .prop_map(|(group, weight, group_limit, mode, ttl)| Ask {
            group,
            weight,
            group_limit: group.and(group_limit),
            mode,
            ttl,
        })
}

proptest! {
    /// Random waiters on one key, time moving from wake-up to wake-up (as
    /// each pass arms them): no grant ever exceeds LIMIT or its GROUPLIMIT
    /// or shares an exclusive hold (checked at each grant), and every
    /// waiter is served, the waiters of a group that ask alike in arrival
    /// order (a waiter denied by a GROUPLIMIT of its own does not hold back
    /// one that gave none).
    #[test]
    fn every_waiter_is_served_within_the_rules(
        limit in 1u32..5,
        asks in prop::collection::vec(ask(), 1..30),
    ) {
        let mut sim = Sim::new(limit);
        let seqs: Vec<usize> = asks.iter().cloned().map(|a| sim.wait(a)).collect();
        let mut passes = 0;
        while !sim.queue.is_empty() {
            sim.serve()?;
            if sim.queue.is_empty() {
                break;
            }
            prop_assert!(sim.wake_up(), "waiters left and no wake-up armed");
            passes += 1;
            prop_assert!(passes <= 4 * seqs.len(), "not everyone served");
        }
        let class = |seq: &usize| sim.asks.get(seq).map(|a| (a.group, a.group_limit));
        for group in [None, Some(0), Some(1), Some(2)] {
            for limit in [None, Some(1), Some(2)] {
                let order: Vec<usize> = sim.granted.iter()
                    .map(|(s, _)| *s)
                    .filter(|s| class(s) == Some((group, limit)))
                    .collect();
                let mut sorted = order.clone();
                sorted.sort_unstable();
                prop_assert_eq!(order, sorted, "FIFO within {:?}", group);
            }
        }
        prop_assert_eq!(sim.granted.len(), seqs.len());
    }
}

proptest! {
    /// Shares converge: groups of random weights, all with more work waiting
    /// than the key has slots, fill an empty key so that no group holds more
    /// than one slot beyond its weighted share of any other's:
    /// `(held(i) - 1) / w(i) <= held(j) / w(j)` for every pair.
    #[test]
    fn backlogged_groups_fill_the_slots_by_their_weights(
        limit in 1u32..30,
        weights in prop::collection::vec(1u32..5, 1..4),
    ) {
        let mut sim = Sim::new(limit);
        for _ in 0..limit {
            for (g, &w) in weights.iter().enumerate() {
                sim.wait(Ask { weight: w, ttl: 1000, ..Ask::of(g as u8) });
            }
        }
        sim.serve()?;
        prop_assert_eq!(sim.lock.borrow().len(), limit as usize, "work-conserving");
        for (i, &wi) in weights.iter().enumerate() {
            for (j, &wj) in weights.iter().enumerate() {
                let (hi, hj) = (sim.held(Some(i as u8)) as u64, sim.held(Some(j as u8)) as u64);
                prop_assert!(
                    hi.saturating_sub(1) * u64::from(wj) <= hj * u64::from(wi),
                    "group {} holds {} (weight {}), group {} holds {} (weight {})", i, hi, wi, j, hj, wj
                );
            }
        }
    }

    /// The bound for a group that holds nothing: once some holder leaves,
    /// it is served before any waiter that arrived after its oldest one.
    #[test]
    fn a_group_holding_nothing_is_passed_only_by_older_waiters(
        others in prop::collection::vec((0u8..3, 1i64..20), 1..20),
        late in 1usize..20,
    ) {
        let mut sim = Sim::new(2);
        // The others hold the key and queue; the newcomer group 9 queues
        // after `late` of them (or after all).
        let late = late.min(others.len());
        let mut seqs = Vec::new();
        for &(g, ttl) in &others[..late] {
            seqs.push(sim.wait(Ask { ttl, ..Ask::of(g) }));
        }
        let mine = sim.wait(Ask { ttl: 5, ..Ask::of(9) });
        for &(g, ttl) in &others[late..] {
            seqs.push(sim.wait(Ask { ttl, ..Ask::of(g) }));
        }
        loop {
            sim.serve()?;
            if sim.granted.iter().any(|(s, _)| *s == mine) {
                break;
            }
            prop_assert!(sim.next_lease(), "nothing left to end");
        }
        let before_mine: Vec<usize> = sim.granted.iter().map(|(s, _)| *s).take_while(|s| *s != mine).collect();
        prop_assert!(before_mine.iter().all(|s| *s < mine), "a later waiter went first: {:?}", before_mine);
    }
}

/// What a test does to a key of many holders between two passes.
#[derive(Debug, Clone)]
enum Step {
    /// A waiter of group `.0` (of 8), GROUPLIMIT `.1`, lease `.2`, weight
    /// `.3`.
    Wait(u8, Option<u32>, i64, u32),
    /// A holder from outside the queue takes a slot of group `.0`.
    Hold(u8, i64),
    /// The `.0`th holder (of those there, by jid) is released.
    Release(usize),
    /// The `.0`th waiter (of those waiting) gives up.
    GiveUp(usize),
    /// Time moves to the next end of lease.
    NextLease,
    /// A newcomer the key admits asks whether the waiters hold it back.
    Newcomer,
    /// A serving pass.
    Pass,
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        3 => (0u8..8, prop::option::of(1u32..4), 1i64..60, 1u32..4)
            .prop_map(|(g, l, t, w)| Step::Wait(g, l, t, w)),
        1 => (0u8..8, 1i64..60).prop_map(|(g, t)| Step::Hold(g, t)),
        2 => (0usize..100).prop_map(Step::Release),
        1 => (0usize..100).prop_map(Step::GiveUp),
        1 => Just(Step::NextLease),
        2 => Just(Step::Newcomer),
        3 => Just(Step::Pass),
    ]
}

/// Runs `steps` on two keys of LIMIT `limit`, each first given `fill`
/// holders of a group nobody waits in: one whose queue's tally (its parked
/// groups and its groups' order with it) is kept from pass to pass, one
/// whose tally is counted afresh for each pass. Both must serve the same
/// waiters in the same order, wake at the same time and answer newcomers
/// alike: once as the module runs, once with the order of any number of
/// groups kept (a test's queue has a few).
fn kept_and_fresh_serve_alike(
    limit: u32,
    fill: usize,
    steps: Vec<Step>,
) -> Result<(), TestCaseError> {
    for few_afresh in [true, false] {
        let mut kept = Sim::keeping_the_tally(limit);
        if !few_afresh && let Some(tally) = kept.tally.as_mut() {
            tally.order.keep_every_order();
        }
        serve_alike(kept, Sim::new(limit), fill, steps.clone())?;
    }
    Ok(())
}

fn serve_alike(
    mut kept: Sim,
    mut fresh: Sim,
    fill: usize,
    steps: Vec<Step>,
) -> Result<(), TestCaseError> {
    for sim in [&mut kept, &mut fresh] {
        for i in 0..fill {
            sim.hold(&format!("h{i}"), Some(9), 1_000_000, 0);
        }
    }
    for step in steps {
        for sim in [&mut kept, &mut fresh] {
            match step {
                Step::Wait(g, group_limit, ttl, weight) => {
                    sim.wait(Ask {
                        group_limit,
                        ttl,
                        weight,
                        ..Ask::of(g)
                    });
                }
                Step::Hold(g, ttl) => {
                    let jid = format!("o{}", sim.token);
                    let limit = sim.limit;
                    sim.hold(&jid, Some(g), ttl, limit);
                }
                Step::Release(i) => {
                    let jids = {
                        let lock = sim.lock.borrow();
                        let mut jids: Vec<Vec<u8>> = lock
                            .live_holders(sim.now)
                            .map(|h| h.jid().to_vec())
                            .collect();
                        jids.sort();
                        jids
                    };
                    if !jids.is_empty() {
                        let jid = &jids[i % jids.len()];
                        sim.lock.borrow_mut().release(jid);
                    }
                }
                Step::GiveUp(i) => {
                    let seqs: Vec<usize> = sim.queue.keys().copied().collect();
                    if !seqs.is_empty() {
                        sim.give_up(seqs[i % seqs.len()]);
                    }
                }
                Step::NextLease => {
                    sim.next_lease();
                }
                Step::Newcomer | Step::Pass => {}
            }
        }
        if matches!(step, Step::Newcomer) {
            // As LOCK asks: the key pruned first.
            for sim in [&mut kept, &mut fresh] {
                sim.lock.borrow_mut().prune(sim.now);
            }
            let counts = |sim: &Sim| {
                let lock = sim.lock.borrow();
                let counted = Tally::of(&sim.queue);
                let by_kept = sim
                    .tally
                    .as_ref()
                    .map(|t| t.hold_back(&lock.group_counts(sim.now)));
                (by_kept, counted.hold_back(&lock.group_counts(sim.now)))
            };
            let (by_kept, by_count) = counts(&kept);
            prop_assert_eq!(by_kept, Some(by_count), "held back");
            prop_assert_eq!(counts(&fresh).1, by_count, "the same keys");
        }
        if matches!(step, Step::Pass | Step::NextLease) {
            let (a, b) = (kept.serve()?, fresh.serve()?);
            prop_assert_eq!(a, b, "served");
            prop_assert_eq!(kept.wake_at, fresh.wake_at, "wake-up");
        }
    }
    prop_assert_eq!(&kept.granted, &fresh.granted);
    Ok(())
}

proptest! {
    /// Groups parked at their GROUPLIMIT between passes change nothing: a
    /// key of many holders (indexed, so it keeps a stamp and names the
    /// groups whose count went down), its queue's tally kept from pass to
    /// pass, serves as the same key whose tally is counted afresh for each
    /// pass, through grants from outside, releases, time-outs and ended
    /// leases.
    #[test]
    fn parked_groups_serve_as_a_fresh_look_does(
        steps in prop::collection::vec(step(), 1..80),
    ) {
        kept_and_fresh_serve_alike(0, 40, steps)?;
    }

    /// The groups' order kept between passes changes nothing either, on a
    /// key whose LIMIT ends most passes after a grant or two: one of many
    /// holders (its stamp names what went down) ...
    #[test]
    fn a_kept_order_serves_as_a_fresh_look_does_on_a_key_of_many_holders(
        steps in prop::collection::vec(step(), 1..80),
    ) {
        kept_and_fresh_serve_alike(44, 40, steps)?;
    }

    /// ... and one of a few, which keeps no stamp (the groups holding
    /// then and now are looked at again).
    #[test]
    fn a_kept_order_serves_as_a_fresh_look_does_on_a_key_of_few_holders(
        steps in prop::collection::vec(step(), 1..80),
    ) {
        kept_and_fresh_serve_alike(4, 0, steps)?;
    }
}

/// Serves `sim`, a key of LIMIT 1, one grant at a time, each holder done
/// before the next pass (and re-queued by `again` if it gives a group):
/// the groups of the first `n` grants.
fn one_at_a_time(sim: &mut Sim, n: usize, mut again: impl FnMut(usize) -> Option<Ask>) -> Vec<u8> {
    let mut order = Vec::new();
    while order.len() < n {
        let served = sim.serve().expect("a pass");
        assert!(served.len() <= 1, "LIMIT 1 grants one at a time");
        let Some(&seq) = served.first() else { break };
        let ask = sim.asks[&seq].clone();
        order.push(ask.group.unwrap_or(u8::MAX));
        sim.release(seq);
        if let Some(next) = again(seq) {
            sim.wait(next);
        }
    }
    order
}

/// Both ways a key's tally is kept: from pass to pass, and afresh.
fn both(limit: u32) -> [Sim; 2] {
    [Sim::keeping_the_tally(limit), Sim::new(limit)]
}

#[test]
fn on_a_mutex_tenants_take_turns() {
    for mut sim in both(1) {
        sim.hold("gate", Some(9), 1_000_000, 1);
        for g in [0, 0, 0, 1, 1, 2] {
            sim.wait(Ask::of(g));
        }
        assert!(sim.serve().expect("a pass").is_empty(), "the gate holds");
        sim.lock.borrow_mut().release(b"gate");
        // A1 A2 A3 B1 B2 C1 queued: A1 B1 C1 A2 B2 A3 served.
        assert_eq!(one_at_a_time(&mut sim, 6, |_| None), [0, 1, 2, 0, 1, 0]);
        assert!(sim.queue.is_empty());
    }
}

#[test]
fn a_tenant_behind_a_backlog_waits_for_one_turn_not_the_backlog() {
    for mut sim in both(1) {
        for _ in 0..40 {
            sim.wait(Ask::of(0));
        }
        sim.wait(Ask::of(1));
        assert_eq!(one_at_a_time(&mut sim, 3, |_| None), [0, 1, 0]);
        // B came back after ten grants of A alone: it joins at the current
        // turn (one more of A at most), with nothing banked from before.
        assert_eq!(one_at_a_time(&mut sim, 10, |_| None), [0; 10]);
        sim.wait(Ask::of(1));
        sim.wait(Ask::of(1));
        let next = one_at_a_time(&mut sim, 5, |_| None);
        assert_eq!(next, [0, 1, 0, 1, 0], "turns again, no catching up");
    }
}

#[test]
fn short_jobs_take_turns_whatever_the_backlog() {
    for weight in [1, 2] {
        for mut sim in both(1) {
            // A: a backlog of 30 and a weight; B: one worker that queues
            // again as soon as its job is done (its group stops waiting in
            // between).
            for _ in 0..30 {
                sim.wait(Ask {
                    weight,
                    ..Ask::of(0)
                });
            }
            sim.wait(Ask::of(1));
            let mut order = Vec::new();
            for _ in 0..30 {
                order.extend(one_at_a_time(&mut sim, 1, |_| None));
                if order.last() == Some(&1) {
                    sim.wait(Ask::of(1));
                }
            }
            let b = order.iter().filter(|&&g| g == 1).count();
            // Weight 1: every other grant; weight 2: every third.
            let expected = 30 / (weight as usize + 1);
            assert!(b.abs_diff(expected) <= 1, "B got {b} of 30 ({order:?})");
        }
    }
}

proptest! {
    /// With G groups waiting on a key of LIMIT 1, a group's first waiter
    /// is served within G - 1 grants to other groups of a weight no greater
    /// than its own, whenever it became first (its group came, or its
    /// group's last grant went to the waiter before it), through groups
    /// coming and going.
    #[test]
    fn a_first_waiter_waits_for_a_turn_of_each_group_at_most(
        weights in prop::collection::vec(1u32..5, 2..7),
        steps in prop::collection::vec((0usize..7, 0u8..3), 1..120),
        keeps in any::<bool>(),
    ) {
        let mut sim = if keeps { Sim::keeping_the_tally(1) } else { Sim::new(1) };
        let groups = weights.len();
        // For each group's first waiter: the grants to lighter or equal
        // groups since it became first, and the most groups waiting then.
        let mut since: HashMap<usize, (usize, usize)> = HashMap::new();
        let waiting = |sim: &Sim| {
            let mut gs: Vec<_> = sim.queue.values().map(|w| w.share.group.clone()).collect();
            gs.sort();
            gs.dedup();
            gs.len()
        };
        let firsts = |sim: &Sim| -> Vec<usize> {
            let mut seen = std::collections::HashSet::new();
            sim.queue.values().filter(|w| seen.insert(w.share.group.clone())).map(|w| w.seq).collect()
        };
        for (g, n) in steps {
            let g = g % groups;
            // `n` waiters of group g come, then one grant.
            for _ in 0..n {
                sim.wait(Ask { weight: weights[g], ..Ask::of(g as u8) });
            }
            let g_now = waiting(&sim);
            for seq in firsts(&sim) {
                let e = since.entry(seq).or_insert((0, 0));
                e.1 = e.1.max(g_now);
            }
            let served = sim.serve()?;
            prop_assert!(served.len() <= 1);
            let Some(&got) = served.first() else { continue };
            let got_group = sim.asks[&got].group;
            let got_weight = sim.asks[&got].weight;
            let (counted, most) = since.remove(&got).unwrap_or((0, 1));
            prop_assert!(
                counted < most.max(1),
                "{got} waited {counted} grants to lighter groups among {most}"
            );
            for (seq, e) in since.iter_mut() {
                let ask = &sim.asks[seq];
                if ask.group != got_group && got_weight <= ask.weight {
                    e.0 += 1;
                }
            }
            sim.release(got);
        }
    }

    /// On a key of LIMIT 1 with every group backlogged, a group of weight
    /// w gets its turns: over any window of n grants, within one grant of
    /// the n·w/W its weight's share gives when the weights are equal, and
    /// within 1 + G·w/W when they differ (the window's grants follow the
    /// turns of virtual time, each group within one grant of its own).
    #[test]
    fn backlogged_groups_get_their_weights_share_of_the_grants(
        weights in prop::collection::vec(1u32..9, 2..7),
        equal in any::<bool>(),
        keeps in any::<bool>(),
    ) {
        let weights: Vec<u32> = if equal { vec![weights[0]; weights.len()] } else { weights };
        let order = backlogged_order(&weights, 120, keeps);
        prop_assert_eq!(order.len(), 120);
        let total: u32 = weights.iter().sum();
        let g = weights.len() as f64;
        for start in 0..order.len() {
            let mut counts = vec![0usize; weights.len()];
            for (n, &got) in order[start..].iter().enumerate() {
                counts[got as usize] += 1;
                let n = (n + 1) as f64;
                for (i, &w) in weights.iter().enumerate() {
                    let share = f64::from(w) / f64::from(total);
                    let off = (counts[i] as f64 - n * share).abs();
                    let bound = if equal { 1.0 } else { 1.0 + g * share };
                    prop_assert!(off <= bound + 1e-9, "{weights:?}: group {i} off by {off} in {n} from {start}");
                }
            }
        }
    }
}

/// `backlogged`, each grant's group queueing one more waiter.
fn backlogged_order(weights: &[u32], n: usize, keeps_tally: bool) -> Vec<u8> {
    let mut sim = if keeps_tally {
        Sim::keeping_the_tally(1)
    } else {
        Sim::new(1)
    };
    let ask = |g: u8| Ask {
        weight: weights[g as usize],
        ..Ask::of(g)
    };
    for g in 0..weights.len() as u8 {
        sim.wait(ask(g));
    }
    let mut order = Vec::new();
    while order.len() < n {
        let got = one_at_a_time(&mut sim, 1, |_| None);
        let Some(&g) = got.first() else { break };
        order.push(g);
        sim.wait(ask(g));
    }
    order
}

#[test]
fn holders_that_release_and_queue_again_hold_by_their_weights() {
    // LIMIT 6, weights 2:1:1, eight workers each: every worker whose job
    // ends queues again at once, as a worker pool does; jobs of equal
    // length end oldest first.
    for mut sim in both(6) {
        let weights = [2u32, 1, 1];
        let ask = |g: u8| Ask {
            weight: weights[g as usize],
            ttl: 1_000_000,
            ..Ask::of(g)
        };
        for _ in 0..8 {
            for g in 0..3 {
                sim.wait(ask(g));
            }
        }
        let mut holding: std::collections::VecDeque<usize> = sim.serve().expect("a pass").into();
        let mut sums = [0usize; 3];
        let samples = 2000;
        for _ in 0..samples {
            let held: Vec<usize> = (0..3).map(|g| sim.held(Some(g))).collect();
            assert_eq!(held.iter().sum::<usize>(), 6, "the slots stay full");
            for g in 0..3 {
                let fair = 6.0 * f64::from(weights[g]) / 4.0;
                assert!(
                    (held[g] as f64 - fair).abs() <= 1.0,
                    "{held:?}: within a slot"
                );
                sums[g] += held[g];
            }
            let done = holding.pop_front().expect("a holder");
            let g = sim.asks[&done].group.expect("a group");
            sim.release(done);
            sim.wait(ask(g));
            holding.extend(sim.serve().expect("a pass"));
        }
        let shares: Vec<f64> = sums
            .iter()
            .map(|&s| s as f64 / (6 * samples) as f64)
            .collect();
        for (share, fair) in shares.iter().zip([0.5, 0.25, 0.25]) {
            assert!((share - fair).abs() <= 0.02, "shares {shares:?}");
        }
    }
}
