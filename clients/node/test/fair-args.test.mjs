// Fair sharing (GROUP, WEIGHT, GROUPLIMIT) and shared/exclusive holds (MODE) without a
// server: the argv each API sends, the replies it reads, and every bad option refused before
// anything is sent. A recording transport stands for Redis (it answers LOCK with a token).
import { test, describe } from "node:test";
import assert from "node:assert/strict";
import { Client, RWLock, Mutex, Semaphore, commands, AlreadyAcquiredError, LockLostError } from "../dist/esm/index.js";
import { GroupLimit } from "../dist/esm/bullmq.js";

/** A Transport that records every argv and answers from `answer(argv)` (default: LOCK gives token 7). */
function recorder(answer = () => undefined) {
  const sent = [];
  const transport = {
    sent,
    async send(argv) {
      sent.push(argv);
      if (argv[0] === "MODULE") return [];
      const reply = answer(argv);
      if (reply !== undefined) return reply;
      if (argv[0] === "UNIQUE.LOCK") return 7;
      if (argv[0] === "UNIQUE.UNLOCK") return 1;
      return null;
    },
    async batch(cmds) {
      return Promise.all(cmds.map((c) => this.send(c)));
    },
    async duplicate() {
      return transport;
    },
    async close() {},
    destroy() {},
  };
  return transport;
}
const locks = (t) => t.sent.filter((a) => a[0] === "UNIQUE.LOCK");

describe("lock argv", () => {
  test("GROUP, WEIGHT, GROUPLIMIT and MODE after RATE and before WAIT, in the contract's order", () => {
    assert.deepEqual(
      commands.lockArgv("k", "j", {
        wait: 5000, mode: "shared", groupLimit: 2, weight: 2, group: "g", rate: { limit: 50, per: 1000 }, ttl: 60000, limit: 3,
      }),
      ["UNIQUE.LOCK", "k", "j", "LIMIT", "3", "TTL", "60000", "RATE", "50", "PER", "1000",
        "GROUP", "g", "WEIGHT", "2", "GROUPLIMIT", "2", "MODE", "shared", "WAIT", "5000"],
    );
    assert.deepEqual(commands.lockArgv("k", "j", { group: "acme" }), ["UNIQUE.LOCK", "k", "j", "GROUP", "acme"]);
    assert.deepEqual(commands.lockArgv("k", "j", { group: "acme", groupLimit: 1 }),
      ["UNIQUE.LOCK", "k", "j", "GROUP", "acme", "GROUPLIMIT", "1"]);
    assert.deepEqual(commands.lockArgv("k", "j", { mode: "exclusive" }), ["UNIQUE.LOCK", "k", "j", "MODE", "exclusive"]);
    const tenant = "t".repeat(1024);
    assert.deepEqual(commands.lockArgv("k", "j", { group: tenant, weight: 1000, groupLimit: 2147483647 }).slice(3),
      ["GROUP", tenant, "WEIGHT", "1000", "GROUPLIMIT", "2147483647"]);
  });

  test("bad group options are refused before anything is sent", async () => {
    const bad = [
      [{ weight: 2 }, TypeError, /weight needs group/],
      [{ groupLimit: 2 }, TypeError, /groupLimit needs group/],
      [{ group: "" }, RangeError, /group must be 1 to 1024 bytes/],
      [{ group: "é".repeat(513) }, RangeError, /1 to 1024 bytes, got 1026/],
      [{ group: 42 }, TypeError, /group must be a string/],
      [{ group: "g", weight: 0 }, RangeError, /weight must be a whole number from 1 to 1000/],
      [{ group: "g", weight: 1001 }, RangeError, /weight/],
      [{ group: "g", weight: 1.5 }, RangeError, /weight/],
      [{ group: "g", weight: "2" }, TypeError, /weight must be a number/],
      [{ group: "g", groupLimit: 0 }, RangeError, /groupLimit must be a whole number from 1/],
      [{ group: "g", groupLimit: 2147483648 }, RangeError, /groupLimit/],
      [{ mode: "read" }, RangeError, /mode must be "shared" or "exclusive", got "read"/],
      [{ mode: "SHARED" }, RangeError, /mode/],
      [{ mode: 1 }, TypeError, /mode/],
    ];
    const t = recorder();
    const client = new Client(t);
    for (const [options, kind, message] of bad) {
      assert.throws(() => commands.lockArgv("k", "j", options), kind, JSON.stringify(options));
      await assert.rejects(client.lock("k", "j", options), (e) => e instanceof kind && message.test(e.message));
    }
    assert.throws(() => client.pipeline().lock("k", "j", { weight: 1 }), TypeError);
    assert.equal(locks(t).length, 0, "nothing was sent");
  });
});

describe("replies", () => {
  test("holders carry group and mode, null without them", () => {
    const reply = [
      ["jid", "a", "token", 1, "acquired_at", 10, "expires_at", -1, "ttl", -1, "type", "lock", "owner", null, "meta", null,
        "group", "acme", "mode", "exclusive"],
      ["jid", "b", "token", 2, "acquired_at", 11, "expires_at", -1, "ttl", -1, "type", "lock", "owner", null, "meta", null,
        "group", null, "mode", null],
    ];
    const [a, b] = commands.holders("k").parse(reply);
    assert.deepEqual([a.group, a.mode, b.group, b.mode], ["acme", "exclusive", null, null]);
    // RESP3: maps; and a server older than groups, without the two fields
    const map = new Map([["jid", "c"], ["token", 3], ["group", Buffer.from("t1")], ["mode", "shared"]]);
    const [c] = commands.holders("k").parse([map]);
    assert.deepEqual([c.group, c.mode], ["t1", "shared"]);
    const [old] = commands.holders("k").parse([["jid", "d", "token", 4]]);
    assert.deepEqual([old.group, old.mode], [null, null]);
  });

  test("waiters(key, { groups: true }) sends WAITERS key GROUPS and reads each group", async () => {
    const reply = [
      ["group", null, "waiting", 1, "holding", 0],
      ["group", "acme", "waiting", 3, "holding", 2],
      new Map([["group", "beta"], ["waiting", 0], ["holding", 1]]),
    ];
    const t = recorder((argv) => (argv[0] === "UNIQUE.WAITERS" ? (argv[2] === "GROUPS" ? reply : 4) : undefined));
    const client = new Client(t);
    const expected = [
      { group: null, waiting: 1, holding: 0 },
      { group: "acme", waiting: 3, holding: 2 },
      { group: "beta", waiting: 0, holding: 1 },
    ];
    assert.deepEqual(await client.waiters("k", { groups: true }), expected);
    assert.equal(await client.waiters("k"), 4);
    assert.deepEqual(await client.pipeline().waiters("k", { groups: true }).waiters("k").exec(), [expected, 4]);
    assert.deepEqual(t.sent.filter((a) => a[0] === "UNIQUE.WAITERS"),
      [["UNIQUE.WAITERS", "k", "GROUPS"], ["UNIQUE.WAITERS", "k"], ["UNIQUE.WAITERS", "k", "GROUPS"], ["UNIQUE.WAITERS", "k"]]);
    assert.deepEqual(commands.waitersByGroup("k").parse([]), []);
  });
});

describe("Mutex and Semaphore with a group", () => {
  test("group, weight and groupLimit go with every acquire, and never with a renewal", async () => {
    const t = recorder();
    const sem = new Semaphore(t, "api", 10, { group: "acme", weight: 3, groupLimit: 2, acquireTimeout: 0, lockTimeout: 3000 });
    await sem.acquire();
    assert.deepEqual(locks(t)[0], ["UNIQUE.LOCK", "api", sem.identifier, "LIMIT", "10", "TTL", "3000",
      "GROUP", "acme", "WEIGHT", "3", "GROUPLIMIT", "2"]);
    await sem.release();
    assert.throws(() => new Mutex(t, "m", { weight: 2 }), /weight needs group/);
    assert.throws(() => new Mutex(t, "m", { group: "g", groupLimit: 0 }), RangeError);
    assert.throws(() => new Mutex(t, "m", { mode: "shared" }), /unknown lock option mode/);
  });
});

describe("RWLock", () => {
  test("acquireRead sends MODE shared, acquireWrite MODE exclusive, with the reader limit (0: none)", async () => {
    const t = recorder();
    const rw = new RWLock(t, "doc", { acquireTimeout: 0, lockTimeout: 3000, owner: "w1" });
    assert.equal(rw.limit, 0);
    assert.equal(rw.mode, null);
    await rw.acquireRead();
    assert.equal(rw.mode, "read");
    assert.equal(rw.token, 7);
    await assert.rejects(rw.acquireWrite(), AlreadyAcquiredError);
    await assert.rejects(rw.releaseWrite(), /holds doc for read: releaseRead\(\)/);
    await rw.releaseRead();
    assert.equal(rw.mode, null);
    assert.equal(await rw.tryAcquireWrite(), true);
    assert.equal(rw.mode, "write");
    await assert.rejects(rw.releaseRead(), /for write/);
    await rw.release();
    await rw.releaseRead(); // not held: nothing to do
    const limited = new RWLock(t, "doc", { limit: 5, acquireTimeout: 0, lockTimeout: 3000 });
    await limited.acquireRead();
    await limited.release();
    const id = rw.identifier;
    assert.deepEqual(locks(t).slice(0, 2), [
      ["UNIQUE.LOCK", "doc", id, "LIMIT", "0", "TTL", "3000", "OWNER", "w1", "MODE", "shared"],
      ["UNIQUE.LOCK", "doc", id, "LIMIT", "0", "TTL", "3000", "OWNER", "w1", "MODE", "exclusive"],
    ]);
    assert.deepEqual(locks(t)[2].slice(3), ["LIMIT", "5", "TTL", "3000", "MODE", "shared"]);
    assert.deepEqual(t.sent.filter((a) => a[0] === "UNIQUE.UNLOCK").length, 3);
  });

  test("a waiting acquire waits with its mode", async () => {
    const t = recorder((argv) => (argv[0] === "UNIQUE.LOCK" && !argv.includes("WAIT") ? null : undefined));
    const rw = new RWLock(t, "doc", { acquireTimeout: 2000 });
    await rw.acquireWrite();
    const [first, waited] = locks(t);
    assert.deepEqual(first.slice(-2), ["MODE", "exclusive"]);
    assert.deepEqual(waited.slice(-4, -1), ["MODE", "exclusive", "WAIT"]);
    await rw.release();
  });

  test("downgrade sends MODE shared, tryUpgrade MODE exclusive, both without LIMIT or WAIT", async () => {
    let upgrade = null;
    const t = recorder((argv) => (argv.at(-1) === "exclusive" && argv.length === 7 ? upgrade : undefined));
    const rw = new RWLock(t, "doc", { acquireTimeout: 0, lockTimeout: 3000 });
    await rw.acquireWrite();
    await rw.downgrade();
    assert.equal(rw.mode, "read");
    assert.equal(await rw.tryUpgrade(), false, "refused: the read hold is kept");
    assert.equal(rw.mode, "read");
    upgrade = 7;
    assert.equal(await rw.tryUpgrade(), true);
    assert.equal(rw.mode, "write");
    assert.deepEqual(locks(t).slice(1).map((a) => a.slice(3)), [
      ["TTL", "3000", "MODE", "shared"], ["TTL", "3000", "MODE", "exclusive"], ["TTL", "3000", "MODE", "exclusive"],
    ]);
    await assert.rejects(rw.tryUpgrade(), /needs a read hold/);
    upgrade = 8; // another token: the hold had ended, and the new grant is given up
    await rw.downgrade().catch(() => {});
    await rw.release();
    await rw.acquireRead();
    await assert.rejects(rw.tryUpgrade(), LockLostError);
    assert.equal(rw.isAcquired, false);
    assert.deepEqual(t.sent.at(-1), ["UNIQUE.UNLOCK", "doc", rw.identifier, "TOKEN", "8"]); // the new grant, by its token
    await assert.rejects(rw.downgrade(), /needs a write hold/);
  });

  test("options are checked when it is made", () => {
    const t = recorder();
    assert.throws(() => new RWLock(t, "doc", { limit: -1 }), RangeError);
    assert.throws(() => new RWLock(t, "doc", { limit: 1.5 }), RangeError);
    assert.throws(() => new RWLock(t, "doc", { lockTimeout: 0 }), RangeError);
    assert.throws(() => new RWLock(t, "doc", { mode: "exclusive" }), /unknown lock option mode/);
    assert.throws(() => new RWLock(t, "", {}), TypeError);
    assert.equal(new RWLock(t, "doc", { group: "g", weight: 2 }).limit, 0);
  });
});

/** A BullMQ Job as GroupLimit uses it. */
const job = (id, data) => ({ id, queueName: "q", data, name: "work", moveToDelayed: async () => {} });

describe("GroupLimit", () => {
  // The WAIT sent is the wait left once a wait connection is in hand: a loaded machine may
  // run this process late for a while after the job asks, so any WAIT of 501 to 1000 reads
  // as the 1000 asked for (a wrong unit or a wait counted twice would be far out of it).
  const grouped = (t) => locks(t).map((argv) => {
    const i = argv.indexOf("WAIT");
    if (i < 0) return argv;
    const wait = Number(argv[i + 1]);
    assert.ok(wait > 500 && wait <= 1000, `WAIT ${wait}`);
    return [...argv.slice(0, i + 1), "1000", ...argv.slice(i + 2)];
  });
  test("without total: one key per group, LIMIT concurrency, as before", async () => {
    const t = recorder();
    const limit = new GroupLimit({ redis: new Client(t), group: (j) => j.data.tenant, concurrency: 2, workerName: "w" });
    assert.equal(limit.key("q", "acme"), "unique:group:q:acme");
    assert.equal(await limit.wrap(async () => "done")(job("1", { tenant: "acme" })), "done");
    assert.deepEqual(grouped(t)[0], ["UNIQUE.LOCK", "unique:group:q:acme", "1", "LIMIT", "2", "TTL", "30000",
      "TYPE", "group", "OWNER", "w", "WAIT", "1000"]);
  });

  test("with total: one key per queue, LIMIT total, GROUP, WEIGHT and GROUPLIMIT concurrency", async () => {
    const t = recorder();
    const limit = new GroupLimit({
      redis: new Client(t), group: (j) => j.data.tenant, concurrency: 2, total: 10, weight: (j, g) => (g === "big" ? 3 : 1),
      workerName: "w",
    });
    assert.equal(limit.key("q"), "unique:fair:q");
    const run = limit.wrap(async (j) => j.id);
    assert.equal(await run(job("1", { tenant: "big" })), "1");
    assert.equal(await run(job("2", { tenant: "small" })), "2");
    assert.equal(await run(job("3", {})), "3", "a job without a group runs without a slot");
    assert.deepEqual(grouped(t), [
      ["UNIQUE.LOCK", "unique:fair:q", "1", "LIMIT", "10", "TTL", "30000", "TYPE", "group", "OWNER", "w",
        "GROUP", "big", "WEIGHT", "3", "GROUPLIMIT", "2", "WAIT", "1000"],
      ["UNIQUE.LOCK", "unique:fair:q", "2", "LIMIT", "10", "TTL", "30000", "TYPE", "group", "OWNER", "w",
        "GROUP", "small", "WEIGHT", "1", "GROUPLIMIT", "2", "WAIT", "1000"],
    ]);
    const plain = recorder();
    const fair = new GroupLimit({ redis: new Client(plain), group: () => "g", total: 4, prefix: "p", workerName: "w" });
    await fair.wrap(async () => {})(job("9", {}));
    assert.deepEqual(grouped(plain)[0], ["UNIQUE.LOCK", "p:q", "9", "LIMIT", "4", "TTL", "30000", "TYPE", "group",
      "OWNER", "w", "GROUP", "g", "WAIT", "1000"], "no concurrency: no GROUPLIMIT; no weight: none sent");
    const bad = new GroupLimit({ redis: new Client(plain), group: () => "g", total: 4, weight: () => 0 });
    await assert.rejects(bad.wrap(async () => {})(job("10", {})), /weight must be a whole number from 1 to 1000, got 0/);
  });

  test("bad combinations are refused when it is made", () => {
    const redis = new Client(recorder());
    const group = () => "g";
    const cases = [
      [{ concurrency: 2, weight: 2 }, TypeError, /weight needs total/],
      [{ concurrency: 2, weight: () => 2 }, TypeError, /weight needs total/],
      [{}, TypeError, /give concurrency \(per group\), total \(in all\), or both/],
      [{ total: 10, limiter: { max: 5, duration: 1000 } }, TypeError, /limiter cannot be combined with total/],
      [{ total: 0 }, RangeError, /total must be a whole number of at least 1/],
      [{ total: 1.5 }, RangeError, /limit/],
      [{ total: 10, weight: 0 }, RangeError, /weight/],
      [{ total: 10, weight: 1001 }, RangeError, /weight/],
      [{ total: 10, concurrency: 0 }, RangeError, /concurrency must be at least 1/],
      [{ concurrency: 2, groupLimit: 1 }, TypeError, /unknown GroupLimit option groupLimit/],
    ];
    for (const [options, kind, message] of cases) {
      assert.throws(() => new GroupLimit({ redis, group, ...options }), (e) => e instanceof kind && message.test(e.message),
        JSON.stringify(options));
    }
    assert.equal(new GroupLimit({ redis, group, total: 10, weight: 1000 }).total, 10);
    assert.equal(new GroupLimit({ redis, group, concurrency: 2, limiter: { max: 5, duration: 1000 } }).total, undefined);
  });
});
