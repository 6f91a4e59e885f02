# frozen_string_literal: true

module RedisUnique
  module Sidekiq
    # Frees the locks of dead Sidekiq processes, without reading any queue.
    #
    # Every server process registers its identity in OWNERS_KEY (a zset: identity ->
    # time of registration) and runs a thread that, every `interval` seconds, tries the
    # leader lock (UNIQUE.LOCK on LEADER_KEY with a lease of 3 intervals; the leader
    # renews it, the others stand by). The leader looks up each registered identity in
    # Sidekiq's own heartbeat (the `<identity>` hash that Sidekiq refreshes every 5 or 10 s,
    # with a 60 s expiry, listed in the `processes` set): an identity whose hash is gone, or
    # whose `beat` is older than `dead_after` seconds, is dead, and
    # `UNIQUE.REAP 0 OWNER <identity>` (to the end of the cursor) removes its holders.
    class Reaper
      attr_reader :identity, :interval, :dead_after, :runs

      def initialize(redis, identity:, interval: 30, dead_after: 60, count: 1000)
        @client = redis.is_a?(Client) ? redis : Client.new(redis)
        @identity = identity
        @interval = Float(interval)
        @dead_after = Float(dead_after)
        @count = count
        @runs = 0
        @mutex = Mutex.new
        @wakeup = ConditionVariable.new
        @stopping = false
      end

      def connection
        @client.connection
      end

      # Records this process as an owner of locks.
      def register
        connection.call("ZADD", OWNERS_KEY, "NX", now.to_s, identity)
      end

      def start
        @thread ||= Thread.new do
          Thread.current.name = "redis-unique-reaper" if Thread.current.respond_to?(:name=)
          loop do
            begin
              tick
            rescue StandardError => e
              Sidekiq.logger.warn("redis-unique reaper: #{e.class}: #{e.message}")
            end
            break if wait_stop(@interval)
          end
        end
      end

      def stop
        return unless @thread

        @mutex.synchronize do
          @stopping = true
          @wakeup.broadcast
        end
        @thread.join(5)
        @client.unlock(LEADER_KEY, identity)
      rescue StandardError
        nil
      ensure
        @thread = nil
      end

      def leader?
        !@client.lock(LEADER_KEY, identity, ttl: @interval * 3, type: "reaper_leader", owner: identity).nil?
      end

      # One round: returns {identity => holders removed} for the dead identities found.
      def tick
        register
        return {} unless leader?

        @runs += 1
        reaped = {}
        dead_identities.each do |dead|
          reaped[dead] = @client.reap(owner: dead, count: @count)
          connection.call("ZREM", OWNERS_KEY, dead)
          if reaped[dead].positive?
            Sidekiq.logger.info("redis-unique reaper: freed #{reaped[dead]} lock(s) of dead process #{dead}")
          end
        end
        reaped
      end

      def dead_identities
        registered = connection.call("ZRANGE", OWNERS_KEY, 0, -1, "WITHSCORES")
        pairs = registered.first.is_a?(Array) ? registered : registered.each_slice(2).to_a
        t = now
        pairs.filter_map do |id, registered_at|
          next if id == identity

          beat = connection.call("HGET", id, "beat")
          if beat.nil?
            id if t - registered_at.to_f > @dead_after
          else
            beat = beat.to_f
            beat /= 1000.0 if beat > 100_000_000_000 # Sidekiq 8 writes milliseconds
            id if t - beat > @dead_after
          end
        end
      end

      private

      def now
        Time.now.to_f
      end

      # Sleeps `seconds` unless stopped first; true when stopped.
      def wait_stop(seconds)
        @mutex.synchronize do
          @wakeup.wait(@mutex, seconds) unless @stopping
          @stopping
        end
      end
    end
  end
end
