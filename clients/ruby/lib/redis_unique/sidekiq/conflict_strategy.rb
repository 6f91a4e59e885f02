# frozen_string_literal: true

# The on_conflict strategies (log, raise, reject, replace, reschedule), run when a
# job meets its lock held by another job. (RedisUnique::Conflict is the error that
# `raise` raises; this is what decides.)

module RedisUnique
  module Sidekiq
    # What happens to a job whose lock is held by another: on_conflict.
    class ConflictStrategy
      # `strategy` forces one (while_executing_reject's server side is always reject).
      def initialize(job, side, key, strategy: nil)
        @job = job
        @side = side
        @key = key
        @forced = strategy
      end

      def item
        @job.item
      end

      def strategy
        return @forced if @forced

        conf = @job.option("on_#{@side}_conflict") || @job.option("on_conflict")
        conf = conf[@side.to_s] || conf[@side] if conf.is_a?(Hash)
        conf = conf&.to_s
        return nil if conf.nil? || conf.empty?
        return conf if STRATEGIES.include?(conf)

        Sidekiq.logger.warn("redis-unique: unknown on_conflict #{conf.inspect} for #{item["class"]}, logging instead")
        nil
      end

      def holders
        @holders ||= @job.client.locked_by(@key)
      end

      # Applies the strategy; returns what the middleware returns (nil: not pushed / not run).
      def resolve(&block)
        case strategy
        when "raise" then raise RedisUnique::Conflict.new(item, holders)
        when "reject" then reject
        when "reschedule" then reschedule
        when "replace"
          return replace(&block) if @side == :client && block

          log("replace applies to the client side only")
        else log
        end
        nil
      end

      def describe
        "#{item["class"]} jid=#{item["jid"]} args=#{JSON.generate(item["args"])[0, 200]}: " \
          "#{@job.lock_type} lock #{@key} held by jid #{holders.empty? ? "(none now)" : holders.join(", ")}"
      end

      def log(note = nil)
        verb = @side == :client ? "not enqueued" : "not performed"
        Sidekiq.logger.warn("redis-unique: conflict, #{verb}: #{describe}#{note ? " (#{note})" : ""}")
      end

      def reject
        Sidekiq.logger.warn("redis-unique: conflict, sent to the dead set: #{describe}")
        ::Sidekiq::DeadSet.new.kill(JSON.generate(item), notify_failure: false)
      end

      def reschedule
        delay = Float(@job.option("schedule_in") || 5)
        jid = ::Sidekiq::Client.push(
          "class" => item["class"], "args" => item["args"], "queue" => item["queue"],
          "at" => Time.now.to_f + delay, RESCHEDULED => true
        )
        Sidekiq.logger.info("redis-unique: conflict, rescheduled in #{delay}s as jid #{jid}: #{describe}")
      end

      def replace
        client = @job.client
        removed = holders.select do |holder_jid|
          queue = client.holders(@key).find { |h| h.jid == holder_jid }&.meta&.fetch("queue", nil) || item["queue"]
          ConflictStrategy.delete_job(client.connection, holder_jid, queue) && client.unlock(@key, holder_jid)
        end
        if removed.empty?
          log("replace: the holder is not queued or scheduled")
          return nil
        end
        Sidekiq.logger.info("redis-unique: replaced job(s) #{removed.join(", ")} by #{item["jid"]} (#{@key})")
        return yield if @job.take(@key, wait: false)

        log("replace: the lock was taken again")
        nil
      end

      # Removes the job `jid` from queue:<queue>, the schedule or the retry set.
      # (Only this strategy reads queues: the job that holds the lock must be found.)
      def self.delete_job(conn, jid, queue)
        needle = %("jid":"#{jid}")
        if queue
          qkey = "queue:#{queue}"
          start = 0
          loop do
            page = conn.call("LRANGE", qkey, start, start + 499)
            break if page.nil? || page.empty?

            found = page.find { |payload| payload.include?(needle) }
            return conn.call("LREM", qkey, 1, found).to_i.positive? if found

            start += 500
          end
        end
        %w[schedule retry].each do |set|
          cursor = "0"
          loop do
            cursor, entries = conn.call("ZSCAN", set, cursor, "MATCH", "*#{needle}*", "COUNT", 1000)
            entries = entries.each_slice(2).map(&:first) if entries.first.is_a?(String)
            entries = entries.map { |e| e.is_a?(Array) ? e.first : e }
            entries.each { |payload| return true if conn.call("ZREM", set, payload).to_i.positive? }
            break if cursor.to_s == "0"
          end
        end
        false
      end
    end
  end
end
