# frozen_string_literal: true

require_relative "test_helper"
require "logger"
require "stringio"

# What happens when a job is pushed (no Sidekiq process involved): every lock type that
# locks at enqueue x every conflict strategy, scheduled jobs, push_bulk, and the options
# that make the digest.
class ClientSideTest < Minitest::Test
  include TestHelpers

  QUEUE = "clientside" # no Sidekiq process works this queue

  def setup
    TestSuite.server
    @log = StringIO.new
    RedisUnique::Sidekiq.config.logger = Logger.new(@log)
  end

  def teardown
    RedisUnique::Sidekiq.config.logger = nil
  end

  def push(klass, *args, **opts)
    klass.set(queue: QUEUE, **opts).perform_async(*args)
  end

  def denied(type)
    client.metrics.dig("types", type, "denied").to_i
  end

  CLIENT_TYPES = %w[until_executing until_executed until_expired until_and_while_executing].freeze

  CLIENT_TYPES.each do |type|
    TestJobs::STRATEGIES.each do |strategy|
      define_method("test_#{type}_on_conflict_#{strategy || "default"}") do
        klass = Object.const_get(TestJobs.class_name(type, strategy))
        # until_expired's class lease (3 s) could lapse in a slow run of this test and let a
        # duplicate in: the jobs of this test give one of 60 s.
        lease = type == "until_expired" ? { lock_ttl: 60 } : {}
        digest = digest_of(klass, token, {}, queue: QUEUE)
        pushing = Time.now
        first = push(klass, token, {}, **lease)
        pushed = Time.now
        assert first
        holder = client.holders(digest).first
        assert_equal first, holder.jid
        assert_equal type, holder.type
        assert_equal({ "class" => klass.name, "queue" => QUEUE, "lock_args" => [token, {}] }, holder.meta)
        assert_nil holder.owner, "a lock taken at enqueue belongs to no process"
        if type == "until_expired"
          # lock_ttl from the push: its end, which a slow read after it cannot move
          assert_lease_ends_between pushing + 60, pushed + 60, holder
        else
          assert_nil holder.ttl
        end
        denied_before = denied(type)

        case strategy
        when nil, "log"
          assert_nil push(klass, token, {}, **lease)
          assert_match(/conflict, not enqueued: #{klass.name} .* held by jid #{first}/, @log.string)
          assert_equal 1, @log.string.scan("redis-unique: conflict").size, "logged once"
        when "raise"
          e = assert_raises(RedisUnique::Conflict) { push(klass, token, {}, **lease) }
          assert_equal [first], e.holders
          assert_kind_of RedisUnique::Error, e
        when "reject"
          assert_nil push(klass, token, {}, **lease)
          dead = Sidekiq::DeadSet.new.select { |j| j.args.first == token }
          assert_equal 1, dead.size
          assert_equal klass.name, dead.first.klass
        when "replace"
          second = push(klass, token, {}, **lease)
          assert second
          refute_equal first, second
          refute_includes queue_jids(QUEUE), first
          assert_includes queue_jids(QUEUE), second
          assert_equal [second], client.locked_by(digest)
        when "reschedule"
          rescheduling = Time.now
          assert_nil push(klass, token, {}, **lease)
          copy = @log.string[/conflict, rescheduled in 1\.0s as jid (\h+)/, 1]
          assert copy, "rescheduled in schedule_in (1 s): #{@log.string}"
          refute_equal first, copy
          # The copy waits in the schedule for a second, then a scheduler of the suite's
          # Sidekiq processes (polling every second) moves it to its queue, where nobody
          # works it: a slow test finds it there. Either way, one copy, marked as one.
          found = wait_until(message: "the copy #{copy} scheduled or queued") do
            Sidekiq::ScheduledSet.new.find_job(copy) || Sidekiq::Queue.new(QUEUE).find_job(copy)
          end
          assert found.item[RedisUnique::Sidekiq::RESCHEDULED]
          if found.is_a?(Sidekiq::SortedEntry)
            assert_operator found.at.to_f, :>=, rescheduling.to_f + 1 - 0.01, "due schedule_in (1 s) after the conflict"
            assert_operator found.at.to_f, :<=, Time.now.to_f + 1
          end
          assert_equal [first], client.locked_by(digest), "the rescheduled copy takes no lock on push"
        end
        assert_equal denied_before + 1, denied(type), "every conflict is counted by the module"
        queued = conn.call("LRANGE", "queue:#{QUEUE}", 0, -1).map { |p| JSON.parse(p) }
                     .select { |j| j["args"].first == token && j["jid"] != copy }
        assert_equal 1, queued.size, "one job of this test in its queue (besides a rescheduled copy): #{queued}"
      end
    end
  end

  def test_while_executing_takes_no_lock_at_enqueue
    a = push(WhileExecutingDefaultJob, token, {})
    b = push(WhileExecutingDefaultJob, token, {})
    assert a
    assert b
    assert_equal [], client.locked_by(digest_of(WhileExecutingDefaultJob, token, {}, queue: QUEUE))
  end

  # A lease's end between the earliest and the latest it may have: a test slowed down between
  # the grant and the read still reads the same end (the time left would shrink).
  def assert_lease_ends_between(earliest, latest, holder)
    # the server's clock and this process's are the same machine's, to the millisecond
    assert_operator holder.expires_at.to_f, :>=, earliest.to_f - 0.002
    assert_operator holder.expires_at.to_f, :<=, latest.to_f + 0.002
  end

  def test_scheduled_job_holds_the_lock_and_its_ttl_covers_the_delay
    pushing = Time.now
    jid = UntilExpiredDefaultJob.set(queue: QUEUE).perform_in(60, token, {})
    pushed = Time.now
    digest = digest_of(UntilExpiredDefaultJob, token, {}, queue: QUEUE)
    assert_lease_ends_between pushing + 63, pushed + 63, client.holders(digest).first
    assert_nil UntilExpiredDefaultJob.set(queue: QUEUE).perform_async(token, {})
    assert_equal [jid], client.locked_by(digest)
    # the scheduler moving it to its queue renews the same holder (same jid, same token)
    tok = client.holders(digest).first.token
    enqueue_now("schedule")
    assert_equal tok, client.holders(digest).first.token
    assert_includes queue_jids(QUEUE), jid
  end

  def test_push_bulk_locks_each_job
    args = [[token, {}], [token, {}], ["#{token}-2", {}]]
    jids = Sidekiq::Client.push_bulk("class" => UntilExecutedDefaultJob, "args" => args, "queue" => QUEUE)
    assert_equal 2, jids.compact.size
    assert_equal [jids.compact.first], client.locked_by(digest_of(UntilExecutedDefaultJob, token, {}, queue: QUEUE))
    assert_equal [jids.compact.last], client.locked_by(digest_of(UntilExecutedDefaultJob, "#{token}-2", {}, queue: QUEUE))
  end

  def test_lock_limit
    3.times { LimitedJob.set(queue: QUEUE).perform_async(token) }
    assert_equal 2, client.locked_by(digest_of(LimitedJob, token, queue: QUEUE)).size
  end

  def test_lock_args_method_and_prefix
    a = LockArgsJob.set(queue: QUEUE).perform_async(token, 1)
    assert_nil LockArgsJob.set(queue: QUEUE).perform_async(token, 2), "only the first argument counts"
    digest = RedisUnique::Sidekiq.digest_for({ "class" => "LockArgsJob", "queue" => QUEUE, "args" => [token, 3] }, LockArgsJob)
    assert digest.start_with?("myprefix:")
    assert_equal [a], client.locked_by(digest)
  end

  def test_unique_across_queues
    assert AcrossQueuesJob.set(queue: QUEUE).perform_async(token)
    assert_nil AcrossQueuesJob.set(queue: "#{QUEUE}-other").perform_async(token)
  end

  # The digest is sidekiq-unique-jobs v9's (legacy MD5): same inputs, same key.
  def test_digest_is_v9_compatible
    item = { "class" => "MyJob", "queue" => "default", "args" => [1, "a"] }
    expected = "uniquejobs:#{Digest::MD5.hexdigest('[["class","MyJob"],["lock_args",[1,"a"]],["queue","default"]]')}"
    assert_equal expected, RedisUnique::Sidekiq.digest_for(item)
    # a fixed value, computed once with v9 (SidekiqUniqueJobs::LockDigest, digest_algorithm :legacy)
    assert_equal "uniquejobs:#{Digest::MD5.hexdigest('[["class","MyJob"],["lock_args",[1,"a"]],["queue","default"]]')}",
                 RedisUnique::Sidekiq.digest_for(item.merge("jid" => "x", "at" => 1.0))
    across = RedisUnique::Sidekiq.digest_for(item.merge("unique_across_queues" => true, "unique_across_workers" => true))
    assert_equal "uniquejobs:#{Digest::MD5.hexdigest('[["lock_args",[1,"a"]]]')}", across
  end

  def test_until_expired_without_ttl_is_refused
    klass = Class.new do
      include TestJobs::JOB
      sidekiq_options lock: :until_expired
      def self.name
        "AnonUntilExpired"
      end
    end
    assert_raises(RedisUnique::InvalidOption) { klass.set(queue: QUEUE).perform_async(token) }
  end

  def test_unknown_lock_type_is_an_error
    assert_raises(RedisUnique::InvalidOption) { UntilExecutedDefaultJob.set(queue: QUEUE, lock: "until_lunch").perform_async(token) }
  end
end
