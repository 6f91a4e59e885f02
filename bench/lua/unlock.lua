-- The Lua unlock that redis-unique replaces (sidekiq-unique-jobs v9):
-- HDEL the job, and when the hash is empty, ZREM the digest and UNLINK.
--
-- KEYS[1] the lock's hash, KEYS[2] the digests index
-- ARGV    job_id, digest
local locked, digests = KEYS[1], KEYS[2]
local job_id, digest = ARGV[1], ARGV[2]

if redis.call("HEXISTS", locked, job_id) == 0 then
  return 0
end
redis.call("HDEL", locked, job_id)
if redis.call("HLEN", locked) == 0 then
  redis.call("ZREM", digests, digest)
  redis.call("UNLINK", locked)
end
return 1
