#!/usr/bin/env bash
# The linker of make dist's instrumented build (scripts/pgo.sh through cargo zigbuild): zig's
# cc, which cargo-zigbuild names in CARGO_TARGET_X86_64_UNKNOWN_LINUX_GNU_LINKER, with rustc's
# `-u __llvm_profile_runtime` (what keeps the profiler's runtime in an instrumented build)
# passed as the one argument `-Wl,-u,SYMBOL`: zig's cc reads a lone `-u`'s symbol as a file.
set -euo pipefail
args=()
while [ $# -gt 0 ]; do
    if [ "$1" = -u ] && [ $# -gt 1 ]; then
        args+=("-Wl,-u,$2")
        shift 2
    else
        args+=("$1")
        shift
    fi
done
exec "${CARGO_TARGET_X86_64_UNKNOWN_LINUX_GNU_LINKER:?not run by cargo zigbuild}" "${args[@]}"
