# frozen_string_literal: true

require "securerandom"

module RedisUnique
  # "At most 3 at once and at most 50 a second" around any Ruby code, decided by the
  # server in one atomic grant (UNIQUE.LOCK ... LIMIT ... RATE):
  #
  #   partner = RedisUnique::Limiter.new(Redis.new, "api:partner", concurrency: 3,
  #                                      rate: { limit: 50, per: :second })
  #   partner.within { |token| call_the_partner }   # waits up to wait: seconds for both
  #
  # A call waits natively on the server (first come, first served, woken at the next
  # allowed instant when the rate is what refused it), then raises LimitReached. Its
  # slot is a holder with a lease of ttl: seconds, renewed while the block runs (every
  # third of it, by RedisUnique::Refresher), and frees when the block ends, however it
  # ends. concurrency: nil limits the rate only.
  #
  # A slot lost while the block runs (a renewal refused: another holder took it after a
  # REAP; or no renewal answered before the lease ended) calls on_lost: (a callable, given
  # the RedisUnique::LockLost) at once, from the renewal thread, and raises the LockLost
  # when the block ends (unless the block raised).
  #
  # Shared fairly among tenants: each call names its group (a tenant id); a freed slot
  # goes to the waiting group that holds the fewest slots for its weight, and
  # group_limit: caps the slots of any one group:
  #
  #   reports = RedisUnique::Limiter.new(Redis.new, "reports", concurrency: 10, group_limit: 4)
  #   reports.within(group: account.id) { render_report }   # at most 4 per account, 10 in all
  #
  # group: and weight: given to new are each call's default; within(group:, weight:)
  # overrides them per call.
  class Limiter
    attr_reader :key, :client

    # `key` a String: one limit (concurrency:, rate:). A Hash { key => concurrency }:
    # several limits in one grant (rates:, no concurrency: nor rate:; see limiter_all.rb).
    def initialize(redis, key, **options)
      key.is_a?(Hash) ? setup_all(redis, key, **options) : setup(redis, key, **options)
    end

    private def setup(redis, key, concurrency: 1, rate: nil, ttl: 60, wait: 30, owner: nil, type: "limiter",
                      on_lost: nil, group: nil, group_limit: nil, weight: nil)
      raise InvalidOption, "a Limiter needs concurrency: or rate:" if concurrency.nil? && rate.nil?

      @client = redis.is_a?(Client) ? redis : Client.new(redis)
      @key = key
      @limit = concurrency.nil? ? 0 : Integer(concurrency)
      raise InvalidOption, "concurrency must be 1 or more, not #{@limit}" if concurrency && @limit < 1

      Client.rate_argv(rate) if rate # a bad rate fails here, not at the first call
      @rate = rate
      @ttl = ttl
      @wait = wait
      @owner = owner
      @type = type
      @on_lost = on_lost
      # Bad values fail here, not at the first call (checked beside a stand-in group when
      # each call gives its own).
      Client.group_argv(group: group.nil? ? "each call's" : group, weight: weight, group_limit: group_limit)
      @group = group
      @group_limit = group_limit
      @weight = weight
    end

    # Runs the block holding a slot; yields the grant's fencing token. group: and
    # weight: default to the Limiter's (a group_limit: or weight: needs a group).
    def within(jid = SecureRandom.uuid, group: @group, weight: @weight, &block)
      return within_all(jid, group: group, weight: weight, &block) if @keys

      if group.nil? && (@group_limit || !weight.nil?)
        raise InvalidOption, "this Limiter has #{@group_limit ? "group_limit:" : "weight:"}: give within(group:) " \
                             "(a tenant id), or group: to Limiter.new"
      end

      sent_at = Refresher.now
      token = @client.lock(@key, jid, limit: @limit, ttl: @ttl, rate: @rate, group: group, weight: weight,
                                      group_limit: @group_limit, wait: @wait, owner: @owner, type: @type)
      raise LimitReached.new(@key, @client.rate(@key), group: group) unless token

      # A wait is spent before the grant: then the lease started at the reply, at the latest.
      sent_at = Refresher.now if @wait
      refresher = lease_ms && Refresher.new(@client, @key, jid, token: token, lease_ms: lease_ms, sent_at: sent_at,
                                                                  on_lost: @on_lost, name: "slot").start
      raised = true
      begin
        result = yield token
        raised = false
        result
      ensure
        refresher&.stop
        @client.unlock(@key, jid, token: token) unless refresher&.lost?
        raise refresher.lost if refresher&.lost? && !raised
      end
    end

    private

    def lease_ms
      @ttl && Client.ms_option(:ttl, @ttl, nil)
    end
  end

  # A Limiter found no slot (its concurrency or its rate) within its wait.
  class LimitReached < Error
    attr_reader :key, :rate, :group

    def initialize(key, rate = nil, group: nil)
      @key = key
      @rate = rate
      @group = group
      next_at = rate && rate.remaining.zero? ? ", the rate allows the next at #{rate.allowed_at.utc.iso8601(3)}" : ""
      for_group = group.nil? ? "" : " for group #{group}"
      super("no slot of #{key}#{for_group} within the wait#{next_at}: raise wait:, or let the caller retry later")
    end
  end
end
