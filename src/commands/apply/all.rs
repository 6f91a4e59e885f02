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
use crate::commands::{events, parse_int, settle, tracked};
use crate::datatype::LockKey;
use crate::engine::{Holder, Lock, Rate};
use crate::{fencing, ffi};

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
    let mut opened = Vec::with_capacity(holds.len());
    for (name, holder, rate) in holds {
        let name = ctx.create_string(name.as_slice());
        let mut key =
            LockKey::open(ctx, &name, true).ok_or(RedisError::Str("ERR could not open the key"))?;
        let lock = match key.lock_mut()? {
            Some(lock) => lock,
            None => key.create(Lock::default())?,
        };
        let new = tracked(lock, |lock| {
            lock.prune(now);
            fencing::observe(holder.token());
            let new = lock.holder(&holder.jid()).is_none();
            lock.put(holder);
            if let Some(rate) = rate {
                lock.set_rate(Some(rate));
            }
            new
        });
        opened.push((name, key, new.then_some(events::LOCK)));
    }
    finish_all(ctx, now, opened)
}

fn release_all(
    ctx: &Context,
    now: i64,
    jid: &[u8],
    keys: &[RedisString],
    tokens: Option<&[i64]>,
) -> RedisResult {
    let mut opened = Vec::with_capacity(keys.len());
    for (i, name) in keys.iter().enumerate() {
        let token = tokens.and_then(|t| t.get(i).copied());
        let mut key =
            LockKey::open(ctx, name, true).ok_or(RedisError::Str("ERR could not open the key"))?;
        let (pruned, event) = match key.lock_mut()? {
            Some(lock) => tracked(lock, |lock| {
                let pruned = lock.prune(now);
                let released = match token {
                    None => lock.release(jid),
                    Some(token) => lock.release_token(jid, token),
                };
                (pruned, released.map(|_| events::UNLOCK))
            }),
            None => (0, None),
        };
        // A key the release left as it was is not settled, as on the primary.
        if pruned == 0 && event.is_none() {
            continue;
        }
        let name = ctx.create_string(name.as_slice());
        opened.push((name, key, event));
    }
    finish_all(ctx, now, opened)
}

/// Settles every key given (those the effect changed), sends the APPLY on
/// once (this replica's AOF and replicas), closes the keys, then announces
/// each key's event. A replayed effect serves nobody: grants are the
/// primary's.
fn finish_all(
    ctx: &Context,
    now: i64,
    opened: Vec<(RedisString, LockKey, Option<&'static std::ffi::CStr>)>,
) -> RedisResult {
    let mut closed = Vec::with_capacity(opened.len());
    for (name, mut key, event) in opened {
        settle(&mut key, now)?;
        closed.push((name, key, event));
    }
    ctx.replicate_verbatim();
    let events: Vec<_> = closed
        .into_iter()
        .map(|(name, key, event)| {
            drop(key);
            (name, event)
        })
        .collect();
    for (name, event) in events {
        if let Some(event) = event {
            ffi::notify_module_event(ctx, event, &name);
        }
    }
    Ok(RedisValue::SimpleStringStatic("OK"))
}
