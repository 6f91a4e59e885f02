//! `UNIQUE.APPLY first now HOLDALL ...` and `... RELEASEALL ...`: the one
//! effect of a LOCKALL or an UNLOCKALL, every key in one command, so that a
//! replica and the AOF apply the whole change at once (no MULTI needed).
//!
//! HOLDALL: `n`, then per key its name, its holder in every field and its
//! rate state when the grant spent it (`codec::write_key_hold`); each key
//! is pruned at `now`, then the holder put exactly as given. RELEASEALL:
//! `jid n key... [TOKEN t...]`; each key is pruned at `now` and loses `jid`'s
//! hold (with TOKEN, only a hold of that key's token: the primary's state
//! and tokens are the replica's, so the same holds go).
//! Every key it changed is then settled as on the primary, and the APPLY
//! goes verbatim once to this replica's own AOF and replicas.

use redis_module::{Context, RedisError, RedisResult, RedisString, RedisValue};

use super::Args;
use crate::codec::{self, ApplyOp, DecodeError};
use crate::commands::lockall::MAX_KEYS;
use crate::commands::{Change, Changed, events, finish_all, parse_int, tracked};
use crate::datatype::LockKey;
use crate::engine::{Holder, Lock, Rate};
use crate::fencing;

/// One key's part of a HOLDALL.
type KeyHold = (Vec<u8>, Holder, Option<Rate>);

/// Runs a HOLDALL or RELEASEALL effect (`rest`: what follows the word).
pub fn run(ctx: &Context, now: i64, op: ApplyOp, rest: &[RedisString]) -> RedisResult {
    match op {
        ApplyOp::HoldAll => hold_all(ctx, now, parse_holds(rest)?),
        ApplyOp::ReleaseAll => {
            let [jid, n, after @ ..] = rest else {
                return Err(RedisError::WrongArity);
            };
            let n = usize::try_from(parse_int(n)?)
                .ok()
                .filter(|&n| n <= MAX_KEYS && n <= after.len())
                .ok_or(RedisError::WrongArity)?;
            let (keys, after) = after.split_at(n);
            let tokens = match after {
                [] => None,
                [word, tokens @ ..] if word.as_slice() == b"TOKEN" && tokens.len() == n => Some(
                    tokens
                        .iter()
                        .map(|t| parse_int(t))
                        .collect::<Result<Vec<_>, _>>()?,
                ),
                _ => return Err(RedisError::WrongArity),
            };
            release_all(ctx, now, jid, keys, tokens.as_deref())
        }
        _ => Err(RedisError::Str("ERR syntax error")),
    }
}

fn parse_holds(rest: &[RedisString]) -> Result<Vec<KeyHold>, RedisError> {
    let mut input = Args::new(rest);
    let bad = |e: DecodeError| match e {
        DecodeError::Io => RedisError::WrongArity,
        e => RedisError::String(format!("ERR invalid holder in UNIQUE.APPLY: {e}")),
    };
    let n = codec::Source::unsigned(&mut input).map_err(bad)?;
    let n = usize::try_from(n)
        .ok()
        .filter(|n| (1..=MAX_KEYS).contains(n))
        .ok_or(RedisError::WrongArity)?;
    let mut holds = Vec::with_capacity(n);
    for _ in 0..n {
        holds.push(codec::read_key_hold(&mut input).map_err(bad)?);
    }
    if !input.is_empty() {
        return Err(RedisError::WrongArity);
    }
    Ok(holds)
}

fn hold_all(ctx: &Context, now: i64, holds: Vec<KeyHold>) -> RedisResult {
    let names: Vec<RedisString> = holds
        .iter()
        .map(|(name, ..)| ctx.create_string(name.as_slice()))
        .collect();
    let mut changed = Vec::with_capacity(holds.len());
    for (name, (_, holder, rate)) in names.iter().zip(holds) {
        let mut key =
            LockKey::open(ctx, name, true).ok_or(RedisError::Str("ERR could not open the key"))?;
        let lock = match key.lock_mut()? {
            Some(lock) => lock,
            None => key.create(Lock::default())?,
        };
        let (expired, new) = tracked(lock, |lock| {
            let expired = lock.prune(now);
            fencing::observe(holder.token());
            let new = lock.holder(&holder.jid()).is_none();
            lock.put(holder);
            if let Some(rate) = rate {
                lock.set_rate(Some(rate));
            }
            (expired, new)
        });
        let change = Change::Replayed(new.then_some(events::LOCK));
        changed.push(Changed {
            name,
            key,
            expired,
            change,
        });
    }
    replay(ctx, now, changed)
}

fn release_all(
    ctx: &Context,
    now: i64,
    jid: &[u8],
    keys: &[RedisString],
    tokens: Option<&[i64]>,
) -> RedisResult {
    let mut changed = Vec::with_capacity(keys.len());
    for (i, name) in keys.iter().enumerate() {
        let token = tokens.and_then(|t| t.get(i).copied());
        let mut key =
            LockKey::open(ctx, name, true).ok_or(RedisError::Str("ERR could not open the key"))?;
        let (expired, released) = match key.lock_mut()? {
            Some(lock) => tracked(lock, |lock| {
                let expired = lock.prune(now);
                let released = match token {
                    None => lock.release(jid),
                    Some(token) => lock.release_token(jid, token),
                };
                (expired, released.is_some())
            }),
            None => (0, false),
        };
        // A key the release left as it was is not settled, as on the primary.
        let change = match (expired, released) {
            (0, false) => Change::PruneOnly,
            _ => Change::Replayed(released.then_some(events::UNLOCK)),
        };
        changed.push(Changed {
            name,
            key,
            expired,
            change,
        });
    }
    replay(ctx, now, changed)
}

/// Settles every key the effect changed, sends the APPLY on once (this
/// replica's AOF and replicas), closes the keys, then announces each key's
/// event. A replayed effect serves nobody: grants are the primary's.
fn replay(ctx: &Context, now: i64, changed: Vec<Changed<'_, '_>>) -> RedisResult {
    finish_all(ctx, now, changed, |_, _| {
        ctx.replicate_verbatim();
        Ok(())
    })?;
    Ok(RedisValue::SimpleStringStatic("OK"))
}
