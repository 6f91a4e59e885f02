//! Commands registered with entry points that read their arguments in place
//! (no `Vec<RedisString>` made per call), and the plain registration.

use std::cell::Cell;
use std::ffi::CStr;
use std::mem::ManuallyDrop;

use redis_module::{Context, RedisError, RedisResult, RedisString, raw};

/// A command that reads its arguments in place: given the key (the only
/// argument the glue needs as a Redis string) and every argument as bytes,
/// in their places, the command's name and the key left empty there.
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
        // The command's name and its key (given apart, as a string) are not
        // read as bytes by any command: left empty.
        if let (Some(slots), Some(rest)) = (inline.get_mut(2..), argv.get(2..)) {
            for (slot, &arg) in slots.iter_mut().zip(rest) {
                *slot = RedisString::string_as_slice(arg);
            }
        }
        inline.get(..n).unwrap_or_default()
    } else {
        spilled = argv
            .iter()
            .enumerate()
            .map(|(i, &arg)| match i {
                0 | 1 => &[][..],
                _ => RedisString::string_as_slice(arg),
            })
            .collect();
        &spilled
    };
    let _running = Running::set(argv, args);
    let reply = match argv.get(1) {
        // Redis keeps its argv alive for the call: the key is borrowed, not
        // retained and freed.
        Some(&key) => C::run(
            &context,
            &ManuallyDrop::new(RedisString::from_redis_module_string(ctx, key)),
            args,
        ),
        None => Err(RedisError::WrongArity),
    };
    context.reply(reply) as std::ffi::c_int
}

/// The arguments of the in-place command running now, as Redis passed them
/// and as read in place, side by side: so that an effect can retain the
/// client's own string for an argument it repeats (`client_string`) instead
/// of making a copy, one string object less for Redis to make and free.
/// Set for the length of one call by [`entry_point`] (and the one before put
/// back after it, should a call ever run inside another).
#[derive(Clone, Copy)]
pub(super) struct Running {
    argv: *const *mut raw::RedisModuleString,
    args: *const &'static [u8],
    len: usize,
}

thread_local! {
    static RUNNING: Cell<Running> = const {
        Cell::new(Running {
            argv: std::ptr::null(),
            args: std::ptr::null(),
            len: 0,
        })
    };
}

/// Puts back the arguments of the command that ran before, when dropped.
pub(super) struct RunningGuard(Running);

impl Running {
    fn set(argv: &[*mut raw::RedisModuleString], args: &[&[u8]]) -> RunningGuard {
        let now = Self {
            argv: argv.as_ptr(),
            args: args.as_ptr().cast(),
            len: argv.len().min(args.len()),
        };
        RunningGuard(RUNNING.with(|r| r.replace(now)))
    }
}

impl Drop for RunningGuard {
    fn drop(&mut self) {
        RUNNING.with(|r| r.set(self.0));
    }
}

/// The running command's own string whose bytes are `bytes` (the same bytes
/// in memory, not equal ones: an argument read in place), if any.
pub(super) fn client_string(bytes: &[u8]) -> Option<*mut raw::RedisModuleString> {
    let running = RUNNING.with(Cell::get);
    if running.len == 0 {
        return None;
    }
    // SAFETY: a `Running` with a length is only set by `entry_point` for the
    // length of its call (the guard puts the one before back), while Redis
    // keeps the argv and `entry_point` the slices of it read in place.
    let (argv, args) = unsafe {
        (
            std::slice::from_raw_parts(running.argv, running.len),
            std::slice::from_raw_parts(running.args, running.len),
        )
    };
    args.iter()
        .zip(argv)
        .find(|(arg, _)| arg.as_ptr() == bytes.as_ptr() && arg.len() == bytes.len())
        .map(|(_, &string)| string)
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
