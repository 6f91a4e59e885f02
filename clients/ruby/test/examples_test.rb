# frozen_string_literal: true

require_relative "test_helper"
Dir[File.expand_path("../examples/*.rb", __dir__)].sort.each { |f| require f }

# The four seeds, as the example job files in examples/, run by real Sidekiq processes.
class ExamplesTest < Minitest::Test
  include TestHelpers

  def setup
    TestSuite.workers
  end

  def list(key)
    conn.call("LRANGE", key, 0, -1).map { |e| JSON.parse(e) }
  end

  # 000/001: one sync per user; a second sync of a busy user is rescheduled.
  def test_000_lock_around_an_id
    conn.call("DEL", "examples:sync")
    # A first sync of 4 s: the second one (c) must start while it runs, and so must the copy
    # rescheduled 2 s later if this test misses it in the schedule (a copy meeting the first
    # sync is rescheduled again, and seen then); a slow machine can take a second for either.
    a = SyncUserEventsJob.perform_async(1, 4.0)
    wait_until(message: "user 1 started") { list("examples:sync").any? { |e| e[2] == a } }
    b = SyncUserEventsJob.perform_async(2, 0.2)
    c = SyncUserEventsJob.perform_async(1, 0.2)
    copy = wait_until(message: "the second sync of user 1 rescheduled") do
      Sidekiq::ScheduledSet.new.find { |j| j.klass == "SyncUserEventsJob" && j.args.first == 1 }
    end
    refute_equal c, copy.jid
    wait_until(message: "user 2 ran while user 1 was busy") { list("examples:sync").any? { |e| e[0] == "done" && e[2] == b } }
    refute(list("examples:sync").any? { |e| e[2] == c }, "never two syncs of user 1 at once")
    wait_until(message: "the first sync of user 1 done") { list("examples:sync").any? { |e| e[0] == "done" && e[2] == a } }
    # The copy runs once it is queued, unless a worker takes it before the first sync's lock is
    # released (the job writes "done" just before the middleware unlocks): then it is
    # rescheduled again, as a new copy. Queue whichever copy is scheduled until one runs.
    wait_until(message: "the rescheduled sync ran") do
      Sidekiq::ScheduledSet.new.each { |j| j.add_to_queue if j.klass == "SyncUserEventsJob" && j.args.first == 1 }
      list("examples:sync").any? { |e| e[0] == "done" && e[1] == 1 && e[2] != a }
    end
    starts = list("examples:sync").select { |e| e[1] == 1 }
    # user 1's runs never overlap: each start comes after the previous done
    assert_equal %w[start done start done], starts.map(&:first)
  end

  # 002: limited capacity, never more than 3 running, all done.
  def test_002_limited_capacity
    conn.call("DEL", "examples:export:seen", "examples:export:running")
    jids = Array.new(9) { ExportBatchJob.perform_async(0.3) }
    assert_equal 9, jids.compact.size
    wait_until(message: "9 exports done") do
      list("examples:export:seen").size == 9 && conn.call("GET", "examples:export:running").to_i.zero?
    end
    seen = list("examples:export:seen")
    assert_equal 3, seen.max, "never more than 3 at once (and the limit is used)"
  end

  # 003: lockable job: locked from enqueue to the end of its run; a dependency lock.
  def test_003_lockable_job
    order = "o#{rand(1 << 30)}"
    hold = "hold:#{order}"
    conn.call("DEL", "examples:orders")
    ship = ShipOrderJob.perform_async(order, hold)
    assert_equal [ship], ShipOrderJob.locked_by(order)
    assert_nil ShipOrderJob.perform_async(order, hold), "locked from enqueue"
    assert_equal [ship], client.locked_by("order:#{order}:shipping")
    assert_equal "dependency", client.holders("order:#{order}:shipping").first.type
    cancel = CancelUnshippedJob.perform_async(order)
    wait_until(message: "cancel retried while shipping holds the order") do
      Sidekiq::RetrySet.new.find { |j| j.jid == cancel }&.item&.fetch("error_class", nil) == "RedisUnique::Sidekiq::DependencyLocked"
    end
    assert_equal [ship], ShipOrderJob.locked_by(order), "locked while it runs"
    conn.call("RPUSH", hold, "go")
    wait_until(message: "shipped") { list("examples:orders").include?(["shipped", order]) }
    wait_until(message: "locks freed on success") do
      ShipOrderJob.locked_by(order).empty? && client.locked_by("order:#{order}:shipping").empty?
    end
    # Retried every second (sidekiq_retry_in 1): the poller may have taken it from the retry
    # set already (running, or run), and then it is not there to move.
    Sidekiq::RetrySet.new.find { |j| j.jid == cancel }&.add_to_queue
    wait_until(message: "cancelled after shipping") { list("examples:orders").include?(["cancelled", order]) }
    assert_equal [["shipped", order], ["cancelled", order]], list("examples:orders").select { |e| e[1] == order }
  end

  # 004: unique jobs, v9 options; duplicates logged and counted.
  def test_004_unique_jobs
    account = rand(1 << 30)
    hold = "hold:#{account}"
    digest = digest_of(AccountReportJob, account, hold)
    denied = client.metrics.dig("types", "until_executed", "denied").to_i
    a = AccountReportJob.perform_async(account, hold)
    3.times { assert_nil AccountReportJob.perform_async(account, hold) }
    assert_equal denied + 3, client.metrics.dig("types", "until_executed", "denied").to_i
    h = client.holders(digest).first
    assert_equal a, h.jid
    assert_in_delta 600, h.ttl, 5
    assert_equal [account, hold], h.meta["args"], "lock_info keeps the args in META"
    conn.call("RPUSH", hold, "go")
    wait_until(message: "report done, lock freed") do
      list("examples:reports").include?([account, a]) && client.locked_by(digest).empty?
    end
    b = AccountReportJob.perform_async(account)
    assert b, "enqueued again once the first has run"
  end
end
