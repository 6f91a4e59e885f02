//! Lines for operators, at the server's `verbose` and `debug` log levels:
//! one line per decision that matters (a waiter timed out or redirected, a
//! lock's holders reaped), and none on the hot path.
//!
//! Redis filters a module's log lines by its `loglevel` itself, but only
//! after the module has formatted them. So the level is kept here, read
//! from the server at load and again after each `CONFIG SET loglevel`
//! (from a timer, outside the command that changed it), and a line is
//! formatted only when the level shows it: at the default `notice`, a
//! decision costs one atomic load.

use std::sync::atomic::{AtomicU8, Ordering};
use std::time::Duration;

use redis_module::{Context, RedisValue};

/// Redis's log levels, least severe first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
#[repr(u8)]
pub enum Level {
    Debug = 0,
    Verbose = 1,
    Notice = 2,
    Warning = 3,
}

impl Level {
    /// The level a `loglevel` value names (`nothing` logs nothing at all).
    pub fn parse(value: &[u8]) -> Option<Self> {
        match value.to_ascii_lowercase().as_slice() {
            b"debug" => Some(Self::Debug),
            b"verbose" => Some(Self::Verbose),
            b"notice" => Some(Self::Notice),
            b"warning" | b"nothing" => Some(Self::Warning),
            _ => None,
        }
    }
}

/// The server's `loglevel`, as last read (Redis's default until then).
static LEVEL: AtomicU8 = AtomicU8::new(Level::Notice as u8);

/// Whether the server logs lines of `level`.
#[inline]
pub fn enabled(level: Level) -> bool {
    level as u8 >= LEVEL.load(Ordering::Relaxed)
}

/// Logs the line `line` makes at `verbose`, formatting it only if the server
/// shows it.
pub fn verbose(ctx: &Context, line: impl FnOnce() -> String) {
    if enabled(Level::Verbose) {
        ctx.log_verbose(&line());
    }
}

/// Logs the line `line` makes at `debug`, formatting it only if the server
/// shows it.
pub fn debug(ctx: &Context, line: impl FnOnce() -> String) {
    if enabled(Level::Debug) {
        ctx.log_debug(&line());
    }
}

/// Reads the server's `loglevel` soon after the load, and follows it.
pub fn start(ctx: &Context) {
    read_level_soon(ctx);
}

/// A `CONFIG SET` changed the settings `names`: reads the level again if
/// `loglevel` is one of them.
pub fn config_changed(ctx: &Context, names: &[&str]) {
    if names.iter().any(|n| n.eq_ignore_ascii_case("loglevel")) {
        read_level_soon(ctx);
    }
}

/// From a timer: not inside the load nor inside the CONFIG SET.
fn read_level_soon(ctx: &Context) {
    ctx.create_timer(Duration::ZERO, |ctx: &Context, ()| read_level(ctx), ());
}

fn read_level(ctx: &Context) {
    let Ok(RedisValue::Array(reply)) = ctx.call("CONFIG", &["GET", "loglevel"][..]) else {
        return;
    };
    let value = match reply.get(1) {
        Some(RedisValue::SimpleString(s) | RedisValue::BulkString(s)) => s.as_bytes().to_vec(),
        Some(RedisValue::StringBuffer(b)) => b.clone(),
        _ => return,
    };
    if let Some(level) = Level::parse(&value) {
        LEVEL.store(level as u8, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn levels_read_as_redis_names_them() {
        assert_eq!(Level::parse(b"debug"), Some(Level::Debug));
        assert_eq!(Level::parse(b"VERBOSE"), Some(Level::Verbose));
        assert_eq!(Level::parse(b"notice"), Some(Level::Notice));
        assert_eq!(Level::parse(b"warning"), Some(Level::Warning));
        assert_eq!(Level::parse(b"nothing"), Some(Level::Warning));
        assert_eq!(Level::parse(b"loud"), None);
        assert!(Level::Debug < Level::Verbose && Level::Verbose < Level::Notice);
    }

    #[test]
    fn only_lines_at_or_above_the_level_are_made() {
        LEVEL.store(Level::Notice as u8, Ordering::Relaxed);
        assert!(!enabled(Level::Verbose) && !enabled(Level::Debug));
        assert!(enabled(Level::Notice) && enabled(Level::Warning));
        let mut made = false;
        verbose(&Context::dummy(), || {
            made = true;
            String::new()
        });
        assert!(!made, "a line the server would drop is not formatted");
        LEVEL.store(Level::Debug as u8, Ordering::Relaxed);
        assert!(enabled(Level::Debug));
        LEVEL.store(Level::Notice as u8, Ordering::Relaxed);
    }
}
