# frozen_string_literal: true

module RedisUnique
  # The one seam between this gem and a Redis client library. It accepts
  #
  # - a redis-rb connection (`Redis.new`, redis-rb 4.x or 5.x),
  # - a redis-client connection (`RedisClient.new`, or the adapter that Sidekiq 7's
  #   `Sidekiq.redis` yields),
  # - a ConnectionPool of either (Sidekiq's own `redis_pool` included),
  # - or anything with `with { |conn| ... }` yielding one of the above.
  #
  # and exposes `call(*argv)` and `blocking_call(seconds, *argv)`, with every error
  # translated to a RedisUnique::Error.
  class Connection
    # Wraps `redis` unless it already is a Connection.
    def self.wrap(redis)
      redis.is_a?(Connection) ? redis : new(redis)
    end

    attr_reader :redis

    def initialize(redis)
      raise InvalidOption, "a Redis connection or pool is required" if redis.nil?

      @redis = redis
    end

    # Runs one command; returns its reply. A UNIQUE.* call goes to the module, or to its
    # Functions library where the module is not loaded (see Functions).
    def call(*argv)
      return Functions.execute(self, argv, nil) if Functions.unique?(argv)

      check_module_version
      raw(argv)
    end

    # Runs one command that may block the server side up to `seconds`.
    def blocking_call(seconds, *argv)
      return Functions.execute(self, argv, seconds) if Functions.unique?(argv)

      check_module_version
      raw(argv, seconds)
    end

    # "module" or "functions": the backend of this connection's UNIQUE.* calls (found once).
    def backend
      Functions.backend(self)
    end

    # `commands` (argv arrays) as a transaction or a pipeline sends them: each UNIQUE.* call
    # as the backend takes it (asked once with COMMAND INFO: an unknown command would fail
    # the whole transaction).
    def batch_argv(commands)
      commands.map { |argv| Functions.batch_argv(self, argv) }
    end

    # One command as it is, on one connection (checked out of the pool when it is one).
    def raw(argv, block_seconds = nil)
      with { |conn| Connection.invoke(conn, argv, block_seconds) }
    end

    # `commands` (argv arrays, sent as they are) in one pipeline; returns the replies.
    def pipeline(commands)
      with do |conn|
        if conn.respond_to?(:pipelined)
          conn.pipelined { |pipe| commands.each { |argv| pipe.call(*argv.map(&:to_s)) } }
        else
          commands.map { |argv| Connection.invoke(conn, argv, nil) }
        end
      end
    rescue Error
      raise
    rescue StandardError => e
      raise Connection.translate(e, commands.first || [])
    end

    # Raises ModuleVersionMismatch, before the first command, when the server's module is
    # of another major.minor than the gem (see ModuleVersion); checked once per Connection.
    def check_module_version
      return if @module_checked

      begin
        reply = raw(%w[MODULE LIST])
      rescue CommandError
        @module_checked = true # MODULE LIST refused (an ACL): nothing to compare
        return
      end
      ver = ModuleVersion.loaded(reply)
      error = ver && ModuleVersion.mismatch(ver)
      raise error if error

      @module_checked = true
    end

    # Yields a raw connection (checked out of the pool when it is one).
    def with(&block)
      if @redis.respond_to?(:with)
        @redis.with(&block)
      else
        yield @redis
      end
    end

    class << self
      def invoke(conn, argv, block_seconds)
        argv = argv.map { |a| a.is_a?(String) ? a : a.to_s }
        if redis_rb?(conn)
          if block_seconds
            conn.send(:send_blocking_command, argv, block_seconds + 1)
          else
            conn.call(*argv)
          end
        elsif block_seconds && conn.respond_to?(:blocking_call)
          conn.blocking_call(block_seconds + 1, *argv)
        else
          conn.call(*argv)
        end
      rescue Error
        raise
      rescue StandardError => e
        raise translate(e, argv)
      end

      def redis_rb?(conn)
        defined?(::Redis) && conn.is_a?(::Redis) && conn.respond_to?(:send_blocking_command, true)
      end

      def translate(error, argv)
        names = error.class.ancestors.map(&:name)
        msg = error.message.to_s
        if names.include?("Redis::CommandError") || names.include?("RedisClient::CommandError")
          if msg =~ /\AERR unknown command/i && argv.first.to_s.upcase.start_with?("UNIQUE.")
            ModuleNotLoaded.new
          elsif msg.start_with?("WRONGTYPE")
            WrongType.new(msg)
          else
            CommandError.new(msg)
          end
        elsif names.include?("Redis::BaseConnectionError") || names.include?("RedisClient::ConnectionError")
          ConnectionError.new(msg)
        else
          error
        end
      end
    end
  end
end
