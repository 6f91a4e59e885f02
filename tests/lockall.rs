//! UNIQUE.LOCKALL and UNIQUE.UNLOCKALL against a real server: every key or
//! none, rates spent only on a whole grant, the numkeys key spec (GETKEYS,
//! ACL, CROSSSLOT), multi-key waiters served before later single-key
//! callers, and replicas and the AOF applying the whole grant at once;
//! GROUP, GROUPLIMIT and MODE per key.

mod common;

use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use common::{
    Connection, Rng, Server, Value, digest, holders, int, text, token, wait_digests_equal, wait_for,
};

/// The tokens of a granted LOCKALL, or a panic with what came back.
fn tokens(reply: Result<Value, String>) -> Vec<i64> {
    match reply {
        Ok(Value::Array(list)) => list.into_iter().map(int).collect(),
        other => panic!("expected tokens, got {other:?}"),
    }
}

/// Clients waiting on this server, from INFO.
fn waiting(con: &mut Connection) -> i64 {
    common::info_field(con, "unique", "unique_waiting")
}

fn waiters(con: &mut Connection, key: &str) -> i64 {
    call!(con, "UNIQUE.WAITERS", key).map(int).expect("WAITERS")
}

type Waiter = JoinHandle<(Result<Value, String>, Instant)>;

/// Starts a client blocked in `args` (a whole command) and waits until the
/// server counts it, so that waiters queue in the order they were started.
fn start_waiter(server: &Server, args: &[&str]) -> Waiter {
    let mut observer = server.con();
    let before = waiting(&mut observer);
    let mut con = server.con();
    let owned: Vec<String> = args.iter().map(|s| s.to_string()).collect();
    let handle = std::thread::spawn(move || {
        let args = owned;
        let mut cmd = redis::cmd(&args[0]);
        cmd.arg(&args[1..]);
        let reply = common::run(&cmd, &mut con);
        (reply, Instant::now())
    });
    wait_for("the waiter to block", || {
        waiting(&mut observer) == before + 1 || handle.is_finished()
    });
    assert!(!handle.is_finished(), "{args:?} did not block");
    handle
}

fn reply_of(waiter: Waiter) -> Result<Value, String> {
    waiter.join().expect("waiter thread").0
}

#[test]
fn every_key_or_none_with_one_token_for_the_new_holds() {
    let server = Server::start();
    let con = &mut server.con();
    let granted = tokens(call!(
        con,
        "UNIQUE.LOCKALL",
        2,
        "{api}:tenant:acme",
        "{api}:global",
        "job-7",
        "LIMIT",
        2,
        10,
        "TTL",
        30_000
    ));
    assert_eq!(granted.len(), 2);
    assert_eq!(granted[0], granted[1], "new holds share one token");
    // The tenant allows 2, the global 10: job-8 fits, job-9 does not.
    let second = tokens(call!(
        con,
        "UNIQUE.LOCKALL",
        2,
        "{api}:tenant:acme",
        "{api}:global",
        "job-8",
        "LIMIT",
        2,
        10
    ));
    assert!(second[0] > granted[0]);
    assert_eq!(
        call!(
            con,
            "UNIQUE.LOCKALL",
            2,
            "{api}:tenant:acme",
            "{api}:global",
            "job-9",
            "LIMIT",
            2,
            10
        ),
        Ok(Value::Nil)
    );
    assert_eq!(holders(con, "{api}:global"), vec!["job-7", "job-8"]);
    // The default LIMIT is 1 on each key: refused on the first.
    assert_eq!(
        call!(
            con,
            "UNIQUE.LOCKALL",
            2,
            "{api}:tenant:acme",
            "{api}:other",
            "job-9"
        ),
        Ok(Value::Nil)
    );
    assert_eq!(call!(con, "EXISTS", "{api}:other"), Ok(Value::Int(0)));

    // A renewal renews every key and keeps each token; a full key does not
    // refuse its own holder.
    let renewed = tokens(call!(
        con,
        "UNIQUE.LOCKALL",
        2,
        "{api}:tenant:acme",
        "{api}:global",
        "job-7",
        "LIMIT",
        1,
        1,
        "TTL",
        60_000
    ));
    assert_eq!(renewed, granted);
    let ttl = common::with_meta(con, "{api}:global")
        .iter()
        .find(|h| common::field(h, "jid") == Value::BulkString(b"job-7".to_vec()))
        .map(|h| int(common::field(h, "ttl")));
    assert!(ttl > Some(30_000), "{ttl:?}");

    // One key released early: a renewal of both is a partial renewal, refused
    // (the hold was lost), and nothing changes; the keys still held renew.
    assert_eq!(
        call!(con, "UNIQUE.UNLOCK", "{api}:global", "job-7"),
        Ok(Value::Int(1))
    );
    assert_eq!(
        call!(
            con,
            "UNIQUE.LOCKALL",
            2,
            "{api}:tenant:acme",
            "{api}:global",
            "job-7",
            "LIMIT",
            0,
            0,
            "WAIT",
            10_000
        ),
        Ok(Value::Nil),
        "a partial renewal does not wait"
    );
    assert_eq!(holders(con, "{api}:global"), vec!["job-8"]);
    assert_eq!(
        tokens(call!(
            con,
            "UNIQUE.LOCKALL",
            1,
            "{api}:tenant:acme",
            "job-7"
        )),
        vec![granted[0]]
    );

    // UNLOCKALL frees every hold it finds and counts them.
    assert_eq!(
        call!(
            con,
            "UNIQUE.UNLOCKALL",
            2,
            "{api}:tenant:acme",
            "{api}:global",
            "job-8"
        ),
        Ok(Value::Int(2))
    );
    assert_eq!(
        call!(
            con,
            "UNIQUE.UNLOCKALL",
            2,
            "{api}:tenant:acme",
            "{api}:global",
            "job-7"
        ),
        Ok(Value::Int(1))
    );
    assert_eq!(call!(con, "DBSIZE"), Ok(Value::Int(0)));
    let m = common::metrics_json(con, &[]);
    assert_eq!(m["total"]["acquired"], 4, "{m}");
    assert_eq!(m["total"]["renewed"], 3, "{m}");
    assert_eq!(m["total"]["denied"], 3, "{m}");
    assert_eq!(m["total"]["released"], 4, "{m}");
    assert_eq!(m["total"]["unlock_missed"], 1, "{m}");
}

#[test]
fn a_rate_is_spent_only_on_a_whole_grant() {
    let server = Server::start();
    let con = &mut server.con();
    token(call!(con, "UNIQUE.LOCK", "{r}:b", "other"));
    let call = |con: &mut Connection, jid: &str| {
        call!(
            con,
            "UNIQUE.LOCKALL",
            2,
            "{r}:a",
            "{r}:b",
            jid,
            "RATE",
            1,
            1,
            "PER",
            60_000
        )
    };
    // Refused by the second key: the first key's rate is not spent.
    assert_eq!(call(con, "j1"), Ok(Value::Nil));
    assert_eq!(call!(con, "UNIQUE.RATE", "{r}:a"), Ok(Value::Nil));
    assert_eq!(
        call!(con, "UNIQUE.UNLOCK", "{r}:b", "other"),
        Ok(Value::Int(1))
    );
    tokens(call(con, "j1"));
    let Ok(Value::Array(rate)) = call!(con, "UNIQUE.RATE", "{r}:a") else {
        panic!("the rate was spent");
    };
    assert_eq!(rate.get(7), Some(&Value::Int(0)), "remaining: {rate:?}");
    assert_eq!(call!(con, "UNIQUE.RATE", "{r}:b"), Ok(Value::Nil));
    // The next one is refused by the rate, and counted so.
    call!(con, "UNIQUE.UNLOCKALL", 2, "{r}:a", "{r}:b", "j1").expect("UNLOCKALL");
    assert_eq!(call(con, "j2"), Ok(Value::Nil));
    let m = common::metrics_json(con, &[]);
    assert_eq!(m["total"]["rate_denied"], 1, "{m}");
    assert_eq!(holders(con, "{r}:b"), Vec::<String>::new());
}

#[test]
fn bad_calls_change_nothing() {
    let server = Server::start();
    let con = &mut server.con();
    call!(con, "SET", "{w}:plain", "v").expect("SET");
    let wrongtype = call!(con, "UNIQUE.LOCKALL", 2, "{w}:lock", "{w}:plain", "j");
    assert!(
        matches!(&wrongtype, Err(e) if e.starts_with("WRONGTYPE")),
        "{wrongtype:?}"
    );
    assert_eq!(call!(con, "EXISTS", "{w}:lock"), Ok(Value::Int(0)));
    for (args, error) in [
        (&["0", "k", "j"][..], "ERR numkeys must be 1 to 64"),
        (&["3", "a", "b", "j"], "ERR numkeys must be 1 to 64"),
        (&["2", "a", "a", "j"], "ERR a key is named twice"),
        (
            &["2", "a", "b", "j", "LIMIT", "1"],
            "ERR syntax error: LIMIT takes one value per key",
        ),
        (
            &["1", "a", "j", "RATE", "2", "1", "PER", "10"],
            "ERR RATE i: i is the key's position",
        ),
        (
            &["1", "a", "j", "TTL", "0"],
            "ERR invalid expire time in 'unique.lockall' command",
        ),
        (
            &["1", "a", "j", "PXAT", "1"],
            "ERR invalid expire time in 'unique.lockall' command",
        ),
        (
            &["1", "a", "j", "WAIT", "0"],
            "ERR invalid wait time in 'unique.lockall' command",
        ),
        (
            &["2", "a", "b", "j", "GROUP", "3", "g"],
            "ERR GROUP i: i is the key's position, 1 to numkeys",
        ),
        (
            &["2", "a", "b", "j", "MODE", "0", "shared"],
            "ERR MODE i: i is the key's position, 1 to numkeys",
        ),
        (
            &["1", "a", "j", "GROUPLIMIT", "1"],
            "ERR syntax error: GROUPLIMIT takes the key's position",
        ),
        (
            &[
                "2",
                "a",
                "b",
                "j",
                "GROUP",
                "1",
                "g",
                "GROUPLIMIT",
                "2",
                "1",
            ],
            "ERR syntax error: WEIGHT and GROUPLIMIT need GROUP name",
        ),
        (
            &["1", "a", "j", "MODE", "1", "shared", "MODE", "1", "shared"],
            "ERR syntax error",
        ),
        (
            &["1", "a", "j", "MODE", "1", "alone"],
            "ERR MODE must be shared or exclusive",
        ),
        (&["1", "a", "j", "GROUP", "1", ""], "ERR GROUP must be 1 to"),
        (
            &["1", "a", "j", "GROUP", "1", "g", "WEIGHT", "0"],
            "ERR value is not an integer or out of range",
        ),
    ] {
        let reply = common::run(redis::cmd("UNIQUE.LOCKALL").arg(args), con);
        assert!(
            matches!(&reply, Err(e) if e.starts_with(error)),
            "{args:?}: {reply:?}"
        );
    }
    assert_eq!(
        common::run(
            redis::cmd("UNIQUE.UNLOCKALL").arg(&["2", "a", "b", "j", "x"]),
            con
        ),
        Err("ERR syntax error".into())
    );
    assert_eq!(call!(con, "DBSIZE"), Ok(Value::Int(1)));
}

#[test]
fn the_keys_follow_numkeys_for_getkeys_and_acl() {
    let server = Server::start();
    let con = &mut server.con();
    let keys = common::run(
        redis::cmd("COMMAND").arg(&[
            "GETKEYS",
            "UNIQUE.LOCKALL",
            "2",
            "t:1",
            "g",
            "j",
            "LIMIT",
            "2",
            "10",
        ]),
        con,
    );
    assert_eq!(
        keys,
        Ok(Value::Array(vec![
            Value::BulkString(b"t:1".to_vec()),
            Value::BulkString(b"g".to_vec())
        ]))
    );
    let keys = common::run(
        redis::cmd("COMMAND").arg(&["GETKEYS", "UNIQUE.UNLOCKALL", "3", "a", "b", "c", "j"]),
        con,
    );
    assert_eq!(
        keys.map(|v| match v {
            Value::Array(v) => v.len(),
            _ => 0,
        }),
        Ok(3)
    );
    call!(
        con,
        "ACL",
        "SETUSER",
        "tenant",
        "on",
        ">pw",
        "~t:*",
        "+unique.lockall",
        "+unique.unlockall"
    )
    .expect("ACL SETUSER");
    let user = &mut server.con();
    call!(user, "AUTH", "tenant", "pw").expect("AUTH");
    tokens(call!(user, "UNIQUE.LOCKALL", 2, "t:1", "t:2", "j"));
    let denied = call!(user, "UNIQUE.LOCKALL", 2, "t:1", "g", "j2");
    assert!(
        matches!(&denied, Err(e) if e.starts_with("NOPERM")),
        "{denied:?}"
    );
    let denied = call!(user, "UNIQUE.UNLOCKALL", 2, "t:1", "g", "j");
    assert!(
        matches!(&denied, Err(e) if e.starts_with("NOPERM")),
        "{denied:?}"
    );
    assert_eq!(holders(con, "t:1"), vec!["j"]);
    assert_eq!(call!(con, "EXISTS", "g"), Ok(Value::Int(0)));
}

#[test]
fn keys_in_different_slots_are_crossslot_in_a_cluster() {
    let node = Server::start_cluster_node(&[]);
    let con = &mut node.con();
    call!(con, "CLUSTER", "ADDSLOTSRANGE", 0, 16383).expect("ADDSLOTSRANGE");
    wait_for("the cluster", || {
        text(&mut node.con(), &["CLUSTER", "INFO"]).contains("cluster_state:ok")
    });
    let cross = call!(con, "UNIQUE.LOCKALL", 2, "tenant:acme", "global", "j");
    assert!(
        matches!(&cross, Err(e) if e.starts_with("CROSSSLOT")),
        "{cross:?}"
    );
    let cross = call!(con, "UNIQUE.UNLOCKALL", 2, "tenant:acme", "global", "j");
    assert!(
        matches!(&cross, Err(e) if e.starts_with("CROSSSLOT")),
        "{cross:?}"
    );
    tokens(call!(
        con,
        "UNIQUE.LOCKALL",
        2,
        "{jobs}:tenant:acme",
        "{jobs}:global",
        "j"
    ));
}

#[test]
fn a_multi_key_waiter_holds_nothing_and_is_served_when_every_key_can_grant() {
    let server = Server::start();
    let replica = server.start_replica(&[]);
    let con = &mut server.con();
    token(call!(con, "UNIQUE.LOCK", "{m}:a", "x"));
    token(call!(con, "UNIQUE.LOCK", "{m}:b", "y"));
    let waiter = start_waiter(
        &server,
        &[
            "UNIQUE.LOCKALL",
            "2",
            "{m}:a",
            "{m}:b",
            "w",
            "WAIT",
            "60000",
        ],
    );
    assert_eq!((waiters(con, "{m}:a"), waiters(con, "{m}:b")), (1, 1));
    // One key free is not enough, and the waiter holds nothing meanwhile.
    assert_eq!(call!(con, "UNIQUE.UNLOCK", "{m}:a", "x"), Ok(Value::Int(1)));
    assert_eq!(call!(con, "EXISTS", "{m}:a"), Ok(Value::Int(0)));
    assert_eq!(waiting(con), 1);
    assert_eq!(call!(con, "UNIQUE.UNLOCK", "{m}:b", "y"), Ok(Value::Int(1)));
    let got = tokens(reply_of(waiter));
    assert_eq!(got.len(), 2);
    assert_eq!(holders(con, "{m}:a"), vec!["w"]);
    assert_eq!(holders(con, "{m}:b"), vec!["w"]);
    assert_eq!((waiters(con, "{m}:a"), waiters(con, "{m}:b")), (0, 0));
    let m = common::metrics_json(con, &[]);
    assert_eq!(m["total"]["waited"], 2, "{m}");
    // The grant made for the waiter reached the replica whole.
    wait_digests_equal(con, &mut replica.con());
    assert_eq!(holders(&mut replica.con(), "{m}:b"), vec!["w"]);
}

#[test]
fn a_multi_key_wait_runs_out_on_every_key_at_once() {
    let server = Server::start();
    let con = &mut server.con();
    token(call!(con, "UNIQUE.LOCK", "{t}:b", "y"));
    // Long enough to see it block, under valgrind too.
    let wait = (150 * common::patience()).to_string();
    let waiter = start_waiter(
        &server,
        &["UNIQUE.LOCKALL", "2", "{t}:a", "{t}:b", "w", "WAIT", &wait],
    );
    assert_eq!(reply_of(waiter), Ok(Value::Nil));
    assert_eq!((waiters(con, "{t}:a"), waiters(con, "{t}:b")), (0, 0));
    assert_eq!(call!(con, "EXISTS", "{t}:a"), Ok(Value::Int(0)));
    // Its reservation went with it: the free key grants again.
    token(call!(con, "UNIQUE.LOCK", "{t}:a", "z"));
    let m = common::metrics_json(con, &[]);
    assert_eq!(m["total"]["timed_out"], 1, "{m}");
    // The deadline timer went (and the wake-ups of its keys fire soon).
    wait_for("no timer armed", || {
        common::info_field(con, "unique", "unique_timers_armed") == 0
    });
}

/// As LOCK's: with PXAT, the wait ends with nil when that instant comes,
/// long before its WAIT, on every key at once.
#[test]
fn a_multi_key_wait_ends_with_nil_when_the_pxat_it_asks_for_comes() {
    let server = Server::start();
    let con = &mut server.con();
    token(call!(con, "UNIQUE.LOCK", "{p}:b", "y"));
    // Long enough to see it block, under valgrind too.
    let pxat = (common::server_time_ms(con) + 150 * i64::from(common::patience())).to_string();
    let wait = (2 * common::patient().as_millis()).to_string();
    let started = std::time::Instant::now();
    let waiter = start_waiter(
        &server,
        &[
            "UNIQUE.LOCKALL",
            "2",
            "{p}:a",
            "{p}:b",
            "w",
            "PXAT",
            &pxat,
            "WAIT",
            &wait,
        ],
    );
    assert_eq!(reply_of(waiter), Ok(Value::Nil));
    assert!(
        started.elapsed() < common::patient(),
        "ended by its PXAT, not by its WAIT"
    );
    assert_eq!((waiters(con, "{p}:a"), waiters(con, "{p}:b")), (0, 0));
    assert_eq!(call!(con, "EXISTS", "{p}:a"), Ok(Value::Int(0)));
    let m = common::metrics_json(con, &[]);
    assert_eq!(m["total"]["timed_out"], 1, "{m}");
}

#[test]
fn later_single_key_callers_do_not_take_the_capacity_a_multi_key_waiter_waits_for() {
    let server = Server::start();
    let con = &mut server.con();
    // The global key allows 2; a tenant key is held, so the multi-key
    // waiter waits for it.
    token(call!(
        con,
        "UNIQUE.LOCK",
        "{q}:tenant",
        "t-holder",
        "TTL",
        60_000
    ));
    let multi = start_waiter(
        &server,
        &[
            "UNIQUE.LOCKALL",
            "2",
            "{q}:tenant",
            "{q}:global",
            "m",
            "LIMIT",
            "1",
            "2",
            "WAIT",
            "60000",
        ],
    );
    // The global key has room, but it is reserved for the multi-key waiter:
    // a later LOCK is refused, a later waiter queues behind it.
    assert_eq!(
        call!(con, "UNIQUE.LOCK", "{q}:global", "late", "LIMIT", 2),
        Ok(Value::Nil)
    );
    let late = start_waiter(
        &server,
        &[
            "UNIQUE.LOCK",
            "{q}:global",
            "late",
            "LIMIT",
            "2",
            "WAIT",
            "60000",
        ],
    );
    assert_eq!(waiters(con, "{q}:global"), 2);
    // The tenant frees: the multi-key waiter is served, then the later one.
    assert_eq!(
        call!(con, "UNIQUE.UNLOCK", "{q}:tenant", "t-holder"),
        Ok(Value::Int(1))
    );
    tokens(reply_of(multi));
    token(reply_of(late));
    assert_eq!(holders(con, "{q}:global"), vec!["m", "late"]);
}

#[test]
fn waiters_that_came_before_a_multi_key_waiter_are_served_before_it() {
    let server = Server::start();
    let con = &mut server.con();
    token(call!(con, "UNIQUE.LOCK", "{o}:g", "holder"));
    let single = start_waiter(&server, &["UNIQUE.LOCK", "{o}:g", "s", "WAIT", "60000"]);
    let multi = start_waiter(
        &server,
        &[
            "UNIQUE.LOCKALL",
            "2",
            "{o}:t",
            "{o}:g",
            "m",
            "WAIT",
            "60000",
        ],
    );
    assert_eq!(
        call!(con, "UNIQUE.UNLOCK", "{o}:g", "holder"),
        Ok(Value::Int(1))
    );
    token(reply_of(single));
    assert_eq!(waiters(con, "{o}:g"), 1);
    assert_eq!(call!(con, "UNIQUE.UNLOCK", "{o}:g", "s"), Ok(Value::Int(1)));
    tokens(reply_of(multi));
}

/// Single-key callers hammer both keys (each LOCK ... WAIT, a short hold,
/// UNLOCK) while a multi-key caller needs both at once: without a
/// reservation a later single-key waiter takes whichever key frees while
/// the other is held, and the multi-key waiter can wait its whole WAIT. With
/// it, the multi-key waiter is served once the holds there when it came
/// (and those of the waiters before it) have ended: a few short holds here.
#[test]
fn a_multi_key_waiter_is_served_within_its_bound_under_single_key_contention() {
    let server = Server::start();
    let con = &mut server.con();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let hammers: Vec<_> = (0..4)
        .map(|i| {
            let mut c = server.con();
            let stop = stop.clone();
            let key = if i % 2 == 0 {
                "{c}:tenant"
            } else {
                "{c}:global"
            };
            std::thread::spawn(move || {
                let mut grants = 0;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    let jid = format!("single-{i}-{grants}");
                    if let Ok(Value::Int(_)) = call!(&mut c, "UNIQUE.LOCK", key, &jid, "WAIT", 50) {
                        grants += 1;
                        std::thread::sleep(Duration::from_millis(2));
                        let _ = call!(&mut c, "UNIQUE.UNLOCK", key, &jid);
                    }
                }
                grants
            })
        })
        .collect();
    std::thread::sleep(Duration::from_millis(100));
    let mut served = Vec::new();
    for round in 0..5 {
        let jid = format!("m-{round}");
        let arrived = Instant::now();
        let mut c = server.con();
        let reply = call!(
            &mut c,
            "UNIQUE.LOCKALL",
            2,
            "{c}:tenant",
            "{c}:global",
            &jid,
            "WAIT",
            60_000
        );
        served.push(arrived.elapsed());
        tokens(reply);
        std::thread::sleep(Duration::from_millis(5));
        assert_eq!(
            call!(
                &mut c,
                "UNIQUE.UNLOCKALL",
                2,
                "{c}:tenant",
                "{c}:global",
                &jid
            ),
            Ok(Value::Int(2))
        );
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let singles: usize = hammers.into_iter().map(|h| h.join().expect("hammer")).sum();
    assert!(singles > 0, "the single-key callers ran");
    // Generous for a loaded machine, and far below the WAIT it could
    // otherwise have spent.
    let slowest = served.iter().max().copied().unwrap_or_default();
    assert!(slowest < common::patient() / 4, "served after {served:?}");
    println!("multi-key waits: {served:?}; {singles} single-key grants meanwhile");
    let _ = con;
}

#[test]
fn a_replica_and_the_aof_apply_each_whole_grant() {
    // No background reaper: it would prune ended leases right after the
    // restart, and the digests compared are those of the AOF as written.
    let primary = Server::start_with(&["--appendonly", "yes", "--unique.reap-interval", "0"]);
    let replica = primary.start_replica(&[]);
    let (p, r) = (&mut primary.con(), &mut replica.con());
    let mut rng = Rng(0x10ca_1100_0001);
    let (mut granted, mut refused, mut released) = (0, 0, 0);
    for _ in 0..3_000 {
        let tenant = format!("{{x}}:tenant:{}", rng.below(4));
        let jid = format!("job:{}", rng.below(10));
        match rng.below(10) {
            0..=4 => {
                let mut cmd = redis::cmd("UNIQUE.LOCKALL");
                cmd.arg(2)
                    .arg(&tenant)
                    .arg("{x}:global")
                    .arg(&jid)
                    .arg("LIMIT")
                    .arg(1 + rng.below(2))
                    .arg(3 + rng.below(3));
                if rng.below(3) == 0 {
                    cmd.arg("RATE").arg(2).arg(50).arg("PER").arg(100);
                }
                if rng.below(2) == 0 {
                    cmd.arg("TTL").arg(1 + rng.below(30));
                } else {
                    cmd.arg("TTL").arg(600_000);
                }
                if rng.below(4) == 0 {
                    cmd.arg("OWNER").arg("w1").arg("META").arg(r#"{"q":1}"#);
                }
                match common::run(&cmd, p) {
                    Ok(Value::Array(_)) => granted += 1,
                    Ok(Value::Nil) => refused += 1,
                    other => panic!("LOCKALL: {other:?}"),
                }
            }
            5..=6 => {
                released += int(call!(p, "UNIQUE.UNLOCKALL", 2, &tenant, "{x}:global", &jid)
                    .expect("UNLOCKALL"));
            }
            7 => {
                let _ = call!(p, "UNIQUE.LOCK", &tenant, &jid, "LIMIT", 2, "TTL", 20);
            }
            _ => {
                let _ = call!(p, "UNIQUE.UNLOCK", "{x}:global", &jid);
            }
        }
    }
    assert!(
        granted > 100 && refused > 100 && released > 100,
        "{granted} granted, {refused} refused, {released} released"
    );
    wait_digests_equal(p, r);
    // The AOF replays every whole grant to the same data, once the short
    // leases and rates have run out (they would end during the restart).
    tokens(call!(
        p,
        "UNIQUE.LOCKALL",
        2,
        "{x}:final",
        "{x}:global",
        "final",
        "LIMIT",
        1,
        0,
        "RATE",
        1,
        1,
        "PER",
        600_000,
        "TTL",
        600_000
    ));
    // Keys whose time has come but that Redis has not deleted yet count in
    // a digest: wait until every key in memory is one that stays.
    wait_for("every short-lived key deleted", || {
        let keys: Vec<String> = redis::cmd("KEYS").arg("*").query(p).unwrap_or_default();
        let dbsize: usize = redis::cmd("DBSIZE").query(p).unwrap_or(0);
        dbsize == keys.len()
            && keys
                .iter()
                .all(|k| redis::cmd("PTTL").arg(k).query::<i64>(p).unwrap_or(0) > 100_000)
    });
    let before = digest(p);
    let mut primary = primary;
    primary.restart("NOSAVE");
    assert_eq!(digest(&mut primary.con()), before);
}

/// A refused LOCKALL or an UNLOCKALL that changes nothing on a key leaves
/// that key alone, even when its lock has nothing left to keep: the primary
/// deletes a key only with an effect, or its replica would keep it. Here a
/// rate-only key whose rate is spent out, kept by a PERSIST past its idle
/// time, so that Redis's own expiry does not delete it first.
#[test]
fn a_key_a_multi_key_call_left_unchanged_stays_on_primary_and_replica_alike() {
    let primary = Server::start_with(&["--unique.reap-interval", "0"]);
    let replica = primary.start_replica(&[]);
    let (p, r) = (&mut primary.con(), &mut replica.con());
    let idle = "{idle}:rate";
    let held = "{idle}:held";
    // In one transaction, so that the key cannot expire before PERSIST
    // however slow the server (valgrind): the rate's state alone stays.
    let spent_at = common::server_time_ms(p);
    let (_, unlocked, persisted): (Value, i64, i64) = redis::pipe()
        .atomic()
        .cmd("UNIQUE.LOCK")
        .arg(&[idle, "a", "RATE", "1", "PER", "1000", "TTL", "600000"])
        .cmd("UNIQUE.UNLOCK")
        .arg(&[idle, "a"])
        .cmd("PERSIST")
        .arg(idle)
        .query(p)
        .expect("MULTI");
    assert_eq!((unlocked, persisted), (1, 1));
    token(call!(p, "UNIQUE.LOCK", held, "b", "TTL", 600_000));
    // Idle once its period has gone by (the state is kept, nothing else).
    wait_for("the rate's period to go by", || {
        common::server_time_ms(p) > spent_at + 1_100
    });
    // Granted on the idle key, refused on the held one: undone, unchanged.
    assert_eq!(
        lockall(p, &["2", idle, held, "c", "LIMIT", "1", "1"]),
        Ok(Value::Nil)
    );
    // No hold of this jid on either key: nothing released, nothing changed.
    assert_eq!(
        int(call!(p, "UNIQUE.UNLOCKALL", 2, idle, held, "nobody").expect("UNLOCKALL")),
        0
    );
    wait_digests_equal(p, r);
    let exists = |con: &mut Connection| int(call!(con, "EXISTS", idle).expect("EXISTS"));
    assert_eq!((exists(p), exists(r)), (1, 1));
    assert_eq!(int(call!(p, "DEL", idle, held).expect("DEL")), 2);
}

/// A multi-key waiter is served on its own user's authority: one whose
/// access to one of its keys was revoked while it waited gets NOPERM, and
/// the key's next waiter gets the slot.
#[test]
fn a_multi_key_waiter_whose_access_was_revoked_gets_noperm() {
    let server = Server::start();
    let admin = &mut server.con();
    call!(
        admin, "ACL", "SETUSER", "waiter", "on", ">pw", "~{n}:*", "+@all"
    )
    .expect("ACL SETUSER");
    token(call!(admin, "UNIQUE.LOCK", "{n}:b", "holder"));
    let mut con = server.con();
    call!(&mut con, "AUTH", "waiter", "pw").expect("AUTH");
    let before = waiting(admin);
    let revoked = std::thread::spawn(move || {
        call!(
            &mut con,
            "UNIQUE.LOCKALL",
            2,
            "{n}:a",
            "{n}:b",
            "w",
            "WAIT",
            60_000
        )
    });
    wait_for("the multi-key waiter", || waiting(admin) == before + 1);
    let next = start_waiter(&server, &["UNIQUE.LOCK", "{n}:b", "next", "WAIT", "60000"]);
    call!(admin, "ACL", "SETUSER", "waiter", "resetkeys", "~{n}:a").expect("ACL SETUSER");
    assert_eq!(
        call!(admin, "UNIQUE.UNLOCK", "{n}:b", "holder"),
        Ok(Value::Int(1))
    );
    let refused = revoked.join().expect("the waiter's thread");
    assert!(
        matches!(&refused, Err(e) if e.starts_with("NOPERM")),
        "{refused:?}"
    );
    token(reply_of(next));
    assert_eq!(holders(admin, "{n}:b"), vec!["next"]);
    assert_eq!(call!(admin, "EXISTS", "{n}:a"), Ok(Value::Int(0)));
}

fn bulk(s: &str) -> Value {
    Value::BulkString(s.as_bytes().to_vec())
}

/// One field of `jid`'s holder of `key` (LOCKEDBY WITHMETA).
fn field_of(con: &mut Connection, key: &str, jid: &str, name: &str) -> Value {
    let holders = common::with_meta(con, key);
    let holder = holders
        .iter()
        .find(|h| common::field(h, "jid") == bulk(jid))
        .unwrap_or_else(|| panic!("{jid} does not hold {key}"));
    common::field(holder, name)
}

fn lockall(con: &mut Connection, args: &[&str]) -> Result<Value, String> {
    common::run(redis::cmd("UNIQUE.LOCKALL").arg(args), con)
}

#[test]
fn each_key_has_its_group_grouplimit_and_mode() {
    let primary = Server::start();
    let replica = primary.start_replica(&[]);
    let con = &mut primary.con();
    let grouped = |con: &mut Connection, jid: &str, g1: &str, g2: &str| {
        lockall(
            con,
            &[
                "2",
                "{g}:a",
                "{g}:b",
                jid,
                "LIMIT",
                "4",
                "4",
                "GROUP",
                "1",
                g1,
                "GROUPLIMIT",
                "1",
                "1",
                "GROUP",
                "2",
                g2,
                "MODE",
                "2",
                "shared",
                "TTL",
                "60000",
            ],
        )
    };
    let first = tokens(grouped(con, "j1", "acme", "acme"));
    // GROUPLIMIT 1 on key 1 refuses acme's second grant as a whole, while
    // another group passes.
    assert_eq!(grouped(con, "j2", "acme", "acme"), Ok(Value::Nil));
    assert_eq!(holders(con, "{g}:b"), vec!["j1"]);
    tokens(grouped(con, "j3", "other", "other"));
    assert_eq!(holders(con, "{g}:a"), vec!["j1", "j3"]);
    // A renewal keeps each key's group: the same groups renew, another is
    // LOCK's error and changes nothing.
    assert_eq!(tokens(grouped(con, "j1", "acme", "acme")), first);
    let moved = grouped(con, "j1", "acme", "other");
    assert!(
        matches!(&moved, Err(e) if e.starts_with("ERR the jid already holds this lock for another GROUP")),
        "{moved:?}"
    );
    assert_eq!(field_of(con, "{g}:b", "j1", "group"), bulk("acme"));
    // MODE exclusive on one key and shared on another.
    let modes = |con: &mut Connection, jid: &str, m1: &str, m2: &str| {
        lockall(
            con,
            &[
                "2", "{g}:x", "{g}:y", jid, "LIMIT", "0", "0", "MODE", "1", m1, "MODE", "2", m2,
                "WAIT", "60000",
            ],
        )
    };
    tokens(modes(con, "w1", "exclusive", "shared"));
    token(call!(
        con,
        "UNIQUE.LOCK",
        "{g}:y",
        "r1",
        "LIMIT",
        "0",
        "MODE",
        "shared"
    ));
    // The upgrade key 2 cannot grant (r1 shares it) refuses the whole
    // renewal at once, WAIT or not, and key 1 stays as it was.
    assert_eq!(modes(con, "w1", "exclusive", "exclusive"), Ok(Value::Nil));
    assert_eq!(field_of(con, "{g}:y", "w1", "mode"), bulk("shared"));
    assert_eq!(waiting(con), 0);
    // Every key's group and mode reach the replica in the one effect.
    wait_digests_equal(con, &mut replica.con());
    let r = &mut replica.con();
    for (key, jid, group, mode) in [
        ("{g}:a", "j1", bulk("acme"), Value::Nil),
        ("{g}:b", "j1", bulk("acme"), bulk("shared")),
        ("{g}:a", "j3", bulk("other"), Value::Nil),
        ("{g}:b", "j3", bulk("other"), bulk("shared")),
        ("{g}:x", "w1", Value::Nil, bulk("exclusive")),
        ("{g}:y", "w1", Value::Nil, bulk("shared")),
    ] {
        assert_eq!(field_of(r, key, jid, "group"), group, "{key} {jid}");
        assert_eq!(field_of(r, key, jid, "mode"), mode, "{key} {jid}");
    }
}

#[test]
fn a_multi_key_waiter_counts_under_its_group_and_keeps_its_rules() {
    let server = Server::start();
    let con = &mut server.con();
    token(call!(
        con,
        "UNIQUE.LOCK",
        "{q}:a",
        "x",
        "LIMIT",
        "2",
        "GROUP",
        "acme"
    ));
    token(call!(con, "UNIQUE.LOCK", "{q}:b", "y", "MODE", "exclusive"));
    let waiter = start_waiter(
        &server,
        &[
            "UNIQUE.LOCKALL",
            "2",
            "{q}:a",
            "{q}:b",
            "w",
            "LIMIT",
            "2",
            "0",
            "GROUP",
            "1",
            "acme",
            "GROUPLIMIT",
            "1",
            "2",
            "MODE",
            "2",
            "shared",
            "WAIT",
            "60000",
        ],
    );
    let row = |g: Value, w: i64, h: i64| {
        Value::Array(vec![
            bulk("group"),
            g,
            bulk("waiting"),
            Value::Int(w),
            bulk("holding"),
            Value::Int(h),
        ])
    };
    assert_eq!(
        call!(con, "UNIQUE.WAITERS", "{q}:a", "GROUPS"),
        Ok(Value::Array(vec![row(bulk("acme"), 1, 1)]))
    );
    assert_eq!(
        call!(con, "UNIQUE.WAITERS", "{q}:b", "GROUPS"),
        Ok(Value::Array(vec![row(Value::Nil, 1, 1)]))
    );
    // Key 2 frees: the waiter is served on both keys at once, with its
    // group on key 1 and its mode on key 2.
    assert_eq!(call!(con, "UNIQUE.UNLOCK", "{q}:b", "y"), Ok(Value::Int(1)));
    assert_eq!(tokens(reply_of(waiter)).len(), 2);
    assert_eq!(field_of(con, "{q}:a", "w", "group"), bulk("acme"));
    assert_eq!(field_of(con, "{q}:b", "w", "mode"), bulk("shared"));
    assert_eq!(holders(con, "{q}:a"), vec!["x", "w"]);
}

#[test]
fn a_downgrade_in_a_renewal_serves_the_key_s_waiters() {
    let server = Server::start();
    let con = &mut server.con();
    let renew = |con: &mut Connection, mode: &str| {
        lockall(
            con,
            &[
                "2", "{d}:x", "{d}:y", "w", "LIMIT", "0", "1", "MODE", "1", mode, "TTL", "60000",
            ],
        )
    };
    let held = tokens(renew(con, "exclusive"));
    let reader = start_waiter(
        &server,
        &[
            "UNIQUE.LOCK",
            "{d}:x",
            "r",
            "LIMIT",
            "0",
            "MODE",
            "shared",
            "WAIT",
            "60000",
        ],
    );
    let renewed = Instant::now();
    assert_eq!(tokens(renew(con, "shared")), held);
    let (reply, served) = reader.join().expect("reader");
    token(reply);
    // Served by the downgrade, not by the end of w's lease (60 s).
    assert!(served - renewed < Duration::from_secs(30));
    assert_eq!(holders(con, "{d}:x"), vec!["w", "r"]);
}

#[test]
fn a_served_multi_key_waiter_still_meets_its_grouplimit() {
    let server = Server::start();
    let con = &mut server.con();
    token(call!(
        con,
        "UNIQUE.LOCK",
        "{r}:a",
        "x",
        "LIMIT",
        "3",
        "GROUP",
        "acme"
    ));
    token(call!(con, "UNIQUE.LOCK", "{r}:b", "y"));
    let waiter = start_waiter(
        &server,
        &[
            "UNIQUE.LOCKALL",
            "2",
            "{r}:a",
            "{r}:b",
            "w",
            "LIMIT",
            "3",
            "1",
            "GROUP",
            "1",
            "acme",
            "GROUPLIMIT",
            "1",
            "1",
            "WAIT",
            "60000",
        ],
    );
    // Key 2 frees, key 1 has room, but acme holds its 1 there: the retry
    // is refused and the waiter keeps waiting, holding nothing.
    assert_eq!(call!(con, "UNIQUE.UNLOCK", "{r}:b", "y"), Ok(Value::Int(1)));
    // (UNLOCK serves the key's waiters before it replies.)
    assert_eq!(waiters(con, "{r}:b"), 1);
    assert_eq!(waiting(con), 1);
    assert_eq!(call!(con, "EXISTS", "{r}:b"), Ok(Value::Int(0)));
    // acme's holder leaves: now it is served.
    assert_eq!(call!(con, "UNIQUE.UNLOCK", "{r}:a", "x"), Ok(Value::Int(1)));
    assert_eq!(tokens(reply_of(waiter)).len(), 2);
    assert_eq!(holders(con, "{r}:a"), vec!["w"]);
}

/// One case of the table below: commands that set a key up (`{k}` stands
/// for the key, `{k}:o` for another; a command given to `waiter` blocks),
/// then one call of LOCK's options on it.
struct Case {
    name: &'static str,
    setup: &'static [&'static [&'static str]],
    waiters: &'static [&'static [&'static str]],
    jid: &'static str,
    options: &'static [&'static str],
    /// What both get: `granted`, `denied`, or the start of the error.
    expect: &'static str,
}

/// LOCK's options in LOCKALL's shape for one key: GROUP, GROUPLIMIT, MODE
/// and RATE take the key's position (1); WEIGHT follows its GROUP.
fn for_one_key(options: &[&str]) -> Vec<String> {
    let mut out = Vec::new();
    for (i, word) in options.iter().enumerate() {
        let takes_position = i % 2 == 0
            && ["GROUP", "GROUPLIMIT", "MODE", "RATE"].contains(&word.to_uppercase().as_str());
        out.push(word.to_string());
        if takes_position {
            out.push("1".to_string());
        }
    }
    out
}

/// What a call got, alike for LOCK's integer and LOCKALL's list of one.
fn outcome(reply: Result<Value, String>) -> String {
    match reply {
        Ok(Value::Int(_)) => "granted".to_string(),
        Ok(Value::Array(list)) if list.len() == 1 => "granted".to_string(),
        Ok(Value::Nil) => "denied".to_string(),
        Err(e) => e.replace("'unique.lockall'", "'unique.lock'"),
        other => format!("unexpected {other:?}"),
    }
}

/// Group A's holder at its GROUPLIMIT (1) on a key of LIMIT 3: the setup of
/// the cases where a waiter of A is held back by that GROUPLIMIT.
const A0_HOLDS: &[&str] = &[
    "UNIQUE.LOCK",
    "{k}",
    "a0",
    "LIMIT",
    "3",
    "GROUP",
    "A",
    "GROUPLIMIT",
    "1",
    "TTL",
    "600000",
];

/// A waiter of group A behind `A0_HOLDS`: held back by its GROUPLIMIT.
const A1_WAITS: &[&str] = &[
    "UNIQUE.LOCK",
    "{k}",
    "a1",
    "LIMIT",
    "3",
    "GROUP",
    "A",
    "GROUPLIMIT",
    "1",
    "TTL",
    "600000",
    "WAIT",
    "600000",
];

/// `UNIQUE.LOCKALL 1 k` decides as `UNIQUE.LOCK k` on every case of one
/// table: free, full, renewed, rate-limited, refused upgrades and groups, and
/// behind each kind of waiter (one a waiting group's GROUPLIMIT holds back
/// passes, others do not). Each case runs on two keys set up alike, one per
/// command, and the replies and holders after them are compared.
#[test]
fn lockall_of_one_key_decides_as_lock() {
    let cases = [
        Case {
            name: "a free key",
            setup: &[],
            waiters: &[],
            jid: "j",
            options: &["TTL", "600000"],
            expect: "granted",
        },
        Case {
            name: "a full key",
            setup: &[&["UNIQUE.LOCK", "{k}", "h", "TTL", "600000"]],
            waiters: &[],
            jid: "j",
            options: &["TTL", "600000"],
            expect: "denied",
        },
        Case {
            name: "a renewal",
            setup: &[&["UNIQUE.LOCK", "{k}", "j", "TTL", "600000"]],
            waiters: &[&["UNIQUE.LOCK", "{k}", "w", "TTL", "600000", "WAIT", "600000"]],
            jid: "j",
            options: &["TTL", "600000"],
            expect: "granted",
        },
        Case {
            name: "a rate spent",
            setup: &[&[
                "UNIQUE.LOCK",
                "{k}",
                "h",
                "LIMIT",
                "5",
                "RATE",
                "1",
                "PER",
                "600000",
            ]],
            waiters: &[],
            jid: "j",
            options: &["LIMIT", "5", "RATE", "1", "PER", "600000"],
            expect: "denied",
        },
        Case {
            name: "another group passes a group waiting at its GROUPLIMIT",
            setup: &[A0_HOLDS],
            waiters: &[A1_WAITS],
            jid: "b0",
            options: &["LIMIT", "3", "GROUP", "B", "TTL", "600000"],
            expect: "granted",
        },
        Case {
            name: "with WAIT, it passes that group at once",
            setup: &[A0_HOLDS],
            waiters: &[A1_WAITS],
            jid: "b0",
            options: &[
                "LIMIT", "3", "GROUP", "B", "WEIGHT", "2", "TTL", "600000", "WAIT", "50",
            ],
            expect: "granted",
        },
        Case {
            name: "the group at its GROUPLIMIT itself",
            setup: &[A0_HOLDS],
            waiters: &[A1_WAITS],
            jid: "a2",
            options: &[
                "LIMIT",
                "3",
                "GROUP",
                "A",
                "GROUPLIMIT",
                "1",
                "TTL",
                "600000",
            ],
            expect: "denied",
        },
        Case {
            name: "behind a waiter for an exclusive hold",
            setup: &[&["UNIQUE.LOCK", "{k}", "s0", "LIMIT", "3", "TTL", "600000"]],
            waiters: &[&[
                "UNIQUE.LOCK",
                "{k}",
                "x",
                "LIMIT",
                "3",
                "MODE",
                "exclusive",
                "TTL",
                "600000",
                "WAIT",
                "600000",
            ]],
            jid: "s1",
            options: &["LIMIT", "3", "TTL", "600000"],
            expect: "denied",
        },
        Case {
            name: "behind a multi-key waiter",
            setup: &[&["UNIQUE.LOCK", "{k}:o", "h", "TTL", "600000"]],
            waiters: &[&[
                "UNIQUE.LOCKALL",
                "2",
                "{k}",
                "{k}:o",
                "w",
                "LIMIT",
                "3",
                "1",
                "TTL",
                "600000",
                "WAIT",
                "600000",
            ]],
            jid: "j",
            options: &["LIMIT", "3", "TTL", "600000"],
            expect: "denied",
        },
        Case {
            name: "an upgrade another holder shares",
            setup: &[
                &["UNIQUE.LOCK", "{k}", "j", "LIMIT", "3", "TTL", "600000"],
                &["UNIQUE.LOCK", "{k}", "h", "LIMIT", "3", "TTL", "600000"],
            ],
            waiters: &[],
            jid: "j",
            options: &[
                "LIMIT",
                "3",
                "MODE",
                "exclusive",
                "TTL",
                "600000",
                "WAIT",
                "50",
            ],
            expect: "denied",
        },
        Case {
            name: "a renewal naming another group",
            setup: &[&[
                "UNIQUE.LOCK",
                "{k}",
                "j",
                "LIMIT",
                "3",
                "GROUP",
                "A",
                "TTL",
                "600000",
            ]],
            waiters: &[],
            jid: "j",
            options: &["LIMIT", "3", "GROUP", "B", "TTL", "600000"],
            expect: "ERR",
        },
        Case {
            name: "exclusive on a shared key",
            setup: &[&["UNIQUE.LOCK", "{k}", "h", "LIMIT", "3", "TTL", "600000"]],
            waiters: &[],
            jid: "j",
            options: &["LIMIT", "3", "MODE", "exclusive", "TTL", "600000"],
            expect: "denied",
        },
        Case {
            name: "a LIMIT 0 key behind a waiter",
            setup: &[&["UNIQUE.LOCK", "{k}:o", "h", "TTL", "600000"]],
            waiters: &[&[
                "UNIQUE.LOCKALL",
                "2",
                "{k}",
                "{k}:o",
                "w",
                "LIMIT",
                "0",
                "1",
                "TTL",
                "600000",
                "WAIT",
                "600000",
            ]],
            jid: "j",
            options: &["LIMIT", "0", "TTL", "600000"],
            expect: "denied",
        },
    ];
    let server = Server::start();
    let con = &mut server.con();
    let mut blocked = Vec::new();
    for (i, case) in cases.iter().enumerate() {
        let keys = [format!("case{i}:lock"), format!("case{i}:all")];
        for key in &keys {
            let fill = |args: &[&str]| -> Vec<String> {
                args.iter()
                    .map(|a| a.replace("{k}", key))
                    .collect::<Vec<_>>()
            };
            for args in case.setup {
                let args = fill(args);
                let mut cmd = redis::cmd(&args[0]);
                cmd.arg(&args[1..]);
                common::run(&cmd, con).unwrap_or_else(|e| panic!("{}: {args:?}: {e}", case.name));
            }
            for args in case.waiters {
                let args = fill(args);
                let args: Vec<&str> = args.iter().map(String::as_str).collect();
                blocked.push(start_waiter(&server, &args));
            }
        }
        let [lock_key, all_key] = &keys;
        let lock = call!(con, "UNIQUE.LOCK", lock_key, case.jid, case.options);
        let all = call!(
            con,
            "UNIQUE.LOCKALL",
            1,
            all_key,
            case.jid,
            for_one_key(case.options)
        );
        let (lock, all) = (outcome(lock), outcome(all));
        assert_eq!(lock, all, "{}: LOCK and LOCKALL 1 disagree", case.name);
        assert!(lock.starts_with(case.expect), "{}: {lock}", case.name);
        assert_eq!(
            holders(con, lock_key),
            holders(con, all_key),
            "{}: the holders after them differ",
            case.name
        );
        assert_eq!(
            waiters(con, lock_key),
            waiters(con, all_key),
            "{}",
            case.name
        );
    }
    drop(server);
    drop(blocked);
}
