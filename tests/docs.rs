//! The commands describe themselves to Redis: COMMAND DOCS equals
//! the table in src/docs.rs, which also produces the argument
//! reference in docs/commands.md; COMMAND INFO has the real arity and key
//! specs, so Redis answers short calls itself, COMMAND GETKEYSANDFLAGS knows
//! the keys and ACL read/write key permissions apply.
//!
//! `UPDATE_DOCS=1 cargo test --test docs` rewrites the reference in
//! docs/commands.md from the table.

mod common;

// The table is plain data with no dependency on the module, included by path
// so that this test does not link the module (and its Redis allocator).
#[allow(dead_code)]
#[path = "../src/docs.rs"]
mod docs;

use std::collections::BTreeMap;

use common::{Server, Value, token};
use docs::{Arg, ArgType, COMMANDS, CommandDoc};

const BEGIN: &str = "<!-- command-docs:begin (generated from src/docs.rs) -->\n";
const END: &str = "<!-- command-docs:end -->";

#[test]
fn the_reference_in_docs_commands_md_is_the_table() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/commands.md");
    let text = std::fs::read_to_string(&path).expect("docs/commands.md");
    let start = text.find(BEGIN).expect("the begin marker") + BEGIN.len();
    let end = text.find(END).expect("the end marker");
    let generated = format!("\n{}", docs::markdown());
    if std::env::var_os("UPDATE_DOCS").is_some() {
        let updated = format!("{}{generated}{}", &text[..start], &text[end..]);
        std::fs::write(&path, updated).expect("write docs/commands.md");
        return;
    }
    assert!(
        text[start..end] == generated,
        "docs/commands.md's argument reference differs from src/docs.rs; \
         run `UPDATE_DOCS=1 cargo test --test docs` and review the diff"
    );
    // Each command's section opens with its synopsis.
    for cmd in COMMANDS {
        let synopsis = docs::synopsis(cmd);
        assert!(text.contains(&synopsis), "{synopsis}");
    }
}

/// A reply as plain data: maps keyed by string, in any order.
#[derive(Debug, PartialEq, Eq, Clone)]
enum Doc {
    Str(String),
    Int(i64),
    List(Vec<Doc>),
    Map(BTreeMap<String, Doc>),
}

fn doc(v: &Value) -> Doc {
    match v {
        Value::BulkString(b) => Doc::Str(String::from_utf8_lossy(b).into_owned()),
        Value::SimpleString(s) => Doc::Str(s.clone()),
        Value::Int(n) => Doc::Int(*n),
        Value::Array(items) | Value::Set(items) => Doc::List(items.iter().map(doc).collect()),
        Value::Map(pairs) => Doc::Map(
            pairs
                .iter()
                .map(|(k, v)| match doc(k) {
                    Doc::Str(k) => (k, doc(v)),
                    other => panic!("a map key that is not a string: {other:?}"),
                })
                .collect(),
        ),
        other => panic!("unexpected in COMMAND DOCS: {other:?}"),
    }
}

fn s(text: &str) -> Doc {
    Doc::Str(text.to_string())
}

/// What COMMAND DOCS should say of `arg`. `display_text` is left out: only
/// Redis 7.2 and later report it, and `strip_display_text` checks it.
fn expected_arg(arg: &Arg) -> Doc {
    let mut m = BTreeMap::new();
    m.insert("name".into(), s(arg.name));
    m.insert("type".into(), s(arg.kind.name()));
    if let ArgType::Key(i) = arg.kind {
        m.insert("key_spec_index".into(), Doc::Int(i64::from(i)));
    }
    if let Some(t) = arg.token {
        m.insert("token".into(), s(t));
    }
    if !arg.summary.is_empty() {
        m.insert("summary".into(), s(arg.summary));
    }
    let flags = arg.flag_names();
    if !flags.is_empty() {
        m.insert(
            "flags".into(),
            Doc::List(flags.into_iter().map(s).collect()),
        );
    }
    if matches!(arg.kind, ArgType::OneOf | ArgType::Block) {
        m.insert(
            "arguments".into(),
            Doc::List(arg.subargs.iter().map(expected_arg).collect()),
        );
    }
    Doc::Map(m)
}

fn expected_docs(cmd: &CommandDoc) -> Doc {
    let mut m = BTreeMap::new();
    m.insert("summary".into(), s(cmd.summary));
    m.insert("since".into(), s(cmd.since));
    m.insert("group".into(), s("module"));
    m.insert("complexity".into(), s(cmd.complexity));
    m.insert("module".into(), s("unique"));
    m.insert(
        "arguments".into(),
        Doc::List(cmd.args.iter().map(expected_arg).collect()),
    );
    Doc::Map(m)
}

/// Removes `display_text` from the server's arguments after checking it is
/// the table's placeholder (Redis 7.2+, Valkey); returns how many it saw.
fn strip_display_text(got: &mut Doc, args: &[Arg]) -> usize {
    let Doc::List(items) = got else {
        panic!("arguments: {got:?}")
    };
    assert_eq!(items.len(), args.len(), "{items:?}");
    let mut seen = 0;
    for (item, arg) in items.iter_mut().zip(args) {
        let Doc::Map(m) = item else {
            panic!("an argument: {item:?}")
        };
        if let Some(text) = m.remove("display_text") {
            assert_eq!(text, s(arg.display.unwrap_or(arg.name)), "{}", arg.name);
            seen += 1;
        }
        if let Some(sub) = m.get_mut("arguments") {
            seen += strip_display_text(sub, arg.subargs);
        }
    }
    seen
}

#[test]
fn command_docs_give_the_whole_reference() {
    let server = Server::start();
    let con = &mut server.con3();
    let mut display_texts = 0;
    for cmd in COMMANDS {
        let reply = common::run(redis::cmd("COMMAND").arg("DOCS").arg(cmd.name), con)
            .expect("COMMAND DOCS");
        let Doc::Map(mut all) = doc(&reply) else {
            panic!("COMMAND DOCS is a map: {reply:?}")
        };
        let mut got = all.remove(cmd.name).expect("the command's entry");
        if let Doc::Map(m) = &mut got
            && let Some(args) = m.get_mut("arguments")
        {
            display_texts += strip_display_text(args, cmd.args);
        }
        assert_eq!(got, expected_docs(cmd), "{}", cmd.name);
    }
    // Redis 7.0 does not report display_text; 7.2 and later (and Valkey)
    // report it for every argument that is not a oneof or a block.
    let version = common::redis_version(&mut server.con());
    if version.starts_with("7.0.") {
        assert_eq!(display_texts, 0);
    } else {
        assert!(display_texts > 10, "{version}: {display_texts}");
    }
}

#[test]
fn the_internal_command_has_no_docs() {
    let server = Server::start();
    let con = &mut server.con3();
    let reply = common::run(redis::cmd("COMMAND").arg("DOCS").arg("unique.apply"), con)
        .expect("COMMAND DOCS");
    let Doc::Map(mut all) = doc(&reply) else {
        panic!("{reply:?}")
    };
    let Some(Doc::Map(apply)) = all.remove("unique.apply") else {
        panic!("unique.apply is listed (no API hides a command)")
    };
    assert_eq!(
        apply.keys().collect::<Vec<_>>(),
        ["group", "module"],
        "{apply:?}"
    );
    assert_eq!(
        call!(&mut server.con(), "UNIQUE.APPLY", "k", "0", "PRUNE")
            .map_err(|e| e.starts_with("ERR UNIQUE.APPLY is internal")),
        Err(true)
    );
}

/// COMMAND INFO `name` as its fields: [name, arity, flags, first, last,
/// step, acl categories, tips, key specs, subcommands].
fn command_info(con: &mut common::Connection, name: &str) -> Vec<Value> {
    match call!(con, "COMMAND", "INFO", name) {
        Ok(Value::Array(mut entries)) => match entries.pop() {
            Some(Value::Array(fields)) => fields,
            other => panic!("{name}: {other:?}"),
        },
        other => panic!("{name}: {other:?}"),
    }
}

#[test]
fn command_info_has_the_arity_tips_and_key_specs() {
    let server = Server::start();
    let con = &mut server.con3();
    for cmd in COMMANDS {
        let info = command_info(con, cmd.name);
        assert_eq!(
            info.get(1),
            Some(&Value::Int(cmd.arity.into())),
            "{}",
            cmd.name
        );
        // Keys after their count have no legacy range (as EVAL's).
        let range = match cmd.key_specs.first() {
            Some(spec) if !spec.counted => 1,
            _ => 0,
        };
        assert_eq!(
            info.get(3..6),
            Some(&[Value::Int(range), Value::Int(range), Value::Int(range)][..]),
            "{}: first, last, step",
            cmd.name
        );
        let tips = match info.get(7).map(doc) {
            Some(Doc::List(tips)) => tips,
            other => panic!("{}: tips {other:?}", cmd.name),
        };
        let want: Vec<Doc> = cmd.tips.split_whitespace().map(s).collect();
        assert_eq!(tips, want, "{}: tips", cmd.name);
        let Some(Doc::List(specs)) = info.get(8).map(doc) else {
            panic!("{}: key specs {:?}", cmd.name, info.get(8))
        };
        assert_eq!(specs.len(), cmd.key_specs.len(), "{}", cmd.name);
        for (got, want) in specs.iter().zip(cmd.key_specs) {
            let Doc::Map(got) = got else {
                panic!("{got:?}")
            };
            let flags: Vec<Doc> = want.flags.iter().map(|f| s(f.name())).collect();
            assert_eq!(got.get("flags"), Some(&Doc::List(flags)), "{}", cmd.name);
            let Some(Doc::Map(bs)) = got.get("begin_search") else {
                panic!("{got:?}")
            };
            assert_eq!(bs.get("type"), Some(&s("index")));
            let mut index = BTreeMap::new();
            index.insert("index".to_string(), Doc::Int(want.index.into()));
            assert_eq!(bs.get("spec"), Some(&Doc::Map(index)));
        }
    }
}

#[test]
fn getkeysandflags_names_the_key_and_what_the_command_does_to_it() {
    let server = Server::start();
    let con = &mut server.con();
    for (args, flags) in [
        (
            &["UNIQUE.LOCK", "jobs:1", "j", "TTL", "10"][..],
            &["RW", "update"][..],
        ),
        (&["UNIQUE.UNLOCK", "jobs:1", "j"], &["RW", "delete"]),
        (
            &["UNIQUE.LOCKEDBY", "jobs:1", "WITHMETA"],
            &["RO", "access"],
        ),
    ] {
        let reply = common::run(redis::cmd("COMMAND").arg("GETKEYSANDFLAGS").arg(args), con);
        let want = Value::Array(vec![Value::Array(vec![
            Value::BulkString(b"jobs:1".to_vec()),
            Value::Array(
                flags
                    .iter()
                    .map(|f| Value::SimpleString(f.to_string()))
                    .collect(),
            ),
        ])]);
        assert_eq!(reply.map(|r| doc(&r)), Ok(doc(&want)), "{args:?}");
        let keys = common::run(redis::cmd("COMMAND").arg("GETKEYS").arg(args), con);
        assert_eq!(
            keys,
            Ok(Value::Array(vec![Value::BulkString(b"jobs:1".to_vec())]))
        );
    }
    // No key: Redis says so.
    let none = common::run(
        redis::cmd("COMMAND")
            .arg("GETKEYSANDFLAGS")
            .arg(&["UNIQUE.REAP", "0"]),
        con,
    );
    assert!(none.is_err(), "{none:?}");
}

#[test]
fn redis_itself_answers_short_calls_with_the_arity_error() {
    let server = Server::start();
    let con = &mut server.con();
    // (UNLOCK takes TOKEN t after the jid: a call longer than `key jid` is
    // the module's to answer, a syntax error; see tests/fenced_unlock.rs.)
    let calls: [&[&str]; 4] = [
        &["UNIQUE.LOCK"],
        &["UNIQUE.LOCK", "k"],
        &["UNIQUE.UNLOCK", "k"],
        &["UNIQUE.LOCKEDBY"],
    ];
    for args in calls.into_iter().chain([&["UNIQUE.REAP"][..]]) {
        let name = args[0].to_ascii_lowercase();
        let arity_error = format!("ERR wrong number of arguments for '{name}' command");
        let mut cmd = redis::cmd(args[0]);
        cmd.arg(&args[1..]);
        assert_eq!(common::run(&cmd, con), Err(arity_error.clone()), "{args:?}");
        // Inside MULTI, Redis checks the arity as it queues the call (the
        // module would only see it at EXEC): the transaction is refused.
        call!(con, "MULTI").expect("MULTI");
        assert_eq!(common::run(&cmd, con), Err(arity_error), "{args:?} queued");
        let exec = call!(con, "EXEC");
        assert!(
            matches!(&exec, Err(e) if e.starts_with("EXECABORT")),
            "{args:?}: {exec:?}"
        );
    }
    // Calls of the right length still get the module's own checks.
    assert_eq!(
        call!(con, "UNIQUE.LOCKEDBY", "k", "WITHMETA", "x"),
        Err("ERR syntax error".into())
    );
    assert_eq!(
        call!(con, "UNIQUE.LOCK", "k", "j", "LIMIT"),
        Err("ERR syntax error".into())
    );
}

#[test]
fn acl_read_and_write_key_permissions_follow_the_key_specs() {
    let server = Server::start();
    let admin = &mut server.con();
    for (user, keys) in [("reader", "%R~jobs:*"), ("writer", "%W~jobs:*")] {
        call!(
            admin,
            "ACL",
            "SETUSER",
            user,
            "on",
            ">pw",
            keys,
            "+unique.lock",
            "+unique.unlock",
            "+unique.lockedby"
        )
        .expect("ACL SETUSER");
    }
    token(call!(admin, "UNIQUE.LOCK", "jobs:1", "j0", "LIMIT", 0));
    let denied = |r: Result<Value, String>| matches!(&r, Err(e) if e.starts_with("NOPERM"));

    let reader = &mut server.con();
    call!(reader, "AUTH", "reader", "pw").expect("AUTH");
    assert!(call!(reader, "UNIQUE.LOCKEDBY", "jobs:1").is_ok());
    assert!(denied(call!(reader, "UNIQUE.LOCK", "jobs:1", "j1")));
    assert!(denied(call!(reader, "UNIQUE.UNLOCK", "jobs:1", "j0")));

    // Write permission is enough to take and release a lock (as for SETNX
    // or DEL); reading its holders needs read permission.
    let writer = &mut server.con();
    call!(writer, "AUTH", "writer", "pw").expect("AUTH");
    token(call!(writer, "UNIQUE.LOCK", "jobs:1", "j1", "LIMIT", 0));
    assert_eq!(
        call!(writer, "UNIQUE.UNLOCK", "jobs:1", "j1"),
        Ok(Value::Int(1))
    );
    assert!(denied(call!(writer, "UNIQUE.LOCKEDBY", "jobs:1")));
    assert!(denied(call!(writer, "UNIQUE.LOCK", "other:1", "j1")));
}
