//! A lock's holders and how they are laid out in memory: most locks have one
//! holder, so a holder is kept small and, alone, inside the lock itself. The
//! rules that decide who holds live in the parent module; this file only
//! stores and reads holders.

use std::fmt;

use super::{DEFAULT_TYPE, KNOWN_TYPES, LockRequest, Rate};

/// One job holding a lock.
///
/// Most locks have one holder, so a holder is kept small (48 bytes, held in
/// the lock itself when it is the only one): its variable parts share one
/// `Text` (a custom type name, the jid, the owner, the meta), kept in the
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
    pub(super) fn renew(&mut self, req: &LockRequest<'_>) {
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
    pub(super) fn text_bytes(&self) -> usize {
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
/// then one allocation), or several in a vector. A lock with a rate keeps
/// the rate and its holders behind one more pointer, so that the locks
/// without one (most) stay one 48-byte allocation.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(super) enum Holders {
    #[default]
    None,
    One(Holder),
    Many(Vec<Holder>),
    Rated(Box<Rated>),
}

/// A rate and the holders beside it (never `Rated` themselves).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Rated {
    pub(super) rate: Rate,
    pub(super) holders: Holders,
}

impl Holders {
    pub(super) fn from_vec(mut holders: Vec<Holder>) -> Self {
        match holders.len() {
            0 => Self::None,
            1 => holders.pop().map_or(Self::None, Self::One),
            _ => Self::Many(holders),
        }
    }

    pub(super) fn as_slice(&self) -> &[Holder] {
        match self {
            Self::None => &[],
            Self::One(h) => std::slice::from_ref(h),
            Self::Many(v) => v,
            Self::Rated(r) => r.holders.as_slice(),
        }
    }

    fn as_mut_slice(&mut self) -> &mut [Holder] {
        match self {
            Self::None => &mut [],
            Self::One(h) => std::slice::from_mut(h),
            Self::Many(v) => v,
            Self::Rated(r) => r.holders.as_mut_slice(),
        }
    }

    pub(super) fn push(&mut self, holder: Holder) {
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
            Self::Rated(mut r) => {
                r.holders.push(holder);
                Self::Rated(r)
            }
        };
    }

    /// Back to the smallest form once at most one holder is left.
    fn shrink(&mut self) {
        match self {
            Self::Many(v) if v.len() < 2 => *self = Self::from_vec(std::mem::take(v)),
            Self::Rated(r) => r.holders.shrink(),
            _ => {}
        }
    }

    pub(super) fn remove(&mut self, i: usize) -> Option<Holder> {
        let removed = match self {
            Self::One(_) if i == 0 => match std::mem::take(self) {
                Self::One(h) => Some(h),
                _ => None,
            },
            Self::Many(v) if i < v.len() => Some(v.remove(i)),
            Self::Rated(r) => r.holders.remove(i),
            _ => None,
        };
        self.shrink();
        removed
    }

    pub(super) fn retain(&mut self, mut keep: impl FnMut(&Holder) -> bool) {
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
            Self::Rated(r) => r.holders.retain(keep),
        }
    }

    /// Holder slots held (a vector may hold more than it uses).
    pub(crate) fn capacity(&self) -> usize {
        match self {
            Self::None => 0,
            Self::One(_) => 1,
            Self::Many(v) => v.capacity(),
            Self::Rated(r) => r.holders.capacity(),
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
        *self = match (std::mem::take(self), rate) {
            (Self::Rated(mut r), Some(rate)) => {
                r.rate = rate;
                Self::Rated(r)
            }
            (Self::Rated(r), None) => r.holders,
            (holders, Some(rate)) => Self::Rated(Box::new(Rated { rate, holders })),
            (holders, None) => holders,
        };
    }
}

/// The in-place forms against the plain ones they stand for.
#[cfg(test)]
mod layout {
    use proptest::prelude::*;

    use super::super::Lock;
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
