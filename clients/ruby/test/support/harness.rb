# frozen_string_literal: true

# Test harness shared by every Ruby test of the project (and reusable by later ones:
# the web tab, ReliableFetch): a real redis-server with the freshly built module on a
# free port in a temporary dir, and real `sidekiq` processes of the Sidekiq version that
# this Ruby process loaded (Debian's 6.4.1; 7.3.9 through RUBYLIB from
# ../shared/ruby/sidekiq7-env.sh; 8.1.7 on Ruby 3.3 through sidekiq8-env.sh).
require "socket"
require "tmpdir"
require "fileutils"
require "rbconfig"

module RedisUnique
  module Harness
    ROOT = File.expand_path("../../../..", __dir__) # the repository
    RUBY_DIR = File.expand_path("../..", __dir__)   # clients/ruby

    module_function

    # Polls the block (every `interval` s) until it returns a truthy value, at most
    # `timeout` seconds; returns that value or raises with `message`.
    # How long a test waits for a condition before it fails. A server, a Sidekiq process or a
    # job comes in well under a second on an idle machine, but CI runs on 2 shared cores with
    # other suites, background builds and servers under valgrind: the bound only costs time
    # when the test fails anyway, so it is generous. Tests poll with this, never a fixed sleep.
    PATIENCE = 60

    def wait_until(timeout: PATIENCE, interval: 0.02, message: "condition")
      deadline = Process.clock_gettime(Process::CLOCK_MONOTONIC) + timeout
      loop do
        value = yield
        return value if value
        raise "timed out after #{timeout}s waiting for #{message}" if Process.clock_gettime(Process::CLOCK_MONOTONIC) > deadline

        sleep interval
      end
    end

    def free_port
      server = TCPServer.new("127.0.0.1", 0)
      server.addr[1]
    ensure
      server&.close
    end

    def module_path
      ENV["REDIS_UNIQUE_MODULE"] || File.join(ROOT, "target/release/libredis_unique.so")
    end

    def sidekiq7?
      ::Sidekiq::VERSION.to_i >= 7
    end

    def sidekiq8?
      ::Sidekiq::VERSION.to_i >= 8
    end

    # The command that starts a Sidekiq process of the loaded version (with this Ruby).
    def sidekiq_command
      if sidekiq7?
        env_script = sidekiq8? ? "sidekiq8-env.sh" : "sidekiq7-env.sh"
        bin = `#{File.join(shared_ruby, env_script)} --bin`.strip
        [RbConfig.ruby, bin]
      else
        [ENV["SIDEKIQ6_BIN"] || "/usr/bin/sidekiq"]
      end
    end

    def shared_ruby
      ENV["SHARED_RUBY"] || File.expand_path("../shared/ruby", ROOT)
    end

    # A redis-server with the module loaded.
    class RedisServer
      attr_reader :port, :dir, :pid

      def initialize(module_path: Harness.module_path, load_module: true, args: [])
        raise "module not found: #{module_path} (make test-ruby builds it)" if load_module && !File.exist?(module_path)

        @dir = Dir.mktmpdir("redis-unique-ruby")
        @port = Harness.free_port
        cmd = [ENV["REDIS_SERVER"] || "redis-server", "--port", @port.to_s, "--bind", "127.0.0.1",
               "--dir", @dir, "--save", "", "--appendonly", "no", "--logfile", File.join(@dir, "redis.log")]
        cmd += ["--loadmodule", module_path] if load_module
        cmd += args
        @pid = Process.spawn(*cmd, out: File::NULL, err: File.join(@dir, "stderr.log"))
        Harness.wait_until(timeout: 10, message: "redis-server on #{@port}") do
          raise "redis-server exited: #{log}" if Process.waitpid(@pid, Process::WNOHANG)

          begin
            TCPSocket.new("127.0.0.1", @port).tap do |s|
              s.write("PING\r\n")
              ok = s.gets&.start_with?("+PONG")
              s.close
              break ok
            end
          rescue Errno::ECONNREFUSED
            false
          end
        end
      end

      def url
        "redis://127.0.0.1:#{@port}/0"
      end

      def log
        [File.join(@dir, "redis.log"), File.join(@dir, "stderr.log")].map { |f| File.exist?(f) ? File.read(f) : "" }.join
      end

      def stop
        return unless @pid

        Process.kill("TERM", @pid)
        Process.wait(@pid)
      rescue Errno::ESRCH, Errno::ECHILD
        nil
      ensure
        @pid = nil
        FileUtils.rm_rf(@dir)
      end
    end

    # A real Sidekiq process running `app` (a Ruby file) against `redis_url`.
    class SidekiqProcess
      attr_reader :pid, :log_path, :identity

      def initialize(app:, redis_url:, queues: ["default"], concurrency: 5, env: {}, redis: nil)
        @log_path = File.join(Dir.mktmpdir("redis-unique-sidekiq"), "sidekiq.log")
        @redis = redis
        cmd = Harness.sidekiq_command + ["-r", app, "-c", concurrency.to_s, "-t", "3"]
        queues.each { |q| cmd += ["-q", q] }
        full_env = { "REDIS_URL" => redis_url, "RUBYLIB" => [File.join(RUBY_DIR, "lib"), ENV["RUBYLIB"]].compact.join(":") }
        @pid = Process.spawn(full_env.merge(env), *cmd, chdir: RUBY_DIR, out: @log_path, err: %i[child out],
                                                          pgroup: true)
      end

      # Waits until the process heartbeats (it is in Sidekiq's processes set); sets identity.
      def wait_ready(conn, timeout: 30)
        @identity = Harness.wait_until(timeout: timeout, interval: 0.1, message: "sidekiq #{@pid} heartbeat\n#{log}") do
          raise "sidekiq #{@pid} exited:\n#{log}" if exited?

          conn.call("SMEMBERS", "processes").find { |id| id.split(":")[-2] == @pid.to_s }
        end
      end

      def exited?
        return true unless @pid

        !Process.waitpid(@pid, Process::WNOHANG).nil?
      rescue Errno::ECHILD
        true
      end

      def log
        File.exist?(@log_path) ? File.read(@log_path) : ""
      end

      def kill9
        Process.kill("KILL", @pid)
        Process.wait(@pid)
      rescue Errno::ESRCH, Errno::ECHILD
        nil
      ensure
        @pid = nil
      end

      def stop(timeout: 10)
        return unless @pid

        Process.kill("TERM", @pid)
        deadline = Process.clock_gettime(Process::CLOCK_MONOTONIC) + timeout
        until Process.waitpid(@pid, Process::WNOHANG)
          if Process.clock_gettime(Process::CLOCK_MONOTONIC) > deadline
            Process.kill("KILL", @pid)
            Process.wait(@pid)
            break
          end
          sleep 0.05
        end
      rescue Errno::ESRCH, Errno::ECHILD
        nil
      ensure
        @pid = nil
      end
    end
  end
end
