# frozen_string_literal: true

# A job's lock, as the middlewares see it: sidekiq-unique-jobs v9's options read from
# the job and its class (lock type, args, digest, TTL, wait, limit, META). What each
# lock type does with them is in lock_types.rb.

module RedisUnique
  module Sidekiq
    # One job's lock, for one middleware call.
    class Job
      attr_reader :item, :klass
      # The job instance performing (server side), for its after_unlock.
      attr_accessor :worker

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

        refuse_legacy_options!
        type = option("lock")
        type = nil if type == false || !Sidekiq.config.enabled
        if type && !LOCK_TYPES.include?(type.to_s)
          raise InvalidOption, "unknown lock type #{type.inspect} for #{item["class"]} " \
                               "(one of #{LOCK_TYPES.join(", ")})"
        end
        @lock_type = type&.to_s
      end

      # Option names that older sidekiq-unique-jobs versions read and v9 ignores (so that
      # such a job would silently take no lock): an error that names the option to use. In
      # a Sidekiq server process it is logged instead (once per class and option): there the
      # push may be the scheduler's or a retry's, and raising would lose the job.
      def refuse_legacy_options!
        class_opts = klass.respond_to?(:get_sidekiq_options) ? klass.get_sidekiq_options : {}
        LEGACY_OPTIONS.each do |name, use|
          next unless class_opts.key?(name) || class_opts.key?(name.to_sym) || (name != "lock_args" && item.key?(name))

          message = "#{item["class"]}: sidekiq_options #{name}: is an option of older " \
                    "sidekiq-unique-jobs versions; use #{use} instead"
          raise InvalidOption, message unless ::Sidekiq.respond_to?(:server?) && ::Sidekiq.server?

          Job.warn_once("#{item["class"]}/#{name}", "redis-unique: #{message} (not read here)")
        end
      end

      def self.warn_once(id, message)
        @warned ||= {}
        return if @warned[id]

        @warned[id] = true
        Sidekiq.logger.warn(message)
      end

      def client
        Sidekiq.client(@pool)
      end

      def jid
        item["jid"]
      end

      # The class's sidekiq_options with String keys ({} for a class this process lacks).
      def class_options
        @class_options ||= (klass.respond_to?(:get_sidekiq_options) ? klass.get_sidekiq_options : {}).transform_keys(&:to_s)
      end

      # --- digest (sidekiq-unique-jobs v9's "legacy" algorithm) ---

      def lock_args
        @lock_args ||= begin
          args = item["args"] || []
          method = option("lock_args_method", class_first: true) || option("unique_args_method", class_first: true) ||
                   option("unique_args", class_first: true)
          method ||= :lock_args if klass.respond_to?(:lock_args)
          method ||= :unique_args if klass.respond_to?(:unique_args)
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

      # lock_ttl as v9 reads it: the job's own first (`.set(lock_ttl: 10)`, or "lock_ttl" in a
      # pushed hash, 10 or "10"), then the class's, then lock_expiration (the older name) the
      # same way, then the global default. A Proc or method Symbol is called with the args;
      # any other object is read with to_i (an ActiveSupport::Duration, say).
      def ttl_seconds
        ttl = %w[lock_ttl lock_expiration].lazy.map { |name| ttl_option(name) }.find { |v| !v.nil? }
        ttl = Sidekiq.config.lock_ttl if ttl.nil?
        ttl = ttl.call(item["args"]) if ttl.is_a?(Proc)
        ttl = klass.public_send(ttl, item["args"]) if ttl.is_a?(Symbol) && klass.respond_to?(ttl)
        return nil if ttl.nil?

        ttl = seconds(ttl, "lock_ttl")
        return nil unless ttl.positive?

        at = item["at"]
        ttl += [0, at.to_f - Time.now.to_f].max if at
        ttl
      end

      # The job's value of `name` when it is a number or, before it went through JSON, any
      # object; else the class's. (Sidekiq copies the class's options into the job at push,
      # so a Proc or Symbol arrives at the server as a String: then the class's is meant.)
      def ttl_option(name)
        class_opts = klass.respond_to?(:get_sidekiq_options) ? klass.get_sidekiq_options : {}
        class_value = class_opts.key?(name) ? class_opts[name] : class_opts[name.to_sym]
        item_value = item[name]
        return item_value if numeric?(item_value) || !(item_value.nil? || item_value.is_a?(String))

        class_value
      end

      def numeric?(value)
        value.is_a?(Numeric) || (value.is_a?(String) && value.strip.match?(/\A\d+(\.\d+)?\z/))
      end

      def seconds(value, name)
        return Float(value) if value.is_a?(Numeric) || value.is_a?(String)
        return Float(value.to_i) if value.respond_to?(:to_i)

        raise InvalidOption, "#{item["class"]}: #{name} must be seconds (a number, a Proc, a method name " \
                             "or an object with #to_i), not #{value.inspect}"
      rescue ArgumentError
        raise InvalidOption, "#{item["class"]}: #{name} must be seconds, not #{value.inspect}"
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
        data["limits"] = limits_by_key if limits_by_key # and each key's of lock_limits
        data["group_limit"] = group_options[:group_limit] if RUNTIME_TYPES.include?(lock_type) && group_options[:group_limit]
        if truthy?(option("lock_info"))
          data["args"] = item["args"]
          data["at"] = item["at"] if item["at"]
          data["created_at"] = item["created_at"] if item["created_at"]
        end
        json = JSON.generate(data)
        json = JSON.generate(data.slice("class", "queue")) if json.bytesize > 8192
        json
      end

      # --- fair sharing of a limit among tenants (the runtime lock only) ---

      # The client's keywords by the job options' names, for the messages.
      OPTION_NAMES = { "group" => "lock_group", "group_limit" => "lock_group_limit",
                       "weight" => "lock_group_weight" }.freeze

      # lock_group: (a String, or a lambda given the job's args: the tenant), with
      # lock_group_limit: (the most jobs of one group holding the lock at once) and
      # lock_group_weight: (the group's share of the slots when groups wait), as the
      # client's keywords { group:, group_limit:, weight: }; {} without any of them.
      #
      # They apply where jobs share a limit while they run: the runtime lock of the
      # RUNTIME_TYPES. Anywhere else, without lock_group, or with a weight and no
      # lock_timeout (no job would wait, and a weight only orders waiting jobs), they are
      # refused with InvalidOption: never left unread. A lambda (or a Proc per job) is
      # called at push, and what it returned is written into the job, so that the server
      # reads a plain value (a Proc does not survive JSON).
      def group_options
        return @group_options if defined?(@group_options)

        given = GROUP_OPTIONS.reject { |name| item[name].nil? && class_options[name].nil? }
        return @group_options = {} if given.empty? || !Sidekiq.config.enabled || option("lock") == false

        where = "#{item["class"]}: sidekiq_options #{given.join(", ")}"
        unless RUNTIME_TYPES.include?(lock_type)
          raise InvalidOption, "#{where}: fair sharing applies to the lock that jobs hold while they run: it needs " \
                               "lock: #{RUNTIME_TYPES.map { |t| ":#{t}" }.join(", ")} " \
                               "(#{lock_type ? "not :#{lock_type}" : "no lock: given"})"
        end
        values = GROUP_OPTIONS.to_h { |name| [name, group_option(name)] }
        group = values["lock_group"]
        group = group.to_s if group.is_a?(Symbol) || group.is_a?(Integer)
        if !given.include?("lock_group")
          raise InvalidOption, "#{where}: these need lock_group: (the tenant: a String, or a lambda of the args)"
        elsif group.nil? || group == ""
          raise InvalidOption, "#{where}: lock_group gave #{group.inspect} for args #{item["args"].inspect}; " \
                               "the group (a tenant id) must be a non-empty String"
        end
        if values["lock_group_weight"] && wait_seconds.nil?
          raise InvalidOption, "#{where}: lock_group_weight orders the jobs waiting for a slot, and without " \
                               "lock_timeout no job waits: give lock_timeout too"
        end

        options = { group: group, group_limit: values["lock_group_limit"], weight: values["lock_group_weight"] }.compact
        begin
          Client.group_argv(**options)
        rescue InvalidOption => e
          raise InvalidOption, "#{where}: #{e.message.sub(/\A(group_limit|weight|group)\b/) { OPTION_NAMES[$1] }}"
        end
        item["lock_group"] = options[:group]
        item["lock_group_limit"] = options[:group_limit] if options[:group_limit]
        item["lock_group_weight"] = options[:weight] if options[:weight]
        @group_options = options
      end

      # group_options, refused at push in a client; in a Sidekiq server process (the
      # scheduler's and retries' pushes, where raising would lose the job) logged once
      # per class instead, and not applied.
      def checked_group_options
        group_options
      rescue InvalidOption => e
        raise unless ::Sidekiq.respond_to?(:server?) && ::Sidekiq.server?

        Job.warn_once("#{item["class"]}/lock_group", "redis-unique: #{e.message} (not applied)")
        @group_options = {}
      end

      # The value of one group option: a Proc given per job (before JSON, at push) first,
      # then the class's Proc (its copy in the job is a String after JSON), then the job's
      # value (written there at push), then the class's. A Proc is called with the args.
      def group_option(name)
        class_value = class_options[name]
        item_value = item[name]
        value = if item_value.is_a?(Proc) then item_value
                elsif class_value.is_a?(Proc) && (item_value.nil? || item_value.to_s.start_with?("#<Proc:")) then class_value
                elsif item_value.nil? then class_value
                else item_value
                end
        return value unless value.is_a?(Proc)

        value.arity.zero? ? value.call : value.call(JSON.parse(JSON.generate(item["args"] || [])))
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
