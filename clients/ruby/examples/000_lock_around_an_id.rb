# frozen_string_literal: true

# Seeds 000/001, "lock around an ID": one sync per user at a time. A second sync of the
# same user that arrives while one runs is rescheduled (on_conflict: :reschedule), so
# nothing is lost and nothing runs twice. Other users run in parallel.
#
#   SyncUserEventsJob.perform_async(1)  # runs
#   SyncUserEventsJob.perform_async(2)  # runs, in parallel
#   SyncUserEventsJob.perform_async(1)  # user 1 is busy: rescheduled in 2 s
#
# Replaces: KEYS users:1:processing:* + SETEX + DEL (racy, O(keyspace)).
require "redis_unique/sidekiq"
require "json"

class SyncUserEventsJob
  include(defined?(Sidekiq::Job) ? Sidekiq::Job : Sidekiq::Worker)

  sidekiq_options lock: :while_executing,                 # held while perform runs
                  lock_args_method: ->(args) { [args.first] }, # the lock is around the user id
                  on_conflict: :reschedule, schedule_in: 2

  def perform(user_id, work_seconds = 0.2)
    Sidekiq.redis { |c| c.call("RPUSH", "examples:sync", JSON.generate(["start", user_id, jid, Time.now.to_f])) }
    sleep work_seconds # ... process this user's events
    Sidekiq.redis { |c| c.call("RPUSH", "examples:sync", JSON.generate(["done", user_id, jid, Time.now.to_f])) }
  end
end
