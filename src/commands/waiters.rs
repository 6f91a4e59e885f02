//! UNIQUE.WAITERS key \[GROUPS\]

use std::collections::BTreeMap;

use redis_module::{Context, RedisError, RedisResult, RedisString, RedisValue};

use super::reply::Stream;
use super::{ArgError, is_keyword};
use crate::datatype::LockKey;
use crate::engine::GroupName;
use crate::ffi::command_now_ms;
use crate::waiting;

super::command!(with_args run);

/// How many clients wait in `LOCK ... WAIT` on the key, in its queue: what a
/// dashboard shows beside the holders. A missing key has a count (0, or the
/// clients still queued for a lock that just went); a key of another type is
/// WRONGTYPE, as for every other command of the module.
///
/// With GROUPS: per group that waits or holds on the key (no group first,
/// then by name, bytewise), how many wait and how many live holders it has.
/// Read-only, so right on a replica (where nobody waits).
pub fn run(ctx: &Context, args: Vec<RedisString>) -> RedisResult {
    let (key, groups) = match args.as_slice() {
        [_, key] => (key, false),
        [_, key, option] if is_keyword(option, b"GROUPS") => (key, true),
        [_, _, _] => return Err(ArgError::Syntax.into()),
        _ => return Err(RedisError::WrongArity),
    };
    let opened = LockKey::open(ctx, key, false);
    let lock = match &opened {
        Some(opened) => opened.lock()?,
        None => None,
    };
    if !groups {
        let n = waiting::waiting_on(ctx, key);
        return Ok(RedisValue::Integer(i64::try_from(n).unwrap_or(i64::MAX)));
    }
    // group -> (waiting, holding), in the order of the reply.
    let mut rows: BTreeMap<Option<GroupName>, (usize, usize)> = BTreeMap::new();
    for (group, n) in waiting::waiting_by_group(ctx, key) {
        rows.entry(group).or_default().0 = n;
    }
    let now = command_now_ms();
    for (group, n) in lock.into_iter().flat_map(|l| l.live_by_group(now)) {
        rows.entry(group.map(Into::into)).or_default().1 = n;
    }
    let reply = Stream::new(ctx);
    reply.array(rows.len());
    for (group, (waiting, holding)) in rows {
        reply.map(3);
        reply.bulk(b"group");
        reply.optional_bulk(group.as_deref());
        reply.bulk(b"waiting");
        reply.int(i64::try_from(waiting).unwrap_or(i64::MAX));
        reply.bulk(b"holding");
        reply.int(i64::try_from(holding).unwrap_or(i64::MAX));
    }
    Ok(RedisValue::NoReply)
}
