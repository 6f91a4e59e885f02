//! The four seed scenarios (the public write-ups the design grew from: a lock
//! around an ID, limited capacity, dependency locks, unique jobs), as a job
//! system would drive them.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, AtomicUsize, Ordering};

use common::{Server, Value, holders, token, wait_for};

/// Seed 1: only one job per user at a time; other users run in parallel; a
/// crashed job's lock frees itself when its lease ends.
#[test]
fn lock_around_an_id() {
    let server = Server::start();
    let con = &mut server.con();
    let hour = 3_600_000;
    token(call!(
        con,
        "UNIQUE.LOCK",
        "sync:user:1",
        "job-a",
        "TTL",
        hour
    ));
    token(call!(
        con,
        "UNIQUE.LOCK",
        "sync:user:2",
        "job-b",
        "TTL",
        hour
    ));
    assert_eq!(
        call!(con, "UNIQUE.LOCK", "sync:user:1", "job-c", "TTL", hour),
        Ok(Value::Nil)
    );
    assert_eq!(
        call!(con, "UNIQUE.UNLOCK", "sync:user:1", "job-a"),
        Ok(Value::Int(1))
    );
    token(call!(
        con,
        "UNIQUE.LOCK",
        "sync:user:1",
        "job-c",
        "TTL",
        hour
    ));
    assert_eq!(holders(con, "sync:user:1"), ["job-c"]);
    assert_eq!(holders(con, "sync:user:2"), ["job-b"]);

    // A crash: the job never unlocks. Its lease (short here) frees the lock.
    // The retry comes in the same pipeline, so before the lease ends however
    // slow the machine is between commands.
    let replies: Vec<Value> = redis::pipe()
        .cmd("UNIQUE.LOCK")
        .arg(&["sync:user:3", "crashed", "TTL", "300"])
        .cmd("UNIQUE.LOCK")
        .arg("sync:user:3")
        .arg("retry")
        .arg("TTL")
        .arg(hour)
        .query(con)
        .expect("the pipeline");
    token(Ok(replies[0].clone()));
    assert_eq!(replies[1], Value::Nil);
    wait_for("the crashed job's lease to end", || {
        matches!(
            call!(con, "UNIQUE.LOCK", "sync:user:3", "retry", "TTL", hour),
            Ok(Value::Int(_))
        )
    });
}

/// Seed 2: at most N jobs of a worker at once, with real concurrent workers.
#[test]
fn limited_capacity_under_concurrent_workers() {
    const LIMIT: usize = 3;
    const WORKERS: usize = 8;
    const JOBS_EACH: usize = 60;
    let server = Arc::new(Server::start());
    let running = Arc::new(AtomicUsize::new(0));
    let most = Arc::new(AtomicUsize::new(0));
    let last_token = Arc::new(AtomicI64::new(0));
    let threads: Vec<_> = (0..WORKERS)
        .map(|w| {
            let (server, running, most) = (server.clone(), running.clone(), most.clone());
            let last_token = last_token.clone();
            std::thread::spawn(move || {
                let con = &mut server.con();
                let (mut done, mut denied) = (0, 0);
                let mut attempts = 0;
                while done < JOBS_EACH {
                    attempts += 1;
                    assert!(attempts < 100_000, "worker {w} starved");
                    let jid = format!("w{w}-job{done}");
                    match call!(
                        con,
                        "UNIQUE.LOCK",
                        "worker:export",
                        &jid,
                        "LIMIT",
                        LIMIT,
                        "TTL",
                        60_000
                    ) {
                        Ok(Value::Int(t)) => {
                            last_token.fetch_max(t, Ordering::SeqCst);
                            let now = running.fetch_add(1, Ordering::SeqCst) + 1;
                            most.fetch_max(now, Ordering::SeqCst);
                            // The job's work: here, look at who holds the lock.
                            let held = holders(con, "worker:export");
                            assert!(held.len() <= LIMIT && held.contains(&jid), "{held:?}");
                            running.fetch_sub(1, Ordering::SeqCst);
                            assert_eq!(
                                call!(con, "UNIQUE.UNLOCK", "worker:export", &jid),
                                Ok(Value::Int(1))
                            );
                            done += 1;
                        }
                        Ok(Value::Nil) => denied += 1,
                        other => panic!("LOCK: {other:?}"),
                    }
                }
                denied
            })
        })
        .collect();
    let denied: usize = threads.into_iter().map(|t| t.join().expect("worker")).sum();
    assert!(most.load(Ordering::SeqCst) <= LIMIT);
    assert!(last_token.load(Ordering::SeqCst) > 0);
    assert_eq!(
        holders(&mut server.con(), "worker:export"),
        Vec::<String>::new()
    );
    println!(
        "{} jobs ran, {denied} attempts were denied",
        WORKERS * JOBS_EACH
    );
}

/// Seed 3: job A, enqueued twice, takes a counted lock per order; job B sees
/// the lock held until both A's have unlocked.
#[test]
fn dependency_lock() {
    let server = Server::start();
    let con = &mut server.con();
    let order = "deps:order:42";
    token(call!(
        con,
        "UNIQUE.LOCK",
        order,
        "a-1",
        "LIMIT",
        0,
        "TYPE",
        "dependency"
    ));
    token(call!(
        con,
        "UNIQUE.LOCK",
        order,
        "a-2",
        "LIMIT",
        0,
        "TYPE",
        "dependency"
    ));
    let b_may_run = |con: &mut redis::Connection| holders(con, order).is_empty();
    assert!(!b_may_run(con));
    assert_eq!(call!(con, "UNIQUE.UNLOCK", order, "a-1"), Ok(Value::Int(1)));
    assert!(!b_may_run(con), "one A is still pending");
    assert_eq!(call!(con, "UNIQUE.UNLOCK", order, "a-2"), Ok(Value::Int(1)));
    assert!(b_may_run(con));
    assert_eq!(call!(con, "EXISTS", order), Ok(Value::Int(0)));
}

/// Seed 4: until_executed. Duplicates refused, the job's own relock is
/// idempotent and renews the lease, and the unlock after success frees it.
#[test]
fn unique_job_until_executed() {
    let server = Server::start();
    let con = &mut server.con();
    let digest = "uniq:SyncUser:3f2a9c";
    let meta = r#"{"class":"SyncUser","queue":"default","args":[1]}"#;
    let t = token(call!(
        con,
        "UNIQUE.LOCK",
        digest,
        "jid-1",
        "TYPE",
        "until_executed",
        "TTL",
        60_000,
        "META",
        meta
    ));
    assert_eq!(
        call!(
            con,
            "UNIQUE.LOCK",
            digest,
            "jid-2",
            "TYPE",
            "until_executed",
            "TTL",
            60_000
        ),
        Ok(Value::Nil)
    );
    let before: i64 = redis::cmd("PEXPIRETIME")
        .arg(digest)
        .query(con)
        .expect("PEXPIRETIME");
    assert_eq!(
        token(call!(
            con,
            "UNIQUE.LOCK",
            digest,
            "jid-1",
            "TYPE",
            "until_executed",
            "TTL",
            3_600_000
        )),
        t
    );
    let after: i64 = redis::cmd("PEXPIRETIME")
        .arg(digest)
        .query(con)
        .expect("PEXPIRETIME");
    assert!(
        after >= before + 3_000_000,
        "the relock renewed the lease: {before} -> {after}"
    );
    assert_eq!(
        call!(
            con,
            "UNIQUE.LOCK",
            digest,
            "jid-3",
            "TYPE",
            "until_executed"
        ),
        Ok(Value::Nil)
    );
    assert_eq!(
        call!(con, "UNIQUE.UNLOCK", digest, "jid-1"),
        Ok(Value::Int(1))
    );
    assert!(
        token(call!(
            con,
            "UNIQUE.LOCK",
            digest,
            "jid-3",
            "TYPE",
            "until_executed"
        )) > t
    );
}
