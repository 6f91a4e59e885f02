# frozen_string_literal: true

require "json"

module RedisUnique
  # One holder of a lock, as UNIQUE.LOCKEDBY WITHMETA reports it.
  # acquired_at and expires_at are Times (expires_at nil without a lease); ttl is
  # the lease left in seconds (Float) or nil; meta is a Hash (empty without META);
  # group is the GROUP it was granted under (nil without); mode is "shared" or
  # "exclusive" (nil when taken without MODE).
  Holder = Struct.new(:jid, :token, :acquired_at, :expires_at, :ttl, :type, :owner, :meta, :group, :mode,
                      keyword_init: true)

  # One group of a key, as UNIQUE.WAITERS key GROUPS reports it: its name (nil for the
  # waiters and holders without GROUP), the clients of it waiting, and its live holders.
  WaiterGroup = Struct.new(:group, :waiting, :holding, keyword_init: true)

  # A key's rate state, as UNIQUE.RATE reports it: the limit it was last spent under
  # (limit grants per per_ms, plus burst), the grants it allows now (remaining), the
  # first Time a grant is allowed (allowed_at) and the first Time nothing is spent any
  # more (idle_at).
  RateState = Struct.new(:limit, :per_ms, :burst, :remaining, :allowed_at, :idle_at, keyword_init: true)

  # The UNIQUE.* commands with Ruby types.
  #
  #   client = RedisUnique::Client.new(Redis.new)            # or a ConnectionPool, Sidekiq.redis_pool...
  #   token  = client.lock("sync:user:1", jid, ttl: 60)       # => Integer, or nil when denied
  #   client.unlock("sync:user:1", jid)                       # => true / false
  #
  # Durations are seconds (Integer or Float) in `ttl:` and `wait:`, or milliseconds
  # (Integer) in `ttl_ms:` and `wait_ms:`. `pxat:` is a Time or unix milliseconds.
  # `rate:` is { limit:, per: } (per in seconds, or :second, :minute, :hour, :day;
  # per_ms: in ms), with an optional burst:.
  #
  # Fair sharing of a limit: `group:` (a tenant id) puts the call in a group; a freed
  # slot goes to the waiting group holding the fewest slots for its `weight:` (1 to
  # 1000), and `group_limit:` caps the live holders of the caller's group on the key.
  # `mode:` :shared (readers, up to the limit) or :exclusive (a writer, alone).
  class Client
    attr_reader :connection

    def initialize(redis)
      @connection = Connection.wrap(redis)
    end

    # UNIQUE.LOCK. Returns the fencing token (Integer) on a grant or a renewal, nil when
    # denied (or when `wait` ran out). `meta` is a Hash (sent as JSON) or a JSON String.
    def lock(key, jid, limit: nil, ttl: nil, ttl_ms: nil, pxat: nil, type: nil, owner: nil,
             meta: nil, rate: nil, group: nil, weight: nil, group_limit: nil, mode: nil, wait: nil, wait_ms: nil)
      argv, waiting = Client.lock_argv(key, jid, limit: limit, ttl: ttl, ttl_ms: ttl_ms, pxat: pxat, type: type,
                                                 owner: owner, meta: meta, rate: rate, group: group, weight: weight,
                                                 group_limit: group_limit, mode: mode, wait: wait, wait_ms: wait_ms)
      if waiting
        @connection.blocking_call(waiting / 1000.0, *argv)
      else
        @connection.call(*argv)
      end
    end

    # Every UNIQUE.LOCK this gem sends is built here (the conformance table checks it):
    # the argv of lock(...) and the wait in ms (nil without WAIT).
    def self.lock_argv(key, jid, limit: nil, ttl: nil, ttl_ms: nil, pxat: nil, type: nil, owner: nil,
                       meta: nil, rate: nil, group: nil, weight: nil, group_limit: nil, mode: nil,
                       wait: nil, wait_ms: nil)
      argv = ["UNIQUE.LOCK", key, jid]
      argv.push("LIMIT", Integer(limit)) unless limit.nil?
      lease = ms_option(:ttl, ttl, ttl_ms)
      if lease && pxat
        raise InvalidOption, "give ttl or pxat, not both"
      elsif lease
        argv.push("TTL", lease)
      elsif pxat
        argv.push("PXAT", pxat.is_a?(Time) ? (pxat.to_r * 1000).ceil : Integer(pxat))
      end
      push_changes(argv, type: type, owner: owner, meta: meta)
      argv.concat(Client.rate_argv(rate)) if rate
      argv.concat(Client.group_argv(group: group, weight: weight, group_limit: group_limit, mode: mode))
      waiting = ms_option(:wait, wait, wait_ms)
      argv.push("WAIT", waiting) if waiting
      [argv, waiting]
    end

    # A renewal (clients/conformance README, "Renewal"): only the lease, plus TYPE, OWNER
    # or META when they changed since the last one; never LIMIT, RATE or WAIT.
    def self.renewal_argv(key, jid, lease_ms, type: nil, owner: nil, meta: nil)
      push_changes(["UNIQUE.LOCK", key, jid, "TTL", Integer(lease_ms)], type: type, owner: owner, meta: meta)
    end

    def self.push_changes(argv, type:, owner:, meta:)
      argv.push("TYPE", type.to_s) if type
      argv.push("OWNER", owner.to_s) if owner
      argv.push("META", meta.is_a?(String) ? meta : JSON.generate(meta)) if meta
      argv
    end

    # UNIQUE.UNLOCK. true when `jid` held the lock and was removed. With `token:` (the one
    # `lock` returned), a fenced unlock: only the hold of that token is removed, so a late
    # unlock never frees a newer hold of the same jid (a retried job, a second process).
    def unlock(key, jid, token: nil)
      @connection.call(*Client.unlock_argv(key, jid, token: token)) == 1
    end

    # `UNIQUE.UNLOCK key jid [TOKEN t]`.
    def self.unlock_argv(key, jid, token: nil)
      token.nil? ? ["UNIQUE.UNLOCK", key, jid] : ["UNIQUE.UNLOCK", key, jid, "TOKEN", checked_token(token)]
    end

    # A fencing token as LOCK returned it: an Integer from 1 to 2**63 - 1.
    def self.checked_token(token, name = "token:")
      unless token.is_a?(Integer) && token.between?(1, (2**63) - 1)
        raise InvalidOption, "#{name} must be a fencing token as lock returned it (an Integer from 1 to 2**63 - 1), " \
                             "got #{token.inspect}"
      end

      token
    end

    # UNIQUE.LOCKEDBY: the jids of the live holders, oldest grant first.
    def locked_by(key)
      @connection.call("UNIQUE.LOCKEDBY", key)
    end

    # UNIQUE.WAITERS: how many clients wait (lock with wait:) for a slot of the key.
    # With `groups: true`, one WaiterGroup per group that waits or holds (UNIQUE.WAITERS
    # key GROUPS): the group without a name (nil) first, then by name, bytewise.
    def waiters(key, groups: false)
      return @connection.call("UNIQUE.WAITERS", key) unless groups

      @connection.call("UNIQUE.WAITERS", key, "GROUPS").map { |g| Client.waiter_group(g) }
    end

    # UNIQUE.RATE: the key's RateState (what lock(..., rate:) spent), or nil.
    def rate(key)
      Client.rate_state(@connection.call("UNIQUE.RATE", key))
    end

    # UNIQUE.LOCKEDBY WITHMETA as Holder structs.
    def holders(key)
      @connection.call("UNIQUE.LOCKEDBY", key, "WITHMETA").map { |h| Client.holder(h) }
    end

    # UNIQUE.REAP from cursor 0 to the end: removes expired holders and, with `owner`,
    # every holder of that owner. Returns the number of holders removed.
    def reap(owner: nil, count: 1000)
      cursor = "0"
      removed = 0
      loop do
        argv = ["UNIQUE.REAP", cursor, "COUNT", Integer(count)]
        argv.push("OWNER", owner.to_s) if owner
        cursor, n = @connection.call(*argv)
        removed += n.to_i
        break if cursor.to_s == "0"
      end
      removed
    end

    # UNIQUE.METRICS as a Hash: "locks", "holders", "total" => {counter => n},
    # "types" => {type => {counter => n}}. `minutes:` sums the last n minutes.
    def metrics(minutes: nil)
      argv = ["UNIQUE.METRICS"]
      argv.push("MINUTES", Integer(minutes)) if minutes
      argv.push("FORMAT", "json")
      JSON.parse(@connection.call(*argv))
    end

    # Resets the module's counters (UNIQUE.METRICS RESET).
    def reset_metrics
      @connection.call("UNIQUE.METRICS", "RESET")
    end

    # true when the server has the module loaded (COMMAND INFO unique.lock, allowed where
    # MODULE LIST is not; raises nothing but a connection error).
    def module_loaded?
      Functions.module_loaded?(@connection)
    end

    # "module" or "functions": where this client's calls go (found at the first call, or
    # forced by RedisUnique.backend= / REDIS_UNIQUE_BACKEND); loads the Functions library
    # when it is the library's.
    def backend
      @connection.backend
    end

    WEIGHTS = (1..1000).freeze
    GROUP_LIMITS = (1..2_147_483_647).freeze
    MODES = %w[shared exclusive].freeze
    MAX_GROUP_BYTES = 1024

    # GROUP name [WEIGHT w] [GROUPLIMIT m] [MODE shared|exclusive], in the contract's
    # order. Checked here so that a mistake fails before anything is sent, naming the
    # option as this gem spells it.
    def self.group_argv(group: nil, weight: nil, group_limit: nil, mode: nil)
      argv = []
      unless group.nil?
        unless group.is_a?(String) || group.is_a?(Symbol) || group.is_a?(Integer)
          raise InvalidOption, "group must be a String (a tenant id), not #{group.inspect}"
        end

        name = group.to_s
        unless name.bytesize.between?(1, MAX_GROUP_BYTES)
          raise InvalidOption, "group must be 1 to #{MAX_GROUP_BYTES} bytes, not #{name.bytesize}"
        end

        argv.push("GROUP", name)
      end
      unless weight.nil?
        raise InvalidOption, "weight needs group: (it weighs a group's share of the limit)" if group.nil?

        w = integer_option(:weight, weight)
        raise InvalidOption, "weight must be 1 to 1000, not #{w}" unless WEIGHTS.cover?(w)

        argv.push("WEIGHT", w)
      end
      unless group_limit.nil?
        raise InvalidOption, "group_limit needs group: (it caps the holders of one group)" if group.nil?

        m = integer_option(:group_limit, group_limit)
        raise InvalidOption, "group_limit must be 1 to #{GROUP_LIMITS.max}, not #{m}" unless GROUP_LIMITS.cover?(m)

        argv.push("GROUPLIMIT", m)
      end
      unless mode.nil?
        name = mode.to_s.downcase
        raise InvalidOption, "mode must be :shared or :exclusive, not #{mode.inspect}" unless MODES.include?(name)

        argv.push("MODE", name)
      end
      argv
    end

    def self.integer_option(name, value)
      raise ArgumentError if value.is_a?(Float) && value != value.floor # 2.5 is not 2

      Integer(value)
    rescue ArgumentError, TypeError
      raise InvalidOption, "#{name} must be an Integer, not #{value.inspect}"
    end

    PERIODS = { second: 1_000, minute: 60_000, hour: 3_600_000, day: 86_400_000 }.freeze

    # RATE n PER ms [BURST b] of a rate: option (BURST only when above 0).
    def self.rate_argv(rate)
      raise InvalidOption, "rate must be a Hash: { limit:, per: } (per in seconds), not #{rate.inspect}" unless rate.is_a?(Hash)

      r = rate.transform_keys(&:to_sym)
      limit = Integer(r.fetch(:limit) { raise InvalidOption, "rate needs limit: (grants per period)" })
      raise InvalidOption, "rate limit must be 1 or more, not #{limit}" unless limit.positive?

      per_ms = if r.key?(:per_ms)
                 Integer(r[:per_ms])
               elsif PERIODS.key?(r[:per].to_s.to_sym)
                 PERIODS.fetch(r[:per].to_s.to_sym)
               elsif r[:per].is_a?(Numeric)
                 raise InvalidOption, "rate per must be positive (seconds)" unless r[:per].positive?

                 [(r[:per] * 1_000_000).round.fdiv(1000).ceil, 1].max
               else
                 raise InvalidOption, "rate needs per: (seconds, or :second, :minute, :hour, :day) or per_ms:"
               end
      burst = Integer(r.fetch(:burst, 0))
      raise InvalidOption, "rate burst must be 0 or more, not #{burst}" if burst.negative?

      argv = ["RATE", limit, "PER", per_ms]
      argv.push("BURST", burst) if burst.positive?
      argv
    end

    def self.rate_state(raw)
      return nil if raw.nil?

      h = (raw.is_a?(Hash) ? raw : Hash[*raw]).transform_keys(&:to_s)
      RateState.new(
        limit: h["limit"].to_i, per_ms: h["per"].to_i, burst: h["burst"].to_i, remaining: h["remaining"].to_i,
        allowed_at: Time.at(h["allowed_at"].to_i / 1000r), idle_at: Time.at(h["idle_at"].to_i / 1000r)
      )
    end

    def self.holder(raw)
      h = raw.is_a?(Hash) ? raw : Hash[*raw]
      h = h.transform_keys(&:to_s)
      expires = h["expires_at"].to_i
      ttl = h["ttl"].to_i
      meta = h["meta"]
      Holder.new(
        jid: h["jid"],
        token: h["token"].to_i,
        acquired_at: Time.at(h["acquired_at"].to_i / 1000r),
        expires_at: expires.negative? ? nil : Time.at(expires / 1000r),
        ttl: ttl.negative? ? nil : ttl / 1000.0,
        type: h["type"],
        owner: h["owner"],
        meta: meta.nil? || meta.empty? ? nil : JSON.parse(meta),
        group: h["group"],
        mode: h["mode"]
      )
    end

    # One element of UNIQUE.WAITERS key GROUPS: a map (RESP3) or a flat field/value array.
    def self.waiter_group(raw)
      h = (raw.is_a?(Hash) ? raw : Hash[*raw]).transform_keys(&:to_s)
      WaiterGroup.new(group: h["group"], waiting: h["waiting"].to_i, holding: h["holding"].to_i)
    end

    # Whole ms of a duration option given in seconds or in ms.
    def self.ms_option(name, seconds, ms)
      raise InvalidOption, "give #{name} or #{name}_ms, not both" if seconds && ms
      return Integer(ms) if ms
      return nil if seconds.nil?

      # Rounded up to whole ms from the value to the microsecond, as in every client:
      # 0.0004 s is 1 ms, and 0.3 s is 300 ms (a bare ceil of 0.3 * 1000 gives 301).
      raise InvalidOption, "#{name} must be positive (seconds)" unless seconds.positive?

      value = [(seconds * 1_000_000).round.fdiv(1000).ceil, 1].max

      value
    end
  end
end
