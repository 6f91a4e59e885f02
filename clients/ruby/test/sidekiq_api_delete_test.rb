# frozen_string_literal: true

require_relative "test_helper"

# Sidekiq's API frees the locks of the jobs it deletes (what the web UI's Delete, Delete
# All, Clear and Kill buttons call), for the deleted jid only, and only when this call
# removed the job; a killed job frees what a dead one frees. Moving a job (Add to Queue,
# Retry Now, Retry All) keeps its lock for it. Each lock type on each path: the README's
# table "Removing and moving jobs".
class SidekiqApiDeleteTest < Minitest::Test
  include TestHelpers

  def parked
    "parked-#{token}"
  end

  def teardown
    Sidekiq::Queue.new(parked).clear
    [Sidekiq::ScheduledSet, Sidekiq::RetrySet, Sidekiq::DeadSet].each do |set|
      set.new.select { |e| e.args.first.to_s.start_with?(token) }.each(&:delete)
    end
  end

  # Pushes an until_executed job for `arg` to the parked queue (or the schedule with
  # `in:`); returns [jid, digest] with the lock held.
  def push(arg = token, klass: UntilExecutedDefaultJob, in: nil, queue: parked, lock_ttl: nil)
    delay = binding.local_variable_get(:in)
    setter = klass.set(queue: queue, **(lock_ttl ? { lock_ttl: lock_ttl } : {}))
    jid = delay ? setter.perform_in(delay, arg) : setter.perform_async(arg)
    digest = digest_of(klass, arg, queue: queue)
    assert_equal [jid], client.locked_by(digest), "pushed with its lock"
    [jid, digest]
  end

  def scheduled(jid)
    Sidekiq::ScheduledSet.new.find_job(jid) or flunk("#{jid} not scheduled")
  end

  # Puts the payload of a pushed job into `set` as Sidekiq's retry or death does (the
  # lock stays with the job).
  def move_to(set, jid, queue: parked)
    payload = conn.call("LRANGE", "queue:#{queue}", 0, -1).find { |p| JSON.parse(p)["jid"] == jid }
    conn.call("LREM", "queue:#{queue}", 1, payload)
    job = JSON.parse(payload).merge("retry_count" => 0, "failed_at" => Time.now.to_f, "error_class" => "RuntimeError",
                                    "error_message" => "failed on purpose")
    conn.call("ZADD", set, (Time.now.to_f + 3600).to_s, JSON.generate(job))
  end

  def test_job_record_delete_frees_its_lock_and_the_job_can_be_pushed_again
    jid, digest = push
    record = Sidekiq::Queue.new(parked).find_job(jid)
    assert record.delete
    assert_empty client.locked_by(digest)
    again = UntilExecutedDefaultJob.set(queue: parked).perform_async(token)
    assert again, "pushable again"
    assert_equal [again], client.locked_by(digest)
  end

  def test_a_job_another_process_removed_first_keeps_its_lock
    jid, digest = push
    record = Sidekiq::Queue.new(parked).find_job(jid)
    conn.call("LREM", "queue:#{parked}", 1, record.value) # fetched meanwhile
    refute record.delete
    assert_equal [jid], client.locked_by(digest), "not removed by this call: its lock is not touched"
  end

  def test_a_deleted_job_frees_only_its_own_jid
    jid, digest = push
    client.unlock(digest, jid)
    client.lock(digest, "another-job", ttl: 600)
    assert Sidekiq::Queue.new(parked).find_job(jid).delete
    assert_equal ["another-job"], client.locked_by(digest)
  ensure
    client.unlock(digest, "another-job") if digest
  end

  def test_queue_clear_frees_every_lock_and_keeps_other_queues
    held = Array.new(3) { |i| push("#{token}-#{i}") }
    other_jid, other = push("#{token}-other", queue: "#{parked}-other")
    Sidekiq::Queue.new(parked).clear
    assert_equal 0, Sidekiq::Queue.new(parked).size
    held.each { |_jid, digest| assert_empty client.locked_by(digest) }
    assert_equal [other_jid], client.locked_by(other)
  ensure
    Sidekiq::Queue.new("#{parked}-other").clear
  end

  def test_scheduled_entry_delete_and_scheduled_set_delete_by_jid
    jid, digest = push(in: 3600)
    assert scheduled(jid).delete
    assert_empty client.locked_by(digest)

    jid, digest = push("#{token}-2", in: 3600)
    entry = scheduled(jid)
    Sidekiq::ScheduledSet.new.delete(entry.score, jid)
    assert_empty client.locked_by(digest), "ScheduledSet#delete(score, jid)"

    jid, digest = push("#{token}-3", in: 3600)
    entry = scheduled(jid)
    Sidekiq::ScheduledSet.new.delete_by_jid(entry.score, jid)
    assert_empty client.locked_by(digest), "JobSet#delete_by_jid"

    jid, digest = push("#{token}-4", in: 3600)
    Sidekiq::ScheduledSet.new.fetch(scheduled(jid).score, jid).each(&:delete)
    assert_empty client.locked_by(digest), "SortedEntry#delete of a fetched entry (the web UI's)"
  end

  def test_clears_bomb_alias_frees_the_locks_too
    jid, digest = push
    Sidekiq::Queue.new(parked).💣
    refute_includes queue_jids(parked), jid
    assert_empty client.locked_by(digest), "Queue#💣"

    jid, digest = push("#{token}-set")
    move_to("schedule-#{token}", jid)
    Sidekiq::JobSet.new("schedule-#{token}").💣
    assert_empty client.locked_by(digest), "JobSet#💣"
  end

  def test_job_set_clear_frees_the_locks_of_the_set
    # a set of this test's own: JobSet#clear is the same code for schedule, retry and dead
    jid, digest = push
    move_to("schedule-#{token}", jid)
    set = Sidekiq::JobSet.new("schedule-#{token}")
    assert_equal 1, set.size
    set.clear
    assert_equal 0, set.size
    assert_empty client.locked_by(digest)
  end

  def test_retry_entry_delete_and_kill_free_the_lock
    jid, digest = push
    move_to("retry", jid)
    assert_equal [jid], client.locked_by(digest)
    entry = Sidekiq::RetrySet.new.find_job(jid)
    assert entry.delete
    assert_empty client.locked_by(digest)

    jid, digest = push("#{token}-kill")
    move_to("retry", jid)
    Sidekiq::RetrySet.new.find_job(jid).kill
    assert Sidekiq::DeadSet.new.find_job(jid), "killed: in the dead set"
    assert_empty client.locked_by(digest), "a killed job's lock is freed"
  end

  def test_moving_a_job_keeps_its_lock_for_it
    jid, digest = push(in: 3600)
    scheduled(jid).add_to_queue
    assert_equal [jid], queue_jids(parked), "Add to Queue"
    assert_equal [jid], client.locked_by(digest), "the same jid still holds the lock"

    jid2, digest2 = push("#{token}-retry")
    move_to("retry", jid2)
    Sidekiq::RetrySet.new.find_job(jid2).retry
    assert_includes queue_jids(parked), jid2
    assert_equal [jid2], client.locked_by(digest2), "Retry Now"
  end

  def test_until_expired_and_dependency_locks_are_freed_too
    jid, digest = push(klass: UntilExpiredDefaultJob)
    assert Sidekiq::Queue.new(parked).find_job(jid).delete
    assert_empty client.locked_by(digest), "until_expired (as v9)"

    jid = DependentDeleteJob.set(queue: parked).perform_async(token)
    assert_equal [jid], client.locked_by("dep:#{token}")
    assert Sidekiq::Queue.new(parked).find_job(jid).delete
    assert_empty client.locked_by("dep:#{token}")
    assert_empty client.locked_by(digest_of(DependentDeleteJob, token, queue: parked))
  end

  def test_jobs_without_a_lock_are_deleted_as_before
    jid = Sidekiq::Client.push("class" => "NoSuchJobClass", "queue" => parked, "args" => [token])
    assert Sidekiq::Queue.new(parked).find_job(jid).delete
    assert_equal 0, Sidekiq::Queue.new(parked).size
  end
  # A retry set of this test's own (a RetrySet, so that kill_all and retry_all are
  # Sidekiq's own on every version), holding only what the test puts there.
  def own_retry_set
    name = "retry-#{token}"
    Class.new(Sidekiq::RetrySet) do
      define_method(:initialize) { Sidekiq::SortedSet.instance_method(:initialize).bind_call(self, name) }
    end.new
  end

  def test_retry_and_dead_set_delete_and_delete_by_value
    jid, digest = push
    move_to("retry", jid)
    Sidekiq::RetrySet.new.delete(Sidekiq::RetrySet.new.find_job(jid).score, jid)
    assert_nil Sidekiq::RetrySet.new.find_job(jid)
    assert_empty client.locked_by(digest), "RetrySet#delete(score, jid)"

    jid, digest = push("#{token}-dead", klass: UntilExpiredDefaultJob, lock_ttl: 600)
    move_to("dead", jid)
    Sidekiq::DeadSet.new.delete(Sidekiq::DeadSet.new.find_job(jid).score, jid)
    assert_nil Sidekiq::DeadSet.new.find_job(jid)
    assert_empty client.locked_by(digest), "DeadSet#delete(score, jid), until_expired"

    jid, digest = push("#{token}-value")
    move_to("retry", jid)
    set = Sidekiq::RetrySet.new
    assert set.delete_by_value(set.name, set.find_job(jid).value)
    assert_empty client.locked_by(digest), "JobSet#delete_by_value"
  end

  # Each test that the README's table names is one of these two files'.
  def test_the_readme_table_names_tests_that_exist
    readme = File.read(File.expand_path("../README.md", __dir__))
    section = readme[/^### Removing and moving jobs.*?(?=^###? )/m] or flunk("no section in the README")
    names = section.scan(/`(test_\w+)`/).flatten.uniq
    defined = self.class.public_instance_methods.map(&:to_s) + WEB_TESTS
    assert_operator names.size, :>=, 20
    assert_empty names - defined, "named in the README's table, defined nowhere"
    rows = section.lines.grep(/^\| `/)
    assert_equal 11, rows.size, "rows"
    rows.each { |row| assert_match(/`test_\w+`\s*\|\s*$/, row, "each row names its tests") }
  end

  WEB_TESTS = File.read(File.expand_path("web_delete_browser_test.rb", __dir__)).scan(/def (test_\w+)/).flatten

  # The same paths on jobs that a Sidekiq process failed into the retry set (not moved there
  # by the test): Kill frees the lock; Retry Now keeps it through the run, until the job
  # succeeds.
  def test_kill_and_retry_now_of_jobs_a_sidekiq_process_failed
    TestSuite.workers
    killed = "#{token}-kill"
    opts = { "fail" => 1, "hold" => true }
    kill_jid = UntilExecutedRetryLaterJob.perform_async(killed, opts)
    retry_jid = UntilExecutedRetryLaterJob.perform_async(token, opts)
    release(killed)
    release(token)
    [kill_jid, retry_jid].each do |jid|
      wait_until(message: "#{jid} in the retry set") { Sidekiq::RetrySet.new.find_job(jid) }
    end
    kill_digest = digest_of(UntilExecutedRetryLaterJob, killed, opts)
    digest = digest_of(UntilExecutedRetryLaterJob, token, opts)
    assert_equal [kill_jid], client.locked_by(kill_digest), "a failed job keeps its lock in the retry set"

    Sidekiq::RetrySet.new.find_job(kill_jid).kill
    assert_empty client.locked_by(kill_digest), "Kill"

    Sidekiq::RetrySet.new.find_job(retry_jid).retry
    wait_events("start", 2)
    assert_equal [retry_jid], client.locked_by(digest), "Retry Now: held by the same jid while it runs again"
    assert_nil UntilExecutedRetryLaterJob.perform_async(token, opts), "no duplicate meanwhile"
    release(token)
    wait_events("done")
    wait_until(message: "freed once the retried job succeeded") { client.locked_by(digest).empty? }
  end

  def test_kill_all_frees_the_locks_of_the_killed_jobs
    set = own_retry_set
    held = Array.new(3) { |i| push("#{token}-#{i}") }
    held.each { |jid, _| move_to(set.name, jid) }
    set.kill_all # Sidekiq 7 and 8: ZPOPMIN and DeadSet#kill, no SortedEntry#kill
    assert_equal 0, set.size
    held.each do |jid, digest|
      assert Sidekiq::DeadSet.new.find_job(jid), "#{jid} in the dead set"
      assert_empty client.locked_by(digest), "Kill All frees #{jid}'s lock"
    end
  ensure
    conn.call("DEL", "retry-#{token}")
  end

  def test_retry_all_keeps_each_lock_for_its_job
    set = own_retry_set
    held = Array.new(2) { |i| push("#{token}-#{i}") }
    held.each { |jid, _| move_to(set.name, jid) }
    set.retry_all
    assert_equal held.map(&:first).sort, queue_jids(parked).sort
    held.each { |jid, digest| assert_equal [jid], client.locked_by(digest), "Retry All" }
  ensure
    conn.call("DEL", "retry-#{token}")
  end

  # A duplicate that on_conflict: reject sent to the dead set, its lock still held: Retry
  # All sends it back there, and returns (Sidekiq 6's own would retry it for ever).
  def test_dead_set_retry_all_returns_when_a_retried_job_is_rejected_again
    with_own_dead_set do
      jid, digest = push(klass: UntilExecutedRejectJob)
      assert_nil UntilExecutedRejectJob.set(queue: parked).perform_async(token), "the duplicate rejected"
      dead = Sidekiq::DeadSet.new
      assert_equal 1, dead.size, "the duplicate is dead"
      retrying = Thread.new { dead.retry_all }
      assert retrying.join(H::PATIENCE), "Retry All returned"
      assert_equal 1, dead.size, "rejected again: dead once"
      assert_equal [jid], queue_jids(parked), "the first copy queued, alone"
      assert_equal [jid], client.locked_by(digest)
    ensure
      retrying&.kill
    end
  end

  def test_a_dead_job_retried_after_a_duplicate_was_pushed_is_not_queued_twice
    jid, digest = push
    move_to("retry", jid)
    Sidekiq::RetrySet.new.find_job(jid).kill
    assert_empty client.locked_by(digest)
    again = UntilExecutedDefaultJob.set(queue: parked).perform_async(token)
    assert again, "pushable again once killed"
    Sidekiq::DeadSet.new.find_job(jid).retry
    assert_equal [again], queue_jids(parked), "the retried copy met the lock at its push (on_conflict: log)"
    assert_nil Sidekiq::DeadSet.new.find_job(jid), "Retry took it out of the dead set first, as Sidekiq does"
    assert_equal [again], client.locked_by(digest)
  end

  # Sidekiq's Queue#clear is UNLINK: a job pushed between moving the queue aside and that
  # UNLINK would be lost with its lock held. The clear is one script: every pushed job is
  # either still queued with its lock, or cleared with its lock freed.
  def test_clearing_a_queue_while_jobs_are_pushed_leaves_no_orphan_lock
    pushed = Thread::Queue.new
    stop = false
    pusher = Thread.new do
      i = 0
      until stop
        arg = "#{token}-#{i += 1}"
        pushed << [arg, UntilExecutedDefaultJob.set(queue: parked).perform_async(arg)]
      end
    end
    30.times do |round|
      wait_until(timeout: 30, message: "a job pushed before clear #{round}") { Sidekiq::Queue.new(parked).size.positive? }
      Sidekiq::Queue.new(parked).clear
    end
    stop = true
    pusher.join
    left = queue_jids(parked)
    jobs = Array.new(pushed.size) { pushed.pop }
    assert_operator jobs.size, :>=, 30
    orphans = jobs.reject { |_arg, jid| left.include?(jid) }
                  .select { |arg, jid| client.locked_by(digest_of(UntilExecutedDefaultJob, arg, queue: parked)).include?(jid) }
    assert_empty orphans, "cleared jobs whose lock is still held (of #{jobs.size} pushed)"
    left.each do |jid|
      arg = jobs.find { |_a, j| j == jid }&.first
      assert_equal [jid], client.locked_by(digest_of(UntilExecutedDefaultJob, arg, queue: parked)), "still queued, still locked"
    end
  ensure
    stop = true
    pusher&.join
  end

  # Each lock type on each path (the README's table): which jid holds the job's lock
  # (its digest) afterwards; the runtime lock (digest:RUN) is never held by a job that is
  # not running. until_expired's lease is set long (600 s) so that it cannot lapse here.
  EXPECTED = {
    # path => [held afterwards by until_executing, until_executed, until_and_while_executing, until_expired]
    queued_delete: %i[none none none none],
    scheduled_delete: %i[none none none none],
    retry_kill: %i[none none none jid],
    retry_retry: %i[jid jid jid jid],
    scheduled_add_to_queue: %i[jid jid jid jid],
    dead_delete: %i[none none none none],
    dead_retry: %i[jid jid jid jid]
  }.freeze
  UNTIL_TYPES = %w[until_executing until_executed until_and_while_executing until_expired].freeze

  def on_path(path, klass, arg)
    setter = klass.set(queue: parked, lock_ttl: 600)
    jid = path.to_s.start_with?("scheduled") ? setter.perform_in(3600, arg) : setter.perform_async(arg)
    digest = digest_of(klass, arg, queue: parked)
    case path
    when :queued_delete then assert Sidekiq::Queue.new(parked).find_job(jid).delete
    when :scheduled_delete then assert scheduled(jid).delete
    when :scheduled_add_to_queue then scheduled(jid).add_to_queue
    else
      move_to("retry", jid)
      entry = Sidekiq::RetrySet.new.find_job(jid)
      case path
      when :retry_kill then entry.kill
      when :retry_retry then entry.retry
      else
        entry.kill
        dead = Sidekiq::DeadSet.new.find_job(jid)
        path == :dead_delete ? assert(dead.delete) : dead.retry
      end
    end
    [jid, digest]
  end

  def test_each_lock_type_on_each_path
    EXPECTED.each do |path, expected|
      UNTIL_TYPES.zip(expected).each do |type, want|
        klass = Object.const_get(TestJobs.class_name(type))
        jid, digest = on_path(path, klass, "#{token}-#{path}-#{type}")
        assert_equal(want == :jid ? [jid] : [], client.locked_by(digest), "#{type}, #{path}")
        assert_empty client.locked_by("#{digest}:RUN"), "#{type}, #{path}: no runtime lock"
        queued = path.to_s.end_with?("retry", "add_to_queue")
        assert_equal queued, queue_jids(parked).include?(jid), "#{type}, #{path}: queued afterwards"
      end
      %w[while_executing while_executing_reject].each do |type|
        klass = Object.const_get(TestJobs.class_name(type))
        _jid, digest = on_path(path, klass, "#{token}-#{path}-#{type}")
        assert_empty client.locked_by(digest), "#{type}, #{path}: holds nothing outside perform"
        assert_empty client.locked_by("#{digest}:RUN"), "#{type}, #{path}"
      end
    end
  end
end
