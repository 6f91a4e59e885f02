//! The lock engine: a lock and its holders, with no Redis in sight.
//!
//! Every function takes the current time (`now`, unix ms) explicitly, so the
//! rules of the spec can be tested with plain values and so that a replica can
//! replay the primary's decision with the primary's clock.
//!
//! This file holds the rules (who may hold, renew, release; the limits and
//! the validation of a call); `holder.rs` and `indexed.rs` only store
//! holders, `rate.rs` is RATE's arithmetic. Tests: `tests.rs` (one rule at
//! a time), `properties.rs` (random sequences).

use std::fmt;

mod group;
mod holder;
mod indexed;
mod jid;
mod rate;

pub use group::{ByGroupName, GroupName, group_hash, holding_hash, holding_hash_of};
use holder::Holders;
pub use holder::{GroupCounts, Holder, Ordered, TOKENS_PER_MS};
pub use indexed::HoldingsStamp;
pub use jid::Jid;
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

/// Largest GROUP name accepted, in bytes.
pub const MAX_GROUP_BYTES: usize = 1024;
/// Largest WEIGHT accepted.
pub const MAX_WEIGHT: i64 = 1000;

/// How a holder holds (MODE): shared with others up to the limit, or alone.
/// A holder taken without MODE counts as shared.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Mode {
    Shared,
    Exclusive,
}

impl Mode {
    /// `shared` or `exclusive`, in any case.
    pub fn parse(word: &[u8]) -> Option<Self> {
        if word.eq_ignore_ascii_case(b"shared") {
            Some(Self::Shared)
        } else if word.eq_ignore_ascii_case(b"exclusive") {
            Some(Self::Exclusive)
        } else {
            None
        }
    }

    /// Its name on the wire and in replies.
    pub const fn name(self) -> &'static str {
        match self {
            Self::Shared => "shared",
            Self::Exclusive => "exclusive",
        }
    }
}

/// A client error. `Display` gives the exact reply text, error code first.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LockError {
    InvalidExpire,
    InvalidJid,
    InvalidOwner,
    InvalidType,
    MetaNotObject,
    MetaTooLarge {
        max: usize,
    },
    InvalidRate,
    InvalidGroup,
    InvalidMode,
    /// A renewal naming another GROUP than the one the jid holds for.
    GroupChanged,
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
            Self::InvalidGroup => {
                write!(f, "ERR GROUP must be 1 to {MAX_GROUP_BYTES} bytes")
            }
            Self::InvalidMode => f.write_str("ERR MODE must be shared or exclusive"),
            Self::GroupChanged => f.write_str(
                "ERR the jid already holds this lock for another GROUP (a renewal keeps its group)",
            ),
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

pub fn validate_group(group: &[u8]) -> Result<(), LockError> {
    if group.is_empty() || group.len() > MAX_GROUP_BYTES {
        return Err(LockError::InvalidGroup);
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
    let text = meta_text(meta, max_bytes)?;
    validate_meta_json(text)?;
    Ok(text)
}

/// The cheap part of [`validate_meta`]: at most `max_bytes`, UTF-8, and
/// starting as an object; [`validate_meta_json`] is the rest.
pub fn meta_text(meta: &[u8], max_bytes: usize) -> Result<&str, LockError> {
    if meta.len() > max_bytes {
        return Err(LockError::MetaTooLarge { max: max_bytes });
    }
    let text = std::str::from_utf8(meta).map_err(|_| LockError::MetaNotObject)?;
    if !text.trim_start().starts_with('{') {
        return Err(LockError::MetaNotObject);
    }
    Ok(text)
}

/// The costly part of [`validate_meta`]: the text is one JSON object (after
/// [`meta_text`]).
pub fn validate_meta_json(text: &str) -> Result<(), LockError> {
    serde_json::from_str::<serde::de::IgnoredAny>(text).map_err(|_| LockError::MetaNotObject)?;
    Ok(())
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

    /// Whether the lease it asks for is over by `now`: a PXAT passed (a TTL
    /// starts at the grant, so it never is).
    pub fn lapsed(self, now: i64) -> bool {
        matches!(self, Self::At(at) if at <= now)
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
    /// GROUP: stored on the holder; with `group_limit`, a new grant also
    /// needs fewer than that many holders of the group.
    pub group: Option<&'a [u8]>,
    pub group_limit: Option<u32>,
    /// MODE: `None` (no MODE) counts as shared.
    pub mode: Option<Mode>,
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
            group: None,
            group_limit: None,
            mode: None,
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
    /// The call is wrong for this holder (a renewal naming another GROUP).
    Refused(LockError),
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

    /// What freeing the lock costs, counted as Redis counts its own types'
    /// (a hash table's elements, 1 for a compact encoding): a lock of many
    /// holders (its slots, and each holder's text kept apart) is worth
    /// freeing on Redis's lazy-free thread, one of a few is not. Never 0,
    /// which Redis takes as worth it whatever the size.
    pub fn free_effort(&self) -> usize {
        self.holders.free_effort()
    }

    /// Removes the holders whose lease ran out; returns how many.
    pub fn prune(&mut self, now: i64) -> usize {
        self.prune_each(now, |_| {})
    }

    /// Removes the holders whose lease ran out, showing each to `removed`.
    pub fn prune_each(&mut self, now: i64, removed: impl FnMut(&Holder)) -> usize {
        self.holders.prune(now, removed)
    }

    /// Removes every holder whose owner is `owner`, in grant order, showing
    /// each to `removed`: on a lock of many holders, without a walk over the
    /// others.
    pub fn remove_owner_each(&mut self, owner: &[u8], removed: impl FnMut(&Holder)) -> usize {
        self.holders.remove_owner(owner, removed)
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
        self.acquire_behind(req, now, |_| false, next_token)
    }

    /// [`Lock::acquire`] for a call that clients already wait ahead of: a
    /// new hold (never a renewal) is denied while `held_back` says that one
    /// of them may take the slot first. It is asked last, once the key
    /// admits the call, so that a call the key denies anyway (most calls on
    /// a key that others wait for) costs nothing of a long queue.
    pub fn acquire_behind(
        &mut self,
        req: &LockRequest<'_>,
        now: i64,
        held_back: impl FnOnce(&Self) -> bool,
        next_token: impl FnOnce() -> i64,
    ) -> Acquired {
        debug_assert!(!self.has_expired(now));
        let fair = req.group.is_some() || req.mode.is_some();
        if let Some(held) = fair.then(|| self.holders.find(req.jid)).flatten() {
            if req.group.is_some() && req.group != held.group() {
                return Acquired::Refused(LockError::GroupChanged);
            }
            // An upgrade only for the sole holder, and never by waiting.
            let upgrade = req.mode == Some(Mode::Exclusive) && !held.is_exclusive();
            if upgrade && self.holders.len() > 1 {
                return Acquired::Denied;
            }
        }
        if let Some(token) = self.holders.update(req.jid, |h| {
            h.renew(req);
            if let Some(mode) = req.mode {
                h.set_mode(mode);
            }
        }) {
            return Acquired::Renewed(token);
        }
        if !self.admits(req) || held_back(self) {
            return Acquired::Denied;
        }
        self.grant(req, now, next_token)
    }

    /// The first hold of a key that does not exist yet: what [`Lock::acquire`]
    /// does on an empty lock, where there is nobody to renew or to make room
    /// for (an empty lock admits every call), so nothing is looked up.
    pub fn first(
        req: &LockRequest<'_>,
        now: i64,
        next_token: impl FnOnce() -> i64,
    ) -> (Self, Acquired) {
        let mut lock = Self::default();
        let acquired = lock.grant(req, now, next_token);
        (lock, acquired)
    }

    /// Grants `req` a new hold, its rate permitting: the last step of
    /// [`Lock::acquire`], once the call renews nothing and fits.
    fn grant(
        &mut self,
        req: &LockRequest<'_>,
        now: i64,
        next_token: impl FnOnce() -> i64,
    ) -> Acquired {
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
        self.holders.push(Holder::new_fair(
            req.jid,
            token,
            now,
            req.expires_at,
            req.lock_type.unwrap_or(DEFAULT_TYPE),
            req.owner,
            req.meta.map(str::as_bytes),
            req.group,
            req.mode,
        ));
        Acquired::Granted(token)
    }

    /// Whether the holders leave room for a new holder of `req` (its rate
    /// apart): fewer than LIMIT (0: no limit), fewer than GROUPLIMIT of its
    /// group, no exclusive holder, and none at all for an exclusive one.
    #[inline]
    fn admits(&self, req: &LockRequest<'_>) -> bool {
        let held = self.holders.len();
        if req.limit != 0 && held >= req.limit as usize {
            return false;
        }
        if held > 0 {
            if req.mode == Some(Mode::Exclusive) || self.holders.exclusive_held() {
                return false;
            }
            if let (Some(group), Some(max)) = (req.group, req.group_limit)
                && self.holders.group_holding(Some(group)) >= max as usize
            {
                return false;
            }
        }
        true
    }

    /// How many holders `group` has (`None`: the holders without a group),
    /// ended leases included: the oracle the properties check
    /// [`Lock::group_counts`] against (serving asks that, for live ones).
    #[cfg(test)]
    pub(crate) fn group_holding(&self, group: Option<&[u8]>) -> usize {
        self.holders.group_holding(group)
    }

    /// How many live holders each group has at `now`, for many questions
    /// in a row: a key of a few holders is walked once, not once a question.
    pub fn group_counts(&self, now: i64) -> GroupCounts<'_> {
        self.holders.group_counts(now)
    }

    /// The stamp [`GroupCounts::stamp`] gives, without counting: for the
    /// tests, which follow one key's stamp through grants and releases (the
    /// waiting layer takes it with the counts it asks anyway).
    #[cfg(test)]
    pub fn holdings_stamp(&self) -> Option<HoldingsStamp> {
        self.holders.holdings_stamp()
    }

    /// Per group (`None`: the holders without a group), how many live
    /// holders it has at `now`, groups with none left out, in no particular
    /// order: on a lock of many holders, from the counts it keeps and its
    /// ended holders, without a walk over the others (read-only: right on a
    /// replica, where ended holders wait for the primary's removal).
    pub fn live_by_group(&self, now: i64) -> Vec<(Option<&[u8]>, usize)> {
        self.holders.live_by_group(now)
    }

    /// Whether some holder holds exclusively.
    pub fn exclusive_held(&self) -> bool {
        self.holders.exclusive_held()
    }

    /// Removes `jid`'s hold and returns it, if it was there. Call after
    /// [`Lock::prune`].
    pub fn release(&mut self, jid: &[u8]) -> Option<Holder> {
        self.holders.remove(jid)
    }

    /// Removes `jid`'s hold only when its fencing token is `token` (a fenced
    /// release: a late call for an older hold of the same jid frees nothing),
    /// and returns it. Call after [`Lock::prune`].
    pub fn release_token(&mut self, jid: &[u8], token: i64) -> Option<Holder> {
        if self.holders.find(jid)?.token() != token {
            return None;
        }
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
        self.holders.iter().map(|h| h.token()).max().unwrap_or(0)
    }

    /// Approximate memory owned by this lock, for MEMORY USAGE: the lock,
    /// a slot per holder and the bytes of their strings.
    pub fn mem_usage(&self) -> usize {
        std::mem::size_of::<Self>() + self.holders.mem_usage()
    }
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod properties;
