# frozen_string_literal: true

# Sidekiq's API (and so its web UI: Delete, Delete All, Clear, Kill) frees the locks of
# the jobs it removes, as sidekiq-unique-jobs v9 does: a deleted job's until_executed lock
# would otherwise be held by a jid that will never run, and the same job could never be
# pushed again. Each lock is freed for the deleted job's jid only (UNIQUE.UNLOCK key jid),
# and only when the job was really removed by this call: a job that another process moved
# meanwhile (the scheduler pushing it to its queue) keeps its lock.
#
# Moving a job (Retry Now, Add to Queue) keeps its lock: the push renews it for the same
# jid, so no duplicate can slip in between (v9 frees it, then takes it again).

require "securerandom"

module RedisUnique
  module Sidekiq
    # Frees the locks of jobs that Sidekiq's API removed.
    module Deleted
      # Only a job hash that names a lock is parsed.
      MARKER = '"lock"'
      # Queue#clear and JobSet#clear move the key aside atomically (nothing pushed later is
      # lost or left locked), free the locks of what was there, then delete it.
      RENAME_SCRIPT = <<~LUA
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

      def parse(json)
        return nil unless json.is_a?(String) && json.include?(MARKER)

        JSON.parse(json)
      rescue JSON::ParserError
        nil
      end

      def removed?(reply)
        reply == true || (reply.is_a?(Integer) && reply.positive?)
      end

      # Clears `key` (a queue list or a sorted set) with `clear` (Sidekiq's own clear), then
      # frees the locks of the jobs that were in it.
      def clearing(key, sorted:)
        aside = "redis_unique:clearing:#{SecureRandom.hex(8)}"
        moved = ::Sidekiq.redis { |conn| Connection.invoke(conn, ["EVAL", RENAME_SCRIPT, "2", key, aside], nil) }
        result = yield
        return result unless moved.to_i == 1

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
        result
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

    # SortedEntry#delete (Delete on the Scheduled, Retries and Dead pages) goes through the
    # set's delete_by_value or delete_by_jid; SortedEntry#kill (Kill, Kill All) moves the
    # job to the dead set, where the job is over.
    module SortedEntryKill
      def kill
        @redis_unique_removed = false
        result = super
        Deleted.free(item) if @redis_unique_removed
        result
      end

      private

      # Sidekiq's remove_job yields the payload only when it took it out of the set.
      def remove_job(*args)
        super do |message|
          @redis_unique_removed = true
          yield message
        end
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
        Deleted.clearing("queue:#{name}", sorted: false) { super }
      end
    end

    ::Sidekiq::JobRecord.prepend(JobRecordDeletion)
    ::Sidekiq::SortedEntry.prepend(SortedEntryKill)
    ::Sidekiq::JobSet.prepend(JobSetDeletion)
    ::Sidekiq::Queue.prepend(QueueDeletion)
  end
end
