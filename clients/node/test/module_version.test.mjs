// The module-version check: the real module (its version is the package's) meets a client
// told it was made for another version, and refuses it at the first command.
import { test, before, after, afterEach } from "node:test";
import assert from "node:assert/strict";
import IORedis from "ioredis";
import { createClient } from "redis";
import { Client, Mutex, ModuleVersionMismatchError, VERSION } from "../dist/esm/index.js";
import { moduleVersionCheck, decodeModuleVersion, loadedModuleVersion } from "../dist/esm/version.js";
import { startServer } from "./helpers.mjs";

let server;
let admin;
before(async () => {
  server = await startServer();
  admin = new IORedis({ port: server.port });
});
after(async () => {
  await admin?.quit();
  server?.stop();
});
afterEach(() => {
  moduleVersionCheck.builtFor = VERSION;
});

const loaded = async () => decodeModuleVersion(loadedModuleVersion(await admin.call("MODULE", "LIST")));
const otherMinor = (v) => {
  const [major, minor] = v.split(".").map(Number);
  return `${major}.${minor + 1}.0`;
};

test("the module reports this package's version", async () => {
  assert.equal(await loaded(), VERSION);
  assert.equal(decodeModuleVersion(20601), "2.6.1");
});

test("a module of another minor is refused at the first command, with both versions", async () => {
  const moduleVersion = await loaded();
  moduleVersionCheck.builtFor = otherMinor(moduleVersion);
  for (const make of [() => new IORedis({ port: server.port }), async () => createClient({ socket: { port: server.port } }).connect()]) {
    const redis = await make();
    try {
      const err = await new Client(redis).lock("mv:k", "a", { ttl: 30_000 }).catch((e) => e);
      assert.ok(err instanceof ModuleVersionMismatchError, String(err));
      assert.equal(err.moduleVersion, moduleVersion);
      assert.equal(err.clientVersion, otherMinor(moduleVersion));
      assert.match(err.message, /npm install redis-unique@/);
      const viaMutex = await new Mutex(redis, "mv:k").acquire().catch((e) => e);
      assert.ok(viaMutex instanceof ModuleVersionMismatchError, String(viaMutex));
      const viaBatch = await new Client(redis).pipeline().unlock("mv:k", "a").exec().catch((e) => e);
      assert.ok(viaBatch instanceof ModuleVersionMismatchError, String(viaBatch));
      assert.equal(await admin.exists("mv:k"), 0, "nothing reached the server");
    } finally {
      await redis.quit();
    }
  }
});

test("another patch release is accepted", async () => {
  const [major, minor, patch] = (await loaded()).split(".").map(Number);
  moduleVersionCheck.builtFor = `${major}.${minor}.${patch + 1}`;
  const redis = new IORedis({ port: server.port });
  try {
    assert.notEqual(await new Client(redis).lock("mv:p", "a", { ttl: 30_000 }), null);
  } finally {
    await admin.del("mv:p");
    await redis.quit();
  }
});

test("a user without MODULE LIST is not checked", async () => {
  moduleVersionCheck.builtFor = otherMinor(await loaded());
  await admin.call("ACL", "SETUSER", "mv-no-module", "on", ">pw", "~*", "+@all", "-module");
  const redis = new IORedis({ port: server.port, username: "mv-no-module", password: "pw" });
  try {
    assert.notEqual(await new Client(redis).lock("mv:u", "a", { ttl: 30_000 }), null);
  } finally {
    await redis.quit();
    await admin.call("ACL", "DELUSER", "mv-no-module");
    await admin.del("mv:u");
  }
});
