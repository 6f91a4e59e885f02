# frozen_string_literal: true

require "json"

module RedisUnique
  module Web
    # What the pages read and do, on one Redis connection (a pool, redis-rb or
    # redis-client, as RedisUnique::Connection takes). Every read is bounded: the Locks
    # page is one SCAN step plus one LOCKEDBY per key it returned.
    class Store
      LOCK_TYPE = "uniq-lock"
      COUNTERS = %w[acquired denied rate_denied released expired reaped waited timed_out].freeze
      # The gem's own counters (RedisUnique::Sidekiq::STATS_KEY), without loading the middlewares.
      STATS_KEY = "redis_unique:stats"
      Page = Struct.new(:cursor, :next_cursor, :pattern, :count, :locks, keyword_init: true)
      Lock = Struct.new(:key, :holders, keyword_init: true) do
        # The earliest end of lease among the holders (nil when none has a lease).
        def earliest_expiry
          holders.map(&:expires_at).compact.min
        end

        # LIMIT is an argument of each LOCK call, not kept by the module; the gem and
        # sidekiq-unique-jobs v9 record it in META as "limit" (a job's lock_limits, one
        # META for every key of its grant, as "limits": { key => limit }).
        def limit
          meta_value("limit") || holders.map { |h| h.meta.is_a?(Hash) && h.meta["limits"].is_a?(Hash) ? h.meta["limits"][key] : nil }
                                        .compact.first
        end

        # GROUPLIMIT, per call too: the gem records lock_group_limit in META as "group_limit".
        def group_limit
          meta_value("group_limit")
        end

        def meta_value(name)
          holders.map { |h| h.meta.is_a?(Hash) ? h.meta[name] : nil }.compact.first
        end
      end
      Owner = Struct.new(:owner, :locks, :holders, :status, keyword_init: true)
      OwnerReport = Struct.new(:owners, :keys_examined, :complete, keyword_init: true)

      attr_reader :connection

      def initialize(redis)
        @connection = Connection.wrap(redis)
      end

      def module_loaded?
        Client.new(@connection).module_loaded?
      end

      # One SCAN step from `cursor` (TYPE uniq-lock, MATCH pattern, COUNT count), then the
      # holders of each key it returned, pipelined.
      def page(cursor: "0", pattern: nil, count: 100)
        argv = ["SCAN", cursor.to_s]
        argv.push("MATCH", pattern) if pattern && !pattern.empty? && pattern != "*"
        argv.push("COUNT", Integer(count), "TYPE", LOCK_TYPE)
        next_cursor, keys = @connection.call(*argv)
        locks = holders_of(keys.uniq).map { |key, holders| Lock.new(key: key, holders: holders) }
        Page.new(cursor: cursor.to_s, next_cursor: next_cursor.to_s, pattern: pattern, count: count,
                 locks: locks.reject { |l| l.holders.empty? }.sort_by(&:key))
      end

      # { key => [Holder] } for these keys (one pipelined round trip).
      def holders_of(keys)
        return {} if keys.empty?

        replies = pipelined(keys.map { |k| ["UNIQUE.LOCKEDBY", k, "WITHMETA"] })
        keys.zip(replies).to_h do |key, reply|
          [key, reply.is_a?(Array) ? reply.map { |raw| Store.holder(raw) } : []]
        end
      end

      def holders(key)
        holders_of([key]).fetch(key)
      end

      def type_of(key)
        @connection.call("TYPE", key).to_s
      end

      # Every live holder's OWNER over the lock keys, walked SCAN step by SCAN step
      # (each step its own command, so Redis serves others in between), stopping after
      # `limit` keys. `live` are the identities of the live Sidekiq processes.
      def owners(live:, registered: [], limit: 10_000, step: 500)
        counts = Hash.new { |h, k| h[k] = { locks: 0, holders: 0 } }
        cursor = "0"
        examined = 0
        loop do
          cursor, keys = @connection.call("SCAN", cursor, "COUNT", step, "TYPE", LOCK_TYPE)
          cursor = cursor.to_s
          holders_of(keys.uniq).each_value do |holders|
            examined += 1
            by_owner = holders.map(&:owner).compact.tally
            by_owner.each do |owner, n|
              counts[owner][:locks] += 1
              counts[owner][:holders] += n
            end
          end
          break if cursor == "0" || examined >= limit
        end
        (registered - counts.keys).each { |owner| counts[owner] }
        owners = counts.map do |owner, c|
          Owner.new(owner: owner, locks: c[:locks], holders: c[:holders], status: Store.status(owner, live))
        end
        OwnerReport.new(owners: owners.sort_by { |o| [-o.locks, o.owner] }, keys_examined: examined,
                        complete: cursor == "0")
      end

      # :live (a live Sidekiq process), :dead (a Sidekiq identity with no live process),
      # :queued (the gem's owner of locks whose job is back in a Sidekiq set) or :unknown
      # (some other OWNER: nothing says whether it is alive).
      def self.status(owner, live)
        return :live if live.include?(owner)
        return :queued if owner == "queued"
        return :dead if owner.match?(/\A.+:\d+:[0-9a-f]+\z/)

        :unknown
      end

      def unlock(key, jid)
        Client.new(@connection).unlock(key, jid)
      end

      # Deletes the key when it is a lock (never another type). true when deleted.
      def delete(key)
        return false unless type_of(key) == LOCK_TYPE

        @connection.call("UNLINK", key).to_i == 1
      end

      # UNIQUE.REAP 0 OWNER owner to the end of the cursor: holders removed.
      def free_owner(owner)
        Client.new(@connection).reap(owner: owner)
      end

      # The configured number of per-minute buckets (at most 60 are shown).
      def metrics_minutes
        reply = @connection.call("CONFIG", "GET", "unique.metrics-minutes")
        value = reply.is_a?(Hash) ? reply.values.first : Array(reply)[1]
        [[Integer(value || 60), 60].min, 1].max
      rescue StandardError
        60
      end

      # { "window" => sums over `minutes`, "series" => { "total"|type => { counter => [per minute, oldest first] } },
      #   "gauges" => {...} }. The per-minute values are differences of MINUTES k and k-1.
      def metrics(minutes: metrics_minutes)
        sums = pipelined((1..minutes).map { |k| ["UNIQUE.METRICS", "MINUTES", k, "FORMAT", "json"] })
               .map { |json| JSON.parse(json) }
        window = sums.last
        series = {}
        (["total"] + window["types"].keys).each do |type|
          per_k = sums.map { |s| type == "total" ? s["total"] : (s["types"][type] || {}) }
          series[type] = COUNTERS.to_h do |counter|
            cumulative = per_k.map { |c| c[counter].to_i }
            per_minute = cumulative.each_with_index.map { |v, i| i.zero? ? v : v - cumulative[i - 1] }
            [counter, per_minute.reverse]
          end
        end
        { "minutes" => minutes, "window" => window, "series" => series, "gauges" => gauges(window) }
      end

      def gauges(window)
        info = info_unique
        { "locks" => window["locks"], "holders" => window["holders"],
          "waiting" => info["unique_waiting"], "reaper_ticks" => info["unique_reaper_ticks"],
          "reaper_keys_scanned" => info["unique_reaper_keys_scanned"],
          "reaper_max_tick_usec" => info["unique_reaper_max_tick_usec"],
          "renewal_lost" => @connection.call("HGET", STATS_KEY, "renewal_lost").to_i }
      end

      # Clients waiting for a slot of `key` (UNIQUE.WAITERS).
      def waiters(key)
        Client.new(@connection).waiters(key)
      end

      # Per group of `key` that waits or holds (UNIQUE.WAITERS key GROUPS): a
      # RedisUnique::WaiterGroup (group nil for the waiters and holders without GROUP).
      def groups(key)
        Client.new(@connection).waiters(key, groups: true)
      end

      # The rate state of `key` (UNIQUE.RATE: a RedisUnique::RateState), nil when no
      # grant of it spent a rate.
      def rate(key)
        Client.new(@connection).rate(key)
      end

      # INFO unique as a Hash of strings.
      def info_unique
        @connection.call("INFO", "unique").to_s.each_line.filter_map do |line|
          next if line.start_with?("#") || !line.include?(":")

          line.strip.split(":", 2)
        end.to_h
      end

      # One holder of a LOCKEDBY WITHMETA reply: the client's own parser, so that the
      # tab shows exactly what RedisUnique::Client#holders returns.
      def self.holder(raw)
        Client.holder(raw)
      end

      private

      def pipelined(commands)
        @connection.with do |conn|
          if conn.respond_to?(:pipelined)
            conn.pipelined { |pipe| commands.each { |argv| pipe.call(*argv.map(&:to_s)) } }
          else
            commands.map { |argv| Connection.invoke(conn, argv, nil) }
          end
        end
      rescue Error
        raise
      rescue StandardError => e
        raise Connection.translate(e, commands.first || [])
      end
    end
  end
end
