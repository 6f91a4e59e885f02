//! GROUP, GROUPLIMIT and MODE on grants that do not wait: the rules of a
//! new grant, renewal across groups and modes, what LOCKEDBY WITHMETA and
//! WAITERS GROUPS show, and the effect replicas get.

mod common;

use common::{Connection, Server, Value, digest, holders, token, wait_for};

fn bulk(s: &str) -> Value {
    Value::BulkString(s.as_bytes().to_vec())
}

/// One field of `jid`'s holder of `key`.
fn field_of(con: &mut Connection, key: &str, jid: &str, name: &str) -> Value {
    let holders = common::with_meta(con, key);
    let holder = holders
        .iter()
        .find(|h| common::field(h, "jid") == bulk(jid))
        .unwrap_or_else(|| panic!("{jid} does not hold {key}"));
    common::field(holder, name)
}

#[test]
fn grouplimit_caps_a_group_and_leaves_the_others_the_rest() {
    let server = Server::start();
    let con = &mut server.con();
    let lock = |con: &mut Connection, jid: &str, group: &str| {
        call!(
            con,
            "UNIQUE.LOCK",
            "api",
            jid,
            "LIMIT",
            "4",
            "GROUP",
            group,
            "GROUPLIMIT",
            "2"
        )
    };
    token(lock(con, "a1", "A"));
    token(lock(con, "a2", "A"));
    assert_eq!(lock(con, "a3", "A"), Ok(Value::Nil), "A holds its 2");
    token(lock(con, "b1", "B"));
    token(lock(con, "b2", "B"));
    assert_eq!(lock(con, "c1", "C"), Ok(Value::Nil), "LIMIT 4 is full");
    assert_eq!(holders(con, "api"), ["a1", "a2", "b1", "b2"]);
    assert_eq!(field_of(con, "api", "a1", "group"), bulk("A"));
    assert_eq!(field_of(con, "api", "b2", "mode"), Value::Nil);
    // Without GROUPLIMIT a grouped call only meets LIMIT.
    call!(con, "UNIQUE.UNLOCK", "api", "b2").expect("unlock");
    token(call!(
        con,
        "UNIQUE.LOCK",
        "api",
        "a3",
        "LIMIT",
        "4",
        "GROUP",
        "A"
    ));
}

#[test]
fn arguments_are_checked() {
    let server = Server::start();
    let con = &mut server.con();
    for (args, error) in [
        (
            &["WEIGHT", "2"][..],
            "ERR syntax error: WEIGHT and GROUPLIMIT need GROUP name",
        ),
        (
            &["GROUPLIMIT", "2"],
            "ERR syntax error: WEIGHT and GROUPLIMIT need GROUP name",
        ),
        (&["GROUP", ""], "ERR GROUP must be 1 to 1024 bytes"),
        (
            &["GROUP", "g", "WEIGHT", "0"],
            "ERR value is not an integer or out of range",
        ),
        (
            &["GROUP", "g", "WEIGHT", "1001"],
            "ERR value is not an integer or out of range",
        ),
        (
            &["GROUP", "g", "GROUPLIMIT", "0"],
            "ERR value is not an integer or out of range",
        ),
        (&["MODE", "read"], "ERR MODE must be shared or exclusive"),
        (&["MODE", "shared", "MODE", "shared"], "ERR syntax error"),
        (&["GROUP", "a", "GROUP", "b"], "ERR syntax error"),
    ] {
        let mut cmd = redis::cmd("UNIQUE.LOCK");
        cmd.arg("k").arg("j").arg(args);
        assert_eq!(common::run(&cmd, con), Err(error.to_string()), "{args:?}");
    }
    let long = "g".repeat(1025);
    assert_eq!(
        call!(con, "UNIQUE.LOCK", "k", "j", "GROUP", &long),
        Err("ERR GROUP must be 1 to 1024 bytes".to_string())
    );
    // Any order and case, as every option.
    token(call!(
        con,
        "UNIQUE.LOCK",
        "k",
        "j",
        "mode",
        "EXCLUSIVE",
        "grouplimit",
        "1",
        "weight",
        "1000",
        "group",
        "g"
    ));
    assert_eq!(field_of(con, "k", "j", "mode"), bulk("exclusive"));
    assert_eq!(
        call!(con, "UNIQUE.WAITERS", "k", "NOPE"),
        Err("ERR syntax error".into())
    );
}

#[test]
fn a_renewal_keeps_its_group_and_refuses_another() {
    let server = Server::start();
    let con = &mut server.con();
    let t = token(call!(
        con,
        "UNIQUE.LOCK",
        "k",
        "j",
        "GROUP",
        "tenant-1",
        "TTL",
        "10000"
    ));
    assert_eq!(
        token(call!(con, "UNIQUE.LOCK", "k", "j", "TTL", "20000")),
        t
    );
    assert_eq!(field_of(con, "k", "j", "group"), bulk("tenant-1"));
    assert_eq!(
        token(call!(
            con,
            "UNIQUE.LOCK",
            "k",
            "j",
            "GROUP",
            "tenant-1",
            "META",
            "{}"
        )),
        t
    );
    assert_eq!(field_of(con, "k", "j", "group"), bulk("tenant-1"));
    assert_eq!(field_of(con, "k", "j", "meta"), bulk("{}"));
    assert_eq!(
        call!(con, "UNIQUE.LOCK", "k", "j", "GROUP", "tenant-2"),
        Err(
            "ERR the jid already holds this lock for another GROUP (a renewal keeps its group)"
                .into()
        )
    );
    // A holder without a group renews without one only.
    token(call!(con, "UNIQUE.LOCK", "k2", "j"));
    assert!(call!(con, "UNIQUE.LOCK", "k2", "j", "GROUP", "x").is_err());
    assert_eq!(field_of(con, "k2", "j", "group"), Value::Nil);
}

#[test]
fn a_writer_holds_alone_and_readers_share() {
    let server = Server::start();
    let con = &mut server.con();
    let read = |con: &mut Connection, jid: &str| {
        call!(
            con,
            "UNIQUE.LOCK",
            "doc",
            jid,
            "LIMIT",
            "3",
            "MODE",
            "shared"
        )
    };
    let write = |con: &mut Connection, jid: &str| {
        call!(
            con,
            "UNIQUE.LOCK",
            "doc",
            jid,
            "LIMIT",
            "3",
            "MODE",
            "exclusive"
        )
    };
    token(read(con, "r1"));
    token(read(con, "r2"));
    assert_eq!(write(con, "w"), Ok(Value::Nil), "readers hold");
    token(read(con, "r3"));
    assert_eq!(read(con, "r4"), Ok(Value::Nil), "LIMIT 3");
    for r in ["r1", "r2", "r3"] {
        call!(con, "UNIQUE.UNLOCK", "doc", r).expect("unlock");
    }
    token(write(con, "w"));
    assert_eq!(read(con, "r1"), Ok(Value::Nil), "a writer holds alone");
    assert_eq!(write(con, "w2"), Ok(Value::Nil));
    // A call without MODE counts as shared: not beside a writer, even under
    // a large LIMIT.
    assert_eq!(
        call!(con, "UNIQUE.LOCK", "doc", "plain", "LIMIT", "0"),
        Ok(Value::Nil)
    );
    assert_eq!(field_of(con, "doc", "w", "mode"), bulk("exclusive"));
    // A writer whatever LIMIT says: alone even with LIMIT 0 (no limit).
    call!(con, "UNIQUE.UNLOCK", "doc", "w").expect("unlock");
    token(call!(con, "UNIQUE.LOCK", "doc", "plain", "LIMIT", "0"));
    assert_eq!(
        call!(
            con,
            "UNIQUE.LOCK",
            "doc",
            "w",
            "LIMIT",
            "0",
            "MODE",
            "exclusive"
        ),
        Ok(Value::Nil)
    );
}

#[test]
fn downgrade_and_upgrade_by_renewal() {
    let server = Server::start();
    let con = &mut server.con();
    let t = token(call!(
        con,
        "UNIQUE.LOCK",
        "doc",
        "w",
        "LIMIT",
        "5",
        "MODE",
        "exclusive",
        "TTL",
        "60000"
    ));
    assert_eq!(
        call!(
            con,
            "UNIQUE.LOCK",
            "doc",
            "r",
            "LIMIT",
            "5",
            "MODE",
            "shared"
        ),
        Ok(Value::Nil)
    );
    // A renewal without MODE keeps it.
    assert_eq!(
        token(call!(con, "UNIQUE.LOCK", "doc", "w", "TTL", "60000")),
        t
    );
    assert_eq!(field_of(con, "doc", "w", "mode"), bulk("exclusive"));
    // Downgrade: the same token, now shared; a reader gets in.
    assert_eq!(
        token(call!(con, "UNIQUE.LOCK", "doc", "w", "MODE", "shared")),
        t
    );
    assert_eq!(field_of(con, "doc", "w", "mode"), bulk("shared"));
    token(call!(
        con,
        "UNIQUE.LOCK",
        "doc",
        "r",
        "LIMIT",
        "5",
        "MODE",
        "shared"
    ));
    // Upgrade refused while another holds, even with WAIT (never waits):
    // nil at once and the hold unchanged.
    let before = field_of(con, "doc", "w", "expires_at");
    assert_eq!(
        call!(
            con,
            "UNIQUE.LOCK",
            "doc",
            "w",
            "MODE",
            "exclusive",
            "TTL",
            "1000",
            "WAIT",
            "60000"
        ),
        Ok(Value::Nil)
    );
    assert_eq!(field_of(con, "doc", "w", "mode"), bulk("shared"));
    assert_eq!(field_of(con, "doc", "w", "expires_at"), before);
    assert_eq!(
        common::int(call!(con, "UNIQUE.WAITERS", "doc").expect("waiters")),
        0
    );
    // The sole holder upgrades.
    call!(con, "UNIQUE.UNLOCK", "doc", "r").expect("unlock");
    assert_eq!(
        token(call!(con, "UNIQUE.LOCK", "doc", "w", "MODE", "exclusive")),
        t
    );
    assert_eq!(field_of(con, "doc", "w", "mode"), bulk("exclusive"));
}

#[test]
fn waiters_groups_counts_waiting_and_holding_per_group() {
    let server = Server::start();
    let con = &mut server.con();
    assert_eq!(
        call!(con, "UNIQUE.WAITERS", "none", "GROUPS"),
        Ok(Value::Array(vec![]))
    );
    token(call!(
        con,
        "UNIQUE.LOCK",
        "k",
        "a1",
        "LIMIT",
        "3",
        "GROUP",
        "b-tenant"
    ));
    token(call!(
        con,
        "UNIQUE.LOCK",
        "k",
        "a2",
        "LIMIT",
        "3",
        "GROUP",
        "a-tenant"
    ));
    token(call!(con, "UNIQUE.LOCK", "k", "a3", "LIMIT", "3"));
    let row = |g: Value, w: i64, h: i64| {
        Value::Array(vec![
            bulk("group"),
            g,
            bulk("waiting"),
            Value::Int(w),
            bulk("holding"),
            Value::Int(h),
        ])
    };
    assert_eq!(
        call!(con, "UNIQUE.WAITERS", "k", "groups"),
        Ok(Value::Array(vec![
            row(Value::Nil, 0, 1),
            row(bulk("a-tenant"), 0, 1),
            row(bulk("b-tenant"), 0, 1),
        ]))
    );
    // One waiting in a group of its own.
    let mut other = server.con();
    let waiter = std::thread::spawn(move || {
        call!(
            &mut other,
            "UNIQUE.LOCK",
            "k",
            "c1",
            "LIMIT",
            "3",
            "GROUP",
            "c",
            "WAIT",
            "60000"
        )
    });
    wait_for("the waiter", || {
        call!(con, "UNIQUE.WAITERS", "k") == Ok(Value::Int(1))
    });
    assert_eq!(
        call!(con, "UNIQUE.WAITERS", "k", "GROUPS"),
        Ok(Value::Array(vec![
            row(Value::Nil, 0, 1),
            row(bulk("a-tenant"), 0, 1),
            row(bulk("b-tenant"), 0, 1),
            row(bulk("c"), 1, 0),
        ]))
    );
    call!(con, "UNIQUE.UNLOCK", "k", "a3").expect("unlock");
    token(waiter.join().expect("waiter"));
    assert_eq!(field_of(con, "k", "c1", "group"), bulk("c"));
}

#[test]
fn replicas_get_group_and_mode_exactly() {
    let primary = Server::start();
    let replica = primary.start_replica(&[]);
    let con = &mut primary.con();
    token(call!(
        con,
        "UNIQUE.LOCK",
        "k",
        "a",
        "LIMIT",
        "5",
        "GROUP",
        "t\u{0}1",
        "GROUPLIMIT",
        "2",
        "MODE",
        "shared",
        "TTL",
        "60000"
    ));
    token(call!(
        con,
        "UNIQUE.LOCK",
        "k",
        "b",
        "LIMIT",
        "5",
        "GROUP",
        "t2"
    ));
    token(call!(con, "UNIQUE.LOCK", "w", "x", "MODE", "exclusive"));
    token(call!(con, "UNIQUE.LOCK", "w", "x", "MODE", "shared"));
    token(call!(con, "UNIQUE.LOCK", "plain", "p"));
    replica.wait_in_sync();
    let rcon = &mut replica.con();
    wait_for("the replica's data", || digest(rcon) == digest(con));
    assert_eq!(field_of(rcon, "k", "a", "group"), bulk("t\u{0}1"));
    assert_eq!(field_of(rcon, "k", "a", "mode"), bulk("shared"));
    assert_eq!(field_of(rcon, "w", "x", "mode"), bulk("shared"));
    assert_eq!(field_of(rcon, "plain", "p", "group"), Value::Nil);
    assert_eq!(field_of(rcon, "plain", "p", "mode"), Value::Nil);
}

/// DUMP/RESTORE and COPY keep group and mode, and the copies have the
/// original's DEBUG DIGEST-VALUE (the digest is the encoding, group and
/// mode included: codec's tests).
#[test]
fn dump_restore_copy_and_digest_carry_group_and_mode() {
    let server = Server::start_with(&["--enable-debug-command", "yes"]);
    let con = &mut server.con();
    token(call!(
        con,
        "UNIQUE.LOCK",
        "k",
        "a",
        "LIMIT",
        "0",
        "GROUP",
        "t1",
        "MODE",
        "shared",
        "TTL",
        "600000"
    ));
    token(call!(
        con,
        "UNIQUE.LOCK",
        "k",
        "b",
        "LIMIT",
        "0",
        "GROUP",
        "t2"
    ));
    let dump = match call!(con, "DUMP", "k") {
        Ok(Value::BulkString(b)) => b,
        other => panic!("DUMP: {other:?}"),
    };
    call!(con, "RESTORE", "copy", 0, dump).expect("RESTORE");
    call!(con, "COPY", "k", "copied").expect("COPY");
    let strip_ttl = |con: &mut Connection, key: &str| -> Vec<Vec<(String, Value)>> {
        common::with_meta(con, key)
            .into_iter()
            .map(|h| h.into_iter().filter(|(k, _)| k != "ttl").collect())
            .collect()
    };
    let original = strip_ttl(con, "k");
    assert_eq!(strip_ttl(con, "copy"), original);
    assert_eq!(strip_ttl(con, "copied"), original);
    assert_eq!(field_of(con, "copy", "a", "group"), bulk("t1"));
    assert_eq!(field_of(con, "copy", "a", "mode"), bulk("shared"));
    let digest_of = |con: &mut Connection, key: &str| -> Value {
        call!(con, "DEBUG", "DIGEST-VALUE", key).expect("DIGEST-VALUE")
    };
    assert_eq!(digest_of(con, "copy"), digest_of(con, "k"));
}
