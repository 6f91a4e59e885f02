# frozen_string_literal: true

require_relative "test_helper"
require "connection_pool"

class ClientTest < Minitest::Test
  include TestHelpers

  def setup
    TestSuite.server
  end

  def key
    "k:#{token}"
  end

  def test_lock_unlock_and_tokens
    t1 = client.lock(key, "a", ttl: 10)
    assert_kind_of Integer, t1
    assert_nil client.lock(key, "b", ttl: 10)
    assert_equal t1, client.lock(key, "a", ttl: 20), "a renewal keeps the token"
    assert_equal ["a"], client.locked_by(key)
    assert client.unlock(key, "a")
    refute client.unlock(key, "a")
    t2 = client.lock(key, "b")
    assert_operator t2, :>, t1
    assert client.unlock(key, "b")
    assert_equal 0, conn.call("EXISTS", key)
  end

  def test_holders_are_structs_with_times_and_meta
    before = Time.now
    client.lock(key, "a", ttl: 30, type: "until_executed", owner: "host:1:abc", meta: { "class" => "X", "n" => 1 })
    client.lock(key, "b", limit: 2)
    a, b = client.holders(key)
    assert_equal "a", a.jid
    assert_kind_of Integer, a.token
    assert_in_delta before.to_f, a.acquired_at.to_f, 5
    assert_in_delta before.to_f + 30, a.expires_at.to_f, 5
    assert_in_delta 30, a.ttl, 5
    assert_equal "until_executed", a.type
    assert_equal "host:1:abc", a.owner
    assert_equal({ "class" => "X", "n" => 1 }, a.meta)
    assert_equal "b", b.jid
    assert_nil b.expires_at
    assert_nil b.ttl
    assert_nil b.owner
    assert_equal "lock", b.type
    assert_nil b.meta, "no META is nil, as in every client"
  end

  def test_limit_and_counting_lock
    assert client.lock(key, "a", limit: 2)
    assert client.lock(key, "b", limit: 2)
    assert_nil client.lock(key, "c", limit: 2)
    assert client.lock(key, "c", limit: 0), "LIMIT 0 never denies"
    assert_equal %w[a b c], client.locked_by(key)
  end

  def test_ttl_ms_and_pxat
    before = Time.now
    client.lock(key, "a", ttl_ms: 1500)
    after = Time.now
    h = client.holders(key).first
    assert_operator h.ttl, :<=, 1.5
    # The lease's end, which a slow read after the lock cannot move (the time left would
    # shrink). The server's clock and this process's are the same machine's, to the ms.
    assert_operator h.expires_at.to_f, :>=, before.to_f + 1.5 - 0.002
    assert_operator h.expires_at.to_f, :<=, after.to_f + 1.5 + 0.002
    at = Time.now + 100
    client.lock("#{key}:2", "a", pxat: at)
    assert_in_delta at.to_f, client.holders("#{key}:2").first.expires_at.to_f, 0.002, "PXAT: that end, to the ms"
    assert_raises(RedisUnique::InvalidOption) { client.lock(key, "z", ttl: 1, ttl_ms: 1000) }
    assert_raises(RedisUnique::InvalidOption) { client.lock(key, "z", ttl: 1, pxat: Time.now + 5) }
  end

  # Seconds become whole milliseconds rounded up, from the value to the microsecond, as
  # in every client: 0.3 s is a 300 ms lease (not 301), 0.0004 s is 1 ms (not 0).
  def test_seconds_become_milliseconds_rounded_up
    # LOCK and LOCKEDBY in one transaction (MULTI on the client's one connection): the 300 ms
    # lease cannot end between them however late the second call would come on a loaded machine.
    client.connection.call("MULTI")
    client.lock(key, "a", ttl: 0.3)
    client.connection.call("UNIQUE.LOCKEDBY", key, "WITHMETA")
    token, held = client.connection.call("EXEC")
    h = RedisUnique::Client.holder(held.first)
    assert_equal token, h.token
    client.unlock(key, "a")
    assert_equal 300, ((h.expires_at - h.acquired_at) * 1000).round
    assert_equal [1, 300, 1001, 1], [0.0004, 0.3, 1.0001, 1e-9].map { |s| RedisUnique::Client.ms_option("ttl", s, nil) }
    client.lock("#{key}:at", "a", pxat: Time.at(2_000_000_000, 500.4, :millisecond))
    assert_equal 2_000_000_000_501, (client.holders("#{key}:at").first.expires_at.to_r * 1000).to_i
  end

  def test_wait_gets_the_slot_when_released
    client.lock(key, "a")
    other = RedisUnique::Client.new(TestSuite.raw_connection)
    waiter = Thread.new { other.lock(key, "b", wait: 5) }
    wait_until(message: "the waiter blocks") { conn.call("INFO", "unique")[/unique_waiting:(\d+)/, 1].to_i == 1 }
    client.unlock(key, "a")
    assert_kind_of Integer, waiter.value
    assert_equal ["b"], client.locked_by(key)
  end

  def test_wait_times_out_with_nil
    client.lock(key, "a")
    started = Process.clock_gettime(Process::CLOCK_MONOTONIC)
    assert_nil client.lock(key, "b", wait_ms: 300)
    assert_operator Process.clock_gettime(Process::CLOCK_MONOTONIC) - started, :>=, 0.25
  end

  def test_reap_by_owner_iterates_to_the_end
    30.times { |i| client.lock("#{key}:#{i}", "j#{i}", owner: "dead-1") }
    client.lock("#{key}:other", "x", owner: "alive")
    # REAP also removes ended leases anywhere in the database, and other tests of this
    # shared server leave some: at least this owner's 30, and every one of them gone.
    assert_operator client.reap(owner: "dead-1", count: 7), :>=, 30
    assert_equal ["x"], client.locked_by("#{key}:other")
    30.times { |i| assert_equal [], client.locked_by("#{key}:#{i}") }
  end

  def test_metrics_count_by_type
    client.lock(key, "a", type: "mtype#{token.hash.abs % 1000}")
    client.lock(key, "b", type: "mtype#{token.hash.abs % 1000}")
    m = client.metrics
    t = m["types"]["mtype#{token.hash.abs % 1000}"]
    assert_equal 1, t["acquired"]
    assert_equal 1, t["denied"]
    assert_kind_of Integer, m["locks"]
    # The current and the previous minute: the lock above may be in the one before a
    # minute's turn (minutes: 1 alone would then read an empty bucket).
    assert_operator client.metrics(minutes: 2)["total"]["acquired"], :>=, 1
  end

  def test_errors_are_redis_unique_errors
    conn.call("SET", "str:#{token}", "x")
    assert_raises(RedisUnique::WrongType) { client.lock("str:#{token}", "a") }
    e = assert_raises(RedisUnique::CommandError) { client.connection.call("UNIQUE.LOCK", key, "a", "TTL", "0") }
    assert_match(/invalid expire time/, e.message)
    assert_kind_of RedisUnique::Error, e
  end

  def test_module_not_loaded
    plain = H::RedisServer.new(load_module: false)
    c = RedisUnique::Client.new(TestSuite.raw_connection(plain.url))
    # forced to the module (RedisUnique.backend = :module): no library in its place
    RedisUnique.backend = :module
    e = assert_raises(RedisUnique::ModuleNotLoaded) { c.lock("k", "a") }
    assert_match(/loadmodule/, e.message)
    assert_match(/MODULE LOAD/, e.message)
    refute c.module_loaded?
    assert client.module_loaded?
  ensure
    RedisUnique.backend = :auto
    plain&.stop
  end

  def test_connection_refused_is_a_connection_error
    H.with_held_port do |port|
      c = RedisUnique::Client.new(TestSuite.raw_connection("redis://127.0.0.1:#{port}/0"))
      assert_raises(RedisUnique::ConnectionError) { c.lock("k", "a") }
    end
  end

  def test_pools_and_both_client_libraries
    pools = [ConnectionPool.new(size: 2) { TestSuite.raw_connection }, Sidekiq.redis_pool]
    require "redis"
    pools << ::Redis.new(url: TestSuite.url)
    if defined?(::RedisClient)
      pools << ::RedisClient.config(url: TestSuite.url).new_client
      pools << ConnectionPool.new(size: 1) { ::RedisClient.config(url: TestSuite.url).new_client }
    end
    pools.each_with_index do |pool, i|
      c = RedisUnique::Client.new(pool)
      assert c.lock("#{key}:#{i}", "a", meta: { "i" => i }), pool.class.name
      assert_nil c.lock("#{key}:#{i}", "b")
      assert_equal({ "i" => i }, c.holders("#{key}:#{i}").first.meta, pool.class.name)
      assert_nil c.lock("#{key}:#{i}", "b", wait_ms: 50), pool.class.name
      assert c.unlock("#{key}:#{i}", "a")
    end
  end
end
