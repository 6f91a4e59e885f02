//! A lock's holders and how they are laid out in memory: most locks have one
//! holder, so a holder is kept small and, alone, inside the lock itself. The
//! rules that decide who holds live in the parent module; this file only
//! stores and reads holders.

use std::fmt;

use super::group::{GroupName, holding_hash};
use super::indexed::{HoldingsStamp, Indexed};
use super::jid::{self, Jid, Shape};
use super::{
    DEFAULT_TYPE, KNOWN_TYPES, LockRequest, MAX_GROUP_BYTES, MAX_JID_BYTES, MAX_TYPE_BYTES, Mode,
    Rate,
};

/// How many live holders each group of a lock has (`None`: the holders
/// without a group), as [`Lock::group_counts`](super::Lock::group_counts)
/// found them.
pub struct GroupCounts<'a> {
    counts: Counts<'a>,
    /// The earliest end of a lease that has not ended.
    next_lease_end: Option<i64>,
}

enum Counts<'a> {
    /// The counts the index keeps, less its holders whose lease has ended
    /// (not pruned yet), by group in order of name: found without a walk
    /// over the others, and most often none.
    Kept(&'a Indexed, Vec<(Option<&'a [u8]>, usize)>),
    /// Counted in one walk, by group in order of name.
    Counted(Vec<(Option<&'a [u8]>, usize)>),
}

/// The count of `group` in `counts` (sorted by group), 0 if not there.
fn count_of(counts: &[(Option<&[u8]>, usize)], group: Option<&[u8]>) -> usize {
    counts
        .binary_search_by(|(g, _)| g.cmp(&group))
        .ok()
        .and_then(|at| counts.get(at))
        .map_or(0, |&(_, n)| n)
}

impl GroupCounts<'_> {
    /// How many live holders `group` has: as [`Self::of`], without hashing
    /// the name again for the counts an index keeps.
    #[inline(always)]
    pub fn of_group(&self, group: Option<&GroupName>) -> usize {
        match (&self.counts, group) {
            (Counts::Kept(index, ended), Some(g)) => index
                .named_holding(g, g.hash())
                .saturating_sub(count_of(ended, Some(g))),
            _ => self.of(group.map(|g| &**g)),
        }
    }

    /// What stays the same only while no group's count of holders goes
    /// down, and that no other lock shares: while it stays, whatever was
    /// found full (a group at its GROUPLIMIT) still is; after, the groups
    /// that [`Self::freed_since`] does not name still are. `None` for a
    /// lock of a few holders, whose groups are few enough to count again.
    pub fn stamp(&self) -> Option<HoldingsStamp> {
        match &self.counts {
            Counts::Kept(index, _) => Some(index.holdings_stamp()),
            Counts::Counted(_) => None,
        }
    }

    /// Shows `each` the [`holding_hash`](super::holding_hash) of every group
    /// that may hold fewer live holders than it did under `since`: its count
    /// went down since, or a holder of it was counted out as its lease
    /// ended (not removed yet). False, having shown what it may, when the
    /// key cannot say (another key's or a compact lock's stamp, or more
    /// went down than it remembers): then any group may.
    pub fn freed_since(&self, since: HoldingsStamp, mut each: impl FnMut(u64)) -> bool {
        let Counts::Kept(index, ended) = &self.counts else {
            return false;
        };
        if !index.decreased_since(since, &mut each) {
            return false;
        }
        for &(group, _) in ended {
            each(holding_hash(group));
        }
        true
    }

    /// Shows `each` the [`holding_hash`](super::holding_hash) of every group
    /// with a live holder, when the lock has few holders (a compact lock:
    /// counted in a walk); false for an index, whose groups may be many.
    /// What a caller that kept counts of its own asks instead of
    /// [`Self::freed_since`] where the lock keeps no stamp: a group that
    /// held none then and holds none now holds as many.
    pub fn holding_hashes(&self, mut each: impl FnMut(u64)) -> bool {
        let Counts::Counted(counts) = &self.counts else {
            return false;
        };
        for &(group, n) in counts {
            if n > 0 {
                each(holding_hash(group));
            }
        }
        true
    }

    /// The earliest end of a lease that had not ended when counted: when a
    /// holder that is counted may leave first (what a denial now gives as
    /// the time to try again).
    pub fn next_lease_end(&self) -> Option<i64> {
        self.next_lease_end
    }

    /// How many live holders `group` has.
    #[inline(always)]
    pub fn of(&self, group: Option<&[u8]>) -> usize {
        match &self.counts {
            Counts::Kept(index, ended) => index
                .group_holding(group)
                .saturating_sub(count_of(ended, group)),
            Counts::Counted(counts) => count_of(counts, group),
        }
    }
}

/// One job holding a lock.
///
/// Most locks have one holder, so a holder is kept small (40 bytes, held in
/// the lock itself when it is the only one): its variable parts share one
/// `Text` (a custom type name, the jid, the owner, the meta), kept in the
/// holder itself up to 16 bytes (the ids job systems send packed to half
/// their bytes: `jid.rs`), with their lengths; a known type name is an
/// index, and "no lease" is a sentinel. A GROUP and a MODE (fair sharing,
/// shared/exclusive) cost a holder without them nothing: the mode and
/// whether a group follows are bits of the type's code, and the group goes
/// at the end of the text with its length (two bytes), only when there is
/// one.
///
/// The time of the grant costs nothing either, most of the time: a token
/// reads as the unix microseconds of its grant ([`TOKENS_PER_MS`]), so a
/// holder whose `acquired_at` is its token's millisecond keeps no
/// `acquired_at` of its own. One granted when tokens ran ahead of the clock
/// (over a thousand grants in a millisecond, a replicated token from a
/// clock ahead) keeps it, 8 bytes at the head of its text (`OWN_ACQUIRED`).
/// Either way it reads the same, and saves, loads and replicates unchanged.
#[derive(Clone, PartialEq, Eq)]
pub struct Holder {
    token: i64,
    /// End of the lease (unix ms), or `NO_LEASE`.
    expires_at: i64,
    /// [acquired_at] ‖ custom type name ‖ jid ‖ owner ‖ meta [‖ group ‖ its
    /// length], and where each ends
    text: Text,
}

/// Tokens per millisecond of the clock: a token issued at `now` (unix ms)
/// is at least `now * TOKENS_PER_MS`, and more only by the grants already
/// made in that millisecond (see `fencing.rs`, which issues them).
pub const TOKENS_PER_MS: i64 = 1000;

impl fmt::Debug for Holder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Holder")
            .field("token", &self.token)
            .field("acquired_at", &self.acquired_at())
            .field("expires_at", &self.expires_at())
            .field("text", &self.text)
            .finish()
    }
}

/// The lengths of the parts of a holder's [`Text`], and its type.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Parts {
    /// The length of the jid as kept (bits 0-13) and how it is kept (bits
    /// 14-15: `JID_HEX`, `JID_UUID`, or as given).
    jid_len: u16,
    owner_len: u16,
    /// Bits 0-3: an index in `KNOWN_TYPES`, or `CUSTOM_TYPE` (the name
    /// leads the text); bits 4-5: the mode (`MODE_*`); bit 6: `HAS_GROUP`
    /// (the text ends with the group and its length); bit 7:
    /// `OWN_ACQUIRED` (the text starts with the holder's `acquired_at`).
    type_code: u8,
    custom_type_len: u8,
}

const NO_LEASE: i64 = i64::MIN;
const CUSTOM_TYPE: u8 = 0x0f;
const TYPE_BITS: u8 = 0x0f;
const MODE_SHIFT: u8 = 4;
const MODE_BITS: u8 = 0x30;
const MODE_SHARED: u8 = 1;
const MODE_EXCLUSIVE: u8 = 2;
const HAS_GROUP: u8 = 0x40;
/// The group's length, after it at the end of the text.
const GROUP_LEN_BYTES: usize = 2;
const OWN_ACQUIRED: u8 = 0x80;
/// An `acquired_at` kept in the text (little-endian).
const ACQUIRED_BYTES: usize = 8;
const JID_SHAPE_SHIFT: u16 = 14;
const JID_LEN_BITS: u16 = (1 << JID_SHAPE_SHIFT) - 1;
const JID_HEX: u16 = 1;
const JID_UUID: u16 = 2;

impl Parts {
    /// Bytes of the jid as kept.
    #[inline]
    fn jid_kept(self) -> usize {
        usize::from(self.jid_len & JID_LEN_BITS)
    }

    #[inline]
    fn jid_shape(self) -> Shape {
        match self.jid_len >> JID_SHAPE_SHIFT {
            JID_HEX => Shape::Hex,
            JID_UUID => Shape::Uuid,
            _ => Shape::Plain,
        }
    }
}

// The bounds the engine validates fit the fields of `Parts` and `Text`: a
// bound raised past them fails the build here, instead of a length cut
// short at run time.
const _: () = assert!(
    MAX_JID_BYTES <= u16::MAX as usize,
    "a jid's or an owner's length is a u16"
);
const _: () = assert!(
    MAX_JID_BYTES <= JID_LEN_BITS as usize,
    "a jid's length leaves two bits of its u16 to how it is kept"
);
const _: () = assert!(
    MAX_TYPE_BYTES <= u8::MAX as usize,
    "a custom type name's length is a u8"
);
const _: () = assert!(
    KNOWN_TYPES.len() < CUSTOM_TYPE as usize,
    "a known type's index is a u8 below CUSTOM_TYPE"
);
const _: () = assert!(
    MAX_GROUP_BYTES <= u16::MAX as usize,
    "a group's length is a u16"
);
const _: () = assert!(
    INLINE_TEXT <= u8::MAX as usize,
    "an inline text's length is a u8"
);

impl Holder {
    /// A holder from validated parts (jid and owner at most
    /// [`MAX_JID_BYTES`], a type name at most [`MAX_TYPE_BYTES`]: the
    /// lengths then fit their fields, as the assertions above check).
    pub fn new(
        jid: &[u8],
        token: i64,
        acquired_at: i64,
        expires_at: Option<i64>,
        lock_type: &str,
        owner: Option<&[u8]>,
        meta: Option<&[u8]>,
    ) -> Self {
        Self::new_fair(
            jid,
            token,
            acquired_at,
            expires_at,
            lock_type,
            owner,
            meta,
            None,
            None,
        )
    }

    /// A holder as [`Holder::new`], with a GROUP and a MODE (at most
    /// [`MAX_GROUP_BYTES`]).
    #[allow(clippy::too_many_arguments)]
    #[inline]
    pub fn new_fair(
        jid: &[u8],
        token: i64,
        acquired_at: i64,
        expires_at: Option<i64>,
        lock_type: &str,
        owner: Option<&[u8]>,
        meta: Option<&[u8]>,
        group: Option<&[u8]>,
        mode: Option<Mode>,
    ) -> Self {
        let mut h = Self {
            token,
            expires_at: expires_at.unwrap_or(NO_LEASE),
            text: Text::default(),
        };
        h.set_all(
            acquired_at,
            lock_type,
            jid,
            owner.unwrap_or_default(),
            meta.unwrap_or_default(),
            group,
            mode,
        );
        h
    }

    fn set_text(&mut self, lock_type: &str, jid: &[u8], owner: &[u8], meta: &[u8]) {
        let (group, mode) = (self.group().map(<[u8]>::to_vec), self.mode());
        let acquired_at = self.acquired_at();
        self.set_all(
            acquired_at,
            lock_type,
            jid,
            owner,
            meta,
            group.as_deref(),
            mode,
        );
    }

    /// Lays out its text (its token already set).
    #[inline]
    #[allow(clippy::too_many_arguments)]
    fn set_all(
        &mut self,
        acquired_at: i64,
        lock_type: &str,
        jid: &[u8],
        owner: &[u8],
        meta: &[u8],
        group: Option<&[u8]>,
        mode: Option<Mode>,
    ) {
        let known = KNOWN_TYPES.iter().position(|k| *k == lock_type);
        let custom: &[u8] = if known.is_some() {
            &[]
        } else {
            lock_type.as_bytes()
        };
        debug_assert!(jid.len() <= MAX_JID_BYTES && owner.len() <= MAX_JID_BYTES);
        debug_assert!(custom.len() <= MAX_TYPE_BYTES);
        debug_assert!(group.is_none_or(|g| g.len() <= MAX_GROUP_BYTES));
        let type_index = known
            .and_then(|k| u8::try_from(k).ok())
            .unwrap_or(CUSTOM_TYPE);
        let mode_bits = match mode {
            None => 0,
            Some(Mode::Shared) => MODE_SHARED,
            Some(Mode::Exclusive) => MODE_EXCLUSIVE,
        } << MODE_SHIFT;
        let packed = jid::pack(jid);
        let (shape, jid) = match &packed {
            Some((Shape::Hex, p)) => (JID_HEX, p.as_bytes()),
            Some((Shape::Uuid, p)) => (JID_UUID, p.as_bytes()),
            _ => (0, jid),
        };
        // Kept only when the token does not tell it.
        let own_acquired = acquired_at != self.token.div_euclid(TOKENS_PER_MS);
        let acquired = acquired_at.to_le_bytes();
        let parts = Parts {
            type_code: type_index
                | mode_bits
                | if group.is_some() { HAS_GROUP } else { 0 }
                | if own_acquired { OWN_ACQUIRED } else { 0 },
            custom_type_len: u8::try_from(custom.len()).unwrap_or(u8::MAX),
            jid_len: u16::try_from(jid.len()).unwrap_or(JID_LEN_BITS) | shape << JID_SHAPE_SHIFT,
            owner_len: u16::try_from(owner.len()).unwrap_or(u16::MAX),
        };
        self.text = match group {
            // A holder without a group: its four strings, as before groups.
            None if !own_acquired => Text::new(parts, [custom, jid, owner, meta]),
            None => Text::new(parts, [&acquired, custom, jid, owner, meta]),
            Some(group) => {
                let len = u16::try_from(group.len()).unwrap_or(u16::MAX).to_le_bytes();
                let acquired: &[u8] = if own_acquired { &acquired } else { &[] };
                Text::new(parts, [acquired, custom, jid, owner, meta, group, &len])
            }
        };
    }

    /// The same holder with a GROUP and a MODE (as a grant or a decoded
    /// value gives them).
    pub fn with_fair(mut self, group: Option<&[u8]>, mode: Option<Mode>) -> Self {
        if group.is_none() && mode.is_none() && !self.has_fair() {
            return self;
        }
        let lock_type = self.lock_type().to_string();
        let (jid, owner, meta) = (
            self.jid().to_vec(),
            self.owner().unwrap_or_default().to_vec(),
            self.meta().unwrap_or_default().to_vec(),
        );
        let acquired_at = self.acquired_at();
        self.set_all(acquired_at, &lock_type, &jid, &owner, &meta, group, mode);
        self
    }

    /// Whether it has a group or a mode (one read of the type code).
    #[inline]
    pub fn has_fair(&self) -> bool {
        self.text.parts().type_code & (HAS_GROUP | MODE_BITS) != 0
    }

    /// The group it holds for (GROUP), if any.
    pub fn group(&self) -> Option<&[u8]> {
        let p = self.text.parts();
        if p.type_code & HAS_GROUP == 0 {
            return None;
        }
        let bytes = self.strings();
        let end = bytes.len().checked_sub(GROUP_LEN_BYTES)?;
        let len = match bytes.get(end..) {
            Some(&[a, b]) => usize::from(u16::from_le_bytes([a, b])),
            _ => return None,
        };
        bytes.get(end.checked_sub(len)?..end)
    }

    /// The mode it holds in (MODE), if one was given.
    pub fn mode(&self) -> Option<Mode> {
        match (self.text.parts().type_code & MODE_BITS) >> MODE_SHIFT {
            MODE_SHARED => Some(Mode::Shared),
            MODE_EXCLUSIVE => Some(Mode::Exclusive),
            _ => None,
        }
    }

    /// Whether it holds alone (MODE exclusive).
    pub fn is_exclusive(&self) -> bool {
        self.mode() == Some(Mode::Exclusive)
    }

    /// Changes its mode (a renewal's downgrade or upgrade).
    pub(super) fn set_mode(&mut self, mode: Mode) {
        if self.mode() != Some(mode) {
            let group = self.group().map(<[u8]>::to_vec);
            *self = self.clone().with_fair(group.as_deref(), Some(mode));
        }
    }

    /// Its fencing token.
    #[inline]
    pub fn token(&self) -> i64 {
        self.token
    }

    /// When it was granted (unix ms): its token's millisecond, unless it
    /// keeps its own.
    #[inline]
    pub fn acquired_at(&self) -> i64 {
        if self.text.parts().type_code & OWN_ACQUIRED != 0
            && let Some(kept) = self.text.as_bytes().first_chunk::<ACQUIRED_BYTES>()
        {
            return i64::from_le_bytes(*kept);
        }
        self.token.div_euclid(TOKENS_PER_MS)
    }

    /// Its strings, after its own `acquired_at` if it keeps one.
    #[inline(always)]
    fn strings(&self) -> &[u8] {
        let own = self.text.parts().type_code & OWN_ACQUIRED != 0;
        let skip = usize::from(own) * ACQUIRED_BYTES;
        self.text.as_bytes().get(skip..).unwrap_or_default()
    }

    fn part(&self, from: usize, len: usize) -> &[u8] {
        self.strings().get(from..from + len).unwrap_or_default()
    }

    /// Its jid, as given (see `jid.rs` for how it is kept).
    #[inline]
    pub fn jid(&self) -> Jid<'_> {
        let p = self.text.parts();
        Jid::unpack(p.jid_shape(), self.kept_jid(p))
    }

    /// Whether it is the holder of `jid` (compared as kept, without spelling
    /// its own jid out).
    #[inline]
    pub fn is(&self, jid: &[u8]) -> bool {
        let p = self.text.parts();
        jid::is(p.jid_shape(), self.kept_jid(p), jid)
    }

    #[inline]
    fn kept_jid(&self, p: Parts) -> &[u8] {
        self.part(usize::from(p.custom_type_len), p.jid_kept())
    }

    pub fn owner(&self) -> Option<&[u8]> {
        let p = self.text.parts();
        let from = usize::from(p.custom_type_len) + p.jid_kept();
        Some(self.part(from, usize::from(p.owner_len))).filter(|o| !o.is_empty())
    }

    /// The META JSON text, as given.
    pub fn meta(&self) -> Option<&[u8]> {
        let p = self.text.parts();
        let from = usize::from(p.custom_type_len) + p.jid_kept() + usize::from(p.owner_len);
        let bytes = self.strings();
        let end = if p.type_code & HAS_GROUP == 0 {
            bytes.len()
        } else {
            let group = self.group().map_or(0, <[u8]>::len);
            bytes.len().saturating_sub(group + GROUP_LEN_BYTES)
        };
        bytes.get(from..end).filter(|m| !m.is_empty())
    }

    pub fn lock_type(&self) -> &str {
        let p = self.text.parts();
        match KNOWN_TYPES.get(usize::from(p.type_code & TYPE_BITS)) {
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
    pub(super) fn renew(&mut self, req: &LockRequest<'_>) {
        if let Some(at) = req.expires_at {
            self.expires_at = at;
        }
        // A job renews with what it sent first (a heartbeat): nothing to
        // rebuild when every field given is the one held.
        let same = req.lock_type.is_none_or(|t| t == self.lock_type())
            && req.owner.is_none_or(|o| Some(o) == self.owner())
            && req.meta.is_none_or(|m| Some(m.as_bytes()) == self.meta());
        if !same {
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
    #[cfg(test)]
    pub(super) fn text_bytes(&self) -> usize {
        self.text.as_bytes().len()
    }

    /// The bytes of its strings kept on the heap, beside it.
    pub(super) fn heap_bytes(&self) -> usize {
        match &self.text {
            Text::Inline { .. } => 0,
            Text::Heap { bytes, .. } => bytes.len(),
        }
    }
}

/// Bytes of [`Text`] kept in the holder itself: with the tag, the lengths
/// and the length, 24 bytes, as much as the heap form, so that a holder is 40
/// bytes and a lock of one holder one 40-byte allocation.
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
    fn new<const N: usize>(parts: Parts, strings: [&[u8]; N]) -> Self {
        let total: usize = strings.iter().map(|p| p.len()).sum();
        match u8::try_from(total) {
            Ok(len) if total <= INLINE_TEXT => {
                let mut bytes = [0; INLINE_TEXT];
                let mut at = 0;
                // Most parts are empty (no owner, meta or group): skipped.
                for s in strings.into_iter().filter(|s| !s.is_empty()) {
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

/// Above this many holders a lock's holders are indexed ([`Indexed`]): a
/// vector of a few dozen holders is looked through faster than any index is
/// kept up, and is smaller.
pub(super) const GROW_AT: usize = 32;
/// Below this many, an indexed lock's holders are a vector again: half the
/// threshold up, so that a lock near it does not convert at every call.
pub(super) const SHRINK_AT: usize = 16;

/// The holders of a lock: none, one kept in place (most locks: the lock is
/// then one allocation), several in a vector in grant order, or, past
/// [`GROW_AT`], indexed by jid and by end of lease. A lock with a rate keeps
/// the rate and its holders behind one more pointer, so that the locks
/// without one (most) stay one 40-byte allocation.
#[derive(Debug, Clone, Default)]
pub(super) enum Holders {
    #[default]
    None,
    One(Holder),
    Many(Vec<Holder>),
    Indexed(Box<Indexed>),
    Rated(Box<Rated>),
}

/// A rate and the holders beside it (never `Rated` themselves).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Rated {
    pub(super) rate: Rate,
    pub(super) holders: Holders,
}

/// Equal when they hold the same holders in the same grant order (whatever
/// their layout) and the same rate.
impl PartialEq for Holders {
    fn eq(&self, other: &Self) -> bool {
        self.rate() == other.rate()
            && self.len() == other.len()
            && self.ordered().eq(other.ordered())
    }
}

impl Eq for Holders {}

/// Holders in grant order: a slice, or the indexed ones sorted.
pub enum Ordered<'a> {
    Slice(std::slice::Iter<'a, Holder>),
    Sorted(std::vec::IntoIter<&'a Holder>),
}

impl<'a> Iterator for Ordered<'a> {
    type Item = &'a Holder;
    fn next(&mut self) -> Option<&'a Holder> {
        match self {
            Self::Slice(it) => it.next(),
            Self::Sorted(it) => it.next(),
        }
    }
}

impl Holders {
    /// Holders in grant order (a decoded value), in the layout for their number.
    pub(super) fn from_vec(mut holders: Vec<Holder>) -> Self {
        match holders.len() {
            0 => Self::None,
            1 => holders.pop().map_or(Self::None, Self::One),
            n if n > GROW_AT => match Indexed::from_ordered(holders) {
                Ok(indexed) => Self::Indexed(Box::new(indexed)),
                // Tokens out of grant order (only a forged payload): kept as given.
                Err(holders) => Self::Many(holders),
            },
            _ => Self::Many(holders),
        }
    }

    /// The holders beside the rate, if any.
    fn plain(&self) -> &Self {
        match self {
            Self::Rated(r) => &r.holders,
            other => other,
        }
    }

    fn plain_mut(&mut self) -> &mut Self {
        match self {
            Self::Rated(r) => &mut r.holders,
            other => other,
        }
    }

    /// The compact forms as a slice; `None` when indexed.
    fn slice(&self) -> Option<&[Holder]> {
        match self.plain() {
            Self::None => Some(&[]),
            Self::One(h) => Some(std::slice::from_ref(h)),
            Self::Many(v) => Some(v),
            Self::Indexed(_) | Self::Rated(_) => None,
        }
    }

    fn indexed(&self) -> Option<&Indexed> {
        match self.plain() {
            Self::Indexed(i) => Some(i),
            _ => None,
        }
    }

    pub(super) fn len(&self) -> usize {
        match self.plain() {
            Self::None | Self::Rated(_) => 0,
            Self::One(_) => 1,
            Self::Many(v) => v.len(),
            Self::Indexed(i) => i.len(),
        }
    }

    pub(super) fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Every holder, in grant order for the compact forms and in no
    /// particular order when indexed: for what only counts or sums.
    pub(super) fn iter(&self) -> impl Iterator<Item = &Holder> {
        let slice = self.slice().unwrap_or_default().iter();
        slice.chain(self.indexed().into_iter().flat_map(Indexed::iter))
    }

    /// Every holder in grant order.
    pub(super) fn ordered(&self) -> Ordered<'_> {
        match self.indexed() {
            Some(i) => Ordered::Sorted(i.ordered().into_iter()),
            None => Ordered::Slice(self.slice().unwrap_or_default().iter()),
        }
    }

    /// Up to about `count` holders from `cursor` on, and the cursor to go on
    /// from (0 when done). A compact lock is small: all of it at once.
    pub(super) fn page(&self, cursor: usize, count: usize) -> (usize, Vec<&Holder>) {
        match self.indexed() {
            Some(i) => i.page(cursor, count),
            None => (0, self.iter().collect()),
        }
    }

    pub(super) fn find(&self, jid: &[u8]) -> Option<&Holder> {
        match self.plain() {
            // The common key, first: one holder, no chain of iterators.
            Self::One(h) => h.is(jid).then_some(h),
            Self::Indexed(i) => i.find(jid),
            _ => self.iter().find(|h| h.is(jid)),
        }
    }

    /// Changes the holder of `jid` (never its jid) and returns its token.
    pub(super) fn update(&mut self, jid: &[u8], change: impl FnOnce(&mut Holder)) -> Option<i64> {
        let found = match self.plain_mut() {
            Self::One(h) => Some(h).filter(|h| h.is(jid)),
            Self::Many(v) => v.iter_mut().find(|h| h.is(jid)),
            Self::Indexed(i) => return i.update(jid, change),
            Self::None | Self::Rated(_) => None,
        };
        found.map(|h| {
            change(h);
            h.token
        })
    }

    /// Adds a holder of a jid not held yet, as the newest grant.
    pub(super) fn push(&mut self, holder: Holder) {
        match self {
            // A key's first holder: nothing to take apart.
            Self::None => {
                self.fill_empty(Self::One(holder));
                return;
            }
            // The holders beside a rate, in place.
            Self::Rated(r) => return r.holders.push(holder),
            _ => {}
        }
        *self = match std::mem::take(self) {
            Self::None => Self::One(holder),
            Self::One(first) => Self::Many(vec![first, holder]),
            Self::Many(mut v) => {
                // Grow one at a time while small, instead of Vec's doubling.
                if v.len() == v.capacity() && v.len() < 4 {
                    v.reserve_exact(1);
                }
                v.push(holder);
                Self::from_vec(v)
            }
            Self::Indexed(mut i) => match i.insert(holder) {
                Ok(()) => Self::Indexed(i),
                // A token before the newest (only replayed forged data):
                // grant order is kept in a vector.
                Err(holder) => {
                    let mut v = i.into_ordered();
                    v.push(holder);
                    Self::Many(v)
                }
            },
            Self::Rated(mut r) => {
                r.holders.push(holder);
                Self::Rated(r)
            }
        };
    }

    /// Puts `new` in place of no holders (the caller knows there are
    /// none). `None` owns nothing, so it is forgotten, not dropped: the drop
    /// is a call the compiler does not elide, on every first grant of a key.
    fn fill_empty(&mut self, new: Self) {
        let old = std::mem::replace(self, new);
        debug_assert!(matches!(old, Self::None));
        std::mem::forget(old);
    }

    /// Back to a smaller layout once few holders are left.
    #[inline]
    fn shrink(&mut self) {
        // None and one holder are as small as it gets (most keys), decided
        // here without the call.
        if !matches!(self, Self::None | Self::One(_)) {
            self.shrink_layout();
        }
    }

    fn shrink_layout(&mut self) {
        match self {
            Self::Many(v) if v.len() < 2 => *self = Self::from_vec(std::mem::take(v)),
            Self::Indexed(i) if i.len() < SHRINK_AT => {
                let i = std::mem::replace(i, Box::new(Indexed::empty()));
                *self = Self::from_vec(i.into_ordered());
            }
            Self::Rated(r) => r.holders.shrink(),
            _ => {}
        }
    }

    /// Removes the holder of `jid`.
    pub(super) fn remove(&mut self, jid: &[u8]) -> Option<Holder> {
        let removed = match self.plain_mut() {
            one @ Self::One(_) => match std::mem::take(one) {
                Self::One(h) if h.is(jid) => Some(h),
                kept => {
                    *one = kept;
                    None
                }
            },
            Self::Many(v) => v.iter().position(|h| h.is(jid)).map(|at| v.remove(at)),
            Self::Indexed(i) => i.remove(jid),
            _ => None,
        };
        self.shrink();
        removed
    }

    /// Removes the holders whose lease ended at `now`, showing each to
    /// `removed`; indexed, only those are visited, the earliest first.
    pub(super) fn prune(&mut self, now: i64, mut removed: impl FnMut(&Holder)) -> usize {
        // One live holder, the most common key: nothing to take apart.
        if let Self::One(h) = self
            && h.is_live(now)
        {
            return 0;
        }
        let count = match self.plain_mut() {
            Self::Indexed(i) => {
                let mut count = 0;
                while let Some(h) = i.pop_ended(now) {
                    removed(&h);
                    count += 1;
                }
                count
            }
            _ => return self.remove_where(|h| !h.is_live(now), removed),
        };
        self.shrink();
        count
    }

    /// Removes every holder `matches` picks, showing each to `removed`.
    pub(super) fn remove_where(
        &mut self,
        mut matches: impl FnMut(&Holder) -> bool,
        mut removed: impl FnMut(&Holder),
    ) -> usize {
        let before = self.len();
        match self.plain_mut() {
            Self::One(h) => {
                if matches(h) {
                    removed(h);
                    *self.plain_mut() = Self::None;
                }
            }
            Self::Many(v) => v.retain(|h| {
                let remove = matches(h);
                if remove {
                    removed(h);
                }
                !remove
            }),
            Self::Indexed(i) => {
                i.remove_where(matches, removed);
            }
            Self::None | Self::Rated(_) => {}
        }
        self.shrink();
        before - self.len()
    }

    /// Removes every holder whose owner is `owner`, in grant order, showing
    /// each to `removed`: indexed, only those are visited.
    pub(super) fn remove_owner(&mut self, owner: &[u8], removed: impl FnMut(&Holder)) -> usize {
        let count = match self.plain_mut() {
            Self::Indexed(i) => i.remove_owner(owner, removed),
            _ => return self.remove_where(|h| h.owner() == Some(owner), removed),
        };
        self.shrink();
        count
    }

    /// How many holders `group` has (`None`: those without a group): a
    /// look-up when indexed, a walk of a few dozen at most otherwise.
    pub(super) fn group_holding(&self, group: Option<&[u8]>) -> usize {
        match self.indexed() {
            Some(i) => i.group_holding(group),
            None => self.iter().filter(|h| h.group() == group).count(),
        }
    }

    /// Per group (`None`: no group), how many holders' leases have not
    /// ended at `now`, groups with none left out, in no particular order.
    /// Indexed: from the counts kept, less the ended holders (found without
    /// a walk over the others).
    pub(super) fn live_by_group(&self, now: i64) -> Vec<(Option<&[u8]>, usize)> {
        if let Some(i) = self.indexed() {
            let mut counts: std::collections::HashMap<Option<&[u8]>, usize> =
                i.groups_holding().collect();
            i.for_each_ended(now, |h| {
                if let Some(n) = counts.get_mut(&h.group()) {
                    *n = n.saturating_sub(1);
                }
            });
            return counts.into_iter().filter(|&(_, n)| n > 0).collect();
        }
        // A few dozen at most.
        let mut counts: Vec<(Option<&[u8]>, usize)> = Vec::new();
        for h in self.iter().filter(|h| h.is_live(now)) {
            match counts.iter_mut().find(|(g, _)| *g == h.group()) {
                Some((_, n)) => *n += 1,
                None => counts.push((h.group(), 1)),
            }
        }
        counts
    }

    /// How many live holders each group has at `now`, for many questions in
    /// a row (a serving pass asks for every waiting group): indexed, from
    /// the counts the index keeps less the holders whose lease has ended
    /// (found without a walk over the others: a key of 100,000 holders whose
    /// first lease just ended costs what its ended holders do); otherwise
    /// counted once, a few dozen holders at most.
    pub(super) fn group_counts(&self, now: i64) -> GroupCounts<'_> {
        let Some(i) = self.indexed() else {
            let mut counts = self.live_by_group(now);
            counts.sort_unstable_by(|a, b| a.0.cmp(&b.0));
            let live_ends = self.iter().filter_map(Holder::expires_at);
            return GroupCounts {
                counts: Counts::Counted(counts),
                next_lease_end: live_ends.filter(|&end| now < end).min(),
            };
        };
        let mut ended: Vec<(Option<&[u8]>, usize)> = Vec::new();
        let mut next_lease_end = i.earliest_lease();
        if next_lease_end.is_some_and(|at| at <= now) {
            next_lease_end = i.for_each_ended(now, |h| ended.push((h.group(), 1)));
            ended.sort_unstable_by(|a, b| a.0.cmp(&b.0));
            ended.dedup_by(|later, kept| {
                let same = later.0 == kept.0;
                if same {
                    kept.1 += later.1;
                }
                same
            });
        }
        GroupCounts {
            counts: Counts::Kept(i, ended),
            next_lease_end,
        }
    }

    /// The index's [`Indexed::holdings_stamp`]; `None` for a compact lock
    /// (a few dozen holders, looked at again).
    #[cfg(test)]
    pub(super) fn holdings_stamp(&self) -> Option<HoldingsStamp> {
        self.indexed().map(Indexed::holdings_stamp)
    }

    /// Whether a holder holds exclusively.
    pub(super) fn exclusive_held(&self) -> bool {
        match self.indexed() {
            Some(i) => i.exclusive_holders() > 0,
            None => self.iter().any(Holder::is_exclusive),
        }
    }

    /// The earliest end of lease among the holders.
    pub(super) fn earliest_lease(&self) -> Option<i64> {
        match self.indexed() {
            Some(i) => i.earliest_lease(),
            None => self.iter().filter_map(Holder::expires_at).min(),
        }
    }

    /// The key's expiry from its holders: the latest lease, `None` when a
    /// holder has no lease; `Some(None)` when there is no holder.
    pub(super) fn latest_lease(&self) -> Option<Option<i64>> {
        if let Self::One(h) = self.plain() {
            return h.expires_at().map(Some);
        }
        match self.indexed() {
            Some(i) if i.has_unleased() => None,
            Some(i) => Some(i.latest_lease()),
            None => self.iter().try_fold(None, |latest: Option<i64>, h| {
                let at = h.expires_at()?;
                Some(Some(latest.map_or(at, |l| l.max(at))))
            }),
        }
    }

    /// Whether every holder's lease ended at `now` (and there is one).
    pub(super) fn all_ended(&self, now: i64) -> bool {
        !self.is_empty()
            && self
                .latest_lease()
                .is_some_and(|at| at.is_some_and(|at| at <= now))
    }

    /// Holder slots held (a vector may hold more than it uses).
    #[cfg(test)]
    pub(crate) fn capacity(&self) -> usize {
        match self.plain() {
            Self::None => 0,
            Self::One(_) => 1,
            Self::Many(v) => v.capacity(),
            Self::Indexed(i) => i.len(),
            Self::Rated(_) => 0,
        }
    }

    /// [`crate::engine::Lock::free_effort`]: an indexed lock's holders, 1
    /// for a compact one (at most a vector and a few dozen texts).
    pub(super) fn free_effort(&self) -> usize {
        self.indexed().map_or(1, |i| i.len().max(1))
    }

    /// Bytes held beyond the lock itself, for MEMORY USAGE: a lone holder
    /// is inside the lock (or the rate's box), and a text kept in place is
    /// inside its holder, so only a vector and texts on the heap add.
    pub(super) fn mem_usage(&self) -> usize {
        let rated = self.rate().map_or(0, |_| std::mem::size_of::<Rated>());
        rated
            + match self.indexed() {
                Some(i) => i.mem_usage(),
                None => {
                    let vector = match self.plain() {
                        Self::Many(v) => v.capacity() * std::mem::size_of::<Holder>(),
                        _ => 0,
                    };
                    vector + self.iter().map(Holder::heap_bytes).sum::<usize>()
                }
            }
    }

    pub(super) fn rate(&self) -> Option<&Rate> {
        match self {
            Self::Rated(r) => Some(&r.rate),
            _ => None,
        }
    }

    /// Sets the rate kept beside the holders (`None`: no rate).
    pub(super) fn set_rate(&mut self, rate: Option<Rate>) {
        match (&mut *self, rate) {
            // The common case, a rated lock spending again, in place.
            (Self::Rated(r), Some(rate)) => r.rate = rate,
            (Self::Rated(_), None) => {
                if let Self::Rated(r) = std::mem::take(self) {
                    *self = r.holders;
                }
            }
            (_, Some(rate)) => {
                // Allocated first, then swapped: nothing is left to drop.
                let mut rated = Box::new(Rated {
                    rate,
                    holders: Self::None,
                });
                std::mem::swap(&mut rated.holders, self);
                self.fill_empty(Self::Rated(rated));
            }
            (_, None) => {}
        }
    }
}

/// The in-place forms against the plain ones they stand for.
#[cfg(test)]
mod layout;
