# frozen_string_literal: true

# The client and server middlewares and the death handler: where Sidekiq hands the
# gem a job.

module RedisUnique
  module Sidekiq
    # The Redis pool of a middleware: its Sidekiq 7 config's (the capsule's
    # Sidekiq::Config) when it has one, else Sidekiq's global pool (6.4).
    module DefaultPool
      private

      def default_pool
        respond_to?(:config) && config ? config.redis_pool : ::Sidekiq.redis_pool
      end
    end

    # Takes the lock when a job is pushed (perform_async, perform_in, push_bulk, the
    # scheduler moving a job to its queue, a retry).
    class ClientMiddleware
      include ::Sidekiq::ClientMiddleware if defined?(::Sidekiq::ClientMiddleware)
      include DefaultPool

      def call(worker_class, item, _queue, redis_pool = nil, &block)
        job = Job.new(worker_class, item, redis_pool || default_pool)
        job.checked_group_options unless job.lock_type # lock_group without lock: is refused, not ignored
        job.checked_lock_limits unless job.lock_type # so is lock_limits
        deps = Dependencies.keys(job, "dependency_locks")
        return(job.lock_type ? job.client_lock(&block) : yield) if deps.empty?

        Dependencies.hold(job.client, deps, job.jid)
        pushed = nil
        begin
          pushed = job.lock_type ? job.client_lock(&block) : yield
        ensure
          Dependencies.release(job.client, deps, job.jid) unless pushed
        end
      end
    end

    # Takes and frees locks around perform, per lock type.
    class ServerMiddleware
      include ::Sidekiq::ServerMiddleware if defined?(::Sidekiq::ServerMiddleware)
      include DefaultPool

      def call(worker, item, _queue, &block)
        job = Job.new(worker.class, item, default_pool)
        job.worker = worker
        blockers = Dependencies.keys(job, "depends_on")
        unless blockers.empty? || (held = Dependencies.held(job.client, blockers)).empty?
          raise DependencyLocked, "#{item["class"]} #{item["jid"]} waits for #{held.join(", ")} " \
                                  "(held by #{held.flat_map { |k| job.client.locked_by(k) }.join(", ")})"
        end
        result = job.lock_type ? job.execute(&block) : yield
        deps = Dependencies.keys(job, "dependency_locks")
        Dependencies.release(job.client, deps, job.jid) unless deps.empty?
        result
      end
    end

    DEATH_HANDLER = lambda do |job, _exception|
      dead = Job.new(nil, job, nil)
      dead.died
      Dependencies.release(dead.client, Dependencies.keys(dead, "dependency_locks"), dead.jid)
    rescue StandardError => e
      Sidekiq.logger.warn("redis-unique: could not free the locks of dead job #{job["jid"]}: #{e.class}: #{e.message}")
    end
  end
end
