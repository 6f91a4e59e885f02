# frozen_string_literal: true

require_relative "test_helper"
require "securerandom"

# What sidekiq-unique-jobs v9 users rely on, on real Sidekiq processes: the
# while_executing_reject lock, after_unlock, until_and_while_executing refusing a job whose
# until-lock another jid holds, a job's own lock_ttl, a lock_ttl read with #to_i, and the
# option names of older versions (supported, or refused with the name to use).
class V9CompatTest < Minitest::Test
  include TestHelpers

  def setup
    @workers = TestSuite.workers
  end

  def worker_logs
    @workers.map(&:log).join
  end

  def parked
    "parked-#{token}"
  end

  def ttl_of(key, jid)
    client.holders(key).find { |h| h.jid == jid }&.ttl
  end

  # --- while_executing_reject ---

  def test_while_executing_reject_sends_the_duplicate_to_the_dead_set
    %w[WhileExecutingRejectDefaultJob WhileExecutingRejectLogJob].each_with_index do |name, i|
      tok = "#{token}-#{i}"
      klass = Object.const_get(name)
      a = klass.perform_async(tok, { "hold" => "all" })
      wait_events("start", 1, tok)
      digest = digest_of(klass, tok, { "hold" => "all" })
      assert_equal [a], client.locked_by("#{digest}:RUN")
      assert_equal "while_executing_reject", client.holders("#{digest}:RUN").first.type
      b = klass.perform_async(tok, { "hold" => "all" })
      assert b, "while_executing_reject takes no lock at push"
      dead = wait_until(timeout: 20, message: "#{name}: the duplicate in the dead set") do
        Sidekiq::DeadSet.new.find { |j| j.jid == b }
      end
      assert_equal tok, dead.args.first
      release(tok)
      assert_equal [a], wait_events("done", 1, tok).map { |e| e["jid"] }
      refute(events(tok).any? { |e| e["jid"] == b }, "#{name}: the duplicate never ran (even with on_conflict: :log)")
      wait_until(message: "run lock freed") { client.locked_by("#{digest}:RUN").empty? }
      dead.delete
    end
  end

  # --- after_unlock ---

  def test_after_unlock_after_each_lock_types_unlock
    {
      "until_executing" => "", "until_executed" => "", "while_executing" => ":RUN",
      "while_executing_reject" => ":RUN", "until_and_while_executing" => ":RUN"
    }.each do |type, suffix|
      tok = "#{token}-#{type}"
      digest = RedisUnique::Sidekiq.digest_for({ "class" => "AfterUnlockClassJob", "queue" => "default", "args" => [tok] },
                                               AfterUnlockClassJob)
      jid = AfterUnlockClassJob.set(lock: type).perform_async(tok, { "key" => "#{digest}#{suffix}" })
      wait_events("done", 1, tok)
      called = wait_events("after_unlock", 1, tok)
      assert_equal [jid], called.map { |e| e["jid"] }, "#{type}: after_unlock once"
      assert_equal false, called.first["held"], "#{type}: called after the lock was freed"
    end
  end

  def test_after_unlock_instance_method
    jid = AfterUnlockJob.perform_async(token, {})
    assert_equal [jid], wait_events("after_unlock").map { |e| e["jid"] }
    assert_empty client.locked_by(digest_of(AfterUnlockJob, token, {}))
  end

  def test_after_unlock_class_method_gets_the_job_and_its_error_is_only_logged
    jid = AfterUnlockClassJob.perform_async(token, { "raise" => true })
    wait_events("after_unlock")
    wait_until(message: "the warning") { worker_logs.include?("after_unlock of AfterUnlockClassJob #{jid} failed") }
    assert_equal [jid], wait_events("done").map { |e| e["jid"] }
    assert_equal 0, Sidekiq::RetrySet.new.count { |j| j.jid == jid }, "not retried: the lock was already free"
    assert_equal 1, events.count { |e| e["event"] == "start" }
  end

  def test_after_unlock_is_not_called_when_nothing_was_unlocked
    # until_expired never unlocks: its lock ends with its lease.
    first = AfterUnlockJob.set(lock: "until_expired", lock_ttl: 600).perform_async(token, {})
    # (the instance method records after perform: it knows the token then)
    wait_events("done")
    digest = digest_of(AfterUnlockJob, token, {})
    assert_equal [first], client.locked_by(digest)
    client.unlock(digest, first)
    # A second job through the same Redis round trips, whose unlock does call it.
    second = AfterUnlockJob.perform_async(token, {})
    assert_equal [second], wait_events("after_unlock").map { |e| e["jid"] }
    assert_equal [second], events.select { |e| e["event"] == "after_unlock" }.map { |e| e["jid"] }
  end

  # --- until_and_while_executing with its until-lock held by another jid ---

  def test_until_and_while_executing_does_not_run_a_job_whose_until_lock_another_jid_holds
    opts = {}
    digest = digest_of(UntilAndWhileExecutingDefaultJob, token, opts)
    client.lock(digest, "queued-original", ttl: 600, type: "until_and_while_executing")
    # A copy that holds nothing: pushed as :reschedule pushes (no lock taken at push).
    copy = Sidekiq::Client.push("class" => UntilAndWhileExecutingDefaultJob, "args" => [token, opts],
                                RedisUnique::Sidekiq::RESCHEDULED => true)
    wait_until(timeout: 20, message: "the copy meets the until-lock") do
      worker_logs =~ /conflict, not performed: \S+ jid=#{copy} .*#{Regexp.escape(digest)} held by jid queued-original/
    end
    assert_empty events, "the copy did not run"
    assert_equal ["queued-original"], client.locked_by(digest), "the other jid keeps its lock"
    refute client.locked_by("#{digest}:RUN").include?(copy)

    client.unlock(digest, "queued-original")
    again = Sidekiq::Client.push("class" => UntilAndWhileExecutingDefaultJob, "args" => [token, opts],
                                 RedisUnique::Sidekiq::RESCHEDULED => true)
    assert_equal [again], wait_events("done").map { |e| e["jid"] }, "a copy with the lock free runs"
  end

  # --- lock_ttl ---

  def test_a_jobs_own_lock_ttl_overrides_the_class_lock_ttl
    queue = parked
    klass_default = TtlJob.set(queue: queue).perform_async(token, { "n" => 0 })
    assert_operator ttl_of(digest_of(TtlJob, token, { "n" => 0 }, queue: queue), klass_default), :>, 7000

    set = TtlJob.set(queue: queue, lock_ttl: 10).perform_async(token, { "n" => 1 })
    assert_operator ttl_of(digest_of(TtlJob, token, { "n" => 1 }, queue: queue), set), :<=, 10

    [10, "10"].each_with_index do |ttl, i|
      jid = Sidekiq::Client.push("class" => TtlJob, "queue" => queue, "args" => [token, { "n" => 2 + i }], "lock_ttl" => ttl)
      assert_operator ttl_of(digest_of(TtlJob, token, { "n" => 2 + i }, queue: queue), jid), :<=, 10, ttl.inspect
    end
  ensure
    Sidekiq::Queue.new(queue).clear
  end

  def test_a_jobs_own_lock_ttl_is_kept_when_it_runs
    opts = { "hold" => true }
    jid = TtlJob.set(lock_ttl: 10).perform_async(token, opts)
    wait_events("start")
    holder = client.holders(digest_of(TtlJob, token, opts)).first
    assert_equal jid, holder.jid
    refute_nil holder.owner, "renewed by the worker"
    assert_operator holder.ttl, :<=, 10, "the worker's renewal keeps the job's lock_ttl"
    release
    wait_events("done")
  end

  def test_a_lock_ttl_object_with_only_to_i
    opts = { "hold" => true }
    jid = TtlObjectJob.perform_async(token, opts)
    digest = digest_of(TtlObjectJob, token, opts)
    wait_events("start")
    holder = client.holders(digest).first
    assert_equal jid, holder.jid
    refute_nil holder.owner, "renewed by the worker, with the class's object read again"
    assert_operator holder.ttl, :<=, 30
    # Renewed every third of the lease: more than 20 s left once a renewal came (a lease of
    # 20 s or less never has), which a slow machine may make late.
    wait_until(message: "more than 20 s of lease left") { client.holders(digest).first.ttl > 20 }
    release
    wait_events("done")
  end

  # --- older option names ---

  def test_older_option_names_are_refused_with_the_name_to_use
    {
      LegacyUniqueJob => ["sidekiq_options unique:", "use lock: (e.g. `lock: :until_executed`)"],
      LegacyUniquePrefixJob => ["unique_prefix:", "use lock_prefix:"],
      LegacyLockArgsOptionJob => ["lock_args:", "use lock_args_method:"]
    }.each do |klass, (name, use)|
      error = assert_raises(RedisUnique::InvalidOption) { klass.set(queue: parked).perform_async(token, 1) }
      assert_includes error.message, name
      assert_includes error.message, use
    end
    assert_equal 0, Sidekiq::Queue.new(parked).size, "nothing pushed"
  end

  # A job that an older version pushed (or the scheduler or a retry pushes) is not lost in a
  # server process: it runs, and the option is named in the log.
  def test_an_older_option_in_a_server_process_is_logged_and_the_job_runs
    jid = SecureRandom.hex(12)
    payload = { "class" => "LegacyUniqueJob", "queue" => "default", "args" => [token], "jid" => jid,
                "unique" => "until_executed", "retry" => true, "created_at" => Time.now.to_f,
                "enqueued_at" => Time.now.to_f }
    conn.call("LPUSH", "queue:default", JSON.generate(payload))
    assert_equal [jid], wait_events("done").map { |e| e["jid"] }
    wait_until(message: "the warning") { worker_logs.include?("LegacyUniqueJob: sidekiq_options unique: is an option of older") }
  end

  def test_unique_args_and_lock_expiration_are_read
    queue = parked
    [UniqueArgsOptionJob, UniqueArgsMethodJob].each do |klass|
      assert klass.set(queue: queue).perform_async(token, 1)
      assert_nil klass.set(queue: queue).perform_async(token, 2), "#{klass}: unique on the first argument only"
    end
    jid = LockExpirationJob.set(queue: queue).perform_async(token)
    assert_operator ttl_of(digest_of(LockExpirationJob, token, queue: queue), jid), :<=, 20
  ensure
    Sidekiq::Queue.new(queue).clear
  end
end
