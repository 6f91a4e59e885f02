//! The background reaper at a short interval over many keys: every expired
//! holder goes, every live one stays. Under `make test-valgrind` this is the
//! run that shows whether the reaper's scan loses memory (redis-module
//! 2.0.8's KeysCursor, which it used before, kept every key name it visited).

mod common;

use std::time::Duration;

use common::{Connection, Server, info_field, wait_until};

fn int(con: &mut Connection, name: &str) -> i64 {
    info_field(con, "unique", &format!("unique_{name}"))
}

#[test]
fn the_reaper_walks_many_keys_at_a_short_interval() {
    const LOCKS: usize = 3_000;
    const VISITS: i64 = 30_000;
    let server = Server::start_with(&["--unique.reap-interval", "0"]);
    let con = &mut server.con();
    let mut pipe = redis::pipe();
    for i in 0..LOCKS {
        let key = format!("lock:{i}");
        pipe.cmd("UNIQUE.LOCK")
            .arg(&key)
            .arg("live")
            .arg("LIMIT")
            .arg(0)
            .ignore();
        pipe.cmd("UNIQUE.LOCK")
            .arg(&key)
            .arg("dead")
            .arg("LIMIT")
            .arg(0)
            .arg("TTL")
            .arg(1)
            .ignore();
    }
    pipe.query::<()>(con).expect("LOCKs");
    let scanned_before = int(con, "reaper_keys_scanned");
    call!(con, "CONFIG", "SET", "unique.reap-batch", 200).expect("CONFIG SET");
    call!(con, "CONFIG", "SET", "unique.reap-interval", 1).expect("CONFIG SET");
    let limit = Duration::from_secs(30) * common::patience();
    wait_until(limit, "the walks and the expired holders gone", || {
        int(con, "reaper_keys_scanned") - scanned_before >= VISITS
            && int(con, "holders") == LOCKS as i64
    });
    call!(con, "CONFIG", "SET", "unique.reap-interval", 0).expect("CONFIG SET");
    assert_eq!(int(con, "locks"), LOCKS as i64);
    assert_eq!(
        int(con, "expired"),
        LOCKS as i64,
        "every dead holder reaped"
    );
}
