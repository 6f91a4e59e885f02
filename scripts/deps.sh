#!/bin/sh
# Installs what building and testing need when any of it is missing:
# redis-server and redis-cli (the tests run real servers), libclang
# (bindgen, which redis-module uses to read redismodule.h), redis-sentinel
# (make soak) and valgrind (make test-valgrind).
set -eu

missing=""
command -v redis-server >/dev/null 2>&1 || missing="$missing redis-server"
command -v redis-cli >/dev/null 2>&1 || missing="$missing redis-cli"
ldconfig -p 2>/dev/null | grep -q 'libclang' || missing="$missing libclang"
command -v redis-sentinel >/dev/null 2>&1 || missing="$missing redis-sentinel"
command -v valgrind >/dev/null 2>&1 || missing="$missing valgrind"
[ -z "$missing" ] && exit 0

packages="redis-server redis-tools redis-sentinel libclang-dev valgrind"
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "Installing$missing: apt-get install -y $packages"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $packages >/dev/null
else
    echo "Missing:$missing. On Debian, as root: apt-get update && apt-get install -y $packages" >&2
    exit 1
fi
