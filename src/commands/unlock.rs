//! UNIQUE.UNLOCK key jid

use redis_module::{Context, NotifyEvent, RedisError, RedisResult, RedisString, RedisValue};

use super::{apply, events, settle, tracked};
use crate::ffi::{LockKey, now_ms};
use crate::metrics::{self, Event};
use crate::waiting;

pub fn run(ctx: &Context, args: Vec<RedisString>) -> RedisResult {
    let [_, key_name, jid] = args.as_slice() else {
        return Err(RedisError::WrongArity);
    };
    let now = now_ms();
    let mut key =
        LockKey::open(ctx, key_name, true).ok_or(RedisError::Str("ERR could not open the key"))?;
    let Some(lock) = key.lock_mut()? else {
        metrics::record(now, None, Event::UnlockMissed);
        return Ok(RedisValue::Integer(0));
    };
    let (expired, released) = tracked(lock, |lock| {
        let expired = lock.prune_each(now, |h| {
            metrics::record(now, Some(h.lock_type()), Event::Expired);
        });
        (expired, lock.release(jid))
    });

    let changed = released.is_some() || expired > 0;
    if changed {
        settle(&mut key)?;
    }
    // Serving waiters opens the key again: ours must be closed first.
    drop(key);
    if expired > 0 {
        ctx.notify_keyspace_event(NotifyEvent::MODULE, events::EXPIRE, key_name);
    }
    let reply = match released {
        Some(holder) => {
            apply::replicate_release(ctx, key_name, now, jid);
            metrics::record(now, Some(holder.lock_type()), Event::Released);
            ctx.notify_keyspace_event(NotifyEvent::MODULE, events::UNLOCK, key_name);
            1
        }
        None => {
            if expired > 0 {
                apply::replicate_prune(ctx, key_name, now);
            }
            metrics::record(now, None, Event::UnlockMissed);
            0
        }
    };
    // Only now the waiters: their grants follow, in the replication stream
    // and in the events, the release that made room for them.
    if changed {
        waiting::slot_freed(ctx, key_name);
    }
    Ok(RedisValue::Integer(reply))
}
