//! UNIQUE.UNLOCK key jid

use redis_module::{Context, NotifyEvent, RedisError, RedisResult, RedisString, RedisValue};

use super::{apply, events, settle};
use crate::ffi::{LockKey, now_ms};

pub fn run(ctx: &Context, args: Vec<RedisString>) -> RedisResult {
    let [_, key_name, jid] = args.as_slice() else {
        return Err(RedisError::WrongArity);
    };
    let now = now_ms();
    let mut key =
        LockKey::open(ctx, key_name, true).ok_or(RedisError::Str("ERR could not open the key"))?;
    let Some(lock) = key.lock_mut()? else {
        return Ok(RedisValue::Integer(0));
    };
    let expired = lock.prune(now);
    let released = lock.release(jid);

    if released || expired > 0 {
        settle(&mut key)?;
    }
    if released {
        apply::replicate_release(ctx, key_name, now, jid);
        ctx.notify_keyspace_event(NotifyEvent::MODULE, events::UNLOCK, key_name);
    } else if expired > 0 {
        apply::replicate_prune(ctx, key_name, now);
    }
    Ok(RedisValue::Integer(i64::from(released)))
}
