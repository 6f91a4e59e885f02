# frozen_string_literal: true

# The application that the test suite's Sidekiq processes run:
#   sidekiq -r ./test/app/app.rb     (REDIS_URL set by the harness)
require "redis_unique/sidekiq"
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
