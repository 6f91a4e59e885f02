//! UNIQUE.METRICS in its three formats, the gauges through every way a lock
//! comes and goes, the INFO section and the configuration.

mod common;

use common::{Connection, Server, Value, gauges, token, wait_for};
use serde_json::json;

fn counters(pairs: &[(&str, u64)]) -> serde_json::Value {
    let mut all = json!({"acquired": 0, "renewed": 0, "denied": 0, "released": 0, "unlock_missed": 0,
        "expired": 0, "reaped": 0, "waited": 0, "timed_out": 0, "rate_denied": 0});
    for (k, v) in pairs {
        all[*k] = json!(v);
    }
    all
}

/// A known sequence, and the counters it must give.
fn known_sequence(con: &mut Connection) {
    token(call!(
        con,
        "UNIQUE.LOCK",
        "a",
        "j1",
        "TYPE",
        "until_executed"
    ));
    assert_eq!(
        call!(con, "UNIQUE.LOCK", "a", "j2", "TYPE", "until_executed"),
        Ok(Value::Nil)
    );
    token(call!(con, "UNIQUE.LOCK", "a", "j1", "TTL", 60_000));
    assert_eq!(call!(con, "UNIQUE.UNLOCK", "a", "j1"), Ok(Value::Int(1)));
    assert_eq!(call!(con, "UNIQUE.UNLOCK", "a", "j1"), Ok(Value::Int(0)));
    token(call!(
        con,
        "UNIQUE.LOCK",
        "b",
        "short",
        "TYPE",
        "while_executing",
        "TTL",
        10
    ));
    wait_for("the lease to end", || {
        matches!(
            call!(con, "UNIQUE.LOCK", "b", "next", "TYPE", "while_executing"),
            Ok(Value::Int(_))
        )
    });
    token(call!(con, "UNIQUE.LOCK", "c", "j", "OWNER", "w1"));
    let _ = call!(con, "UNIQUE.REAP", "0", "COUNT", 1000, "OWNER", "w1").expect("REAP");
}

#[test]
fn a_known_sequence_gives_exact_counters_in_every_format() {
    let server = Server::start_with(&["--unique.reap-interval", "0"]);
    let con = &mut server.con();
    known_sequence(con);
    // The retry loop above may have been denied a few times before the lease ended.
    let m = common::metrics_json(con, &[]);
    let waits = m["types"]["while_executing"]["denied"]
        .as_u64()
        .unwrap_or(0);
    let expected = json!({
        "locks": 1,
        "holders": 1,
        "total": counters(&[("acquired", 4), ("renewed", 1), ("denied", 1 + waits), ("released", 1),
            ("unlock_missed", 1), ("expired", 1), ("reaped", 1)]),
        "types": {
            "until_executed": counters(&[("acquired", 1), ("renewed", 1), ("denied", 1), ("released", 1)]),
            "while_executing": counters(&[("acquired", 2), ("denied", waits), ("expired", 1)]),
            "lock": counters(&[("acquired", 1), ("reaped", 1)]),
        }
    });
    assert_eq!(m, expected);
    // MINUTES 2: the current and the previous minute hold everything so far.
    assert_eq!(common::metrics_json(con, &["MINUTES", "2"]), expected);

    // RESP: the same, as a flat array on RESP2 with the fields in order.
    let Ok(Value::Array(flat)) = call!(con, "UNIQUE.METRICS") else {
        panic!("METRICS")
    };
    let keys: Vec<Value> = flat.iter().step_by(2).cloned().collect();
    let names = ["locks", "holders", "total", "types"]
        .map(|k| Value::BulkString(k.into()))
        .to_vec();
    assert_eq!(keys, names);
    assert_eq!(flat[1], Value::Int(1));
    let Value::Array(total) = &flat[5] else {
        panic!("total")
    };
    assert_eq!(total[0], Value::BulkString(b"acquired".to_vec()));
    assert_eq!(total[1], Value::Int(4));
    assert_eq!(total.len(), 20);
    // ...and a map of maps on RESP3.
    let con3 = &mut server.con3();
    let Ok(Value::Map(map)) = call!(con3, "UNIQUE.METRICS") else {
        panic!("a map on RESP3")
    };
    assert_eq!(map.len(), 4);

    let text: String = redis::cmd("UNIQUE.METRICS")
        .arg("FORMAT")
        .arg("prometheus")
        .query(con)
        .expect("prom");
    for line in [
        "# TYPE unique_events_total counter",
        "unique_events_total{type=\"until_executed\",event=\"renewed\"} 1",
        "unique_events_total{type=\"while_executing\",event=\"expired\"} 1",
        "unique_events_total{type=\"lock\",event=\"reaped\"} 1",
        "# TYPE unique_unlock_missed_total counter",
        "unique_unlock_missed_total 1",
        "# TYPE unique_locks gauge",
        "unique_locks 1",
        "# TYPE unique_holders gauge",
        "unique_holders 1",
    ] {
        assert!(
            text.lines().any(|l| l == line),
            "missing {line:?} in\n{text}"
        );
    }
    assert!(
        text.lines()
            .any(|l| l.starts_with("# HELP unique_events_total "))
    );
    // A missed UNLOCK names no type: no per-type series that is always 0.
    assert!(
        !text.contains("event=\"unlock_missed\""),
        "a per-type unlock_missed series in\n{text}"
    );

    // The INFO section carries the gauges and the totals.
    let info: String = redis::cmd("INFO").arg("unique").query(con).expect("INFO");
    for field in [
        "# unique",
        "unique_locks:1",
        "unique_holders:1",
        "unique_acquired:4",
        "unique_renewed:1",
        "unique_released:1",
        "unique_unlock_missed:1",
        "unique_expired:1",
        "unique_reaped:1",
        "unique_waited:0",
        "unique_timed_out:0",
        "unique_rate_denied:0",
    ] {
        assert!(
            info.lines().any(|l| l.trim() == field),
            "missing {field} in\n{info}"
        );
    }
    let everything: String = redis::cmd("INFO")
        .arg("everything")
        .query(con)
        .expect("INFO");
    assert!(everything.contains("unique_acquired:4"));
}

#[test]
fn reset_zeroes_counters_and_forgets_types_but_not_gauges() {
    let server = Server::start_with(&["--unique.reap-interval", "0"]);
    let con = &mut server.con();
    known_sequence(con);
    assert_eq!(call!(con, "UNIQUE.METRICS", "reset"), Ok(Value::Okay));
    let m = common::metrics_json(con, &[]);
    assert_eq!(
        m,
        json!({"locks": 1, "holders": 1, "total": counters(&[]), "types": {}})
    );
    assert_eq!(
        common::metrics_json(con, &["MINUTES", "60"])["total"],
        counters(&[])
    );
}

#[test]
fn distinct_type_names_beyond_the_cap_count_as_other() {
    let server = Server::start_with(&["--unique.metrics-max-types", "2"]);
    let con = &mut server.con();
    for (i, t) in ["t1", "t2", "t3", "t4", "t1"].iter().enumerate() {
        token(call!(con, "UNIQUE.LOCK", format!("k{i}"), "j", "TYPE", *t));
    }
    let types = common::metrics_json(con, &[])["types"].clone();
    assert_eq!(types["t1"]["acquired"], 2);
    assert_eq!(types["t2"]["acquired"], 1);
    assert_eq!(types["other"]["acquired"], 2);
    assert!(types.get("t3").is_none());
}

#[test]
fn metrics_arguments() {
    let server = Server::start_with(&["--unique.metrics-minutes", "10"]);
    let con = &mut server.con();
    let integer = Err("ERR value is not an integer or out of range".to_string());
    let minutes = Err("ERR MINUTES must be 1 to 10 (unique.metrics-minutes)".to_string());
    assert_eq!(call!(con, "UNIQUE.METRICS", "MINUTES", 0), minutes);
    assert_eq!(call!(con, "UNIQUE.METRICS", "MINUTES", 11), minutes);
    assert_eq!(call!(con, "UNIQUE.METRICS", "MINUTES", -1), minutes);
    assert_eq!(call!(con, "UNIQUE.METRICS", "MINUTES", "soon"), integer);
    assert!(call!(con, "UNIQUE.METRICS", "MINUTES", 10).is_ok());
    assert_eq!(
        call!(con, "UNIQUE.METRICS", "FORMAT", "xml"),
        Err("ERR syntax error".into())
    );
    assert_eq!(
        call!(con, "UNIQUE.METRICS", "FORMAT"),
        Err("ERR syntax error".into())
    );
    assert_eq!(
        call!(con, "UNIQUE.METRICS", "FORMAT", "json", "FORMAT", "json"),
        Err("ERR syntax error".into())
    );
    assert_eq!(
        call!(con, "UNIQUE.METRICS", "RESET", "now"),
        Err("ERR syntax error".into())
    );
}

/// The server's `lazyfree-lazy-user-flush`: whether a plain FLUSHDB or
/// FLUSHALL frees the values on a background thread.
fn lazy_user_flush(con: &mut Connection) -> bool {
    yes(con, "lazyfree-lazy-user-flush")
}

/// A yes/no configuration of the server.
fn yes(con: &mut Connection, name: &str) -> bool {
    let pair: Vec<String> = redis::cmd("CONFIG")
        .arg("GET")
        .arg(name)
        .query(con)
        .expect("CONFIG GET");
    match pair.get(1).map(String::as_str) {
        Some("yes") => true,
        Some("no") => false,
        other => panic!("{name}: {other:?}"),
    }
}

/// The gauges after a plain flush: exact at once when the flush is
/// synchronous, within a bound when the server frees in the background.
fn after_flush(con: &mut Connection, lazy: bool, expected: (i64, i64), what: &str) {
    if lazy {
        wait_for(&format!("the background free after {what}"), || {
            gauges(con) == expected
        });
    } else {
        assert_eq!(gauges(con), expected, "a synchronous {what} frees at once");
    }
}

#[test]
fn gauges_follow_every_way_a_lock_comes_and_goes() {
    let server = Server::start_with(&["--unique.reap-interval", "0"]);
    let con = &mut server.con();
    let add = |con: &mut Connection, key: &str, n: usize| {
        for i in 0..n {
            token(call!(con, "UNIQUE.LOCK", key, format!("j{i}"), "LIMIT", 0));
        }
    };
    add(con, "a", 3);
    add(con, "b", 2);
    assert_eq!(gauges(con), (2, 5));
    call!(con, "UNIQUE.UNLOCK", "a", "j0").expect("UNLOCK");
    assert_eq!(gauges(con), (2, 4));
    call!(con, "DEL", "b").expect("DEL");
    assert_eq!(gauges(con), (1, 2));
    call!(con, "COPY", "a", "a2").expect("COPY");
    assert_eq!(gauges(con), (2, 4));
    let dump: Vec<u8> = redis::cmd("DUMP").arg("a").query(con).expect("DUMP");
    call!(con, "RESTORE", "a3", 0, dump.clone()).expect("RESTORE");
    assert_eq!(gauges(con), (3, 6));
    call!(con, "RESTORE", "a3", 0, dump, "REPLACE").expect("RESTORE REPLACE");
    assert_eq!(gauges(con), (3, 6));
    call!(con, "UNLINK", "a3").expect("UNLINK");
    assert_eq!(gauges(con), (2, 4));
    // DEBUG RELOAD empties the dataset as a replica's full sync does: on a
    // server with replica-lazy-flush yes (Valkey's default) the old values are
    // freed on a background thread, so the gauges count them until then.
    let lazy_reload = yes(con, "replica-lazy-flush");
    call!(con, "DEBUG", "RELOAD").expect("DEBUG RELOAD");
    after_flush(con, lazy_reload, (2, 4), "DEBUG RELOAD");
    call!(con, "SWAPDB", 0, 1).expect("SWAPDB");
    assert_eq!(gauges(con), (2, 4), "gauges are server-wide");
    // A plain FLUSHDB / FLUSHALL is synchronous when lazyfree-lazy-user-flush
    // is no (Redis 7.x's default): the gauges are exact on the reply. Valkey 8
    // defaults it to yes: the values are freed a moment later on a background
    // thread, and the gauges follow them then.
    let lazy = lazy_user_flush(con);
    call!(con, "SELECT", 1).expect("SELECT");
    call!(con, "FLUSHDB").expect("FLUSHDB");
    after_flush(con, lazy, (0, 0), "FLUSHDB");
    add(con, "c", 2);
    call!(con, "SELECT", 0).expect("SELECT");
    add(con, "d", 1);
    assert_eq!(gauges(con), (2, 3));
    call!(con, "FLUSHALL").expect("FLUSHALL");
    after_flush(con, lazy, (0, 0), "FLUSHALL");
    // SYNC is synchronous on every server, whatever the configuration.
    add(con, "c", 2);
    call!(con, "SELECT", 1).expect("SELECT");
    add(con, "d", 1);
    assert_eq!(gauges(con), (2, 3));
    call!(con, "FLUSHDB", "SYNC").expect("FLUSHDB SYNC");
    assert_eq!(gauges(con), (1, 2), "FLUSHDB SYNC frees at once");
    call!(con, "FLUSHALL", "SYNC").expect("FLUSHALL SYNC");
    assert_eq!(gauges(con), (0, 0), "FLUSHALL SYNC frees at once");
    add(con, "e", 4);
    call!(con, "FLUSHALL", "ASYNC").expect("FLUSHALL ASYNC");
    wait_for("the background free", || gauges(con) == (0, 0));
    // A key that expires by itself.
    token(call!(con, "UNIQUE.LOCK", "f", "j", "TTL", 10));
    wait_for("Redis to expire the key", || gauges(con) == (0, 0));
}

#[test]
fn gauges_survive_an_aof_restart() {
    let mut server = Server::start_with(&["--appendonly", "yes", "--unique.reap-interval", "0"]);
    let con = &mut server.con();
    for i in 0..3 {
        token(call!(con, "UNIQUE.LOCK", "k", format!("j{i}"), "LIMIT", 0));
    }
    token(call!(con, "UNIQUE.LOCK", "k2", "j"));
    server.restart("NOSAVE");
    assert_eq!(gauges(&mut server.con()), (2, 4));
}

#[test]
fn configuration_ranges_are_enforced() {
    let server = Server::start();
    let con = &mut server.con();
    for (name, min, max) in [
        ("unique.reap-interval", 0, 60_000),
        ("unique.reap-batch", 1, 100_000),
        ("unique.max-meta-bytes", 0, 1_048_576),
        ("unique.metrics-minutes", 1, 1440),
        ("unique.metrics-max-types", 1, 4096),
    ] {
        for ok in [min, max] {
            assert_eq!(
                call!(con, "CONFIG", "SET", name, ok),
                Ok(Value::Okay),
                "{name} {ok}"
            );
            let got: Vec<String> = redis::cmd("CONFIG")
                .arg("GET")
                .arg(name)
                .query(con)
                .expect("GET");
            assert_eq!(got, [name.to_string(), ok.to_string()]);
        }
        for bad in [min - 1, max + 1] {
            assert!(
                call!(con, "CONFIG", "SET", name, bad).is_err(),
                "{name} accepted {bad}"
            );
        }
    }
}

#[test]
fn defaults_and_module_arguments() {
    let server = Server::start();
    let con = &mut server.con();
    let got: Vec<String> = redis::cmd("CONFIG")
        .arg("GET")
        .arg("unique.*")
        .query(con)
        .expect("GET");
    let pairs: Vec<(String, String)> = got
        .chunks(2)
        .map(|p| (p[0].clone(), p[1].clone()))
        .collect();
    for (name, default) in [
        ("unique.reap-interval", "100"),
        ("unique.reap-batch", "100"),
        ("unique.max-meta-bytes", "16384"),
        ("unique.metrics-minutes", "60"),
        ("unique.metrics-max-types", "64"),
    ] {
        assert!(
            pairs.contains(&(name.to_string(), default.to_string())),
            "{name} in {pairs:?}"
        );
    }
}

#[test]
fn module_arguments_set_the_configuration() {
    // Words right after `--loadmodule path` are the module's arguments.
    let server = Server::start_with(&["reap-batch", "7", "metrics-max-types", "9"]);
    let con = &mut server.con();
    let got: Vec<String> = redis::cmd("CONFIG")
        .arg("GET")
        .arg("unique.reap-batch")
        .query(con)
        .expect("GET");
    assert_eq!(got, ["unique.reap-batch", "7"]);
    let got: Vec<String> = redis::cmd("CONFIG")
        .arg("GET")
        .arg("unique.metrics-max-types")
        .query(con)
        .expect("GET");
    assert_eq!(got, ["unique.metrics-max-types", "9"]);
}

#[test]
fn migrate_moves_the_lock_and_both_gauges_follow() {
    let (from, to) = (Server::start(), Server::start());
    let (a, b) = (&mut from.con(), &mut to.con());
    let t = token(call!(
        a,
        "UNIQUE.LOCK",
        "k",
        "j1",
        "LIMIT",
        0,
        "TTL",
        600_000
    ));
    token(call!(a, "UNIQUE.LOCK", "k", "j2", "LIMIT", 0));
    call!(a, "MIGRATE", "127.0.0.1", to.port, "k", 0, 5_000).expect("MIGRATE");
    assert_eq!(gauges(a), (0, 0));
    assert_eq!(gauges(b), (1, 2));
    assert_eq!(common::holders(b, "k"), ["j1", "j2"]);
    // The token came along: the lock's holder keeps it, and grants there go above it.
    assert_eq!(token(call!(b, "UNIQUE.LOCK", "k", "j1", "LIMIT", 0)), t);
    assert!(token(call!(b, "UNIQUE.LOCK", "k", "j3", "LIMIT", 0)) > t);
}
