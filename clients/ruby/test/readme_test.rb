# frozen_string_literal: true

require_relative "test_helper"
require "redis"

# The README's examples of fair sharing, replayed: the Sidekiq block is the job file that
# test/fair_sharing_test.rb runs with real Sidekiq processes, and the client block runs
# here, every `# => value` checked.
class ReadmeTest < Minitest::Test
  include TestHelpers

  README = File.expand_path("../README.md", __dir__)
  SECTION = "### Fair sharing among tenants, and readers and writers"
  SEVERAL = "### Several limits at once: per account and in all"

  def blocks(title = SECTION)
    text = File.read(README)
    section = text[/^#{Regexp.escape(title)}\n(.*?)(?=^##)/m, 1] or flunk "no section #{title.inspect} in the README"
    section.scan(/^```ruby\n(.*?)^```\n/m).map(&:first)
  end

  def test_the_sidekiq_example_is_the_file_the_tests_run
    job, = blocks
    file = File.read(File.expand_path("../examples/005_fair_sharing.rb", __dir__))
    assert_includes file, job, "the README's job is examples/005_fair_sharing.rb's"
  end

  # Runs the code of `block` in order; at each `# => expected` (up to two spaces and a
  # `#`, which start prose), the code since the last check is evaluated and its value
  # compared: a Class means "an instance of", anything else equality.
  def replay(block)
    scope = Object.new.instance_eval { binding }
    pending = +""
    checked = 0
    block.each_line.with_index(1) do |line, n|
      code, expected = line.split(/\s+# => /, 2)
      pending << code << "\n"
      next unless expected

      expected = expected.split(/\s{2,}#/, 2).first.strip
      value = scope.eval(pending, README, n)
      want = scope.eval(expected)
      if want.is_a?(Class)
        assert_kind_of want, value, "README line: #{line.strip}"
      else
        assert_equal want, value, "README line: #{line.strip}"
      end
      pending = +""
      checked += 1
    end
    scope.eval(pending) unless pending.strip.empty?
    checked
  end

  def test_the_client_example_replays
    _, example = blocks
    assert_operator replay_on(2, example), :>=, 12
  end

  def test_the_several_limits_job_is_the_file_the_tests_run
    job, = blocks(SEVERAL)
    file = File.read(File.expand_path("../examples/006_several_limits.rb", __dir__))
    assert_includes file, job, "the README's job is examples/006_several_limits.rb's"
  end

  def test_the_several_limits_client_example_replays
    _, example = blocks(SEVERAL)
    assert_operator replay_on(3, example), :>=, 8
  end

  # The quick start, replayed; the root README shows the same block.
  def test_the_quick_start_replays_and_is_the_root_readmes
    text = File.read(README)
    section = text[/^## Quick start\n(.*?)(?=^## )/m, 1] or flunk "no Quick start in the README"
    example = section[/^```ruby\n(.*?)^```\n/m, 1] or flunk "no ruby block in the Quick start"
    assert_operator replay_on(4, example), :>=, 4
    root = File.read(File.expand_path("../../../README.md", __dir__))
    assert_includes root, "```ruby\n#{example}```\n", "the root README's Ruby quick start is this one"
  end

  # Replays `example` on database `n`, a database of the test's own: the example's keys are plain.
  def replay_on(n, example)
    url = TestSuite.url.sub(%r{/0\z}, "/#{n}")
    db = RedisUnique::Connection.new(TestSuite.raw_connection(url))
    db.call("FLUSHDB")
    before = ENV.fetch("REDIS_URL", nil)
    ENV["REDIS_URL"] = url # what Redis.new connects to
    begin
      replay(example)
    ensure
      ENV["REDIS_URL"] = before
      db.call("FLUSHDB")
    end
  end
end
