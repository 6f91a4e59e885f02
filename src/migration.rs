//! Valkey's atomic slot migration (`CLUSTER MIGRATESLOTS`): what the module
//! does at each step.
//!
//! Valkey copies slots to their new owner in two parts, both run on the
//! target by an import client that counts as replicated: a snapshot (our
//! type's AOF rewrite, one `unique.apply ... HOLD` per holder, with absolute
//! times and tokens) and then the stream of the slots' writes (the
//! `unique.apply` effects this module replicates). Ownership flips at the
//! end. Most rules hold by construction:
//!
//! - until the flip, the target hides the importing slots from SCAN, so the
//!   reaper and `UNIQUE.REAP` never see their keys, and no client reaches
//!   them (the source still owns the slots and answers); wake-ups are armed
//!   only for waiters, and waiters wait on the source;
//! - what the source grants, renews or prunes meanwhile goes to the target
//!   as the same `unique.apply` a replica gets; every token replayed raises
//!   the target's counter, so tokens keep rising after the flip;
//! - a cancelled or failed import deletes the imported keys, which takes
//!   them out of the gauges like any deletion.
//!
//! What this file adds:
//!
//! - waiters on the source: Valkey redirects the clients it blocked on keys
//!   once their slot has moved. Ours wait in the module's own queues, so at
//!   the end of an export each waiter on a key of the moved slots gets the
//!   same `-MOVED slot host:port` (never a grant there, nor a hang);
//! - counters: keys that leave because their slots moved (the source, after
//!   the flip) or because an import failed (the target) were not expired:
//!   `moving_slots` keeps the slots in flight for the type's `unlink2`.

use redis_module::{Context, RedisValue};

use crate::ffi::{self, MigrationStep, SlotRange};
use crate::moving_slots::{self, SlotSet};
use crate::waiting;

/// Follows every atomic slot migration of this node (Valkey 9 and later):
/// call once at load.
pub fn start(ctx: &Context) {
    if !ffi::subscribe_slot_migrations(ctx, on_step) {
        ctx.log_warning("could not follow atomic slot migrations: waiters will not be redirected");
    }
}

fn on_step(ctx: &Context, step: MigrationStep, ranges: &[SlotRange]) {
    ctx.log_notice(&format!("atomic slot migration: {step:?} {ranges:?}"));
    match step {
        MigrationStep::ImportStarted => moving_slots::import_started(ranges),
        MigrationStep::ImportCompleted | MigrationStep::ImportAborted => {
            moving_slots::import_ended(ranges);
        }
        MigrationStep::ExportCompleted => moving_slots::moved_away(ranges),
        MigrationStep::ExportStarted | MigrationStep::ExportAborted => {}
    }
    if step == MigrationStep::ExportCompleted {
        let mut moved = SlotSet::default();
        moved.set(ranges, true);
        // The owners are looked up once, and only if a waiter has to move.
        let mut owners = None;
        waiting::redirect(
            ctx,
            |key| moved.contains(ffi::key_slot(key)),
            |key| {
                redirect_to(
                    owners.get_or_insert_with(|| slot_owners(ctx)),
                    ffi::key_slot(key),
                )
            },
        );
    }
}

/// The slot ranges of the cluster and the address of each one's primary,
/// from `CLUSTER SLOTS`.
fn slot_owners(ctx: &Context) -> Vec<(SlotRange, String)> {
    let Ok(RedisValue::Array(ranges)) = ctx.call("CLUSTER", &["SLOTS"][..]) else {
        return Vec::new();
    };
    ranges
        .iter()
        .filter_map(|range| {
            let RedisValue::Array(fields) = range else {
                return None;
            };
            let [
                RedisValue::Integer(start),
                RedisValue::Integer(end),
                RedisValue::Array(primary),
                ..,
            ] = fields.as_slice()
            else {
                return None;
            };
            let [host, RedisValue::Integer(port), ..] = primary.as_slice() else {
                return None;
            };
            let host = match host {
                RedisValue::SimpleString(s) => s.clone(),
                RedisValue::BulkString(s) => s.clone(),
                RedisValue::StringBuffer(b) => String::from_utf8_lossy(b).into_owned(),
                _ => return None,
            };
            let range = (u16::try_from(*start).ok()?, u16::try_from(*end).ok()?);
            Some((range, format!("{host}:{port}")))
        })
        .collect()
}

/// The redirect of a client waiting on a key of `slot`, as the server gives
/// its own blocked clients: to the slot's owner, or "not served" when it
/// has none.
fn redirect_to(owners: &[(SlotRange, String)], slot: u16) -> String {
    owners
        .iter()
        .find(|((start, end), _)| (*start..=*end).contains(&slot))
        .map_or_else(
            || "CLUSTERDOWN Hash slot not served".to_owned(),
            |(_, address)| format!("MOVED {slot} {address}"),
        )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_waiter_is_sent_to_the_slots_owner_or_told_it_has_none() {
        let owners = vec![
            ((0, 100), "127.0.0.1:7001".to_owned()),
            ((101, 16383), "127.0.0.1:7000".to_owned()),
        ];
        assert_eq!(redirect_to(&owners, 42), "MOVED 42 127.0.0.1:7001");
        assert_eq!(redirect_to(&owners, 101), "MOVED 101 127.0.0.1:7000");
        assert_eq!(
            redirect_to(&owners[..1], 200),
            "CLUSTERDOWN Hash slot not served"
        );
    }
}
