# frozen_string_literal: true

require "socket"

module RedisUnique
  module Harness
    # A TCP proxy in front of the server whose link a test cuts and restores: cut closes
    # every proxied connection and closes each new one at once (the client sees its
    # connection reset or closed, as when a network link drops); restore lets new
    # connections through again. `refused` counts the connections closed while cut.
    class CutProxy
      attr_reader :port, :refused

      def initialize(target_port)
        @target = target_port
        @listener = TCPServer.new("127.0.0.1", 0)
        @port = @listener.addr[1]
        @refused = 0
        @cut = false
        @mutex = Mutex.new
        @socks = []
        @acceptor = Thread.new { accept_loop }
      end

      def url
        "redis://127.0.0.1:#{@port}"
      end

      def cut
        socks = @mutex.synchronize do
          @cut = true
          @socks.slice!(0..)
        end
        socks.each { |s| shut(s) }
      end

      def restore
        @mutex.synchronize { @cut = false }
      end

      def close
        cut
        @acceptor.kill
        shut(@listener)
      end

      private

      def accept_loop
        loop do
          down = @listener.accept
          if @mutex.synchronize { @cut && (@refused += 1) }
            shut(down)
            next
          end
          up = begin
            TCPSocket.new("127.0.0.1", @target)
          rescue SystemCallError
            shut(down)
            next
          end
          @mutex.synchronize { @socks.push(down, up) }
          [[down, up], [up, down]].each { |a, b| Thread.new { pump(a, b) } }
        end
      rescue IOError, SystemCallError
        nil
      end

      def pump(from, to)
        loop { to.write(from.readpartial(65_536)) }
      rescue IOError, SystemCallError
        shut(from)
        shut(to)
      end

      def shut(sock)
        sock.close unless sock.closed?
      rescue IOError, SystemCallError
        nil
      end
    end
  end
end
