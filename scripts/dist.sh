#!/usr/bin/env bash
# make dist: every release artifact of one version (Cargo.toml's) into dist/, with SHA256SUMS:
#   redis-unique-VERSION-x86_64-linux-gnu.so   the module, loadable on glibc 2.17 or later
#   redis-unique-VERSION.gem                   the Ruby gem (gem build, Debian's Ruby)
#   redis_unique-VERSION-py3-none-any.whl      the Python wheel
#   redis_unique-VERSION.tar.gz                the Python sdist
#   redis-unique-VERSION.tgz                   the npm package (npm pack)
# aarch64 is not built here (its Rust standard library cannot be installed on this machine);
# docs/install.md gives the one command that builds it where it can.
set -euo pipefail
cd "$(dirname "$0")/.."
out=${DIST_DIR:-dist}
scripts/version.sh check
version=$(scripts/version.sh)
tools=$(scripts/dist-tools.sh)
rm -rf "$out" && mkdir -p "$out"
out=$(cd "$out" && pwd)

echo "== module (x86_64, glibc 2.17): cargo zigbuild, profile-guided"
# Zig links against glibc 2.17's symbol versions; its cache lives beside the tools.
export PATH="$tools:$PATH" ZIG_GLOBAL_CACHE_DIR=${ZIG_GLOBAL_CACHE_DIR:-$HOME/.cache/redis-unique-dist/zig}
# The profile of an instrumented build made the same way (its symbols are the ones the
# profile names), trained on real servers; linked through scripts/pgo-zig-link.sh.
profile=$(PGO_CARGO="cargo zigbuild" PGO_TARGET=x86_64-unknown-linux-gnu.2.17 \
    PGO_RUSTFLAGS="-Clinker=$PWD/scripts/pgo-zig-link.sh -Clinker-flavor=gcc" scripts/pgo.sh)
RUSTFLAGS="-Cprofile-use=$profile" cargo zigbuild --quiet --release --lib --target x86_64-unknown-linux-gnu.2.17
so=target/x86_64-unknown-linux-gnu/release/libredis_unique.so
scripts/dist-glibc.sh "$so"
cp "$so" "$out/redis-unique-$version-x86_64-linux-gnu.so"

echo "== gem"
(cd clients/ruby && gem build --silent redis-unique.gemspec --output "$out/redis-unique-$version.gem")

echo "== Python wheel and sdist"
"$tools/python" -m build --outdir "$out" clients/python >/dev/null
rm -rf clients/python/build clients/python/src/*.egg-info

echo "== npm package"
[ -f clients/node/node_modules/.installed ] || make --no-print-directory node-deps
# The package's build as make keeps it (redone only when a source changed): never removed
# and rebuilt under a Node suite that may be running beside this.
make --no-print-directory clients/node/dist/.built
(cd clients/node && npm pack --silent --pack-destination "$out" >/dev/null)

(cd "$out" && sha256sum -- * > SHA256SUMS && ls -l --time-style=+ | tail -n +2 && cat SHA256SUMS)
