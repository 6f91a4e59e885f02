//! UNIQUE.LOCKEDBY key [WITHMETA]

use std::ops::Deref;

use redis_module::{Context, RedisError, RedisResult, RedisString, RedisValue};

use super::ArgError;
use super::reply::Stream;
use crate::codec::NO_EXPIRY;
use crate::datatype::LockKey;
use crate::ffi::now_ms;
use crate::lock::Holder;

super::command!(in_place run_in_place);

/// LOCKEDBY on its arguments read in place (`key_name` is `args[1]`).
///
/// Read-only: expired holders are hidden, never removed, so this is right on
/// a replica too.
pub fn run_in_place<A: Deref<Target = [u8]>>(
    ctx: &Context,
    key_name: &RedisString,
    args: &[A],
) -> RedisResult {
    let with_meta = match args {
        [_, _] => false,
        [_, _, flag] if flag.eq_ignore_ascii_case(b"WITHMETA") => true,
        [_, _, ..] => return Err(ArgError::Syntax.into()),
        _ => return Err(RedisError::WrongArity),
    };
    let key = LockKey::open(ctx, key_name, false);
    let lock = match &key {
        Some(key) => key.lock()?,
        None => None,
    };
    let now = now_ms();
    let live = || lock.into_iter().flat_map(|l| l.live_holders(now));

    let reply = Stream::new(ctx);
    reply.array(live().count());
    for holder in live() {
        if with_meta {
            reply_holder(&reply, holder, now);
        } else {
            reply.bulk(holder.jid());
        }
    }
    Ok(RedisValue::NoReply)
}

/// One holder as a map (RESP3), which Redis sends as a flat array on RESP2.
fn reply_holder(reply: &Stream<'_>, h: &Holder, now: i64) {
    reply.map(8);
    reply.bulk(b"jid");
    reply.bulk(h.jid());
    reply.bulk(b"token");
    reply.int(h.token);
    reply.bulk(b"acquired_at");
    reply.int(h.acquired_at);
    reply.bulk(b"expires_at");
    reply.int(h.expires_at().unwrap_or(NO_EXPIRY));
    reply.bulk(b"ttl");
    reply.int(h.ttl(now).unwrap_or(NO_EXPIRY));
    reply.bulk(b"type");
    reply.bulk(h.lock_type().as_bytes());
    reply.bulk(b"owner");
    reply.optional_bulk(h.owner());
    reply.bulk(b"meta");
    reply.optional_bulk(h.meta());
}
