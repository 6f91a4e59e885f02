//! Locks come back exactly as they were after DEBUG RELOAD, an RDB restart
//! and an AOF restart (with and without the RDB preamble), and tokens keep
//! increasing across them.

mod common;

use common::{Connection, Server, Value, digest, token, wait_for};

/// Holders enough on one key for its indexed layout: leases of different
/// lengths (or none, every `unleased`-th), owners, META and a custom type on
/// some, and every tenth released again, so that the layout has holes that
/// later grants reuse. Returns the highest token granted.
fn many_holders(con: &mut Connection, key: &str, n: i64, unleased: Option<i64>) -> i64 {
    let mut pipe = redis::pipe();
    for i in 0..n {
        let cmd = pipe
            .cmd("UNIQUE.LOCK")
            .arg(key)
            .arg(format!("m{i}"))
            .arg("LIMIT")
            .arg(0);
        if unleased.is_none_or(|k| i % k != 0) {
            cmd.arg("TTL").arg(600_000 + (i * 7919) % 100_000);
        }
        if i % 3 == 0 {
            cmd.arg("OWNER").arg(format!("host:{}", i % 5));
        }
        if i % 4 == 0 {
            cmd.arg("META").arg(format!(r#"{{"n":{i}}}"#));
        }
        if i % 11 == 0 {
            cmd.arg("TYPE").arg("my:type");
        }
    }
    for i in (5..n).step_by(10) {
        pipe.cmd("UNIQUE.UNLOCK")
            .arg(key)
            .arg(format!("m{i}"))
            .ignore();
    }
    for i in (5..n).step_by(20) {
        pipe.cmd("UNIQUE.LOCK")
            .arg(key)
            .arg(format!("again{i}"))
            .arg("LIMIT")
            .arg(0)
            .arg("TTL")
            .arg(650_000);
    }
    let tokens: Vec<i64> = pipe.query(con).expect("many holders");
    assert_eq!(tokens.len() as i64, n + (n - 5 + 19) / 20);
    tokens.into_iter().max().unwrap_or(0)
}

/// A few locks that use every field, with long leases so that nothing runs
/// out during the test, and two of many holders. Returns the highest token
/// granted.
fn populate(con: &mut Connection) -> i64 {
    let mut max = many_holders(con, "many", 2_000, None);
    max = max.max(many_holders(con, "many:unleased", 300, Some(7)));
    for i in 0..20 {
        let key = format!("lock:{i}");
        let t = token(call!(
            con,
            "UNIQUE.LOCK",
            &key,
            format!("a{i}"),
            "LIMIT",
            0,
            "TTL",
            600_000 + i
        ));
        max = max.max(t);
        let t = token(call!(
            con,
            "UNIQUE.LOCK",
            &key,
            format!("b{i}"),
            "LIMIT",
            0,
            "TYPE",
            "until_executed",
            "OWNER",
            format!("host:{i}"),
            "META",
            format!(r#"{{"n":{i}}}"#)
        ));
        max = max.max(t);
    }
    // Groups and modes: shared holders of two groups (some with a lease,
    // many enough on one key to be indexed), and a writer.
    for i in 0..40 {
        let mut cmd = redis::cmd("UNIQUE.LOCK");
        cmd.arg("fair").arg(format!("f{i}")).arg("LIMIT").arg(0);
        cmd.arg("GROUP")
            .arg(format!("tenant:{}", i % 2))
            .arg("MODE")
            .arg("shared");
        if i % 3 == 0 {
            cmd.arg("TTL").arg(600_000 + i);
        }
        max = max.max(token(common::run(&cmd, con)));
    }
    max = max.max(token(call!(
        con,
        "UNIQUE.LOCK",
        "writer",
        "w",
        "MODE",
        "exclusive",
        "GROUP",
        "ops",
        "TTL",
        800_000
    )));
    call!(con, "UNIQUE.LOCK", "leased", "only", "TTL", 900_000).expect("lock");
    max.max(token(call!(
        con,
        "UNIQUE.LOCK",
        "binary",
        b"\x00\xff".as_slice()
    )))
}

/// Everything LOCKEDBY WITHMETA shows, except the ttl that moves with time,
/// plus each key's absolute expiry.
fn snapshot(con: &mut Connection) -> Vec<(String, Value, i64)> {
    let mut keys: Vec<String> = redis::cmd("KEYS").arg("*").query(con).expect("KEYS");
    keys.sort();
    keys.into_iter()
        .map(|k| {
            let mut holders = call!(con, "UNIQUE.LOCKEDBY", &k, "WITHMETA").expect("LOCKEDBY");
            if let Value::Array(list) = &mut holders {
                for h in list {
                    if let Value::Array(flat) = h {
                        flat.drain(8..10); // "ttl" and its value
                    }
                }
            }
            let at: i64 = redis::cmd("PEXPIRETIME")
                .arg(&k)
                .query(con)
                .expect("PEXPIRETIME");
            (k, holders, at)
        })
        .collect()
}

fn assert_next_token_above(con: &mut Connection, max: i64) {
    let t = token(call!(con, "UNIQUE.LOCK", "after-restart", "j"));
    assert!(t > max, "token {t} is not above {max}");
}

#[test]
fn debug_reload_gives_back_the_same_locks() {
    let server = Server::start();
    let con = &mut server.con();
    let max = populate(con);
    let (before, digest_before) = (snapshot(con), digest(con));
    call!(con, "DEBUG", "RELOAD").expect("DEBUG RELOAD");
    assert_eq!(snapshot(con), before);
    assert_eq!(digest(con), digest_before);
    assert_next_token_above(con, max);
    // The big lock came back whole and keeps working: a holder found by its
    // jid, the key's expiry that of its latest lease, none without one.
    assert_eq!(common::with_meta(con, "many").len(), 2_000 - 200 + 100);
    let renewed = token(call!(
        con,
        "UNIQUE.LOCK",
        "many",
        "m1",
        "LIMIT",
        0,
        "TTL",
        800_000
    ));
    assert!(renewed <= max, "a renewal keeps its token");
    let at: i64 = redis::cmd("PEXPIRETIME")
        .arg("many")
        .query(con)
        .expect("PEXPIRETIME");
    let pttl: i64 = redis::cmd("PTTL").arg("many").query(con).expect("PTTL");
    assert!(at > 0 && (700_000..=800_000).contains(&pttl), "{at} {pttl}");
    assert_eq!(call!(con, "UNIQUE.UNLOCK", "many", "m1"), Ok(Value::Int(1)));
    let at: i64 = redis::cmd("PEXPIRETIME")
        .arg("many:unleased")
        .query(con)
        .expect("PEXPIRETIME");
    assert_eq!(at, -1, "a holder without a lease keeps the key");
}

#[test]
fn an_rdb_restart_gives_back_the_same_locks() {
    let mut server = Server::start();
    let max = populate(&mut server.con());
    let (before, digest_before) = (snapshot(&mut server.con()), digest(&mut server.con()));
    server.restart("SAVE");
    let con = &mut server.con();
    assert_eq!(snapshot(con), before);
    assert_eq!(digest(con), digest_before);
    assert_next_token_above(con, max);
}

fn aof_restart(preamble: &str) {
    let mut server =
        Server::start_with(&["--appendonly", "yes", "--aof-use-rdb-preamble", preamble]);
    let con = &mut server.con();
    let mut max = populate(con);
    call!(con, "BGREWRITEAOF").expect("BGREWRITEAOF");
    common::wait_for_rewrite(con);
    // More after the rewrite: a grant, a renewal, a release, a new lease.
    max = max.max(token(call!(
        con,
        "UNIQUE.LOCK",
        "lock:0",
        "c0",
        "LIMIT",
        0,
        "TTL",
        700_000
    )));
    token(call!(
        con,
        "UNIQUE.LOCK",
        "lock:1",
        "a1",
        "TTL",
        800_000,
        "OWNER",
        "w9"
    ));
    assert_eq!(
        call!(con, "UNIQUE.UNLOCK", "lock:2", "b2"),
        Ok(Value::Int(1))
    );
    // A lease that outlasts any restart: the snapshots compare every key, so
    // none may end in between (a loaded machine takes seconds to restart).
    max = max.max(token(call!(con, "UNIQUE.LOCK", "new", "s", "TTL", 600_000)));
    let new_end: i64 = redis::cmd("PEXPIRETIME")
        .arg("new")
        .query(con)
        .expect("PEXPIRETIME");
    let (before, digest_before) = (snapshot(con), digest(con));

    server.restart("NOSAVE");
    let con = &mut server.con();
    assert_eq!(snapshot(con), before);
    assert_eq!(digest(con), digest_before);
    // Leases are absolute: replaying the AOF, seconds later, did not extend
    // the new one by the time the restart took.
    let after: i64 = redis::cmd("PEXPIRETIME")
        .arg("new")
        .query(con)
        .expect("PEXPIRETIME");
    assert_eq!(after, new_end, "the new lease moved");
    assert_next_token_above(con, max);
}

#[test]
fn an_aof_restart_without_the_rdb_preamble_gives_back_the_same_locks() {
    aof_restart("no");
}

#[test]
fn an_aof_restart_with_the_rdb_preamble_gives_back_the_same_locks() {
    aof_restart("yes");
}

#[test]
fn tokens_stay_above_those_of_locks_deleted_before_a_restart() {
    let mut server = Server::start();
    let con = &mut server.con();
    let t = token(call!(con, "UNIQUE.LOCK", "k", "j"));
    call!(con, "UNIQUE.UNLOCK", "k", "j").expect("unlock");
    server.restart("SAVE"); // nothing left to save: only the clock floor remains
    assert_next_token_above(&mut server.con(), t);
}

/// `appendfsync always`: a grant the client saw acknowledged survives a
/// `kill -9` of the server in the middle of the traffic.
#[test]
fn no_acknowledged_grant_is_lost_to_kill_9() {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::{Arc, Mutex};

    let mut server = Server::start_with(&["--appendonly", "yes", "--appendfsync", "always"]);
    let acked = Arc::new(Mutex::new(Vec::<(String, i64)>::new()));
    let stop = Arc::new(AtomicBool::new(false));
    let writers: Vec<_> = (0..4)
        .map(|w| {
            let (acked, stop) = (acked.clone(), stop.clone());
            let mut con = server.con();
            std::thread::spawn(move || {
                for i in 0.. {
                    if stop.load(Ordering::Relaxed) {
                        break;
                    }
                    let key = format!("job:{w}:{i}");
                    match call!(&mut con, "UNIQUE.LOCK", &key, "j", "TYPE", "until_executed") {
                        Ok(Value::Int(t)) => acked.lock().expect("acked").push((key, t)),
                        _ => break, // the server is gone
                    }
                }
            })
        })
        .collect();
    wait_for("2000 acknowledged grants", || {
        acked.lock().map(|a| a.len()).unwrap_or(0) >= 2000
    });
    server.kill(); // while the writers are still writing
    stop.store(true, Ordering::Relaxed);
    for w in writers {
        w.join().expect("writer");
    }
    server.start_again();
    let con = &mut server.con();
    let acked = acked.lock().expect("acked").clone();
    for (key, t) in &acked {
        let Ok(Value::Array(list)) = call!(con, "UNIQUE.LOCKEDBY", key, "WITHMETA") else {
            panic!("LOCKEDBY")
        };
        let [Value::Array(h)] = list.as_slice() else {
            panic!("{key}: lost ({list:?})")
        };
        assert_eq!(h.get(3), Some(&Value::Int(*t)), "{key}: same token");
    }
    println!("{} acknowledged grants survived kill -9", acked.len());
}

/// A lock as the build before groups and modes dumped it (encoding version
/// 2: three holders, one with every field, one without a lease, a rate):
/// DUMP of `UNIQUE.LOCK old a LIMIT 0 PXAT 4102444800000 TYPE until_executed
/// OWNER host:1 META {"n":1}`, `UNIQUE.LOCK old b LIMIT 0` and
/// `UNIQUE.LOCK old c LIMIT 0 RATE 5 PER 1000 PXAT 4102444800000` on
/// Redis 7.0.15. It loads with no group and no mode, and saves again.
const PAYLOAD_BEFORE_GROUPS: &str = "0781ba78aafa5a1c90020203050161028100066130be7906980281000001a218c4378f0281000003bb2cc3d800050e756e74696c5f65786563757465640506686f73743a3105077b226e223a317d050162028100066130be792da80281000001a218c437990281ffffffffffffffff05046c6f636b05000500050163028100066130be7949000281000001a218c437a00281000003bb2cc3d80005046c6f636b05000500020102050243e8020002810000082a7bd51a08000a00d0027898a9560670";

#[test]
fn a_payload_written_before_groups_and_modes_loads() {
    let server = Server::start();
    let con = &mut server.con();
    let hex = PAYLOAD_BEFORE_GROUPS.as_bytes();
    let payload: Vec<u8> = hex
        .chunks(2)
        .map(|pair| u8::from_str_radix(std::str::from_utf8(pair).expect("hex"), 16).expect("hex"))
        .collect();
    call!(con, "RESTORE", "old", 0, payload).expect("RESTORE of a version 2 payload");
    let check = |con: &mut Connection| {
        let holders = common::with_meta(con, "old");
        let jids: Vec<Value> = holders.iter().map(|h| common::field(h, "jid")).collect();
        assert_eq!(
            jids,
            ["a", "b", "c"]
                .map(|j| Value::BulkString(j.into()))
                .to_vec()
        );
        let a = &holders[0];
        assert_eq!(
            common::field(a, "type"),
            Value::BulkString(b"until_executed".to_vec())
        );
        assert_eq!(
            common::field(a, "owner"),
            Value::BulkString(b"host:1".to_vec())
        );
        assert_eq!(
            common::field(a, "meta"),
            Value::BulkString(br#"{"n":1}"#.to_vec())
        );
        assert_eq!(
            common::field(a, "expires_at"),
            Value::Int(4_102_444_800_000)
        );
        assert_eq!(common::field(&holders[1], "expires_at"), Value::Int(-1));
        for h in &holders {
            assert_eq!(common::field(h, "group"), Value::Nil);
            assert_eq!(common::field(h, "mode"), Value::Nil);
        }
        assert!(matches!(
            call!(con, "UNIQUE.RATE", "old"),
            Ok(Value::Array(_))
        ));
    };
    check(con);
    // Saved again in this build's encoding, it reads back the same.
    call!(con, "DEBUG", "RELOAD").expect("DEBUG RELOAD");
    check(con);
    assert!(token(call!(con, "UNIQUE.LOCK", "after", "j")) > 1_795_711_842_208_000);
}
