# frozen_string_literal: true

require_relative "test_helper"
require "open3"

# The gem on a server started WITHOUT the module: it finds that out by itself, loads the
# Functions library (or says what an operator runs, and ships the command), and a user's
# code is the same on both backends.
class FunctionsTest < Minitest::Test
  include TestHelpers

  F = RedisUnique::Functions
  SOURCE = File.join(RedisUnique::Harness::ROOT, "functions/redis_unique.lua")
  BIN = File.join(RedisUnique::Harness::RUBY_DIR, "bin/redis-unique")

  def setup
    @plain = TestSuite.plain_server
    @admin = RedisUnique::Connection.new(TestSuite.raw_connection(@plain.url))
    @admin.raw(%w[FLUSHALL SYNC])
    @admin.raw(%w[FUNCTION FLUSH SYNC])
    F.forget_all
  end

  def teardown
    RedisUnique.backend = :auto
    F.forget_all
  end

  def plain_client(url = @plain.url)
    RedisUnique::Client.new(TestSuite.raw_connection(url))
  end

  def library_version
    @admin.raw(%w[FCALL_RO unique_version 0])
  end

  def test_the_gem_ships_the_library_as_it_is_in_functions
    assert_equal File.binread(SOURCE), File.binread(F::LIBRARY_FILE)
    assert_operator F.version, :>=, 1
    assert File.binread(SOURCE).start_with?("#!lua name=redis_unique\n")
  end

  def test_it_loads_the_library_and_locks_on_a_server_without_the_module
    assert_equal [], @admin.raw(%w[FUNCTION LIST])
    c = plain_client
    refute c.module_loaded?
    token = c.lock("k", "a", ttl: 30)
    assert_kind_of Integer, token
    assert_nil c.lock("k", "b")
    assert_equal "functions", c.backend
    assert_equal ["a"], c.holders("k").map(&:jid)
    assert_equal token, c.holders("k").first.token
    assert_equal "hash", @admin.raw(%w[TYPE k]), "a library lock is a hash"
    assert c.unlock("k", "a", token: token)
    refute c.unlock("k", "a")
    assert_equal F.version, library_version
    # the module's server: the module, never the library
    assert_equal "module", client.backend
  end

  # Several clouds forbid MODULE LIST (and MODULE): the choice does not need it.
  def test_the_choice_works_where_module_list_is_forbidden
    @admin.raw(%w[ACL SETUSER nomodule on >pw ~* &* +@all -module])
    c = plain_client("redis://nomodule:pw@127.0.0.1:#{@plain.port}/0")
    assert_kind_of Integer, c.lock("k", "a")
    assert_equal "functions", c.backend
    m = RedisUnique::Client.new(TestSuite.raw_connection(TestSuite.url))
    conn = RedisUnique::Connection.new(TestSuite.raw_connection(TestSuite.url))
    conn.raw(%w[ACL SETUSER nomodule on >pw ~* &* +@all -module])
    begin
      c = plain_client("redis://nomodule:pw@127.0.0.1:#{TestSuite.server.port}/0")
      assert_equal "module", c.backend
      assert_kind_of Integer, c.lock("nomodule:#{token}", "a")
      refute_equal "hash", conn.raw(["TYPE", "nomodule:#{token}"]), "the module's lock, not the library's"
      assert m.unlock("nomodule:#{token}", "a")
    ensure
      conn.raw(%w[ACL DELUSER nomodule])
    end
  ensure
    @admin.raw(%w[ACL DELUSER nomodule])
  end

  # Where COMMAND is refused too, a probe read tells (a server looks a command up before
  # its ACL: only a missing module answers "unknown command").
  def test_the_choice_works_where_command_is_forbidden
    # with the module, the probe refused as well (NOPERM: the module is there)
    [[@admin, @plain.url, false, []], [conn, TestSuite.url, true, ["-unique.lockedby"]]].each do |admin, url, with_module, more|
      admin.raw(["ACL", "SETUSER", "nocommand", "on", ">pw", "~*", "&*", "+@all", "-command", "-module", *more])
      begin
        c = plain_client(url.sub("redis://", "redis://nocommand:pw@"))
        assert_equal with_module, c.module_loaded?, url
        assert_equal with_module ? "module" : "functions", c.connection.backend, url
      ensure
        admin.raw(%w[ACL DELUSER nocommand])
      end
    end
  end

  def test_an_older_library_is_replaced_and_a_lost_one_loaded_again
    @admin.raw(["FUNCTION", "LOAD", "REPLACE", F.source.sub(/^local VERSION = \d+/, "local VERSION = 0")])
    assert_equal 0, library_version
    c = plain_client
    assert c.lock("k", "a")
    assert_equal F.version, library_version
    # after a failover to a replica that never had it (here: flushed), the next call loads it again
    @admin.raw(%w[FUNCTION FLUSH SYNC])
    assert c.lock("k2", "a")
    assert_equal F.version, library_version
    @admin.raw(%w[FUNCTION FLUSH SYNC])
    assert_equal ["a"], c.locked_by("k")
    @admin.raw(%w[FUNCTION FLUSH SYNC])
    assert_equal 1, c.reap(owner: "nobody") + 1
  end

  def test_a_user_who_may_not_load_it_is_told_the_operators_command_which_the_gem_ships
    @admin.raw(%w[ACL SETUSER app on >pw ~* &* +@all -function -module])
    url = "redis://app:pw@127.0.0.1:#{@plain.port}/0"
    e = assert_raises(RedisUnique::FunctionsNotLoaded) { plain_client(url).lock("k", "a") }
    assert_kind_of RedisUnique::CommandError, e
    assert_includes e.message, "redis-unique functions load redis://"
    assert_match(/NOPERM/, e.message)
    assert_equal [], @admin.raw(%w[KEYS *])
    out, st = Open3.capture2e(RbConfig.ruby, BIN, "functions", "version", @plain.url)
    assert st.success?, out
    assert_equal "not loaded\n", out
    # the operator loads it once, with the gem's command
    out, st = Open3.capture2e(RbConfig.ruby, BIN, "functions", "load", @plain.url)
    assert st.success?, out
    assert_equal "loaded redis_unique library version #{F.version}\n", out
    out, = Open3.capture2e(RbConfig.ruby, BIN, "functions", "version", @plain.url)
    assert_equal "#{F.version}\n", out
    assert_kind_of Integer, plain_client(url).lock("k", "a")
    out, st = Open3.capture2e(RbConfig.ruby, BIN, "functions", "source")
    assert st.success?
    assert_equal File.binread(SOURCE), out.b
    _, st = Open3.capture2e(RbConfig.ruby, BIN, "functions", "load")
    assert_equal 2, st.exitstatus
  ensure
    @admin.raw(%w[ACL DELUSER app])
  end

  def test_a_setting_forces_either_backend
    key = "forced:#{token}"
    ENV["REDIS_UNIQUE_BACKEND"] = "functions"
    # on the module's server, forced to the library: FCALL, not UNIQUE.LOCK
    assert_equal "functions", client.backend
    assert client.lock(key, "a")
    assert_equal "hash", conn.raw(["TYPE", key])
    assert_equal :functions, RedisUnique.backend
    ENV["REDIS_UNIQUE_BACKEND"] = "lua"
    assert_raises(RedisUnique::InvalidOption) { client.lock(key, "a") }
  ensure
    ENV.delete("REDIS_UNIQUE_BACKEND")
    conn.raw(["DEL", key, F.wake_key(key)])
    RedisUnique.backend = :module
    assert_equal "module", plain_client.backend
    assert_raises(RedisUnique::ModuleNotLoaded) { plain_client.lock("k", "a") }
    assert_raises(RedisUnique::InvalidOption) { RedisUnique.backend = :lua }
    RedisUnique.backend = :auto
    assert_equal :auto, RedisUnique.backend
  end

  def test_a_limiter_renews_its_slot_through_the_library
    c = plain_client
    limiter = RedisUnique::Limiter.new(TestSuite.raw_connection(@plain.url), "pool", concurrency: 2, ttl: 0.3, wait: 5)
    limiter.within do |held|
      # held past its lease: the renewal runs through the library too
      wait_until(message: "a renewal") do
        h = c.holders("pool").first
        h && h.expires_at - h.acquired_at > 0.3
      end
      assert_equal held, c.holders("pool").first.token
      assert_kind_of Integer, c.lock("pool", "second", limit: 2)
      assert_nil c.lock("pool", "third", limit: 2)
    end
    assert_equal ["second"], c.locked_by("pool")
  end

  def test_a_wait_is_served_by_the_release
    c = plain_client
    c.lock("w", "holder", ttl: 60)
    got = nil
    waiter = Thread.new { got = plain_client.lock("w", "waiter", ttl: 60, wait: 30) }
    wait_until(message: "the waiter to queue") { c.waiters("w") == 1 }
    assert c.unlock("w", "holder")
    waiter.join(30)
    assert_kind_of Integer, got
    assert_equal ["waiter"], c.locked_by("w")
    assert_nil c.lock("w", "late", wait_ms: 150), "a wait that runs out"
    assert_equal 0, c.waiters("w")
  end

  def test_an_interrupted_waiter_leaves_the_queue
    c = plain_client
    c.lock("i", "holder", ttl: 60)
    waiter = Thread.new do
      plain_client.lock("i", "waiter", wait: 30)
    rescue Interrupt
      :interrupted
    end
    wait_until(message: "the waiter to queue") { c.waiters("i") == 1 }
    waiter.raise(Interrupt)
    assert_equal :interrupted, waiter.value
    wait_until(message: "the waiter to leave") { c.waiters("i").zero? }
    assert c.unlock("i", "holder")
    assert_equal [], c.locked_by("i"), "nobody was granted the slot"
  end

  def test_reap_by_owner_metrics_and_what_the_library_refuses
    c = plain_client
    c.lock("a", "j1", owner: "dead")
    c.lock("b", "j2", owner: "dead")
    c.lock("c", "j3", owner: "alive")
    @admin.raw(%w[HSET not-a-lock f v])
    assert_equal 2, c.reap(owner: "dead", count: 2)
    assert_equal ["j3"], c.locked_by("c")
    assert_equal [], c.locked_by("a")
    assert_equal "v", @admin.raw(%w[HGET not-a-lock f])
    m = c.metrics
    assert_equal 2, m["total"]["reaped"]
    assert_equal 3, m["total"]["acquired"]
    e = assert_raises(RedisUnique::CommandError) { c.metrics(minutes: 5) }
    assert_match(/MINUTES needs the redis-unique module/, e.message)
    c.reset_metrics
    assert_equal 0, c.metrics["total"]["acquired"].to_i
    e = assert_raises(RedisUnique::NotInFunctions) { c.lock_all(["{a}:x", "{a}:y"], "j") }
    assert_match(/needs the redis-unique module/, e.message)
    assert_raises(RedisUnique::NotInFunctions) { c.unlock_all(["{a}:x", "{a}:y"], "j") }
    limits = RedisUnique::Limiter.new(TestSuite.raw_connection(@plain.url), { "{a}:x" => 1, "{a}:y" => 2 })
    assert_raises(RedisUnique::NotInFunctions) { limits.within { flunk "ran without its slots" } }
    assert_equal [], @admin.raw(["KEYS", "{a}*"])
  end

  def test_transactions_send_the_library_call
    c = plain_client
    connection = c.connection
    argv = connection.batch_argv([["UNIQUE.LOCK", "t", "a", "TTL", 30_000, "WAIT", 5000], %w[SET x 1]])
    assert_equal ["FCALL", "unique_lock", 3, "t", F.wake_key("t"), F::METRICS_KEY, "a", "TTL", 30_000], argv[0]
    assert_equal %w[SET x 1], argv[1]
    replies = connection.with { |raw| raw.multi { |tx| argv.each { |a| tx.call(*a.map(&:to_s)) } } }
    assert_kind_of Integer, replies[0]
    assert_equal ["a"], c.locked_by("t")
    assert_equal [["UNIQUE.LOCK", "t", "a"]], client.connection.batch_argv([["UNIQUE.LOCK", "t", "a"]])
  end

  # The README's example "Without the module", replayed on the server without it: each
  # `# => value` checked (a Class: an instance of it).
  def test_the_readmes_example_without_the_module
    readme = File.read(File.join(RedisUnique::Harness::RUBY_DIR, "README.md"))
    section = readme[/^## Without the module: managed Redis and Valkey\n(.*?)(?=^## )/m, 1]
    code = section[/^```ruby\n(.*?)^```\n/m, 1].sub("redis://localhost:6379/0", @plain.url)
    scope = Object.new.instance_eval { binding }
    pending = +""
    checked = 0
    code.each_line do |line|
      part, expected = line.split(/\s+# => /, 2)
      pending << part << "\n"
      next unless expected

      value = scope.eval(pending)
      want = scope.eval(expected.strip)
      want.is_a?(Class) ? assert_kind_of(want, value, line) : assert_equal(want, value, line)
      pending = +""
      checked += 1
    end
    assert_equal 4, checked
    assert_equal F.version, library_version
  end

  def test_the_wake_list_hashes_with_the_lock_key
    assert_equal 0x31C3, F.crc16("123456789")
    assert_equal 12_182, F.key_slot("foo")
    c = plain_client
    ["plain", "{user:1}:lock", "a{b", "a}b", "x{}y}z", "{}", "weird{a}b{c}", "ключ"].each do |key|
      assert_equal F.key_slot(key), F.key_slot(F.wake_key(key)), key
      assert c.lock(key, "j", ttl: 60), key
    end
  end
end
