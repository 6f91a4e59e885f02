# frozen_string_literal: true

# lock_limits: several limits held while a job runs, taken in one atomic grant
# (UNIQUE.LOCKALL): per account and in all, say.
#
#   class SyncAccountJob
#     include Sidekiq::Job
#     sidekiq_options lock: :while_executing, lock_ttl: 60, lock_timeout: 30, on_conflict: :reschedule,
#                     lock_limits: ->(args) { { "{sync}:account:#{args[0]}" => 2,
#                                               "{sync}:all" => { limit: 10, rate: { limit: 50, per: :second } } } }
#   end

module RedisUnique
  module Sidekiq
    class Job
      # The job options that say one key's limit or fair share: lock_limits gives each key's.
      ONE_KEY_OPTIONS = {
        "lock_limit" => "give each key's limit in lock_limits",
        "lock_rate" => "give the rate with its key: lock_limits: { key => { limit: n, rate: { limit:, per: } } }",
        "lock_group" => "fair sharing (lock_group) is for one key; give each tenant its own key in lock_limits",
        "lock_group_limit" => "give the tenant's key its limit in lock_limits instead",
        "lock_group_weight" => "fair sharing (lock_group_weight) is for one key"
      }.freeze

      # lock_limits as { keys:, limits:, rates: } for Client#lock_all, or nil without it.
      #
      # The option is a Hash (or a lambda, or a class method name, given the job's args,
      # returning one) of key => limit, where a limit is an Integer (the most jobs holding
      # that key at once) or { limit: n, rate: { limit:, per: } } (rate: alone limits the
      # rate only). The keys are used as given (a hash tag for a Redis Cluster is yours to
      # put). They are the job's runtime lock, in place of <digest>:RUN: held while it runs
      # (the runtime lock types only), waited for up to lock_timeout, renewed every third
      # of lock_ttl, on_conflict when they are not all free. What the lambda returned is
      # written into the job at push, so the server reads plain values.
      def lock_limits
        return @lock_limits if defined?(@lock_limits)

        spec = limits_option
        return @lock_limits = nil if spec.nil? || !Sidekiq.config.enabled || option("lock") == false

        where = "#{item["class"]}: sidekiq_options lock_limits"
        unless RUNTIME_TYPES.include?(lock_type)
          raise InvalidOption, "#{where}: the limits are held while the job runs: they need lock: " \
                               "#{RUNTIME_TYPES.map { |t| ":#{t}" }.join(", ")} " \
                               "(#{lock_type ? "not :#{lock_type}" : "no lock: given"})"
        end
        ONE_KEY_OPTIONS.each do |name, instead|
          next if item[name].nil? && class_options[name].nil?

          raise InvalidOption, "#{where} with #{name}: #{instead}"
        end
        unless spec.is_a?(Hash) && !spec.empty?
          raise InvalidOption, "#{where}: a Hash { key => limit } (or a lambda of the args returning one), " \
                               "not #{spec.inspect}"
        end

        @lock_limits = parse_limits(spec, where)
        item["lock_limits"] = spec.transform_keys(&:to_s) # plain values for the server
        @lock_limits
      end

      # { key => limit } of lock_limits (its keys without a concurrency limit left out), for
      # META; nil without it, or when it is not valid (raised where the grant is taken).
      def limits_by_key
        spec = RUNTIME_TYPES.include?(lock_type) ? lock_limits : nil
        spec && spec[:keys].zip(spec[:limits]).select { |_, n| n.positive? }.to_h
      rescue InvalidOption
        nil
      end

      # The keys of lock_limits held while the job runs; nil without them, or when they are
      # not valid (then the job never took them).
      def limit_keys
        RUNTIME_TYPES.include?(lock_type) ? lock_limits&.fetch(:keys) : nil
      rescue InvalidOption
        nil
      end

      # lock_limits at push, refused in a client; in a Sidekiq server process (the
      # scheduler's and retries' pushes, where raising would lose the job) logged once per
      # class: the job raises the same error when it runs, and Sidekiq retries it.
      def checked_lock_limits
        lock_limits
      rescue InvalidOption => e
        raise unless ::Sidekiq.respond_to?(:server?) && ::Sidekiq.server?

        Job.warn_once("#{item["class"]}/lock_limits", "redis-unique: #{e.message}")
        nil
      end

      private

      # The option's value: a Proc or method name is called with the args. A Proc given
      # per job (before JSON) first, then the class's (its copy in the job is a String
      # after JSON), then the job's value (written at push), then the class's.
      def limits_option
        class_value = class_options["lock_limits"]
        item_value = item["lock_limits"]
        value = if item_value.is_a?(Proc) then item_value
                elsif (class_value.is_a?(Proc) || class_value.is_a?(Symbol)) &&
                      (item_value.nil? || item_value.is_a?(String)) then class_value
                elsif item_value.nil? then class_value
                else item_value
                end
        args = -> { JSON.parse(JSON.generate(item["args"] || [])) }
        case value
        when Proc then value.arity.zero? ? value.call : value.call(args.call)
        when Symbol, String
          unless klass.respond_to?(value.to_sym)
            raise InvalidOption, "#{item["class"]}: lock_limits names #{value.inspect}, which is no class method"
          end

          klass.public_send(value.to_sym, args.call)
        else value
        end
      end

      def parse_limits(spec, where)
        keys = []
        limits = []
        rates = []
        spec.each do |key, value|
          keys << key.to_s
          value = value.transform_keys(&:to_s) if value.is_a?(Hash)
          limit, rate = case value
                        when Hash
                          if (extra = value.keys - %w[limit rate]).any?
                            raise InvalidOption, "#{where}: #{key} has #{extra.join(", ")}; a key takes limit: and rate:"
                          end

                          [value["limit"], value["rate"]]
                        else [value, nil]
                        end
          if limit.nil? && rate.nil?
            raise InvalidOption, "#{where}: #{key} has no limit and no rate (an Integer, or { limit:, rate: })"
          end

          limit = limit.nil? ? 0 : Client.integer_option(:limit, limit)
          if limit.negative? || (limit.zero? && rate.nil?)
            raise InvalidOption, "#{where}: the limit of #{key} must be 1 or more, not #{limit}"
          end

          limits << limit
          rates << rate
        end
        parsed = { keys: keys, limits: limits, rates: rates }
        begin
          Client.lock_all_argv(keys, jid, **parsed.except(:keys)) # every check of the client, before anything runs
        rescue InvalidOption => e
          raise InvalidOption, "#{where}: #{e.message}"
        end
        parsed
      end

      public

      # The runtime lock on the keys of lock_limits: every key or none, waiting up to
      # lock_timeout; renewed while the job runs, released together at its end.
      def run_locked_all(strategy: nil)
        spec = lock_limits
        keys = spec[:keys]
        sent_at = Refresher.now
        tokens = client.lock_all(keys, jid, limits: spec[:limits], rates: spec[:rates], ttl: ttl_seconds,
                                            type: lock_type, owner: Sidekiq.identity, meta: meta, wait: wait_seconds)
        return ConflictStrategy.new(self, :server, full_key(spec), strategy: strategy).resolve unless tokens

        begin
          renewing(keys, tokens, sent_at) { yield }
        ensure
          release(keys) unless lost?
        end
      end

      # The first key of lock_limits with no room now (what a conflict names), else the first.
      def full_key(spec)
        spec[:keys].zip(spec[:limits]).find { |k, n| n.positive? && client.locked_by(k).size >= n }&.first ||
          spec[:keys].first
      rescue StandardError
        spec[:keys].first
      end
    end
  end
end
