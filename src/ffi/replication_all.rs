//! The effects of a command over several keys (LOCKALL, UNLOCKALL): one
//! `unique.apply` each, carrying every key, so that a replica and the AOF
//! apply the whole change in one command, whether or not the server wraps a
//! module command's effects in MULTI/EXEC.

use std::ffi::c_char;

use redis_module::{Context, RedisString, raw};

use crate::codec::{APPLY_COMMAND, ApplyOp, Sink, write_key_hold};
use crate::engine::{Holder, Rate};

/// Redis strings made with no context through the codec's [`Sink`], as many
/// as the effect needs; freed when dropped.
struct Strings(Vec<*mut raw::RedisModuleString>);

impl Sink for Strings {
    fn unsigned(&mut self, value: u64) {
        self.signed(value as i64);
    }
    fn signed(&mut self, value: i64) {
        // SAFETY: with no context the string is not auto-freed: `Drop` frees it.
        let s = unsafe {
            raw::RedisModule_CreateStringFromLongLong
                .map_or(std::ptr::null_mut(), |f| f(std::ptr::null_mut(), value))
        };
        self.0.push(s);
    }
    fn buffer(&mut self, bytes: &[u8]) {
        // SAFETY: as above; the buffer is valid for `bytes.len()` bytes.
        let s = unsafe {
            raw::RedisModule_CreateString.map_or(std::ptr::null_mut(), |f| {
                f(
                    std::ptr::null_mut(),
                    bytes.as_ptr().cast::<c_char>(),
                    bytes.len(),
                )
            })
        };
        self.0.push(s);
    }
}

impl Drop for Strings {
    fn drop(&mut self) {
        for &s in &self.0 {
            if s.is_null() {
                continue;
            }
            // SAFETY: `s` was created with no context and is freed once.
            unsafe {
                if let Some(f) = raw::RedisModule_FreeString {
                    f(std::ptr::null_mut(), s);
                }
            }
        }
    }
}

/// Replicates `UNIQUE.APPLY first now HOLDALL n <key holder rate>...`: the
/// holder of every key exactly as it is after the grant (or renewal), with
/// the rate state of the keys whose rate it spent (`codec::write_key_hold`).
pub fn replicate_hold_all(
    ctx: &Context,
    first: &RedisString,
    now: i64,
    parts: &[(&[u8], &Holder, Option<&Rate>)],
) {
    let mut argv = Strings(Vec::with_capacity(3 + parts.len() * 10));
    argv.signed(now);
    argv.buffer(ApplyOp::HoldAll.word().to_bytes());
    argv.unsigned(parts.len() as u64);
    for (key, holder, rate) in parts {
        write_key_hold(key, holder, *rate, &mut argv);
    }
    replicate(ctx, first, argv);
}

/// Replicates `UNIQUE.APPLY first now RELEASEALL jid n key... [TOKEN t...]`:
/// with `tokens` (one per key), each key loses `jid`'s hold only when it has
/// that key's token, as it did on the primary.
pub fn replicate_release_all(
    ctx: &Context,
    first: &RedisString,
    now: i64,
    jid: &[u8],
    keys: &[&[u8]],
    tokens: Option<&[i64]>,
) {
    let mut argv = Strings(Vec::with_capacity(5 + 2 * keys.len()));
    argv.signed(now);
    argv.buffer(ApplyOp::ReleaseAll.word().to_bytes());
    argv.buffer(jid);
    argv.unsigned(keys.len() as u64);
    for key in keys {
        argv.buffer(key);
    }
    if let Some(tokens) = tokens {
        argv.buffer(b"TOKEN");
        for &token in tokens {
            argv.signed(token);
        }
    }
    replicate(ctx, first, argv);
}

fn replicate(ctx: &Context, first: &RedisString, mut argv: Strings) {
    if argv.0.iter().any(|s| s.is_null()) {
        return; // out of memory: Redis would have aborted first
    }
    // SAFETY: `ctx` is the context of the running command; every argument
    // matches the format (s = a module string, v = an array of module
    // strings and its length); `argv` outlives the call, which copies it.
    unsafe {
        if let Some(replicate) = raw::RedisModule_Replicate {
            replicate(
                ctx.get_raw(),
                APPLY_COMMAND.as_ptr(),
                c"sv".as_ptr(),
                first.inner,
                argv.0.as_mut_ptr(),
                argv.0.len(),
            );
        }
    }
}
