//! UNIQUE.REAP and the background reaper: bounded steps, full iterations,
//! owners, replication, and the expired holders leaving memory on their own.

mod common;

use std::collections::HashSet;
use std::time::Duration;

use common::{Connection, Server, Value, digest, holders, token, wait_for, wait_until};

/// `n` locks, each with a holder that never expires and one whose lease has
/// already ended by the time this returns (the key itself does not expire).
fn locks_with_one_expired_holder(con: &mut Connection, n: usize) {
    for i in 0..n {
        token(call!(
            con,
            "UNIQUE.LOCK",
            format!("lock:{i}"),
            "live",
            "LIMIT",
            0
        ));
        token(call!(
            con,
            "UNIQUE.LOCK",
            format!("lock:{i}"),
            "dead",
            "LIMIT",
            0,
            "TTL",
            1
        ));
    }
    let last = format!("lock:{}", n - 1);
    wait_for("the leases to end", || holders(con, &last) == ["live"]);
}

fn reap(con: &mut Connection, cursor: &str, extra: &[&str]) -> (String, i64) {
    let mut cmd = redis::cmd("UNIQUE.REAP");
    cmd.arg(cursor).arg(extra);
    match common::run(&cmd, con) {
        Ok(Value::Array(parts)) => match parts.as_slice() {
            [Value::BulkString(c), Value::Int(n)] => (String::from_utf8_lossy(c).into_owned(), *n),
            other => panic!("REAP reply: {other:?}"),
        },
        other => panic!("REAP: {other:?}"),
    }
}

#[test]
fn a_full_iteration_with_small_count_removes_every_expired_holder() {
    let server = Server::start_with(&["--unique.reap-interval", "0"]);
    let con = &mut server.con();
    locks_with_one_expired_holder(con, 300);
    for i in 0..50 {
        call!(con, "SET", format!("other:{i}"), "x").expect("SET"); // keys of another type
    }
    // A keyspace table being resized returns a bucket of the old table with the buckets
    // it splits into in one SCAN step; every key lookup moves a resize along by one
    // bucket, so a few thousand finish it and the steps below stay put between calls.
    let mut settle = redis::pipe();
    for i in 0..4096 {
        settle.cmd("EXISTS").arg(format!("lock:{}", i % 300));
    }
    let _: Vec<i64> = settle.query(con).expect("EXISTS");
    let (mut cursor, mut total, mut calls) = ("0".to_string(), 0, 0);
    loop {
        let (next, removed) = reap(con, &cursor, &["COUNT", "7"]);
        // One expired holder per lock: holders removed = lock keys examined. More than
        // COUNT only when one SCAN step alone holds more, taken whole so that the
        // iteration moves on: a bucket of Valkey 8.1+'s hash table holds up to seven
        // keys and may chain more, where Redis's holds one or two. Steps that hold
        // only keys of another type come before it and are passed over.
        if removed > 7 {
            let mut at = cursor.clone();
            let step = (0..1_000)
                .find_map(|_| {
                    let (after, locks): (String, Vec<String>) = redis::cmd("SCAN")
                        .arg(&at)
                        .arg("COUNT")
                        .arg(1)
                        .arg("TYPE")
                        .arg("uniq-lock")
                        .query(con)
                        .expect("SCAN");
                    if locks.is_empty() && after != "0" {
                        at = after;
                        return None;
                    }
                    Some((after, locks.len() as i64))
                })
                .expect("a SCAN step with locks");
            assert_eq!(
                (step.0.as_str(), step.1),
                (next.as_str(), removed),
                "a call examined {removed} locks with COUNT 7, more than its first SCAN step with locks"
            );
        }
        total += removed;
        calls += 1;
        cursor = next;
        if cursor == "0" {
            break;
        }
        assert!(calls < 10_000, "the iteration does not end");
    }
    assert_eq!(total, 300);
    assert!(calls >= 300 / 7, "{calls} calls");
    for i in [0, 150, 299] {
        assert_eq!(holders(con, &format!("lock:{i}")), ["live"]);
    }
    assert_eq!(
        common::metrics_json(con, &[])["holders"],
        300,
        "the expired holders left memory"
    );
    assert_eq!(common::metrics_json(con, &[])["total"]["expired"], 300);
    assert_eq!(
        reap(con, "0", &["COUNT", "1000"]),
        ("0".to_string(), 0),
        "nothing left"
    );
}

#[test]
fn reap_owner_removes_only_that_owners_holders() {
    let server = Server::start_with(&[
        "--unique.reap-interval",
        "0",
        "--notify-keyspace-events",
        "Kd",
    ]);
    let con = &mut server.con();
    for i in 0..40 {
        let key = format!("job:{i}");
        token(call!(
            con,
            "UNIQUE.LOCK",
            &key,
            "a",
            "LIMIT",
            0,
            "OWNER",
            "dead-worker"
        ));
        if i % 2 == 0 {
            token(call!(
                con,
                "UNIQUE.LOCK",
                &key,
                "b",
                "LIMIT",
                0,
                "OWNER",
                "live-worker"
            ));
        }
    }
    let mut sub = server.con();
    let mut pubsub = sub.as_pubsub();
    pubsub
        .psubscribe("__keyspace@0__:job:3")
        .expect("PSUBSCRIBE");
    pubsub
        .set_read_timeout(Some(Duration::from_secs(5)))
        .expect("timeout");

    let (mut cursor, mut removed) = ("0".to_string(), 0);
    loop {
        let (next, n) = reap(con, &cursor, &["COUNT", "5", "OWNER", "dead-worker"]);
        removed += n;
        cursor = next;
        if cursor == "0" {
            break;
        }
    }
    assert_eq!(removed, 40);
    for i in 0..40 {
        let key = format!("job:{i}");
        let expected: Vec<String> = if i % 2 == 0 { vec!["b".into()] } else { vec![] };
        assert_eq!(holders(con, &key), expected, "{key}");
        assert_eq!(
            call!(con, "EXISTS", &key),
            Ok(Value::Int(i64::from(i % 2 == 0))),
            "empty locks go"
        );
    }
    assert_eq!(common::metrics_json(con, &[])["total"]["reaped"], 40);
    let msg = pubsub.get_message().expect("an event");
    assert_eq!(msg.get_payload::<String>().expect("payload"), "unique.reap");
}

#[test]
fn reap_arguments() {
    let server = Server::start();
    let con = &mut server.con();
    let integer = Err("ERR value is not an integer or out of range".to_string());
    assert_eq!(
        call!(con, "UNIQUE.REAP", "abc"),
        Err("ERR invalid cursor".into())
    );
    assert_eq!(
        call!(con, "UNIQUE.REAP", "-1"),
        Err("ERR invalid cursor".into())
    );
    assert_eq!(call!(con, "UNIQUE.REAP", "0", "COUNT", "0"), integer);
    assert_eq!(call!(con, "UNIQUE.REAP", "0", "COUNT", "many"), integer);
    assert_eq!(
        call!(con, "UNIQUE.REAP", "0", "COUNT"),
        Err("ERR syntax error".into())
    );
    assert_eq!(
        call!(con, "UNIQUE.REAP", "0", "COUNT", 1, "COUNT", 2),
        Err("ERR syntax error".into())
    );
    assert_eq!(
        call!(con, "UNIQUE.REAP", "0", "FAST", 1),
        Err("ERR syntax error".into())
    );
    assert_eq!(
        call!(con, "UNIQUE.REAP", "0", "OWNER", ""),
        Err("ERR OWNER must be 1 to 1024 bytes".into())
    );
    assert_eq!(
        call!(con, "UNIQUE.REAP"),
        Err("ERR wrong number of arguments for 'unique.reap' command".into())
    );
    // A cursor REAP never handed out restarts or ends the iteration; never a crash.
    let (_, removed) = reap(con, "18446744073709551615", &[]);
    assert_eq!(removed, 0);
    assert_eq!(call!(con, "PING"), Ok(Value::SimpleString("PONG".into())));
}

#[test]
fn the_background_reaper_removes_expired_holders_on_its_own() {
    let server = Server::start_with(&[
        "--unique.reap-interval",
        "10",
        "--notify-keyspace-events",
        "Kd",
    ]);
    let con = &mut server.con();
    let mut sub = server.con();
    let mut pubsub = sub.as_pubsub();
    pubsub
        .psubscribe("__keyspace@0__:lock:0")
        .expect("PSUBSCRIBE");
    pubsub
        .set_read_timeout(Some(Duration::from_secs(5)))
        .expect("timeout");
    for i in 0..200 {
        token(call!(
            con,
            "UNIQUE.LOCK",
            format!("lock:{i}"),
            "live",
            "LIMIT",
            0
        ));
        token(call!(
            con,
            "UNIQUE.LOCK",
            format!("lock:{i}"),
            "dead",
            "LIMIT",
            0,
            "TTL",
            20
        ));
    }
    // Single-holder locks too: Redis may expire these keys itself; they count alike.
    for i in 0..50 {
        token(call!(
            con,
            "UNIQUE.LOCK",
            format!("solo:{i}"),
            "dead",
            "TTL",
            20
        ));
    }
    wait_for("the reaper", || {
        let m = common::metrics_json(con, &[]);
        m["holders"] == 200 && m["locks"] == 200 && m["total"]["expired"] == 250
    });
    assert_eq!(holders(con, "lock:7"), ["live"]);
    // After the two unique.lock of its creation, lock:0 saw its lease run out.
    let events: Vec<String> = (0..3)
        .map(|_| {
            pubsub
                .get_message()
                .and_then(|m| m.get_payload())
                .expect("an event")
        })
        .collect();
    assert_eq!(events, ["unique.lock", "unique.lock", "unique.expire"]);
}

#[test]
fn with_interval_zero_nothing_is_reaped_in_the_background() {
    let server = Server::start_with(&["--unique.reap-interval", "0"]);
    let con = &mut server.con();
    locks_with_one_expired_holder(con, 20);
    // Proving an absence takes a bounded wait: 300 ms is 30 ticks of a 10 ms reaper.
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(
        common::metrics_json(con, &[])["holders"],
        40,
        "expired holders are still in memory"
    );
    assert_eq!(common::metrics_json(con, &[])["total"]["expired"], 0);
    // Turned on, it cleans up.
    call!(con, "CONFIG", "SET", "unique.reap-interval", 10).expect("CONFIG SET");
    wait_for("the reaper", || {
        common::metrics_json(con, &[])["holders"] == 20
    });
}

#[test]
fn a_replica_never_reaps_and_follows_the_primarys_reaper() {
    let primary = Server::start_with(&["--unique.reap-interval", "0"]);
    let replica = primary.start_replica(&["--unique.reap-interval", "10"]);
    let (p, r) = (&mut primary.con(), &mut replica.con());
    locks_with_one_expired_holder(p, 30);
    let _: i64 = redis::cmd("WAIT").arg(1).arg(5_000).query(p).expect("WAIT");
    std::thread::sleep(Duration::from_millis(300)); // an absence again: 30 replica ticks
    assert_eq!(
        digest(p),
        digest(r),
        "the replica removed nothing on its own"
    );
    assert_eq!(common::metrics_json(r, &[])["holders"], 60);
    assert_eq!(
        call!(r, "UNIQUE.REAP", "0"),
        Err("READONLY You can't write against a read only replica.".into())
    );

    call!(p, "CONFIG", "SET", "unique.reap-interval", 10).expect("CONFIG SET");
    wait_for("the primary's reaper", || {
        common::metrics_json(p, &[])["holders"] == 30
    });
    wait_for("the replica to follow", || {
        let _: i64 = redis::cmd("WAIT").arg(1).arg(1_000).query(p).unwrap_or(0);
        digest(p) == digest(r)
    });
    assert_eq!(common::metrics_json(r, &[])["holders"], 30);
    assert_eq!(
        common::metrics_json(r, &[])["total"]["expired"],
        0,
        "replicated effects do not count on the replica"
    );
}

#[test]
fn the_reaper_walks_every_database() {
    let server = Server::start_with(&["--unique.reap-interval", "10"]);
    let mut seen = HashSet::new();
    for db in [0, 3, 15] {
        let con = &mut server.con();
        call!(con, "SELECT", db).expect("SELECT");
        token(call!(con, "UNIQUE.LOCK", "k", "live", "LIMIT", 0));
        token(call!(
            con,
            "UNIQUE.LOCK",
            "k",
            "dead",
            "LIMIT",
            0,
            "TTL",
            10
        ));
        seen.insert(db);
    }
    let con = &mut server.con();
    wait_for("every database reaped", || {
        common::metrics_json(con, &[])["holders"] == 3
    });
    assert_eq!(seen.len(), 3);
}

/// Regression: the reaper's scan used to keep every key name it visited
/// (redis-module's `KeysCursor` retains the name and forgets it), about 30
/// bytes per key per walk. A million key visits must leave `used_memory` where
/// it was.
#[test]
fn the_reaper_gives_back_what_it_scans() {
    const LOCKS: usize = 100_000;
    const VISITS: i64 = 2_000_000;
    // Redis's own bookkeeping moves by a few KB (INFO, client buffers); the
    // leak moved it by ~60 MB per 2 million visits. Measured after the fix:
    // growth within 50 KB.
    const BOUND: i64 = 512 * 1024;
    let server = Server::start_with(&["--unique.reap-interval", "0"]);
    let con = &mut server.con();
    for chunk in (0..LOCKS).collect::<Vec<_>>().chunks(10_000) {
        let mut pipe = redis::pipe();
        for i in chunk {
            pipe.cmd("UNIQUE.LOCK")
                .arg(format!("idle:{i}"))
                .arg("j")
                .arg("TTL")
                .arg(3_600_000)
                .ignore();
        }
        pipe.query::<()>(con).expect("LOCKs");
    }
    let (_, scanned_before) = reaper_work(con);
    let before = common::info_field(con, "memory", "used_memory");
    call!(con, "CONFIG", "SET", "unique.reap-batch", 1000).expect("CONFIG SET");
    call!(con, "CONFIG", "SET", "unique.reap-interval", 1).expect("CONFIG SET");
    wait_until(Duration::from_secs(120), "2 million key visits", || {
        reaper_work(con).1 - scanned_before >= VISITS
    });
    call!(con, "CONFIG", "SET", "unique.reap-interval", 0).expect("CONFIG SET");
    let after = common::info_field(con, "memory", "used_memory");
    let (ticks, scanned) = reaper_work(con);
    println!(
        "used_memory {before} -> {after} ({:+} bytes) after {ticks} ticks, {} key visits",
        after - before,
        scanned - scanned_before
    );
    assert!(
        after - before < BOUND,
        "used_memory grew by {} bytes over {} key visits",
        after - before,
        scanned - scanned_before
    );
    assert_eq!(
        common::info_field(con, "unique", "unique_locks"),
        LOCKS as i64
    );
}

/// The reaper's ticks and the keys they examined (INFO unique).
fn reaper_work(con: &mut Connection) -> (i64, i64) {
    (
        common::info_field(con, "unique", "unique_reaper_ticks"),
        common::info_field(con, "unique", "unique_reaper_keys_scanned"),
    )
}

/// REAP OWNER within a key of thousands of holders (the indexed layout),
/// some of whose owners renewals changed: exactly that owner's holders go,
/// a replica ends with the same key, and after the primary restarts from
/// its AOF (the owners rebuilt on load) a REAP of another owner is exact too.
#[test]
fn reap_owner_on_a_key_of_thousands_of_holders_is_exact_and_replicated() {
    let mut primary = Server::start_with(&["--unique.reap-interval", "0", "--appendonly", "yes"]);
    let replica = primary.start_replica(&["--unique.reap-interval", "0"]);
    let p = &mut primary.con();
    let key = "big";
    let n = 2_000;
    // Holder i: owner "dead" (i % 5 == 0), "live" (i % 5 == 1) or none.
    let mut owners: Vec<Option<&str>> = (0..n)
        .map(|i| match i % 5 {
            0 => Some("dead"),
            1 => Some("live"),
            _ => None,
        })
        .collect();
    let lock = |jid: usize, owner: Option<&str>| {
        let mut cmd = redis::cmd("UNIQUE.LOCK");
        cmd.arg(key)
            .arg(format!("j{jid}"))
            .arg("LIMIT")
            .arg(0)
            .arg("TTL")
            .arg(600_000);
        if let Some(owner) = owner {
            cmd.arg("OWNER").arg(owner);
        }
        cmd
    };
    let mut pipe = redis::pipe();
    for (i, owner) in owners.iter().enumerate() {
        pipe.add_command(lock(i, *owner)).ignore();
    }
    // Renewals that change the owner of every seventh holder: to "dead",
    // or from "dead" to "live".
    for i in (0..n).step_by(7) {
        let to = if owners[i] == Some("dead") {
            "live"
        } else {
            "dead"
        };
        owners[i] = Some(to);
        pipe.add_command(lock(i, Some(to))).ignore();
    }
    let () = pipe.query(p).expect("the holders");
    // The jids, in grant order, whose owner is not one of `gone`.
    let kept = |owners: &[Option<&str>], gone: &[&str]| -> Vec<String> {
        (0..n)
            .filter(|&i| owners[i].is_none_or(|o| !gone.contains(&o)))
            .map(|i| format!("j{i}"))
            .collect()
    };
    let reap_all = |con: &mut Connection, owner: &str| {
        let (mut cursor, mut removed) = ("0".to_string(), 0);
        loop {
            let (next, k) = reap(con, &cursor, &["COUNT", "10", "OWNER", owner]);
            removed += k;
            cursor = next;
            if cursor == "0" {
                return removed;
            }
        }
    };
    let count = |owner: &str| owners.iter().filter(|o| **o == Some(owner)).count() as i64;
    assert!(count("dead") > 300 && count("live") > 300);
    assert_eq!(reap_all(p, "dead"), count("dead"));
    assert_eq!(
        holders(p, key),
        kept(&owners, &["dead"]),
        "only that owner's holders went"
    );
    let same_as_replica = |p: &mut Connection| {
        let r = &mut replica.con();
        wait_for("the replica to hold what the primary holds", || {
            let _: i64 = redis::cmd("WAIT").arg(1).arg(5_000).query(p).expect("WAIT");
            let dump = |c: &mut Connection| -> Vec<u8> {
                redis::cmd("DUMP").arg(key).query(c).expect("DUMP")
            };
            dump(p) == dump(r) && digest(p) == digest(r)
        });
    };
    same_as_replica(p);

    // From the AOF: the same key, and its owners found again.
    let before: Vec<u8> = redis::cmd("DUMP").arg(key).query(p).expect("DUMP");
    primary.restart("NOSAVE");
    let p = &mut primary.con();
    let after: Vec<u8> = redis::cmd("DUMP").arg(key).query(p).expect("DUMP");
    assert_eq!(after, before, "the key as it was");
    assert_eq!(reap_all(p, "live"), count("live"));
    assert_eq!(reap_all(p, "dead"), 0, "none left of an owner reaped");
    assert_eq!(
        holders(p, key),
        kept(&owners, &["dead", "live"]),
        "those without an owner"
    );
    replica.wait_in_sync();
    same_as_replica(p);
}
