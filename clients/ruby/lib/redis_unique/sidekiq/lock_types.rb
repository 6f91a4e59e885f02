# frozen_string_literal: true

# What each lock type does: when a job's lock is taken and freed, on the client side
# (push) and the server side (perform), and when the job dies.

module RedisUnique
  module Sidekiq
    class Job
      # --- client side (push) ---

      def client_lock
        return yield if item[RESCHEDULED]

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
        unless take(digest, owner: Sidekiq.identity)
          return ConflictStrategy.new(self, :server, digest).resolve unless ReliableFetch.lapsed?(jid)

          return yield # fetched without its lock (ReliableFetch): it runs, holding and freeing nothing
        end

        done = false
        begin
          result = yield
          done = true
          result
        ensure
          if done
            release(digest)
          else
            # failed (retry) or interrupted (requeued at shutdown): keep the lock, owned by nobody
            client.lock(digest, jid, limit: limit, type: lock_type, owner: QUEUED_OWNER)
          end
        end
      end

      def run_locked(strategy: nil)
        token = client.lock(run_key, jid, limit: limit, ttl: ttl_seconds, type: lock_type,
                                          owner: Sidekiq.identity, meta: meta, rate: rate, wait: wait_seconds)
        return ConflictStrategy.new(self, :server, run_key, strategy: strategy).resolve unless token

        begin
          yield
        ensure
          release(run_key)
        end
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

      # The end-of-job unlock: with ReliableFetch, sent with the job's acknowledgement in one
      # MULTI (ReliableFetch::UnitOfWork#defer_unlock); otherwise now.
      def release(key)
        unit = ReliableFetch.current(jid)
        if unit
          unit.defer_unlock(key, client) { unlocked(key) }
        elsif client.unlock(key, jid)
          unlocked(key)
        end
      end

      # The job died (retries exhausted or retry: false): free what it holds.
      def died
        return unless lock_type

        client.unlock(digest, jid) unless lock_type == "until_expired"
        client.unlock(run_key, jid) if RUNTIME_TYPES.include?(lock_type)
      end

      def truthy?(value)
        value && value != "false"
      end
    end
  end
end
