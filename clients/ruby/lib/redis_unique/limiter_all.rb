# frozen_string_literal: true

require "securerandom"

module RedisUnique
  # A Limiter with several limits, taken in one atomic grant (UNIQUE.LOCKALL): "at most 2
  # at once for this tenant, 10 at once in all, and 50 a second in all":
  #
  #   api = RedisUnique::Limiter.new(Redis.new, { "{api}:tenant:acme" => 2, "{api}:global" => 10 },
  #                                  rates: { "{api}:global" => { limit: 50, per: :second } })
  #   api.within { |tokens| call_the_api }    # tokens: one per key, in key order
  #
  # A call holds a slot of every key or of none: it waits in Redis (holding nothing while
  # it waits, so no deadlock) until all of them have room at once, up to wait: seconds,
  # then raises LimitReached. A rate is spent only when the whole grant succeeds. The
  # slots are renewed as one while the block runs (a renewal of one key alone is refused,
  # so one lost slot is the whole hold lost) and freed together when it ends.
  #
  # A key whose value is nil has no concurrency limit (its rate only, which it must then
  # have). Fair sharing (group:, group_limit:, weight:) is for one key: refused here. A
  # Limiter holds no state of its own on the server: one per tenant is cheap. In a Redis
  # Cluster the keys must share one hash tag ({api} above).
  class Limiter
    # The keys of a Limiter of several limits (nil for one limit).
    attr_reader :keys

    private

    def setup_all(redis, limits, rates: nil, ttl: 60, wait: 30, owner: nil, type: "limiter", on_lost: nil,
                  **refused)
      unless refused.empty?
        name, = refused.first
        known = %i[concurrency rate group group_limit weight]
        raise ArgumentError, "unknown keyword: #{name.inspect}" unless known.include?(name)

        instead = case name
                  when :concurrency then "give each key's concurrency as its value in the Hash"
                  when :rate then "give rates: { key => { limit:, per: } }"
                  else "fair sharing is for a Limiter of one key: give each tenant its own key in the Hash"
                  end
        raise InvalidOption, "a Limiter of several keys does not take #{name}: (#{instead})"
      end

      @client = redis.is_a?(Client) ? redis : Client.new(redis)
      @keys = Client.checked_keys(limits.keys)
      @limits = limits.values.each_with_index.map do |n, i|
        next 0 if n.nil? # rate only

        v = Client.integer_option(:concurrency, n)
        raise InvalidOption, "the concurrency of #{@keys[i]} must be 1 or more (nil: rate only), not #{v}" if v < 1

        v
      end
      @rates = rates
      rated = Client.rates_by_index(@keys, rates).each { |_, r| Client.rate_argv(r) }.map(&:first)
      bare = @limits.each_index.select { |i| @limits[i].zero? && !rated.include?(i) }
      unless bare.empty?
        raise InvalidOption, "#{bare.map { |i| @keys[i] }.join(", ")}: no concurrency and no rate (give one)"
      end

      @key = @keys
      @ttl = ttl
      @wait = wait
      @owner = owner
      @type = type
      @on_lost = on_lost
    end

    # within(...) of a Limiter of several keys: yields the tokens, in key order.
    def within_all(jid = SecureRandom.uuid, group: nil, weight: nil)
      unless group.nil? && weight.nil?
        raise InvalidOption, "a Limiter of several keys does not take group: or weight: (fair sharing is for one key)"
      end

      sent_at = Refresher.now
      tokens = @client.lock_all(@keys, jid, limits: @limits, rates: @rates, ttl: @ttl, wait: @wait,
                                            owner: @owner, type: @type)
      raise LimitsReached.new(@keys, holding) unless tokens

      sent_at = Refresher.now if @wait
      refresher = lease_ms && Refresher.new(@client, @keys, jid, token: tokens, lease_ms: lease_ms,
                                                                 sent_at: sent_at, on_lost: @on_lost,
                                                                 name: "slots").start
      raised = true
      begin
        result = yield tokens
        raised = false
        result
      ensure
        refresher&.stop
        @client.unlock_all(@keys, jid, tokens: tokens) unless refresher&.lost?
        raise refresher.lost if refresher&.lost? && !raised
      end
    end

    # "key holders/limit" of each key now, for LimitReached's message (best effort).
    def holding
      @keys.each_with_index.map do |k, i|
        "#{k} #{@client.locked_by(k).size}#{@limits[i].zero? ? "" : "/#{@limits[i]}"}"
      end
    rescue StandardError
      nil
    end
  end

  # A Limiter of several keys found no moment when every key had room at once, within its
  # wait (a LimitReached: rescue either). `key` is the Array of keys; `holding` says
  # "key holders/limit" for each key when it was refused.
  class LimitsReached < LimitReached
    attr_reader :holding

    def initialize(keys, holding = nil) # rubocop:disable Lint/MissingSuper
      @key = keys
      @rate = nil
      @group = nil
      @holding = holding
      now = holding ? " (holders then: #{holding.join(", ")}; a rate may be what refused)" : ""
      @message = "no slot of every one of #{keys.join(", ")} at once within the wait#{now}: raise wait:, " \
                 "or let the caller retry later"
    end

    def to_s
      @message
    end
  end
end
