# frozen_string_literal: true

# Fair sharing of one limit among tenants: a report cluster renders 8 reports at once
# for all accounts together, at most 4 of any one account, and an account that queues
# hundreds of long reports does not make the others wait behind them. Jobs over the
# limit wait for a slot inside Redis; a freed slot goes to the waiting account that
# holds the fewest slots for its weight (a "pro" account weighs 3), first come first
# served within an account.
#
#   RenderReportJob.perform_async("acme", "free", 17)   # account, plan, report id
require "redis_unique/sidekiq"
require "json"

class RenderReportJob
  include(defined?(Sidekiq::Job) ? Sidekiq::Job : Sidekiq::Worker)

  sidekiq_options lock: :while_executing,                # a slot held while perform runs
                  lock_args_method: ->(_args) { [] },     # one limit for the whole class
                  lock_limit: 8,                          # 8 reports at once, all accounts together
                  lock_timeout: 300,                      # the others wait up to 5 minutes, in Redis
                  lock_group: ->(args) { args[0] },       # the tenant: the account
                  lock_group_limit: 4,                    # at most 4 of one account at once
                  lock_group_weight: ->(args) { args[1] == "pro" ? 3 : 1 }

  def perform(account, _plan, report_id, seconds = 0.5)
    sleep seconds # ... render the report on the cluster
    Sidekiq.redis { |c| c.call("RPUSH", "examples:reports:done", JSON.generate([account, report_id])) }
  end
end
