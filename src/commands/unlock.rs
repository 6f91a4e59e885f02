//! UNIQUE.UNLOCK key jid [TOKEN t]
//!
//! With TOKEN, a fenced release: `jid`'s hold is released only when its
//! fencing token is `t`, so a late unlock for an older hold frees nothing of
//! a newer hold of the same jid.

use std::ops::Deref;

use redis_module::{Context, RedisError, RedisResult, RedisString, RedisValue};

use super::decisions::InRedis;
use super::{Change, finish, is_keyword, parse_int, prune_expired, tracked};
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
    let (jid, token) = match args {
        [_, _, jid] => (jid, None),
        [_, _, jid, option, t] if is_keyword(option, b"TOKEN") => (jid, Some(parse_token(t)?)),
        [_, _, _, ..] => return Err(RedisError::Str("ERR syntax error")),
        _ => return Err(RedisError::WrongArity),
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
        let released = match token {
            None => lock.release(jid),
            Some(token) => lock.release_token(jid, token),
        };
        (expired, released)
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

/// The error of a TOKEN that is no fencing token.
pub const TOKEN_ERROR: &str =
    "ERR TOKEN must be the hold's fencing token: an integer from 1 to 9223372036854775807";

/// A TOKEN's value: a token the module grants is always positive.
pub fn parse_token(arg: &[u8]) -> Result<i64, RedisError> {
    parse_int(arg)
        .ok()
        .filter(|&t| t > 0)
        .ok_or(RedisError::Str(TOKEN_ERROR))
}
