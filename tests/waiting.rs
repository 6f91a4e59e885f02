//! UNIQUE.LOCK ... WAIT: blocked clients, served first come, first served.

mod common;

use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use common::{Connection, Server, Value, digest, holders, int, token, wait_for};

/// Clients waiting on this server, from INFO.
fn waiting(con: &mut Connection) -> i64 {
    let info: String = redis::cmd("INFO").arg("unique").query(con).expect("INFO");
    info.lines()
        .find_map(|l| l.strip_prefix("unique_waiting:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(-1)
}

/// A waiter's thread: its reply, and when it came.
type Waiter = JoinHandle<(Result<Value, String>, Instant)>;

/// Starts a client blocked in LOCK ... WAIT, and waits until the server
/// counts it, so that waiters queue in the order they were started.
fn start_waiter(server: &Server, args: Vec<String>) -> Waiter {
    start_waiter_or_reply(server, args).0
}

/// As [`start_waiter`], but a call that got its reply without blocking (the
/// lock came free before it arrived) ends the wait too: with `false`.
fn start_waiter_or_reply(server: &Server, args: Vec<String>) -> (Waiter, bool) {
    let mut observer = server.con();
    let before = waiting(&mut observer);
    let mut con = server.con();
    let handle = std::thread::spawn(move || {
        let mut cmd = redis::cmd("UNIQUE.LOCK");
        cmd.arg(&args);
        let reply = common::run(&cmd, &mut con);
        (reply, Instant::now())
    });
    let mut blocked = false;
    wait_for("the waiter to block", || {
        blocked = waiting(&mut observer) == before + 1;
        blocked || handle.is_finished()
    });
    (handle, blocked)
}

fn args(a: &[&str]) -> Vec<String> {
    a.iter().map(|s| s.to_string()).collect()
}

/// One field of `jid`'s holder of `key`.
fn field_of(con: &mut Connection, key: &str, jid: &str, name: &str) -> Value {
    let holders = common::with_meta(con, key);
    let holder = holders
        .iter()
        .find(|h| common::field(h, "jid") == Value::BulkString(jid.as_bytes().to_vec()))
        .unwrap_or_else(|| panic!("{jid} does not hold {key}"));
    common::field(holder, name)
}

#[test]
fn unlock_hands_the_lock_to_the_waiter() {
    let server = Server::start();
    let con = &mut server.con();
    let t1 = token(call!(con, "UNIQUE.LOCK", "k", "a"));
    let waiter = start_waiter(&server, args(&["k", "b", "WAIT", "10000"]));
    assert_eq!(holders(con, "k"), ["a"]);
    let unlocked = Instant::now();
    assert_eq!(call!(con, "UNIQUE.UNLOCK", "k", "a"), Ok(Value::Int(1)));
    let (reply, at) = waiter.join().expect("waiter");
    let t2 = token(reply);
    assert!(t2 > t1);
    // Served by the UNLOCK, long before its 10 s wait could run out.
    assert!(at.duration_since(unlocked) < Duration::from_secs(5));
    assert_eq!(holders(con, "k"), ["b"]);
    assert_eq!(waiting(con), 0);
    let m = common::metrics_json(con, &[]);
    assert_eq!(m["total"]["waited"], 1);
    assert_eq!(m["total"]["acquired"], 2);
    assert_eq!(m["total"]["denied"], 0, "a call that waits is not a denial");
}

#[test]
fn a_wait_that_runs_out_replies_nil_and_adds_nothing() {
    let server = Server::start();
    let con = &mut server.con();
    token(call!(con, "UNIQUE.LOCK", "k", "a"));
    let start = Instant::now();
    assert_eq!(
        call!(
            con,
            "UNIQUE.LOCK",
            "k",
            "b",
            "WAIT",
            200,
            "TYPE",
            "until_executed"
        ),
        Ok(Value::Nil)
    );
    assert!(start.elapsed() >= Duration::from_millis(200), "it waited");
    assert_eq!(holders(con, "k"), ["a"]);
    assert_eq!(waiting(con), 0);
    let m = common::metrics_json(con, &[]);
    assert_eq!(m["types"]["until_executed"]["timed_out"], 1);
    // The slot it gave up goes to nobody: the next UNLOCK frees the lock.
    assert_eq!(call!(con, "UNIQUE.UNLOCK", "k", "a"), Ok(Value::Int(1)));
    assert_eq!(call!(con, "EXISTS", "k"), Ok(Value::Int(0)));
}

#[test]
fn client_unblock_ends_a_wait_with_nil_and_its_deadline_timer() {
    let server = Server::start();
    let con = &mut server.con();
    token(call!(con, "UNIQUE.LOCK", "k", "a"));
    let mut waiter = server.con();
    let id = int(call!(&mut waiter, "CLIENT", "ID").expect("CLIENT ID"));
    let blocked = std::thread::spawn(move || {
        call!(
            &mut waiter,
            "UNIQUE.LOCK",
            "k",
            "b",
            "WAIT",
            600_000,
            "TYPE",
            "t"
        )
    });
    wait_for("the waiter to block", || waiting(con) == 1);
    assert_eq!(common::info_field(con, "unique", "unique_timers_armed"), 1);
    assert_eq!(call!(con, "CLIENT", "UNBLOCK", id), Ok(Value::Int(1)));
    assert_eq!(blocked.join().expect("waiter"), Ok(Value::Nil));
    assert_eq!(waiting(con), 0);
    // Its 10-minute deadline timer went with it.
    assert_eq!(common::info_field(con, "unique", "unique_timers_armed"), 0);
    assert_eq!(common::metrics_json(con, &[])["types"]["t"]["timed_out"], 1);
    assert_eq!(holders(con, "k"), ["a"]);
}

#[test]
fn waiters_counts_the_clients_waiting_on_one_key() {
    let server = Server::start();
    let con = &mut server.con();
    assert_eq!(call!(con, "UNIQUE.WAITERS", "k"), Ok(Value::Int(0)));
    token(call!(con, "UNIQUE.LOCK", "k", "a"));
    token(call!(con, "UNIQUE.LOCK", "other", "a"));
    let first = start_waiter(&server, args(&["k", "b", "WAIT", "10000"]));
    let second = start_waiter(&server, args(&["k", "c", "WAIT", "10000"]));
    let elsewhere = start_waiter(&server, args(&["other", "d", "WAIT", "10000"]));
    assert_eq!(call!(con, "UNIQUE.WAITERS", "k"), Ok(Value::Int(2)));
    assert_eq!(call!(con, "UNIQUE.WAITERS", "other"), Ok(Value::Int(1)));
    assert_eq!(call!(con, "UNIQUE.WAITERS", "none"), Ok(Value::Int(0)));
    call!(con, "SELECT", 1).expect("SELECT");
    assert_eq!(
        call!(con, "UNIQUE.WAITERS", "k"),
        Ok(Value::Int(0)),
        "another database, another key"
    );
    call!(con, "SELECT", 0).expect("SELECT");
    assert_eq!(call!(con, "UNIQUE.UNLOCK", "k", "a"), Ok(Value::Int(1)));
    token(first.join().expect("waiter").0);
    assert_eq!(call!(con, "UNIQUE.WAITERS", "k"), Ok(Value::Int(1)));
    assert_eq!(call!(con, "UNIQUE.UNLOCK", "k", "b"), Ok(Value::Int(1)));
    token(second.join().expect("waiter").0);
    assert_eq!(call!(con, "UNIQUE.UNLOCK", "other", "a"), Ok(Value::Int(1)));
    token(elsewhere.join().expect("waiter").0);
    assert_eq!(call!(con, "UNIQUE.WAITERS", "k"), Ok(Value::Int(0)));
    assert!(call!(con, "UNIQUE.WAITERS").is_err(), "arity");
}

#[test]
fn waiters_are_served_first_come_first_served() {
    let server = Server::start();
    let con = &mut server.con();
    token(call!(con, "UNIQUE.LOCK", "k", "holder"));
    let waiters: Vec<_> = ["w1", "w2", "w3", "w4"]
        .iter()
        .map(|w| start_waiter(&server, args(&["k", w, "WAIT", "10000"])))
        .collect();
    let mut current = "holder".to_string();
    for expected in ["w1", "w2", "w3", "w4"] {
        assert_eq!(
            call!(con, "UNIQUE.UNLOCK", "k", &current),
            Ok(Value::Int(1))
        );
        assert_eq!(holders(con, "k"), [expected], "served in arrival order");
        current = expected.to_string();
    }
    for w in waiters {
        token(w.join().expect("waiter").0);
    }
}

#[test]
fn a_newcomer_queues_behind_the_waiters() {
    let server = Server::start();
    let con = &mut server.con();
    token(call!(con, "UNIQUE.LOCK", "k", "a", "LIMIT", 2));
    // b asks for LIMIT 1: one holder is too many for it, so it waits...
    let waiter = start_waiter(&server, args(&["k", "b", "LIMIT", "1", "WAIT", "10000"]));
    // ...and c, though LIMIT 2 would admit it, may not overtake b.
    assert_eq!(
        call!(con, "UNIQUE.LOCK", "k", "c", "LIMIT", 2),
        Ok(Value::Nil)
    );
    // A holder still renews while others wait.
    token(call!(
        con,
        "UNIQUE.LOCK",
        "k",
        "a",
        "LIMIT",
        2,
        "TTL",
        60_000
    ));
    assert_eq!(call!(con, "UNIQUE.UNLOCK", "k", "a"), Ok(Value::Int(1)));
    token(waiter.join().expect("waiter").0);
    assert_eq!(holders(con, "k"), ["b"]);
}

#[test]
fn a_lease_running_out_serves_a_waiter_with_no_other_command() {
    let server = Server::start_with(&["--unique.reap-interval", "0"]);
    let con = &mut server.con();
    let mut lags = Vec::new();
    // Long enough for the waiter to block before it ends, on a loaded machine;
    // a round whose lease ended first is played again with a longer lease.
    let mut lease = 500;
    let mut round = 0;
    while lags.len() < 5 {
        round += 1;
        let key = format!("k{round}");
        token(call!(con, "UNIQUE.LOCK", &key, "old", "TTL", lease));
        let expires_at = int(field_of(con, &key, "old", "expires_at"));
        let (waiter, blocked) = start_waiter_or_reply(
            &server,
            args(&[&key, "new", "WAIT", "10000", "TTL", "60000"]),
        );
        token(waiter.join().expect("waiter").0);
        let acquired_at = int(field_of(con, &key, "new", "acquired_at"));
        assert!(acquired_at >= expires_at, "granted before the lease ended");
        if !blocked {
            assert!(
                round < 20,
                "the waiter never blocked before the lease ended"
            );
            lease *= 2;
            continue;
        }
        lags.push(acquired_at - expires_at);
    }
    lags.sort_unstable();
    // The spec: within 10 ms of expires_at (server clock). The median is held
    // to it; every round must at least be well before the 10 s wait.
    assert!(lags[2] <= 10, "lags after expires_at (ms): {lags:?}");
    assert!(lags[4] <= 1000, "lags after expires_at (ms): {lags:?}");
}

#[test]
fn limit_n_with_waiters_and_reap() {
    let server = Server::start();
    let con = &mut server.con();
    token(call!(
        con,
        "UNIQUE.LOCK",
        "k",
        "a",
        "LIMIT",
        2,
        "OWNER",
        "dead"
    ));
    token(call!(
        con,
        "UNIQUE.LOCK",
        "k",
        "b",
        "LIMIT",
        2,
        "OWNER",
        "dead"
    ));
    let w1 = start_waiter(&server, args(&["k", "c", "LIMIT", "2", "WAIT", "10000"]));
    let w2 = start_waiter(&server, args(&["k", "d", "LIMIT", "2", "WAIT", "10000"]));
    let w3 = start_waiter(&server, args(&["k", "e", "LIMIT", "2", "WAIT", "10000"]));
    // REAP frees both slots at once: the two longest waiters get them.
    let _ = call!(con, "UNIQUE.REAP", 0, "COUNT", 1000, "OWNER", "dead").expect("REAP");
    token(w1.join().expect("w1").0);
    token(w2.join().expect("w2").0);
    assert_eq!(holders(con, "k"), ["c", "d"]);
    assert_eq!(waiting(con), 1);
    assert_eq!(call!(con, "UNIQUE.UNLOCK", "k", "c"), Ok(Value::Int(1)));
    token(w3.join().expect("w3").0);
    assert_eq!(holders(con, "k"), ["d", "e"]);
}

#[test]
fn deleting_the_key_serves_its_waiters() {
    let server = Server::start();
    let con = &mut server.con();
    for (key, how) in [("k1", "DEL"), ("k2", "UNLINK"), ("k3", "FLUSHALL")] {
        token(call!(con, "UNIQUE.LOCK", key, "a"));
        let waiter = start_waiter(&server, args(&[key, "b", "WAIT", "10000"]));
        match how {
            "FLUSHALL" => call!(con, "FLUSHALL").expect("FLUSHALL"),
            cmd => call!(con, cmd, key).expect("delete"),
        };
        token(waiter.join().expect("waiter").0);
        assert_eq!(holders(con, key), ["b"], "{how}");
    }
}

#[test]
fn a_waiter_that_disconnects_is_forgotten() {
    let server = Server::start();
    let con = &mut server.con();
    token(call!(con, "UNIQUE.LOCK", "k", "a"));
    let mut waiter = server.con();
    let id: i64 = redis::cmd("CLIENT")
        .arg("ID")
        .query(&mut waiter)
        .expect("CLIENT ID");
    let handle = std::thread::spawn(move || {
        let mut cmd = redis::cmd("UNIQUE.LOCK");
        cmd.arg("k").arg("b").arg("WAIT").arg(10_000);
        common::run(&cmd, &mut waiter)
    });
    wait_for("the waiter to block", || waiting(con) == 1);
    call!(con, "CLIENT", "KILL", "ID", id).expect("CLIENT KILL");
    assert!(
        handle.join().expect("thread").is_err(),
        "the killed client got no token"
    );
    wait_for("the waiter to be forgotten", || waiting(con) == 0);
    assert_eq!(call!(con, "UNIQUE.UNLOCK", "k", "a"), Ok(Value::Int(1)));
    assert_eq!(
        call!(con, "EXISTS", "k"),
        Ok(Value::Int(0)),
        "no slot went to the gone client"
    );
    token(call!(con, "UNIQUE.LOCK", "k", "c"));
}

#[test]
fn wait_is_ignored_inside_multi_and_scripts() {
    let server = Server::start();
    let con = &mut server.con();
    token(call!(con, "UNIQUE.LOCK", "k", "a"));
    let start = Instant::now();
    let replies: Vec<Value> = redis::pipe()
        .atomic()
        .cmd("UNIQUE.LOCK")
        .arg("k")
        .arg("b")
        .arg("WAIT")
        .arg(5_000)
        .query(con)
        .expect("MULTI/EXEC");
    assert_eq!(replies, [Value::Nil]);
    let script = "return redis.call('UNIQUE.LOCK', KEYS[1], 'c', 'WAIT', 5000)";
    assert_eq!(call!(con, "EVAL", script, 1, "k"), Ok(Value::Nil));
    assert!(start.elapsed() < Duration::from_secs(4), "nothing blocked");
    assert_eq!(waiting(con), 0);
}

#[test]
fn each_waiter_keeps_its_own_options() {
    let server = Server::start();
    let con = &mut server.con();
    token(call!(con, "UNIQUE.LOCK", "k", "a"));
    let waiter = start_waiter(
        &server,
        args(&[
            "k",
            "b",
            "WAIT",
            "10000",
            "TTL",
            "60000",
            "TYPE",
            "until_executed",
            "OWNER",
            "w9",
            "META",
            r#"{"q":1}"#,
        ]),
    );
    call!(con, "UNIQUE.UNLOCK", "k", "a").expect("UNLOCK");
    let t = token(waiter.join().expect("waiter").0);
    assert_eq!(int(field_of(con, "k", "b", "token")), t);
    assert_eq!(
        field_of(con, "k", "b", "type"),
        Value::BulkString(b"until_executed".to_vec())
    );
    assert_eq!(
        field_of(con, "k", "b", "owner"),
        Value::BulkString(b"w9".to_vec())
    );
    assert_eq!(
        field_of(con, "k", "b", "meta"),
        Value::BulkString(br#"{"q":1}"#.to_vec())
    );
    let ttl = int(field_of(con, "k", "b", "ttl"));
    assert!(
        (50_000..=60_000).contains(&ttl),
        "the lease starts at the grant: {ttl}"
    );
}

#[test]
fn a_setting_changed_while_a_client_waits_does_not_change_its_request() {
    let server = Server::start_with(&["--unique.max-meta-bytes", "64"]);
    let con = &mut server.con();
    token(call!(con, "UNIQUE.LOCK", "k", "a"));
    let meta = r#"{"queue":"critical","attempt":3}"#;
    let waiter = start_waiter(&server, args(&["k", "b", "WAIT", "10000", "META", meta]));
    // Smaller than the waiter's META: a new call would be refused now.
    call!(con, "CONFIG", "SET", "unique.max-meta-bytes", 8).expect("CONFIG SET");
    assert!(call!(con, "UNIQUE.LOCK", "k2", "c", "META", meta).is_err());
    call!(con, "UNIQUE.UNLOCK", "k", "a").expect("UNLOCK");
    let t = token(waiter.join().expect("waiter").0);
    assert_eq!(int(field_of(con, "k", "b", "token")), t);
    assert_eq!(
        field_of(con, "k", "b", "meta"),
        Value::BulkString(meta.as_bytes().to_vec()),
        "served as it asked when it blocked"
    );
}

#[test]
fn a_replica_matches_its_primary_after_waiters_were_served() {
    let primary = Server::start();
    let replica = primary.start_replica(&[]);
    let (p, r) = (&mut primary.con(), &mut replica.con());
    token(call!(p, "UNIQUE.LOCK", "k", "a", "TTL", 500));
    let by_lease = start_waiter(&primary, args(&["k", "b", "WAIT", "10000"]));
    token(by_lease.join().expect("waiter").0);
    let by_unlock = start_waiter(&primary, args(&["k", "c", "WAIT", "10000", "OWNER", "x"]));
    call!(p, "UNIQUE.UNLOCK", "k", "b").expect("UNLOCK");
    token(by_unlock.join().expect("waiter").0);
    wait_for("the replica to catch up", || {
        let _: i64 = redis::cmd("WAIT").arg(1).arg(1_000).query(p).unwrap_or(0);
        digest(p) == digest(r)
    });
    assert_eq!(holders(r, "k"), ["c"]);
}

#[test]
fn a_handoff_is_announced_in_causal_order() {
    let server = Server::start_with(&["--notify-keyspace-events", "Kd"]);
    let con = &mut server.con();
    token(call!(con, "UNIQUE.LOCK", "k", "a"));
    let waiter = start_waiter(&server, args(&["k", "b", "WAIT", "10000"]));
    let mut sub = server.con();
    let mut pubsub = sub.as_pubsub();
    pubsub.psubscribe("__keyspace@0__:k").expect("PSUBSCRIBE");
    pubsub
        .set_read_timeout(Some(Duration::from_secs(5)))
        .expect("timeout");
    assert_eq!(call!(con, "UNIQUE.UNLOCK", "k", "a"), Ok(Value::Int(1)));
    token(waiter.join().expect("waiter").0);
    let events: Vec<String> = (0..2)
        .map(|_| {
            pubsub
                .get_message()
                .and_then(|m| m.get_payload())
                .expect("an event")
        })
        .collect();
    // The release first, then the grant it made room for.
    assert_eq!(events, ["unique.unlock", "unique.lock"]);
}

/// A WAIT longer than a module timer can hold (Redis adds the delay, in
/// microseconds, to a 64-bit clock) waits with no deadline: it must neither
/// time out at once nor early, and an UNLOCK still serves it.
#[test]
fn the_longest_wait_blocks_until_served() {
    let server = Server::start();
    let con = &mut server.con();
    token(call!(con, "UNIQUE.LOCK", "k", "a"));
    for (i, ms) in [
        "9223372036854775807",
        "9000000000000000000",
        "1099511627777",
    ]
    .iter()
    .enumerate()
    {
        let jid = format!("w{i}");
        let waiter = start_waiter(&server, args(&["k", &jid, "WAIT", ms]));
        // The old overflow timed such a wait out within a few ms: it must
        // still be queued a good while later, by the server's own clock.
        let start = common::server_time_ms(con);
        wait_for("100 ms of server time", || {
            common::server_time_ms(con) >= start + 100
        });
        assert_eq!(
            call!(con, "UNIQUE.WAITERS", "k"),
            Ok(Value::Int(1)),
            "WAIT {ms}"
        );
        let holder = holders(con, "k").remove(0);
        assert_eq!(call!(con, "UNIQUE.UNLOCK", "k", &holder), Ok(Value::Int(1)));
        let (reply, _) = waiter.join().expect("waiter");
        token(reply);
        assert_eq!(holders(con, "k"), [jid]);
    }
    let m = common::metrics_json(con, &[]);
    assert_eq!(m["total"]["timed_out"], 0);
    assert_eq!(m["total"]["waited"], 3);
}

#[test]
fn at_the_verbose_log_level_operators_see_time_outs_and_reaps() {
    let server = Server::start();
    let con = &mut server.con();
    token(call!(con, "UNIQUE.LOCK", "k", "a"));
    let timed_out = "a client waiting on k (db 0) got nil: its WAIT ran out";
    assert_eq!(
        call!(con, "UNIQUE.LOCK", "k", "b", "WAIT", 10),
        Ok(Value::Nil)
    );
    call!(con, "CONFIG", "SET", "loglevel", "verbose").expect("CONFIG SET");
    assert!(
        !server.log().contains(timed_out),
        "nothing at the default level"
    );
    // The module reads the new level soon after the CONFIG SET.
    wait_for("the module to follow the log level", || {
        let _ = call!(con, "UNIQUE.LOCK", "k", "b", "WAIT", 10);
        server.log().contains(timed_out)
    });
    token(call!(con, "UNIQUE.LOCK", "k2", "j", "OWNER", "w1"));
    call!(con, "UNIQUE.REAP", 0, "OWNER", "w1").expect("REAP");
    let reaped = "reaped k2: 0 ended leases, 1 holders of owner w1";
    wait_for("the reap in the log", || server.log().contains(reaped));
}

/// One release serves a queue in one pass: a waiter denied for want of a
/// slot stands for the later waiters of its kind (same LIMIT, RATE, GROUP,
/// GROUPLIMIT and MODE), which keep their place without a retry, while a
/// waiter of another kind that fits is still served past it, and a waiter
/// whose jid the pass just granted renews that hold.
#[test]
fn a_pass_serves_past_a_denied_kind_and_renews_a_jid_it_granted() {
    let server = Server::start();
    let con = &mut server.con();
    token(call!(con, "UNIQUE.LOCK", "k", "h", "TTL", 600_000));
    let wait = ["TTL", "600000", "WAIT", "60000"];
    let with = |jid: &str, extra: &[&str]| {
        let mut a = args(&["k", jid]);
        a.extend(args(extra));
        a.extend(args(&wait));
        a
    };
    let first = start_waiter(&server, with("j", &[]));
    let denied = start_waiter(&server, with("x", &[]));
    let again = start_waiter(&server, with("j", &[]));
    let wider = start_waiter(&server, with("y", &["LIMIT", "2"]));
    assert_eq!(call!(con, "UNIQUE.UNLOCK", "k", "h"), Ok(Value::Int(1)));
    let t = token(first.join().expect("waiter").0);
    assert_eq!(token(again.join().expect("waiter").0), t, "a renewal");
    token(wider.join().expect("waiter").0);
    assert_eq!(holders(con, "k"), ["j", "y"]);
    assert_eq!(waiting(con), 1, "x still waits");
    // x (LIMIT 1) gets the key once both have gone.
    assert_eq!(call!(con, "UNIQUE.UNLOCK", "k", "j"), Ok(Value::Int(1)));
    assert_eq!(waiting(con), 1);
    assert_eq!(call!(con, "UNIQUE.UNLOCK", "k", "y"), Ok(Value::Int(1)));
    token(denied.join().expect("waiter").0);
    assert_eq!(holders(con, "k"), ["x"]);
}

/// A wait lasts no longer than the lease it asks for: with PXAT, it ends at
/// that instant with nil (a grant after it would be a lease already over),
/// long before its WAIT, counted as a wait that ran out.
#[test]
fn a_wait_ends_with_nil_when_the_pxat_it_asks_for_comes() {
    let server = Server::start();
    let con = &mut server.con();
    token(call!(con, "UNIQUE.LOCK", "k", "a"));
    // Long enough to see it block, under valgrind too.
    let pxat = common::server_time_ms(con) + 150 * i64::from(common::patience());
    let wait = (2 * common::patient().as_millis()).to_string();
    let started = Instant::now();
    let waiter = start_waiter(
        &server,
        args(&[
            "k",
            "b",
            "PXAT",
            &pxat.to_string(),
            "WAIT",
            &wait,
            "TYPE",
            "until_executed",
        ]),
    );
    let (reply, at) = waiter.join().expect("waiter");
    assert_eq!(reply, Ok(Value::Nil));
    assert!(
        at.duration_since(started) < common::patient(),
        "ended by its PXAT, not by its WAIT"
    );
    assert!(common::server_time_ms(con) >= pxat, "not before its PXAT");
    assert_eq!(holders(con, "k"), ["a"]);
    assert_eq!(waiting(con), 0);
    let m = common::metrics_json(con, &[]);
    assert_eq!(m["types"]["until_executed"]["timed_out"], 1, "{m}");
    wait_for("its deadline timer gone", || {
        common::info_field(con, "unique", "unique_timers_armed") == 0
    });
}

/// The verbose log says what ended a wait at its deadline timer: the WAIT,
/// or the PXAT its lease asked for (LOCK's and LOCKALL's alike).
#[test]
fn the_log_tells_a_wait_ended_by_its_pxat_from_one_whose_wait_ran_out() {
    let server = Server::start();
    let con = &mut server.con();
    token(call!(con, "UNIQUE.LOCK", "{k}", "a"));
    call!(con, "CONFIG", "SET", "loglevel", "verbose").expect("CONFIG SET");
    let ran_out = "a client waiting on {k} (db 0) got nil: its WAIT ran out";
    // The module reads the new level soon after the CONFIG SET.
    wait_for("the module to follow the log level", || {
        let _ = call!(con, "UNIQUE.LOCK", "{k}", "b", "WAIT", 10);
        server.log().contains(ran_out)
    });
    let lapsed = "got nil: the end of the lease it asked for came";
    assert!(!server.log().contains(lapsed));
    let wait = (2 * common::patient().as_millis()).to_string();
    let pxat = (common::server_time_ms(con) + 50).to_string();
    assert_eq!(
        call!(con, "UNIQUE.LOCK", "{k}", "c", "PXAT", &pxat, "WAIT", &wait),
        Ok(Value::Nil)
    );
    wait_for("LOCK's line", || {
        server
            .log()
            .contains(&format!("a client waiting on {{k}} (db 0) {lapsed}"))
    });
    let pxat = (common::server_time_ms(con) + 50).to_string();
    let both = ["2", "{k}:x", "{k}", "d", "PXAT", &pxat, "WAIT", &wait];
    assert_eq!(call!(con, "UNIQUE.LOCKALL", &both[..]), Ok(Value::Nil));
    wait_for("LOCKALL's line", || {
        server
            .log()
            .contains(&format!("a client waiting on 2 keys (db 0) {lapsed}"))
    });
    assert!(
        !server
            .log()
            .contains("2 keys (db 0) got nil: its WAIT ran out"),
        "not its WAIT"
    );
}

/// A pass that comes after a waiter's PXAT but before its timer could end the
/// wait (an UNLOCK read with a DEBUG SLEEP that outlasts the PXAT, in one
/// event-loop iteration) ends it with nil too: not the error a LOCK given
/// that PXAT now would get, nor a grant of a lease already over; and the
/// slot goes on to the next waiter in the same pass. When the machine is too
/// slow for the PXAT to find the waiter still queued at the sleep, the case
/// is played again with a later one.
#[test]
fn a_pass_after_a_waiters_pxat_ends_its_wait_with_nil_and_serves_the_next() {
    let server = Server::start();
    let con = &mut server.con();
    let wait = (2 * common::patient().as_millis()).to_string();
    for margin in [300i64, 3_000, 30_000] {
        let key = format!("k{margin}");
        let timed_out = common::metrics_json(con, &[])["total"]["timed_out"].clone();
        token(call!(con, "UNIQUE.LOCK", &key, "h"));
        let pxat = common::server_time_ms(con) + margin;
        let lapsing = start_waiter(
            &server,
            args(&[&key, "w", "PXAT", &pxat.to_string(), "WAIT", &wait]),
        );
        let next = start_waiter(&server, args(&[&key, "x", "WAIT", &wait]));
        // One write: the three commands run in one event-loop iteration.
        let (info, _, unlocked): (String, Value, i64) = redis::pipe()
            .cmd("INFO")
            .arg("unique")
            .cmd("DEBUG")
            .arg("SLEEP")
            .arg(format!("{:.3}", (margin + 50) as f64 / 1000.0))
            .cmd("UNIQUE.UNLOCK")
            .arg(&key)
            .arg("h")
            .query(con)
            .expect("INFO, DEBUG SLEEP, UNLOCK");
        assert_eq!(unlocked, 1);
        let (reply, _) = lapsing.join().expect("waiter");
        assert_eq!(reply, Ok(Value::Nil), "nil, not an error nor a token");
        let (served, _) = next.join().expect("next waiter");
        token(served);
        assert_eq!(holders(con, &key), ["x"]);
        if !info.lines().any(|l| l.trim() == "unique_waiting:2") {
            // Its PXAT came before the sleep: its timer ended it. Again, later.
            eprintln!("a PXAT {margin} ms ahead came before the DEBUG SLEEP: again, later");
            continue;
        }
        let m = common::metrics_json(con, &[]);
        assert_eq!(
            m["total"]["timed_out"].as_i64(),
            timed_out.as_i64().map(|n| n + 1),
            "{m}"
        );
        wait_for("no timer armed", || {
            common::info_field(con, "unique", "unique_timers_armed") == 0
        });
        return;
    }
    panic!("the waiter never stayed queued until the DEBUG SLEEP, even with a PXAT 30 s ahead");
}
