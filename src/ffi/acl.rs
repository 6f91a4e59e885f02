//! ACL: the calling user's key permissions, for the keys a command reaches
//! without naming them (REAP walks the keyspace on the module's authority,
//! so Redis checks nothing there for us), and the ACL categories of the
//! commands (Redis 7.2+ and Valkey 8+; the module's own `@unique` where the
//! server lets a module add one: Redis 8+ and Valkey 8+).

use std::ffi::{CStr, c_int};
use std::ptr::NonNull;

use redis_module::{Context, RedisString, raw};

/// An ACL user, looked up by name for the duration of one command or
/// callback: a user can be deleted at any time, so it is never kept.
pub struct AclUser(NonNull<raw::RedisModuleUser>);

/// Why the caller's ACL user could not be known.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NoCaller {
    /// The server lacks the API (`RM_GetClientUserNameById`, 7.0.3+).
    Unsupported,
    /// The command runs for a client that is no connection: a script, or a
    /// module's `RM_Call`. Redis gives modules no safe way to learn who is
    /// behind those (their user may be none at all, which Redis treats as
    /// unrestricted).
    NotAConnection,
}

/// The ACL user name of the connection whose command `ctx` runs.
pub fn caller_name(ctx: &Context) -> Result<Vec<u8>, NoCaller> {
    // SAFETY: `ctx` is a live command context; both functions only look
    // the client up. GetClientUserNameById returns NULL (errno ENOENT) for
    // a client that is not a connection (a script's or a module's fake
    // client) and for a client with no user; else a new string that we
    // free below.
    unsafe {
        let (Some(client_id), Some(user_name)) = (
            raw::RedisModule_GetClientId,
            raw::RedisModule_GetClientUserNameById,
        ) else {
            return Err(NoCaller::Unsupported);
        };
        let id = client_id(ctx.get_raw());
        if id == 0 {
            return Err(NoCaller::NotAConnection);
        }
        let name = user_name(ctx.get_raw(), id);
        if name.is_null() {
            return Err(NoCaller::NotAConnection);
        }
        let owned = RedisString::from_redis_module_string(ctx.get_raw(), name);
        Ok(owned.as_slice().to_vec())
    }
}

impl AclUser {
    /// The user named `name`; `None` when there is no such user (deleted
    /// meanwhile) or the server lacks the API.
    pub fn by_name(ctx: &Context, name: &[u8]) -> Option<Self> {
        let name = ctx.create_string(name);
        // SAFETY: `name` is a live string; the user returned is ours until
        // Drop frees it with FreeModuleUser.
        let user = unsafe { raw::RedisModule_GetModuleUserFromUserName.map(|f| f(name.inner)) }?;
        NonNull::new(user).map(Self)
    }

    /// The user of the connection whose command `ctx` runs.
    pub fn caller(ctx: &Context) -> Result<Option<Self>, NoCaller> {
        caller_name(ctx).map(|name| Self::by_name(ctx, &name))
    }

    /// Whether this user may write `key` (change or delete what it holds),
    /// as a command whose key spec says so would be checked. False when the
    /// server cannot tell (no API): nothing is done on the user's behalf.
    pub fn may_write(&self, key: &RedisString) -> bool {
        self.may(
            key,
            raw::REDISMODULE_CMD_KEY_UPDATE | raw::REDISMODULE_CMD_KEY_DELETE,
        )
    }

    /// Whether this user may read and update `key`, as UNIQUE.LOCK's key
    /// spec (RW update) asks.
    pub fn may_lock(&self, key: &RedisString) -> bool {
        self.may(
            key,
            raw::REDISMODULE_CMD_KEY_ACCESS | raw::REDISMODULE_CMD_KEY_UPDATE,
        )
    }

    fn may(&self, key: &RedisString, flags: u32) -> bool {
        let flags = flags as c_int;
        // SAFETY: the user is live (looked up in this command or callback,
        // freed only in Drop); `key` is a live string. The call only reads.
        let status = unsafe {
            raw::RedisModule_ACLCheckKeyPermissions.map(|f| f(self.0.as_ptr(), key.inner, flags))
        };
        status == Some(raw::REDISMODULE_OK as c_int)
    }
}

impl Drop for AclUser {
    fn drop(&mut self) {
        // SAFETY: the user came from GetModuleUserFromUserName and is freed
        // once; this frees our handle, not the server's user.
        unsafe {
            if let Some(f) = raw::RedisModule_FreeModuleUser {
                f(self.0.as_ptr());
            }
        }
    }
}

/// Adds the ACL category `name` (`ACL CAT` lists it). False when the server
/// has no such API (Redis before 8.0) or refused it. Only during the load.
pub fn add_acl_category(ctx: &Context, name: &CStr) -> bool {
    // SAFETY: `ctx` is the load context; `name` is a NUL-terminated string
    // that Redis copies.
    let status =
        unsafe { raw::RedisModule_AddACLCategory.map(|f| f(ctx.get_raw(), name.as_ptr())) };
    status == Some(raw::REDISMODULE_OK as c_int)
}

/// What [`set_acl_categories`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Categories {
    Set,
    /// The server has no ACL categories for module commands (Redis 7.0).
    Unsupported,
    Refused,
}

/// Puts command `name` (this module's) in the ACL categories `categories`
/// (space separated, without `@`). Only during the load.
pub fn set_acl_categories(ctx: &Context, name: &CStr, categories: &CStr) -> Categories {
    // SAFETY: reads a function pointer that RedisModule_Init set during the
    // load, before any other module code runs.
    let Some(set) = (unsafe { raw::RedisModule_SetCommandACLCategories }) else {
        return Categories::Unsupported;
    };
    // SAFETY: `ctx` is the load context and `name` a NUL-terminated string;
    // a NULL reply means not ours.
    let command = unsafe { raw::RedisModule_GetCommand.map(|f| f(ctx.get_raw(), name.as_ptr())) };
    let Some(command) = command.filter(|c| !c.is_null()) else {
        return Categories::Refused;
    };
    // SAFETY: `command` is this module's command, during the load;
    // `categories` is a NUL-terminated string that Redis parses and keeps
    // no pointer into.
    if unsafe { set(command, categories.as_ptr()) } == raw::REDISMODULE_OK as c_int {
        Categories::Set
    } else {
        Categories::Refused
    }
}
