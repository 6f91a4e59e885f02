//! The lock engine: a lock and its holders, with no Redis in sight.
//!
//! Every function takes the current time (`now`, unix ms) explicitly, so the
//! rules of the spec can be tested with plain values and so that a replica can
//! replay the primary's decision with the primary's clock.

use std::fmt;

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

/// One job holding a lock.
///
/// Most locks have one holder, so a holder is kept small (48 bytes, held in
/// the lock itself when it is the only one): its variable parts share one
/// [`Text`] (a custom type name, the jid, the owner, the meta), kept in the
/// holder itself up to 16 bytes, with their lengths; a known type name is an
/// index, and "no lease" is a sentinel.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Holder {
    pub token: i64,
    pub acquired_at: i64,
    /// End of the lease (unix ms), or `NO_LEASE`.
    expires_at: i64,
    /// custom type name ‖ jid ‖ owner ‖ meta, and where each ends
    text: Text,
}

/// The lengths of the parts of a holder's [`Text`], and its type.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Parts {
    jid_len: u16,
    owner_len: u16,
    /// An index in `KNOWN_TYPES`, or `CUSTOM_TYPE` (the name leads the text).
    type_code: u8,
    custom_type_len: u8,
}

const NO_LEASE: i64 = i64::MIN;
const CUSTOM_TYPE: u8 = u8::MAX;

impl Holder {
    /// A holder from validated parts (jid and owner at most 1024 bytes, a
    /// type name at most 64).
    pub fn new(
        jid: &[u8],
        token: i64,
        acquired_at: i64,
        expires_at: Option<i64>,
        lock_type: &str,
        owner: Option<&[u8]>,
        meta: Option<&[u8]>,
    ) -> Self {
        let mut h = Self {
            token,
            acquired_at,
            expires_at: expires_at.unwrap_or(NO_LEASE),
            text: Text::default(),
        };
        h.set_text(
            lock_type,
            jid,
            owner.unwrap_or_default(),
            meta.unwrap_or_default(),
        );
        h
    }

    fn set_text(&mut self, lock_type: &str, jid: &[u8], owner: &[u8], meta: &[u8]) {
        let known = KNOWN_TYPES.iter().position(|k| *k == lock_type);
        let custom: &[u8] = if known.is_some() {
            &[]
        } else {
            lock_type.as_bytes()
        };
        let parts = Parts {
            type_code: known
                .and_then(|k| u8::try_from(k).ok())
                .unwrap_or(CUSTOM_TYPE),
            custom_type_len: u8::try_from(custom.len()).unwrap_or(u8::MAX),
            jid_len: u16::try_from(jid.len()).unwrap_or(u16::MAX),
            owner_len: u16::try_from(owner.len()).unwrap_or(u16::MAX),
        };
        self.text = Text::new(parts, [custom, jid, owner, meta]);
    }

    fn part(&self, from: usize, len: usize) -> &[u8] {
        self.text
            .as_bytes()
            .get(from..from + len)
            .unwrap_or_default()
    }

    pub fn jid(&self) -> &[u8] {
        let p = self.text.parts();
        self.part(usize::from(p.custom_type_len), usize::from(p.jid_len))
    }

    pub fn owner(&self) -> Option<&[u8]> {
        let p = self.text.parts();
        let from = usize::from(p.custom_type_len) + usize::from(p.jid_len);
        Some(self.part(from, usize::from(p.owner_len))).filter(|o| !o.is_empty())
    }

    /// The META JSON text, as given.
    pub fn meta(&self) -> Option<&[u8]> {
        let p = self.text.parts();
        let from =
            usize::from(p.custom_type_len) + usize::from(p.jid_len) + usize::from(p.owner_len);
        self.text.as_bytes().get(from..).filter(|m| !m.is_empty())
    }

    pub fn lock_type(&self) -> &str {
        let p = self.text.parts();
        match KNOWN_TYPES.get(usize::from(p.type_code)) {
            Some(known) => known,
            // Validated as [A-Za-z0-9_:.-] on the way in.
            None => std::str::from_utf8(self.part(0, usize::from(p.custom_type_len)))
                .unwrap_or(DEFAULT_TYPE),
        }
    }

    /// End of the lease (unix ms); `None` is held until released.
    pub fn expires_at(&self) -> Option<i64> {
        Some(self.expires_at).filter(|&at| at != NO_LEASE)
    }

    pub fn is_live(&self, now: i64) -> bool {
        self.expires_at().is_none_or(|at| now < at)
    }

    /// Lease left in ms, or `None` when there is no lease.
    pub fn ttl(&self, now: i64) -> Option<i64> {
        self.expires_at().map(|at| at.saturating_sub(now).max(0))
    }

    /// A renewal: what is given replaces the old value, the rest stays.
    fn renew(&mut self, req: &LockRequest<'_>) {
        if let Some(at) = req.expires_at {
            self.expires_at = at;
        }
        if req.lock_type.is_some() || req.owner.is_some() || req.meta.is_some() {
            let lock_type = req.lock_type.unwrap_or(self.lock_type()).to_string();
            let jid = self.jid().to_vec();
            let owner = req.owner.or(self.owner()).unwrap_or_default().to_vec();
            let meta = req
                .meta
                .map(str::as_bytes)
                .or(self.meta())
                .unwrap_or_default()
                .to_vec();
            self.set_text(&lock_type, &jid, &owner, &meta);
        }
    }

    /// The bytes of its strings (wherever they are kept).
    fn text_bytes(&self) -> usize {
        self.text.as_bytes().len()
    }
}

/// Bytes of [`Text`] kept in the holder itself: with the tag, the lengths
/// and the length, 24 bytes, as much as the heap form, so that a holder is 48
/// bytes and a lock of one holder one 48-byte allocation.
const INLINE_TEXT: usize = 16;

/// A holder's strings, one after the other, with their [`Parts`]: in place
/// up to [`INLINE_TEXT`] bytes (a short jid with no owner or meta), so that a
/// lock of one holder is a single allocation; on the heap beyond.
#[derive(Clone)]
enum Text {
    Inline {
        parts: Parts,
        len: u8,
        bytes: [u8; INLINE_TEXT],
    },
    Heap {
        parts: Parts,
        bytes: Box<[u8]>,
    },
}

impl Text {
    fn new(parts: Parts, strings: [&[u8]; 4]) -> Self {
        let total: usize = strings.iter().map(|p| p.len()).sum();
        match u8::try_from(total) {
            Ok(len) if total <= INLINE_TEXT => {
                let mut bytes = [0; INLINE_TEXT];
                let mut at = 0;
                for s in strings {
                    if let Some(to) = bytes.get_mut(at..at + s.len()) {
                        to.copy_from_slice(s);
                    }
                    at += s.len();
                }
                Self::Inline { parts, len, bytes }
            }
            _ => Self::Heap {
                parts,
                bytes: strings.concat().into_boxed_slice(),
            },
        }
    }

    fn as_bytes(&self) -> &[u8] {
        match self {
            Self::Inline { len, bytes, .. } => bytes.get(..usize::from(*len)).unwrap_or_default(),
            Self::Heap { bytes, .. } => bytes,
        }
    }

    fn parts(&self) -> Parts {
        match self {
            Self::Inline { parts, .. } | Self::Heap { parts, .. } => *parts,
        }
    }
}

impl Default for Text {
    fn default() -> Self {
        Self::Inline {
            parts: Parts::default(),
            len: 0,
            bytes: [0; INLINE_TEXT],
        }
    }
}

impl PartialEq for Text {
    fn eq(&self, other: &Self) -> bool {
        self.parts() == other.parts() && self.as_bytes() == other.as_bytes()
    }
}

impl Eq for Text {}

impl fmt::Debug for Text {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{:?} {:?}",
            self.parts(),
            String::from_utf8_lossy(self.as_bytes())
        )
    }
}

impl std::ops::Deref for Holders {
    type Target = [Holder];
    fn deref(&self) -> &[Holder] {
        self.as_slice()
    }
}

impl std::ops::DerefMut for Holders {
    fn deref_mut(&mut self) -> &mut [Holder] {
        self.as_mut_slice()
    }
}

/// The holders of a lock: none, one kept in place (most locks: the lock is
/// then one allocation), or several in a vector.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
enum Holders {
    #[default]
    None,
    One(Holder),
    Many(Vec<Holder>),
}

impl Holders {
    fn from_vec(mut holders: Vec<Holder>) -> Self {
        match holders.len() {
            0 => Self::None,
            1 => holders.pop().map_or(Self::None, Self::One),
            _ => Self::Many(holders),
        }
    }

    fn as_slice(&self) -> &[Holder] {
        match self {
            Self::None => &[],
            Self::One(h) => std::slice::from_ref(h),
            Self::Many(v) => v,
        }
    }

    fn as_mut_slice(&mut self) -> &mut [Holder] {
        match self {
            Self::None => &mut [],
            Self::One(h) => std::slice::from_mut(h),
            Self::Many(v) => v,
        }
    }

    fn push(&mut self, holder: Holder) {
        *self = match std::mem::take(self) {
            Self::None => Self::One(holder),
            Self::One(first) => Self::Many(vec![first, holder]),
            Self::Many(mut v) => {
                // Grow one at a time while small, instead of Vec's doubling.
                if v.len() == v.capacity() && v.len() < 4 {
                    v.reserve_exact(1);
                }
                v.push(holder);
                Self::Many(v)
            }
        };
    }

    /// Back to the smallest form once at most one holder is left.
    fn shrink(&mut self) {
        if let Self::Many(v) = self
            && v.len() < 2
        {
            *self = Self::from_vec(std::mem::take(v));
        }
    }

    fn remove(&mut self, i: usize) -> Option<Holder> {
        let removed = match self {
            Self::One(_) if i == 0 => match std::mem::take(self) {
                Self::One(h) => Some(h),
                _ => None,
            },
            Self::Many(v) if i < v.len() => Some(v.remove(i)),
            _ => None,
        };
        self.shrink();
        removed
    }

    fn retain(&mut self, mut keep: impl FnMut(&Holder) -> bool) {
        match self {
            Self::None => {}
            Self::One(h) => {
                if !keep(h) {
                    *self = Self::None;
                }
            }
            Self::Many(v) => {
                v.retain(|h| keep(h));
                self.shrink();
            }
        }
    }

    /// Holder slots held (a vector may hold more than it uses).
    pub(crate) fn capacity(&self) -> usize {
        match self {
            Self::None => 0,
            Self::One(_) => 1,
            Self::Many(v) => v.capacity(),
        }
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

    pub fn holders(&self) -> &[Holder] {
        self.holders.as_slice()
    }

    pub fn live_holders(&self, now: i64) -> impl Iterator<Item = &Holder> {
        self.holders.iter().filter(move |h| h.is_live(now))
    }

    pub fn is_empty(&self) -> bool {
        self.holders.is_empty()
    }

    fn position(&self, jid: &[u8]) -> Option<usize> {
        self.holders.iter().position(|h| h.jid() == jid)
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
        self.remove_where(|h| !h.is_live(now), removed)
    }

    /// Removes every holder whose owner is `owner`, showing each to `removed`.
    pub fn remove_owner_each(&mut self, owner: &[u8], removed: impl FnMut(&Holder)) -> usize {
        self.remove_where(|h| h.owner() == Some(owner), removed)
    }

    fn remove_where(
        &mut self,
        mut matches: impl FnMut(&Holder) -> bool,
        mut removed: impl FnMut(&Holder),
    ) -> usize {
        let before = self.holders.len();
        self.holders.retain(|h| {
            let remove = matches(h);
            if remove {
                removed(h);
            }
            !remove
        });
        before - self.holders.len()
    }

    /// True when some holder has run out (a prune would remove something).
    pub fn has_expired(&self, now: i64) -> bool {
        self.holders.iter().any(|h| !h.is_live(now))
    }

    /// True when the lock has holders and every one of them has run out.
    pub fn all_expired(&self, now: i64) -> bool {
        !self.holders.is_empty() && self.holders.iter().all(|h| !h.is_live(now))
    }

    /// Acquires or renews a hold. Call after [`Lock::prune`] with the same `now`:
    /// every holder is then live. `next_token` is called only for a new grant.
    pub fn acquire(
        &mut self,
        req: &LockRequest<'_>,
        now: i64,
        next_token: impl FnOnce() -> i64,
    ) -> Acquired {
        debug_assert!(self.holders.iter().all(|h| h.is_live(now)));
        if let Some(i) = self.position(req.jid) {
            let Some(holder) = self.holders.get_mut(i) else {
                return Acquired::Denied;
            };
            holder.renew(req);
            return Acquired::Renewed(holder.token);
        }
        if req.limit != 0 && self.holders.len() >= req.limit as usize {
            return Acquired::Denied;
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
        self.position(jid).and_then(|i| self.holders.remove(i))
    }

    /// The holder of `jid`, if any (live or not).
    pub fn holder(&self, jid: &[u8]) -> Option<&Holder> {
        self.holders.iter().find(|h| h.jid() == jid)
    }

    /// Puts `holder` exactly as given: replaces the holder of the same jid in
    /// place, or appends it. This replays a grant or renewal decided elsewhere.
    pub fn put(&mut self, holder: Holder) {
        match self.position(holder.jid()) {
            Some(i) => {
                if let Some(slot) = self.holders.get_mut(i) {
                    *slot = holder;
                }
            }
            None => self.holders.push(holder),
        }
    }

    /// The key's Redis expiry: the latest lease when every holder has one,
    /// `None` when any holder has none (or there is no holder).
    pub fn key_expiry(&self) -> Option<i64> {
        let mut latest: Option<i64> = None;
        for h in self.holders.iter() {
            let at = h.expires_at()?;
            latest = Some(latest.map_or(at, |l| l.max(at)));
        }
        latest
    }

    /// The highest token of any holder (0 when none).
    pub fn max_token(&self) -> i64 {
        self.holders.iter().map(|h| h.token).max().unwrap_or(0)
    }

    /// Approximate memory owned by this lock, for MEMORY USAGE: the lock,
    /// a slot per holder and the bytes of their strings.
    pub fn mem_usage(&self) -> usize {
        std::mem::size_of::<Self>()
            + self.holders.capacity() * std::mem::size_of::<Holder>()
            + self.holders.iter().map(Holder::text_bytes).sum::<usize>()
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
        assert_eq!(lock.holders().len(), 1000);
        assert!(lock.release(b"j0").is_some());
        assert_eq!(lock.holders().len(), 999);
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
        assert_eq!(lock.holders().len(), 2, "reading never removes");
        assert_eq!(lock.prune(NOW + 100), 1);
        assert_eq!(lock.holders().len(), 1);
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
        assert_eq!(lock.holders().first(), Some(&a));
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

/// The in-place forms against the plain ones they stand for.
#[cfg(test)]
mod layout {
    use proptest::prelude::*;

    use super::*;

    #[test]
    fn a_lock_of_one_holder_is_one_48_byte_allocation() {
        assert_eq!(std::mem::size_of::<Text>(), 24);
        assert_eq!(std::mem::size_of::<Holder>(), 48);
        assert_eq!(std::mem::size_of::<Lock>(), 48);
        let h = Holder::new(b"jid-000000000001", 1, 2, Some(3), "lock", None, None);
        assert!(matches!(h.text, Text::Inline { .. }));
        let long = Holder::new(&[b'j'; 17], 1, 2, None, "lock", None, None);
        assert!(matches!(long.text, Text::Heap { .. }));
    }

    fn bytes(max: usize) -> impl Strategy<Value = Vec<u8>> {
        prop::collection::vec(any::<u8>(), 0..max)
    }

    #[derive(Debug, Clone)]
    enum Op {
        Push(u8),
        Remove(usize),
        Retain(u8),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            any::<u8>().prop_map(Op::Push),
            (0usize..6).prop_map(Op::Remove),
            any::<u8>().prop_map(Op::Retain),
        ]
    }

    proptest! {
        #[test]
        fn text_gives_back_its_parts(a in bytes(40), b in bytes(40), c in bytes(8), d in bytes(80)) {
            let parts = Parts { jid_len: 1, owner_len: 2, type_code: 3, custom_type_len: 4 };
            let text = Text::new(parts, [&a, &b, &c, &d]);
            prop_assert_eq!(text.parts(), parts);
            let all = [a.as_slice(), &b, &c, &d].concat();
            prop_assert_eq!(text.as_bytes(), all.as_slice());
            prop_assert_eq!(matches!(text, Text::Inline { .. }), a.len() + b.len() + c.len() + d.len() <= INLINE_TEXT);
            prop_assert_eq!(text.clone(), text);
        }

        #[test]
        fn holders_behave_as_a_vector(ops in prop::collection::vec(op(), 0..40)) {
            let mut holders = Holders::default();
            let mut model: Vec<Holder> = Vec::new();
            for op in ops {
                match op {
                    Op::Push(n) => {
                        let h = Holder::new(&[n], i64::from(n), 0, None, "lock", None, None);
                        holders.push(h.clone());
                        model.push(h);
                    }
                    Op::Remove(i) => {
                        let expected = (i < model.len()).then(|| model.remove(i));
                        prop_assert_eq!(holders.remove(i), expected);
                    }
                    Op::Retain(n) => {
                        holders.retain(|h| h.token % 3 != i64::from(n % 3));
                        model.retain(|h| h.token % 3 != i64::from(n % 3));
                    }
                }
                prop_assert_eq!(holders.as_slice(), model.as_slice());
                // The smallest form for what it holds.
                prop_assert_eq!(matches!(holders, Holders::None), model.is_empty());
                prop_assert_eq!(matches!(holders, Holders::One(_)), model.len() == 1);
            }
        }
    }
}

/// Random sequences of operations against the rules of the spec.
#[cfg(test)]
mod properties {
    use proptest::prelude::*;

    use super::*;
    use crate::codec::{self, ItemReader, Items};

    #[derive(Debug, Clone)]
    enum Op {
        Lock {
            jid: u8,
            limit: u32,
            ttl: Option<i64>,
        },
        Unlock {
            jid: u8,
        },
        Prune,
        Advance(i64),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            4 => (0u8..8, 0u32..4, prop::option::of(1i64..60)).prop_map(|(jid, limit, ttl)| Op::Lock { jid, limit, ttl }),
            2 => (0u8..8).prop_map(|jid| Op::Unlock { jid }),
            1 => Just(Op::Prune),
            2 => (0i64..40).prop_map(Op::Advance),
        ]
    }

    fn live(lock: &Lock, now: i64) -> Vec<Holder> {
        lock.live_holders(now).cloned().collect()
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2000))]

        #[test]
        fn every_sequence_keeps_every_rule(ops in prop::collection::vec(op(), 1..80)) {
            let mut lock = Lock::default();
            let mut now = 1_700_000_000_000i64;
            let (mut counter, mut last_granted) = (0i64, 0i64);
            for op in ops {
                match op {
                    Op::Lock { jid, limit, ttl } => {
                        let jid = [b'j', jid];
                        lock.prune(now);
                        let before = live(&lock, now);
                        let held = before.iter().find(|h| h.jid() == jid).map(|h| h.token);
                        let req = LockRequest { limit, expires_at: ttl.map(|t| now + t), ..LockRequest::new(&jid) };
                        match lock.acquire(&req, now, || { counter += 1; counter }) {
                            Acquired::Granted(t) => {
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
                        prop_assert!(lock.holders().iter().all(|h| h.is_live(now)));
                    }
                    Op::Advance(ms) => now += ms,
                }
                // Never shown once its lease has run out; one hold per jid;
                // oldest grant first; the key expires with the latest lease.
                prop_assert!(lock.live_holders(now).all(|h| h.expires_at().is_none_or(|at| now < at)));
                let tokens: Vec<i64> = lock.holders().iter().map(|h| h.token).collect();
                prop_assert!(tokens.windows(2).all(|w| w[0] < w[1]));
                let mut jids: Vec<&[u8]> = lock.holders().iter().map(|h| h.jid()).collect();
                jids.sort();
                jids.dedup();
                prop_assert_eq!(jids.len(), lock.len());
                let expiry = if lock.holders().iter().all(|h| h.expires_at().is_some()) {
                    lock.holders().iter().filter_map(|h| h.expires_at()).max()
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
