# frozen_string_literal: true

# The Lua design of bench/lua/ called as sidekiq-unique-jobs v9 calls it: v9's digest and
# lock metadata, EVALSHA of lock.lua / unlock.lua on <digest>:LOCKED and uniquejobs:digests,
# and v9's per-event metrics write (LockMetrics.record: HINCRBY type|event, HINCRBY
# total|event, EXPIRE, pipelined) after each lock and unlock. For the benchmark only.
require "json"
require "digest/md5"

module V9Lua
  ROOT = File.expand_path("../../..", __dir__)
  LOCK = File.read(File.join(ROOT, "bench/lua/lock.lua"))
  UNLOCK = File.read(File.join(ROOT, "bench/lua/unlock.lua"))

  module_function

  def shas(conn)
    @shas ||= { lock: conn.call("SCRIPT", "LOAD", LOCK), unlock: conn.call("SCRIPT", "LOAD", UNLOCK) }
  end

  def metadata(item, type)
    JSON.generate("worker" => item["class"], "queue" => item["queue"], "limit" => 1, "timeout" => 0,
                  "ttl" => nil, "type" => type, "lock_args" => item["args"], "time" => Time.now.to_f,
                  "at" => item["at"])
  end

  def record(raw, event, type)
    key = "uniquejobs:metrics|#{Time.now.utc.strftime("%y%m%d|%-H:%M")}"
    raw.pipelined do |pipe|
      pipe.call("HINCRBY", key, "#{type}|#{event}", 1)
      pipe.call("HINCRBY", key, "total|#{event}", 1)
      pipe.call("EXPIRE", key, 8 * 3600)
    end
  end

  # raw: a redis-rb or redis-client connection (pipelined is used for metrics)
  def lock(raw, conn, item, digest, type = "until_executed", pttl = 0)
    res = conn.call("EVALSHA", shas(conn)[:lock], 2, "#{digest}:LOCKED", "uniquejobs:digests",
                    item["jid"], 1, metadata(item, type), Time.now.to_f, digest, pttl)
    record(raw, res ? "locked" : "lock_failed", type)
    res
  end

  def unlock(raw, conn, item, digest, type = "until_executed")
    res = conn.call("EVALSHA", shas(conn)[:unlock], 2, "#{digest}:LOCKED", "uniquejobs:digests", item["jid"], digest)
    record(raw, "unlocked", type) if res == 1
    res
  end

  def digest(item)
    h = { "class" => item["class"], "queue" => item["queue"], "lock_args" => item["args"] }
    "uniquejobs:#{Digest::MD5.hexdigest(JSON.generate(h.sort))}"
  end

  # Sidekiq middlewares of the Lua design (until_executed only), for the jobs/s figure.
  class Client
    def call(_klass, item, _queue, _pool = nil)
      return yield unless item["lock"].to_s == "until_executed"

      d = item["lock_digest"] = V9Lua.digest(item)
      Sidekiq.redis do |raw|
        return nil unless V9Lua.lock(raw, RedisUnique::Connection.new(raw), item, d)
      end
      yield
    end
  end

  class Server
    def call(_worker, item, _queue)
      return yield unless item["lock"].to_s == "until_executed"

      d = item["lock_digest"]
      Sidekiq.redis { |raw| V9Lua.lock(raw, RedisUnique::Connection.new(raw), item, d) }
      r = yield
      Sidekiq.redis { |raw| V9Lua.unlock(raw, RedisUnique::Connection.new(raw), item, d) }
      r
    end
  end
end
