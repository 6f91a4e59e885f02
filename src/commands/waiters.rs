//! UNIQUE.WAITERS key

use redis_module::{Context, RedisError, RedisResult, RedisString, RedisValue};

use crate::datatype::LockKey;
use crate::waiting;

super::command!(with_args run);

/// How many clients wait in `LOCK ... WAIT` on the key, in its queue: what a
/// dashboard shows beside the holders. A missing key has a count (0, or the
/// clients still queued for a lock that just went); a key of another type is
/// WRONGTYPE, as for every other command of the module.
pub fn run(ctx: &Context, args: Vec<RedisString>) -> RedisResult {
    let [_, key] = args.as_slice() else {
        return Err(RedisError::WrongArity);
    };
    if let Some(lock) = LockKey::open(ctx, key, false) {
        lock.lock()?;
    }
    let n = waiting::waiting_on(ctx, key);
    Ok(RedisValue::Integer(i64::try_from(n).unwrap_or(i64::MAX)))
}
