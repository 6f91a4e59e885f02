#!/usr/bin/env bash
# Fails unless the shared object $1 needs no glibc symbol version newer than GLIBC_2.17
# (RHEL/CentOS 7, Amazon Linux 2, Ubuntu 18.04 and every later glibc), and prints the newest
# it needs. Reads the dynamic symbol table with objdump -T (binutils).
set -euo pipefail
so=${1:?usage: scripts/dist-glibc.sh MODULE.so}
limit=${GLIBC_MAX:-2.17}
versions=$(objdump -T "$so" | grep -o 'GLIBC_[0-9][0-9.]*' | sed 's/GLIBC_//' | sort -uV)
[ -n "$versions" ] || { echo "$so: no GLIBC symbol versions found (is it a glibc build?)" >&2; exit 1; }
newest=$(printf '%s\n' "$versions" | tail -1)
if [ "$(printf '%s\n%s\n' "$newest" "$limit" | sort -V | tail -1)" != "$limit" ]; then
    echo "$so needs GLIBC_$newest, newer than GLIBC_$limit:" >&2
    for v in $versions; do
        [ "$(printf '%s\n%s\n' "$v" "$limit" | sort -V | tail -1)" = "$limit" ] && continue
        objdump -T "$so" | grep -F "(GLIBC_$v)" | awk '{print "  " $NF " needs GLIBC_" substr($(NF-1), 8, length($(NF-1)) - 8)}' >&2
    done
    exit 1
fi
echo "$so: newest glibc symbol version needed is GLIBC_$newest (limit GLIBC_$limit)"
