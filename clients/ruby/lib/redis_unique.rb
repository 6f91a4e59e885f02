# frozen_string_literal: true

require_relative "redis_unique/version"
require_relative "redis_unique/errors"
require_relative "redis_unique/module_version"
require_relative "redis_unique/connection"
require_relative "redis_unique/functions"
require_relative "redis_unique/client"
require_relative "redis_unique/lock_all"
require_relative "redis_unique/refresher"
require_relative "redis_unique/limiter"
require_relative "redis_unique/limiter_all"

# Native job locks for Redis (the redis-unique module): see RedisUnique::Client, and
# `require "redis_unique/sidekiq"` for Sidekiq.
module RedisUnique
  autoload :Migrate, "redis_unique/migrate"
end
