//! Redis Cluster: keyed commands route by their key (MOVED), a slot holding
//! locks moves to another node intact, and a replica promoted by CLUSTER
//! FAILOVER has the locks and keeps tokens increasing.

mod common;

use std::collections::HashMap;
use std::process::Command;
use std::time::{Duration, Instant};

use common::{Connection, Server, Value, text, token, wait_for};
use redis::cluster::ClusterClient;

fn cluster_ok(node: &Server) -> bool {
    text(&mut node.con(), &["CLUSTER", "INFO"]).contains("cluster_state:ok")
}

/// What LOCKEDBY WITHMETA shows of a key, but the ttl that moves with time.
fn holders_of(con: &mut Connection, key: &str) -> Vec<Value> {
    let Ok(Value::Array(list)) = call!(con, "UNIQUE.LOCKEDBY", key, "WITHMETA") else {
        panic!("LOCKEDBY {key}");
    };
    list.into_iter()
        .map(|h| match h {
            Value::Array(mut flat) => {
                flat.drain(8..10);
                Value::Array(flat)
            }
            other => other,
        })
        .collect()
}

#[test]
fn locks_in_a_three_primary_cluster() {
    let timeout = ["--cluster-node-timeout", "3000"];
    let nodes: Vec<Server> = (0..4)
        .map(|_| Server::start_cluster_node(&timeout))
        .collect();
    let addrs: Vec<String> = nodes[..3]
        .iter()
        .map(|n| format!("127.0.0.1:{}", n.port))
        .collect();
    let created = Command::new(common::cli_binary())
        .args(["--cluster", "create"])
        .args(&addrs)
        .args(["--cluster-yes"])
        .output()
        .expect("redis-cli --cluster create");
    assert!(
        created.status.success(),
        "{}",
        String::from_utf8_lossy(&created.stdout)
    );
    let ids: Vec<String> = nodes
        .iter()
        .map(|n| text(&mut n.con(), &["CLUSTER", "MYID"]))
        .collect();

    // The fourth node becomes a replica of the first.
    let replica = &nodes[3];
    call!(
        &mut replica.con(),
        "CLUSTER",
        "MEET",
        "127.0.0.1",
        nodes[0].port
    )
    .expect("MEET");
    wait_for("the replica to know the first primary", || {
        text(&mut replica.con(), &["CLUSTER", "NODES"]).contains(&ids[0])
    });
    call!(&mut replica.con(), "CLUSTER", "REPLICATE", &ids[0]).expect("REPLICATE");
    wait_for("the cluster", || {
        nodes.iter().all(cluster_ok)
            && text(&mut replica.con(), &["INFO", "replication"]).contains("master_link_status:up")
    });

    // Locks on keys across all slots, through a cluster-aware client.
    let urls: Vec<String> = addrs.iter().map(|a| format!("redis://{a}/")).collect();
    let client = ClusterClient::new(urls).expect("cluster client");
    let cc = &mut client.get_connection().expect("cluster connection");
    let mut tokens = HashMap::new();
    for i in 0..300 {
        let key = format!("job:{i}");
        let mut cmd = redis::cmd("UNIQUE.LOCK");
        cmd.arg(&key).arg("j").arg("TTL").arg(600_000);
        // Groups and modes travel with their holders through MIGRATE and a failover
        // (shared, so that the later LIMIT 0 grants on any of these keys still pass).
        match i % 3 {
            1 => cmd.arg("GROUP").arg(format!("tenant-{}", i % 5)),
            2 => cmd.arg("MODE").arg("shared"),
            _ => &mut cmd,
        };
        let t: i64 = cmd.query(cc).expect("LOCK through the cluster");
        tokens.insert(key, t);
    }
    let sizes: Vec<i64> = nodes[..3]
        .iter()
        .map(|n| redis::cmd("DBSIZE").query(&mut n.con()).expect("DBSIZE"))
        .collect();
    assert_eq!(sizes.iter().sum::<i64>(), 300);
    assert!(
        sizes.iter().all(|&n| n > 50),
        "every primary holds locks: {sizes:?}"
    );

    // Each keyed command routes by its key: the wrong node answers MOVED.
    let owner_of = |key: &str| {
        nodes[..3]
            .iter()
            .position(|n| call!(&mut n.con(), "UNIQUE.LOCKEDBY", key).is_ok())
            .expect("an owner")
    };
    let key = "job:0";
    let owner = owner_of(key);
    let other = (owner + 1) % 3;
    for cmd in ["UNIQUE.LOCKEDBY", "UNIQUE.UNLOCK", "UNIQUE.LOCK"] {
        let mut c = redis::cmd(cmd);
        c.arg(key);
        if cmd != "UNIQUE.LOCKEDBY" {
            c.arg("j");
        }
        let moved = common::run(&c, &mut nodes[other].con());
        assert!(
            matches!(&moved, Err(e) if e.starts_with("MOVED ")),
            "{cmd}: {moved:?}"
        );
    }

    // Move the slot of job:0 (with every lock in it) to another primary.
    let slot: i64 = redis::cmd("CLUSTER")
        .arg("KEYSLOT")
        .arg(key)
        .query(&mut nodes[owner].con())
        .expect("KEYSLOT");
    let keys: Vec<String> = redis::cmd("CLUSTER")
        .arg("GETKEYSINSLOT")
        .arg(slot)
        .arg(1000)
        .query(&mut nodes[owner].con())
        .expect("GETKEYSINSLOT");
    let before: Vec<(String, Vec<Value>, i64)> = keys
        .iter()
        .map(|k| {
            let con = &mut nodes[owner].con();
            let at: i64 = redis::cmd("PEXPIRETIME")
                .arg(k)
                .query(con)
                .expect("PEXPIRETIME");
            (k.clone(), holders_of(con, k), at)
        })
        .collect();
    call!(
        &mut nodes[other].con(),
        "CLUSTER",
        "SETSLOT",
        slot,
        "IMPORTING",
        &ids[owner]
    )
    .expect("IMPORTING");
    call!(
        &mut nodes[owner].con(),
        "CLUSTER",
        "SETSLOT",
        slot,
        "MIGRATING",
        &ids[other]
    )
    .expect("MIGRATING");
    let mut migrate = redis::cmd("MIGRATE");
    migrate
        .arg("127.0.0.1")
        .arg(nodes[other].port)
        .arg("")
        .arg(0)
        .arg(5000)
        .arg("KEYS")
        .arg(&keys);
    let started = Instant::now();
    common::run(&migrate, &mut nodes[owner].con()).expect("MIGRATE");
    let migrate_ms = i64::try_from(started.elapsed().as_millis()).expect("ms");
    for n in &nodes[..3] {
        call!(
            &mut n.con(),
            "CLUSTER",
            "SETSLOT",
            slot,
            "NODE",
            &ids[other]
        )
        .expect("SETSLOT NODE");
    }
    let mut drift = 0;
    for (k, holders, at) in &before {
        let con = &mut nodes[other].con();
        assert_eq!(
            &holders_of(con, k),
            holders,
            "{k}: same holders, tokens and leases"
        );
        // The holders' leases are absolute and arrive exactly (above). The
        // key's own expiry is Redis's: MIGRATE sends the time left, which the
        // target adds to its own clock, so the key may expire later by up to
        // the time the transfer took (ms rounding included), never earlier.
        let moved_at: i64 = redis::cmd("PEXPIRETIME")
            .arg(k)
            .query(con)
            .expect("PEXPIRETIME");
        assert!(
            (*at..=*at + migrate_ms + 1).contains(&moved_at),
            "{k}: key expiry {moved_at}, was {at}, MIGRATE took {migrate_ms} ms"
        );
        drift = drift.max(moved_at - at);
    }
    // The module's next change to a moved key sets its expiry back to its
    // latest lease exactly.
    let (k, _, at) = &before[0];
    let con = &mut nodes[other].con();
    token(call!(
        con,
        "UNIQUE.LOCK",
        k.as_str(),
        "after-move",
        "LIMIT",
        0,
        "PXAT",
        *at
    ));
    let at_now: i64 = redis::cmd("PEXPIRETIME")
        .arg(k)
        .query(con)
        .expect("PEXPIRETIME");
    assert_eq!(at_now, *at, "{k}: key expiry is the latest lease again");
    call!(con, "UNIQUE.UNLOCK", k.as_str(), "after-move").expect("UNLOCK");
    assert!(
        call!(&mut nodes[owner].con(), "UNIQUE.LOCKEDBY", key)
            .is_err_and(|e| e.starts_with("MOVED "))
    );

    // Promote the replica of the first primary: its locks are there, and new
    // tokens go above every token granted so far.
    let first_keys: Vec<String> = tokens
        .keys()
        .filter(|k| call!(&mut nodes[0].con(), "UNIQUE.LOCKEDBY", k.as_str()).is_ok())
        .cloned()
        .collect();
    assert!(!first_keys.is_empty());
    let on_primary: HashMap<&String, Vec<Value>> = first_keys
        .iter()
        .map(|k| (k, holders_of(&mut nodes[0].con(), k)))
        .collect();
    let _: i64 = redis::cmd("WAIT")
        .arg(1)
        .arg(5000)
        .query(&mut nodes[0].con())
        .expect("WAIT");
    // The primary only accepts a manual failover from a node it knows as its
    // replica, which gossip tells it a moment after the replica's own view.
    wait_for("the primary to list its replica", || {
        let replicas: Vec<String> = redis::cmd("CLUSTER")
            .arg("REPLICAS")
            .arg(&ids[0])
            .query(&mut nodes[0].con())
            .unwrap_or_default();
        replicas.iter().any(|r| r.starts_with(&ids[3]))
    });
    // A manual failover that times out (5 s) is asked for again.
    let promoted_in_time = (0..3000).any(|i| {
        if i % 600 == 0 {
            call!(&mut replica.con(), "CLUSTER", "FAILOVER").expect("CLUSTER FAILOVER");
        }
        let done = text(&mut replica.con(), &["INFO", "replication"]).contains("role:master")
            && nodes.iter().all(cluster_ok);
        if !done {
            std::thread::sleep(Duration::from_millis(10));
        }
        done
    });
    let tail: Vec<String> = replica
        .log()
        .lines()
        .rev()
        .take(30)
        .map(String::from)
        .collect();
    assert!(
        promoted_in_time,
        "no failover in 30 s; the replica's log, newest first:\n{}",
        tail.join("\n")
    );
    let promoted = &mut replica.con();
    for k in &first_keys {
        let holders = holders_of(promoted, k);
        let [Value::Array(h)] = holders.as_slice() else {
            panic!("{k} after failover: {holders:?}")
        };
        assert_eq!(h.get(3), Some(&Value::Int(tokens[k])), "{k}: same token");
        assert_eq!(
            holders, on_primary[k],
            "{k}: the same holder, group and mode"
        );
    }
    let max = tokens.values().copied().max().unwrap_or(0);
    let t = token(call!(
        promoted,
        "UNIQUE.LOCK",
        first_keys[0].as_str(),
        "after-failover",
        "LIMIT",
        0
    ));
    assert!(t > max, "{t} <= {max}");
    println!(
        "300 locks, slot {slot} moved with {} keys in {migrate_ms} ms (key expiry {drift} ms later), failover of {} keys",
        keys.len(),
        first_keys.len()
    );
}
