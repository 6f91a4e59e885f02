/**
 * This package's version, the one of every redis-unique artifact (Cargo.toml's, kept equal
 * by scripts/version.sh): the module version this client was built for.
 */
export const VERSION = "0.1.0";

/**
 * The module-version check: at the first command on a Redis client, Client asks MODULE LIST
 * which version of the module is loaded and refuses another major.minor than this package's
 * (a patch release of either side changes no reply). MODULE LIST's `ver` is
 * major * 10000 + minor * 100 + patch (0.1.0 is 100). A server that refuses MODULE LIST (an
 * ACL without it, a proxy) is not checked; a missing module is left to the command itself.
 * `builtFor` is the version compared with: tests set another.
 */
export const moduleVersionCheck = { builtFor: VERSION };

/** MODULE LIST's ver as MAJOR.MINOR.PATCH (20601 -> "2.6.1"). */
export function decodeModuleVersion(ver: number): string {
  return `${Math.floor(ver / 10000)}.${Math.floor(ver / 100) % 100}.${ver % 100}`;
}

function text(value: unknown): string {
  return Buffer.isBuffer(value) ? value.toString() : String(value);
}

/** The ver of the module named "unique" in a MODULE LIST reply (RESP2 pairs or RESP3 maps), or null. */
export function loadedModuleVersion(reply: unknown): number | null {
  if (!Array.isArray(reply)) return null;
  for (const entry of reply) {
    let fields: Map<string, unknown>;
    if (Array.isArray(entry)) {
      fields = new Map();
      for (let i = 0; i + 1 < entry.length; i += 2) fields.set(text(entry[i]), entry[i + 1]);
    } else if (entry instanceof Map) {
      fields = new Map([...entry].map(([k, v]) => [text(k), v]));
    } else if (entry && typeof entry === "object") {
      fields = new Map(Object.entries(entry));
    } else continue;
    if (text(fields.get("name")) === "unique") return Number(text(fields.get("ver")));
  }
  return null;
}
