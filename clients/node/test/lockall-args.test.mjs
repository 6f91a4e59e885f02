// Several keys in one grant (UNIQUE.LOCKALL / UNLOCKALL) without a server: the argv of
// lockAll, MultiLock, the renewal of several keys and GroupLimit's `limits`, the replies they
// read, the renewal rule's outcomes, and every bad option refused before anything is sent. A
// recording transport stands for Redis.
import { test, describe } from "node:test";
import assert from "node:assert/strict";
import {
  Client, MultiLock, Refresher, commands, renewalAllArgv, renewalAllOutcome, AlreadyAcquiredError, CommandError,
} from "../dist/esm/index.js";
import { GroupLimit } from "../dist/esm/bullmq.js";

/** A Transport that records every argv and answers from `answer(argv)` (default: LOCKALL gives token 7 per key). */
function recorder(answer = () => undefined) {
  const sent = [];
  const transport = {
    sent,
    async send(argv) {
      sent.push(argv);
      if (argv[0] === "MODULE") return [];
      const reply = answer(argv);
      if (reply !== undefined) return reply;
      if (argv[0] === "UNIQUE.LOCKALL") return Array.from({ length: Number(argv[1]) }, () => 7);
      if (argv[0] === "UNIQUE.UNLOCKALL") return Number(argv[1]);
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
const named = (t, name) => t.sent.filter((a) => a[0] === name);

describe("lockAll argv", () => {
  test("numkeys, keys, jid, then LIMIT, RATE per key, TTL, TYPE, OWNER, META, WAIT: the contract's order", () => {
    assert.deepEqual(
      commands.lockAllArgv(["{api}:tenant:acme", "{api}:global"], "job-7", {
        wait: 5000, meta: { a: 1 }, owner: "w1", type: "job", ttl: 30000,
        rates: [{ limit: 5, per: 1000, burst: 2 }, { limit: 50, per: 1000 }], limits: [2, 10],
      }),
      ["UNIQUE.LOCKALL", "2", "{api}:tenant:acme", "{api}:global", "job-7", "LIMIT", "2", "10",
        "RATE", "1", "5", "PER", "1000", "BURST", "2", "RATE", "2", "50", "PER", "1000",
        "TTL", "30000", "TYPE", "job", "OWNER", "w1", "META", '{"a":1}', "WAIT", "5000"],
    );
  });

  test("the issue's example", () => {
    assert.deepEqual(
      commands.lockAllArgv(["{api}:tenant:acme", "{api}:global"], "job-7", {
        limits: [2, 10], rates: [undefined, { limit: 50, per: 1000 }], ttl: 30000, wait: 5000,
      }).join(" "),
      "UNIQUE.LOCKALL 2 {api}:tenant:acme {api}:global job-7 LIMIT 2 10 RATE 2 50 PER 1000 TTL 30000 WAIT 5000",
    );
  });

  test("nothing optional: just the keys and the jid; a key without a rate is skipped, BURST only above 0", () => {
    assert.deepEqual(commands.lockAllArgv(["a"], "j"), ["UNIQUE.LOCKALL", "1", "a", "j"]);
    assert.deepEqual(
      commands.lockAllArgv(["a", "b", "c"], "j", { rates: [null, undefined, { limit: 1, per: 10, burst: 0 }], pxat: 1700000000000 }),
      ["UNIQUE.LOCKALL", "3", "a", "b", "c", "j", "RATE", "3", "1", "PER", "10", "PXAT", "1700000000000"],
    );
  });

  test("UNLOCKALL: numkeys, keys, jid", () => {
    assert.deepEqual(commands.unlockAll(["a", "b"], "j").argv, ["UNIQUE.UNLOCKALL", "2", "a", "b", "j"]);
    assert.deepEqual(commands.unlockAll(["a", "b"], "j", [5, 6]).argv, ["UNIQUE.UNLOCKALL", "2", "a", "b", "j", "TOKEN", "5", "6"]);
    assert.throws(() => commands.unlockAll(["a", "b"], "j", [5]), TypeError);
    assert.throws(() => commands.unlockAll(["a"], "j", [0]), TypeError);
  });

  test("replies: the tokens in key order, null when refused; UNLOCKALL's count", () => {
    const lockAll = commands.lockAll(["a", "b"], "j");
    assert.deepEqual(lockAll.parse([11, 12]), [11, 12]);
    assert.deepEqual(lockAll.parse(["11", Buffer.from("12")]), [11, 12]);
    assert.equal(lockAll.parse(null), null);
    assert.equal(commands.unlockAll(["a", "b"], "j").parse(2), 2);
  });

  test("refused before sending: no keys, too many, a key twice, limits not one per key, single-key options", () => {
    const bad = [
      [[], {}, RangeError],
      [Array.from({ length: 65 }, (_, i) => `k${i}`), {}, RangeError],
      [["a", "a"], {}, RangeError],
      [["a", ""], {}, TypeError],
      ["a", {}, TypeError],
      [["a", "b"], { limits: [1] }, TypeError],
      [["a", "b"], { limits: [1, -1] }, RangeError],
      [["a"], { rates: [undefined, { limit: 1, per: 1 }] }, TypeError],
      [["a"], { rates: [{ limit: 0, per: 1 }] }, RangeError],
      [["a"], { ttl: 1, pxat: 2 }, TypeError],
      [["a"], { wait: 0 }, RangeError],
      [["a"], { group: "g" }, TypeError],
      [["a"], { weight: 2 }, TypeError],
      [["a"], { groupLimit: 2 }, TypeError],
      [["a"], { mode: "shared" }, TypeError],
      [["a"], { limit: 2 }, TypeError],
      [["a"], { rate: { limit: 1, per: 1 } }, TypeError],
    ];
    for (const [keys, options, kind] of bad) {
      assert.throws(() => commands.lockAllArgv(keys, "j", options), kind, JSON.stringify([keys, options]));
    }
    assert.match(
      (() => { try { commands.lockAllArgv(["a"], "j", { group: "g" }); } catch (e) { return e.message; } })(),
      /lockAll.*GROUP, WEIGHT, GROUPLIMIT and MODE/,
    );
    assert.doesNotThrow(() => commands.lockAllArgv(Array.from({ length: 64 }, (_, i) => `k${i}`), "j"));
  });
});

describe("Client.lockAll", () => {
  test("without wait: one call on the client's connection; with wait, WAIT last; in a pipeline, no wait", async () => {
    const t = recorder();
    const client = new Client(t);
    assert.deepEqual(await client.lockAll(["a", "b"], "j", { limits: [1, 2], ttl: 100 }), [7, 7]);
    assert.deepEqual(await client.lockAll(["a", "b"], "j", { wait: 50 }), [7, 7]);
    assert.equal(await client.unlockAll(["a", "b"], "j"), 2);
    const sent = named(t, "UNIQUE.LOCKALL");
    assert.deepEqual(sent[0], ["UNIQUE.LOCKALL", "2", "a", "b", "j", "LIMIT", "1", "2", "TTL", "100"]);
    assert.equal(sent[1].at(-2), "WAIT");
    assert.ok(Number(sent[1].at(-1)) <= 50 && Number(sent[1].at(-1)) >= 1);
    const results = await client.pipeline().lockAll(["a"], "j", { ttl: 5 }).unlockAll(["a"], "j").exec();
    assert.deepEqual(results, [[7], 1]);
    assert.throws(() => client.pipeline().lockAll(["a"], "j", { wait: 5 }), TypeError);
    await assert.rejects(client.lockAll(["a"], "j", { mode: "exclusive" }), TypeError);
    await client.close();
  });

  test("an error reply is a CommandError with its code", async () => {
    const t = recorder((argv) => (argv[0] === "UNIQUE.LOCKALL" ? Promise.reject(new Error("CROSSSLOT Keys in request don't hash to the same slot")) : undefined));
    const client = new Client(t);
    await assert.rejects(client.lockAll(["a", "b"], "j"), (e) => e instanceof CommandError && e.code === "CROSSSLOT");
    await client.close();
  });
});

describe("the renewal of several keys", () => {
  test("argv: LOCKALL with the keys, the jid and the lease, nothing else", () => {
    assert.deepEqual(renewalAllArgv(["a", "b"], "j", 3000), ["UNIQUE.LOCKALL", "2", "a", "b", "j", "TTL", "3000"]);
  });

  test("outcomes: the same tokens kept; nil lost; other tokens lost and given up; errors as one key's", () => {
    assert.equal(renewalAllOutcome([5, 6], [5, 6]), "kept");
    assert.equal(renewalAllOutcome([5, 6], null), "lost");
    assert.equal(renewalAllOutcome([5, 6], [5, 9]), "lost_unlock");
    assert.equal(renewalAllOutcome([5, 6], [8, 8]), "lost_unlock");
    assert.equal(renewalAllOutcome([5, 6], undefined, new CommandError("WRONGTYPE x", "WRONGTYPE")), "lost");
    assert.equal(renewalAllOutcome([5, 6], undefined, new CommandError("LOADING x", "LOADING")), "retry");
    assert.equal(renewalAllOutcome([5, 6], undefined, new Error("Connection is closed.")), "retry");
  });

  test("a Refresher of several keys renews with LOCKALL, and new tokens are given up with UNLOCKALL, then lost", async () => {
    let answer = [7, 7];
    const t = recorder((argv) => (argv[0] === "UNIQUE.LOCKALL" ? answer : undefined));
    const client = new Client(t);
    const losses = [];
    const r = new Refresher(client, {
      keys: ["a", "b"], tokens: [7, 7], jid: "j", leaseMs: 30, sentAt: Date.now(), onLost: (e) => losses.push(e),
    });
    assert.deepEqual(r.next().argv, ["UNIQUE.LOCKALL", "2", "a", "b", "j", "TTL", "30"]);
    assert.throws(() => r.update({ owner: "x" }), TypeError);
    r.start();
    const deadline = Date.now() + 10_000;
    while (r.renewals < 2 && Date.now() < deadline) await new Promise((res) => setTimeout(res, 5));
    assert.ok(r.renewals >= 2, "kept while the tokens come back");
    answer = [8, 9];
    while (!r.lost && Date.now() < deadline) await new Promise((res) => setTimeout(res, 5));
    assert.equal(losses.length, 1);
    assert.deepEqual(losses[0].keys, ["a", "b"]);
    assert.equal(losses[0].identifier, "j");
    while (named(t, "UNIQUE.UNLOCKALL").length === 0 && Date.now() < deadline) await new Promise((res) => setTimeout(res, 5));
    // The new holds given up by their own tokens.
    assert.deepEqual(named(t, "UNIQUE.UNLOCKALL").at(-1), ["UNIQUE.UNLOCKALL", "2", "a", "b", "j", "TOKEN", "8", "9"]);
    assert.throws(() => new Refresher(client, { keys: ["a", "b"], tokens: [1], jid: "j", leaseMs: 30, sentAt: 0, onLost() {} }), TypeError);
    await client.close();
  });
});

describe("MultiLock", () => {
  test("keys with limits and rates by key name; acquire sends one LOCKALL; release one UNLOCKALL", async () => {
    const t = recorder();
    const client = new Client(t);
    const lock = new MultiLock(client, { "{a}:t": 2, "{a}:g": 10 }, {
      lockTimeout: 60_000, acquireTimeout: 0, identifier: "me", owner: "w", rates: { "{a}:g": { limit: 50, per: 1000 } },
    });
    assert.deepEqual(lock.keys, ["{a}:t", "{a}:g"]);
    assert.deepEqual(lock.limits, [2, 10]);
    assert.equal(await lock.tryAcquire(), true);
    assert.deepEqual(lock.tokens, [7, 7]);
    assert.ok(lock.isAcquired);
    await assert.rejects(lock.acquire(), AlreadyAcquiredError);
    await lock.release();
    assert.equal(lock.isAcquired, false);
    assert.deepEqual(named(t, "UNIQUE.LOCKALL")[0],
      ["UNIQUE.LOCKALL", "2", "{a}:t", "{a}:g", "me", "LIMIT", "2", "10", "RATE", "2", "50", "PER", "1000", "TTL", "60000", "OWNER", "w"]);
    assert.deepEqual(named(t, "UNIQUE.UNLOCKALL"), [["UNIQUE.UNLOCKALL", "2", "{a}:t", "{a}:g", "me", "TOKEN", "7", "7"]]);
    await lock.release(); // a no-op when not held
    assert.equal(named(t, "UNIQUE.UNLOCKALL").length, 1);
    // An array of keys: a mutex on each.
    assert.deepEqual(new MultiLock(client, ["x", "y"]).limits, [1, 1]);
    await client.close();
  });

  test("refused: no keys, a key twice, single-key and unknown options, rates of keys it does not hold", () => {
    const client = new Client(recorder());
    assert.throws(() => new MultiLock(client, []), RangeError);
    assert.throws(() => new MultiLock(client, ["a", "a"]), RangeError);
    assert.throws(() => new MultiLock(client, "a"), TypeError);
    assert.throws(() => new MultiLock(client, { a: -1 }), RangeError);
    for (const bad of [{ group: "g" }, { mode: "shared" }, { rate: { limit: 1, per: 1 } },
      { acquiredExternally: true, identifier: "x" }, { nope: 1 }]) {
      assert.throws(() => new MultiLock(client, ["a"], bad), TypeError, JSON.stringify(bad));
    }
    assert.throws(() => new MultiLock(client, ["a"], { rates: { b: { limit: 1, per: 1 } } }), RangeError);
    assert.throws(() => new MultiLock(client, ["a"], { acquireAttemptsLimit: 0 }), RangeError);
    // redis-semaphore's polling options: accepted, retryInterval only bounding a count of attempts.
    assert.equal(new MultiLock(client, ["a"], { retryInterval: 5 }).acquireTimeout, 10_000);
    assert.equal(new MultiLock(client, ["a"], { acquireAttemptsLimit: 3, retryInterval: 5 }).acquireTimeout, 10);
    assert.throws(() => new MultiLock(client, ["a"], { lockTimeout: 0 }), RangeError);
  });

  test("a refusal with acquireTimeout 0 is false, and acquire() names the holders", async () => {
    const t = recorder((argv) => {
      if (argv[0] === "UNIQUE.LOCKALL") return null;
      if (argv[0] === "UNIQUE.LOCKEDBY") return [argv[1] === "a" ? "other" : "third"];
      return undefined;
    });
    const lock = new MultiLock(new Client(t), ["a", "b"], { acquireTimeout: 0 });
    assert.equal(await lock.tryAcquire(), false);
    await assert.rejects(lock.acquire(), /a, b is held by other, third/);
  });
});

describe("GroupLimit limits", () => {
  const job = (data, id = "1") => ({ id, data, queueName: "q" });

  test("one LOCKALL per job over the limits that apply to it, keys in one hash slot per queue", async () => {
    const t = recorder();
    const limit = new GroupLimit({
      redis: new Client(t),
      limits: {
        tenant: { group: (j) => j.data.tenant, concurrency: 2, limiter: { max: 5, duration: 1000 } },
        global: { concurrency: 10, limiter: { max: 50, duration: 1000, burst: 5 } },
      },
      lease: 9000, wait: 100, workerName: "w1",
    });
    assert.deepEqual(limit.keysOf(job({ tenant: "acme" })), ["unique:limit:{q}:tenant:acme", "unique:limit:{q}:global"]);
    assert.deepEqual(limit.keysOf(job({})), ["unique:limit:{q}:global"], "a job without a tenant is only under the global limit");
    assert.equal(limit.limitKey("q", "global"), "unique:limit:{q}:global");
    assert.throws(() => limit.key("q", "acme"), TypeError);
    const ran = await limit.wrap(async (j) => j.data.tenant)(job({ tenant: "acme" }, "42"));
    assert.equal(ran, "acme");
    const sent = named(t, "UNIQUE.LOCKALL")[0];
    assert.deepEqual(sent.slice(0, -1), [
      "UNIQUE.LOCKALL", "2", "unique:limit:{q}:tenant:acme", "unique:limit:{q}:global", "42", "LIMIT", "2", "10",
      "RATE", "1", "5", "PER", "1000", "RATE", "2", "50", "PER", "1000", "BURST", "5",
      "TTL", "9000", "TYPE", "group", "OWNER", "w1", "WAIT",
    ]);
    // What is left of the wait once a wait connection is in hand: 100, or a ms or so less under load.
    assert.ok(Number(sent.at(-1)) > 50 && Number(sent.at(-1)) <= 100, `WAIT ${sent.at(-1)}`);
    assert.deepEqual(named(t, "UNIQUE.UNLOCKALL")[0],
      ["UNIQUE.UNLOCKALL", "2", "unique:limit:{q}:tenant:acme", "unique:limit:{q}:global", "42", "TOKEN", "7", "7"]);
    await limit.client.close();
  });

  test("a job under none of its limits runs without a lock", async () => {
    const t = recorder();
    const limit = new GroupLimit({ redis: new Client(t), limits: { tenant: { group: (j) => j.data.tenant, concurrency: 1 } } });
    assert.equal(await limit.wrap(async () => "free")(job({})), "free");
    assert.equal(named(t, "UNIQUE.LOCKALL").length, 0);
  });

  test("limits replaces group, concurrency, limiter, total and weight; each limit is checked", () => {
    const redis = new Client(recorder());
    const limits = { global: { concurrency: 3 } };
    for (const extra of [{ group: () => "g" }, { concurrency: 2 }, { total: 5 }, { weight: 2 }, { limiter: { max: 1, duration: 1 } }]) {
      assert.throws(() => new GroupLimit({ redis, limits, ...extra }), /limits replaces/, JSON.stringify(Object.keys(extra)));
    }
    const bad = [
      [{}, RangeError],
      [[], TypeError],
      [{ "a:b": { concurrency: 1 } }, RangeError],
      [{ a: { concurrency: 1.5 } }, RangeError],
      [{ a: {} }, TypeError],
      [{ a: { concurrency: 0 } }, RangeError],
      [{ a: { concurrency: 1, total: 3 } }, TypeError],
      [{ a: { concurrency: 1, group: "tenant" } }, TypeError],
      [{ a: { concurrency: 1, limiter: { max: 0, duration: 1 } } }, RangeError],
    ];
    for (const [l, kind] of bad) assert.throws(() => new GroupLimit({ redis, limits: l }), kind, JSON.stringify(l));
    assert.doesNotThrow(() => new GroupLimit({ redis, limits: { rated: { concurrency: 0, limiter: { max: 5, duration: 1000 } } } }));
    // The single-limit shapes still stand, fair sharing too.
    assert.doesNotThrow(() => new GroupLimit({ redis, group: () => "g", concurrency: 2 }));
    assert.doesNotThrow(() => new GroupLimit({ redis, group: () => "g", concurrency: 2, total: 10, weight: 2 }));
    assert.throws(() => new GroupLimit({ redis }), TypeError);
  });
});
