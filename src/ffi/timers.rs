//! Module timers that carry a number.

use std::ffi::c_void;

use redis_module::{Context, raw};

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
