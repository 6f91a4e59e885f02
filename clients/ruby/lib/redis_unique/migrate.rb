# frozen_string_literal: true

require "json"

module RedisUnique
  # Moves sidekiq-unique-jobs v9's locks onto the module:
  #
  #   RedisUnique::Migrate.from_v9(Redis.new, prefix: "uniquejobs", dry_run: false)
  #   # => {"keys" => 12, "holders" => 13, "skipped" => 0, "dry_run" => false}
  #
  # It SCANs for v9's `<prefix>:<digest>:LOCKED` hashes (TYPE hash) and, for each
  # holder (jid => v9 JSON), runs UNIQUE.LOCK <prefix>:<digest> <jid> LIMIT 0 TYPE <v9 type>
  # [PXAT now + PTTL of the hash] META <the v9 JSON less type, ttl and time, with
  # "worker" named "class">, then deletes the hash and ZREMs the digest from
  # `<prefix>:digests`. A v9 while_executing lock (`<digest>:RUN:LOCKED`) becomes
  # `<digest>:RUN`, which is the key this gem uses for it.
  #
  # Idempotent and resumable: a migrated hash is deleted, a second run finds only what
  # is left, and LOCK of a jid that already holds is a renewal.
  module Migrate
    NATIVE = %w[type ttl time].freeze

    module_function

    def from_v9(redis, prefix: "uniquejobs", dry_run: false, count: 1000, logger: nil)
      conn = Connection.wrap(redis)
      client = Client.new(conn)
      stats = { "keys" => 0, "holders" => 0, "skipped" => 0, "dry_run" => dry_run }
      cursor = "0"
      loop do
        cursor, keys = conn.call("SCAN", cursor, "MATCH", "#{prefix}:*:LOCKED", "COUNT", count, "TYPE", "hash")
        keys.each { |key| migrate_key(conn, client, key, prefix, dry_run, stats, logger) }
        break if cursor.to_s == "0"
      end
      stats
    end

    def migrate_key(conn, client, key, prefix, dry_run, stats, logger)
      digest = key.delete_suffix(":LOCKED")
      raw = conn.call("HGETALL", key)
      holders = raw.is_a?(Hash) ? raw : Hash[*raw]
      pttl = conn.call("PTTL", key).to_i
      if holders.empty? || pttl == -2
        stats["skipped"] += 1
        return
      end
      now_ms = (Time.now.to_r * 1000).to_i
      parsed = holders.map do |jid, json|
        v9 = begin
          JSON.parse(json.to_s)
        rescue JSON::ParserError
          {}
        end
        [jid, v9.is_a?(Hash) ? v9 : {}]
      end
      # oldest v9 grant first, so that LOCKEDBY keeps v9's order of acquisition
      parsed.sort_by! { |_, v9| v9["time"].to_f }
      parsed.each do |jid, v9|
        type = v9["type"].to_s
        type = "lock" unless type.match?(/\A[A-Za-z0-9_:.-]{1,64}\z/)
        meta = v9.reject { |k, _| NATIVE.include?(k) }
        meta["class"] = meta.delete("worker") if meta.key?("worker")
        unless dry_run
          client.lock(digest, jid, limit: 0, type: type, meta: meta, pxat: pttl.positive? ? now_ms + pttl : nil)
        end
        stats["holders"] += 1
      end
      unless dry_run
        conn.call("DEL", key)
        conn.call("ZREM", "#{prefix}:digests", digest)
      end
      stats["keys"] += 1
      logger&.info("redis-unique migrate: #{key} -> #{digest} (#{holders.size} holder(s))#{dry_run ? " [dry run]" : ""}")
    end
  end
end
