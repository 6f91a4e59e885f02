#!/usr/bin/env bash
# The profile for the profile-guided release build (make build-pgo, make dist, make bench):
# an instrumented build of the module runs bench/pgo_train.py's workload on a real primary
# and replica, and llvm-profdata merges what they counted into target/pgo/merged.profdata.
# It runs on each of PGO_SERVERS (default: the redis-server on the PATH, Redis 7.0, and
# Valkey 9.1.2, built once from ../shared/servers: a server that shares its command time
# takes another path through every command); one that cannot be built is left out, said.
# Prints the profile's path. Building with it (RUSTFLAGS=-Cprofile-use=PATH) lays out each
# function's common path straight and moves code that the workload never ran out of the
# way: a LOCK touches fewer lines of code, which matters where Redis's code and the
# module's compete for the processor's instruction cache (docs/performance.md).
#
# llvm-profdata must match rustc's LLVM: it comes with rustup's llvm-tools component,
# installed here when missing.
set -euo pipefail
cd "$(dirname "$0")/.."
out=$PWD/target/pgo
host=$(rustc -vV | sed -n 's/^host: //p')
profdata=$(rustc --print sysroot)/lib/rustlib/$host/bin/llvm-profdata
if [ ! -x "$profdata" ]; then
    rustup component add llvm-tools >&2
fi

rm -rf "$out/raw" && mkdir -p "$out"
# Its own target directory: other flags would make cargo rebuild target/release each time.
RUSTFLAGS="-Cprofile-generate=$out/raw" \
    cargo build --quiet --release --lib --target-dir "$out/instrumented" >&2
cargo build --quiet --release --example loadgen >&2
cp "$out/instrumented/release/libredis_unique.so" "$out/instrumented.so"
servers=()
for name in ${PGO_SERVERS-redis-server valkey-9.1.2}; do
    case $name in
    redis-server) servers+=(redis-server) ;;
    *) if built=$(.ci/locked-build "$name" 2>/dev/null | tail -n 1); then servers+=("$built")
       else echo "pgo: $name could not be built; its path is not in the profile" >&2; fi ;;
    esac
done
python3 bench/pgo_train.py "$out/instrumented.so" "${servers[@]}" >&2
"$profdata" merge -o "$out/merged.profdata" "$out/raw" >&2
echo "$out/merged.profdata"
