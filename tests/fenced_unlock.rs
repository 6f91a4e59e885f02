//! UNLOCK and UNLOCKALL with TOKEN: a fenced release frees a jid's hold only
//! when it has the token named, so a late unlock of an older hold leaves a
//! newer hold of the same jid alone; replicas and the AOF end with the
//! primary's data.

mod common;

use common::{Rng, Server, Value, holders, token, wait_digests_equal, wait_for};

fn tokens(reply: Result<Value, String>) -> Vec<i64> {
    match reply {
        Ok(Value::Array(items)) => items
            .into_iter()
            .map(|v| match v {
                Value::Int(t) => t,
                other => panic!("a token: {other:?}"),
            })
            .collect(),
        other => panic!("LOCKALL's tokens: {other:?}"),
    }
}

#[test]
fn an_old_token_frees_nothing_of_the_jids_new_hold() {
    let server = Server::start();
    let con = &mut server.con();
    let old = token(call!(con, "UNIQUE.LOCK", "k", "job-4", "TTL", 60_000));
    assert_eq!(call!(con, "UNIQUE.UNLOCK", "k", "job-4"), Ok(Value::Int(1)));
    // The same jid again (a retried job): a new hold, a new token.
    let new = token(call!(con, "UNIQUE.LOCK", "k", "job-4", "TTL", 60_000));
    assert!(new > old);
    assert_eq!(
        call!(con, "UNIQUE.UNLOCK", "k", "job-4", "TOKEN", old),
        Ok(Value::Int(0)),
        "a late unlock of the first hold"
    );
    assert_eq!(holders(con, "k"), ["job-4"], "the new hold is kept");
    // Another jid's token never frees this jid's hold, nor its own on a key
    // it does not hold.
    let other = token(call!(con, "UNIQUE.LOCK", "k", "job-5", "LIMIT", 2));
    assert_eq!(
        call!(con, "UNIQUE.UNLOCK", "k", "job-4", "TOKEN", other),
        Ok(Value::Int(0))
    );
    assert_eq!(
        call!(con, "UNIQUE.UNLOCK", "nothing", "job-4", "TOKEN", new),
        Ok(Value::Int(0))
    );
    assert_eq!(
        call!(con, "UNIQUE.UNLOCK", "k", "job-4", "token", new),
        Ok(Value::Int(1)),
        "the keyword in any case"
    );
    assert_eq!(holders(con, "k"), ["job-5"]);
    assert_eq!(
        call!(con, "UNIQUE.UNLOCK", "k", "job-4", "TOKEN", new),
        Ok(Value::Int(0)),
        "a hold already released"
    );
    // The metrics count a refused token as an unlock that removed nothing.
    let metrics = common::metrics_json(con, &[]);
    assert_eq!(metrics["total"]["released"], 2, "{metrics}");
    assert_eq!(metrics["total"]["unlock_missed"], 4, "{metrics}");
}

#[test]
fn a_fenced_unlock_of_an_ended_lease_releases_nothing_and_deletes_the_key() {
    let server = Server::start();
    let con = &mut server.con();
    let t = token(call!(con, "UNIQUE.LOCK", "k", "j", "TTL", 30));
    wait_for("the lease to end", || {
        call!(con, "UNIQUE.LOCKEDBY", "k") == Ok(Value::Array(vec![]))
    });
    assert_eq!(
        call!(con, "UNIQUE.UNLOCK", "k", "j", "TOKEN", t),
        Ok(Value::Int(0))
    );
    assert_eq!(call!(con, "EXISTS", "k"), Ok(Value::Int(0)));
}

#[test]
fn bad_tokens_and_options_are_refused_with_their_errors() {
    let server = Server::start();
    let con = &mut server.con();
    let t = token(call!(con, "UNIQUE.LOCK", "k", "j"));
    let token_error =
        "ERR TOKEN must be the hold's fencing token: an integer from 1 to 9223372036854775807";
    for bad in ["soon", "0", "-5", "1.5", "", "9223372036854775808"] {
        assert_eq!(
            call!(con, "UNIQUE.UNLOCK", "k", "j", "TOKEN", bad),
            Err(token_error.to_string()),
            "{bad:?}"
        );
    }
    let syntax = Err("ERR syntax error".to_string());
    assert_eq!(call!(con, "UNIQUE.UNLOCK", "k", "j", "TOKEN"), syntax);
    assert_eq!(call!(con, "UNIQUE.UNLOCK", "k", "j", "FENCE", t), syntax);
    assert_eq!(
        call!(con, "UNIQUE.UNLOCK", "k", "j", "TOKEN", t, "TOKEN", t),
        syntax
    );
    assert_eq!(holders(con, "k"), ["j"], "no refused call changed anything");

    tokens(call!(con, "UNIQUE.LOCKALL", 2, "{a}1", "{a}2", "j"));
    let per_key = "ERR syntax error: TOKEN takes one value per key, in key order (TOKEN t [t ...])";
    assert_eq!(
        call!(con, "UNIQUE.UNLOCKALL", 2, "{a}1", "{a}2", "j", "TOKEN", t),
        Err(per_key.to_string())
    );
    assert_eq!(
        call!(
            con,
            "UNIQUE.UNLOCKALL",
            2,
            "{a}1",
            "{a}2",
            "j",
            "TOKEN",
            t,
            t,
            t
        ),
        Err(per_key.to_string())
    );
    assert_eq!(
        call!(
            con,
            "UNIQUE.UNLOCKALL",
            2,
            "{a}1",
            "{a}2",
            "j",
            "TOKEN",
            t,
            "x"
        ),
        Err(token_error.to_string())
    );
    assert_eq!(
        call!(
            con,
            "UNIQUE.UNLOCKALL",
            2,
            "{a}1",
            "{a}2",
            "j",
            "TOKENS",
            t,
            t
        ),
        syntax
    );
    assert_eq!(holders(con, "{a}1"), ["j"]);
    assert_eq!(holders(con, "{a}2"), ["j"]);
}

#[test]
fn unlockall_releases_each_key_whose_hold_has_its_token() {
    let server = Server::start();
    let con = &mut server.con();
    let keys = ["{t}a", "{t}b", "{t}c"];
    let first = tokens(call!(
        con,
        "UNIQUE.LOCKALL",
        3,
        keys[0],
        keys[1],
        keys[2],
        "j"
    ));
    // Key b lost and granted again: its hold now has another token.
    assert_eq!(call!(con, "UNIQUE.UNLOCK", keys[1], "j"), Ok(Value::Int(1)));
    let b = token(call!(con, "UNIQUE.LOCK", keys[1], "j"));
    assert!(b > first[1]);
    assert_eq!(
        call!(
            con,
            "UNIQUE.UNLOCKALL",
            3,
            keys[0],
            keys[1],
            keys[2],
            "j",
            "TOKEN",
            first[0],
            first[1],
            first[2]
        ),
        Ok(Value::Int(2)),
        "a and c released, b's newer hold kept"
    );
    assert_eq!(holders(con, keys[0]), Vec::<String>::new());
    assert_eq!(holders(con, keys[1]), ["j"]);
    assert_eq!(
        call!(con, "UNIQUE.UNLOCKALL", 1, keys[1], "j", "TOKEN", b),
        Ok(Value::Int(1))
    );
    assert_eq!(call!(con, "EXISTS", keys[1]), Ok(Value::Int(0)));
}

/// A workload of grants, short leases and fenced unlocks of right, old and
/// foreign tokens, on one key and several: the replica ends with the
/// primary's data; the effect of a fenced UNLOCKALL carries its tokens.
#[test]
fn fenced_unlocks_replicate_exactly() {
    let primary = Server::start_with(&["--appendonly", "yes", "--appendfsync", "always"]);
    let replica = primary.start_replica(&[]);
    let (p, r) = (&mut primary.con(), &mut replica.con());
    let mut rng = Rng(0x7013_fe4c_e0ff_0001);
    // The tokens seen per (key, jid): the newest and an older one.
    let mut seen: std::collections::HashMap<(String, String), Vec<i64>> = Default::default();
    let (mut released, mut kept) = (0, 0);
    for _ in 0..3_000 {
        let key = format!("{{w}}:{}", rng.below(6));
        let jid = format!("job:{}", rng.below(5));
        match rng.below(10) {
            0..=3 => {
                let ttl = if rng.below(2) == 0 {
                    1 + rng.below(20)
                } else {
                    600_000
                };
                if let Ok(Value::Int(t)) =
                    call!(p, "UNIQUE.LOCK", &key, &jid, "LIMIT", 3, "TTL", ttl)
                {
                    seen.entry((key, jid)).or_default().push(t);
                }
            }
            4..=6 => {
                let known = seen.get(&(key.clone(), jid.clone()));
                let t = match known {
                    Some(ts) => ts[rng.below(ts.len() as u64) as usize],
                    None => 1 + rng.below(1000) as i64,
                };
                match call!(p, "UNIQUE.UNLOCK", &key, &jid, "TOKEN", t) {
                    Ok(Value::Int(1)) => released += 1,
                    Ok(Value::Int(0)) => kept += 1,
                    other => panic!("UNLOCK TOKEN: {other:?}"),
                }
            }
            _ => {
                let keys = ["{w}:0", "{w}:1", "{w}:2"];
                if rng.below(2) == 0 {
                    let ttl = 1 + rng.below(30);
                    let _ = call!(
                        p,
                        "UNIQUE.LOCKALL",
                        3,
                        keys[0],
                        keys[1],
                        keys[2],
                        &jid,
                        "LIMIT",
                        3,
                        3,
                        3,
                        "TTL",
                        ttl
                    );
                    continue;
                }
                let mut cmd = redis::cmd("UNIQUE.UNLOCKALL");
                cmd.arg(3).arg(&keys[..]).arg(&jid).arg("TOKEN");
                for key in keys {
                    // The key's current token of the jid, or an old one.
                    let t = common::with_meta(p, key)
                        .iter()
                        .find(|h| common::field(h, "jid") == Value::BulkString(jid.clone().into()))
                        .map(|h| common::int(common::field(h, "token")))
                        .filter(|_| rng.below(3) != 0)
                        .unwrap_or(1 + rng.below(1000) as i64);
                    cmd.arg(t);
                }
                match common::run(&cmd, p) {
                    Ok(Value::Int(n)) if (0..=3).contains(&n) => {
                        released += n;
                        kept += 3 - n;
                    }
                    other => panic!("UNLOCKALL TOKEN: {other:?}"),
                }
            }
        }
    }
    assert!(
        released > 200 && kept > 200,
        "both outcomes: {released} released, {kept} kept"
    );
    wait_digests_equal(p, r);

    let effects = common::aof_effects(&primary.dir);
    assert!(
        effects.iter().any(|c| {
            c.iter().any(|a| a.as_slice() == b"RELEASEALL")
                && c.iter().any(|a| a.as_slice() == b"TOKEN")
        }),
        "a fenced UNLOCKALL's effect carries its tokens"
    );
}
