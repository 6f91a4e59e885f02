//! Replicas get the primary's effects, never its commands: they end with
//! identical data whatever their clock or configuration, never remove holders
//! on their own, and keep fencing tokens increasing when promoted.

mod common;

use common::{Connection, Rng, Server, Value, holders, token, wait_digests_equal, wait_for};

#[test]
fn a_replica_with_another_configuration_ends_with_identical_data() {
    let primary = Server::start();
    // A replica that would refuse every META if it re-ran the commands.
    let replica = primary.start_replica(&["--unique.max-meta-bytes", "0"]);
    let (p, r) = (&mut primary.con(), &mut replica.con());
    let mut rng = Rng(0x5eed_1234_abcd_0001);
    let (mut granted, mut denied, mut released, mut renewed) = (0, 0, 0, 0);
    let ops = 4_000;
    let mut reaped = 0;
    for _ in 0..ops {
        let key = format!("order:{}", rng.below(25));
        let jid = format!("job:{}", rng.below(12));
        if rng.below(100) == 0 {
            // A worker is declared dead: a full REAP OWNER iteration.
            let owner = format!("worker:{}", rng.below(4));
            let mut cursor = "0".to_string();
            loop {
                let Ok(Value::Array(reply)) =
                    call!(p, "UNIQUE.REAP", &cursor, "COUNT", 7, "OWNER", &owner)
                else {
                    panic!("REAP");
                };
                let [Value::BulkString(next), Value::Int(n)] = reply.as_slice() else {
                    panic!("REAP reply")
                };
                reaped += n;
                cursor = String::from_utf8_lossy(next).into_owned();
                if cursor == "0" {
                    break;
                }
            }
            continue;
        }
        let mut cmd = redis::cmd("UNIQUE.LOCK");
        match rng.below(10) {
            0..=2 => {
                match call!(p, "UNIQUE.UNLOCK", &key, &jid) {
                    Ok(Value::Int(1)) => released += 1,
                    Ok(Value::Int(0)) => {}
                    other => panic!("UNLOCK: {other:?}"),
                }
                continue;
            }
            _ => {
                cmd.arg(&key).arg(&jid).arg("LIMIT").arg(rng.below(4));
                match rng.below(4) {
                    0 => {}
                    1 | 2 => {
                        cmd.arg("TTL").arg(1 + rng.below(25)); // runs out during the run
                    }
                    _ => {
                        cmd.arg("TTL").arg(600_000 + rng.below(1000));
                    }
                }
                if rng.below(3) == 0 {
                    cmd.arg("TYPE")
                        .arg(["until_executed", "while_executing", "lock"][rng.below(3) as usize]);
                }
                if rng.below(3) == 0 {
                    cmd.arg("OWNER").arg(format!("worker:{}", rng.below(4)));
                }
                if rng.below(3) == 0 {
                    cmd.arg("META")
                        .arg(format!(r#"{{"queue":"q{}"}}"#, rng.below(5)));
                }
                // Groups (one per jid, so that a renewal names the same)
                // and modes, in the data replicated.
                if rng.below(3) == 0 {
                    cmd.arg("GROUP").arg(format!("tenant:{}", jid.len() % 3));
                    if rng.below(2) == 0 {
                        cmd.arg("GROUPLIMIT").arg(1 + rng.below(2));
                    }
                }
                if rng.below(4) == 0 {
                    cmd.arg("MODE")
                        .arg(["shared", "exclusive"][rng.below(2) as usize]);
                }
            }
        }
        let before: Vec<String> = holders(p, &key);
        match common::run(&cmd, p) {
            Ok(Value::Int(_)) if before.contains(&jid) => renewed += 1,
            Ok(Value::Int(_)) => granted += 1,
            Ok(Value::Nil) => denied += 1,
            // A renewal naming a GROUP its hold was not taken with.
            Err(e) if e.contains("another GROUP") => denied += 1,
            other => panic!("LOCK: {other:?}"),
        }
    }
    assert!(
        granted > 200 && denied > 200 && released > 100 && renewed > 100,
        "the workload exercised every path: {granted} granted, {denied} denied, {released} released, {renewed} renewed"
    );
    assert!(reaped > 0, "REAP OWNER removed holders during the run");
    wait_digests_equal(p, r);
    println!(
        "{ops} operations ({granted} granted, {denied} denied, {renewed} renewed, {released} released, {reaped} reaped)"
    );

    // Leases still running out after the workload keep both sides equal too:
    // the replica waits for the primary's deletions instead of expiring.
    wait_for("short leases to end", || {
        let keys: Vec<String> = redis::cmd("KEYS").arg("*").query(p).unwrap_or_default();
        keys.iter().all(|k| {
            !(0..100_000).contains(&redis::cmd("PTTL").arg(k).query::<i64>(p).unwrap_or(0))
        })
    });
    wait_digests_equal(p, r);
}

/// A holder's effect leaves out the trailing fields that have their default
/// (the default type, no owner, no META): each shape arrives whole, a default
/// between two given fields included.
#[test]
fn every_shape_of_a_holders_effect_arrives_whole() {
    let primary = Server::start();
    let replica = primary.start_replica(&[]);
    let (p, r) = (&mut primary.con(), &mut replica.con());
    let shapes: [&[&str]; 9] = [
        &[],
        &["TYPE", "until_executed"],
        &["OWNER", "w1"],
        &["META", r#"{"n":1}"#],
        &[
            "TYPE",
            "until_executed",
            "OWNER",
            "w1",
            "META",
            r#"{"n":1}"#,
        ],
        &["GROUP", "tenant-1"],
        &["MODE", "exclusive"],
        &["GROUP", "tenant-1", "MODE", "shared", "OWNER", "w1"],
        &[
            "TYPE",
            "until_executed",
            "OWNER",
            "w1",
            "META",
            r#"{"n":1}"#,
            "GROUP",
            "t",
            "MODE",
            "shared",
        ],
    ];
    for (i, options) in shapes.iter().enumerate() {
        let key = format!("shape:{i}");
        token(call!(p, "UNIQUE.LOCK", &key, "j", "TTL", 600_000, *options));
        // A renewal, whose acquired_at is no longer the effect's time.
        token(call!(p, "UNIQUE.LOCK", &key, "j", "TTL", 700_000, *options));
    }
    wait_digests_equal(p, r);
    for i in 0..shapes.len() {
        let key = format!("shape:{i}");
        let fields = |con: &mut Connection| -> Vec<Value> {
            let holders = common::with_meta(con, &key);
            let [holder] = holders.as_slice() else {
                panic!("{key}: {holders:?}");
            };
            [
                "jid",
                "token",
                "type",
                "owner",
                "meta",
                "acquired_at",
                "expires_at",
                "group",
                "mode",
            ]
            .map(|name| common::field(holder, name))
            .to_vec()
        };
        assert_eq!(fields(r), fields(p), "{key}");
    }
}

#[test]
fn a_replica_refuses_writes_and_shows_live_holders_without_removing_any() {
    // No background reaper on the primary: the expired holder must stay.
    let primary = Server::start_with(&["--unique.reap-interval", "0"]);
    let replica = primary.start_replica(&[]);
    let (p, r) = (&mut primary.con(), &mut replica.con());
    token(call!(p, "UNIQUE.LOCK", "k", "short", "LIMIT", 0, "TTL", 40));
    token(call!(p, "UNIQUE.LOCK", "k", "forever", "LIMIT", 0));
    let _: i64 = redis::cmd("WAIT").arg(1).arg(5_000).query(p).expect("WAIT");
    let readonly = call!(r, "UNIQUE.LOCK", "k", "x");
    assert!(
        matches!(&readonly, Err(e) if e.starts_with("READONLY")),
        "{readonly:?}"
    );
    assert!(
        matches!(call!(r, "UNIQUE.UNLOCK", "k", "forever"), Err(e) if e.starts_with("READONLY"))
    );

    wait_for("the lease to end on the replica", || {
        holders(r, "k") == ["forever"]
    });
    // Hidden, not removed: nobody touched the key on the primary, so both
    // still hold the expired holder in memory.
    assert_eq!(
        call!(r, "DEBUG", "DIGEST-VALUE", "k"),
        call!(p, "DEBUG", "DIGEST-VALUE", "k")
    );
    assert_eq!(holders(p, "k"), ["forever"]);

    // The primary's next write prunes; the replica follows.
    assert_eq!(call!(p, "UNIQUE.UNLOCK", "k", "forever"), Ok(Value::Int(1)));
    wait_digests_equal(p, r);
    assert_eq!(call!(r, "EXISTS", "k"), Ok(Value::Int(0)));
}

#[test]
fn a_promoted_replica_grants_tokens_above_every_replicated_one() {
    let primary = Server::start();
    let replica = primary.start_replica(&[]);
    let (p, r) = (&mut primary.con(), &mut replica.con());
    let mut max = 0;
    for i in 0..50 {
        max = max.max(token(call!(
            p,
            "UNIQUE.LOCK",
            format!("k{i}"),
            "j",
            "TTL",
            60_000
        )));
    }
    wait_digests_equal(p, r);
    call!(r, "REPLICAOF", "NO", "ONE").expect("promote");
    let t = token(call!(r, "UNIQUE.LOCK", "after-failover", "j"));
    assert!(t > max, "{t} <= {max}");
    assert_eq!(holders(r, "k7"), ["j"], "the locks survived the promotion");
}

#[test]
fn a_replica_writes_the_effects_to_its_own_aof() {
    let primary = Server::start();
    let replica = primary.start_replica(&["--appendonly", "yes"]);
    let p = &mut primary.con();
    token(call!(p, "UNIQUE.LOCK", "k", "j", "TTL", 60_000));
    let _: i64 = redis::cmd("WAIT").arg(1).arg(5_000).query(p).expect("WAIT");
    let aof_dir = replica.dir.join("appendonlydir");
    wait_for("the replica's AOF", || {
        std::fs::read_dir(&aof_dir)
            .into_iter()
            .flatten()
            .flatten()
            .any(|f| {
                f.file_name().to_string_lossy().ends_with(".incr.aof")
                    && std::fs::read_to_string(f.path())
                        .is_ok_and(|s| s.to_ascii_uppercase().contains("UNIQUE.APPLY"))
            })
    });
}

/// A new grant's effect is `UNIQUE.APPLY key GRANT jid lease`: its `now` is
/// its acquired_at, in the lease already. A renewal's is `UNIQUE.APPLY key
/// now LEASE jid lease`, with the renewal's own `now` (what a replica prunes
/// at). Both leave the replica with the primary's data.
#[test]
fn a_grant_goes_without_its_time_and_a_renewal_with_it() {
    let primary = Server::start_with(&["--appendonly", "yes", "--appendfsync", "always"]);
    let replica = primary.start_replica(&[]);
    let (p, r) = (&mut primary.con(), &mut replica.con());
    token(call!(p, "UNIQUE.LOCK", "k", "j", "TTL", 600_000));
    let holder = common::with_meta(p, "k");
    let acquired_at = common::int(common::field(&holder[0], "acquired_at"));
    // The renewal in a later millisecond than the grant, so that its time
    // differs from the holder's acquired_at.
    wait_for("a later millisecond", || {
        let (s, us): (i64, i64) = redis::cmd("TIME").query(p).expect("TIME");
        s * 1000 + us / 1000 > acquired_at
    });
    token(call!(p, "UNIQUE.LOCK", "k", "j", "TTL", 700_000));
    let effects: Vec<Vec<String>> = common::aof_effects(&primary.dir)
        .into_iter()
        .map(|c| {
            c.iter()
                .skip(1)
                .map(|a| String::from_utf8_lossy(a).into_owned())
                .collect()
        })
        .collect();
    let [grant, renewal] = effects.as_slice() else {
        panic!("a grant and a renewal: {effects:?}");
    };
    let [key, op, jid, lease] = grant.as_slice() else {
        panic!("GRANT: {grant:?}");
    };
    assert_eq!(
        (key.as_str(), op.as_str(), jid.as_str()),
        ("k", "GRANT", "j")
    );
    assert_eq!(
        lease.split(' ').nth(1),
        Some(acquired_at.to_string().as_str())
    );
    let [key, now, op, jid, lease] = renewal.as_slice() else {
        panic!("LEASE: {renewal:?}");
    };
    assert_eq!(
        (key.as_str(), op.as_str(), jid.as_str()),
        ("k", "LEASE", "j")
    );
    assert!(
        now.parse::<i64>().expect("now") > acquired_at,
        "{renewal:?}"
    );
    assert_eq!(
        lease.split(' ').nth(1),
        Some(acquired_at.to_string().as_str())
    );
    wait_digests_equal(p, r);
    // Every field but `ttl`, which is read at the moment of the call.
    let stored = |con: &mut Connection| -> Vec<Vec<(String, Value)>> {
        common::with_meta(con, "k")
            .into_iter()
            .map(|h| h.into_iter().filter(|(name, _)| name != "ttl").collect())
            .collect()
    };
    assert_eq!(stored(r), stored(p), "the same holder");
}
