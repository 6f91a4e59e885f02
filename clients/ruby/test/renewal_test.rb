# frozen_string_literal: true

require_relative "test_helper"
require_relative "support/cut_proxy"

# The renewal rule of clients/conformance (README "Renewal") against a real server, through
# RedisUnique::Refresher: a Limiter's slot kept past its lease while its block runs, lost
# when a renewal is refused or none is answered before the lease ends (told at once by
# on_lost, raised as LockLost when the block ends); and the Sidekiq middleware renewing a
# running job's lock in a real Sidekiq process, telling a loss in its log and counter.
class RenewalTest < Minitest::Test
  include TestHelpers

  def key
    "renew:#{token}"
  end

  def teardown
    conn.call("DEL", key)
    @proxy&.close
  end

  def proxy
    @proxy ||= H::CutProxy.new(TestSuite.server.port)
  end

  def expires_at(k = key)
    client.holders(k).first&.expires_at
  end

  def test_a_limiter_slot_with_a_lease_shorter_than_the_block_is_kept
    lost = []
    # Renewed every third of the lease: 1.2 s is kept through a stall of the loaded machine
    # of 800 ms, where one of 600 ms ended after 400 ms.
    limiter = RedisUnique::Limiter.new(TestSuite.raw_connection, key, concurrency: 2, ttl: 1.2,
                                                                        rate: { limit: 100, per: 1 }, on_lost: lost.method(:push))
    limiter.within("job-1") do |held|
      started = Time.now
      first = expires_at
      # three leases long, each holder check showing the same hold with a later end
      wait_until(timeout: 30, message: "three leases of renewals") { Time.now - started > 3.6 }
      (h,) = client.holders(key)
      assert_equal ["job-1", held, "limiter"], [h.jid, h.token, h.type]
      assert_operator h.expires_at, :>, first + 2.0
    end
    assert_empty lost
    assert_empty client.holders(key)
  end

  def test_a_limiter_renewal_refused_after_a_reap_is_lost_at_once_and_raised_at_the_end
    lost = []
    owner = "w-dead-#{token}"
    limiter = RedisUnique::Limiter.new(TestSuite.raw_connection, key, ttl: 1, owner: owner, on_lost: lost.method(:push))
    other = nil
    error = assert_raises(RedisUnique::LockLost) do
      limiter.within("job-1") do
        # At least this holder: REAP also counts ended leases left by other tests in the database
        assert_operator client.reap(owner: owner), :>=, 1
        other = client.lock(key, "other", ttl: 30)
        wait_until(timeout: 10, message: "the loss told") { lost.any? }
        assert_instance_of RedisUnique::LockLost, lost.first
        :done
      end
    end
    assert_same lost.first, error
    assert_match(/another holder has it/, error.message)
    assert_equal [key, "job-1"], [error.key, error.jid]
    # the end of the block took nothing from the new holder
    assert_equal [["other", other]], client.holders(key).map { |h| [h.jid, h.token] }
    assert_equal 1, lost.size
  end

  def test_a_renewal_after_the_lease_gives_up_the_new_grant
    lost = []
    c = RedisUnique::Client.new(TestSuite.raw_connection)
    sent = RedisUnique::Refresher.now
    held = c.lock(key, "job-1", ttl_ms: 900)
    refresher = RedisUnique::Refresher.new(c, key, "job-1", token: held, lease_ms: 900, sent_at: sent,
                                                            on_lost: lost.method(:push)).start
    conn.call("DEL", key) # nobody holds it: the next renewal is a new grant
    wait_until(timeout: 10, message: "the loss told") { lost.any? }
    assert_match(/another fencing token/, lost.first.message)
    wait_until(timeout: 10, message: "the new grant given up") { client.holders(key).empty? }
    refresher.stop
    assert refresher.lost?
  end

  def test_a_connection_restored_before_the_lease_ends_keeps_the_slot
    lost = []
    limiter = RedisUnique::Limiter.new(TestSuite.raw_connection(proxy.url), key, ttl: 3, on_lost: lost.method(:push))
    limiter.within("job-1") do |held|
      first = expires_at
      wait_until(timeout: 10, message: "a first renewal") { expires_at > first }
      proxy.cut
      wait_until(timeout: 10, message: "a renewal to meet the cut link") { proxy.refused >= 1 }
      proxy.restore
      cut_end = expires_at
      wait_until(timeout: 10, message: "a renewal after the link is back") { expires_at > cut_end }
      assert_equal held, client.holders(key).first.token
      assert_empty lost
    end
    assert_empty lost
    assert_empty client.holders(key)
  end

  def test_a_connection_down_past_the_lease_loses_the_slot_when_the_lease_ends
    lost = []
    told_at = []
    ttl = 1.2
    # A type of its own: the server's count of its renewals bounds the ones this client kept.
    type = "down#{rand(1 << 30)}"
    on_lost = lambda do |e|
      told_at << RedisUnique::Refresher.now
      lost << e
    end
    limiter = RedisUnique::Limiter.new(TestSuite.raw_connection(proxy.url), key, ttl: ttl, type: type, on_lost: on_lost)
    asked_at = RedisUnique::Refresher.now
    error = assert_raises(RedisUnique::LockLost) do
      limiter.within("job-1") do
        first = expires_at
        wait_until(timeout: 10, message: "a first renewal") { expires_at > first }
        proxy.cut
        wait_until(timeout: 15, message: "the loss told") { lost.any? }
        wait_until(timeout: 10, message: "the server's lease to end") { client.holders(key).empty? }
        proxy.restore
      end
    end
    # Not before the lease could have ended. The grant was sent after asked_at and each kept
    # renewal at least a third of the lease after the one before, so the last one kept was
    # sent no sooner than asked_at + kept * ttl / 3, and its lease runs a whole ttl from
    # there; every try since met the cut link. The server counted every renewal kept, and at
    # most one more: the last before the cut, whose answer the cut may have dropped.
    # (Measured from the cut instead, a renewal or a test thread that the loaded machine ran
    # late would move the bound.)
    renewed = client.metrics.dig("types", type, "renewed").to_i
    earliest = asked_at + ([renewed - 1, 0].max * ttl / 3) + ttl
    assert_operator told_at.first, :>=, earliest - 0.05,
                    "told #{(told_at.first - earliest).round(3)} s after the earliest end (#{renewed} renewals)"
    assert_operator proxy.refused, :>=, 1
    assert_match(/before the lease ended/, error.message)
    assert_same lost.first, error
    assert_equal 1, lost.size
  end

  # --- the Sidekiq middleware, in a real Sidekiq process ---

  def sidekiq
    @@sidekiq ||= TestSuite.start_sidekiq(queues: %w[renew], concurrency: 3) # rubocop:disable Style/ClassVars
  end

  def renewal_lost
    RedisUnique::Sidekiq.stats(TestSuite.conn)["renewal_lost"].to_i
  end

  [RenewedWhileExecutingJob, RenewedUntilExecutedJob].each do |klass|
    define_method("test_sidekiq_#{klass.name}_runs_longer_than_its_lock_ttl_and_keeps_its_lock") do
      sidekiq
      before = renewal_lost
      opts = { "hold" => true }
      digest = digest_of(klass, token, opts, queue: "renew")
      lock_key = klass.get_sidekiq_options["lock"].to_s == "while_executing" ? "#{digest}:RUN" : digest
      klass.perform_async(token, opts)
      (start,) = wait_events("start")
      (h,) = wait_until(timeout: 10, message: "the job's lock") { client.holders(lock_key).then { |hs| hs.any? && hs } }
      assert_equal [start["jid"], sidekiq.identity], [h.jid, h.owner]
      # past the first lease's end: held only because the renewals moved it
      wait_until(timeout: 30, message: "renewals past the first lease") do
        (now,) = client.holders(lock_key)
        now && now.token == h.token && now.expires_at > h.expires_at + 3
      end
      release
      wait_events("done")
      wait_until(timeout: 10, message: "the lock freed at the end") { client.holders(lock_key).empty? }
      assert_equal before, renewal_lost
      refute_match(/#{start["jid"]} lost its/, sidekiq.log)
    end
  end

  def test_sidekiq_a_renewal_refused_after_a_reap_is_logged_and_counted
    sidekiq
    before = renewal_lost
    opts = { "hold" => true }
    run_key = "#{digest_of(RenewedWhileExecutingJob, token, opts, queue: "renew")}:RUN"
    RenewedWhileExecutingJob.perform_async(token, opts)
    (start,) = wait_events("start")
    wait_until(timeout: 10, message: "the job's lock") { client.locked_by(run_key) == [start["jid"]] }
    # the process is taken for dead: its holders reaped, and another job takes the lock
    assert_operator client.reap(owner: sidekiq.identity), :>=, 1
    other = client.lock(run_key, "other", ttl: 30)
    wait_until(timeout: 10, message: "the loss counted") { renewal_lost == before + 1 }
    line = sidekiq.log.lines.grep(/lost its while_executing lock/).last
    assert_match(/RenewedWhileExecutingJob #{start["jid"]} lost its while_executing lock #{Regexp.escape(run_key)}/, line)
    assert_match(/another holder has it/, line)
    release
    wait_events("done")
    # the job's end took nothing from the new holder
    assert_equal [["other", other]], client.holders(run_key).map { |h| [h.jid, h.token] }
  ensure
    conn.call("DEL", run_key) if run_key
  end
end
