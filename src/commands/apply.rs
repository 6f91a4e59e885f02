//! UNIQUE.APPLY: the internal command that carries an effect from a primary to
//! its replicas and into the AOF. It is never sent by clients.
//!
//! Its operations are [`codec::ApplyOp`] (their words and forms are there,
//! shared with the side that writes them). Every form first removes the holders whose lease ended at `now` (the
//! primary's clock at the time of the command, or 0 to remove none), then:
//! LEASE (and the older HOLD) puts the holder exactly as given (a new grant
//! or a renewal, with absolute times and its token; GRANT, in the place of
//! `now`, is LEASE at the holder's own acquired_at), in the fields of the
//! encoding, read and checked by the same code (`codec::write_holder`,
//! `codec::read_holder`: expires_at -1, owner "" and meta "" stand for
//! none), RELEASE removes one holder, REAP every holder of that owner, PRUNE
//! nothing more, RATE puts the key's rate state exactly as given
//! (`codec::write_rate`); LEASE with the rate state after the lease's
//! numbers (and the older RATEHOLD) does both (a grant that spent the rate,
//! one effect). The key is then
//! deleted when empty or given its expiry, as on the primary. Nothing here
//! reads the replica's clock or configuration, so a replica (or an AOF replay)
//! ends with exactly the primary's data.

use redis_module::{Context, ContextFlags, RedisError, RedisResult, RedisString, RedisValue};

use super::{Change, events, finish, parse_int, tracked};
use crate::codec::{self, ApplyOp, DecodeError, Source};
use crate::datatype::LockKey;
use crate::engine::{Holder, Lock, Rate};
use crate::fencing;

super::command!(with_args run);

mod all;

pub fn run(ctx: &Context, args: Vec<RedisString>) -> RedisResult {
    let from_primary_or_aof = ctx
        .get_flags()
        .intersects(ContextFlags::REPLICATED | ContextFlags::LOADING);
    if !from_primary_or_aof {
        return Err(RedisError::Str(
            "ERR UNIQUE.APPLY is internal: it only replays effects from a primary or the AOF",
        ));
    }
    let [_, key_name, now_or_grant, rest @ ..] = args.as_slice() else {
        return Err(RedisError::WrongArity);
    };
    let (now, effect) = if ApplyOp::parse(now_or_grant) == Some(ApplyOp::Grant) {
        // A new grant: `now` is the holder's acquired_at.
        let (holder, rate) = parse_leased(rest)?;
        (holder.acquired_at(), Effect::Hold(holder, rate))
    } else {
        let now = parse_int(now_or_grant)?;
        let [op, rest @ ..] = rest else {
            return Err(RedisError::WrongArity);
        };
        if let Some(op @ (ApplyOp::HoldAll | ApplyOp::ReleaseAll)) = ApplyOp::parse(op) {
            return all::run(ctx, now, op, rest);
        }
        (now, Effect::parse(op, rest)?)
    };
    let mut key =
        LockKey::open(ctx, key_name, true).ok_or(RedisError::Str("ERR could not open the key"))?;
    let lock = match (key.lock_mut()?, &effect) {
        (Some(lock), _) => lock,
        (None, Effect::Hold(..) | Effect::Rate(_)) => key.create(Lock::default())?,
        (None, _) => return Ok(RedisValue::SimpleStringStatic("OK")),
    };
    let event = tracked(lock, |lock| {
        lock.prune(now);
        match effect {
            Effect::Hold(holder, rate) => {
                if rate.is_some() {
                    lock.set_rate(rate);
                }
                fencing::observe(holder.token());
                let new = lock.holder(&holder.jid()).is_none();
                lock.put(holder);
                new.then_some(events::LOCK)
            }
            Effect::Release(jid) => lock.release(jid).map(|_| events::UNLOCK),
            Effect::ReapOwner(owner) => {
                (lock.remove_owner_each(owner, |_| {}) > 0).then_some(events::REAP)
            }
            Effect::Rate(rate) => {
                lock.set_rate(Some(rate));
                None
            }
            Effect::PruneOnly => None,
        }
    });

    // A replayed effect frees nothing to serve: grants are the primary's.
    let _nobody_served = finish(ctx, key_name, key, now, 0, Change::Replayed(event))?;
    Ok(RedisValue::SimpleStringStatic("OK"))
}

/// What an APPLY does after removing the leases that ended at `now`.
enum Effect<'a> {
    /// A holder, and the key's rate when the grant spent it.
    Hold(Holder, Option<Rate>),
    Release(&'a [u8]),
    ReapOwner(&'a [u8]),
    PruneOnly,
    Rate(Rate),
}

impl<'a> Effect<'a> {
    fn parse(op: &[u8], rest: &'a [RedisString]) -> Result<Self, RedisError> {
        match (ApplyOp::parse(op), rest) {
            (Some(ApplyOp::Hold), _) => Ok(Self::Hold(parse_holder(rest)?, None)),
            (Some(ApplyOp::Lease), _) => {
                let (holder, rate) = parse_leased(rest)?;
                Ok(Self::Hold(holder, rate))
            }
            (Some(ApplyOp::RateHold), [rate, holder @ ..]) => {
                let mut fields = Words(rate.split(|&b| b == b' '));
                let rate = read_all_rate(&mut fields, |f| f.0.next().is_none())?;
                Ok(Self::Hold(parse_holder(holder)?, Some(rate)))
            }
            (Some(ApplyOp::Release), [jid]) => Ok(Self::Release(jid)),
            (Some(ApplyOp::ReapOwner), [owner]) => Ok(Self::ReapOwner(owner)),
            (Some(ApplyOp::PruneOnly), []) => Ok(Self::PruneOnly),
            (Some(ApplyOp::Rate), _) => Ok(Self::Rate(read_all_rate(&mut Args::new(rest), |a| {
                a.is_empty()
            })?)),
            _ => Err(RedisError::Str("ERR syntax error")),
        }
    }
}

/// The rate state of `RATE`, `LEASE` and `RATEHOLD`, in the fields and with the
/// checks of the encoding (`codec::read_rate`), and nothing after them
/// (`is_empty`).
fn read_all_rate<S: Source>(
    input: &mut S,
    is_empty: impl Fn(&mut S) -> bool,
) -> Result<Rate, RedisError> {
    match codec::read_rate(input) {
        Ok(rate) if is_empty(input) => Ok(rate),
        Ok(_) | Err(DecodeError::Io) => Err(RedisError::WrongArity),
        Err(e) => Err(RedisError::String(format!(
            "ERR invalid rate in UNIQUE.APPLY: {e}"
        ))),
    }
}

/// The holder of `HOLD`, in the fields and with the checks of the encoding
/// (`codec::read_holder`), the trailing fields left out taking their default
/// (`codec::HOLD_DEFAULTS`); a bad field is named in the error.
fn parse_holder(args: &[RedisString]) -> Result<Holder, RedisError> {
    // jid, token, acquired_at and expires_at are always given; of the rest,
    // those given come first and the defaults of the others follow.
    const ALWAYS_GIVEN: usize = 4;
    let Some(defaults) = args
        .len()
        .checked_sub(ALWAYS_GIVEN)
        .and_then(|optional_given| codec::HOLD_DEFAULTS.get(optional_given..))
    else {
        return Err(RedisError::WrongArity);
    };
    holder_from(&mut Args::new(args).then(defaults), Args::is_empty)
}

/// A holder read from `input` by the codec, which must then be `is_empty`.
fn holder_from<S: Source>(
    input: &mut S,
    is_empty: impl Fn(&S) -> bool,
) -> Result<Holder, RedisError> {
    match codec::read_holder(input) {
        Ok(holder) if is_empty(input) => Ok(holder),
        Ok(_) | Err(DecodeError::Io) => Err(RedisError::WrongArity),
        Err(DecodeError::Corrupt(field)) => Err(RedisError::String(format!(
            "ERR invalid holder in UNIQUE.APPLY: {field}"
        ))),
        Err(e) => Err(RedisError::String(format!(
            "ERR invalid holder in UNIQUE.APPLY: {e}"
        ))),
    }
}

/// The holder of `LEASE`: as [`parse_holder`], with the lease's three
/// numbers (token, acquired_at, expires_at) in one argument after the jid,
/// and there after them the key's rate state when the grant spent it.
fn parse_leased(args: &[RedisString]) -> Result<(Holder, Option<Rate>), RedisError> {
    let [jid, lease, optional @ ..] = args else {
        return Err(RedisError::WrongArity);
    };
    let mut numbers = lease.split(|&b| b == b' ');
    let (Some(token), Some(acquired_at), Some(expires_at)) =
        (numbers.next(), numbers.next(), numbers.next())
    else {
        return Err(RedisError::Str(
            "ERR invalid holder in UNIQUE.APPLY: a lease is three numbers",
        ));
    };
    let mut rest = Words(numbers.peekable());
    let rate = match rest.0.peek() {
        None => None,
        Some(_) => Some(read_all_rate(&mut rest, |f| f.0.peek().is_none())?),
    };
    let Some(defaults) = codec::HOLD_DEFAULTS.get(optional.len()..) else {
        return Err(RedisError::WrongArity);
    };
    let fields = [&**jid, token, acquired_at, expires_at]
        .into_iter()
        .chain(optional.iter().map(|arg| &**arg))
        .chain(defaults.iter().copied());
    Ok((holder_from(&mut Words(fields), |_| true)?, rate))
}

/// The arguments of an APPLY as a codec [`Source`]: integers as Redis parses
/// them, bytes as given, then the `defaults` of the fields left out; the end
/// of both is a short read.
struct Args<'a> {
    given: std::slice::Iter<'a, RedisString>,
    defaults: std::slice::Iter<'static, &'static [u8]>,
}

impl<'a> Args<'a> {
    fn new(given: &'a [RedisString]) -> Self {
        Self {
            given: given.iter(),
            defaults: [].iter(),
        }
    }

    /// The same arguments followed by the values of fields left out.
    fn then(self, defaults: &'static [&'static [u8]]) -> Self {
        Self {
            defaults: defaults.iter(),
            ..self
        }
    }

    /// Whether every argument and default was read.
    fn is_empty(&self) -> bool {
        self.given.len() == 0 && self.defaults.len() == 0
    }
}

impl Source for Args<'_> {
    fn unsigned(&mut self) -> Result<u64, DecodeError> {
        u64::try_from(self.signed()?).map_err(|_| DecodeError::Corrupt("not an integer"))
    }
    fn signed(&mut self) -> Result<i64, DecodeError> {
        let arg = self.given.next().ok_or(DecodeError::Io)?;
        parse_int(arg).map_err(|_| DecodeError::Corrupt("not an integer"))
    }
    fn buffer(&mut self) -> Result<Vec<u8>, DecodeError> {
        match self.given.next() {
            Some(arg) => Ok(arg.to_vec()),
            None => self
                .defaults
                .next()
                .map(|d| d.to_vec())
                .ok_or(DecodeError::Io),
        }
    }
}

/// Fields given as bytes, in order: the numbers of one argument split at its
/// spaces (a rate state, a lease), or a whole holder (`parse_leased`).
struct Words<'a, I: Iterator<Item = &'a [u8]>>(I);

impl<'a, I: Iterator<Item = &'a [u8]>> Source for Words<'a, I> {
    fn unsigned(&mut self) -> Result<u64, DecodeError> {
        u64::try_from(self.signed()?).map_err(|_| DecodeError::Corrupt("not an integer"))
    }
    fn signed(&mut self) -> Result<i64, DecodeError> {
        let word = self.0.next().ok_or(DecodeError::Io)?;
        parse_int(word).map_err(|_| DecodeError::Corrupt("not an integer"))
    }
    fn buffer(&mut self) -> Result<Vec<u8>, DecodeError> {
        self.0.next().map(<[u8]>::to_vec).ok_or(DecodeError::Io)
    }
}
