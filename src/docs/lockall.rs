//! UNIQUE.LOCKALL and UNIQUE.UNLOCKALL.

use super::lock::{LEASE_FORMS, OWNER_ARG, RATE_BURST, RATE_PER, TYPE_ARG};
use super::*;

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
