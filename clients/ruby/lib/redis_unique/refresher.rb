# frozen_string_literal: true

require "timeout"

module RedisUnique
  # The one loop that keeps a held lease alive, for every lock of this gem: Limiter, and
  # the Sidekiq middleware around a job. The rule is clients/conformance's (README
  # "Renewal", the same in every client):
  #
  # - every third of the lease (at least 1 ms), `UNIQUE.LOCK key jid TTL <ms>`, plus TYPE,
  #   OWNER or META once when changed with #update; never LIMIT, RATE or WAIT;
  # - the hold's own token back: kept. nil, or an error reply: lost at once. Another token:
  #   the hold had ended and the renewal took a new one, unlocked (best effort), then lost;
  # - no answer (connection refused, reset, timed out) or a server that cannot answer now
  #   (LOADING, BUSY, READONLY, CLUSTERDOWN, TRYAGAIN, MASTERDOWN, OOM): tried again every
  #   tenth of the lease until the lease would have ended (counted from when the last
  #   successful LOCK was sent), then lost, without one more try.
  #
  #   refresher = RedisUnique::Refresher.new(client, key, jid, token: token, lease_ms: 30_000,
  #                                          sent_at: sent_at, on_lost: ->(error) { ... }).start
  #   ...
  #   refresher.stop
  #   raise refresher.lost if refresher.lost
  #
  # A loss is told once, at once: `on_lost` is called with the LockLost from the loop's
  # thread (its errors are rescued), and #lost returns it from then on.
  #
  # A hold on several keys (Client#lock_all) is renewed as one: `key` is the Array of keys
  # and `token` the Array of their tokens, and each renewal is `UNIQUE.LOCKALL n keys...
  # jid TTL <ms>` (nothing else: #update is refused). The same tokens back: kept. nil:
  # lost (one key's hold had ended, and the module refuses a partial renewal). Other
  # tokens (every hold had ended and the call took new ones): UNLOCKALL, then lost.
  class Refresher
    RETRY_CODES = %w[LOADING BUSY READONLY CLUSTERDOWN TRYAGAIN MASTERDOWN OOM].freeze
    KEPT = :kept
    RETRY = :retry
    LOST = :lost
    LOST_UNLOCK = :lost_unlock

    class << self
      # How often a held lease is renewed: a third of it (room for two more tries).
      def interval_ms(lease_ms)
        [Integer(lease_ms) / 3, 1].max
      end

      # How soon a renewal that got no answer is tried again: a tenth of the lease.
      def retry_ms(lease_ms)
        [Integer(lease_ms) / 10, 1].max
      end

      # What a renewal's reply means for the hold of `token`.
      def outcome(token, reply)
        return LOST if reply.nil?
        return reply.is_a?(Array) && reply.map { |t| Integer(t) } == token ? KEPT : LOST_UNLOCK if token.is_a?(Array)

        Integer(reply) == token ? KEPT : LOST_UNLOCK
      end

      # What a renewal's error means: RETRY for no answer or a server that cannot answer
      # now, LOST for any other error reply.
      def error_outcome(error)
        case error
        # no answer; Timeout::Error is also a pool's checkout timeout (ConnectionPool's)
        when ConnectionError, SystemCallError, IOError, Timeout::Error then RETRY
        when Error then RETRY_CODES.include?(error.message.to_s[/\A[A-Z]+/]) ? RETRY : LOST
        else
          names = error.class.ancestors.map(&:name)
          connection = names.include?("Redis::BaseConnectionError") || names.include?("RedisClient::ConnectionError")
          connection ? RETRY : LOST
        end
      end

      def now
        Process.clock_gettime(Process::CLOCK_MONOTONIC)
      end
    end

    attr_reader :client, :key, :jid, :token, :lease_ms, :renewals, :failures, :lost

    # `sent_at` is when the LOCK that granted `token` was sent (Refresher.now): the lease
    # started no earlier. `name` names the lock in messages ("lock", "slot", a job...).
    def initialize(client, key, jid, token:, lease_ms:, sent_at: Refresher.now, on_lost: nil, name: "lock")
      @client = client.is_a?(Client) ? client : Client.new(client)
      @key = key
      @jid = jid
      @multi = key.is_a?(Array)
      @token = @multi ? Array(token).map { |t| Integer(t) } : Integer(token)
      if @multi && @token.size != key.size
        raise InvalidOption, "a hold on #{key.size} keys has #{key.size} tokens, not #{@token.size}"
      end
      @lease_ms = Integer(lease_ms)
      raise InvalidOption, "a renewed lease must be 1 ms or more, not #{lease_ms}" unless @lease_ms.positive?

      @interval = Refresher.interval_ms(@lease_ms) / 1000.0
      @retry = Refresher.retry_ms(@lease_ms) / 1000.0
      @deadline = sent_at + (@lease_ms / 1000.0)
      @on_lost = on_lost
      @name = name
      @renewals = 0
      @failures = 0
      @lost = nil
      @changes = {}
      @stopped = false
      @mutex = Mutex.new
      @wake = ConditionVariable.new
      @threads = []
    end

    # Starts the loop (a thread) and its watchdog (a thread that tells the loss when the
    # lease ends with no renewal answered, even while a call hangs). Returns self.
    def start
      @threads << Thread.new { run }
      @threads << Thread.new { watch }
      @threads.each { |t| t.name = "redis-unique renew #{Array(@key).join(",")}"[0, 60] if t.respond_to?(:name=) }
      self
    end

    # TYPE, OWNER or META to send with the next renewal, once (nil: unchanged).
    def update(type: nil, owner: nil, meta: nil)
      raise InvalidOption, "a hold on several keys renews its lease only (TYPE, OWNER, META stay)" if @multi

      @mutex.synchronize { @changes.merge!({ type: type, owner: owner, meta: meta }.compact) }
      self
    end

    def lost?
      !@lost.nil?
    end

    # Stops renewing; waits for a renewal under way. The hold is left as it is.
    def stop
      @mutex.synchronize do
        @stopped = true
        @wake.broadcast
      end
      @threads.each { |t| t.join unless t == Thread.current }
      self
    end

    def inspect
      "#<#{self.class.name} #{@key.inspect} jid=#{@jid.inspect} token=#{@token} lease_ms=#{@lease_ms} " \
        "renewals=#{@renewals}#{lost? ? " lost" : ""}>"
    end

    private

    def run
      delay = @interval
      loop do
        go = @mutex.synchronize do
          @wake.wait(@mutex, delay) unless @stopped || @lost
          !(@stopped || @lost)
        end
        return unless go

        argv, changes = next_renewal
        sent_at = Refresher.now
        reply = error = nil
        begin
          reply = @client.connection.call(*argv)
        rescue StandardError => e
          error = e
        end
        delay = settle(changes, sent_at, reply, error)
        return unless delay
      end
    rescue StandardError => e # never silent: the loop's own bug is a loss told, not a dead thread
      lose("the renewal loop failed: #{e.class}: #{e.message}")
    end

    # The argv of the next renewal and the changes it sends (taken: sent once).
    def next_renewal
      changes = @mutex.synchronize do
        taken = @changes
        @changes = {}
        taken
      end
      return [Client.renewal_all_argv(@key, @jid, @lease_ms), changes] if @multi

      [Client.renewal_argv(@key, @jid, @lease_ms, **changes), changes]
    end

    # Applies the rule to one try; returns the delay to the next try, or nil when done.
    def settle(changes, sent_at, reply, error)
      outcome = error ? Refresher.error_outcome(error) : Refresher.outcome(@token, reply)
      late = false
      @mutex.synchronize do
        late = !@lost.nil?
        if outcome == KEPT && !late
          @renewals += 1
          @failures = 0
          @deadline = sent_at + (@lease_ms / 1000.0)
        elsif outcome == RETRY && !late
          @failures += 1
          @changes = changes.merge(@changes) # not sent: with the next try, unless changed again
        end
        @wake.broadcast
      end
      if late # told already (the lease ended while the call hung): a new grant is given up
        unlock(reply) if outcome == KEPT || outcome == LOST_UNLOCK
        return nil
      end

      case outcome
      when KEPT then @interval
      when RETRY
        left = @deadline - Refresher.now
        left.positive? ? [@retry, left].min : nil # the watchdog tells the loss at the deadline
      when LOST_UNLOCK
        unlock(reply)
        lose("the lease ran out before the renewal, which took the lock again under another fencing token (given up)")
        nil
      else
        # A renewal of several keys refused: the keys still held would stay this job's until
        # their leases end. Released now, by the grant's tokens (never a key taken again since).
        unlock(@token) if @multi
        lose(error ? "the renewal was refused: #{error.message}" : "another holder has it (the lease ran out, " \
                                                                   "or the lock was reaped or deleted)")
        nil
      end
    end

    # Tells the loss when the lease ends with no renewal answered since.
    def watch
      @mutex.synchronize do
        until @stopped || @lost
          left = @deadline - Refresher.now
          break unless left.positive?

          @wake.wait(@mutex, left)
        end
      end
      return if @stopped || @lost

      lose("no renewal was answered before the lease ended (#{@failures} tr#{@failures == 1 ? "y" : "ies"} " \
           "without an answer)")
    end

    def lose(why)
      error = @mutex.synchronize do
        next nil if @lost || @stopped

        name = @multi ? @key.join(", ") : @key
        @lost = LockLost.new("lost the #{@name} #{name} (jid #{@jid}): #{why}", key: @key, jid: @jid)
        @wake.broadcast
        @lost
      end
      return unless error

      begin
        @on_lost&.call(error)
      rescue StandardError => e
        warn("redis-unique: on_lost of #{@key} raised #{e.class}: #{e.message}")
      end
    end

    # The release of the holds of `tokens` (what a renewal replied, or the grant's own): a
    # fenced unlock, so a newer hold of the same jid is never freed.
    def unlock(tokens)
      if @multi
        @client.unlock_all(@key, @jid, tokens: tokens.map { |t| Integer(t) })
      else
        @client.unlock(@key, @jid, token: Integer(tokens))
      end
    rescue StandardError
      nil # best effort: the lease ends it anyway
    end
  end
end
