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
                    until_and_while_executing].freeze
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

    # Global defaults; every one can be overridden per job in sidekiq_options.
    class Config
      attr_accessor :lock_prefix, :lock_ttl, :lock_timeout, :lock_limit, :on_conflict, :lock_info,
                    :enabled, :reaper, :reaper_interval, :reaper_dead_after, :reaper_count,
                    :schedule_in, :logger

      def initialize
        @lock_prefix = "uniquejobs"
        @lock_ttl = nil
        @lock_timeout = nil
        @lock_limit = nil
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

      # The v9 digest of a job hash (see the README): "<prefix>:<md5 hex>".
      def digest_for(item, klass = nil)
        Job.new(klass, item, nil).digest
      end

      private

      def apply(options)
        options.each { |k, v| config.public_send("#{k}=", v) }
      end
    end

    # One job's lock, for one middleware call.
    class Job
      attr_reader :item, :klass

      def initialize(klass, item, pool)
        @item = item
        @klass = Job.resolve_class(klass || item["class"])
        @pool = pool
      end

      def self.resolve_class(klass)
        return klass if klass.is_a?(Class)
        return nil if klass.nil?

        Object.const_get(klass.to_s)
      rescue NameError
        nil
      end

      # The job's option `name`: the job hash first, then the class's sidekiq_options,
      # then RedisUnique::Sidekiq.config.
      def option(name, class_first: false)
        class_opts = klass.respond_to?(:get_sidekiq_options) ? klass.get_sidekiq_options : {}
        class_value = class_opts.key?(name) ? class_opts[name] : class_opts[name.to_sym]
        item_value = item[name]
        value = class_first ? (class_value.nil? ? item_value : class_value) : (item_value.nil? ? class_value : item_value)
        return value unless value.nil?

        Sidekiq.config.respond_to?(name) ? Sidekiq.config.public_send(name) : nil
      end

      def lock_type
        return @lock_type if defined?(@lock_type)

        type = option("lock")
        type = nil if type == false || !Sidekiq.config.enabled
        if type && !LOCK_TYPES.include?(type.to_s)
          raise InvalidOption, "unknown lock type #{type.inspect} for #{item["class"]} " \
                               "(one of #{LOCK_TYPES.join(", ")})"
        end
        @lock_type = type&.to_s
      end

      def client
        Sidekiq.client(@pool)
      end

      def jid
        item["jid"]
      end

      # --- digest (sidekiq-unique-jobs v9's "legacy" algorithm) ---

      def lock_args
        @lock_args ||= begin
          args = item["args"] || []
          method = option("lock_args_method", class_first: true) || option("unique_args_method", class_first: true)
          method ||= :lock_args if klass.respond_to?(:lock_args)
          case method
          when Proc then method.call(JSON.parse(JSON.generate(args)))
          when Symbol, String
            klass.respond_to?(method.to_sym) ? klass.public_send(method.to_sym, JSON.parse(JSON.generate(args))) : args
          else args
          end
        end
      end

      def digest
        @digest ||= begin
          prefix = option("lock_prefix") || "uniquejobs"
          hash = { "class" => item["class"].to_s, "queue" => item["queue"], "lock_args" => lock_args }
          hash["apartment"] = item["apartment"] if item.key?("apartment")
          hash.delete("queue") if truthy?(option("unique_across_queues"))
          hash.delete("class") if truthy?(option("unique_across_workers"))
          item["lock_args"] = lock_args
          item["lock_prefix"] = prefix
          item["lock_digest"] = "#{prefix}:#{Digest::MD5.hexdigest(JSON.generate(hash.sort))}"
        end
      end

      def run_key
        "#{digest}:RUN"
      end

      # --- lock options ---

      def ttl_seconds
        ttl = option("lock_ttl", class_first: true) || option("lock_expiration", class_first: true)
        ttl = ttl.call(item["args"]) if ttl.is_a?(Proc)
        ttl = klass.public_send(ttl, item["args"]) if ttl.is_a?(Symbol) && klass.respond_to?(ttl)
        return nil if ttl.nil?

        ttl = Float(ttl)
        return nil unless ttl.positive?

        at = item["at"]
        ttl += [0, at.to_f - Time.now.to_f].max if at
        ttl
      end

      def wait_seconds
        timeout = option("lock_timeout")
        return nil if timeout.nil?

        timeout = Float(timeout)
        timeout.positive? ? timeout : nil
      end

      def limit
        value = option("lock_limit")
        value.nil? ? nil : Integer(value)
      end

      def meta
        data = { "class" => item["class"].to_s, "queue" => item["queue"], "lock_args" => lock_args }
        data["limit"] = limit if limit # LIMIT is per call: the Locks page reads it here (as v9 did)
        if truthy?(option("lock_info"))
          data["args"] = item["args"]
          data["at"] = item["at"] if item["at"]
          data["created_at"] = item["created_at"] if item["created_at"]
        end
        json = JSON.generate(data)
        json = JSON.generate(data.slice("class", "queue")) if json.bytesize > 8192
        json
      end

      def take(key, owner: nil, wait: true)
        client.lock(key, jid, limit: limit, ttl: ttl_seconds, type: lock_type, owner: owner, meta: meta,
                              wait: wait ? wait_seconds : nil)
      end

      # --- client side (push) ---

      def client_lock
        return yield if item[RESCHEDULED]

        if lock_type == "while_executing"
          digest
          return yield
        end
        if lock_type == "until_expired" && ttl_seconds.nil?
          raise InvalidOption, "#{item["class"]}: lock: :until_expired needs lock_ttl"
        end

        if take(digest)
          pushed = false
          begin
            result = yield
            pushed = result ? true : false
            result
          ensure
            client.unlock(digest, jid) unless pushed
          end
        else
          Conflict.new(self, :client, digest).resolve { yield }
        end
      end

      # --- server side (perform) ---

      def execute(&block)
        case lock_type
        when "until_executing"
          client.unlock(digest, jid)
          begin
            yield
          rescue StandardError
            take(digest, wait: false)
            raise
          end
        when "until_executed" then execute_until_executed(&block)
        when "until_expired" then yield
        when "while_executing" then run_locked(&block)
        when "until_and_while_executing"
          client.unlock(digest, jid)
          begin
            run_locked(&block)
          rescue StandardError
            take(digest, wait: false)
            raise
          end
        else yield
        end
      end

      def execute_until_executed
        unless take(digest, owner: Sidekiq.identity)
          return Conflict.new(self, :server, digest).resolve unless ReliableFetch.lapsed?(jid)

          return yield # fetched without its lock (ReliableFetch): it runs, holding and freeing nothing
        end

        done = false
        begin
          result = yield
          done = true
          result
        ensure
          if done
            release(digest)
          else
            # failed (retry) or interrupted (requeued at shutdown): keep the lock, owned by nobody
            client.lock(digest, jid, limit: limit, type: lock_type, owner: QUEUED_OWNER)
          end
        end
      end

      def run_locked
        token = client.lock(run_key, jid, limit: limit, ttl: ttl_seconds, type: lock_type,
                                          owner: Sidekiq.identity, meta: meta, wait: wait_seconds)
        return Conflict.new(self, :server, run_key).resolve unless token

        begin
          yield
        ensure
          release(run_key)
        end
      end

      # The end-of-job unlock: with ReliableFetch, sent with the job's acknowledgement in one
      # MULTI (ReliableFetch::UnitOfWork#defer_unlock); otherwise now.
      def release(key)
        unit = ReliableFetch.current(jid)
        unit ? unit.defer_unlock(key, client) : client.unlock(key, jid)
      end

      # The job died (retries exhausted or retry: false): free what it holds.
      def died
        return unless lock_type

        client.unlock(digest, jid) unless lock_type == "until_expired"
        client.unlock(run_key, jid) if %w[while_executing until_and_while_executing].include?(lock_type)
      end

      def truthy?(value)
        value && value != "false"
      end
    end

    # What happens to a job whose lock is held by another: on_conflict.
    class Conflict
      def initialize(job, side, key)
        @job = job
        @side = side
        @key = key
      end

      def item
        @job.item
      end

      def strategy
        conf = @job.option("on_#{@side}_conflict") || @job.option("on_conflict")
        conf = conf[@side.to_s] || conf[@side] if conf.is_a?(Hash)
        conf = conf&.to_s
        return nil if conf.nil? || conf.empty?
        return conf if STRATEGIES.include?(conf)

        Sidekiq.logger.warn("redis-unique: unknown on_conflict #{conf.inspect} for #{item["class"]}, logging instead")
        nil
      end

      def holders
        @holders ||= @job.client.locked_by(@key)
      end

      # Applies the strategy; returns what the middleware returns (nil: not pushed / not run).
      def resolve(&block)
        case strategy
        when "raise" then raise RedisUnique::Conflict.new(item, holders)
        when "reject" then reject
        when "reschedule" then reschedule
        when "replace"
          return replace(&block) if @side == :client && block

          log("replace applies to the client side only")
        else log
        end
        nil
      end

      def describe
        "#{item["class"]} jid=#{item["jid"]} args=#{JSON.generate(item["args"])[0, 200]}: " \
          "#{@job.lock_type} lock #{@key} held by jid #{holders.empty? ? "(none now)" : holders.join(", ")}"
      end

      def log(note = nil)
        verb = @side == :client ? "not enqueued" : "not performed"
        Sidekiq.logger.warn("redis-unique: conflict, #{verb}: #{describe}#{note ? " (#{note})" : ""}")
      end

      def reject
        Sidekiq.logger.warn("redis-unique: conflict, sent to the dead set: #{describe}")
        ::Sidekiq::DeadSet.new.kill(JSON.generate(item), notify_failure: false)
      end

      def reschedule
        delay = Float(@job.option("schedule_in") || 5)
        jid = ::Sidekiq::Client.push(
          "class" => item["class"], "args" => item["args"], "queue" => item["queue"],
          "at" => Time.now.to_f + delay, RESCHEDULED => true
        )
        Sidekiq.logger.info("redis-unique: conflict, rescheduled in #{delay}s as jid #{jid}: #{describe}")
      end

      def replace
        client = @job.client
        removed = holders.select do |holder_jid|
          queue = client.holders(@key).find { |h| h.jid == holder_jid }&.meta&.fetch("queue", nil) || item["queue"]
          Conflict.delete_job(client.connection, holder_jid, queue) && client.unlock(@key, holder_jid)
        end
        if removed.empty?
          log("replace: the holder is not queued or scheduled")
          return nil
        end
        Sidekiq.logger.info("redis-unique: replaced job(s) #{removed.join(", ")} by #{item["jid"]} (#{@key})")
        return yield if @job.take(@key, wait: false)

        log("replace: the lock was taken again")
        nil
      end

      # Removes the job `jid` from queue:<queue>, the schedule or the retry set.
      # (Only this strategy reads queues: the job that holds the lock must be found.)
      def self.delete_job(conn, jid, queue)
        needle = %("jid":"#{jid}")
        if queue
          qkey = "queue:#{queue}"
          start = 0
          loop do
            page = conn.call("LRANGE", qkey, start, start + 499)
            break if page.nil? || page.empty?

            found = page.find { |payload| payload.include?(needle) }
            return conn.call("LREM", qkey, 1, found).to_i.positive? if found

            start += 500
          end
        end
        %w[schedule retry].each do |set|
          cursor = "0"
          loop do
            cursor, entries = conn.call("ZSCAN", set, cursor, "MATCH", "*#{needle}*", "COUNT", 1000)
            entries = entries.each_slice(2).map(&:first) if entries.first.is_a?(String)
            entries = entries.map { |e| e.is_a?(Array) ? e.first : e }
            entries.each { |payload| return true if conn.call("ZREM", set, payload).to_i.positive? }
            break if cursor.to_s == "0"
          end
        end
        false
      end
    end

    # Raised when a job's `depends_on:` keys are held: Sidekiq retries the job later.
    class DependencyLocked < RedisUnique::Error; end

    # Dependency locks (sidekiq_lockable_job's design on counting locks):
    #
    #   sidekiq_options dependency_locks: ->(args) { ["order:#{args[0]}"] }  # held from enqueue to success
    #   sidekiq_options depends_on:       ->(args) { ["order:#{args[0]}"] }  # may run only when all are free
    #
    # Each key is a uniq-lock taken with LIMIT 0 (every job that holds it counts, each
    # release removes one) and TYPE dependency; the value of either option is a Proc or a
    # class method name (Symbol) called with the job's args, or an Array of keys.
    module Dependencies
      module_function

      def keys(job, name)
        spec = job.option(name, class_first: true)
        spec = spec.call(job.item["args"]) if spec.is_a?(Proc)
        spec = job.klass.public_send(spec, job.item["args"]) if spec.is_a?(Symbol) && job.klass.respond_to?(spec)
        spec.is_a?(Array) ? spec.map(&:to_s) : []
      end

      def hold(client, keys, jid)
        keys.each { |k| client.lock(k, jid, limit: 0, type: "dependency") }
      end

      def release(client, keys, jid)
        keys.each { |k| client.unlock(k, jid) }
      end

      # The keys that some job holds now.
      def held(client, keys)
        keys.reject { |k| client.locked_by(k).empty? }
      end
    end

    # The Redis pool of a middleware: its Sidekiq 7 config's (the capsule's
    # Sidekiq::Config) when it has one, else Sidekiq's global pool (6.4).
    module DefaultPool
      private

      def default_pool
        respond_to?(:config) && config ? config.redis_pool : ::Sidekiq.redis_pool
      end
    end

    # Takes the lock when a job is pushed (perform_async, perform_in, push_bulk, the
    # scheduler moving a job to its queue, a retry).
    class ClientMiddleware
      include ::Sidekiq::ClientMiddleware if defined?(::Sidekiq::ClientMiddleware)
      include DefaultPool

      def call(worker_class, item, _queue, redis_pool = nil, &block)
        job = Job.new(worker_class, item, redis_pool || default_pool)
        deps = Dependencies.keys(job, "dependency_locks")
        return(job.lock_type ? job.client_lock(&block) : yield) if deps.empty?

        Dependencies.hold(job.client, deps, job.jid)
        pushed = nil
        begin
          pushed = job.lock_type ? job.client_lock(&block) : yield
        ensure
          Dependencies.release(job.client, deps, job.jid) unless pushed
        end
      end
    end

    # Takes and frees locks around perform, per lock type.
    class ServerMiddleware
      include ::Sidekiq::ServerMiddleware if defined?(::Sidekiq::ServerMiddleware)
      include DefaultPool

      def call(worker, item, _queue, &block)
        job = Job.new(worker.class, item, default_pool)
        blockers = Dependencies.keys(job, "depends_on")
        unless blockers.empty? || (held = Dependencies.held(job.client, blockers)).empty?
          raise DependencyLocked, "#{item["class"]} #{item["jid"]} waits for #{held.join(", ")} " \
                                  "(held by #{held.flat_map { |k| job.client.locked_by(k) }.join(", ")})"
        end
        result = job.lock_type ? job.execute(&block) : yield
        deps = Dependencies.keys(job, "dependency_locks")
        Dependencies.release(job.client, deps, job.jid) unless deps.empty?
        result
      end
    end

    DEATH_HANDLER = lambda do |job, _exception|
      dead = Job.new(nil, job, nil)
      dead.died
      Dependencies.release(dead.client, Dependencies.keys(dead, "dependency_locks"), dead.jid)
    rescue StandardError => e
      Sidekiq.logger.warn("redis-unique: could not free the locks of dead job #{job["jid"]}: #{e.class}: #{e.message}")
    end
  end
end

require_relative "sidekiq/reaper"
require_relative "sidekiq/reliable_fetch"
