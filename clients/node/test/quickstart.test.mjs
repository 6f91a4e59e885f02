// The README's "Quick start" is a replayed example (test/readme.test.mjs runs it), and the
// root README shows the same block.
import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";

const readme = readFileSync(new URL("../README.md", import.meta.url), "utf8");
const root = readFileSync(new URL("../../../README.md", import.meta.url), "utf8");

test("the quick start is replayed and is the root README's", () => {
  const section = readme.split("\n## Quick start\n")[1]?.split("\n## ")[0];
  assert.ok(section, "a Quick start section");
  const marked = section.match(/<!-- replayed by test\/readme\.test\.mjs -->\n(```js\n[\s\S]*?\n```\n)/);
  assert.ok(marked, "its js block is marked as replayed");
  assert.ok(root.includes(marked[1]), "the root README's Node quick start is this one");
});
