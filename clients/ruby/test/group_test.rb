# frozen_string_literal: true

require_relative "test_helper"

# Groups, group limits, weights and modes through the gem against the real module: what
# the server grants, what holders and WAITERS GROUPS say, and whom a freed slot goes to.
class GroupTest < Minitest::Test
  include TestHelpers

  def key
    "group:#{token}"
  end

  # A client of its own per thread: a lock with wait: blocks its connection.
  def waiting_lock(jid, **opts)
    Thread.new { RedisUnique::Client.new(TestSuite.raw_connection).lock(key, jid, wait: 30, **opts) }
  end

  def groups
    client.waiters(key, groups: true).map(&:to_a)
  end

  def test_a_group_limit_refuses_its_group_only_and_holders_show_group_and_mode
    assert client.lock(key, "a1", limit: 3, group: "acme", group_limit: 2, ttl: 60)
    assert client.lock(key, "a2", limit: 3, group: "acme", group_limit: 2, ttl: 60, mode: :shared)
    assert_nil client.lock(key, "a3", limit: 3, group: "acme", group_limit: 2, ttl: 60), "acme holds 2"
    assert client.lock(key, "g1", limit: 3, group: "globex", group_limit: 2, ttl: 60), "another group is not refused"
    assert client.lock(key, "n1", limit: 0), "a holder without a group"
    held = client.holders(key).map { |h| [h.jid, h.group, h.mode] }
    assert_equal [["a1", "acme", nil], ["a2", "acme", "shared"], ["g1", "globex", nil], ["n1", nil, nil]], held
    assert_equal [[nil, 0, 1], ["acme", 0, 2], ["globex", 0, 1]], groups, "nil first, then by name"
    # A renewal keeps the group (no GROUP sent), and a different group is refused.
    tok = client.holders(key).first.token
    assert_equal tok, client.lock(key, "a1", ttl: 30)
    assert_equal "acme", client.holders(key).first.group
    assert_raises(RedisUnique::CommandError) { client.lock(key, "a1", group: "globex", ttl: 30) }
    assert_equal [], client.waiters("group:none:#{token}", groups: true)
  end

  def test_a_freed_slot_goes_to_the_group_holding_fewest
    assert client.lock(key, "a-held", limit: 2, group: "a", ttl: 60)
    assert client.lock(key, "a-freed", limit: 2, group: "a", ttl: 60)
    first_a = waiting_lock("a-1", limit: 2, group: "a", ttl: 60)
    wait_until(message: "a-1 waits") { groups == [["a", 1, 2]] }
    second_a = waiting_lock("a-2", limit: 2, group: "a", ttl: 60)
    wait_until(message: "a-2 waits") { groups == [["a", 2, 2]] }
    b = waiting_lock("b-1", limit: 2, group: "b", weight: 2, ttl: 60)
    wait_until(message: "b-1 waits") { groups == [["a", 2, 2], ["b", 1, 0]] }
    client.unlock(key, "a-freed")
    assert_kind_of Integer, b.value, "b holds nothing: it gets the slot, though a-1 and a-2 came first"
    assert_equal [["a", 2, 1], ["b", 0, 1]], groups
    client.unlock(key, "b-1")
    assert_kind_of Integer, first_a.value, "then a, in its own order"
    client.unlock(key, "a-held")
    assert_kind_of Integer, second_a.value
    assert_equal %w[a-1 a-2], client.locked_by(key)
  end

  def test_a_waiter_over_its_group_limit_does_not_block_another_group
    assert client.lock(key, "a1", limit: 3, group: "a", group_limit: 1, ttl: 60)
    a2 = waiting_lock("a2", limit: 3, group: "a", group_limit: 1, ttl: 60)
    wait_until(message: "a2 waits") { groups == [["a", 1, 1]] }
    assert client.lock(key, "b1", limit: 3, group: "b", group_limit: 1, ttl: 60), "a free slot, and b is under its limit"
    client.unlock(key, "a1")
    assert_kind_of Integer, a2.value
    assert_equal [["a", 0, 1], ["b", 0, 1]], groups
  end

  def test_shared_and_exclusive
    assert client.lock(key, "r1", limit: 10, mode: :shared, ttl: 60)
    assert client.lock(key, "r2", limit: 10, mode: :shared, ttl: 60)
    assert_nil client.lock(key, "w", mode: :exclusive, ttl: 60), "readers hold it"
    writer = waiting_lock("w", mode: :exclusive, ttl: 60)
    wait_until(message: "the writer waits") { client.waiters(key) == 1 }
    late_reader = waiting_lock("r3", limit: 10, mode: :shared, ttl: 60)
    wait_until(message: "a reader after the writer waits") { client.waiters(key) == 2 }
    client.unlock(key, "r1")
    client.unlock(key, "r2")
    assert_kind_of Integer, writer.value, "the writer, once the readers left"
    assert_equal [%w[w exclusive]], client.holders(key).map { |h| [h.jid, h.mode] }
    client.unlock(key, "w")
    assert_kind_of Integer, late_reader.value
    assert_equal [%w[r3 shared]], client.holders(key).map { |h| [h.jid, h.mode] }
  end

  # Through Sidekiq: the runtime lock's holders carry the job's tenant, and a job over its
  # tenant's lock_group_limit meets on_conflict (here :reject) while another tenant runs.
  def test_a_sidekiq_job_over_its_tenants_limit_meets_on_conflict
    TestSuite.workers
    run_key = "#{digest_of(TenantLimitedJob, token, "a", { "hold" => true })}:RUN"
    first = TenantLimitedJob.perform_async(token, "a", { "hold" => true })
    wait_events("start")
    over = TenantLimitedJob.perform_async(token, "a", { "hold" => true })
    wait_until(message: "the second job of a rejected") { Sidekiq::DeadSet.new.find_job(over) }
    other = TenantLimitedJob.perform_async(token, "b", { "hold" => true })
    wait_events("start", 2)
    held = client.holders(run_key).map { |h| [h.jid, h.group, h.type] }
    assert_equal [[first, "a", "while_executing"], [other, "b", "while_executing"]], held
    release(token, 2)
    assert_equal [first, other].sort, wait_events("done", 2).map { |e| e["jid"] }.sort
    wait_until(message: "both slots freed") { client.locked_by(run_key).empty? }
    refute(events.any? { |e| e["jid"] == over }, "the rejected job never ran")
  end

  def test_a_limiter_shared_by_tenants_caps_each
    limiter = RedisUnique::Limiter.new(TestSuite.raw_connection, key, concurrency: 4, group_limit: 2, ttl: 10, wait: 20)
    gate = Queue.new
    seen = Queue.new
    threads = %w[a a a b b b].each_with_index.map do |tenant, i|
      Thread.new do
        own = RedisUnique::Client.new(TestSuite.raw_connection) # the Limiter's renewals use its own
        RedisUnique::Limiter.new(TestSuite.raw_connection, key, concurrency: 4, group_limit: 2, ttl: 10, wait: 20)
                            .within("#{tenant}#{i}", group: tenant) do
          seen << own.waiters(key, groups: true).map(&:to_a)
          gate.pop
        end
      end
    end
    wait_until(message: "2 of a and 2 of b hold, the others wait") { groups == [["a", 1, 2], ["b", 1, 2]] }
    6.times { gate << true }
    threads.each(&:join)
    samples = Array.new(seen.size) { seen.pop }
    assert(samples.all? { |s| s.all? { |_, _, holding| holding <= 2 } }, "never more than 2 of a tenant: #{samples}")
    assert_empty client.locked_by(key)
    error = assert_raises(RedisUnique::LimitReached) do
      2.times { client.lock(key, "x#{_1}", limit: 4, group: "a", ttl: 10) }
      RedisUnique::Limiter.new(TestSuite.raw_connection, key, concurrency: 4, group_limit: 2, wait: 0.05)
                          .within(group: "a") { flunk "over a's limit" }
    end
    assert_match(/no slot of #{key} for group a within the wait/, error.message)
    assert limiter.within(group: "b") { true }, "b is under its limit"
  end
end
