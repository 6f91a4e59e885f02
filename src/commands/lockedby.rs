//! UNIQUE.LOCKEDBY key [WITHMETA]

use std::ffi::{c_char, c_long};

use redis_module::{Context, RedisError, RedisResult, RedisString, RedisValue, raw};

use crate::codec::NO_EXPIRY;
use crate::datatype::LockKey;
use crate::ffi::now_ms;
use crate::lock::{Holder, LockError};

/// Read-only: expired holders are hidden, never removed, so this is right on
/// a replica too.
pub fn run(ctx: &Context, args: Vec<RedisString>) -> RedisResult {
    let (key_name, with_meta) = match args.as_slice() {
        [_, key] => (key, false),
        [_, key, flag] if flag.eq_ignore_ascii_case(b"WITHMETA") => (key, true),
        [_, _, _] => return Err(LockError::Syntax.into()),
        _ => return Err(RedisError::WrongArity),
    };
    let key = LockKey::open(ctx, key_name, false);
    let lock = match &key {
        Some(key) => key.lock()?,
        None => None,
    };
    let now = now_ms();
    let live = || lock.into_iter().flat_map(|l| l.live_holders(now));

    let reply = Reply(ctx.get_raw());
    reply.array(live().count());
    for holder in live() {
        if with_meta {
            reply.holder(holder, now);
        } else {
            reply.bulk(holder.jid());
        }
    }
    Ok(RedisValue::NoReply)
}

/// Streams the reply straight to the client: the order of the fields in a
/// holder's map is part of the contract, and nothing needs building first.
struct Reply(*mut raw::RedisModuleCtx);

impl Reply {
    fn array(&self, len: usize) {
        raw::reply_with_array(self.0, len as c_long);
    }
    fn bulk(&self, bytes: &[u8]) {
        raw::reply_with_string_buffer(self.0, bytes.as_ptr().cast::<c_char>(), bytes.len());
    }
    fn int(&self, n: i64) {
        raw::reply_with_long_long(self.0, n);
    }
    fn optional_bulk(&self, bytes: Option<&[u8]>) {
        match bytes {
            Some(b) => self.bulk(b),
            None => {
                raw::reply_with_null(self.0);
            }
        }
    }
    /// One holder as a map (RESP3), which Redis sends as a flat array on RESP2.
    fn holder(&self, h: &Holder, now: i64) {
        raw::reply_with_map(self.0, 8);
        self.bulk(b"jid");
        self.bulk(h.jid());
        self.bulk(b"token");
        self.int(h.token);
        self.bulk(b"acquired_at");
        self.int(h.acquired_at);
        self.bulk(b"expires_at");
        self.int(h.expires_at().unwrap_or(NO_EXPIRY));
        self.bulk(b"ttl");
        self.int(h.ttl(now).unwrap_or(NO_EXPIRY));
        self.bulk(b"type");
        self.bulk(h.lock_type().as_bytes());
        self.bulk(b"owner");
        self.optional_bulk(h.owner());
        self.bulk(b"meta");
        self.optional_bulk(h.meta());
    }
}
