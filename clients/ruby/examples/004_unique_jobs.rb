# frozen_string_literal: true

# Seed 004, sidekiq-unique-jobs v9: the same options, the same digest, on native locks.
# A report for an account is enqueued at most once until it has run; a duplicate is
# logged with the jid that holds the lock (and counted in UNIQUE.METRICS).
require "redis_unique/sidekiq"
require "json"

class AccountReportJob
  include(defined?(Sidekiq::Job) ? Sidekiq::Job : Sidekiq::Worker)

  sidekiq_options lock: :until_executed,
                  lock_ttl: 600,          # seconds; the lock cannot outlive this
                  on_conflict: :log,
                  lock_info: true         # META also keeps the full args

  def perform(account_id, hold_key = nil)
    Sidekiq.redis { |c| RedisUnique::Connection.new(c).blocking_call(10, "BLPOP", hold_key, 10) } if hold_key
    Sidekiq.redis { |c| c.call("RPUSH", "examples:reports", JSON.generate([account_id, jid])) }
  end
end
