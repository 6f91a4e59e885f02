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
use super::{Change, Changed, finish_all, is_keyword, prune_expired, tracked};
use crate::datatype::LockKey;
use crate::ffi::{self, command_now_ms};
use crate::metrics::{self, Event};

super::command!(with_args run);

pub fn run(ctx: &Context, args: Vec<RedisString>) -> RedisResult {
    let bytes: Vec<&[u8]> = args.iter().map(|a| a.as_slice()).collect();
    if told_key_positions(ctx, &bytes) {
        return Ok(RedisValue::NoReply);
    }
    let (keys_named, rest) = parse_keys(bytes.get(1..).unwrap_or_default())?;
    let (jid, tokens) = match rest {
        [jid] => (jid, None),
        [jid, option, values @ ..] if is_keyword(option, b"TOKEN") => {
            (jid, Some(parse_tokens(values, keys_named.len())?))
        }
        _ => return Err(RedisError::Str("ERR syntax error")),
    };
    let now = command_now_ms();
    // The client's own key strings: numkeys is args[1].
    let names = args.get(2..2 + keys_named.len()).unwrap_or_default();
    let mut opened = Vec::with_capacity(names.len());
    for name in names {
        let key =
            LockKey::open(ctx, name, true).ok_or(RedisError::Str("ERR could not open the key"))?;
        key.lock()?; // WRONGTYPE before anything changes
        opened.push(key);
    }
    let mut changed = Vec::with_capacity(opened.len());
    let mut released_count = 0;
    for (i, (mut key, name)) in opened.into_iter().zip(names).enumerate() {
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
        let change = match &released {
            Some(holder) => {
                metrics::record(now, Some(holder.lock_type()), Event::Released);
                released_count += 1;
                Change::Release(jid)
            }
            None => {
                metrics::record(now, None, Event::UnlockMissed);
                Change::PruneOnly
            }
        };
        changed.push(Changed {
            name,
            key,
            expired,
            change,
        });
    }
    // Only a key that changed is settled: one left as it was is left to
    // Redis's expiry, as its replica's is (the effect settles the same keys).
    let freed = finish_all(ctx, now, changed, |keys, changed| {
        if let (Some(first), true) = (keys.first(), changed.contains(&true)) {
            ffi::replicate_release_all(ctx, first.name, now, jid, keys_named, tokens.as_deref());
        }
        Ok(())
    })?;
    for (name, freed) in names.iter().zip(freed) {
        freed.serve_waiters(ctx, name);
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
