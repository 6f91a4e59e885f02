//! docs/install.md is what a user follows: its redis.conf block starts a real server
//! with the module (the module under test in place of the path it shows), its redis-cli
//! examples replay on that server, and its MODULE LOADEX example on a server started
//! without the module. Its file names and `ver` are the crate's version.

mod common;

use std::collections::HashMap;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use common::cli::{redis_cli, reply_matches, split_args};
use common::{module_path, server_binary, temp_dir, wait_until};

const DOC: &str = "docs/install.md";

fn doc() -> String {
    std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join(DOC)).expect(DOC)
}

/// The fenced blocks of the doc: (info string, lines).
fn fences(text: &str) -> Vec<(String, Vec<String>)> {
    let mut out = Vec::new();
    let mut current: Option<(String, Vec<String>)> = None;
    for line in text.lines() {
        if let Some(info) = line.trim_start().strip_prefix("```") {
            match current.take() {
                Some(block) => out.push(block),
                None => current = Some((info.trim().to_string(), Vec::new())),
            }
        } else if let Some((_, lines)) = current.as_mut() {
            lines.push(line.to_string());
        }
    }
    out
}

/// A reply line as a pattern of the matcher: a fencing token (13 digits or more) is
/// any such number, the same wherever the doc repeats it.
fn pattern(line: &str) -> String {
    line.split_whitespace()
        .map(|w| {
            if w.len() >= 13 && w.bytes().all(|b| b.is_ascii_digit()) {
                format!("$n{w}")
            } else {
                w.to_string()
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// The redis-cli steps of a block: each `> command` with the reply lines below it.
fn steps(lines: &[String]) -> Vec<(Vec<String>, Vec<String>)> {
    let mut steps: Vec<(Vec<String>, Vec<String>)> = Vec::new();
    for line in lines {
        if let Some(command) = line.trim().strip_prefix("> ") {
            steps.push((split_args(command).expect("a command"), Vec::new()));
        } else if let Some((_, expected)) = steps.last_mut() {
            expected.push(pattern(line));
        }
    }
    steps
}

/// The path the doc loads the module from, replaced by the module under test.
fn with_module(arg: &str) -> String {
    if arg.ends_with(".so") {
        module_path().to_string_lossy().into_owned()
    } else {
        arg.to_string()
    }
}

struct Started {
    child: Child,
    port: u16,
}

impl Drop for Started {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start(config: &str) -> Started {
    let dir = temp_dir("install-doc");
    let port = common::free_port();
    let conf = dir.join("redis.conf");
    let full = format!(
        "{config}\nport {port}\nbind 127.0.0.1\ndir {}\nsave \"\"\nenable-module-command local\n",
        dir.display()
    );
    std::fs::write(&conf, full).expect("write redis.conf");
    let child = Command::new(server_binary())
        .arg(&conf)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("redis-server runs");
    let started = Started { child, port };
    wait_until(Duration::from_secs(10), "the server to answer PING", || {
        redis_cli(port, &["PING".to_string()]) == ["PONG"]
    });
    started
}

fn replay(server: &Started, lines: &[String], failures: &mut Vec<String>) -> usize {
    let mut vars = HashMap::new();
    let steps = steps(lines);
    for (args, expected) in &steps {
        let args: Vec<String> = args.iter().map(|a| with_module(a)).collect();
        let actual = redis_cli(server.port, &args);
        if !reply_matches(expected, &actual, &mut vars) {
            failures.push(format!(
                "{DOC}: {}\n  the doc shows:\n    {}\n  the server replies:\n    {}",
                args.join(" "),
                expected.join("\n    "),
                actual.join("\n    ")
            ));
        }
    }
    steps.len()
}

#[test]
fn the_install_guide_replays() {
    let text = doc();
    let blocks = fences(&text);
    let conf = blocks
        .iter()
        .find(|(info, _)| info == "conf")
        .expect("a ```conf block with loadmodule");
    assert!(conf.1[0].starts_with("loadmodule "), "{:?}", conf.1);
    let config: Vec<String> = conf
        .1
        .iter()
        .map(|line| {
            line.split(' ')
                .map(with_module)
                .collect::<Vec<_>>()
                .join(" ")
        })
        .collect();
    let configured = start(&config.join("\n"));
    // Every setting the block shows is the server's.
    for line in &conf.1[1..] {
        let (name, value) = line.split_once(' ').expect("name value");
        let got = redis_cli(
            configured.port,
            &["CONFIG".into(), "GET".into(), name.into()],
        );
        assert_eq!(
            got,
            [format!("1) \"{name}\""), format!("2) \"{value}\"")],
            "{line}"
        );
    }
    let bare = start("");
    let mut failures = Vec::new();
    let mut ran = 0;
    for (_, lines) in blocks.iter().filter(|(info, _)| info.is_empty()) {
        let loads = lines.iter().any(|l| l.trim().starts_with("> MODULE LOAD"));
        ran += replay(
            if loads { &bare } else { &configured },
            lines,
            &mut failures,
        );
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
    assert!(ran >= 5, "only {ran} commands replayed");
}

#[test]
fn the_install_guide_names_this_version() {
    let text = doc();
    let version = env!("CARGO_PKG_VERSION");
    let ver = version
        .split('.')
        .map(|p| p.parse::<u32>().expect("a number"))
        .fold(0, |acc, p| acc * 100 + p);
    for (i, line) in text.lines().enumerate() {
        for (at, _) in line
            .match_indices("redis-unique-")
            .chain(line.match_indices("redis_unique-"))
        {
            let rest = &line[at + "redis-unique-".len()..];
            let named: String = rest
                .chars()
                .take_while(|c| c.is_ascii_digit() || *c == '.')
                .collect();
            let named = named.trim_end_matches('.');
            if !named.is_empty() {
                assert_eq!(named, version, "{DOC}:{}: {line}", i + 1);
            }
        }
    }
    assert!(
        text.contains(&format!("`ver {ver}`")),
        "{DOC} shows MODULE LIST's ver {ver}"
    );
}
