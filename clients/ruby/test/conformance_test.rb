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
    args.reject { |k, _| %w[key jid].include?(k) || k.start_with?("rate_") }.to_h do |name, value|
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
    when "unlock" then c.unlock(args["key"], args["jid"])
    when "locked_by" then c.locked_by(args["key"])
    when "holders" then c.holders(args["key"])
    when "waiters" then c.waiters(args["key"])
    when "rate" then c.rate(args["key"])
    end
  end

  TABLE["calls"].each do |call|
    define_method("test_argv: #{call["name"]}") do
      c = RedisUnique::Client.new(TestSuite.raw_connection)
      recorder = Recorder.new(c.connection)
      c.instance_variable_set(:@connection, recorder)
      args = call["args"].merge("key" => "conformance:#{token}")
      send_call(c, call["call"], args)
      expected = call["argv"].map { |a| a == call["args"]["key"] ? args["key"] : a }
      assert_equal expected, recorder.sent.first
    ensure
      conn.call("DEL", "conformance:#{token}")
    end
  end

  def neutral_holder(h)
    { "jid" => h.jid, "token" => h.token, "acquired_at_ms" => (h.acquired_at.to_r * 1000).to_i,
      "expires_at_ms" => h.expires_at && (h.expires_at.to_r * 1000).to_i,
      "ttl_ms" => h.ttl && (h.ttl * 1000).round, "type" => h.type, "owner" => h.owner, "meta" => h.meta }
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
      value = send_call(c, reply["call"], "key" => "k", "jid" => "j")
      value = value.map { |h| neutral_holder(h) } if reply["call"] == "holders"
      value = value && neutral_rate(value) if reply["call"] == "rate"
      if reply["value"].nil?
        assert_nil value
      else
        assert_equal reply["value"], value
      end
    end
  end
end
