//! ACL users on the server under test (`REDIS_SERVER`): REAP frees nothing
//! outside its caller's keys, each command is in the ACL categories
//! docs/operations.md gives it where the server has categories (and in
//! none on Redis 7.0, as documented there), and the recipes of
//! docs/operations.md, run line for line, let each role do exactly what it
//! needs.

mod common;

use std::path::Path;
use std::time::Duration;

use common::{Connection, Server, Value, server_time_ms, token, wait_until};

/// A connection as `user`.
fn con_as(server: &Server, user: &str, password: &str) -> Connection {
    let url = format!("redis://{user}:{password}@127.0.0.1:{}/", server.port);
    redis::Client::open(url)
        .and_then(|c| c.get_connection_with_timeout(Duration::from_secs(5)))
        .unwrap_or_else(|e| panic!("connect as {user}: {e}"))
}

fn run(con: &mut Connection, args: &[&str]) -> Result<Value, String> {
    let mut cmd = redis::cmd(args[0]);
    cmd.arg(&args[1..]);
    common::run(&cmd, con)
}

fn setuser(con: &mut Connection, line: &str) {
    let args: Vec<&str> = line.split_whitespace().collect();
    let reply = run(con, &args);
    assert_eq!(reply, Ok(Value::Okay), "{line}");
}

fn refused(reply: &Result<Value, String>) -> bool {
    matches!(reply, Err(e) if e.starts_with("NOPERM"))
}

/// `REAP cursor ...` to the end of the iteration: the holders removed.
fn reap_all(con: &mut Connection, extra: &[&str]) -> i64 {
    let mut cursor = "0".to_string();
    let mut removed = 0;
    loop {
        let mut args = vec!["UNIQUE.REAP", &cursor, "COUNT", "1"];
        args.extend_from_slice(extra);
        let reply: (String, i64) =
            redis::from_redis_value(run(con, &args).unwrap_or_else(|e| panic!("{args:?}: {e}")))
                .expect("REAP's reply: cursor and count");
        removed += reply.1;
        cursor = reply.0;
        if cursor == "0" {
            return removed;
        }
    }
}

fn denied_keys(con: &mut Connection) -> i64 {
    common::info_field(con, "unique", "unique_reap_keys_denied")
}

#[test]
fn reap_frees_nothing_outside_the_callers_keys() {
    let server = Server::start_with(&["--unique.reap-interval", "0"]);
    let admin = &mut server.con();
    // The operator's session of the report that found the hole.
    setuser(admin, "ACL SETUSER app1 on >pw ~app1:* +@all");
    token(run(
        admin,
        &[
            "UNIQUE.LOCK",
            "app2:job",
            "j1",
            "OWNER",
            "w1",
            "TTL",
            "60000",
        ],
    ));
    token(run(
        admin,
        &[
            "UNIQUE.LOCK",
            "app1:job",
            "j2",
            "OWNER",
            "w1",
            "TTL",
            "60000",
        ],
    ));
    let app1 = &mut con_as(&server, "app1", "pw");
    assert!(refused(&run(app1, &["UNIQUE.LOCK", "app2:job", "j3"])));
    let before = denied_keys(admin);
    assert_eq!(
        run(app1, &["UNIQUE.REAP", "0", "OWNER", "w1"]),
        Ok(Value::Array(vec![
            Value::BulkString(b"0".to_vec()),
            Value::Int(1)
        ])),
        "app1 frees its own holder only"
    );
    assert_eq!(common::holders(admin, "app2:job"), ["j1"]);
    assert_eq!(common::holders(admin, "app1:job"), Vec::<String>::new());
    assert_eq!(denied_keys(admin) - before, 1, "app2:job was skipped");

    // Ended leases too: app1 removes none in app2's keys, step by step
    // (COUNT 1) over the whole keyspace, nor does a user who may only read
    // them; the default user then removes it.
    // Leases of 500 ms, short enough not to slow the suite; their end is
    // bounded from the server's clock read after the four calls, which a
    // loaded machine may run late (an end given as PXAT beforehand could be
    // past, and refused, by the time a call came).
    token(run(
        admin,
        &[
            "UNIQUE.LOCK",
            "app2:mixed",
            "old",
            "TTL",
            "500",
            "LIMIT",
            "2",
        ],
    ));
    token(run(
        admin,
        &[
            "UNIQUE.LOCK",
            "app2:mixed",
            "new",
            "TTL",
            "60000",
            "LIMIT",
            "2",
        ],
    ));
    token(run(
        admin,
        &[
            "UNIQUE.LOCK",
            "app1:mixed",
            "old",
            "TTL",
            "500",
            "LIMIT",
            "2",
        ],
    ));
    token(run(
        admin,
        &[
            "UNIQUE.LOCK",
            "app1:mixed",
            "new",
            "TTL",
            "60000",
            "LIMIT",
            "2",
        ],
    ));
    let ends = server_time_ms(admin) + 500;
    setuser(
        admin,
        "ACL SETUSER reader on >pw %R~* %W~app1:* +@all -@dangerous",
    );
    wait_until(Duration::from_secs(10), "the short leases' end", || {
        server_time_ms(admin) > ends
    });
    let reader = &mut con_as(&server, "reader", "pw");
    assert_eq!(reap_all(reader, &[]), 1, "the reader writes only app1:*");
    assert_eq!(reap_all(app1, &[]), 0, "nothing is left in app1:*");
    assert_eq!(reap_all(admin, &[]), 1, "app2:mixed's ended lease");
    assert_eq!(common::holders(admin, "app2:mixed"), ["new"]);

    // The same inside MULTI/EXEC, which runs as the calling connection.
    token(run(admin, &["UNIQUE.LOCK", "app2:tx", "j", "OWNER", "w2"]));
    token(run(admin, &["UNIQUE.LOCK", "app1:tx", "j", "OWNER", "w2"]));
    let exec: Vec<Value> = redis::pipe()
        .atomic()
        .cmd("UNIQUE.REAP")
        .arg(&["0", "COUNT", "1000", "OWNER", "w2"])
        .query(app1)
        .expect("MULTI/EXEC");
    assert_eq!(
        exec,
        [Value::Array(vec![
            Value::BulkString(b"0".to_vec()),
            Value::Int(1)
        ])]
    );
    assert_eq!(common::holders(admin, "app2:tx"), ["j"]);
}

#[test]
fn reap_is_refused_where_redis_does_not_say_who_calls() {
    let server = Server::start_with(&["--unique.reap-interval", "0"]);
    let con = &mut server.con();
    token(run(con, &["UNIQUE.LOCK", "k", "j", "OWNER", "w"]));
    let script = run(
        con,
        &[
            "EVAL",
            "return redis.call('UNIQUE.REAP', '0', 'OWNER', 'w')",
            "0",
        ],
    );
    assert!(
        matches!(&script, Err(e) if e.contains("UNIQUE.REAP checks the key permissions")),
        "{script:?}"
    );
    assert_eq!(common::holders(con, "k"), ["j"], "nothing was reaped");
}

/// What the server under test is, from `INFO server`.
struct Flavour {
    valkey: bool,
    major: u32,
    minor: u32,
    name: String,
}

impl Flavour {
    fn of(con: &mut Connection) -> Self {
        let info: String = redis::cmd("INFO").arg("server").query(con).expect("INFO");
        let field = |name: &str| {
            info.lines()
                .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
                .map(|v| v.trim().to_string())
        };
        let (valkey, version) = match field("valkey_version") {
            Some(v) => (true, v),
            None => (false, field("redis_version").unwrap_or_default()),
        };
        let mut parts = version.split('.').map(|p| p.parse::<u32>().unwrap_or(0));
        let (major, minor) = (parts.next().unwrap_or(0), parts.next().unwrap_or(0));
        let name = format!("{} {version}", if valkey { "Valkey" } else { "Redis" });
        Self {
            valkey,
            major,
            minor,
            name,
        }
    }

    /// Module commands have ACL categories (RM_SetCommandACLCategories).
    fn categories(&self) -> bool {
        self.valkey || (self.major, self.minor) >= (7, 2)
    }

    /// A module can add its own category (RM_AddACLCategory).
    fn own_category(&self) -> bool {
        self.valkey || self.major >= 8
    }

    /// `ACL CAT category` lists module commands (Redis 7.2 and Valkey 8.0
    /// skip them).
    fn cat_lists_module_commands(&self) -> bool {
        if self.valkey {
            self.major >= 9
        } else {
            self.major >= 8
        }
    }
}

/// The categories of docs/operations.md's table.
const CATEGORIES: &[(&str, &[&str])] = &[
    ("unique.lock", &["@write", "@fast", "@blocking"]),
    ("unique.unlock", &["@write", "@fast"]),
    ("unique.lockall", &["@write", "@slow", "@blocking"]),
    ("unique.unlockall", &["@write", "@slow"]),
    ("unique.lockedby", &["@read", "@fast"]),
    ("unique.waiters", &["@read", "@fast"]),
    ("unique.rate", &["@read", "@fast"]),
    ("unique.reap", &["@write", "@slow", "@keyspace"]),
    ("unique.metrics", &["@slow", "@dangerous"]),
];

/// A command's ACL categories, as COMMAND INFO shows them (its 7th field).
fn categories_of(con: &mut Connection, command: &str) -> Vec<String> {
    let Ok(Value::Array(infos)) = run(con, &["COMMAND", "INFO", command]) else {
        panic!("COMMAND INFO {command}");
    };
    let Some(Value::Array(info)) = infos.first() else {
        panic!("no COMMAND INFO for {command}: {infos:?}");
    };
    let Some(Value::Array(categories)) = info.get(6) else {
        panic!("COMMAND INFO {command} has no categories field: {info:?}");
    };
    categories
        .iter()
        .map(|c| redis::from_redis_value::<String>(c.clone()).expect("a category name"))
        .collect()
}

fn names(reply: Result<Value, String>) -> Vec<String> {
    redis::from_redis_value(reply.expect("a list")).expect("a list of names")
}

#[test]
fn each_command_is_in_the_categories_its_behaviour_calls_for() {
    let server = Server::start();
    let admin = &mut server.con();
    let flavour = Flavour::of(admin);
    let own = names(run(admin, &["ACL", "CAT"])).contains(&"unique".to_string());
    assert_eq!(own, flavour.own_category(), "@unique on {}", flavour.name);
    for (command, expected) in CATEGORIES {
        let mut expected: Vec<String> = expected.iter().map(|c| c.to_string()).collect();
        if own {
            expected.push("@unique".into());
        }
        if !flavour.categories() {
            expected.clear();
        }
        let mut got = categories_of(admin, command);
        got.sort();
        expected.sort();
        assert_eq!(got, expected, "{command} on {}", flavour.name);
    }
    // The internal command is in no category (a client cannot run it anyway).
    assert_eq!(categories_of(admin, "unique.apply"), Vec::<String>::new());

    if !flavour.categories() {
        println!(
            "SKIPPED the category checks on {}: it has no ACL categories for module \
             commands (Redis 7.2+ and Valkey 8+ have them); checking what \
             docs/operations.md says it gets instead",
            flavour.name
        );
        // Nothing beyond what a user is granted by name, or with +@all.
        setuser(admin, "ACL SETUSER r on >pw ~* -@all +@read +@write");
        let r = &mut con_as(&server, "r", "pw");
        assert!(refused(&run(r, &["UNIQUE.LOCKEDBY", "k"])));
        assert!(refused(&run(r, &["UNIQUE.LOCK", "k", "j"])));
        setuser(admin, "ACL SETUSER all on >pw ~* +@all -@dangerous");
        let all = &mut con_as(&server, "all", "pw");
        assert!(run(all, &["UNIQUE.METRICS"]).is_ok(), "in no @dangerous");
        assert!(run(admin, &["ACL", "SETUSER", "u", "+@unique"]).is_err());
        return;
    }

    let lists = flavour.cat_lists_module_commands();
    for (category, command) in [
        ("read", "unique.lockedby"),
        ("write", "unique.lock"),
        ("blocking", "unique.lock"),
        ("dangerous", "unique.metrics"),
    ] {
        let listed = names(run(admin, &["ACL", "CAT", category])).contains(&command.to_string());
        assert_eq!(listed, lists, "ACL CAT {category} on {}", flavour.name);
    }
    if own {
        let mut listed = names(run(admin, &["ACL", "CAT", "unique"]));
        listed.sort();
        let mut expected: Vec<String> = if lists {
            CATEGORIES.iter().map(|(c, _)| c.to_string()).collect()
        } else {
            Vec::new()
        };
        expected.sort();
        assert_eq!(listed, expected, "ACL CAT unique on {}", flavour.name);
    }

    // Granting a category grants its commands, and only those.
    setuser(admin, "ACL SETUSER r on >pw ~* -@all +@read");
    let r = &mut con_as(&server, "r", "pw");
    assert_eq!(run(r, &["UNIQUE.LOCKEDBY", "k"]), Ok(Value::Array(vec![])));
    assert_eq!(run(r, &["UNIQUE.WAITERS", "k"]), Ok(Value::Int(0)));
    assert!(run(r, &["UNIQUE.RATE", "k"]).is_ok());
    for write in [
        &["UNIQUE.LOCK", "k", "j"][..],
        &["UNIQUE.UNLOCK", "k", "j"],
        &["UNIQUE.REAP", "0"],
        &["UNIQUE.METRICS"],
    ] {
        assert!(refused(&run(r, write)), "{write:?}");
    }
    setuser(admin, "ACL SETUSER w on >pw ~* -@all +@write");
    let w = &mut con_as(&server, "w", "pw");
    token(run(w, &["UNIQUE.LOCK", "k", "j"]));
    assert_eq!(run(w, &["UNIQUE.UNLOCK", "k", "j"]), Ok(Value::Int(1)));
    assert!(run(w, &["UNIQUE.REAP", "0"]).is_ok());
    assert!(refused(&run(w, &["UNIQUE.LOCKEDBY", "k"])));
    // -@dangerous keeps everything but METRICS; -@blocking refuses LOCK.
    setuser(
        admin,
        "ACL SETUSER safe on >pw ~* +@all -@dangerous -@blocking",
    );
    let safe = &mut con_as(&server, "safe", "pw");
    assert!(refused(&run(safe, &["UNIQUE.METRICS"])));
    assert!(refused(&run(safe, &["UNIQUE.LOCK", "k", "j", "WAIT", "1"])));
    assert!(run(safe, &["UNIQUE.REAP", "0"]).is_ok());
    assert_eq!(
        run(safe, &["UNIQUE.LOCKEDBY", "k"]),
        Ok(Value::Array(vec![]))
    );
}

/// One `ACL SETUSER` line of docs/operations.md's recipes, and the servers
/// its `# ...` heading says it is for.
struct Recipe {
    user: String,
    line: String,
    heading: String,
}

impl Recipe {
    /// Whether the server under test is one the heading names.
    fn applies(&self, flavour: &Flavour) -> bool {
        match self.heading.as_str() {
            "any server" => true,
            "Redis 7.2+, Valkey 8+" => flavour.categories(),
            "Redis 8+, Valkey 8+" => flavour.own_category(),
            other => panic!("docs/operations.md: a recipe for {other:?}"),
        }
    }
}

fn recipes() -> Vec<Recipe> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/operations.md");
    let text = std::fs::read_to_string(path).expect("docs/operations.md");
    let start = text
        .find("## ACL users: least privilege")
        .expect("the ACL section");
    let section = &text[start..];
    let section = &section[..section[3..].find("\n## ").map_or(section.len(), |e| e + 3)];
    let mut heading = String::new();
    let mut out = Vec::new();
    for line in section.lines() {
        if let Some(h) = line.strip_prefix("# ") {
            heading = h.trim().to_string();
        } else if line.starts_with("ACL SETUSER ") {
            let user = line
                .split_whitespace()
                .nth(2)
                .unwrap_or_default()
                .to_string();
            out.push(Recipe {
                user,
                line: line.to_string(),
                heading: heading.clone(),
            });
        }
    }
    out
}

/// Locks held by a dead worker, in the worker's keys and in another's.
fn dead_workers_locks(admin: &mut Connection) {
    for key in ["jobs:a", "other:a"] {
        token(run(
            admin,
            &["UNIQUE.LOCK", key, "dead-job", "OWNER", "dead"],
        ));
    }
    run(admin, &["ZADD", "redis_unique:owners", "1", "dead"]).expect("ZADD");
}

fn worker_can_do_its_job(server: &Server, admin: &mut Connection) {
    dead_workers_locks(admin);
    let worker = &mut con_as(server, "worker", "worker-secret");
    let ok = |con: &mut Connection, args: &[&str]| {
        run(con, args).unwrap_or_else(|e| panic!("worker: {args:?}: {e}"))
    };
    token(run(
        worker,
        &["UNIQUE.LOCK", "jobs:1", "j", "TTL", "60000", "OWNER", "w"],
    ));
    token(run(
        worker,
        &["UNIQUE.LOCK", "jobs:1", "j", "TTL", "60000", "OWNER", "w"],
    ));
    ok(
        worker,
        &["UNIQUE.LOCK", "jobs:1", "other", "LIMIT", "1", "WAIT", "1"],
    );
    ok(worker, &["UNIQUE.LOCKEDBY", "jobs:1", "WITHMETA"]);
    ok(worker, &["UNIQUE.WAITERS", "jobs:1"]);
    ok(worker, &["UNIQUE.RATE", "jobs:1"]);
    assert_eq!(ok(worker, &["UNIQUE.UNLOCK", "jobs:1", "j"]), Value::Int(1));
    let both = ["jobs:{t}:acme", "jobs:{t}:all"];
    ok(
        worker,
        &["UNIQUE.LOCKALL", "2", both[0], both[1], "j", "TTL", "60000"],
    );
    assert_eq!(
        ok(worker, &["UNIQUE.UNLOCKALL", "2", both[0], both[1], "j"]),
        Value::Int(2)
    );
    assert_eq!(reap_all(worker, &["OWNER", "dead"]), 1, "jobs:a only");
    assert_eq!(common::holders(admin, "other:a"), ["dead-job"]);
    for denied in [
        &["UNIQUE.LOCK", "other:1", "j"][..],
        &["UNIQUE.LOCKEDBY", "other:a"],
        &["UNIQUE.UNLOCK", "other:a", "dead-job"],
        &["UNIQUE.LOCKALL", "2", "jobs:{o}:1", "other:{o}:1", "j"],
        &["UNIQUE.METRICS", "RESET"],
        &["UNLINK", "jobs:1"],
        &["FLUSHALL"],
    ] {
        assert!(refused(&run(worker, denied)), "worker: {denied:?}");
    }
}

fn dashboard_reads_everything_and_changes_nothing(server: &Server, admin: &mut Connection) {
    dead_workers_locks(admin);
    let web = &mut con_as(server, "dashboard", "dashboard-secret");
    // What the Sidekiq web tab sends (clients/ruby/lib/redis_unique/web/store.rb).
    for args in [
        &["SCAN", "0", "COUNT", "100", "TYPE", "uniq-lock"][..],
        &["TYPE", "jobs:a"],
        &["UNIQUE.LOCKEDBY", "other:a", "WITHMETA"],
        &["UNIQUE.LOCKEDBY", "redis-unique:probe"],
        &["UNIQUE.WAITERS", "jobs:a"],
        &["UNIQUE.RATE", "jobs:a"],
        &["ZRANGE", "redis_unique:owners", "0", "999"],
        &["INFO", "unique"],
        &["UNIQUE.METRICS", "MINUTES", "1", "FORMAT", "json"],
        &["UNIQUE.METRICS", "FORMAT", "json"],
    ] {
        if let Err(e) = run(web, args) {
            panic!("dashboard: {args:?}: {e}");
        }
    }
    for denied in [
        &["UNIQUE.LOCK", "jobs:a", "j"][..],
        &["UNIQUE.UNLOCK", "jobs:a", "dead-job"],
        &["UNIQUE.REAP", "0", "OWNER", "dead"],
        &["UNIQUE.METRICS", "RESET"],
        &["UNLINK", "jobs:a"],
        &["CONFIG", "SET", "unique.reap-batch", "5"],
    ] {
        assert!(refused(&run(web, denied)), "dashboard: {denied:?}");
    }
    assert_eq!(common::holders(admin, "jobs:a"), ["dead-job"]);
}

fn operator_does_what_the_buttons_do(server: &Server, admin: &mut Connection) {
    dead_workers_locks(admin);
    let op = &mut con_as(server, "operator", "operator-secret");
    let ok = |con: &mut Connection, args: &[&str]| {
        run(con, args).unwrap_or_else(|e| panic!("operator: {args:?}: {e}"))
    };
    ok(op, &["SCAN", "0", "TYPE", "uniq-lock"]);
    ok(op, &["CONFIG", "GET", "unique.metrics-minutes"]);
    ok(op, &["INFO", "unique"]);
    ok(op, &["UNIQUE.METRICS", "MINUTES", "1", "FORMAT", "json"]);
    token(run(op, &["UNIQUE.LOCK", "other:b", "j"]));
    assert_eq!(ok(op, &["UNIQUE.UNLOCK", "other:b", "j"]), Value::Int(1));
    assert_eq!(reap_all(op, &["OWNER", "dead"]), 2, "in every key");
    token(run(op, &["UNIQUE.LOCK", "other:c", "j"]));
    assert_eq!(
        ok(op, &["TYPE", "other:c"]),
        Value::SimpleString("uniq-lock".into())
    );
    assert_eq!(ok(op, &["UNLINK", "other:c"]), Value::Int(1));
    assert_eq!(ok(op, &["UNIQUE.METRICS", "RESET"]), Value::Okay);
    for denied in [
        &["FLUSHALL"][..],
        &["CONFIG", "SET", "unique.reap-batch", "5"],
    ] {
        assert!(refused(&run(op, denied)), "operator: {denied:?}");
    }
}

#[test]
fn the_recipes_of_operations_md_give_each_role_what_it_needs() {
    let recipes = recipes();
    for role in ["worker", "dashboard", "operator"] {
        let of_role: Vec<_> = recipes.iter().filter(|r| r.user == role).collect();
        assert!(
            of_role.iter().any(|r| r.heading == "any server") && of_role.len() >= 2,
            "docs/operations.md: {role} needs a line for any server and one with categories"
        );
    }
    let server = Server::start_with(&["--unique.reap-interval", "0"]);
    let admin = &mut server.con();
    let flavour = Flavour::of(admin);
    for recipe in &recipes {
        run(admin, &["FLUSHALL"]).expect("FLUSHALL");
        run(admin, &["ACL", "DELUSER", &recipe.user]).expect("ACL DELUSER");
        if !recipe.applies(&flavour) {
            let args: Vec<&str> = recipe.line.split_whitespace().collect();
            let reply = run(admin, &args);
            println!(
                "SKIPPED on {}: the {} line for {} ({reply:?})",
                flavour.name, recipe.user, recipe.heading
            );
            // A line for @unique is refused where there is no @unique; one
            // for the standard categories is accepted but grants none of
            // the module's commands there.
            if recipe.heading.starts_with("Redis 8+") {
                assert!(reply.is_err(), "{}", recipe.line);
            }
            continue;
        }
        setuser(admin, &recipe.line);
        match recipe.user.as_str() {
            "worker" => worker_can_do_its_job(&server, admin),
            "dashboard" => dashboard_reads_everything_and_changes_nothing(&server, admin),
            "operator" => operator_does_what_the_buttons_do(&server, admin),
            other => panic!("docs/operations.md: a recipe for an unknown role {other}"),
        }
    }
}

#[test]
fn a_waiter_whose_access_was_revoked_gets_noperm_and_the_next_gets_the_slot() {
    let server = Server::start();
    let admin = &mut server.con();
    setuser(admin, "ACL SETUSER waiter on >pw ~jobs:* +@all");
    token(run(
        admin,
        &["UNIQUE.LOCK", "jobs:w", "holder", "TTL", "60000"],
    ));
    let wait = |con: Connection, jid: &'static str| {
        std::thread::spawn(move || {
            let mut con = con;
            run(&mut con, &["UNIQUE.LOCK", "jobs:w", jid, "WAIT", "30000"])
        })
    };
    let revoked = wait(con_as(&server, "waiter", "pw"), "revoked");
    wait_until(Duration::from_secs(10), "the first waiter", || {
        run(admin, &["UNIQUE.WAITERS", "jobs:w"]) == Ok(Value::Int(1))
    });
    let next = wait(server.con(), "next");
    wait_until(Duration::from_secs(10), "the second waiter", || {
        run(admin, &["UNIQUE.WAITERS", "jobs:w"]) == Ok(Value::Int(2))
    });
    setuser(admin, "ACL SETUSER waiter resetkeys ~other:*");
    assert_eq!(
        run(admin, &["UNIQUE.UNLOCK", "jobs:w", "holder"]),
        Ok(Value::Int(1))
    );
    let revoked = revoked.join().expect("the first waiter's thread");
    assert!(refused(&revoked), "{revoked:?}");
    token(next.join().expect("the second waiter's thread"));
    assert_eq!(common::holders(admin, "jobs:w"), ["next"]);
}
