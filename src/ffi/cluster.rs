//! Server glue: the module options a server may or may not know, Valkey's
//! atomic slot migration events, the hash slot of a key, and whether the
//! server has paused writes.
//!
//! Valkey 9 refuses `CLUSTER MIGRATESLOTS` while a loaded module has not set
//! `VALKEYMODULE_OPTIONS_HANDLE_ATOMIC_SLOT_MIGRATION` (bit 5 of the module
//! options), and tells modules of each migration's steps with server event
//! 19. Neither is in `redis-module` 2.0.8, nor in Redis, where bit 5 and
//! event 19 may come to mean something else: so both are used only on
//! Valkey 9 or later.

use std::ffi::{c_int, c_void};
use std::sync::OnceLock;

use redis_module::{Context, raw};

/// `VALKEYMODULE_OPTIONS_SKIP_COMMAND_VALIDATION` (valkeymodule.h).
const SKIP_COMMAND_VALIDATION: c_int = 1 << 4;
/// `VALKEYMODULE_OPTIONS_HANDLE_ATOMIC_SLOT_MIGRATION` (valkeymodule.h).
const HANDLE_ATOMIC_SLOT_MIGRATION: c_int = 1 << 5;

/// `VALKEYMODULE_EVENT_ATOMIC_SLOT_MIGRATION` and its version (valkeymodule.h).
const ATOMIC_SLOT_MIGRATION_EVENT: raw::RedisModuleEvent =
    raw::RedisModuleEvent { id: 19, dataver: 1 };

/// A step of an atomic slot migration, as Valkey numbers its sub-events.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MigrationStep {
    ImportStarted,
    ExportStarted,
    ImportAborted,
    ExportAborted,
    ImportCompleted,
    ExportCompleted,
}

impl MigrationStep {
    fn from_subevent(subevent: u64) -> Option<Self> {
        Some(match subevent {
            0 => Self::ImportStarted,
            1 => Self::ExportStarted,
            2 => Self::ImportAborted,
            3 => Self::ExportAborted,
            4 => Self::ImportCompleted,
            5 => Self::ExportCompleted,
            _ => return None,
        })
    }
}

/// An inclusive range of hash slots.
pub type SlotRange = (u16, u16);

/// `ValkeyModuleSlotRange`.
#[repr(C)]
struct RawSlotRange {
    start: c_int,
    end: c_int,
}

/// `ValkeyModuleAtomicSlotMigrationInfoV1`: the job's name (a node-id-sized
/// hex string and its NUL) and its slot ranges.
#[repr(C)]
struct RawMigrationInfo {
    version: u64,
    job_name: [u8; 41],
    slot_ranges: *const RawSlotRange,
    num_slot_ranges: u32,
}

/// Sets the module options: `HANDLE_IO_ERRORS` everywhere (our rdb_load
/// checks every read, so a truncated RESTORE payload or RDB is an error
/// reply instead of a server abort), and on Valkey 9:
/// - the promise that this module handles atomic slot migration;
/// - no command lookup in `RM_Replicate` and `RM_EmitAOF`: the module only
///   ever replicates and emits `unique.apply`, its own registered command,
///   and `DEL`, so the lookup by name on every change (a new string, a hash,
///   a split) finds nothing new. Valkey still looks it up while a slot is being
///   exported, where it needs the command's key to route the effect.
///
/// Returns whether the server has atomic slot migration.
pub fn set_module_options(ctx: &Context) -> bool {
    let valkey_9 = has_atomic_slot_migration();
    let mut options = raw::REDISMODULE_OPTIONS_HANDLE_IO_ERRORS as c_int;
    if valkey_9 {
        options |= HANDLE_ATOMIC_SLOT_MIGRATION | SKIP_COMMAND_VALIDATION;
    }
    // SAFETY: `ctx` is the context of the module's load; SetModuleOptions
    // only stores the bits.
    unsafe {
        if let Some(set) = raw::RedisModule_SetModuleOptions {
            set(ctx.get_raw(), options);
        }
    }
    valkey_9
}

/// Valkey 9.0 or later. Valkey registers every API under `ValkeyModule_`
/// as well, and its `GetServerVersion` gives Valkey's own version (Redis
/// gives Redis's, which will pass 9.0 too). IsSubEventSupported cannot tell:
/// Valkey 9.1 answers no for the migration event it fires.
fn has_atomic_slot_migration() -> bool {
    /// The first Valkey with atomic slot migration: 9.0.0, as 0x00MMmmpp.
    const VALKEY_9: c_int = 0x0009_0000;
    let mut version_fn: *mut c_void = std::ptr::null_mut();
    // SAFETY: GetApi writes the function's address into `version_fn` when
    // the name exists (the name is a C string); that function, of type
    // `int (*)(void)` in valkeymodule.h, takes nothing and reads a constant.
    unsafe {
        let found = raw::RedisModule_GetApi.is_some_and(|get| {
            get(
                c"ValkeyModule_GetServerVersion".as_ptr(),
                (&raw mut version_fn).cast::<c_void>(),
            ) == raw::REDISMODULE_OK as c_int
        });
        if !found || version_fn.is_null() {
            return false;
        }
        let version: extern "C" fn() -> c_int = std::mem::transmute(version_fn);
        version() >= VALKEY_9
    }
}

/// What the module does at each step of a migration: its slot ranges.
pub type MigrationHandler = fn(&Context, MigrationStep, &[SlotRange]);

static HANDLER: OnceLock<MigrationHandler> = OnceLock::new();

/// Calls `handler` at each step of every atomic slot migration of this node.
/// Call once, at load, where [`set_module_options`] returned true.
pub fn subscribe_slot_migrations(ctx: &Context, handler: MigrationHandler) -> bool {
    if HANDLER.set(handler).is_err() {
        return false;
    }
    // SAFETY: `ctx` is the context of the module's load; the callback is an
    // `extern "C"` function of this module that lives as long as it.
    unsafe {
        raw::RedisModule_SubscribeToServerEvent.is_some_and(|subscribe| {
            subscribe(
                ctx.get_raw(),
                ATOMIC_SLOT_MIGRATION_EVENT,
                Some(on_migration),
            ) == raw::REDISMODULE_OK as c_int
        })
    }
}

extern "C" fn on_migration(
    ctx: *mut raw::RedisModuleCtx,
    _eid: raw::RedisModuleEvent,
    subevent: u64,
    data: *mut c_void,
) {
    let _ = std::panic::catch_unwind(|| {
        let Some(handler) = HANDLER.get() else {
            return;
        };
        let Some(step) = MigrationStep::from_subevent(subevent) else {
            return;
        };
        // SAFETY: for this event Valkey passes a live
        // ValkeyModuleAtomicSlotMigrationInfo (version 1, the one we asked
        // for) whose array holds `num_slot_ranges` ranges.
        let ranges: Vec<SlotRange> = unsafe {
            data.cast::<RawMigrationInfo>()
                .as_ref()
                .filter(|info| !info.slot_ranges.is_null())
                .map(|info| {
                    std::slice::from_raw_parts(info.slot_ranges, info.num_slot_ranges as usize)
                })
                .unwrap_or_default()
        }
        .iter()
        .filter_map(|r| Some((u16::try_from(r.start).ok()?, u16::try_from(r.end).ok()?)))
        .collect();
        handler(&Context::new(ctx), step, &ranges);
    });
}

/// The hash slot of `key`, as the server computes it (hash tags included).
pub fn key_slot(key: &[u8]) -> u16 {
    // SAFETY: a module string made from the bytes with no context (so ours
    // to free), read by ClusterKeySlot, then freed.
    unsafe {
        let (Some(create), Some(slot), Some(free)) = (
            raw::RedisModule_CreateString,
            raw::RedisModule_ClusterKeySlot,
            raw::RedisModule_FreeString,
        ) else {
            return 0;
        };
        let s = create(std::ptr::null_mut(), key.as_ptr().cast(), key.len());
        let n = slot(s);
        free(std::ptr::null_mut(), s);
        u16::try_from(n).unwrap_or(0)
    }
}

/// True while the server asks modules not to add to the replication stream:
/// `CLIENT PAUSE WRITE`, a manual failover, the end of a slot migration.
/// Writing then trips the server's own assertion (nothing may be propagated
/// during such a pause), so timers must wait until it ends.
pub fn writes_paused() -> bool {
    // SAFETY: AvoidReplicaTraffic takes no arguments and only reads state.
    unsafe { raw::RedisModule_AvoidReplicaTraffic.is_some_and(|f| f() != 0) }
}
