# frozen_string_literal: true

require "io/wait"
require "socket"
require "uri"

require_relative "test_helper"
require_relative "app/reliable_jobs"

# ReliableFetch: jobs and their locks kept together across kill -9 and graceful restarts,
# with real Sidekiq processes (and in-process checks of its parts).
class ReliableFetchTest < Minitest::Test
  include TestHelpers

  RELIABLE_APP = File.expand_path("app/reliable_app.rb", __dir__)
  RF = RedisUnique::Sidekiq::ReliableFetch

  def teardown
    (@procs || []).each(&:stop)
  end

  def start(app, queue, n: 1, concurrency: 2)
    TestSuite.server
    procs = Array.new(n) do
      H::SidekiqProcess.new(app: app, redis_url: TestSuite.url, queues: [queue], concurrency: concurrency,
                            env: TestSuite.sidekiq_env)
    end
    (@procs ||= []).concat(procs)
    procs.each { |p| p.wait_ready(conn) }
  end

  # The commands every client sent while the block ran, from MONITOR, in order: each
  # as { client: "ip:port", args: [name (lower case), args...] }.
  def monitored
    host, port = URI(TestSuite.url).then { |u| [u.host, u.port] }
    mon = TCPSocket.new(host, port)
    mon.write("*1\r\n$7\r\nMONITOR\r\n")
    assert_equal "+OK", mon.gets.chomp
    yield
    mark = "monitored-#{token}-#{rand(1 << 30)}"
    conn.call("ECHO", mark)
    lines = []
    deadline = Time.now + H::PATIENCE
    until lines.last&.include?(mark)
      flunk "MONITOR never showed #{mark}" if Time.now > deadline
      lines << mon.gets.to_s.chomp if mon.wait_readable(0.5)
    end
    lines.filter_map do |line|
      m = line.match(/\A\+\S+ \[\d+ ([^\]]+)\] (.*)\z/) or next
      args = m[2].scan(/"((?:[^"\\]|\\.)*)"/).flatten
      { client: m[1], args: [args.first.to_s.downcase, *args.drop(1)] }
    end
  ensure
    mon&.close
  end

  def working(identity)
    conn.call("LRANGE", RF.working_key(identity), 0, -1).map { |j| JSON.parse(j)["jid"] }
  end

  def stats
    h = conn.call("HGETALL", RF::STATS_KEY)
    h = Hash[*h] if h.is_a?(Array)
    h.transform_values(&:to_i)
  end

  def all_jids_in_redis
    jids = conn.call("KEYS", "queue:*").flat_map { |q| conn.call("LRANGE", q, 0, -1) }
    jids += conn.call("KEYS", "#{RF::WORKING_PREFIX}*").flat_map { |w| conn.call("LRANGE", w, 0, -1) }
    jids += %w[retry schedule dead].flat_map { |s| conn.call("ZRANGE", s, 0, -1) }
    jids.map { |j| JSON.parse(j)["jid"] }
  end

  # A fetcher of this process on `queues` (strict unless weights are given: ["a,3", "b,1"]).
  def fetcher(queues)
    if H.sidekiq7?
      require "sidekiq/capsule"
      cap = Sidekiq::Capsule.new("test-#{token}", Sidekiq.default_configuration)
      cap.queues = queues
      RF.new(cap)
    else
      weighted = queues.any? { |q| q.include?(",") }
      names = queues.flat_map { |q| n, w = q.split(","); [n] * [w.to_i, 1].max }
      RF.new(queues: names, strict: !weighted)
    end
  end

  def test_kill_9_mid_job_reruns_with_reliable_fetch_and_is_lost_with_brpop
    reliable = start(RELIABLE_APP, "rf_kill", n: 2)
    plain = start(TestSuite::APP, "rf_plain", n: 2)
    tok_r = "#{token}-r"
    tok_p = "#{token}-p"
    opts = { "hold" => true }
    jid_r = WhileExecutingDefaultJob.set(queue: "rf_kill").perform_async(tok_r, opts)
    jid_p = WhileExecutingDefaultJob.set(queue: "rf_plain").perform_async(tok_p, opts)
    wait_events("start", 1, tok_r)
    wait_events("start", 1, tok_p)
    run_r = "#{digest_of(WhileExecutingDefaultJob, tok_r, opts, queue: "rf_kill")}:RUN"
    run_p = "#{digest_of(WhileExecutingDefaultJob, tok_p, opts, queue: "rf_plain")}:RUN"
    first = client.holders(run_r).first
    victim_r = reliable.find { |p| p.identity == first.owner }
    survivor_r = (reliable - [victim_r]).first
    victim_p = plain.find { |p| p.identity == client.holders(run_p).first.owner }
    refute_nil victim_r
    refute_nil victim_p
    assert_equal [jid_r], working(victim_r.identity), "the running job is in its process's working list"
    assert_empty queue_jids("rf_kill")
    assert_includes all_jids_in_redis, jid_r
    refute_includes all_jids_in_redis, jid_p, "BRPOP: a running job is nowhere in Redis"
    reaped_before = client.metrics.dig("types", "while_executing", "reaped").to_i
    requeued_before = stats["requeued_dead"].to_i

    victim_r.kill9
    victim_p.kill9
    killed_at = Process.clock_gettime(Process::CLOCK_MONOTONIC)

    # reliable: once the victim's heartbeat is older than dead_after, the leader frees its
    # runtime lock and requeues its working list; the survivor runs the job again
    second = wait_events("start", 2, tok_r)[1]
    elapsed = Process.clock_gettime(Process::CLOCK_MONOTONIC) - killed_at
    assert_equal jid_r, second["jid"]
    # Not before the victim could look dead: its last beat (at most a second before the
    # kill) older than dead_after. How soon after is the reaper's and the fetch's pace on
    # this machine, printed below, not asserted.
    assert_operator elapsed, :>=, TestSuite.dead_after - 1, "ran again only once the victim was found dead"
    rerun = client.holders(run_r).first
    assert_equal survivor_r.identity, rerun.owner
    assert_operator rerun.token, :>, first.token,
                    "a new grant: the dead process's while_executing lock was freed before the job ran again"
    assert_operator client.metrics.dig("types", "while_executing", "reaped").to_i, :>=, reaped_before + 1,
                    "the victim's runtime lock freed by REAP OWNER"
    assert_equal requeued_before + 1, stats["requeued_dead"].to_i
    assert_empty working(victim_r.identity), "the dead process's working list is gone"
    assert_equal [jid_r], working(survivor_r.identity)
    puts "\n  kill -9 (Sidekiq #{Sidekiq::VERSION}): ran again #{elapsed.round(1)}s after the kill " \
         "(dead_after #{TestSuite.dead_after}s, reaper_interval 1s); BRPOP control: lost"
    release(tok_r)
    wait_events("done", 1, tok_r)
    wait_until(message: "acknowledged and unlocked") { working(survivor_r.identity).empty? && client.locked_by(run_r).empty? }

    # control (BRPOP): the reaper freed the dead process's lock too, but the job is gone
    wait_until(message: "the plain victim's lock reaped") { client.locked_by(run_p).empty? }
    assert_equal reaped_before + 2, client.metrics.dig("types", "while_executing", "reaped").to_i
    assert_equal 1, events(tok_p).count { |e| e["event"] == "start" }, "never ran again"
    refute_includes all_jids_in_redis, jid_p, "lost: in no queue, working list, retry, schedule or dead set"
  end

  def test_graceful_restart_requeues_and_keeps_until_executed_locks
    old = start(RELIABLE_APP, "rf_term", concurrency: 3).first
    args = [{ "hold" => true, "i" => 0 }, { "hold" => true, "i" => 1 }]
    jids = args.map { |a| UntilExecutedDefaultJob.set(queue: "rf_term").perform_async(token, a) }
    digests = args.map { |a| digest_of(UntilExecutedDefaultJob, token, a, queue: "rf_term") }
    wait_events("start", 2)
    digests.zip(jids).each do |d, jid|
      h = client.holders(d)
      assert_equal [[jid, old.identity]], h.map { |x| [x.jid, x.owner] }, "held by the job, owned by the process"
    end
    assert_equal jids.sort, working(old.identity).sort
    requeued_before = stats["requeued_shutdown"].to_i

    old.stop(timeout: 20) # TERM: -t 3, then Sidekiq's hard shutdown calls bulk_requeue
    assert_equal jids.sort, queue_jids("rf_term").sort, "both back in their queue"
    assert_empty working(old.identity)
    assert_equal requeued_before + 2, stats["requeued_shutdown"].to_i
    digests.zip(jids).each do |d, jid|
      assert_equal [[jid, RedisUnique::Sidekiq::QUEUED_OWNER]], client.holders(d).map { |x| [x.jid, x.owner] },
                   "the lock is kept, owned by no process"
    end
    denied_before = client.metrics.dig("types", "until_executed", "denied").to_i
    assert_nil UntilExecutedDefaultJob.set(queue: "rf_term").perform_async(token, args[0]),
               "a duplicate pushed during the restart is refused"
    assert_equal denied_before + 1, client.metrics.dig("types", "until_executed", "denied").to_i
    assert_equal 2, queue_jids("rf_term").size
    puts "\n  TERM (Sidekiq #{Sidekiq::VERSION}): requeued #{stats["requeued_shutdown"].to_i - requeued_before}, " \
         "locks kept 2, duplicates refused 1"

    fresh = start(RELIABLE_APP, "rf_term", concurrency: 3).first
    wait_events("start", 4)
    release(token, 2)
    done = wait_events("done", 2)
    assert_equal jids.sort, done.map { |e| e["jid"] }.sort
    wait_until(message: "locks freed, working list empty") do
      digests.all? { |d| client.locked_by(d).empty? } && working(fresh.identity).empty?
    end
    assert_equal 4, events.count { |e| e["event"] == "start" }, "each ran once before and once after the restart"
  end

  def test_strict_and_weighted_queue_order
    qa = "rf_a_#{token}"
    qb = "rf_b_#{token}"
    strict = fetcher([qa, qb])
    assert_equal ["queue:#{qa}", "queue:#{qb}"], strict.queues_cmd
    conn.call("RPUSH", "queue:#{qb}", JSON.generate("jid" => "b1", "queue" => qb))
    conn.call("RPUSH", "queue:#{qa}", JSON.generate("jid" => "a1", "queue" => qa))
    units = Array.new(2) { strict.retrieve_work }
    assert_equal %w[a1 b1], units.map(&:jid), "strict: the first queue first"
    assert_equal ["queue:#{qa}", "queue:#{qb}"], units.map(&:queue)
    assert_equal %w[b1 a1], working(strict.identity), "both in the working list, newest first"
    units.each(&:acknowledge)
    assert_empty working(strict.identity)

    weighted = fetcher(["#{qa},3", "#{qb},1"])
    firsts = Array.new(4000) { weighted.queues_cmd.first }
    share = firsts.count("queue:#{qa}") / 4000.0
    assert_in_delta 0.75, share, 0.05, "weighted: #{qa} first 3 times in 4"
    assert(Array.new(50) { weighted.queues_cmd.sort }.uniq.size == 1, "each queue once per round")

    # empty queues: BLMOVE blocks for its timeout, then nil (a slow machine only returns later)
    t = Process.clock_gettime(Process::CLOCK_MONOTONIC)
    assert_nil fetcher([qa]).retrieve_work
    waited = Process.clock_gettime(Process::CLOCK_MONOTONIC) - t
    assert_operator waited, :>=, RF::TIMEOUT - 0.1
    assert_operator waited, :<, RF::TIMEOUT + H::PATIENCE
  end

  def test_acknowledge_sends_the_unlock_in_the_same_transaction
    q = "rf_ack_#{token}"
    f = fetcher([q])
    key = "rf:ack:#{token}"
    conn.call("RPUSH", "queue:#{q}", JSON.generate("jid" => "j1", "queue" => q, "class" => "ChaosPlainJob"))
    unit = f.retrieve_work
    assert_same unit, RF.current("j1")
    client.lock(key, "j1", owner: f.identity)
    unit.defer_unlock(key, client)
    assert_equal ["j1"], client.locked_by(key), "deferred to the acknowledgement"
    # The backend of the fetcher's pool is found once, before its first transaction (COMMAND
    # INFO unique.lock: the module's).
    assert_equal "module", f.client.backend
    # What the acknowledging client sends, read on MONITOR (server-wide counts would also
    # see the MULTI/EXEC of other clients, Sidekiq's heartbeats among them).
    sent = monitored { unit.acknowledge }
    by_ack = sent.select { |c| c[:client] == sent.find { |x| x[:args].first == "unique.unlock" }&.dig(:client) }
    assert_equal %w[multi unique.unlock lrem exec], by_ack.map { |c| c[:args].first }, "one MULTI/EXEC with both"
    assert_equal ["unique.unlock", key, "j1"], by_ack[1][:args]
    assert_empty client.locked_by(key)
    assert_empty working(f.identity)
    assert_nil RF.current("j1")
    # after a hard shutdown requeued the unit, a late unlock is sent at once
    conn.call("RPUSH", "queue:#{q}", JSON.generate("jid" => "j2", "queue" => q))
    unit = f.retrieve_work
    client.lock(key, "j2")
    f.bulk_requeue([unit])
    assert_equal ["j2"], queue_jids(q)
    unit.defer_unlock(key, client)
    assert_empty client.locked_by(key)
  ensure
    conn.call("DEL", "queue:#{q}")
  end

  def test_a_job_fetched_without_its_lock_still_runs_and_frees_nothing
    q = "rf_lapsed_#{token}"
    f = fetcher([q])
    jid = UntilExecutedDefaultJob.set(queue: q).perform_async(token, {})
    digest = digest_of(UntilExecutedDefaultJob, token, {}, queue: q)
    assert_equal [jid], client.locked_by(digest)
    # its lock lapsed and a duplicate took it
    client.unlock(digest, jid)
    client.lock(digest, "intruder")
    lapsed_before = stats["lapsed"].to_i
    unit = f.retrieve_work
    assert_equal jid, unit.jid
    assert unit.lapsed
    assert_equal lapsed_before + 1, stats["lapsed"].to_i
    ran = false
    RedisUnique::Sidekiq::ServerMiddleware.new.call(UntilExecutedDefaultJob.new, unit.item, q) { ran = true }
    assert ran, "runs anyway"
    assert_nil unit.acknowledge, "nil, as Sidekiq's own unit of work"
    assert_equal ["intruder"], client.locked_by(digest), "the other job's lock is untouched"
    assert_empty working(f.identity)
    # without ReliableFetch (no unit of work), the same conflict does not run (on_conflict: log)
    item = unit.item.merge("jid" => "other")
    ran = false
    RedisUnique::Sidekiq::ServerMiddleware.new.call(UntilExecutedDefaultJob.new, item, q) { ran = true }
    refute ran
  ensure
    conn.call("DEL", digest) if digest
  end
end
