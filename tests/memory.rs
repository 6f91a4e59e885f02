//! Memory is given back: a million LOCK/UNLOCK/WAIT/REAP operations, then
//! everything deleted, leave `used_memory` no higher than the same run of
//! SET/DEL/BLPOP/SCAN leaves it (Redis's own allocations grow a little by
//! themselves: the control measures that).

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use common::{Connection, Server, Value, gauges, info_field, wait_for};

/// Keys per round, rounds, and the waiters blocked (and served) per round.
const KEYS: usize = 2_000;
const ROUNDS: usize = 63;
const WAITERS: usize = 50;

/// The RESP encoding of one command.
fn resp(out: &mut Vec<u8>, args: &[&[u8]]) {
    out.extend_from_slice(format!("*{}\r\n", args.len()).as_bytes());
    for a in args {
        out.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
        out.extend_from_slice(a);
        out.extend_from_slice(b"\r\n");
    }
}

/// Sends `n` pipelined commands in one write and reads their `n` replies.
fn pipeline(con: &mut Connection, bytes: &[u8], n: usize) -> Vec<Value> {
    con.send_packed_command(bytes).expect("send");
    (0..n)
        .map(|_| con.recv_response().expect("reply"))
        .collect()
}

/// Sends the pipelined commands of a round in one write and reads their `n`
/// replies, each one line (integers, nil, +OK, errors): how many were errors.
fn round_trip(stream: &mut TcpStream, bytes: &[u8], n: usize) -> usize {
    stream.write_all(bytes).expect("send");
    let (mut lines, mut errors, mut line_start) = (0, 0, true);
    let mut buf = vec![0u8; 1 << 16];
    while lines < n {
        let got = stream.read(&mut buf).expect("replies");
        assert!(got > 0, "the server closed the connection");
        for &b in &buf[..got] {
            if line_start && b == b'-' {
                errors += 1;
            }
            line_start = b == b'\n';
            lines += usize::from(line_start);
        }
    }
    assert_eq!(lines, n, "one line per reply");
    errors
}

/// One side of the comparison: what it runs on the server.
trait Workload {
    /// The commands of one round over keys `0..KEYS`, and how many.
    fn round(&self, round: usize, out: &mut Vec<u8>) -> usize;
    /// Walks the keyspace once (REAP or SCAN); the calls made.
    fn sweep(&self, con: &mut Connection) -> u64;
    /// Holds key `i` (so that a waiter on it blocks).
    fn hold(&self, i: usize, out: &mut Vec<u8>);
    /// A blocking call on key `i` with a timeout in ms.
    fn wait(&self, i: usize, timeout_ms: u64, out: &mut Vec<u8>);
    /// Frees key `i` so that its waiter is served.
    fn free(&self, i: usize, out: &mut Vec<u8>);
    /// Undoes what the served waiter of key `i` got.
    fn after(&self, i: usize, out: &mut Vec<u8>);
    /// Undoes `hold` of key `i` when no waiter took it.
    fn unhold(&self, i: usize, out: &mut Vec<u8>);
}

struct Locks;

impl Workload for Locks {
    fn round(&self, round: usize, out: &mut Vec<u8>) -> usize {
        let ty = format!("t{}", round % 3);
        let owner = format!("w{}", round % 5);
        let meta = format!("{{\"round\":{}}}", round % 15);
        for i in 0..KEYS {
            let key = format!("m:{i}");
            let k = key.as_bytes();
            let l2: &[u8] = b"2";
            resp(
                out,
                &[
                    b"UNIQUE.LOCK",
                    k,
                    b"a",
                    b"LIMIT",
                    l2,
                    b"TTL",
                    b"60000",
                    b"TYPE",
                    ty.as_bytes(),
                    b"META",
                    meta.as_bytes(),
                ],
            );
            // A lease of 1 ms: expires in the round, for the LOCKs, REAP
            // and the background reaper to remove.
            resp(
                out,
                &[
                    b"UNIQUE.LOCK",
                    k,
                    b"b",
                    b"LIMIT",
                    l2,
                    b"TTL",
                    b"1",
                    b"OWNER",
                    owner.as_bytes(),
                ],
            );
            resp(out, &[b"UNIQUE.LOCK", k, b"c", b"LIMIT", l2]);
            resp(
                out,
                &[b"UNIQUE.LOCK", k, b"a", b"LIMIT", l2, b"TTL", b"60000"],
            );
            resp(out, &[b"UNIQUE.UNLOCK", k, b"a"]);
            // At most one holder is left: granted at once, WAIT or not.
            resp(
                out,
                &[
                    b"UNIQUE.LOCK",
                    k,
                    b"d",
                    b"LIMIT",
                    l2,
                    b"TTL",
                    b"60000",
                    b"WAIT",
                    b"1000",
                ],
            );
            resp(out, &[b"UNIQUE.UNLOCK", k, b"c"]);
            resp(out, &[b"UNIQUE.UNLOCK", k, b"d"]);
        }
        KEYS * 8
    }

    fn sweep(&self, con: &mut Connection) -> u64 {
        let mut cursor = "0".to_string();
        let mut calls = 0;
        loop {
            let (next, _removed): (String, i64) = redis::cmd("UNIQUE.REAP")
                .arg(&cursor)
                .arg("COUNT")
                .arg(500)
                .query(con)
                .expect("REAP");
            calls += 1;
            if next == "0" {
                return calls;
            }
            cursor = next;
        }
    }

    fn hold(&self, i: usize, out: &mut Vec<u8>) {
        resp(out, &[b"UNIQUE.LOCK", format!("m:{i}").as_bytes(), b"h"]);
    }

    fn wait(&self, i: usize, timeout_ms: u64, out: &mut Vec<u8>) {
        let t = timeout_ms.to_string();
        resp(
            out,
            &[
                b"UNIQUE.LOCK",
                format!("m:{i}").as_bytes(),
                format!("w{i}").as_bytes(),
                b"TTL",
                b"60000",
                b"WAIT",
                t.as_bytes(),
            ],
        );
    }

    fn free(&self, i: usize, out: &mut Vec<u8>) {
        resp(out, &[b"UNIQUE.UNLOCK", format!("m:{i}").as_bytes(), b"h"]);
    }

    fn after(&self, i: usize, out: &mut Vec<u8>) {
        resp(
            out,
            &[
                b"UNIQUE.UNLOCK",
                format!("m:{i}").as_bytes(),
                format!("w{i}").as_bytes(),
            ],
        );
    }

    fn unhold(&self, i: usize, out: &mut Vec<u8>) {
        self.free(i, out);
    }
}

/// The control: the same number of plain Redis commands on the same keys.
struct Strings;

impl Workload for Strings {
    fn round(&self, round: usize, out: &mut Vec<u8>) -> usize {
        let value = format!("{{\"round\":{}}}", round % 15);
        for i in 0..KEYS {
            let key = format!("m:{i}");
            let k = key.as_bytes();
            resp(out, &[b"SET", k, value.as_bytes(), b"PX", b"60000"]);
            resp(out, &[b"SET", k, b"b", b"PX", b"1", b"XX"]);
            resp(out, &[b"SET", k, b"c", b"NX"]);
            resp(out, &[b"SET", k, b"a", b"PX", b"60000"]);
            resp(out, &[b"DEL", k]);
            resp(out, &[b"SET", k, b"d", b"PX", b"60000", b"NX"]);
            resp(out, &[b"PEXPIRE", k, b"1"]);
            resp(out, &[b"DEL", k]);
        }
        KEYS * 8
    }

    fn sweep(&self, con: &mut Connection) -> u64 {
        let mut cursor = "0".to_string();
        let mut calls = 0;
        loop {
            let (next, _keys): (String, Vec<String>) = redis::cmd("SCAN")
                .arg(&cursor)
                .arg("COUNT")
                .arg(500)
                .query(con)
                .expect("SCAN");
            calls += 1;
            if next == "0" {
                return calls;
            }
            cursor = next;
        }
    }

    fn hold(&self, _i: usize, out: &mut Vec<u8>) {
        resp(out, &[b"PING"]);
    }

    fn wait(&self, i: usize, timeout_ms: u64, out: &mut Vec<u8>) {
        let t = format!("{:.3}", timeout_ms as f64 / 1000.0);
        resp(out, &[b"BLPOP", format!("l:{i}").as_bytes(), t.as_bytes()]);
    }

    fn free(&self, i: usize, out: &mut Vec<u8>) {
        resp(out, &[b"LPUSH", format!("l:{i}").as_bytes(), b"x"]);
    }

    fn after(&self, i: usize, out: &mut Vec<u8>) {
        resp(out, &[b"DEL", format!("m:{i}").as_bytes()]);
    }

    fn unhold(&self, i: usize, out: &mut Vec<u8>) {
        resp(out, &[b"DEL", format!("l:{i}").as_bytes()]);
    }
}

/// Blocked clients right now (the module's waiters and BLPOP alike).
fn blocked(con: &mut Connection) -> i64 {
    info_field(con, "clients", "blocked_clients")
}

/// `used_memory` once Redis is done giving back on its own: its cron trims
/// the pool of temporary clients that blocked module clients use (up to 50
/// per 100 ms) and shrinks emptied tables. The lowest value seen, once no
/// lower one has come for a second (10 cron periods).
fn settled_used_memory(con: &mut Connection) -> i64 {
    let mut lowest = i64::MAX;
    let mut since = Instant::now();
    wait_for("used_memory to settle", || {
        let now = info_field(con, "memory", "used_memory");
        if now < lowest {
            lowest = now;
            since = Instant::now();
        }
        since.elapsed() >= Duration::from_secs(1)
    });
    lowest
}

/// Waiters that block and are served by a release, one whose wait runs out
/// and one that disconnects while blocked; the operations run.
fn waits(
    workload: &dyn Workload,
    server: &Server,
    con: &mut Connection,
    waiters: &mut [Connection],
) -> u64 {
    let mut buf = Vec::new();
    // Waiters that block and are served by the holder's release...
    buf.clear();
    for i in 0..WAITERS {
        workload.hold(i, &mut buf);
    }
    pipeline(con, &buf, WAITERS);
    for (i, w) in waiters.iter_mut().enumerate() {
        let mut one = Vec::new();
        workload.wait(i, 10_000, &mut one);
        w.send_packed_command(&one).expect("send");
    }
    wait_for("the waiters to block", || blocked(con) == WAITERS as i64);
    buf.clear();
    for i in 0..WAITERS {
        workload.free(i, &mut buf);
    }
    pipeline(con, &buf, WAITERS);
    for w in waiters.iter_mut() {
        let reply = w.recv_response().expect("served");
        assert!(!matches!(reply, Value::Nil), "a waiter was not served");
    }
    // ...one that times out on a held key, and one that disconnects.
    buf.clear();
    workload.hold(WAITERS, &mut buf);
    pipeline(con, &buf, 1);
    buf.clear();
    workload.wait(WAITERS, 2, &mut buf);
    let reply = pipeline(&mut waiters[0], &buf, 1);
    assert_eq!(reply, [Value::Nil], "the wait runs out");
    // The one that disconnects waits long: a wait of 2 ms could run out
    // before the poll below sees it blocked.
    buf.clear();
    workload.wait(WAITERS, 600_000, &mut buf);
    let mut gone = server.con();
    gone.send_packed_command(&buf).expect("send");
    wait_for("the waiter to block", || blocked(con) == 1);
    drop(gone);
    wait_for("the waiter to go", || blocked(con) == 0);
    buf.clear();
    workload.unhold(WAITERS, &mut buf);
    for i in 0..WAITERS {
        workload.after(i, &mut buf);
    }
    pipeline(con, &buf, WAITERS + 1);
    3 * WAITERS as u64 + 4
}

/// Runs the workload on a fresh server; (operations, used_memory growth).
fn run(workload: &dyn Workload) -> (u64, i64) {
    let server = Server::start();
    let mut con = server.con();
    let mut waiters: Vec<Connection> = (0..WAITERS).map(|_| server.con()).collect();
    // The rounds go through a plain socket: parsing a million replies with
    // the client library takes longer than the server takes to run them.
    let mut raw = TcpStream::connect(("127.0.0.1", server.port)).expect("connect");
    // Redis keeps a pool of temporary clients for blocked module clients
    // (at least 8 once used): the same warm-up fills it on both servers.
    waits(&Locks, &server, &mut con, &mut waiters);
    let before = settled_used_memory(&mut con);

    let mut ops = 0u64;
    // A round depends on round % 15 only: each is encoded once.
    let mut rounds: Vec<Option<(Vec<u8>, usize)>> = vec![None; 15];
    for round in 0..ROUNDS {
        let (buf, n) = rounds[round % 15].get_or_insert_with(|| {
            let mut buf = Vec::with_capacity(4 << 20);
            let n = workload.round(round, &mut buf);
            (buf, n)
        });
        let n = *n;
        assert_eq!(
            round_trip(&mut raw, buf, n),
            0,
            "error replies in round {round}"
        );
        ops += n as u64;
        ops += workload.sweep(&mut con);

        ops += waits(workload, &server, &mut con, &mut waiters);
    }

    // Everything deleted: the leases of 1 ms have run out; the sweep and the
    // background reaper (or expiry) remove them.
    wait_for("an empty keyspace", || {
        workload.sweep(&mut con);
        redis::cmd("DBSIZE").query::<i64>(&mut con).expect("DBSIZE") == 0
    });
    // serverCron shrinks the emptied main and expires tables: wait for it.
    wait_for("the hash tables to shrink", || {
        let stats: String = redis::cmd("DEBUG")
            .arg("HTSTATS")
            .arg(0)
            .query(&mut con)
            .expect("HTSTATS");
        !stats.contains("table size: 2048") && !stats.contains("table size: 4096")
    });
    let after = settled_used_memory(&mut con);
    drop(waiters);
    (ops, after - before)
}

const MEMORY_SLACK: i64 = 16 << 10;

#[test]
fn a_million_operations_give_their_memory_back() {
    let start = Instant::now();
    let (lock_ops, lock_growth) = run(&Locks);
    let lock_time = start.elapsed();
    let (control_ops, control_growth) = run(&Strings);
    eprintln!(
        "module: {lock_ops} ops in {lock_time:?}, used_memory +{lock_growth} B; \
         control (SET/DEL/BLPOP/SCAN): {control_ops} ops, +{control_growth} B"
    );
    assert!(lock_ops >= 1_000_000, "{lock_ops} operations");
    // Two servers never end byte for byte alike (allocator size classes,
    // a client's buffers, the metrics' minute that turned during one run):
    // 16 KiB of slack, where a leak of one byte in 64 operations would be
    // 16 KiB over the million.
    assert!(
        lock_growth <= control_growth.max(0) + MEMORY_SLACK,
        "the module kept {lock_growth} B, the control {control_growth} B"
    );
}

/// `lazyfreed_objects`: what Redis's lazy-free thread has freed so far.
fn lazyfreed(con: &mut Connection) -> i64 {
    info_field(con, "memory", "lazyfreed_objects")
}

#[test]
fn unlink_leaves_a_key_of_many_holders_to_the_lazy_free_thread_and_frees_a_few_at_once() {
    let server = Server::start();
    let con = &mut server.con();
    let mut pipe = redis::pipe();
    for (key, holders) in [("few", 3), ("many", 1_000)] {
        for i in 0..holders {
            pipe.cmd("UNIQUE.LOCK")
                .arg(key)
                .arg(format!("job-{i}"))
                .arg("LIMIT")
                .arg(0)
                .arg("TTL")
                .arg(600_000)
                .arg("META")
                .arg(r#"{"worker":"SyncUserJob","queue":"default"}"#)
                .ignore();
        }
    }
    pipe.query::<()>(con).expect("fill");
    assert_eq!(gauges(con), (2, 1_003));
    let before = lazyfreed(con);

    // A few holders: freed by the command itself, nothing left to a thread.
    let unlinked: i64 = redis::cmd("UNLINK").arg("few").query(con).expect("UNLINK");
    assert_eq!(unlinked, 1);
    assert_eq!(gauges(con), (1, 1_000));
    assert_eq!(lazyfreed(con), before);

    // A thousand (each with its META apart): the lazy-free thread frees it.
    let unlinked: i64 = redis::cmd("UNLINK").arg("many").query(con).expect("UNLINK");
    assert_eq!(unlinked, 1);
    wait_for("the lazy-free thread to free the key", || {
        lazyfreed(con) == before + 1 && gauges(con) == (0, 0)
    });
}
