# frozen_string_literal: true

require_relative "test_helper"
require "open3"

# Migration from sidekiq-unique-jobs v9, on data written by the Lua design of bench/lua/
# (called with v9's keys and arguments).
class MigrateTest < Minitest::Test
  include TestHelpers

  LUA = File.read(File.join(RedisUnique::Harness::ROOT, "bench/lua/lock.lua"))

  def setup
    TestSuite.server
    @prefix = "v9#{rand(1 << 20)}"
  end

  def v9_lock(digest, jid, type:, pttl: 0, limit: 1, klass: "MyJob", args: [1])
    meta = { "worker" => klass, "queue" => "default", "limit" => limit, "timeout" => 0, "ttl" => pttl / 1000,
             "type" => type, "lock_args" => args, "time" => Time.now.to_f, "at" => nil }
    conn.call("EVAL", LUA, 2, "#{digest}:LOCKED", "#{@prefix}:digests",
              jid, limit, JSON.generate(meta), Time.now.to_f, digest, pttl)
  end

  def test_from_v9_moves_locks_and_is_idempotent
    job_digest = RedisUnique::Sidekiq.digest_for({ "class" => "UntilExecutedDefaultJob", "queue" => "default",
                                                   "args" => [token, {}], "lock_prefix" => @prefix })
    v9_lock(job_digest, "jid-a", type: "until_executed", klass: "UntilExecutedDefaultJob", args: [token, {}])
    locking = Time.now
    v9_lock("#{@prefix}:d2", "jid-b", type: "until_expired", pttl: 60_000)
    v9_lock("#{@prefix}:d3", "jid-c", type: "while_executing", limit: 2)
    v9_lock("#{@prefix}:d3", "jid-d", type: "while_executing", limit: 2)
    v9_lock("#{@prefix}:d4:RUN", "jid-e", type: "until_and_while_executing")
    assert_equal 4, conn.call("ZCARD", "#{@prefix}:digests")

    dry = RedisUnique::Migrate.from_v9(TestSuite.raw_connection, prefix: @prefix, dry_run: true)
    assert_equal({ "keys" => 4, "holders" => 5, "skipped" => 0, "dry_run" => true }, dry)
    assert_equal "hash", conn.call("TYPE", "#{@prefix}:d2:LOCKED"), "a dry run changes nothing"
    assert_equal [], client.locked_by("#{@prefix}:d2")

    stats = RedisUnique::Migrate.from_v9(TestSuite.raw_connection, prefix: @prefix, count: 2)
    migrated = Time.now
    assert_equal({ "keys" => 4, "holders" => 5, "skipped" => 0, "dry_run" => false }, stats)

    a = client.holders(job_digest).first
    assert_equal "jid-a", a.jid
    assert_equal "until_executed", a.type
    assert_nil a.expires_at
    assert_equal({ "class" => "UntilExecutedDefaultJob", "queue" => "default", "limit" => 1, "timeout" => 0,
                   "lock_args" => [token, {}], "at" => nil }, a.meta)
    b = client.holders("#{@prefix}:d2").first
    assert_equal "until_expired", b.type
    # The remaining lease becomes PXAT: it ends no sooner than v9's did, and no later than a
    # lease of 60 s from the migration. Ends, not the time left, which a slow run shrinks.
    assert_operator b.expires_at.to_f, :>=, locking.to_f + 60 - 0.002, "the remaining lease becomes PXAT"
    assert_operator b.expires_at.to_f, :<=, migrated.to_f + 60 + 0.002, "the remaining lease becomes PXAT"
    assert_equal %w[jid-c jid-d], client.locked_by("#{@prefix}:d3")
    assert_equal ["jid-e"], client.locked_by("#{@prefix}:d4:RUN")
    assert_equal [], conn.call("KEYS", "#{@prefix}:*:LOCKED")
    assert_equal 0, conn.call("ZCARD", "#{@prefix}:digests")

    again = RedisUnique::Migrate.from_v9(TestSuite.raw_connection, prefix: @prefix)
    assert_equal 0, again["keys"], "a second run finds nothing left"
    assert_equal %w[jid-c jid-d], client.locked_by("#{@prefix}:d3")

    # the gem sees the migrated lock: the same job is a duplicate
    assert_nil UntilExecutedDefaultJob.set(queue: "default", lock_prefix: @prefix).perform_async(token, {})
  end

  def test_bin_redis_unique_migrate
    v9_lock("#{@prefix}:cli", "jid-x", type: "until_executed")
    bin = File.join(RedisUnique::Harness::RUBY_DIR, "bin/redis-unique-migrate")
    out, status = Open3.capture2e(RbConfig.ruby, bin, "--url", TestSuite.url, "--prefix", @prefix, "--dry-run")
    assert status.success?, out
    assert_match(/would migrate 1 lock\(s\), 1 holder\(s\)/, out)
    out, status = Open3.capture2e(RbConfig.ruby, bin, "--url", TestSuite.url, "--prefix", @prefix)
    assert status.success?, out
    assert_match(/migrated 1 lock\(s\), 1 holder\(s\)/, out)
    assert_equal ["jid-x"], client.locked_by("#{@prefix}:cli")
  end
end
