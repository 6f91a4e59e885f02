//! `make soak`: a million contended lock operations through Sentinel
//! failovers, with a fenced resource that must refuse every stale holder.
//!
//! One primary and two replicas (redis-server with the module) and three
//! Sentinels. Workers find the primary through Sentinel and, on a handful of
//! hot keys with LIMIT 1 to 5, run: LOCK ... WAIT (blocking acquire), [WAIT 1
//! 100 with `--wait-replicas`], a write to the fenced resource, a renewal
//! (LOCK of the same jid), a second write, UNLOCK. Meanwhile failovers are
//! forced, alternately `SENTINEL FAILOVER` and `kill -9` of the primary (the
//! killed server comes back as a replica of the new one).
//!
//! The fenced resource (one per LIMIT 1 key: mutual exclusion) remembers the
//! highest token it accepted and refuses a lower one. The soak also numbers
//! every grant in the order the workers received them: a write accepted from
//! a grant older than one whose write it already accepted is a stale write
//! accepted, which the tokens must make impossible. On the LIMIT 2..5 keys
//! the check is the bound: never more holders of one primary's grants inside
//! their critical section at once than LIMIT, and never more live holders
//! than LIMIT in LOCKEDBY on the primary.
//!
//! Usage: cargo run --example soak -- [--ops N] [--wait-replicas]
//! [--min-replicas] [--workers N] [--failover-every SECS]
//! [--failovers kill|sentinel|both]; env REDIS_UNIQUE_MODULE (default
//! target/release/libredis_unique.so), REDIS_SERVER, REDIS_SENTINEL.

use std::collections::HashMap;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use redis::{Connection, Value};

const MASTER: &str = "mymaster";
/// The hot keys and the LIMIT every worker uses on each.
const KEYS: [(&str, i64); 8] = [
    ("soak:a", 1),
    ("soak:b", 1),
    ("soak:c", 1),
    ("soak:d", 1),
    ("soak:two", 2),
    ("soak:three", 3),
    ("soak:four", 4),
    ("soak:five", 5),
];
const TTL_MS: i64 = 3_000;
static MIN_REPLICAS: AtomicBool = AtomicBool::new(false);

#[derive(Default)]
struct Counters {
    ops: AtomicU64,
    grants: AtomicU64,
    denied: AtomicU64,
    errors: AtomicU64,
    lost: AtomicU64,
    lost_replaced: AtomicU64,
    lease_ended: AtomicU64,
    not_durable: AtomicU64,
    writes_accepted: AtomicU64,
    stale_refused: AtomicU64,
    stale_accepted: AtomicU64,
    over_limit_inside: AtomicU64,
    over_limit_observed: AtomicU64,
    split_brain_grants: AtomicU64,
    stale_accepted_replaced: AtomicU64,
    observations: AtomicU64,
    failovers: AtomicU64,
    kills: AtomicU64,
}

/// The fenced resource: per key, the highest token accepted, and the grant
/// number of the newest grant whose write it accepted.
#[derive(Default)]
struct Fenced {
    keys: Mutex<HashMap<&'static str, (i64, u64)>>,
}

impl Fenced {
    /// `replaced`: the grant came from a server that a failover has since
    /// replaced as primary (for the report).
    fn write(&self, key: &'static str, token: i64, grant: u64, replaced: bool, c: &Counters) {
        let mut keys = self.keys.lock().unwrap();
        let (highest, newest) = keys.entry(key).or_default();
        if token < *highest {
            c.stale_refused.fetch_add(1, Ordering::Relaxed);
            return;
        }
        if grant < *newest {
            c.stale_accepted.fetch_add(1, Ordering::Relaxed);
            if replaced {
                c.stale_accepted_replaced.fetch_add(1, Ordering::Relaxed);
            }
        }
        *highest = token;
        *newest = (*newest).max(grant);
        c.writes_accepted.fetch_add(1, Ordering::Relaxed);
    }
}

struct Shared {
    sentinels: Vec<u16>,
    counters: Counters,
    fenced: Fenced,
    /// Grants in the order the workers received them.
    grant_seq: AtomicU64,
    /// Holders inside their critical section, per key and granting server.
    inside: Mutex<HashMap<(&'static str, String), i64>>,
    stop: AtomicBool,
    wait_replicas: bool,
    /// Servers (run_id) that a failover has replaced as primary.
    demoted: Mutex<Vec<String>>,
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

fn connect(port: u16) -> redis::RedisResult<Connection> {
    let con = redis::Client::open(format!("redis://127.0.0.1:{port}/"))?
        .get_connection_with_timeout(Duration::from_secs(2))?;
    con.set_read_timeout(Some(Duration::from_secs(5)))?;
    con.set_write_timeout(Some(Duration::from_secs(5)))?;
    Ok(con)
}

/// Polls `condition` every 20 ms until it holds; false after `limit`.
fn poll(limit: Duration, mut condition: impl FnMut() -> bool) -> bool {
    let start = Instant::now();
    while start.elapsed() < limit {
        if condition() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    false
}

fn info(con: &mut Connection, section: &str) -> String {
    redis::cmd("INFO")
        .arg(section)
        .query(con)
        .unwrap_or_default()
}

fn info_value(text: &str, name: &str) -> Option<String> {
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
        .map(|v| v.trim().to_string())
}

/// The primary's port according to one of the Sentinels.
fn primary_port(sentinels: &[u16], which: usize) -> Option<u16> {
    let port = sentinels[which % sentinels.len()];
    let mut con = connect(port).ok()?;
    let addr: Option<(String, String)> = redis::cmd("SENTINEL")
        .arg("get-master-addr-by-name")
        .arg(MASTER)
        .query(&mut con)
        .ok()?;
    addr?.1.parse().ok()
}

struct Server {
    port: u16,
    dir: PathBuf,
    child: Option<Child>,
}

fn spawn_server(
    server: &str,
    module: &Path,
    port: u16,
    dir: &Path,
    replica_of: Option<u16>,
) -> Child {
    let mut cmd = Command::new(server);
    if MIN_REPLICAS.load(Ordering::Relaxed) {
        // A primary that lost its replicas (replaced by a failover) refuses
        // writes after a second.
        cmd.args([
            "--min-replicas-to-write",
            "1",
            "--min-replicas-max-lag",
            "1",
        ]);
    }
    cmd.args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
        .arg("--dir")
        .arg(dir)
        .args(["--save", "", "--appendonly", "no", "--logfile", "redis.log"])
        .args([
            "--repl-diskless-sync",
            "yes",
            "--repl-diskless-sync-delay",
            "0",
        ])
        .arg("--loadmodule")
        .arg(module);
    if let Some(p) = replica_of {
        cmd.args(["--replicaof", "127.0.0.1", &p.to_string()]);
    }
    cmd.stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("redis-server runs")
}

/// One worker: LOCK ... WAIT, [WAIT 1 100], write, renew, write, UNLOCK.
fn worker(id: usize, shared: Arc<Shared>, target: u64) {
    let c = &shared.counters;
    let mut rng = 0x2545_f491_4f6c_dd1d_u64 ^ ((id as u64 + 1) * 0x9e37_79b9);
    let mut next = move |n: u64| {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng % n
    };
    let mut con: Option<(Connection, String)> = None;
    let mut n = 0u64;
    // (Re)connects to the primary Sentinel names, checking that it is one.
    let primary = |which: usize| -> Option<(Connection, String)> {
        let port = primary_port(&shared.sentinels, which)?;
        let mut con = connect(port).ok()?;
        let server = info(&mut con, "server");
        if !info(&mut con, "replication").contains("role:master") {
            return None;
        }
        Some((con, info_value(&server, "run_id")?))
    };
    // Runs `cmd` on the primary, reconnecting (bounded) after an error.
    let call = |con: &mut Option<(Connection, String)>,
                cmd: &redis::Cmd,
                which: usize|
     -> Result<Value, ()> {
        for attempt in 0..200 {
            if shared.stop.load(Ordering::Relaxed) && attempt > 0 {
                return Err(());
            }
            if con.is_none() {
                *con = primary(which + attempt);
                if con.is_none() {
                    std::thread::sleep(Duration::from_millis(50));
                    continue;
                }
            }
            let (c_, _) = con.as_mut().unwrap();
            c.ops.fetch_add(1, Ordering::Relaxed);
            match cmd.query::<Value>(c_) {
                Ok(v) => return Ok(v),
                Err(_) => {
                    c.errors.fetch_add(1, Ordering::Relaxed);
                    *con = None;
                }
            }
        }
        Err(())
    };
    while c.ops.load(Ordering::Relaxed) < target {
        n += 1;
        let (key, limit) = KEYS[next(KEYS.len() as u64) as usize];
        let jid = format!("w{id}-{n}");
        let mut lock = redis::cmd("UNIQUE.LOCK");
        lock.arg(key)
            .arg(&jid)
            .arg("LIMIT")
            .arg(limit)
            .arg("TTL")
            .arg(TTL_MS);
        let renew = lock.clone();
        lock.arg("WAIT").arg(100);
        let token = match call(&mut con, &lock, id) {
            Ok(Value::Int(t)) => t,
            Ok(_) => {
                c.denied.fetch_add(1, Ordering::Relaxed);
                continue;
            }
            Err(()) => continue,
        };
        let grant = shared.grant_seq.fetch_add(1, Ordering::Relaxed) + 1;
        let granted_at = Instant::now();
        c.grants.fetch_add(1, Ordering::Relaxed);
        let run_id = con.as_ref().map(|(_, r)| r.clone()).unwrap_or_default();
        let run_id_of_grant = run_id.clone();
        if shared.demoted.lock().unwrap().contains(&run_id) {
            // Granted by an old primary after Sentinel had promoted another.
            c.split_brain_grants.fetch_add(1, Ordering::Relaxed);
        }
        let mut unlock = redis::cmd("UNIQUE.UNLOCK");
        unlock.arg(key).arg(&jid);
        if shared.wait_replicas {
            let acked = match call(&mut con, redis::cmd("WAIT").arg(1).arg(100), id) {
                Ok(Value::Int(k)) => k,
                _ => 0,
            };
            if acked < 1 {
                // Not durably locked: give it back, do not write.
                c.not_durable.fetch_add(1, Ordering::Relaxed);
                let _ = call(&mut con, &unlock, id);
                continue;
            }
        }
        {
            let mut inside = shared.inside.lock().unwrap();
            let count = inside.entry((key, run_id.clone())).or_default();
            *count += 1;
            if *count > limit {
                c.over_limit_inside.fetch_add(1, Ordering::Relaxed);
            }
        }
        if limit == 1 {
            let replaced = shared.demoted.lock().unwrap().contains(&run_id);
            shared.fenced.write(key, token, grant, replaced, c);
        }
        if next(4) == 0 {
            std::thread::sleep(Duration::from_millis(next(3)));
        }
        let mut lost = false;
        match call(&mut con, &renew, id) {
            Ok(Value::Int(t)) if t == token => {}
            Ok(Value::Int(_)) => lost = true, // granted anew: the first was lost
            _ => lost = true,
        }
        // Every holder writes before it releases, whether it knows its
        // grant was lost or not: the resource must refuse a stale one.
        if limit == 1 {
            let replaced = shared.demoted.lock().unwrap().contains(&run_id);
            shared.fenced.write(key, token, grant, replaced, c);
        }
        {
            let mut inside = shared.inside.lock().unwrap();
            if let Some(count) = inside.get_mut(&(key, run_id.clone())) {
                *count -= 1;
            }
        }
        match call(&mut con, &unlock, id) {
            Ok(Value::Int(1)) => {}
            _ => lost = true,
        }
        if lost && granted_at.elapsed() >= Duration::from_millis(TTL_MS as u64) {
            // Held past its lease (a worker retrying through a failover).
            c.lease_ended.fetch_add(1, Ordering::Relaxed);
        } else if lost {
            c.lost.fetch_add(1, Ordering::Relaxed);
            if shared.demoted.lock().unwrap().contains(&run_id_of_grant) {
                c.lost_replaced.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
}

/// Samples LOCKEDBY on the primary: never more live holders than LIMIT.
fn observer(shared: Arc<Shared>) {
    let c = &shared.counters;
    let mut con: Option<Connection> = None;
    let mut i = 0;
    while !shared.stop.load(Ordering::Relaxed) {
        i += 1;
        if con.is_none() {
            con = primary_port(&shared.sentinels, i).and_then(|p| connect(p).ok());
        }
        if let Some(cn) = con.as_mut() {
            let mut pipe = redis::pipe();
            for (key, _) in KEYS {
                pipe.cmd("UNIQUE.LOCKEDBY").arg(key);
            }
            match pipe.query::<Vec<Vec<String>>>(cn) {
                Ok(all) => {
                    c.observations.fetch_add(1, Ordering::Relaxed);
                    for ((_, limit), holders) in KEYS.iter().zip(all) {
                        if holders.len() as i64 > *limit {
                            c.over_limit_observed.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                }
                Err(_) => con = None,
            }
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn main() {
    let mut args = std::env::args().skip(1);
    let mut target: u64 = 1_000_000;
    let mut wait_replicas = false;
    let mut workers = 12;
    let mut every = 3u64;
    let mut min_replicas = false;
    let mut kinds = "both".to_string();
    while let Some(a) = args.next() {
        match a.as_str() {
            "--ops" => target = args.next().and_then(|v| v.parse().ok()).expect("--ops N"),
            "--wait-replicas" => wait_replicas = true,
            "--min-replicas" => min_replicas = true,
            "--workers" => {
                workers = args
                    .next()
                    .and_then(|v| v.parse().ok())
                    .expect("--workers N")
            }
            "--failovers" => kinds = args.next().expect("--failovers kill|sentinel|both"),
            "--failover-every" => {
                every = args
                    .next()
                    .and_then(|v| v.parse().ok())
                    .expect("--failover-every SECS")
            }
            other => panic!("unknown argument {other}"),
        }
    }
    MIN_REPLICAS.store(min_replicas, Ordering::Relaxed);
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let module = std::env::var_os("REDIS_UNIQUE_MODULE").map_or_else(
        || root.join("target/release/libredis_unique.so"),
        PathBuf::from,
    );
    assert!(module.exists(), "{} missing: make build", module.display());
    let server_bin = std::env::var("REDIS_SERVER").unwrap_or_else(|_| "redis-server".into());
    let sentinel_bin = std::env::var("REDIS_SENTINEL").unwrap_or_else(|_| "redis-sentinel".into());
    let base = std::env::temp_dir().join(format!("redis-unique-soak-{}", std::process::id()));

    let mut servers: Vec<Server> = (0..3)
        .map(|i| {
            let dir = base.join(format!("server{i}"));
            std::fs::create_dir_all(&dir).unwrap();
            Server {
                port: free_port(),
                dir,
                child: None,
            }
        })
        .collect();
    let p0 = servers[0].port;
    for (i, s) in servers.iter_mut().enumerate() {
        s.child = Some(spawn_server(
            &server_bin,
            &module,
            s.port,
            &s.dir,
            (i > 0).then_some(p0),
        ));
    }
    for s in &servers {
        assert!(
            poll(Duration::from_secs(20), || connect(s.port)
                .map(|mut c| {
                    let r = info(&mut c, "replication");
                    r.contains("role:master") || r.contains("master_link_status:up")
                })
                .unwrap_or(false)),
            "server on {} did not start",
            s.port
        );
    }
    let mut sentinels = Vec::new();
    let mut sentinel_children = Vec::new();
    for i in 0..3 {
        let dir = base.join(format!("sentinel{i}"));
        std::fs::create_dir_all(&dir).unwrap();
        let port = free_port();
        let conf = dir.join("sentinel.conf");
        std::fs::write(
            &conf,
            format!(
                "port {port}\nbind 127.0.0.1\ndir {}\nlogfile sentinel.log\n\
                 sentinel monitor {MASTER} 127.0.0.1 {p0} 2\n\
                 sentinel down-after-milliseconds {MASTER} 1000\n\
                 sentinel failover-timeout {MASTER} 4000\n\
                 sentinel parallel-syncs {MASTER} 2\n",
                dir.display()
            ),
        )
        .unwrap();
        sentinel_children.push(
            Command::new(&sentinel_bin)
                .arg(&conf)
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("redis-sentinel runs (apt-get install redis-sentinel)"),
        );
        sentinels.push(port);
    }
    // The Sentinels know both replicas and each other.
    assert!(
        poll(Duration::from_secs(30), || sentinels.iter().all(|&p| {
            connect(p)
                .and_then(|mut c| {
                    let r: Vec<Value> = redis::cmd("SENTINEL")
                        .arg("replicas")
                        .arg(MASTER)
                        .query(&mut c)?;
                    let s: Vec<Value> = redis::cmd("SENTINEL")
                        .arg("sentinels")
                        .arg(MASTER)
                        .query(&mut c)?;
                    Ok(r.len() == 2 && s.len() == 2)
                })
                .unwrap_or(false)
        })),
        "the Sentinels did not discover each other and the replicas"
    );

    let shared = Arc::new(Shared {
        sentinels: sentinels.clone(),
        counters: Counters::default(),
        fenced: Fenced::default(),
        grant_seq: AtomicU64::new(0),
        inside: Mutex::new(HashMap::new()),
        stop: AtomicBool::new(false),
        wait_replicas,
        demoted: Mutex::new(Vec::new()),
    });
    let start = Instant::now();
    let threads: Vec<_> = (0..workers)
        .map(|id| {
            let s = shared.clone();
            std::thread::spawn(move || worker(id, s, target))
        })
        .collect();
    let obs = {
        let s = shared.clone();
        std::thread::spawn(move || observer(s))
    };

    // Failovers, alternately SENTINEL FAILOVER and kill -9 of the primary.
    let c = &shared.counters;
    let mut round = 0u64;
    let mut failover_secs = Vec::new();
    let mut last = Instant::now();
    while c.ops.load(Ordering::Relaxed) < target {
        let due = last + Duration::from_secs(every);
        while Instant::now() < due && c.ops.load(Ordering::Relaxed) < target {
            std::thread::sleep(Duration::from_millis(50));
        }
        if c.ops.load(Ordering::Relaxed) >= target {
            break;
        }
        round += 1;
        last = Instant::now();
        let Some(old) = primary_port(&sentinels, 0) else {
            continue;
        };
        let old_run_id = connect(old)
            .ok()
            .and_then(|mut c| info_value(&info(&mut c, "server"), "run_id"));
        let began = Instant::now();
        let killed = match kinds.as_str() {
            "kill" => true,
            "sentinel" => false,
            _ => round.is_multiple_of(2),
        };
        if killed {
            let s = servers
                .iter_mut()
                .find(|s| s.port == old)
                .expect("the primary is ours");
            if let Some(mut child) = s.child.take() {
                let _ = child.kill(); // SIGKILL
                let _ = child.wait();
            }
            c.kills.fetch_add(1, Ordering::Relaxed);
        } else {
            let _ = connect(sentinels[0]).and_then(|mut s| {
                redis::cmd("SENTINEL")
                    .arg("FAILOVER")
                    .arg(MASTER)
                    .query::<Value>(&mut s)
            });
        }
        let mut new = None;
        let switched = poll(Duration::from_secs(60), || {
            new = sentinels
                .iter()
                .enumerate()
                .map(|(i, _)| primary_port(&sentinels, i))
                .collect::<Option<Vec<_>>>()
                .filter(|v| v.iter().all(|p| *p == v[0] && *p != old))
                .map(|v| v[0]);
            new.is_some_and(|p| {
                connect(p)
                    .map(|mut c| info(&mut c, "replication").contains("role:master"))
                    .unwrap_or(false)
            })
        });
        if !switched {
            eprintln!("soak: failover {round} did not complete within 60 s");
            if killed {
                let s = servers.iter_mut().find(|s| s.port == old).unwrap();
                s.child = Some(spawn_server(&server_bin, &module, s.port, &s.dir, None));
            }
            last = Instant::now();
            continue;
        }
        c.failovers.fetch_add(1, Ordering::Relaxed);
        failover_secs.push(began.elapsed().as_secs_f64());
        let new = new.unwrap();
        {
            // The old primary is replaced; the new one (perhaps replaced
            // before) is the primary again.
            let new_run_id = connect(new)
                .ok()
                .and_then(|mut c| info_value(&info(&mut c, "server"), "run_id"));
            let mut demoted = shared.demoted.lock().unwrap();
            demoted.extend(old_run_id);
            demoted.retain(|id| Some(id) != new_run_id.as_ref());
        }
        if killed {
            let s = servers.iter_mut().find(|s| s.port == old).unwrap();
            s.child = Some(spawn_server(
                &server_bin,
                &module,
                s.port,
                &s.dir,
                Some(new),
            ));
        }
        // Both replicas in sync with the new primary before the next round.
        let synced = poll(Duration::from_secs(60), || {
            connect(new)
                .map(|mut c| {
                    let r = info(&mut c, "replication");
                    info_value(&r, "connected_slaves").as_deref() == Some("2")
                        && r.lines()
                            .filter(|l| l.starts_with("slave") && l.contains("state=online"))
                            .count()
                            == 2
                })
                .unwrap_or(false)
        });
        if !synced {
            eprintln!("soak: replicas not in sync after failover {round}");
        }
        last = Instant::now();
        eprintln!(
            "soak: failover {round} ({}) {old} -> {new} in {:.1} s; {} ops so far",
            if killed {
                "kill -9"
            } else {
                "SENTINEL FAILOVER"
            },
            began.elapsed().as_secs_f64(),
            c.ops.load(Ordering::Relaxed)
        );
    }
    for t in threads {
        t.join().unwrap();
    }
    shared.stop.store(true, Ordering::Relaxed);
    obs.join().unwrap();
    let elapsed = start.elapsed().as_secs_f64();

    let g = |a: &AtomicU64| a.load(Ordering::Relaxed);
    let report = serde_json::json!({
        "mode": if wait_replicas { "LOCK then WAIT 1 100" } else { "LOCK" },
        "min_replicas_to_write": if min_replicas { 1 } else { 0 },
        "seconds": (elapsed * 10.0).round() / 10.0,
        "workers": workers,
        "operations": g(&c.ops),
        "grants": g(&c.grants),
        "denied_or_wait_ran_out": g(&c.denied),
        "command_errors_during_failovers": g(&c.errors),
        "failovers": g(&c.failovers),
        "of_which_kill_9": g(&c.kills),
        "failover_seconds_max": failover_secs.iter().cloned().fold(0.0, f64::max),
        "grants_lost": g(&c.lost),
        "grants_lost_of_a_replaced_primary": g(&c.lost_replaced),
        "holds_past_their_lease": g(&c.lease_ended),
        "grants_by_a_replaced_primary": g(&c.split_brain_grants),
        "grants_not_acknowledged_by_a_replica": g(&c.not_durable),
        "fenced_writes_accepted": g(&c.writes_accepted),
        "stale_writes_refused": g(&c.stale_refused),
        "stale_writes_accepted": g(&c.stale_accepted),
        "stale_writes_accepted_from_a_replaced_primary": g(&c.stale_accepted_replaced),
        "holders_above_limit_inside": g(&c.over_limit_inside),
        "holders_above_limit_observed": g(&c.over_limit_observed),
        "limit_observations": g(&c.observations),
    });
    println!("{}", serde_json::to_string_pretty(&report).unwrap());

    for mut ch in sentinel_children {
        let _ = ch.kill();
        let _ = ch.wait();
    }
    for s in &mut servers {
        if let Some(mut ch) = s.child.take() {
            let _ = ch.kill();
            let _ = ch.wait();
        }
    }
    let _ = std::fs::remove_dir_all(&base);
    let bad = g(&c.stale_accepted) + g(&c.over_limit_inside) + g(&c.over_limit_observed);
    if bad > 0 || g(&c.failovers) == 0 {
        eprintln!(
            "soak: FAILED ({bad} violations, {} failovers)",
            g(&c.failovers)
        );
        std::process::exit(1);
    }
}
