#!/usr/bin/env bash
# The profile for the profile-guided release build (make build-pgo, make dist, make bench):
# an instrumented build of the module runs bench/pgo_train.py's workload on a real primary
# and replica, and llvm-profdata merges what they counted into target/pgo/TARGET/merged.profdata.
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
host=$(rustc -vV | sed -n 's/^host: //p')
# The profile finds a function by its symbol, and cargo's hash in every symbol differs with
# the way the module is built: with or without `--target`, with cargo build or cargo
# zigbuild. So the instrumented build is made as the build that will use the profile is
# (PGO_CARGO and PGO_TARGET: make dist's is "cargo zigbuild" for x86_64-unknown-linux-gnu.2.17;
# PGO_RUSTFLAGS: more flags for the instrumented build alone, which only the profile's
# `-Cprofile-generate` and these set apart: neither changes the symbols).
cargo_build=${PGO_CARGO:-cargo build}
target=${PGO_TARGET:-$host}
out=$PWD/target/pgo/$target
profdata=$(rustc --print sysroot)/lib/rustlib/$host/bin/llvm-profdata
if [ ! -x "$profdata" ]; then
    rustup component add llvm-tools >&2
fi

rm -rf "$out/raw" && mkdir -p "$out"
# Its own target directory: other flags would make cargo rebuild target/release each time.
RUSTFLAGS="-Cprofile-generate=$out/raw ${PGO_RUSTFLAGS:-}" \
    $cargo_build --quiet --release --lib --target "$target" --target-dir "$out/instrumented" >&2
cargo build --quiet --release --example loadgen >&2
# cargo's directory for a zigbuild target drops its glibc version (.2.17).
cp "$out/instrumented/${target%%.[0-9]*}/release/libredis_unique.so" "$out/instrumented.so"
servers=()
for name in ${PGO_SERVERS-redis-server valkey-9.1.2}; do
    case $name in
    redis-server) servers+=(redis-server) ;;
    *) if built=$(scripts/locked-build "$name" 2>/dev/null | tail -n 1); then servers+=("$built")
       else echo "pgo: $name could not be built; its path is not in the profile" >&2; fi ;;
    esac
done
python3 bench/pgo_train.py "$out/instrumented.so" "${servers[@]}" >&2
"$profdata" merge -o "$out/merged.profdata" "$out/raw" >&2
echo "$out/merged.profdata"
