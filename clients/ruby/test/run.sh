#!/bin/sh
# Runs the whole Ruby suite on each Sidekiq of SIDEKIQ_VERSIONS (default "6 7 8"):
#   6: Debian's Sidekiq 6.4.1 on Debian's Ruby 3.1;
#   7: Sidekiq 7.3.9 on Ruby 3.1, from ../shared/ruby next to the repository (or $SHARED_RUBY);
#   8: Sidekiq 8.1.7 on Ruby 3.3.8, built once from ../shared/ruby (ruby33-env.sh, cached).
# `make test-ruby` calls it; `make test-compat` runs it with SIDEKIQ_VERSIONS=8 on every server.
# Extra arguments are test files (default: all of test/*_test.rb).
# Minitest runs them in an order drawn from SEED, or from TEST_SEED (make's, printed by
# minitest as "Run options: --seed N"); SEED=N clients/ruby/test/run.sh replays an order.
set -eu
cd "$(dirname "$0")/.."
SHARED_RUBY=${SHARED_RUBY:-$(cd ../.. && pwd)/../shared/ruby}
export SHARED_RUBY
[ $# -gt 0 ] || set -- test/*_test.rb
if [ -z "${SEED:-}" ] && [ -n "${TEST_SEED:-}" ]; then SEED=$TEST_SEED; export SEED; fi
run() { "$ruby" -W0 -Ilib -Itest -e 'files = ARGV.dup; ARGV.clear; files.each { |f| require File.expand_path(f) }' "$@"; }
need() { [ -x "$SHARED_RUBY/$1" ] || { echo "no $SHARED_RUBY/$1: set SHARED_RUBY" >&2; exit 1; }; }

# Debian packages some pure-Ruby libraries the tests use for its Ruby 3.1 only; they
# load on Ruby 3.3 too: selenium-webdriver and what it requires (the browser test) and
# redis-rb 4.8 (the client's tests of both client libraries). Only those are put on
# the path, not all of Debian's vendor_ruby (its rubygems.rb and others are 3.1's).
debian_libs() {
    dir=${RUBY_GEMS_CACHE:-$HOME/.cache/redis-unique-ruby}/debian-selenium
    mkdir -p "$dir"
    for lib in selenium selenium-webdriver.rb childprocess childprocess.rb; do
        [ -e "/usr/lib/ruby/vendor_ruby/$lib" ] && ln -sfn "/usr/lib/ruby/vendor_ruby/$lib" "$dir/$lib"
    done
    path=$dir
    for gem in /usr/share/rubygems-integration/all/gems/rubyzip-* /usr/share/rubygems-integration/all/gems/websocket-* \
               /usr/share/rubygems-integration/all/gems/redis-[0-9]*; do
        [ -d "$gem/lib" ] && path="$path:$gem/lib"
    done
    echo "$path"
}

# The Sidekiq tests on the Functions library (functions_sidekiq_test.rb) run on the last
# Sidekiq of the list only: the gem's code on the library is the same on each Sidekiq.
for version in ${SIDEKIQ_VERSIONS:-6 7 8}; do REDIS_UNIQUE_LIBRARY_SIDEKIQ=$version; done
export REDIS_UNIQUE_LIBRARY_SIDEKIQ
for version in ${SIDEKIQ_VERSIONS:-6 7 8}; do
    case $version in
    6)
        echo "== redis-unique gem: Sidekiq 6.4.1 (Debian), Ruby $(ruby -e 'print RUBY_VERSION')"
        ruby=ruby RUBYLIB= run "$@" ;;
    7)
        need sidekiq7-env.sh
        echo "== redis-unique gem: Sidekiq 7.3.9 ($SHARED_RUBY), Ruby $(ruby -e 'print RUBY_VERSION')"
        ruby=ruby RUBYLIB=$("$SHARED_RUBY/sidekiq7-env.sh") run "$@" ;;
    8)
        need sidekiq8-env.sh
        need ruby33-env.sh
        # Under the lock that .ci/run's background build of Ruby 3.3 holds, if one runs.
        ruby=$(SHARED_RUBY=$SHARED_RUBY ../../scripts/locked-build ruby33)
        echo "== redis-unique gem: Sidekiq 8.1.7 ($SHARED_RUBY), Ruby $("$ruby" -e 'print RUBY_VERSION')"
        RUBYLIB=$("$SHARED_RUBY/sidekiq8-env.sh"):$(debian_libs) run "$@" ;;
    *)
        echo "SIDEKIQ_VERSIONS: unknown version $version (6, 7 or 8)" >&2; exit 2 ;;
    esac
done
