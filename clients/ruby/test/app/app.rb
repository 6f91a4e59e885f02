# frozen_string_literal: true

# The application that the test suite's Sidekiq processes run:
#   sidekiq -r ./test/app/app.rb     (REDIS_URL set by the harness)
require "redis_unique/sidekiq"
require "sidekiq/launcher"

# Sidekiq beats every 5 s (6.4) or 10 s (7, 8), a constant. The tests' processes beat every
# BEAT_PAUSE seconds instead (the harness gives 1), so that the dead-owner reaper finds a
# killed process dead after 3 s, not 14.
if (pause = ENV["BEAT_PAUSE"])
  Sidekiq::Launcher.send(:remove_const, :BEAT_PAUSE)
  Sidekiq::Launcher.const_set(:BEAT_PAUSE, Float(pause))
end
Redis.silence_deprecations = true if defined?(Redis) && Redis.respond_to?(:silence_deprecations=)

Sidekiq.configure_server do |config|
  config.redis = { url: ENV.fetch("REDIS_URL") }
  config[:poll_interval_average] = Float(ENV.fetch("POLL_INTERVAL", "1")) if config.respond_to?(:[]=)
  Sidekiq.options[:poll_interval_average] = Float(ENV.fetch("POLL_INTERVAL", "1")) unless config.respond_to?(:[]=)
  RedisUnique::Sidekiq.configure_server(
    config,
    reaper_interval: Float(ENV.fetch("REAPER_INTERVAL", "30")),
    reaper_dead_after: Float(ENV.fetch("REAPER_DEAD_AFTER", "60"))
  )
end

require_relative "jobs"
Dir[File.expand_path("../../examples/*.rb", __dir__)].sort.each { |f| require f }
