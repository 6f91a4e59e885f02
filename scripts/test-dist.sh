#!/usr/bin/env bash
# make test-dist: the artifacts of dist/ tested as a user gets them.
#  1. SHA256SUMS matches every file; the module needs no glibc symbol newer than GLIBC_2.17.
#  2. The dist .so on Debian's redis-server (7.0) and on every server of COMPAT_SERVERS
#     (built once by ../shared/servers/build.sh through scripts/locked-build, as make
#     test-compat does): MODULE LIST reports the release's version, and a subset of the
#     Rust suite that sends every command (docs/install.md's loadmodule and MODULE
#     LOADEX, the redis-cli transcripts, commands, waiting, reaping, rate, persistence and
#     replication) runs against it.
#  3. Each client installed from its artifact into a clean place, nothing from the
#     repository on its path, running one real job against a server with the dist .so:
#     the gem into a fresh GEM_HOME (Debian's Ruby and Sidekiq 6.4), a Sidekiq job;
#     the wheel into a fresh venv with RQ from PyPI, an RQ task; the npm tarball into a
#     fresh npm project with BullMQ and ioredis from npm, a BullMQ job.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
dist=${DIST_DIR:-dist}
version=$(scripts/version.sh)
so=$root/$dist/redis-unique-$version-x86_64-linux-gnu.so
SERVERS_DIR=${SERVERS_DIR:-../shared/servers}
COMPAT_SERVERS=${COMPAT_SERVERS:-redis-7.2.6 redis-8.0.6 valkey-8.0.1 valkey-9.1.2}
RUST_SUBSET="--test install_doc --test cli --test commands --test waiting --test reaping --test rate --test durability --test replication"
work=$(mktemp -d /tmp/redis-unique-test-dist.XXXXXX)
pids=()
cleanup() {
    for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
    rm -rf "$work"
}
trap cleanup EXIT
step() { echo "== $* ($(date +%T))"; }
poll() { # poll SECONDS COMMAND...: until COMMAND succeeds, or fail
    local deadline=$((SECONDS + $1)); shift
    until "$@" >/dev/null 2>&1; do
        [ $SECONDS -lt $deadline ] || { echo "timed out waiting for: $*" >&2; return 1; }
        sleep 0.1
    done
}

step "checksums and glibc symbol versions"
(cd "$dist" && sha256sum --check --strict SHA256SUMS)
scripts/dist-glibc.sh "$so"

# start_server NAME SERVER_BINARY [PORT]: starts it with the dist .so on a unix socket (and PORT).
start_server() {
    local name=$1 bin=$2 port=${3:-0} dir=$work/server-$1
    mkdir -p "$dir"
    "$bin" --port "$port" --unixsocket "$dir/sock" --dir "$dir" --save "" --appendonly no \
        --loadmodule "$so" >"$dir/log" 2>&1 &
    pids+=($!)
    poll 20 test -S "$dir/sock" || { cat "$dir/log" >&2; return 1; }
}

want=$(scripts/version.sh module)
servers="debian-redis:$(command -v redis-server)"
for name in $COMPAT_SERVERS; do
    servers="$servers $name:$(SERVERS_DIR=$SERVERS_DIR nice -n 10 scripts/locked-build "$name")"
done
for entry in $servers; do
    name=${entry%%:*} bin=${entry#*:}
    cli=$(ls "$(dirname "$bin")"/redis-cli "$(dirname "$bin")"/valkey-cli 2>/dev/null | head -1 || true)
    cli=${cli:-$(command -v redis-cli)}
    step "$name ($("$bin" --version | grep -o 'v=[0-9.]*')): the dist .so"
    start_server "$name" "$bin"
    ver=$("$cli" -s "$work/server-$name/sock" MODULE LIST | awk 'k == "name" {n = $0} k == "ver" && n == "unique" {print; exit} {k = $0}')
    [ "$ver" = "$want" ] || { echo "$name: MODULE LIST says ver '$ver', the release $version is $want" >&2; exit 1; }
    "$cli" -s "$work/server-$name/sock" SHUTDOWN NOSAVE >/dev/null 2>&1 || true
    echo "MODULE LIST: ver $ver ($version)"
    # shellcheck disable=SC2086
    if ! REDIS_SERVER=$bin REDIS_CLI=$cli REDIS_UNIQUE_MODULE=$so nice -n 5 cargo test --quiet $RUST_SUBSET \
            >"$work/rust-$name.log" 2>&1; then
        tail -60 "$work/rust-$name.log" >&2
        echo "== FAILED: the Rust subset on $name with the dist .so" >&2
        exit 1
    fi
    awk '/^test result/ {n += $4} END {print "Rust subset: " n " tests passed"}' "$work/rust-$name.log"
done

step "clients from their artifacts, each running one job on Redis 7.0 with the dist .so"
port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
start_server clients "$(command -v redis-server)" "$port"
url=redis://127.0.0.1:$port
export REDIS_URL=$url
cli() { redis-cli -p "$port" "$@"; }
done_key() { [ "$(cli EXISTS "$1")" = 1 ]; }

step "gem: gem install --local into a fresh GEM_HOME, a Sidekiq job (Debian's Ruby and Sidekiq)"
mkdir -p "$work/ruby" && cd "$work/ruby"
GEM_HOME=$work/ruby/gems gem install --local --no-document "$root/$dist/redis-unique-$version.gem"
cat >job.rb <<'RUBY'
require "sidekiq"
require "redis_unique/sidekiq"
Sidekiq.configure_client do |config|
  config.redis = { url: ENV["REDIS_URL"] }
  RedisUnique::Sidekiq.configure_client(config)
end
Sidekiq.configure_server do |config|
  config.redis = { url: ENV["REDIS_URL"] }
  RedisUnique::Sidekiq.configure_server(config)
end
class DistJob
  include Sidekiq::Worker
  sidekiq_options lock: :until_executed, lock_ttl: 60, on_conflict: :reject
  def perform(n)
    Sidekiq.redis { |r| r.set("dist:ruby:done", n) }
  end
end
RUBY
cat >push.rb <<'RUBY'
require_relative "job"
loaded = $LOADED_FEATURES.grep(%r{/redis_unique\.rb\z}).first
abort "the gem was loaded from #{loaded}, not from GEM_HOME" unless loaded&.start_with?(ENV["GEM_HOME"])
first = DistJob.perform_async(7)
second = DistJob.perform_async(7)
abort "the first push was refused" unless first
abort "the duplicate push was not refused by its lock: #{second}" if second
puts "pushed #{first}; its duplicate refused by the lock (gem #{RedisUnique::VERSION} from #{File.dirname(loaded)})"
RUBY
GEM_HOME=$work/ruby/gems ruby push.rb
GEM_HOME=$work/ruby/gems sidekiq -r ./job.rb -c 2 >sidekiq.log 2>&1 &
pids+=($!)
poll 60 done_key dist:ruby:done || { tail -30 sidekiq.log >&2; exit 1; }
# until_executed: the lock frees once the job ran, so the same job can be pushed again.
poll 20 bash -c "GEM_HOME=$work/ruby/gems ruby -e 'require \"./job\"; exit(DistJob.perform_async(7) ? 0 : 1)'"
echo "Sidekiq ran the job ($(cli GET dist:ruby:done)); its lock freed after it"
kill "${pids[-1]}"; wait "${pids[-1]}" 2>/dev/null || true
cd "$root"

step "wheel: pip install into a fresh venv (with RQ), an RQ task"
python3 -m venv "$work/venv"
"$work/venv/bin/python" -m pip install --quiet --disable-pip-version-check \
    "$root/$dist/redis_unique-$version-py3-none-any.whl" rq
mkdir -p "$work/python" && cd "$work/python"
cat >tasks.py <<'PY'
import os

import redis


def work(n):
    redis.Redis.from_url(os.environ["REDIS_URL"]).set("dist:python:done", n)
PY
cat >enqueue.py <<'PY'
import os

import redis
import redis_unique
from redis_unique.rq import enqueue_unique
from rq import Queue

import tasks

assert "site-packages" in redis_unique.__file__, redis_unique.__file__
q = Queue("dist", connection=redis.Redis.from_url(os.environ["REDIS_URL"]))
first = enqueue_unique(q, tasks.work, 7)
second = enqueue_unique(q, tasks.work, 7)
assert second.id == first.id, "the duplicate was enqueued: %s %s" % (first.id, second.id)
assert len(q) == 1, len(q)
print("enqueued %s; its duplicate skipped by the lock (redis-unique %s from %s)"
      % (first.id, redis_unique.__version__, os.path.dirname(redis_unique.__file__)))
PY
"$work/venv/bin/python" enqueue.py
"$work/venv/bin/rq" worker --burst --url "$url" dist >rq.log 2>&1 || { tail -30 rq.log >&2; exit 1; }
done_key dist:python:done || { tail -30 rq.log >&2; echo "the RQ task did not run" >&2; exit 1; }
"$work/venv/bin/python" - <<'PY'
import os
import redis
from redis_unique.rq import enqueue_unique
from rq import Queue
import tasks
q = Queue("dist", connection=redis.Redis.from_url(os.environ["REDIS_URL"]))
again = enqueue_unique(q, tasks.work, 7)
assert len(q) == 1, "the lock was still held after the task ran"
PY
echo "RQ ran the task ($(cli GET dist:python:done)); its lock freed after it"
cd "$root"

step "npm tarball: npm install into a fresh project (with BullMQ and ioredis), a BullMQ job"
mkdir -p "$work/node" && cd "$work/node"
echo '{"name": "dist-check", "private": true, "type": "module"}' >package.json
npm install --no-audit --no-fund --loglevel=error "$root/$dist/redis-unique-$version.tgz" bullmq ioredis >/dev/null
cat >job.mjs <<'JS'
import { Queue, Worker, QueueEvents } from "bullmq";
import IORedis from "ioredis";
import { VERSION } from "redis-unique";
import { GroupLimit } from "redis-unique/bullmq";
import { createRequire } from "node:module";

const where = createRequire(import.meta.url).resolve("redis-unique");
if (!where.startsWith(process.cwd() + "/node_modules/")) throw new Error(`redis-unique resolved to ${where}`);
const connection = { host: "127.0.0.1", port: Number(new URL(process.env.REDIS_URL).port), maxRetriesPerRequest: null };
const redis = new IORedis(connection);
const limit = new GroupLimit({ redis, group: (job) => job.data.customer, concurrency: 1 });
const seen = [];
const worker = new Worker("dist", limit.wrap(async (job) => {
  seen.push(await redis.call("UNIQUE.LOCKEDBY", `unique:group:dist:${job.data.customer}`));
  await redis.set("dist:node:done", job.data.n);
  return job.data.n;
}), { connection, name: limit.workerName });
const events = new QueueEvents("dist", { connection });
await events.waitUntilReady();
const queue = new Queue("dist", { connection });
const job = await queue.add("one", { customer: "c1", n: 7 });
const result = await job.waitUntilFinished(events, 30_000);
if (result !== 7) throw new Error(`job result ${result}`);
if (seen[0]?.length !== 1) throw new Error(`the job ran without its group slot: ${JSON.stringify(seen)}`);
const after = await redis.call("UNIQUE.LOCKEDBY", "unique:group:dist:c1");
if (after.length !== 0) throw new Error(`the group slot was not freed: ${after}`);
console.log(`BullMQ ran the job holding its group's slot (${seen[0][0]}), freed after it (redis-unique ${VERSION} from ${where})`);
await Promise.all([worker.close(), queue.close(), events.close()]);
await redis.quit();
process.exit(0); // GroupLimit's lease timers and connections of its own are not this check's
JS
timeout 60 node job.mjs
cd "$root"
step "test-dist passed"
