#!/bin/sh
# Installs what building and testing need when any of it is missing:
# redis-server and redis-cli (the tests run real servers) and libclang
# (bindgen, which redis-module uses to read redismodule.h).
set -eu

missing=""
command -v redis-server >/dev/null 2>&1 || missing="$missing redis-server"
command -v redis-cli >/dev/null 2>&1 || missing="$missing redis-cli"
ldconfig -p 2>/dev/null | grep -q 'libclang' || missing="$missing libclang"
# The Ruby gem (clients/ruby): Ruby and Debian's gems, the only ones its tests use.
ruby_packages="ruby ruby-sidekiq ruby-redis ruby-connection-pool ruby-minitest ruby-rack-test"
if command -v dpkg-query >/dev/null 2>&1; then
    for p in $ruby_packages; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing="$missing $p"
    done
else
    command -v ruby >/dev/null 2>&1 || missing="$missing ruby"
fi
[ -z "$missing" ] && exit 0

packages="redis-server redis-tools libclang-dev $ruby_packages"
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "Installing$missing: apt-get install -y $packages"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $packages >/dev/null
else
    echo "Missing:$missing. On Debian, as root: apt-get update && apt-get install -y $packages" >&2
    exit 1
fi
