//! UNIQUE.RATE key

use redis_module::{Context, RedisError, RedisResult, RedisString, RedisValue};

use super::reply::Stream;
use crate::datatype::LockKey;
use crate::ffi::command_now_ms;

super::command!(with_args run);

/// The rate state of a lock that `UNIQUE.LOCK ... RATE` granted on: nil when
/// the key has none (or is missing), else a map: the limit it was last spent
/// under (`limit`, `per`, `burst`), how many grants it allows now
/// (`remaining`), the first unix ms at which one is allowed (`allowed_at`:
/// now when `remaining` is above 0) and the first at which nothing is spent
/// any more (`idle_at`). A denied LOCK with room under its LIMIT was refused
/// by the rate: this says until when.
///
/// Read-only: right on a replica too.
pub fn run(ctx: &Context, args: Vec<RedisString>) -> RedisResult {
    let [_, key] = args.as_slice() else {
        return Err(RedisError::WrongArity);
    };
    let key = LockKey::open(ctx, key, false);
    let rate = match &key {
        Some(key) => key.lock()?.and_then(|lock| lock.rate().copied()),
        None => None,
    };
    let Some(rate) = rate else {
        return Ok(RedisValue::Null);
    };
    let now = command_now_ms();
    let reply = Stream::new(ctx);
    reply.map(6);
    reply.bulk(b"limit");
    reply.int(rate.limit.n);
    reply.bulk(b"per");
    reply.int(rate.limit.per);
    reply.bulk(b"burst");
    reply.int(rate.limit.burst);
    reply.bulk(b"remaining");
    reply.int(rate.remaining(now));
    reply.bulk(b"allowed_at");
    reply.int(rate.check(now).err().unwrap_or(now));
    reply.bulk(b"idle_at");
    reply.int(rate.idle_at());
    Ok(RedisValue::NoReply)
}
