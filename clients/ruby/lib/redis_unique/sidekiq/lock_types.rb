# frozen_string_literal: true

# What each lock type does: when a job's lock is taken and freed, on the client side
# (push) and the server side (perform), and when the job dies.

module RedisUnique
  module Sidekiq
    class Job
      # --- client side (push) ---

      def client_lock
        return yield if item[RESCHEDULED]

        if lock_type == "while_executing"
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
          client.unlock(digest, jid)
          begin
            yield
          rescue StandardError
            take(digest, wait: false)
            raise
          end
        when "until_executed" then execute_until_executed(&block)
        when "until_expired" then yield
        when "while_executing" then run_locked(&block)
        when "until_and_while_executing"
          client.unlock(digest, jid)
          begin
            run_locked(&block)
          rescue StandardError
            take(digest, wait: false)
            raise
          end
        else yield
        end
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

      def run_locked
        token = client.lock(run_key, jid, limit: limit, ttl: ttl_seconds, type: lock_type,
                                          owner: Sidekiq.identity, meta: meta, rate: rate, wait: wait_seconds)
        return ConflictStrategy.new(self, :server, run_key).resolve unless token

        begin
          yield
        ensure
          release(run_key)
        end
      end

      # The end-of-job unlock: with ReliableFetch, sent with the job's acknowledgement in one
      # MULTI (ReliableFetch::UnitOfWork#defer_unlock); otherwise now.
      def release(key)
        unit = ReliableFetch.current(jid)
        unit ? unit.defer_unlock(key, client) : client.unlock(key, jid)
      end

      # The job died (retries exhausted or retry: false): free what it holds.
      def died
        return unless lock_type

        client.unlock(digest, jid) unless lock_type == "until_expired"
        client.unlock(run_key, jid) if %w[while_executing until_and_while_executing].include?(lock_type)
      end

      def truthy?(value)
        value && value != "false"
      end
    end
  end
end
