# frozen_string_literal: true

# What each lock type does: when a job's lock is taken and freed, on the client side
# (push) and the server side (perform), and when the job dies.

module RedisUnique
  module Sidekiq
    class Job
      # --- client side (push) ---

      def client_lock
        return yield if item[RESCHEDULED]

        checked_group_options
        checked_lock_limits

        if lock_type == "while_executing" || lock_type == "while_executing_reject"
          digest
          return yield
        end
        if lock_type == "until_expired" && ttl_seconds.nil?
          raise InvalidOption, "#{item["class"]}: lock: :until_expired needs lock_ttl"
        end

        if take(digest)
          pushed = false
          begin
            result = yield
            pushed = result ? true : false
            result
          ensure
            client.unlock(digest, jid) unless pushed
          end
        else
          ConflictStrategy.new(self, :client, digest).resolve { yield }
        end
      end

      # --- server side (perform) ---

      def execute(&block)
        case lock_type
        when "until_executing"
          unlocked(digest) if client.unlock(digest, jid)
          begin
            yield
          rescue StandardError
            take(digest, wait: false)
            raise
          end
        when "until_executed" then execute_until_executed(&block)
        when "until_expired" then yield
        when "while_executing" then run_locked(&block)
        when "while_executing_reject" then run_locked(strategy: "reject", &block)
        when "until_and_while_executing"
          # The until-lock passes to the runtime lock. Not held by this jid (a lapsed lease, or a
          # rescheduled copy that took no lock at push), the job runs only if it could take it
          # now: when another jid holds it, this job is a duplicate of one still queued.
          unless client.unlock(digest, jid) || room?(digest)
            return ConflictStrategy.new(self, :server, digest).resolve
          end

          begin
            run_locked(&block)
          rescue StandardError
            take(digest, wait: false)
            raise
          end
        else yield
        end
      end

      # true when `key` would grant this jid a slot now (taken and freed at once).
      def room?(key)
        return false unless client.lock(key, jid, limit: limit, ttl: 60, type: lock_type)

        client.unlock(key, jid)
        true
      end

      def execute_until_executed
        sent_at = Refresher.now
        token = take(digest, owner: Sidekiq.identity)
        unless token
          return ConflictStrategy.new(self, :server, digest).resolve unless ReliableFetch.lapsed?(jid)

          return yield # fetched without its lock (ReliableFetch): it runs, holding and freeing nothing
        end

        done = false
        begin
          result = renewing(digest, token, sent_at) { yield }
          done = true
          result
        ensure
          if lost?
            nil # lost while it ran (logged and counted then): not this job's to free or keep
          elsif done
            release(digest)
          else
            # failed (retry) or interrupted (requeued at shutdown): keep the lock, owned by nobody
            client.lock(digest, jid, limit: limit, type: lock_type, owner: QUEUED_OWNER)
          end
        end
      end

      def run_locked(strategy: nil, &block)
        return run_locked_all(strategy: strategy, &block) if lock_limits

        sent_at = Refresher.now
        token = client.lock(run_key, jid, limit: limit, ttl: ttl_seconds, type: lock_type,
                                          owner: Sidekiq.identity, meta: meta, rate: rate, **group_options,
                                          wait: wait_seconds)
        return ConflictStrategy.new(self, :server, run_key, strategy: strategy).resolve unless token

        begin
          renewing(run_key, token, sent_at) { yield }
        ensure
          release(run_key) unless lost?
        end
      end

      # Runs the block while RedisUnique::Refresher renews `key`'s lease (when the lock has
      # one: lock_ttl), so that a job longer than its lease keeps its lock. A loss (a renewal
      # refused, or none answered before the lease ended) is told at once, from the renewal
      # thread: an error line on Sidekiq's logger naming the job and the lock, and the
      # renewal_lost counter (RedisUnique::Sidekiq.stats). The job is not interrupted, nor
      # failed at its end: its work is done, and a retry would do it twice.
      def renewing(key, token, sent_at)
        lease = ttl_seconds && Client.ms_option(:ttl, ttl_seconds, nil)
        return yield unless lease

        sent_at = Refresher.now if wait_seconds # the grant came after a wait: no later than now
        @refresher = Refresher.new(client, key, jid, token: token, lease_ms: lease, sent_at: sent_at,
                                                     name: "#{lock_type} lock", on_lost: method(:lock_lost)).start
        begin
          yield
        ensure
          @refresher.stop
        end
      end

      # true when a lock of this job was lost while it ran.
      def lost?
        @refresher ? @refresher.lost? : false
      end

      def lock_lost(error)
        Sidekiq.logger.error("redis-unique: #{item["class"]} #{jid} lost its #{lock_type} lock #{Array(error.key).join(", ")} " \
                             "while running (#{error.message.sub(/\Alost the .*?: /, "")}); another job " \
                             "may run beside it")
        Sidekiq.count("renewal_lost", client)
      end

      # after_unlock, as v9 calls it after a successful unlock: the job instance's method if it
      # has one, else the class's; given the job hash when it takes an argument. Its errors are
      # logged, not raised (the lock is already free: a retry would run the job twice).
      def unlocked(_key)
        target = [worker, klass].find { |t| t.respond_to?(:after_unlock) }
        return unless target

        target.method(:after_unlock).arity.positive? ? target.after_unlock(item) : target.after_unlock
      rescue StandardError => e
        Sidekiq.logger.warn("redis-unique: after_unlock of #{item["class"]} #{jid} failed: #{e.class}: #{e.message}")
      end

      # The end-of-job unlock (of the keys of lock_limits together when `key` is their
      # Array): with ReliableFetch, sent with the job's acknowledgement in one
      # MULTI (ReliableFetch::UnitOfWork#defer_unlock); otherwise now.
      def release(key)
        unit = ReliableFetch.current(jid)
        if unit
          unit.defer_unlock(key, client) { unlocked(key) }
        elsif key.is_a?(Array) ? client.unlock_all(key, jid).positive? : client.unlock(key, jid)
          unlocked(key)
        end
      end

      # The job died (retries exhausted or retry: false): free what it holds.
      def died
        return unless lock_type

        client.unlock(digest, jid) unless lock_type == "until_expired"
        client.unlock(run_key, jid) if RUNTIME_TYPES.include?(lock_type)
        keys = limit_keys
        client.unlock_all(keys, jid) if keys
      end

      def truthy?(value)
        value && value != "false"
      end
    end
  end
end
