# frozen_string_literal: true

# The Sidekiq app of the jobs/s benchmark: BENCH_MODE=gem (this gem) or lua (bench/lua).
require "redis_unique/sidekiq"
require_relative "v9_lua"
Redis.silence_deprecations = true if defined?(Redis) && Redis.respond_to?(:silence_deprecations=)

Sidekiq.configure_server do |config|
  config.redis = { url: ENV.fetch("REDIS_URL") }
  if ENV["BENCH_MODE"] == "lua"
    config.client_middleware { |c| c.add V9Lua::Client }
    config.server_middleware { |c| c.add V9Lua::Server }
  else
    RedisUnique::Sidekiq.configure_server(config, reaper: false)
  end
end

class NoopUntilExecutedJob
  include(defined?(Sidekiq::Job) ? Sidekiq::Job : Sidekiq::Worker)
  sidekiq_options lock: :until_executed, retry: false

  def perform(_n)
    Sidekiq.redis { |c| c.call("INCR", "bench:done") }
  end
end
