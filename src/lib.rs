//! redis-unique: native job locks for Redis.
//!
//! This file only registers things with Redis. The lock rules live in
//! `lock.rs`, the commands in `commands/`, the data type in `datatype.rs`.

pub mod codec;
pub mod commands;
pub mod config;
pub mod datatype;
pub mod fencing;
pub mod ffi;
pub mod lock;

use redis_module::configuration::ConfigurationFlags;
use redis_module::{Context, ModuleOptions, RedisString, Status, redis_module};

use crate::commands::guard;
use crate::datatype::LOCK_TYPE;

// Redis's allocator, so that Redis accounts for our memory; unit tests run
// outside Redis, where it does not exist.
#[cfg(not(test))]
type Allocator = redis_module::alloc::RedisAlloc;
#[cfg(not(test))]
const ALLOCATOR: Allocator = redis_module::alloc::RedisAlloc;
#[cfg(test)]
type Allocator = std::alloc::System;
#[cfg(test)]
const ALLOCATOR: Allocator = std::alloc::System;

fn init(ctx: &Context, _args: &[RedisString]) -> Status {
    // Our rdb_load checks every read, so a truncated RESTORE payload or RDB is
    // an error reply instead of a server abort.
    ctx.set_module_options(ModuleOptions::HANDLE_IO_ERRORS);
    Status::Ok
}

redis_module! {
    name: "unique",
    version: 1,
    allocator: (Allocator, ALLOCATOR),
    data_types: [LOCK_TYPE],
    init: init,
    commands: [
        ["unique.lock", |ctx, args| guard(ctx, args, commands::lock::run), "write deny-oom fast", 1, 1, 1, ""],
        ["unique.unlock", |ctx, args| guard(ctx, args, commands::unlock::run), "write fast", 1, 1, 1, ""],
        ["unique.lockedby", |ctx, args| guard(ctx, args, commands::lockedby::run), "readonly fast", 1, 1, 1, ""],
        ["unique.apply", |ctx, args| guard(ctx, args, commands::apply::run), "write", 1, 1, 1, ""],
    ],
    configurations: [
        i64: [
            ["max-meta-bytes", &config::MAX_META_BYTES, config::MAX_META_BYTES_DEFAULT, 0, config::MAX_META_BYTES_MAX, ConfigurationFlags::DEFAULT, None],
        ],
        string: [],
        bool: [],
        enum: [],
        module_args_as_configuration: true,
    ]
}
