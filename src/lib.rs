//! redis-unique: native job locks for Redis.
//!
//! This file only registers things with Redis. The lock rules live in
//! `engine/`, the commands in `commands/` (what they decide in
//! `commands/decisions.rs`), the waiting clients in `waiting.rs`, the data
//! type in `datatype.rs`.

pub mod codec;
pub mod commands;
pub mod config;
pub mod datatype;
pub mod docs;
pub mod engine;
pub mod fencing;
pub mod ffi;
pub mod logging;
pub mod metrics;
pub mod migration;
pub mod moving_slots;
pub mod reaper;
pub mod role;
pub mod version;
pub mod waiting;

use redis_module::server_events::{FlushSubevent, ServerRole};
use redis_module::{
    Context, InfoContext, NotifyEvent, RedisResult, RedisString, Status, redis_module,
};
use redis_module_macros::{
    config_changed_event_handler, flush_event_handler, info_command_handler,
    role_changed_event_handler,
};

use redis_module::configuration::{ConfigurationFlags, register_i64_configuration};

use crate::datatype::LOCK_TYPE;

// Redis's allocator, so that Redis accounts for our memory; unit tests and
// the fuzz targets (feature `system-alloc`) run outside Redis, where it does
// not exist.
#[cfg(not(any(test, feature = "system-alloc")))]
type Allocator = ffi::RedisAllocator;
#[cfg(not(any(test, feature = "system-alloc")))]
const ALLOCATOR: Allocator = ffi::RedisAllocator;
#[cfg(any(test, feature = "system-alloc"))]
type Allocator = std::alloc::System;
#[cfg(any(test, feature = "system-alloc"))]
const ALLOCATOR: Allocator = std::alloc::System;

fn init(ctx: &Context, args: &[RedisString]) -> Status {
    // The `unique.*` configuration, from the module arguments, redis.conf
    // and MODULE LOADEX; a bad one fails the load (and a server start).
    if load_config(ctx, args) == Status::Err {
        return Status::Err;
    }
    // Every command, from the one table of them (commands::REGISTRY).
    for command in &commands::REGISTRY {
        let Ok(flags) = std::ffi::CString::new(command.flags()) else {
            return Status::Err;
        };
        let name = command.name();
        if !ffi::create_command(ctx, &name, command.entry, &flags, command.keys()) {
            ctx.log_warning(&format!("could not register {name:?}"));
            return Status::Err;
        }
    }
    ffi::describe_commands(
        ctx,
        commands::REGISTRY
            .iter()
            .filter_map(commands::Registration::doc),
    );
    commands::set_acl_categories(ctx);
    // I/O errors handled, and Valkey's atomic slot migration where the
    // server has it (it refuses CLUSTER MIGRATESLOTS until every module
    // says it handles it).
    if ffi::set_module_options(ctx) {
        migration::start(ctx);
    }
    role::refresh(ctx);
    role::start_advice(ctx);
    reaper::start(ctx);
    logging::start(ctx);
    Status::Ok
}

/// Registers the options with Redis, the module arguments giving their
/// defaults, then applies what redis.conf or MODULE LOADEX set (which wins).
/// On an error it logs one line saying why and returns `Err`: the module
/// must then fail to load.
fn load_config(ctx: &Context, args: &[RedisString]) -> Status {
    let raw: Vec<&[u8]> = args.iter().map(|a| a.as_slice()).collect();
    let given = match config::parse_args(&raw) {
        Ok(given) => given,
        Err(e) => {
            ctx.log_warning(&e);
            return Status::Err;
        }
    };
    if !ffi::has_module_configs() {
        ctx.log_warning("this server has no module configuration API (Redis 7.0 or later needed)");
        return Status::Err;
    }
    for option in config::ALL {
        let default = given
            .iter()
            .find(|(n, _)| std::ptr::eq(*n, option))
            .map_or(option.default, |(_, v)| *v);
        register_i64_configuration(
            ctx,
            option.name,
            &option.value,
            default,
            option.min,
            option.max,
            ConfigurationFlags::DEFAULT,
            None,
        );
    }
    if !ffi::load_configs(ctx) {
        ctx.log_warning("a unique.* setting of the configuration was refused (see the line above)");
        return Status::Err;
    }
    Status::Ok
}

#[config_changed_event_handler]
fn config_changed(ctx: &Context, names: &[&str]) {
    logging::config_changed(ctx, names);
}

#[role_changed_event_handler]
fn role_changed(ctx: &Context, role: ServerRole) {
    let primary = matches!(role, ServerRole::Primary);
    role::set_primary(primary);
    if primary {
        // Tokens of this new primary go above those the one it replaces may
        // still grant, cut off (see fencing.rs).
        let counter = fencing::promote(ffi::now_ms());
        ctx.log_notice(&format!(
            "became a primary: fencing tokens from {} on, above every token the replaced primary grants within {} s",
            counter.saturating_add(1),
            fencing::PROMOTION_BOUND_MS / 1000
        ));
        role::advise_soon(ctx);
    }
}

/// A key left the keyspace: if clients wait on it, their slot is free.
fn key_gone(ctx: &Context, _class: NotifyEvent, event: &str, key: &[u8]) {
    if matches!(event, "del" | "evicted" | "expired") && waiting::waiting() > 0 {
        waiting::key_gone(ctx, ffi::selected_db(ctx), key);
    }
}

#[flush_event_handler]
fn flushed(ctx: &Context, event: FlushSubevent) {
    if matches!(event, FlushSubevent::Ended) && waiting::waiting() > 0 {
        waiting::flushed(ctx);
    }
}

/// The `unique` INFO section: the gauges and the total of every counter.
/// (An empty section name gives the section the module's name; Redis
/// prefixes each field with it: `unique_locks`, `unique_acquired`...)
#[info_command_handler]
fn info(ctx: &InfoContext, _for_crash_report: bool) -> RedisResult<()> {
    let report = metrics::report(ffi::now_ms(), None);
    let mut section = ctx
        .builder()
        .add_section("")
        .field("locks", report.locks)?
        .field("holders", report.holders)?
        .field("waiting", waiting::waiting() as i64)?
        .field("timers_armed", waiting::timers_armed() as i64)?;
    for (name, n) in report.total.named() {
        section = section.field(name, i64::try_from(n).unwrap_or(i64::MAX))?;
    }
    let (last, max) = reaper::tick_micros();
    let (ticks, keys) = reaper::work_done();
    section = section
        .field("reaper_last_tick_usec", last)?
        .field("reaper_max_tick_usec", max)?
        .field("reaper_ticks", ticks)?
        .field("reaper_keys_scanned", keys)?
        .field("reap_keys_denied", commands::reap::keys_denied())?;
    section.build_section()?.build_info()?;
    Ok(())
}

redis_module! {
    name: "unique",
    version: version::MODULE_VERSION,
    allocator: (Allocator, ALLOCATOR),
    data_types: [LOCK_TYPE],
    init: init,
    commands: [],
    event_handlers: [
        [@GENERIC @EVICTED @EXPIRED: key_gone],
    ],
}
