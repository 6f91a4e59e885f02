# frozen_string_literal: true

require_relative "test_helper"
require "minitest/mock"

# The harness's RedisServer when its free port is taken before the server binds it (a held
# port: the server cannot bind it, and nothing answers there).
class HarnessTest < Minitest::Test
  H = RedisUnique::Harness

  def test_a_taken_port_is_retried_on_a_new_one
    other = TestSuite.server.port
    free_port = H.method(:free_port)
    server = H.with_held_port do |taken|
      # Try 1: the port is held, the server exits; try 2: another server answers there.
      ports = [taken, other]
      H.stub(:free_port, -> { ports.shift || free_port.call }) { H::RedisServer.new }.tap do |s|
        refute_includes [taken, other], s.port
      end
    end
    conn = TestSuite.raw_connection(server.url)
    assert_match(/^process_id:#{server.pid}\r?$/, conn.call("INFO", "server"))
    assert_match(/in use/, File.read(File.join(server.dir, "redis-try-1.log")))
  ensure
    conn&.close
    server&.stop
  end

  def test_five_failed_tries_name_the_binary_and_the_logs
    error = H.with_held_port do |taken|
      H.stub(:free_port, taken) { assert_raises(RuntimeError) { H::RedisServer.new(load_module: false) } }
    end
    dir = error.message[%r{; see (.*)/redis-try-\*\.log}, 1]
    assert error.message.start_with?("#{ENV["REDIS_SERVER"] || "redis-server"} did not start in 5 tries")
    assert_equal (1..5).map { |n| "redis-try-#{n}.log" }, Dir.children(dir).grep(/redis-try/).sort
  ensure
    FileUtils.rm_rf(dir) if dir
  end
end
