//! Commands registered with entry points that read their arguments in place
//! (no `Vec<RedisString>` made per call), and the plain registration.

use std::ffi::CStr;
use std::ptr::NonNull;

use redis_module::{Context, RedisError, RedisResult, RedisString, raw};

/// A command that reads its arguments in place: given the key (the only
/// argument the glue needs as a Redis string) and every argument as bytes,
/// the command name first.
pub trait InPlace {
    fn run(ctx: &Context, key: &RedisString, args: &[&[u8]]) -> RedisResult;
}

/// Arguments read in place up to this many; beyond, one vector of slices.
const IN_PLACE_ARGS: usize = 24;

/// The `extern "C"` entry point of command `C`: runs it on `argv` read in
/// place (no vector of retained strings, as the registration macro builds)
/// and replies with what it returns.
pub(crate) extern "C" fn entry_point<C: InPlace>(
    ctx: *mut raw::RedisModuleCtx,
    argv: *mut *mut raw::RedisModuleString,
    argc: std::ffi::c_int,
) -> std::ffi::c_int {
    let context = Context::new(ctx);
    let n = usize::try_from(argc).unwrap_or(0);
    let argv: &[*mut raw::RedisModuleString] = if argv.is_null() || n == 0 {
        &[]
    } else {
        // SAFETY: Redis passes `argc` live strings in `argv`, which stay
        // valid (and unchanged) for the whole call.
        unsafe { std::slice::from_raw_parts(argv, n) }
    };
    let mut inline: [&[u8]; IN_PLACE_ARGS] = [&[]; IN_PLACE_ARGS];
    let spilled: Vec<&[u8]>;
    let args: &[&[u8]] = if n <= IN_PLACE_ARGS {
        for (slot, &arg) in inline.iter_mut().zip(argv) {
            *slot = RedisString::string_as_slice(arg);
        }
        inline.get(..n).unwrap_or_default()
    } else {
        spilled = argv
            .iter()
            .map(|&arg| RedisString::string_as_slice(arg))
            .collect();
        &spilled
    };
    let reply = match argv.get(1) {
        Some(&key) => C::run(&context, &RedisString::new(NonNull::new(ctx), key), args),
        None => Err(RedisError::WrongArity),
    };
    context.reply(reply) as std::ffi::c_int
}

/// A command that takes its arguments as Redis strings, as the crate's
/// registration macro gives them.
pub trait WithArgs {
    fn run(ctx: &Context, args: Vec<RedisString>) -> RedisResult;
}

/// The `extern "C"` entry point of command `C`, with its arguments retained as
/// Redis strings (what the crate's registration macro does).
pub(crate) extern "C" fn args_entry_point<C: WithArgs>(
    ctx: *mut raw::RedisModuleCtx,
    argv: *mut *mut raw::RedisModuleString,
    argc: std::ffi::c_int,
) -> std::ffi::c_int {
    let context = Context::new(ctx);
    let args = redis_module::decode_args(ctx, argv, argc);
    context.reply(C::run(&context, args)) as std::ffi::c_int
}

/// A command's own `extern "C"` entry point.
pub type EntryPoint = extern "C" fn(
    *mut raw::RedisModuleCtx,
    *mut *mut raw::RedisModuleString,
    std::ffi::c_int,
) -> std::ffi::c_int;

/// Registers command `name` with its entry point, flags and legacy key range
/// (first, last, step); false when Redis refused it.
pub fn create_command(
    ctx: &Context,
    name: &CStr,
    entry: EntryPoint,
    flags: &CStr,
    keys: (i32, i32, i32),
) -> bool {
    // SAFETY: `ctx` is the load context; `name` and `flags` are C strings
    // that Redis copies; `entry` lives as long as the module.
    let status = unsafe {
        raw::RedisModule_CreateCommand.map(|f| {
            f(
                ctx.get_raw(),
                name.as_ptr(),
                Some(entry),
                flags.as_ptr(),
                keys.0,
                keys.1,
                keys.2,
            )
        })
    };
    status == Some(raw::REDISMODULE_OK as i32)
}
