//! A scan over the keys of the selected database that retains nothing.

use std::ffi::c_void;
use std::ptr::NonNull;

use redis_module::{Context, RedisString, raw};

use super::keys::ValueType;

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
