# frozen_string_literal: true

require_relative "test_helper"

# The dead-owner reaper: `kill -9` a Sidekiq process in the middle of a while_executing
# job; a surviving process frees its lock with UNIQUE.REAP OWNER, reading no queue.
class ReaperTest < Minitest::Test
  include TestHelpers

  def cmdstat(name)
    conn.call("INFO", "commandstats")[/cmdstat_#{name}:calls=(\d+)/, 1].to_i
  end

  def test_kill_9_in_the_middle_of_a_while_executing_job
    TestSuite.workers # the survivors
    victim = TestSuite.start_sidekiq(queues: ["victim"], concurrency: 2)
    stop_after = victim
    jid = WhileExecutingDefaultJob.set(queue: "victim").perform_async(token, { "hold" => true })
    wait_events("start")
    run_key = "#{digest_of(WhileExecutingDefaultJob, token, { "hold" => true }, queue: "victim")}:RUN"
    holder = client.holders(run_key).first
    assert_equal jid, holder.jid
    assert_equal victim.identity, holder.owner
    reaped_before = client.metrics.dig("types", "while_executing", "reaped").to_i
    # LRANGE/ZSCAN read queues and sorted sets (SSCAN of `processes` is Sidekiq's own cleanup)
    scans_before = %w[lrange zscan].map { |c| cmdstat(c) }

    victim.kill9
    killed_at = Process.clock_gettime(Process::CLOCK_MONOTONIC)
    # dead once its last heartbeat is older than dead_after; then freed within one reaper interval (1 s)
    wait_until(interval: 0.1, message: "the dead process's lock freed") do
      client.locked_by(run_key).empty?
    end
    # Not before the process looked dead: its last beat (at most a second before the kill)
    # older than dead_after. How soon after is the reaper's interval, not asserted here.
    elapsed = Process.clock_gettime(Process::CLOCK_MONOTONIC) - killed_at
    assert_operator elapsed, :>=, TestSuite.dead_after - 1
    assert_equal reaped_before + 1, client.metrics.dig("types", "while_executing", "reaped").to_i,
                 "freed by REAP OWNER (counted as reaped), not by a lease"
    assert_equal scans_before, %w[lrange zscan].map { |c| cmdstat(c) }, "no queue read (UNIQUE.REAP walks lock keys only)"
    assert_equal 0, conn.call("ZSCORE", RedisUnique::Sidekiq::OWNERS_KEY, victim.identity).to_i,
                 "the dead identity is forgotten"
    # and the job can run again
    WhileExecutingDefaultJob.perform_async(token, {})
    wait_events("done")
  ensure
    TestSuite.stop_sidekiq(stop_after) if stop_after
  end

  # The suite's live Sidekiq processes run their own reapers every second on database 0,
  # on the same leader lock and owners set: the tests of one reaper's decisions take a
  # database of their own, where no process would take the lead or forget an identity
  # between two steps.
  def own_url
    TestSuite.url.sub(%r{/0\z}, "/1")
  end

  def own_conn
    @own_conn ||= RedisUnique::Connection.new(TestSuite.raw_connection(own_url))
  end

  def own_client
    @own_client ||= RedisUnique::Client.new(TestSuite.raw_connection(own_url))
  end

  def reaper(identity, dead_after: 30, interval: 1)
    RedisUnique::Sidekiq::Reaper.new(TestSuite.raw_connection(own_url), identity: identity, interval: interval,
                                                                         dead_after: dead_after)
  end

  def test_one_leader_at_a_time_and_takeover
    # Intervals of 20 s, a lease of 60: a slow step of this test cannot let the lease lapse
    # and hand the lead over before the test does.
    a = reaper("host:1:#{token}", interval: 20)
    b = reaper("host:2:#{token}", interval: 20)
    own_conn.call("DEL", RedisUnique::Sidekiq::LEADER_KEY)
    assert a.leader?
    refute b.leader?, "the other stands by"
    renewing = Time.now
    assert a.leader?, "the leader renews its lease"
    renewed = Time.now
    holder = own_client.holders(RedisUnique::Sidekiq::LEADER_KEY).first
    assert_equal a.identity, holder.jid
    # a lease of 3 intervals from the renewal (its end: the time left shrinks with a slow read)
    assert_operator holder.expires_at.to_f, :>=, renewing.to_f + 60 - 0.002
    assert_operator holder.expires_at.to_f, :<=, renewed.to_f + 60 + 0.002
    own_client.unlock(RedisUnique::Sidekiq::LEADER_KEY, a.identity)
    assert b.leader?, "takes over when the leader goes"
  ensure
    own_conn.call("DEL", RedisUnique::Sidekiq::LEADER_KEY)
  end

  def test_dead_and_live_identities
    r = reaper("me:#{token}", dead_after: 30)
    ghost = "ghost:1:#{token}"        # registered long ago, no heartbeat hash
    stale = "stale:2:#{token}"        # heartbeat hash with an old beat
    alive = "alive:3:#{token}"        # fresh beat
    newbie = "newbie:4:#{token}"      # just registered, no heartbeat yet
    old = Time.now.to_f - 120
    [ghost, stale, alive].each { |id| own_conn.call("ZADD", RedisUnique::Sidekiq::OWNERS_KEY, old, id) }
    own_conn.call("ZADD", RedisUnique::Sidekiq::OWNERS_KEY, Time.now.to_f, newbie)
    own_conn.call("HSET", stale, "beat", (Time.now.to_f - 60).to_s)
    own_conn.call("HSET", alive, "beat", Time.now.to_f.to_s)
    [ghost, stale, alive, newbie].each { |id| own_client.lock("k:#{id}", "j", owner: id) }
    dead = r.dead_identities
    assert_includes dead, ghost
    assert_includes dead, stale
    refute_includes dead, alive
    refute_includes dead, newbie
    own_conn.call("DEL", RedisUnique::Sidekiq::LEADER_KEY)
    result = r.tick
    assert_equal 1, result[ghost]
    assert_equal 1, result[stale]
    assert_equal [], own_client.locked_by("k:#{ghost}")
    assert_equal ["j"], own_client.locked_by("k:#{alive}")
    assert_equal ["j"], own_client.locked_by("k:#{newbie}")
  ensure
    own_conn.call("ZREM", RedisUnique::Sidekiq::OWNERS_KEY, alive, newbie, r.identity) if r
    own_conn.call("DEL", RedisUnique::Sidekiq::LEADER_KEY, *[ghost, stale, alive, newbie].flat_map { |id| [id, "k:#{id}"] }) if newbie
  end
end
