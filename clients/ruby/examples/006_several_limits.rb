# frozen_string_literal: true

# Several limits held while a job runs, taken in one atomic grant: syncs call a partner API
# that allows 10 calls at once and 50 new ones a second in all, and each account may run at
# most 2 syncs at once. A sync starts only when its account and the whole both have room;
# until then it waits in Redis (lock_timeout), holding nothing, so no two jobs can each
# hold what the other waits for.
#
#   SyncAccountJob.perform_async("acme", 17)   # account, batch
require "redis_unique/sidekiq"
require "json"

class SyncAccountJob
  include(defined?(Sidekiq::Job) ? Sidekiq::Job : Sidekiq::Worker)

  sidekiq_options lock: :while_executing,   # the limits are held while perform runs
                  lock_ttl: 60,              # a lease on each key, renewed while it runs
                  lock_timeout: 300,         # wait up to 5 minutes for every key at once, in Redis
                  lock_limits: lambda { |args|
                    { "{partner}:account:#{args[0]}" => 2,                     # 2 at once per account
                      "{partner}:all" => { limit: 10,                         # 10 at once in all
                                           rate: { limit: 50, per: :second } } } # and 50 a second
                  }

  def perform(account, batch, seconds = 0.2)
    sleep seconds # ... call the partner API
    Sidekiq.redis { |c| c.call("RPUSH", "examples:syncs:done", JSON.generate([account, batch, jid])) }
  end
end
