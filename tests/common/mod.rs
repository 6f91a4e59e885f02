//! The integration harness: builds the module once (release), starts real
//! redis-server processes on free ports in temporary directories, and stops
//! them when dropped.
//!
//! Which server and which module, from the environment (the client suites
//! read the same two variables):
//! - `REDIS_SERVER`: the server binary, `redis-server` on the PATH by default
//!   (Redis 7.2 or Valkey 8 for `make test-compat`);
//! - `REDIS_UNIQUE_MODULE`: the module to load, by default the freshly built
//!   target/release/libredis_unique.so;
//! - `REDIS_CLI`: the redis-cli the cli suite and the cluster test run,
//!   `redis-cli` on the PATH by default;
//! - `REDIS_VALGRIND`: see `spawn`.

#![allow(dead_code)] // each test binary uses a different part of the harness

use std::collections::BTreeSet;
use std::ffi::OsString;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

pub mod cli;

pub use redis::{Connection, Value};

/// The server binary: `$REDIS_SERVER`, or `redis-server` on the PATH.
pub fn server_binary() -> OsString {
    std::env::var_os("REDIS_SERVER")
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "redis-server".into())
}

/// The redis-cli binary: `$REDIS_CLI`, or `redis-cli` on the PATH.
pub fn cli_binary() -> OsString {
    std::env::var_os("REDIS_CLI")
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "redis-cli".into())
}

/// The module: `$REDIS_UNIQUE_MODULE` (a module built elsewhere), or the
/// freshly built one. `cargo test` does not rebuild the cdylib of
/// target/release, so the harness builds it, once per test binary.
pub fn module_path() -> &'static Path {
    static PATH: OnceLock<PathBuf> = OnceLock::new();
    PATH.get_or_init(|| {
        if let Some(given) = std::env::var_os("REDIS_UNIQUE_MODULE").filter(|s| !s.is_empty()) {
            let path = PathBuf::from(given);
            assert!(
                path.exists(),
                "REDIS_UNIQUE_MODULE={} does not exist",
                path.display()
            );
            return path;
        }
        let root = Path::new(env!("CARGO_MANIFEST_DIR"));
        let status = Command::new(env!("CARGO"))
            .args(["build", "--release", "--lib", "--quiet"])
            // Set for the test binary only (.ci/shuffled-test): a cargo that saw it would
            // rebuild the module from scratch.
            .env_remove("RUSTC_BOOTSTRAP")
            .current_dir(root)
            .status()
            .expect("cargo runs");
        assert!(status.success(), "building the module failed");
        let path = root.join("target/release/libredis_unique.so");
        assert!(path.exists(), "{} was not built", path.display());
        path
    })
}

/// How long a test waits for a condition before it fails: a server, a replica, a
/// reaper tick or a waiter's grant comes in milliseconds on an idle machine, but CI runs
/// on 2 shared cores with four suites, background builds, and under valgrind (20 times
/// slower). A bound only costs time when the test fails anyway, so it is generous: 60 s,
/// 5 minutes under valgrind. Tests wait with [`wait_for`], never a fixed sleep.
pub fn patient() -> Duration {
    if valgrind_logs().is_some() {
        Duration::from_secs(300)
    } else {
        Duration::from_secs(60)
    }
}

/// Polls `condition` every few ms until it holds; fails after [`patient`].
pub fn wait_for(what: &str, condition: impl FnMut() -> bool) {
    wait_until(patient(), what, condition)
}

/// Polls `condition` every few ms until it holds or `limit` passes.
pub fn wait_until(limit: Duration, what: &str, mut condition: impl FnMut() -> bool) {
    let start = Instant::now();
    while !condition() {
        assert!(
            start.elapsed() < limit,
            "timed out after {limit:?} waiting for {what}"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

pub struct Server {
    pub port: u16,
    pub dir: PathBuf,
    child: Child,
    args: Vec<String>,
}

impl Server {
    /// A server with the module and no persistence.
    pub fn start() -> Self {
        Self::start_with(&[])
    }

    /// A server with the module and extra `--name value` arguments.
    pub fn start_with(extra: &[&str]) -> Self {
        Self::start_on(extra, free_port)
    }

    /// A Redis Cluster node: its bus port (port + 10000) must be free too.
    pub fn start_cluster_node(extra: &[&str]) -> Self {
        let mut args = vec![
            "--cluster-enabled",
            "yes",
            "--cluster-config-file",
            "nodes.conf",
        ];
        args.extend_from_slice(extra);
        Self::start_on(&args, free_port_with_bus)
    }

    fn start_on(extra: &[&str], pick_port: fn() -> u16) -> Self {
        let dir = temp_dir("test");
        let args: Vec<String> = extra.iter().map(|s| s.to_string()).collect();
        // A free port can be taken between our probe and the server's bind: retry,
        // in the same directory, keeping each failed try's log beside it.
        for attempt in 1..=5 {
            let port = pick_port();
            let child = spawn(port, &dir, &args);
            let mut server = Self {
                port,
                dir: dir.clone(),
                child,
                args: args.clone(),
            };
            if server.wait_ready() {
                return server;
            }
            let _ = server.child.kill();
            let _ = server.child.wait();
            let _ = std::fs::rename(
                dir.join("redis.log"),
                dir.join(format!("redis-try-{attempt}.log")),
            );
            // Dropping it must not remove the directory the next try runs in.
            server.dir = PathBuf::new();
        }
        panic!(
            "{} did not start in 5 tries; see {}/redis-try-*.log",
            server_binary().to_string_lossy(),
            dir.display()
        );
    }

    fn wait_ready(&mut self) -> bool {
        let start = Instant::now();
        while start.elapsed() < patient() {
            if let Ok(Some(_)) = self.child.try_wait() {
                return false;
            }
            // Ready (PING answers once loading is done), and ours, not
            // another process that took the port meanwhile.
            if let Ok(mut con) = self.try_connect()
                && redis::cmd("PING").query::<String>(&mut con).is_ok()
            {
                return self.is_ours(&mut con);
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        false
    }

    /// Whether the server that answers on `con` is this one's process: a
    /// port probed free can be bound by another test's server first.
    fn is_ours(&self, con: &mut Connection) -> bool {
        let pid = format!("process_id:{}", self.child.id());
        redis::cmd("INFO")
            .arg("server")
            .query::<String>(con)
            .is_ok_and(|info| info.lines().any(|l| l.trim() == pid))
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    fn try_connect(&self) -> redis::RedisResult<Connection> {
        redis::Client::open(self.url())?.get_connection_with_timeout(Duration::from_secs(5))
    }

    /// A RESP2 connection.
    pub fn con(&self) -> Connection {
        self.try_connect().expect("connect")
    }

    /// A RESP3 connection.
    pub fn con3(&self) -> Connection {
        let url = format!("{}?protocol=resp3", self.url());
        redis::Client::open(url)
            .and_then(|c| c.get_connection())
            .expect("connect resp3")
    }

    /// Stops the server (SHUTDOWN with the given mode, e.g. "NOSAVE" or
    /// "SAVE") and starts it again on the same port and directory.
    pub fn restart(&mut self, shutdown: &str) {
        let _ = redis::cmd("SHUTDOWN")
            .arg(shutdown)
            .query::<Value>(&mut self.con());
        let _ = self.child.wait();
        self.child = spawn(self.port, &self.dir, &self.args);
        assert!(
            self.wait_ready(),
            "restart failed; see {}/redis.log",
            self.dir.display()
        );
    }

    /// Kills the server with SIGKILL, as a crash would.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Starts the server again on the same port and directory (after `kill`).
    pub fn start_again(&mut self) {
        self.child = spawn(self.port, &self.dir, &self.args);
        assert!(
            self.wait_ready(),
            "start failed; see {}/redis.log",
            self.dir.display()
        );
    }

    /// Starts a replica of this server (with extra arguments) and waits until
    /// it is in sync.
    pub fn start_replica(&self, extra: &[&str]) -> Self {
        let port = self.port.to_string();
        let mut args = vec!["--replicaof", "127.0.0.1", &port];
        args.extend_from_slice(extra);
        let replica = Self::start_with(&args);
        replica.wait_in_sync();
        replica
    }

    pub fn wait_in_sync(&self) {
        let mut con = self.con();
        let limit = patient();
        wait_until(limit, "the replica link", || {
            let info: String = redis::cmd("INFO")
                .arg("replication")
                .query(&mut con)
                .unwrap_or_default();
            info.contains("master_link_status:up")
        });
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("redis.log")).unwrap_or_default()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        // Under valgrind, a clean shutdown: the leak report is written at exit.
        // Only to this server, still running: a start that failed because
        // another test's server took the port must not shut that one down.
        if valgrind_logs().is_some()
            && let Ok(None) = self.child.try_wait()
            && let Ok(mut con) = self.try_connect()
            && self.is_ours(&mut con)
        {
            let _ = redis::cmd("SHUTDOWN")
                .arg("NOSAVE")
                .query::<Value>(&mut con);
            let shutdown = Instant::now();
            while matches!(self.child.try_wait(), Ok(None)) && shutdown.elapsed() < patient() {
                std::thread::sleep(Duration::from_millis(10));
            }
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A port free now and never handed out before in this process: the kernel
/// can give a probe the port it gave another probe a moment ago, while the
/// first test's server (slow to start under valgrind) has not bound it yet,
/// and two tests would then start their servers on one port.
pub fn free_port() -> u16 {
    static GIVEN: Mutex<BTreeSet<u16>> = Mutex::new(BTreeSet::new());
    let mut given = GIVEN
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    for _ in 0..1_000 {
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map(|a| a.port())
            .expect("a free port");
        if given.insert(port) {
            return port;
        }
    }
    panic!("no free port that this process has not handed out before");
}

/// A free port whose cluster bus port (port + 10000) is free as well.
fn free_port_with_bus() -> u16 {
    for _ in 0..100 {
        let port = free_port();
        if port <= 55_535 && TcpListener::bind(("127.0.0.1", port + 10_000)).is_ok() {
            return port;
        }
    }
    panic!("no free port pair for a cluster node");
}

fn spawn(port: u16, dir: &Path, extra: &[String]) -> Child {
    let module = module_path();
    let server = server_binary();
    // REDIS_VALGRIND=<dir>: the server runs under valgrind memcheck, one log
    // per server in <dir> (`make test-valgrind` reads them).
    let mut command = match valgrind_logs() {
        Some(logs) => {
            let mut c = Command::new("valgrind");
            c.args(["--tool=memcheck", "--leak-check=full", "--num-callers=30"])
                .args([
                    "--show-leak-kinds=definite",
                    "--errors-for-leak-kinds=definite",
                ])
                .arg(format!(
                    "--suppressions={}/tests/valgrind.supp",
                    env!("CARGO_MANIFEST_DIR")
                ))
                .arg(format!("--log-file={logs}/redis-%p.log"))
                .arg(&server);
            c
        }
        None => Command::new(&server),
    };
    command
        .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
        .arg("--dir")
        .arg(dir)
        .args([
            "--save",
            "",
            "--appendonly",
            "no",
            "--enable-debug-command",
            "yes",
        ])
        // A replica's first sync starts at once instead of waiting 5 s for others.
        .args(["--repl-diskless-sync-delay", "0"])
        .args(["--logfile", "redis.log"])
        .arg("--loadmodule")
        .arg(module)
        .args(extra)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap_or_else(|e| {
            panic!(
                "{} runs (apt-get install redis-server, or set REDIS_SERVER): {e}",
                server.to_string_lossy()
            )
        })
}

/// The directory for valgrind's logs when the servers run under valgrind.
pub fn valgrind_logs() -> Option<String> {
    std::env::var("REDIS_VALGRIND")
        .ok()
        .filter(|d| !d.is_empty())
}

/// How much longer than usual a server takes to start or sync (valgrind: 20x).
pub fn patience() -> u32 {
    if valgrind_logs().is_some() { 20 } else { 1 }
}

/// Runs a command; the reply, or the error as the text Redis sent.
pub fn run(cmd: &redis::Cmd, con: &mut Connection) -> Result<Value, String> {
    cmd.query::<Value>(con)
        .map_err(|e| match (e.code(), e.detail()) {
            (Some(code), Some(detail)) => format!("{code} {detail}"),
            (Some(code), None) => code.to_string(),
            _ => e.to_string(),
        })
}

/// `call!(con, "UNIQUE.LOCK", "k", "j")`: runs a command, reply or error text.
#[macro_export]
macro_rules! call {
    ($con:expr, $($arg:expr),+ $(,)?) => {{
        let mut cmd = redis::Cmd::new();
        $(cmd.arg($arg);)+
        $crate::common::run(&cmd, $con)
    }};
}

/// The server's `redis_version` (Valkey reports the Redis version it is
/// compatible with: 7.2.4).
pub fn redis_version(con: &mut Connection) -> String {
    let info: String = redis::cmd("INFO").arg("server").query(con).expect("INFO");
    info.lines()
        .find_map(|l| l.strip_prefix("redis_version:"))
        .unwrap_or_default()
        .trim()
        .to_string()
}

/// A command's reply as text (a bulk, simple or verbatim string), or a panic
/// with what came back.
pub fn text(con: &mut Connection, args: &[&str]) -> String {
    let mut cmd = redis::cmd(args[0]);
    cmd.arg(&args[1..]);
    match run(&cmd, con) {
        Ok(Value::BulkString(b)) => String::from_utf8_lossy(&b).into_owned(),
        Ok(Value::SimpleString(s)) => s,
        Ok(Value::VerbatimString { text, .. }) => text,
        other => panic!("{args:?}: {other:?}"),
    }
}

/// Waits until an AOF rewrite (BGREWRITEAOF) is neither running nor scheduled.
pub fn wait_for_rewrite(con: &mut Connection) {
    wait_until(Duration::from_secs(20), "the AOF rewrite", || {
        let info: String = redis::cmd("INFO")
            .arg("persistence")
            .query(con)
            .unwrap_or_default();
        info.contains("aof_rewrite_in_progress:0") && info.contains("aof_rewrite_scheduled:0")
    });
}

/// The token of a granted LOCK, or a panic with what came back.
pub fn token(reply: Result<Value, String>) -> i64 {
    match reply {
        Ok(Value::Int(t)) => t,
        other => panic!("expected a token, got {other:?}"),
    }
}

/// The jids LOCKEDBY shows, as strings.
pub fn holders(con: &mut Connection, key: &str) -> Vec<String> {
    redis::cmd("UNIQUE.LOCKEDBY")
        .arg(key)
        .query(con)
        .expect("LOCKEDBY")
}

pub fn digest(con: &mut Connection) -> String {
    redis::cmd("DEBUG")
        .arg("DIGEST")
        .query(con)
        .expect("DEBUG DIGEST")
}

/// Waits until the replica has everything the primary sent and both hold the
/// same data. Keys that Redis expires on the primary reach the replica as DEL
/// a moment later, so equality is polled (bounded), never assumed. On failure
/// it names every key that differs, with both sides' value and expiry.
pub fn wait_digests_equal(primary: &mut Connection, replica: &mut Connection) {
    let start = Instant::now();
    loop {
        let _: i64 = redis::cmd("WAIT")
            .arg(1)
            .arg(5_000)
            .query(primary)
            .expect("WAIT");
        let (p, r) = (digest(primary), digest(replica));
        if p == r {
            return;
        }
        if start.elapsed() > patient() {
            panic!(
                "digests differ: primary {p} replica {r}\n{}",
                key_differences(primary, replica)
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Every key whose value or expiry differs between two servers, each side's
/// `DUMP` (hex) and `PTTL`: what a digest mismatch is made of.
fn key_differences(a: &mut Connection, b: &mut Connection) -> String {
    let state = |con: &mut Connection, key: &str| {
        let dump: Option<Vec<u8>> = redis::cmd("DUMP").arg(key).query(con).unwrap_or(None);
        let pttl: i64 = redis::cmd("PTTL").arg(key).query(con).unwrap_or(-3);
        let hex: String = dump
            .unwrap_or_default()
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        (hex, pttl)
    };
    let mut keys: Vec<String> = redis::cmd("KEYS").arg("*").query(a).unwrap_or_default();
    keys.extend(
        redis::cmd("KEYS")
            .arg("*")
            .query::<Vec<String>>(b)
            .unwrap_or_default(),
    );
    keys.sort();
    keys.dedup();
    let mut out = String::new();
    for key in keys {
        let (x, y) = (state(a, &key), state(b, &key));
        if x != y {
            out += &format!(
                "{key}: primary pttl {} dump {}\n{key}: replica pttl {} dump {}\n",
                x.1, x.0, y.1, y.0
            );
        }
    }
    out
}

/// The AOF increment files of a server's directory, oldest first.
pub fn aof_increments(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir.join("appendonlydir"))
        .into_iter()
        .flatten()
        .flatten()
        .map(|f| f.path())
        .filter(|p| p.to_string_lossy().ends_with(".incr.aof"))
        .collect();
    files.sort();
    files
}

/// Every command of a server's AOF increments, in order, each as its
/// arguments (the command's name first).
pub fn aof_commands(dir: &Path) -> Vec<Vec<Vec<u8>>> {
    aof_increments(dir)
        .iter()
        .flat_map(|f| resp_commands(&std::fs::read(f).unwrap_or_default()))
        .collect()
}

/// The `UNIQUE.APPLY` commands of a server's AOF increments (its effects,
/// less the `DEL`s), in order, each as its arguments, the name first.
pub fn aof_effects(dir: &Path) -> Vec<Vec<Vec<u8>>> {
    aof_commands(dir)
        .into_iter()
        .filter(|c| {
            c.first()
                .is_some_and(|n| n.eq_ignore_ascii_case(b"unique.apply"))
        })
        .collect()
}

/// The commands of an AOF in RESP (`*n`, then `$len` and the bytes, each line
/// ending in CRLF); stops at anything else, such as a half-written tail.
pub fn resp_commands(bytes: &[u8]) -> Vec<Vec<Vec<u8>>> {
    fn line<'a>(bytes: &'a [u8], at: &mut usize) -> Option<&'a [u8]> {
        let rest = bytes.get(*at..)?;
        let end = rest.windows(2).position(|w| w == b"\r\n")?;
        *at += end + 2;
        rest.get(..end)
    }
    fn number(line: &[u8], prefix: u8) -> Option<usize> {
        let (first, digits) = line.split_first()?;
        (*first == prefix).then_some(())?;
        std::str::from_utf8(digits).ok()?.parse().ok()
    }
    let (mut out, mut at) = (Vec::new(), 0);
    'commands: while let Some(n) = line(bytes, &mut at).and_then(|l| number(l, b'*')) {
        let mut command = Vec::with_capacity(n);
        for _ in 0..n {
            let Some(len) = line(bytes, &mut at).and_then(|l| number(l, b'$')) else {
                break 'commands;
            };
            let Some(arg) = bytes.get(at..at + len) else {
                break 'commands;
            };
            command.push(arg.to_vec());
            at += len + 2;
        }
        out.push(command);
    }
    out
}

/// The integer of a reply, or a panic with what came back.
pub fn int(v: Value) -> i64 {
    match v {
        Value::Int(n) => n,
        other => panic!("integer expected: {other:?}"),
    }
}

/// `UNIQUE.METRICS FORMAT json [extra...]`, parsed.
pub fn metrics_json(con: &mut Connection, extra: &[&str]) -> serde_json::Value {
    let text: String = redis::cmd("UNIQUE.METRICS")
        .arg("FORMAT")
        .arg("json")
        .arg(extra)
        .query(con)
        .expect("METRICS");
    serde_json::from_str(&text).expect("JSON")
}

/// The module's gauges from UNIQUE.METRICS: (locks, holders), -1 for one
/// missing.
pub fn gauges(con: &mut Connection) -> (i64, i64) {
    let m = metrics_json(con, &[]);
    (
        m["locks"].as_i64().unwrap_or(-1),
        m["holders"].as_i64().unwrap_or(-1),
    )
}

/// LOCKEDBY WITHMETA on RESP2: each holder as its (field, value) pairs, in order.
pub fn with_meta(con: &mut Connection, key: &str) -> Vec<Vec<(String, Value)>> {
    let Ok(Value::Array(list)) = call!(con, "UNIQUE.LOCKEDBY", key, "WITHMETA") else {
        panic!("LOCKEDBY WITHMETA is an array");
    };
    list.into_iter()
        .map(|h| {
            let Value::Array(flat) = h else {
                panic!("a holder is a flat array on RESP2: {h:?}")
            };
            flat.chunks(2)
                .map(|kv| match kv {
                    [Value::BulkString(k), v] => {
                        (String::from_utf8_lossy(k).into_owned(), v.clone())
                    }
                    other => panic!("field/value pair expected: {other:?}"),
                })
                .collect()
        })
        .collect()
}

/// One field of one holder's WITHMETA map.
pub fn field(holder: &[(String, Value)], name: &str) -> Value {
    holder
        .iter()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.clone())
        .unwrap_or_else(|| panic!("no {name}"))
}

/// An integer field of `INFO section` (`used_memory`, `unique_locks`...).
pub fn info_field(con: &mut Connection, section: &str, name: &str) -> i64 {
    let info: String = redis::cmd("INFO").arg(section).query(con).expect("INFO");
    info.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("INFO {section} has no integer {name}"))
}

/// A new directory under the system's temporary one, for one server:
/// `redis-unique-<tag>-<pid>-<n>`.
pub fn temp_dir(tag: &str) -> PathBuf {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    let dir = std::env::temp_dir().join(format!(
        "redis-unique-{tag}-{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    ));
    std::fs::create_dir_all(&dir).expect("temp dir");
    dir
}

/// A small deterministic generator (xorshift), so a failing run can be replayed.
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// The server's clock (TIME), in unix milliseconds.
pub fn server_time_ms(con: &mut Connection) -> i64 {
    let (secs, micros): (i64, i64) = redis::cmd("TIME").query(con).expect("TIME");
    secs * 1000 + micros / 1000
}
