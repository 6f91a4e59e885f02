//! One holder of a lock, packed: most locks have one holder, kept inside the
//! lock itself, so a holder is small. Who may hold is the parent module's
//! rule; the layouts of many holders are in `holders.rs`.

use std::fmt;

use super::jid::{self, Jid, Shape};
use super::{
    DEFAULT_TYPE, KNOWN_TYPES, LockRequest, MAX_GROUP_BYTES, MAX_JID_BYTES, MAX_TYPE_BYTES, Mode,
};

mod group_counts;
mod holders;

pub use group_counts::GroupCounts;
pub(super) use holders::Holders;
pub use holders::Ordered;
#[cfg(test)]
use holders::{GROW_AT, SHRINK_AT};

/// One job holding a lock, in 40 bytes: its variable parts (a custom type
/// name, the jid, the owner, the meta) share one `Text`, inline up to 16
/// bytes (the ids job systems send, packed by `jid.rs`); a known type name
/// is an index and "no lease" a sentinel. GROUP and MODE cost a holder
/// without them nothing: the mode and whether a group follows are bits of
/// the type's code, the group goes at the end of the text with its
/// two-byte length.
///
/// A token reads as the unix microseconds of its grant ([`TOKENS_PER_MS`]),
/// so a holder acquired in its token's millisecond keeps no `acquired_at`.
/// One granted while tokens ran ahead of the clock (over a thousand grants
/// in a millisecond, a replicated token from a clock ahead) keeps it, 8
/// bytes at the head of its text (`OWN_ACQUIRED`); it reads the same.
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
            // A holder without a group: its four strings.
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

/// The in-place forms against the plain ones they stand for.
#[cfg(test)]
mod layout;
