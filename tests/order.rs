//! What follows a change comes in causal order: when a change frees a slot
//! while a client waits, the change is announced (keyspace events) and
//! replicated (here read back from the AOF, which gets exactly what the
//! replicas get) before the grant it made room for.
//!
//! One test per path that frees a slot: UNLOCK, REAP OWNER, REAP of expired
//! holders, the background reaper and a lease running out.

mod common;

use std::path::Path;
use std::thread::JoinHandle;
use std::time::Duration;

use common::{Connection, Server, Value, holders, token, wait_for};
use redis::PubSub;

/// A server with keyspace events of the module (class `d`) and an AOF;
/// `reap_interval` ms between background reaper ticks (0: none).
fn server(reap_interval: u32) -> Server {
    // `appendfsync always`: the AOF holds a command's effects before its reply
    // leaves (with everysec, a write can be postponed while a background fsync
    // runs, and counting the effects "before" a step would race).
    Server::start_with(&[
        "--notify-keyspace-events",
        "Kd",
        "--appendonly",
        "yes",
        "--appendfsync",
        "always",
        "--unique.reap-interval",
        &reap_interval.to_string(),
    ])
}

/// Clients waiting on this server, from INFO.
fn waiting(con: &mut Connection) -> i64 {
    common::info_field(con, "unique", "unique_waiting")
}

/// Starts a client blocked in `UNIQUE.LOCK args...` and waits until the
/// server counts it.
fn start_waiter(server: &Server, args: &[&str]) -> JoinHandle<Result<Value, String>> {
    let mut observer = server.con();
    let before = waiting(&mut observer);
    let mut con = server.con();
    let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
    let handle = std::thread::spawn(move || {
        let mut cmd = redis::cmd("UNIQUE.LOCK");
        cmd.arg(&args);
        common::run(&cmd, &mut con)
    });
    wait_for("the waiter to block", || {
        waiting(&mut observer) == before + 1
    });
    handle
}

/// Subscribes to the keyspace events of key `k`.
fn subscribe(con: &mut Connection) -> PubSub<'_> {
    let mut pubsub = con.as_pubsub();
    pubsub.psubscribe("__keyspace@0__:k").expect("PSUBSCRIBE");
    pubsub
        .set_read_timeout(Some(Duration::from_secs(5)))
        .expect("timeout");
    pubsub
}

/// The next `n` events.
fn events(pubsub: &mut PubSub<'_>, n: usize) -> Vec<String> {
    (0..n)
        .map(|_| {
            pubsub
                .get_message()
                .and_then(|m| m.get_payload())
                .expect("an event")
        })
        .collect()
}

/// Every effect the server wrote to its AOF, in order: each `UNIQUE.APPLY`
/// as its arguments after the command name (a GRANT with the `now` it
/// stands for, its holder's acquired_at, where the others have theirs), and
/// each `DEL` (a change that left the key empty) as `[key, "", "DEL"]`.
fn applied(dir: &Path) -> Vec<Vec<String>> {
    common::aof_commands(dir)
        .into_iter()
        .map(|c| {
            c.iter()
                .map(|a| String::from_utf8_lossy(a).into_owned())
                .collect::<Vec<String>>()
        })
        .filter_map(|c| match c.as_slice() {
            [name, key, op, jid, lease, rest @ ..]
                if name.eq_ignore_ascii_case("UNIQUE.APPLY") && op == "GRANT" =>
            {
                let acquired_at = lease.split(' ').nth(1).unwrap_or_default();
                let given = [key, acquired_at, op, jid, lease].map(str::to_string);
                Some(given.into_iter().chain(rest.iter().cloned()).collect())
            }
            [name, ..] if name.eq_ignore_ascii_case("UNIQUE.APPLY") => {
                Some(c.into_iter().skip(1).collect())
            }
            [name, key] if name.eq_ignore_ascii_case("DEL") => {
                Some(vec![key.clone(), String::new(), "DEL".to_string()])
            }
            _ => None,
        })
        .collect()
}

/// The effects written after the first `skip`, once there are `n` of them,
/// each as (key, operation, first argument after the operation).
fn effects_after(server: &Server, skip: usize, n: usize) -> Vec<(String, String, String)> {
    let mut found = Vec::new();
    wait_for("the effects in the AOF", || {
        found = applied(&server.dir);
        found.len() >= skip + n
    });
    found
        .into_iter()
        .skip(skip)
        .map(|a| {
            let at = |i: usize| a.get(i).cloned().unwrap_or_default();
            (at(0), at(2), at(3))
        })
        .collect()
}

fn effect(op: &str, arg: &str) -> (String, String, String) {
    ("k".to_string(), op.to_string(), arg.to_string())
}

/// The `now` of the last `UNIQUE.APPLY k now LEASE jid ...` (or `k GRANT
/// jid ...`) for `jid`.
fn hold_time(server: &Server, jid: &str) -> i64 {
    applied(&server.dir)
        .iter()
        .rev()
        .find(|a| {
            matches!(a.get(2).map(String::as_str), Some("LEASE" | "GRANT"))
                && a.get(3).map(String::as_str) == Some(jid)
        })
        .and_then(|a| a.get(1)?.parse().ok())
        .unwrap_or_else(|| panic!("no grant or renewal of {jid}"))
}

/// `jid`'s end of lease on `k`.
fn expires_at(con: &mut Connection, jid: &str) -> i64 {
    let holders = common::with_meta(con, "k");
    let holder = holders
        .iter()
        .find(|h| common::field(h, "jid") == Value::BulkString(jid.as_bytes().to_vec()))
        .unwrap_or_else(|| panic!("{jid} does not hold k"));
    common::int(common::field(holder, "expires_at"))
}

#[test]
fn unlock_announces_and_replicates_the_release_before_the_grant() {
    let server = server(0);
    let con = &mut server.con();
    token(call!(con, "UNIQUE.LOCK", "k", "a"));
    let waiter = start_waiter(&server, &["k", "b", "WAIT", "10000"]);
    let mut sub = server.con();
    let mut pubsub = subscribe(&mut sub);
    let before = applied(&server.dir).len();
    assert_eq!(call!(con, "UNIQUE.UNLOCK", "k", "a"), Ok(Value::Int(1)));
    token(waiter.join().expect("waiter"));
    assert_eq!(events(&mut pubsub, 2), ["unique.unlock", "unique.lock"]);
    assert_eq!(
        effects_after(&server, before, 2),
        // a was the only holder: its release is the key's deletion.
        [effect("DEL", ""), effect("GRANT", "b")]
    );
}

#[test]
fn reap_owner_announces_and_replicates_the_removal_before_the_grant() {
    let server = server(0);
    let con = &mut server.con();
    token(call!(con, "UNIQUE.LOCK", "k", "a", "OWNER", "w1"));
    let waiter = start_waiter(&server, &["k", "b", "WAIT", "10000"]);
    let mut sub = server.con();
    let mut pubsub = subscribe(&mut sub);
    let before = applied(&server.dir).len();
    let reply = call!(con, "UNIQUE.REAP", "0", "OWNER", "w1");
    assert!(
        matches!(&reply, Ok(Value::Array(r)) if r.get(1) == Some(&Value::Int(1))),
        "{reply:?}"
    );
    token(waiter.join().expect("waiter"));
    assert_eq!(holders(con, "k"), ["b"]);
    // The removal that made room first, then the grant.
    assert_eq!(events(&mut pubsub, 2), ["unique.reap", "unique.lock"]);
    assert_eq!(
        effects_after(&server, before, 2),
        [effect("DEL", ""), effect("GRANT", "b")]
    );
}

/// `k` held by `x` (no lease, so the key never expires) and `a`, with `b`
/// waiting for a slot; then `a` takes a lease of 50 ms: a renewal arms no
/// wake-up, so only what the test drives (REAP, the reaper) frees the slot.
/// Also returns how many effects the AOF held just before that renewal: a
/// reaper may prune the 50 ms lease before the caller could count them.
fn a_lease_runs_out_while_b_waits(server: &Server) -> (JoinHandle<Result<Value, String>>, usize) {
    let con = &mut server.con();
    token(call!(con, "UNIQUE.LOCK", "k", "x", "LIMIT", 2));
    token(call!(con, "UNIQUE.LOCK", "k", "a", "LIMIT", 2));
    let waiter = start_waiter(server, &["k", "b", "LIMIT", "2", "WAIT", "10000"]);
    let before_lease = applied(&server.dir).len();
    token(call!(con, "UNIQUE.LOCK", "k", "a", "LIMIT", 2, "TTL", 50));
    (waiter, before_lease)
}

#[test]
fn reap_of_expired_holders_announces_and_replicates_the_prune_before_the_grant() {
    let server = server(0);
    let con = &mut server.con();
    let mut sub = server.con();
    let mut pubsub = subscribe(&mut sub);
    let (waiter, _) = a_lease_runs_out_while_b_waits(&server);
    assert_eq!(events(&mut pubsub, 2), ["unique.lock", "unique.lock"]);
    wait_for("a's lease to run out", || holders(con, "k") == ["x"]);
    let before = applied(&server.dir).len();
    let reply = call!(con, "UNIQUE.REAP", "0");
    assert!(
        matches!(&reply, Ok(Value::Array(r)) if r.get(1) == Some(&Value::Int(1))),
        "{reply:?}"
    );
    token(waiter.join().expect("waiter"));
    assert_eq!(holders(con, "k"), ["x", "b"]);
    assert_eq!(events(&mut pubsub, 2), ["unique.expire", "unique.lock"]);
    assert_eq!(
        effects_after(&server, before, 2),
        [effect("PRUNE", ""), effect("GRANT", "b")]
    );
}

#[test]
fn the_background_reaper_announces_and_replicates_the_prune_before_the_grant() {
    let server = server(10);
    let con = &mut server.con();
    let mut sub = server.con();
    let mut pubsub = subscribe(&mut sub);
    // Counted before a's 50 ms lease began: the reaper (every 10 ms) may have
    // pruned it and served b before this thread runs its next line.
    let (waiter, before) = a_lease_runs_out_while_b_waits(&server);
    assert_eq!(events(&mut pubsub, 2), ["unique.lock", "unique.lock"]);
    // Served by the reaper (a timeout would reply nil, not a token).
    token(waiter.join().expect("waiter"));
    assert_eq!(holders(con, "k"), ["x", "b"]);
    assert_eq!(events(&mut pubsub, 2), ["unique.expire", "unique.lock"]);
    assert_eq!(
        effects_after(&server, before, 3),
        [
            effect("LEASE", "a"),
            effect("PRUNE", ""),
            effect("GRANT", "b")
        ]
    );
}

#[test]
fn a_lease_running_out_is_announced_and_replicated_before_the_grant() {
    let server = server(0);
    let con = &mut server.con();
    token(call!(con, "UNIQUE.LOCK", "k", "x", "LIMIT", 2));
    // 3 s: b must arrive and be seen blocked while a's lease is pending, after
    // the reads below and two new connections, however late the loaded machine
    // runs them (with 300 ms, b could come after the lease's end and never block).
    token(call!(con, "UNIQUE.LOCK", "k", "a", "LIMIT", 2, "TTL", 3000));
    let lease_end = expires_at(con, "a");
    let mut sub = server.con();
    let mut pubsub = subscribe(&mut sub);
    let before = applied(&server.dir).len();
    // b waits with a's lease pending: a wake-up at its end serves b, with no
    // other client touching the key (no reaper, and x keeps the key alive).
    let waiter = start_waiter(&server, &["k", "b", "LIMIT", "2", "WAIT", "10000"]);
    token(waiter.join().expect("waiter"));
    assert_eq!(holders(con, "k"), ["x", "b"]);
    assert_eq!(events(&mut pubsub, 2), ["unique.expire", "unique.lock"]);
    // One effect: the grant, at a time that removes a's lease first, on a
    // replica and on replay.
    assert_eq!(effects_after(&server, before, 1), [effect("GRANT", "b")]);
    assert!(hold_time(&server, "b") >= lease_end);
    assert_eq!(applied(&server.dir).len(), before + 1, "nothing else");
}
