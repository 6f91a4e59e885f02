# frozen_string_literal: true

# Dependency locks: `dependency_locks:` and `depends_on:`.

module RedisUnique
  module Sidekiq
    # Raised when a job's `depends_on:` keys are held: Sidekiq retries the job later.
    class DependencyLocked < RedisUnique::Error; end

    # Dependency locks (sidekiq_lockable_job's design on counting locks):
    #
    #   sidekiq_options dependency_locks: ->(args) { ["order:#{args[0]}"] }  # held from enqueue to success
    #   sidekiq_options depends_on:       ->(args) { ["order:#{args[0]}"] }  # may run only when all are free
    #
    # Each key is a uniq-lock taken with LIMIT 0 (every job that holds it counts, each
    # release removes one) and TYPE dependency; the value of either option is a Proc or a
    # class method name (Symbol) called with the job's args, or an Array of keys.
    module Dependencies
      module_function

      def keys(job, name)
        spec = job.option(name, class_first: true)
        spec = spec.call(job.item["args"]) if spec.is_a?(Proc)
        spec = job.klass.public_send(spec, job.item["args"]) if spec.is_a?(Symbol) && job.klass.respond_to?(spec)
        spec.is_a?(Array) ? spec.map(&:to_s) : []
      end

      def hold(client, keys, jid)
        keys.each { |k| client.lock(k, jid, limit: 0, type: "dependency") }
      end

      def release(client, keys, jid)
        keys.each { |k| client.unlock(k, jid) }
      end

      # The keys that some job holds now.
      def held(client, keys)
        keys.reject { |k| client.locked_by(k).empty? }
      end
    end
  end
end
