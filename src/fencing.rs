//! Fencing tokens: every grant gets a token strictly greater than every token
//! this server has granted, seen replicated, or loaded before, and a primary
//! that takes over grants tokens above every token the primary it replaced
//! can grant while cut off, for [`PROMOTION_BOUND_MS`].
//!
//! The counter lives in memory and is raised by every token that is loaded
//! (RDB, AOF, RESTORE, the RDB's module aux data) or replicated. That alone
//! would not cover the grants a primary made just before a failover that
//! never reached its replica, nor tokens of locks deleted before a restart.
//! So a new token is also at least `now_ms * TOKENS_PER_MS`: a floor that
//! moves with the server clock (a token reads as unix microseconds).
//!
//! The clock alone does not order two primaries: a replaced primary that is
//! cut off from its replicas and Sentinels keeps granting from its own clock,
//! and its tokens would interleave with (or equal) the new primary's. So a
//! server that becomes a primary (the role-change event: `REPLICAOF NO ONE`,
//! a Sentinel or Cluster failover) jumps its counter ahead of its clock by
//! the bound: every token it grants from then on is above every token the
//! old primary grants in the bound after the promotion, as long as the old
//! primary's clock is not ahead of the new one's and it grants fewer than
//! `TOKENS_PER_MS` tokens per millisecond (which a single Redis cannot). The
//! new primary's tokens then count up by one a grant, until its clock
//! catches up with them. See docs/operations.md.

use std::sync::atomic::{AtomicI64, Ordering};

/// Tokens per millisecond of clock floor: a token reads as unix microseconds.
pub use crate::engine::TOKENS_PER_MS;

/// How long after a promotion the new primary's tokens stay above those of
/// a replaced primary that keeps granting, cut off: one hour. Each promotion
/// spends this much of the tokens' room below 2^53 (over two hundred years of
/// microseconds are left: about two million promotions).
pub const PROMOTION_BOUND_MS: i64 = 3_600_000;

/// The largest integer a JavaScript number holds exactly (2^53 - 1): no
/// token goes above it.
pub const MAX_TOKEN: i64 = (1 << 53) - 1;

/// The next token after `last`, never below the clock floor for `now`.
pub fn next_after(last: i64, now: i64) -> i64 {
    last.saturating_add(1)
        .max(now.saturating_mul(TOKENS_PER_MS))
}

/// The counter after a promotion at `now`: the bound ahead of both the
/// highest token seen and the clock, so that the next token is above every
/// token a replaced primary grants until `now + PROMOTION_BOUND_MS` by its
/// clock. It never goes down, nor above [`MAX_TOKEN`] by itself.
pub fn promoted(last: i64, now: i64) -> i64 {
    let jumped = last
        .max(now.saturating_mul(TOKENS_PER_MS))
        .saturating_add(PROMOTION_BOUND_MS * TOKENS_PER_MS);
    jumped.min(MAX_TOKEN).max(last)
}

/// The counter as worth saving at `now`: `Some` only when it is ahead of the
/// clock floor (after a promotion, until the clock catches up), since the
/// clock covers it otherwise. What the RDB's aux data keeps.
pub fn ahead_of_clock(last: i64, now: i64) -> Option<i64> {
    (last >= now.saturating_mul(TOKENS_PER_MS)).then_some(last)
}

/// The highest token issued, loaded or replicated on this server.
static LAST_TOKEN: AtomicI64 = AtomicI64::new(0);

/// Issues a new token. Redis runs commands on one thread; the atomic is only
/// there to make the global safe to share, not for contention.
pub fn issue(now: i64) -> i64 {
    let token = next_after(LAST_TOKEN.load(Ordering::Relaxed), now);
    LAST_TOKEN.store(token, Ordering::Relaxed);
    token
}

/// Records a token that was granted elsewhere (loaded or replicated), so that
/// later grants here go above it.
pub fn observe(token: i64) {
    LAST_TOKEN.fetch_max(token, Ordering::Relaxed);
}

/// This server became a primary at `now`: jump the counter ahead (see
/// [`promoted`]). Returns the new counter.
pub fn promote(now: i64) -> i64 {
    let last = LAST_TOKEN.load(Ordering::Relaxed);
    let jumped = promoted(last, now);
    LAST_TOKEN.fetch_max(jumped, Ordering::Relaxed);
    jumped
}

/// The counter, when the RDB must keep it (see [`ahead_of_clock`]).
pub fn to_save(now: i64) -> Option<i64> {
    ahead_of_clock(LAST_TOKEN.load(Ordering::Relaxed), now)
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    /// 2026-12-01, unix ms.
    const NOW: i64 = 1_796_083_200_000;

    #[test]
    fn tokens_follow_the_clock_floor() {
        assert_eq!(next_after(0, 1_700_000_000_000), 1_700_000_000_000_000);
    }

    #[test]
    fn tokens_strictly_increase_within_one_millisecond_and_backwards_clock() {
        let a = next_after(0, 5);
        let b = next_after(a, 5);
        let c = next_after(b, 1); // the clock stepped back
        assert!(a < b && b < c);
    }

    #[test]
    fn a_replicated_token_ahead_of_the_clock_raises_the_next_grant() {
        let ahead = 9_000_000_000_000_000;
        assert_eq!(next_after(ahead, 1_700_000_000_000), ahead + 1);
    }

    #[test]
    fn no_overflow_at_the_edges() {
        assert_eq!(next_after(i64::MAX, 0), i64::MAX);
        assert_eq!(next_after(0, i64::MAX), i64::MAX);
        assert_eq!(promoted(i64::MAX, i64::MAX), i64::MAX);
        assert_eq!(promoted(0, i64::MAX), MAX_TOKEN);
        assert_eq!(promoted(-5, i64::MIN), 3_600_000_000 - 5);
    }

    #[test]
    fn a_promotion_jumps_the_bound_ahead_of_the_clock_and_of_the_last_token() {
        assert_eq!(
            promoted(0, NOW),
            NOW * TOKENS_PER_MS + PROMOTION_BOUND_MS * TOKENS_PER_MS
        );
        let ahead = NOW * TOKENS_PER_MS + 5_000_000_000;
        assert_eq!(promoted(ahead, NOW), ahead + PROMOTION_BOUND_MS * 1000);
        // Today's tokens (microseconds of 2026) leave room for millions of
        // promotions below 2^53.
        const { assert!((MAX_TOKEN - NOW * 1000) / (PROMOTION_BOUND_MS * 1000) > 2_000_000) };
    }

    #[test]
    fn the_counter_is_saved_only_while_ahead_of_the_clock() {
        let jumped = promoted(0, NOW);
        assert_eq!(ahead_of_clock(jumped, NOW), Some(jumped));
        assert_eq!(
            ahead_of_clock(jumped, NOW + PROMOTION_BOUND_MS - 1),
            Some(jumped)
        );
        assert_eq!(ahead_of_clock(jumped, NOW + PROMOTION_BOUND_MS + 1), None);
        assert_eq!(ahead_of_clock(NOW * 1000 - 1, NOW), None);
    }

    #[test]
    fn issue_and_observe_share_one_counter() {
        let first = issue(10);
        observe(first + 1_000_000);
        assert!(issue(10) > first + 1_000_000);
        let before = issue(10);
        let jumped = promote(10);
        assert!(jumped > before && issue(10) == jumped + 1);
    }

    /// A primary's grants while cut off: from `last` at the cut, `grants`
    /// (gap in ms before each, at most `TOKENS_PER_MS` grants a ms) by its
    /// clock, as `issue` makes them.
    fn grants_from(mut last: i64, start: i64, gaps: &[(i64, u16)]) -> Vec<(i64, i64)> {
        let mut now = start;
        let mut out = Vec::new();
        for &(gap, n) in gaps {
            now += gap;
            for _ in 0..n.min(999) {
                last = next_after(last, now);
                out.push((now, last));
            }
        }
        out
    }

    proptest! {
        /// The property the design exists for. A primary grants tokens, part
        /// of which reach its replica; it is cut off and keeps granting; the
        /// replica is promoted `failover_ms` after the cut and grants too.
        /// Every token of the new primary is above every token the old one
        /// granted within the bound after the promotion, and none are equal,
        /// whatever the grants, the lag and the clock skew (the new primary's
        /// clock not behind the old one's).
        #[test]
        fn a_promoted_replica_grants_above_a_cut_off_primary_within_the_bound(
            before in prop::collection::vec((0i64..50, 0u16..1000), 0..20),
            replicated in 0usize..10_000,
            cut_off in prop::collection::vec((0i64..600_000, 0u16..1000), 0..30),
            failover_ms in 0i64..60_000,
            after in prop::collection::vec((0i64..600_000, 0u16..1000), 1..30),
            skew_ms in 0i64..1_000,
            already_ahead in prop::option::of(0i64..PROMOTION_BOUND_MS * 1000),
        ) {
            // The old primary may itself be ahead of its clock (promoted
            // within the bound before), or follow the clock.
            let start = NOW;
            let first = already_ahead.map_or(0, |a| start * 1000 + a);
            let old_before = grants_from(first, start, &before);
            let cut = old_before.last().map_or(start, |g| g.0);
            let at_cut = old_before.last().map_or(first, |g| g.1);
            // The replica saw the grants up to some point before the cut.
            let seen = old_before
                .get(..replicated.min(old_before.len()))
                .and_then(|g| g.last())
                .map_or(first, |g| g.1);
            let old_after = grants_from(at_cut, cut, &cut_off);
            // The replica's clock reads `skew_ms` later than the old one's.
            let promotion = cut + failover_ms;
            let jumped = promoted(seen, promotion + skew_ms);
            let new = grants_from(jumped, promotion + skew_ms, &after);
            let lowest_new = new.iter().map(|g| g.1).min().unwrap_or(i64::MAX);
            for &(at, token) in &old_after {
                if at < promotion + PROMOTION_BOUND_MS {
                    prop_assert!(token < lowest_new, "old {token} at {at}, new from {lowest_new}");
                }
            }
            for &(_, token) in &old_before {
                prop_assert!(token < lowest_new);
            }
            // On each server alone, tokens strictly rise.
            for side in [&old_after, &new] {
                prop_assert!(side.windows(2).all(|w| w[0].1 < w[1].1));
            }
            prop_assert!(new.iter().all(|g| g.1 <= MAX_TOKEN));
        }

        /// Promotions in a row (a failover back and forth) only raise the
        /// counter, each by at least the bound, and never past 2^53.
        #[test]
        fn promotions_only_raise_the_counter(
            steps in prop::collection::vec((-1_000i64..100_000, any::<bool>()), 1..50),
        ) {
            let mut last = 0;
            let mut now = NOW;
            for (dt, promote) in steps {
                now += dt; // the clock may step back
                let next = if promote { promoted(last, now) } else { next_after(last, now) };
                prop_assert!(next > last);
                if promote {
                    prop_assert!(next >= last + PROMOTION_BOUND_MS * 1000);
                    prop_assert!(next >= (now + PROMOTION_BOUND_MS) * 1000);
                }
                prop_assert!(next <= MAX_TOKEN);
                last = next;
            }
        }
    }
}
