# frozen_string_literal: true

require "json"
require_relative "test_helper"

# The clients' conformance table (clients/conformance/table.json): every call's argv, as
# the client hands it to a real connection, and every reply's value, as the Python and
# Node clients have them too.
class ConformanceTest < Minitest::Test
  include TestHelpers

  TABLE = JSON.parse(File.read(File.expand_path("../../conformance/table.json", __dir__)))

  # The real connection, recording what the client sends through it.
  class Recorder
    attr_reader :sent

    def initialize(connection)
      @connection = connection
      @sent = []
    end

    def call(*argv)
      @sent << argv.map(&:to_s)
      @connection.call(*argv)
    end

    def blocking_call(seconds, *argv)
      @sent << argv.map(&:to_s)
      @connection.blocking_call(seconds, *argv)
    end
  end

  # The neutral arguments as this client's keywords: seconds (`ttl:`) or ms (`ttl_ms:`),
  # and the rate as one Hash (`rate: { limit:, per: or per_ms:, burst: }`).
  def ruby_keywords(args)
    keywords = {}
    if args.key?("rate_limit")
      rate = { limit: args["rate_limit"] }
      rate[:per_ms] = args["rate_per_ms"] if args.key?("rate_per_ms")
      rate[:per] = args["rate_per_seconds"] if args.key?("rate_per_seconds")
      rate[:burst] = args["rate_burst"] if args.key?("rate_burst")
      keywords[:rate] = rate
    end
    args.reject { |k, _| %w[key keys jid].include?(k) || k.start_with?("rate_") }.to_h do |name, value|
      case name
      when "ttl_seconds" then [:ttl, value]
      when "wait_seconds" then [:wait, value]
      when "pxat_ms" then [:pxat, value]
      else [name.to_sym, value]
      end
    end.merge(keywords)
  end

  def send_call(c, call, args)
    case call
    when "lock" then c.lock(args["key"], args["jid"], **ruby_keywords(args))
    when "unlock" then c.unlock(args["key"], args["jid"], token: args["token"])
    when "locked_by" then c.locked_by(args["key"])
    when "holders" then c.holders(args["key"])
    when "waiters" then c.waiters(args["key"])
    when "waiters_by_group" then c.waiters(args["key"], groups: true)
    when "rate" then c.rate(args["key"])
    when "lock_all" then c.lock_all(args["keys"], args["jid"], **lock_all_keywords(args))
    when "unlock_all" then c.unlock_all(args["keys"], args["jid"], tokens: args["tokens"])
    end
  end

  # The neutral arguments of lock_all as its keywords: `rates` (a list of { key: position
  # from 1, rate_limit, rate_per_ms | rate_per_seconds, rate_burst }) as an Array in key
  # order, with nil for a key without a rate.
  def lock_all_keywords(args)
    rates = Array.new(args["keys"].size)
    (args["rates"] || []).each do |r|
      rates[r["key"] - 1] = { limit: r["rate_limit"], per_ms: r["rate_per_ms"], per: r["rate_per_seconds"],
                              burst: r["rate_burst"] }.compact
    end
    keywords = args.reject { |k, _| %w[key keys jid rates].include?(k) }.to_h do |name, value|
      [{ "ttl_seconds" => :ttl, "wait_seconds" => :wait, "pxat_ms" => :pxat }.fetch(name, name.to_sym), value]
    end
    args["rates"] ? keywords.merge(rates: rates) : keywords
  end

  TABLE["calls"].each do |call|
    define_method("test_argv: #{call["name"]}") do
      c = RedisUnique::Client.new(TestSuite.raw_connection)
      recorder = Recorder.new(c.connection)
      c.instance_variable_set(:@connection, recorder)
      # this test's own keys in place of the table's (one hash tag for the keys of lock_all)
      own = { call["args"]["key"] => "conformance:#{token}" }.compact
      (call["args"]["keys"] || []).each { |k| own[k] = "conformance:{#{token}}:#{k}" }
      args = call["args"].merge("key" => "conformance:#{token}")
      args["keys"] = args["keys"].map { |k| own.fetch(k) } if args["keys"]
      send_call(c, call["call"], args)
      expected = call["argv"].map { |a| own.fetch(a, a) }
      assert_equal expected, recorder.sent.first
    ensure
      conn.call("DEL", "conformance:#{token}", *own&.values)
    end
  end

  # Every call of the table on both backends: the same value from the module and from its
  # Functions library (on a server started without the module): on a fresh key (a first
  # call, then the same call again) and on a key with one holder there first; a call marked "functions": "refused" is refused on the library with
  # an error that names the module, before anything is sent.
  TABLE["calls"].each do |call|
    define_method("test_both backends: #{call["name"]}") do
      plain = TestSuite.plain_server
      backends = { "module" => client, "functions" => RedisUnique::Client.new(TestSuite.raw_connection(plain.url)) }
      own = { call["args"]["key"] => "conformance:#{token}" }.compact
      (call["args"]["keys"] || []).each { |k| own[k] = "conformance:{#{token}}:#{k}" }
      args = call["args"].merge("key" => "conformance:#{token}")
      args["keys"] = args["keys"].map { |k| own.fetch(k) } if args["keys"]
      if call["functions"] == "refused"
        e = assert_raises(RedisUnique::NotInFunctions) { send_call(backends["functions"], call["call"], args) }
        assert_match(/needs the redis-unique module/, e.message)
        assert_equal [], backends["functions"].connection.call("KEYS", "conformance:*#{token}*")
        next
      end
      fresh = args.merge("key" => "conformance:#{token}:fresh")
      values = backends.transform_values do |c|
        c.lock(args["key"], "someone", limit: 0, ttl: 60, owner: "o", meta: { "a" => 1 })
        [outcome(c, call, fresh), outcome(c, call, args), outcome(c, call, fresh)]
      end
      assert_equal values["module"], values["functions"]
      assert_equal "functions", backends["functions"].backend
    ensure
      keys = [*own&.values, "conformance:#{token}", "conformance:#{token}:fresh"]
      conn.call("DEL", *keys)
      backends&.fetch("functions")&.connection&.call("DEL", *keys, *keys.map { |k| RedisUnique::Functions.wake_key(k) })
    end
  end

  # A call's value in a form both backends give alike (a token's value is the server's clock).
  def outcome(c, call, args)
    value = send_call(c, call["call"], args)
    case call["call"]
    when "lock" then value.is_a?(Integer) ? "token" : value
    when "holders" then value.map { |h| [h.jid, h.type, h.owner, h.meta, h.group, h.mode, h.ttl.nil?] }
    when "waiters_by_group" then value.map { |g| neutral_waiter_group(g) }
    when "rate" then value && neutral_rate(value).slice("limit", "per_ms", "burst", "remaining")
    else value
    end
  rescue RedisUnique::CommandError => e
    ["error", e.class.name, e.message.split(" (").first]
  end

  def neutral_holder(h)
    { "jid" => h.jid, "token" => h.token, "acquired_at_ms" => (h.acquired_at.to_r * 1000).to_i,
      "expires_at_ms" => h.expires_at && (h.expires_at.to_r * 1000).to_i,
      "ttl_ms" => h.ttl && (h.ttl * 1000).round, "type" => h.type, "owner" => h.owner, "meta" => h.meta,
      "group" => h.group, "mode" => h.mode }
  end

  def neutral_waiter_group(g)
    { "group" => g.group, "waiting" => g.waiting, "holding" => g.holding }
  end

  def neutral_rate(r)
    { "limit" => r.limit, "per_ms" => r.per_ms, "burst" => r.burst, "remaining" => r.remaining,
      "allowed_at_ms" => (r.allowed_at.to_r * 1000).to_i, "idle_at_ms" => (r.idle_at.to_r * 1000).to_i }
  end

  # A connection that answers with the table's raw reply: the client's own parsing reads it.
  class Canned
    def initialize(reply)
      @reply = reply
    end

    def call(*)
      @reply
    end
  end

  TABLE["replies"].each do |reply|
    define_method("test_reply: #{reply["name"]}") do
      c = RedisUnique::Client.new(TestSuite.raw_connection)
      c.instance_variable_set(:@connection, Canned.new(reply["reply"]))
      value = send_call(c, reply["call"], "key" => "k", "keys" => %w[k1 k2], "jid" => "j")
      value = value.map { |h| neutral_holder(h) } if reply["call"] == "holders"
      value = value.map { |g| neutral_waiter_group(g) } if reply["call"] == "waiters_by_group"
      value = value && neutral_rate(value) if reply["call"] == "rate"
      if reply["value"].nil?
        assert_nil value
      else
        assert_equal reply["value"], value
      end
    end
  end

  # The renewal rule (README "Renewal"), checked on RedisUnique::Refresher's own pieces:
  # when it renews, what it sends, and what each reply or error means.
  TABLE["renewal"]["timing"].each do |row|
    define_method("test_renewal timing: #{row["name"]}") do
      assert_equal row["interval_ms"], RedisUnique::Refresher.interval_ms(row["lease_ms"])
      assert_equal row["retry_ms"], RedisUnique::Refresher.retry_ms(row["lease_ms"])
    end
  end

  TABLE["renewal"]["argv"].each do |row|
    define_method("test_renewal argv: #{row["name"]}") do
      args = row["args"]
      changes = (args["changed"] || {}).transform_keys(&:to_sym)
      key = args["keys"] || args["key"] # a hold on several keys: renewed with LOCKALL
      refresher = RedisUnique::Refresher.new(client, key, args["jid"], token: key.is_a?(Array) ? [1] * key.size : 1,
                                                                       lease_ms: args["ttl_ms"])
      refresher.update(**changes) unless changes.empty?
      argv, = refresher.send(:next_renewal)
      assert_equal row["argv"], argv.map(&:to_s)
      # a change is sent once: the renewal after it sends the lease only
      assert_equal row["argv"].first(row["argv"].index("TTL") + 2), refresher.send(:next_renewal).first.map(&:to_s)
    end
  end

  def command_error(message)
    klass = defined?(::RedisClient::CommandError) && H.sidekiq7? ? ::RedisClient::CommandError : ::Redis::CommandError
    RedisUnique::Connection.translate(klass.new(message), %w[UNIQUE.LOCK k j TTL 30000])
  end

  def connection_error
    klass = defined?(::RedisClient::ConnectionError) && H.sidekiq7? ? ::RedisClient::ConnectionError : ::Redis::CannotConnectError
    RedisUnique::Connection.translate(klass.new("Connection refused"), %w[UNIQUE.LOCK k j TTL 30000])
  end

  TABLE["renewal"]["outcomes"].each do |row|
    define_method("test_renewal outcome: #{row["name"]}") do
      outcome = if row.key?("error")
                  error = row["error"] == "connection" ? connection_error : command_error(row["error"])
                  RedisUnique::Refresher.error_outcome(error)
                else
                  RedisUnique::Refresher.outcome(row["token"], row["reply"])
                end
      assert_equal row["outcome"], outcome.to_s
      next unless row.key?("unlock_argv")

      # The release of the hold the renewal took: by the reply's token.
      c = RedisUnique::Client.new(TestSuite.raw_connection)
      recorder = Recorder.new(c.connection)
      c.instance_variable_set(:@connection, recorder)
      refresher = RedisUnique::Refresher.new(c, row["unlock_argv"][1], row["unlock_argv"][2], token: row["token"],
                                                                                              lease_ms: 30_000, sent_at: 0)
      refresher.send(:unlock, row["reply"])
      assert_equal [row["unlock_argv"]], recorder.sent.map { |argv| argv.map(&:to_s) }
    end
  end

  # ReliableFetch keeps a requeued job's lock with the argv the client builds for the same
  # call (Client.lock_argv), so the rows above cover it.
  def test_reliable_fetch_keeps_a_lock_with_the_clients_argv
    item = { "class" => "LimitedJob", "jid" => "j1", "queue" => "default", "args" => [token],
             "lock" => "until_executed", "lock_limit" => 2, "lock_digest" => "d:1" }
    c = RedisUnique::Client.new(TestSuite.raw_connection)
    recorder = Recorder.new(c.connection)
    c.instance_variable_set(:@connection, recorder)
    c.lock("conformance:#{token}", "j1", limit: 2, type: "until_executed", owner: "queued")
    sent = recorder.sent.first.map { |a| a == "conformance:#{token}" ? "d:1" : a }
    assert_equal [sent], RedisUnique::Sidekiq::ReliableFetch.keep_lock_commands(item).map { |a| a.map(&:to_s) }
  ensure
    conn.call("DEL", "conformance:#{token}")
  end
end
