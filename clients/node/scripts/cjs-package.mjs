// dist/cjs is CommonJS inside a "type": "module" package: a package.json of its own
// tells Node so (the ESM build in dist/esm keeps the package's "module" type).
import { writeFileSync } from "node:fs";
writeFileSync(new URL("../dist/cjs/package.json", import.meta.url), '{ "type": "commonjs" }\n');
