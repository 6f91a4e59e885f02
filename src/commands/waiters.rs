//! UNIQUE.WAITERS key

use redis_module::{Context, RedisError, RedisResult, RedisString, RedisValue};

use crate::waiting;

/// How many clients wait in `LOCK ... WAIT` on the key, in its queue: what a
/// dashboard shows beside the holders. Any key, of any type or none, has a
/// count (0 where nobody waits).
pub fn run(ctx: &Context, args: Vec<RedisString>) -> RedisResult {
    let [_, key] = args.as_slice() else {
        return Err(RedisError::WrongArity);
    };
    let n = waiting::waiting_on(ctx, key);
    Ok(RedisValue::Integer(i64::try_from(n).unwrap_or(i64::MAX)))
}
