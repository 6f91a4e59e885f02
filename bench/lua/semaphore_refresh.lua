-- redis-semaphore's refresh script: the holder's entry gets a new time of
-- acquiring, if it is still there.
--
-- KEYS[1] the semaphore's sorted set
-- ARGV    limit, identifier, lock timeout (ms), now (ms)
local key = KEYS[1]
local limit = tonumber(ARGV[1])
local identifier = ARGV[2]
local lockTimeout = tonumber(ARGV[3])
local now = tonumber(ARGV[4])
local expiredTimestamp = now - lockTimeout
redis.call('zremrangebyscore', key, '-inf', expiredTimestamp)
if redis.call('zscore', key, identifier) then
  redis.call('zadd', key, now, identifier)
  redis.call('pexpire', key, lockTimeout)
  return 1
else
  return 0
end
