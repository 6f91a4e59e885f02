//! The serving rule as a pure function of a key's queue: [`serve_pass`]
//! decides who is tried, in what order, and when to look again, given each
//! waiter's retry and a look at the key's holders. It calls no Redis: the
//! driver in `waiting.rs` gives it the retries and carries out what it
//! decided (replies, timers, the queue put back).

use std::ops::Bound;

use super::denials::{Denials, Kinds};
use super::order::Turn;
use super::queues::Tally;
use super::types::{
    GroupWaiters, Holdings, NoHolders, Queue, Served, Waiter, earliest, leave_group,
};
use crate::engine::GroupName;
use crate::ffi::WaiterReply;

/// One pass of the serving rule over a key's queue. Which waiter is tried
/// next, each tried at most once a pass on its own call (`retry`):
///
/// - **Fair among groups.** The waiters are grouped by GROUP (those without
///   one are a group of their own). The next slot is offered to the waiting
///   group that holds the fewest slots *now* for its weight (`holding(g) /
///   weight`, `holding` asked of the key, then counted on as this pass
///   grants), its oldest waiter first (FIFO within a group). Among groups
///   of equal share, the one whose turn comes first on the key's virtual
///   clock (`clock`: the earliest finish tag, weighted), so that groups
///   holding alike take turns, on a key of LIMIT 1 too. The clock is kept
///   with the queue's tally and moved by each grant; no share is kept
///   between passes, and a group that stops waiting leaves no trace on the
///   clock and banks nothing.
/// - **A denial ends nobody else's turn.** A waiter denied (say by its own
///   group's GROUPLIMIT) keeps its place; the pass goes on with the next
///   best, so a free slot goes to whoever can take it (work-conserving).
///   A denial also answers the later waiters of the same kind without a
///   retry (`denials`); with the queue's `tally` (its kinds and each
///   group's waiters, kept as waiters come and go), a group whose every
///   kind waiting was denied is tried no more, and the pass ends once every
///   kind was: its cost follows the waiters it serves and the kinds
///   waiting, not the length of the queue. Without it (the unit tests)
///   every waiter is visited. A group found holding the largest GROUPLIMIT
///   its waiters gave is not tried, and is kept apart (`parked`) after the
///   pass, not looked at again until the key may have freed one of its
///   slots: a pass past many tenants at their GROUPLIMIT costs what the
///   groups it looks at do, not the number waiting.
/// - **Shared/exclusive (PostgreSQL's rule).** A waiter is served only if
///   it conflicts with no earlier waiter: nobody queued after a waiting
///   exclusive request is tried before it is served (a writer blocks the
///   readers behind it; they are served together once it has held and
///   left), and the exclusive request itself is tried only when no earlier
///   waiter is left. Its conflicts with the holders are the engine's.
///
/// A grant or an error ends a wait; a denial keeps the waiter, in order,
/// and its earliest end of lease (or rate instant) says when to look again.
/// The waiters from `until` on (behind a multi-key waiter the key is
/// reserved for) are not tried and keep their place.
/// The rule of who is served, in what order and when to look again lives
/// here and nowhere else.
pub(super) fn serve_pass<C>(
    mut queue: Queue<C>,
    until: Option<usize>,
    tally: Option<Tally>,
    mut holdings: impl FnMut(&Waiter<C>, Holdings<'_>),
    mut retry: impl FnMut(&Waiter<C>) -> Served,
) -> Pass<C> {
    // The waiters from `until` on wait behind a multi-key waiter (the key
    // is reserved for it): they keep their place untried, none of them a
    // group's head. Left in the queue, not cut off and put back, which
    // would cost a pass the waiters behind.
    let before = (
        Bound::Unbounded,
        until.map_or(Bound::Unbounded, Bound::Excluded),
    );
    if queue.range(before).next().is_none() {
        return Pass {
            ended: Vec::new(),
            still: queue,
            wake_at: None,
            tally,
        };
    }
    let mut ended = Vec::new();
    let mut wake_at: Option<i64> = None;
    let known = tally.is_some();
    // The exclusive waiters still waiting (untried or denied in this pass)
    // come with the tally, kept as waiters come and go: no walk of the queue.
    let Tally {
        groups: mut seqs,
        kinds,
        mut exclusive,
        mut parked,
        mut order,
        mut clock,
        ..
    } = tally.unwrap_or_else(|| Tally::of(&queue));
    let mut kinds = known.then_some(kinds);
    let last = queue.range(before).next_back().map(|(&seq, _)| seq);
    // Each group's `held`, asked of the key (through the oldest waiter: all
    // wait on the one key) and counted on as the pass grants. The key counts
    // live holders only, those whose lease has ended left out as the first
    // retry's prune will remove them: no count again. The groups parked by
    // an earlier pass (at their GROUPLIMIT) are not asked: only those the
    // key may have freed come back first. The groups' order is kept from
    // the last pass (see `order`): only the groups whose place may have
    // changed are looked at, unless waiters behind a multi-key waiter must
    // be left out (their groups' turns are made for this pass alone).
    let mut afresh = until.is_some();
    if !parked.is_empty() {
        // A look of its own, made only while some groups are parked (the
        // key's counts are asked once the groups looked at are known).
        let mut woke = false;
        if let (Some(oldest), Some(kinds)) = (queue.values().next(), kinds.as_ref()) {
            holdings(oldest, &mut |key| {
                let mut moved = |seq| order.note(seq);
                afresh |= !parked.wake(key, kinds, &mut seqs, &mut moved);
                woke = true;
            });
        }
        if !woke {
            // The key was not looked at (a bug there): what the parked
            // groups hold is unknown.
            parked.unpark_all(&mut seqs);
            afresh = true;
        }
    }
    let mut denials = Denials::default();
    denials.parked(parked.kinds());
    // A group that holds the largest GROUPLIMIT its waiters gave has no
    // waiter a retry would grant (a pass only adds holders): it is not
    // tried, and the earliest end of a lease on the key, when it may hold
    // fewer, is when to look again. Many tenants at their GROUPLIMIT cost a
    // pass a look each, not a retry each, and are parked after it. Those
    // found so at the start get no turn; a turn kept from an earlier pass
    // may find one so when it comes out.
    let mut passed_over: Vec<&Option<GroupName>> = Vec::new();
    let mut next_lease = None;
    let mut stamp = None;
    let mut looked = false;
    let pass = order.next_pass();
    {
        let mut full = |name, waiters: &GroupWaiters, held| {
            let full = at_group_limit(name, held, kinds.as_ref());
            if full {
                waiters.take(pass);
                passed_over.push(name);
                if let Some(kinds) = kinds.as_ref() {
                    denials.pass_over(name, kinds);
                }
            }
            full
        };
        if let Some(oldest) = queue.values().next() {
            holdings(oldest, &mut |key| {
                next_lease = key.next_lease_end();
                stamp = key.stamp();
                order.start(key, &queue, &seqs, last, afresh, &mut full);
                looked = true;
            });
        }
        if !looked {
            // A bug there: every group counted as holding none, for this pass.
            order.start(&NoHolders, &queue, &seqs, last, true, &mut full);
            order.forget();
        }
    }
    let mut turns = std::mem::take(&mut order.turns);
    // The groups this pass tried, in the order it took their first turn.
    let mut groups: Vec<Group<'_>> = Vec::new();
    let mut skipped = !passed_over.is_empty();
    let mut behind: Vec<Turn> = Vec::new();
    let mut fence = None;
    loop {
        // Every kind still waiting was denied (or passed over): so would the
        // rest be. Not asked once no group is left to try (the pass ends
        // anyway).
        if (turns.is_empty() && behind.is_empty())
            || kinds
                .as_ref()
                .is_some_and(|k| denials.cover(k, seqs.keys()))
        {
            break;
        }
        let barrier = exclusive.first().copied();
        // The oldest still waiting: those whose wait ended left the queue.
        let oldest = queue.keys().next().copied();
        if fence != Some((barrier, oldest)) {
            fence = Some((barrier, oldest));
            turns.extend(behind.drain(..));
        }
        let mut next = None;
        while let Some(turn) = turns.pop() {
            let turn = match turn.group {
                Some(_) if turn.pass == pass => turn,
                _ => {
                    // A group's first turn in this pass: taken if it still
                    // stands, its count checked if an earlier pass made it.
                    let Some(waiter) = queue.get(&turn.seq) else {
                        continue;
                    };
                    let Some((name, waiters)) = seqs.get_key_value(&waiter.share.group) else {
                        continue;
                    };
                    if waiters.first().0 != turn.seq || waiters.taken_in(pass) {
                        continue;
                    }
                    if turn.pass != pass {
                        let mut held = None;
                        holdings(waiter, &mut |key| held = Some(key.held(name.as_ref())));
                        if let Some(held) = held.filter(|&held| held != turn.held) {
                            turns.push(Turn { held, pass, ..turn });
                            continue;
                        }
                    }
                    if at_group_limit(name, turn.held, kinds.as_ref()) {
                        waiters.take(pass);
                        passed_over.push(name);
                        skipped = true;
                        if let Some(kinds) = kinds.as_ref() {
                            denials.pass_over(name, kinds);
                        }
                        continue;
                    }
                    let i = groups.len();
                    let mut group = Group::new(name, waiters, last);
                    group.held = turn.held;
                    waiters.take(pass);
                    let turn = group.turn(i, pass);
                    groups.push(group);
                    match turn {
                        Some(turn) => turn,
                        None => continue,
                    }
                }
            };
            let blocked = match barrier {
                Some(b) if turn.seq > b => true,
                Some(b) if turn.seq == b => oldest != Some(b),
                _ => false,
            };
            if !blocked {
                next = Some(turn);
                break;
            }
            behind.push(turn);
        }
        let Some(Turn {
            group: Some(i),
            seq,
            weight,
            ..
        }) = next
        else {
            break;
        };
        let Some(waiter) = queue.get(&seq) else {
            continue;
        };
        let admission = waiter.call.admission();
        let served = match denials.answer(admission, &waiter.share) {
            Some(lease_end) => Served::Denied {
                lease_end,
                full: None,
            },
            None => {
                let served = retry(waiter);
                denials.record(admission, &waiter.share, &served);
                served
            }
        };
        // Whether the wait ends, and with what reply (`None`: nil).
        let ends = match served {
            Served::Granted(token) => {
                if let Some(g) = groups.get_mut(i) {
                    g.held += 1;
                    // Its next turn comes once the others had theirs.
                    g.seqs.granted(&mut clock, weight);
                }
                Some(Some(WaiterReply::Token(token)))
            }
            Served::Failed(e) => Some(Some(WaiterReply::Error(e))),
            Served::Lapsed => Some(None),
            Served::Denied { lease_end, .. } => {
                wake_at = earliest(wake_at, lease_end);
                None
            }
        };
        if let Some(reply) = ends {
            exclusive.remove(&seq);
            if let Some(kinds) = kinds.as_mut() {
                kinds.remove(admission, &waiter.share);
            }
            if let Some(waiter) = queue.remove(&seq) {
                ended.push((waiter, reply));
            }
        }
        // Whether every kind of the group just tried is denied now: asked of
        // that group, once a turn, not of every group at every turn (a queue
        // of many tenants would pay groups times turns). A group that
        // another group's denial by LIMIT covers is found so when next
        // tried, answered without a retry; `cover`, above, sees the whole
        // queue covered at once. A group not covered goes back in with its
        // next waiter.
        if let Some(g) = groups.get_mut(i) {
            g.covered = kinds
                .as_ref()
                .is_some_and(|k| denials.cover_group(k, g.name));
            if !g.covered {
                g.advance();
                turns.extend(g.turn(i, pass));
            }
        }
    }
    // The groups tried or passed over are looked at again at the next start
    // (their counts and first waiters changed, or they were not parked);
    // the turns this pass gave them no longer stand, nor those behind a
    // waiting exclusive request.
    for g in &groups {
        order.note(g.seqs.first().0);
    }
    for name in &passed_over {
        if let Some(waiters) = seqs.get(*name) {
            order.note(waiters.first().0);
        }
    }
    let passed_over: Vec<Option<GroupName>> = passed_over.into_iter().cloned().collect();
    drop((groups, denials, behind));
    order.turns = turns;
    // The waiters that leave the queue leave their group's (their kinds
    // were counted out as they left, for `cover`), a group's next waiter
    // becoming its first.
    for (waiter, _) in &ended {
        if let Some(first) = leave_group(&mut seqs, waiter) {
            order.note(first);
        }
    }
    // The groups passed over are parked, with those still parked: all hold
    // their GROUPLIMIT as of the key's stamp at the start of the pass (the
    // pass only added holders; what it removed, the key names since).
    match (kinds.as_ref(), stamp) {
        (Some(kinds), Some(stamp)) => {
            for name in passed_over {
                if let Some(waiters) = seqs.remove(&name) {
                    parked.park(name, waiters, kinds);
                }
            }
            parked.settle(stamp);
        }
        _ => {
            if !parked.is_empty() {
                // Back without a turn: the next pass makes them all.
                order.forget();
            }
            parked.unpark_all(&mut seqs);
        }
    }
    if skipped || !parked.is_empty() {
        wake_at = earliest(wake_at, next_lease);
    }
    // The denied, the untried (behind a waiting exclusive request, of a
    // kind denied, or of a group at its GROUPLIMIT) keep their place.
    if queue.range(before).next().is_none() {
        wake_at = None;
    }
    Pass {
        ended,
        still: queue,
        wake_at,
        tally: kinds.map(|kinds| Tally {
            groups: seqs,
            kinds,
            // Looked at again after a pass, which served and pruned.
            full_at: None,
            exclusive,
            parked,
            order,
            clock,
        }),
    }
}

/// Whether `group`, holding `held`, holds the largest GROUPLIMIT its
/// waiters gave (`kinds` known): no retry of its waiters would grant one.
fn at_group_limit(group: &Option<GroupName>, held: usize, kinds: Option<&Kinds>) -> bool {
    held > 0
        && kinds
            .and_then(|k| k.group_gate(group))
            .is_some_and(|max| held >= max as usize)
}

/// One group of waiters in a pass: its next waiter not tried yet (FIFO
/// within the group), found in the group's own waiters, and the slots the
/// group holds (asked of the key, then counted on).
struct Group<'a> {
    name: &'a Option<GroupName>,
    /// The group's waiters by number, with their weights, the ended ones
    /// included until the pass is over (they come before `head`).
    seqs: &'a GroupWaiters,
    /// The number and weight of its next waiter: what places the group
    /// among the others.
    head: Option<(usize, u32)>,
    /// The last waiter of the pass (none: an empty pass): those after it
    /// are no head.
    last: Option<usize>,
    held: usize,
    /// Every kind of the group that waits was denied in this pass (which
    /// stays so: a pass only adds denials and removes waiters).
    covered: bool,
}

impl<'a> Group<'a> {
    fn new(name: &'a Option<GroupName>, seqs: &'a GroupWaiters, last: Option<usize>) -> Self {
        let mut group = Self {
            name,
            seqs,
            head: None,
            last,
            held: 0,
            covered: false,
        };
        group.head = group.head_from(Some(seqs.first()));
        group
    }

    fn head_from(&self, next: Option<(usize, u32)>) -> Option<(usize, u32)> {
        next.filter(|&(seq, _)| self.last.is_some_and(|last| seq <= last))
    }

    /// Its head was tried: the group's next waiter becomes its head.
    fn advance(&mut self) {
        self.head = self
            .head
            .and_then(|(seq, _)| self.head_from(self.seqs.after(seq)));
    }

    /// The group's place in the order of turns, as group `i` of `pass`
    /// (its place on the key's clock with it); `None` when it has nobody
    /// left to try.
    fn turn(&self, i: usize, pass: u64) -> Option<Turn> {
        let (seq, weight) = self.head.filter(|_| !self.covered)?;
        Some(Turn {
            held: self.held,
            weight,
            tag: self.seqs.tag(weight),
            seq,
            pass,
            group: Some(i),
        })
    }
}

/// What one [`serve_pass`] decided.
pub(super) struct Pass<C> {
    /// The waiters whose wait ends, with their reply (`None`: nil, their
    /// lease lapsed), in queue order.
    pub(super) ended: Vec<(Waiter<C>, Option<WaiterReply>)>,
    /// The waiters still denied, in their order.
    pub(super) still: Queue<C>,
    /// When to serve the key again: the earliest end of lease (or instant
    /// the rate allows) any denial gave, while someone still waits.
    pub(super) wake_at: Option<i64>,
    /// The tally it was given, less the waiters it ended.
    pub(super) tally: Option<Tally>,
}
