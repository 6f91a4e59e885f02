//! The serialized form of a lock (RDB, DUMP/RESTORE, digest), as pure code.
//!
//! The encoding is written and read through the [`Sink`] and [`Source`]
//! traits, so that the Redis glue only maps them onto the RDB primitives and
//! the decoder can be tested, and fed hostile bytes, without a server.
//!
//! Encoding version 3 (version 2 is the same without a holder's group and
//! mode, version 1 also without the rate, and has at least one holder; all
//! are read):
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
//!   buffer  group, empty when none          (version 3)
//!   buffer  mode: empty, shared or exclusive (version 3)
//! unsigned  1 when a rate follows, else 0
//!   signed  n, signed per (ms), signed burst, signed tat (units of 1/n ms)
//! ```

use std::collections::HashSet;
use std::ffi::CStr;
use std::fmt;

use crate::engine::{
    DEFAULT_TYPE, Holder, Lock, Mode, Rate, RateLimit, validate_group, validate_jid,
    validate_owner, validate_type,
};

/// The internal command that carries an effect to replicas and the AOF
/// (`commands/apply.rs`), as it is registered and written.
pub const APPLY_COMMAND: &CStr = c"unique.apply";

/// What `unique.apply key now <op> ...` does after removing the holders whose
/// lease ended at `now` (GRANT's `now` is its holder's acquired_at): the one
/// list of its operations, written by the replication side
/// (`ffi::replicate_*`) and read by the replica's side (`commands/apply.rs`).
///
/// ```text
/// unique.apply key now LEASE jid "token acquired_at expires_at[ n per burst tat]" [type [owner [meta [group [mode]]]]]
/// unique.apply key GRANT jid "token acquired_at expires_at[ n per burst tat]" [type [owner [meta [group [mode]]]]]
/// unique.apply key now HOLD jid token acquired_at expires_at [type [owner [meta [group [mode]]]]]
/// unique.apply key now RELEASE jid
/// unique.apply key now REAP owner
/// unique.apply key now PRUNE
/// unique.apply key now RATE n per burst tat
/// unique.apply key now RATEHOLD "n per burst tat" jid token acquired_at expires_at [type [owner [meta [group [mode]]]]]
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ApplyOp {
    /// Puts a holder exactly as given (a grant or a renewal), in the fields of
    /// [`write_holder`]; the trailing ones may be left out where they have
    /// their default value ([`HOLD_DEFAULTS`]). An AOF rewrite writes it;
    /// streams and AOF files of older versions carry it for every grant.
    Hold,
    /// [`Self::Hold`] with the lease's three numbers (token, acquired_at,
    /// expires_at) in one argument, separated by a space, followed there by
    /// the key's rate state (the four fields of [`write_rate`]) when the
    /// grant spent it: what a grant or a renewal replicates. Redis makes,
    /// feeds and frees every argument of an effect as a string object, which
    /// costs more than the digits: one argument instead of three (or seven).
    Lease,
    /// [`Self::Lease`] at the holder's own acquired_at: `GRANT jid lease
    /// ...` comes where `now` would, and stands for `<acquired_at> LEASE
    /// jid lease ...`. A new grant is acquired at its command's `now`, so
    /// its effect need not carry that time apart: one string object fewer
    /// for Redis to make, feed and free per grant, and 20 bytes fewer in
    /// the AOF. A renewal (acquired earlier) goes as [`Self::Lease`].
    Grant,
    /// Removes one holder, by jid.
    Release,
    /// Removes every holder of one owner.
    ReapOwner,
    /// Nothing after the removal of the ended leases.
    PruneOnly,
    /// Puts the key's rate state exactly as given, in the fields of
    /// [`write_rate`]. An AOF rewrite writes it after a key's holders; older
    /// streams and AOF files carry it after a rated grant's HOLD.
    Rate,
    /// A grant that spent the key's rate, in one effect: the rate state's
    /// fields as [`Self::Rate`] gives them but in one argument, separated by
    /// a space, then the holder as [`Self::Hold`] gives it (its trailing
    /// fields left out in the same way). Read from older streams and AOF
    /// files, never written: a rated grant goes as [`Self::Lease`].
    RateHold,
    /// A LOCKALL's grant or renewal on every key at once, one effect: the
    /// count of keys, then each key's part ([`write_key_hold`]).
    HoldAll,
    /// An UNLOCKALL on every key at once: the jid, the count of keys, the
    /// keys.
    ReleaseAll,
}

impl ApplyOp {
    pub const ALL: [Self; 10] = [
        Self::Hold,
        Self::Lease,
        Self::Grant,
        Self::Release,
        Self::ReapOwner,
        Self::PruneOnly,
        Self::Rate,
        Self::RateHold,
        Self::HoldAll,
        Self::ReleaseAll,
    ];

    /// Its word on the wire.
    pub const fn word(self) -> &'static CStr {
        match self {
            Self::Hold => c"HOLD",
            Self::Lease => c"LEASE",
            Self::Grant => c"GRANT",
            Self::Release => c"RELEASE",
            Self::ReapOwner => c"REAP",
            Self::PruneOnly => c"PRUNE",
            Self::Rate => c"RATE",
            Self::RateHold => c"RATEHOLD",
            Self::HoldAll => c"HOLDALL",
            Self::ReleaseAll => c"RELEASEALL",
        }
    }

    /// The operation a word names (any case, as Redis reads command words).
    pub fn parse(word: &[u8]) -> Option<Self> {
        Self::ALL
            .into_iter()
            .find(|op| word.eq_ignore_ascii_case(op.word().to_bytes()))
    }
}

/// The values of a holder's last five fields (type, owner, meta, group,
/// mode) that `UNIQUE.APPLY ... HOLD` may leave out, from the end: a holder
/// of the default type with no owner, meta, group or mode goes as its first
/// four fields (and an effect written before group and mode existed still
/// applies). The RDB encoding always writes all nine.
pub const HOLD_DEFAULTS: [&[u8]; 5] = [DEFAULT_TYPE.as_bytes(), b"", b"", b"", b""];

/// The encoding this build writes; it reads this one and every older one.
pub const ENCODING_VERSION: i32 = 3;

/// The first encoding with a holder's group and mode.
const FAIR_VERSION: i32 = 3;

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

/// One key's part of `UNIQUE.APPLY ... HOLDALL`: its name, its holder in
/// every field ([`write_holder`], none left out), and its rate state when
/// the grant spent it (1 and [`write_rate`]'s fields, else 0).
/// [`read_key_hold`] reads it back.
pub fn write_key_hold(key: &[u8], h: &Holder, rate: Option<&Rate>, out: &mut impl Sink) {
    out.buffer(key);
    write_holder(h, out);
    match rate {
        Some(rate) => {
            out.unsigned(1);
            write_rate(rate, out);
        }
        None => out.unsigned(0),
    }
}

/// Reads what [`write_key_hold`] writes.
pub fn read_key_hold(
    input: &mut impl Source,
) -> Result<(Vec<u8>, Holder, Option<Rate>), DecodeError> {
    let key = input.buffer()?;
    let holder = read_holder(input)?;
    let rate = match input.unsigned()? {
        0 => None,
        1 => Some(read_rate(input)?),
        _ => return Err(DecodeError::Corrupt("rate flag")),
    };
    Ok((key, holder, rate))
}

/// A holder's fields in the one order of every wire form: the encoding (RDB,
/// DUMP, digest) and `UNIQUE.APPLY key now HOLD ...` in the replication
/// stream and the AOF. [`read_holder`] reads them back.
pub fn write_holder(h: &Holder, out: &mut impl Sink) {
    out.buffer(&h.jid());
    out.signed(h.token());
    out.signed(h.acquired_at());
    out.signed(h.expires_at().unwrap_or(NO_EXPIRY));
    out.buffer(h.lock_type().as_bytes());
    out.buffer(h.owner().unwrap_or_default());
    out.buffer(h.meta().unwrap_or_default());
    out.buffer(h.group().unwrap_or_default());
    out.buffer(h.mode().map_or("", Mode::name).as_bytes());
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
        holders.push(read_holder_of(version, input)?);
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
    read_holder_of(ENCODING_VERSION, input)
}

/// Reads a holder as encoding `version` wrote it (no group or mode before
/// version 3).
fn read_holder_of(version: i32, input: &mut impl Source) -> Result<Holder, DecodeError> {
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
    let (group, mode) = if version >= FAIR_VERSION {
        let group = input.buffer().map_err(bad("group"))?;
        if !group.is_empty() {
            validate_group(&group).map_err(|_| DecodeError::Corrupt("group"))?;
        }
        let mode = match input.buffer().map_err(bad("mode"))?.as_slice() {
            b"" => None,
            word => Some(Mode::parse(word).ok_or(DecodeError::Corrupt("mode"))?),
        };
        (Some(group).filter(|g| !g.is_empty()), mode)
    } else {
        (None, None)
    };
    Ok(Holder::new_fair(
        &jid,
        token,
        acquired_at,
        expires_at,
        lock_type,
        Some(owner.as_slice()).filter(|o| !o.is_empty()),
        Some(meta.as_slice()).filter(|m| !m.is_empty()),
        group.as_deref(),
        mode,
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
mod tests;

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
mod fuzz;
