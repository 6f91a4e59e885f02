//! The thin layer over the Redis module API that `redis-module` 2.0.8 does not
//! wrap the way this module needs: typed access to a key of a module type
//! (its `WRONGTYPE` check, absolute expiry), the clock, RDB and digest I/O,
//! replication and AOF emission, blocked clients, key scans, cluster slots
//! and their migration, ACL users and categories. Every `unsafe` block of the crate lives here or in
//! the type callbacks of `datatype.rs`.
//!
//! The bottom of the Redis glue: it imports only the pure `codec`, `docs`
//! and `engine`, and calls up into nothing (the callbacks of a blocked
//! client are a [`BlockHandler`] given by the caller, the docs of the
//! commands are handed in by `lib.rs`).

mod acl;
mod alloc;
mod argv;
mod blocking;
mod cluster;
mod command_info;
mod entry;
mod io;
mod keys;
mod notify;
mod replication;
mod replication_all;
mod scan;
mod timers;

pub use acl::{AclUser, Categories, NoCaller, add_acl_category, caller_name, set_acl_categories};
pub use alloc::RedisAllocator;
pub use blocking::{BlockHandler, Blocked, Held, WaiterReply, block_client, unblock};
pub use cluster::{
    MigrationHandler, MigrationStep, SlotRange, key_slot, set_module_options,
    subscribe_slot_migrations, writes_paused,
};
pub use command_info::{describe_commands, has_module_configs, load_configs};
pub use entry::{EntryPoint, InPlace, WithArgs, create_command};
pub(crate) use entry::{args_entry_point, entry_point};
pub use io::{Digest, Rdb};
pub use keys::{ModuleKey, ValueType};
pub use notify::notify_module_event;
pub(crate) use replication::{emit_aof_hold, emit_aof_rate};
pub use replication::{replicate_delete, replicate_effect, replicate_hold};
pub use replication_all::{replicate_hold_all, replicate_release_all};
pub use scan::ScanCursor;
pub use timers::{TimerHandler, TimerId, arm_timer, stop_timer};

use redis_module::{Context, raw};

/// The server's wall clock, unix ms.
pub fn now_ms() -> i64 {
    // SAFETY: RedisModule_Milliseconds takes no arguments and only reads the
    // clock; the pointer is set by RedisModule_Init before any command runs.
    unsafe { raw::RedisModule_Milliseconds.map_or(0, |f| f()) }
}

/// The time of the command being run, unix ms: the clock Redis reads as a
/// command starts and keeps for all it does (as it expires its own keys by),
/// so a command sees one instant, and so do the commands of a MULTI/EXEC,
/// without reading the clock again (a script's commands see it as Redis
/// refreshes it while the script runs). Only a command may ask: elsewhere (a
/// timer, a waiter served later) that time is the last command's. Servers
/// before Redis 7.2 do not share it: there, the clock.
pub fn command_now_ms() -> i64 {
    // SAFETY: CachedMicroseconds takes no arguments and only reads the
    // server's cached time; RedisModule_Init sets the pointer where the
    // server has the call and leaves it `None` where it does not.
    match unsafe { raw::RedisModule_CachedMicroseconds.map(|f| f()) } {
        Some(us) => us.div_euclid(1000),
        None => now_ms(),
    }
}

/// Selects database `db` for the keys `ctx` opens next; false when there is
/// no such database.
pub fn select_db(ctx: &Context, db: i32) -> bool {
    // SAFETY: `ctx` is a live context; SelectDb only checks the index.
    let status = unsafe { raw::RedisModule_SelectDb.map(|f| f(ctx.get_raw(), db)) };
    status == Some(raw::REDISMODULE_OK as i32)
}

/// The database `ctx` works on.
pub fn selected_db(ctx: &Context) -> i32 {
    // SAFETY: `ctx` is a live context.
    unsafe { raw::RedisModule_GetSelectedDb.map_or(0, |f| f(ctx.get_raw())) }
}
