//! Every rule of UNIQUE.LOCK, UNIQUE.UNLOCK and UNIQUE.LOCKEDBY, over the wire
//! against a real redis-server with the freshly built module.

mod common;

use std::time::Duration;

use common::{Server, Value, field, holders, int, token, wait_for, with_meta};

fn bulk(s: &str) -> Value {
    Value::BulkString(s.as_bytes().to_vec())
}

fn pttl(con: &mut redis::Connection, key: &str) -> i64 {
    redis::cmd("PTTL").arg(key).query(con).expect("PTTL")
}

fn exists(con: &mut redis::Connection, key: &str) -> bool {
    redis::cmd("EXISTS")
        .arg(key)
        .query::<i64>(con)
        .expect("EXISTS")
        == 1
}

#[test]
fn lock_grants_a_token_and_creates_the_key() {
    let server = Server::start();
    let con = &mut server.con();
    let t = token(call!(con, "UNIQUE.LOCK", "k", "j1"));
    assert!(t > 0);
    assert_eq!(holders(con, "k"), ["j1"]);
    assert_eq!(
        call!(con, "TYPE", "k"),
        Ok(Value::SimpleString("uniq-lock".into()))
    );
    assert_eq!(pttl(con, "k"), -1, "no lease: the key does not expire");
}

#[test]
fn default_limit_is_one_and_a_denial_replies_nil_and_changes_nothing() {
    let server = Server::start();
    let con = &mut server.con();
    token(call!(con, "UNIQUE.LOCK", "k", "j1"));
    let before = call!(con, "DEBUG", "DIGEST-VALUE", "k");
    assert_eq!(call!(con, "UNIQUE.LOCK", "k", "j2"), Ok(Value::Nil));
    assert_eq!(call!(con, "DEBUG", "DIGEST-VALUE", "k"), before);
    assert_eq!(holders(con, "k"), ["j1"]);
}

#[test]
fn tokens_strictly_increase_across_keys() {
    let server = Server::start();
    let con = &mut server.con();
    let mut last = 0;
    for i in 0..200 {
        let t = token(call!(
            con,
            "UNIQUE.LOCK",
            format!("k{}", i % 7),
            format!("j{i}"),
            "LIMIT",
            0
        ));
        assert!(t > last, "token {t} after {last}");
        last = t;
    }
}

#[test]
fn renewal_keeps_token_and_acquired_at_and_sets_the_new_lease() {
    let server = Server::start();
    let con = &mut server.con();
    let t = token(call!(con, "UNIQUE.LOCK", "k", "j1", "TTL", 60_000));
    let acquired = int(field(&with_meta(con, "k")[0], "acquired_at"));
    // The holder renews even though the lock is full at LIMIT 1.
    assert_eq!(
        token(call!(con, "UNIQUE.LOCK", "k", "j1", "TTL", 120_000)),
        t
    );
    let h = &with_meta(con, "k")[0];
    assert_eq!(int(field(h, "acquired_at")), acquired);
    assert!(int(field(h, "ttl")) > 60_000);
    assert!(pttl(con, "k") > 60_000);
    // A renewal may shorten the lease, and the key's expiry follows.
    assert_eq!(token(call!(con, "UNIQUE.LOCK", "k", "j1", "TTL", 5_000)), t);
    assert!((1..=5_000).contains(&pttl(con, "k")));
    // PXAT sets an absolute end.
    let now = int(field(&with_meta(con, "k")[0], "acquired_at"));
    assert_eq!(
        token(call!(
            con,
            "UNIQUE.LOCK",
            "k",
            "j1",
            "PXAT",
            now + 3_600_000
        )),
        t
    );
    assert_eq!(
        int(field(&with_meta(con, "k")[0], "expires_at")),
        now + 3_600_000
    );
}

#[test]
fn renewal_replaces_what_is_given_and_keeps_the_rest() {
    let server = Server::start();
    let con = &mut server.con();
    call!(
        con,
        "UNIQUE.LOCK",
        "k",
        "j1",
        "TTL",
        60_000,
        "TYPE",
        "until_executed",
        "OWNER",
        "w1",
        "META",
        r#"{"q":1}"#
    )
    .expect("lock");
    let before = with_meta(con, "k");
    call!(con, "UNIQUE.LOCK", "k", "j1", "OWNER", "w2").expect("renew");
    let after = with_meta(con, "k");
    assert_eq!(field(&after[0], "owner"), bulk("w2"));
    for kept in ["token", "acquired_at", "expires_at", "type", "meta"] {
        assert_eq!(field(&after[0], kept), field(&before[0], kept), "{kept}");
    }
    call!(
        con,
        "UNIQUE.LOCK",
        "k",
        "j1",
        "TYPE",
        "while_executing",
        "META",
        r#"{"q":2}"#
    )
    .expect("renew");
    let after = with_meta(con, "k");
    assert_eq!(field(&after[0], "type"), bulk("while_executing"));
    assert_eq!(field(&after[0], "meta"), bulk(r#"{"q":2}"#));
    assert_eq!(field(&after[0], "owner"), bulk("w2"));
}

#[test]
fn limit_n_admits_n_holders_and_applies_to_the_call_that_gives_it() {
    let server = Server::start();
    let con = &mut server.con();
    for j in ["a", "b", "c"] {
        token(call!(con, "UNIQUE.LOCK", "k", j, "LIMIT", 3));
    }
    assert_eq!(
        call!(con, "UNIQUE.LOCK", "k", "d", "LIMIT", 3),
        Ok(Value::Nil)
    );
    assert_eq!(
        call!(con, "UNIQUE.LOCK", "k", "d"),
        Ok(Value::Nil),
        "default LIMIT 1"
    );
    token(call!(con, "UNIQUE.LOCK", "k", "d", "LIMIT", 4));
    assert_eq!(holders(con, "k"), ["a", "b", "c", "d"]);
    assert_eq!(call!(con, "UNIQUE.UNLOCK", "k", "b"), Ok(Value::Int(1)));
    token(call!(con, "UNIQUE.LOCK", "k", "e", "LIMIT", 4));
    assert_eq!(
        holders(con, "k"),
        ["a", "c", "d", "e"],
        "oldest grant first"
    );
}

#[test]
fn limit_zero_is_a_counting_lock() {
    let server = Server::start();
    let con = &mut server.con();
    for i in 0..500 {
        token(call!(con, "UNIQUE.LOCK", "k", format!("j{i}"), "LIMIT", 0));
    }
    assert_eq!(holders(con, "k").len(), 500);
    for i in 0..499 {
        assert_eq!(
            call!(con, "UNIQUE.UNLOCK", "k", format!("j{i}")),
            Ok(Value::Int(1))
        );
    }
    assert_eq!(holders(con, "k"), ["j499"]);
    assert_eq!(call!(con, "UNIQUE.UNLOCK", "k", "j499"), Ok(Value::Int(1)));
    assert!(!exists(con, "k"));
}

#[test]
fn an_expired_holder_is_invisible_and_frees_its_slot() {
    let server = Server::start();
    let con = &mut server.con();
    // One pipeline, one read on the server: the third LOCK meets the short
    // lease still running, however slow the machine is between commands.
    let replies: Vec<Value> = redis::pipe()
        .cmd("UNIQUE.LOCK")
        .arg(&["k", "short", "LIMIT", "2", "TTL", "300"])
        .cmd("UNIQUE.LOCK")
        .arg(&["k", "forever", "LIMIT", "2"])
        .cmd("UNIQUE.LOCK")
        .arg(&["k", "third", "LIMIT", "2"])
        .query(con)
        .expect("the pipeline");
    let t1 = token(Ok(replies[0].clone()));
    token(Ok(replies[1].clone()));
    assert_eq!(replies[2], Value::Nil, "full while the lease runs");
    wait_for("the lease to end", || holders(con, "k") == ["forever"]);
    assert_eq!(
        call!(con, "UNIQUE.UNLOCK", "k", "short"),
        Ok(Value::Int(0)),
        "an expired hold"
    );
    token(call!(con, "UNIQUE.LOCK", "k", "third", "LIMIT", 2));
    // The same jid after its lease ended is a new grant, with a new token.
    let t2 = token(call!(con, "UNIQUE.LOCK", "k", "short", "LIMIT", 0));
    assert!(t2 > t1);
}

#[test]
fn the_key_expires_with_its_latest_lease_or_not_at_all() {
    let server = Server::start();
    let con = &mut server.con();
    call!(con, "UNIQUE.LOCK", "k", "a", "LIMIT", 0, "TTL", 50_000).expect("lock");
    call!(con, "UNIQUE.LOCK", "k", "b", "LIMIT", 0, "TTL", 20_000).expect("lock");
    assert!((20_001..=50_000).contains(&pttl(con, "k")));
    call!(con, "UNIQUE.LOCK", "k", "c", "LIMIT", 0).expect("lock");
    assert_eq!(pttl(con, "k"), -1, "a holder without a lease keeps the key");
    call!(con, "UNIQUE.UNLOCK", "k", "c").expect("unlock");
    assert!((20_001..=50_000).contains(&pttl(con, "k")));
    call!(con, "UNIQUE.UNLOCK", "k", "a").expect("unlock");
    assert!((1..=20_000).contains(&pttl(con, "k")));
    // When every lease has run out, Redis itself deletes the key.
    call!(con, "UNIQUE.LOCK", "gone", "a", "TTL", 20).expect("lock");
    wait_for("Redis to expire the key", || !exists(con, "gone"));
}

/// A command's `now` is the time Redis takes as it starts a command and
/// keeps for all it runs (Redis 7.2 and later, Valkey): the commands of a
/// MULTI/EXEC see the instant EXEC began, however long it runs, as SET PX in
/// it does. Redis 7.0 does not share that time with modules: there each
/// command reads the clock.
#[test]
fn a_transaction_sees_one_instant_where_the_server_shares_its_command_time() {
    let server = Server::start();
    let con = &mut server.con();
    let replies: Vec<Value> = redis::pipe()
        .atomic()
        .cmd("UNIQUE.LOCK")
        .arg(&["{t}first", "a", "TTL", "60000"])
        .cmd("DEBUG")
        .arg(&["SLEEP", "0.01"])
        .cmd("UNIQUE.LOCK")
        .arg(&["{t}second", "b", "TTL", "60000"])
        .cmd("SET")
        .arg(&["{t}set", "v", "PX", "60000"])
        .query(con)
        .expect("MULTI/EXEC");
    assert_eq!(replies.len(), 4);
    let at = |con: &mut redis::Connection, key: &str| -> i64 {
        redis::cmd("PEXPIRETIME")
            .arg(key)
            .query(con)
            .expect("PEXPIRETIME")
    };
    let (first, second, set) = (at(con, "{t}first"), at(con, "{t}second"), at(con, "{t}set"));
    let version = common::redis_version(con);
    if version.starts_with("7.0.") {
        assert!(
            second >= first + 10,
            "{version}, the clock read per command: {first} {second}"
        );
    } else {
        assert_eq!(
            (first, second),
            (set, set),
            "{version}: one instant for the transaction"
        );
    }
}

#[test]
fn a_crashed_jobs_lock_frees_itself_when_the_lease_ends() {
    let server = Server::start();
    let con = &mut server.con();
    // The next call in the same pipeline: it sees the lock held however late
    // the loaded machine would run a command sent after the reply.
    let replies: Vec<Value> = redis::pipe()
        .cmd("UNIQUE.LOCK")
        .arg(&["user:1", "crashed", "TTL", "1000"])
        .cmd("UNIQUE.LOCK")
        .arg(&["user:1", "next"])
        .query(con)
        .expect("the pipeline");
    token(Ok(replies[0].clone()));
    assert_eq!(replies[1], Value::Nil);
    wait_for("the lease to end", || {
        matches!(
            call!(con, "UNIQUE.LOCK", "user:1", "next"),
            Ok(Value::Int(_))
        )
    });
    assert_eq!(holders(con, "user:1"), ["next"]);
}

#[test]
fn unlock_replies_one_only_for_a_live_holder() {
    let server = Server::start();
    let con = &mut server.con();
    assert_eq!(
        call!(con, "UNIQUE.UNLOCK", "missing", "j"),
        Ok(Value::Int(0))
    );
    call!(con, "UNIQUE.LOCK", "k", "a", "LIMIT", 0).expect("lock");
    call!(con, "UNIQUE.LOCK", "k", "b", "LIMIT", 0).expect("lock");
    assert_eq!(call!(con, "UNIQUE.UNLOCK", "k", "other"), Ok(Value::Int(0)));
    assert_eq!(call!(con, "UNIQUE.UNLOCK", "k", "a"), Ok(Value::Int(1)));
    assert_eq!(
        call!(con, "UNIQUE.UNLOCK", "k", "a"),
        Ok(Value::Int(0)),
        "twice"
    );
    assert!(exists(con, "k"), "b still holds");
    assert_eq!(call!(con, "UNIQUE.UNLOCK", "k", "b"), Ok(Value::Int(1)));
    assert!(!exists(con, "k"), "the key goes with its last holder");
    assert!(!exists(con, "missing"), "UNLOCK creates nothing");
}

#[test]
fn lockedby_of_a_missing_key_is_empty() {
    let server = Server::start();
    let con = &mut server.con();
    assert_eq!(
        call!(con, "UNIQUE.LOCKEDBY", "nope"),
        Ok(Value::Array(vec![]))
    );
    assert_eq!(
        call!(con, "UNIQUE.LOCKEDBY", "nope", "withmeta"),
        Ok(Value::Array(vec![]))
    );
    assert!(!exists(con, "nope"));
}

#[test]
fn lockedby_withmeta_gives_every_field_in_order_on_resp2() {
    let server = Server::start();
    let con = &mut server.con();
    let t1 = token(call!(
        con,
        "UNIQUE.LOCK",
        "k",
        "j1",
        "LIMIT",
        0,
        "TTL",
        60_000,
        "TYPE",
        "until_executed",
        "OWNER",
        "host:1",
        "META",
        r#"{"class":"Sync"}"#
    ));
    let t2 = token(call!(con, "UNIQUE.LOCK", "k", "j2", "LIMIT", 0));
    let list = with_meta(con, "k");
    assert_eq!(list.len(), 2);
    let names: Vec<&str> = list[0].iter().map(|(k, _)| k.as_str()).collect();
    assert_eq!(
        names,
        [
            "jid",
            "token",
            "acquired_at",
            "expires_at",
            "ttl",
            "type",
            "owner",
            "meta",
            "group",
            "mode"
        ]
    );
    let first = &list[0];
    assert_eq!(field(first, "jid"), bulk("j1"));
    assert_eq!(int(field(first, "token")), t1);
    let acquired = int(field(first, "acquired_at"));
    assert_eq!(int(field(first, "expires_at")), acquired + 60_000);
    assert!((1..=60_000).contains(&int(field(first, "ttl"))));
    assert_eq!(field(first, "type"), bulk("until_executed"));
    assert_eq!(field(first, "owner"), bulk("host:1"));
    assert_eq!(field(first, "meta"), bulk(r#"{"class":"Sync"}"#));
    let second = &list[1];
    assert_eq!(int(field(second, "token")), t2);
    assert_eq!(int(field(second, "expires_at")), -1);
    assert_eq!(int(field(second, "ttl")), -1);
    assert_eq!(field(second, "type"), bulk("lock"));
    assert_eq!(field(second, "owner"), Value::Nil);
    assert_eq!(field(second, "meta"), Value::Nil);
    assert_eq!(field(second, "group"), Value::Nil);
    assert_eq!(field(second, "mode"), Value::Nil);
}

#[test]
fn lockedby_withmeta_is_a_map_on_resp3() {
    let server = Server::start();
    let con = &mut server.con3();
    token(call!(con, "UNIQUE.LOCK", "k", "j1", "OWNER", "w"));
    let Ok(Value::Array(list)) = call!(con, "UNIQUE.LOCKEDBY", "k", "WITHMETA") else {
        panic!("an array of holders");
    };
    let [Value::Map(pairs)] = list.as_slice() else {
        panic!("one map: {list:?}")
    };
    let names: Vec<Value> = pairs.iter().map(|(k, _)| k.clone()).collect();
    let expected: Vec<Value> = [
        "jid",
        "token",
        "acquired_at",
        "expires_at",
        "ttl",
        "type",
        "owner",
        "meta",
        "group",
        "mode",
    ]
    .map(bulk)
    .to_vec();
    assert_eq!(names, expected);
    assert_eq!(pairs[0].1, bulk("j1"));
    assert_eq!(pairs[6].1, bulk("w"));
    assert_eq!(pairs[7].1, Value::Nil);
}

#[test]
fn jids_are_binary_safe_up_to_1024_bytes() {
    let server = Server::start();
    let con = &mut server.con();
    let binary: &[u8] = b"job\x00id\xff\r\n";
    token(call!(con, "UNIQUE.LOCK", "k", binary, "LIMIT", 0));
    let jids: Vec<Vec<u8>> = redis::cmd("UNIQUE.LOCKEDBY")
        .arg("k")
        .query(con)
        .expect("LOCKEDBY");
    assert_eq!(jids, [binary.to_vec()]);
    token(call!(con, "UNIQUE.LOCK", "k", "x".repeat(1024), "LIMIT", 0));
    assert_eq!(
        call!(con, "UNIQUE.LOCK", "k", "x".repeat(1025), "LIMIT", 0),
        Err("ERR jid must be 1 to 1024 bytes".into())
    );
    assert_eq!(
        call!(con, "UNIQUE.LOCK", "k", "", "LIMIT", 0),
        Err("ERR jid must be 1 to 1024 bytes".into())
    );
    assert_eq!(call!(con, "UNIQUE.UNLOCK", "k", binary), Ok(Value::Int(1)));
}

/// Sidekiq's jids, RQ's ids and UUIDs are kept in half their bytes: every
/// read gives them back as sent, before and after a reload, on a key of one
/// holder and on one of many; a jid of another spelling stays another jid.
#[test]
fn job_system_ids_read_back_as_sent() {
    let server = Server::start();
    let con = &mut server.con();
    let ids = [
        "2c34d9a1b2c3d4e5f6a7b8c9",
        "0f4d6e2a9b8c47d1a3e5f60718293a4b",
        "8f14e45f-ceea-467a-9575-1f5e0e0c1b2d",
        "8F14E45F-CEEA-467A-9575-1F5E0E0C1B2D",
    ];
    for (i, id) in ids.iter().enumerate() {
        token(call!(
            con,
            "UNIQUE.LOCK",
            format!("one:{i}"),
            id,
            "TTL",
            60_000
        ));
    }
    let many: Vec<String> = (0..40)
        .map(|n| format!("{n:024x}"))
        .chain((0..40).map(|n| format!("{n:08x}-0000-4000-8000-{n:012x}")))
        .collect();
    let tokens: Vec<i64> = many
        .iter()
        .map(|id| {
            token(call!(
                con,
                "UNIQUE.LOCK",
                "many",
                id,
                "LIMIT",
                0,
                "TTL",
                60_000
            ))
        })
        .collect();
    let check = |con: &mut redis::Connection| {
        for (i, id) in ids.iter().enumerate() {
            assert_eq!(holders(con, &format!("one:{i}")), [*id]);
        }
        assert_eq!(holders(con, "many"), many);
        // A renewal finds each by its jid.
        for (id, t) in many.iter().zip(&tokens) {
            let renewed = call!(con, "UNIQUE.LOCK", "many", id, "LIMIT", 0, "TTL", 60_000);
            assert_eq!(token(renewed), *t);
        }
    };
    check(con);
    call!(con, "DEBUG", "RELOAD").expect("DEBUG RELOAD");
    check(con);
    // The same UUID in capitals is another jid.
    assert_eq!(
        call!(con, "UNIQUE.UNLOCK", "one:2", ids[3]),
        Ok(Value::Int(0))
    );
    assert_eq!(
        call!(con, "UNIQUE.UNLOCK", "one:2", ids[2]),
        Ok(Value::Int(1))
    );
    assert_eq!(
        call!(con, "UNIQUE.UNLOCK", "one:3", ids[3]),
        Ok(Value::Int(1))
    );
}

#[test]
fn options_are_case_insensitive_and_in_any_order() {
    let server = Server::start();
    let con = &mut server.con();
    token(call!(
        con,
        "unique.lock",
        "k",
        "j1",
        "meta",
        "{}",
        "owner",
        "w",
        "ttl",
        60_000,
        "type",
        "t",
        "limit",
        0
    ));
    token(call!(
        con,
        "UNIQUE.LOCK",
        "k",
        "j2",
        "LiMiT",
        0,
        "PxAt",
        4_000_000_000_000_i64
    ));
    let list = with_meta(con, "k");
    assert_eq!(field(&list[0], "type"), bulk("t"));
    assert_eq!(int(field(&list[1], "expires_at")), 4_000_000_000_000);
}

/// Each bad call gets its exact error and creates nothing.
#[test]
fn errors_are_exact_and_leave_nothing_behind() {
    let server = Server::start();
    let con = &mut server.con();
    let syntax = Err("ERR syntax error".to_string());
    let integer = Err("ERR value is not an integer or out of range".to_string());
    let expire = Err("ERR invalid expire time in 'unique.lock' command".to_string());
    let wait = Err(
        "ERR invalid wait time in 'unique.lock' command (WAIT takes a positive number of ms)"
            .to_string(),
    );
    let number_for_option = Err(
        "ERR syntax error: a number where an option name belongs (TTL ms? WAIT ms? LIMIT n?)"
            .to_string(),
    );
    type Case = (Vec<Vec<u8>>, Result<Value, String>);
    let cases: Vec<Case> = vec![
        (args(&["NOPE", "1"]), syntax.clone()),
        (args(&["LIMIT"]), syntax.clone()),
        (args(&["LIMIT", "1", "LIMIT", "1"]), syntax.clone()),
        (
            args(&["TTL", "10", "PXAT", "99999999999999"]),
            syntax.clone(),
        ),
        (args(&["TTL", "10", "TTL", "10"]), syntax.clone()),
        (args(&["LIMIT", "-1"]), integer.clone()),
        (args(&["LIMIT", "2147483648"]), integer.clone()),
        (args(&["LIMIT", "ten"]), integer.clone()),
        (args(&["TTL", "1.5"]), integer.clone()),
        (args(&["TTL", "99999999999999999999"]), integer.clone()),
        (args(&["PXAT", "later"]), integer.clone()),
        (args(&["TTL", "0"]), expire.clone()),
        (args(&["TTL", "-5"]), expire.clone()),
        (args(&["TTL", "9223372036854775807"]), expire.clone()),
        (args(&["PXAT", "1"]), expire.clone()),
        (args(&["PXAT", "-1"]), expire.clone()),
        (
            args(&["TYPE", "has space"]),
            Err("ERR TYPE must be 1 to 64 characters of [A-Za-z0-9_:.-]".into()),
        ),
        (
            args(&["TYPE", &"t".repeat(65)]),
            Err("ERR TYPE must be 1 to 64 characters of [A-Za-z0-9_:.-]".into()),
        ),
        (
            args(&["OWNER", ""]),
            Err("ERR OWNER must be 1 to 1024 bytes".into()),
        ),
        (
            args(&["META", "[1,2]"]),
            Err("ERR META must be a JSON object".into()),
        ),
        (
            args(&["META", "{not json"]),
            Err("ERR META must be a JSON object".into()),
        ),
        (args(&["WAIT", "0"]), wait.clone()),
        (args(&["WAIT", "-5"]), wait.clone()),
        (args(&["3600000"]), number_for_option.clone()),
        (args(&["TTL", "100", "60000"]), number_for_option.clone()),
        (args(&["WAIT", "soon"]), integer.clone()),
    ];
    for (options, expected) in cases {
        let mut cmd = redis::cmd("UNIQUE.LOCK");
        cmd.arg("k").arg("j").arg(&options);
        let got = common::run(&cmd, con);
        assert_eq!(
            got,
            expected,
            "options {:?}",
            options
                .iter()
                .map(|o| String::from_utf8_lossy(o))
                .collect::<Vec<_>>()
        );
        assert!(!exists(con, "k"), "a failed call created the key");
    }
    assert_eq!(
        call!(con, "UNIQUE.LOCK", "k"),
        Err("ERR wrong number of arguments for 'unique.lock' command".into())
    );
    assert_eq!(
        call!(con, "UNIQUE.UNLOCK", "k"),
        Err("ERR wrong number of arguments for 'unique.unlock' command".into())
    );
    // UNLOCK's only option is TOKEN t: anything else after the jid is an
    // unknown option.
    assert_eq!(
        call!(con, "UNIQUE.UNLOCK", "k", "j", "extra"),
        Err("ERR syntax error".into())
    );
    assert_eq!(
        call!(con, "UNIQUE.LOCKEDBY"),
        Err("ERR wrong number of arguments for 'unique.lockedby' command".into())
    );
    assert_eq!(call!(con, "UNIQUE.LOCKEDBY", "k", "WITHOUT"), syntax);
    // A repeated or extra option is a syntax error, as for every command.
    assert_eq!(call!(con, "UNIQUE.LOCKEDBY", "k", "WITHMETA", "x"), syntax);
    assert_eq!(
        call!(con, "UNIQUE.LOCKEDBY", "k", "WITHMETA", "WITHMETA"),
        syntax
    );
    assert!(!exists(con, "k"));
}

fn args(a: &[&str]) -> Vec<Vec<u8>> {
    a.iter().map(|s| s.as_bytes().to_vec()).collect()
}

#[test]
fn a_failed_renewal_changes_nothing() {
    let server = Server::start();
    let con = &mut server.con();
    call!(con, "UNIQUE.LOCK", "k", "j", "TTL", 60_000, "OWNER", "w1").expect("lock");
    let before = call!(con, "DEBUG", "DIGEST-VALUE", "k");
    assert!(call!(con, "UNIQUE.LOCK", "k", "j", "OWNER", "w2", "TTL", 0).is_err());
    assert!(call!(con, "UNIQUE.LOCK", "k", "j", "OWNER", "w2", "META", "[]").is_err());
    assert_eq!(call!(con, "DEBUG", "DIGEST-VALUE", "k"), before);
}

#[test]
fn meta_size_follows_the_configuration() {
    let server = Server::start_with(&["--unique.max-meta-bytes", "20"]);
    let con = &mut server.con();
    let meta = r#"{"k":"0123456789abc"}"#; // 21 bytes
    assert_eq!(
        call!(con, "UNIQUE.LOCK", "k", "j", "META", meta),
        Err("ERR META is larger than unique.max-meta-bytes (20)".into())
    );
    call!(con, "CONFIG", "SET", "unique.max-meta-bytes", 21).expect("CONFIG SET");
    token(call!(con, "UNIQUE.LOCK", "k", "j", "META", meta));
    assert!(
        call!(con, "CONFIG", "SET", "unique.max-meta-bytes", 1_048_577).is_err(),
        "range enforced"
    );
    assert!(
        call!(con, "CONFIG", "SET", "unique.max-meta-bytes", -1).is_err(),
        "range enforced"
    );
    let got: Vec<String> = redis::cmd("CONFIG")
        .arg("GET")
        .arg("unique.max-meta-bytes")
        .query(con)
        .expect("GET");
    assert_eq!(got, ["unique.max-meta-bytes", "21"]);
}

#[test]
fn wrongtype_both_ways() {
    let server = Server::start();
    let con = &mut server.con();
    call!(con, "SET", "str", "v").expect("SET");
    let wrongtype =
        Err("WRONGTYPE Operation against a key holding the wrong kind of value".to_string());
    assert_eq!(call!(con, "UNIQUE.LOCK", "str", "j"), wrongtype);
    assert_eq!(call!(con, "UNIQUE.UNLOCK", "str", "j"), wrongtype);
    assert_eq!(call!(con, "UNIQUE.LOCKEDBY", "str"), wrongtype);
    assert_eq!(call!(con, "GET", "str"), Ok(bulk("v")), "untouched");
    token(call!(con, "UNIQUE.LOCK", "lock", "j"));
    assert_eq!(call!(con, "GET", "lock"), wrongtype);
    assert_eq!(call!(con, "HGET", "lock", "f"), wrongtype);
    assert_eq!(call!(con, "LPUSH", "lock", "x"), wrongtype);
    assert_eq!(holders(con, "lock"), ["j"]);
}

#[test]
fn commands_declare_flags_and_key_positions() {
    let server = Server::start();
    let con = &mut server.con();
    let keys: Vec<String> = redis::cmd("COMMAND")
        .arg("GETKEYS")
        .arg("UNIQUE.LOCK")
        .arg("jobs:1")
        .arg("j")
        .arg("TTL")
        .arg(5)
        .query(con)
        .expect("GETKEYS");
    assert_eq!(keys, ["jobs:1"]);
    for (cmd, flags) in [
        ("unique.lock", &["write", "denyoom", "fast"][..]),
        ("unique.unlock", &["write", "fast"]),
        ("unique.lockedby", &["readonly", "fast"]),
    ] {
        let Ok(Value::Array(info)) = call!(con, "COMMAND", "INFO", cmd) else {
            panic!("COMMAND INFO")
        };
        let Some(Value::Array(entry)) = info.first() else {
            panic!("{cmd} is known: {info:?}")
        };
        let Some(Value::Array(got)) = entry.get(2) else {
            panic!("flags of {cmd}")
        };
        let got: Vec<String> = got
            .iter()
            .map(|f| match f {
                Value::SimpleString(s) => s.clone(),
                Value::BulkString(b) => String::from_utf8_lossy(b).into_owned(),
                other => format!("{other:?}"),
            })
            .collect();
        for flag in flags {
            assert!(got.iter().any(|g| g == flag), "{cmd} lacks {flag}: {got:?}");
        }
        assert_eq!(entry.get(3), Some(&Value::Int(1)), "{cmd}: first key");
        assert_eq!(entry.get(4), Some(&Value::Int(1)), "{cmd}: last key");
    }
}

#[test]
fn acl_key_patterns_apply() {
    let server = Server::start();
    let con = &mut server.con();
    call!(
        con,
        "ACL",
        "SETUSER",
        "worker",
        "on",
        ">pw",
        "~jobs:*",
        "+unique.lock",
        "+unique.unlock",
        "+unique.lockedby"
    )
    .expect("ACL SETUSER");
    call!(con, "AUTH", "worker", "pw").expect("AUTH");
    token(call!(con, "UNIQUE.LOCK", "jobs:1", "j"));
    let denied = call!(con, "UNIQUE.LOCK", "other:1", "j");
    assert!(
        matches!(&denied, Err(e) if e.starts_with("NOPERM")),
        "{denied:?}"
    );
}

#[test]
fn lock_is_refused_under_maxmemory_while_unlock_works() {
    let server = Server::start();
    let con = &mut server.con();
    token(call!(con, "UNIQUE.LOCK", "k", "j"));
    call!(con, "CONFIG", "SET", "maxmemory", 1).expect("CONFIG SET");
    let oom = call!(con, "UNIQUE.LOCK", "k2", "j");
    assert!(matches!(&oom, Err(e) if e.starts_with("OOM")), "{oom:?}");
    assert_eq!(call!(con, "UNIQUE.UNLOCK", "k", "j"), Ok(Value::Int(1)));
    assert!(
        call!(con, "UNIQUE.REAP", 0).is_ok(),
        "REAP is not refused either"
    );
    assert_eq!(call!(con, "UNIQUE.LOCKEDBY", "k"), Ok(Value::Array(vec![])));
    call!(con, "CONFIG", "SET", "maxmemory", 0).expect("CONFIG SET");
}

#[test]
fn clients_cannot_send_the_internal_effect_command() {
    let server = Server::start();
    let con = &mut server.con();
    let refused = call!(
        con,
        "UNIQUE.APPLY",
        "k",
        0,
        "HOLD",
        "j",
        1,
        1,
        -1,
        "lock",
        "",
        ""
    );
    assert!(
        matches!(&refused, Err(e) if e.starts_with("ERR UNIQUE.APPLY is internal")),
        "{refused:?}"
    );
    assert!(!exists(con, "k"));
}

#[test]
fn keyspace_events_for_new_holders_and_releases() {
    let server = Server::start_with(&["--notify-keyspace-events", "Kd"]);
    let con = &mut server.con();
    let mut sub = server.con();
    let mut pubsub = sub.as_pubsub();
    pubsub.psubscribe("__keyspace@0__:*").expect("PSUBSCRIBE");
    pubsub
        .set_read_timeout(Some(Duration::from_secs(5)))
        .expect("timeout");
    token(call!(con, "UNIQUE.LOCK", "k", "j1", "LIMIT", 0));
    token(call!(con, "UNIQUE.LOCK", "k", "j1", "TTL", 60_000)); // a renewal: no event
    assert_eq!(call!(con, "UNIQUE.LOCK", "k", "j2"), Ok(Value::Nil)); // a denial: no event
    assert_eq!(
        call!(con, "UNIQUE.UNLOCK", "k", "nobody"),
        Ok(Value::Int(0))
    ); // nothing removed: no event
    assert_eq!(call!(con, "UNIQUE.UNLOCK", "k", "j1"), Ok(Value::Int(1)));
    let mut events = Vec::new();
    for _ in 0..2 {
        let msg = pubsub.get_message().expect("an event");
        events.push((
            msg.get_channel_name().to_string(),
            msg.get_payload::<String>().expect("payload"),
        ));
    }
    assert_eq!(
        events,
        [
            ("__keyspace@0__:k".to_string(), "unique.lock".to_string()),
            ("__keyspace@0__:k".to_string(), "unique.unlock".to_string())
        ]
    );
}

#[test]
fn memory_usage_copy_dump_and_restore_work_on_locks() {
    let server = Server::start();
    let con = &mut server.con();
    call!(
        con,
        "UNIQUE.LOCK",
        "k",
        "j1",
        "LIMIT",
        0,
        "TTL",
        60_000,
        "OWNER",
        "w",
        "META",
        r#"{"a":1}"#
    )
    .expect("lock");
    call!(con, "UNIQUE.LOCK", "k", "j2", "LIMIT", 0, "TTL", 30_000).expect("lock");
    let usage: i64 = redis::cmd("MEMORY")
        .arg("USAGE")
        .arg("k")
        .query(con)
        .expect("MEMORY USAGE");
    assert!(usage > 100, "{usage}");
    call!(con, "COPY", "k", "k2").expect("COPY");
    let stable = |list: Vec<Vec<(String, Value)>>| -> Vec<Vec<(String, Value)>> {
        list.into_iter()
            .map(|h| h.into_iter().filter(|(k, _)| k != "ttl").collect())
            .collect()
    };
    assert_eq!(stable(with_meta(con, "k2")), stable(with_meta(con, "k")));
    let dump: Vec<u8> = redis::cmd("DUMP").arg("k").query(con).expect("DUMP");
    let pttl_before = pttl(con, "k");
    call!(con, "RESTORE", "k3", 0, dump.clone()).expect("RESTORE");
    assert_eq!(with_meta(con, "k3").len(), 2);
    let (a, b) = (with_meta(con, "k"), with_meta(con, "k3"));
    for (ha, hb) in a.iter().zip(&b) {
        for f in [
            "jid",
            "token",
            "acquired_at",
            "expires_at",
            "type",
            "owner",
            "meta",
        ] {
            assert_eq!(field(ha, f), field(hb, f), "{f}");
        }
    }
    // RESTORE with the key's absolute expiry.
    let at: i64 = redis::cmd("PEXPIRETIME")
        .arg("k")
        .query(con)
        .expect("PEXPIRETIME");
    call!(con, "RESTORE", "k4", at, dump, "ABSTTL").expect("RESTORE ABSTTL");
    assert!(pttl(con, "k4") <= pttl_before);
    // A truncated payload is refused, and the server keeps serving.
    let dump: Vec<u8> = redis::cmd("DUMP").arg("k").query(con).expect("DUMP");
    assert!(call!(con, "RESTORE", "bad", 0, dump[..dump.len() / 2].to_vec()).is_err());
    assert!(!exists(con, "bad"));
    assert_eq!(call!(con, "PING"), Ok(Value::SimpleString("PONG".into())));
}

/// A lock of many holders (indexed past a few dozen) keeps every rule of a
/// small one, and LOCKEDBY pages through it.
#[test]
fn a_lock_of_many_holders_keeps_the_rules_and_pages() {
    let server = Server::start();
    let con = &mut server.con();
    let n = 2_000;
    let mut pipe = redis::pipe();
    for i in 0..n {
        pipe.cmd("UNIQUE.LOCK")
            .arg("big")
            .arg(format!("j{i}"))
            .arg("LIMIT")
            .arg(n);
        if i % 2 == 0 {
            pipe.arg("TTL").arg(600_000);
        }
    }
    let _: Vec<i64> = pipe.query(con).expect("fill");
    let first = token(call!(con, "UNIQUE.LOCK", "big", "j0", "LIMIT", n));
    assert_eq!(
        call!(con, "UNIQUE.LOCK", "big", "new", "LIMIT", n),
        Ok(Value::Nil)
    );
    assert_eq!(pttl(con, "big"), -1, "holders without a lease keep the key");
    let all = holders(con, "big");
    assert_eq!(all.len(), n);
    assert_eq!(all.first().map(String::as_str), Some("j0"), "grant order");
    assert_eq!(
        all.last().map(|s| s.to_string()),
        Some(format!("j{}", n - 1))
    );
    let mut seen = Vec::new();
    let mut cursor = "0".to_string();
    loop {
        let Ok(Value::Array(reply)) = call!(
            con,
            "UNIQUE.LOCKEDBY",
            "big",
            "CURSOR",
            &cursor,
            "COUNT",
            150
        ) else {
            panic!("a page");
        };
        let [Value::BulkString(next), Value::Array(page)] = reply.as_slice() else {
            panic!("cursor and page: {reply:?}");
        };
        assert!(page.len() <= 150);
        seen.extend(page.iter().map(|v| match v {
            Value::BulkString(b) => String::from_utf8_lossy(b).into_owned(),
            other => panic!("{other:?}"),
        }));
        cursor = String::from_utf8_lossy(next).into_owned();
        if cursor == "0" {
            break;
        }
    }
    seen.sort();
    let mut expected = all.clone();
    expected.sort();
    assert_eq!(seen, expected, "every holder once");
    // Releasing every holder without a lease leaves the latest lease as the key's expiry.
    for i in (1..n).step_by(2) {
        assert_eq!(
            call!(con, "UNIQUE.UNLOCK", "big", format!("j{i}")),
            Ok(Value::Int(1))
        );
    }
    assert!(pttl(con, "big") > 590_000);
    assert_eq!(
        token(call!(con, "UNIQUE.LOCK", "big", "j0", "LIMIT", n)),
        first
    );
    assert_eq!(holders(con, "big").len(), n / 2);
}
