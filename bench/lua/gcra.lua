-- A rate limiter as redis-cell's CL.THROTTLE decides it, in Lua: GCRA (the
-- generic cell rate algorithm), in its published form (one theoretical
-- arrival time per key, stored as a string with an expiry), as the Lua
-- scripts that stand in for the module where it cannot be loaded write it.
-- The benchmark runs it beside UNIQUE.LOCK ... RATE on the same server.
--
-- KEYS[1] the limiter's key
-- ARGV    burst, count, period (ms), cost
-- Returns 1 when allowed (and spends), 0 when limited.
local key = KEYS[1]
local burst, count = tonumber(ARGV[1]), tonumber(ARGV[2])
local period, cost = tonumber(ARGV[3]), tonumber(ARGV[4])

local interval = period / count
local time = redis.call("TIME")
local now = tonumber(time[1]) * 1000 + tonumber(time[2]) / 1000

local tat = tonumber(redis.call("GET", key)) or now
local new_tat = math.max(tat, now) + interval * cost
if new_tat - interval * (burst + 1) > now then
  return 0
end
redis.call("SET", key, string.format("%.3f", new_tat), "PX", math.ceil(new_tat - now))
return 1
