# frozen_string_literal: true

# Seed 002, GitLab's limited-capacity worker: never more than 3 of these jobs run at
# once, whatever the number of Sidekiq processes and threads. The others wait for a
# slot inside Redis (lock_timeout: the module's native WAIT, first come first served)
# instead of being re-enqueued by a cron job.
#
#   10.times { ExportBatchJob.perform_async }
require "redis_unique/sidekiq"

class ExportBatchJob
  include(defined?(Sidekiq::Job) ? Sidekiq::Job : Sidekiq::Worker)

  sidekiq_options lock: :while_executing,
                  lock_limit: 3,                      # max_running_jobs
                  lock_args_method: ->(_args) { [] }, # one limit for the whole class
                  lock_timeout: 60                    # wait up to 60 s for a slot

  def perform(work_seconds = 0.3)
    Sidekiq.redis do |c|
      now = c.call("INCR", "examples:export:running").to_i
      c.call("RPUSH", "examples:export:seen", now.to_s)
    end
    sleep work_seconds # ... perform_work
  ensure
    Sidekiq.redis { |c| c.call("DECR", "examples:export:running") }
  end
end
