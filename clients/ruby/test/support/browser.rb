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

    # WEBrick serving the app on a free port of 127.0.0.1.
    class Server
      attr_reader :port

      # Another process can take the free port before WEBrick binds it: then a new one, up to
      # 5 tries.
      def initialize(app)
        1.upto(5) do |attempt|
          @port = Harness.free_port
          @started = false
          @thread = Thread.new do
            Thread.current.report_on_exception = false # the join below raises it
            WEBRICK_HANDLER.run(app, Host: "127.0.0.1", Port: @port, Logger: WEBrick::Log.new(File::NULL),
                                            AccessLog: [], StartCallback: -> { @started = true }) do |server|
              @server = server
            end
          end
          Harness.wait_until(timeout: 15, message: "WEBrick on #{@port}") do
            @thread.join if !@thread.alive? # raises what stopped it
            @started
          end
          return
        rescue Errno::EADDRINUSE
          raise if attempt == 5
        end
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

    def driver
      options = Selenium::WebDriver::Chrome::Options.new(args: CHROMIUM_FLAGS + ["--user-data-dir=#{Dir.mktmpdir("redis-unique-chromium")}"])
      options.binary = ENV["CHROMIUM"] || "/usr/bin/chromium"
      service = Selenium::WebDriver::Chrome::Service.new(path: ENV["CHROMEDRIVER"] || "/usr/bin/chromedriver",
                                                       port: service_port)
      Selenium::WebDriver.for(:chrome, options: options, service: service)
    end

    # A free port for chromedriver whose neighbour below is free too: Selenium binds
    # port - 1 as a start-up lock and gives up after 45 s when anything holds it.
    def service_port
      100.times do
        below = TCPServer.new("127.0.0.1", 0)
        port = below.addr[1] + 1
        begin
          TCPServer.new("127.0.0.1", port).close
          return port
        rescue Errno::EADDRINUSE, Errno::EACCES
          next
        ensure
          below.close
        end
      end
      raise "no two free ports in a row on 127.0.0.1"
    end
  end
end
