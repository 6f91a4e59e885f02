# frozen_string_literal: true

require_relative "test_helper"
require "logger"
require "stringio"
require "minitest/mock"

# Fair sharing and shared/exclusive locks, on the gem's side and without the module's
# answers: the argv of lock(group:, weight:, group_limit:, mode:) in the contract's order,
# the options refused before anything is sent, the parsing of WAITERS GROUPS and of a
# holder's group and mode (RESP2 and RESP3 shapes), the Limiter's options, and the Sidekiq
# options (lock_group:, lock_group_limit:, lock_group_weight:): where they apply, how a
# lambda is read, and every misuse refused at push.
class GroupOptionsTest < Minitest::Test
  include TestHelpers

  QUEUE = "groupoptions" # no Sidekiq process works this queue

  def argv(**opts)
    RedisUnique::Client.lock_argv("k", "j", **opts).first.map(&:to_s)
  end

  def test_argv_in_the_contracts_order
    assert_equal %w[UNIQUE.LOCK k j GROUP acme], argv(group: "acme")
    assert_equal %w[UNIQUE.LOCK k j LIMIT 10 TTL 60000 TYPE t OWNER o META {"a":1} RATE 5 PER 1000
                    GROUP acme WEIGHT 2 GROUPLIMIT 3 MODE shared WAIT 1500],
                 argv(limit: 10, ttl: 60, type: "t", owner: "o", meta: { "a" => 1 }, rate: { limit: 5, per: 1 },
                      group: "acme", weight: 2, group_limit: 3, mode: :shared, wait: 1.5)
    assert_equal %w[UNIQUE.LOCK k j MODE exclusive], argv(mode: "EXCLUSIVE"), "a mode is sent in lower case"
    assert_equal %w[UNIQUE.LOCK k j GROUP 42 WEIGHT 1], argv(group: 42, weight: 1), "a given weight is sent"
    assert_equal %w[UNIQUE.LOCK k j GROUP pro], argv(group: :pro)
    # A renewal sends none of them: the hold keeps its group and its mode.
    assert_equal %w[UNIQUE.LOCK k j TTL 3000], RedisUnique::Client.renewal_argv("k", "j", 3000).map(&:to_s)
  end

  def test_misuses_are_refused_before_anything_is_sent
    {
      { weight: 2 } => /weight needs group:/,
      { group_limit: 2 } => /group_limit needs group:/,
      { group: "" } => /group must be 1 to 1024 bytes/,
      { group: "x" * 1025 } => /group must be 1 to 1024 bytes, not 1025/,
      { group: ["a"] } => /group must be a String/,
      { group: "a", weight: 0 } => /weight must be 1 to 1000/,
      { group: "a", weight: 1001 } => /weight must be 1 to 1000/,
      { group: "a", weight: 2.5 } => /weight must be an Integer/,
      { group: "a", group_limit: 0 } => /group_limit must be 1 to 2147483647/,
      { group: "a", group_limit: "many" } => /group_limit must be an Integer/,
      { mode: :read } => /mode must be :shared or :exclusive/
    }.each do |opts, message|
      error = assert_raises(RedisUnique::InvalidOption, opts.inspect) { client.lock("k:#{token}", "j", **opts) }
      assert_match message, error.message
    end
    assert_equal 0, conn.call("EXISTS", "k:#{token}")
    assert_equal %w[GROUP a WEIGHT 1000 GROUPLIMIT 2147483647],
                 RedisUnique::Client.group_argv(group: "a", weight: "1000", group_limit: 2_147_483_647).map(&:to_s)
  end

  # A connection that answers with a canned reply.
  class Canned
    def initialize(reply)
      @reply = reply
    end

    def call(*)
      @reply
    end
  end

  def canned(reply)
    RedisUnique::Client.new(TestSuite.raw_connection).tap { |c| c.instance_variable_set(:@connection, Canned.new(reply)) }
  end

  def test_waiters_by_group_on_resp2_and_resp3
    expected = [RedisUnique::WaiterGroup.new(group: nil, waiting: 1, holding: 0),
                RedisUnique::WaiterGroup.new(group: "acme", waiting: 3, holding: 2)]
    resp2 = [["group", nil, "waiting", 1, "holding", 0], ["group", "acme", "waiting", 3, "holding", 2]]
    resp3 = [{ "group" => nil, "waiting" => 1, "holding" => 0 }, { "group" => "acme", "waiting" => 3, "holding" => 2 }]
    assert_equal expected, canned(resp2).waiters("k", groups: true)
    assert_equal expected, canned(resp3).waiters("k", groups: true)
    assert_equal [], canned([]).waiters("k", groups: true)
    assert_equal 4, canned(4).waiters("k"), "without groups: the count, as before"
  end

  def test_a_holder_shows_its_group_and_mode
    base = ["jid", "a", "token", 1, "acquired_at", 1_700_000_000_000, "expires_at", -1, "ttl", -1,
            "type", "lock", "owner", nil, "meta", nil]
    plain = RedisUnique::Client.holder(base)
    assert_nil plain.group
    assert_nil plain.mode
    grouped = RedisUnique::Client.holder(base + ["group", "acme", "mode", "exclusive"])
    assert_equal %w[acme exclusive], [grouped.group, grouped.mode]
    resp3 = RedisUnique::Client.holder(Hash[*base].merge("group" => "acme", "mode" => "shared"))
    assert_equal %w[acme shared], [resp3.group, resp3.mode]
  end

  def test_limiter_options_are_checked_when_it_is_made
    redis = TestSuite.raw_connection
    assert_raises(RedisUnique::InvalidOption) { RedisUnique::Limiter.new(redis, "k", concurrency: 2, weight: 0) }
    assert_raises(RedisUnique::InvalidOption) { RedisUnique::Limiter.new(redis, "k", concurrency: 2, group_limit: 0) }
    assert_raises(RedisUnique::InvalidOption) { RedisUnique::Limiter.new(redis, "k", concurrency: 2, group: "") }
    shared = RedisUnique::Limiter.new(redis, "k:#{token}", concurrency: 2, group_limit: 1)
    error = assert_raises(RedisUnique::InvalidOption) { shared.within { flunk "ran without a group" } }
    assert_match(/give within\(group:\)/, error.message)
    assert_equal 0, conn.call("EXISTS", "k:#{token}"), "refused before anything was sent"
  end

  # --- Sidekiq options ---

  def setup
    @log = StringIO.new
    RedisUnique::Sidekiq.config.logger = Logger.new(@log)
  end

  def teardown
    RedisUnique::Sidekiq.config.logger = nil
  end

  def job_class(name, **options)
    klass = Class.new do
      include TestJobs::JOB
      sidekiq_options(**options)
      def perform(*); end
    end
    klass.define_singleton_method(:name) { name }
    klass.define_singleton_method(:to_s) { name }
    klass
  end

  def job(klass, args, extra = {})
    item = { "class" => klass.name, "queue" => QUEUE, "jid" => "j1", "args" => args }.merge(extra)
    RedisUnique::Sidekiq::Job.new(klass, item, Sidekiq.redis_pool)
  end

  def test_a_lambda_of_the_args_gives_the_group_weight_and_limit
    klass = job_class("GroupLambdaJob", lock: :while_executing, lock_limit: 10, lock_timeout: 5,
                                        lock_group: ->(args) { args.first["account"] },
                                        lock_group_weight: ->(args) { args[1] == "pro" ? 3 : 1 },
                                        lock_group_limit: 4)
    j = job(klass, [{ "account" => 42 }, "pro"])
    assert_equal({ group: "42", group_limit: 4, weight: 3 }, j.group_options, "an Integer tenant id is its String")
    assert_equal ["42", 4, 3], j.item.values_at("lock_group", "lock_group_limit", "lock_group_weight"),
                 "written into the job, so that the server reads plain values"
    assert_equal 4, JSON.parse(j.meta)["group_limit"], "the Locks page reads the group limit in META"
    # The server's copy: the class's Proc went through JSON as a String; the written values are read.
    served = job(klass, [{ "account" => 42 }, "pro"], JSON.parse(JSON.generate(j.item.merge("lock_group" => "42"))))
    assert_equal({ group: "42", group_limit: 4, weight: 3 }, served.group_options)
    pushed_elsewhere = job(klass, [{ "account" => 7 }, "free"], "lock_group" => "#<Proc:0x0000 (lambda)>")
    assert_equal "7", pushed_elsewhere.group_options[:group], "a Proc's String is never a group: the class's Proc is"
  end

  def test_a_group_per_job_and_a_plain_string
    klass = job_class("GroupStringJob", lock: :until_and_while_executing, lock_group: "shared")
    assert_equal({ group: "shared" }, job(klass, [1]).group_options)
    assert_equal({ group: "acme" }, job(klass, [1], "lock_group" => "acme").group_options, "the job's own first")
    per_job = job(klass, [1, "x"], "lock_group" => ->(args) { "t-#{args.last}" })
    assert_equal({ group: "t-x" }, per_job.group_options)
    assert_equal "t-x", per_job.item["lock_group"]
  end

  def test_misused_group_options_are_refused_at_push
    cases = {
      job_class("GroupUntilExecutedJob", lock: :until_executed, lock_group: "a") =>
        /lock_group: fair sharing applies to the lock that jobs hold while they run: it needs lock: :while_executing, .* \(not :until_executed\)/,
      job_class("GroupNoLockJob", lock_group: "a", lock_group_limit: 2) =>
        /lock_group, lock_group_limit: fair sharing .* \(no lock: given\)/,
      job_class("GroupLimitAloneJob", lock: :while_executing, lock_group_limit: 2) => /these need lock_group: \(the tenant/,
      job_class("GroupNilJob", lock: :while_executing, lock_group: ->(_args) {}) => /lock_group gave nil for args \[/,
      job_class("GroupWeightNoWaitJob", lock: :while_executing, lock_group: "a", lock_group_weight: 2) =>
        /without lock_timeout no job waits/,
      job_class("GroupBadWeightJob", lock: :while_executing, lock_timeout: 1, lock_group: "a", lock_group_weight: 0) =>
        /lock_group_weight must be 1 to 1000/,
      job_class("GroupBadLimitJob", lock: :while_executing_reject, lock_group: "a", lock_group_limit: -1) =>
        /lock_group_limit must be 1 to/
    }
    cases.each do |klass, message|
      error = assert_raises(RedisUnique::InvalidOption, klass.name) { klass.set(queue: QUEUE).perform_async(token) }
      assert_match message, error.message
      assert_match(/\A#{klass.name}: sidekiq_options /, error.message)
    end
    assert_empty queue_jids(QUEUE).select { |j| conn.call("LRANGE", "queue:#{QUEUE}", 0, -1).any? { |p| p.include?(token) && p.include?(j) } },
                 "nothing was pushed"
  end

  def test_lock_false_or_a_disabled_gem_reads_no_group_option
    klass = job_class("GroupDisabledJob", lock: :until_executed, lock_group: "a")
    assert klass.set(queue: QUEUE, lock: false).perform_async(token)
    RedisUnique::Sidekiq.config.enabled = false
    assert klass.set(queue: QUEUE).perform_async(token)
  ensure
    RedisUnique::Sidekiq.config.enabled = true
  end

  def test_in_a_sidekiq_server_process_a_misuse_is_logged_once_and_the_job_kept
    klass = job_class("GroupServerPushJob", lock: :until_executed, lock_group: "a")
    Sidekiq.stub(:server?, true) do
      2.times { assert klass.set(queue: QUEUE).perform_async(token, rand) }
    end
    assert_equal 1, @log.string.scan(/GroupServerPushJob: sidekiq_options lock_group: fair sharing .* \(not applied\)/).size
  end
end
