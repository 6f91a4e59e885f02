# frozen_string_literal: true

require_relative "test_helper"
require_relative "../examples/005_fair_sharing"

# Fair sharing with real Sidekiq processes: the README's RenderReportJob (one limit of 8,
# at most 4 of one account, a "pro" account weighing 3) run by two processes of 30
# threads for three accounts that differ in job length and arrival rate:
#
#   account  plan  job     arrives      demand (slots)   first come, first served   fair
#   long     free  0.8 s   10 a second  8                ~3.4                       2
#   short    free  0.15 s  30 a second  4.5              ~1.9                       2
#   pro      pro   0.3 s   20 a second  6                ~2.6                       4 (its weight gives 4.8; its limit 4)
#
# Demand is far above the 8 slots, and the processes have more threads than the jobs in
# flight, so that every job waits for its slot in Redis (lock_timeout), where the module
# serves them. Under first come, first served the slots would split as arrival rate x job
# length; with groups, each account holds its weighted share of the slots held now,
# capped by its group limit, whatever its jobs' length: 2, 2 and 4.
#
# Judged on the server's state, sampled with UNIQUE.WAITERS key GROUPS (per group:
# waiting and holding, one atomic reply): in every sample no account holds more than 4
# and all hold at most 8; in the samples where all three accounts wait (contended),
# the limit is saturated and the mean holding of each account is within 0.25 slot of its
# fair share; every job ran.
class FairSharingTest < Minitest::Test
  include TestHelpers

  LIMIT = 8
  GROUP_LIMIT = 4
  # account => [plan, job seconds, jobs per tick of 0.1 s]
  TENANTS = { "long" => ["free", 0.8, 1], "short" => ["free", 0.15, 3], "pro" => ["pro", 0.3, 2] }.freeze
  FAIR = { "long" => 2, "short" => 2, "pro" => 4 }.freeze
  TICKS = 15
  TOLERANCE = 0.25

  def test_accounts_hold_their_weighted_share_of_one_limit
    queue = "fair-#{token}"
    accounts = TENANTS.keys.to_h { |name| [name, "#{name}-#{token}"] }
    total = TENANTS.values.sum { |_, _, per_tick| per_tick } * TICKS
    sidekiqs = Array.new(2) { TestSuite.start_sidekiq(queues: [queue], concurrency: 30) }
    run_key = RedisUnique::Sidekiq.digest_for({ "class" => "RenderReportJob", "queue" => queue, "args" => [] },
                                              RenderReportJob) + ":RUN"

    # Arrivals at each account's rate, on a schedule of ticks (not after each other's pushes).
    pusher = Thread.new do
      start = Process.clock_gettime(Process::CLOCK_MONOTONIC)
      TICKS.times do |tick|
        TENANTS.each do |name, (plan, seconds, per_tick)|
          per_tick.times do |i|
            RenderReportJob.set(queue: queue).perform_async(accounts[name], plan, "#{tick}.#{i}", seconds)
          end
        end
        pause = start + (tick + 1) * 0.1 - Process.clock_gettime(Process::CLOCK_MONOTONIC)
        sleep pause if pause.positive?
      end
    end

    samples = []
    done = 0
    wait_until(timeout: 120, interval: 0.01, message: "#{total} reports rendered (#{done} so far)") do
      groups = client.waiters(run_key, groups: true).to_h { |g| [g.group, g] }
      samples << groups
      done = conn.call("LRANGE", "examples:reports:done", 0, -1).count { |e| JSON.parse(e)[0].end_with?(token) }
      done == total && !pusher.alive?
    end
    pusher.value

    by_account = accounts.invert
    samples.each do |groups|
      assert_operator groups.values.sum(&:holding), :<=, LIMIT, "never more than the limit: #{groups.values}"
      groups.each_value do |g|
        assert_includes by_account, g.group, "every holder and waiter has its account as its group"
        assert_operator g.holding, :<=, GROUP_LIMIT, "no account over its group limit: #{groups.values}"
      end
    end
    contended = samples.select { |groups| accounts.values.all? { |a| groups[a]&.waiting.to_i.positive? } }
    assert_operator contended.size, :>=, 20, "enough samples with all three accounts waiting"
    saturated = contended.select { |groups| groups.values.sum(&:holding) == LIMIT }
    assert_operator saturated.size, :>=, contended.size * 0.9, "work-conserving: a waiting account gets a free slot"
    shares = accounts.to_h do |name, account|
      [name, saturated.sum { |groups| groups[account].holding }.fdiv(saturated.size)]
    end
    puts "\nfair sharing (Sidekiq #{Sidekiq::VERSION}): #{samples.size} samples, #{contended.size} with all " \
         "accounts waiting, #{saturated.size} saturated; mean slots held #{shares.transform_values { |v| v.round(2) }}"
    FAIR.each do |name, fair|
      assert_in_delta fair, shares[name], TOLERANCE, "#{name}'s slots held while all wait: #{shares}"
    end

    rendered = conn.call("LRANGE", "examples:reports:done", 0, -1).map { |e| JSON.parse(e) }
                   .select { |account, _| account.end_with?(token) }
    TENANTS.each do |name, (_, _, per_tick)|
      assert_equal per_tick * TICKS, rendered.count { |account, _| account == accounts[name] },
                   "every report of #{name} rendered: nothing starves"
    end
    assert_equal total, rendered.uniq.size, "each once"
    # A job records its report before the middleware releases its slot: wait for the release.
    wait_until(message: "the last slots freed") { client.locked_by(run_key).empty? }
  ensure
    pusher&.kill
    (sidekiqs || []).each { |p| TestSuite.stop_sidekiq(p) }
  end
end
