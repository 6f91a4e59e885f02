//! Valkey 9's atomic slot migration (`CLUSTER MIGRATESLOTS`) of slots that
//! hold locks, leases and waiters, on a two-primary cluster: every holder
//! arrives exactly, grants made while the slots move arrive through the
//! stream, the target leaves importing keys alone, a cancelled migration
//! drops what it imported, waiters on the source are redirected, and a load
//! of LOCK/renew/UNLOCK/WAIT traffic sees no violation while slots move back
//! and forth.
//!
//! On a server without atomic slot migration (Redis, Valkey 8) each test
//! says so and passes: `make test-compat` runs them on Valkey 9.1.2.

mod common;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{Connection, Server, Value, info_field, text, token, wait_for};
use redis::cluster::ClusterClient;

/// The hash slot of a key (CRC16/XMODEM of its hash tag or whole name).
fn key_slot(key: &str) -> u16 {
    let bytes = key.as_bytes();
    let tagged = bytes
        .iter()
        .position(|&b| b == b'{')
        .and_then(|open| {
            let close = bytes[open + 1..].iter().position(|&b| b == b'}')?;
            (close > 0).then(|| &bytes[open + 1..open + 1 + close])
        })
        .unwrap_or(bytes);
    let mut crc: u16 = 0;
    for &b in tagged {
        crc ^= u16::from(b) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    crc % 16384
}

/// `n` key names whose slots are in `start..=end`.
fn keys_in(start: u16, end: u16, n: usize, prefix: &str) -> Vec<String> {
    (0..)
        .map(|i| format!("{prefix}:{i}"))
        .filter(|k| (start..=end).contains(&key_slot(k)))
        .take(n)
        .collect()
}

/// Two primaries: `a` serves slots 0-8191, `b` 8192-16383. `None` when the
/// server has no atomic slot migration.
struct Cluster {
    a: Server,
    b: Server,
    a_id: String,
    b_id: String,
}

impl Cluster {
    fn start() -> Option<Self> {
        let args = ["--cluster-node-timeout", "3000"];
        let a = Server::start_cluster_node(&args);
        let help = format!("{:?}", call!(&mut a.con(), "CLUSTER", "HELP"));
        let b = Server::start_cluster_node(&args);
        if !help.contains("MIGRATESLOTS") {
            // Only a server that cannot have it passes without running: a Valkey 9 or
            // later without it would otherwise report ok for tests that never ran.
            let info = text(&mut a.con(), &["INFO", "server"]);
            let valkey_major = info
                .lines()
                .find_map(|l| l.trim().strip_prefix("valkey_version:"))
                .and_then(|v| v.split('.').next()?.parse::<u32>().ok());
            assert!(
                valkey_major.is_none_or(|major| major < 9),
                "Valkey {valkey_major:?} has no CLUSTER MIGRATESLOTS in its CLUSTER HELP"
            );
            eprintln!("this server has no CLUSTER MIGRATESLOTS: nothing to test here");
            return None;
        }
        call!(&mut a.con(), "CLUSTER", "ADDSLOTSRANGE", 0, 8191).expect("ADDSLOTSRANGE");
        call!(&mut b.con(), "CLUSTER", "ADDSLOTSRANGE", 8192, 16383).expect("ADDSLOTSRANGE");
        call!(&mut a.con(), "CLUSTER", "MEET", "127.0.0.1", b.port).expect("MEET");
        let a_id = text(&mut a.con(), &["CLUSTER", "MYID"]);
        let b_id = text(&mut b.con(), &["CLUSTER", "MYID"]);
        wait_for("the cluster", || {
            [&a, &b]
                .iter()
                .all(|n| text(&mut n.con(), &["CLUSTER", "INFO"]).contains("cluster_state:ok"))
        });
        Some(Self { a, b, a_id, b_id })
    }

    fn client(&self) -> ClusterClient {
        ClusterClient::new(vec![self.a.url(), self.b.url()]).expect("cluster client")
    }

    /// `a` starts moving slots `start..=end` to `b` and the migration is held
    /// before its final pause (streaming), until `prevent_pause(false)`.
    fn migrate_and_hold(&self, start: u16, end: u16) -> String {
        prevent_pause(self, true);
        let job = start_migration(&self.a, start, end, &self.b_id);
        wait_for_state(&self.a, &job, "waiting-to-pause");
        job
    }

    /// `from` moves slots `start..=end` to the node `to_id`; returns once
    /// the source reports the job done.
    fn migrate(&self, from: &Server, start: u16, end: u16, to_id: &str) {
        let job = start_migration(from, start, end, to_id);
        wait_for_state(from, &job, "success");
    }
}

/// Every migration job `node` knows of, newest or not, as its fields.
fn jobs(node: &Server) -> Vec<HashMap<String, String>> {
    let Ok(Value::Array(jobs)) = call!(&mut node.con(), "CLUSTER", "GETSLOTMIGRATIONS") else {
        return Vec::new();
    };
    jobs.iter()
        .filter_map(|job| {
            let Value::Array(flat) = job else { return None };
            Some(
                flat.chunks(2)
                    .filter_map(|kv| match kv {
                        [Value::BulkString(k), Value::BulkString(v)] => Some((
                            String::from_utf8_lossy(k).into_owned(),
                            String::from_utf8_lossy(v).into_owned(),
                        )),
                        [Value::BulkString(k), Value::Int(v)] => {
                            Some((String::from_utf8_lossy(k).into_owned(), v.to_string()))
                        }
                        _ => None,
                    })
                    .collect(),
            )
        })
        .collect()
}

/// Starts moving slots `start..=end` of `from` to `to_id`: the job's name.
fn start_migration(from: &Server, start: u16, end: u16, to_id: &str) -> String {
    let known: Vec<String> = jobs(from)
        .into_iter()
        .filter_map(|j| j.get("name").cloned())
        .collect();
    call!(
        &mut from.con(),
        "CLUSTER",
        "MIGRATESLOTS",
        "SLOTSRANGE",
        start,
        end,
        "NODE",
        to_id
    )
    .expect("MIGRATESLOTS");
    jobs(from)
        .into_iter()
        .filter_map(|j| j.get("name").cloned())
        .find(|name| !known.contains(name))
        .expect("the new job")
}

fn job_state(node: &Server, job: &str) -> Option<String> {
    jobs(node)
        .into_iter()
        .find(|j| j.get("name").map(String::as_str) == Some(job))
        .and_then(|j| j.get("state").cloned())
}

fn wait_for_state(node: &Server, job: &str, state: &str) {
    let mut last = None;
    let limit = Duration::from_secs(30);
    let started = Instant::now();
    while last.as_deref() != Some(state) {
        assert!(
            started.elapsed() < limit,
            "migration {job}: still {last:?} after {limit:?}, waiting for {state}"
        );
        std::thread::sleep(Duration::from_millis(5));
        last = job_state(node, job);
    }
}

/// Holds the migration before its final pause, so that it stays streaming.
fn prevent_pause(cluster: &Cluster, on: bool) {
    for n in [&cluster.a, &cluster.b] {
        call!(
            &mut n.con(),
            "DEBUG",
            "SLOTMIGRATION",
            "PREVENT-PAUSE",
            i32::from(on)
        )
        .expect("DEBUG SLOTMIGRATION");
    }
}

/// LOCKEDBY WITHMETA of a key without the ttl, which moves with time.
fn holders_of(con: &mut Connection, key: &str) -> Vec<Vec<(String, Value)>> {
    common::with_meta(con, key)
        .into_iter()
        .map(|h| h.into_iter().filter(|(k, _)| k != "ttl").collect())
        .collect()
}

fn gauges(node: &Server) -> (i64, i64) {
    let con = &mut node.con();
    (
        info_field(con, "unique", "unique_locks"),
        info_field(con, "unique", "unique_holders"),
    )
}

fn max_token(con: &mut Connection, keys: &[String]) -> i64 {
    keys.iter()
        .flat_map(|k| common::with_meta(con, k))
        .map(|h| common::int(common::field(&h, "token")))
        .max()
        .unwrap_or(0)
}

/// Locks of every shape on `keys`: two holders under LIMIT 3 with leases,
/// owners and META, a group and a mode, one with no lease.
fn lock_every_shape(con: &mut Connection, keys: &[String]) {
    for (i, key) in keys.iter().enumerate() {
        let meta = format!(r#"{{"worker":"SyncJob","args":[{i}]}}"#);
        token(call!(
            con,
            "UNIQUE.LOCK",
            key,
            format!("j{i}"),
            "LIMIT",
            3,
            "TTL",
            600_000,
            "OWNER",
            "w1",
            "META",
            &meta,
            "TYPE",
            "until_executed",
            "GROUP",
            format!("tenant-{}", i % 2),
            "MODE",
            "shared"
        ));
        if i % 3 == 0 {
            token(call!(con, "UNIQUE.LOCK", key, "forever", "LIMIT", 3));
        } else {
            token(call!(
                con,
                "UNIQUE.LOCK",
                key,
                format!("k{i}"),
                "LIMIT",
                3,
                "PXAT",
                4_102_444_800_000i64,
                "OWNER",
                "w2"
            ));
        }
    }
}

#[test]
fn migrateslots_moves_every_holder_exactly_and_redirects_waiters() {
    let Some(cluster) = Cluster::start() else {
        return;
    };
    let (a, b) = (&cluster.a, &cluster.b);
    let keys = keys_in(0, 100, 40, "job");
    lock_every_shape(&mut a.con(), &keys);
    let before: Vec<_> = keys.iter().map(|k| holders_of(&mut a.con(), k)).collect();
    let expiry: Vec<i64> = keys
        .iter()
        .map(|k| common::int(call!(&mut a.con(), "PEXPIRETIME", k).expect("PEXPIRETIME")))
        .collect();
    let highest = max_token(&mut a.con(), &keys);
    let (a_locks, a_holders) = gauges(a);
    let a_expired = info_field(&mut a.con(), "unique", "unique_expired");
    assert_eq!((a_locks, a_holders), (40, 80));

    // A client waits on the source for a full lock of a moving slot.
    let waited = keys_in(0, 100, 41, "job").pop().expect("a key");
    token(call!(&mut a.con(), "UNIQUE.LOCK", &waited, "x"));
    let mut waiter = a.con();
    let waiter_thread =
        std::thread::spawn(move || call!(&mut waiter, "UNIQUE.LOCK", &waited, "y", "WAIT", 60_000));
    wait_for("the waiter", || {
        info_field(&mut a.con(), "unique", "unique_waiting") == 1
    });

    cluster.migrate(a, 0, 100, &cluster.b_id);

    // Every holder, exactly, on the new owner; nothing left on the old one.
    for (i, key) in keys.iter().enumerate() {
        assert_eq!(holders_of(&mut b.con(), key), before[i], "{key}");
        let at = common::int(call!(&mut b.con(), "PEXPIRETIME", key).expect("PEXPIRETIME"));
        assert_eq!(at, expiry[i], "{key}: the key's expiry");
    }
    let moved = waiter_thread.join().expect("the waiter");
    let slot = key_slot(&keys_in(0, 100, 41, "job")[40]);
    assert_eq!(
        moved,
        Err(format!("MOVED {slot} 127.0.0.1:{}", b.port)),
        "the waiter is redirected to the new owner"
    );
    assert_eq!(info_field(&mut a.con(), "unique", "unique_waiting"), 0);
    wait_for("the source to drop the moved keys", || gauges(a) == (0, 0));
    assert_eq!(gauges(b), (41, 81), "the new owner counts what it holds");
    assert_eq!(
        info_field(&mut a.con(), "unique", "unique_expired"),
        a_expired,
        "keys that moved away did not expire"
    );

    // Tokens keep rising on the new owner.
    let next = token(call!(
        &mut b.con(),
        "UNIQUE.LOCK",
        &keys[1],
        "new",
        "LIMIT",
        3
    ));
    assert!(next > highest, "{next} > {highest}");

    // And back again: the same holders.
    cluster.migrate(b, 0, 100, &cluster.a_id);
    for (i, key) in keys.iter().enumerate().skip(2) {
        assert_eq!(holders_of(&mut a.con(), key), before[i], "{key} came back");
    }
    assert_eq!(holders_of(&mut a.con(), &keys[1]).len(), 3);
}

#[test]
fn grants_made_while_slots_move_arrive_and_the_target_leaves_importing_keys_alone() {
    let Some(cluster) = Cluster::start() else {
        return;
    };
    let (a, b) = (&cluster.a, &cluster.b);
    let keys = keys_in(0, 100, 20, "lease");
    // Each key: a holder whose lease ends soon, beside one that stays.
    for key in &keys {
        token(call!(
            &mut a.con(),
            "UNIQUE.LOCK",
            key,
            "short",
            "LIMIT",
            2,
            "TTL",
            400
        ));
        token(call!(
            &mut a.con(),
            "UNIQUE.LOCK",
            key,
            "long",
            "LIMIT",
            2,
            "TTL",
            600_000
        ));
    }
    // A waiter on the source, to be served while the slots move.
    let served_key = keys_in(0, 100, 21, "lease").pop().expect("a key");
    token(call!(&mut a.con(), "UNIQUE.LOCK", &served_key, "first"));
    let mut waiter = a.con();
    let key = served_key.clone();
    let waiter_thread = std::thread::spawn(move || {
        call!(&mut waiter, "UNIQUE.LOCK", &key, "second", "WAIT", 60_000)
    });
    wait_for("the waiter", || {
        info_field(&mut a.con(), "unique", "unique_waiting") == 1
    });

    let job = cluster.migrate_and_hold(0, 100);

    // The target holds the keys but does not own them: clients go to the
    // source, and its reaper and REAP leave them alone while the leases end
    // (the source prunes them and streams that).
    wait_for("the snapshot on the target", || gauges(b).0 == 21);
    let moved = call!(&mut b.con(), "UNIQUE.LOCKEDBY", &keys[0]);
    assert!(
        matches!(&moved, Err(e) if e.starts_with("MOVED ")),
        "{moved:?}"
    );
    std::thread::sleep(Duration::from_millis(600)); // past every short lease
    let reaped = call!(&mut b.con(), "UNIQUE.REAP", 0, "COUNT", 1000).expect("REAP");
    let Value::Array(reply) = reaped else {
        panic!("{reaped:?}")
    };
    assert_eq!(
        reply.get(1),
        Some(&Value::Int(0)),
        "REAP on the target removed nothing"
    );
    wait_for("the source's reaper", || gauges(a).1 == 21);
    wait_for("the prune to reach the target", || gauges(b).1 == 21);
    assert_eq!(info_field(&mut b.con(), "unique", "unique_expired"), 0);
    assert_eq!(info_field(&mut b.con(), "unique", "unique_reaped"), 0);

    // Grants on the source while the slots move: acknowledged, so present
    // on the target after the flip, with their tokens.
    let mut acknowledged = Vec::new();
    for key in &keys {
        let t = token(call!(
            &mut a.con(),
            "UNIQUE.LOCK",
            key,
            "during",
            "LIMIT",
            2,
            "TTL",
            600_000
        ));
        acknowledged.push((key.clone(), t));
    }
    call!(&mut a.con(), "UNIQUE.UNLOCK", &served_key, "first").expect("UNLOCK");
    let served = token(waiter_thread.join().expect("the waiter"));

    prevent_pause(&cluster, false);
    wait_for_state(a, &job, "success");
    for (key, t) in &acknowledged {
        let on_b = common::with_meta(&mut b.con(), key);
        let during = on_b
            .iter()
            .find(|h| common::field(h, "jid") == Value::BulkString(b"during".to_vec()))
            .unwrap_or_else(|| panic!("{key}: the grant made while moving is lost"));
        assert_eq!(common::int(common::field(during, "token")), *t);
        assert_eq!(on_b.len(), 2, "{key}: long and during (short ended)");
    }
    let on_b = common::with_meta(&mut b.con(), &served_key);
    assert_eq!(on_b.len(), 1);
    assert_eq!(common::int(common::field(&on_b[0], "token")), served);
    assert_eq!(gauges(b), (21, 41));
    wait_for("the source to drop the moved keys", || gauges(a) == (0, 0));
}

/// The tokens of a granted LOCKALL, or a panic with what came back.
fn tokens_of(reply: Result<Value, String>) -> Vec<i64> {
    match reply {
        Ok(Value::Array(list)) => list.into_iter().map(common::int).collect(),
        other => panic!("expected tokens, got {other:?}"),
    }
}

/// Multi-key holds (UNIQUE.LOCKALL, keys of one hash tag) move with their
/// slot: those taken before, those taken while the slot streams (one
/// HOLDALL effect each), and a multi-key waiter on the source is redirected.
#[test]
fn multi_key_holds_move_with_their_slot_and_their_waiter_is_redirected() {
    let Some(cluster) = Cluster::start() else {
        return;
    };
    let (a, b) = (&cluster.a, &cluster.b);
    let tags = keys_in(0, 100, 6, "tenant");
    let pair = |tag: &str| (format!("{{{tag}}}:tenant"), format!("{{{tag}}}:global"));
    let mut before = Vec::new();
    for (i, tag) in tags.iter().take(5).enumerate() {
        let (t, g) = pair(tag);
        let granted = tokens_of(call!(
            &mut a.con(),
            "UNIQUE.LOCKALL",
            2,
            &t,
            &g,
            format!("job-{i}"),
            "LIMIT",
            1,
            0,
            "TTL",
            600_000,
            "OWNER",
            "w1"
        ));
        before.push((t, g, granted));
    }
    // A multi-key waiter on the source: the tenant key of the last tag is held.
    let (wt, wg) = pair(&tags[5]);
    token(call!(&mut a.con(), "UNIQUE.LOCK", &wt, "holder"));
    let mut waiter = a.con();
    let (t2, g2) = (wt.clone(), wg.clone());
    let waiter_thread = std::thread::spawn(move || {
        call!(
            &mut waiter,
            "UNIQUE.LOCKALL",
            2,
            &t2,
            &g2,
            "w",
            "WAIT",
            60_000
        )
    });
    wait_for("the waiter", || {
        info_field(&mut a.con(), "unique", "unique_waiting") == 1
    });

    let job = cluster.migrate_and_hold(0, 100);
    // While the slots stream: more multi-key grants, one effect each.
    let mut during = Vec::new();
    for (t, g, _) in &before {
        let got = tokens_of(call!(
            &mut a.con(),
            "UNIQUE.LOCKALL",
            2,
            t,
            g,
            "during",
            "LIMIT",
            2,
            0,
            "TTL",
            600_000
        ));
        during.push(got);
    }
    prevent_pause(&cluster, false);
    wait_for_state(a, &job, "success");

    let moved = waiter_thread.join().expect("the waiter");
    assert!(
        matches!(&moved, Err(e) if e.starts_with("MOVED ")),
        "the multi-key waiter is redirected: {moved:?}"
    );
    for ((t, g, granted), during) in before.iter().zip(&during) {
        for (key, i) in [(t, 0), (g, 1)] {
            let on_b = common::with_meta(&mut b.con(), key);
            let tokens: Vec<i64> = on_b
                .iter()
                .map(|h| common::int(common::field(h, "token")))
                .collect();
            assert_eq!(tokens, vec![granted[i], during[i]], "{key}");
        }
    }
    assert_eq!(
        info_field(&mut a.con(), "unique", "unique_waiting"),
        0,
        "no waiter left on the source"
    );
}

#[test]
fn a_cancelled_migration_drops_the_imported_keys_and_their_counts() {
    let Some(cluster) = Cluster::start() else {
        return;
    };
    let (a, b) = (&cluster.a, &cluster.b);
    let keys = keys_in(0, 100, 30, "cancel");
    lock_every_shape(&mut a.con(), &keys);
    let before: Vec<_> = keys.iter().map(|k| holders_of(&mut a.con(), k)).collect();
    let a_info = text(&mut a.con(), &["INFO", "unique"]);

    let job = cluster.migrate_and_hold(0, 100);
    wait_for("the snapshot on the target", || gauges(b) == (30, 60));
    // (9.1.2's CLUSTER HELP shows `CANCELSLOTMIGRATIONS ALL`; the command
    // takes no argument.)
    call!(&mut a.con(), "CLUSTER", "CANCELSLOTMIGRATIONS").expect("CANCEL");
    wait_for_state(a, &job, "cancelled");
    prevent_pause(&cluster, false);

    wait_for("the target to drop the keys", || gauges(b) == (0, 0));
    assert_eq!(
        common::int(call!(&mut b.con(), "DBSIZE").expect("DBSIZE")),
        0
    );
    assert_eq!(info_field(&mut b.con(), "unique", "unique_expired"), 0);
    // The source is as it was, holders and counters alike.
    for (i, key) in keys.iter().enumerate() {
        assert_eq!(holders_of(&mut a.con(), key), before[i], "{key}");
    }
    let counters = |info: &str| -> Vec<String> {
        info.lines()
            .filter(|l| !l.starts_with("unique_reaper") && !l.starts_with("unique_timers"))
            .map(str::to_owned)
            .collect()
    };
    assert_eq!(
        counters(&text(&mut a.con(), &["INFO", "unique"])),
        counters(&a_info)
    );

    // The slots can still move afterwards.
    cluster.migrate(a, 0, 100, &cluster.b_id);
    for (i, key) in keys.iter().enumerate() {
        assert_eq!(holders_of(&mut b.con(), key), before[i], "{key}");
    }
}

/// A grant as a client saw it: when it asked, when it was answered, the token.
struct Grant {
    key: usize,
    sent: Instant,
    acked: Instant,
    token: i64,
}

#[test]
fn lock_traffic_sees_no_violation_while_slots_move_back_and_forth() {
    let Some(cluster) = Cluster::start() else {
        return;
    };
    const LIMIT: usize = 2;
    const WORKERS: usize = 6;
    const MIGRATIONS: usize = 8;
    let keys = Arc::new(keys_in(0, 1000, 24, "load"));
    let client = cluster.client();
    let stop = Arc::new(AtomicBool::new(false));
    let operations = Arc::new(AtomicUsize::new(0));
    let violations = Arc::new(Mutex::new(Vec::<String>::new()));
    // Who is inside each key's critical section, as the workers see it: a
    // worker enters after its grant and leaves before its UNLOCK, so this
    // never exceeds what the server holds.
    let inside: Arc<Vec<AtomicUsize>> =
        Arc::new((0..keys.len()).map(|_| AtomicUsize::new(0)).collect());
    let grants = Arc::new(Mutex::new(Vec::<Grant>::new()));

    let workers: Vec<_> = (0..WORKERS)
        .map(|w| {
            let (keys, stop, operations, violations, inside, grants) = (
                keys.clone(),
                stop.clone(),
                operations.clone(),
                violations.clone(),
                inside.clone(),
                grants.clone(),
            );
            let mut con = client.get_connection().expect("cluster connection");
            std::thread::spawn(move || {
                let mut rng = common::Rng(0x9E37_79B9 + w as u64);
                let mut n = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    let k = rng.below(keys.len() as u64) as usize;
                    let key = &keys[k];
                    let jid = format!("w{w}-{n}");
                    n += 1;
                    let mut lock = redis::cmd("UNIQUE.LOCK");
                    lock.arg(key)
                        .arg(&jid)
                        .arg("LIMIT")
                        .arg(LIMIT)
                        .arg("TTL")
                        .arg(30_000);
                    if rng.below(2) == 0 {
                        lock.arg("WAIT").arg(300);
                    }
                    let sent = Instant::now();
                    let reply: redis::RedisResult<Option<i64>> = lock.query(&mut con);
                    operations.fetch_add(1, Ordering::Relaxed);
                    let token = match reply {
                        Ok(Some(t)) => t,
                        Ok(None) => continue,
                        Err(e) => {
                            violations.lock().unwrap().push(format!("LOCK {key}: {e}"));
                            continue;
                        }
                    };
                    grants.lock().unwrap().push(Grant {
                        key: k,
                        sent,
                        acked: Instant::now(),
                        token,
                    });
                    let now_inside = inside[k].fetch_add(1, Ordering::SeqCst) + 1;
                    if now_inside > LIMIT {
                        violations
                            .lock()
                            .unwrap()
                            .push(format!("{key}: {now_inside} inside, LIMIT {LIMIT}"));
                    }
                    // A renewal keeps the holder's token: a holder lost in a
                    // move would come back as a new grant with a new token.
                    for _ in 0..rng.below(3) {
                        let mut renew = redis::cmd("UNIQUE.LOCK");
                        renew
                            .arg(key)
                            .arg(&jid)
                            .arg("LIMIT")
                            .arg(LIMIT)
                            .arg("TTL")
                            .arg(30_000);
                        let again: redis::RedisResult<Option<i64>> = renew.query(&mut con);
                        operations.fetch_add(1, Ordering::Relaxed);
                        if again.as_ref().ok() != Some(&Some(token)) {
                            violations
                                .lock()
                                .unwrap()
                                .push(format!("renew {key} {jid}: {again:?}, held {token}"));
                        }
                    }
                    inside[k].fetch_sub(1, Ordering::SeqCst);
                    let released: redis::RedisResult<i64> = redis::cmd("UNIQUE.UNLOCK")
                        .arg(key)
                        .arg(&jid)
                        .query(&mut con);
                    operations.fetch_add(1, Ordering::Relaxed);
                    if released.as_ref().ok() != Some(&1) {
                        violations
                            .lock()
                            .unwrap()
                            .push(format!("UNLOCK {key} {jid}: {released:?}"));
                    }
                }
            })
        })
        .collect();

    let (a, b) = (&cluster.a, &cluster.b);
    let started = Instant::now();
    for i in 0..MIGRATIONS {
        std::thread::sleep(Duration::from_millis(150));
        let (from, to) = if i % 2 == 0 {
            (a, &cluster.b_id)
        } else {
            (b, &cluster.a_id)
        };
        cluster.migrate(from, 0, 1000, to);
    }
    std::thread::sleep(Duration::from_millis(150));
    stop.store(true, Ordering::Relaxed);
    for w in workers {
        w.join().expect("a worker");
    }
    let elapsed = started.elapsed();

    // Tokens rise per key: a grant asked for after another was answered
    // has a larger token.
    let grants = grants.lock().unwrap();
    let mut by_key: HashMap<usize, Vec<&Grant>> = HashMap::new();
    for g in grants.iter() {
        by_key.entry(g.key).or_default().push(g);
    }
    let mut violations = violations.lock().unwrap().clone();
    for list in by_key.values() {
        for earlier in list {
            for later in list {
                if earlier.acked < later.sent && later.token <= earlier.token {
                    violations.push(format!(
                        "{}: token {} after {}",
                        keys[later.key], later.token, earlier.token
                    ));
                }
            }
        }
    }
    // Nothing is left held, on either node.
    let (locks_a, locks_b) = (gauges(a).0, gauges(b).0);
    eprintln!(
        "slot migration load: {} operations, {} grants by {WORKERS} clients on {} keys, \
         {MIGRATIONS} migrations of slots 0-1000 in {:.1} s, violations: {}",
        operations.load(Ordering::Relaxed),
        grants.len(),
        keys.len(),
        elapsed.as_secs_f64(),
        violations.len()
    );
    assert!(violations.is_empty(), "{violations:#?}");
    assert!(
        grants.len() > 100,
        "traffic flowed: {} grants",
        grants.len()
    );
    assert_eq!((locks_a, locks_b), (0, 0), "every lock was released");
}

/// A lock of thousands of holders (the indexed layout, with holes from
/// releases) moves whole: every holder exactly, the key's expiry, the
/// gauges, and on the new owner it finds, renews, releases and denies as
/// before.
#[test]
fn a_lock_of_thousands_of_holders_moves_exactly() {
    let Some(cluster) = Cluster::start() else {
        return;
    };
    let (a, b) = (&cluster.a, &cluster.b);
    let key = keys_in(0, 100, 1, "many").pop().expect("a key");
    let n = 5_000;
    let mut pipe = redis::pipe();
    for i in 0..n {
        let cmd = pipe.cmd("UNIQUE.LOCK").arg(&key).arg(format!("j{i}"));
        cmd.arg("LIMIT").arg(0).arg("TTL").arg(600_000 + i % 1_000);
        if i % 3 == 0 {
            cmd.arg("OWNER").arg(format!("w{}", i % 4));
        }
        if i % 5 == 0 {
            cmd.arg("META").arg(format!(r#"{{"args":[{i}]}}"#));
        }
    }
    for i in (0..n).step_by(10) {
        pipe.cmd("UNIQUE.UNLOCK")
            .arg(&key)
            .arg(format!("j{i}"))
            .ignore();
    }
    let tokens: Vec<i64> = pipe.query(&mut a.con()).expect("fill");
    assert_eq!(tokens.len(), n);
    let before = holders_of(&mut a.con(), &key);
    assert_eq!(before.len(), n - n / 10);
    let expiry = common::int(call!(&mut a.con(), "PEXPIRETIME", &key).expect("PEXPIRETIME"));
    assert_eq!(gauges(a), (1, (n - n / 10) as i64));

    cluster.migrate(a, 0, 100, &cluster.b_id);

    assert_eq!(holders_of(&mut b.con(), &key), before);
    let at = common::int(call!(&mut b.con(), "PEXPIRETIME", &key).expect("PEXPIRETIME"));
    assert_eq!(at, expiry, "the key's expiry");
    assert_eq!(gauges(b), (1, (n - n / 10) as i64));
    wait_for("the source to drop the moved key", || gauges(a) == (0, 0));
    let con = &mut b.con();
    let renewed = token(call!(
        con,
        "UNIQUE.LOCK",
        &key,
        "j1",
        "LIMIT",
        0,
        "TTL",
        900_000
    ));
    assert_eq!(renewed, tokens[1], "a renewal keeps its token");
    let pttl = common::int(call!(con, "PTTL", &key).expect("PTTL"));
    assert!((800_000..=900_000).contains(&pttl), "{pttl}");
    assert_eq!(call!(con, "UNIQUE.UNLOCK", &key, "j2"), Ok(Value::Int(1)));
    let limit = (n - n / 10 - 1) as i64;
    assert_eq!(
        call!(con, "UNIQUE.LOCK", &key, "newcomer", "LIMIT", limit),
        Ok(Value::Nil),
        "denied at the limit"
    );
    assert!(
        token(call!(
            con,
            "UNIQUE.LOCK",
            &key,
            "newcomer",
            "LIMIT",
            limit + 1
        )) > tokens[n - 1]
    );
}
