# frozen_string_literal: true

require "sidekiq"
require "sidekiq/api"
require "digest/md5"
require "json"
require_relative "../redis_unique"

module RedisUnique
  # Sidekiq integration: sidekiq-unique-jobs v9's option names on the module's native locks.
  #
  #   Sidekiq.configure_client { |config| RedisUnique::Sidekiq.configure_client(config) }
  #   Sidekiq.configure_server { |config| RedisUnique::Sidekiq.configure_server(config) }
  #
  #   class SyncJob
  #     include Sidekiq::Job
  #     sidekiq_options lock: :until_executed, lock_ttl: 3600, on_conflict: :reject
  #   end
  module Sidekiq
    LOCK_TYPES = %w[until_executing until_executed until_expired while_executing
                    while_executing_reject until_and_while_executing].freeze
    # The lock types that take the runtime lock (<digest>:RUN) around perform.
    RUNTIME_TYPES = %w[while_executing while_executing_reject until_and_while_executing].freeze
    # Option names of older sidekiq-unique-jobs versions that v9 no longer reads (it would
    # silently take no lock): refused at push with the name to use instead.
    LEGACY_OPTIONS = {
      "unique" => "lock: (e.g. `lock: :until_executed`)",
      "unique_prefix" => "lock_prefix:",
      "lock_args" => "lock_args_method: (a Proc or a class method name)"
    }.freeze
    # Fair sharing of a runtime lock among tenants (Job#group_options).
    GROUP_OPTIONS = %w[lock_group lock_group_limit lock_group_weight].freeze
    STRATEGIES = %w[log raise reject replace reschedule].freeze
    # Payload flag of a job pushed by `on_conflict: :reschedule`: its pushes take no lock
    # (the lock is taken, or the conflict met again, when it runs).
    RESCHEDULED = "unique_rescheduled"
    # OWNER of an until_executed lock whose job went back to Sidekiq's sets (retry, or
    # requeued at shutdown): no process owns it, so no reaper frees it.
    QUEUED_OWNER = "queued"
    # Sidekiq identities that took locks with OWNER (zset: identity -> registration time).
    OWNERS_KEY = "redis_unique:owners"
    # The reaper's leader lock (a uniq-lock with a lease).
    LEADER_KEY = "redis_unique:reaper"
    # The gem's counters (a hash): renewal_lost (a running job's lock lost, see
    # Job#renewing). ReliableFetch counts in its own (ReliableFetch::STATS_KEY).
    STATS_KEY = "redis_unique:stats"

    # Global defaults; every one can be overridden per job in sidekiq_options.
    class Config
      attr_accessor :lock_prefix, :lock_ttl, :lock_timeout, :lock_limit, :lock_rate, :on_conflict, :lock_info,
                    :enabled, :reaper, :reaper_interval, :reaper_dead_after, :reaper_count,
                    :schedule_in, :logger

      # The backend of the gem's calls (RedisUnique.backend=): :auto (the default: the module
      # where it is loaded, else its Functions library), :module or :functions.
      def backend=(name)
        RedisUnique.backend = name
      end

      def backend
        RedisUnique.backend
      end

      def initialize
        @lock_prefix = "uniquejobs"
        @lock_ttl = nil
        @lock_timeout = nil
        @lock_limit = nil
        @lock_rate = nil
        @on_conflict = nil
        @lock_info = false
        @enabled = true
        @reaper = true
        @reaper_interval = 30
        @reaper_dead_after = 60
        @reaper_count = 1000
        @schedule_in = 5
        @logger = nil
      end
    end

    class << self
      def config
        @config ||= Config.new
      end

      def configure
        yield config
      end

      def logger
        config.logger || ::Sidekiq.logger
      end

      # Installs the client middleware. `config` is what Sidekiq.configure_client yields
      # (the Sidekiq module on 6.x, a Sidekiq::Config on 7.x). Keyword options set Config.
      def configure_client(sidekiq_config = ::Sidekiq, **options)
        apply(options)
        refuse_namespace!(sidekiq_config.method(:redis)) if sidekiq_config.respond_to?(:redis)
        sidekiq_config.client_middleware do |chain|
          chain.add(ClientMiddleware) unless chain.exists?(ClientMiddleware)
        end
        sidekiq_config
      end

      # Installs the client and server middlewares, the death handler, and the
      # dead-owner reaper (unless `reaper: false`).
      def configure_server(sidekiq_config = ::Sidekiq, **options)
        apply(options)
        configure_client(sidekiq_config)
        sidekiq_config.server_middleware do |chain|
          chain.add(ServerMiddleware) unless chain.exists?(ServerMiddleware)
        end
        unless sidekiq_config.death_handlers.include?(DEATH_HANDLER)
          sidekiq_config.death_handlers << DEATH_HANDLER
        end
        sidekiq_config.on(:startup) do
          refuse_namespace!(::Sidekiq.method(:redis))
          pool = sidekiq_config.respond_to?(:redis_pool) ? sidekiq_config.redis_pool : ::Sidekiq.redis_pool
          @reaper = Reaper.new(pool, identity: identity, interval: config.reaper_interval,
                                     dead_after: config.reaper_dead_after, count: config.reaper_count)
          @reaper.register
          @reaper.start if config.reaper
        end
        sidekiq_config.on(:shutdown) { @reaper&.stop }
        sidekiq_config
      end

      attr_reader :reaper

      NAMESPACE_REFUSED = "redis-unique does not work under a Redis namespace (Sidekiq 6's " \
                          "`config.redis = { namespace: ... }`, redis-namespace): the module's commands, the " \
                          "reliable fetcher's LMOVE/BLMOVE/LREM and the reaper's reads of Sidekiq's heartbeats " \
                          "go through a raw `call` that redis-namespace passes on without its prefix, so jobs " \
                          "in the namespaced queues would never be fetched and live processes would look dead. " \
                          "Drop the namespace (Sidekiq 7 and 8 did) and give each app its own Redis database " \
                          "instead, e.g. `config.redis = { url: \"redis://localhost:6379/1\" }`"

      # Raises ConfigurationError when the connections that `redis` (Sidekiq's `redis`
      # method: yields a connection) hands out are namespaced. Sidekiq 7 and 8 have no
      # namespace; on 6.4 the connection is then a Redis::Namespace. No command is sent.
      def refuse_namespace!(redis)
        return if ::Sidekiq::VERSION.to_i >= 7

        namespaced = redis.call { |conn| conn.respond_to?(:namespace) && !conn.namespace.to_s.empty? }
        raise ConfigurationError, NAMESPACE_REFUSED if namespaced
      end

      # This process's Sidekiq identity (hostname:pid:nonce), as in Sidekiq's processes set.
      def identity
        mod = begin
          require "sidekiq/component"
          ::Sidekiq::Component
        rescue LoadError
          require "sidekiq/util"
          ::Sidekiq::Util
        end
        @identity_source ||= Object.new.extend(mod)
        @identity_source.identity
      end

      # A Client on Sidekiq's pool (or on `pool`), cached per pool.
      def client(pool = nil)
        pool ||= ::Sidekiq.redis_pool
        @clients ||= {}.compare_by_identity
        @clients[pool] ||= Client.new(pool)
      end

      # The gem's counters (STATS_KEY) as { name => Integer }: "renewal_lost".
      def stats(pool = nil)
        client(pool).connection.call("HGETALL", STATS_KEY).then { |r| r.is_a?(Hash) ? r : Hash[*r] }
                    .transform_values(&:to_i)
      end

      # Adds `by` to the counter `name` of STATS_KEY (best effort: a counter never fails a job).
      def count(name, client = self.client, by = 1)
        client.connection.call("HINCRBY", STATS_KEY, name, by)
      rescue StandardError => e
        logger.warn("redis-unique: could not count #{name}: #{e.class}: #{e.message}")
        nil
      end

      # The v9 digest of a job hash (see the README): "<prefix>:<md5 hex>".
      def digest_for(item, klass = nil)
        Job.new(klass, item, nil).digest
      end

      private

      def apply(options)
        options.each { |k, v| config.public_send("#{k}=", v) }
      end
    end
  end
end

require_relative "sidekiq/job"
require_relative "sidekiq/lock_types"
require_relative "sidekiq/lock_limits"
require_relative "sidekiq/conflict_strategy"
require_relative "sidekiq/dependencies"
require_relative "sidekiq/middleware"
require_relative "sidekiq/reaper"
require_relative "sidekiq/reliable_fetch"
require_relative "sidekiq/api"
