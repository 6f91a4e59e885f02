# frozen_string_literal: true

require_relative "test_helper"

# Tenants take turns at one slot, with a real Sidekiq process: the test holds a key of
# lock_limit 1 while jobs queue in a known order, each confirmed waiting in the server
# before the next is pushed, then frees it; each job records its name when it runs
# (TurnJob: lock_group the tenant, its name's first letter; FifoTurnJob: the same jobs
# without a group, in arrival order). Two shapes:
# - one tenant's backlog queued first: A1 A2 A3 B1 B2 C1 run A1 B1 C1 A2 B2 A3 with groups,
#   in arrival order without;
# - short jobs (0.05 s): six of A, then one of B: B runs second with groups, seventh without.
class TurnsTest < Minitest::Test
  include TestHelpers

  SHAPES = {
    "backlog" => [%w[A1 A2 A3 B1 B2 C1], 0.2, %w[A1 B1 C1 A2 B2 A3]],
    "short" => [%w[A1 A2 A3 A4 A5 A6 B1], 0.05, %w[A1 B1 A2 A3 A4 A5 A6]]
  }.freeze

  SHAPES.each do |shape, (jobs, seconds, turns)|
    define_method("test_tenants_take_turns_at_one_slot_#{shape}") do
      queue = "turns-#{token}"
      sidekiq = TestSuite.start_sidekiq(queues: [queue], concurrency: jobs.size)
      [[TurnJob, turns], [FifoTurnJob, jobs]].each do |job, expected|
        key = "turns:#{job}:#{token}"
        run_key = RedisUnique::Sidekiq.digest_for({ "class" => job.name, "queue" => queue, "args" => [key, "", 0] },
                                                  job) + ":RUN"
        refute_nil client.lock(run_key, "gate", limit: 1)
        jobs.each_with_index do |name, n|
          job.set(queue: queue).perform_async(key, name, seconds)
          wait_until(timeout: 60, message: "#{name} to wait") { client.waiters(run_key) == n + 1 }
        end
        assert client.unlock(run_key, "gate")
        wait_until(timeout: 60, message: "every job to run") { conn.call("LLEN", "#{key}:ran") == jobs.size }
        assert_equal expected, conn.call("LRANGE", "#{key}:ran", 0, -1), "#{shape}, #{job}"
        wait_until(message: "the slot freed") { client.holders(run_key).empty? && client.waiters(run_key).zero? }
      end
    ensure
      TestSuite.stop_sidekiq(sidekiq) if sidekiq
    end
  end
end
