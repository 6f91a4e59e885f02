# frozen_string_literal: true

# Seed 003, sidekiq_lockable_job: an order's "shipped" webhook (ShipOrderJob) must be
# processed before its "cancel unshipped items" webhook (CancelUnshippedJob), although
# they are enqueued independently.
#
# - ShipOrderJob is locked from enqueue to the end of its run (lock: :until_executed),
#   and `locked_by` answers who holds it.
# - It also holds a dependency lock "order:<id>:shipping" (LIMIT 0: a counting lock, every
#   shipping job of the order counts) from enqueue until it succeeds:
#   `dependency_locks:` names the keys, RedisUnique::Sidekiq::Dependencies takes and frees them.
# - CancelUnshippedJob declares `depends_on:`: while any of those keys is held it raises
#   RedisUnique::Sidekiq::DependencyLocked, and Sidekiq retries it later.
require "redis_unique/sidekiq"
require "json"

class ShipOrderJob
  include(defined?(Sidekiq::Job) ? Sidekiq::Job : Sidekiq::Worker)

  sidekiq_options lock: :until_executed,
                  lock_args_method: ->(args) { [args.first] }, # unique per order
                  dependency_locks: ->(args) { ["order:#{args.first}:shipping"] }

  def perform(order_id, hold_key = nil)
    # a test (or a slow carrier API) can hold the job here
    Sidekiq.redis { |c| RedisUnique::Connection.new(c).blocking_call(10, "BLPOP", hold_key, 10) } if hold_key
    Sidekiq.redis { |c| c.call("RPUSH", "examples:orders", JSON.generate(["shipped", order_id])) }
  end

  # Who holds the lock of this order's shipping job (jids), per the module.
  def self.locked_by(order_id, queue: "default")
    digest = RedisUnique::Sidekiq.digest_for({ "class" => name, "queue" => queue, "args" => [order_id] }, self)
    RedisUnique::Sidekiq.client.locked_by(digest)
  end
end

class CancelUnshippedJob
  include(defined?(Sidekiq::Job) ? Sidekiq::Job : Sidekiq::Worker)

  sidekiq_options depends_on: ->(args) { ["order:#{args.first}:shipping"] }
  sidekiq_retry_in { 1 }

  def perform(order_id)
    Sidekiq.redis { |c| c.call("RPUSH", "examples:orders", JSON.generate(["cancelled", order_id])) }
  end
end
