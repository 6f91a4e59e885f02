//! The thin layer over the Redis module API that `redis-module` 2.0.8 does not
//! wrap the way this module needs: typed access to a key of a module type
//! (its `WRONGTYPE` check, absolute expiry), the clock, RDB and digest I/O,
//! replication and AOF emission, blocked clients, key scans. Every `unsafe`
//! block of the crate lives here or in the type callbacks of `datatype.rs`.
//!
//! The bottom of the Redis glue: it imports only the pure `codec` and
//! `lock`, and calls up into nothing (the callbacks of a blocked client are
//! a [`BlockHandler`] given by the caller).

use std::ffi::{CStr, c_char, c_longlong, c_void};
use std::marker::PhantomData;
use std::ptr::NonNull;

use redis_module::native_types::RedisType;
use redis_module::{Context, RedisError, RedisResult, RedisString, RedisValue, raw};

use crate::codec::{APPLY_COMMAND, DecodeError, Sink, Source, write_holder};
use crate::lock::Holder;

/// The server's wall clock, unix ms.
pub fn now_ms() -> i64 {
    // SAFETY: RedisModule_Milliseconds takes no arguments and only reads the
    // clock; the pointer is set by RedisModule_Init before any command runs.
    unsafe { raw::RedisModule_Milliseconds.map_or(0, |f| f()) }
}

/// Selects database `db` for the keys `ctx` opens next; false when there is
/// no such database.
pub fn select_db(ctx: &Context, db: i32) -> bool {
    // SAFETY: `ctx` is a live context; SelectDb only checks the index.
    let status = unsafe { raw::RedisModule_SelectDb.map(|f| f(ctx.get_raw(), db)) };
    status == Some(raw::REDISMODULE_OK as i32)
}

/// A module data type whose every value is a `Box<T>`: what lets
/// [`ModuleKey`] and [`ScanCursor`] hand out values as `&T`.
pub struct ValueType<T: 'static> {
    ty: &'static RedisType,
    value: PhantomData<fn() -> T>,
}

impl<T> ValueType<T> {
    /// # Safety
    /// Every value Redis holds with type `ty` must be a `Box<T>`: the type's
    /// callbacks (`rdb_load`, `copy`) and [`ModuleKey::set_value`] create no
    /// other, and `free` frees them as such.
    pub const unsafe fn new(ty: &'static RedisType) -> Self {
        Self {
            ty,
            value: PhantomData,
        }
    }

    fn raw(&self) -> *mut raw::RedisModuleType {
        *self.ty.raw_type.borrow()
    }
}

/// An open key that holds (or may come to hold) a value of one module type.
pub struct ModuleKey<T: 'static> {
    key: NonNull<raw::RedisModuleKey>,
    ty: &'static ValueType<T>,
    /// Its value was stored by [`ModuleKey::set_value`] and it has had no
    /// expiry set since: it has none (Redis clears it when it stores a value).
    fresh: bool,
}

impl<T> ModuleKey<T> {
    /// Opens `name` for reading, or for writing when `writable`. `None` when a
    /// read-only open finds no key.
    pub fn open(
        ctx: &Context,
        name: &RedisString,
        writable: bool,
        ty: &'static ValueType<T>,
    ) -> Option<Self> {
        let mode = if writable {
            raw::KeyMode::READ | raw::KeyMode::WRITE
        } else {
            raw::KeyMode::READ
        };
        NonNull::new(raw::open_key(ctx.get_raw(), name.inner, mode)).map(|key| Self {
            key,
            ty,
            fresh: false,
        })
    }

    fn kind(&self) -> raw::KeyType {
        // SAFETY: `self.key` is an open key, closed only in Drop.
        unsafe { raw::RedisModule_KeyType.map_or(0, |f| f(self.key.as_ptr())) }.into()
    }

    /// The address of the value, `None` for an empty key, `WRONGTYPE` for a
    /// key of any other type.
    fn value_ptr(&self) -> Result<Option<NonNull<T>>, RedisError> {
        match self.kind() {
            raw::KeyType::Empty => Ok(None),
            raw::KeyType::Module => {
                // SAFETY: the key is open and holds a module value.
                let ty =
                    unsafe { raw::RedisModule_ModuleTypeGetType.map(|f| f(self.key.as_ptr())) };
                if ty != Some(self.ty.raw()) {
                    return Err(RedisError::WrongType);
                }
                // SAFETY: the value of a key of this type is a `Box<T>`
                // (the contract of `ValueType::new`).
                let value =
                    unsafe { raw::RedisModule_ModuleTypeGetValue.map(|f| f(self.key.as_ptr())) };
                Ok(value.and_then(|v| NonNull::new(v.cast::<T>())))
            }
            _ => Err(RedisError::WrongType),
        }
    }

    pub fn value(&self) -> Result<Option<&T>, RedisError> {
        // SAFETY: the value lives as long as the key stays open and unchanged,
        // which the borrow of `self` guarantees.
        Ok(self.value_ptr()?.map(|p| unsafe { p.as_ref() }))
    }

    pub fn value_mut(&mut self) -> Result<Option<&mut T>, RedisError> {
        // SAFETY: as in `value`; the exclusive borrow of `self` makes this the
        // only reference (Redis runs commands on one thread).
        Ok(self.value_ptr()?.map(|mut p| unsafe { p.as_mut() }))
    }

    /// Stores `value` in this empty key; returns it in place.
    pub fn set_value(&mut self, value: T) -> Result<&mut T, RedisError> {
        let value = Box::into_raw(Box::new(value));
        // SAFETY: the key is open for writing; on success Redis owns the box
        // and frees it through the type's `free` callback.
        let status = unsafe {
            raw::RedisModule_ModuleTypeSetValue.map_or(raw::REDISMODULE_ERR as i32, |f| {
                f(self.key.as_ptr(), self.ty.raw(), value.cast::<c_void>())
            })
        };
        if status != raw::REDISMODULE_OK as i32 {
            // SAFETY: Redis did not take the box: it is still ours to free.
            drop(unsafe { Box::from_raw(value) });
            return Err(RedisError::Str("ERR could not store the lock"));
        }
        self.fresh = true;
        // SAFETY: Redis now owns the box, which stays put while the key is open.
        Ok(unsafe { &mut *value })
    }

    pub fn delete(&mut self) {
        // SAFETY: the key is open for writing.
        unsafe {
            if let Some(f) = raw::RedisModule_DeleteKey {
                f(self.key.as_ptr());
            }
        }
    }

    /// The key's expiry (unix ms), or `None`.
    pub fn expire_at(&self) -> Option<i64> {
        // SAFETY: the key is open. GetAbsExpire exists from Redis 7.0.5.
        let at = unsafe { raw::RedisModule_GetAbsExpire.map(|f| f(self.key.as_ptr())) };
        at.filter(|&at| at != raw::REDISMODULE_NO_EXPIRE as i64)
    }

    /// Sets the key's expiry to `at` (unix ms), or removes it, unless it is
    /// that already.
    pub fn set_expire_at(&mut self, at: Option<i64>) {
        let current = if self.fresh { None } else { self.expire_at() };
        if current == at {
            return;
        }
        self.fresh = false;
        let at = at.unwrap_or(raw::REDISMODULE_NO_EXPIRE as i64);
        // SAFETY: the key is open for writing and not empty.
        unsafe {
            if let Some(f) = raw::RedisModule_SetAbsExpire {
                f(self.key.as_ptr(), at);
            }
        }
    }
}

impl<T> Drop for ModuleKey<T> {
    fn drop(&mut self) {
        raw::close_key(self.key.as_ptr());
    }
}

/// RDB (and DUMP) I/O as an encoding [`Sink`] and [`Source`].
pub struct Rdb(pub *mut raw::RedisModuleIO);

impl Sink for Rdb {
    fn unsigned(&mut self, value: u64) {
        raw::save_unsigned(self.0, value);
    }
    fn signed(&mut self, value: i64) {
        raw::save_signed(self.0, value);
    }
    fn buffer(&mut self, bytes: &[u8]) {
        raw::save_slice(self.0, bytes);
    }
}

impl Source for Rdb {
    fn unsigned(&mut self) -> Result<u64, DecodeError> {
        raw::load_unsigned(self.0).map_err(|_| DecodeError::Io)
    }
    fn signed(&mut self) -> Result<i64, DecodeError> {
        raw::load_signed(self.0).map_err(|_| DecodeError::Io)
    }
    fn buffer(&mut self) -> Result<Vec<u8>, DecodeError> {
        raw::load_string_buffer(self.0)
            .map(|b| b.as_ref().to_vec())
            .map_err(|_| DecodeError::Io)
    }
}

/// DEBUG DIGEST as an encoding [`Sink`]: the digest covers exactly what is saved.
pub struct Digest(pub *mut raw::RedisModuleDigest);

impl Sink for Digest {
    fn unsigned(&mut self, value: u64) {
        self.signed(value as i64);
    }
    fn signed(&mut self, value: i64) {
        // SAFETY: `self.0` is the digest Redis passed to the callback.
        unsafe {
            if let Some(f) = raw::RedisModule_DigestAddLongLong {
                f(self.0, value as c_longlong);
            }
        }
    }
    fn buffer(&mut self, bytes: &[u8]) {
        // SAFETY: as above; the buffer is valid for `bytes.len()` bytes.
        unsafe {
            if let Some(f) = raw::RedisModule_DigestAddStringBuffer {
                f(self.0, bytes.as_ptr().cast::<c_char>(), bytes.len());
            }
        }
    }
}

impl Digest {
    pub fn end_sequence(&mut self) {
        // SAFETY: as above.
        unsafe {
            if let Some(f) = raw::RedisModule_DigestEndSequence {
                f(self.0);
            }
        }
    }
}

/// Redis strings built through the codec's [`Sink`]: a holder goes to the
/// AOF and to the replicas in the fields, and the order, it has in the RDB
/// (`codec::write_holder`). Ours until dropped.
///
/// Most fields of a grant repeat from one effect to the next: the operation
/// name, a known lock type, an empty owner or meta, and `acquired_at`, which
/// is the effect's own `now` on a new grant. Those are not made again: the
/// string made once ([`shared`]) or the one just made is retained, so a
/// replicated grant makes three strings instead of ten.
struct Argv {
    strings: [*mut raw::RedisModuleString; 10],
    len: usize,
    /// The numbers made so far, with their strings.
    numbers: [(i64, *mut raw::RedisModuleString); 5],
    numbers_len: usize,
}

impl Argv {
    fn new() -> Self {
        Self {
            strings: [std::ptr::null_mut(); 10],
            len: 0,
            numbers: [(0, std::ptr::null_mut()); 5],
            numbers_len: 0,
        }
    }

    /// The fields of `h`.
    fn holder(h: &Holder) -> Self {
        let mut argv = Self::new();
        write_holder(h, &mut argv);
        argv
    }

    /// `now HOLD` and the fields of `h`: what follows the key in `UNIQUE.APPLY`.
    fn hold(now: i64, h: &Holder) -> Self {
        let mut argv = Self::new();
        argv.signed(now);
        argv.buffer(b"HOLD");
        write_holder(h, &mut argv);
        argv
    }

    /// Keeps `s`; false when it could not (and is freed).
    fn push(&mut self, s: *mut raw::RedisModuleString) -> bool {
        match self.strings.get_mut(self.len) {
            Some(slot) if !s.is_null() => {
                *slot = s;
                self.len += 1;
                true
            }
            // More fields than room: cannot happen (a holder has 7).
            _ => {
                free_string(s);
                false
            }
        }
    }
}

impl Sink for Argv {
    fn unsigned(&mut self, value: u64) {
        self.signed(value as i64);
    }
    fn signed(&mut self, value: i64) {
        let mut made = self.numbers.iter().take(self.numbers_len);
        let s = match made.find(|(n, _)| *n == value) {
            Some(&(_, s)) => retain_string(s),
            // SAFETY: with no context the string is not auto-freed: `Drop` frees it.
            _ => unsafe {
                raw::RedisModule_CreateStringFromLongLong
                    .map_or(std::ptr::null_mut(), |f| f(std::ptr::null_mut(), value))
            },
        };
        if self.push(s)
            && let Some(slot) = self.numbers.get_mut(self.numbers_len)
        {
            *slot = (value, s);
            self.numbers_len += 1;
        }
    }
    fn buffer(&mut self, bytes: &[u8]) {
        let s = match shared(bytes) {
            Some(s) => retain_string(s),
            // SAFETY: as above; the buffer is valid for `bytes.len()` bytes.
            None => unsafe {
                raw::RedisModule_CreateString.map_or(std::ptr::null_mut(), |f| {
                    f(
                        std::ptr::null_mut(),
                        bytes.as_ptr().cast::<c_char>(),
                        bytes.len(),
                    )
                })
            },
        };
        self.push(s);
    }
}

impl Drop for Argv {
    fn drop(&mut self) {
        for &s in self.strings.iter().take(self.len) {
            free_string(s);
        }
    }
}

/// One more reference to `s` (a string made with no context), for an [`Argv`]
/// that frees each of its strings once.
fn retain_string(s: *mut raw::RedisModuleString) -> *mut raw::RedisModuleString {
    // SAFETY: `s` is a live string made with no context; with no context
    // RetainString only raises its reference count.
    unsafe {
        match raw::RedisModule_RetainString {
            Some(f) => {
                f(std::ptr::null_mut(), s);
                s
            }
            None => std::ptr::null_mut(),
        }
    }
}

fn free_string(s: *mut raw::RedisModuleString) {
    if s.is_null() {
        return;
    }
    // SAFETY: `s` was created with no context and is freed once.
    unsafe {
        if let Some(f) = raw::RedisModule_FreeString {
            f(std::ptr::null_mut(), s);
        }
    }
}

/// The words that every effect repeats (see [`word`]), as strings made once
/// for the life of the process (never freed: an `Argv` only retains and
/// releases them).
struct Shared([Option<NonNull<raw::RedisModuleString>>; WORDS.len()]);

// SAFETY: the strings are never changed or freed; their reference counts are
// only moved by the thread that runs commands and AOF rewrites (the main
// thread, or the rewrite's own process), as Redis requires of every string.
unsafe impl Send for Shared {}
// SAFETY: as above.
unsafe impl Sync for Shared {}

static SHARED: std::sync::OnceLock<Shared> = std::sync::OnceLock::new();

/// The words of [`word`], in its order.
const WORDS: [&str; 11] = [
    "",
    "HOLD",
    "RELEASE",
    "REAP",
    "PRUNE",
    "lock",
    "until_executed",
    "until_executing",
    "while_executing",
    "until_and_while_executing",
    "until_expired",
];

/// The index in [`WORDS`] of `bytes`: the operation names, the known lock
/// types and the empty field. Matched as constants (a length and a load or
/// two each), not searched: this runs for every field of every effect.
fn word(bytes: &[u8]) -> Option<usize> {
    Some(match bytes {
        b"" => 0,
        b"HOLD" => 1,
        b"RELEASE" => 2,
        b"REAP" => 3,
        b"PRUNE" => 4,
        b"lock" => 5,
        b"until_executed" => 6,
        b"until_executing" => 7,
        b"while_executing" => 8,
        b"until_and_while_executing" => 9,
        b"until_expired" => 10,
        _ => return None,
    })
}

/// The string made once for `bytes`, if it is one of the [`WORDS`].
fn shared(bytes: &[u8]) -> Option<*mut raw::RedisModuleString> {
    let i = word(bytes)?;
    let shared = SHARED.get_or_init(|| {
        Shared(WORDS.map(|w| {
            // SAFETY: a string with no context, which is never freed.
            let s = unsafe {
                raw::RedisModule_CreateString
                    .map(|f| f(std::ptr::null_mut(), w.as_ptr().cast::<c_char>(), w.len()))
            };
            s.and_then(NonNull::new)
        }))
    });
    shared.0.get(i).copied().flatten().map(NonNull::as_ptr)
}

/// Emits the command that recreates `holder` of `key` into a rewritten AOF,
/// with time 0 so that replay removes nothing.
pub(crate) fn emit_aof_hold(
    io: *mut raw::RedisModuleIO,
    key: *mut raw::RedisModuleString,
    h: &Holder,
) {
    let mut argv = Argv::holder(h);
    // SAFETY: `io` and `key` are what Redis passed to aof_rewrite; every
    // argument matches the format (s = a module string, l = long long, c = C
    // string, v = an array of module strings and its length).
    unsafe {
        if let Some(emit) = raw::RedisModule_EmitAOF {
            emit(
                io,
                APPLY_COMMAND.as_ptr(),
                c"slcv".as_ptr(),
                key,
                0 as c_longlong,
                c"HOLD".as_ptr(),
                argv.strings.as_mut_ptr(),
                argv.len,
            );
        }
    }
}

/// Replicates `UNIQUE.APPLY key now HOLD ...`: the holder exactly as it is,
/// with the client's own key string.
pub fn replicate_hold(ctx: &Context, key: &RedisString, now: i64, h: &Holder) {
    replicate_apply(ctx, key, Argv::hold(now, h));
}

/// Replicates `UNIQUE.APPLY key now OP [arg]` (RELEASE jid, REAP owner, PRUNE).
pub fn replicate_effect(ctx: &Context, key: &RedisString, now: i64, op: &CStr, arg: Option<&[u8]>) {
    let mut argv = Argv::new();
    argv.signed(now);
    argv.buffer(op.to_bytes());
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

/// Announces module keyspace event `event` (class `d`) on `key`: the event
/// name goes as it is, with no copy.
pub fn notify_module_event(ctx: &Context, event: &CStr, key: &RedisString) {
    // SAFETY: `ctx` is the context of the running command, `event` a C
    // string and `key` a live module string; Redis copies what it keeps.
    unsafe {
        if let Some(notify) = raw::RedisModule_NotifyKeyspaceEvent {
            notify(
                ctx.get_raw(),
                raw::REDISMODULE_NOTIFY_MODULE,
                event.as_ptr(),
                key.inner,
            );
        }
    }
}

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

/// A command's own `extern "C"` entry point.
pub type EntryPoint = extern "C" fn(
    *mut raw::RedisModuleCtx,
    *mut *mut raw::RedisModuleString,
    std::ffi::c_int,
) -> std::ffi::c_int;

/// Registers command `name` (its key the first argument) to run `C` through
/// [`entry_point`]; false when Redis refused it.
pub fn create_in_place_command<C: InPlace>(ctx: &Context, name: &CStr, flags: &CStr) -> bool {
    create_command(ctx, name, entry_point::<C>, flags, (1, 1, 1))
}

/// Registers command `name` with its own entry point (the registration macro
/// gives every other command one that copies its arguments); false when
/// Redis refused it.
fn create_command(
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

/// The database `ctx` works on.
pub fn selected_db(ctx: &Context) -> i32 {
    // SAFETY: `ctx` is a live context.
    unsafe { raw::RedisModule_GetSelectedDb.map_or(0, |f| f(ctx.get_raw())) }
}

/// A client blocked by UNIQUE.LOCK ... WAIT.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Blocked(NonNull<raw::RedisModuleBlockedClient>);

/// What a served waiter is told.
pub enum WaiterReply {
    Token(i64),
    Error(String),
}

/// What Redis calls back for a blocked client, besides the reply that
/// [`unblock`] gives it.
pub trait BlockHandler {
    /// `CLIENT UNBLOCK` ended the wait: the client's reply.
    fn on_timeout(ctx: &Context, blocked: Option<Blocked>) -> RedisResult;
    /// The client went away while blocked.
    fn on_disconnect(ctx: &Context, blocked: Blocked);
}

/// Blocks the calling client with no deadline of Redis's: the module ends
/// the wait with [`unblock`], its own timer included (see `waiting.rs`: a
/// Redis timeout could fire after the module granted the client a slot, and
/// Redis would then drop the grant's reply). Redis calls `H::on_timeout` for
/// `CLIENT UNBLOCK` and `H::on_disconnect` if the client goes away.
pub fn block_client<H: BlockHandler>(ctx: &Context) -> Option<Blocked> {
    // SAFETY: `ctx` is the context of the command being run; the callbacks
    // are `extern "C"` functions of this module that live as long as it.
    unsafe {
        let block = raw::RedisModule_BlockClient?;
        let bc = NonNull::new(block(
            ctx.get_raw(),
            Some(waiter_reply),
            Some(waiter_timeout::<H>),
            Some(free_waiter_reply),
            0,
        ))?;
        if let Some(on_disconnect) = raw::RedisModule_SetDisconnectCallback {
            on_disconnect(bc.as_ptr(), Some(waiter_disconnected::<H>));
        }
        Some(Blocked(bc))
    }
}

/// Ends a wait: the client gets `reply`, or nothing when it already had its
/// reply (timeout) or is gone (disconnect). Call it exactly once per client.
pub fn unblock(blocked: Blocked, reply: Option<WaiterReply>) {
    let privdata = reply.map_or(std::ptr::null_mut(), |r| {
        Box::into_raw(Box::new(r)).cast::<c_void>()
    });
    // SAFETY: `blocked` is a handle Redis gave us and that was not unblocked
    // yet; Redis frees `privdata` through `free_waiter_reply`.
    unsafe {
        if let Some(f) = raw::RedisModule_UnblockClient {
            f(blocked.0.as_ptr(), privdata);
        }
    }
}

/// The blocked client a timeout callback runs for.
fn blocked_of(ctx: *mut raw::RedisModuleCtx) -> Option<Blocked> {
    // SAFETY: `ctx` is the context of a blocked-client callback.
    let bc = unsafe { raw::RedisModule_GetBlockedClientHandle.map(|f| f(ctx)) }?;
    NonNull::new(bc).map(Blocked)
}

/// Replies to a served waiter with what `unblock` gave it.
extern "C" fn waiter_reply(
    ctx: *mut raw::RedisModuleCtx,
    _argv: *mut *mut raw::RedisModuleString,
    _argc: std::ffi::c_int,
) -> std::ffi::c_int {
    let context = Context::new(ctx);
    // SAFETY: the private data of our blocked clients is a `WaiterReply`
    // box (or null); Redis frees it after this callback.
    let reply = unsafe { raw::RedisModule_GetBlockedClientPrivateData.map(|f| f(ctx)) }
        .and_then(|p| unsafe { p.cast::<WaiterReply>().as_ref() });
    let reply = match reply {
        Some(WaiterReply::Token(token)) => Ok(RedisValue::Integer(*token)),
        Some(WaiterReply::Error(e)) => Err(RedisError::String(e.clone())),
        None => Ok(RedisValue::Null),
    };
    context.reply(reply);
    raw::REDISMODULE_OK as std::ffi::c_int
}

extern "C" fn waiter_timeout<H: BlockHandler>(
    ctx: *mut raw::RedisModuleCtx,
    _argv: *mut *mut raw::RedisModuleString,
    _argc: std::ffi::c_int,
) -> std::ffi::c_int {
    let context = Context::new(ctx);
    let blocked = blocked_of(ctx);
    let reply = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        H::on_timeout(&context, blocked)
    }))
    .unwrap_or(Ok(RedisValue::Null));
    context.reply(reply);
    raw::REDISMODULE_OK as std::ffi::c_int
}

extern "C" fn waiter_disconnected<H: BlockHandler>(
    ctx: *mut raw::RedisModuleCtx,
    bc: *mut raw::RedisModuleBlockedClient,
) {
    let context = Context::new(ctx);
    if let Some(bc) = NonNull::new(bc) {
        let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            H::on_disconnect(&context, Blocked(bc))
        }));
    }
}

/// A module timer (`RM_CreateTimer`) that carries a number: nothing to
/// allocate, and stopping it frees nothing. (redis-module's `stop_timer`
/// casts the timer's box back to the payload's type alone, which only fits
/// when the callback is zero-sized.)
pub type TimerId = raw::RedisModuleTimerID;

/// What a [`arm_timer`] timer calls when it fires, with its number.
pub trait TimerHandler {
    fn fired(ctx: &Context, data: usize);
}

/// Arms a timer that calls `H::fired(ctx, data)` in `delay_ms` (1 at least).
pub fn arm_timer<H: TimerHandler>(ctx: &Context, delay_ms: i64, data: usize) -> Option<TimerId> {
    let delay = u64::try_from(delay_ms).unwrap_or(0).max(1);
    // SAFETY: `ctx` is live; the callback is an `extern "C"` function of this
    // module; the payload is a number, never dereferenced.
    unsafe {
        raw::RedisModule_CreateTimer.map(|f| {
            f(
                ctx.get_raw(),
                delay as raw::mstime_t,
                Some(timer_fired::<H>),
                std::ptr::without_provenance_mut::<c_void>(data),
            )
        })
    }
}

/// Stops a timer of [`arm_timer`] before it fires; false when it is gone.
pub fn stop_timer(ctx: &Context, id: TimerId) -> bool {
    let mut data: *mut c_void = std::ptr::null_mut();
    // SAFETY: `ctx` is live; StopTimer only writes the payload (a number).
    let status = unsafe { raw::RedisModule_StopTimer.map(|f| f(ctx.get_raw(), id, &mut data)) };
    status == Some(raw::REDISMODULE_OK as i32)
}

extern "C" fn timer_fired<H: TimerHandler>(ctx: *mut raw::RedisModuleCtx, data: *mut c_void) {
    let context = Context::new(ctx);
    let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        H::fired(&context, data.addr())
    }));
}

extern "C" fn free_waiter_reply(_ctx: *mut raw::RedisModuleCtx, privdata: *mut c_void) {
    if !privdata.is_null() {
        // SAFETY: `privdata` is the box `unblock` gave Redis, freed once.
        drop(unsafe { Box::from_raw(privdata.cast::<WaiterReply>()) });
    }
}

/// A cursor over the keys of the selected database (`RM_Scan`).
///
/// redis-module's `KeysCursor` is not used: its callback wraps each key name
/// in a `RedisString` (which retains it) and then forgets it, so every key it
/// visits leaks its name. Here the visitor borrows the name for the duration
/// of the callback and nothing is retained.
pub struct ScanCursor(NonNull<raw::RedisModuleScanCursor>);

impl ScanCursor {
    /// `None` when the server has no scan API (before Redis 6.0).
    pub fn new() -> Option<Self> {
        // SAFETY: ScanCursorCreate takes no arguments and returns a new cursor
        // that we own until Drop.
        let cursor = unsafe { raw::RedisModule_ScanCursorCreate.map(|f| f()) }?;
        NonNull::new(cursor).map(Self)
    }

    /// Starts the walk over from the beginning.
    pub fn restart(&mut self) {
        // SAFETY: the cursor is ours and live.
        unsafe {
            if let Some(f) = raw::RedisModule_ScanCursorRestart {
                f(self.0.as_ptr());
            }
        }
    }

    /// Visits the next batch of keys of the selected database, each as its
    /// name and, when it holds a value of type `ty`, the value. Returns false
    /// when the walk is complete (or the scan failed).
    pub fn scan<T: 'static, F: FnMut(&[u8], Option<&T>)>(
        &mut self,
        ctx: &Context,
        ty: &'static ValueType<T>,
        visit: &mut F,
    ) -> bool {
        let mut visit = (ty, visit);
        // SAFETY: `ctx` is live; the cursor is ours; the private data is
        // `visit`, which outlives the call, and `scan_visitor::<T, F>` casts
        // it back to the same type.
        let more = unsafe {
            raw::RedisModule_Scan.map(|f| {
                f(
                    ctx.get_raw(),
                    self.0.as_ptr(),
                    Some(scan_visitor::<T, F>),
                    (&mut visit as *mut (&'static ValueType<T>, &mut F)).cast::<c_void>(),
                )
            })
        };
        more.is_some_and(|more| more != 0)
    }
}

impl Drop for ScanCursor {
    fn drop(&mut self) {
        // SAFETY: the cursor is ours and destroyed once.
        unsafe {
            if let Some(f) = raw::RedisModule_ScanCursorDestroy {
                f(self.0.as_ptr());
            }
        }
    }
}

/// The `RM_Scan` callback of [`ScanCursor::scan`]: Redis owns `name` and
/// `key` and releases them after the call, so both are only borrowed.
extern "C" fn scan_visitor<T: 'static, F: FnMut(&[u8], Option<&T>)>(
    _ctx: *mut raw::RedisModuleCtx,
    name: *mut raw::RedisModuleString,
    key: *mut raw::RedisModuleKey,
    visit: *mut c_void,
) {
    // SAFETY: `visit` is the `(type, &mut F)` that `scan` passed and that
    // outlives this call; nothing else refers to it during the call.
    let (ty, visit) = unsafe { &mut *visit.cast::<(&'static ValueType<T>, &mut F)>() };
    let name = RedisString::string_as_slice(name);
    let value = NonNull::new(key).and_then(|key| {
        // SAFETY: Redis opened `key` for this callback (read-only); it stays
        // open until we return.
        let value = unsafe { value_in(key, ty) }?;
        // SAFETY: the value lives as long as the key is open, which outlasts
        // the visit.
        Some(unsafe { value.as_ref() })
    });
    // A bug in a visitor must not unwind into Redis.
    let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| visit(name, value)));
}

/// The value of type `ty` stored in open key `key`, `None` for any other key.
///
/// # Safety
/// `key` must be an open key.
unsafe fn value_in<T: 'static>(
    key: NonNull<raw::RedisModuleKey>,
    ty: &ValueType<T>,
) -> Option<NonNull<T>> {
    // SAFETY: the caller guarantees the key is open; a value of type `ty` is
    // a `Box<T>` (the contract of `ValueType::new`).
    unsafe {
        let kind = raw::RedisModule_KeyType.map_or(0, |f| f(key.as_ptr()));
        if raw::KeyType::from(kind) != raw::KeyType::Module {
            return None;
        }
        let found = raw::RedisModule_ModuleTypeGetType.map(|f| f(key.as_ptr()))?;
        if found != ty.raw() {
            return None;
        }
        let value = raw::RedisModule_ModuleTypeGetValue.map(|f| f(key.as_ptr()))?;
        NonNull::new(value.cast::<T>())
    }
}

// ---------------------------------------------------------------------------
// Command info: RM_GetCommand + RM_SetCommandInfo from the plain data of
// `docs`, so that COMMAND DOCS, COMMAND INFO and cluster routing know each
// command; and RM_LoadConfigs for `config::load`.
// ---------------------------------------------------------------------------

mod command_info {
    use std::ffi::{CString, c_char, c_int};
    use std::ptr::{null, null_mut};

    use redis_module::{Context, raw};

    use crate::docs::{Arg, ArgType, CommandDoc, KeyFlag, KeySpec};

    /// The C strings and arrays a `RedisModuleCommandInfo` points into. Redis
    /// copies all of it in RM_SetCommandInfo, so this lives only for the call;
    /// moving a `CString` or a `Vec` into it leaves their heap buffers (what
    /// the pointers point at) in place.
    #[derive(Default)]
    struct Arena {
        strings: Vec<CString>,
        args: Vec<Vec<raw::RedisModuleCommandArg>>,
        specs: Vec<Vec<raw::RedisModuleCommandKeySpec>>,
    }

    impl Arena {
        fn str(&mut self, s: &str) -> Result<*const c_char, String> {
            let c = CString::new(s).map_err(|_| format!("a NUL byte in {s:?}"))?;
            let p = c.as_ptr();
            self.strings.push(c);
            Ok(p)
        }

        fn opt_str(&mut self, s: Option<&str>) -> Result<*const c_char, String> {
            s.map_or(Ok(null()), |s| self.str(s))
        }

        /// A NULL-name-terminated array of `args`.
        fn args(&mut self, args: &[Arg]) -> Result<*mut raw::RedisModuleCommandArg, String> {
            if args.is_empty() {
                return Ok(null_mut());
            }
            let mut out = Vec::with_capacity(args.len() + 1);
            for arg in args {
                let (type_, key_spec_index) = match arg.kind {
                    ArgType::Key(i) => (raw::RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_KEY, i),
                    ArgType::String => (
                        raw::RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_STRING,
                        -1,
                    ),
                    ArgType::Integer => (
                        raw::RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_INTEGER,
                        -1,
                    ),
                    ArgType::UnixTime => (
                        raw::RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_UNIX_TIME,
                        -1,
                    ),
                    ArgType::PureToken => (
                        raw::RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_PURE_TOKEN,
                        -1,
                    ),
                    ArgType::OneOf => (
                        raw::RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_ONEOF,
                        -1,
                    ),
                    ArgType::Block => (
                        raw::RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_BLOCK,
                        -1,
                    ),
                };
                let mut flags = raw::REDISMODULE_CMD_ARG_NONE;
                if arg.optional {
                    flags |= raw::REDISMODULE_CMD_ARG_OPTIONAL;
                }
                if arg.multiple {
                    flags |= raw::REDISMODULE_CMD_ARG_MULTIPLE;
                }
                out.push(raw::RedisModuleCommandArg {
                    name: self.str(arg.name)?,
                    type_,
                    key_spec_index,
                    token: self.opt_str(arg.token)?,
                    summary: self.opt_str(Some(arg.summary).filter(|s| !s.is_empty()))?,
                    since: null(),
                    flags: flags as c_int,
                    deprecated_since: null(),
                    subargs: self.args(arg.subargs)?,
                    // Read from Redis 7.2 on (the placeholder in redis-cli's
                    // hints); 7.0 steps over it (sizeof_arg below).
                    display_text: self.opt_str(arg.display)?,
                });
            }
            out.push(raw::RedisModuleCommandArg {
                name: null(),
                type_: 0,
                key_spec_index: 0,
                token: null(),
                summary: null(),
                since: null(),
                flags: 0,
                deprecated_since: null(),
                subargs: null_mut(),
                display_text: null(),
            });
            let p = out.as_mut_ptr();
            self.args.push(out);
            Ok(p)
        }

        /// A terminated array of single-key specs, NULL for none.
        fn specs(&mut self, specs: &[KeySpec]) -> *mut raw::RedisModuleCommandKeySpec {
            if specs.is_empty() {
                return null_mut();
            }
            let spec = |begin, pos, flags| raw::RedisModuleCommandKeySpec {
                notes: null(),
                flags,
                begin_search_type: begin,
                bs: raw::RedisModuleCommandKeySpec__bindgen_ty_1 {
                    index: raw::RedisModuleCommandKeySpec__bindgen_ty_1__bindgen_ty_1 { pos },
                },
                find_keys_type: if begin == 0 {
                    0
                } else {
                    raw::RedisModuleKeySpecFindKeysType_REDISMODULE_KSPEC_FK_RANGE
                },
                fk: raw::RedisModuleCommandKeySpec__bindgen_ty_2 {
                    // One key: the last is the first, step 1, no limit.
                    range: raw::RedisModuleCommandKeySpec__bindgen_ty_2__bindgen_ty_1 {
                        lastkey: 0,
                        keystep: if begin == 0 { 0 } else { 1 },
                        limit: 0,
                    },
                },
            };
            let mut out: Vec<_> = specs
                .iter()
                .map(|s| {
                    let flags = s.flags.iter().fold(0u64, |acc, f| {
                        acc | u64::from(match f {
                            KeyFlag::Ro => raw::REDISMODULE_CMD_KEY_RO,
                            KeyFlag::Rw => raw::REDISMODULE_CMD_KEY_RW,
                            KeyFlag::Access => raw::REDISMODULE_CMD_KEY_ACCESS,
                            KeyFlag::Update => raw::REDISMODULE_CMD_KEY_UPDATE,
                            KeyFlag::Delete => raw::REDISMODULE_CMD_KEY_DELETE,
                        })
                    });
                    spec(
                        raw::RedisModuleKeySpecBeginSearchType_REDISMODULE_KSPEC_BS_INDEX,
                        s.index,
                        flags,
                    )
                })
                .collect();
            // begin_search_type 0 (INVALID) ends the array.
            out.push(spec(0, 0, 0));
            let p = out.as_mut_ptr();
            self.specs.push(out);
            p
        }
    }

    /// Gives `cmd`, a command this module registered, its docs, arity and
    /// key specs. Only during the module's load (RM_OnLoad).
    pub fn describe(ctx: &Context, cmd: &CommandDoc) -> Result<(), String> {
        let mut arena = Arena::default();
        let name = arena.str(cmd.name)?;
        // SAFETY: `ctx` is the load context; `name` is a NUL-terminated
        // string that outlives the call. A NULL reply means not ours.
        let command = unsafe { raw::RedisModule_GetCommand.map(|f| f(ctx.get_raw(), name)) }
            .filter(|c| !c.is_null())
            .ok_or("RM_GetCommand found no such command of this module")?;
        // What Redis reads the arrays with: the sizes of this module's
        // structs (version 1 of the API, as in Redis 7.0's header).
        let version = raw::RedisModuleCommandInfoVersion {
            version: 1,
            sizeof_historyentry: size_of::<raw::RedisModuleCommandHistoryEntry>(),
            sizeof_keyspec: size_of::<raw::RedisModuleCommandKeySpec>(),
            sizeof_arg: size_of::<raw::RedisModuleCommandArg>(),
        };
        let info = raw::RedisModuleCommandInfo {
            version: &version,
            summary: arena.str(cmd.summary)?,
            complexity: arena.str(cmd.complexity)?,
            since: arena.str(cmd.since)?,
            history: null_mut(),
            tips: arena.opt_str(Some(cmd.tips).filter(|t| !t.is_empty()))?,
            arity: cmd.arity,
            key_specs: arena.specs(cmd.key_specs),
            args: arena.args(cmd.args)?,
        };
        // SAFETY: `command` is this module's command; `info` and everything
        // it points to (`version`, `arena`) are alive and well-formed for
        // the call: every array ends with its terminator, every string with
        // NUL. Redis validates the info, copies what it keeps and retains no
        // pointer into it.
        let status = unsafe {
            raw::RedisModule_SetCommandInfo
                .map_or(raw::REDISMODULE_ERR as c_int, |f| f(command, &info))
        };
        if status == raw::REDISMODULE_OK as c_int {
            Ok(())
        } else {
            Err("RM_SetCommandInfo refused the info (see the line above)".into())
        }
    }
}

/// Registers the docs of every public command (`docs::COMMANDS`).
/// A refusal is logged and leaves that command as it was (arity -1, its
/// registration key range): the module still loads.
pub fn describe_commands(ctx: &Context) {
    for cmd in crate::docs::COMMANDS {
        if let Err(e) = command_info::describe(ctx, cmd) {
            ctx.log_warning(&format!("no command docs for {}: {e}", cmd.name));
        }
    }
}

/// Applies the configuration that redis.conf, the command line or MODULE
/// LOADEX gave for the registered `unique.*` settings (or their defaults).
/// False when Redis refused a value (it logs which).
pub fn load_configs(ctx: &Context) -> bool {
    // SAFETY: `ctx` is the load context, after every config was registered.
    let status = unsafe { raw::RedisModule_LoadConfigs.map(|f| f(ctx.get_raw())) };
    status == Some(raw::REDISMODULE_OK as i32)
}

/// Whether the server has the module configuration API (Redis 7.0+).
pub fn has_module_configs() -> bool {
    // SAFETY: reads function pointers that RedisModule_Init set during the
    // load, before any other module code runs.
    unsafe {
        let register = raw::RedisModule_RegisterNumericConfig;
        let load = raw::RedisModule_LoadConfigs;
        register.is_some() && load.is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_shared_words_are_the_operations_the_known_types_and_the_empty_field() {
        for (i, w) in WORDS.iter().enumerate() {
            assert_eq!(word(w.as_bytes()), Some(i), "{w}");
        }
        for t in crate::lock::KNOWN_TYPES {
            assert!(word(t.as_bytes()).is_some(), "{t}");
        }
        for other in [&b"hold"[..], b"HOLD ", b"lock:1", b"job", b"x"] {
            assert_eq!(word(other), None);
        }
    }
}
