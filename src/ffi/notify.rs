//! Keyspace notifications of the module's own events.

use std::ffi::CStr;

use redis_module::{Context, RedisString, raw};

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
