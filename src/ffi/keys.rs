//! A key of a module type, opened with its `WRONGTYPE` check and its absolute
//! expiry: [`ModuleKey`] over a [`ValueType`], whose every value is a `Box<T>`.

use std::cell::Cell;
use std::ffi::c_void;
use std::marker::PhantomData;
use std::ptr::NonNull;

use redis_module::native_types::RedisType;
use redis_module::{Context, RedisError, RedisString, raw};

/// A module data type whose every value is a `Box<T>`: what lets
/// [`ModuleKey`] and [`ScanCursor`](super::ScanCursor) hand out values as `&T`.
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

    pub(super) fn raw(&self) -> *mut raw::RedisModuleType {
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
    /// The value's address once looked up or stored, until the key is
    /// deleted: while the key is open its value changes only through this
    /// key, and a command reads it several times (decide, settle, replicate).
    known: Cell<Option<NonNull<T>>>,
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
            known: Cell::new(None),
        })
    }

    fn kind(&self) -> raw::KeyType {
        // SAFETY: `self.key` is an open key, closed only in Drop.
        unsafe { raw::RedisModule_KeyType.map_or(0, |f| f(self.key.as_ptr())) }.into()
    }

    /// The address of the value, `None` for an empty key, `WRONGTYPE` for a
    /// key of any other type.
    fn value_ptr(&self) -> Result<Option<NonNull<T>>, RedisError> {
        if let Some(known) = self.known.get() {
            return Ok(Some(known));
        }
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
                let value = value.and_then(|v| NonNull::new(v.cast::<T>()));
                self.known.set(value);
                Ok(value)
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
        self.known.set(NonNull::new(value));
        // SAFETY: Redis now owns the box, which stays put while the key is open.
        Ok(unsafe { &mut *value })
    }

    pub fn delete(&mut self) {
        self.known.set(None);
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
