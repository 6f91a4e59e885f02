# frozen_string_literal: true

require_relative "test_helper"
require_relative "../examples/006_several_limits"

# lock_limits: several limits held while a Sidekiq job runs, in one atomic grant. What the
# option refuses (at push, naming the class and what to give instead), what a push writes
# into the job, the death handler's release, and the README's SyncAccountJob run by real
# Sidekiq processes: 8 accounts of 15 syncs each against "2 at once per account, 10 at once
# and 50 a second in all", the holders of every key sampled in one MULTI until every sync
# ran: no account over 2, never over 10 in all, every holder of an account key holding the
# global key too (and only they: every key or none), both limits reached, every job run once.
class LockLimitsTest < Minitest::Test
  include TestHelpers

  # A job class of this test with `options` (lock_limits and others).
  def job_class(**options)
    name = "LockLimits#{token.gsub(/\W/, "")}Job"
    klass = Class.new do
      include(defined?(Sidekiq::Job) ? Sidekiq::Job : Sidekiq::Worker)

      def perform(*); end
    end
    Object.send(:remove_const, name) if Object.const_defined?(name)
    Object.const_set(name, klass)
    klass.sidekiq_options(queue: "nobody-#{token}", **options)
    klass
  end

  def teardown
    conn.call("DEL", "queue:nobody-#{token}")
  end

  def test_what_lock_limits_refuses_at_push
    limits = { "{t}:a" => 1, "{t}:b" => 2 }
    {
      { lock: :until_executed, lock_limits: limits } => /held while the job runs: they need lock: :while_executing.*not :until_executed/,
      { lock_limits: limits } => /no lock: given/,
      { lock: :while_executing, lock_limits: limits, lock_limit: 3 } => /with lock_limit: give each key's limit/,
      { lock: :while_executing, lock_limits: limits, lock_rate: { limit: 1, per: 1 } } => /with lock_rate: give the rate with its key/,
      { lock: :while_executing, lock_limits: limits, lock_group: "acme" } => /fair sharing \(lock_group\) is for one key/,
      { lock: :while_executing, lock_limits: ["{t}:a"] } => /a Hash \{ key => limit \}/,
      { lock: :while_executing, lock_limits: {} } => /a Hash \{ key => limit \}/,
      { lock: :while_executing, lock_limits: { "{t}:a" => 0 } } => /the limit of \{t\}:a must be 1 or more/,
      { lock: :while_executing, lock_limits: { "{t}:a" => { rate: { limit: 0, per: 1 } } } } => /rate limit must be 1 or more/,
      { lock: :while_executing, lock_limits: { "{t}:a" => { concurrency: 2 } } } => /a key takes limit: and rate:/,
      { lock: :while_executing, lock_limits: { "{t}:a" => {} } } => /no limit and no rate/,
      { lock: :while_executing, lock_limits: Array.new(65) { |i| ["{t}:#{i}", 1] }.to_h } => /1 to 64 keys/,
      { lock: :while_executing, lock_limits: ->(_args) { { "{t}:a": 1, "{t}:a" => 1 } } } => /each key once: \{t\}:a/
    }.each do |options, message|
      klass = job_class(**options)
      error = assert_raises(RedisUnique::InvalidOption, options.inspect) { klass.perform_async("x", "x") }
      assert_match message, error.message
      assert_match(/\A#{klass.name}: sidekiq_options lock_limits/, error.message)
    end
    assert_empty queue_jids("nobody-#{token}"), "no refused job was pushed"
  end

  def test_a_push_writes_the_limits_the_lambda_gave_into_the_job
    klass = job_class(lock: :while_executing, lock_ttl: 30,
                      lock_limits: ->(args) { { "{s}:account:#{args[0]}" => 2, "{s}:all" => { limit: 10, rate: { limit: 5, per: :second } } } })
    jid = klass.perform_async("acme")
    (job,) = conn.call("LRANGE", "queue:nobody-#{token}", 0, -1).map { |j| JSON.parse(j) }
    assert_equal jid, job["jid"]
    assert_equal({ "{s}:account:acme" => 2, "{s}:all" => { "limit" => 10, "rate" => { "limit" => 5, "per" => "second" } } },
                 job["lock_limits"])
    # the server reads it back as the grant's keys, limits and rates
    server_side = RedisUnique::Sidekiq::Job.new(nil, job, nil)
    assert_equal({ keys: ["{s}:account:acme", "{s}:all"], limits: [2, 10], rates: [nil, { "limit" => 5, "per" => "second" }] },
                 server_side.lock_limits)
    assert_equal %w[UNIQUE.LOCKALL 2 {s}:account:acme {s}:all j LIMIT 2 10 RATE 2 5 PER 1000],
                 RedisUnique::Client.lock_all_argv(server_side.lock_limits[:keys], "j",
                                                   **server_side.lock_limits.except(:keys)).first.map(&:to_s)
    # each key's limit in the one META of the grant, where the Locks tab reads a key's limit
    meta = JSON.parse(server_side.meta)
    assert_equal({ "{s}:account:acme" => 2, "{s}:all" => 10 }, meta["limits"])
    require "redis_unique/web/store"
    holder = RedisUnique::Holder.new(jid: jid, meta: meta)
    assert_equal [2, 10], ["{s}:account:acme", "{s}:all"].map { |k| RedisUnique::Web::Store::Lock.new(key: k, holders: [holder]).limit }
    # a class method's name, called with the args
    named = job_class(lock: :while_executing, lock_limits: :limits_of)
    named.define_singleton_method(:limits_of) { |args| { "{s}:#{args[0]}" => 3 } }
    pushed = named.perform_async("globex")
    job = conn.call("LRANGE", "queue:nobody-#{token}", 0, -1).map { |j| JSON.parse(j) }.find { |j| j["jid"] == pushed }
    assert_equal({ "{s}:globex" => 3 }, job["lock_limits"])
    assert_match(/names :nothing, which is no class method/,
                 assert_raises(RedisUnique::InvalidOption) { job_class(lock: :while_executing, lock_limits: :nothing).perform_async }.message)
  end

  def test_a_dead_job_frees_every_key_of_its_limits
    keys = ["{#{token}}:account", "{#{token}}:all"]
    item = { "class" => "SyncAccountJob", "jid" => "dead-#{token}", "queue" => "default", "args" => ["a", 1],
             "lock" => "while_executing", "lock_limits" => { keys[0] => 2, keys[1] => 10 } }
    assert client.lock_all(keys, item["jid"], limits: [2, 10])
    RedisUnique::Sidekiq::DEATH_HANDLER.call(item, RuntimeError.new("died"))
    assert_equal [[], []], keys.map { |k| client.locked_by(k) }
    # limits that are not valid were never taken: the rest is freed all the same
    dep = "{#{token}}:dependency"
    bad = item.merge("jid" => "bad-#{token}", "lock_limits" => { keys[0] => 0 }, "dependency_locks" => [dep])
    assert client.lock(dep, bad["jid"], limit: 0)
    RedisUnique::Sidekiq::DEATH_HANDLER.call(bad, RuntimeError.new("died"))
    assert_empty client.locked_by(dep)
  ensure
    conn.call("DEL", *keys, "{#{token}}:dependency")
  end

  # With ReliableFetch, the end-of-job release of every key goes with the acknowledgement,
  # in one MULTI (UNIQUE.UNLOCKALL there), and after_unlock follows it.
  def test_reliable_fetch_releases_every_key_with_the_acknowledgement
    rf = RedisUnique::Sidekiq::ReliableFetch
    q = "rf_all_#{token}"
    fetch = if H.sidekiq7?
              require "sidekiq/capsule"
              rf.new(Sidekiq::Capsule.new("test-#{token}", Sidekiq.default_configuration).tap { |c| c.queues = [q] })
            else
              rf.new(queues: [q], strict: true)
            end
    keys = ["{#{token}}:account", "{#{token}}:all"]
    conn.call("RPUSH", "queue:#{q}", JSON.generate("jid" => "j1", "queue" => q, "class" => "SyncAccountJob"))
    unit = fetch.retrieve_work
    assert client.lock_all(keys, "j1", limits: [2, 10], owner: fetch.identity)
    after = []
    unit.defer_unlock(keys, client) { after << :unlocked }
    assert_equal [["j1"], ["j1"]], keys.map { |k| client.locked_by(k) }, "deferred to the acknowledgement"
    unit.acknowledge
    assert_equal [[], []], keys.map { |k| client.locked_by(k) }
    assert_equal [:unlocked], after
    assert_equal ["UNIQUE.UNLOCKALL", 2, *keys, "j1"], rf.unlock_argv(keys, "j1")
    # after a hard shutdown requeued the unit, a late release is sent at once
    conn.call("RPUSH", "queue:#{q}", JSON.generate("jid" => "j2", "queue" => q))
    unit = fetch.retrieve_work
    client.lock_all(keys, "j2")
    fetch.bulk_requeue([unit])
    unit.defer_unlock(keys, client)
    assert_equal [[], []], keys.map { |k| client.locked_by(k) }
  ensure
    conn.call("DEL", "queue:#{q}", *keys)
  end

  # --- renewal of both keys in a real Sidekiq process ---

  def renewal_lost
    RedisUnique::Sidekiq.stats(TestSuite.conn)["renewal_lost"].to_i
  end

  def renewed_job
    sidekiq = TestSuite.start_sidekiq(queues: %w[renew-limits], concurrency: 2)
    keys = ["{#{token}}:account", "{#{token}}:all"]
    RenewedLimitsJob.perform_async(token, { "hold" => true })
    (start,) = wait_events("start")
    held = wait_until(timeout: 10, message: "the job's holds") do
      hs = keys.map { |k| client.holders(k).first }
      hs.all? && hs
    end
    assert_equal [[start["jid"], sidekiq.identity]] * 2, held.map { |h| [h.jid, h.owner] }
    yield sidekiq, keys, held, start["jid"]
  ensure
    release
    TestSuite.stop_sidekiq(sidekiq) if sidekiq
  end

  def test_sidekiq_until_and_while_executing_is_unique_until_it_starts_then_holds_its_limits
    keys = ["{#{token}}:account", "{#{token}}:all"]
    opts = { "hold" => true }
    digest = digest_of(UntilAndWhileLimitsJob, token, opts, queue: "renew-limits")
    jid = UntilAndWhileLimitsJob.perform_async(token, opts)
    assert_equal [jid], client.locked_by(digest), "the until-lock from push"
    assert_nil UntilAndWhileLimitsJob.perform_async(token, opts), "a duplicate refused at push"
    assert_equal [[], []], keys.map { |k| client.locked_by(k) }, "the limits are not held while it is queued"
    sidekiq = TestSuite.start_sidekiq(queues: %w[renew-limits], concurrency: 2)
    wait_events("start")
    assert_equal [[jid], [jid]], keys.map { |k| client.locked_by(k) }, "the limits held while it runs"
    assert_empty client.locked_by(digest), "the until-lock passed on at the start"
    release
    wait_events("done")
    wait_until(message: "every key freed at the end") { keys.all? { |k| client.locked_by(k).empty? } }
  ensure
    TestSuite.stop_sidekiq(sidekiq) if sidekiq
  end

  def test_sidekiq_a_job_longer_than_its_lock_ttl_keeps_every_key
    before = renewal_lost
    renewed_job do |sidekiq, keys, held, jid|
      # past the first lease's end: held only because the renewals moved both keys' leases
      wait_until(timeout: 30, message: "renewals past the first lease on both keys") do
        now = keys.map { |k| client.holders(k).first }
        now.all? && now.zip(held).all? { |n, h| n.token == h.token && n.expires_at > h.expires_at + 3 }
      end
      release
      wait_events("done")
      wait_until(timeout: 10, message: "both keys freed at the end") { keys.all? { |k| client.holders(k).empty? } }
      assert_equal before, renewal_lost
      refute_match(/#{jid} lost its/, sidekiq.log)
    end
  end

  def test_sidekiq_one_key_unlocked_makes_the_next_renewal_report_the_lock_lost
    before = renewal_lost
    renewed_job do |sidekiq, keys, _held, jid|
      client.unlock(keys[0], jid)
      wait_until(timeout: 10, message: "the loss counted") { renewal_lost == before + 1 }
      line = sidekiq.log.lines.grep(/lost its while_executing lock/).last
      assert_match(/RenewedLimitsJob #{jid} lost its while_executing lock #{Regexp.escape(keys.join(", "))}/, line)
      assert_match(/another holder has it/, line)
      assert_empty client.locked_by(keys[0]), "the refused renewal took nothing back"
      release
      wait_events("done")
      # the job's end frees nothing of a hold it lost: the other key is left to its lease
      wait_until(timeout: 10, message: "the other key's lease to end") { client.locked_by(keys[1]).empty? }
    end
  end

  ACCOUNTS = 8
  SYNCS = 15
  PER_ACCOUNT = 2
  IN_ALL = 10

  def test_syncs_never_exceed_their_account_nor_the_whole_with_real_workers
    queue = "syncs-#{token}"
    # 2 processes of 10 threads: more than the 10 in all and the 16 the accounts would allow.
    sidekiqs = Array.new(2) { TestSuite.start_sidekiq(queues: [queue], concurrency: 10) }
    # Every round must keep every limit. That a round also reached them (so that they were
    # tested) depends on the workers keeping up 50 grants a second and on the sampler seeing
    # every grant of 50 ms, which a loaded machine may not: up to 3 rounds are run until one
    # does.
    round = nil
    3.times do |n|
      round = sync_round(queue, "#{token}-r#{n}")
      puts "\nlock_limits (Sidekiq #{Sidekiq::VERSION}) round #{n + 1}: #{round[:samples]} samples; most per " \
           "account #{round[:most_per_account]}, most in all #{round[:most_in_all]}; #{round[:seen]} of " \
           "#{round[:total]} grants seen, most in any second #{round[:most_per_second]}"
      break if round[:most_per_account] == PER_ACCOUNT && round[:most_in_all] == IN_ALL &&
               round[:seen] == round[:total] && round[:most_per_second] >= 45
    end
    assert_equal PER_ACCOUNT, round[:most_per_account], "an account's limit was reached, so it was tested"
    assert_equal IN_ALL, round[:most_in_all], "the limit in all was reached, so it was tested"
    assert_equal round[:total], round[:seen], "every grant was seen, so the rate was checked on them all"
    assert_operator round[:most_per_second], :>=, 45, "the rate was reached, so it was tested"
  ensure
    (sidekiqs || []).each { |p| TestSuite.stop_sidekiq(p) }
  end

  # One round of ACCOUNTS * SYNCS syncs of accounts of their own (named after `suffix`): the
  # keys of every account and the key in all, sampled together while they run, never over
  # their limits nor holding one key without the others; the rate checked on the grants that
  # the samples saw. Returns how close the round came to each limit and how many grants it saw.
  def sync_round(queue, suffix)
    accounts = Array.new(ACCOUNTS) { |i| "a#{i}-#{suffix}" }
    keys = accounts.map { |a| "{partner}:account:#{a}" } + ["{partner}:all"]
    conn.call("DEL", *keys)
    # First syncs of 50 ms (the rate binds: 10 at once could start 200 a second), then of
    # 400 ms (10 at once bind: 25 a second).
    total = ACCOUNTS * SYNCS
    # The list of syncs done keeps the earlier rounds' and tests': the sampler reads only
    # what came after them, so that its pace (and the grants it sees) stays the same.
    read = conn.call("LLEN", "examples:syncs:done")
    ::Sidekiq::Client.push_bulk("class" => SyncAccountJob, "queue" => queue,
                                "args" => Array.new(total) { |i| [accounts[i % ACCOUNTS], i, i < total / 2 ? 0.05 : 0.4] })
    samples = []
    grants = {} # jid => token of its grant on the key in all (unix µs, the server's clock)
    done = []
    wait_until(timeout: 120, interval: 0, message: "#{total} syncs done") do
      # one MULTI: every key at the same instant; the key in all WITHMETA, for its grants' tokens
      sample = Sidekiq.redis do |c|
        c.multi do |tx|
          keys[0...-1].each { |k| tx.call("UNIQUE.LOCKEDBY", k) }
          tx.call("UNIQUE.LOCKEDBY", keys.last, "WITHMETA")
        end
      end
      holders = sample.pop.map { |h| RedisUnique::Client.holder(h) }
      holders.each { |h| grants[h.jid] = h.token }
      samples << (sample << holders.map(&:jid))
      fresh = conn.call("LRANGE", "examples:syncs:done", read, -1)
      read += fresh.size
      done.concat(fresh.map { |e| JSON.parse(e) }.select { |account, _| account.end_with?(suffix) })
      done.size >= total
    end
    most_per_account = 0
    most_in_all = 0
    samples.each do |sample|
      *per_account, all = sample
      per_account.each { |holders| assert_operator holders.size, :<=, PER_ACCOUNT, "an account over its limit: #{sample}" }
      assert_operator all.size, :<=, IN_ALL, "over the limit in all: #{sample}"
      assert_equal per_account.flatten.sort, all.sort, "every key or none: #{sample}"
      most_per_account = [most_per_account, *per_account.map(&:size)].max
      most_in_all = [most_in_all, all.size].max
    end
    assert_equal total, done.size, "each sync once"
    assert_equal (0...total).to_a, done.map { |_, batch, _| batch }.sort, "every sync ran: no deadlock, none lost"
    wait_until(message: "every key freed") { keys.all? { |k| client.locked_by(k).empty? } }
    jids = done.map(&:last)
    assert_empty grants.keys - jids, "every grant seen on the key in all is one of this round's syncs"
    # At most 50 grants in any second, on the server's clock: checked on the grants seen (a
    # sampler held back longer than a 50 ms hold misses one; the caller then counts the
    # round as not having checked them all).
    most_per_second = most_in_any_window(grants.values.map { |t| t / 1_000_000.0 }, 1.0)
    assert_operator most_per_second, :<=, 50
    { samples: samples.size, most_per_account: most_per_account, most_in_all: most_in_all,
      total: total, seen: (jids & grants.keys).size, most_per_second: most_per_second }
  end

  def most_in_any_window(times, window)
    times = times.sort
    j = 0
    times.each_with_index.map do |t, i|
      j += 1 while times[j] <= t - window
      i - j + 1
    end.max
  end
end
