# frozen_string_literal: true

# Jobs of the test suite, loaded by the tests (to push) and by the Sidekiq processes
# (to perform). They record what happens in Redis lists so that tests observe it:
# events:<token> gets {"event", "jid", "class", "t"} entries.
require "json"
require "redis_unique/sidekiq"

module TestJobs
  module_function

  # A connection of its own per thread (blocking pops must not hold Sidekiq's pool).
  def conn
    Thread.current[:test_jobs_conn] ||= begin
      url = ENV.fetch("REDIS_URL")
      raw = if defined?(::RedisClient)
              ::RedisClient.config(url: url).new_client
            else
              require "redis"
              ::Redis.new(url: url)
            end
      RedisUnique::Connection.new(raw)
    end
  end

  def record(token, event, job, extra = {})
    payload = { "event" => event, "jid" => job.jid, "class" => job.class.name, "t" => Time.now.to_f }.merge(extra)
    conn.call("RPUSH", "events:#{token}", JSON.generate(payload))
  end

  # The body of every test job. opts: "hold" => wait for RPUSH release:<token> (max 30 s),
  # "fail" => fail the first n runs, "running" => count concurrent runs in running:<token>.
  def run(job, token, opts)
    opts ||= {}
    record(token, "start", job)
    if opts["running"]
      now = conn.call("INCR", "running:#{token}")
      conn.call("SET", "maxrunning:#{token}", now) if now > conn.call("GET", "maxrunning:#{token}").to_i
    end
    if opts["hold"]
      got = conn.blocking_call(30, "BLPOP", "release:#{token}", 30)
      # pass the release on to the next holder, if any
      conn.call("RPUSH", "release:#{token}", "1") if got && opts["hold"] == "all"
    end
    conn.call("DECR", "running:#{token}") if opts["running"]
    if opts["fail"] && conn.call("INCR", "failures:#{token}:#{job.jid}") <= opts["fail"].to_i
      record(token, "fail", job)
      raise "failing on purpose (#{token})"
    end
    record(token, "done", job)
  end

  TYPES = RedisUnique::Sidekiq::LOCK_TYPES
  STRATEGIES = [nil, "log", "raise", "reject", "replace", "reschedule"].freeze

  # "UntilExecuted" + "Reject" + "Job"
  def class_name(type, strategy = nil, suffix = "")
    camel = ->(s) { s.to_s.split("_").map(&:capitalize).join }
    "#{camel.(type)}#{strategy ? camel.(strategy) : "Default"}#{suffix}Job"
  end
end

TestJobs::JOB = defined?(Sidekiq::Job) ? Sidekiq::Job : Sidekiq::Worker

# One class per lock type x conflict strategy: UntilExecutedRejectJob, WhileExecutingDefaultJob...
TestJobs::TYPES.each do |type|
  TestJobs::STRATEGIES.each do |strategy|
    klass = Class.new do
      include TestJobs::JOB
      opts = { lock: type.to_sym, retry: 3, schedule_in: 1 }
      opts[:on_conflict] = strategy.to_sym if strategy
      opts[:lock_ttl] = 3 if type == "until_expired"
      sidekiq_options(**opts)
      sidekiq_retry_in { |_count, _ex| 1 }

      def perform(token, opts = {})
        TestJobs.run(self, token, opts)
      end
    end
    Object.const_set(TestJobs.class_name(type, strategy), klass)
  end
end

# while_executing with lock_timeout: the duplicate waits (UNIQUE.LOCK ... WAIT) for the first.
class WhileExecutingTimeoutJob
  include TestJobs::JOB
  sidekiq_options lock: :while_executing, lock_timeout: 20, on_conflict: :raise, retry: 3
  sidekiq_retry_in { |_count, _ex| 1 }

  def perform(token, opts = {})
    TestJobs.run(self, token, opts)
  end
end

# The per-side form of on_conflict.
class UntilAndWhileExecutingPerSideJob
  include TestJobs::JOB
  sidekiq_options lock: :until_and_while_executing, on_conflict: { client: :reject, server: :reschedule },
                  schedule_in: 1, retry: 3

  def perform(token, opts = {})
    TestJobs.run(self, token, opts)
  end
end

# until_executed that dies at the first failure: the death handler frees its lock.
class UntilExecutedDiesJob
  include TestJobs::JOB
  sidekiq_options lock: :until_executed, retry: 0

  def perform(token, opts = {})
    TestJobs.run(self, token, opts)
  end
end

# until_executed whose retry waits 10 minutes: the test moves it out of the retry set itself
# (enqueue_now), so that no scheduler runs it again while the test looks at it there.
class UntilExecutedRetryLaterJob
  include TestJobs::JOB
  sidekiq_options lock: :until_executed, retry: 3
  sidekiq_retry_in { |_count, _ex| 600 }

  def perform(token, opts = {})
    TestJobs.run(self, token, opts)
  end
end

# lock_args_method, unique_across_queues, lock_limit, lock_prefix.
class LockArgsJob
  include TestJobs::JOB
  sidekiq_options lock: :until_executed, lock_args_method: ->(args) { [args.first] }, lock_prefix: "myprefix"

  def perform(token, _stamp = nil); end
end

class AcrossQueuesJob
  include TestJobs::JOB
  sidekiq_options lock: :until_executed, unique_across_queues: true

  def perform(token); end
end

class LimitedJob
  include TestJobs::JOB
  sidekiq_options lock: :until_executed, lock_limit: 2

  def perform(token); end
end

# One partner API called at most 3 at once and 50 a second: while_executing under
# lock_limit and lock_rate, keyed by the API key alone; a job over either limit waits
# in Redis (lock_timeout). Each run records its start and end times.
class RatedPartnerCallJob
  include TestJobs::JOB
  sidekiq_options lock: :while_executing, lock_limit: 3, lock_rate: { limit: 50, per: :second },
                  lock_timeout: 60, lock_args_method: ->(args) { [args.first] }, on_conflict: :raise, retry: 3
  sidekiq_retry_in { |_count, _ex| 1 }

  def perform(api_key, token, i)
    started = Time.now.to_f
    # When the server granted this job's slot, on its own clock: the hold's token (unix µs).
    run_key = RedisUnique::Sidekiq.digest_for({ "class" => self.class.name, "queue" => "rated",
                                                "args" => [api_key, token, i] }, self.class) + ":RUN"
    held = TestJobs.conn.call("UNIQUE.LOCKEDBY", run_key, "WITHMETA")
                   .map { |h| RedisUnique::Client.holder(h) }.find { |h| h.jid == jid }
    sleep(0.02 + (i % 5) * 0.01) # the call: 20 to 60 ms, so that both limits bind in turn
    TestJobs.conn.call("RPUSH", "rated:#{token}", JSON.generate("i" => i, "start" => started, "end" => Time.now.to_f,
                                                                 "key" => api_key, "token" => held&.token))
  end
end

# lock_group on the runtime lock: 5 slots around the token, at most 1 of a tenant (args[1]) at
# once; a job over its tenant's limit is rejected (dead set) rather than waiting.
class TenantLimitedJob
  include TestJobs::JOB
  sidekiq_options lock: :while_executing, lock_limit: 5, lock_args_method: ->(args) { [args[0]] },
                  lock_group: ->(args) { args[1] }, lock_group_limit: 1, on_conflict: :reject, retry: 0

  def perform(token, _tenant, opts = {})
    TestJobs.run(self, token, opts)
  end
end

require_relative "v9_jobs"

# Jobs whose lease (lock_ttl: 3 s) is shorter than the job: the middleware renews it while
# they run (held until RPUSH release:<token>), every second: the lease is kept through a
# stall of the loaded machine of up to 2 s.
class RenewedWhileExecutingJob
  include TestJobs::JOB
  sidekiq_options lock: :while_executing, lock_ttl: 3, queue: "renew", retry: 0

  def perform(token, opts = {})
    TestJobs.run(self, token, opts)
  end
end

class RenewedUntilExecutedJob
  include TestJobs::JOB
  sidekiq_options lock: :until_executed, lock_ttl: 3, queue: "renew", retry: 0

  def perform(token, opts = {})
    TestJobs.run(self, token, opts)
  end
end

# lock_limits with a lease shorter than the job (lock_ttl: 3 s, renewed every second): both
# keys renewed as one while it runs (held until RPUSH release:<token>); the keys are the token's.
class RenewedLimitsJob
  include TestJobs::JOB
  sidekiq_options lock: :while_executing, lock_ttl: 3, queue: "renew-limits", retry: 0,
                  lock_limits: ->(args) { { "{#{args[0]}}:account" => 1, "{#{args[0]}}:all" => 5 } }

  def perform(token, opts = {})
    TestJobs.run(self, token, opts)
  end
end

# lock_limits on until_and_while_executing: unique from push to start (the digest), then
# the keys of lock_limits while it runs.
class UntilAndWhileLimitsJob
  include TestJobs::JOB
  sidekiq_options lock: :until_and_while_executing, queue: "renew-limits", retry: 0,
                  lock_limits: ->(args) { { "{#{args[0]}}:account" => 1, "{#{args[0]}}:all" => 5 } }

  def perform(token, opts = {})
    TestJobs.run(self, token, opts)
  end
end

# The turns test (turns_test.rb): one slot at a time (lock_limit 1) on the key of args[0],
# tenants (a job name's first letter, args[1]) taking turns at it; FifoTurnJob: the same
# calls without a group, in arrival order. Each records its name when it runs, before its
# slot frees: the order of the grants.
class TurnJob
  include(defined?(Sidekiq::Job) ? Sidekiq::Job : Sidekiq::Worker)

  sidekiq_options lock: :while_executing, lock_args_method: ->(args) { [args[0]] }, lock_limit: 1,
                  lock_timeout: 120, lock_group: ->(args) { args[1][0] }, retry: 0

  def perform(key, name, seconds)
    sleep seconds
    Sidekiq.redis { |c| c.call("RPUSH", "#{key}:ran", name) }
  end
end

class FifoTurnJob
  include(defined?(Sidekiq::Job) ? Sidekiq::Job : Sidekiq::Worker)

  sidekiq_options lock: :while_executing, lock_args_method: ->(args) { [args[0]] }, lock_limit: 1,
                  lock_timeout: 120, retry: 0

  def perform(key, name, seconds)
    sleep seconds
    Sidekiq.redis { |c| c.call("RPUSH", "#{key}:ran", name) }
  end
end

# A Limiter of 2 slots around the job's work (held until RPUSH release:<token>), its lease
# (ttl: 3 s) renewed while it runs; a third job waits in Redis for a slot.
class LimiterJob
  include TestJobs::JOB
  sidekiq_options retry: 0

  def perform(token, opts = {})
    RedisUnique::Limiter.new(::Sidekiq.redis_pool, "limiter:#{token}", concurrency: 2, ttl: 3, wait: 60)
                        .within { TestJobs.run(self, token, opts) }
  end
end
