#!/usr/bin/env node
/**
 * `npx redis-unique functions load redis://host:port`: loads the Functions library (the
 * backend where the module cannot be loaded) into that server; `functions version URL` prints
 * the loaded library's version, `functions source` the library itself. Uses ioredis.
 */
import { LIBRARY } from "./library.js";

async function main(argv: string[]): Promise<number> {
  const [group, action, url] = argv;
  if (group !== "functions" || !["load", "version", "source"].includes(action ?? "") || (action !== "source" && !url)) {
    process.stderr.write("usage: redis-unique functions load|version redis://[user:password@]host:port | functions source\n");
    return 2;
  }
  if (action === "source") {
    process.stdout.write(LIBRARY);
    return 0;
  }
  const { default: Redis } = (await import("ioredis")) as unknown as { default: new (url: string) => {
    call(...args: string[]): Promise<unknown>; quit(): Promise<unknown>;
  } };
  const redis = new Redis(url!);
  try {
    if (action === "load") {
      await redis.call("FUNCTION", "LOAD", "REPLACE", LIBRARY);
      const version = /^local VERSION = (\d+)/m.exec(LIBRARY)?.[1];
      process.stdout.write(`loaded redis_unique library version ${version}\n`);
    } else {
      process.stdout.write(`${String(await redis.call("FCALL_RO", "unique_version", "0"))}\n`);
    }
    return 0;
  } finally {
    await redis.quit();
  }
}

main(process.argv.slice(2)).then(
  (code) => process.exit(code),
  (err: unknown) => {
    process.stderr.write(`redis-unique: ${err instanceof Error ? err.message : String(err)}\n`);
    process.exit(1);
  },
);
