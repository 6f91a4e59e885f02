//! The commands that read or sweep: UNIQUE.LOCKEDBY, UNIQUE.WAITERS,
//! UNIQUE.RATE, UNIQUE.REAP and UNIQUE.METRICS.

use super::*;

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
