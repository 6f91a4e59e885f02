# frozen_string_literal: true

module RedisUnique
  # Several locks in one atomic grant (UNIQUE.LOCKALL / UNIQUE.UNLOCKALL): every key is
  # granted or none is, each under its own limit and rate, and a rate is spent only when
  # the whole grant succeeds.
  #
  #   tokens = client.lock_all(["{api}:tenant:acme", "{api}:global"], jid, limits: [2, 10],
  #                            rates: { "{api}:global" => { limit: 50, per: :second } },
  #                            ttl: 30, wait: 5)           # => [Integer, Integer], or nil
  #   client.unlock_all(["{api}:tenant:acme", "{api}:global"], jid)  # => 2 (holds released)
  #
  # In a Redis Cluster the keys must share one hash slot: give them one hash tag ({api}).
  class Client
    MAX_KEYS = 64
    # LOCK's options that lock_all does not send (the module takes GROUP, GROUPLIMIT and MODE
    # per key by position; this client does not yet), refused with what to do instead.
    NOT_FOR_LOCK_ALL = {
      group: "fair sharing (GROUP) is for one key: use lock(key, jid, group:, ...)",
      weight: "WEIGHT goes with GROUP, which is for one key: use lock(key, jid, group:, weight:, ...)",
      group_limit: "GROUPLIMIT is for one key: give each tenant its own key in keys instead " \
                   "(e.g. \"{api}:tenant:acme\" with its limit)",
      mode: "MODE (shared/exclusive) is for one key: use lock(key, jid, mode:, ...)",
      limit: "give limits: (one per key, in key order), not limit:",
      rate: "give rates: (a rate per key: an Array in key order with nil for none, or { key => rate }), not rate:"
    }.freeze

    # UNIQUE.LOCKALL. Returns the fencing tokens (Integers, in key order) when every key
    # granted, nil when one refused (or when `wait` ran out): then nothing was taken.
    # `limits:` one Integer per key (0: no limit; default 1 each); `rates:` an Array in key
    # order (nil for a key without a rate) or a Hash { key => rate }, each rate as in
    # #lock's rate:. The other options are #lock's, for every key.
    def lock_all(keys, jid, limits: nil, rates: nil, ttl: nil, ttl_ms: nil, pxat: nil, type: nil, owner: nil,
                 meta: nil, wait: nil, wait_ms: nil, **unsupported)
      argv, waiting = Client.lock_all_argv(keys, jid, limits: limits, rates: rates, ttl: ttl, ttl_ms: ttl_ms,
                                                      pxat: pxat, type: type, owner: owner, meta: meta, wait: wait,
                                                      wait_ms: wait_ms, **unsupported)
      reply = waiting ? @connection.blocking_call(waiting / 1000.0, *argv) : @connection.call(*argv)
      reply&.map { |t| Integer(t) }
    end

    # UNIQUE.UNLOCKALL: releases `jid`'s holds on `keys`; returns how many it released. With
    # `tokens:` (one per key, in key order, as lock_all returned them), a key is released only
    # when its hold has that token.
    def unlock_all(keys, jid, tokens: nil)
      Integer(@connection.call(*Client.unlock_all_argv(keys, jid, tokens: tokens)))
    end

    # `UNIQUE.UNLOCKALL n key... jid [TOKEN t...]`.
    def self.unlock_all_argv(keys, jid, tokens: nil)
      keys = checked_keys(keys)
      return ["UNIQUE.UNLOCKALL", keys.size, *keys, jid] if tokens.nil?
      unless tokens.is_a?(Array) && tokens.size == keys.size
        raise InvalidOption, "tokens: one per key, in key order (#{keys.size} keys, got #{tokens.inspect})"
      end

      ["UNIQUE.UNLOCKALL", keys.size, *keys, jid, "TOKEN", *tokens.map { |t| checked_token(t, "each of tokens:") }]
    end

    # Every UNIQUE.LOCKALL this gem sends is built here, options in the contract's order
    # (LIMIT, RATE i ..., TTL|PXAT, TYPE, OWNER, META, WAIT): the argv and the wait in ms.
    # Everything is checked before anything is sent.
    def self.lock_all_argv(keys, jid, limits: nil, rates: nil, ttl: nil, ttl_ms: nil, pxat: nil, type: nil,
                           owner: nil, meta: nil, wait: nil, wait_ms: nil, **unsupported)
      refuse_for_lock_all!(unsupported)
      keys = checked_keys(keys)
      argv = ["UNIQUE.LOCKALL", keys.size, *keys, jid]
      argv.push("LIMIT", *checked_limits(keys, limits)) unless limits.nil?
      rates_by_index(keys, rates).each do |i, rate|
        argv.push("RATE", i + 1, *rate_argv(rate).drop(1))
      end
      lease = ms_option(:ttl, ttl, ttl_ms)
      if lease && pxat
        raise InvalidOption, "give ttl or pxat, not both"
      elsif lease
        argv.push("TTL", lease)
      elsif pxat
        argv.push("PXAT", pxat.is_a?(Time) ? (pxat.to_r * 1000).ceil : Integer(pxat))
      end
      push_changes(argv, type: type, owner: owner, meta: meta)
      waiting = ms_option(:wait, wait, wait_ms)
      argv.push("WAIT", waiting) if waiting
      [argv, waiting]
    end

    # A multi-key renewal (clients/conformance README, "Renewal"): the lease only.
    def self.renewal_all_argv(keys, jid, lease_ms)
      ["UNIQUE.LOCKALL", keys.size, *keys, jid, "TTL", Integer(lease_ms)]
    end

    def self.refuse_for_lock_all!(unsupported)
      return if unsupported.empty?

      name, = unsupported.first
      why = NOT_FOR_LOCK_ALL[name]
      raise ArgumentError, "unknown keyword: #{name.inspect}" unless why

      raise InvalidOption, "lock_all does not take #{name}: (UNIQUE.LOCKALL refuses it): #{why}"
    end

    # The keys as Strings: 1 to 64 of them, each once.
    def self.checked_keys(keys)
      unless keys.is_a?(Array) && keys.all? { |k| k.is_a?(String) || k.is_a?(Symbol) }
        raise InvalidOption, "keys must be an Array of Strings, not #{keys.inspect}"
      end

      keys = keys.map(&:to_s)
      unless keys.size.between?(1, MAX_KEYS)
        raise InvalidOption, "lock_all takes 1 to #{MAX_KEYS} keys, not #{keys.size}"
      end

      twice = keys.tally.select { |_, n| n > 1 }.keys
      raise InvalidOption, "each key once: #{twice.join(", ")} given more than once" unless twice.empty?

      keys
    end

    def self.checked_limits(keys, limits)
      unless limits.is_a?(Array) && limits.size == keys.size
        raise InvalidOption, "limits: must be an Array of one Integer per key (#{keys.size}), in key order, " \
                             "not #{limits.inspect}"
      end

      limits.map do |n|
        v = integer_option(:limits, n)
        raise InvalidOption, "limits must be 0 (no limit) or more, not #{v}" if v.negative?

        v
      end
    end

    # [[index from 0, rate], ...] in key order, from an Array in key order (nil: no rate)
    # or a Hash { key => rate }.
    def self.rates_by_index(keys, rates)
      case rates
      when nil then []
      when Array
        if rates.size > keys.size
          raise InvalidOption, "rates: has #{rates.size} entries for #{keys.size} keys (one per key, nil for none)"
        end

        rates.each_with_index.reject { |r, _| r.nil? }.map { |r, i| [i, r] }
      when Hash
        if (unknown = rates.keys.map(&:to_s) - keys).any?
          raise InvalidOption, "rates: names #{unknown.join(", ")}, which is not among the keys"
        end

        by_key = rates.transform_keys(&:to_s)
        keys.each_with_index.filter_map { |k, i| [i, by_key[k]] unless by_key[k].nil? }
      else
        raise InvalidOption, "rates: must be an Array in key order or a Hash { key => rate }, not #{rates.inspect}"
      end
    end
  end
end
