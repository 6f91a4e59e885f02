# frozen_string_literal: true

require "json"

module RedisUnique
  module Sidekiq
    # A Sidekiq fetch strategy that keeps jobs and their locks together across crashes and
    # restarts. A job is always in its queue, in exactly one working list, or done:
    #
    # - fetch: `BLMOVE queue:<q> redis_unique:working:<identity> RIGHT LEFT timeout`
    #   (non-blocking LMOVE over the other queues first, in Sidekiq's strict or weighted order);
    # - acknowledge: when the job ends (success, or a failure handed to Sidekiq's retries),
    #   `MULTI  UNIQUE.UNLOCK ... ; LREM working 1 job  EXEC`: the unlock that the server
    #   middleware would have sent at the end of the job rides in the same round trip
    #   (see UnitOfWork#defer_unlock);
    # - a graceful shutdown (bulk_requeue) puts the unfinished jobs back in their queues and
    #   keeps their until_executed locks, now owned by "queued" instead of the process;
    # - a dead process (no live heartbeat; the dead-owner Reaper's leader finds it) gets the
    #   same: its until_executed locks re-owned by "queued", its runtime locks freed by
    #   `UNIQUE.REAP OWNER`, then its working list requeued;
    # - at fetch, an until_executed job whose lock is no longer held by its jid is flagged
    #   lapsed: it still runs, and the middleware neither waits for nor frees a lock it does
    #   not hold.
    #
    # Enable it with RedisUnique::Sidekiq.reliable_fetch!(config) inside configure_server.
    class ReliableFetch
      # Seconds that BLMOVE blocks when the process works one queue (Sidekiq's own TIMEOUT),
      # and when it works several (a job pushed to another queue waits at most this long).
      TIMEOUT = 2
      MULTI_QUEUE_TIMEOUT = 1
      WORKING_PREFIX = "redis_unique:working:"
      # Counters (a hash): requeued_dead, requeued_shutdown, requeued_quiet, lapsed.
      STATS_KEY = "redis_unique:fetch"
      # Lock types whose lock is taken at push and held while the job runs.
      HELD_WHILE_RUNNING = %w[until_executed].freeze
      CURRENT = :redis_unique_unit_of_work

      def self.working_key(identity)
        "#{WORKING_PREFIX}#{identity}"
      end

      # The unit of work being processed by this thread when it carries job `jid`.
      def self.current(jid)
        unit = Thread.current[CURRENT]
        unit if unit && unit.jid == jid && !unit.finished?
      end

      # true when this thread's job `jid` was fetched with a lock that its jid no longer held.
      def self.lapsed?(jid)
        current(jid)&.lapsed ? true : false
      end

      # One fetched job. Sidekiq calls acknowledge when the job ended (whatever the
      # outcome) and requeue when it fetched a job while stopping.
      class UnitOfWork
        attr_reader :queue, :job, :item, :working_key
        attr_accessor :lapsed

        def initialize(fetch, queue, job)
          @fetch = fetch
          @queue = queue
          @job = job
          @working_key = fetch.working_key
          @item = begin
            parsed = JSON.parse(job)
            parsed.is_a?(Hash) ? parsed : {}
          rescue JSON::ParserError
            {}
          end
          @unlocks = []
          @after = {}
          @mutex = Mutex.new
          @state = nil # :acknowledged or :requeued
        end

        def jid
          @item["jid"]
        end

        def queue_name
          queue.delete_prefix("queue:")
        end

        def finished?
          !@state.nil?
        end

        # The server middleware's end-of-job unlock of `key`: sent with the acknowledgement,
        # in one MULTI. When the unit is already finished (requeued by a hard shutdown before
        # its thread was killed), or the job is being killed (Sidekiq::Shutdown: Sidekiq will
        # not acknowledge it), the unlock is sent now.
        # `after` (the job's after_unlock) is called once the unlock removed this jid.
        def defer_unlock(key, client, &after)
          shutdown = defined?(::Sidekiq::Shutdown) && $!.is_a?(::Sidekiq::Shutdown)
          deferred = !shutdown && @mutex.synchronize do
            next false unless @state.nil?

            @unlocks << key
            @after[key] = after
            true
          end
          after&.call if !deferred && (key.is_a?(Array) ? client.unlock_all(key, jid).positive? : client.unlock(key, jid))
        end

        def acknowledge
          afters = nil
          commands = @mutex.synchronize do
            @state = :acknowledged
            keys = @unlocks
            afters = keys.map { |k| @after[k] }
            @unlocks = []
            @after = {}
            keys.map { |k| ReliableFetch.unlock_argv(k, jid) }
          end
          commands << ["LREM", working_key, 1, job]
          replies = @fetch.transaction(commands)
          afters.each_with_index { |after, i| after&.call if replies.is_a?(Array) && replies[i].to_i.positive? }
          nil # as Sidekiq's own unit of work: the other replies are nobody's business
        ensure
          Thread.current[CURRENT] = nil if Thread.current[CURRENT].equal?(self)
        end

        # Back to its queue (Sidekiq fetched it while stopping): nothing ran, no lock changes.
        def requeue
          @mutex.synchronize { @state = :requeued }
          @fetch.transaction([["RPUSH", queue, job], ["LREM", working_key, 1, job]])
          @fetch.count("requeued_quiet")
        ensure
          Thread.current[CURRENT] = nil if Thread.current[CURRENT].equal?(self)
        end

        # Marks the unit requeued (by bulk_requeue); the unlocks deferred so far are returned
        # to go with the requeue.
        def requeued!
          @mutex.synchronize do
            @state = :requeued
            keys = @unlocks
            @unlocks = []
            keys
          end
        end
      end

      attr_reader :identity, :working_key, :queues

      # Sidekiq 7: `capsule` (config[:fetch_class] = ReliableFetch). Sidekiq 6.4: the options
      # hash (options[:fetch] = ReliableFetch.new(options)).
      def initialize(capsule_or_options)
        if capsule_or_options.respond_to?(:mode)
          @capsule = capsule_or_options
          @strict = @capsule.mode == :strict
          @queues = @capsule.queues.map { |q| "queue:#{q}" }
        else
          options = capsule_or_options
          raise ArgumentError, "missing queue list" unless options[:queues]

          @strict = !!options[:strict]
          @queues = options[:queues].map { |q| "queue:#{q}" }
        end
        @queues.uniq! if @strict
        Sidekiq.refuse_namespace!(method(:redis))
        @identity = Sidekiq.identity
        @working_key = self.class.working_key(@identity)
      end

      def redis(&block)
        @capsule ? @capsule.redis(&block) : ::Sidekiq.redis(&block)
      end

      def logger
        Sidekiq.logger
      end

      # The queues to try, in order: Sidekiq's own rule (strict: as given; otherwise a
      # shuffle of the list where each queue appears `weight` times, then uniq).
      def queues_cmd
        @strict ? @queues : @queues.shuffle.uniq
      end

      def retrieve_work
        qs = queues_cmd
        if qs.empty?
          sleep(TIMEOUT)
          return nil
        end

        unit = redis do |conn|
          job = nil
          queue = qs[0..-2].find { |q| job = Connection.invoke(conn, ["LMOVE", q, working_key, "RIGHT", "LEFT"], nil) }
          unless job
            timeout = qs.size == 1 ? TIMEOUT : MULTI_QUEUE_TIMEOUT
            queue = qs.last
            job = Connection.invoke(conn, ["BLMOVE", queue, working_key, "RIGHT", "LEFT", timeout], timeout)
          end
          next unless job

          fetched = UnitOfWork.new(self, queue, job)
          check_lock(conn, fetched)
          fetched
        end
        Thread.current[CURRENT] = unit if unit
        unit
      end

      # Sidekiq 7: bulk_requeue(inprogress); 6.4: bulk_requeue(inprogress, options).
      # Puts the jobs of `inprogress` back at the head of their queues, with their
      # until_executed locks re-owned by "queued" (kept for the job, no longer tied to this
      # process), in one MULTI.
      def bulk_requeue(inprogress, _options = nil)
        return if inprogress.nil? || inprogress.empty?

        commands = inprogress.flat_map do |unit|
          unlocks = unit.respond_to?(:requeued!) ? unit.requeued! : []
          item = unit.respond_to?(:item) ? unit.item : JSON.parse(unit.job)
          lapsed = unit.respond_to?(:lapsed) && unit.lapsed
          keep = lapsed ? [] : keep_lock_commands(item)
          keep + unlocks.map { |k| ReliableFetch.unlock_argv(k, item["jid"]) } +
            [["RPUSH", unit.queue, unit.job], ["LREM", working_key, 1, unit.job]]
        end
        transaction(commands + [["HINCRBY", STATS_KEY, "requeued_shutdown", inprogress.size]])
        logger.info("redis-unique: pushed #{inprogress.size} job(s) back to their queues, their locks kept")
      rescue StandardError => e
        logger.warn("redis-unique: failed to requeue #{inprogress.size} job(s): #{e.class}: #{e.message}")
      end

      # The release of a deferred unlock: one key, or the keys of lock_limits together.
      def self.unlock_argv(key, jid)
        key.is_a?(Array) ? ["UNIQUE.UNLOCKALL", key.size, *key, jid] : ["UNIQUE.UNLOCK", key, jid]
      end

      # Runs `commands` (argv arrays) in one MULTI/EXEC; returns the replies. A UNIQUE.* call
      # goes as its backend takes it (the module's command, or the Functions library's FCALL).
      def transaction(commands)
        commands = client.connection.batch_argv(commands)
        redis do |conn|
          conn.multi do |tx|
            commands.each { |argv| tx.call(*argv.map(&:to_s)) }
          end
        end
      end

      # The gem's Client on this fetcher's pool (its capsule's on Sidekiq 7).
      def client
        RedisUnique::Sidekiq.client(@capsule ? @capsule.redis_pool : ::Sidekiq.redis_pool)
      end

      def count(name, by = 1)
        redis { |conn| Connection.invoke(conn, ["HINCRBY", STATS_KEY, name, by], nil) }
      rescue StandardError
        nil
      end

      # The commands that keep a requeued job's lock (UNIQUE.LOCK of its own jid that changes
      # OWNER to "queued"; LIMIT and TYPE as the middleware takes it), built by
      # Client.lock_argv as the middleware's own `client.lock(..., owner: "queued")` is.
      def self.keep_lock_commands(item)
        digest = item["lock_digest"]
        return [] unless digest && item["jid"]

        job = Job.new(nil, item, nil)
        return [] unless HELD_WHILE_RUNNING.include?(job.lock_type)

        [Client.lock_argv(digest, item["jid"], limit: job.limit, type: job.lock_type, owner: QUEUED_OWNER).first]
      rescue StandardError
        []
      end

      def keep_lock_commands(item)
        self.class.keep_lock_commands(item)
      end

      private

      # At fetch: an until_executed job whose lock is not held by its jid any more
      # (expired, freed, or taken by a duplicate) is flagged lapsed; it still runs.
      def check_lock(conn, unit)
        digest = unit.item["lock_digest"]
        return unless digest && unit.jid

        type = Job.new(nil, unit.item, nil).lock_type
        return unless HELD_WHILE_RUNNING.include?(type)

        holders = client.locked_by(digest)
        return if holders.include?(unit.jid)

        unit.lapsed = true
        Connection.invoke(conn, ["HINCRBY", STATS_KEY, "lapsed", 1], nil)
        logger.warn("redis-unique: #{unit.item["class"]} #{unit.jid} fetched without its #{type} lock " \
                    "#{digest} (held by #{holders.empty? ? "nobody" : holders.join(", ")}): it runs anyway")
      rescue StandardError => e
        logger.warn("redis-unique: lock check at fetch failed for #{unit.jid}: #{e.class}: #{e.message}")
      end

      # The dead-owner Reaper's leader calls these for each dead identity (Reaper.hooks).
      module Recovery
        module_function

        # Before REAP OWNER: the until_executed locks of the dead process's jobs are kept
        # (re-owned by "queued"), so the REAP frees only its runtime locks.
        def before_reap(identity, client)
          key = ReliableFetch.working_key(identity)
          return if client.connection.call("LLEN", key).to_i.zero? # (a process without ReliableFetch)

          jobs = client.connection.call("LRANGE", key, 0, -1)
          commands = jobs.flat_map { |job| ReliableFetch.keep_lock_commands(parse(job)) }
          multi(client, commands) unless commands.empty?
        end

        # After REAP OWNER: the working list goes back to the queues, one job per
        # RPUSH+LREM in a MULTI (a job is never in two places, never in none).
        def after_reap(identity, client)
          key = ReliableFetch.working_key(identity)
          requeued = 0
          return requeued if client.connection.call("LLEN", key).to_i.zero?

          loop do
            jobs = client.connection.call("LRANGE", key, -100, -1)
            break if jobs.nil? || jobs.empty?

            # oldest first: the oldest ends up at the head, the next one Sidekiq takes
            commands = jobs.flat_map do |job|
              queue = parse(job)["queue"] || "default"
              [["RPUSH", "queue:#{queue}", job], ["LREM", key, -1, job]]
            end
            multi(client, commands + [["HINCRBY", STATS_KEY, "requeued_dead", jobs.size]])
            requeued += jobs.size
          end
          if requeued.positive?
            Sidekiq.logger.info("redis-unique: requeued #{requeued} job(s) of dead process #{identity}")
          end
          requeued
        end

        def parse(job)
          parsed = JSON.parse(job)
          parsed.is_a?(Hash) ? parsed : {}
        rescue JSON::ParserError
          {}
        end

        def multi(client, commands)
          commands = client.connection.batch_argv(commands)
          client.connection.with do |conn|
            conn.multi { |tx| commands.each { |argv| tx.call(*argv.map(&:to_s)) } }
          end
        end
      end
    end

    # Every process with the gem recovers dead processes' working lists when it leads the
    # reaper, whether or not it fetches with ReliableFetch itself (any process may lead).
    Reaper.hooks << ReliableFetch::Recovery unless Reaper.hooks.include?(ReliableFetch::Recovery)

    class << self
      # Makes Sidekiq fetch with ReliableFetch: on Sidekiq 7 `config[:fetch_class]` (one
      # fetcher per capsule), on 6.4 `Sidekiq.options[:fetch]` (an instance made at startup,
      # when the queues are known). Call it inside Sidekiq.configure_server, with the
      # reaper on (it recovers dead processes' working lists).
      def reliable_fetch!(sidekiq_config = ::Sidekiq)
        logger.warn("redis-unique: ReliableFetch without the reaper: dead processes' jobs stay in their working lists") unless config.reaper
        if sidekiq_config.respond_to?(:capsules)
          sidekiq_config[:fetch_class] = ReliableFetch
        else
          sidekiq_config.on(:startup) { ::Sidekiq.options[:fetch] = ReliableFetch.new(::Sidekiq.options) }
        end
        sidekiq_config
      end
    end
  end
end
