# frozen_string_literal: true

module RedisUnique
  # The module is not loaded, the Functions library is absent (or older than this gem's),
  # and this connection may not load it: an operator runs the command in the message once.
  class FunctionsNotLoaded < CommandError; end

  # A call the Functions library does not keep (lock_all, unlock_all): it needs the module.
  class NotInFunctions < CommandError; end

  # The two backends: the redis-unique module, or its Redis Functions library
  # (lib/redis_unique/redis_unique.lua, a copy of the repository's functions/redis_unique.lua)
  # where the module cannot be loaded (managed Redis and Valkey).
  #
  # Once per Redis connection or pool (the object a Connection wraps), the first UNIQUE.*
  # call tells: it goes to the module, and an "unknown command" reply (which changed
  # nothing; no MODULE LIST, forbidden on several clouds) sends it and every later call to
  # the library through FCALL (a transaction or a pipeline asks `COMMAND INFO unique.lock`
  # first). The library is loaded (FUNCTION LOAD REPLACE) when it is missing or older than
  # the gem's, or, where the user may not load it, FunctionsNotLoaded gives the one command
  # an operator runs (`redis-unique functions load URL`). REDIS_UNIQUE_BACKEND (module,
  # functions or auto, the default) or RedisUnique.backend= forces either. A user's code is
  # the same on both.
  #
  # Every UNIQUE.* call is the same call to the library: `FCALL unique_lock 3 key wake
  # unique:metrics jid ...`, with the lock's wake list (Functions.wake_key, in the lock's hash
  # slot) and the counters' hash. A WAIT is a waiter queued on the server, woken by a BLPOP
  # on the wake list.
  module Functions
    LIBRARY_NAME = "redis_unique"
    METRICS_KEY = "unique:metrics"
    LIBRARY_FILE = File.expand_path("redis_unique.lua", __dir__)
    BACKENDS = %w[module functions].freeze
    READS = { "UNIQUE.LOCKEDBY" => "unique_lockedby", "UNIQUE.RATE" => "unique_rate",
              "UNIQUE.WAITERS" => "unique_waiters" }.freeze
    WRITES = { "UNIQUE.LOCK" => "unique_lock", "UNIQUE.UNLOCK" => "unique_unlock" }.freeze
    REFUSED = %w[UNIQUE.LOCKALL UNIQUE.UNLOCKALL].freeze

    @forced = nil
    @chosen = ObjectSpace::WeakMap.new
    @lock = Mutex.new

    class << self
      # The library's source, as the gem ships it.
      def source
        @source ||= File.read(LIBRARY_FILE)
      end

      # The library's VERSION (the gem's copy, or `text`).
      def version(text = source)
        text[/^local VERSION = (\d+)/, 1].to_i
      end

      # Forces a backend for every connection: "module", "functions", or nil / "auto" to
      # find it per connection (the default; REDIS_UNIQUE_BACKEND sets it too).
      def backend=(name)
        name = name&.to_s
        unless name.nil? || name == "auto" || BACKENDS.include?(name)
          raise InvalidOption, "backend must be :module, :functions or :auto, not #{name.inspect}"
        end

        @forced = name == "auto" ? nil : name
        forget_all
      end

      # The forced backend ("module", "functions"), nil when each connection finds its own.
      def forced
        return @forced if @forced

        env = ENV.fetch("REDIS_UNIQUE_BACKEND", "auto").strip.downcase
        return nil if env.empty? || env == "auto"
        unless BACKENDS.include?(env)
          raise InvalidOption, "REDIS_UNIQUE_BACKEND must be module, functions or auto, not #{env.inspect}"
        end

        env
      end

      # "module" or "functions" for `connection` (a Connection), found once.
      def backend(connection)
        forced || known(connection) || begin
          found = module_loaded?(connection) ? "module" : "functions"
          ensure_loaded(connection) if found == "functions"
          remember(connection, found)
        end
      end

      # true when the server answers COMMAND INFO unique.lock with the command (allowed
      # where MODULE LIST is not). Where COMMAND is refused too, a read of a probe key tells:
      # a server looks a command up before its ACL, so only a missing module answers
      # "unknown command".
      def module_loaded?(connection)
        reply = begin
          connection.raw(%w[COMMAND INFO unique.lock])
        rescue CommandError
          return probe(connection)
        end
        reply = reply.values if reply.is_a?(Hash)
        Array(reply).any? { |entry| !entry.nil? && entry != [] }
      end

      def probe(connection)
        connection.raw(["UNIQUE.LOCKEDBY", "redis-unique:probe"])
        true
      rescue ModuleNotLoaded
        false
      rescue CommandError
        true
      end

      # The operator's command, for the message of FunctionsNotLoaded.
      def operator_hint
        "the redis-unique module is not loaded on this server, and its Functions library is not loaded " \
          "either (or is older than this gem's, version #{version}). Load it once: " \
          "`redis-unique functions load redis://HOST:PORT` (the gem's command; or `redis-cli -x FUNCTION LOAD " \
          "REPLACE < functions/redis_unique.lua`), or load the module (docs/install.md)"
      end

      # The library's version loaded in the server, nil when it is not.
      def loaded_version(connection)
        Integer(connection.raw(%w[FCALL_RO unique_version 0]))
      rescue CommandError => e
        return nil if e.message =~ /function not found/i
        if e.message =~ /unknown command/i
          raise ModuleNotLoaded, "the redis-unique module is not loaded in this server, and the server has no " \
                                 "Redis Functions (Redis 7 or Valkey 8 and later) for its library: load the " \
                                 "module (docs/install.md) (#{e.message})"
        end

        raise
      end

      # FUNCTION LOAD REPLACE of the library.
      def load(connection)
        connection.raw(["FUNCTION", "LOAD", "REPLACE", source])
      end

      # Loads the library when it is absent or older than the gem's; raises
      # FunctionsNotLoaded with the operator's command where this user may not.
      def ensure_loaded(connection)
        have = loaded_version(connection)
        return if have && have >= version

        begin
          load(connection)
        rescue CommandError => e
          raise FunctionsNotLoaded, "#{operator_hint} (#{e.message})"
        end
      end

      # The lock's wake list: "{X}:unique:w:" + key, X the key's hash tag, else the key
      # (without '}'), else a tag of the same slot; in the lock's slot whatever the key.
      def wake_key(key)
        k = key.to_s.b
        tag = hash_tag(k)
        if tag.nil?
          if !k.empty? && !k.include?("}")
            tag = k
          else
            want = key_slot(k)
            i = 0
            i += 1 until crc16("u#{i}") % 16_384 == want
            tag = "u#{i}"
          end
        end
        "{#{tag}}:unique:w:".b + k
      end

      def key_slot(key)
        k = key.to_s.b
        crc16(hash_tag(k) || k) % 16_384
      end

      # CRC16-CCITT (XMODEM), Redis Cluster's.
      def crc16(data)
        crc = 0
        data.to_s.each_byte do |byte|
          crc ^= byte << 8
          8.times { crc = crc & 0x8000 != 0 ? ((crc << 1) ^ 0x1021) & 0xffff : (crc << 1) & 0xffff }
        end
        crc
      end

      # The FCALL of a UNIQUE.* call that does not block (in a transaction or a pipeline a
      # call cannot block: WAIT is left out, as the module ignores it in MULTI).
      def fcall_argv(argv)
        name = argv[0].to_s.upcase
        if REFUSED.include?(name)
          raise NotInFunctions, "#{name} (lock_all, unlock_all) needs the redis-unique module: the Functions " \
                                "library keeps single-key locks only (load the module, docs/install.md)"
        end
        return ["FCALL_RO", READS.fetch(name), 1, argv[1], *argv[2..]] if READS.key?(name)
        if WRITES.key?(name)
          keys = lock_keys(argv[1])
          rest = argv[2..] || []
          rest = without_wait(rest) if name == "UNIQUE.LOCK"
          return ["FCALL", WRITES.fetch(name), keys.size, *keys, *rest]
        end
        return ["FCALL", "unique_metrics", 1, METRICS_KEY, *argv[1..]] if name == "UNIQUE.METRICS"

        raise NotInFunctions, "#{name} needs the redis-unique module (docs/install.md)"
      end

      # The command a transaction or a pipeline sends for `argv` on the backend of
      # `connection` (the argv itself when it is not a UNIQUE.* call, or on the module).
      def batch_argv(connection, argv)
        return argv unless unique?(argv)
        return argv if backend(connection) == "module"

        fcall_argv(argv)
      end

      def unique?(argv)
        argv[0].to_s.upcase.start_with?("UNIQUE.")
      end

      # A UNIQUE.* call on the backend of `connection`. Before the backend is known the call
      # goes to the module: its reply, or its error, says the module is there; an unknown
      # command (which changed nothing) says it is not, and the call goes to the library.
      def execute(connection, argv, block_seconds)
        found = forced || known(connection)
        if found != "functions"
          connection.check_module_version
          return connection.raw(argv, block_seconds) if found == "module"

          begin
            reply = connection.raw(argv, block_seconds)
          rescue ModuleNotLoaded
            ensure_loaded(connection)
            remember(connection, "functions")
          rescue CommandError
            remember(connection, "module")
            raise
          else
            remember(connection, "module")
            return reply
          end
        end
        on_library(connection, argv)
      end

      # Forgets what every connection found (a test, or a backend forced).
      def forget_all
        @lock.synchronize { @chosen = ObjectSpace::WeakMap.new }
      end

      def forget(connection)
        @lock.synchronize { @chosen[connection.redis] = nil if @chosen.key?(connection.redis) }
      end

      private

      def hash_tag(key)
        start = key.index("{")
        return nil unless start

        stop = key.index("}", start + 1)
        return nil if stop.nil? || stop == start + 1

        key[(start + 1)...stop]
      end

      def known(connection)
        @lock.synchronize { @chosen[connection.redis] }
      end

      def remember(connection, found)
        @lock.synchronize { @chosen[connection.redis] = found }
        found
      end

      def lock_keys(key)
        [key, wake_key(key), METRICS_KEY]
      end

      def without_wait(rest)
        out = rest.first(1)
        i = 1
        while i < rest.size
          if rest[i].to_s.upcase == "WAIT" && i + 1 < rest.size
            i += 2
            next
          end
          out << rest[i]
          i += 1
        end
        out
      end

      def wait?(argv)
        (3...(argv.size - 1)).step(2).any? { |i| argv[i].to_s.upcase == "WAIT" }
      end

      def on_library(connection, argv)
        name = argv[0].to_s.upcase
        return lock_wait(connection, argv) if name == "UNIQUE.LOCK" && wait?(argv)
        return reap(connection, argv) if name == "UNIQUE.REAP"

        fcall(connection, fcall_argv(argv))
      end

      # One FCALL; a "function not found" (after a failover to a replica that never had it,
      # a FUNCTION FLUSH) loads the library again and sends the call once more.
      def fcall(connection, argv, block_seconds = nil)
        connection.raw(argv, block_seconds)
      rescue CommandError => e
        raise unless e.message =~ /function not found/i

        ensure_loaded(connection)
        connection.raw(argv, block_seconds)
      end

      # LOCK ... WAIT: granted at once, denied, or queued on the server ([seq, ms]): then
      # BLPOP on the wake list for at most ms, and ask again (unique_wait) until granted or
      # timed out.
      def lock_wait(connection, argv)
        keys = lock_keys(argv[1])
        reply = fcall(connection, ["FCALL", "unique_lock", keys.size, *keys, *argv[2..]])
        return reply unless reply.is_a?(Array)

        seq = reply[0]
        answered = false
        begin
          loop do
            popped = block(connection, keys[1], [Integer(reply[1]), 1].max)
            # the wake-up popped goes back to the library: another waiter's is passed on
            woke = popped.is_a?(Array) ? [popped[1]] : []
            reply = fcall(connection, ["FCALL", "unique_wait", keys.size, *keys, seq, *woke])
            next if reply.is_a?(Array)

            answered = true
            return reply
          end
        ensure
          cancel(connection, keys, seq, argv[2]) unless answered
        end
      end

      # A BLPOP times out only on the server's timer tick (100 ms at the default hz 10), so an
      # instant the library names (a rate's next grant, a lease's end) would be missed by up
      # to a tick: the last tick of a block is slept here instead, and the library asked at
      # the instant itself. A grant in that last tick is found then.
      BLOCK_TICK_MS = 100

      def block(connection, wake_list, ms)
        until_at = Process.clock_gettime(Process::CLOCK_MONOTONIC) + ms / 1000.0
        popped = nil
        if ms > BLOCK_TICK_MS
          seconds = (ms - BLOCK_TICK_MS) / 1000.0
          popped = connection.raw(["BLPOP", wake_list, format("%.3f", seconds)], seconds)
        end
        return popped if popped.is_a?(Array)

        left = until_at - Process.clock_gettime(Process::CLOCK_MONOTONIC)
        sleep(left) if left.positive?
        nil
      end

      # A waiter interrupted (an exception, Thread#kill, a Sidekiq shutdown) leaves the queue;
      # a grant that raced it is released by its token.
      def cancel(connection, keys, seq, jid)
        token = fcall(connection, ["FCALL", "unique_wait", keys.size, *keys, seq, "CANCEL"])
        fcall(connection, ["FCALL", "unique_unlock", keys.size, *keys, jid, "TOKEN", token]) if token
      rescue StandardError
        nil # best effort: a waiter that stops asking is forgotten, and a grant ends with its lease
      end

      # REAP cursor [COUNT n] [OWNER o]: one SCAN step over the hashes, then the library's
      # REAP on each (unique_reapkey leaves a hash that is not a lock as it is), pipelined.
      def reap(connection, argv)
        count = 100
        owner = ""
        (2...(argv.size - 1)).step(2).each do |i|
          case argv[i].to_s.upcase
          when "COUNT" then count = Integer(argv[i + 1])
          when "OWNER" then owner = argv[i + 1].to_s
          end
        end
        next_cursor, names = connection.raw(["SCAN", argv[1].to_s, "COUNT", count, "TYPE", "hash"])
        return [next_cursor, 0] if names.empty?

        calls = names.map { |k| ["FCALL", "unique_reapkey", 3, *lock_keys(k), owner] }
        replies = begin
          connection.pipeline(calls)
        rescue CommandError => e
          raise unless e.message =~ /function not found/i

          ensure_loaded(connection)
          connection.pipeline(calls)
        end
        replies.each { |r| raise Connection.translate(r, calls.first) if r.is_a?(Exception) }
        [next_cursor, replies.sum(&:to_i)]
      end
    end
  end

  class << self
    # Forces a backend for every connection: :module, :functions, or :auto (the default:
    # each connection finds out whether the module is loaded; REDIS_UNIQUE_BACKEND sets it too).
    def backend=(name)
      Functions.backend = name
    end

    # The forced backend (:module, :functions), or :auto.
    def backend
      Functions.forced&.to_sym || :auto
    end
  end
end
