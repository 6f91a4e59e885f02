//! `UNIQUE.LOCK ... RATE n PER ms [BURST b]`: a rate beside the concurrency
//! limit in one grant, its errors, a change of limit, the lock that outlives
//! its holders while its rate is spent, waiters served at the next allowed
//! instant in arrival order, `UNIQUE.RATE`, the `rate_denied` counter, and the
//! rate state through RDB, DUMP/RESTORE, AOF and a replica. (Forged payloads
//! of the encoding, old and new versions: tests/forged.rs.)

mod common;

use std::collections::HashMap;
use std::time::{Duration, Instant};

use common::{Connection, Server, Value, digest, holders, token, wait_for};

fn rate_of(con: &mut Connection, key: &str) -> Option<HashMap<String, i64>> {
    rate_from(call!(con, "UNIQUE.RATE", key))
}

/// UNIQUE.RATE's reply as a map.
fn rate_from(reply: Result<Value, String>) -> Option<HashMap<String, i64>> {
    match reply {
        Ok(Value::Nil) => None,
        Ok(Value::Array(flat)) => Some(
            flat.chunks(2)
                .map(|kv| match kv {
                    [Value::BulkString(k), Value::Int(v)] => {
                        (String::from_utf8_lossy(k).into_owned(), *v)
                    }
                    other => panic!("a field and an integer: {other:?}"),
                })
                .collect(),
        ),
        other => panic!("UNIQUE.RATE: {other:?}"),
    }
}

/// The server clock's ms inside a token (tokens read as unix µs).
fn ms_of(token: i64) -> i64 {
    token / 1000
}

#[test]
fn a_grant_needs_both_the_limit_and_the_rate_and_a_renewal_spends_nothing() {
    let server = Server::start();
    let con = &mut server.con();
    let lock = |con: &mut Connection, jid: &str| {
        call!(
            con,
            "UNIQUE.LOCK",
            "api:acme",
            jid,
            "LIMIT",
            3,
            "TTL",
            60_000,
            "RATE",
            2,
            "PER",
            1000,
            "BURST",
            1
        )
    };
    // A burst of 1 beside 2 per second: two at once, then every 500 ms. The
    // grants, the refusal, the renewals and the state's read in one
    // transaction: sent one by one, a loaded machine that ran the test half a
    // second late between two of them would see the rate allow the next.
    let mut tx = redis::pipe();
    tx.atomic();
    for jid in ["a", "b", "c", "a", "a", "a", "a", "a"] {
        tx.cmd("UNIQUE.LOCK").arg(&[
            "api:acme", jid, "LIMIT", "3", "TTL", "60000", "RATE", "2", "PER", "1000", "BURST", "1",
        ]);
    }
    tx.cmd("UNIQUE.RATE").arg("api:acme");
    let replies: Vec<Value> = tx.query(con).expect("the transaction");
    let first = token(Ok(replies[0].clone()));
    token(Ok(replies[1].clone()));
    assert_eq!(replies[2], Value::Nil, "the rate refuses a third");
    // Renewals are free, however many.
    for renewal in &replies[3..8] {
        assert_eq!(token(Ok(renewal.clone())), first);
    }
    let state = rate_from(Ok(replies[8].clone())).expect("a rate state");
    assert_eq!((state["limit"], state["per"], state["burst"]), (2, 1000, 1));
    assert_eq!(state["remaining"], 0);
    let granted_at = ms_of(first);
    assert!(
        (granted_at + 500..=granted_at + 510).contains(&state["allowed_at"]),
        "{state:?} after a grant at {granted_at}"
    );
    assert_eq!(state["idle_at"], state["allowed_at"] + 500);
    // A full lock is refused by its LIMIT first (counted as a plain denial).
    wait_for("the rate to allow one", || {
        rate_of(&mut server.con(), "api:acme").is_some_and(|s| s["remaining"] >= 1)
    });
    token(lock(con, "c"));
    assert_eq!(lock(con, "d"), Ok(Value::Nil));
    let m = common::metrics_json(con, &[]);
    assert_eq!(m["total"]["denied"], 2);
    assert_eq!(m["types"]["lock"]["rate_denied"], 1, "{m}");
    // A key with no rate state says so; a key of another type is WRONGTYPE.
    token(call!(con, "UNIQUE.LOCK", "plain", "j"));
    assert_eq!(rate_of(con, "plain"), None);
    assert_eq!(rate_of(con, "missing"), None);
    call!(con, "SET", "string", "v").expect("SET");
    let wrong = call!(con, "UNIQUE.RATE", "string");
    assert!(
        matches!(&wrong, Err(e) if e.starts_with("WRONGTYPE")),
        "{wrong:?}"
    );
}

#[test]
fn bad_rate_arguments_are_errors_and_change_nothing() {
    let server = Server::start();
    let con = &mut server.con();
    token(call!(
        con,
        "UNIQUE.LOCK",
        "k",
        "a",
        "LIMIT",
        5,
        "RATE",
        10,
        "PER",
        1000
    ));
    let before = digest(con);
    let range = "ERR RATE n PER ms [BURST b] takes n from 1 to 1000000, ms from 1 to 1099511627776 and b from 0 to 1000000";
    let syntax = "ERR syntax error: RATE n needs PER ms, and PER and BURST need RATE (RATE n PER ms [BURST b])";
    let cases: &[(&[&str], &str)] = &[
        (&["RATE", "0", "PER", "1000"], range),
        (&["RATE", "10", "PER", "0"], range),
        (&["RATE", "10", "PER", "1000", "BURST", "-1"], range),
        (&["RATE", "1000001", "PER", "1000"], range),
        (&["RATE", "10", "PER", "1099511627777"], range),
        (&["RATE", "10"], syntax),
        (&["PER", "1000"], syntax),
        (&["BURST", "2"], syntax),
        (&["RATE", "10", "BURST", "2"], syntax),
        (
            &["RATE", "ten", "PER", "1000"],
            "ERR value is not an integer or out of range",
        ),
        (
            &["RATE", "10", "PER", "1.5"],
            "ERR value is not an integer or out of range",
        ),
        (
            &["RATE", "10", "PER", "1000", "RATE", "5"],
            "ERR syntax error",
        ),
    ];
    for (options, error) in cases {
        let reply = call!(con, "UNIQUE.LOCK", "k", "b", "LIMIT", 5, *options);
        assert_eq!(reply, Err(error.to_string()), "{options:?}");
    }
    assert_eq!(digest(con), before, "a refused call changes nothing");
    assert_eq!(holders(con, "k"), ["a"]);
}

#[test]
fn a_new_rate_applies_at_once_and_keeps_what_was_spent() {
    let server = Server::start();
    let con = &mut server.con();
    // 10 per second, a burst of 4: five grants at once spend half a second.
    // A deploy then lowers the limit to 1 per second: the next grant comes when
    // the half second already spent is over, not at once. One pipeline, so
    // that the refusal comes before that half second is over, however slow
    // the machine is between commands.
    let mut pipe = redis::pipe();
    for i in 0..5 {
        pipe.cmd("UNIQUE.LOCK")
            .arg("k")
            .arg(format!("j{i}"))
            .arg(&["LIMIT", "0", "RATE", "10", "PER", "1000", "BURST", "4"]);
    }
    pipe.cmd("UNIQUE.RATE").arg("k");
    pipe.cmd("UNIQUE.LOCK")
        .arg(&["k", "next", "LIMIT", "0", "RATE", "1", "PER", "1000"]);
    pipe.cmd("UNIQUE.RATE").arg("k");
    let replies: Vec<Value> = pipe.query(con).expect("the pipeline");
    for grant in &replies[..5] {
        token(Ok(grant.clone()));
    }
    let idle = rate_from(Ok(replies[5].clone())).expect("state")["idle_at"];
    assert_eq!(
        replies[6],
        Value::Nil,
        "the slower rate waits for what was spent"
    );
    let state = rate_from(Ok(replies[7].clone())).expect("state");
    assert_eq!(state["limit"], 10, "a denial does not rewrite the state");
    assert_eq!(state["idle_at"], idle);
    wait_for("the time already spent", || {
        common::server_time_ms(&mut server.con()) >= idle
    });
    token(call!(
        con,
        "UNIQUE.LOCK",
        "k",
        "next",
        "LIMIT",
        0,
        "RATE",
        1,
        "PER",
        1000
    ));
    let state = rate_of(con, "k").expect("state");
    assert_eq!((state["limit"], state["per"], state["burst"]), (1, 1000, 0));
    assert!(state["idle_at"] >= idle + 1000, "{state:?}");
}

#[test]
fn a_lock_with_a_rate_outlives_its_holders_until_its_rate_is_idle() {
    let server = Server::start();
    let con = &mut server.con();
    // One pipeline, so that the second LOCK comes before the 600 ms are
    // over, however slow the machine is between commands.
    let replies: Vec<Value> = redis::pipe()
        .cmd("UNIQUE.LOCK")
        .arg(&["k", "j", "RATE", "1", "PER", "600"])
        .cmd("UNIQUE.UNLOCK")
        .arg(&["k", "j"])
        .cmd("UNIQUE.LOCKEDBY")
        .arg("k")
        .cmd("UNIQUE.RATE")
        .arg("k")
        .cmd("PEXPIRETIME")
        .arg("k")
        .cmd("UNIQUE.LOCK")
        .arg(&["k", "other", "RATE", "1", "PER", "600"])
        .query(con)
        .expect("the pipeline");
    token(Ok(replies[0].clone()));
    assert_eq!(replies[1], Value::Int(1));
    // No holder, but what was spent is remembered: the next grant waits.
    assert_eq!(replies[2], Value::Array(vec![]), "no holder");
    let idle = rate_from(Ok(replies[3].clone())).expect("the rate stays")["idle_at"];
    let expiry = common::int(replies[4].clone());
    assert_eq!(expiry, idle, "the key goes when its rate is idle");
    assert_eq!(replies[5], Value::Nil);
    wait_for("the key to go", || {
        call!(&mut server.con(), "EXISTS", "k") == Ok(Value::Int(0))
    });
    assert_eq!(common::info_field(con, "unique", "unique_locks"), 0);
    // A holder's lease longer than the rate keeps the key to its own end.
    token(call!(
        con,
        "UNIQUE.LOCK",
        "l",
        "j",
        "TTL",
        60_000,
        "RATE",
        1,
        "PER",
        600
    ));
    let lease_end = common::int(call!(con, "PEXPIRETIME", "l").expect("PEXPIRETIME"));
    let rate_idle = rate_of(con, "l").expect("state")["idle_at"];
    assert!(lease_end > rate_idle);
}

#[test]
fn waiters_refused_by_the_rate_are_served_in_arrival_order_when_it_allows() {
    let server = Server::start();
    let con = &mut server.con();
    // A period long enough for the three waiters to queue, one after the
    // other, before the rate allows the first of them, on a loaded machine.
    let rate = ["RATE", "1", "PER", "1000"];
    let first = token(call!(
        con,
        "UNIQUE.LOCK",
        "api",
        "w0",
        "LIMIT",
        0,
        &rate[..]
    ));
    let started = Instant::now();
    let waiters: Vec<_> = (1..=3)
        .map(|i| {
            let mut c = server.con();
            let w = std::thread::spawn(move || {
                call!(
                    &mut c,
                    "UNIQUE.LOCK",
                    "api",
                    format!("w{i}"),
                    "LIMIT",
                    0,
                    &rate[..],
                    "WAIT",
                    10_000
                )
            });
            // Arrival order: each waiter is queued before the next one comes.
            wait_for("the waiter to queue", || {
                call!(&mut server.con(), "UNIQUE.WAITERS", "api") == Ok(Value::Int(i))
            });
            w
        })
        .collect();
    let tokens: Vec<i64> = waiters
        .into_iter()
        .map(|w| token(w.join().expect("a waiter")))
        .collect();
    // Served one per 1000 ms of the server's clock, oldest first, with no
    // client polling: the module's timer at each next allowed instant (so
    // before a second period is over, even if the machine delays the timer).
    let mut previous = first;
    for t in &tokens {
        assert!(*t > previous, "arrival order: {tokens:?}");
        let gap = ms_of(*t) - ms_of(previous);
        assert!(
            (1000..2000).contains(&gap),
            "{gap} ms between grants: {tokens:?}"
        );
        previous = *t;
    }
    assert!(started.elapsed() >= Duration::from_millis(2900));
    let m = common::metrics_json(con, &[]);
    assert_eq!(m["total"]["waited"], 3);
    assert_eq!(
        m["total"]["rate_denied"], 0,
        "a call that waits is not a denial"
    );
}

/// Every way a lock is kept (RDB, DUMP/RESTORE, an AOF rewrite and its
/// replay, a replica) keeps its rate state exactly: the same digest, and the
/// next grant is decided the same.
#[test]
fn the_rate_state_is_kept_by_every_persistence_and_replication_path() {
    let primary = Server::start_with(&["--appendonly", "yes"]);
    let replica = primary.start_replica(&[]);
    let p = &mut primary.con();
    // Two holders under LIMIT 2, spending a rate of 3 per 10 minutes with a
    // burst of 1: the burst is then spent.
    let rate = ["RATE", "3", "PER", "600000", "BURST", "1"];
    for jid in ["a", "b"] {
        token(call!(
            p,
            "UNIQUE.LOCK",
            "both",
            jid,
            "LIMIT",
            2,
            "TTL",
            600_000,
            &rate[..]
        ));
    }
    token(call!(
        p,
        "UNIQUE.LOCK",
        "alone",
        "a",
        "RATE",
        7,
        "PER",
        600_000
    ));
    assert_eq!(call!(p, "UNIQUE.UNLOCK", "alone", "a"), Ok(Value::Int(1)));
    let state = |con: &mut Connection| (rate_of(con, "both"), rate_of(con, "alone"));
    let before = state(p);
    assert!(before.0.is_some() && before.1.is_some());

    // The replica: the same data, by digest and by what it shows.
    let r = &mut replica.con();
    wait_for("the replica", || {
        digest(&mut primary.con()) == digest(&mut replica.con())
    });
    assert_eq!(state(r), before);

    // DUMP/RESTORE.
    let dump: Vec<u8> = redis::cmd("DUMP").arg("both").query(p).expect("DUMP");
    call!(p, "RESTORE", "copy", 0, dump).expect("RESTORE");
    assert_eq!(rate_of(p, "copy"), before.0);
    call!(p, "DEL", "copy").expect("DEL");

    // The AOF, rewritten then replayed.
    call!(p, "BGREWRITEAOF").expect("BGREWRITEAOF");
    common::wait_for_rewrite(p);
    let digest_before = digest(p);
    let mut primary = primary;
    primary.restart("NOSAVE");
    let p = &mut primary.con();
    assert_eq!(digest(p), digest_before);
    assert_eq!(state(p), before);

    // RDB.
    call!(p, "DEBUG", "RELOAD").expect("DEBUG RELOAD");
    assert_eq!(digest(p), digest_before);
    assert_eq!(state(p), before);
    // And the next grant is refused as before the restarts: the burst is spent.
    assert_eq!(
        call!(p, "UNIQUE.LOCK", "both", "c", "LIMIT", 3, &rate[..]),
        Ok(Value::Nil)
    );
}

/// A command in RESP, as an AOF holds it.
fn resp(args: &[&[u8]]) -> Vec<u8> {
    let mut out = format!("*{}\r\n", args.len()).into_bytes();
    for arg in args {
        out.extend(format!("${}\r\n", arg.len()).as_bytes());
        out.extend(*arg);
        out.extend(b"\r\n");
    }
    out
}

/// A grant that spends the rate goes to the replicas and the AOF as one
/// effect (GRANT, the key's rate state after the lease's numbers in their
/// argument); the effects older versions wrote for it (HOLD, then RATE;
/// RATEHOLD; LEASE with `now` apart) still load to the same value.
#[test]
fn a_rated_grant_is_one_effect_and_the_older_forms_still_load() {
    let mut server = Server::start_with(&["--appendonly", "yes", "--appendfsync", "always"]);
    let con = &mut server.con();
    token(call!(
        con,
        "UNIQUE.LOCK",
        "new",
        "a",
        "TTL",
        600_000,
        "RATE",
        3,
        "PER",
        600_000,
        "BURST",
        1
    ));
    let applied = common::aof_effects(&server.dir);
    let [effect] = applied.as_slice() else {
        panic!("one effect: {applied:?}");
    };
    // The jid, then the lease's three numbers and the rate's four in one
    // argument (a plain holder: nothing after).
    let [_, key, op, jid, numbers_text] = effect.as_slice() else {
        panic!("GRANT: {effect:?}");
    };
    assert_eq!(
        (key.as_slice(), op.as_slice(), jid.as_slice()),
        (&b"new"[..], &b"GRANT"[..], &b"a"[..])
    );
    let numbers: Vec<&[u8]> = numbers_text.split(|&b| b == b' ').collect();
    let [lease @ .., _, _, _, _] = numbers.as_slice() else {
        panic!("GRANT: {effect:?}");
    };
    // A new grant's `now`: its acquired_at.
    let now = lease[1];
    let rate = numbers.get(3..).unwrap_or_default().to_vec();
    assert_eq!(lease.len(), 3, "{effect:?}");
    assert_eq!(rate[..3], [&b"3"[..], b"600000", b"1"], "{effect:?}");

    // The same grant as older primaries wrote it, appended to the AOF: on
    // "old" HOLD then RATE, on "mid" RATEHOLD, on "leased" LEASE with `now`.
    server.kill();
    let mut holder: Vec<&[u8]> = vec![jid];
    holder.extend(lease);
    let mut old_hold: Vec<&[u8]> = vec![b"unique.apply", b"old", now, b"HOLD"];
    old_hold.extend(&holder);
    let mut old_rate: Vec<&[u8]> = vec![b"unique.apply", b"old", now, b"RATE"];
    old_rate.extend(&rate);
    let rate_text = rate.join(&b' ');
    let mut mid: Vec<&[u8]> = vec![b"unique.apply", b"mid", now, b"RATEHOLD", &rate_text];
    mid.extend(&holder);
    let leased: Vec<&[u8]> = vec![b"unique.apply", b"leased", now, b"LEASE", jid, numbers_text];
    let aof = common::aof_increments(&server.dir)
        .pop()
        .expect("an AOF increment");
    let mut bytes = std::fs::read(&aof).expect("the AOF");
    bytes.extend(resp(&old_hold));
    bytes.extend(resp(&old_rate));
    bytes.extend(resp(&mid));
    bytes.extend(resp(&leased));
    std::fs::write(&aof, bytes).expect("the AOF written");
    server.start_again();

    let con = &mut server.con();
    assert_eq!(holders(con, "old"), ["a"]);
    assert_eq!(holders(con, "mid"), ["a"]);
    assert_eq!(holders(con, "leased"), ["a"]);
    assert!(rate_of(con, "new").is_some());
    let dump = |con: &mut Connection, key: &str| -> Vec<u8> {
        redis::cmd("DUMP").arg(key).query(con).expect("DUMP")
    };
    assert_eq!(dump(con, "old"), dump(con, "new"), "the same value");
    assert_eq!(dump(con, "mid"), dump(con, "new"), "the same value");
    assert_eq!(dump(con, "leased"), dump(con, "new"), "the same value");
    // allowed_at is the time of the call while a grant is allowed (two calls, two
    // milliseconds maybe): the rest is the state itself.
    let state = |con: &mut Connection, key: &str| {
        let mut rate = rate_of(con, key).expect("a rate");
        rate.remove("allowed_at");
        rate
    };
    assert_eq!(state(con, "old"), state(con, "new"));
    assert_eq!(state(con, "mid"), state(con, "new"));
    assert_eq!(state(con, "leased"), state(con, "new"));
}
