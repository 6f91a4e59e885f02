//! RESTORE of forged payloads with valid checksums: every one is refused or
//! loaded whole, never a crash, never a half-loaded lock, never a huge
//! allocation; a newer encoding is refused.

mod common;

use common::{Connection, Server, Value, token};

/// CRC-64/Jones, reflected, as Redis checks DUMP payloads.
fn crc64(data: &[u8]) -> u64 {
    let mut crc = 0u64;
    for &b in data {
        crc ^= u64::from(b);
        for _ in 0..8 {
            crc = if crc & 1 == 1 {
                (crc >> 1) ^ 0x95ac_9329_ac4b_c9b5
            } else {
                crc >> 1
            };
        }
    }
    crc
}

/// Redis's length encoding (rdbSaveLen).
fn put_len(out: &mut Vec<u8>, n: u64) {
    if n < 64 {
        out.push(n as u8);
    } else if n < 16_384 {
        out.extend([0x40 | (n >> 8) as u8, n as u8]);
    } else if n <= u64::from(u32::MAX) {
        out.push(0x80);
        out.extend((n as u32).to_be_bytes());
    } else {
        out.push(0x81);
        out.extend(n.to_be_bytes());
    }
}

fn read_len(bytes: &[u8], at: usize) -> (u64, usize) {
    match bytes[at] >> 6 {
        0 => (u64::from(bytes[at] & 0x3f), at + 1),
        1 => (
            (u64::from(bytes[at] & 0x3f) << 8) | u64::from(bytes[at + 1]),
            at + 2,
        ),
        _ if bytes[at] == 0x80 => (
            u64::from(u32::from_be_bytes(
                bytes[at + 1..at + 5].try_into().unwrap(),
            )),
            at + 5,
        ),
        _ => (
            u64::from_be_bytes(bytes[at + 1..at + 9].try_into().unwrap()),
            at + 9,
        ),
    }
}

/// The pieces of a real DUMP of a lock: the module id (with its encoding
/// version in the low 10 bits) and the RDB version of the trailer.
struct Dump {
    module_id: u64,
    rdb_version: [u8; 2],
}

impl Dump {
    fn of(con: &mut Connection, key: &str) -> (Self, Vec<u8>) {
        let payload: Vec<u8> = redis::cmd("DUMP").arg(key).query(con).expect("DUMP");
        assert_eq!(payload[0], 7, "RDB_TYPE_MODULE_2");
        let (module_id, _) = read_len(&payload, 1);
        let n = payload.len();
        (
            Self {
                module_id,
                rdb_version: [payload[n - 10], payload[n - 9]],
            },
            payload,
        )
    }

    /// A payload of this module's type with `encver` and the given module
    /// data (opcodes and values), closed by EOF, the trailer and a valid CRC.
    fn forge(&self, encver: u64, body: &[u8]) -> Vec<u8> {
        let mut out = vec![7];
        put_len(&mut out, (self.module_id & !1023) | encver);
        out.extend(body);
        put_len(&mut out, 0); // RDB_MODULE_OPCODE_EOF
        out.extend(self.rdb_version);
        let crc = crc64(&out);
        out.extend(crc.to_le_bytes());
        out
    }
}

/// Module data, written the way RM_Save* writes it.
#[derive(Default)]
struct Body(Vec<u8>);

impl Body {
    fn unsigned(mut self, n: u64) -> Self {
        put_len(&mut self.0, 2);
        put_len(&mut self.0, n);
        self
    }
    /// RM_SaveSigned writes the two's complement as an unsigned.
    fn signed(self, n: i64) -> Self {
        self.unsigned(n as u64)
    }
    fn string(mut self, b: &[u8]) -> Self {
        put_len(&mut self.0, 5);
        put_len(&mut self.0, b.len() as u64);
        self.0.extend(b);
        self
    }
    fn holder(self, jid: &[u8], token: i64) -> Self {
        self.string(jid)
            .signed(token)
            .signed(1_700_000_000_000)
            .signed(-1)
            .string(b"lock")
            .string(b"")
            .string(b"")
    }
}

fn restore(con: &mut Connection, key: &str, payload: &[u8]) -> Result<Value, String> {
    call!(con, "RESTORE", key, 0, payload.to_vec(), "REPLACE")
}

#[test]
fn crc64_is_redis_s() {
    assert_eq!(crc64(b"123456789"), 0xe9c6_d914_c4b8_d9ca);
}

#[test]
fn a_forged_payload_round_trips_when_it_is_valid() {
    let server = Server::start();
    let con = &mut server.con();
    token(call!(con, "UNIQUE.LOCK", "real", "j"));
    let (dump, _) = Dump::of(con, "real");
    // Version 1 (before rates): holders only.
    let body = Body::default().unsigned(2).holder(b"a", 5).holder(b"b", 9);
    assert_eq!(restore(con, "k", &dump.forge(1, &body.0)), Ok(Value::Okay));
    assert_eq!(common::holders(con, "k"), ["a", "b"]);
    // Version 2: the holders, then a rate flag and the rate; a lock may be
    // its rate alone (what was spent, until it is idle).
    let rate = |body: Body| {
        body.unsigned(1)
            .signed(5)
            .signed(1000)
            .signed(2)
            .signed(i64::MAX / 8)
    };
    let body = rate(Body::default().unsigned(1).holder(b"a", 5));
    assert_eq!(restore(con, "r", &dump.forge(2, &body.0)), Ok(Value::Okay));
    assert_eq!(common::holders(con, "r"), ["a"]);
    let body = rate(Body::default().unsigned(0));
    assert_eq!(
        restore(con, "alone", &dump.forge(2, &body.0)),
        Ok(Value::Okay)
    );
    assert_eq!(
        call!(con, "UNIQUE.RATE", "alone").map(|v| matches!(v, Value::Array(_))),
        Ok(true)
    );
}

#[test]
fn newer_encodings_huge_counts_and_empty_locks_are_refused() {
    let server = Server::start();
    let con = &mut server.con();
    token(call!(con, "UNIQUE.LOCK", "real", "j"));
    let (dump, _) = Dump::of(con, "real");
    let one = Body::default().unsigned(1).holder(b"a", 5);
    let cases = [
        ("a newer encoding", dump.forge(3, &one.0)),
        ("version 2 without its rate flag", dump.forge(2, &one.0)),
        (
            "a rate flag of 2",
            dump.forge(
                2,
                &Body::default().unsigned(1).holder(b"a", 5).unsigned(2).0,
            ),
        ),
        (
            "a rate of 0 per period",
            dump.forge(
                2,
                &Body::default()
                    .unsigned(1)
                    .holder(b"a", 5)
                    .unsigned(1)
                    .signed(0)
                    .signed(1000)
                    .signed(0)
                    .signed(1)
                    .0,
            ),
        ),
        (
            "no holder and no rate",
            dump.forge(2, &Body::default().unsigned(0).unsigned(0).0),
        ),
        (
            "2^60 holders",
            dump.forge(1, &Body::default().unsigned(1 << 60).holder(b"a", 5).0),
        ),
        ("no holder", dump.forge(1, &Body::default().unsigned(0).0)),
        (
            "the same jid twice",
            dump.forge(
                1,
                &Body::default()
                    .unsigned(2)
                    .holder(b"a", 5)
                    .holder(b"a", 6)
                    .0,
            ),
        ),
        (
            "a token of 0",
            dump.forge(1, &Body::default().unsigned(1).holder(b"a", 0).0),
        ),
        (
            "a signed where a string goes",
            dump.forge(1, &Body::default().unsigned(1).signed(3).0),
        ),
    ];
    for (what, payload) in cases {
        let reply = restore(con, "k", &payload);
        assert!(reply.is_err(), "{what}: {reply:?}");
        assert_eq!(
            call!(con, "EXISTS", "k"),
            Ok(Value::Int(0)),
            "{what}: nothing half-loaded"
        );
    }
    let used = common::info_field(con, "memory", "used_memory");
    assert!(
        used < 100 << 20,
        "no allocation for the forged count: {used}"
    );
    assert_eq!(call!(con, "PING"), Ok(Value::SimpleString("PONG".into())));
}

/// Mutated and truncated real payloads, checksums fixed: each is refused or
/// loaded whole, and the server keeps serving.
#[test]
fn thousands_of_mutated_payloads_never_crash_the_server() {
    let server = Server::start();
    let con = &mut server.con();
    for i in 0..3 {
        call!(
            con,
            "UNIQUE.LOCK",
            "real",
            format!("job-{i}"),
            "LIMIT",
            0,
            "TTL",
            600_000,
            "TYPE",
            "until_executed",
            "OWNER",
            "host:1",
            "META",
            r#"{"queue":"default"}"#
        )
        .expect("lock");
    }
    let (_, payload) = Dump::of(con, "real");
    let body_end = payload.len() - 10; // the RDB version and the CRC follow
    let mut seed = 0x9e37_79b9_7f4a_7c15_u64;
    let mut next = || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    let (mut loaded, mut refused) = (0, 0);
    let mut tries = Vec::new();
    for _ in 0..3000 {
        let mut p = payload[..body_end].to_vec();
        for _ in 0..1 + next() % 4 {
            let at = 1 + (next() as usize) % (p.len() - 1);
            p[at] = next() as u8;
        }
        tries.push(p);
    }
    for cut in 1..body_end {
        tries.push(payload[..cut].to_vec());
    }
    let total = tries.len();
    for mut p in tries {
        p.extend(&payload[body_end..body_end + 2]);
        let crc = crc64(&p);
        p.extend(crc.to_le_bytes());
        match restore(con, "forged", &p) {
            Ok(_) => {
                loaded += 1;
                // Loaded whole: every holder reads back, and it can be unlocked.
                let Ok(Value::Array(list)) = call!(con, "UNIQUE.LOCKEDBY", "forged", "WITHMETA")
                else {
                    panic!("a restored lock must read back");
                };
                assert!(!list.is_empty() || call!(con, "EXISTS", "forged") == Ok(Value::Int(1)));
                call!(con, "DEL", "forged").expect("DEL");
            }
            Err(_) => refused += 1,
        }
    }
    assert_eq!(call!(con, "PING"), Ok(Value::SimpleString("PONG".into())));
    assert_eq!(loaded + refused, total);
    assert!(refused > 0);
    println!("{total} forged payloads: {loaded} loaded whole, {refused} refused");
}
