//! UNIQUE.REAP cursor [COUNT n] [OWNER id]
//!
//! Cleans up a bounded step at a time, like SCAN, whose cursor it uses: a full
//! iteration reaches every lock that existed for its whole duration, and a
//! call examines at most COUNT lock keys (see `batches`).
//!
//! REAP names no key, so Redis checks no key permission for it: it acts only
//! on the locks the calling user may write (`~pattern` or `%W~pattern`), and
//! skips the others, which it counts as examined but never as removed
//! (`INFO unique`'s `unique_reap_keys_denied` counts them). The background
//! reaper and the replicated effects act on the module's own authority and
//! check nothing.

use std::sync::atomic::{AtomicU64, Ordering};

use redis_module::{Context, RedisError, RedisResult, RedisString, RedisValue};

use super::decisions::InRedis;
use super::{ArgError, Change, finish, is_keyword, parse_int, prune_expired, tracked};
use crate::datatype::LockKey;
use crate::engine::validate_owner;
use crate::ffi::{AclUser, NoCaller, command_now_ms};
use crate::logging;
use crate::metrics::{self, Event};

super::command!(with_args run);

const DEFAULT_COUNT: usize = 100;

/// Lock keys that REAP skipped because its caller may not write them.
static KEYS_DENIED: AtomicU64 = AtomicU64::new(0);

/// How many lock keys REAP skipped, since the start, because its caller may
/// not write them (`INFO unique`'s `unique_reap_keys_denied`).
pub fn keys_denied() -> u64 {
    KEYS_DENIED.load(Ordering::Relaxed)
}

/// REAP's answer when it cannot learn the caller's ACL user.
const NO_CALLER: &str = "ERR UNIQUE.REAP checks the key permissions of the connection that \
     calls it, which a script or a module's call does not say: call it directly";

pub fn run(ctx: &Context, args: Vec<RedisString>) -> RedisResult {
    let [_, cursor, options @ ..] = args.as_slice() else {
        return Err(RedisError::WrongArity);
    };
    let cursor = std::str::from_utf8(cursor)
        .ok()
        .filter(|c| c.parse::<u64>().is_ok())
        .ok_or(RedisError::Str("ERR invalid cursor"))?;
    let (count, owner) = parse_options(options)?;
    // `None`: the caller's user went meanwhile, and may write nothing.
    let caller = AclUser::caller(ctx).map_err(|e| match e {
        NoCaller::NotAConnection => RedisError::Str(NO_CALLER),
        NoCaller::Unsupported => RedisError::Str(
            "ERR UNIQUE.REAP needs a server that tells modules their caller's ACL user (Redis 7.0.3+)",
        ),
    })?;
    let now = command_now_ms();

    let mut cursor = cursor.to_string();
    let (mut removed, mut denied) = (0, 0);
    for keys in batches(ctx, &mut cursor, count)? {
        for name in &keys {
            let name = ctx.create_string(name.as_slice());
            if caller.as_ref().is_some_and(|user| user.may_write(&name)) {
                removed += reap_key(ctx, &name, now, owner);
            } else {
                denied += 1;
            }
        }
    }
    KEYS_DENIED.fetch_add(denied, Ordering::Relaxed);
    Ok(RedisValue::Array(vec![
        RedisValue::BulkString(cursor),
        RedisValue::Integer(removed as i64),
    ]))
}

/// The lock keys to examine in this call, at most `count`, moving `cursor`
/// past them. One `SCAN cursor COUNT count` is tried first: it examines about
/// `count` keys of any type and usually returns at most `count` locks. When
/// it returns more (its last hash bucket held several), that batch is
/// dropped and the same stretch is walked again one bucket at a time, with
/// SCAN's stable cursor, stopping before the bucket that would go past
/// `count`. A single bucket alone larger than `count` is taken whole, so the
/// iteration always moves on.
fn batches(
    ctx: &Context,
    cursor: &mut String,
    count: usize,
) -> Result<Vec<Vec<Vec<u8>>>, RedisError> {
    let (next, keys) = scan_step(ctx, cursor, count)?;
    if keys.len() <= count {
        *cursor = next;
        return Ok(vec![keys]);
    }
    let (mut examined, mut out) = (0, Vec::new());
    // Each step examines at least one key of any type: `count` steps bound
    // the work even in a database of other keys.
    for _ in 0..count {
        let (next, keys) = scan_step(ctx, cursor, 1)?;
        if examined > 0 && examined + keys.len() > count {
            break; // this bucket is the next call's
        }
        examined += keys.len();
        out.push(keys);
        *cursor = next;
        if cursor == "0" || examined >= count {
            break;
        }
    }
    Ok(out)
}

fn parse_options(options: &[RedisString]) -> Result<(usize, Option<&[u8]>), ArgError> {
    let (mut count, mut owner) = (None, None);
    let mut rest = options.iter();
    while let Some(name) = rest.next() {
        let value: &[u8] = rest.next().ok_or(ArgError::Syntax)?;
        if is_keyword(name, b"COUNT") && count.is_none() {
            let n = parse_int(value)?;
            count = Some(
                usize::try_from(n)
                    .ok()
                    .filter(|&n| n >= 1)
                    .ok_or(ArgError::NotAnInteger)?,
            );
        } else if is_keyword(name, b"OWNER") && owner.is_none() {
            validate_owner(value)?;
            owner = Some(value);
        } else {
            return Err(ArgError::Syntax);
        }
    }
    Ok((count.unwrap_or(DEFAULT_COUNT), owner))
}

/// One SCAN over the lock keys of the current database: the next cursor and
/// the keys found.
fn scan_step(
    ctx: &Context,
    cursor: &str,
    count: usize,
) -> Result<(String, Vec<Vec<u8>>), RedisError> {
    let count = count.to_string();
    let reply = ctx.call("SCAN", &[cursor, "COUNT", &count, "TYPE", "uniq-lock"])?;
    let bytes = |v: &RedisValue| match v {
        RedisValue::BulkString(s) | RedisValue::SimpleString(s) => Some(s.as_bytes().to_vec()),
        RedisValue::StringBuffer(b) => Some(b.clone()),
        _ => None,
    };
    match &reply {
        RedisValue::Array(parts) => match parts.as_slice() {
            [next, RedisValue::Array(keys)] => {
                let next = bytes(next).and_then(|b| String::from_utf8(b).ok());
                let keys = keys.iter().filter_map(bytes).collect();
                next.map(|n| (n, keys))
                    .ok_or(RedisError::Str("ERR unexpected SCAN reply"))
            }
            _ => Err(RedisError::Str("ERR unexpected SCAN reply")),
        },
        _ => Err(RedisError::Str("ERR unexpected SCAN reply")),
    }
}

/// Removes the holders of one lock whose lease ran out and, with `owner`,
/// every holder of that owner; replicates, notifies and counts what it did.
/// Returns how many holders it removed. Not a lock (any more): 0.
pub fn reap_key(ctx: &Context, name: &RedisString, now: i64, owner: Option<&[u8]>) -> usize {
    let Some(mut key) = LockKey::open(ctx, name, true) else {
        return 0;
    };
    let Ok(Some(lock)) = key.lock_mut() else {
        return 0;
    };
    let (expired, reaped) = tracked(lock, |lock| {
        let expired = prune_expired(lock, now, &mut InRedis);
        let reaped = owner.map_or(0, |owner| {
            lock.remove_owner_each(owner, |h| {
                metrics::record(now, Some(h.lock_type()), Event::Reaped);
            })
        });
        (expired, reaped)
    });
    if expired + reaped == 0 {
        return 0;
    }
    let change = match owner {
        Some(owner) if reaped > 0 => Change::Reap(owner),
        _ => Change::PruneOnly,
    };
    let line = || {
        let key = name.as_slice().escape_ascii();
        match owner.filter(|_| reaped > 0) {
            Some(owner) => format!(
                "reaped {key}: {expired} ended leases, {reaped} holders of owner {}",
                owner.escape_ascii()
            ),
            None => format!("reaped {key}: {expired} ended leases"),
        }
    };
    if reaped > 0 {
        logging::verbose(ctx, line);
    } else {
        logging::debug(ctx, line);
    }
    // The lock is ours and open: finishing cannot fail.
    if let Ok(freed) = finish(ctx, name, key, now, expired, change) {
        freed.serve_waiters(ctx, name);
    }
    expired + reaped
}
