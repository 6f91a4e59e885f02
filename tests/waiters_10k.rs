//! Long blocked waits and timers: 10,000 clients blocked in `LOCK ... WAIT`
//! on 100 keys, served by UNLOCKs, lease ends and disconnects in random
//! order, and timeouts on keys that stay full. Every client that stays gets exactly one
//! reply, `unique_waiting` returns to 0 and no wake-up timer is left armed.

mod common;

use std::collections::HashSet;
use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use common::{Connection, Rng, Server, Value, info_field, wait_for, wait_until};

const CLIENTS: usize = 10_000;
const KEYS: usize = 100;
/// Keys 90..99 stay full until their waiters' WAIT (1 to 3 s) has run out:
/// timeouts that no grant races (that race is the test at the end).
const STUCK: usize = 90;

fn resp(args: &[String]) -> Vec<u8> {
    let mut out = format!("*{}\r\n", args.len()).into_bytes();
    for a in args {
        out.extend_from_slice(format!("${}\r\n{a}\r\n", a.len()).as_bytes());
    }
    out
}

fn limit(key: usize) -> usize {
    1 + key % 5
}

/// One line of RESP, without its CRLF.
fn line(reader: &mut BufReader<TcpStream>) -> String {
    let mut s = String::new();
    reader.read_line(&mut s).expect("a reply");
    assert!(s.ends_with("\r\n"), "a whole line: {s:?}");
    s.truncate(s.len() - 2);
    s
}

fn int(con: &mut Connection, name: &str) -> i64 {
    info_field(con, "unique", &format!("unique_{name}"))
}

#[test]
fn ten_thousand_waiters_each_get_one_reply() {
    let server = Server::start_with(&["--maxclients", "10500"]);
    let mut con = server.con();
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let start = Instant::now();

    // Every key full, with holders that have no lease: nobody gets in
    // until the waiters are all queued.
    let mut pipe = redis::pipe();
    for k in 0..KEYS {
        for j in 0..limit(k) {
            pipe.cmd("UNIQUE.LOCK")
                .arg(format!("w:{k}"))
                .arg(format!("h{j}"))
                .arg("LIMIT")
                .arg(limit(k));
        }
    }
    let tokens: Vec<Value> = pipe.query(&mut con).expect("holders");
    assert!(tokens.iter().all(|t| matches!(t, Value::Int(_))));

    // 10,000 clients, each a LOCK with WAIT: a lease of 20..200 ms once
    // granted (lease ends serve the next); on the keys that stay full, a
    // wait of 1 to 3 s that runs out.
    // Connected first, then the commands sent in one pass, so that all of
    // them block about together.
    let mut streams: Vec<TcpStream> = (0..CLIENTS)
        .map(|_| {
            let stream = TcpStream::connect(("127.0.0.1", server.port)).expect("connect");
            stream.set_nodelay(true).expect("nodelay");
            stream
        })
        .collect();
    let connected = Instant::now();
    for (i, stream) in streams.iter_mut().enumerate() {
        let k = i % KEYS;
        let ttl = 20 + rng.below(180);
        let wait = if k >= STUCK {
            1_000 + rng.below(2_000)
        } else {
            120_000
        };
        let args = [
            "UNIQUE.LOCK".to_string(),
            format!("w:{k}"),
            format!("c{i}"),
            "LIMIT".into(),
            limit(k).to_string(),
            "TTL".into(),
            ttl.to_string(),
            "WAIT".into(),
            wait.to_string(),
        ];
        stream.write_all(&resp(&args)).expect("send");
    }
    let mut clients: Vec<Option<BufReader<TcpStream>>> = streams
        .into_iter()
        .map(|s| Some(BufReader::new(s)))
        .collect();
    let mut peak = 0;
    wait_for("the clients to block", || {
        let waiting = int(&mut con, "waiting");
        let timed_out = int(&mut con, "timed_out");
        peak = peak.max(waiting);
        waiting + timed_out == CLIENTS as i64
    });
    let blocked = Instant::now();

    // Random order: a random holder released here and there, a random
    // client gone now and then, leases ending and waits running out on
    // their own, until nobody waits.
    let mut gone = 0;
    let mut unlocks = 0;
    wait_until(Duration::from_secs(120), "every waiter served", || {
        let mut pipe = redis::pipe();
        for k in 0..KEYS {
            pipe.cmd("UNIQUE.LOCKEDBY").arg(format!("w:{k}"));
        }
        let holders: Vec<Vec<String>> = pipe.query(&mut con).expect("LOCKEDBY");
        let mut pipe = redis::pipe();
        for (k, jids) in holders.iter().enumerate() {
            if k < STUCK && !jids.is_empty() && rng.below(3) == 0 {
                let jid = &jids[rng.below(jids.len() as u64) as usize];
                pipe.cmd("UNIQUE.UNLOCK").arg(format!("w:{k}")).arg(jid);
                unlocks += 1;
            }
        }
        if pipe.cmd_iter().next().is_some() {
            let _: Vec<i64> = pipe.query(&mut con).expect("UNLOCK");
        }
        for _ in 0..10 {
            if gone < CLIENTS / 10 {
                let i = rng.below(CLIENTS as u64) as usize;
                if clients[i].take().is_some() {
                    gone += 1;
                }
            }
        }
        int(&mut con, "waiting") == 0
    });
    let drained = Instant::now();

    // Every client that stayed has exactly one reply: a token or nil (its
    // wait ran out), then nothing else before the reply to a PING.
    let mut granted = HashSet::new();
    let mut nils = 0;
    for (i, client) in clients.iter_mut().enumerate() {
        let Some(client) = client else { continue };
        client
            .get_ref()
            .set_read_timeout(Some(Duration::from_secs(30)))
            .expect("timeout");
        let reply = line(client);
        if let Some(token) = reply.strip_prefix(':') {
            assert!(granted.insert(token.to_string()), "token {token} twice");
        } else {
            assert_eq!(reply, "$-1", "a token or nil");
            assert!(
                i % KEYS >= STUCK,
                "client {i} timed out on a key that was served"
            );
            nils += 1;
        }
        client
            .get_mut()
            .write_all(b"*1\r\n$4\r\nPING\r\n")
            .expect("PING");
        assert_eq!(line(client), "+PONG", "one reply, then the PONG");
    }
    let stayed = CLIENTS - gone;
    assert_eq!(granted.len() + nils, stayed);

    assert_eq!(int(&mut con, "waiting"), 0);
    assert_eq!(info_field(&mut con, "clients", "blocked_clients"), 0);
    // The last leases end within 200 ms; their timers fire, none is left.
    wait_for("no timer armed", || int(&mut con, "timers_armed") == 0);
    eprintln!(
        "{CLIENTS} clients, peak waiting {peak}; {} granted, {nils} timed out, {gone} \
         disconnected, {unlocks} UNLOCKs by the driver, {} timed out in all; \
         connected in {:?}, all blocked {:?} later, drained in {:?}, total {:?}",
        granted.len(),
        int(&mut con, "timed_out"),
        connected - start,
        blocked - connected,
        drained - blocked,
        start.elapsed()
    );
}

/// Fault found by the test above (Redis 7.0.15 and 7.2.6 alike): a waiter
/// granted after its WAIT ran out, in the same event-loop iteration as
/// Redis's timeout handling, got no reply at all and its grant stayed: Redis
/// skips the timeout reply of a client that the module has already unblocked
/// (its reply queued, redis#6798) but then unblocks it anyway, dropping the
/// queued reply. The module now keeps the deadline itself (a timer of its
/// own, Redis's timeout unused), so a wait has exactly one outcome. Here the
/// waiter's WAIT passes in a DEBUG SLEEP, then an UNLOCK in the same read
/// frees the slot before the deadline timer can run: the waiter gets the
/// grant's token, and holds the lock that token names.
///
/// The waiter must still be queued when the sleep starts. An INFO in the same
/// read, before the sleep, tells whether it was; when the machine was too slow
/// for a 50 ms WAIT (the 10,000 clients above run beside this test), the case
/// is played again with a longer one, whose sleep is longer too.
#[test]
fn a_grant_in_the_iteration_of_the_timeout_is_replied() {
    let server = Server::start();
    let mut con = server.con();
    for wait_ms in [50u64, 500, 5_000, 30_000] {
        let key = format!("k{wait_ms}");
        assert!(matches!(
            common::run(redis::cmd("UNIQUE.LOCK").arg(&key).arg("h"), &mut con),
            Ok(Value::Int(_))
        ));
        let timed_out = int(&mut con, "timed_out");
        let waiter = TcpStream::connect(("127.0.0.1", server.port)).expect("connect");
        let wait = wait_ms.to_string();
        let args: Vec<String> = ["UNIQUE.LOCK", &key, "w", "TTL", "60000", "WAIT", &wait]
            .map(String::from)
            .to_vec();
        (&waiter).write_all(&resp(&args)).expect("send");
        wait_for("the waiter to block (or its wait to run out)", || {
            int(&mut con, "waiting") == 1 || int(&mut con, "timed_out") > timed_out
        });
        // One write: the three commands run in one event-loop iteration.
        let sleep = format!("{:.3}", (wait_ms + 50) as f64 / 1000.0);
        let mut all = resp(&["INFO".into(), "unique".into()]);
        all.extend(resp(&["DEBUG".into(), "SLEEP".into(), sleep]));
        all.extend(resp(&["UNIQUE.UNLOCK".into(), key.clone(), "h".into()]));
        con.send_packed_command(&all).expect("send");
        let info: String =
            redis::from_redis_value(con.recv_response().expect("INFO")).expect("INFO text");
        assert_eq!(con.recv_response().expect("sleep"), Value::Okay);
        assert_eq!(con.recv_response().expect("unlock"), Value::Int(1));
        let mut reader = BufReader::new(waiter);
        reader
            .get_ref()
            .set_read_timeout(Some(common::patient()))
            .expect("timeout");
        let mut reply = String::new();
        let got = reader.read_line(&mut reply);
        assert!(got.is_ok(), "the waiter got no reply: {got:?}");
        if !info.lines().any(|l| l.trim() == "unique_waiting:1") {
            // Its WAIT ran out before the sleep: a nil, and the case again, longer.
            assert!(
                reply.starts_with("$-1") || reply.starts_with("*-1"),
                "{reply:?}"
            );
            eprintln!("a WAIT of {wait_ms} ms ran out before the DEBUG SLEEP came: again, longer");
            continue;
        }
        assert!(
            reply.starts_with(':') && reply.ends_with("\r\n"),
            "its token: {reply:?}"
        );
        assert_eq!(common::holders(&mut con, &key), ["w"], "and the lock");
        assert_eq!(int(&mut con, "timers_armed"), 0, "its deadline was stopped");
        return;
    }
    panic!("the waiter never stayed queued until the DEBUG SLEEP, even with a WAIT of 30 s");
}
