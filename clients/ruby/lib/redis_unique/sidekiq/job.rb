# frozen_string_literal: true

# A job's lock, as the middlewares see it: sidekiq-unique-jobs v9's options read from
# the job and its class (lock type, args, digest, TTL, wait, limit, META). What each
# lock type does with them is in lock_types.rb.

module RedisUnique
  module Sidekiq
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

      # lock_rate: { limit:, per: } (per in seconds or :second, :minute, :hour, :day), spent
      # by the job's grant beside lock_limit (the payload has string keys, as JSON).
      def rate
        value = option("lock_rate")
        value.is_a?(Hash) ? value.transform_keys(&:to_sym) : value
      end

      def take(key, owner: nil, wait: true)
        client.lock(key, jid, limit: limit, ttl: ttl_seconds, type: lock_type, owner: owner, meta: meta,
                              rate: rate, wait: wait ? wait_seconds : nil)
      end
    end
  end
end
