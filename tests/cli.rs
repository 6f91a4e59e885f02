//! The redis-cli suite: runs every `tests/cli/*.txt` script with `redis-cli`
//! (`$REDIS_CLI` when set) against a fresh server and compares the replies. The format is described
//! in tests/cli/README.md.

mod common;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use common::Server;
use common::cli::{line_matches, redis_cli, reply_matches, split_args};

/// How long a `>~` step may retry before it fails.
const POLL_LIMIT: Duration = Duration::from_secs(5);

struct Step {
    line: usize,
    poll: bool,
    args: Vec<String>,
    expected: Vec<String>,
}

fn parse_script(text: &str) -> Result<Vec<Step>, String> {
    let mut steps: Vec<Step> = Vec::new();
    for (i, raw) in text.lines().enumerate() {
        let line = raw.trim_end();
        if line.trim().is_empty() || line.starts_with('#') {
            continue;
        }
        let (poll, command) = if let Some(rest) = line.strip_prefix(">~ ") {
            (true, Some(rest))
        } else {
            (false, line.strip_prefix("> "))
        };
        match (command, steps.last_mut()) {
            (Some(command), _) => steps.push(Step {
                line: i + 1,
                poll,
                args: split_args(command).map_err(|e| format!("line {}: {e}", i + 1))?,
                expected: Vec::new(),
            }),
            (None, Some(step)) => step.expected.push(line.to_string()),
            (None, None) => return Err(format!("line {}: a reply before any command", i + 1)),
        }
    }
    Ok(steps)
}

fn run_script(path: &Path) -> Result<usize, String> {
    let text = std::fs::read_to_string(path).map_err(|e| e.to_string())?;
    let steps = parse_script(&text)?;
    let server = Server::start();
    let mut vars = HashMap::new();
    for step in &steps {
        let start = Instant::now();
        loop {
            let actual = redis_cli(server.port, &step.args);
            if reply_matches(&step.expected, &actual, &mut vars) {
                break;
            }
            if !step.poll || start.elapsed() > POLL_LIMIT {
                return Err(format!(
                    "{}:{}: {}\n  expected:\n    {}\n  got:\n    {}",
                    path.display(),
                    step.line,
                    step.args.join(" "),
                    step.expected.join("\n    "),
                    actual.join("\n    ")
                ));
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }
    Ok(steps.len())
}

#[test]
fn the_redis_cli_suite() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/cli");
    let mut scripts: Vec<PathBuf> = std::fs::read_dir(&dir)
        .expect("tests/cli")
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "txt"))
        .collect();
    scripts.sort();
    assert!(!scripts.is_empty(), "no scripts in {}", dir.display());
    let mut failures = Vec::new();
    for script in &scripts {
        match run_script(script) {
            Ok(steps) => println!("{}: {steps} commands ok", script.display()),
            Err(e) => failures.push(e),
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

#[test]
fn the_matcher_binds_and_compares() {
    let mut vars = HashMap::new();
    assert!(line_matches("(integer) $t", "(integer) 42", &mut vars));
    assert!(line_matches("(integer) $t", "(integer) 42", &mut vars));
    assert!(!line_matches("(integer) $t", "(integer) 43", &mut vars));
    assert!(line_matches("1) *", "1) \"x\"", &mut vars));
    assert!(!line_matches("(nil)", "(integer) 1", &mut vars));
    assert!(!line_matches("a b", "a", &mut vars));
    assert_eq!(
        split_args(r#"SET k "a b" 'c d'"#),
        Ok(vec!["SET".into(), "k".into(), "a b".into(), "c d".into()])
    );
    assert!(split_args("SET \"open").is_err());
}
