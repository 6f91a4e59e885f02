# frozen_string_literal: true

require_relative "test_helper"

# Sidekiq 6's Redis namespace (redis-namespace): the gem refuses it at configuration,
# since the module's commands, the reliable fetcher's list moves and the reaper's reads
# of heartbeats would all bypass the prefix (jobs never fetched, live processes dead).
class NamespaceTest < Minitest::Test
  include TestHelpers

  def setup
    skip "Sidekiq #{::Sidekiq::VERSION} has no Redis namespace (removed in 7)" if H.sidekiq7?
    require "redis-namespace"
  end

  def namespaced_redis
    ns = Redis::Namespace.new("app", redis: Redis.new(url: TestSuite.url))
    ->(&block) { block.call(ns) }
  end

  def test_the_fetcher_and_the_reaper_refuse_a_namespace_in_process
    err = assert_raises(RedisUnique::ConfigurationError) do
      RedisUnique::Sidekiq.refuse_namespace!(namespaced_redis)
    end
    assert_includes err.message, "namespace"
    assert_includes err.message, "redis://localhost:6379/1", "says what to do instead"
    # Without a namespace (an empty one is none) nothing is refused.
    plain = ->(&block) { block.call(Redis.new(url: TestSuite.url)) }
    assert_nil RedisUnique::Sidekiq.refuse_namespace!(plain)
    empty = ->(&block) { block.call(Redis::Namespace.new("", redis: Redis.new(url: TestSuite.url))) }
    assert_nil RedisUnique::Sidekiq.refuse_namespace!(empty)
  end

  # A real Sidekiq 6 process configured with a namespace, the middlewares, the reaper and
  # ReliableFetch stops at boot with the reason, before it fetches or reaps anything.
  def test_a_namespaced_sidekiq_process_stops_at_boot_with_the_reason
    conn.call("LPUSH", "app:queue:default", JSON.generate("class" => "X", "jid" => "j-#{token}", "args" => []))
    app = File.expand_path("app/namespaced_app.rb", __dir__)
    process = H::SidekiqProcess.new(app: app, redis_url: TestSuite.url, queues: %w[default])
    H.wait_until(message: "the namespaced process to stop\n#{process.log}") { process.exited? }
    assert_includes process.log, "RedisUnique::ConfigurationError"
    assert_includes process.log, "does not work under a Redis namespace"
    assert_equal 1, conn.call("LLEN", "app:queue:default"), "no job was taken"
    assert_empty conn.call("SMEMBERS", "app:processes"), "it never heartbeat"
  ensure
    conn.call("DEL", "app:queue:default")
    process&.stop
  end
end
