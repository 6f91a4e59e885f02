# frozen_string_literal: true

$LOAD_PATH.unshift(File.expand_path("../lib", __dir__))
require_relative "support/harness"

# Stopped after the tests ran (at_exit handlers run in reverse order: this one is
# registered before minitest's).
at_exit { TestSuite.shutdown }

require "minitest/autorun"
require "redis_unique/sidekiq"
Redis.silence_deprecations = true if defined?(Redis) && Redis.respond_to?(:silence_deprecations=)

# One redis-server (with the module) for the whole run, the Sidekiq client of this
# process pointed at it, and Sidekiq processes started on first use.
module TestSuite
  H = RedisUnique::Harness
  APP = File.expand_path("app/app.rb", __dir__)

  class << self
    def server
      @server ||= begin
        s = H::RedisServer.new
        ENV["REDIS_URL"] = s.url
        url = s.url
        Sidekiq.configure_client do |config|
          config.redis = { url: url }
          RedisUnique::Sidekiq.configure_client(config)
        end
        s
      end
    end

    def url
      server.url
    end

    # A redis-server started WITHOUT the module (the Functions library's), for the whole run.
    def plain_server
      @plain_server ||= H::RedisServer.new(load_module: false)
    end

    # A raw connection of the library that this Sidekiq uses (redis-client for 7, redis-rb for 6).
    def raw_connection(url = self.url)
      if defined?(::RedisClient) && H.sidekiq7?
        ::RedisClient.config(url: url).new_client
      else
        require "redis"
        ::Redis.new(url: url)
      end
    end

    def conn
      @conn ||= RedisUnique::Connection.new(raw_connection)
    end

    # The test app's processes beat every second (BEAT_PAUSE; Sidekiq's own pause is 5 or
    # 10 s): dead once three beats were missed.
    def dead_after
      3
    end

    def sidekiq_env
      { "REAPER_INTERVAL" => "1", "REAPER_DEAD_AFTER" => dead_after.to_s, "POLL_INTERVAL" => "1", "BEAT_PAUSE" => "1" }
    end

    # Two Sidekiq processes working the default queue (started once).
    def workers
      @workers ||= begin
        server
        procs = Array.new(2) do
          H::SidekiqProcess.new(app: APP, redis_url: url, queues: %w[default], concurrency: 8, env: sidekiq_env)
        end
        procs.each { |p| p.wait_ready(conn) }
        procs
      end
    end

    def start_sidekiq(queues:, concurrency: 5)
      server
      p = H::SidekiqProcess.new(app: APP, redis_url: url, queues: queues, concurrency: concurrency, env: sidekiq_env)
      (@extra ||= []) << p
      p.wait_ready(conn)
      p
    end

    # Stops a process of start_sidekiq: each test stops what it started, so that no later
    # test sees its heartbeat, its queue's consumer or its owner identity.
    def stop_sidekiq(process)
      process.stop
      @extra&.delete(process)
    end

    def shutdown
      (@extra || []).each(&:stop)
      (@workers || []).each(&:stop)
      @server&.stop
      @plain_server&.stop
    end
  end
end

module TestHelpers
  H = RedisUnique::Harness

  # Every test starts with the suite's server up and Sidekiq's client pointed at it. A test
  # whose first act is a push would otherwise, run first (random order), make Sidekiq's
  # global pool for localhost:6379 (REDIS_URL not set yet), and every later test would
  # inherit that pool.
  def before_setup
    super
    TestSuite.server
  end

  def conn
    TestSuite.conn
  end

  def client
    @client ||= RedisUnique::Client.new(TestSuite.raw_connection)
  end

  def token
    @token ||= "#{name.gsub(/\W/, "")[0, 40]}-#{rand(1 << 30)}"
  end

  def events(tok = token)
    conn.call("LRANGE", "events:#{tok}", 0, -1).map { |e| JSON.parse(e) }
  end

  # Waits until `n` events named `event` were recorded; returns them.
  def wait_events(event, n = 1, tok = token, timeout: H::PATIENCE)
    H.wait_until(timeout: timeout, message: "#{n} #{event} event(s) for #{tok}: #{events(tok).inspect}") do
      found = events(tok).select { |e| e["event"] == event }
      found.size >= n ? found : nil
    end
  end

  def release(tok = token, n = 1)
    n.times { conn.call("RPUSH", "release:#{tok}", "1") }
  end

  def wait_until(**opts, &block)
    H.wait_until(**opts, &block)
  end

  def queue_jids(queue = "default")
    conn.call("LRANGE", "queue:#{queue}", 0, -1).map { |j| JSON.parse(j)["jid"] }
  end

  def set_jobs(set)
    conn.call("ZRANGE", set, 0, -1).map { |j| JSON.parse(j) }
  end

  def digest_of(klass, *args, queue: "default")
    RedisUnique::Sidekiq.digest_for({ "class" => klass.name, "queue" => queue, "args" => args }, klass)
  end

  # Moves the scheduled or retry jobs of this test to their queue now (what Sidekiq's
  # poller does), instead of waiting for the poller.
  def enqueue_now(set_name)
    set = set_name == "retry" ? Sidekiq::RetrySet.new : Sidekiq::ScheduledSet.new
    set.select { |e| e.args.first == token }.each(&:add_to_queue)
  end

  # Runs the block with Sidekiq's dead set holding only what the block puts there: what was
  # dead before, and what other processes kill meanwhile, is dead again afterwards.
  def with_own_dead_set
    aside = "dead-aside-#{token}"
    conn.call("RENAME", "dead", aside) if conn.call("EXISTS", "dead") == 1
    yield
  ensure
    conn.call("ZUNIONSTORE", "dead", 2, "dead", aside)
    conn.call("DEL", aside)
  end
end

require_relative "app/jobs"
