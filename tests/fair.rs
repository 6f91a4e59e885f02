//! Fair waiting among groups (GROUP, WEIGHT, GROUPLIMIT) and the
//! shared/exclusive queue rule (MODE), with real clients blocked in LOCK ...
//! WAIT on a real server. Every assertion is on the server's state (who
//! holds, who waits), polled with a generous bound, never on timing.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;

use common::{Connection, Server, Value, token, wait_for};

/// WAITERS key GROUPS as (group, waiting, holding), no group as "".
fn groups(con: &mut Connection, key: &str) -> Vec<(String, i64, i64)> {
    let Ok(Value::Array(rows)) = call!(con, "UNIQUE.WAITERS", key, "GROUPS") else {
        panic!("WAITERS GROUPS is an array");
    };
    rows.into_iter()
        .map(|row| match row {
            Value::Array(f) => match f.as_slice() {
                [_, g, _, Value::Int(w), _, Value::Int(h)] => {
                    let g = match g {
                        Value::BulkString(b) => String::from_utf8_lossy(b).into_owned(),
                        _ => String::new(),
                    };
                    (g, *w, *h)
                }
                other => panic!("a group's row: {other:?}"),
            },
            other => panic!("a group's row: {other:?}"),
        })
        .collect()
}

/// (waiting, holding) of `group` on `key`.
fn of(con: &mut Connection, key: &str, group: &str) -> (i64, i64) {
    groups(con, key)
        .into_iter()
        .find(|(g, _, _)| g == group)
        .map_or((0, 0), |(_, w, h)| (w, h))
}

fn waiting(con: &mut Connection, key: &str) -> i64 {
    common::int(call!(con, "UNIQUE.WAITERS", key).expect("WAITERS"))
}

/// A client blocked in `UNIQUE.LOCK key jid <args> WAIT 60000`, started once
/// the server counts the waiters before it (so they queue in this order).
fn waiter(
    server: &Server,
    key: &str,
    jid: &str,
    args: &[&str],
) -> JoinHandle<Result<Value, String>> {
    let observer = &mut server.con();
    let before = waiting(observer, key);
    let mut con = server.con();
    let mut cmd = redis::cmd("UNIQUE.LOCK");
    cmd.arg(key).arg(jid).arg(args).arg("WAIT").arg(60_000);
    let handle = std::thread::spawn(move || common::run(&cmd, &mut con));
    wait_for("the waiter to queue", || {
        waiting(observer, key) > before || handle.is_finished()
    });
    handle
}

fn holders(con: &mut Connection, key: &str) -> Vec<String> {
    common::holders(con, key)
}

/// A LOCK's options for `tenant` at GROUPLIMIT 1 on a key of LIMIT
/// `limit`, its lease `ttl` ms.
fn tenant_args(tenant: &str, limit: &str, ttl: &str) -> Vec<String> {
    [
        "LIMIT",
        limit,
        "GROUP",
        tenant,
        "GROUPLIMIT",
        "1",
        "TTL",
        ttl,
    ]
    .map(String::from)
    .to_vec()
}

/// Tenants t0 to t39 each take a slot of "k" with a holder of their own
/// (h0 to h39), LOCK given `args(tenant)`.
fn forty_tenants_hold(con: &mut Connection, args: impl Fn(&str) -> Vec<String>) {
    for i in 0..40 {
        let a = args(&format!("t{i}"));
        token(call!(con, "UNIQUE.LOCK", "k", format!("h{i}"), &a[..]));
    }
}

/// Tenants t0 to t39 each queue a waiter on "k" (`{prefix}0` to
/// `{prefix}39`), in that order, LOCK given `args(tenant)`.
fn forty_tenants_wait(
    server: &Server,
    prefix: &str,
    args: impl Fn(&str) -> Vec<String>,
) -> Vec<JoinHandle<Result<Value, String>>> {
    (0..40)
        .map(|i| {
            let a = args(&format!("t{i}"));
            let a: Vec<&str> = a.iter().map(String::as_str).collect();
            waiter(server, "k", &format!("{prefix}{i}"), &a)
        })
        .collect()
}

/// The case, with real clients: LIMIT 10; tenant "long" has 10 jobs
/// running and a backlog queued first; tenant "short" then queues jobs of a
/// 100 ms lease, each of its clients queueing again as soon as it is served.
/// As long jobs end one by one, the freed slots go to the tenant holding
/// fewer: the two end at 5 and 5, and stay there while long jobs keep
/// ending (a first-come queue would have given every slot back to "long").
#[test]
fn a_tenant_of_long_jobs_and_one_of_short_jobs_end_at_half_each() {
    let server = Server::start();
    let con = &mut server.con();
    let long = ["LIMIT", "10", "GROUP", "long", "TTL", "600000"];
    for i in 0..10 {
        token(call!(
            con,
            "UNIQUE.LOCK",
            "api",
            format!("long-{i}"),
            &long[..]
        ));
    }
    let backlog: Vec<_> = (10..40)
        .map(|i| waiter(&server, "api", &format!("long-{i}"), &long))
        .collect();
    let stop = Arc::new(AtomicBool::new(false));
    // Short jobs: leases of 100 ms, longer on a server that serves slower
    // (valgrind), so that a short job's lease outlasts the test's few
    // commands between two looks, as it does on a server at full speed.
    let short_lease = 100 * common::patience();
    let short: Vec<_> = (0..12)
        .map(|i| {
            let mut con = server.con();
            let stop = Arc::clone(&stop);
            std::thread::spawn(move || {
                let mut n = 0;
                while !stop.load(Ordering::Relaxed) {
                    n += 1;
                    let reply = call!(
                        &mut con,
                        "UNIQUE.LOCK",
                        "api",
                        format!("short-{i}-{n}"),
                        "LIMIT",
                        "10",
                        "GROUP",
                        "short",
                        "TTL",
                        short_lease,
                        "WAIT",
                        "60000"
                    );
                    if reply.is_err() {
                        break;
                    }
                }
            })
        })
        .collect();
    wait_for("the short tenant to queue", || {
        of(con, "api", "short").0 >= 10
    });
    assert_eq!(of(con, "api", "long"), (30, 10));
    // Long jobs end one at a time, each time once the server has settled.
    let mut ended = 0;
    let mut end_one_long_job = |con: &mut Connection| {
        let oldest = holders(con, "api")
            .into_iter()
            .find(|j| j.starts_with("long-"))
            .expect("a long job runs");
        assert_eq!(
            call!(con, "UNIQUE.UNLOCK", "api", &oldest),
            Ok(Value::Int(1))
        );
        ended += 1;
    };
    for k in 1..=5 {
        end_one_long_job(con);
        wait_for("the short tenant to take the freed slot", || {
            let (_, l) = of(con, "api", "long");
            let (_, s) = of(con, "api", "short");
            l == 10 - k && s == k
        });
    }
    // Balanced: a long job that ends is replaced by a long one, and the
    // short tenant keeps its five through its own leases ending.
    for _ in 0..10 {
        end_one_long_job(con);
        wait_for("5 and 5 again", || {
            of(con, "api", "long").1 == 5 && of(con, "api", "short").1 == 5
        });
    }
    assert_eq!(ended, 15);
    for _ in 0..20 {
        let (l, s) = (of(con, "api", "long").1, of(con, "api", "short").1);
        assert_eq!(l, 5, "the long tenant keeps its half");
        assert!((3..=5).contains(&s), "the short tenant holds {s}");
        assert!(l + s <= 10);
    }
    stop.store(true, Ordering::Relaxed);
    drop(server);
    for t in short {
        let _ = t.join();
    }
    drop(backlog);
}

/// "At most 2 per tenant and 6 in all" is one key: a tenant waiting at its
/// GROUPLIMIT holds no one else back, and a newcomer of another tenant
/// (without WAIT) takes a free slot past it.
#[test]
fn grouplimit_caps_each_tenant_and_the_others_use_the_rest() {
    let server = Server::start();
    let con = &mut server.con();
    let args = |group: &'static str| -> Vec<&'static str> {
        vec![
            "LIMIT",
            "6",
            "GROUP",
            group,
            "GROUPLIMIT",
            "2",
            "TTL",
            "600000",
        ]
    };
    let a: Vec<_> = (0..5)
        .map(|i| waiter(&server, "k", &format!("a{i}"), &args("A")))
        .collect();
    // A's first two got in at once; the other three wait at A's limit.
    assert_eq!(of(con, "k", "A"), (3, 2));
    // Nobody but A waits, and A is held back by its own limit: B, without
    // WAIT, takes a free slot at once.
    token(call!(con, "UNIQUE.LOCK", "k", "b0", &args("B")[..]));
    let b: Vec<_> = (1..5)
        .map(|i| waiter(&server, "k", &format!("b{i}"), &args("B")))
        .collect();
    assert_eq!(of(con, "k", "B"), (3, 2));
    token(call!(con, "UNIQUE.LOCK", "k", "c0", &args("C")[..]));
    token(call!(con, "UNIQUE.LOCK", "k", "c1", &args("C")[..]));
    assert_eq!(holders(con, "k").len(), 6);
    // A slot of A's frees: A's next waiter, in order; never 3 of a tenant.
    assert_eq!(call!(con, "UNIQUE.UNLOCK", "k", "a0"), Ok(Value::Int(1)));
    wait_for("A's next waiter", || of(con, "k", "A") == (2, 2));
    assert!(holders(con, "k").contains(&"a2".to_string()));
    // C leaves: its slots go to the waiting tenants, each up to its limit
    // only: the slots stay free rather than go over.
    call!(con, "UNIQUE.UNLOCK", "k", "c0").expect("unlock");
    call!(con, "UNIQUE.UNLOCK", "k", "c1").expect("unlock");
    assert_eq!(of(con, "k", "A").1, 2);
    assert_eq!(of(con, "k", "B").1, 2);
    assert_eq!(holders(con, "k").len(), 4);
    drop(server);
    drop((a, b));
}

/// More tenants waiting on one key than the kinds of waiter a queue once
/// counted (32), each at its GROUPLIMIT: a newcomer of another tenant takes
/// the slot their limits leave free, and a slot freed by one tenant goes to
/// that tenant's waiter, past the older waiters of the tenants still at
/// their limit.
#[test]
fn forty_tenants_at_their_grouplimit_leave_a_free_slot_to_a_newcomer_and_get_their_own_back() {
    let server = Server::start();
    let con = &mut server.con();
    let args = |tenant: &str| tenant_args(tenant, "42", "600000");
    forty_tenants_hold(con, args);
    let waiters = forty_tenants_wait(&server, "w", args);
    assert_eq!(waiting(con, "k"), 40, "each tenant waits at its limit");
    // 2 of 42 slots are free, and no waiter may take one.
    token(call!(con, "UNIQUE.LOCK", "k", "n", &args("new")[..]));
    assert_eq!(holders(con, "k").len(), 41);
    assert_eq!(waiting(con, "k"), 40);
    call!(con, "UNIQUE.UNLOCK", "k", "h7").expect("unlock");
    wait_for("t7's waiter", || {
        holders(con, "k").contains(&"w7".to_string())
    });
    assert_eq!(waiting(con, "k"), 39);
    assert_eq!(
        of(con, "k", "t0"),
        (1, 1),
        "the oldest waiter's tenant is at its limit"
    );
    drop(server);
    drop(waiters);
}

/// Tenants at their GROUPLIMIT are not retried by a pass, which looks at
/// each one's holders instead: a release serves the one tenant it freed,
/// and a tenant whose holder's lease then ends is served at that end, woken
/// by the pass that passed it over.
#[test]
fn tenants_passed_over_at_their_grouplimit_are_served_when_a_lease_of_theirs_ends() {
    let server = Server::start();
    let con = &mut server.con();
    let args = |tenant: &str, ttl: &str| tenant_args(tenant, "0", ttl);
    // 40 holders: the layout of many, whose counts a pass reads.
    forty_tenants_hold(con, |tenant| args(tenant, "600000"));
    let waiters = forty_tenants_wait(&server, "w", |tenant| args(tenant, "600000"));
    assert_eq!(waiting(con, "k"), 40, "each tenant waits at its limit");
    // t5's holder now ends its lease in a second; then t7's releases.
    token(call!(
        con,
        "UNIQUE.LOCK",
        "k",
        "h5",
        &args("t5", "1000")[..]
    ));
    call!(con, "UNIQUE.UNLOCK", "k", "h7").expect("unlock");
    wait_for("t7's waiter", || {
        holders(con, "k").contains(&"w7".to_string())
    });
    wait_for("t5's waiter, once h5's lease ended", || {
        holders(con, "k").contains(&"w5".to_string())
    });
    assert_eq!(waiting(con, "k"), 38);
    assert_eq!(of(con, "k", "t5"), (0, 1));
    assert_eq!(of(con, "k", "t0"), (1, 1), "the others still wait");
    drop(server);
    drop(waiters);
}

/// Tenants kept aside at their GROUPLIMIT between passes come back however
/// their slots free up: a REAP that removes more of their holders at once
/// than the key names in what went down serves every one of them; and a
/// DEL of the key (a new key by that name, which knows nothing of the
/// old one's counts) serves the next round of them.
#[test]
fn tenants_at_their_grouplimit_are_served_when_many_slots_free_at_once_or_the_key_goes() {
    let server = Server::start();
    let con = &mut server.con();
    let args = |tenant: &str| {
        let mut a = tenant_args(tenant, "0", "600000");
        a.extend(["OWNER".to_string(), "worker-1".to_string()]);
        a
    };
    forty_tenants_hold(con, args);
    let first = forty_tenants_wait(&server, "w", args);
    assert_eq!(waiting(con, "k"), 40, "each tenant waits at its limit");
    // A release in between: its tenant is served, the others stay aside.
    call!(con, "UNIQUE.UNLOCK", "k", "h3").expect("unlock");
    wait_for("t3's waiter", || {
        holders(con, "k").contains(&"w3".to_string())
    });
    assert_eq!(waiting(con, "k"), 39);
    // One key in the database: one call of REAP goes through it.
    let reaped = call!(con, "UNIQUE.REAP", "0", "OWNER", "worker-1").expect("REAP");
    let Value::Array(reply) = reaped else {
        panic!("REAP's reply: {reaped:?}");
    };
    assert_eq!(
        reply.get(1),
        Some(&Value::Int(40)),
        "the 39 holders left and t3's waiter, all of worker-1"
    );
    wait_for("every waiter served", || waiting(con, "k") == 0);
    assert_eq!(holders(con, "k").len(), 39);
    // t3 holds nothing now: its next waiter takes a slot at once.
    let second = forty_tenants_wait(&server, "x", args);
    assert_eq!(waiting(con, "k"), 39);
    call!(con, "DEL", "k").expect("DEL");
    wait_for("every tenant's next waiter served", || {
        holders(con, "k").len() == 39 && waiting(con, "k") == 0
    });
    drop(server);
    drop(first);
    drop(second);
}

/// Tenants of LIMIT 5 on a full key beside a tenant of no LIMIT at its
/// GROUPLIMIT: a release serves one tenant of LIMIT 5 (the pass stops once
/// the key is full again, the tenant of no LIMIT passed over, not denied),
/// and that tenant is served once its own group's holder releases.
#[test]
fn a_tenant_of_no_limit_passed_over_is_served_when_its_group_holds_fewer() {
    let server = Server::start();
    let con = &mut server.con();
    let unlimited = ["LIMIT", "0", "GROUP", "z", "GROUPLIMIT", "1"];
    token(call!(con, "UNIQUE.LOCK", "k", "z0", &unlimited[..]));
    for i in 0..4 {
        token(call!(
            con,
            "UNIQUE.LOCK",
            "k",
            format!("h{i}"),
            "LIMIT",
            "5"
        ));
    }
    let mut waiters = vec![waiter(&server, "k", "zw", &unlimited)];
    for i in 0..40 {
        let tenant = format!("t{i}");
        waiters.push(waiter(
            &server,
            "k",
            &format!("w{i}"),
            &["LIMIT", "5", "GROUP", &tenant],
        ));
    }
    for (i, h) in ["h0", "h1"].iter().enumerate() {
        call!(con, "UNIQUE.UNLOCK", "k", h).expect("unlock");
        let served = format!("w{i}");
        wait_for("the oldest tenant of LIMIT 5", || {
            holders(con, "k").contains(&served)
        });
        assert_eq!(waiting(con, "k"), 40 - i as i64, "one served a release");
    }
    call!(con, "UNIQUE.UNLOCK", "k", "z0").expect("unlock");
    wait_for("zw, its group free", || {
        holders(con, "k").contains(&"zw".to_string())
    });
    assert_eq!(waiting(con, "k"), 38);
    assert_eq!(of(con, "k", "t2"), (1, 0), "the others still wait");
    drop(server);
    drop(waiters);
}

/// A LOCK that the key admits goes past waiters whose group is at their
/// GROUPLIMIT, and waits behind (here: is denied, without WAIT) a waiter
/// whose group holds fewer: alike whether the waiters gave their lease as a
/// TTL or as a PXAT (a call the queue cannot sort into a kind in advance).
#[test]
fn a_newcomer_goes_past_waiters_at_their_grouplimit_alike_with_a_ttl_or_a_pxat() {
    let server = Server::start();
    let con = &mut server.con();
    let in_a_minute = (std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("the clock is past 1970")
        .as_millis()
        + 60_000)
        .to_string();
    for (key, lease) in [("ttl", ["TTL", "60000"]), ("pxat", ["PXAT", &in_a_minute])] {
        let tenant = |group: &'static str| -> Vec<&str> {
            let mut a = vec!["LIMIT", "1", "GROUP", group, "GROUPLIMIT", "1"];
            a.extend(lease);
            a
        };
        let newcomer = ["LIMIT", "3", "TTL", "60000", "GROUP"];
        token(call!(con, "UNIQUE.LOCK", key, "h", &tenant("a")[..]));
        let mut waiters = vec![waiter(&server, key, "wa", &tenant("a"))];
        token(call!(con, "UNIQUE.LOCK", key, "n1", &newcomer[..], "b"));
        waiters.push(waiter(&server, key, "wc", &tenant("c")));
        assert_eq!(
            call!(con, "UNIQUE.LOCK", key, "n2", &newcomer[..], "d"),
            Ok(Value::Nil),
            "{key}: wc's group holds none of its GROUPLIMIT: it goes first"
        );
        assert_eq!(holders(con, key), ["h", "n1"], "{key}");
        assert_eq!(waiting(con, key), 2, "{key}");
        call!(con, "UNIQUE.UNLOCK", key, "n1").expect("unlock");
        call!(con, "UNIQUE.UNLOCK", key, "h").expect("unlock");
        wait_for("the waiters, the key free", || holders(con, key).len() == 1);
        assert_eq!(holders(con, key), ["wa"], "{key}: the oldest first");
        drop(waiters);
    }
    drop(server);
}

/// Weights: with LIMIT 9, a tenant of weight 2 and one of weight 1, both
/// waiting with more than enough jobs, fill the slots 6 and 3.
#[test]
fn weights_share_the_slots_in_proportion() {
    let server = Server::start();
    let con = &mut server.con();
    token(call!(con, "UNIQUE.LOCK", "k", "gate", "LIMIT", "9"));
    // The gate holds 1 of 9: fill the other 8 and queue the rest.
    let mut clients = Vec::new();
    for i in 0..10 {
        clients.push(waiter(
            &server,
            "k",
            &format!("h{i}"),
            &["LIMIT", "9", "GROUP", "heavy", "WEIGHT", "2"],
        ));
        clients.push(waiter(
            &server,
            "k",
            &format!("l{i}"),
            &["LIMIT", "9", "GROUP", "light"],
        ));
    }
    // Unlocking the gate and the first 8 grants: the queue refills by share.
    let first: Vec<String> = holders(con, "k")
        .into_iter()
        .filter(|j| j != "gate")
        .collect();
    call!(con, "UNIQUE.UNLOCK", "k", "gate").expect("unlock");
    for j in &first {
        call!(con, "UNIQUE.UNLOCK", "k", j).expect("unlock");
    }
    wait_for("9 holders", || holders(con, "k").len() == 9);
    assert_eq!(of(con, "k", "heavy").1, 6);
    assert_eq!(of(con, "k", "light").1, 3);
    drop(server);
    drop(clients);
}

/// A queued writer blocks new readers, even with slots free; when the
/// readers before it leave it holds alone, and when it leaves the readers
/// queued behind it are served together.
#[test]
fn a_writer_blocks_readers_and_the_readers_behind_it_go_together() {
    let server = Server::start();
    let con = &mut server.con();
    let read = ["LIMIT", "10", "MODE", "shared", "TTL", "600000"];
    let write = ["LIMIT", "10", "MODE", "exclusive", "TTL", "600000"];
    token(call!(con, "UNIQUE.LOCK", "doc", "r1", &read[..]));
    token(call!(con, "UNIQUE.LOCK", "doc", "r2", &read[..]));
    let w = waiter(&server, "doc", "w", &write);
    // A reader after the writer: no slot, though 8 are free.
    assert_eq!(
        call!(con, "UNIQUE.LOCK", "doc", "r3", &read[..]),
        Ok(Value::Nil)
    );
    let behind: Vec<_> = (3..7)
        .map(|i| waiter(&server, "doc", &format!("r{i}"), &read))
        .collect();
    assert_eq!(waiting(con, "doc"), 5);
    call!(con, "UNIQUE.UNLOCK", "doc", "r1").expect("unlock");
    assert_eq!(holders(con, "doc"), ["r2"]);
    call!(con, "UNIQUE.UNLOCK", "doc", "r2").expect("unlock");
    let wt = token(w.join().expect("the writer"));
    assert_eq!(holders(con, "doc"), ["w"]);
    assert_eq!(waiting(con, "doc"), 4);
    // The writer leaves: all four readers at once.
    call!(con, "UNIQUE.UNLOCK", "doc", "w").expect("unlock");
    for r in behind {
        assert!(token(r.join().expect("a reader")) > wt);
    }
    assert_eq!(holders(con, "doc"), ["r3", "r4", "r5", "r6"]);
}

/// A writer that downgrades to shared lets the waiting readers in.
#[test]
fn a_downgrade_serves_the_waiting_readers() {
    let server = Server::start();
    let con = &mut server.con();
    let t = token(call!(
        con,
        "UNIQUE.LOCK",
        "doc",
        "w",
        "LIMIT",
        "3",
        "MODE",
        "exclusive"
    ));
    let readers: Vec<_> = (0..3)
        .map(|i| {
            waiter(
                &server,
                "doc",
                &format!("r{i}"),
                &["LIMIT", "3", "MODE", "shared"],
            )
        })
        .collect();
    assert_eq!(
        token(call!(con, "UNIQUE.LOCK", "doc", "w", "MODE", "shared")),
        t
    );
    // LIMIT 3 with the writer, now a reader, among them: two get in.
    wait_for("two readers", || holders(con, "doc").len() == 3);
    assert_eq!(holders(con, "doc"), ["w", "r0", "r1"]);
    assert_eq!(waiting(con, "doc"), 1);
    assert_eq!(of(con, "doc", ""), (1, 3));
    drop(server);
    drop(readers);
}

/// WAITERS ... GROUPS on a key of many holders (the indexed layout, whose
/// counts per group it reads): the live holders per group, the ended ones
/// not counted although nothing has removed them yet.
#[test]
fn waiters_groups_counts_the_live_holders_of_a_key_of_many() {
    let server = Server::start_with(&["--unique.reap-interval", "0"]);
    let con = &mut server.con();
    let key = "wide";
    let mut pipe = redis::pipe();
    for i in 0..150 {
        let mut cmd = redis::cmd("UNIQUE.LOCK");
        cmd.arg(key).arg(format!("j{i}")).arg("LIMIT").arg(0);
        match i % 5 {
            // A lease that ends at once, left in place (no reaper runs).
            4 => cmd.arg("TTL").arg(1).arg("GROUP").arg("gc"),
            3 => cmd.arg("TTL").arg(600_000).arg("GROUP").arg("gc"),
            n @ (0 | 1) => cmd
                .arg("TTL")
                .arg(600_000)
                .arg("GROUP")
                .arg(["ga", "gb"][n]),
            _ => cmd.arg("TTL").arg(600_000),
        };
        pipe.add_command(cmd).ignore();
    }
    let () = pipe.query(con).expect("the holders");
    let expected = vec![
        (String::new(), 0, 30),
        ("ga".to_string(), 0, 30),
        ("gb".to_string(), 0, 30),
        ("gc".to_string(), 0, 30),
    ];
    wait_for("the short leases to end", || groups(con, key) == expected);
    let locked_by: Vec<String> = redis::cmd("UNIQUE.LOCKEDBY")
        .arg(key)
        .query(con)
        .expect("LOCKEDBY");
    assert_eq!(locked_by.len(), 120, "the live holders");
}

/// Serves a key of LIMIT 1 one holder at a time, each unlocked once seen
/// (the next is granted by that UNLOCK): the first `n` holders' jids.
fn held_in_turn(con: &mut Connection, key: &str, n: usize) -> Vec<String> {
    let mut order = Vec::new();
    while order.len() < n {
        let mut holder = None;
        wait_for("the next holder", || {
            holder = holders(con, key).into_iter().next();
            holder.is_some()
        });
        let jid = holder.expect("a holder");
        assert_eq!(call!(con, "UNIQUE.UNLOCK", key, &jid), Ok(Value::Int(1)));
        order.push(jid);
    }
    order
}

/// One export at a time (LIMIT 1): tenants take turns, whatever order they
/// queued in; without GROUP the same waiters go in arrival order.
#[test]
fn on_a_key_of_limit_1_tenants_take_turns() {
    let server = Server::start();
    let con = &mut server.con();
    let jobs = ["A1", "A2", "A3", "B1", "B2", "C1"];
    for (key, grouped) in [("export", true), ("fifo", false)] {
        token(call!(con, "UNIQUE.LOCK", key, "gate", "LIMIT", "1"));
        let clients: Vec<_> = jobs
            .iter()
            .map(|jid| {
                let tenant = &jid[..1];
                let mut args = vec!["LIMIT", "1", "TTL", "60000"];
                if grouped {
                    args.extend(["GROUP", tenant]);
                }
                waiter(&server, key, jid, &args)
            })
            .collect();
        assert_eq!(call!(con, "UNIQUE.UNLOCK", key, "gate"), Ok(Value::Int(1)));
        let order = held_in_turn(con, key, jobs.len());
        let expected = if grouped {
            ["A1", "B1", "C1", "A2", "B2", "A3"]
        } else {
            jobs
        };
        assert_eq!(order, expected, "{key}");
        for c in clients {
            assert!(token(c.join().expect("a waiter")) > 0);
        }
        assert_eq!(waiting(con, key), 0);
    }
}

/// Short jobs: 40 of tenant A queued on a key of LIMIT 1, then one of B: B
/// is served at the next turn, not 41st.
#[test]
fn a_tenant_behind_a_backlog_of_short_jobs_waits_one_turn() {
    let server = Server::start();
    let con = &mut server.con();
    token(call!(con, "UNIQUE.LOCK", "k", "gate", "LIMIT", "1"));
    let args = |t: &'static str| ["LIMIT", "1", "GROUP", t, "TTL", "60000"];
    let mut clients: Vec<_> = (0..40)
        .map(|i| waiter(&server, "k", &format!("a{i}"), &args("A")))
        .collect();
    clients.push(waiter(&server, "k", "b0", &args("B")));
    assert_eq!(of(con, "k", "A").0, 40);
    assert_eq!(call!(con, "UNIQUE.UNLOCK", "k", "gate"), Ok(Value::Int(1)));
    let order = held_in_turn(con, "k", 41);
    assert_eq!(order[..3], ["a0", "b0", "a1"]);
    let a: Vec<String> = (0..40).map(|i| format!("a{i}")).collect();
    let rest: Vec<&String> = order.iter().filter(|j| j.starts_with('a')).collect();
    assert_eq!(rest, a.iter().collect::<Vec<_>>(), "A's own in order");
    drop(clients);
}

/// LIMIT 6, weights 2, 1 and 1, eight workers a tenant, each holding for
/// 50 ms then queueing again as a worker pool does: the slots held split
/// 0.50 / 0.25 / 0.25 (sampled as they run, within 0.02).
#[test]
fn workers_that_queue_again_hold_the_slots_by_their_weights() {
    let server = Server::start();
    let con = &mut server.con();
    let stop = Arc::new(AtomicBool::new(false));
    let tenants = [("heavy", 2), ("light-1", 1), ("light-2", 1)];
    let mut workers = Vec::new();
    for (tenant, weight) in tenants {
        for w in 0..8 {
            let mut con = server.con();
            let stop = Arc::clone(&stop);
            workers.push(std::thread::spawn(move || {
                let mut n = 0;
                while !stop.load(Ordering::Relaxed) {
                    n += 1;
                    let jid = format!("{tenant}-{w}-{n}");
                    let reply = call!(
                        &mut con,
                        "UNIQUE.LOCK",
                        "pool",
                        &jid,
                        "LIMIT",
                        "6",
                        "GROUP",
                        tenant,
                        "WEIGHT",
                        weight,
                        "TTL",
                        "600000",
                        "WAIT",
                        "60000"
                    );
                    if !matches!(reply, Ok(Value::Int(_))) {
                        break;
                    }
                    std::thread::sleep(std::time::Duration::from_millis(50));
                    if call!(&mut con, "UNIQUE.UNLOCK", "pool", &jid).is_err() {
                        break;
                    }
                }
            }));
        }
    }
    wait_for("every worker to run or queue", || {
        groups(con, "pool")
            .iter()
            .map(|(_, w, h)| w + h)
            .sum::<i64>()
            == 24
    });
    let mut held = [0i64; 3];
    for _ in 0..200 {
        let rows = groups(con, "pool");
        for (i, (tenant, _)) in tenants.iter().enumerate() {
            held[i] += rows.iter().find(|r| r.0 == *tenant).map_or(0, |r| r.2);
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    stop.store(true, Ordering::Relaxed);
    let total: i64 = held.iter().sum();
    let shares: Vec<f64> = held.iter().map(|&h| h as f64 / total as f64).collect();
    println!("slots held split {shares:?} (weights 2, 1, 1)");
    for (share, fair) in shares.iter().zip([0.5, 0.25, 0.25]) {
        assert!((share - fair).abs() <= 0.02, "slots held split {shares:?}");
    }
    drop(server);
    for w in workers {
        let _ = w.join();
    }
}
