//! UNIQUE.UNLOCK key jid

use std::ops::Deref;

use redis_module::{Context, RedisError, RedisResult, RedisString, RedisValue};

use super::decisions::InRedis;
use super::{Change, finish, prune_expired, tracked};
use crate::datatype::LockKey;
use crate::ffi::command_now_ms;
use crate::metrics::{self, Event};

super::command!(in_place run_in_place);

/// UNLOCK on its arguments read in place (`key_name` is `args[1]`).
pub fn run_in_place<A: Deref<Target = [u8]>>(
    ctx: &Context,
    key_name: &RedisString,
    args: &[A],
) -> RedisResult {
    let [_, _, jid] = args else {
        return Err(RedisError::WrongArity);
    };
    let now = command_now_ms();
    let mut key =
        LockKey::open(ctx, key_name, true).ok_or(RedisError::Str("ERR could not open the key"))?;
    let Some(lock) = key.lock_mut()? else {
        metrics::record(now, None, Event::UnlockMissed);
        return Ok(RedisValue::Integer(0));
    };
    let (expired, released) = tracked(lock, |lock| {
        let expired = prune_expired(lock, now, &mut InRedis);
        (expired, lock.release(jid))
    });
    let (change, reply) = match released {
        Some(holder) => {
            metrics::record(now, Some(holder.lock_type()), Event::Released);
            (Change::Release(jid), 1)
        }
        None => {
            metrics::record(now, None, Event::UnlockMissed);
            (Change::PruneOnly, 0)
        }
    };
    finish(ctx, key_name, key, now, expired, change)?.serve_waiters(ctx, key_name);
    Ok(RedisValue::Integer(reply))
}
