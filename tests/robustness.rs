//! Hunting for wrong grants, crashes and hangs: a concurrency invariant
//! checker and hostile input over the wire.

mod common;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{Connection, Rng, Server, Value};

/// The hot keys and the LIMIT every client uses on each.
const HOT: [(&str, usize); 5] = [
    ("hot:1", 1),
    ("hot:2", 2),
    ("hot:3", 3),
    ("hot:5", 5),
    (RATED, 3),
];

/// The hot key every client also gives a RATE: 4 per 200 ms and a burst of
/// 1, so never more than 5 grants in any 200 ms.
const RATED: &str = "hot:rated";
const RATE: [&str; 6] = ["RATE", "4", "PER", "200", "BURST", "1"];
const RATE_WINDOW_MS: i64 = 200;
const RATE_MOST: usize = 5;

/// (jid, token, ttl) of the live holders LOCKEDBY WITHMETA shows.
fn live(con: &mut Connection, key: &str) -> Vec<(Vec<u8>, i64, i64)> {
    let Ok(Value::Array(list)) = call!(con, "UNIQUE.LOCKEDBY", key, "WITHMETA") else {
        panic!("LOCKEDBY {key}");
    };
    list.into_iter()
        .map(|h| {
            match h
                .as_sequence()
                .map(|s| s.to_vec())
                .unwrap_or_default()
                .as_slice()
            {
                [
                    _,
                    Value::BulkString(jid),
                    _,
                    Value::Int(token),
                    _,
                    _,
                    _,
                    _,
                    _,
                    Value::Int(ttl),
                    ..,
                ] => (jid.clone(), *token, *ttl),
                other => panic!("holder: {other:?}"),
            }
        })
        .collect()
}

#[derive(Default)]
struct Findings {
    /// token -> (key, jid) of its grant
    grants: HashMap<i64, (String, Vec<u8>)>,
    violations: Vec<String>,
    ops: u64,
    samples: u64,
}

/// Clients hammer the hot keys for `duration` while an observer samples them.
fn hammer(
    server: &Server,
    duration: Duration,
    seed: u64,
    findings: &Arc<Mutex<Findings>>,
    during: impl FnOnce(),
) {
    let stop = Arc::new(AtomicBool::new(false));
    let ops = Arc::new(AtomicU64::new(0));
    let mut threads = Vec::new();
    for w in 0..6u64 {
        let (stop, ops, findings) = (stop.clone(), ops.clone(), findings.clone());
        let mut con = server.con();
        threads.push(std::thread::spawn(move || {
            let mut rng = Rng(seed ^ (w + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15));
            while !stop.load(Ordering::Relaxed) {
                let (key, limit) = HOT[rng.below(HOT.len() as u64) as usize];
                let jid = format!("w{w}-{}", rng.below(6));
                ops.fetch_add(1, Ordering::Relaxed);
                if rng.below(4) == 0 {
                    let _ = call!(&mut con, "UNIQUE.UNLOCK", key, &jid);
                    continue;
                }
                let ttl = 100 + rng.below(400);
                let asked = Instant::now();
                let rate: &[&str] = if key == RATED { &RATE } else { &[] };
                match call!(
                    &mut con,
                    "UNIQUE.LOCK",
                    key,
                    &jid,
                    "LIMIT",
                    limit,
                    "TTL",
                    ttl,
                    rate
                ) {
                    Ok(Value::Int(token)) => {
                        let mut f = findings.lock().expect("findings");
                        let grant = (key.to_string(), jid.as_bytes().to_vec());
                        if let Some(other) = f.grants.insert(token, grant.clone())
                            && other != grant
                        {
                            f.violations
                                .push(format!("token {token} granted to {other:?} and {grant:?}"));
                        }
                        drop(f);
                        // The grant is visible to the client that got it, while
                        // its lease runs: a client stalled past the lease (a
                        // loaded machine) proves nothing.
                        let seen = live(&mut con, key)
                            .iter()
                            .any(|(j, t, _)| *j == jid.as_bytes() && *t == token);
                        if !seen && asked.elapsed() < Duration::from_millis(ttl) {
                            let mut f = findings.lock().expect("findings");
                            f.violations
                                .push(format!("{key}: {jid}'s grant {token} is not visible to it"));
                        }
                    }
                    Ok(Value::Nil) => {}
                    Err(e) if e.starts_with("LOADING") => {} // during DEBUG RELOAD
                    other => panic!("LOCK: {other:?}"),
                }
            }
        }));
    }
    let observer = {
        let (stop, findings) = (stop.clone(), findings.clone());
        let mut con = server.con();
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                for (key, limit) in HOT {
                    let holders = live(&mut con, key);
                    let mut f = findings.lock().expect("findings");
                    f.samples += 1;
                    if holders.len() > limit {
                        f.violations.push(format!(
                            "{key} has {} live holders, LIMIT {limit}",
                            holders.len()
                        ));
                    }
                }
            }
        })
    };
    let start = Instant::now();
    during();
    std::thread::sleep(duration.saturating_sub(start.elapsed())); // a bounded run
    stop.store(true, Ordering::Relaxed);
    for t in threads {
        t.join().expect("client");
    }
    observer.join().expect("observer");
    findings.lock().expect("findings").ops += ops.load(Ordering::Relaxed);
}

#[test]
fn concurrent_clients_never_break_a_lock_s_rules() {
    let primary = Server::start_with(&["--unique.reap-interval", "10"]);
    let replica = primary.start_replica(&[]);
    let findings = Arc::new(Mutex::new(Findings::default()));
    let started = Instant::now();

    // Phase one on the primary, with a DEBUG RELOAD in the middle.
    hammer(&primary, Duration::from_millis(1500), 1, &findings, || {
        std::thread::sleep(Duration::from_millis(700));
        call!(&mut primary.con(), "DEBUG", "RELOAD").expect("DEBUG RELOAD");
    });
    let before = findings
        .lock()
        .expect("findings")
        .grants
        .keys()
        .copied()
        .max()
        .unwrap_or(0);

    // The replica takes over; phase two runs on it.
    let _: i64 = redis::cmd("WAIT")
        .arg(1)
        .arg(5000)
        .query(&mut primary.con())
        .expect("WAIT");
    call!(&mut replica.con(), "REPLICAOF", "NO", "ONE").expect("promote");
    let phase_two = Arc::new(Mutex::new(Findings::default()));
    hammer(&replica, Duration::from_millis(1500), 2, &phase_two, || {});

    let mut one = findings.lock().expect("findings");
    let two = phase_two.lock().expect("findings");
    // A holder from before renews with its old token; every new grant is above.
    let new_grants: Vec<i64> = two
        .grants
        .keys()
        .copied()
        .filter(|t| !one.grants.contains_key(t))
        .collect();
    assert!(!new_grants.is_empty());
    assert!(
        new_grants.iter().all(|&t| t > before),
        "a token granted after the promotion is not above {before}"
    );
    for (t, grant) in &two.grants {
        if let Some(other) = one.grants.insert(*t, grant.clone()) {
            assert_eq!(&other, grant, "token {t} granted twice");
        }
    }
    let violations: Vec<&String> = one.violations.iter().chain(&two.violations).collect();
    assert!(violations.is_empty(), "{violations:#?}");
    // The rated key's grants, by the server's clock in their tokens (unix
    // µs), through the DEBUG RELOAD: never more than the rate allows in any
    // window. (The promoted replica's tokens jump an hour ahead of its clock
    // and count up from there: they no longer tell the time of the grant.)
    let mut rated: Vec<i64> = one
        .grants
        .iter()
        .filter(|(t, (key, _))| key == RATED && **t <= before)
        .map(|(t, _)| t / 1000)
        .collect();
    rated.sort_unstable();
    assert!(
        rated.len() > 10,
        "the rated key was granted: {}",
        rated.len()
    );
    for (i, start) in rated.iter().enumerate() {
        let inside = rated[i..]
            .iter()
            .take_while(|&&ms| ms < start + RATE_WINDOW_MS)
            .count();
        assert!(
            inside <= RATE_MOST,
            "{inside} grants of {RATED} in the {RATE_WINDOW_MS} ms from {start}"
        );
    }
    let (ops, samples) = (one.ops + two.ops, one.samples + two.samples);
    assert!(
        ops > 1000 && samples > 100,
        "{ops} operations, {samples} samples"
    );
    println!(
        "{ops} operations, {} grants, {samples} observer samples in {:.1} s: no violation",
        one.grants.len(),
        started.elapsed().as_secs_f64()
    );
}

/// Random commands with hostile arguments: every one gets a reply or an error
/// with a code, and the server keeps serving.
#[test]
fn hostile_input_never_crashes_or_hangs_the_server() {
    let server = Server::start_with(&["--unique.max-meta-bytes", "1048576"]);
    let con = &mut server.con();
    con.set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    let big = vec![b'x'; 1 << 20];
    let nested = format!("{{\"a\":{}{}}}", "[".repeat(200_000), "]".repeat(200_000));
    let pool: Vec<Vec<u8>> = [
        "LIMIT",
        "TTL",
        "PXAT",
        "TYPE",
        "OWNER",
        "META",
        "WAIT",
        "COUNT",
        "MINUTES",
        "FORMAT",
        "WITHMETA",
        "RESET",
        "HOLD",
        "LEASE",
        "GRANT",
        "RELEASE",
        "PRUNE",
        "0",
        "1",
        "-1",
        "10",
        "2147483647",
        "2147483648",
        "9223372036854775807",
        "-9223372036854775808",
        "18446744073709551616",
        "1e3",
        "0x10",
        "{}",
        "{\"a\":[1,{}]}",
        "[1]",
        "null",
        "json",
        "prometheus",
        "resp",
        "until_executed",
        "k",
        "j",
    ]
    .iter()
    .map(|s| s.as_bytes().to_vec())
    .chain([
        big.clone(),
        nested.into_bytes(),
        vec![0, 255, 13, 10],
        Vec::new(),
    ])
    .collect();
    let commands = [
        "UNIQUE.LOCK",
        "UNIQUE.UNLOCK",
        "UNIQUE.LOCKEDBY",
        "UNIQUE.REAP",
        "UNIQUE.METRICS",
        "UNIQUE.APPLY",
    ];
    let mut rng = Rng(0xdead_beef_cafe_f00d);
    let (mut replies, mut errors) = (0, 0);
    let sent = 3000;
    for _ in 0..sent {
        let mut cmd = redis::cmd(commands[rng.below(commands.len() as u64) as usize]);
        for _ in 0..rng.below(9) {
            let arg = &pool[rng.below(pool.len() as u64) as usize];
            if arg.len() == big.len() && rng.below(20) != 0 {
                continue; // 1 MB strings, but not too many
            }
            cmd.arg(arg.as_slice());
        }
        match cmd.query::<Value>(con) {
            Ok(_) => replies += 1,
            Err(e) => {
                let code = e.code().unwrap_or_default();
                assert!(
                    !code.is_empty() && code.chars().all(|c| c.is_ascii_uppercase()),
                    "an error without a code: {e}"
                );
                errors += 1;
            }
        }
    }
    assert_eq!(replies + errors, sent);
    assert_eq!(call!(con, "PING"), Ok(Value::SimpleString("PONG".into())));
    println!("{sent} hostile commands: {replies} replies, {errors} errors with a code");
}

/// While the server pauses writes (CLIENT PAUSE WRITE here; a manual
/// failover and the end of a slot migration pause the same way) nothing may
/// be replicated: the server asserts on it and exits. A lease that ends then
/// must wait for the pause, for the reaper and for a waiter alike.
///
/// The leases must end inside the pause, so the pause is taken before they
/// end and lifted by CLIENT UNPAUSE once they have (its length guesses
/// nothing). Whether the waiter was queued and the pause taken in time is
/// checked on the server's clock; on a machine too slow for leases of 300 ms
/// the case is played again with longer ones.
#[test]
fn a_lease_ending_while_writes_are_paused_waits_for_the_pause() {
    // The AOF is on, so a change would be propagated.
    let server = Server::start_with(&["--appendonly", "yes"]);
    let con = &mut server.con();
    for lease in [300, 3_000, 30_000] {
        let (pair, single) = (format!("pair:{lease}"), format!("single:{lease}"));
        // The reaper's case: one holder's lease ends beside a holder that stays.
        common::token(call!(
            con,
            "UNIQUE.LOCK",
            &pair,
            "short",
            "LIMIT",
            2,
            "TTL",
            lease
        ));
        common::token(call!(
            con,
            "UNIQUE.LOCK",
            &pair,
            "long",
            "LIMIT",
            2,
            "TTL",
            600_000
        ));
        // The waiter's case: a client waits for a lock whose lease ends.
        common::token(call!(con, "UNIQUE.LOCK", &single, "first", "TTL", lease));
        let ends = common::int(call!(con, "PEXPIRETIME", &single).expect("PEXPIRETIME"));
        let mut waiter = server.con();
        let key = single.clone();
        let waiting = std::thread::spawn(move || {
            call!(&mut waiter, "UNIQUE.LOCK", &key, "second", "WAIT", 600_000)
        });
        common::wait_for("the waiter (or the lease's end)", || {
            common::info_field(&mut server.con(), "unique", "unique_waiting") == 1
                || common::holders(&mut server.con(), &single) != ["first"]
        });
        call!(con, "CLIENT", "PAUSE", 600_000, "WRITE").expect("CLIENT PAUSE");
        let queued = common::info_field(con, "unique", "unique_waiting") == 1;
        if !queued || common::server_time_ms(con) >= ends {
            call!(con, "CLIENT", "UNPAUSE").expect("CLIENT UNPAUSE");
            common::token(waiting.join().expect("the waiter"));
            eprintln!("leases of {lease} ms ended before the pause began: again, longer");
            continue;
        }
        // Both leases end, and the reaper (every 100 ms) and the waiter's
        // wake-up (every 20 ms while paused) have had their turns.
        common::wait_for("the leases to end, paused", || {
            common::server_time_ms(&mut server.con()) >= ends + 500
        });
        assert_eq!(
            call!(con, "PING"),
            Ok(Value::SimpleString("PONG".into())),
            "the server is up"
        );
        assert_eq!(
            common::info_field(con, "unique", "unique_waiting"),
            1,
            "no grant while paused"
        );
        call!(con, "CLIENT", "UNPAUSE").expect("CLIENT UNPAUSE");
        let granted = common::token(waiting.join().expect("the waiter"));
        assert!(granted > 0);
        common::wait_for("the reaper after the pause", || {
            common::holders(&mut server.con(), &pair) == ["long"]
        });
        assert_eq!(common::holders(con, &single), ["second"]);
        return;
    }
    panic!("the leases always ended before the pause began, even at 30 s");
}
