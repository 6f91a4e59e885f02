//! Fencing tokens across primaries: a promoted replica grants tokens above
//! every token the primary it replaced can still grant (for the bound after
//! the promotion, one hour), and tokens only rise on one server across
//! restarts (RDB, AOF) and on the replicas of the new primary.

mod common;

use common::{Server, Value, field, server_time_ms, token, wait_digests_equal, wait_for};

/// The bound of `src/fencing.rs`, in tokens (microseconds).
const BOUND: i64 = 3_600_000 * 1000;

fn lock(con: &mut common::Connection, key: &str, jid: &str) -> i64 {
    token(call!(con, "UNIQUE.LOCK", key, jid, "TTL", 600_000))
}

/// The old primary keeps granting after its replica was promoted (what a
/// partition does): every token of the new primary is above the old one's,
/// even those the old one grants later, and they are never equal.
#[test]
fn a_promoted_replica_grants_above_the_primary_it_replaced_while_that_one_still_grants() {
    let primary = Server::start();
    let replica = primary.start_replica(&[]);
    let (p, r) = (&mut primary.con(), &mut replica.con());
    for i in 0..20 {
        lock(p, &format!("k{i}"), "j");
    }
    wait_digests_equal(p, r);
    call!(r, "REPLICAOF", "NO", "ONE").expect("promote");
    // Both grant on the same keys now, interleaved.
    let (mut old, mut new) = (Vec::new(), Vec::new());
    for i in 0..200 {
        let key = format!("hot{}", i % 3);
        for (con, tokens, jid) in [(&mut *p, &mut old, "old"), (&mut *r, &mut new, "new")] {
            let jid = format!("{jid}{i}");
            tokens.push(lock(con, &key, &jid));
            if i < 197 {
                call!(con, "UNIQUE.UNLOCK", &key, &jid).expect("unlock");
            }
        }
    }
    let lowest_new = *new.iter().min().expect("grants");
    let highest_old = *old.iter().max().expect("grants");
    assert!(
        lowest_new > highest_old,
        "new from {lowest_new}, old up to {highest_old}"
    );
    // Above what the old primary's clock gives until the bound has passed.
    let now = server_time_ms(p);
    assert!(lowest_new > now * 1000 + BOUND - 60_000_000, "{lowest_new}");
    assert!(
        new.windows(2).all(|w| w[0] < w[1]),
        "tokens rise on one server"
    );
    assert!(lowest_new < 1 << 53, "JavaScript reads it exactly");
    // The holder's time of grant is still the clock's, not the token's.
    let holders = common::with_meta(r, "hot0");
    let acquired = field(&holders[0], "acquired_at");
    let Value::Int(acquired) = acquired else {
        panic!("acquired_at {acquired:?}")
    };
    assert!((acquired - server_time_ms(r)).abs() < 60_000, "{acquired}");
    // When the partition heals, the old primary follows the new one and
    // ends with its data; promoted again, it jumps above the new tokens.
    call!(p, "REPLICAOF", "127.0.0.1", replica.port).expect("demote");
    primary.wait_in_sync();
    wait_digests_equal(r, p);
    let highest_new = lock(r, "other", "last");
    wait_digests_equal(r, p);
    call!(p, "REPLICAOF", "NO", "ONE").expect("promote back");
    let back = lock(p, "another", "back");
    assert!(back > highest_new + BOUND - 1, "{back} after {highest_new}");
}

/// A replica of the new primary gets its jump with its first grant (the
/// grant's effect carries the token), so it too grants above, promoted next.
#[test]
fn the_replicas_of_a_new_primary_go_on_from_its_tokens() {
    let primary = Server::start();
    let r1 = primary.start_replica(&[]);
    let r2 = primary.start_replica(&[]);
    let p = &mut primary.con();
    lock(p, "k", "a");
    call!(&mut r1.con(), "REPLICAOF", "NO", "ONE").expect("promote r1");
    call!(&mut r2.con(), "REPLICAOF", "127.0.0.1", r1.port).expect("follow r1");
    r2.wait_in_sync();
    let first = lock(&mut r1.con(), "k2", "b");
    wait_digests_equal(&mut r1.con(), &mut r2.con());
    call!(&mut r2.con(), "REPLICAOF", "NO", "ONE").expect("promote r2");
    let second = lock(&mut r2.con(), "k3", "c");
    assert!(second > first + BOUND - 1, "{second} after {first}");
    // The old primary, still granting, stays below both.
    assert!(lock(p, "k4", "d") < first);
}

/// After a promotion the counter is ahead of the clock: a restart must not
/// take it back, even when every lock it granted was deleted. RDB (the aux
/// data), and AOF with or without the RDB preamble.
#[test]
fn tokens_after_a_promotion_stay_above_through_restarts() {
    for args in [
        &[][..],
        &["--appendonly", "yes", "--aof-use-rdb-preamble", "yes"][..],
        &["--appendonly", "yes", "--aof-use-rdb-preamble", "no"][..],
    ] {
        let primary = Server::start();
        let mut args = args.to_vec();
        args.extend(["--save", "3600 1"]);
        // A replica by REPLICAOF, not by its arguments: it restarts as a
        // primary.
        let mut replica = Server::start_with(&args);
        call!(&mut replica.con(), "REPLICAOF", "127.0.0.1", primary.port).expect("follow");
        replica.wait_in_sync();
        call!(&mut replica.con(), "REPLICAOF", "NO", "ONE").expect("promote");
        let con = &mut replica.con();
        if args.contains(&"--appendonly") {
            // The AOF a sync starts again: a server writing it refuses to
            // shut down.
            common::wait_for_rewrite(con);
        }
        let t = lock(con, "k", "j");
        assert_eq!(call!(con, "UNIQUE.UNLOCK", "k", "j"), Ok(Value::Int(1)));
        // Nothing is left in the keyspace to say how far the tokens went.
        assert_eq!(call!(con, "DBSIZE"), Ok(Value::Int(0)));
        let shutdown = if args.contains(&"--appendonly") {
            "NOSAVE"
        } else {
            "SAVE"
        };
        replica.restart(shutdown);
        let after = lock(&mut replica.con(), "k", "j2");
        assert!(after > t, "{args:?}: {after} is not above {t}");
        // DEBUG RELOAD (the same RDB, in place) keeps it too.
        call!(&mut replica.con(), "DEBUG", "RELOAD").expect("DEBUG RELOAD");
        assert!(lock(&mut replica.con(), "k3", "j3") > after, "{args:?}");
    }
}

/// A replica that syncs from a new primary gets its counter in the RDB even
/// when no lock is left: promoted, it grants above.
#[test]
fn a_full_sync_carries_the_counter_without_any_lock() {
    let primary = Server::start();
    let replica = primary.start_replica(&[]);
    call!(&mut replica.con(), "REPLICAOF", "NO", "ONE").expect("promote");
    let t = lock(&mut replica.con(), "k", "j");
    call!(&mut replica.con(), "UNIQUE.UNLOCK", "k", "j").expect("unlock");
    // A fresh server syncs from the new primary: an empty keyspace.
    let fresh = replica.start_replica(&[]);
    wait_for("the fresh replica's keyspace", || {
        call!(&mut fresh.con(), "DBSIZE") == Ok(Value::Int(0))
    });
    let version = common::redis_version(&mut fresh.con());
    call!(&mut fresh.con(), "REPLICAOF", "NO", "ONE").expect("promote the fresh one");
    let after = lock(&mut fresh.con(), "k", "j");
    assert!(after > t + BOUND - 1, "{version}: {after} after {t}");
}

/// A client blocked in `cmd` (LOCK or LOCKALL ... WAIT), counted by the
/// server before this returns.
fn start_waiter(
    server: &Server,
    cmd: &str,
    args: &[&str],
) -> std::thread::JoinHandle<Result<Value, String>> {
    let mut observer = server.con();
    let waiting =
        |con: &mut common::Connection| common::info_field(con, "unique", "unique_waiting");
    let before = waiting(&mut observer);
    let mut con = server.con();
    let mut c = redis::cmd(cmd);
    c.arg(args);
    let handle = std::thread::spawn(move || common::run(&c, &mut con));
    wait_for("the waiter to block", || {
        waiting(&mut observer) == before + 1
    });
    handle
}

/// The reply to a served waiter goes out after the command that served it:
/// here a transaction that goes on for 300 ms after the UNLOCK, longer than
/// the waiter's 50 ms lease. The waiter is told nil, not a token it no
/// longer holds; served in time (a lease of a minute), it is told its token.
#[test]
fn a_waiter_whose_lease_ended_before_its_reply_went_out_is_told_nil() {
    let server = Server::start();
    let con = &mut server.con();
    for (cmd, args, keys) in [
        ("UNIQUE.LOCK", &["k", "b", "TTL"][..], &["k"][..]),
        (
            "UNIQUE.LOCKALL",
            &["2", "k", "k2", "b", "TTL"][..],
            &["k", "k2"][..],
        ),
    ] {
        for (ttl, sleep, stands) in [("50", "0.3", false), ("60000", "0", true)] {
            let args: Vec<&str> = args.iter().copied().chain([ttl, "WAIT", "30000"]).collect();
            for key in keys {
                token(call!(con, "UNIQUE.LOCK", *key, "a", "TTL", 60_000));
            }
            let waiter = start_waiter(&server, cmd, &args);
            let mut pipe = redis::pipe();
            pipe.atomic();
            for key in keys {
                pipe.cmd("UNIQUE.UNLOCK").arg(*key).arg("a");
            }
            pipe.cmd("DEBUG").arg("SLEEP").arg(sleep);
            let _: Value = pipe.query(con).expect("the transaction");
            let reply = waiter.join().expect("waiter");
            if stands {
                assert!(
                    matches!(reply, Ok(Value::Int(_)) | Ok(Value::Array(_))),
                    "{cmd}: {reply:?}"
                );
            } else {
                assert_eq!(reply, Ok(Value::Nil), "{cmd}, {sleep} s");
            }
            for key in keys {
                let _ = call!(con, "UNIQUE.UNLOCK", *key, "b");
            }
        }
    }
}

/// A primary with a replica and `min-replicas-to-write 0` says so in its
/// log (the module looks after the load, on promotion and every 10 s), with
/// what to set. (That a configured one, or one without replicas, does not is
/// `role::advice`'s unit test.)
#[test]
fn a_primary_with_replicas_and_no_min_replicas_to_write_logs_a_warning() {
    let advice = "min-replicas-to-write 0: cut off from them";
    let primary = Server::start();
    let _replica = primary.start_replica(&[]);
    wait_for("the warning in the log", || primary.log().contains(advice));
    let log = primary.log();
    let line = log.lines().find(|l| l.contains(advice)).expect("the line");
    assert!(
        line.contains("1 replica(s)") && line.contains("min-replicas-max-lag 1"),
        "{line}"
    );
}
