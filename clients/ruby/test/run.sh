#!/bin/sh
# Runs the whole Ruby suite against Debian's Sidekiq 6.4.1, then Sidekiq 7.3.9
# (from ../shared/ruby next to the repository, or $SHARED_RUBY). `make test-ruby` calls it.
# Extra arguments are test files (default: all of test/*_test.rb).
set -eu
cd "$(dirname "$0")/.."
SHARED_RUBY=${SHARED_RUBY:-$(cd ../.. && pwd)/../shared/ruby}
export SHARED_RUBY
[ $# -gt 0 ] || set -- test/*_test.rb
run() { ruby -W0 -Ilib -Itest -e 'files = ARGV.dup; ARGV.clear; files.each { |f| require File.expand_path(f) }' "$@"; }
echo "== redis-unique gem: Sidekiq 6.4.1 (Debian)"
RUBYLIB= run "$@"
echo "== redis-unique gem: Sidekiq 7.3.9 ($SHARED_RUBY)"
RUBYLIB=$("$SHARED_RUBY/sidekiq7-env.sh") run "$@"
