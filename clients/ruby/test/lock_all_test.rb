# frozen_string_literal: true

require_relative "test_helper"

# Several locks in one atomic grant through the gem: Client#lock_all / #unlock_all (argv in
# the contract's order, every key or none, waiting, the rate spent only by a whole grant),
# a multi-key hold renewed by the Refresher (kept; lost after a REAP or an UNLOCK of one
# key), and the Limiter with several limits (threads against a real server, the holders of
# every key sampled in one MULTI).
class LockAllTest < Minitest::Test
  include TestHelpers

  def keys
    @keys ||= ["{#{token}}:tenant", "{#{token}}:global"]
  end

  def teardown
    conn.call("DEL", *keys) if @keys
  end

  # More cases of the conformance table's shape (clients/conformance/table.json has the
  # shared ones), built without a server: rates given out of key order, seconds.
  ARGV_CASES = [
    [{ "keys" => %w[a b], "jid" => "j" }, %w[UNIQUE.LOCKALL 2 a b j]],
    [{ "keys" => %w[a b], "jid" => "j", "limits" => [2, 10], "ttl_ms" => 30_000, "wait_ms" => 5000 },
     %w[UNIQUE.LOCKALL 2 a b j LIMIT 2 10 TTL 30000 WAIT 5000]],
    [{ "keys" => %w[a b c], "jid" => "j", "limits" => [2, 0, 1],
       "rates" => [{ "key" => 3, "rate_limit" => 5, "rate_per_ms" => 100 },
                   { "key" => 2, "rate_limit" => 50, "rate_per_seconds" => 1, "rate_burst" => 10 }],
       "pxat_ms" => 1_700_000_000_000, "type" => "limiter", "owner" => "w1", "meta" => '{"a":1}', "wait_seconds" => 0.3 },
     %w[UNIQUE.LOCKALL 3 a b c j LIMIT 2 0 1 RATE 2 50 PER 1000 BURST 10 RATE 3 5 PER 100 PXAT 1700000000000
        TYPE limiter OWNER w1 META {"a":1} WAIT 300]],
    [{ "keys" => ["a"], "jid" => "j", "rates" => [{ "key" => 1, "rate_limit" => 1, "rate_per_ms" => 10, "rate_burst" => 0 }],
       "ttl_seconds" => 1.5 }, %w[UNIQUE.LOCKALL 1 a j RATE 1 1 PER 10 TTL 1500]]
  ].freeze

  # The neutral arguments as lock_all's keywords (rates: an Array in key order).
  def self.keywords(args)
    rates = Array.new(args["keys"].size)
    (args["rates"] || []).each do |r|
      rates[r["key"] - 1] = { limit: r["rate_limit"], per_ms: r["rate_per_ms"], per: r["rate_per_seconds"],
                              burst: r["rate_burst"] }.compact
    end
    args.reject { |k, _| %w[keys jid rates].include?(k) }.to_h do |name, value|
      { "ttl_seconds" => :ttl, "wait_seconds" => :wait, "pxat_ms" => :pxat }.fetch(name, name.to_sym).then { |k| [k, value] }
    end.merge(args["rates"] ? { rates: rates } : {})
  end

  def test_the_argv_of_lock_all_and_unlock_all
    ARGV_CASES.each do |args, argv|
      built, = RedisUnique::Client.lock_all_argv(args["keys"], args["jid"], **LockAllTest.keywords(args))
      assert_equal argv, built.map(&:to_s), args.inspect
    end
    sent = []
    recorder = Object.new
    recorder.define_singleton_method(:call) { |*a| sent << a.map(&:to_s) && 2 }
    c = RedisUnique::Client.new(TestSuite.raw_connection)
    c.instance_variable_set(:@connection, recorder)
    assert_equal 2, c.unlock_all(%w[a b], "j")
    assert_equal [%w[UNIQUE.UNLOCKALL 2 a b j]], sent
    # rates by key name, and the renewal's argv: the lease only
    assert_equal %w[UNIQUE.LOCKALL 2 a b j RATE 2 3 PER 60000],
                 RedisUnique::Client.lock_all_argv(%w[a b], "j", rates: { "b" => { limit: 3, per: :minute } })
                                    .first.map(&:to_s)
    assert_equal %w[UNIQUE.LOCKALL 2 a b j TTL 900], RedisUnique::Client.renewal_all_argv(%w[a b], "j", 900).map(&:to_s)
  end

  def test_what_lock_all_refuses_before_sending
    sent = []
    c = RedisUnique::Client.new(TestSuite.raw_connection)
    c.instance_variable_set(:@connection, Object.new.tap { |o| o.define_singleton_method(:call) { |*a| sent << a } })
    {
      [[], {}] => /1 to 64 keys/,
      [Array.new(65) { |i| "k#{i}" }, {}] => /1 to 64 keys/,
      [%w[a a], {}] => /each key once: a/,
      ["a", {}] => /Array of Strings/,
      [%w[a b], { limits: [1] }] => /one Integer per key \(2\)/,
      [%w[a b], { limits: [1, -1] }] => /0 \(no limit\) or more/,
      [%w[a b], { rates: { "c" => { limit: 1, per: 1 } } }] => /c, which is not among the keys/,
      [%w[a b], { rates: [nil, nil, { limit: 1, per: 1 }] }] => /3 entries for 2 keys/,
      [%w[a b], { rates: [{ limit: 0, per: 1 }] }] => /rate limit must be 1 or more/,
      [%w[a b], { group: "acme" }] => /does not take group: .*GROUP\) is for one key/,
      [%w[a b], { group_limit: 2 }] => /does not take group_limit: .*its own key/,
      [%w[a b], { weight: 2 }] => /does not take weight:/,
      [%w[a b], { mode: :shared }] => /does not take mode:/,
      [%w[a b], { limit: 2 }] => /give limits:/,
      [%w[a b], { rate: { limit: 1, per: 1 } }] => /give rates:/,
      [%w[a b], { ttl: 1, pxat: Time.now }] => /ttl or pxat/
    }.each do |(ks, opts), message|
      error = assert_raises(RedisUnique::InvalidOption, opts.inspect) { c.lock_all(ks, "j", **opts) }
      assert_match message, error.message
    end
    assert_raises(ArgumentError) { c.lock_all(%w[a b], "j", colour: 1) }
    assert_empty sent, "nothing was sent"
  end

  def test_every_key_or_none_and_the_rate_spent_only_by_a_whole_grant
    tenant, global = keys
    rates = { tenant => { limit: 1, per: 60 } }
    assert client.lock(global, "other", limit: 1)
    assert_nil client.lock_all(keys, "j1", limits: [2, 1], rates: rates), "the global key is full"
    assert_empty client.locked_by(tenant), "nothing taken on the key that had room"
    assert_nil client.rate(tenant), "the refused grant spent nothing of the tenant's rate"
    assert client.unlock(global, "other")
    tokens = client.lock_all(keys, "j1", limits: [2, 1], rates: rates, ttl: 30, type: "limiter", owner: "w1")
    assert_equal 2, tokens.size
    assert(tokens.all?(Integer))
    assert_equal [[["j1", tokens[0], "limiter", "w1"]], [["j1", tokens[1], "limiter", "w1"]]],
                 keys.map { |k| client.holders(k).map { |h| [h.jid, h.token, h.type, h.owner] } }
    assert_equal 0, client.rate(tenant).remaining, "the grant spent the rate"
    assert_nil client.lock_all(keys, "j2", limits: [2, 2], rates: rates), "the tenant's rate refuses the next"
    assert_equal ["j1"], client.locked_by(global), "and took nothing of the global key"
    assert_equal 2, client.unlock_all(keys, "j1")
    assert_equal 0, client.unlock_all(keys, "j1")
    assert(keys.all? { |k| client.locked_by(k).empty? })
  end

  def test_a_waiting_lock_all_gets_every_key_once_the_last_one_frees
    tenant, global = keys
    assert client.lock(global, "busy")
    waiter = Thread.new { RedisUnique::Client.new(TestSuite.raw_connection).lock_all(keys, "w", wait: 20) }
    wait_until(message: "the multi-key call waits on every key") { client.waiters(global) == 1 && client.waiters(tenant) == 1 }
    assert_empty client.locked_by(tenant), "a waiter holds nothing while it waits"
    client.unlock(global, "busy")
    tokens = waiter.value
    assert_equal 2, tokens.size
    assert_equal [["w"], ["w"]], keys.map { |k| client.locked_by(k) }
    # with no room before the wait runs out: nil, nothing held
    assert_nil client.lock_all(keys, "late", wait_ms: 50)
    assert_equal [["w"], ["w"]], keys.map { |k| client.locked_by(k) }
  end

  def test_a_multi_key_hold_is_renewed_as_one_and_kept
    lost = []
    sent = RedisUnique::Refresher.now
    # Renewed every third of the lease: 1.2 s is kept through a stall of the loaded machine
    # of 800 ms, where one of 600 ms ended after 400 ms.
    tokens = client.lock_all(keys, "job-1", ttl_ms: 1200)
    refresher = RedisUnique::Refresher.new(client, keys, "job-1", token: tokens, lease_ms: 1200, sent_at: sent,
                                                                   on_lost: lost.method(:push)).start
    first = keys.map { |k| client.holders(k).first.expires_at }
    # Two renewals, and on the server each key's lease moved on by two of its periods: a
    # renewal that comes late moves it as far alone, so both are waited for.
    wait_until(timeout: 30, message: "two renewals, both leases past their first end") do
      refresher.renewals >= 2 &&
        keys.each_with_index.all? { |k, i| (h = client.holders(k).first) && h.expires_at > first[i] + 0.8 }
    end
    assert_equal tokens, keys.map { |k| client.holders(k).first.token }, "the same hold, renewed"
    assert_empty lost
    assert_raises(RedisUnique::InvalidOption) { refresher.update(type: "x") }
    refresher.stop
    assert_equal 2, client.unlock_all(keys, "job-1")
  end

  def lose_the_hold(message)
    lost = []
    owner = "w-#{token}"
    sent = RedisUnique::Refresher.now
    tokens = client.lock_all(keys, "job-1", ttl: 1, owner: owner)
    refresher = RedisUnique::Refresher.new(client, keys, "job-1", token: tokens, lease_ms: 1000, sent_at: sent,
                                                                   on_lost: lost.method(:push)).start
    yield owner
    wait_until(timeout: 20, message: "the loss told") { lost.any? }
    refresher.stop
    assert refresher.lost?
    assert_equal 1, lost.size
    assert_equal [keys, "job-1"], [lost.first.key, lost.first.jid]
    assert_match(/lost the lock #{Regexp.escape(keys.join(", "))} \(jid job-1\): .*#{message}/, lost.first.message)
  end

  def test_a_renewal_after_one_key_is_unlocked_reports_the_hold_lost
    lose_the_hold("another holder has it") { client.unlock(keys[0], "job-1") }
    assert_empty client.locked_by(keys[0]), "the refused renewal took nothing back"
  end

  def test_a_renewal_after_a_reap_reports_the_hold_lost_and_gives_up_what_it_took
    # At least its two holders: REAP also counts ended leases left by other tests in the database
    lose_the_hold("another fencing token") { |owner| assert_operator client.reap(owner: owner), :>=, 2 }
    wait_until(message: "the renewal's new grant given up (UNLOCKALL)") { keys.all? { |k| client.locked_by(k).empty? } }
  end

  # Samples the holders of `ks` in one MULTI: a consistent picture of every key at once.
  def snapshot(ks)
    Sidekiq.redis { |c| c.multi { |tx| ks.each { |k| tx.call("UNIQUE.LOCKEDBY", k) } } }
  end

  def test_a_limiter_of_several_limits_never_exceeds_either_with_many_threads
    tenants = %w[acme beta]
    global = "{#{token}}:global"
    @keys = tenants.map { |t| "{#{token}}:tenant:#{t}" } + [global]
    done = Queue.new
    threads = Array.new(8) do |n|
      # a Limiter per thread (each its own connection): one per tenant would share one
      tenant = tenants[n % 2]
      limiter = RedisUnique::Limiter.new(TestSuite.raw_connection, { "{#{token}}:tenant:#{tenant}" => 2, global => 3 },
                                         rates: { global => { limit: 1000, per: :second } }, ttl: 5, wait: 30)
      Thread.new do
        6.times do |i|
          limiter.within do |tokens|
            raise "tokens #{tokens.inspect}" unless tokens.size == 2

            sleep(0.005 * (1 + ((n + i) % 4)))
          end
          done << [n, i]
        end
      end
    end
    samples = []
    samples << snapshot(@keys) until threads.none?(&:alive?)
    threads.each(&:join)
    assert_equal 48, done.size, "every call ran"
    samples.each do |acme, beta, all|
      assert_operator acme.size, :<=, 2
      assert_operator beta.size, :<=, 2
      assert_operator all.size, :<=, 3
      assert_equal (acme + beta).sort, all.sort, "every holder of a tenant holds the global key, and only they"
    end
    assert(samples.any? { |_, _, all| all.size == 3 }, "the global limit was reached")
    assert(samples.any? { |acme, beta, _| acme.size == 2 || beta.size == 2 }, "a tenant's limit was reached")
    assert(@keys.all? { |k| client.locked_by(k).empty? }, "every slot freed")
  end

  def test_a_limiter_of_several_limits_refuses_what_it_cannot_do
    r = TestSuite.raw_connection
    k = { "{#{token}}:a" => 1, "{#{token}}:b" => 2 }
    { { concurrency: 2 } => /does not take concurrency:/, { rate: { limit: 1, per: 1 } } => /give rates:/,
      { group: "x" } => /fair sharing is for a Limiter of one key/, { group_limit: 1 } => /group_limit:/ }.each do |opts, m|
      assert_match m, assert_raises(RedisUnique::InvalidOption) { RedisUnique::Limiter.new(r, k, **opts) }.message
    end
    assert_match(/no concurrency and no rate/,
                 assert_raises(RedisUnique::InvalidOption) { RedisUnique::Limiter.new(r, { "a" => nil }) }.message)
    assert_match(/must be 1 or more/,
                 assert_raises(RedisUnique::InvalidOption) { RedisUnique::Limiter.new(r, { "a" => 0 }) }.message)
    limiter = RedisUnique::Limiter.new(r, k, wait: 0.05)
    assert_raises(RedisUnique::InvalidOption) { limiter.within(group: "g") { flunk } }
    assert client.lock(k.keys[0], "busy")
    error = assert_raises(RedisUnique::LimitReached) { limiter.within { flunk "ran without every slot" } }
    assert_kind_of RedisUnique::LimitsReached, error
    assert_equal k.keys, error.key
    assert_match(/holders then: \{#{token}\}:a 1\/1, \{#{token}\}:b 0\/2/, error.message)
    assert_empty client.locked_by(k.keys[1]), "nothing held after the refusal"
  ensure
    conn.call("DEL", *k.keys) if k
  end
end
