-- The Lua lock that redis-unique replaces, from its published algorithm
-- (sidekiq-unique-jobs v9): one hash per lock, jid -> JSON metadata, and a
-- global sorted set of digests for the reaper.
--
-- KEYS[1] the lock's hash (uniquejobs:<digest>:LOCKED)
-- KEYS[2] the digests index (uniquejobs:digests)
-- ARGV    job_id, limit, metadata (JSON), score (now), digest, pttl
local locked, digests = KEYS[1], KEYS[2]
local job_id, limit, metadata = ARGV[1], tonumber(ARGV[2]), ARGV[3]
local score, digest, pttl = ARGV[4], ARGV[5], tonumber(ARGV[6])

-- Already locked by this job? Idempotent return.
if redis.call("HEXISTS", locked, job_id) == 1 then
  return job_id
end
-- At capacity? Deny.
if redis.call("HLEN", locked) >= limit then
  return nil
end
-- Acquire: store metadata, register in global index.
redis.call("HSET", locked, job_id, metadata)
redis.call("ZADD", digests, score, digest)
-- Apply TTL if configured.
if pttl and pttl > 0 then
  redis.call("PEXPIRE", locked, pttl)
end
return job_id
