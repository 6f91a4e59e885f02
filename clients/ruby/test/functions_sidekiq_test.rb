# frozen_string_literal: true

require_relative "test_helper"

# Real Sidekiq processes on a server started WITHOUT the module: until_executed,
# while_executing and a Limiter on the Functions library, which the gem finds and loads by
# itself (the jobs and their options are the module's). REDIS_SERVER picks the server (Redis
# 7.0 to 8, Valkey 8 and 9); run.sh runs this on the last Sidekiq of its list only.
class FunctionsSidekiqTest < Minitest::Test
  include TestHelpers

  APP = TestSuite::APP

  # One server without the module and two Sidekiq processes on it, for the whole run.
  module Plain
    class << self
      def server
        @server ||= RedisUnique::Harness::RedisServer.new(load_module: false).tap do |s|
          at_exit { stop } # before TestSuite.shutdown (at_exit runs in reverse order)
          s
        end
      end

      def conn
        @conn ||= RedisUnique::Connection.new(TestSuite.raw_connection(server.url))
      end

      # Sidekiq's own pool on the server: what a push `via` it uses, middleware included.
      def pool
        @pool ||= ::Sidekiq::RedisConnection.create(url: server.url, size: 2)
      end

      def workers
        @workers ||= Array.new(2) do
          RedisUnique::Harness::SidekiqProcess.new(app: APP, redis_url: server.url, queues: %w[default],
                                                   concurrency: 5, env: TestSuite.sidekiq_env)
        end.each { |p| p.wait_ready(conn) }
      end

      def stop
        (@workers || []).each(&:stop)
        @server&.stop
      end
    end
  end

  def setup
    on = ENV.fetch("REDIS_UNIQUE_LIBRARY_SIDEKIQ", ::Sidekiq::VERSION.to_i.to_s).to_i
    skip "the library's Sidekiq tests run on Sidekiq #{on} (run.sh's last)" unless on == ::Sidekiq::VERSION.to_i
    @workers = Plain.workers
  end

  def plain
    @plain ||= RedisUnique::Client.new(TestSuite.raw_connection(Plain.server.url))
  end

  def push(klass, *args)
    ::Sidekiq::Client.via(Plain.pool) { klass.perform_async(*args) }
  end

  def events(tok = token)
    Plain.conn.call("LRANGE", "events:#{tok}", 0, -1).map { |e| JSON.parse(e) }
  end

  def release(tok = token, n = 1)
    n.times { Plain.conn.call("RPUSH", "release:#{tok}", "1") }
  end

  def wait_events(event, n = 1)
    wait_until(message: "#{n} #{event} event(s) for #{token}: #{events.inspect}\n#{@workers.map(&:log).join}") do
      found = events.select { |e| e["event"] == event }
      found.size >= n ? found : nil
    end
  end

  def test_the_server_has_no_module_and_the_library_is_loaded_by_the_gem
    refute plain.module_loaded?
    assert_equal "functions", plain.backend
    assert_equal RedisUnique::Functions.version, Plain.conn.raw(%w[FCALL_RO unique_version 0])
  end

  def test_until_executed_holds_until_success_with_the_worker_as_owner
    jid = push(UntilExecutedDefaultJob, token, { "hold" => true })
    digest = digest_of(UntilExecutedDefaultJob, token, { "hold" => true })
    wait_events("start")
    holder = plain.holders(digest).first
    assert_equal jid, holder.jid
    assert_includes @workers.map(&:identity), holder.owner, "while it runs, the lock's owner is the Sidekiq process"
    assert_equal "hash", Plain.conn.call("TYPE", digest), "the library's lock"
    assert_nil push(UntilExecutedDefaultJob, token, { "hold" => true }), "a duplicate is not pushed"
    release
    wait_events("done")
    wait_until(message: "the lock freed after success") { plain.locked_by(digest).empty? }
    assert push(UntilExecutedDefaultJob, token, { "hold" => false }), "pushed again once freed"
    wait_events("done", 2)
  end

  def test_while_executing_makes_the_duplicate_wait_on_the_server
    first = push(WhileExecutingTimeoutJob, token, { "hold" => true })
    wait_events("start")
    second = push(WhileExecutingTimeoutJob, token, { "hold" => true })
    run_key = "#{digest_of(WhileExecutingTimeoutJob, token, { "hold" => true })}:RUN"
    wait_until(message: "the duplicate waiting in Redis") { plain.waiters(run_key) == 1 }
    assert_equal [first], events.select { |e| e["event"] == "start" }.map { |e| e["jid"] }
    assert_equal [first], plain.locked_by(run_key)
    release
    assert_equal [first, second], wait_events("start", 2).map { |e| e["jid"] }
    release
    assert_equal [first, second], wait_events("done", 2).map { |e| e["jid"] }
    wait_until(message: "the runtime lock freed") { plain.locked_by(run_key).empty? }
  end

  # ReliableFetch's transactions (the acknowledgement's unlock, a graceful restart keeping
  # the lock) carry the library's FCALL in place of UNIQUE.*.
  def test_reliable_fetch_keeps_the_lock_through_a_graceful_restart
    reliable = File.expand_path("app/reliable_app.rb", __dir__)
    start = lambda do
      RedisUnique::Harness::SidekiqProcess.new(app: reliable, redis_url: Plain.server.url, queues: %w[rf_fn],
                                               concurrency: 2, env: TestSuite.sidekiq_env).tap do |p|
        (@procs ||= []) << p
        p.wait_ready(Plain.conn)
      end
    end
    old = start.call
    jid = ::Sidekiq::Client.via(Plain.pool) do
      UntilExecutedDefaultJob.set(queue: "rf_fn").perform_async(token, { "hold" => true })
    end
    digest = digest_of(UntilExecutedDefaultJob, token, { "hold" => true }, queue: "rf_fn")
    wait_events("start")
    assert_equal [[jid, old.identity]], plain.holders(digest).map { |h| [h.jid, h.owner] }
    old.stop(timeout: 20) # TERM: -t 3, then the hard shutdown's bulk_requeue
    assert_equal [jid], Plain.conn.call("LRANGE", "queue:rf_fn", 0, -1).map { |j| JSON.parse(j)["jid"] }
    assert_equal [[jid, RedisUnique::Sidekiq::QUEUED_OWNER]], plain.holders(digest).map { |h| [h.jid, h.owner] }
    fresh = start.call
    wait_events("start", 2)
    release
    wait_events("done")
    wait_until(message: "the lock freed and the working list empty") do
      plain.locked_by(digest).empty? &&
        Plain.conn.call("LLEN", RedisUnique::Sidekiq::ReliableFetch.working_key(fresh.identity)).zero?
    end
  ensure
    (@procs || []).each(&:stop)
  end

  # The dead-owner reaper on the library: `kill -9` a process mid-job; a survivor's reaper
  # frees its while_executing lock (REAP OWNER: SCAN ... TYPE hash and the library per key).
  def test_kill_9_in_the_middle_of_a_while_executing_job_is_reaped
    victim = RedisUnique::Harness::SidekiqProcess.new(app: APP, redis_url: Plain.server.url, queues: %w[victim],
                                                      concurrency: 2, env: TestSuite.sidekiq_env)
    victim.wait_ready(Plain.conn)
    jid = ::Sidekiq::Client.via(Plain.pool) do
      WhileExecutingDefaultJob.set(queue: "victim").perform_async(token, { "hold" => true })
    end
    wait_events("start")
    run_key = "#{digest_of(WhileExecutingDefaultJob, token, { "hold" => true }, queue: "victim")}:RUN"
    assert_equal [[jid, victim.identity]], plain.holders(run_key).map { |h| [h.jid, h.owner] }
    reaped_before = plain.metrics.dig("types", "while_executing", "reaped").to_i
    victim.kill9
    wait_until(interval: 0.1, message: "the dead process's lock freed") { plain.locked_by(run_key).empty? }
    assert_equal reaped_before + 1, plain.metrics.dig("types", "while_executing", "reaped").to_i,
                 "freed by REAP OWNER (counted as reaped), not by a lease"
  ensure
    victim&.stop
  end

  def test_a_limiter_runs_two_at_once_and_the_third_waits_its_turn
    jids = Array.new(3) { push(LimiterJob, token, { "hold" => true, "running" => true }) }
    key = "limiter:#{token}"
    wait_events("start", 2)
    wait_until(message: "the third job waiting for a slot") { plain.waiters(key) == 1 }
    assert_equal 2, events.count { |e| e["event"] == "start" }
    assert_equal 2, plain.locked_by(key).size
    release
    wait_events("start", 3)
    release(token, 2)
    assert_equal jids.sort, wait_events("done", 3).map { |e| e["jid"] }.sort
    assert_equal 2, Plain.conn.call("GET", "maxrunning:#{token}").to_i
    wait_until(message: "the slots freed") { plain.locked_by(key).empty? }
  end
end
