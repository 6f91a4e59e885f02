# frozen_string_literal: true

require "selenium-webdriver"
require "webrick"
# Rack 3 (Sidekiq 8) moved the server handlers into the rackup gem.
begin
  require "rackup/handler/webrick"
  WEBRICK_HANDLER = Rackup::Handler::WEBrick
rescue LoadError
  require "rack/handler/webrick"
  WEBRICK_HANDLER = Rack::Handler::WEBrick
end
require "tmpdir"
require_relative "web"

module RedisUnique
  # The Sidekiq web app served over HTTP by WEBrick (in this process) and a headless
  # Chromium (Debian's chromium + chromium-driver) driven by Selenium.
  module Browser
    CHROMIUM_FLAGS = %w[--headless --no-sandbox --disable-gpu --disable-quic --no-first-run
                        --disable-background-networking --disable-component-update --disable-sync
                        --disable-dev-shm-usage --window-size=1100,800].freeze

    # WEBrick serving the app on 127.0.0.1, on the port that WEBrick binds itself (Port 0:
    # the kernel picks a free one, which no other process can take between a probe and the
    # bind), read back from the server once it listens.
    class Server
      attr_reader :port

      def initialize(app)
        @started = false
        @thread = Thread.new do
          Thread.current.report_on_exception = false # the join below raises it
          WEBRICK_HANDLER.run(app, Host: "127.0.0.1", Port: 0, Logger: WEBrick::Log.new(File::NULL),
                                   AccessLog: [], StartCallback: -> { @started = true }) do |server|
            @server = server
          end
        end
        Harness.wait_until(timeout: 15, message: "WEBrick started") do
          @thread.join if !@thread.alive? # raises what stopped it
          @started
        end
        @port = @server.config[:Port]
      end

      def url(path = "/")
        "http://127.0.0.1:#{@port}#{path}"
      end

      def stop
        @server&.shutdown
        @thread&.join(5)
      end
    end

    module_function

    # A headless Chromium session through a chromedriver of its own; the session's #quit
    # stops that chromedriver too.
    def driver
      options = Selenium::WebDriver::Chrome::Options.new(args: CHROMIUM_FLAGS + ["--user-data-dir=#{Dir.mktmpdir("redis-unique-chromium")}"])
      options.binary = ENV["CHROMIUM"] || "/usr/bin/chromium"
      chromedriver = ChromeDriver.new
      session = Selenium::WebDriver.for(:chrome, url: chromedriver.url, options: options)
      session.define_singleton_method(:quit) do
        super()
      ensure
        chromedriver.stop
      end
      session
    rescue StandardError
      chromedriver&.stop
      raise
    end

    # chromedriver listening on the port it bound itself (--port=0), read back from the line
    # it prints once it listens. Selenium's own service would probe a free port and start
    # chromedriver on it, and another process (CI runs suites side by side, each binding
    # ports) can take that port in between: chromedriver then exits, or Selenium talks to
    # whatever answers there.
    #
    # Even with --port=0 one race is left: chromedriver binds 127.0.0.1 on a port the kernel
    # picks, then ::1 on the same port, and exits ("IPv6 port not available") when another
    # socket already holds that one. A fresh start draws another port, so that exit, and only
    # that one, is retried.
    class ChromeDriver
      ATTEMPTS = 5

      attr_reader :port, :log_path

      def initialize(path: ENV["CHROMEDRIVER"] || "/usr/bin/chromedriver")
        at_exit { stop }
        ATTEMPTS.times do |attempt|
          @port = start(path)
          return if @port
          raise "chromedriver exited:\n#{log}" if attempt == ATTEMPTS - 1
        end
      rescue StandardError
        stop
        raise
      end

      # The port chromedriver listens on, or nil when it exited because the port it drew was
      # taken on the other address family.
      def start(path)
        @log_path = File.join(Dir.mktmpdir("redis-unique-chromedriver"), "chromedriver.log")
        @pid = Process.spawn(path, "--port=0", out: @log_path, err: %i[child out], pgroup: true)
        Harness.wait_until(timeout: Harness::PATIENCE, message: "chromedriver's port (its log: #{@log_path})") do
          if Process.waitpid(@pid, Process::WNOHANG)
            @pid = nil
            break nil if log.match?(/IPv[46] port not available/)

            raise "chromedriver exited:\n#{log}"
          end

          log[/started successfully on port (\d+)/, 1]&.to_i
        end
      end

      def url
        "http://127.0.0.1:#{@port}"
      end

      def log
        File.exist?(@log_path) ? File.read(@log_path) : ""
      end

      # Ends chromedriver's process group (started as its own): a Chromium it left behind
      # goes with it.
      def stop
        return unless @pid

        Process.kill("TERM", -@pid)
        Process.wait(@pid)
      rescue Errno::ESRCH, Errno::ECHILD
        nil
      ensure
        @pid = nil
      end
    end
  end
end
