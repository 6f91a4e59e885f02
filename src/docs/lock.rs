//! UNIQUE.LOCK and UNIQUE.UNLOCK, and the arguments LOCKALL shares with LOCK.

use super::*;

/// A rate's period and burst, the same in LOCK's RATE and LOCKALL's per-key RATE.
pub(super) const RATE_PER: Arg = Arg {
    optional: false,
    ..Arg::option(
        "per",
        ArgType::Integer,
        "PER",
        "ms",
        "the period in ms, 1 to 2^40",
    )
};
pub(super) const RATE_BURST: Arg = Arg::option(
    "burst",
    ArgType::Integer,
    "BURST",
    "b",
    "grants allowed at once beyond the steady pace, 0 to 1000000 (default 0)",
);

/// The lease's two forms, TYPE and OWNER: the same in LOCK and LOCKALL.
pub(super) const LEASE_FORMS: &[Arg] = &[
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
pub(super) const TYPE_ARG: Arg = Arg::option(
    "type",
    ArgType::String,
    "TYPE",
    "name",
    "the lock type, 1 to 64 of A-Z a-z 0-9 _ : . - (default lock)",
);
pub(super) const OWNER_ARG: Arg = Arg::option(
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
