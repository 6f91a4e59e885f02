#!/usr/bin/env bash
# Prints the bin/ directory of a venv holding the release tools at pinned versions, made
# when missing: cargo-zigbuild and ziglang (the module linked against glibc 2.17's symbols,
# with no cross toolchain to install) and build (the Python wheel and sdist). Both come
# from PyPI; the venv is kept in DIST_TOOLS (default ~/.cache/redis-unique-dist/tools) so
# that CI makes it once per machine.
set -euo pipefail
CARGO_ZIGBUILD_VERSION=0.24.1
ZIGLANG_VERSION=0.17.1
BUILD_VERSION=1.6.1
venv=${DIST_TOOLS:-$HOME/.cache/redis-unique-dist/tools}
stamp="$venv/.pinned-$CARGO_ZIGBUILD_VERSION-$ZIGLANG_VERSION-$BUILD_VERSION"
if [ ! -f "$stamp" ]; then
    rm -rf "$venv"
    python3 -m venv "$venv" >&2 || { echo "python3 -m venv failed: on Debian, apt-get install -y python3-venv" >&2; exit 1; }
    "$venv/bin/python" -m pip install --quiet --disable-pip-version-check \
        "cargo-zigbuild==$CARGO_ZIGBUILD_VERSION" "ziglang==$ZIGLANG_VERSION" "build==$BUILD_VERSION" >&2
    touch "$stamp"
fi
echo "$venv/bin"
