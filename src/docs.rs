//! What each public command tells Redis about itself (`COMMAND DOCS`,
//! `COMMAND INFO`, key specs for `COMMAND GETKEYSANDFLAGS`, ACL and cluster
//! routing): plain data, the one source of both the command info the module
//! registers (`ffi::describe_commands`) and the argument reference in
//! docs/commands.md (`markdown`, kept equal to the file by tests/docs.rs).
//!
//! This file depends on nothing else in the crate, so that the tests can
//! include it by path without linking the module.

/// A command's self-description.
pub struct CommandDoc {
    /// As registered, lower case.
    pub name: &'static str,
    pub summary: &'static str,
    /// The module version that introduced the command.
    pub since: &'static str,
    pub complexity: &'static str,
    /// Redis's convention: N exactly N arguments (the name included), -N at least N.
    pub arity: i32,
    /// The command flags it is registered with (`write deny-oom fast`...).
    pub flags: &'static str,
    /// The ACL categories it is in (space separated, without `@`), where
    /// the server has categories for module commands; the module's own
    /// `unique` is added where the server lets a module add one.
    pub acl_categories: &'static str,
    /// Space-separated hints for clients and proxies, "" for none.
    pub tips: &'static str,
    pub key_specs: &'static [KeySpec],
    pub args: &'static [Arg],
}

/// One key at a fixed position, or the keys that follow their count.
pub struct KeySpec {
    /// The argument index of the key (1 = the first after the name), or of
    /// the count of keys when `counted`.
    pub index: i32,
    /// The argument at `index` is a count (numkeys, as EVAL's) and that
    /// many keys follow it; else it is the one key.
    pub counted: bool,
    pub flags: &'static [KeyFlag],
}

/// Key-spec flags, as Redis names them in `COMMAND INFO`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KeyFlag {
    /// Read only.
    Ro,
    /// Read and write.
    Rw,
    /// Returns or uses the user data of the value.
    Access,
    /// Updates the value (new data may be added).
    Update,
    /// Removes data from the value (or the key).
    Delete,
}

impl KeyFlag {
    /// The name `COMMAND INFO` and `COMMAND GETKEYSANDFLAGS` give it.
    pub fn name(self) -> &'static str {
        match self {
            Self::Ro => "RO",
            Self::Rw => "RW",
            Self::Access => "access",
            Self::Update => "update",
            Self::Delete => "delete",
        }
    }
}

/// The type of an argument, as `COMMAND DOCS` names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ArgType {
    /// A key name; the index of its key spec.
    Key(i32),
    String,
    Integer,
    UnixTime,
    PureToken,
    OneOf,
    Block,
}

impl ArgType {
    pub fn name(self) -> &'static str {
        match self {
            Self::Key(_) => "key",
            Self::String => "string",
            Self::Integer => "integer",
            Self::UnixTime => "unix-time",
            Self::PureToken => "pure-token",
            Self::OneOf => "oneof",
            Self::Block => "block",
        }
    }
}

/// One argument of a command.
pub struct Arg {
    pub name: &'static str,
    pub kind: ArgType,
    /// The keyword that comes before the value (or is the whole argument).
    pub token: Option<&'static str>,
    /// The placeholder shown for the value (`redis-cli` hints from 7.2 on);
    /// `None` shows `name`.
    pub display: Option<&'static str>,
    pub summary: &'static str,
    pub optional: bool,
    pub multiple: bool,
    /// The alternatives of a `OneOf`, the parts of a `Block`.
    pub subargs: &'static [Arg],
}

impl Arg {
    const fn new(name: &'static str, kind: ArgType, summary: &'static str) -> Self {
        Self {
            name,
            kind,
            token: None,
            display: None,
            summary,
            optional: false,
            multiple: false,
            subargs: &[],
        }
    }

    /// `TOKEN display`, optional.
    const fn option(
        name: &'static str,
        kind: ArgType,
        token: &'static str,
        display: &'static str,
        summary: &'static str,
    ) -> Self {
        Self {
            token: Some(token),
            display: Some(display),
            optional: true,
            ..Self::new(name, kind, summary)
        }
    }

    /// A keyword alone.
    const fn token(name: &'static str, token: &'static str, summary: &'static str) -> Self {
        Self {
            token: Some(token),
            ..Self::new(name, ArgType::PureToken, summary)
        }
    }

    const fn optional(self) -> Self {
        Self {
            optional: true,
            ..self
        }
    }

    /// Given one or more times.
    const fn multiple(self) -> Self {
        Self {
            multiple: true,
            ..self
        }
    }

    /// With its alternatives (a `OneOf`) or parts (a `Block`).
    const fn parts(self, subargs: &'static [Arg]) -> Self {
        Self { subargs, ..self }
    }

    /// The flags `COMMAND DOCS` shows, in its order.
    pub fn flag_names(&self) -> Vec<&'static str> {
        let mut flags = Vec::new();
        if self.optional {
            flags.push("optional");
        }
        if self.multiple {
            flags.push("multiple");
        }
        flags
    }

    /// How the argument reads in a synopsis: `[TTL ms | PXAT unix-ms]`.
    /// `UNIQUE.LOCK key jid [LIMIT n] ...`.
    pub fn synopsis(&self) -> String {
        let body = match self.kind {
            ArgType::OneOf => self
                .subargs
                .iter()
                .map(Arg::synopsis)
                .collect::<Vec<_>>()
                .join(
                    if self.subargs.iter().all(|a| a.kind == ArgType::PureToken) {
                        "|"
                    } else {
                        " | "
                    },
                ),
            ArgType::Block => self
                .subargs
                .iter()
                .map(Arg::synopsis)
                .collect::<Vec<_>>()
                .join(" "),
            ArgType::PureToken => self.token.unwrap_or(self.name).to_string(),
            _ => {
                let value = self.display.unwrap_or(self.name);
                let value = if self.multiple {
                    format!("{value} [{value} ...]")
                } else {
                    value.to_string()
                };
                match self.token {
                    Some(token) => format!("{token} {value}"),
                    None => value.to_string(),
                }
            }
        };
        let body = match (self.kind, self.token) {
            (ArgType::OneOf | ArgType::Block, Some(token)) => format!("{token} {body}"),
            _ => body,
        };
        let body = if self.optional {
            format!("[{body}]")
        } else {
            body
        };
        // A repeated block reads as `[RATE i n PER ms [BURST b]]...`.
        if self.multiple && self.kind == ArgType::Block {
            format!("{body}...")
        } else {
            body
        }
    }
}

// Loaded by path so that tests/docs.rs, which includes this file by path,
// finds them too.
#[path = "docs/lock.rs"]
mod lock;
#[path = "docs/lockall.rs"]
mod lockall;
#[path = "docs/reads.rs"]
mod reads;

pub use lock::{LOCK, UNLOCK};
pub use lockall::{LOCKALL, UNLOCKALL};
pub use reads::{LOCKEDBY, METRICS, RATE, REAP, WAITERS};

const VERSION: &str = "0.1.0";

/// The public commands, in the order of docs/commands.md: everything Redis is
/// told about each (its name, flags, arity, key specs, docs). Each row of
/// `commands::REGISTRY` refers to its entry here by name (`&docs::LOCK`), so
/// a command cannot be registered without its docs or under another name;
/// a test there checks that every entry is registered. (UNIQUE.APPLY,
/// internal, is left without docs: see docs/commands.md.)
pub static COMMANDS: &[&CommandDoc] = &[
    &LOCK, &UNLOCK, &LOCKALL, &UNLOCKALL, &LOCKEDBY, &WAITERS, &RATE, &REAP, &METRICS,
];

pub fn synopsis(cmd: &CommandDoc) -> String {
    std::iter::once(cmd.name.to_ascii_uppercase())
        .chain(cmd.args.iter().map(Arg::synopsis))
        .collect::<Vec<_>>()
        .join(" ")
}

/// The argument reference of docs/commands.md, generated from [`COMMANDS`].
pub fn markdown() -> String {
    let mut out = String::new();
    for cmd in COMMANDS {
        out.push_str(&format!("### {}\n\n", cmd.name.to_ascii_uppercase()));
        out.push_str(&format!("`{}`\n\n", synopsis(cmd)));
        out.push_str(&format!("{}\n\n", cmd.summary));
        out.push_str(&format!(
            "- since: {}\n- complexity: {}\n- arity: {}\n- flags: {}\n",
            cmd.since, cmd.complexity, cmd.arity, cmd.flags
        ));
        let categories: Vec<String> = cmd
            .acl_categories
            .split_whitespace()
            .map(|c| format!("@{c}"))
            .collect();
        out.push_str(&format!(
            "- ACL categories: {} @unique\n",
            categories.join(" ")
        ));
        let keys: Vec<String> = cmd
            .key_specs
            .iter()
            .map(|k| {
                let flags: Vec<_> = k.flags.iter().map(|f| f.name()).collect();
                if k.counted {
                    format!(
                        "as many as argument {} says, from argument {} on ({})",
                        k.index,
                        k.index + 1,
                        flags.join(" ")
                    )
                } else {
                    format!("argument {} ({})", k.index, flags.join(" "))
                }
            })
            .collect();
        out.push_str(&format!(
            "- keys: {}\n",
            if keys.is_empty() {
                "none (node-local)".to_string()
            } else {
                keys.join(", ")
            }
        ));
        if !cmd.tips.is_empty() {
            out.push_str(&format!("- tips: {}\n", cmd.tips));
        }
        out.push_str(
            "\n| argument | type | token | flags | meaning |\n| --- | --- | --- | --- | --- |\n",
        );
        rows(&mut out, cmd.args, 0);
        out.push('\n');
    }
    out
}

fn rows(out: &mut String, args: &[Arg], depth: usize) {
    for arg in args {
        let indent = "↳ ".repeat(depth);
        let name = match arg.display {
            Some(d) if d != arg.name => format!("{indent}`{}` (`{d}`)", arg.name),
            _ => format!("{indent}`{}`", arg.name),
        };
        let kind = match arg.kind {
            ArgType::Key(i) => format!("key (spec {i})"),
            k => k.name().to_string(),
        };
        let token = arg.token.map(|t| format!("`{t}`")).unwrap_or_default();
        out.push_str(&format!(
            "| {name} | {kind} | {token} | {} | {} |\n",
            arg.flag_names().join(", "),
            arg.summary
        ));
        rows(out, arg.subargs, depth + 1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn synopses_read_as_the_reference_does() {
        let of = |name: &str| {
            COMMANDS
                .iter()
                .find(|c| c.name == name)
                .map(|c| synopsis(c))
                .unwrap_or_default()
        };
        assert_eq!(
            of("unique.lock"),
            "UNIQUE.LOCK key jid [LIMIT n] [TTL ms | PXAT unix-ms] [TYPE name] [OWNER id] [META json] [RATE n PER ms [BURST b]] [GROUP name [WEIGHT w]] [GROUPLIMIT m] [MODE shared|exclusive] [WAIT ms]"
        );
        assert_eq!(of("unique.unlock"), "UNIQUE.UNLOCK key jid [TOKEN t]");
        assert_eq!(
            of("unique.lockall"),
            "UNIQUE.LOCKALL numkeys key [key ...] jid [LIMIT n [n ...]] [RATE i n PER ms [BURST b]]... [GROUP i name [WEIGHT w]]... [GROUPLIMIT i m]... [MODE i shared|exclusive]... [TTL ms | PXAT unix-ms] [TYPE name] [OWNER id] [META json] [WAIT ms]"
        );
        assert_eq!(
            of("unique.unlockall"),
            "UNIQUE.UNLOCKALL numkeys key [key ...] jid [TOKEN t [t ...]]"
        );
        assert_eq!(
            of("unique.lockedby"),
            "UNIQUE.LOCKEDBY key [WITHMETA] [CURSOR cursor] [COUNT n]"
        );
        assert_eq!(of("unique.waiters"), "UNIQUE.WAITERS key [GROUPS]");
        assert_eq!(of("unique.rate"), "UNIQUE.RATE key");
        assert_eq!(of("unique.reap"), "UNIQUE.REAP cursor [COUNT n] [OWNER id]");
        assert_eq!(
            of("unique.metrics"),
            "UNIQUE.METRICS [[MINUTES n] [FORMAT resp|json|prometheus] | RESET]"
        );
    }

    #[test]
    fn arity_counts_the_required_arguments() {
        for cmd in COMMANDS {
            let required = 1 + cmd.args.iter().filter(|a| !a.optional).count() as i32;
            let fixed = cmd.args.iter().all(|a| !a.optional && !a.multiple);
            let expected = if fixed { required } else { -required };
            assert_eq!(cmd.arity, expected, "{}", cmd.name);
        }
    }

    #[test]
    fn key_arguments_point_at_their_key_spec() {
        for cmd in COMMANDS {
            for (i, arg) in cmd.args.iter().enumerate() {
                if let ArgType::Key(spec) = arg.kind {
                    let spec = cmd.key_specs.get(spec as usize);
                    // Counted keys follow their count.
                    let at = spec.map(|s| s.index + i32::from(s.counted));
                    assert_eq!(at, Some(i as i32 + 1), "{}", cmd.name);
                }
            }
        }
    }
}
