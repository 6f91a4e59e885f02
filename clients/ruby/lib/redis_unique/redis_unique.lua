#!lua name=redis_unique
--
-- redis-unique as a Redis Functions library: the locks of docs/commands.md on
-- a server that cannot load the module (managed Redis and Valkey). Loaded with
-- `FUNCTION LOAD REPLACE`; the clients call it through FCALL when the module is
-- absent. What it keeps and what differs: docs/install.md.
--
-- A lock is a hash at the lock's key. Its fields:
--   ~t          the last fencing token granted on the key (always there: the marker that a hash is a lock)
--   ~r          the key's rate state: "n per burst tat_ms tat_rest"
--   ~s          the last waiter's sequence number
--   h:<jid>     a holder: cmsgpack {token, acquired_at, expires_at|-1, type, owner, meta, group, mode}
--   w:<seq>     a waiter: cmsgpack {jid, deadline|-1, seen, options...}
--   g:<seq>     a grant made to a waiter it has not taken yet: "token deadline"
--   ~c          the turns' clock while someone waits: "now stamps" (see `serve`)
--   c:<group>   a waiting group's start on that clock: "finish stamp" ("c:" for waiters of no group)
--   ~n          the number of h: fields
--   ~e          at most the earliest lease end among the holders (-1: no holder has a lease)
--   ~k          the number of holders with a GROUP or a MODE
--   ~q          the number of w: and g: fields
-- The last four let the common call (LOCK without GROUP, MODE, RATE or WAIT, and
-- UNLOCK, on a key where no lease has ended and no one waits) read only the
-- header and the caller's own field (`fast_lock`, `fast_unlock`), at a cost
-- that does not grow with the holders; any other call, or a key without them
-- (one written by an earlier version), reads the hash whole and writes them
-- back exact. The key's expiry is at least its latest lease end (a release on
-- the fast path leaves it as it is; the next whole read sets it exact).
-- Every function declares the lock key first, then its wake list (a list in the
-- lock's hash slot, `wake_key` below, that waiters block on with BLPOP), then,
-- on a server that is not a cluster, the counters' hash `unique:metrics`.

local VERSION = 3

local E_SYNTAX = 'ERR syntax error'
local E_NUMOPT = 'ERR syntax error: a number where an option name belongs (TTL ms? WAIT ms? LIMIT n?)'
local E_INT = 'ERR value is not an integer or out of range'
local E_EXPIRE = "ERR invalid expire time in 'unique.lock' command"
local E_WAIT = "ERR invalid wait time in 'unique.lock' command (WAIT takes a positive number of ms)"
local E_JID = 'ERR jid must be 1 to 1024 bytes'
local E_TYPE = 'ERR TYPE must be 1 to 64 characters of [A-Za-z0-9_:.-]'
local E_OWNER = 'ERR OWNER must be 1 to 1024 bytes'
local E_META = 'ERR META must be a JSON object'
local E_METABIG = 'ERR META is larger than unique.max-meta-bytes (16384)'
local E_RATE = 'ERR RATE n PER ms [BURST b] takes n from 1 to 1000000, ms from 1 to 1099511627776 and b from 0 to 1000000'
local E_RATEPER = 'ERR syntax error: RATE n needs PER ms, and PER and BURST need RATE (RATE n PER ms [BURST b])'
local E_GROUP = 'ERR GROUP must be 1 to 1024 bytes'
local E_NEEDGROUP = 'ERR syntax error: WEIGHT and GROUPLIMIT need GROUP name'
local E_MODE = 'ERR MODE must be shared or exclusive'
local E_REGROUP = 'ERR the jid already holds this lock for another GROUP (a renewal keeps its group)'
local E_CURSOR = 'ERR invalid cursor'
local E_WRONGTYPE = 'WRONGTYPE Operation against a key holding the wrong kind of value'
local E_WAKE = 'ERR redis_unique: the second key must be the lock\'s wake list (see wake_key in the library)'
local E_MINUTES = 'ERR MINUTES needs the redis-unique module: the Functions library keeps totals only'

local MAX_LIMIT = 2147483647
local MAX_RATE = 1000000
local MAX_PER = 1099511627776
local MAX_META = 16384
local I64_MAX = 9223372036854775807
-- WAIT beyond 2^40 ms waits with no deadline, as the module's.
local WAIT_FOREVER = 1099511627776
-- A waiter asks again at least this often, so one that went away (its client
-- disconnected) is forgotten STALE ms after it last asked.
local MAX_BLOCK = 30000
local STALE = 90000
local MAX_TYPES = 64

local function fail(msg)
    error({err = msg})
end

-- Redis's own integer rule (string2ll): no sign but '-', no leading zero, within i64.
local function toint(s)
    if s == '0' then return 0 end
    local neg = s:sub(1, 1) == '-'
    local d = neg and s:sub(2) or s
    if #d == 0 or #d > 19 or not d:match('^[1-9]%d*$') then return nil end
    if #d == 19 and d > (neg and '9223372036854775808' or '9223372036854775807') then return nil end
    local v = tonumber(d)
    if neg then v = -v end
    return v
end

local function int_arg(s)
    local v = toint(s)
    if v == nil then fail(E_INT) end
    return v
end

-- The call's clock, read once: unix ms, and the same instant in µs for the tokens' floor.
local now_us = 0

local function now_ms()
    local t = redis.call('TIME')
    now_us = tonumber(t[1]) * 1000000 + tonumber(t[2])
    return math.floor(now_us / 1000)
end

-- Cluster hash slots: the wake list must hash with the lock key.
local function crc16(s)
    local crc = 0
    for i = 1, #s do
        crc = bit.bxor(crc, bit.lshift(s:byte(i), 8))
        for _ = 1, 8 do
            if bit.band(crc, 0x8000) ~= 0 then
                crc = bit.band(bit.bxor(bit.lshift(crc, 1), 0x1021), 0xffff)
            else
                crc = bit.band(bit.lshift(crc, 1), 0xffff)
            end
        end
    end
    return crc
end

local function hash_tag(key)
    local s = key:find('{', 1, true)
    if not s then return nil end
    local e = key:find('}', s + 1, true)
    if not e or e == s + 1 then return nil end
    return key:sub(s + 1, e - 1)
end

local function slot(key)
    return crc16(hash_tag(key) or key) % 16384
end

-- The wake list of `key` is "{X}:unique:w:" .. key, where X is the key's own
-- hash tag, else the key itself (no '}' in it), else any tag of the same slot
-- (the clients search one); so it is in the lock's slot whatever the key.
local function check_wake(key, wake)
    local prefix_end = wake:find('}:unique:w:', 1, true)
    if wake:sub(1, 1) ~= '{' or not prefix_end then fail(E_WAKE) end
    local x = wake:sub(2, prefix_end - 1)
    if wake:sub(prefix_end + 11) ~= key then fail(E_WAKE) end
    local tag = hash_tag(key)
    if tag then
        if x ~= tag then fail(E_WAKE) end
    elseif #key > 0 and not key:find('}', 1, true) then
        if x ~= key then fail(E_WAKE) end
    elseif x:find('}', 1, true) or #x == 0 or crc16(x) % 16384 ~= slot(key) then
        fail(E_WAKE)
    end
end

local function check_type(name)
    if #name == 0 or #name > 64 or not name:match('^[A-Za-z0-9_:.-]+$') then fail(E_TYPE) end
    return name
end

local function meta_text(m)
    if #m > MAX_META then fail(E_METABIG) end
    if not m:match('^%s*{') then fail(E_META) end
    return m
end

local function meta_json(m)
    local ok, v = pcall(cjson.decode, m)
    if not ok or type(v) ~= 'table' then fail(E_META) end
end

-- LOCK's options after the jid, as the module parses them.
local function parse_lock(argv, from)
    local o = {}
    local rate, per, burst
    local function unknown(name)
        if toint(name) ~= nil then fail(E_NUMOPT) end
        fail(E_SYNTAX)
    end
    local i = from
    while i <= #argv do
        local name, value = argv[i], argv[i + 1]
        if value == nil then unknown(name) end
        local u = name:upper()
        if u == 'LIMIT' and o.limit == nil then
            local n = int_arg(value)
            if n < 0 or n > MAX_LIMIT then fail(E_INT) end
            o.limit = n
        elseif u == 'TTL' and o.ttl == nil and o.pxat == nil then
            o.ttl = int_arg(value)
        elseif u == 'PXAT' and o.ttl == nil and o.pxat == nil then
            o.pxat = int_arg(value)
        elseif u == 'TYPE' and o.type == nil then
            o.type = check_type(value)
        elseif u == 'OWNER' and o.owner == nil then
            if #value == 0 or #value > 1024 then fail(E_OWNER) end
            o.owner = value
        elseif u == 'META' and o.meta == nil then
            o.meta = meta_text(value)
        elseif u == 'RATE' and rate == nil then
            rate = int_arg(value)
        elseif u == 'PER' and per == nil then
            per = int_arg(value)
        elseif u == 'BURST' and burst == nil then
            burst = int_arg(value)
        elseif u == 'GROUP' and o.group == nil then
            if #value == 0 or #value > 1024 then fail(E_GROUP) end
            o.group = value
        elseif u == 'WEIGHT' and o.weight == nil then
            local w = int_arg(value)
            if w < 1 or w > 1000 then fail(E_INT) end
            o.weight = w
        elseif u == 'GROUPLIMIT' and o.grouplimit == nil then
            local m = int_arg(value)
            if m < 1 or m > MAX_LIMIT then fail(E_INT) end
            o.grouplimit = m
        elseif u == 'MODE' and o.mode == nil then
            local m = value:lower()
            if m ~= 'shared' and m ~= 'exclusive' then fail(E_MODE) end
            o.mode = m
        elseif u == 'WAIT' and o.wait == nil then
            local ms = int_arg(value)
            if ms <= 0 then fail(E_WAIT) end
            o.wait = ms
        else
            unknown(name)
        end
        i = i + 2
    end
    if rate ~= nil and per ~= nil then
        burst = burst or 0
        if rate < 1 or rate > MAX_RATE or per < 1 or per > MAX_PER or burst < 0 or burst > MAX_RATE then
            fail(E_RATE)
        end
        o.rate = {rate, per, burst}
    elseif rate ~= nil or per ~= nil or burst ~= nil then
        fail(E_RATEPER)
    end
    if o.group == nil and (o.weight ~= nil or o.grouplimit ~= nil) then fail(E_NEEDGROUP) end
    return o
end

-- The end of the lease a call asks for at `now`, or -1 for none.
local function lease_end(o, now)
    if o.ttl ~= nil then
        if o.ttl <= 0 or now + o.ttl >= I64_MAX then fail(E_EXPIRE) end
        return now + o.ttl
    elseif o.pxat ~= nil then
        if o.pxat <= now then fail(E_EXPIRE) end
        return o.pxat
    end
    return nil
end

---------------------------------------------------------------------------
-- The rate: GCRA, exact. The TAT is kept in units of 1/n ms as a pair
-- (ms, rest) with 0 <= rest < n, so no product leaves a double's 53 bits.

local function norm(q, r, n)
    local c = math.floor(r / n)
    return {q + c, r - c * n}
end

local function cmp(a, b)
    if a[1] ~= b[1] then return a[1] < b[1] and -1 or 1 end
    if a[2] ~= b[2] then return a[2] < b[2] and -1 or 1 end
    return 0
end

local function add(a, b, n) return norm(a[1] + b[1], a[2] + b[2], n) end
local function sub(a, b, n) return norm(a[1] - b[1], a[2] - b[2], n) end

-- `per` units (the emission interval) and `burst * per` units (the tolerance).
local function interval(l)
    local n, per = l[1], l[2]
    return norm(math.floor(per / n), per % n, n)
end

local function tolerance(l)
    local n, per, b = l[1], l[2], l[3]
    local pq, pr = math.floor(per / n), per % n
    local x = b * pr
    return norm(b * pq, x, n)
end

local function rate_load(text)
    if not text then return nil end
    local n, per, b, q, r = text:match('^(%d+) (%d+) (%d+) (%-?%d+) (%d+)$')
    return {limit = {tonumber(n), tonumber(per), tonumber(b)}, tat = {tonumber(q), tonumber(r)}}
end

local function rate_text(st)
    local l = st.limit
    return string.format('%d %d %d %d %d', l[1], l[2], l[3], st.tat[1], st.tat[2])
end

-- The same spending under another limit: the time kept, rounded up.
local function rate_under(st, l)
    if st == nil then return {limit = l, tat = {0, 0}} end
    if st.limit[1] == l[1] then return {limit = l, tat = st.tat} end
    local old, new = st.limit[1], l[1]
    local x = st.tat[2] * new
    local rest = math.floor(x / old) + ((x % old > 0) and 1 or 0)
    return {limit = l, tat = norm(st.tat[1], rest, new)}
end

local function ceil_ms(u)
    return u[1] + ((u[2] > 0) and 1 or 0)
end

-- nil when a grant is allowed at now, else the first ms it is.
local function rate_check(st, now)
    local n = st.limit[1]
    local nu = {now, 0}
    local tat = cmp(st.tat, nu) > 0 and st.tat or nu
    local tol = tolerance(st.limit)
    if cmp(sub(tat, nu, n), tol) <= 0 then return nil end
    return ceil_ms(sub(tat, tol, n))
end

local function rate_spend(st, now)
    local n = st.limit[1]
    local nu = {now, 0}
    local tat = cmp(st.tat, nu) > 0 and st.tat or nu
    st.tat = add(tat, interval(st.limit), n)
end

local function rate_remaining(st, now)
    local n = st.limit[1]
    local nu = {now, 0}
    local tat = cmp(st.tat, nu) > 0 and st.tat or nu
    local room = sub(tolerance(st.limit), sub(tat, nu, n), n)
    if room[1] < 0 then return 0 end
    -- floor(room / per) with room = q*n + r units
    local per = st.limit[2]
    local est = math.floor((room[1] * n + room[2]) / per)
    local function fits(k)
        local u = norm(k * math.floor(per / n), k * (per % n), n)
        return cmp(u, room) <= 0
    end
    while est > 0 and not fits(est) do est = est - 1 end
    while fits(est + 1) do est = est + 1 end
    return est + 1
end

local function rate_idle_at(st)
    return math.max(ceil_ms(st.tat), 0)
end

local function rate_idle(st, now)
    return cmp(st.tat, {now, 0}) <= 0
end

local function wpack(w)
    local o = w.o
    local rate = o.rate or false
    return cmsgpack.pack({w.jid, w.deadline, w.seen, o.limit or false, o.ttl or false, o.pxat or false,
        o.type or false, o.owner or false, o.meta or false, rate, o.group or false, o.weight or false,
        o.grouplimit or false, o.mode or false})
end

local function wunpack(v, seq)
    local a = cmsgpack.unpack(v)
    local function opt(x) if x == false then return nil end return x end
    return {jid = a[1], deadline = a[2], seen = a[3], seq = seq, weight = opt(a[12]),
        o = {limit = opt(a[4]), ttl = opt(a[5]), pxat = opt(a[6]), type = opt(a[7]), owner = opt(a[8]),
            meta = opt(a[9]), rate = opt(a[10]), group = opt(a[11]), weight = opt(a[12]),
            grouplimit = opt(a[13]), mode = opt(a[14])}}
end

---------------------------------------------------------------------------
-- The lock's state, read whole, changed in memory, written back field by field.

local function load(key)
    -- one call: HGETALL of a key of another type raises WRONGTYPE (the reply, through
    -- `guarded`), of none an empty list
    local flat = redis.call('HGETALL', key)
    if #flat == 0 then
        return {holders = {}, waiters = {}, grants = {}, token = 0, seq = 0, exists = false, dirty = {},
            starts = {}, clock = {0, 0}, hdr = {}}
    end
    local st = {holders = {}, waiters = {}, grants = {}, token = nil, seq = 0, exists = true, dirty = {},
        starts = {}, clock = {0, 0}, hdr = {}}
    for i = 1, #flat, 2 do
        local f, v = flat[i], flat[i + 1]
        local p = f:sub(1, 2)
        if p == 'h:' then
            local h = cmsgpack.unpack(v)
            h.jid = f:sub(3)
            st.holders[h.jid] = h
        elseif p == 'w:' then
            st.waiters[#st.waiters + 1] = wunpack(v, tonumber(f:sub(3)))
        elseif p == 'g:' then
            local tok, dl, jid = v:match('^(%d+) (%-?%d+) (.*)$')
            st.grants[f:sub(3)] = {tonumber(tok), tonumber(dl), jid}
        elseif f == '~t' then
            st.token = tonumber(v)
        elseif f == '~r' then
            st.rate = rate_load(v)
        elseif f == '~s' then
            st.seq = tonumber(v)
        elseif p == 'c:' then
            local fin, stamp = v:match('^(%-?%d+) (%d+)$')
            st.starts[f:sub(3)] = {tonumber(fin), tonumber(stamp)}
        elseif f == '~c' then
            local at, stamps = v:match('^(%-?%d+) (%d+)$')
            st.clock = {tonumber(at), tonumber(stamps)}
        elseif f == '~n' or f == '~e' or f == '~k' or f == '~q' then
            st.hdr[f] = v
        end
    end
    if st.token == nil then fail(E_WRONGTYPE) end
    st.had_waiters = #st.waiters > 0 or next(st.grants) ~= nil
    table.sort(st.waiters, function(a, b) return a.seq < b.seq end)
    return st
end

-- Holder record: positional, so cmsgpack keeps it small.
local function hpack(h)
    return cmsgpack.pack({h[1], h[2], h[3], h[4], h[5] or false, h[6] or false, h[7] or false, h[8] or false})
end

local function live(h, now)
    return h[3] == -1 or now < h[3]
end

---------------------------------------------------------------------------
-- Counters (only where the caller declared the counters' hash).

local Metrics = {}
Metrics.__index = Metrics

local EVENTS = {'acquired', 'renewed', 'denied', 'released', 'unlock_missed', 'expired', 'reaped', 'waited',
                'timed_out', 'rate_denied'}

local function metrics(mkey)
    return setmetatable({key = mkey, add = {}, order = {}}, Metrics)
end

-- One field an event: "event|type" where the event has a type (every one but
-- unlock_missed), else "event|"; the totals and the holders gauge are summed
-- from them when read (METRICS), so a call writes one field an event it had.
function Metrics:count(lock_type, event, n)
    if not self.key then return end
    n = n or 1
    local f = event .. '|' .. (lock_type or '')
    local add = self.add
    if add[f] == nil then
        self.order[#self.order + 1] = f
        add[f] = n
    else
        add[f] = add[f] + n
    end
end

-- The gauge of lock keys (the holders are summed from the events).
function Metrics:gauge(name, n)
    if n ~= 0 then self:count(nil, name, n) end
end

function Metrics:flush()
    local key = self.key
    if not key then return end
    for _, f in ipairs(self.order) do
        local n = self.add[f]
        if n ~= 0 then
            local field = f:sub(1, 1) == '~' and f:sub(1, -2) or f
            local v = redis.call('HINCRBY', key, field, n)
            local ev, ty
            if v == n then ev, ty = f:match('^([^|]*)|(.+)$') end
            -- A field just made: the type's first of this event. At most MAX_TYPES type
            -- names; the rest count under `other`.
            if ty and ty ~= 'other' and redis.call('HSETNX', key, 'type|' .. ty, '1') == 1 then
                if redis.call('HINCRBY', key, '~types', 1) > MAX_TYPES then
                    redis.call('HDEL', key, 'type|' .. ty, f)
                    redis.call('HINCRBY', key, '~types', -1)
                    redis.call('HSETNX', key, 'type|other', '1')
                    redis.call('HINCRBY', key, ev .. '|other', n)
                end
            end
        end
    end
end

---------------------------------------------------------------------------
-- Deciding a LOCK.

local function counts(st, now)
    local n, groups, excl, shared = 0, {}, 0, 0
    for _, h in pairs(st.holders) do
        if live(h, now) then
            n = n + 1
            local g = h[7] or ''
            groups[g] = (groups[g] or 0) + 1
            if h[8] == 'exclusive' then excl = excl + 1 else shared = shared + 1 end
        end
    end
    return {n = n, groups = groups, excl = excl}
end

local function next_lease_end(st, now)
    local e
    for _, h in pairs(st.holders) do
        if h[3] ~= -1 and h[3] > now and (e == nil or h[3] < e) then e = h[3] end
    end
    return e
end

local function prune(st, now, m)
    local gone = 0
    for jid, h in pairs(st.holders) do
        if not live(h, now) then
            st.holders[jid] = nil
            st.dirty['h:' .. jid] = false
            m:count(h[4], 'expired')
            gone = gone + 1
        end
    end
    return gone
end

-- The module's rule: above the key's last token and at least the clock in µs (so a
-- key deleted and taken again, its last token gone with it, still rises: a later
-- call reads a later µs).
local function new_token(st, now)
    local t = math.max((st.token or 0) + 1, now_us, now * 1000)
    st.token = t
    st.dirty['~t'] = string.format('%d', t)
    return t
end

local function waiter_live(w, now)
    return (w.deadline == -1 or w.deadline > now) and now <= w.seen + STALE
end

-- Whether a new call must queue behind the waiters: some waiter could be
-- served before it (all but those held only by their own GROUPLIMIT).
local function held_back(st, now, c)
    for _, w in ipairs(st.waiters) do
        if waiter_live(w, now) then
            local o = w.o
            if not (o.grouplimit and (c.groups[o.group or ''] or 0) >= o.grouplimit and o.mode ~= 'exclusive') then
                return true
            end
        end
    end
    return false
end

-- One LOCK of `jid` with options `o`. Returns 'granted', token | 'denied',
-- info | raises. `ahead` says whether waiters come first.
local function try_lock(st, jid, o, now, m, ahead)
    local exp = lease_end(o, now)
    local h = st.holders[jid]
    if h and not live(h, now) then h = nil end
    if o.meta and not (h and h[6] == o.meta) then meta_json(o.meta) end
    local c = counts(st, now)
    if h then
        if o.group and o.group ~= h[7] then fail(E_REGROUP) end
        if o.mode == 'exclusive' and h[8] ~= 'exclusive' then
            if c.n > 1 then
                return 'denied', {holds = true}
            end
            h[8] = 'exclusive'
        elseif o.mode == 'shared' and h[8] == 'exclusive' then
            h[8] = 'shared'
            st.freed = true
        elseif o.mode then
            h[8] = o.mode
        end
        if exp then h[3] = exp end
        if o.type then h[4] = o.type end
        if o.owner then h[5] = o.owner end
        if o.meta then h[6] = o.meta end
        st.dirty['h:' .. jid] = h
        m:count(h[4], 'renewed')
        return 'granted', h[1]
    end
    local limit = o.limit or 1
    local full = (limit ~= 0 and c.n >= limit)
        or (o.grouplimit and (c.groups[o.group or ''] or 0) >= o.grouplimit)
        or c.excl > 0
        or (o.mode == 'exclusive' and c.n > 0)
        or (ahead and held_back(st, now, c))
    if full then
        return 'denied', {lease_end = next_lease_end(st, now)}
    end
    local rs
    if o.rate then
        rs = rate_under(st.rate, o.rate)
        local at = rate_check(rs, now)
        if at then
            return 'denied', {rate_at = at, lease_end = next_lease_end(st, now)}
        end
        rate_spend(rs, now)
        st.rate = rs
        st.dirty['~r'] = rate_text(rs)
    end
    local tok = new_token(st, now)
    local nh = {tok, now, exp or -1, o.type or 'lock', o.owner, o.meta, o.group, o.mode}
    nh.jid = jid
    st.holders[jid] = nh
    st.dirty['h:' .. jid] = nh
    m:count(nh[4], 'acquired')
    return 'granted', tok
end

local function drop_waiter(st, w)
    for i, x in ipairs(st.waiters) do
        if x.seq == w.seq then
            table.remove(st.waiters, i)
            break
        end
    end
    st.dirty['w:' .. w.seq] = false
end

---------------------------------------------------------------------------
-- The turns of a key's waiting groups: the module's virtual clock
-- (self-clocked fair queuing, docs/commands.md "Turns among groups that hold
-- alike"). Each waiting group has a start on the key's clock (`c:<group>`);
-- its next grant's finish tag is that start plus TURN / weight. A grant
-- moves the group's start to that tag and the clock (`~c`) to it if later. A
-- group that starts waiting starts at the clock (no credit banked, no debt);
-- a group's start goes with its last waiter and the clock with the key's
-- last waiter. Equal tags go to the one given first (a stamp counted on with
-- each tag given).

-- One turn: a multiple of every weight up to 16 (lcm 1..16 = 720,720) and
-- of 4096, as the module's (720,720 << 40) is, so the common weights' turns
-- add up exactly and compare as the module's. Tags are kept below 2^51
-- (exact in a double) by moving every start and the clock back together.
local TURN = 720720 * 4096
local REBASE = 2 ^ 51

local function turn_of(weight)
    return math.floor(TURN / math.max(weight or 1, 1))
end

local function group_of(w)
    return w.o.group or ''
end

-- A group that starts waiting joins at the current turn.
local function join_turns(st, g)
    if st.starts[g] then return end
    local c = st.clock
    c[2] = c[2] + 1
    st.starts[g] = {c[1], c[2]}
    st.dirty['c:' .. g] = true
    st.dirty['~c'] = true
end

local function granted_turn(st, g, weight)
    local start = st.starts[g]
    if not start then return end
    local c = st.clock
    local finish = start[1] + turn_of(weight)
    if finish > c[1] then c[1] = finish end
    c[2] = c[2] + 1
    st.starts[g] = {finish, c[2]}
    st.dirty['c:' .. g] = true
    st.dirty['~c'] = true
    if c[1] >= REBASE then
        local base = c[1]
        for h, x in pairs(st.starts) do
            x[1] = x[1] - base
            st.dirty['c:' .. h] = true
        end
        c[1] = 0
    end
end

-- Whether candidate `a` goes before `b`: the smaller share (held / weight,
-- compared in integers), then the earlier finish tag, then the tag given
-- first, then the older waiter.
local function goes_before(a, b)
    local x, y = a.held * b.weight, b.held * a.weight
    if x ~= y then return x < y end
    if a.finish ~= b.finish then return a.finish < b.finish end
    if a.stamp ~= b.stamp then return a.stamp < b.stamp end
    return a.seq < b.seq
end

-- Serves the waiters that fit, in the module's order: per group the first
-- waiter that fits, the group holding least for its weight first, then the
-- group whose turn comes first (above), then the oldest waiter; never past a
-- waiting writer. Each grant is a hold made here and a wake-up pushed on the
-- wake list.
local function serve(st, now, m, wake)
    local served = 0
    if #st.waiters == 0 then return served end
    while true do
        -- waiters gone (their client stopped asking) are forgotten
        local i = 1
        while i <= #st.waiters do
            local w = st.waiters[i]
            if now > w.seen + STALE then
                st.dirty['w:' .. w.seq] = false
                table.remove(st.waiters, i)
            else
                i = i + 1
            end
        end
        local c = counts(st, now)
        local writer_seq, head
        for _, w in ipairs(st.waiters) do
            if waiter_live(w, now) then
                head = head or w.seq
                if w.o.mode == 'exclusive' and writer_seq == nil then writer_seq = w.seq end
            end
        end
        local best, best_turn
        local tried = {}
        for _, w in ipairs(st.waiters) do
            local g = w.o.group or ''
            if waiter_live(w, now) and not tried[g] and not (writer_seq and w.seq > writer_seq)
                and not (w.o.mode == 'exclusive' and w.seq ~= head) then
                -- would it fit? (decided on a copy: nothing changes unless chosen)
                local o = w.o
                local limit = o.limit or 1
                local h = st.holders[w.jid]
                local fits
                if h and live(h, now) then
                    fits = not (o.mode == 'exclusive' and h[8] ~= 'exclusive' and c.n > 1)
                else
                    fits = not ((limit ~= 0 and c.n >= limit)
                        or (o.grouplimit and (c.groups[g] or 0) >= o.grouplimit)
                        or c.excl > 0
                        or (o.mode == 'exclusive' and c.n > 0))
                    if fits and o.rate then
                        fits = rate_check(rate_under(st.rate, o.rate), now) == nil
                    end
                end
                if fits then
                    tried[g] = true
                    join_turns(st, g)
                    local start = st.starts[g]
                    local weight = w.weight or 1
                    local turn = {held = c.groups[g] or 0, weight = weight, finish = start[1] + turn_of(weight),
                        stamp = start[2], seq = w.seq}
                    if best == nil or goes_before(turn, best_turn) then
                        best, best_turn = w, turn
                    end
                end
            end
        end
        if best == nil then break end
        local ok, res, tok = pcall(try_lock, st, best.jid, best.o, now, m, false)
        drop_waiter(st, best)
        if ok and res == 'granted' then
            granted_turn(st, group_of(best), best.weight)
            m:count(best.o.type or 'lock', 'waited')
            st.grants[tostring(best.seq)] = {tok, best.deadline, best.jid}
            st.dirty['g:' .. best.seq] = string.format('%d %d %s', tok, best.deadline, best.jid)
            redis.call('RPUSH', wake, best.seq .. ':0')
            served = served + 1
        end
    end
    if served > 0 then redis.call('PEXPIRE', wake, STALE + MAX_BLOCK) end
    return served
end

-- Writes back what changed, and sets the key's expiry from its holders, its
-- rate and its waiters; deletes a key left with nothing.
local function store(key, st, now, m, wake)
    local nholders, latest, forever, earliest, kinds = 0, 0, false, -1, 0
    for _, h in pairs(st.holders) do
        nholders = nholders + 1
        if h[3] == -1 then
            forever = true
        else
            if h[3] > latest then latest = h[3] end
            if earliest == -1 or h[3] < earliest then earliest = h[3] end
        end
        if h[7] or h[8] then kinds = kinds + 1 end
    end
    local ngrants = 0
    for s, g in pairs(st.grants) do
        ngrants = ngrants + 1
    end
    local hdr = {['~n'] = tostring(nholders), ['~e'] = string.format('%d', earliest), ['~k'] = tostring(kinds),
        ['~q'] = tostring(#st.waiters + ngrants)}
    local rate_busy = st.rate and not rate_idle(st.rate, now)
    -- the turns are kept only while groups wait: a group's start goes with its
    -- last waiter, the clock with the key's last
    local waiting, anyone = {}, false
    for _, w in ipairs(st.waiters) do
        if waiter_live(w, now) then
            waiting[group_of(w)] = true
            anyone = true
        end
    end
    for g in pairs(st.starts) do
        if not waiting[g] then
            st.starts[g] = nil
            st.dirty['c:' .. g] = false
        end
    end
    if not anyone then
        if st.clock[2] > 0 then st.dirty['~c'] = false end
        st.clock = {0, 0}
    end
    if nholders == 0 and #st.waiters == 0 and ngrants == 0 and not rate_busy then
        if st.exists then
            m:gauge('~locks', -1)
            redis.call('DEL', key)
        end
        if st.had_waiters then redis.call('DEL', wake) end
        return
    end
    for f, v in pairs(hdr) do
        if st.hdr[f] ~= v then st.dirty[f] = v end
    end
    if st.exists and next(st.dirty) == nil then return end
    if not st.exists then
        m:gauge('~locks', 1)
        st.dirty['~t'] = string.format('%d', st.token or 0)
    end
    local set, del = {}, {}
    for f, v in pairs(st.dirty) do
        if v == false then
            del[#del + 1] = f
        elseif v == true then
            -- the turns, written as they stand
            local x = f == '~c' and st.clock or st.starts[f:sub(3)]
            if x then
                set[#set + 1] = f
                set[#set + 1] = string.format('%d %d', x[1], x[2])
            end
        elseif type(v) == 'table' then
            set[#set + 1] = f
            set[#set + 1] = hpack(v)
        else
            set[#set + 1] = f
            set[#set + 1] = v
        end
    end
    if #del > 0 then redis.call('HDEL', key, unpack(del)) end
    if #set > 0 then redis.call('HSET', key, unpack(set)) end
    -- expiry: the latest lease, never before the rate is idle nor before a
    -- waiter's time (a waiter with no deadline, or a holder without a lease: none)
    for _, w in ipairs(st.waiters) do
        if w.deadline == -1 then forever = true end
        latest = math.max(latest, w.deadline, w.seen + STALE)
    end
    for _, g in pairs(st.grants) do
        latest = math.max(latest, now + STALE)
    end
    if rate_busy then latest = math.max(latest, rate_idle_at(st.rate)) end
    if forever then
        redis.call('PERSIST', key)
    else
        redis.call('PEXPIREAT', key, latest)
    end
    if st.had_waiters and #st.waiters == 0 and ngrants == 0 then redis.call('DEL', wake) end
end

local function keys_of(keys)
    local key, wake = keys[1], keys[2]
    if not wake then fail(E_WAKE) end
    check_wake(key, wake)
    return key, wake, metrics(keys[3])
end

-- How long a waiter may block before it asks again: until its deadline, the
-- earliest lease end, the rate's next instant, at most MAX_BLOCK.
local function block_for(st, now, w, info)
    local b = MAX_BLOCK
    if w.deadline ~= -1 then b = math.min(b, w.deadline - now) end
    local e = next_lease_end(st, now)
    if e then b = math.min(b, e - now) end
    if info and info.rate_at then b = math.min(b, info.rate_at - now) end
    if st.rate then
        local at = nil
        for _, x in ipairs(st.waiters) do
            if x.o.rate then at = rate_check(rate_under(st.rate, x.o.rate), now) break end
        end
        if at then b = math.min(b, at - now) end
    end
    return math.max(b, 1)
end

---------------------------------------------------------------------------
-- The fast paths: a call that needs only the key's header and the caller's
-- own holder (see the layout above). Each returns true and the reply when it
-- decided the call, else nothing (before any write): the whole read decides.

-- Whether the header read says the fast path may decide: the key has the
-- header, no one waits, no rate is kept, no lease has ended.
local function fast_header(v, now)
    if not v[2] or v[4] ~= '0' or v[5] ~= '0' or v[6] then return false end
    local e = tonumber(v[3])
    return e ~= nil and (e == -1 or now < e)
end

local function fast_lock(key, jid, o, now, m)
    if o.group or o.mode or o.wait or o.rate then return end
    local exp = lease_end(o, now)
    local v = redis.call('HMGET', key, '~t', '~n', '~e', '~k', '~q', '~r', 'h:' .. jid)
    local n, e
    if not v[1] then
        -- no key, else a hash that is not a lock (the whole read raises WRONGTYPE)
        if redis.call('EXISTS', key) == 1 then return end
        n, e = 0, -1
    elseif not fast_header(v, now) then
        return
    else
        n, e = tonumber(v[2]), tonumber(v[3])
    end
    -- every holder's lease is live here (now is before the earliest)
    local h = v[7] and cmsgpack.unpack(v[7])
    if o.meta and not (h and h[6] == o.meta) then meta_json(o.meta) end
    if h then
        -- a renewal that keeps or extends the lease; one that shortens it, or gives a
        -- lease to a holder without one, moves the key's expiry back: the whole read
        if exp and (h[3] == -1 or exp < h[3]) then return end
        if exp then h[3] = exp end
        if o.type then h[4] = o.type end
        if o.owner then h[5] = o.owner end
        if o.meta then h[6] = o.meta end
        redis.call('HSET', key, 'h:' .. jid, hpack(h))
        if exp then redis.call('PEXPIREAT', key, exp, 'GT') end
        m:count(h[4], 'renewed')
        return true, h[1]
    end
    local limit = o.limit or 1
    if limit ~= 0 and n >= limit then
        m:count(o.type or 'lock', 'denied')
        return true, false
    end
    local tok = math.max((v[1] and tonumber(v[1]) or 0) + 1, now_us, now * 1000)
    local nh = {tok, now, exp or -1, o.type or 'lock', o.owner, o.meta}
    local t = string.format('%d', tok)
    if not v[1] then
        redis.call('HSET', key, 'h:' .. jid, hpack(nh), '~t', t, '~n', '1', '~e', string.format('%d', exp or -1),
            '~k', '0', '~q', '0')
        if exp then redis.call('PEXPIREAT', key, exp) end
        m:count(nh[4], 'acquired')
        m:gauge('~locks', 1)
        return true, tok
    end
    if exp and (e == -1 or exp < e) then
        redis.call('HSET', key, 'h:' .. jid, hpack(nh), '~t', t, '~n', tostring(n + 1), '~e', string.format('%d', exp))
    else
        redis.call('HSET', key, 'h:' .. jid, hpack(nh), '~t', t, '~n', tostring(n + 1))
    end
    if exp then
        redis.call('PEXPIREAT', key, exp, 'GT')
    else
        redis.call('PERSIST', key)
    end
    m:count(nh[4], 'acquired')
    return true, tok
end

local function fast_unlock(key, jid, token, now, m)
    local v = redis.call('HMGET', key, '~t', '~n', '~e', '~k', '~q', '~r', 'h:' .. jid)
    if not v[1] or not fast_header(v, now) then return end
    local h = v[7] and cmsgpack.unpack(v[7])
    if not h or (token ~= nil and h[1] ~= token) then
        m:count(nil, 'unlock_missed')
        return true, 0
    end
    local n = tonumber(v[2])
    if n <= 1 then
        m:count(h[4], 'released')
        m:gauge('~locks', -1)
        redis.call('DEL', key)
        return true, 1
    end
    -- the key's expiry follows the holders without a lease: the whole read sets it
    if h[3] == -1 then return end
    redis.call('HDEL', key, 'h:' .. jid)
    if h[7] or h[8] then
        redis.call('HSET', key, '~n', tostring(n - 1), '~k', tostring(tonumber(v[4]) - 1))
    else
        redis.call('HSET', key, '~n', tostring(n - 1))
    end
    m:count(h[4], 'released')
    return true, 1
end

---------------------------------------------------------------------------
-- The functions.

local function f_lock(keys, argv)
    local key, wake, m = keys_of(keys)
    local jid = argv[1]
    if jid == nil then return redis.error_reply("ERR wrong number of arguments for 'unique.lock' command") end
    if #jid == 0 or #jid > 1024 then fail(E_JID) end
    local o = parse_lock(argv, 2)
    local now = now_ms()
    lease_end(o, now)
    local done, fast = fast_lock(key, jid, o, now, m)
    if done then
        m:flush()
        return fast
    end
    local st = load(key)
    prune(st, now, m)
    serve(st, now, m, wake)
    local res, info = try_lock(st, jid, o, now, m, true)
    if st.freed then serve(st, now, m, wake) end
    local reply
    if res == 'granted' then
        reply = info
    elseif o.wait and not info.holds then
        local seq = st.seq + 1
        st.seq = seq
        st.dirty['~s'] = tostring(seq)
        local ms = o.wait
        if o.pxat then ms = math.max(1, math.min(ms, o.pxat - now)) end
        local w = {jid = jid, seq = seq, deadline = (o.wait > WAIT_FOREVER) and -1 or now + ms, seen = now, o = o,
            weight = o.weight}
        join_turns(st, o.group or '')
        st.waiters[#st.waiters + 1] = w
        st.dirty['w:' .. seq] = wpack(w)
        if not st.token then st.token = 0 end
        reply = {seq, block_for(st, now, w, info)}
    else
        m:count(o.type or 'lock', 'denied')
        if info.rate_at and not info.holds then m:count(o.type or 'lock', 'rate_denied') end
        reply = false
    end
    store(key, st, now, m, wake)
    m:flush()
    return reply
end

-- A waiter asks again (after its BLPOP woke or timed out): its token when it
-- was granted, nil when its time ran out (taking a grant that raced it), else
-- [seq, ms] to block again.
local function f_wait(keys, argv)
    local key, wake, m = keys_of(keys)
    local seq = argv[1]
    local giving_up = argv[2] and argv[2]:upper() == 'CANCEL'
    -- the wake-up the waiter popped, "seq:hops": another waiter's grant is passed on to
    -- the next blocked waiter (BLPOP serves the longest blocked first, not always the one granted)
    local popped_seq, hops
    if argv[2] and not giving_up then popped_seq, hops = argv[2]:match('^(%d+):(%d+)$') end
    local now = now_ms()
    local st = load(key)
    prune(st, now, m)
    serve(st, now, m, wake)
    if popped_seq and popped_seq ~= seq and st.grants[popped_seq] and tonumber(hops) < #st.waiters + 2 then
        redis.call('RPUSH', wake, popped_seq .. ':' .. (tonumber(hops) + 1))
        redis.call('PEXPIRE', wake, STALE + MAX_BLOCK)
    end
    local reply
    local g = st.grants[seq]
    if g then
        st.grants[seq] = nil
        st.dirty['g:' .. seq] = false
        reply = g[1]
    else
        local w
        for _, x in ipairs(st.waiters) do
            if tostring(x.seq) == seq then w = x end
        end
        if w == nil then
            reply = false
        elseif giving_up or (w.deadline ~= -1 and now >= w.deadline) then
            drop_waiter(st, w)
            if not giving_up then m:count(w.o.type or 'lock', 'timed_out') end
            reply = false
            serve(st, now, m, wake)
        else
            w.seen = now
            st.dirty['w:' .. w.seq] = wpack(w)
            reply = {w.seq, block_for(st, now, w, nil)}
        end
    end
    -- grants no waiter took in time (its client went away) are forgotten; the hold stays to its lease
    for s, x in pairs(st.grants) do
        if x[2] ~= -1 and now > x[2] + STALE then
            st.grants[s] = nil
            st.dirty['g:' .. s] = false
        end
    end
    store(key, st, now, m, wake)
    m:flush()
    return reply
end

local function f_unlock(keys, argv)
    local key, wake, m = keys_of(keys)
    local jid = argv[1]
    if jid == nil then return redis.error_reply("ERR wrong number of arguments for 'unique.unlock' command") end
    local token
    if #argv > 1 then
        if #argv ~= 3 or argv[2]:upper() ~= 'TOKEN' then fail(E_SYNTAX) end
        token = int_arg(argv[3])
    end
    local now = now_ms()
    local done, fast = fast_unlock(key, jid, token, now, m)
    if done then
        m:flush()
        return fast
    end
    local st = load(key)
    prune(st, now, m)
    local h = st.holders[jid]
    local reply = 0
    if h and (token == nil or h[1] == token) then
        st.holders[jid] = nil
        st.dirty['h:' .. jid] = false
        m:count(h[4], 'released')
        reply = 1
    else
        m:count(nil, 'unlock_missed')
    end
    serve(st, now, m, wake)
    if st.exists or reply == 1 then store(key, st, now, m, wake) end
    m:flush()
    return reply
end

local FIELDS = {'jid', 'token', 'acquired_at', 'expires_at', 'ttl', 'type', 'owner', 'meta', 'group', 'mode'}

local function holder_reply(h, now)
    local v = {h.jid, h[1], h[2], h[3], h[3] == -1 and -1 or h[3] - now, h[4], h[5] or false, h[6] or false,
        h[7] or false, h[8] or false}
    local out = {}
    for i, f in ipairs(FIELDS) do
        out[#out + 1] = f
        out[#out + 1] = v[i]
    end
    return out
end

local function f_lockedby(keys, argv)
    local key = keys[1]
    local withmeta, cursor, count = false, nil, nil
    local i = 1
    while i <= #argv do
        local u = argv[i]:upper()
        if u == 'WITHMETA' and not withmeta then
            withmeta = true
            i = i + 1
        elseif u == 'CURSOR' and cursor == nil and argv[i + 1] then
            cursor = argv[i + 1]
            i = i + 2
        elseif u == 'COUNT' and count == nil and argv[i + 1] then
            count = int_arg(argv[i + 1])
            i = i + 2
        else
            fail(E_SYNTAX)
        end
    end
    if count ~= nil and cursor == nil then fail(E_SYNTAX) end
    if count ~= nil and count < 1 then fail(E_INT) end
    if cursor ~= nil and not cursor:match('^%d+$') then fail(E_CURSOR) end
    local now = now_ms()
    local t = redis.call('TYPE', key)
    t = type(t) == 'table' and t.ok or t
    if t ~= 'none' and t ~= 'hash' then fail(E_WRONGTYPE) end
    local hs = {}
    local next_cursor = '0'
    if cursor ~= nil then
        if t == 'hash' then
            -- HSCAN's COUNT counts the table's buckets, not its holders (the header's
            -- fields and the waiters share them): scanned on until the page has `count`
            -- live holders or the walk ends, so a key of fewer holders ends in one page
            local want = count or 100
            next_cursor = cursor
            repeat
                local r = redis.call('HSCAN', key, next_cursor, 'MATCH', 'h:*', 'COUNT', want)
                next_cursor = r[1]
                for j = 1, #r[2], 2 do
                    local h = cmsgpack.unpack(r[2][j + 1])
                    h.jid = r[2][j]:sub(3)
                    if live(h, now) then hs[#hs + 1] = h end
                end
            until next_cursor == '0' or #hs >= want
        end
    elseif t == 'hash' then
        local st = load(key)
        for _, h in pairs(st.holders) do
            if live(h, now) then hs[#hs + 1] = h end
        end
        table.sort(hs, function(a, b) return a[1] < b[1] end)
    end
    local out = {}
    for _, h in ipairs(hs) do
        out[#out + 1] = withmeta and holder_reply(h, now) or h.jid
    end
    if cursor ~= nil then return {next_cursor, out} end
    return out
end

local function f_rate(keys, argv)
    local key = keys[1]
    if #argv > 0 then return redis.error_reply("ERR wrong number of arguments for 'unique.rate' command") end
    local now = now_ms()
    local t = redis.call('TYPE', key)
    t = type(t) == 'table' and t.ok or t
    if t == 'none' then return false end
    if t ~= 'hash' then fail(E_WRONGTYPE) end
    if redis.call('HEXISTS', key, '~t') == 0 then fail(E_WRONGTYPE) end
    local v = redis.call('HGET', key, '~r')
    local st = rate_load(v)
    if not st then return false end
    local at = rate_check(st, now) or now
    return {'limit', st.limit[1], 'per', st.limit[2], 'burst', st.limit[3], 'remaining', rate_remaining(st, now),
        'allowed_at', at, 'idle_at', rate_idle_at(st)}
end

local function f_waiters(keys, argv)
    local key = keys[1]
    local groups = false
    if #argv == 1 and argv[1]:upper() == 'GROUPS' then
        groups = true
    elseif #argv > 0 then
        fail(E_SYNTAX)
    end
    local now = now_ms()
    local st = load(key)
    local n, per = 0, {}
    local order = {}
    local function entry(g)
        local k = g or ''
        if not per[k] then
            per[k] = {g or false, 0, 0}
            order[#order + 1] = k
        end
        return per[k]
    end
    for _, w in ipairs(st.waiters) do
        if waiter_live(w, now) then
            n = n + 1
            local e = entry(w.o.group)
            e[2] = e[2] + 1
        end
    end
    if not groups then return n end
    for _, h in pairs(st.holders) do
        if live(h, now) then
            local e = entry(h[7])
            e[3] = e[3] + 1
        end
    end
    table.sort(order)
    local out = {}
    for _, k in ipairs(order) do
        local e = per[k]
        out[#out + 1] = {'group', e[1], 'waiting', e[2], 'holding', e[3]}
    end
    return out
end

-- REAP on one key (the clients walk the keyspace with SCAN ... TYPE hash and
-- call this on each key, as the module's REAP walks it): removes the ended
-- leases and, with an owner, that owner's holders. Returns how many went; 0
-- for a key that is not a lock.
local function f_reapkey(keys, argv)
    local key, wake, m = keys_of(keys)
    local owner = argv[1]
    if owner == '' then owner = nil end
    local now = now_ms()
    local t = redis.call('TYPE', key)
    t = type(t) == 'table' and t.ok or t
    if t ~= 'hash' or redis.call('HEXISTS', key, '~t') == 0 then return 0 end
    local st = load(key)
    local gone = prune(st, now, m)
    if owner then
        for jid, h in pairs(st.holders) do
            if h[5] == owner then
                st.holders[jid] = nil
                st.dirty['h:' .. jid] = false
                m:count(h[4], 'reaped')
                gone = gone + 1
            end
        end
    end
    if gone > 0 then
        serve(st, now, m, wake)
        store(key, st, now, m, wake)
    end
    m:flush()
    return gone
end

local function f_metrics(keys, argv)
    local mkey = keys[1]
    local format = 'resp'
    local i = 1
    local seen = {}
    if #argv == 1 and argv[1]:upper() == 'RESET' then
        if mkey then redis.call('DEL', mkey) end
        return {ok = 'OK'}
    end
    while i <= #argv do
        local u = argv[i]:upper()
        local v = argv[i + 1]
        if v == nil or seen[u] then fail(E_SYNTAX) end
        seen[u] = true
        if u == 'MINUTES' then
            local n = int_arg(v)
            if n < 1 or n > 60 then fail('ERR MINUTES must be 1 to 60 (unique.metrics-minutes)') end
            fail(E_MINUTES)
        elseif u == 'FORMAT' then
            format = v:lower()
            if format ~= 'resp' and format ~= 'json' and format ~= 'prometheus' then fail(E_SYNTAX) end
        else
            fail(E_SYNTAX)
        end
        i = i + 2
    end
    local flat = mkey and redis.call('HGETALL', mkey) or {}
    local total, types, locks, holders = {}, {}, 0, 0
    for _, e in ipairs(EVENTS) do total[e] = 0 end
    local names = {}
    for j = 1, #flat, 2 do
        local f, v = flat[j], tonumber(flat[j + 1])
        if f == '~locks' then
            locks = math.max(v, 0)
        elseif f:sub(1, 1) ~= '~' then
            local ev, ty = f:match('^([^|]*)|(.*)$')
            if ev == 'type' then
                if not types[ty] then
                    types[ty] = {}
                    names[#names + 1] = ty
                end
            elseif ev and ty == '' then
                -- the one event without a type (an earlier layout's totals are summed below)
                if ev == 'unlock_missed' then total[ev] = v end
            elseif ev then
                if not types[ty] then
                    types[ty] = {}
                    names[#names + 1] = ty
                end
                types[ty][ev] = v
            end
        end
    end
    table.sort(names)
    -- the totals and the holders, summed from the types' counters
    local held = 0
    for _, ty in ipairs(names) do
        local c = types[ty]
        for _, e in ipairs(EVENTS) do
            if e ~= 'unlock_missed' then total[e] = total[e] + (c[e] or 0) end
        end
        held = held + (c.acquired or 0) - (c.released or 0) - (c.expired or 0) - (c.reaped or 0)
    end
    holders = math.max(held, 0)
    local function counters(c)
        local out = {}
        for _, e in ipairs(EVENTS) do
            out[#out + 1] = e
            out[#out + 1] = c[e] or 0
        end
        return out
    end
    if format == 'resp' then
        local tmap = {}
        for _, ty in ipairs(names) do
            tmap[#tmap + 1] = ty
            tmap[#tmap + 1] = counters(types[ty])
        end
        return {'locks', locks, 'holders', holders, 'total', counters(total), 'types', tmap}
    elseif format == 'json' then
        local function obj(c)
            local parts = {}
            local sorted = {}
            for _, e in ipairs(EVENTS) do sorted[#sorted + 1] = e end
            table.sort(sorted)
            for _, e in ipairs(sorted) do parts[#parts + 1] = string.format('"%s":%d', e, c[e] or 0) end
            return '{' .. table.concat(parts, ',') .. '}'
        end
        local tparts = {}
        for _, ty in ipairs(names) do tparts[#tparts + 1] = cjson.encode(ty) .. ':' .. obj(types[ty]) end
        return string.format('{"holders":%d,"locks":%d,"total":%s,"types":{%s}}', holders, locks, obj(total),
            table.concat(tparts, ','))
    end
    local lines = {
        '# HELP unique_events_total Lock events by type and event.',
        '# TYPE unique_events_total counter',
    }
    for _, ty in ipairs(names) do
        for _, e in ipairs(EVENTS) do
            if e ~= 'unlock_missed' then
                lines[#lines + 1] = string.format('unique_events_total{type="%s",event="%s"} %d', ty, e,
                    types[ty][e] or 0)
            end
        end
    end
    lines[#lines + 1] = '# HELP unique_unlock_missed_total UNLOCK calls that removed nothing.'
    lines[#lines + 1] = '# TYPE unique_unlock_missed_total counter'
    lines[#lines + 1] = string.format('unique_unlock_missed_total %d', total.unlock_missed or 0)
    lines[#lines + 1] = '# HELP unique_locks Lock keys.'
    lines[#lines + 1] = '# TYPE unique_locks gauge'
    lines[#lines + 1] = string.format('unique_locks %d', locks)
    lines[#lines + 1] = '# HELP unique_holders Holders in memory.'
    lines[#lines + 1] = '# TYPE unique_holders gauge'
    lines[#lines + 1] = string.format('unique_holders %d', holders)
    return table.concat(lines, '\n') .. '\n'
end

-- An error raised here (a table {err = ...}) is the reply as it is, without
-- the script's position that Redis would append to a raised error.
local function guarded(fn)
    return function(keys, argv)
        local ok, r = pcall(fn, keys, argv)
        if ok then return r end
        if type(r) == 'table' and r.err then return redis.error_reply(r.err) end
        if type(r) == 'string' and r:match('^[A-Z]+ ') then return redis.error_reply(r) end
        return redis.error_reply('ERR redis_unique: ' .. tostring(r))
    end
end

local function f_version()
    return VERSION
end

redis.register_function('unique_lock', guarded(f_lock))
redis.register_function('unique_wait', guarded(f_wait))
redis.register_function{function_name = 'unique_unlock', callback = guarded(f_unlock), flags = {'allow-oom'}}
redis.register_function{function_name = 'unique_lockedby', callback = guarded(f_lockedby), flags = {'no-writes'}}
redis.register_function{function_name = 'unique_rate', callback = guarded(f_rate), flags = {'no-writes'}}
redis.register_function{function_name = 'unique_waiters', callback = guarded(f_waiters), flags = {'no-writes'}}
redis.register_function{function_name = 'unique_reapkey', callback = guarded(f_reapkey), flags = {'allow-oom'}}
redis.register_function{function_name = 'unique_metrics', callback = guarded(f_metrics)}
redis.register_function{function_name = 'unique_version', callback = guarded(f_version), flags = {'no-writes'}}
