//! The lock engine: a lock and its holders, with no Redis in sight.
//!
//! Every function takes the current time (`now`, unix ms) explicitly, so the
//! rules of the spec can be tested with plain values and so that a replica can
//! replay the primary's decision with the primary's clock.

use std::fmt;

mod holder;
mod indexed;
mod rate;

use holder::Holders;
pub use holder::{Holder, Ordered};
pub use rate::{MAX_PER_MS, MAX_RATE, Rate, RateLimit};

/// Largest job id (and owner id) accepted, in bytes.
pub const MAX_JID_BYTES: usize = 1024;
/// Largest lock type name accepted, in bytes.
pub const MAX_TYPE_BYTES: usize = 64;
/// The lock type of a holder that was not given one.
pub const DEFAULT_TYPE: &str = "lock";
/// The lock types job systems use: a holder keeps one of these as an index.
pub const KNOWN_TYPES: [&str; 6] = [
    DEFAULT_TYPE,
    "until_executed",
    "until_executing",
    "while_executing",
    "until_and_while_executing",
    "until_expired",
];

/// Largest LIMIT accepted (2^31 - 1).
pub const MAX_LIMIT: i64 = i32::MAX as i64;

/// A client error. `Display` gives the exact reply text, error code first.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LockError {
    InvalidExpire,
    InvalidJid,
    InvalidOwner,
    InvalidType,
    MetaNotObject,
    MetaTooLarge { max: usize },
    InvalidRate,
}

impl fmt::Display for LockError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::InvalidExpire => f.write_str("ERR invalid expire time"),
            Self::InvalidJid => write!(f, "ERR jid must be 1 to {MAX_JID_BYTES} bytes"),
            Self::InvalidOwner => write!(f, "ERR OWNER must be 1 to {MAX_JID_BYTES} bytes"),
            Self::InvalidType => write!(
                f,
                "ERR TYPE must be 1 to {MAX_TYPE_BYTES} characters of [A-Za-z0-9_:.-]"
            ),
            Self::MetaNotObject => f.write_str("ERR META must be a JSON object"),
            Self::MetaTooLarge { max } => {
                write!(f, "ERR META is larger than unique.max-meta-bytes ({max})")
            }
            Self::InvalidRate => write!(
                f,
                "ERR RATE n PER ms [BURST b] takes n from 1 to {MAX_RATE}, ms from 1 to {MAX_PER_MS} and b from 0 to {MAX_RATE}"
            ),
        }
    }
}

pub fn validate_jid(jid: &[u8]) -> Result<(), LockError> {
    if jid.is_empty() || jid.len() > MAX_JID_BYTES {
        return Err(LockError::InvalidJid);
    }
    Ok(())
}

pub fn validate_owner(owner: &[u8]) -> Result<(), LockError> {
    if owner.is_empty() || owner.len() > MAX_JID_BYTES {
        return Err(LockError::InvalidOwner);
    }
    Ok(())
}

/// A lock type is 1 to 64 bytes of `[A-Za-z0-9_:.-]`; returns it as text.
pub fn validate_type(name: &[u8]) -> Result<&str, LockError> {
    let allowed = |b: &u8| b.is_ascii_alphanumeric() || matches!(b, b'_' | b':' | b'.' | b'-');
    if name.is_empty() || name.len() > MAX_TYPE_BYTES || !name.iter().all(allowed) {
        return Err(LockError::InvalidType);
    }
    // Every allowed byte is ASCII, so this cannot fail.
    std::str::from_utf8(name).map_err(|_| LockError::InvalidType)
}

/// META must be one JSON object of at most `max_bytes` bytes; returns it as text.
///
/// The text is validated without building a tree (serde_json's `IgnoredAny`),
/// and kept exactly as given.
pub fn validate_meta(meta: &[u8], max_bytes: usize) -> Result<&str, LockError> {
    if meta.len() > max_bytes {
        return Err(LockError::MetaTooLarge { max: max_bytes });
    }
    let text = std::str::from_utf8(meta).map_err(|_| LockError::MetaNotObject)?;
    if !text.trim_start().starts_with('{') {
        return Err(LockError::MetaNotObject);
    }
    serde_json::from_str::<serde::de::IgnoredAny>(text).map_err(|_| LockError::MetaNotObject)?;
    Ok(text)
}

/// How a LOCK call asks for a lease.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Expiry {
    /// TTL ms: relative to now.
    Ttl(i64),
    /// PXAT unix-ms: absolute.
    At(i64),
}

impl Expiry {
    /// The absolute end of the lease: later than `now`, and within i64.
    pub fn resolve(self, now: i64) -> Result<i64, LockError> {
        let at = match self {
            Self::Ttl(ms) if ms > 0 => now.checked_add(ms).ok_or(LockError::InvalidExpire)?,
            Self::Ttl(_) => return Err(LockError::InvalidExpire),
            Self::At(at) => at,
        };
        if at <= now {
            return Err(LockError::InvalidExpire);
        }
        Ok(at)
    }
}

/// A validated LOCK call, its lease already resolved against `now`.
#[derive(Debug, Clone, Copy)]
pub struct LockRequest<'a> {
    pub jid: &'a [u8],
    /// 0 means no limit.
    pub limit: u32,
    pub expires_at: Option<i64>,
    pub lock_type: Option<&'a str>,
    pub owner: Option<&'a [u8]>,
    pub meta: Option<&'a str>,
    /// RATE n PER ms [BURST b]: a new grant also needs the key's rate.
    pub rate: Option<RateLimit>,
}

impl<'a> LockRequest<'a> {
    pub fn new(jid: &'a [u8]) -> Self {
        Self {
            jid,
            limit: 1,
            expires_at: None,
            lock_type: None,
            owner: None,
            meta: None,
            rate: None,
        }
    }
}

/// What a LOCK call did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Acquired {
    /// A new holder, with its new token.
    Granted(i64),
    /// An existing holder renewed, with its unchanged token.
    Renewed(i64),
    /// The lock is full.
    Denied,
    /// There is room, but the key's rate allows no grant before this unix ms.
    RateLimited(i64),
}

/// A lock: its holders in grant order, oldest first.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Lock {
    holders: Holders,
}

impl Lock {
    /// A lock from holders already in grant order (a decoded value).
    pub fn from_holders(holders: Vec<Holder>) -> Self {
        Self {
            holders: Holders::from_vec(holders),
        }
    }

    /// Every holder, oldest grant first.
    pub fn holders(&self) -> Ordered<'_> {
        self.holders.ordered()
    }

    /// The holders whose lease has not ended at `now`, oldest grant first.
    pub fn live_holders(&self, now: i64) -> impl Iterator<Item = &Holder> {
        self.holders().filter(move |h| h.is_live(now))
    }

    /// A page of the holders (live or not) for a walk in steps: up to about
    /// `count` from `cursor` (0 to start), and the cursor of the next page (0
    /// when the walk is over). A walk meets every holder present all along
    /// at least once, as SCAN does; a small lock comes whole in one page.
    pub fn holders_page(&self, cursor: usize, count: usize) -> (usize, Vec<&Holder>) {
        self.holders.page(cursor, count)
    }

    /// No holder and no rate.
    pub fn is_empty(&self) -> bool {
        self.holders.is_empty() && self.holders.rate().is_none()
    }

    /// Nothing left to keep at `now`: no holder, and no rate or one with
    /// nothing spent any more. The key then goes.
    pub fn is_done(&self, now: i64) -> bool {
        self.holders.is_empty() && self.holders.rate().is_none_or(|r| r.is_idle(now))
    }

    /// The key's rate state, if a call with RATE granted on it.
    pub fn rate(&self) -> Option<&Rate> {
        self.holders.rate()
    }

    /// Puts the rate state exactly as given: replays a primary's.
    pub fn set_rate(&mut self, rate: Option<Rate>) {
        self.holders.set_rate(rate);
    }

    pub fn len(&self) -> usize {
        self.holders.len()
    }

    /// Removes the holders whose lease ran out; returns how many.
    pub fn prune(&mut self, now: i64) -> usize {
        self.prune_each(now, |_| {})
    }

    /// Removes the holders whose lease ran out, showing each to `removed`.
    pub fn prune_each(&mut self, now: i64, removed: impl FnMut(&Holder)) -> usize {
        self.holders.prune(now, removed)
    }

    /// Removes every holder whose owner is `owner`, showing each to `removed`.
    pub fn remove_owner_each(&mut self, owner: &[u8], removed: impl FnMut(&Holder)) -> usize {
        self.holders
            .remove_where(|h| h.owner() == Some(owner), removed)
    }

    /// True when some holder has run out (a prune would remove something).
    pub fn has_expired(&self, now: i64) -> bool {
        self.holders.earliest_lease().is_some_and(|at| at <= now)
    }

    /// True when the lock has holders and every one of them has run out.
    pub fn all_expired(&self, now: i64) -> bool {
        self.holders.all_ended(now)
    }

    /// The earliest end of lease among the holders, if any has one: after
    /// [`Lock::prune`], when the next slot frees by itself.
    pub fn earliest_lease(&self) -> Option<i64> {
        self.holders.earliest_lease()
    }

    /// Acquires or renews a hold. Call after [`Lock::prune`] with the same `now`:
    /// every holder is then live. `next_token` is called only for a new grant.
    pub fn acquire(
        &mut self,
        req: &LockRequest<'_>,
        now: i64,
        next_token: impl FnOnce() -> i64,
    ) -> Acquired {
        debug_assert!(!self.has_expired(now));
        if let Some(token) = self.holders.update(req.jid, |h| h.renew(req)) {
            return Acquired::Renewed(token);
        }
        if req.limit != 0 && self.holders.len() >= req.limit as usize {
            return Acquired::Denied;
        }
        // The rate is spent by grants only, under the limit the call gives
        // (a new limit applies at once to what was spent before).
        let rate = req.rate.map(|limit| {
            self.holders
                .rate()
                .map_or_else(|| Rate::new(limit), |r| r.under(limit))
        });
        if let Some(mut rate) = rate {
            if let Err(at) = rate.check(now) {
                return Acquired::RateLimited(at);
            }
            rate.spend(now);
            self.holders.set_rate(Some(rate));
        }
        let token = next_token();
        self.holders.push(Holder::new(
            req.jid,
            token,
            now,
            req.expires_at,
            req.lock_type.unwrap_or(DEFAULT_TYPE),
            req.owner,
            req.meta.map(str::as_bytes),
        ));
        Acquired::Granted(token)
    }

    /// Removes `jid`'s hold and returns it, if it was there. Call after
    /// [`Lock::prune`].
    pub fn release(&mut self, jid: &[u8]) -> Option<Holder> {
        self.holders.remove(jid)
    }

    /// The holder of `jid`, if any (live or not).
    pub fn holder(&self, jid: &[u8]) -> Option<&Holder> {
        self.holders.find(jid)
    }

    /// Puts `holder` exactly as given: replaces the holder of the same jid in
    /// place, or appends it. This replays a grant or renewal decided elsewhere.
    pub fn put(&mut self, holder: Holder) {
        let jid = holder.jid().to_vec();
        let mut holder = Some(holder);
        self.holders.update(&jid, |h| {
            if let Some(given) = holder.take() {
                *h = given;
            }
        });
        if let Some(holder) = holder {
            self.holders.push(holder);
        }
    }

    /// The key's Redis expiry: the latest lease when every holder has one,
    /// and not before its rate is idle; `None` when any holder has no lease
    /// (or there is neither holder nor rate).
    pub fn key_expiry(&self) -> Option<i64> {
        let leases = self.holders.latest_lease()?;
        match (leases, self.rate().map(Rate::idle_at)) {
            (Some(a), Some(b)) => Some(a.max(b)),
            (a, b) => a.or(b),
        }
    }

    /// The highest token of any holder (0 when none).
    pub fn max_token(&self) -> i64 {
        self.holders.iter().map(|h| h.token).max().unwrap_or(0)
    }

    /// Approximate memory owned by this lock, for MEMORY USAGE: the lock,
    /// a slot per holder and the bytes of their strings.
    pub fn mem_usage(&self) -> usize {
        std::mem::size_of::<Self>() + self.holders.mem_usage()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: i64 = 1_700_000_000_000;

    /// A token source counting up from 100, like the server's.
    struct Tokens(i64);
    impl Tokens {
        fn next(&mut self) -> impl FnOnce() -> i64 + '_ {
            || {
                self.0 += 1;
                self.0
            }
        }
    }

    fn req(jid: &str) -> LockRequest<'_> {
        LockRequest::new(jid.as_bytes())
    }

    fn jids(lock: &Lock, now: i64) -> Vec<String> {
        lock.live_holders(now)
            .map(|h| String::from_utf8_lossy(h.jid()).into_owned())
            .collect()
    }

    #[test]
    fn first_grant_gets_a_token_with_defaults() {
        let mut lock = Lock::default();
        let mut t = Tokens(100);
        assert_eq!(
            lock.acquire(&req("a"), NOW, t.next()),
            Acquired::Granted(101)
        );
        let h = lock.holder(b"a").cloned();
        let h = h.as_ref();
        assert_eq!(h.map(|h| h.acquired_at), Some(NOW));
        assert_eq!(h.map(|h| h.lock_type()), Some(DEFAULT_TYPE));
        assert_eq!(h.and_then(|h| h.expires_at()), None);
        assert_eq!(h.and_then(|h| h.owner()), None);
        assert_eq!(lock.key_expiry(), None);
    }

    #[test]
    fn limit_one_denies_a_second_jid_and_issues_no_token() {
        let mut lock = Lock::default();
        let mut t = Tokens(0);
        lock.acquire(&req("a"), NOW, t.next());
        assert_eq!(lock.acquire(&req("b"), NOW, t.next()), Acquired::Denied);
        assert_eq!(t.0, 1, "a denial must not consume a token");
        assert_eq!(jids(&lock, NOW), ["a"]);
    }

    #[test]
    fn limit_n_admits_n_holders() {
        let mut lock = Lock::default();
        let mut t = Tokens(0);
        for jid in ["a", "b", "c"] {
            let r = LockRequest {
                limit: 3,
                ..req(jid)
            };
            assert!(matches!(
                lock.acquire(&r, NOW, t.next()),
                Acquired::Granted(_)
            ));
        }
        let r = LockRequest {
            limit: 3,
            ..req("d")
        };
        assert_eq!(lock.acquire(&r, NOW, t.next()), Acquired::Denied);
        // LIMIT applies to the call that gives it: a larger limit admits more.
        let r = LockRequest {
            limit: 4,
            ..req("d")
        };
        assert_eq!(lock.acquire(&r, NOW, t.next()), Acquired::Granted(4));
        assert_eq!(jids(&lock, NOW), ["a", "b", "c", "d"]);
    }

    #[test]
    fn limit_zero_is_a_counting_lock() {
        let mut lock = Lock::default();
        let mut t = Tokens(0);
        for i in 0..1000 {
            let jid = format!("j{i}");
            let r = LockRequest {
                limit: 0,
                ..req(&jid)
            };
            assert!(matches!(
                lock.acquire(&r, NOW, t.next()),
                Acquired::Granted(_)
            ));
        }
        assert_eq!(lock.len(), 1000);
        assert!(lock.release(b"j0").is_some());
        assert_eq!(lock.len(), 999);
    }

    #[test]
    fn renewal_keeps_token_and_acquired_at_and_ignores_limit() {
        let mut lock = Lock::default();
        let mut t = Tokens(0);
        let first = LockRequest {
            expires_at: Some(NOW + 1000),
            ..req("a")
        };
        lock.acquire(&first, NOW, t.next());
        // Full at LIMIT 1, yet the holder itself renews.
        let renew = LockRequest {
            expires_at: Some(NOW + 5000),
            ..req("a")
        };
        assert_eq!(
            lock.acquire(&renew, NOW + 10, t.next()),
            Acquired::Renewed(1)
        );
        let h = lock.holder(b"a");
        assert_eq!(h.map(|h| h.acquired_at), Some(NOW));
        assert_eq!(h.and_then(|h| h.expires_at()), Some(NOW + 5000));
        assert_eq!(t.0, 1);
    }

    #[test]
    fn renewal_can_shorten_a_lease() {
        let mut lock = Lock::default();
        let mut t = Tokens(0);
        lock.acquire(
            &LockRequest {
                expires_at: Some(NOW + 60_000),
                ..req("a")
            },
            NOW,
            t.next(),
        );
        let shorter = LockRequest {
            expires_at: Some(NOW + 10),
            ..req("a")
        };
        lock.acquire(&shorter, NOW, t.next());
        assert_eq!(lock.key_expiry(), Some(NOW + 10));
        assert!(jids(&lock, NOW + 10).is_empty());
    }

    #[test]
    fn renewal_replaces_given_fields_and_keeps_the_rest() {
        let mut lock = Lock::default();
        let mut t = Tokens(0);
        let first = LockRequest {
            expires_at: Some(NOW + 1000),
            lock_type: Some("until_executed"),
            owner: Some(b"w1"),
            meta: Some(r#"{"q":"a"}"#),
            ..req("a")
        };
        lock.acquire(&first, NOW, t.next());
        let renew = LockRequest {
            owner: Some(b"w2"),
            ..req("a")
        };
        lock.acquire(&renew, NOW, t.next());
        let h = lock.holder(b"a");
        assert_eq!(h.and_then(|h| h.expires_at()), Some(NOW + 1000));
        assert_eq!(h.map(|h| h.lock_type()), Some("until_executed"));
        assert_eq!(h.and_then(|h| h.owner()), Some(&b"w2"[..]));
        assert_eq!(h.and_then(|h| h.meta()), Some(&br#"{"q":"a"}"#[..]));
    }

    #[test]
    fn expired_holders_are_invisible_and_pruned() {
        let mut lock = Lock::default();
        let mut t = Tokens(0);
        let r = LockRequest {
            limit: 0,
            expires_at: Some(NOW + 100),
            ..req("short")
        };
        lock.acquire(&r, NOW, t.next());
        let r = LockRequest {
            limit: 0,
            ..req("forever")
        };
        lock.acquire(&r, NOW, t.next());
        assert_eq!(jids(&lock, NOW + 99), ["short", "forever"]);
        // Live strictly before expires_at: at expires_at the hold is gone.
        assert_eq!(jids(&lock, NOW + 100), ["forever"]);
        assert_eq!(lock.len(), 2, "reading never removes");
        assert_eq!(lock.prune(NOW + 100), 1);
        assert_eq!(lock.len(), 1);
        assert_eq!(lock.prune(NOW + 100), 0);
    }

    #[test]
    fn prune_and_owner_removal_show_what_they_remove() {
        let mut lock = Lock::default();
        let mut t = Tokens(0);
        let r = |jid, owner, at| LockRequest {
            limit: 0,
            owner,
            expires_at: at,
            ..req(jid)
        };
        lock.acquire(&r("a", Some(&b"w1"[..]), Some(NOW + 10)), NOW, t.next());
        lock.acquire(&r("b", Some(&b"w2"[..]), None), NOW, t.next());
        lock.acquire(&r("c", Some(&b"w1"[..]), None), NOW, t.next());
        lock.acquire(&r("d", None, Some(NOW + 10)), NOW, t.next());
        assert!(!lock.all_expired(NOW + 10));
        let mut seen = Vec::new();
        assert_eq!(
            lock.prune_each(NOW + 10, |h| seen.push(h.jid().to_vec())),
            2
        );
        assert_eq!(seen, [b"a".to_vec(), b"d".to_vec()]);
        seen.clear();
        assert_eq!(
            lock.remove_owner_each(b"w1", |h| seen.push(h.jid().to_vec())),
            1
        );
        assert_eq!(seen, [b"c".to_vec()]);
        assert_eq!(lock.remove_owner_each(b"nobody", |_| {}), 0);
        assert_eq!(jids(&lock, NOW), ["b"]);
        assert_eq!(lock.len(), 1);
    }

    #[test]
    fn all_expired_needs_every_holder_run_out() {
        let mut lock = Lock::default();
        assert!(
            !lock.all_expired(NOW),
            "an empty lock has nothing that ran out"
        );
        let mut t = Tokens(0);
        let r = |jid, at| LockRequest {
            limit: 0,
            expires_at: Some(at),
            ..req(jid)
        };
        lock.acquire(&r("a", NOW + 5), NOW, t.next());
        lock.acquire(&r("b", NOW + 9), NOW, t.next());
        assert!(!lock.all_expired(NOW + 5));
        assert!(lock.has_expired(NOW + 5) && !lock.has_expired(NOW + 4));
        assert!(lock.all_expired(NOW + 9));
    }

    #[test]
    fn an_expired_jid_gets_a_new_grant_not_a_renewal() {
        let mut lock = Lock::default();
        let mut t = Tokens(0);
        lock.acquire(
            &LockRequest {
                expires_at: Some(NOW + 5),
                ..req("a")
            },
            NOW,
            t.next(),
        );
        lock.prune(NOW + 5);
        let again = lock.acquire(&req("a"), NOW + 5, t.next());
        assert_eq!(again, Acquired::Granted(2));
        assert_eq!(lock.holder(b"a").map(|h| h.acquired_at), Some(NOW + 5));
    }

    #[test]
    fn release_removes_only_the_named_holder() {
        let mut lock = Lock::default();
        let mut t = Tokens(0);
        for jid in ["a", "b", "c"] {
            lock.acquire(
                &LockRequest {
                    limit: 0,
                    ..req(jid)
                },
                NOW,
                t.next(),
            );
        }
        assert_eq!(lock.release(b"b").map(|h| h.token), Some(2));
        assert!(lock.release(b"b").is_none());
        assert!(lock.release(b"zzz").is_none());
        assert_eq!(jids(&lock, NOW), ["a", "c"], "grant order is kept");
        assert!(lock.release(b"a").is_some() && lock.release(b"c").is_some());
        assert!(lock.is_empty());
    }

    #[test]
    fn key_expiry_is_the_latest_lease_or_none() {
        let mut lock = Lock::default();
        let mut t = Tokens(0);
        let lease = |jid, at| LockRequest {
            limit: 0,
            expires_at: Some(at),
            ..req(jid)
        };
        lock.acquire(&lease("a", NOW + 300), NOW, t.next());
        lock.acquire(&lease("b", NOW + 100), NOW, t.next());
        assert_eq!(lock.key_expiry(), Some(NOW + 300));
        lock.acquire(
            &LockRequest {
                limit: 0,
                ..req("c")
            },
            NOW,
            t.next(),
        );
        assert_eq!(
            lock.key_expiry(),
            None,
            "a holder without lease keeps the key"
        );
        lock.release(b"c");
        lock.release(b"a");
        assert_eq!(lock.key_expiry(), Some(NOW + 100));
        lock.release(b"b");
        assert_eq!(lock.key_expiry(), None);
    }

    #[test]
    fn put_replaces_in_place_or_appends() {
        let mut lock = Lock::default();
        let mut t = Tokens(0);
        for jid in ["a", "b"] {
            lock.acquire(
                &LockRequest {
                    limit: 0,
                    ..req(jid)
                },
                NOW,
                t.next(),
            );
        }
        let a = lock.holder(b"a").cloned().expect("a holds");
        let a = Holder::new(
            b"a",
            a.token,
            a.acquired_at,
            Some(NOW + 7),
            "lock",
            None,
            None,
        );
        lock.put(a.clone());
        assert_eq!(lock.holders().next(), Some(&a));
        let c = Holder::new(b"c", 99, NOW, None, "my:type", Some(b"w"), Some(b"{}"));
        lock.put(c.clone());
        assert_eq!(lock.holders().last(), Some(&c));
        assert_eq!(lock.max_token(), 99);
    }

    #[test]
    fn ttl_is_relative_and_never_negative() {
        let h = Holder::new(b"a", 1, NOW, Some(NOW + 50), DEFAULT_TYPE, None, None);
        assert_eq!(h.ttl(NOW + 20), Some(30));
        assert_eq!(h.ttl(NOW + 80), Some(0));
        let forever = Holder::new(b"a", 1, NOW, None, DEFAULT_TYPE, None, None);
        assert_eq!(forever.ttl(NOW), None);
    }

    #[test]
    fn expiry_resolution() {
        assert_eq!(Expiry::Ttl(1).resolve(NOW), Ok(NOW + 1));
        assert_eq!(Expiry::Ttl(0).resolve(NOW), Err(LockError::InvalidExpire));
        assert_eq!(Expiry::Ttl(-5).resolve(NOW), Err(LockError::InvalidExpire));
        assert_eq!(
            Expiry::Ttl(i64::MAX).resolve(NOW),
            Err(LockError::InvalidExpire)
        );
        assert_eq!(Expiry::Ttl(i64::MAX - NOW).resolve(NOW), Ok(i64::MAX));
        assert_eq!(Expiry::At(NOW + 1).resolve(NOW), Ok(NOW + 1));
        assert_eq!(Expiry::At(NOW).resolve(NOW), Err(LockError::InvalidExpire));
        assert_eq!(
            Expiry::At(NOW - 1).resolve(NOW),
            Err(LockError::InvalidExpire)
        );
        assert_eq!(Expiry::At(i64::MAX).resolve(NOW), Ok(i64::MAX));
    }

    #[test]
    fn jid_and_owner_are_1_to_1024_binary_bytes() {
        assert!(validate_jid(b"").is_err());
        assert!(validate_jid(&[0u8, 255, 10]).is_ok());
        assert!(validate_jid(&[b'x'; 1024]).is_ok());
        assert_eq!(validate_jid(&[b'x'; 1025]), Err(LockError::InvalidJid));
        assert_eq!(validate_owner(b""), Err(LockError::InvalidOwner));
        assert!(validate_owner(&[b'x'; 1025]).is_err());
        assert!(validate_owner(b"host:123").is_ok());
    }

    #[test]
    fn type_names() {
        assert_eq!(
            validate_type(b"until_and_while_executing"),
            Ok("until_and_while_executing")
        );
        assert!(validate_type(b"a:b.c-d_9").is_ok());
        assert!(validate_type(&[b'a'; 64]).is_ok());
        for bad in [
            &b""[..],
            &[b'a'; 65],
            b"with space",
            b"semi;colon",
            "é".as_bytes(),
        ] {
            assert_eq!(validate_type(bad), Err(LockError::InvalidType), "{bad:?}");
        }
    }

    #[test]
    fn meta_must_be_a_json_object_within_the_cap() {
        assert_eq!(
            validate_meta(br#" {"a":[1,2]} "#, 100),
            Ok(r#" {"a":[1,2]} "#)
        );
        assert!(validate_meta(b"{}", 2).is_ok());
        assert_eq!(
            validate_meta(b"{}", 1),
            Err(LockError::MetaTooLarge { max: 1 })
        );
        for bad in [
            &b"[1]"[..],
            b"1",
            b"\"s\"",
            b"null",
            b"{",
            b"{} {}",
            b"{\"a\":}",
            b"\xff{}",
        ] {
            assert_eq!(
                validate_meta(bad, 100),
                Err(LockError::MetaNotObject),
                "{bad:?}"
            );
        }
        // Validation does not recurse: deep nesting can neither overflow the stack
        // nor slip an unbalanced document through.
        let deep = format!("{{\"a\":{}{}}}", "[".repeat(100_000), "]".repeat(100_000));
        assert!(validate_meta(deep.as_bytes(), 1 << 20).is_ok());
        let unbalanced = format!("{{\"a\":{}{}}}", "[".repeat(100_000), "]".repeat(99_999));
        assert!(validate_meta(unbalanced.as_bytes(), 1 << 20).is_err());
    }

    #[test]
    fn error_texts_start_with_a_code() {
        let all = [
            LockError::InvalidExpire,
            LockError::InvalidJid,
            LockError::InvalidOwner,
            LockError::InvalidType,
            LockError::MetaNotObject,
            LockError::MetaTooLarge { max: 3 },
        ];
        for e in all {
            assert!(e.to_string().starts_with("ERR "), "{e}");
        }
    }

    #[test]
    fn a_holder_is_small_and_keeps_every_part() {
        assert!(
            std::mem::size_of::<Holder>() <= 48,
            "{}",
            std::mem::size_of::<Holder>()
        );
        let meta = br#"{"q":1}"#;
        for lock_type in ["lock", "until_executed", "my:custom.type-1"] {
            let h = Holder::new(
                b"\x00jid",
                7,
                NOW,
                Some(NOW + 1),
                lock_type,
                Some(b"host:1"),
                Some(meta),
            );
            assert_eq!(h.jid(), b"\x00jid");
            assert_eq!(h.lock_type(), lock_type);
            assert_eq!(h.owner(), Some(&b"host:1"[..]));
            assert_eq!(h.meta(), Some(&meta[..]));
            assert_eq!(h.expires_at(), Some(NOW + 1));
        }
        let bare = Holder::new(&[b'j'; 1024], 7, NOW, None, "x", None, None);
        assert_eq!(
            (
                bare.jid().len(),
                bare.owner(),
                bare.meta(),
                bare.lock_type()
            ),
            (1024, None, None, "x")
        );
    }

    #[test]
    fn one_holder_takes_one_slot() {
        let mut lock = Lock::default();
        let mut t = Tokens(0);
        lock.acquire(&req("a"), NOW, t.next());
        assert_eq!(lock.holders.capacity(), 1);
        for i in 0..100 {
            let jid = format!("j{i}");
            lock.acquire(
                &LockRequest {
                    limit: 0,
                    ..req(&jid)
                },
                NOW,
                t.next(),
            );
        }
        assert_eq!(lock.len(), 101);
    }

    #[test]
    fn mem_usage_grows_with_holders_and_meta() {
        let mut lock = Lock::default();
        let mut t = Tokens(0);
        let empty = lock.mem_usage();
        let r = LockRequest {
            meta: Some(r#"{"x":"0123456789"}"#),
            ..req("a")
        };
        lock.acquire(&r, NOW, t.next());
        assert!(lock.mem_usage() >= empty + std::mem::size_of::<Holder>() + 18);
    }
}

/// Random sequences of operations against the rules of the spec.
#[cfg(test)]
mod properties {
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
}
