# frozen_string_literal: true

require_relative "test_helper"
require_relative "app/reliable_jobs"

# 1,000 short jobs (and a few long ones) across 3 Sidekiq processes with ReliableFetch, and
# kill -9s of random processes in the middle of jobs (each replaced by a new one): every job
# completes, none runs twice at once (the jobs record their own start and end), the working
# lists end empty.
class ReliableFetchChaosTest < Minitest::Test
  include TestHelpers

  RELIABLE_APP = File.expand_path("app/reliable_app.rb", __dir__)
  RF = RedisUnique::Sidekiq::ReliableFetch
  JOBS = 1000
  PROCESSES = 3
  KILLS = 4
  # One job in HELD_EVERY is held in flight until every kill is done: each kill is aimed at
  # a process running one, so that it interrupts a job however late it lands on a loaded
  # machine. (A kill aimed at a 10 to 50 ms job could miss it, and one aimed within 0.3 s
  # of the start of a 1 s job found none in time when the polls came slower than that.)
  HELD_EVERY = 100
  HELD = -1
  QUEUE = "rf_chaos"
  CLASSES = [ChaosPlainJob, ChaosUntilExecutedJob, ChaosWhileExecutingJob].freeze

  def teardown
    (@procs || []).each(&:stop)
  end

  # A heartbeat late by a few seconds on a loaded machine must not count as a death here.
  def dead_after
    TestSuite.dead_after + 4
  end

  def spawn_process
    p = H::SidekiqProcess.new(app: RELIABLE_APP, redis_url: TestSuite.url, queues: [QUEUE], concurrency: 5,
                              env: TestSuite.sidekiq_env.merge("REAPER_DEAD_AFTER" => dead_after.to_s))
    (@procs ||= []) << p
    p
  end

  def ready?(p)
    p.pid && !p.identity.nil?
  end

  def stats
    h = conn.call("HGETALL", RF::STATS_KEY)
    h = Hash[*h] if h.is_a?(Array)
    h.transform_values(&:to_i)
  end

  def test_1000_jobs_3_processes_random_kill_9
    TestSuite.server
    started = Process.clock_gettime(Process::CLOCK_MONOTONIC)
    Array.new(PROCESSES) { spawn_process }.each { |p| p.wait_ready(conn) }
    requeued_before = stats["requeued_dead"].to_i
    rng = Random.new
    millis = Array.new(JOBS) { |n| n % HELD_EVERY == HELD_EVERY / 2 ? HELD : rng.rand(10..50) }
    jids = Array.new(JOBS) { |n| CLASSES[n % CLASSES.size].set(queue: QUEUE).perform_async(token, n, millis[n]) }
    assert_equal JOBS, jids.compact.uniq.size, "every push accepted (distinct args: no lock conflicts)"

    ends = -> { conn.call("GET", "chaos:#{token}:ends").to_i }
    thresholds = Array.new(KILLS) { |i| (JOBS * (i + 1) / (KILLS + 2)) + rng.rand(-40..40) }
    kills = {} # pid => time of death
    thresholds.each do |at|
      # Held jobs start as the queue reaches them and end only when let go, so one is in
      # flight on a live process by now or will be once the queue reaches the next.
      victim = wait_until(interval: 0.02, message: "#{at} jobs ended and a held job in flight to kill") do
        next nil if ends.call < at

        holding = held_jobs_in_flight(millis)
        @procs.select { |p| ready?(p) && !kills.key?(p.pid) && holding.include?(p.pid) }.sample(random: rng)
      end

      pid = victim.pid
      victim.kill9
      kills[pid] = Time.now.to_f
      fresh = spawn_process
      # its identity, once it beats (a connection of its own: this thread goes on polling)
      Thread.new { fresh.wait_ready(RedisUnique::Connection.new(TestSuite.raw_connection)) rescue nil } # rubocop:disable Style/RescueModifier
    end
    assert_equal KILLS, kills.size, "every kill happened while jobs were in flight"
    # Every held job may end now: a go each, for the run that ends it (a run killed while it
    # waited took none).
    conn.call("RPUSH", "chaos:#{token}:go", *Array.new(millis.count(HELD), "1"))

    wait_until(timeout: dead_after + 90, interval: 0.1, message: "all #{JOBS} jobs ended (#{ends.call} ends)") do
      done_jids.size == JOBS
    end
    wait_until(message: "working lists empty") do
      conn.call("KEYS", "#{RF::WORKING_PREFIX}*").all? { |k| conn.call("LLEN", k).zero? }
    end
    elapsed = Process.clock_gettime(Process::CLOCK_MONOTONIC) - started

    runs = runs_by_jid(kills)
    assert_equal jids.sort, runs.keys.sort
    assert_equal jids.sort, done_jids.sort, "every job completed"
    overlaps = runs.select do |_jid, rs|
      rs.sort_by(&:first).each_cons(2).any? { |(_s1, e1), (s2, _e2)| s2 < e1 }
    end
    assert_empty overlaps, "a job ran twice at once"
    interrupted = runs.values.sum { |rs| rs.count { |r| r[2] == :killed } }
    assert_operator interrupted, :>=, KILLS, "each kill interrupted at least one job"
    requeued = stats["requeued_dead"].to_i - requeued_before
    assert_operator requeued, :>=, interrupted, "the interrupted jobs came back through the working lists"
    held = (0...JOBS).reject { |n| CLASSES[n % CLASSES.size] == ChaosPlainJob }.select do |n|
      klass = CLASSES[n % CLASSES.size]
      digest = digest_of(klass, token, n, millis[n], queue: QUEUE)
      key = klass == ChaosWhileExecutingJob ? "#{digest}:RUN" : digest
      client.locked_by(key).any?
    end
    assert_empty held, "every lock freed at the end"
    twice = runs.count { |_j, rs| rs.count { |r| r[2] == :ended } > 1 }
    puts "\n  chaos (Sidekiq #{Sidekiq::VERSION}): jobs=#{JOBS} processes=#{PROCESSES} kills=#{kills.size} " \
         "interrupted=#{interrupted} requeued=#{requeued} ran-again=#{runs.values.sum(&:size) - JOBS} " \
         "ended-twice=#{twice} overlaps=#{overlaps.size} wall=#{elapsed.round(1)}s"
  end

  private

  # The pids of the processes running a held job (started there, not ended).
  def held_jobs_in_flight(millis)
    running = {}
    chaos_events.each do |e|
      key = [e["jid"], e["pid"]]
      e["e"] == "start" ? running[key] = e : running.delete(key)
    end
    running.values.select { |e| millis[e["n"]] == HELD }.map { |e| e["pid"] }
  end

  def chaos_events
    conn.call("LRANGE", "chaos:#{token}", 0, -1).map { |e| JSON.parse(e) }
  end

  def done_jids
    conn.call("LRANGE", "chaos:#{token}", 0, -1).filter_map { |e| (h = JSON.parse(e))["e"] == "end" && h["jid"] }.uniq
  end

  # jid => [[start, end, :ended | :killed]]: a run without an end ended when its process died.
  def runs_by_jid(kills)
    runs = Hash.new { |h, k| h[k] = [] }
    open = {}
    chaos_events.sort_by { |e| e["t"] }.each do |e|
      key = [e["jid"], e["pid"]]
      if e["e"] == "start"
        flunk "#{e["jid"]} started twice in process #{e["pid"]} without ending" if open.key?(key)
        open[key] = e["t"]
      else
        started = open.delete(key) or flunk("#{e["jid"]} ended in #{e["pid"]} without a start")
        runs[e["jid"]] << [started, e["t"], :ended]
      end
    end
    open.each do |(jid, pid), t|
      flunk "#{jid} started in live process #{pid} and never ended" unless kills.key?(pid)
      runs[jid] << [t, kills[pid], :killed]
    end
    runs
  end
end
