//! The effects of a command over several keys (LOCKALL, UNLOCKALL): one
//! `unique.apply` each, carrying every key, so that a replica and the AOF
//! apply the whole change in one command, whether or not the server wraps a
//! module command's effects in MULTI/EXEC.

use redis_module::{Context, RedisString, raw};

use super::argv::Owned;
use crate::codec::{APPLY_COMMAND, ApplyOp, Sink, write_key_hold};
use crate::engine::{Holder, Rate};

/// Redis strings made through the codec's [`Sink`], as many as the effect
/// needs; each freed when dropped.
struct Strings(Vec<Owned>);

impl Sink for Strings {
    fn unsigned(&mut self, value: u64) {
        self.signed(value as i64);
    }
    fn signed(&mut self, value: i64) {
        self.0.push(Owned::number(value));
    }
    fn buffer(&mut self, bytes: &[u8]) {
        self.0.push(Owned::bytes(bytes));
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
    if argv.0.iter().any(|s| s.get().is_none()) {
        return; // out of memory: Redis would have aborted first
    }
    // SAFETY: `ctx` is the context of the running command; every argument
    // matches the format (s = a module string, v = an array of module
    // strings and its length: `Owned` is a transparent string pointer);
    // `argv` outlives the call, which copies it.
    unsafe {
        if let Some(replicate) = raw::RedisModule_Replicate {
            replicate(
                ctx.get_raw(),
                APPLY_COMMAND.as_ptr(),
                c"sv".as_ptr(),
                first.inner,
                argv.0.as_mut_ptr().cast::<*mut raw::RedisModuleString>(),
                argv.0.len(),
            );
        }
    }
}
