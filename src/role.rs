//! Whether this server is a primary, for code that runs without a command
//! context (the type callbacks). Kept up to date by the role-change server
//! event and checked at load.
//!
//! Also the one safety advice the module can give about the server's own
//! configuration: a primary with replicas and no `min-replicas-to-write`
//! keeps granting locks when a partition cuts it off from them (see
//! docs/operations.md), so it says so in the log, once each time the
//! condition starts to hold (checked soon after the load, on becoming a
//! primary, and every [`ADVICE_EVERY`]).

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use redis_module::{Context, ContextFlags, RedisValue};

static PRIMARY: AtomicBool = AtomicBool::new(true);

pub fn is_primary() -> bool {
    PRIMARY.load(Ordering::Relaxed)
}

pub fn set_primary(primary: bool) {
    PRIMARY.store(primary, Ordering::Relaxed);
}

pub fn refresh(ctx: &Context) {
    set_primary(!ctx.get_flags().contains(ContextFlags::SLAVE));
}

/// How often the advice is looked at again (replicas come and go without an
/// event the module sees cheaply).
pub const ADVICE_EVERY: Duration = Duration::from_secs(10);

/// Whether the advice was logged and still holds.
static ADVISED: AtomicBool = AtomicBool::new(false);

/// The advice for a primary with `replicas` replicas and
/// `min-replicas-to-write` at `min_replicas`: `None` when it is safe.
pub fn advice(primary: bool, replicas: i64, min_replicas: i64) -> Option<String> {
    (primary && replicas > 0 && min_replicas == 0).then(|| {
        format!(
            "this primary has {replicas} replica(s) and min-replicas-to-write 0: cut off from them by \
             a network partition, it keeps granting locks until Sentinel or the cluster makes it a \
             replica, and those grants are lost at the heal. Fencing tokens keep its holders' \
             writes out of a fenced resource, but the lock itself is held twice. Set \
             min-replicas-to-write 1 and min-replicas-max-lag 1 (it then refuses with NOREPLICAS \
             within about two seconds); see docs/operations.md"
        )
    })
}

/// Looks at the advice now, and again every [`ADVICE_EVERY`].
pub fn start_advice(ctx: &Context) {
    ctx.create_timer(Duration::ZERO, advise_and_repeat, ());
}

fn advise_and_repeat(ctx: &Context, (): ()) {
    advise(ctx);
    ctx.create_timer(ADVICE_EVERY, advise_and_repeat, ());
}

/// Looks at the advice from a timer, outside the event or command that
/// changed the role.
pub fn advise_soon(ctx: &Context) {
    ctx.create_timer(Duration::ZERO, |ctx: &Context, ()| advise(ctx), ());
}

/// Logs the advice if it newly holds (from a timer, not inside a command).
fn advise(ctx: &Context) {
    let replicas = info_number(ctx, "connected_slaves").unwrap_or(0);
    let min_replicas = config_number(ctx, "min-replicas-to-write").unwrap_or(0);
    match advice(is_primary(), replicas, min_replicas) {
        Some(line) => {
            if !ADVISED.swap(true, Ordering::Relaxed) {
                ctx.log_warning(&line);
            }
        }
        None => ADVISED.store(false, Ordering::Relaxed),
    }
}

fn config_number(ctx: &Context, name: &str) -> Option<i64> {
    let Ok(RedisValue::Array(reply)) = ctx.call("CONFIG", &["GET", name][..]) else {
        return None;
    };
    let text = match reply.get(1)? {
        RedisValue::SimpleString(s) => s.clone(),
        RedisValue::BulkString(s) => s.clone(),
        RedisValue::StringBuffer(b) => String::from_utf8_lossy(b).into_owned(),
        _ => return None,
    };
    text.trim().parse().ok()
}

fn info_number(ctx: &Context, field: &str) -> Option<i64> {
    let text = match ctx.call("INFO", &["replication"][..]).ok()? {
        RedisValue::SimpleString(s) | RedisValue::BulkString(s) => s,
        RedisValue::StringBuffer(b) => String::from_utf8_lossy(&b).into_owned(),
        RedisValue::VerbatimString((_, b)) => String::from_utf8_lossy(&b).into_owned(),
        _ => return None,
    };
    text.lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|v| v.trim().parse().ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_primary_with_replicas_and_no_min_replicas_is_advised() {
        let line = advice(true, 2, 0).expect("advised");
        assert!(line.contains("2 replica(s)") && line.contains("min-replicas-to-write 1"));
        assert_eq!(
            advice(true, 0, 0),
            None,
            "no replicas: nothing to be cut off from"
        );
        assert_eq!(advice(true, 2, 1), None, "configured");
        assert_eq!(advice(false, 2, 0), None, "a replica grants nothing");
    }
}
