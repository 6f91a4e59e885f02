//! The `uniq-lock` data type: its callbacks are thin `extern "C"` shims over
//! the safe encoding in `codec.rs`. None of them may unwind into Redis: each
//! one turns a panic into the callback's failure value.
//!
//! [`LockKey`], a key that holds (or may come to hold) a lock, lives here too:
//! every place where a lock comes into or leaves the keyspace counts it in
//! the gauges beside the others (`create`, `rdb_load`, `copy`, `free`).

use std::ffi::{c_int, c_void};
use std::panic::{AssertUnwindSafe, catch_unwind};

use redis_module::logging::{RedisLogLevel, log_io_error};
use redis_module::native_types::RedisType;
use redis_module::{Context, RedisError, RedisString, raw};

use crate::codec::{self, ENCODING_VERSION};
use crate::engine::Lock;
use crate::ffi::{self, Digest, ModuleKey, Rdb, ValueType};
use crate::metrics::{self, Event};
use crate::{fencing, moving_slots, role};

pub static LOCK_TYPE: RedisType = RedisType::new(
    "uniq-lock",
    ENCODING_VERSION,
    raw::RedisModuleTypeMethods {
        version: raw::REDISMODULE_TYPE_METHOD_VERSION as u64,
        rdb_load: Some(rdb_load),
        rdb_save: Some(rdb_save),
        aof_rewrite: Some(aof_rewrite),
        mem_usage: Some(mem_usage),
        digest: Some(digest),
        free: Some(free),
        aux_load: Some(aux_load),
        // Redis 7.2 and Valkey 8 call the lazy form (`aux_save2`): an RDB
        // gets the aux field only when it has something to keep, so an RDB
        // without locks still loads without the module. Redis 7.0 knows only
        // this one, which always writes the field.
        aux_save: Some(aux_save_always),
        aux_save_triggers: raw::Aux::Before as i32,
        free_effort: Some(free_effort),
        unlink: None,
        copy: Some(copy),
        defrag: None,
        mem_usage2: None,
        free_effort2: None,
        unlink2: Some(unlink2),
        copy2: None,
        aux_save2: Some(aux_save),
    },
);

/// The values of `uniq-lock`, as locks.
// SAFETY: every value of the type is a `Box<Lock>`: `LockKey::create`,
// `rdb_load` and `copy` store no other, and `free` frees them as such.
pub static LOCKS: ValueType<Lock> = unsafe { ValueType::new(&LOCK_TYPE) };

/// An open key that holds (or may come to hold) a lock.
pub struct LockKey(ModuleKey<Lock>);

impl LockKey {
    /// Opens `name` for reading, or for writing when `writable`. `None` when a
    /// read-only open finds no key.
    pub fn open(ctx: &Context, name: &RedisString, writable: bool) -> Option<Self> {
        ModuleKey::open(ctx, name, writable, &LOCKS).map(Self)
    }

    /// The lock, `None` for an empty key, `WRONGTYPE` for any other type.
    pub fn lock(&self) -> Result<Option<&Lock>, RedisError> {
        self.0.value()
    }

    pub fn lock_mut(&mut self) -> Result<Option<&mut Lock>, RedisError> {
        self.0.value_mut()
    }

    /// Stores `lock` in this empty key; returns it in place.
    pub fn create(&mut self, lock: Lock) -> Result<&mut Lock, RedisError> {
        let lock = self.0.set_value(lock)?;
        metrics::lock_added(lock.len());
        Ok(lock)
    }

    pub fn delete(&mut self) {
        self.0.delete();
    }

    /// Sets the key's expiry to `at` (unix ms), or removes it.
    pub fn set_expire_at(&mut self, at: Option<i64>) {
        self.0.set_expire_at(at);
    }
}

/// Runs `f`, or returns `failed` if it panics.
fn no_unwind<T>(failed: T, f: impl FnOnce() -> T) -> T {
    catch_unwind(AssertUnwindSafe(f)).unwrap_or(failed)
}

/// # Safety
/// `value` must be a lock stored by this module (a `Box<Lock>`), alive for `'a`.
unsafe fn lock_ref<'a>(value: *mut c_void) -> Option<&'a Lock> {
    // SAFETY: per the function's contract.
    unsafe { value.cast::<Lock>().as_ref() }
}

extern "C" fn rdb_load(io: *mut raw::RedisModuleIO, encver: c_int) -> *mut c_void {
    no_unwind(std::ptr::null_mut(), || {
        match codec::decode(encver, &mut Rdb(io)) {
            Ok(lock) => {
                fencing::observe(lock.max_token());
                metrics::lock_added(lock.len());
                Box::into_raw(Box::new(lock)).cast::<c_void>()
            }
            Err(e) => {
                log_io_error(io, RedisLogLevel::Warning, &e.to_string());
                std::ptr::null_mut()
            }
        }
    })
}

extern "C" fn rdb_save(io: *mut raw::RedisModuleIO, value: *mut c_void) {
    no_unwind((), || {
        // SAFETY: Redis passes the value of one of our keys.
        if let Some(lock) = unsafe { lock_ref(value) } {
            codec::encode(lock, &mut Rdb(io));
        }
    });
}

extern "C" fn aof_rewrite(
    io: *mut raw::RedisModuleIO,
    key: *mut raw::RedisModuleString,
    value: *mut c_void,
) {
    no_unwind((), || {
        // SAFETY: Redis passes the value of one of our keys.
        if let Some(lock) = unsafe { lock_ref(value) } {
            for holder in lock.holders() {
                ffi::emit_aof_hold(io, key, holder);
            }
            if let Some(rate) = lock.rate() {
                ffi::emit_aof_rate(io, key, rate);
            }
        }
    });
}

/// What the module keeps outside the keyspace, in the RDB's aux data: the
/// fencing counter, only while it is ahead of the clock (after a promotion):
/// a tag, then the counter.
const AUX_TOKEN_COUNTER: u64 = 1;
/// The field of a server without the lazy form, when it has nothing to keep.
const AUX_NOTHING: u64 = 0;

extern "C" fn aux_save_always(io: *mut raw::RedisModuleIO, _when: c_int) {
    no_unwind((), || {
        let mut rdb = Rdb(io);
        match fencing::to_save(ffi::now_ms()) {
            Some(counter) => {
                codec::Sink::unsigned(&mut rdb, AUX_TOKEN_COUNTER);
                codec::Sink::signed(&mut rdb, counter);
            }
            None => codec::Sink::unsigned(&mut rdb, AUX_NOTHING),
        }
    });
}

extern "C" fn aux_save(io: *mut raw::RedisModuleIO, _when: c_int) {
    no_unwind((), || {
        if let Some(counter) = fencing::to_save(ffi::now_ms()) {
            let mut rdb = Rdb(io);
            codec::Sink::unsigned(&mut rdb, AUX_TOKEN_COUNTER);
            codec::Sink::signed(&mut rdb, counter);
        }
    });
}

extern "C" fn aux_load(io: *mut raw::RedisModuleIO, _encver: c_int, _when: c_int) -> c_int {
    let loaded = no_unwind(Err(()), || {
        let mut rdb = Rdb(io);
        match codec::Source::unsigned(&mut rdb) {
            Ok(AUX_TOKEN_COUNTER) => {
                let counter = codec::Source::signed(&mut rdb).map_err(|_| ())?;
                fencing::observe(counter);
                Ok(())
            }
            Ok(AUX_NOTHING) => Ok(()),
            Ok(tag) => {
                log_io_error(
                    io,
                    RedisLogLevel::Warning,
                    &format!("unknown aux data (tag {tag}): written by a later version?"),
                );
                Err(())
            }
            Err(_) => Err(()),
        }
    });
    if loaded.is_ok() {
        raw::REDISMODULE_OK as c_int
    } else {
        raw::REDISMODULE_ERR as c_int
    }
}

extern "C" fn mem_usage(value: *const c_void) -> usize {
    // SAFETY: Redis passes the value of one of our keys.
    no_unwind(0, || {
        unsafe { lock_ref(value.cast_mut()) }.map_or(0, Lock::mem_usage)
    })
}

extern "C" fn digest(md: *mut raw::RedisModuleDigest, value: *mut c_void) {
    no_unwind((), || {
        // SAFETY: Redis passes the value of one of our keys.
        if let Some(lock) = unsafe { lock_ref(value) } {
            let mut digest = Digest(md);
            codec::encode(lock, &mut digest);
            digest.end_sequence();
        }
    });
}

extern "C" fn copy(
    _from: *mut raw::RedisModuleString,
    _to: *mut raw::RedisModuleString,
    value: *const c_void,
) -> *mut c_void {
    no_unwind(std::ptr::null_mut(), || {
        // SAFETY: Redis passes the value of one of our keys.
        match unsafe { lock_ref(value.cast_mut()) } {
            Some(lock) => {
                metrics::lock_added(lock.len());
                Box::into_raw(Box::new(lock.clone())).cast::<c_void>()
            }
            None => std::ptr::null_mut(),
        }
    })
}

/// The name of the key an unlink callback runs for (empty if unknown).
fn key_name<'a>(ctx: *mut raw::RedisModuleKeyOptCtx) -> &'a [u8] {
    // SAFETY: `ctx` is the context Redis passed to the callback; the name
    // it gives lives as long as the callback, which is as long as the bytes
    // are used (`counts_as_expired` keeps nothing).
    unsafe {
        let (Some(name_of), Some(ptr_len)) = (
            raw::RedisModule_GetKeyNameFromOptCtx,
            raw::RedisModule_StringPtrLen,
        ) else {
            return &[];
        };
        let name = name_of(ctx);
        if name.is_null() {
            return &[];
        }
        let mut len = 0usize;
        let ptr = ptr_len(name, &mut len);
        if ptr.is_null() {
            return &[];
        }
        std::slice::from_raw_parts(ptr.cast::<u8>(), len)
    }
}

/// How much freeing a value costs ([`Lock::free_effort`]): above 64, Redis
/// frees it on its lazy-free thread where the command allows (UNLINK,
/// FLUSHALL ASYNC, the lazyfree-lazy-* settings).
extern "C" fn free_effort(_key: *mut raw::RedisModuleString, value: *const c_void) -> usize {
    // SAFETY: Redis passes the value of one of our keys.
    no_unwind(1, || {
        unsafe { lock_ref(value.cast_mut()) }.map_or(1, Lock::free_effort)
    })
}

/// May run on a Redis background thread (FLUSHALL ASYNC, lazy free).
extern "C" fn free(value: *mut c_void) {
    if !value.is_null() {
        // SAFETY: the value is the `Box<Lock>` we gave Redis; Redis frees it once.
        let lock = unsafe { Box::from_raw(value.cast::<Lock>()) };
        metrics::lock_freed(lock.len());
    }
}

/// A key leaves the keyspace. When every one of its holders has run out, this
/// is Redis expiring the key (any other access would have expired it first):
/// those holders count as expired, as when the module prunes them itself.
/// Unless the key leaves because its slot moved to another node (which then
/// counts them when it prunes them).
extern "C" fn unlink2(ctx: *mut raw::RedisModuleKeyOptCtx, value: *const c_void) {
    no_unwind((), || {
        if !role::is_primary() {
            return; // the primary counted them
        }
        // An emptied lock (the release of its last holder) has nothing to count.
        // SAFETY: Redis passes the value of one of our keys.
        if let Some(lock) = unsafe { lock_ref(value.cast_mut()) }.filter(|l| !l.is_empty()) {
            let now = ffi::now_ms();
            if lock.all_expired(now)
                && moving_slots::counts_as_expired(|| ffi::key_slot(key_name(ctx)))
            {
                for h in lock.holders() {
                    metrics::record(now, Some(h.lock_type()), Event::Expired);
                }
            }
        }
    });
}
