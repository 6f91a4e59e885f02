//! Replication and AOF: the `unique.apply` effects a change sends to the
//! replicas and the AOF, and the commands an AOF rewrite emits.

use std::ffi::c_longlong;

use redis_module::{Context, RedisString, raw};

use super::argv::Argv;
use crate::codec::{APPLY_COMMAND, ApplyOp, Sink, write_rate};
use crate::lock::{Holder, Rate};

/// Emits the command that recreates `holder` of `key` into a rewritten AOF,
/// with time 0 so that replay removes nothing.
pub(crate) fn emit_aof_hold(
    io: *mut raw::RedisModuleIO,
    key: *mut raw::RedisModuleString,
    h: &Holder,
) {
    emit_aof_apply(io, key, ApplyOp::Hold, Argv::holder(h));
}

/// Emits the command that recreates the rate state of `key` into a rewritten
/// AOF, with time 0 so that replay removes nothing.
pub(crate) fn emit_aof_rate(
    io: *mut raw::RedisModuleIO,
    key: *mut raw::RedisModuleString,
    rate: &Rate,
) {
    let mut argv = Argv::new();
    write_rate(rate, &mut argv);
    emit_aof_apply(io, key, ApplyOp::Rate, argv);
}

/// Emits `UNIQUE.APPLY key 0 OP <argv>` into a rewritten AOF.
fn emit_aof_apply(
    io: *mut raw::RedisModuleIO,
    key: *mut raw::RedisModuleString,
    op: ApplyOp,
    mut argv: Argv,
) {
    // SAFETY: `io` and `key` are what Redis passed to aof_rewrite; every
    // argument matches the format (s = a module string, l = long long, c = C
    // string, v = an array of module strings and its length); `argv`
    // outlives the call.
    unsafe {
        if let Some(emit) = raw::RedisModule_EmitAOF {
            emit(
                io,
                APPLY_COMMAND.as_ptr(),
                c"slcv".as_ptr(),
                key,
                0 as c_longlong,
                op.word().as_ptr(),
                argv.strings.as_mut_ptr(),
                argv.len,
            );
        }
    }
}

/// Replicates `UNIQUE.APPLY key now RATE ...`: the key's rate state exactly
/// as it is after a grant spent it.
pub fn replicate_rate(ctx: &Context, key: &RedisString, now: i64, rate: &Rate) {
    let mut argv = Argv::new();
    argv.signed(now);
    argv.buffer(ApplyOp::Rate.word().to_bytes());
    write_rate(rate, &mut argv);
    replicate_apply(ctx, key, argv);
}

/// Replicates `UNIQUE.APPLY key now HOLD ...`: the holder exactly as it is,
/// with the client's own key string.
pub fn replicate_hold(ctx: &Context, key: &RedisString, now: i64, h: &Holder) {
    replicate_apply(ctx, key, Argv::hold(now, h));
}

/// Replicates `UNIQUE.APPLY key now OP [arg]` (RELEASE jid, REAP owner, PRUNE).
pub fn replicate_effect(
    ctx: &Context,
    key: &RedisString,
    now: i64,
    op: ApplyOp,
    arg: Option<&[u8]>,
) {
    let mut argv = Argv::new();
    argv.signed(now);
    argv.buffer(op.word().to_bytes());
    if let Some(arg) = arg {
        argv.buffer(arg);
    }
    replicate_apply(ctx, key, argv);
}

/// Replicates `UNIQUE.APPLY key <argv>`.
fn replicate_apply(ctx: &Context, key: &RedisString, mut argv: Argv) {
    // SAFETY: `ctx` is the context of the running command; every argument
    // matches the format (s = a module string, v = an array of module
    // strings and its length); `argv` outlives the call.
    unsafe {
        if let Some(replicate) = raw::RedisModule_Replicate {
            replicate(
                ctx.get_raw(),
                APPLY_COMMAND.as_ptr(),
                c"sv".as_ptr(),
                key.inner,
                argv.strings.as_mut_ptr(),
                argv.len,
            );
        }
    }
}
