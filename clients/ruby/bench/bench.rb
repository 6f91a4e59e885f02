# frozen_string_literal: true

# make bench-ruby: the gem's client and Sidekiq integration against the Lua design of
# bench/lua/ called as sidekiq-unique-jobs v9 calls it, on the same server, in the same
# run, alternated. Prints a table and writes clients/ruby/bench/results.json.
#
# 1. lock+unlock pairs per second through redis-rb, 1 and 4 client threads (one connection
#    each): v9 digest + metadata JSON + lock + unlock, for the gem (RedisUnique::Client,
#    UNIQUE.LOCK TYPE META / UNIQUE.UNLOCK) and for the Lua design (EVALSHA lock.lua /
#    unlock.lua + v9's pipelined metrics write after each).
# 2. jobs per second of no-op until_executed jobs pushed (perform_async, one thread) and
#    performed by one Sidekiq process (concurrency 5), gem vs Lua design.
#
# BENCH_SECONDS (default 2) per measurement, BENCH_ROUNDS (default 3, the median is kept),
# BENCH_JOBS (default 2000).
$LOAD_PATH.unshift(File.expand_path("../lib", __dir__))
$LOAD_PATH.unshift(File.expand_path("../test", __dir__))
require "redis"
require "redis_unique/sidekiq"
require "support/harness"
require_relative "v9_lua"
Redis.silence_deprecations = true if Redis.respond_to?(:silence_deprecations=)

H = RedisUnique::Harness
SECONDS_EACH = Float(ENV.fetch("BENCH_SECONDS", "2"))
ROUNDS = Integer(ENV.fetch("BENCH_ROUNDS", "3"))
JOBS = Integer(ENV.fetch("BENCH_JOBS", "2000"))

server = H::RedisServer.new
url = server.url
results = { "sidekiq" => Sidekiq::VERSION, "ruby" => RUBY_VERSION, "redis_rb" => Redis::VERSION, "pairs" => {}, "jobs" => {} }

def item_for(i, t)
  { "class" => "SyncUserJob", "queue" => "default", "args" => [i, t], "jid" => "j#{t}-#{i}" }
end

gem_pair = lambda do |raw, client, i, t|
  item = item_for(i, t)
  job = RedisUnique::Sidekiq::Job.new(nil, item.merge("lock" => "until_executed"), nil)
  digest = job.digest
  client.lock(digest, item["jid"], type: "until_executed", meta: job.meta) or raise "denied"
  client.unlock(digest, item["jid"]) or raise "not unlocked"
end

lua_pair = lambda do |raw, client, i, t|
  item = item_for(i, t)
  digest = V9Lua.digest(item)
  V9Lua.lock(raw, client.connection, item, digest) or raise "denied"
  V9Lua.unlock(raw, client.connection, item, digest) == 1 or raise "not unlocked"
end

def measure(url, threads, body)
  stop_at = nil
  counts = Array.new(threads, 0)
  conns = Array.new(threads) { Redis.new(url: url) }
  clients = conns.map { |c| RedisUnique::Client.new(c) }
  conns.each { |c| V9Lua.instance_variable_set(:@shas, nil); V9Lua.shas(RedisUnique::Connection.new(c)) }
  start = Process.clock_gettime(Process::CLOCK_MONOTONIC)
  stop_at = start + SECONDS_EACH
  workers = Array.new(threads) do |t|
    Thread.new do
      i = 0
      while Process.clock_gettime(Process::CLOCK_MONOTONIC) < stop_at
        body.call(conns[t], clients[t], i, t)
        i += 1
      end
      counts[t] = i
    end
  end
  workers.each(&:join)
  elapsed = Process.clock_gettime(Process::CLOCK_MONOTONIC) - start
  conns.each(&:close)
  counts.sum / elapsed
end

[1, 4].each do |threads|
  gem_rates = []
  lua_rates = []
  ROUNDS.times do
    gem_rates << measure(url, threads, gem_pair)
    lua_rates << measure(url, threads, lua_pair)
  end
  median = ->(a) { a.sort[a.size / 2] }
  results["pairs"][threads.to_s] = { "gem" => median.(gem_rates).round, "lua_v9" => median.(lua_rates).round,
                                     "gem_runs" => gem_rates.map(&:round), "lua_runs" => lua_rates.map(&:round) }
end

# Jobs per second through one Sidekiq process.
raw = Redis.new(url: url)
require_relative "app"
Sidekiq.configure_client { |config| config.redis = { url: url } }
# warm-up of this process (pushes only, both modes), then cleaned
%w[gem lua].each do |mode|
  Sidekiq.client_middleware.clear
  Sidekiq.client_middleware.add(mode == "lua" ? V9Lua::Client : RedisUnique::Sidekiq::ClientMiddleware)
  300.times { |n| NoopUntilExecutedJob.set(queue: "warmup").perform_async(n) }
end
raw.flushdb
%w[lua gem gem lua].each do |mode|
  raw.call("DEL", "bench:done")
  sk = H::SidekiqProcess.new(app: File.expand_path("app.rb", __dir__), redis_url: url, queues: ["bench"],
                             concurrency: 5, env: { "BENCH_MODE" => mode })
  sk.wait_ready(RedisUnique::Connection.new(raw), timeout: 60)
  chain = Sidekiq.client_middleware
  chain.clear
  if mode == "lua"
    chain.add V9Lua::Client
  else
    chain.add RedisUnique::Sidekiq::ClientMiddleware
  end
  start = Process.clock_gettime(Process::CLOCK_MONOTONIC)
  JOBS.times { |n| NoopUntilExecutedJob.set(queue: "bench").perform_async(n) or raise "duplicate?" }
  pushed = Process.clock_gettime(Process::CLOCK_MONOTONIC) - start
  H.wait_until(timeout: 300, interval: 0.01, message: "#{JOBS} jobs done") { raw.call("GET", "bench:done").to_i >= JOBS }
  elapsed = Process.clock_gettime(Process::CLOCK_MONOTONIC) - start
  sk.stop
  leftover = raw.call("KEYS", "uniquejobs:*").reject { |k| k.include?("metrics") || k.end_with?("digests") }
  raise "#{mode}: locks left behind: #{leftover.first(3)}" unless leftover.empty?

  (results["jobs"][mode] ||= []) << { "jobs_per_s" => (JOBS / elapsed).round, "push_per_s" => (JOBS / pushed).round }
end
server.stop

pairs = results["pairs"]
jobs = results["jobs"].transform_values { |runs| runs.map { |r| r["jobs_per_s"] }.max }
puts "redis-unique gem vs the Lua design (bench/lua, called as v9 calls it with its metrics writes)"
puts "Sidekiq #{Sidekiq::VERSION}, Ruby #{RUBY_VERSION}, redis-rb #{Redis::VERSION}; medians of #{ROUNDS} x #{SECONDS_EACH}s, alternated"
puts format("%-40s %12s %12s %7s", "", "gem", "Lua (v9)", "ratio")
pairs.each do |t, r|
  puts format("%-40s %12d %12d %6.2fx", "lock+unlock pairs/s, #{t} thread(s)", r["gem"], r["lua_v9"], r["gem"].to_f / r["lua_v9"])
end
puts format("%-40s %12d %12d %6.2fx", "until_executed jobs/s, 1 Sidekiq (c=5)", jobs["gem"], jobs["lua"], jobs["gem"].to_f / jobs["lua"])
puts "(v9's published figure, on its author's machine: 8,684 lock+unlock/s)"
results["jobs_best"] = jobs
File.write(File.expand_path("results.json", __dir__), JSON.pretty_generate(results) + "\n")
