# frozen_string_literal: true

# Sidekiq's API (and so its web UI: Delete, Delete All, Clear, Kill, Kill All) frees the
# locks of the jobs it removes, as sidekiq-unique-jobs v9 does: a deleted job's
# until_executed lock would otherwise be held by a jid that will never run, and the same
# job could never be pushed again. Each lock is freed for the removed job's jid only
# (UNIQUE.UNLOCK key jid), and only when the job was really removed by this call: a job
# that another process moved meanwhile (the scheduler pushing it to its queue) keeps its
# lock. A deleted job frees every lock it holds; a killed one is dead, and frees what the
# death handler frees (until_expired's lock stays until its lease ends).
#
# Moving a job (Retry Now, Add to Queue, Retry All) keeps its lock: the push renews it for
# the same jid, so no duplicate can slip in between (v9 frees it, then takes it again).

require "securerandom"

module RedisUnique
  module Sidekiq
    # Frees the locks of jobs that Sidekiq's API removed.
    module Deleted
      # Only a job hash that names a lock is parsed.
      MARKER = '"lock"'
      # Queue#clear and JobSet#clear: one script does what Sidekiq's clear does (the key
      # gone; a queue out of `queues`) by moving the key aside, so that a job pushed while
      # clearing is neither lost nor left locked; the locks of what was moved are freed, then
      # it is deleted.
      CLEAR_SCRIPT = <<~LUA
        if KEYS[3] then redis.call('SREM', KEYS[3], ARGV[1]) end
        if redis.call('EXISTS', KEYS[1]) == 1 then
          redis.call('RENAME', KEYS[1], KEYS[2])
          return 1
        end
        return 0
      LUA
      PAGE = 500

      module_function

      # Frees the locks that `job` (a Hash, or its JSON) holds: its lock digest (any lock
      # type, until_expired included, as v9) and its dependency_locks.
      def free(job)
        item = job.is_a?(Hash) ? job : parse(job)
        return unless item.is_a?(Hash) && item["jid"] && (item.key?("lock") || item.key?("lock_digest"))

        lock = Job.new(nil, item, nil)
        return unless lock.lock_type

        lock.client.unlock(item["lock_digest"] || lock.digest, item["jid"])
        Dependencies.release(lock.client, Dependencies.keys(lock, "dependency_locks"), item["jid"])
      rescue StandardError => e
        Sidekiq.logger.warn("redis-unique: could not free the lock of deleted job #{item.is_a?(Hash) ? item["jid"] : "?"}: " \
                            "#{e.class}: #{e.message}")
      end

      # Frees what `job` holds as a dead job (the death handler's rule).
      def died(job)
        item = job.is_a?(Hash) ? job : parse(job)
        return unless item.is_a?(Hash) && item["jid"] && (item.key?("lock") || item.key?("lock_digest"))

        DEATH_HANDLER.call(item, nil)
      end

      def parse(json)
        return nil unless json.is_a?(String) && json.include?(MARKER)

        JSON.parse(json)
      rescue JSON::ParserError
        nil
      end

      def removed?(reply)
        reply == true || (reply.is_a?(Integer) && reply.positive?)
      end

      # Clears `key` (a queue list, whose name is `queue`, or a sorted set) as Sidekiq's own
      # clear does, then frees the locks of the jobs that were in it. Sidekiq's clear
      # (`yield`) runs only when the key was not there.
      def clearing(key, sorted:, queue: nil)
        aside = "redis_unique:clearing:#{SecureRandom.hex(8)}"
        keys = queue ? [key, aside, "queues"] : [key, aside]
        moved = ::Sidekiq.redis do |conn|
          Connection.invoke(conn, ["EVAL", CLEAR_SCRIPT, keys.size.to_s, *keys, queue.to_s], nil)
        end
        return yield unless moved.to_i == 1

        begin
          start = 0
          loop do
            page = ::Sidekiq.redis do |conn|
              Connection.invoke(conn, sorted ? ["ZRANGE", aside, start, start + PAGE - 1] : ["LRANGE", aside, start, start + PAGE - 1], nil)
            end
            break if page.nil? || page.empty?

            page.each { |payload| free(payload) }
            start += PAGE
          end
        ensure
          ::Sidekiq.redis { |conn| Connection.invoke(conn, ["UNLINK", aside], nil) }
        end
        true
      end
    end

    # JobRecord#delete: a job removed from its queue (the web UI's Delete on a queue page).
    module JobRecordDeletion
      def delete
        removed = super
        Deleted.free(item) if removed
        removed
      end
    end

    # DeadSet#kill: where SortedEntry#kill (Kill) and JobSet#kill_all (Kill All: on Sidekiq 7
    # and 8 it pops the set, with no SortedEntry#kill) put a job. SortedEntry#delete
    # (Delete on the Scheduled, Retries and Dead pages) goes through the set's
    # delete_by_value or delete_by_jid.
    module DeadSetKill
      def kill(message, opts = {})
        result = super
        Deleted.died(message)
        result
      end

      # Retry All retries each job that is dead when it is pressed, once, as Sidekiq 7 and 8
      # do. Sidekiq 6 retries until the set is empty, and a job whose retry is sent straight
      # back (a duplicate with on_conflict: reject, its lock still held) would keep it from
      # ever being empty.
      def retry_all
        return super if ::Sidekiq::VERSION.to_i >= 7

        to_a.each(&:retry)
        nil
      end
    end

    # JobSet: delete_by_value, delete_by_jid (and its alias delete, ScheduledSet#delete and
    # friends), clear (Delete All).
    module JobSetDeletion
      def delete_by_value(name, value)
        removed = super
        Deleted.free(value) if Deleted.removed?(removed)
        removed
      end

      def delete_by_jid(score, jid)
        payload = payload_of(score, jid)
        removed = super
        Deleted.free(payload) if payload && Deleted.removed?(removed)
        removed
      end

      def delete(score, jid)
        payload = payload_of(score, jid)
        removed = super
        Deleted.free(payload) if payload && Deleted.removed?(removed)
        removed
      end

      def clear
        Deleted.clearing(name, sorted: true) { super }
      end

      # Sidekiq's alias of clear names its own clear, not this one.
      def 💣
        clear
      end

      private

      def payload_of(score, jid)
        ::Sidekiq.redis do |conn|
          Connection.invoke(conn, ["ZRANGEBYSCORE", name, score.to_s, score.to_s], nil)
        end.find { |payload| payload.include?(jid.to_s) && Deleted.parse(payload)&.fetch("jid", nil) == jid }
      end
    end

    # Queue#clear (the web UI's Clear on a queue).
    module QueueDeletion
      def clear
        Deleted.clearing("queue:#{name}", sorted: false, queue: name) { super }
      end

      def 💣
        clear
      end
    end

    ::Sidekiq::JobRecord.prepend(JobRecordDeletion)
    ::Sidekiq::DeadSet.prepend(DeadSetKill)
    ::Sidekiq::JobSet.prepend(JobSetDeletion)
    ::Sidekiq::Queue.prepend(QueueDeletion)
  end
end
