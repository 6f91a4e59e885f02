# frozen_string_literal: true

require_relative "lib/redis_unique/version"

Gem::Specification.new do |spec|
  spec.name = "redis-unique"
  spec.version = RedisUnique::VERSION
  spec.summary = "Sidekiq unique jobs and job locks on the redis-unique module's native locks"
  spec.description = "A client for the redis-unique Redis module (UNIQUE.LOCK, UNLOCK, LOCKEDBY, REAP, " \
                     "METRICS) and Sidekiq middlewares with sidekiq-unique-jobs v9's option names: lock types, " \
                     "conflict strategies, native waiting, fencing tokens, a dead-owner reaper and a v9 migration. " \
                     "Tested with Sidekiq 6.4, 7.3 and 8.1 on Redis 7.0-8.0 and Valkey 8-9; runs on the " \
                     "redis-unique module of the gem's major.minor version, or, where the server cannot load it " \
                     "(managed Redis and Valkey), on the module's Redis Functions library, shipped in the gem."
  spec.authors = ["redis-unique contributors"]
  spec.license = "MIT"
  spec.required_ruby_version = ">= 3.1"
  spec.files = Dir["lib/**/*.rb", "lib/redis_unique/redis_unique.lua", "lib/redis_unique/web/**/*.{erb,yml,js}", "bin/*", "examples/*.rb", "README.md"]
  spec.bindir = "bin"
  spec.executables = ["redis-unique", "redis-unique-migrate"]
  spec.require_paths = ["lib"]
  spec.add_dependency "connection_pool", ">= 2.2"
  # Either client library works (redis-rb 4.x/5.x, or redis-client through Sidekiq 7);
  # the gem requires neither itself.
  spec.metadata["sidekiq_versions"] = "6.4, 7.3, 8.1 (tested; Sidekiq 8 needs Ruby 3.2+)"
end
