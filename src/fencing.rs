//! Fencing tokens: every grant gets a token strictly greater than every token
//! this server has granted, seen replicated, or loaded before.
//!
//! The counter lives in memory and is raised by every token that is loaded
//! (RDB, AOF, RESTORE) or replicated. That alone would not cover the grants a
//! primary made just before a failover that never reached its replica, nor
//! tokens of locks deleted before a restart. So a new token is also at least
//! `now_ms * TOKENS_PER_MS`: a floor that moves with the server clock. As long
//! as the new primary's clock is later than the moment of the old primary's
//! last grant (and the old primary did not grant faster than `TOKENS_PER_MS`
//! per millisecond on average, which a single Redis cannot), the new tokens are
//! larger than every token granted before. See docs/operations.md.

use std::sync::atomic::{AtomicI64, Ordering};

/// Tokens per millisecond of clock floor: a token reads as unix microseconds.
pub use crate::engine::TOKENS_PER_MS;

/// The next token after `last`, never below the clock floor for `now`.
pub fn next_after(last: i64, now: i64) -> i64 {
    last.saturating_add(1)
        .max(now.saturating_mul(TOKENS_PER_MS))
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

#[cfg(test)]
mod tests {
    use super::*;

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
    }

    #[test]
    fn issue_and_observe_share_one_counter() {
        let first = issue(10);
        observe(first + 1_000_000);
        assert!(issue(10) > first + 1_000_000);
    }
}
