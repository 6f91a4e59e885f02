// The test servers' conventions, as in the other clients' suites: a real redis-server
// (REDIS_SERVER, default redis-server on the PATH) with the freshly built module
// (REDIS_UNIQUE_MODULE, default target/release/libredis_unique.so of the repository) on
// a free port in a temporary directory.
import { spawn } from "node:child_process";
import { mkdtempSync, renameSync, rmSync, existsSync } from "node:fs";
import { createServer, connect } from "node:net";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import IORedis from "ioredis";

export const ROOT = resolve(fileURLToPath(new URL("../../..", import.meta.url)));
export const MODULE = process.env.REDIS_UNIQUE_MODULE || join(ROOT, "target/release/libredis_unique.so");
export const SERVER = process.env.REDIS_SERVER || "redis-server";

export function freePort() {
  return new Promise((res, rej) => {
    const srv = createServer();
    srv.unref();
    srv.on("error", rej);
    srv.listen(0, "127.0.0.1", () => {
      const { port } = srv.address();
      srv.close(() => res(port));
    });
  });
}

/**
 * How long a test waits for a condition before it fails. A server, a worker or a job comes in
 * well under a second on an idle machine, but CI runs on 2 shared cores with other suites,
 * background builds and servers under valgrind: the bound only costs time when the test fails
 * anyway, so it is generous. Tests poll with waitFor, never a fixed sleep.
 */
export const PATIENCE = 60_000;

/** Polls `condition` every `interval` ms until it returns a truthy value, at most `timeout` ms. */
export async function waitFor(condition, { timeout = PATIENCE, interval = 10, message = "condition" } = {}) {
  const deadline = Date.now() + timeout;
  for (;;) {
    const value = await condition();
    if (value) return value;
    if (Date.now() > deadline) throw new Error(`timed out after ${timeout} ms waiting for ${message}`);
    await new Promise((r) => setTimeout(r, interval));
  }
}

/**
 * A server on a free port. Another process (CI runs suites side by side, each starting
 * servers) can take the port between freePort()'s probe and the server's bind: the server
 * then exits, or the probe would reach the other process's server. So each of up to 5 tries
 * picks a new port (with `pickPort`), counts as ready only when the server answering there
 * is this child (INFO's process_id), and leaves its log as redis-try-N.log in the directory.
 */
/**
 * "functions": the suites' servers start WITHOUT the module, so the clients (and the BullMQ
 * workers) take the Functions library, as on a managed Redis (make test-node-functions).
 */
export const BACKEND = process.env.REDIS_UNIQUE_TEST_BACKEND || "module";

export async function startServer({ module = BACKEND !== "functions", args = [], pickPort = freePort } = {}) {
  if (module && !existsSync(MODULE)) throw new Error(`no module at ${MODULE}: run cargo build --release first`);
  const dir = mkdtempSync(join(tmpdir(), "redis-unique-node-"));
  for (let attempt = 1; attempt <= 5; attempt++) {
    const port = await pickPort();
    const argv = ["--port", String(port), "--bind", "127.0.0.1", "--dir", dir, "--logfile", "redis.log",
      "--save", "", "--appendonly", "no", ...args];
    if (module) argv.push("--loadmodule", MODULE);
    const child = spawn(SERVER, argv, { stdio: ["ignore", "ignore", "inherit"] });
    let gone = false;
    const exited = new Promise((res) => {
      child.once("exit", res);
      child.once("error", res); // e.g. no such binary: no exit event follows
    }).then(() => { gone = true; });
    if (await serves(port, child, () => gone)) {
      return {
        port,
        pid: child.pid,
        dir,
        url: `redis://127.0.0.1:${port}`,
        stop() {
          child.kill("SIGKILL");
          rmSync(dir, { recursive: true, force: true });
        },
      };
    }
    child.kill("SIGKILL");
    await exited;
    if (existsSync(join(dir, "redis.log"))) renameSync(join(dir, "redis.log"), join(dir, `redis-try-${attempt}.log`));
  }
  throw new Error(`${SERVER} did not start in 5 tries; see ${dir}/redis-try-*.log`);
}

/** Whether `child` comes up on `port` within PATIENCE: false once it is gone or another process answers. */
async function serves(port, child, gone) {
  const probe = new IORedis({ host: "127.0.0.1", port, lazyConnect: true, connectTimeout: 5000, commandTimeout: 5000,
    maxRetriesPerRequest: 0, retryStrategy: () => null });
  probe.on("error", () => {});
  const deadline = Date.now() + PATIENCE;
  try {
    while (Date.now() < deadline && !gone()) {
      try {
        if (probe.status !== "ready") await probe.connect();
        if ((await probe.ping()) === "PONG") {
          return new RegExp(`^process_id:${child.pid}\\r?$`, "m").test(await probe.info("server"));
        }
      } catch {
        // not listening yet (or still loading)
      }
      await new Promise((r) => setTimeout(r, 10));
    }
    return false;
  } finally {
    probe.disconnect();
  }
}

/** Calls of a command so far (INFO commandstats), e.g. calls(redis, "unique.lock"). */
export async function calls(redis, name) {
  const info = await redis.info("commandstats");
  const line = info.split("\n").find((l) => l.startsWith(`cmdstat_${name.toLowerCase()}:`));
  return line ? Number(/calls=(\d+)/.exec(line)[1]) : 0;
}

export async function totalCommands(redis) {
  const info = await redis.info("stats");
  return Number(/total_commands_processed:(\d+)/.exec(info)[1]);
}

/** The server's connected clients (CLIENT LIST), the asking connection included. */
export async function clientCount(redis) {
  return String(await redis.call("CLIENT", "LIST")).trim().split("\n").filter(Boolean).length;
}

/**
 * Polls until the server on `port` has no client but the one asking: every connection the
 * tests opened there (theirs and the library's) is closed. Fails with the ones left.
 */
export async function assertNoClientsLeft(port, { timeout = 10_000 } = {}) {
  const admin = new IORedis({ port, maxRetriesPerRequest: 1 });
  try {
    await waitFor(async () => (await clientCount(admin)) === 1, { timeout, interval: 20, message: "no client left" }).catch(async (err) => {
      throw new Error(`${err.message}: ${await admin.call("CLIENT", "LIST")}`);
    });
  } finally {
    admin.disconnect();
  }
}

/**
 * A TCP proxy in front of the server on `targetPort` whose link a test cuts and restores, as
 * the other clients' suites do: cut() drops every proxied connection and closes each new one
 * at once (the Redis client sees its connection closed, as when a network link drops, and
 * its reconnects fail); restore() lets new connections through again. `refused` counts the
 * connections closed while cut; `port` is where the Redis client connects.
 */
export async function startCutProxy(targetPort) {
  const sockets = new Set();
  let down = false;
  const drop = (...pair) => {
    for (const s of pair) {
      sockets.delete(s);
      s.destroy();
    }
  };
  const listener = createServer((downstream) => {
    downstream.on("error", () => {});
    if (down) {
      proxy.refused += 1;
      downstream.destroy();
      return;
    }
    const upstream = connect(targetPort, "127.0.0.1");
    upstream.on("error", () => {});
    sockets.add(downstream);
    sockets.add(upstream);
    for (const s of [downstream, upstream]) s.on("close", () => drop(downstream, upstream));
    downstream.pipe(upstream);
    upstream.pipe(downstream);
  });
  const proxy = {
    port: 0,
    refused: 0,
    cut() {
      down = true;
      for (const s of [...sockets]) drop(s);
    },
    restore() {
      down = false;
    },
    close() {
      this.cut();
      return new Promise((res) => listener.close(() => res()));
    },
  };
  await new Promise((res, rej) => {
    listener.on("error", rej);
    listener.listen(0, "127.0.0.1", res);
  });
  proxy.port = listener.address().port;
  return proxy;
}

/**
 * Worker processes of the tests: `node script` with PORT, QUEUE and `env` in its environment,
 * its output on the test's. `children` lists those started; `killAll()` (for `after`) kills any
 * still running and waits for each to exit.
 */
export function workerProcesses(script, port) {
  const children = [];
  return {
    children,
    start(queue, env = {}) {
      const child = spawn(process.execPath, [script], {
        env: { ...process.env, PORT: String(port()), QUEUE: queue, ...Object.fromEntries(Object.entries(env).map(([k, v]) => [k, String(v)])) },
        stdio: ["ignore", "inherit", "inherit"],
      });
      children.push(child);
      return child;
    },
    async killAll() {
      await Promise.all(children.map((c) => c.exitCode !== null || c.signalCode !== null
        ? undefined : new Promise((r) => { c.once("exit", r); c.kill("SIGKILL"); })));
    },
  };
}

/** The most times of `times` (ms) inside any window of `window` ms. */
export function mostInAnyWindow(times, window) {
  const sorted = [...times].sort((a, b) => a - b);
  let most = 0;
  for (let i = 0, j = 0; i < sorted.length; i++) {
    while (sorted[j] <= sorted[i] - window) j++;
    most = Math.max(most, i - j + 1);
  }
  return most;
}
