//! The serialized form of a lock (RDB, DUMP/RESTORE, digest), as pure code.
//!
//! The encoding is written and read through the [`Sink`] and [`Source`]
//! traits, so that the Redis glue only maps them onto the RDB primitives and
//! the decoder can be tested, and fed hostile bytes, without a server.
//!
//! Encoding version 2 (version 1 is the same without the rate, and has at
//! least one holder; both are read):
//!
//! ```text
//! unsigned  number of holders (at least 1 when there is no rate)
//! then for each holder, oldest grant first:
//!   buffer  jid
//!   signed  token
//!   signed  acquired_at
//!   signed  expires_at, -1 when none
//!   buffer  type
//!   buffer  owner, empty when none
//!   buffer  meta,  empty when none
//! unsigned  1 when a rate follows, else 0
//!   signed  n, signed per (ms), signed burst, signed tat (units of 1/n ms)
//! ```

use std::collections::HashSet;
use std::ffi::CStr;
use std::fmt;

use crate::lock::{
    DEFAULT_TYPE, Holder, Lock, Rate, RateLimit, validate_jid, validate_owner, validate_type,
};

/// The internal command that carries an effect to replicas and the AOF
/// (`commands/apply.rs`), as it is registered and written.
pub const APPLY_COMMAND: &CStr = c"unique.apply";
/// [`APPLY_COMMAND`] as text, for its registration (`lib.rs`).
pub const APPLY_COMMAND_NAME: &str = match APPLY_COMMAND.to_str() {
    Ok(name) => name,
    Err(_) => "",
};

/// What `unique.apply key now <op> ...` does after removing the holders whose
/// lease ended at `now`: the one list of its operations, written by the
/// replication side (`ffi::replicate_*`) and read by the replica's side
/// (`commands/apply.rs`).
///
/// ```text
/// unique.apply key now HOLD jid token acquired_at expires_at [type [owner [meta]]]
/// unique.apply key now RELEASE jid
/// unique.apply key now REAP owner
/// unique.apply key now PRUNE
/// unique.apply key now RATE n per burst tat
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ApplyOp {
    /// Puts a holder exactly as given (a grant or a renewal), in the fields of
    /// [`write_holder`]; the trailing ones may be left out where they have
    /// their default value ([`HOLD_DEFAULTS`]).
    Hold,
    /// Removes one holder, by jid.
    Release,
    /// Removes every holder of one owner.
    ReapOwner,
    /// Nothing after the removal of the ended leases.
    PruneOnly,
    /// Puts the key's rate state exactly as given, in the fields of
    /// [`write_rate`].
    Rate,
}

impl ApplyOp {
    pub const ALL: [Self; 5] = [
        Self::Hold,
        Self::Release,
        Self::ReapOwner,
        Self::PruneOnly,
        Self::Rate,
    ];

    /// Its word on the wire.
    pub const fn word(self) -> &'static CStr {
        match self {
            Self::Hold => c"HOLD",
            Self::Release => c"RELEASE",
            Self::ReapOwner => c"REAP",
            Self::PruneOnly => c"PRUNE",
            Self::Rate => c"RATE",
        }
    }

    /// The operation a word names (any case, as Redis reads command words).
    pub fn parse(word: &[u8]) -> Option<Self> {
        Self::ALL
            .into_iter()
            .find(|op| word.eq_ignore_ascii_case(op.word().to_bytes()))
    }
}

/// The values of a holder's last three fields (type, owner, meta) that
/// `UNIQUE.APPLY ... HOLD` may leave out, from the end: a holder of the
/// default type with no owner and no meta goes as its first four fields.
/// The RDB encoding always writes all seven.
pub const HOLD_DEFAULTS: [&[u8]; 3] = [DEFAULT_TYPE.as_bytes(), b"", b""];

/// The encoding this build writes; it reads this one and every older one.
pub const ENCODING_VERSION: i32 = 2;

/// Stands for "no lease" on the wire: in the encoding, in `UNIQUE.APPLY ...
/// HOLD` and in the replies of LOCKEDBY WITHMETA.
pub const NO_EXPIRY: i64 = -1;

/// Holders are never pre-allocated beyond this from a count read from the
/// payload: a forged count cannot make the loader reserve memory.
const MAX_PREALLOCATED_HOLDERS: usize = 64;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DecodeError {
    /// The payload was written by a newer version of the module.
    NewerEncoding(i32),
    /// The payload ended early or could not be read.
    Io,
    /// The payload was read but does not describe a valid lock.
    Corrupt(&'static str),
}

impl fmt::Display for DecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::NewerEncoding(v) => write!(
                f,
                "uniq-lock encoding version {v} is newer than this module's ({ENCODING_VERSION})"
            ),
            Self::Io => f.write_str("uniq-lock value: short read or I/O error"),
            Self::Corrupt(why) => write!(f, "uniq-lock value is corrupt: {why}"),
        }
    }
}

impl std::error::Error for DecodeError {}

/// Where an encoded lock is written.
pub trait Sink {
    fn unsigned(&mut self, value: u64);
    fn signed(&mut self, value: i64);
    fn buffer(&mut self, bytes: &[u8]);
}

/// Where an encoded lock is read from.
pub trait Source {
    fn unsigned(&mut self) -> Result<u64, DecodeError>;
    fn signed(&mut self) -> Result<i64, DecodeError>;
    fn buffer(&mut self) -> Result<Vec<u8>, DecodeError>;
}

pub fn encode(lock: &Lock, out: &mut impl Sink) {
    out.unsigned(lock.len() as u64);
    for h in lock.holders() {
        write_holder(h, out);
    }
    match lock.rate() {
        Some(rate) => {
            out.unsigned(1);
            write_rate(rate, out);
        }
        None => out.unsigned(0),
    }
}

/// A rate state's fields, in the encoding and in `UNIQUE.APPLY key now RATE
/// ...`; [`read_rate`] reads them back.
pub fn write_rate(rate: &Rate, out: &mut impl Sink) {
    out.signed(rate.limit.n);
    out.signed(rate.limit.per);
    out.signed(rate.limit.burst);
    out.signed(rate.tat);
}

/// Reads the fields [`write_rate`] writes: a valid rate state, or an error.
pub fn read_rate(input: &mut impl Source) -> Result<Rate, DecodeError> {
    let n = input.signed()?;
    let per = input.signed()?;
    let burst = input.signed()?;
    let tat = input.signed()?;
    let limit = RateLimit::new(n, per, burst).ok_or(DecodeError::Corrupt("rate"))?;
    if tat < 0 {
        return Err(DecodeError::Corrupt("rate"));
    }
    Ok(Rate { limit, tat })
}

/// A holder's fields in the one order of every wire form: the encoding (RDB,
/// DUMP, digest) and `UNIQUE.APPLY key now HOLD ...` in the replication
/// stream and the AOF. [`read_holder`] reads them back.
pub fn write_holder(h: &Holder, out: &mut impl Sink) {
    out.buffer(h.jid());
    out.signed(h.token);
    out.signed(h.acquired_at);
    out.signed(h.expires_at().unwrap_or(NO_EXPIRY));
    out.buffer(h.lock_type().as_bytes());
    out.buffer(h.owner().unwrap_or_default());
    out.buffer(h.meta().unwrap_or_default());
}

/// Reads a lock written with encoding `version`: whole and valid, or an error.
pub fn decode(version: i32, input: &mut impl Source) -> Result<Lock, DecodeError> {
    if version > ENCODING_VERSION {
        return Err(DecodeError::NewerEncoding(version));
    }
    if version < 1 {
        return Err(DecodeError::Corrupt("unknown encoding version"));
    }
    let count = input.unsigned()?;
    let count = usize::try_from(count).map_err(|_| DecodeError::Corrupt("holder count"))?;
    let mut holders = Vec::with_capacity(count.min(MAX_PREALLOCATED_HOLDERS));
    for _ in 0..count {
        holders.push(read_holder(input)?);
    }
    let mut seen = HashSet::with_capacity(holders.len());
    if !holders.iter().all(|h| seen.insert(h.jid())) {
        return Err(DecodeError::Corrupt("the same jid twice"));
    }
    let rate = match version {
        1 => None,
        _ => match input.unsigned()? {
            0 => None,
            1 => Some(read_rate(input)?),
            _ => return Err(DecodeError::Corrupt("rate flag")),
        },
    };
    if count == 0 && rate.is_none() {
        return Err(DecodeError::Corrupt("a lock without holders"));
    }
    let mut lock = Lock::from_holders(holders);
    lock.set_rate(rate);
    Ok(lock)
}

/// Reads the fields [`write_holder`] writes: a valid holder, or the error
/// naming the first bad field (`Io` when the input ends early or cannot be
/// read).
pub fn read_holder(input: &mut impl Source) -> Result<Holder, DecodeError> {
    let bad = |field: &'static str| {
        move |e: DecodeError| match e {
            DecodeError::Io => DecodeError::Io,
            _ => DecodeError::Corrupt(field),
        }
    };
    let jid = input.buffer().map_err(bad("jid"))?;
    validate_jid(&jid).map_err(|_| DecodeError::Corrupt("jid"))?;
    let token = input.signed().map_err(bad("token"))?;
    if token <= 0 {
        return Err(DecodeError::Corrupt("token"));
    }
    let acquired_at = input.signed().map_err(bad("acquired_at"))?;
    let expires_at = match input.signed().map_err(bad("expires_at"))? {
        NO_EXPIRY => None,
        at if at >= 0 => Some(at),
        _ => return Err(DecodeError::Corrupt("expires_at")),
    };
    let lock_type = input.buffer().map_err(bad("type"))?;
    let lock_type = validate_type(&lock_type).map_err(|_| DecodeError::Corrupt("type"))?;
    let owner = input.buffer().map_err(bad("owner"))?;
    if !owner.is_empty() {
        validate_owner(&owner).map_err(|_| DecodeError::Corrupt("owner"))?;
    }
    let meta = input.buffer().map_err(bad("meta"))?;
    std::str::from_utf8(&meta).map_err(|_| DecodeError::Corrupt("meta"))?;
    Ok(Holder::new(
        &jid,
        token,
        acquired_at,
        expires_at,
        lock_type,
        Some(owner.as_slice()).filter(|o| !o.is_empty()),
        Some(meta.as_slice()).filter(|m| !m.is_empty()),
    ))
}

/// An in-memory encoding, for tests and for fuzzing the decoder.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Items(pub Vec<Item>);

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Item {
    Unsigned(u64),
    Signed(i64),
    Buffer(Vec<u8>),
}

impl Sink for Items {
    fn unsigned(&mut self, value: u64) {
        self.0.push(Item::Unsigned(value));
    }
    fn signed(&mut self, value: i64) {
        self.0.push(Item::Signed(value));
    }
    fn buffer(&mut self, bytes: &[u8]) {
        self.0.push(Item::Buffer(bytes.to_vec()));
    }
}

/// Reads [`Items`] front to back; a wrong kind of item is an I/O error, as a
/// misread RDB field would be.
pub struct ItemReader<'a>(std::slice::Iter<'a, Item>);

impl<'a> ItemReader<'a> {
    pub fn new(items: &'a Items) -> Self {
        Self(items.0.iter())
    }
}

impl Source for ItemReader<'_> {
    fn unsigned(&mut self) -> Result<u64, DecodeError> {
        match self.0.next() {
            Some(Item::Unsigned(v)) => Ok(*v),
            _ => Err(DecodeError::Io),
        }
    }
    fn signed(&mut self) -> Result<i64, DecodeError> {
        match self.0.next() {
            Some(Item::Signed(v)) => Ok(*v),
            _ => Err(DecodeError::Io),
        }
    }
    fn buffer(&mut self) -> Result<Vec<u8>, DecodeError> {
        match self.0.next() {
            Some(Item::Buffer(v)) => Ok(v.clone()),
            _ => Err(DecodeError::Io),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lock::{LockRequest, validate_meta};

    fn sample() -> Lock {
        let mut lock = Lock::default();
        let mut token = 10;
        let mut next = || {
            token += 1;
            token
        };
        let a = LockRequest {
            limit: 0,
            ..LockRequest::new(b"plain")
        };
        lock.acquire(&a, 1000, &mut next);
        let meta = validate_meta(br#"{"queue":"default"}"#, 100).ok();
        let b = LockRequest {
            limit: 0,
            expires_at: Some(9000),
            lock_type: Some("until_executed"),
            owner: Some(b"host:42"),
            meta,
            ..LockRequest::new(b"\x00binary\xff")
        };
        lock.acquire(&b, 1001, &mut next);
        lock
    }

    fn encoded(lock: &Lock) -> Items {
        let mut items = Items::default();
        encode(lock, &mut items);
        items
    }

    #[test]
    fn a_rate_is_encoded_after_the_holders_and_may_stand_alone() {
        let limit = RateLimit::new(50, 1000, 5).expect("a limit");
        let mut lock = sample();
        lock.set_rate(Some(Rate { limit, tat: 12_345 }));
        let items = encoded(&lock);
        assert_eq!(decode(2, &mut ItemReader::new(&items)), Ok(lock.clone()));
        // Only the rate left: a lock still (it remembers what was spent).
        let mut alone = Lock::default();
        alone.set_rate(lock.rate().copied());
        assert_eq!(decode(2, &mut ItemReader::new(&encoded(&alone))), Ok(alone));
        // Version 1 had no rate and no empty lock.
        let mut v1 = Items::default();
        v1.0.push(Item::Unsigned(0));
        assert_eq!(
            decode(1, &mut ItemReader::new(&v1)),
            Err(DecodeError::Corrupt("a lock without holders"))
        );
        let mut bad = Items::default();
        bad.0.extend([Item::Unsigned(0), Item::Unsigned(7)]);
        assert_eq!(
            decode(2, &mut ItemReader::new(&bad)),
            Err(DecodeError::Corrupt("rate flag"))
        );
        let mut zero_rate = Items::default();
        zero_rate.0.push(Item::Unsigned(0));
        zero_rate.0.push(Item::Unsigned(1));
        for v in [0, 1000, 0, 5] {
            zero_rate.0.push(Item::Signed(v));
        }
        assert_eq!(
            decode(2, &mut ItemReader::new(&zero_rate)),
            Err(DecodeError::Corrupt("rate"))
        );
    }

    #[test]
    fn a_version_1_payload_reads_as_a_lock_without_rate() {
        let lock = sample();
        let mut items = encoded(&lock);
        assert_eq!(
            items.0.pop(),
            Some(Item::Unsigned(0)),
            "the rate flag is last"
        );
        assert_eq!(decode(1, &mut ItemReader::new(&items)), Ok(lock));
    }

    #[test]
    fn encode_then_decode_is_the_identity() {
        let lock = sample();
        let items = encoded(&lock);
        assert_eq!(
            decode(ENCODING_VERSION, &mut ItemReader::new(&items)),
            Ok(lock)
        );
    }

    #[test]
    fn a_newer_encoding_is_refused() {
        let items = encoded(&sample());
        assert_eq!(
            decode(ENCODING_VERSION + 1, &mut ItemReader::new(&items)),
            Err(DecodeError::NewerEncoding(ENCODING_VERSION + 1))
        );
        assert!(decode(0, &mut ItemReader::new(&items)).is_err());
    }

    #[test]
    fn every_truncation_is_an_error() {
        let items = encoded(&sample());
        for len in 0..items.0.len() {
            let cut = Items(items.0[..len].to_vec());
            assert!(
                decode(ENCODING_VERSION, &mut ItemReader::new(&cut)).is_err(),
                "cut at {len}"
            );
        }
    }

    #[test]
    fn a_forged_huge_count_fails_without_allocating_for_it() {
        let mut items = encoded(&sample());
        items.0[0] = Item::Unsigned(1 << 60);
        assert_eq!(
            decode(1, &mut ItemReader::new(&items)),
            Err(DecodeError::Io)
        );
        items.0[0] = Item::Unsigned(0);
        assert!(matches!(
            decode(1, &mut ItemReader::new(&items)),
            Err(DecodeError::Corrupt(_))
        ));
    }

    #[test]
    fn invalid_fields_are_corrupt() {
        let good = encoded(&sample());
        // Positions in the first holder: 1 jid, 2 token, 4 expires_at, 5 type, 6 owner.
        let forgeries = [
            (1, Item::Buffer(vec![])),
            (1, Item::Buffer(vec![b'x'; 1025])),
            (2, Item::Signed(0)),
            (4, Item::Signed(-7)),
            (5, Item::Buffer(b"bad type".to_vec())),
            (6, Item::Buffer(vec![b'o'; 1025])),
            (7, Item::Buffer(vec![0xff, 0xfe])),
        ];
        for (at, item) in forgeries {
            let mut items = good.clone();
            items.0[at] = item.clone();
            assert!(
                matches!(
                    decode(1, &mut ItemReader::new(&items)),
                    Err(DecodeError::Corrupt(_))
                ),
                "{at}: {item:?}"
            );
        }
    }

    #[test]
    fn a_bad_field_is_named() {
        let good = encoded(&sample());
        for (at, item, field) in [
            (1, Item::Buffer(vec![]), "jid"),
            (2, Item::Signed(-1), "token"),
            (4, Item::Signed(-2), "expires_at"),
            (5, Item::Buffer(b"a b".to_vec()), "type"),
            (7, Item::Buffer(vec![0xff]), "meta"),
        ] {
            let mut items = good.clone();
            items.0[at] = item;
            assert_eq!(
                decode(1, &mut ItemReader::new(&items)),
                Err(DecodeError::Corrupt(field))
            );
        }
    }

    #[test]
    fn duplicate_jids_are_corrupt() {
        let mut items = encoded(&sample());
        items.0[8] = items.0[1].clone();
        assert_eq!(
            decode(1, &mut ItemReader::new(&items)),
            Err(DecodeError::Corrupt("the same jid twice"))
        );
    }
}

/// Reads module data the way it sits in an RDB or DUMP payload (each value
/// an opcode then the value, length-encoded as Redis does), from plain
/// bytes: the decoder can then be fed arbitrary bytes without a server
/// (the fuzz tests and the cargo-fuzz target in fuzz/).
pub struct RdbBytes<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> RdbBytes<'a> {
    pub fn new(bytes: &'a [u8]) -> Self {
        Self { bytes, at: 0 }
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8], DecodeError> {
        let end = self.at.checked_add(n).ok_or(DecodeError::Io)?;
        let out = self.bytes.get(self.at..end).ok_or(DecodeError::Io)?;
        self.at = end;
        Ok(out)
    }

    fn len(&mut self) -> Result<u64, DecodeError> {
        let first = *self.take(1)?.first().ok_or(DecodeError::Io)?;
        Ok(match first >> 6 {
            0 => u64::from(first & 0x3f),
            1 => {
                (u64::from(first & 0x3f) << 8)
                    | u64::from(*self.take(1)?.first().ok_or(DecodeError::Io)?)
            }
            _ if first == 0x80 => u64::from(u32::from_be_bytes(
                self.take(4)?.try_into().map_err(|_| DecodeError::Io)?,
            )),
            _ if first == 0x81 => {
                u64::from_be_bytes(self.take(8)?.try_into().map_err(|_| DecodeError::Io)?)
            }
            _ => return Err(DecodeError::Io),
        })
    }

    fn opcode(&mut self, expected: u64) -> Result<(), DecodeError> {
        if self.len()? == expected {
            Ok(())
        } else {
            Err(DecodeError::Io)
        }
    }
}

impl Source for RdbBytes<'_> {
    fn unsigned(&mut self) -> Result<u64, DecodeError> {
        self.opcode(2)?;
        self.len()
    }
    fn signed(&mut self) -> Result<i64, DecodeError> {
        self.unsigned().map(|u| u as i64)
    }
    fn buffer(&mut self) -> Result<Vec<u8>, DecodeError> {
        self.opcode(5)?;
        let n = usize::try_from(self.len()?).map_err(|_| DecodeError::Io)?;
        // Like Redis's reader, a length beyond the payload is a short read,
        // never an allocation of that size.
        self.take(n).map(<[u8]>::to_vec)
    }
}

/// The decoder fed hostile input: an error or a valid lock, never a panic.
/// `FUZZ_CASES` sets the number of cases (`make fuzz` runs many more).
#[cfg(test)]
mod fuzz {
    use proptest::prelude::*;

    use super::*;

    fn cases() -> u32 {
        std::env::var("FUZZ_CASES")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(2000)
    }

    fn item() -> impl Strategy<Value = Item> {
        prop_oneof![
            prop_oneof![
                Just(0u64),
                Just(1),
                Just(2),
                Just(1 << 60),
                Just(u64::MAX),
                any::<u64>()
            ]
            .prop_map(Item::Unsigned),
            prop_oneof![Just(-1i64), Just(0), Just(1), Just(i64::MIN), any::<i64>()]
                .prop_map(Item::Signed),
            prop::collection::vec(any::<u8>(), 0..40).prop_map(Item::Buffer),
            prop::sample::select(vec![
                &b"lock"[..],
                b"until_executed",
                b"{}",
                b"",
                b"bad type"
            ])
            .prop_map(|b| Item::Buffer(b.to_vec())),
        ]
    }

    /// A decoded lock is whole and valid: it has holders, each valid, no jid
    /// twice, and it encodes back to a lock equal to itself.
    fn check(lock: &Lock) -> Result<(), TestCaseError> {
        prop_assert!(!lock.is_empty());
        for h in lock.holders() {
            prop_assert!(!h.jid().is_empty() && h.jid().len() <= crate::lock::MAX_JID_BYTES);
            prop_assert!(h.token > 0);
            prop_assert!(h.expires_at().is_none_or(|at| at >= 0));
        }
        let mut items = Items::default();
        encode(lock, &mut items);
        let again = decode(ENCODING_VERSION, &mut ItemReader::new(&items));
        prop_assert_eq!(again.as_ref(), Ok(lock));
        Ok(())
    }

    fn valid_encoding() -> Vec<u8> {
        // count 1, then jid "a", token 7, acquired 1, expires -1, type, owner,
        // meta, then the rate flag.
        let mut b = vec![2, 1, 5, 1, b'a', 2, 7, 2, 1];
        b.extend([2, 0x81]);
        b.extend(u64::MAX.to_be_bytes());
        b.extend([5, 4]);
        b.extend(b"lock");
        b.extend([5, 0, 5, 0]);
        b.extend([2, 0]); // no rate
        b
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(cases()))]

        #[test]
        fn arbitrary_items(items in prop::collection::vec(item(), 0..40), version in 0i32..3) {
            let items = Items(items);
            if let Ok(lock) = decode(version, &mut ItemReader::new(&items)) {
                check(&lock)?;
            }
        }

        #[test]
        fn arbitrary_bytes(bytes in prop::collection::vec(any::<u8>(), 0..300)) {
            if let Ok(lock) = decode(ENCODING_VERSION, &mut RdbBytes::new(&bytes)) {
                check(&lock)?;
            }
        }

        #[test]
        fn mutated_valid_bytes(flips in prop::collection::vec((any::<usize>(), any::<u8>()), 1..4), cut in any::<usize>()) {
            let mut bytes = valid_encoding();
            prop_assert!(decode(ENCODING_VERSION, &mut RdbBytes::new(&bytes)).is_ok());
            for (at, b) in flips {
                let n = bytes.len();
                bytes[at % n] = b;
            }
            bytes.truncate(cut % (bytes.len() + 1));
            if let Ok(lock) = decode(ENCODING_VERSION, &mut RdbBytes::new(&bytes)) {
                check(&lock)?;
            }
        }
    }
}
