//! UNIQUE.UNLOCKALL numkeys key [key ...] jid [TOKEN t [t ...]]
//!
//! Releases `jid`'s hold on every key that has one, as UNLOCK does on each,
//! with one effect replicated for all of them. With TOKEN (one per key, in
//! key order, as LOCKALL's LIMIT), a key's hold is released only when its
//! token is that key's `t`, as UNLOCK's TOKEN. Reply: how many holds it
//! released.

use redis_module::{Context, RedisError, RedisResult, RedisString, RedisValue};

use super::decisions::InRedis;
use super::lockall::{parse_keys, told_key_positions};
use super::unlock::parse_token;
use super::{events, is_keyword, prune_expired, settle, tracked};
use crate::datatype::LockKey;
use crate::ffi::{self, command_now_ms};
use crate::metrics::{self, Event};
use crate::waiting;

super::command!(with_args run);

pub fn run(ctx: &Context, args: Vec<RedisString>) -> RedisResult {
    let bytes: Vec<&[u8]> = args.iter().map(|a| a.as_slice()).collect();
    if told_key_positions(ctx, &bytes) {
        return Ok(RedisValue::NoReply);
    }
    let (keys, rest) = parse_keys(bytes.get(1..).unwrap_or_default())?;
    let (jid, tokens) = match rest {
        [jid] => (jid, None),
        [jid, option, values @ ..] if is_keyword(option, b"TOKEN") => {
            (jid, Some(parse_tokens(values, keys.len())?))
        }
        _ => return Err(RedisError::Str("ERR syntax error")),
    };
    let now = command_now_ms();
    // The client's own key strings: numkeys is args[1].
    let names = args.get(2..2 + keys.len()).unwrap_or_default();
    let mut opened = Vec::with_capacity(names.len());
    for name in names {
        let key =
            LockKey::open(ctx, name, true).ok_or(RedisError::Str("ERR could not open the key"))?;
        key.lock()?; // WRONGTYPE before anything changes
        opened.push(key);
    }
    let mut outcome = Vec::with_capacity(opened.len());
    for (i, key) in opened.iter_mut().enumerate() {
        let token = tokens.as_ref().and_then(|t| t.get(i).copied());
        let (expired, released) = match key.lock_mut()? {
            Some(lock) => tracked(lock, |lock| {
                let expired = prune_expired(lock, now, &mut InRedis);
                let released = match token {
                    None => lock.release(jid),
                    Some(token) => lock.release_token(jid, token),
                };
                (expired, released)
            }),
            None => (0, None),
        };
        match &released {
            Some(holder) => metrics::record(now, Some(holder.lock_type()), Event::Released),
            None => metrics::record(now, None, Event::UnlockMissed),
        }
        outcome.push((expired, released.is_some()));
    }
    // Only a key that changed is settled: one left as it was is left to
    // Redis's expiry, as its replica's is (the effect settles the same keys).
    for (key, &(expired, released)) in opened.iter_mut().zip(&outcome) {
        if expired > 0 || released {
            settle(key, now)?;
        }
    }
    if outcome
        .iter()
        .any(|&(expired, released)| expired > 0 || released)
    {
        ffi::replicate_release_all(ctx, &names[0], now, jid, keys, tokens.as_deref());
    }
    // Serving waiters opens the keys again: ours must be closed first.
    drop(opened);
    let mut released_count = 0;
    for (name, &(expired, released)) in names.iter().zip(&outcome) {
        if expired > 0 {
            ffi::notify_module_event(ctx, events::EXPIRE, name);
        }
        if released {
            released_count += 1;
            ffi::notify_module_event(ctx, events::UNLOCK, name);
        }
    }
    for (name, &(expired, released)) in names.iter().zip(&outcome) {
        if expired > 0 || released {
            waiting::slot_freed(ctx, name);
        }
    }
    Ok(RedisValue::Integer(released_count))
}

/// The values after UNLOCKALL's TOKEN: exactly one token per key, in key
/// order (as LOCKALL's LIMIT), nothing after them.
fn parse_tokens(values: &[&[u8]], numkeys: usize) -> Result<Vec<i64>, RedisError> {
    if values.len() != numkeys {
        return Err(RedisError::Str(
            "ERR syntax error: TOKEN takes one value per key, in key order (TOKEN t [t ...])",
        ));
    }
    values.iter().map(|v| parse_token(v)).collect()
}
