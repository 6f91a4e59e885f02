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

const VERSION: &str = "0.1.0";

/// A rate's period and burst, the same in LOCK's RATE and LOCKALL's per-key RATE.
const RATE_PER: Arg = Arg {
    optional: false,
    ..Arg::option(
        "per",
        ArgType::Integer,
        "PER",
        "ms",
        "the period in ms, 1 to 2^40",
    )
};
const RATE_BURST: Arg = Arg::option(
    "burst",
    ArgType::Integer,
    "BURST",
    "b",
    "grants allowed at once beyond the steady pace, 0 to 1000000 (default 0)",
);

/// The lease's two forms, TYPE and OWNER: the same in LOCK and LOCKALL.
const LEASE_FORMS: &[Arg] = &[
    Arg {
        optional: false,
        ..Arg::option(
            "ttl",
            ArgType::Integer,
            "TTL",
            "ms",
            "a lease of this many ms from now",
        )
    },
    Arg {
        optional: false,
        ..Arg::option(
            "pxat",
            ArgType::UnixTime,
            "PXAT",
            "unix-ms",
            "a lease that ends at this unix time in ms",
        )
    },
];
const TYPE_ARG: Arg = Arg::option(
    "type",
    ArgType::String,
    "TYPE",
    "name",
    "the lock type, 1 to 64 of A-Z a-z 0-9 _ : . - (default lock)",
);
const OWNER_ARG: Arg = Arg::option(
    "owner",
    ArgType::String,
    "OWNER",
    "id",
    "the worker process running the job, for REAP OWNER",
);

static LOCK_ARGS: &[Arg] = &[
    Arg::new("key", ArgType::Key(0), "the lock"),
    Arg::new("jid", ArgType::String, "the job id, 1 to 1024 bytes"),
    Arg::option(
        "limit",
        ArgType::Integer,
        "LIMIT",
        "n",
        "how many holders the lock may have for this call, 0 for no limit (default 1)",
    ),
    Arg::new(
        "lease",
        ArgType::OneOf,
        "the end of the lease (default: none)",
    )
    .optional()
    .parts(LEASE_FORMS),
    TYPE_ARG,
    OWNER_ARG,
    Arg::option(
        "meta",
        ArgType::String,
        "META",
        "json",
        "a JSON object kept with the holder",
    ),
    Arg::new(
        "rate",
        ArgType::Block,
        "a new grant also needs the key's rate to allow it (GCRA): at most n per ms, plus b at once",
    )
    .optional()
    .parts(&[
        Arg {
            optional: false,
            ..Arg::option(
                "n",
                ArgType::Integer,
                "RATE",
                "n",
                "grants per period, 1 to 1000000",
            )
        },
        RATE_PER,
        RATE_BURST,
    ]),
    Arg::new(
        "group",
        ArgType::Block,
        "the group (a tenant) the holder holds for: waiters are served fairly among groups",
    )
    .optional()
    .parts(&[
        Arg {
            optional: false,
            ..Arg::option(
                "name",
                ArgType::String,
                "GROUP",
                "name",
                "the group, 1 to 1024 bytes",
            )
        },
        Arg::option(
            "weight",
            ArgType::Integer,
            "WEIGHT",
            "w",
            "its share of the slots while it waits, 1 to 1000 (default 1)",
        ),
    ]),
    Arg::option(
        "grouplimit",
        ArgType::Integer,
        "GROUPLIMIT",
        "m",
        "a new grant also needs fewer than m holders of the group (needs GROUP)",
    ),
    Arg {
        token: Some("MODE"),
        ..Arg::new(
            "mode",
            ArgType::OneOf,
            "shared (readers, up to the limit) or exclusive (a writer, alone)",
        )
    }
    .optional()
    .parts(&[
        Arg::token("shared", "shared", "hold with others, up to the limit"),
        Arg::token("exclusive", "exclusive", "hold alone"),
    ]),
    Arg::option(
        "wait",
        ArgType::Integer,
        "WAIT",
        "ms",
        "when denied, block up to this many ms for a slot (and the rate)",
    ),
];

static METRICS_ARGS: &[Arg] = &[Arg::new("mode", ArgType::OneOf, "a report, or RESET")
    .optional()
    .parts(&[
        Arg::new("report", ArgType::Block, "the counters").parts(&[
            Arg::option(
                "minutes",
                ArgType::Integer,
                "MINUTES",
                "n",
                "sum over the last n minutes (default: since load or RESET)",
            ),
            Arg {
                token: Some("FORMAT"),
                ..Arg::new(
                    "format",
                    ArgType::OneOf,
                    "the reply's format (default resp)",
                )
            }
            .optional()
            .parts(&[
                Arg::token("resp", "resp", "a map"),
                Arg::token("json", "json", "a JSON text"),
                Arg::token("prometheus", "prometheus", "the text exposition format"),
            ]),
        ]),
        Arg::token("reset", "RESET", "zero every counter"),
    ])];

/// The public commands, in the order of docs/commands.md: everything Redis is
/// told about each (its name, flags, arity, key specs, docs). Each row of
/// `commands::REGISTRY` refers to its entry here by name (`&docs::LOCK`), so
/// a command cannot be registered without its docs or under another name;
/// a test there checks that every entry is registered. (UNIQUE.APPLY,
/// internal, is left without docs: see docs/commands.md.)
pub static COMMANDS: &[&CommandDoc] = &[
    &LOCK, &UNLOCK, &LOCKALL, &UNLOCKALL, &LOCKEDBY, &WAITERS, &RATE, &REAP, &METRICS,
];

/// UNIQUE.LOCK.
pub static LOCK: CommandDoc = CommandDoc {
    name: "unique.lock",
    summary: "Acquires or renews a hold on a lock for a job, with an optional lease, limit and wait.",
    since: VERSION,
    complexity: "O(log N) where N is the number of holders of the key, plus O(log N) for each ended lease it removes.",
    arity: -3,
    flags: "write deny-oom fast",
    acl_categories: "write fast blocking",
    tips: "nondeterministic_output",
    key_specs: &[KeySpec {
        index: 1,
        counted: false,
        flags: &[KeyFlag::Rw, KeyFlag::Update],
    }],
    args: LOCK_ARGS,
};

/// UNIQUE.UNLOCK.
pub static UNLOCK: CommandDoc = CommandDoc {
    name: "unique.unlock",
    summary: "Releases a job's hold on a lock.",
    since: VERSION,
    complexity: "O(log N) where N is the number of holders of the key, plus O(log N) for each ended lease it removes.",
    arity: -3,
    flags: "write fast",
    acl_categories: "write fast",
    tips: "",
    key_specs: &[KeySpec {
        index: 1,
        counted: false,
        flags: &[KeyFlag::Rw, KeyFlag::Delete],
    }],
    args: &[
        Arg::new("key", ArgType::Key(0), "the lock"),
        Arg::new("jid", ArgType::String, "the job id"),
        Arg::option(
            "token",
            ArgType::Integer,
            "TOKEN",
            "t",
            "release only the hold of this fencing token (the one its LOCK replied)",
        ),
    ],
};

static LOCKALL_ARGS: &[Arg] = &[
    Arg::new("numkeys", ArgType::Integer, "how many keys follow, 1 to 64"),
    Arg::new(
        "key",
        ArgType::Key(0),
        "the locks, each named once (one hash slot in a cluster)",
    )
    .multiple(),
    Arg::new("jid", ArgType::String, "the job id, 1 to 1024 bytes"),
    Arg::option(
        "limit",
        ArgType::Integer,
        "LIMIT",
        "n",
        "one value per key, in key order: how many holders that lock may have for this call, 0 for no limit (default 1 each)",
    )
    .multiple(),
    Arg::new(
        "rate",
        ArgType::Block,
        "a new grant also needs the rate of the key at position i (from 1) to allow it: at most n per ms, plus b at once; once per key",
    )
    .optional()
    .multiple()
    .parts(&[
        Arg {
            optional: false,
            ..Arg::option(
                "i",
                ArgType::Integer,
                "RATE",
                "i",
                "the key's position, 1 to numkeys",
            )
        },
        Arg::new("n", ArgType::Integer, "grants per period, 1 to 1000000"),
        RATE_PER,
        RATE_BURST,
    ]),
    Arg::new(
        "group",
        ArgType::Block,
        "the group the holder of the key at position i holds for, as LOCK's GROUP; once per key",
    )
    .optional()
    .multiple()
    .parts(&[
        Arg {
            optional: false,
            ..Arg::option(
                "i",
                ArgType::Integer,
                "GROUP",
                "i",
                "the key's position, 1 to numkeys",
            )
        },
        Arg::new("name", ArgType::String, "the group, 1 to 1024 bytes"),
        Arg::option(
            "weight",
            ArgType::Integer,
            "WEIGHT",
            "w",
            "as LOCK's WEIGHT, 1 to 1000 (default 1); a multi-key waiter is served by its reservation, not by weight",
        ),
    ]),
    Arg::new(
        "grouplimit",
        ArgType::Block,
        "a new grant on the key at position i also needs fewer than m holders of its group (needs GROUP i); once per key",
    )
    .optional()
    .multiple()
    .parts(&[
        Arg {
            optional: false,
            ..Arg::option(
                "i",
                ArgType::Integer,
                "GROUPLIMIT",
                "i",
                "the key's position, 1 to numkeys",
            )
        },
        Arg::new("m", ArgType::Integer, "1 to 2147483647"),
    ]),
    Arg::new(
        "mode",
        ArgType::Block,
        "the mode of the hold on the key at position i, as LOCK's MODE; once per key",
    )
    .optional()
    .multiple()
    .parts(&[
        Arg {
            optional: false,
            ..Arg::option(
                "i",
                ArgType::Integer,
                "MODE",
                "i",
                "the key's position, 1 to numkeys",
            )
        },
        Arg::new(
            "mode",
            ArgType::OneOf,
            "shared (readers, up to the limit) or exclusive (a writer, alone)",
        )
        .parts(&[
            Arg::token("shared", "shared", "hold with others, up to the limit"),
            Arg::token("exclusive", "exclusive", "hold alone"),
        ]),
    ]),
    Arg::new(
        "lease",
        ArgType::OneOf,
        "the end of every key's lease (default: none)",
    )
    .optional()
    .parts(LEASE_FORMS),
    TYPE_ARG,
    OWNER_ARG,
    Arg::option(
        "meta",
        ArgType::String,
        "META",
        "json",
        "a JSON object kept with each holder",
    ),
    Arg::option(
        "wait",
        ArgType::Integer,
        "WAIT",
        "ms",
        "when refused, block up to this many ms until every key can grant at once",
    ),
];

/// UNIQUE.LOCKALL.
pub static LOCKALL: CommandDoc = CommandDoc {
    name: "unique.lockall",
    summary: "Acquires or renews a hold on several locks for a job at once: every lock or none, each with its own limit, rate, group and mode, with an optional wait.",
    since: VERSION,
    complexity: "O(K log N) where K is the number of keys and N the number of holders of a key, plus O(log N) for each ended lease it removes.",
    arity: -4,
    flags: "write deny-oom getkeys-api",
    acl_categories: "write slow blocking",
    tips: "nondeterministic_output",
    key_specs: &[KeySpec {
        index: 1,
        counted: true,
        flags: &[KeyFlag::Rw, KeyFlag::Update],
    }],
    args: LOCKALL_ARGS,
};

/// UNIQUE.UNLOCKALL.
pub static UNLOCKALL: CommandDoc = CommandDoc {
    name: "unique.unlockall",
    summary: "Releases a job's holds on several locks at once.",
    since: VERSION,
    complexity: "O(K log N) where K is the number of keys and N the number of holders of a key, plus O(log N) for each ended lease it removes.",
    arity: -4,
    flags: "write getkeys-api",
    acl_categories: "write slow",
    tips: "",
    key_specs: &[KeySpec {
        index: 1,
        counted: true,
        flags: &[KeyFlag::Rw, KeyFlag::Delete],
    }],
    args: &[
        Arg::new("numkeys", ArgType::Integer, "how many keys follow, 1 to 64"),
        Arg::new("key", ArgType::Key(0), "the locks").multiple(),
        Arg::new("jid", ArgType::String, "the job id"),
        Arg::option(
            "token",
            ArgType::Integer,
            "TOKEN",
            "t",
            "one value per key, in key order: release the hold on that key only when it has this fencing token (the one LOCKALL replied for it)",
        )
        .multiple(),
    ],
};

/// UNIQUE.LOCKEDBY.
pub static LOCKEDBY: CommandDoc = CommandDoc {
    name: "unique.lockedby",
    summary: "Returns the jobs that hold a lock, oldest grant first, optionally with their leases and metadata.",
    since: VERSION,
    complexity: "O(N) where N is the number of holders of the key; with CURSOR, O(COUNT) for every call and O(N) for a complete iteration.",
    arity: -2,
    flags: "readonly fast",
    acl_categories: "read fast",
    tips: "",
    key_specs: &[KeySpec {
        index: 1,
        counted: false,
        flags: &[KeyFlag::Ro, KeyFlag::Access],
    }],
    args: &[
        Arg::new("key", ArgType::Key(0), "the lock"),
        Arg::token("withmeta", "WITHMETA", "each holder as a map of its fields").optional(),
        Arg::option(
            "cursor",
            ArgType::Integer,
            "CURSOR",
            "cursor",
            "page through the holders: 0 to begin, then the cursor returned",
        ),
        Arg::option(
            "count",
            ArgType::Integer,
            "COUNT",
            "n",
            "with CURSOR, about how many holders a page gives (default 100)",
        ),
    ],
};

/// UNIQUE.WAITERS.
pub static WAITERS: CommandDoc = CommandDoc {
    name: "unique.waiters",
    summary: "Returns how many clients wait for a slot of a lock (UNIQUE.LOCK ... WAIT), or per group how many wait and hold.",
    since: VERSION,
    complexity: "O(1); with GROUPS, O(G log G + E) where G is the number of groups that hold or wait on the key and E the number of its holders whose lease ended and that are not removed yet.",
    arity: -2,
    flags: "readonly fast",
    acl_categories: "read fast",
    tips: "",
    key_specs: &[KeySpec {
        index: 1,
        counted: false,
        flags: &[KeyFlag::Ro, KeyFlag::Access],
    }],
    args: &[
        Arg::new("key", ArgType::Key(0), "the lock"),
        Arg::token(
            "groups",
            "GROUPS",
            "per group: how many wait and how many hold",
        )
        .optional(),
    ],
};

/// UNIQUE.RATE.
pub static RATE: CommandDoc = CommandDoc {
    name: "unique.rate",
    summary: "Returns the rate state of a lock (UNIQUE.LOCK ... RATE): its limit, the grants it allows now and when the next one is allowed.",
    since: VERSION,
    complexity: "O(1)",
    arity: 2,
    flags: "readonly fast",
    acl_categories: "read fast",
    tips: "nondeterministic_output",
    key_specs: &[KeySpec {
        index: 1,
        counted: false,
        flags: &[KeyFlag::Ro, KeyFlag::Access],
    }],
    args: &[Arg::new("key", ArgType::Key(0), "the lock")],
};

/// UNIQUE.REAP.
pub static REAP: CommandDoc = CommandDoc {
    name: "unique.reap",
    summary: "Removes ended leases and, with OWNER, the holds of a dead worker, a bounded step at a time like SCAN.",
    since: VERSION,
    complexity: "O(1) for every call, O(N) for a complete iteration, with N the number of keys in the database, plus O(log H) for each holder it removes, H the number of holders of its key.",
    arity: -2,
    flags: "write",
    acl_categories: "write slow keyspace",
    tips: "nondeterministic_output",
    key_specs: &[],
    args: &[
        Arg::new(
            "cursor",
            ArgType::Integer,
            "0 to begin, then the cursor returned",
        ),
        Arg::option(
            "count",
            ArgType::Integer,
            "COUNT",
            "n",
            "the most lock keys to examine (default 100)",
        ),
        Arg::option(
            "owner",
            ArgType::String,
            "OWNER",
            "id",
            "also remove every holder with this owner",
        ),
    ],
};

/// UNIQUE.METRICS.
pub static METRICS: CommandDoc = CommandDoc {
    name: "unique.metrics",
    summary: "Returns the lock counters of this server, per lock type and in total, or resets them.",
    since: VERSION,
    complexity: "O(T) where T is the number of lock types counted (times n with MINUTES n).",
    arity: -1,
    flags: "readonly",
    acl_categories: "slow dangerous",
    tips: "nondeterministic_output",
    key_specs: &[],
    args: METRICS_ARGS,
};

/// `UNIQUE.LOCK key jid [LIMIT n] ...`.
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
