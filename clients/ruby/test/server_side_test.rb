# frozen_string_literal: true

require_relative "test_helper"

# Real Sidekiq processes (two, 8 threads each) performing the jobs of test/app/jobs.rb:
# when each lock type takes and frees its lock, retries, death, and the server-side
# conflict strategies.
class ServerSideTest < Minitest::Test
  include TestHelpers

  def setup
    @workers = TestSuite.workers
  end

  def worker_logs
    @workers.map(&:log).join
  end

  def identities
    @workers.map(&:identity)
  end

  def test_until_executing_frees_the_lock_when_the_job_starts
    jid = UntilExecutingDefaultJob.perform_async(token, { "hold" => true })
    digest = digest_of(UntilExecutingDefaultJob, token, { "hold" => true })
    wait_events("start")
    assert_equal [], client.locked_by(digest)
    dup = UntilExecutingDefaultJob.set(queue: "parked").perform_async(token, { "hold" => true })
    assert dup, "a duplicate may be enqueued while the first one runs"
    release
    assert_equal [jid], wait_events("done").map { |e| e["jid"] }
  end

  def test_until_executed_holds_until_success_with_the_worker_as_owner
    jid = UntilExecutedDefaultJob.perform_async(token, { "hold" => true })
    digest = digest_of(UntilExecutedDefaultJob, token, { "hold" => true })
    wait_events("start")
    holder = client.holders(digest).first
    assert_equal jid, holder.jid
    assert_includes identities, holder.owner, "while it runs, the lock's owner is the Sidekiq process"
    assert_nil UntilExecutedDefaultJob.perform_async(token, { "hold" => true })
    release
    wait_events("done")
    wait_until(message: "lock freed after success") { client.locked_by(digest).empty? }
  end

  # A retry of 10 minutes, moved to its queue by the test: with a retry of a second, the
  # scheduler could run it again (and free its lock) before this test looked at it.
  def test_until_executed_keeps_its_lock_through_retries
    jid = UntilExecutedRetryLaterJob.perform_async(token, { "fail" => 1 })
    digest = digest_of(UntilExecutedRetryLaterJob, token, { "fail" => 1 })
    wait_events("fail")
    wait_until(message: "job in the retry set") { Sidekiq::RetrySet.new.any? { |j| j.jid == jid } }
    holder = client.holders(digest).first
    assert_equal jid, holder.jid
    assert_equal RedisUnique::Sidekiq::QUEUED_OWNER, holder.owner, "no process owns a job waiting in the retry set"
    assert_nil UntilExecutedRetryLaterJob.perform_async(token, { "fail" => 1 }), "still unique while in retry"
    enqueue_now("retry")
    wait_events("done")
    wait_until(message: "lock freed after the successful retry") { client.locked_by(digest).empty? }
  end

  def test_until_executed_lock_is_freed_when_the_job_dies
    jid = UntilExecutedDiesJob.perform_async(token, { "fail" => 1 })
    digest = digest_of(UntilExecutedDiesJob, token, { "fail" => 1 })
    wait_events("fail")
    wait_until(message: "lock freed by the death handler") { client.locked_by(digest).empty? }
    assert(Sidekiq::DeadSet.new.any? { |j| j.jid == jid })
  end

  def test_until_expired_keeps_the_lock_after_the_run_until_its_ttl
    # A lease of 8 s from the push (the class's 3 s could end before a slow machine ran the job)
    jid = UntilExpiredDefaultJob.set(lock_ttl: 8).perform_async(token, {})
    digest = digest_of(UntilExpiredDefaultJob, token, {})
    wait_events("done")
    assert_equal [jid], client.locked_by(digest)
    assert_nil UntilExpiredDefaultJob.perform_async(token, {})
    wait_until(message: "lock expired") { client.locked_by(digest).empty? }
    assert UntilExpiredDefaultJob.set(queue: "parked").perform_async(token, {})
  end

  # while_executing: the second job meets the running one's lock when it starts.
  def start_while_executing(klass, opts = { "hold" => "all" })
    a = klass.perform_async(token, opts)
    wait_events("start")
    run_key = "#{digest_of(klass, token, opts)}:RUN"
    holder = client.holders(run_key).first
    assert_equal a, holder.jid
    assert_equal "while_executing", holder.type
    assert_includes identities, holder.owner
    b = klass.perform_async(token, opts)
    assert b, "while_executing takes no lock at enqueue"
    [a, b, run_key]
  end

  %w[default log replace].each do |strategy|
    define_method("test_while_executing_on_conflict_#{strategy}_logs_and_drops") do
      klass = Object.const_get(TestJobs.class_name("while_executing", strategy == "default" ? nil : strategy))
      a, b, run_key = start_while_executing(klass)
      wait_until(message: "conflict logged") { worker_logs =~ /conflict, not performed: #{klass.name} jid=#{b}.*held by jid #{a}/ }
      release
      wait_events("done")
      wait_until(message: "run lock freed") { client.locked_by(run_key).empty? }
      assert_equal [a], events.select { |e| e["event"] == "start" }.map { |e| e["jid"] }
    end
  end

  def test_while_executing_on_conflict_raise_retries_the_duplicate
    a, b, = start_while_executing(WhileExecutingRaiseJob)
    wait_until(message: "duplicate in the retry set") do
      Sidekiq::RetrySet.new.find { |j| j.jid == b }&.item&.fetch("error_class", nil) == "RedisUnique::Conflict"
    end
    release
    wait_events("done")
    enqueue_now("retry")
    assert_equal [a, b], wait_events("done", 2).map { |e| e["jid"] }
  end

  def test_while_executing_on_conflict_reject_sends_the_duplicate_to_the_dead_set
    a, b, = start_while_executing(WhileExecutingRejectJob)
    wait_until(message: "duplicate in the dead set") { Sidekiq::DeadSet.new.any? { |j| j.jid == b } }
    release
    assert_equal [a], wait_events("done").map { |e| e["jid"] }
  end

  def test_while_executing_on_conflict_reschedule
    a, b, = start_while_executing(WhileExecutingRescheduleJob)
    copy = wait_until(message: "rescheduled copy") { Sidekiq::ScheduledSet.new.find { |j| j.args.first == token } }
    refute_equal b, copy.jid
    release
    wait_events("done")
    enqueue_now("schedule")
    first, last = wait_events("done", 2).map { |e| e["jid"] }
    assert_equal a, first
    # The copy found above, or (when the scheduler ran that copy before the
    # release) a copy it rescheduled in turn: either way a copy, never b itself.
    refute_equal b, last
    wait_until(message: "#{last} logged as a rescheduled copy") do
      worker_logs.include?("conflict, rescheduled in 1.0s as jid #{last}:")
    end
  end

  def test_while_executing_lock_timeout_waits_natively_and_never_overlaps
    opts = { "hold" => "all", "running" => true }
    jids = Array.new(3) { WhileExecutingTimeoutJob.perform_async(token, opts) }
    wait_events("start")
    waiting = wait_until(message: "two jobs blocked in UNIQUE.LOCK WAIT") do
      n = conn.call("INFO", "unique")[/unique_waiting:(\d+)/, 1].to_i
      n >= 2 ? n : nil
    end
    assert_operator waiting, :>=, 2
    release
    done = wait_events("done", 3)
    assert_equal jids.sort, done.map { |e| e["jid"] }.sort
    assert_equal "1", conn.call("GET", "maxrunning:#{token}"), "never more than one at a time"
  end

  def test_until_and_while_executing_frees_the_until_lock_and_holds_the_run_lock
    opts = { "hold" => "all" }
    a = UntilAndWhileExecutingDefaultJob.perform_async(token, opts)
    digest = digest_of(UntilAndWhileExecutingDefaultJob, token, opts)
    wait_events("start")
    assert_equal [], client.locked_by(digest), "the until lock is freed when the job starts"
    assert_equal [a], client.locked_by("#{digest}:RUN")
    b = UntilAndWhileExecutingDefaultJob.perform_async(token, opts)
    assert b, "a duplicate may be enqueued while the first runs"
    wait_until(message: "the duplicate meets the run lock") { worker_logs =~ /conflict, not performed: \S+ jid=#{b}/ }
    release
    wait_events("done")
    wait_until(message: "run lock freed") { client.locked_by("#{digest}:RUN").empty? }
  end

  def test_per_side_on_conflict
    opts = { "hold" => "all" }
    parked = UntilAndWhileExecutingPerSideJob.set(queue: "parked")
    assert parked.perform_async(token, opts)
    assert_nil parked.perform_async(token, opts)
    assert(Sidekiq::DeadSet.new.any? { |j| j.args.first == token }, "client side: reject")
    a = UntilAndWhileExecutingPerSideJob.perform_async(token, opts)
    wait_events("start")
    UntilAndWhileExecutingPerSideJob.perform_async(token, opts)
    wait_until(message: "server side: reschedule") { Sidekiq::ScheduledSet.new.find { |j| j.args.first == token } }
    release
    enqueue_now("schedule")
    first, last = wait_events("done", 2).map { |e| e["jid"] }
    assert_equal a, first
    # The copy rescheduled above, or (on a busy machine, when the scheduler
    # ran it before the release) the copy it rescheduled in turn: a job of the
    # same token that is not the original.
    refute_equal a, last
    wait_until(message: "#{last} logged as a rescheduled copy") do
      worker_logs.include?("conflict, rescheduled in 1.0s as jid #{last}:")
    end
  end
end
