//! One file per command: parse, call the engine, reply, then the side effects
//! (replication, keyspace event) in one place, only when something changed.

pub mod apply;
pub mod docs;
pub mod lock;
pub mod lockedby;
pub mod metrics;
pub mod reap;
pub mod unlock;

use std::panic::{AssertUnwindSafe, catch_unwind};

use redis_module::{Context, RedisError, RedisResult, RedisString};

use crate::ffi::LockKey;
use crate::lock::{Lock, LockError};
use crate::metrics as counters;

/// The signature of every command handler.
pub type Handler = fn(&Context, Vec<RedisString>) -> RedisResult;

/// Runs a handler so that a panic becomes an error reply instead of taking
/// the server down.
pub fn guard(ctx: &Context, args: Vec<RedisString>, handler: Handler) -> RedisResult {
    catch_unwind(AssertUnwindSafe(|| handler(ctx, args))).unwrap_or_else(|_| {
        Err(RedisError::Str(
            "ERR internal error in the unique module (a bug: see the server log)",
        ))
    })
}

// Not through std::error::Error: redis-module's blanket conversion would add a
// second "ERR " to texts that already carry their code.
impl From<LockError> for RedisError {
    fn from(e: LockError) -> Self {
        RedisError::String(e.to_string())
    }
}

/// An integer argument, as Redis parses one.
pub fn parse_int(arg: &[u8]) -> Result<i64, LockError> {
    std::str::from_utf8(arg)
        .ok()
        .and_then(|s| s.parse().ok())
        .ok_or(LockError::NotAnInteger)
}

/// Brings the key in line with its lock after a change: the key goes when its
/// last holder goes, and otherwise expires with its latest lease.
fn settle(key: &mut LockKey) -> Result<(), RedisError> {
    let (empty, expiry) = match key.lock()? {
        Some(lock) => (lock.is_empty(), lock.key_expiry()),
        None => return Ok(()),
    };
    if empty {
        key.delete();
    } else {
        key.set_expire_at(expiry);
    }
    Ok(())
}

/// Runs a change on a lock and keeps the holders gauge in step with it.
fn tracked<T>(lock: &mut Lock, change: impl FnOnce(&mut Lock) -> T) -> T {
    let before = lock.len();
    let out = change(lock);
    counters::holders_changed(before, lock.len());
    out
}

/// Keyspace events of this module (class `d`, module events).
pub mod events {
    /// A new holder.
    pub const LOCK: &str = "unique.lock";
    /// UNLOCK removed a holder.
    pub const UNLOCK: &str = "unique.unlock";
    /// A lease ran out and the holder was removed.
    pub const EXPIRE: &str = "unique.expire";
    /// REAP OWNER removed a holder.
    pub const REAP: &str = "unique.reap";
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_panicking_handler_becomes_an_error_reply() {
        fn boom(_: &Context, _: Vec<RedisString>) -> RedisResult {
            panic!("bug")
        }
        match guard(&Context::dummy(), Vec::new(), boom) {
            Err(e) => assert!(e.to_string().starts_with("ERR internal error")),
            Ok(v) => panic!("expected an error, got {v:?}"),
        }
    }

    #[test]
    fn integers() {
        assert_eq!(parse_int(b"-42"), Ok(-42));
        assert_eq!(parse_int(b"9223372036854775807"), Ok(i64::MAX));
        for bad in [
            &b""[..],
            b"1.5",
            b"abc",
            b" 1",
            b"9223372036854775808",
            b"\xff",
        ] {
            assert_eq!(parse_int(bad), Err(LockError::NotAnInteger), "{bad:?}");
        }
    }
}
