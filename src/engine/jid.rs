//! A jid kept in half its bytes when it has the shape job systems give
//! their ids: Sidekiq's 24 lowercase hex digits, RQ's 32, the UUIDs of
//! Celery and redis-semaphore (8-4-4-4-12 lowercase hex digits and dashes).
//! Two hex digits go in a byte, so such a jid fits in a holder's 16 bytes of
//! inline text (where it would otherwise take a heap allocation of its own),
//! and a holder with an owner or metadata keeps a shorter text.
//!
//! The packing is a function of the jid alone, so one jid is always kept
//! the same way: a jid that does not pack is kept as given, and no kept
//! plain jid can equal one that packs. What is kept is an implementation
//! detail: every reader (replies, effects, RDB, digest) gets the jid's own
//! bytes back.

use std::fmt;
use std::hash::{Hash, Hasher};
use std::ops::Deref;

/// How a jid is kept: as given, as packed hex digits, or as a packed UUID.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Shape {
    Plain,
    Hex,
    Uuid,
}

/// Hex jids shorter than this already fit a holder's inline text (with no
/// owner or meta): packing them would cost their lookups and save nothing.
const MIN_HEX: usize = 18;
/// The longest hex jid packed (a SHA-256 digest in hex); longer ones are
/// kept as given.
const MAX_HEX: usize = 64;
/// The longest packed form.
const MAX_PACKED: usize = MAX_HEX / 2;
const UUID_LEN: usize = 36;
/// Where a UUID's dashes are.
const UUID_DASHES: [usize; 4] = [8, 13, 18, 23];

/// A jid's packed bytes.
pub(super) struct Packed {
    bytes: [u8; MAX_PACKED],
    len: u8,
}

impl Packed {
    pub(super) fn as_bytes(&self) -> &[u8] {
        self.bytes.get(..usize::from(self.len)).unwrap_or_default()
    }
}

/// The shape of `jid` and its packed bytes, or `None` when it is kept as
/// given.
#[inline]
pub(super) fn pack(jid: &[u8]) -> Option<(Shape, Packed)> {
    // Most jids are short or not hex: the length alone rules them out.
    if jid.len() < MIN_HEX {
        return None;
    }
    let (shape, digits) = if jid.len() == UUID_LEN {
        (Shape::Uuid, &uuid_digits(jid)?[..])
    } else if jid.len().is_multiple_of(2) && jid.len() <= MAX_HEX {
        (Shape::Hex, jid)
    } else {
        return None;
    };
    let mut packed = Packed {
        bytes: [0; MAX_PACKED],
        len: u8::try_from(digits.len() / 2).ok()?,
    };
    pack_hex(digits, packed.bytes.get_mut(..digits.len() / 2)?).then_some((shape, packed))
}

/// A UUID's digits, each run of them put after the one before without its
/// dash; `None` if a dash is missing.
fn uuid_digits(uuid: &[u8]) -> Option<[u8; UUID_DIGITS]> {
    if !UUID_DASHES.iter().all(|&at| uuid.get(at) == Some(&b'-')) {
        return None;
    }
    let mut digits = [0; UUID_DIGITS];
    for (from, to) in UUID_RUNS {
        copy(
            uuid.get(from..to)?,
            digits.get_mut(from - dashes_before(from)..)?,
        );
    }
    Some(digits)
}

/// The runs of a UUID's digits, between its dashes.
const UUID_RUNS: [(usize, usize); 5] = [(0, 8), (9, 13), (14, 18), (19, 23), (24, UUID_LEN)];
const UUID_DIGITS: usize = 32;

/// How many of a UUID's dashes come before `at`.
const fn dashes_before(at: usize) -> usize {
    let mut n = 0;
    while n < UUID_DASHES.len() && UUID_DASHES[n] < at {
        n += 1;
    }
    n
}

/// Copies `from` to the start of `to` (as much as fits).
fn copy(from: &[u8], to: &mut [u8]) {
    for (to, &b) in to.iter_mut().zip(from) {
        *to = b;
    }
}

/// Packs `digits` (twice as many as `to` has bytes) two to a byte; false if
/// one is not a lowercase hex digit. No branch per digit: a digit that is
/// not one reads as 0xff, whose high bits are seen at the end.
fn pack_hex(digits: &[u8], to: &mut [u8]) -> bool {
    if digits.len() != to.len() * 2 {
        return false;
    }
    let mut seen = 0;
    for (byte, pair) in to.iter_mut().zip(digits.chunks_exact(2)) {
        let (packed, nibbles) = pack_pair(pair);
        seen |= nibbles;
        *byte = packed;
    }
    seen & 0xf0 == 0
}

/// The byte two digits pack to, and their nibbles OR'd together: high bits
/// set when one is not a lowercase hex digit.
fn pack_pair(pair: &[u8]) -> (u8, u8) {
    match *pair {
        [high, low] => {
            let (high, low) = (NIBBLES[usize::from(high)], NIBBLES[usize::from(low)]);
            (high << 4 | low, high | low)
        }
        _ => (0, 0xff),
    }
}

/// Each byte's value as a lowercase hex digit, 0xff if it is not one.
const NIBBLES: [u8; 256] = {
    let mut table = [0xff; 256];
    let mut d = 0;
    while d < 16 {
        table[DIGITS[d] as usize] = d as u8;
        d += 1;
    }
    table
};

const DIGITS: &[u8; 16] = b"0123456789abcdef";

/// Whether `jid` is the jid kept as `stored` in `shape`, without unpacking
/// (a jid of another length is told apart by its length alone).
#[inline]
pub(super) fn is(shape: Shape, stored: &[u8], jid: &[u8]) -> bool {
    match shape {
        Shape::Plain => stored == jid,
        Shape::Hex => jid.len() == stored.len() * 2 && packs_to(jid, stored),
        Shape::Uuid => {
            jid.len() == UUID_LEN && uuid_digits(jid).is_some_and(|d| packs_to(&d, stored))
        }
    }
}

/// Whether `digits` are lowercase hex digits that pack to `packed`.
fn packs_to(digits: &[u8], packed: &[u8]) -> bool {
    let (mut seen, mut differ) = (0, 0);
    for (pair, &byte) in digits.chunks_exact(2).zip(packed) {
        let (mine, nibbles) = pack_pair(pair);
        seen |= nibbles;
        differ |= mine ^ byte;
    }
    seen & 0xf0 == 0 && differ == 0
}

/// A holder's jid, as given: borrowed from the holder when it is kept as
/// given, spelled out again when it is packed.
#[derive(Clone, Copy)]
pub struct Jid<'a>(Kept<'a>);

#[derive(Clone, Copy)]
enum Kept<'a> {
    Plain(&'a [u8]),
    Unpacked { bytes: [u8; MAX_HEX], len: u8 },
}

impl<'a> Jid<'a> {
    pub(super) fn unpack(shape: Shape, stored: &'a [u8]) -> Self {
        if shape == Shape::Plain {
            return Self(Kept::Plain(stored));
        }
        let mut digits = [0; MAX_HEX];
        for (pair, &b) in digits.chunks_exact_mut(2).zip(stored) {
            if let [high, low] = pair {
                *high = DIGITS[usize::from(b >> 4)];
                *low = DIGITS[usize::from(b & 0x0f)];
            }
        }
        let (bytes, len) = match shape {
            Shape::Uuid => {
                let mut uuid = [b'-'; MAX_HEX];
                for (from, to) in UUID_RUNS {
                    let at = from - dashes_before(from);
                    if let (Some(run), Some(to)) =
                        (digits.get(at..at + to - from), uuid.get_mut(from..))
                    {
                        copy(run, to);
                    }
                }
                (uuid, UUID_LEN)
            }
            _ => (digits, stored.len() * 2),
        };
        Self(Kept::Unpacked {
            bytes,
            len: u8::try_from(len).unwrap_or(0),
        })
    }
}

impl Deref for Jid<'_> {
    type Target = [u8];

    #[inline]
    fn deref(&self) -> &[u8] {
        match &self.0 {
            Kept::Plain(bytes) => bytes,
            Kept::Unpacked { bytes, len } => bytes.get(..usize::from(*len)).unwrap_or_default(),
        }
    }
}

impl AsRef<[u8]> for Jid<'_> {
    fn as_ref(&self) -> &[u8] {
        self
    }
}

impl PartialEq for Jid<'_> {
    fn eq(&self, other: &Self) -> bool {
        **self == **other
    }
}

impl Eq for Jid<'_> {}

impl PartialEq<[u8]> for Jid<'_> {
    fn eq(&self, other: &[u8]) -> bool {
        **self == *other
    }
}

impl PartialEq<&[u8]> for Jid<'_> {
    fn eq(&self, other: &&[u8]) -> bool {
        **self == **other
    }
}

impl<const N: usize> PartialEq<[u8; N]> for Jid<'_> {
    fn eq(&self, other: &[u8; N]) -> bool {
        **self == *other
    }
}

impl Hash for Jid<'_> {
    fn hash<H: Hasher>(&self, state: &mut H) {
        (**self).hash(state);
    }
}

impl fmt::Debug for Jid<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", String::from_utf8_lossy(self))
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn kept(jid: &[u8]) -> (Shape, Vec<u8>) {
        match pack(jid) {
            Some((shape, packed)) => (shape, packed.as_bytes().to_vec()),
            None => (Shape::Plain, jid.to_vec()),
        }
    }

    #[test]
    fn the_ids_of_job_systems_are_kept_in_half_their_bytes() {
        for (jid, shape, bytes) in [
            (&b"2c34d9a1b2c3d4e5f6a7b8c9"[..], Shape::Hex, 12), // Sidekiq
            (b"0f4d6e2a9b8c47d1a3e5f60718293a4b", Shape::Hex, 16), // RQ
            (b"8f14e45f-ceea-467a-9575-1f5e0e0c1b2d", Shape::Uuid, 16), // Celery, redis-semaphore
        ] {
            let (s, packed) = kept(jid);
            assert_eq!((s, packed.len()), (shape, bytes), "{jid:?}");
            assert_eq!(&*Jid::unpack(s, &packed), jid);
        }
    }

    #[test]
    fn short_jids_and_jids_of_other_shapes_are_kept_as_given() {
        for jid in [
            &b"job"[..],
            b"1234",
            b"0123456789abcdef",  // 16 digits fit inline already
            b"0123456789abcdef0", // odd
            b"2C34D9A1B2C3D4E5F6A7B8C9",
            b"2c34d9a1b2c3d4e5f6a7b8cx",
            b"8f14e45f-ceea-467a-9575-1f5e0e0c1b2",
            b"8f14e45fxceea-467a-9575-1f5e0e0c1b2d",
            b"8F14E45F-CEEA-467A-9575-1F5E0E0C1B2D",
            &[b'a'; MAX_HEX + 2],
        ] {
            assert_eq!(kept(jid), (Shape::Plain, jid.to_vec()), "{jid:?}");
        }
    }

    fn jids() -> impl Strategy<Value = Vec<u8>> {
        prop_oneof![
            proptest::collection::vec(any::<u8>(), 0..80),
            "[0-9a-f]{0,70}".prop_map(String::into_bytes),
            "[0-9a-fA-F-]{16,40}".prop_map(String::into_bytes),
            "[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"
                .prop_map(String::into_bytes),
        ]
    }

    proptest! {
        #[test]
        fn a_kept_jid_reads_back_as_given_and_is_only_itself(a in jids(), b in jids()) {
            let (shape, stored) = kept(&a);
            prop_assert_eq!(&*Jid::unpack(shape, &stored), &a[..]);
            prop_assert!(is(shape, &stored, &a));
            prop_assert_eq!(is(shape, &stored, &b), a == b);
            if shape != Shape::Plain {
                prop_assert!(stored.len() * 2 <= a.len());
            }
        }
    }
}
