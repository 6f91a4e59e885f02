# frozen_string_literal: true

# Test harness shared by every Ruby test of the project (and reusable by later ones:
# the web tab, ReliableFetch): a real redis-server with the freshly built module on a
# free port in a temporary dir, and real `sidekiq` processes of the Sidekiq version that
# this Ruby process loaded (Debian's 6.4.1; 7.3.9 through RUBYLIB from
# ../shared/ruby/sidekiq7-env.sh; 8.1.7 on Ruby 3.3 through sidekiq8-env.sh).
require "socket"
require "io/wait"
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

    # Yields a port that this process holds bound, not listening: a connection there is
    # refused, and no other process can take it (as it could a free port).
    def with_held_port
      held = Socket.new(:INET, :STREAM)
      held.bind(Addrinfo.tcp("127.0.0.1", 0))
      yield held.local_address.ip_port
    ensure
      held&.close
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
        binary = ENV["REDIS_SERVER"] || "redis-server"
        cmd = ["--bind", "127.0.0.1", "--dir", @dir, "--save", "", "--appendonly", "no",
               "--logfile", File.join(@dir, "redis.log")]
        cmd += ["--loadmodule", module_path] if load_module
        cmd += args
        # Another process (CI runs suites side by side, each starting servers) can take the
        # free port between free_port's probe and the server's bind: the server then exits, or
        # the probe would reach the other process's server. So each try picks a new port,
        # counts as ready only when the server answering there is this child (INFO's
        # process_id), and leaves its logs as redis-try-N.log and stderr-try-N.log.
        1.upto(5) do |attempt|
          @port = Harness.free_port
          @pid = Process.spawn(binary, "--port", @port.to_s, *cmd, out: File::NULL, err: File.join(@dir, "stderr.log"))
          return if ready?

          if @pid # still running (ready? reaped it if it exited)
            Process.kill("KILL", @pid)
            Process.wait(@pid)
          end
          %w[redis stderr].each do |name|
            log = File.join(@dir, "#{name}.log")
            File.rename(log, File.join(@dir, "#{name}-try-#{attempt}.log")) if File.exist?(log)
          end
        end
        last = %w[redis stderr].map { |name| File.join(@dir, "#{name}-try-5.log") }.select { |f| File.exist?(f) }
        raise "#{binary} did not start in 5 tries; see #{@dir}/redis-try-*.log and stderr-try-*.log, the last:\n" \
              "#{last.map { |f| File.read(f) }.join}"
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

      private

      # Whether this try's server comes up within PATIENCE: false once the process exits (then
      # reaped: @pid is nil) or another process answers on the port.
      def ready?
        deadline = Process.clock_gettime(Process::CLOCK_MONOTONIC) + PATIENCE
        until Process.clock_gettime(Process::CLOCK_MONOTONIC) > deadline
          if Process.waitpid(@pid, Process::WNOHANG)
            @pid = nil
            return false
          end

          answering = serving_pid
          return answering == @pid if answering

          sleep 0.01
        end
        false
      end

      # The process_id of the server that answers PING on the port (0 if INFO does not
      # give one), nil while none answers.
      def serving_pid
        Socket.tcp("127.0.0.1", @port, connect_timeout: 5) do |s|
          s.write("PING\r\nINFO server\r\n")
          return nil unless s.wait_readable(5) && s.gets&.start_with?("+PONG")

          size = s.wait_readable(5) && s.gets.to_s[/\A\$(\d+)/, 1]
          size ? s.read(size.to_i).to_s[/^process_id:(\d+)/, 1].to_i : 0
        end
      rescue SystemCallError, IOError, SocketError
        nil
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
