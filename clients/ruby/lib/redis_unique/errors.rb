# frozen_string_literal: true

module RedisUnique
  # Every error this gem raises is a RedisUnique::Error.
  class Error < StandardError; end

  # The server answered "unknown command": the module is not loaded there.
  class ModuleNotLoaded < Error
    def initialize(msg = nil)
      super(msg || "the redis-unique module is not loaded in this Redis server " \
                   "(UNIQUE.* commands are unknown). Load it with " \
                   "`loadmodule /path/to/libredis_unique.so` in redis.conf, " \
                   "`redis-server --loadmodule /path/to/libredis_unique.so`, or " \
                   "`MODULE LOAD /path/to/libredis_unique.so` (build it with `cargo build --release`)")
    end
  end

  # The module loaded in the server is of another major.minor version than the gem was
  # made for: `module_version` and `client_version` say which.
  class ModuleVersionMismatch < Error
    attr_reader :module_version, :client_version

    def initialize(module_version, client_version)
      @module_version = module_version
      @client_version = client_version
      mine = client_version.split(".").first(2).join(".")
      theirs = module_version.split(".").first(2).join(".")
      super("the redis-unique module loaded in this Redis server is version #{module_version}, " \
            "but this redis-unique gem (#{client_version}) was made for module #{mine}.x: install the gem " \
            "of the server's module (gem \"redis-unique\", \"~> #{theirs}.0\"), or load module #{mine}.x " \
            "into the server (docs/install.md, Upgrades)")
    end
  end

  # An error reply of the server (syntax, out of range, invalid expire time...).
  class CommandError < Error; end

  # The key holds a value of another type than uniq-lock.
  class WrongType < CommandError; end

  # The connection to Redis failed (refused, timed out, closed).
  class ConnectionError < Error; end

  # An option given to the client or in sidekiq_options is not valid.
  class InvalidOption < Error; end

  # Sidekiq is configured in a way the gem cannot work with (a Redis namespace).
  class ConfigurationError < Error; end

  # Raised by `on_conflict: :raise` when a job's lock is held by another job.
  class Conflict < Error
    attr_reader :item, :holders

    def initialize(item = nil, holders = [], msg = nil)
      @item = item
      @holders = holders
      super(msg || (item ? "#{item["class"]} (jid #{item["jid"]}) conflicts with the lock " \
                            "#{item["lock_digest"]} held by #{holders.empty? ? "(nobody now)" : holders.join(", ")}" : "lock conflict"))
    end
  end
end

module RedisUnique
  # A held lock was lost while its holder ran: a renewal was refused (another holder has
  # it, after a REAP or the end of the lease), or none was answered before the lease ended.
  # Raised at the release (the end of the block); `key` and `jid` name the hold.
  class LockLost < Error
    attr_reader :key, :jid

    def initialize(msg = nil, key: nil, jid: nil)
      @key = key
      @jid = jid
      super(msg || "lost the lock #{key}")
    end
  end
end
