//! Replies streamed straight to the client, piece by piece: LOCKEDBY and
//! METRICS, whose arrays and maps know their length up front and whose field
//! order is part of the contract. The handler then returns `NoReply`.

use std::ffi::{c_char, c_long};
use std::marker::PhantomData;

use redis_module::{Context, raw};

pub struct Stream<'a> {
    ctx: *mut raw::RedisModuleCtx,
    of: PhantomData<&'a Context>,
}

impl<'a> Stream<'a> {
    /// The reply of the command running in `ctx`.
    pub fn new(ctx: &'a Context) -> Self {
        Self {
            ctx: ctx.get_raw(),
            of: PhantomData,
        }
    }

    /// An array of `len` elements, which follow.
    pub fn array(&self, len: usize) {
        raw::reply_with_array(self.ctx, c_long::try_from(len).unwrap_or(c_long::MAX));
    }

    /// A map of `len` pairs, which follow (a flat array on RESP2).
    pub fn map(&self, len: usize) {
        raw::reply_with_map(self.ctx, c_long::try_from(len).unwrap_or(c_long::MAX));
    }

    pub fn bulk(&self, bytes: &[u8]) {
        raw::reply_with_string_buffer(self.ctx, bytes.as_ptr().cast::<c_char>(), bytes.len());
    }

    pub fn int(&self, n: i64) {
        raw::reply_with_long_long(self.ctx, n);
    }

    /// A count, as an integer (capped at i64::MAX).
    pub fn count(&self, n: u64) {
        self.int(i64::try_from(n).unwrap_or(i64::MAX));
    }

    /// The bytes, or null.
    pub fn optional_bulk(&self, bytes: Option<&[u8]>) {
        match bytes {
            Some(b) => self.bulk(b),
            None => {
                raw::reply_with_null(self.ctx);
            }
        }
    }
}
