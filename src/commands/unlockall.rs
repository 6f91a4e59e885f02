//! UNIQUE.UNLOCKALL numkeys key [key ...] jid
//!
//! Releases `jid`'s hold on every key that has one, as UNLOCK does on each,
//! with one effect replicated for all of them. Reply: how many holds it
//! released.

use redis_module::{Context, RedisError, RedisResult, RedisString, RedisValue};

use super::decisions::InRedis;
use super::lockall::{parse_keys, told_key_positions};
use super::{events, prune_expired, settle, tracked};
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
    let [jid] = rest else {
        return Err(RedisError::Str("ERR syntax error"));
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
    for key in &mut opened {
        let (expired, released) = match key.lock_mut()? {
            Some(lock) => tracked(lock, |lock| {
                let expired = prune_expired(lock, now, &mut InRedis);
                (expired, lock.release(jid))
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
        ffi::replicate_release_all(ctx, &names[0], now, jid, keys);
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
