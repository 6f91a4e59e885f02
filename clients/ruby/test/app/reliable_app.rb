# frozen_string_literal: true

# The test application with ReliableFetch on:
#   sidekiq -r ./test/app/reliable_app.rb     (REDIS_URL set by the harness)
require_relative "app"

Sidekiq.configure_server { |config| RedisUnique::Sidekiq.reliable_fetch!(config) }

require_relative "reliable_jobs"
