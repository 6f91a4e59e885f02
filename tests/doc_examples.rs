//! The docs cannot drift from the server: every redis-cli example of
//! README.md and docs/commands.md is replayed against a fresh server, and
//! figures that docs/operations.md quotes from a server are measured on it.
//!
//! An example is a code fence with lines that start with `> ` (a command);
//! the lines after a command, up to the next command, are its reply as
//! `redis-cli --no-raw` prints it. A file's examples run in order on one
//! server, so a tour can build on its earlier steps. What a reader sees is
//! what is checked, with these rules for what changes from run to run:
//!
//! - lines before the first command (`$ redis-cli`) and `# ...` lines are
//!   prose, and so is anything after two spaces and a `#` on a line;
//! - an integer of 13 or more digits is a fencing token or a unix time: it
//!   matches any such integer, and the same number shown twice must be the
//!   same number both times (a renewal keeps its token);
//! - the integer after a `"ttl"` field is the time left: any integer;
//! - a word that ends in `...` matches any word that starts with the rest;
//! - such an integer in a command (a TOKEN passed back) is the number a
//!   reply before it showed in its place;
//! - `# ... in another redis-cli: COMMAND` right after a command that blocks
//!   runs COMMAND from a second client once the first one is blocked.

mod common;

use std::collections::HashMap;
use std::path::Path;

use common::cli::{redis_cli, reply_matches, split_args};
use common::{Server, wait_for};

const ANOTHER_CLIENT: &str = "in another redis-cli: ";

struct Step {
    /// Where the command is, for the failure message.
    line: usize,
    args: Vec<String>,
    /// What a second client runs while this command blocks.
    meanwhile: Option<Vec<String>>,
    expected: Vec<String>,
}

/// Drops the prose after two spaces and a `#`.
fn without_comment(line: &str) -> &str {
    match line.find("  #") {
        Some(i) => line[..i].trim_end(),
        None => line.trim_end(),
    }
}

/// A reply line of the doc as a pattern of the matcher (see the module's
/// doc comment for the rules).
fn pattern(line: &str, after_ttl: bool) -> String {
    let words: Vec<&str> = line.split_whitespace().collect();
    let last = words.len().saturating_sub(1);
    words
        .iter()
        .enumerate()
        .map(|(i, w)| {
            let digits = w.len() >= 13 && w.bytes().all(|b| b.is_ascii_digit());
            if digits {
                format!("$n{w}")
            } else if after_ttl && i == last && w.parse::<i64>().is_ok() {
                "*".to_string()
            } else {
                w.to_string()
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// The steps of every example of `text`, in order.
fn examples(text: &str) -> Vec<Step> {
    let mut steps: Vec<Step> = Vec::new();
    let mut in_fence = false;
    // Whether the last command is in the fence being read: a reply never
    // starts in another fence.
    let mut open = false;
    for (i, raw) in text.lines().enumerate() {
        if raw.trim_start().starts_with("```") {
            in_fence = !in_fence;
            open = false;
            continue;
        }
        if !in_fence {
            continue;
        }
        let line = raw.trim();
        if let Some(command) = line.strip_prefix("> ") {
            let args = split_args(without_comment(command))
                .unwrap_or_else(|e| panic!("line {}: {e}", i + 1));
            steps.push(Step {
                line: i + 1,
                args,
                meanwhile: None,
                expected: Vec::new(),
            });
            open = true;
        } else if !open {
            // Prose before a fence's first command (`$ redis-cli`).
        } else if let Some(comment) = line.strip_prefix('#') {
            if let (Some(at), Some(step)) = (comment.find(ANOTHER_CLIENT), steps.last_mut()) {
                let command = &comment[at + ANOTHER_CLIENT.len()..];
                step.meanwhile = Some(
                    split_args(without_comment(command))
                        .unwrap_or_else(|e| panic!("line {}: {e}", i + 1)),
                );
            }
        } else if let Some(step) = steps.last_mut() {
            let line = without_comment(line);
            if !line.is_empty() {
                let after_ttl = step.expected.last().is_some_and(|l| l.ends_with("\"ttl\""));
                step.expected.push(pattern(line, after_ttl));
            }
        }
    }
    steps
}

/// The matcher, and every number the doc shows as a token or a time is
/// one on the server too (13 digits or more).
fn matches(expected: &[String], actual: &[String], vars: &mut HashMap<String, String>) -> bool {
    let mut trial = vars.clone();
    let long = |v: &String| v.len() >= 13 && v.bytes().all(|b| b.is_ascii_digit());
    let ok = reply_matches(expected, actual, &mut trial)
        && trial
            .iter()
            .filter(|(name, _)| name.starts_with('n'))
            .all(|(_, v)| long(v));
    if ok {
        *vars = trial;
    }
    ok
}

fn blocked_clients(port: u16) -> i64 {
    redis_cli(port, &["INFO".to_string(), "clients".to_string()])
        .iter()
        .find_map(|l| l.trim().strip_prefix("blocked_clients:")?.parse().ok())
        .unwrap_or(0)
}

/// Replays the examples of `file` (relative to the repository) on a fresh
/// server; returns how many commands ran.
fn replay(file: &str) -> usize {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(file);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{file}: {e}"));
    let steps = examples(&text);
    assert!(!steps.is_empty(), "{file} has no redis-cli example");
    let server = Server::start();
    let port = server.port;
    let mut vars = HashMap::new();
    let mut failures = Vec::new();
    for step in &steps {
        let args: Vec<String> = step
            .args
            .iter()
            .map(|a| {
                vars.get(&format!("n{a}"))
                    .cloned()
                    .unwrap_or_else(|| a.clone())
            })
            .collect();
        let actual = match &step.meanwhile {
            None => redis_cli(port, &args),
            Some(other) => {
                let args = args.clone();
                let blocked = std::thread::spawn(move || redis_cli(port, &args));
                wait_for("the example to block", || blocked_clients(port) > 0);
                redis_cli(port, other);
                blocked.join().expect("the blocked redis-cli")
            }
        };
        if !matches(&step.expected, &actual, &mut vars) {
            failures.push(format!(
                "{file}:{}: {}\n  the doc shows:\n    {}\n  the server replies:\n    {}",
                step.line,
                step.args.join(" "),
                step.expected.join("\n    "),
                actual.join("\n    ")
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
    steps.len()
}

#[test]
fn the_readme_tour_replays() {
    println!("README.md: {} commands ok", replay("README.md"));
}

#[test]
fn the_command_reference_examples_replay() {
    println!(
        "docs/commands.md: {} commands ok",
        replay("docs/commands.md")
    );
}

/// docs/operations.md's table of servers quotes `MEMORY USAGE` of a
/// one-holder lock per server: the column of the server under test must be
/// what it measures (`UPDATE_DOCS=1` writes the measured value instead).
#[test]
fn the_memory_usage_in_operations_md_is_measured() {
    const ROW: &str = "| `MEMORY USAGE` of `UNIQUE.LOCK job:1 jid-1 TTL 60000` |";
    let server = Server::start();
    let con = &mut server.con();
    call!(con, "UNIQUE.LOCK", "job:1", "jid-1", "TTL", 60_000).expect("lock");
    let usage: i64 = redis::cmd("MEMORY")
        .arg("USAGE")
        .arg("job:1")
        .query(con)
        .expect("MEMORY USAGE");
    let info: String = redis::cmd("INFO").arg("server").query(con).expect("INFO");
    let field = |name: &str| {
        info.lines()
            .find_map(|l| l.trim().strip_prefix(name)?.strip_prefix(':'))
            .map(str::to_string)
    };
    let server_name = match (field("server_name"), field("valkey_version")) {
        (Some(name), Some(version)) if name == "valkey" => format!("Valkey {version}"),
        _ => format!("Redis {}", field("redis_version").unwrap_or_default()),
    };

    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/operations.md");
    let mut text = std::fs::read_to_string(&path).expect("docs/operations.md");
    let cells = |l: &str| -> Vec<String> {
        l.trim_matches('|')
            .split('|')
            .map(|c| c.trim().to_string())
            .collect()
    };
    // Each table of servers that has the row and a column for this server.
    let lines: Vec<String> = text.lines().map(str::to_string).collect();
    let mut checked = 0;
    for (row, line) in lines.iter().enumerate().filter(|(_, l)| l.starts_with(ROW)) {
        let header = lines[..row]
            .iter()
            .rev()
            .find(|l| l.starts_with("| what |"))
            .expect("the table's header");
        let Some(column) = cells(header).iter().position(|c| *c == server_name) else {
            continue;
        };
        checked += 1;
        let mut row_cells = cells(line);
        if std::env::var_os("UPDATE_DOCS").is_some() {
            row_cells[column] = usage.to_string();
            let new_row = format!("| {} |", row_cells.join(" | "));
            text = text.replacen(line.as_str(), &new_row, 1);
            continue;
        }
        assert_eq!(
            row_cells[column],
            usage.to_string(),
            "docs/operations.md quotes {} bytes for {server_name}, which measures {usage} \
             (UPDATE_DOCS=1 cargo test --test doc_examples writes it)",
            row_cells[column]
        );
    }
    if std::env::var_os("UPDATE_DOCS").is_some() {
        std::fs::write(&path, &text).expect("write docs/operations.md");
    }
    // A server that CI runs on and the table leaves out would pass unchecked.
    assert!(
        checked > 0,
        "docs/operations.md's tables of servers have no column for {server_name}: add one"
    );
}

#[test]
fn the_rules_read_a_doc_as_a_reader_does() {
    let doc = "```\n$ redis-cli\n# prose\n> UNIQUE.LOCK k a TTL 60000   # a comment\n\
               (integer) 1795240097349000                 # the token\n\
               > UNIQUE.LOCK k b WAIT 100\n# blocks; in another redis-cli: UNIQUE.UNLOCK k a\n\
               (integer) 1795240097349001\n> UNIQUE.LOCKEDBY k WITHMETA\n 9) \"ttl\"\n10) (integer) 59874\n```\n\
               > NOT IN A FENCE\n";
    let steps = examples(doc);
    assert_eq!(steps.len(), 3);
    assert_eq!(steps[0].args, ["UNIQUE.LOCK", "k", "a", "TTL", "60000"]);
    assert_eq!(steps[0].expected, ["(integer) $n1795240097349000"]);
    assert_eq!(
        steps[1].meanwhile.as_deref(),
        Some(&["UNIQUE.UNLOCK".to_string(), "k".into(), "a".into()][..])
    );
    assert_eq!(steps[2].expected, ["9) \"ttl\"", "10) (integer) *"]);
    let mut vars = HashMap::new();
    let reply = |s: &str| vec![s.to_string()];
    assert!(matches(
        &steps[0].expected,
        &reply("(integer) 1800000000000000"),
        &mut vars
    ));
    // The same number in the doc is the same number on the server.
    assert!(!matches(
        &steps[0].expected,
        &reply("(integer) 1800000000000001"),
        &mut vars
    ));
    assert!(!matches(
        &steps[0].expected,
        &reply("(integer) 17"),
        &mut HashMap::new()
    ));
}
