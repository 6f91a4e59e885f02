//! redis-cli scripts: the reply matcher and the runner that the redis-cli
//! suite (`tests/cli/`) and the doc examples (`tests/doc_examples.rs`) share.

use std::collections::HashMap;
use std::process::Command;

/// Splits a command line as a shell would for plain words and quotes.
pub fn split_args(line: &str) -> Result<Vec<String>, String> {
    let mut args = Vec::new();
    let mut chars = line.chars().peekable();
    while let Some(&c) = chars.peek() {
        if c.is_whitespace() {
            chars.next();
            continue;
        }
        let mut arg = String::new();
        while let Some(&c) = chars.peek() {
            if c.is_whitespace() {
                break;
            }
            chars.next();
            if c == '"' || c == '\'' {
                loop {
                    match chars.next() {
                        Some(q) if q == c => break,
                        Some(other) => arg.push(other),
                        None => return Err(format!("unclosed {c}")),
                    }
                }
            } else {
                arg.push(c);
            }
        }
        args.push(arg);
    }
    Ok(args)
}

/// Compares one reply line word by word: `*` is any word, `$name` binds a
/// word the first time and must be the same word after, `prefix...` matches
/// a word that starts with `prefix`.
pub fn line_matches(expected: &str, actual: &str, vars: &mut HashMap<String, String>) -> bool {
    let (exp, act): (Vec<&str>, Vec<&str>) = (
        expected.split_whitespace().collect(),
        actual.split_whitespace().collect(),
    );
    if exp.len() != act.len() {
        return false;
    }
    let mut bound = Vec::new();
    for (e, a) in exp.iter().zip(&act) {
        if *e == "*" {
            continue;
        }
        // `prefix...` (as a doc shortens a long reply) matches any word that
        // starts with the prefix.
        if let Some(prefix) = e.strip_suffix("...")
            && a.starts_with(prefix)
        {
            continue;
        }
        if let Some(name) = e.strip_prefix('$').filter(|n| !n.is_empty()) {
            match vars.get(name) {
                Some(v) if v == a => continue,
                Some(_) => return false,
                None => bound.push((name.to_string(), a.to_string())),
            }
            continue;
        }
        if e != a {
            return false;
        }
    }
    vars.extend(bound);
    true
}

pub fn reply_matches(
    expected: &[String],
    actual: &[String],
    vars: &mut HashMap<String, String>,
) -> bool {
    let mut trial = vars.clone();
    let ok = expected.len() == actual.len()
        && expected
            .iter()
            .zip(actual)
            .all(|(e, a)| line_matches(e, a, &mut trial));
    if ok {
        *vars = trial;
    }
    ok
}

pub fn redis_cli(port: u16, args: &[String]) -> Vec<String> {
    let out = Command::new(super::cli_binary())
        .args(["-p", &port.to_string(), "--no-raw"])
        .args(args)
        .output()
        .expect("redis-cli runs (apt-get install redis-tools, or set REDIS_CLI)");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_string)
        .collect()
}
