#!/bin/sh
# Installs what building and testing need when any of it is missing:
# redis-server and redis-cli (the tests run real servers), libclang
# (bindgen, which redis-module uses to read redismodule.h), redis-sentinel
# (make soak), valgrind (make test-valgrind), and the Ruby gem's Debian
# packages (clients/ruby: no RubyGems registry is used), and what building Ruby 3.3
# and the compatibility servers from source needs.
set -eu

missing=""
command -v redis-server >/dev/null 2>&1 || missing="$missing redis-server"
command -v redis-cli >/dev/null 2>&1 || missing="$missing redis-cli"
ldconfig -p 2>/dev/null | grep -q 'libclang' || missing="$missing libclang"
command -v redis-sentinel >/dev/null 2>&1 || missing="$missing redis-sentinel"
command -v valgrind >/dev/null 2>&1 || missing="$missing valgrind"
# make test-partition: iptables draws the partitions.
command -v iptables >/dev/null 2>&1 || missing="$missing iptables"
# The Ruby gem (clients/ruby): Ruby and Debian's gems, the only ones its tests use.
ruby_packages="ruby ruby-sidekiq ruby-redis ruby-connection-pool ruby-minitest ruby-rack-test"
# The web tab's browser test (clients/ruby/test/web_browser_test.rb): headless Chromium,
# its driver, Selenium's Ruby binding and WEBrick to serve the app.
ruby_packages="$ruby_packages chromium chromium-driver ruby-selenium-webdriver ruby-webrick"
# Sidekiq 6.4 under a Redis namespace (refused by the gem: clients/ruby/test/namespace_test.rb).
ruby_packages="$ruby_packages ruby-redis-namespace"
# Ruby 3.3, built from ../shared/ruby for Sidekiq 8 (ruby33-env.sh), and the servers of
# make test-compat, built from ../shared/servers (build.sh).
ruby_packages="$ruby_packages build-essential libssl-dev libyaml-dev zlib1g-dev libffi-dev"
if command -v dpkg-query >/dev/null 2>&1; then
    for p in $ruby_packages; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing="$missing $p"
    done
else
    command -v ruby >/dev/null 2>&1 || missing="$missing ruby"
fi
# The Node client (clients/node): Node 18 or later with npm (Debian's nodejs is 18).
command -v node >/dev/null 2>&1 && command -v npm >/dev/null 2>&1 || missing="$missing nodejs npm"
[ -z "$missing" ] && exit 0

packages="redis-server redis-tools redis-sentinel libclang-dev valgrind iptables $ruby_packages"
case $missing in *nodejs*) packages="$packages nodejs npm" ;; esac
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "Installing$missing: apt-get install -y $packages"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $packages >/dev/null
else
    echo "Missing:$missing. On Debian, as root: apt-get update && apt-get install -y $packages" >&2
    exit 1
fi
