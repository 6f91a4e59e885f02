# frozen_string_literal: true

# A Sidekiq 6 application under a Redis namespace, with the gem's middlewares, reaper and
# ReliableFetch: the gem must refuse it at boot, saying why.
#   sidekiq -r ./test/app/namespaced_app.rb     (REDIS_URL set by the harness)
require "redis_unique/sidekiq"

Sidekiq.configure_server do |config|
  config.redis = { url: ENV.fetch("REDIS_URL"), namespace: "app" }
  RedisUnique::Sidekiq.configure_server(config)
  RedisUnique::Sidekiq.reliable_fetch!(config)
end
