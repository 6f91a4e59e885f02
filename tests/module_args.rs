//! Module arguments never go silently unread: `unique.<name> v`
//! and `<name> v` both set the configuration; an unknown name, a missing or
//! bad value fails the load, and Redis refuses to start, with one log line
//! naming the argument and what is accepted. CONFIG REWRITE keeps the
//! `unique.*` settings.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use common::{free_port, module_path, temp_dir};

fn config(con: &mut common::Connection, name: &str) -> String {
    let pair: Vec<String> = redis::cmd("CONFIG")
        .arg("GET")
        .arg(name)
        .query(con)
        .expect("CONFIG GET");
    pair.get(1).cloned().unwrap_or_else(|| panic!("no {name}"))
}

#[test]
fn both_spellings_set_the_configuration() {
    let server = ConfServer::start(&[
        "loadmodule {module} unique.reap-interval 50 reap-batch 7 UNIQUE.Max-Meta-Bytes 4096",
    ]);
    let con = &mut server.con();
    assert_eq!(config(con, "unique.reap-interval"), "50");
    assert_eq!(config(con, "unique.reap-batch"), "7");
    assert_eq!(config(con, "unique.max-meta-bytes"), "4096");
    assert_eq!(config(con, "unique.metrics-minutes"), "60", "the default");
    // The value is in force, not only shown: META over 4096 bytes is refused.
    let meta = format!("{{\"a\":\"{}\"}}", "x".repeat(5000));
    let big = call!(con, "UNIQUE.LOCK", "k", "j", "META", meta);
    assert!(big.is_err(), "{big:?}");
}

/// The redis-server to run: `REDIS_SERVER`, else the one on PATH.
fn redis_server() -> std::ffi::OsString {
    common::server_binary()
}

/// Waits (bounded) for `child` to exit by itself; kills it if it does not.
fn exit_status(child: &mut Child) -> Option<ExitStatus> {
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(10) {
        if let Ok(Some(status)) = child.try_wait() {
            return Some(status);
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let _ = child.kill();
    let _ = child.wait();
    None
}

/// Starts redis-server with the module and `module_args`; returns its exit
/// status (it must not start) and its log.
fn start_must_fail(module_args: &[&str]) -> (Option<ExitStatus>, String) {
    let dir = temp_dir("fail");
    let mut child = Command::new(redis_server())
        .args(["--port", &free_port().to_string(), "--bind", "127.0.0.1"])
        .arg("--dir")
        .arg(&dir)
        .args(["--save", "", "--logfile", "redis.log", "--loadmodule"])
        .arg(module_path())
        .args(module_args)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("redis-server runs");
    let status = exit_status(&mut child);
    let log = std::fs::read_to_string(dir.join("redis.log")).unwrap_or_default();
    let _ = std::fs::remove_dir_all(&dir);
    (status, log)
}

/// The module's warnings in a log (but redis-module's own note that the
/// server has no defrag API).
fn module_lines(log: &str) -> Vec<&str> {
    log.lines()
        .filter(|l| l.contains(" # <unique> ") && !l.contains("defrag"))
        .collect()
}

const ACCEPTED: &str = "accepted: reap-interval (0 to 60000), reap-batch (1 to 100000), \
     max-meta-bytes (0 to 1048576), metrics-minutes (1 to 1440), metrics-max-types (1 to 4096), \
     each followed by its value, with or without the `unique.` prefix";

#[test]
fn a_bad_module_argument_stops_the_server_with_one_line_saying_why() {
    let cases: [(&[&str], String); 6] = [
        (
            &["reap-intervall", "50"],
            format!("unknown module argument `reap-intervall`; {ACCEPTED}"),
        ),
        (
            &["reap-batch", "10", "unique.reap-interval"],
            format!(
                "module argument `unique.reap-interval` has no value \
                 (unique.reap-interval takes 0 to 60000); {ACCEPTED}"
            ),
        ),
        (
            &["unique.reap-interval", "60001"],
            format!(
                "module argument `unique.reap-interval 60001`: unique.reap-interval takes \
                 an integer from 0 to 60000; {ACCEPTED}"
            ),
        ),
        (
            &["reap-batch", "0"],
            format!(
                "module argument `reap-batch 0`: unique.reap-batch takes an integer \
                 from 1 to 100000; {ACCEPTED}"
            ),
        ),
        (
            &["metrics-minutes", "1h"],
            format!(
                "module argument `metrics-minutes 1h`: unique.metrics-minutes takes an \
                 integer from 1 to 1440; {ACCEPTED}"
            ),
        ),
        (
            &["reap-interval", "50", "unique.reap-interval", "60"],
            format!(
                "module argument `unique.reap-interval` sets unique.reap-interval a second \
                 time; {ACCEPTED}"
            ),
        ),
    ];
    for (args, line) in cases {
        let (status, log) = start_must_fail(args);
        let status = status.unwrap_or_else(|| panic!("{args:?}: the server kept running"));
        assert!(!status.success(), "{args:?}: {status:?}");
        let lines = module_lines(&log);
        assert_eq!(lines.len(), 1, "{args:?}: one line from the module\n{log}");
        assert!(
            lines[0].ends_with(&format!("<unique> {line}")),
            "{args:?}:\n{}\nexpected the line to end with\n<unique> {line}",
            lines[0]
        );
        assert!(log.contains("server aborting"), "{args:?}:\n{log}");
    }
}

/// A server started from a configuration file, so that CONFIG REWRITE has
/// a file to write.
struct ConfServer {
    dir: PathBuf,
    port: u16,
    child: Child,
}

impl ConfServer {
    fn conf(&self) -> PathBuf {
        self.dir.join("redis.conf")
    }

    fn write_conf(dir: &Path, port: u16, lines: &[&str]) {
        let mut text = format!(
            "port {port}\nbind 127.0.0.1\ndir {}\nsave \"\"\nlogfile redis.log\n",
            dir.display()
        );
        for line in lines {
            text.push_str(line);
            text.push('\n');
        }
        std::fs::write(dir.join("redis.conf"), text).expect("write redis.conf");
    }

    fn spawn(dir: &Path) -> Child {
        Command::new(redis_server())
            .arg(dir.join("redis.conf"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server runs")
    }

    /// `lines` go after the common settings; `{module}` is the module's path.
    fn start(lines: &[&str]) -> Self {
        let dir = temp_dir("conf");
        let port = free_port();
        let module = module_path().display().to_string();
        let lines: Vec<String> = lines
            .iter()
            .map(|l| l.replace("{module}", &module))
            .collect();
        let lines: Vec<&str> = lines.iter().map(String::as_str).collect();
        Self::write_conf(&dir, port, &lines);
        let child = Self::spawn(&dir);
        let mut server = Self { dir, port, child };
        server.wait_ready();
        server
    }

    fn wait_ready(&mut self) {
        let url = format!("redis://127.0.0.1:{}/", self.port);
        let start = Instant::now();
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                panic!("redis-server exited ({status}):\n{}", self.log());
            }
            let ping = redis::Client::open(url.as_str())
                .and_then(|c| c.get_connection_with_timeout(Duration::from_secs(1)))
                .and_then(|mut c| redis::cmd("PING").query::<String>(&mut c));
            if ping.is_ok() {
                return;
            }
            assert!(
                start.elapsed() < Duration::from_secs(10),
                "not ready:\n{}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    fn con(&self) -> common::Connection {
        redis::Client::open(format!("redis://127.0.0.1:{}/", self.port))
            .and_then(|c| c.get_connection())
            .expect("connect")
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("redis.log")).unwrap_or_default()
    }

    fn restart(&mut self) {
        let _ = redis::cmd("SHUTDOWN")
            .arg("NOSAVE")
            .query::<redis::Value>(&mut self.con());
        let _ = self.child.wait();
        self.child = Self::spawn(&self.dir);
        self.wait_ready();
    }
}

impl Drop for ConfServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

#[test]
fn config_rewrite_keeps_the_unique_settings() {
    let mut server = ConfServer::start(&[
        "loadmodule {module} reap-interval 50 unique.metrics-minutes 30",
        "unique.reap-batch 30",
    ]);
    let con = &mut server.con();
    assert_eq!(config(con, "unique.reap-interval"), "50");
    assert_eq!(config(con, "unique.metrics-minutes"), "30");
    assert_eq!(config(con, "unique.reap-batch"), "30");
    call!(con, "CONFIG", "SET", "unique.max-meta-bytes", 100).expect("CONFIG SET");
    call!(con, "CONFIG", "SET", "unique.reap-interval", 70).expect("CONFIG SET");
    call!(con, "CONFIG", "SET", "unique.reap-batch", 40).expect("CONFIG SET");
    call!(con, "CONFIG", "REWRITE").expect("CONFIG REWRITE");

    let text = std::fs::read_to_string(server.conf()).expect("redis.conf");
    for line in [
        "unique.max-meta-bytes 100",
        "unique.reap-interval 70",
        "unique.reap-batch 40",
    ] {
        assert!(text.lines().any(|l| l == line), "{line}:\n{text}");
    }
    assert!(
        text.lines().any(|l| l.starts_with("loadmodule ")
            && l.ends_with(" reap-interval 50 unique.metrics-minutes 30")),
        "the module arguments stay:\n{text}"
    );

    server.restart();
    let con = &mut server.con();
    assert_eq!(config(con, "unique.max-meta-bytes"), "100");
    assert_eq!(
        config(con, "unique.reap-interval"),
        "70",
        "the file wins over the argument"
    );
    assert_eq!(config(con, "unique.reap-batch"), "40");
    assert_eq!(config(con, "unique.metrics-minutes"), "30");
}

#[test]
fn a_bad_unique_setting_in_the_configuration_file_stops_the_server() {
    let dir = temp_dir("badconf");
    let module = module_path().display().to_string();
    ConfServer::write_conf(
        &dir,
        free_port(),
        &[&format!("loadmodule {module}"), "unique.reap-batch 0"],
    );
    let mut child = ConfServer::spawn(&dir);
    let status = exit_status(&mut child).expect("the server stops by itself");
    let log = std::fs::read_to_string(dir.join("redis.log")).unwrap_or_default();
    let _ = std::fs::remove_dir_all(&dir);
    assert!(!status.success());
    assert!(
        log.contains("unique.reap-batch") && log.contains("between 1 and 100000"),
        "{log}"
    );
    assert!(log.contains("server aborting"), "{log}");
}

#[test]
fn module_load_with_a_bad_argument_is_an_error_and_the_server_keeps_serving() {
    let server = ConfServer::start(&["enable-module-command yes"]);
    let con = &mut server.con();
    let module = module_path().display().to_string();
    let refused = call!(con, "MODULE", "LOAD", &module, "reap-batch", "100001");
    assert!(
        matches!(&refused, Err(e) if e.starts_with("ERR Error loading the extension")),
        "{refused:?}"
    );
    assert!(
        server.log().contains(
            "module argument `reap-batch 100001`: unique.reap-batch takes an integer from 1 to 100000"
        ),
        "{}",
        server.log()
    );
    // Nothing of the failed load is left behind: a good load then works.
    call!(con, "MODULE", "LOAD", &module, "unique.reap-batch", "9").expect("MODULE LOAD");
    assert_eq!(config(con, "unique.reap-batch"), "9");
    assert!(call!(con, "UNIQUE.LOCK", "k", "j").is_ok());
}
