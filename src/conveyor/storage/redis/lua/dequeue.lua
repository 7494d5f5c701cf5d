-- dequeue.lua: lease up to `count` pending jobs of one queue (DESIGN §2 "dequeue (lease)").
--- @include "_lease"
--- @include "_flow"
--- @include "_rates"
--- @include "_admit"
--- @include "_lineup"
--- @key pending    list
--- @key active     zset lease expiry
--- @key jobs       hash static JSON
--- @key state      hash state line + events
--- @key meta       hash: paused flag, counters
--- @key history    hash: the ring of per-minute outcome counts (_counts.lua)
--- @key dead       zset finished_at
--- @key parked     zset: pending jobs held back by flow control, oldest first
--- @key flow       hash: concurrency counts, order holders
--- @key messages   hash id -> the job's message
--- @key rates      zset: the sliding log of start times per rate key
--- @key rate_ends  zset: rate key -> when its log runs out
--- @key lineup     zset: lined pending jobs (_lineup.lua)
--- @key lined      hash id -> its lineup entry
--- @key aging      zset id -> when aging raises it next
--- @key breakers   hash: breaker key -> its record (_breakers.lua)
-- ARGV: 1 now|'', 2 queue, 3 worker id, 4 count (at most 1000; slots: a job takes its cost),
--       5 lease seconds, 6 token prefix, 7 capacity (the most a job may cost; 0: no bound)
-- Returns: {leased, batch moves}; leased = {id, static JSON|'', token, attempt, errors,
--          recoveries, damage|''} per job; batch moves = {batch id, job id, "state:queue"}.
-- A damaged record (state entry truncated or in no known state, static JSON missing) popped
-- from the list is leased like any other, alone, with `damage` saying what is wrong: the
-- worker acknowledges it dead with that reason. Nothing read from a record can make this
-- script fail after its RPOP (which Redis would not roll back), so no other job is stranded.
-- Entries whose record is gone or no longer pending are dropped; the meta field "stale"
-- counts those the admin scripts left behind (see _unindex.lua).
local PARKED_SCAN = 200
local RATE_FORGET = 20  -- idle rate keys forgotten per call: more than a call can start

if redis.call('HEXISTS', K_META, 'paused') == 1 then return {{}, {}} end
local want = tonumber(ARGV[4])
local seen = {}
local dropped = 0  -- list entries popped and dropped (stale: cancelled, deleted, duplicate)
local rate_seq = 0  -- with the call's random token prefix, tags each rate log entry uniquely

local function drop(id, parked)
  if parked then redis.call('ZREM', K_PARKED, id) else dropped = dropped + 1 end
end

local function consider(id, static, raw, parked)
  if not raw or seen[id] then return drop(id, parked) end
  seen[id] = true
  local f, events, bad = parse(raw)
  -- A record in a known state other than pending is a stale entry (deleted or cancelled).
  if STATES[f[F_STATE]] and f[F_STATE] ~= 'pending' then return drop(id, parked) end
  if not bad and not static then bad = 'job record missing' end
  if bad then
    if parked then redis.call('ZREM', K_PARKED, id) end
    return lease(id, static, f, events, bad)
  end
  local deadline = tonumber(f[F_DEADLINE])
  if deadline and deadline < NOW then
    if parked then redis.call('ZREM', K_PARKED, id) end
    return expire(id, f, events)
  end
  local fl = flow_of(K_JOBS, id, f)
  local broken = fl and flow_broken(fl)
  if broken then
    if parked then redis.call('ZREM', K_PARKED, id) end
    return expire(id, f, events, broken)
  end
  rate_seq = rate_seq + 1
  local admitted, probe = true, nil
  if fl then
    admitted, probe = flow_admit(K_FLOW, K_RATES, K_RATE_ENDS, id, fl, ARGV[6] .. rate_seq)
  end
  if not admitted then
    if not parked then
      redis.call('ZADD', K_PARKED, redis.call('HINCRBY', K_META, 'parkseq', 1), id)
    end
    return
  end
  if parked then redis.call('ZREM', K_PARKED, id) end
  lease(id, static, f, events, nil, nil, probe)
end

local function consider_all(ids, parked)
  local raws = redis.call('HMGET', K_STATE, unpack(ids))
  local statics = redis.call('HMGET', K_JOBS, unpack(ids))
  for k, id in ipairs(ids) do
    if #out >= want then return end
    consider(id, statics[k], raws[k], parked)
  end
end

-- A queue holding lined jobs (_lineup.lua) is walked in its lineup's order, storage/lineup.py's
-- walk: the highest priority first (the plain jobs, parked then the list's oldest, are
-- priority 0); in it the fair keys take turns in byte order after the key served last (meta
-- 'fair'), one start per turn, the jobs without a key first in a round (plain ones and
-- unkeyed lined ones by when each became pending, a tie to the lined one); in a key, arrival
-- order. A job its limits hold back is passed over (at most KEY_SCAN looked at per turn); the
-- first admitted job that does not fit the room ends the walk, so nothing behind it starts
-- first; one costing more than the capacity is left for a larger worker.
local KEY_SCAN = 64
local capacity = tonumber(ARGV[7]) or 0

local function plain_exists()
  return redis.call('LLEN', K_PENDING) > 0 or redis.call('ZCARD', K_PARKED) > 0
end

-- The highest band (the smallest band string) after `below` (nil: any) holding a job.
local function top_band(below)
  local first
  if below then
    first = redis.call('ZRANGEBYLEX', K_LINEUP, '(' .. below .. '\255', '+', 'LIMIT', 0, 1)[1]
  else
    first = redis.call('ZRANGE', K_LINEUP, 0, 0)[1]
  end
  local band = first and string.sub(first, 1, 3)
  if (not below or PLAIN > below) and (not band or band > PLAIN) and plain_exists() then
    return PLAIN
  end
  return band
end

-- The first key after `after` (nil: from the start, where '' is the jobs without a key) with
-- a job at `band`.
local function next_key(band, after)
  local from = '[' .. band .. '\1'
  if after == nil then
    if #redis.call('ZRANGEBYLEX', K_LINEUP, '[' .. band .. '\0', '(' .. band .. '\1',
                   'LIMIT', 0, 1) > 0 or (band == PLAIN and plain_exists()) then
      return ''
    end
  elseif after ~= '' then
    from = '[' .. band .. after .. '\1'
  end
  local m = redis.call('ZRANGEBYLEX', K_LINEUP, from, '(' .. band .. '\255', 'LIMIT', 0, 1)[1]
  return m and member_key(m) or nil
end

-- A lined job: 'start' and what its lease needs, 'held' (its limits, or too costly for this
-- worker: it keeps its place), 'gone' (no longer pending, or ended here), or 'taken' (a
-- damaged record, leased alone with the damage named, as the list's are).
local function judge(id)
  local raw, static = redis.call('HGET', K_STATE, id), redis.call('HGET', K_JOBS, id)
  if not raw then unline(id) return 'gone' end
  local f, events, bad = parse(raw)
  if STATES[f[F_STATE]] and f[F_STATE] ~= 'pending' then unline(id) return 'gone' end
  if not bad and not static then bad = 'job record missing' end
  if bad then
    unline(id)
    lease(id, static, f, events, bad)
    return 'taken'
  end
  local deadline = tonumber(f[F_DEADLINE])
  if deadline and deadline < NOW then
    unline(id)
    expire(id, f, events)
    return 'gone'
  end
  local fl = flow_of(K_JOBS, id, f) or {}
  local broken = flow_broken(fl)
  if broken then
    unline(id)
    expire(id, f, events, broken)
    return 'gone'
  end
  local cost = flow_cost(fl)
  if (capacity > 0 and cost > capacity) or not flow_would_admit(K_FLOW, K_RATES, id, fl) then
    return 'held'
  end
  return 'start', {id = id, static = static, f = f, events = events, fl = fl, cost = cost}
end

local function take(c)
  rate_seq = rate_seq + 1
  local _, probe = flow_admit(K_FLOW, K_RATES, K_RATE_ENDS, c.id, c.fl, ARGV[6] .. rate_seq)
  unline(c.id)
  lease(c.id, c.static, c.f, c.events, nil, nil, probe)
end

local function since(id)
  local raw = id and redis.call('HGET', K_STATE, id)
  return raw and tonumber(parse(raw)[F_PENDING_SINCE]) or -1
end

-- The first job of `key` at `band` its limits admit: a candidate, 'taken', or nil.
local function first(band, key)
  local members = redis.call('ZRANGEBYLEX', K_LINEUP, '[' .. band .. key .. '\0',
                             '(' .. band .. key .. '\1', 'LIMIT', 0, KEY_SCAN)
  local li, plain = 1, key == '' and band == PLAIN
  local parked = plain and redis.call('ZRANGE', K_PARKED, 0, KEY_SCAN - 1) or {}
  local pi = 1
  for _ = 1, KEY_SCAN do
    local lid = members[li] and member_id(members[li])
    local pid, from_parked = nil, pi <= #parked
    if plain then pid = from_parked and parked[pi] or redis.call('LINDEX', K_PENDING, -1) end
    if not lid and not pid then return nil end
    if lid and (not pid or since(lid) <= since(pid)) then
      li = li + 1
      local verdict, c = judge(lid)
      if verdict == 'start' then return c end
      if verdict == 'taken' then return 'taken' end
    else
      if from_parked then pi = pi + 1 else redis.call('RPOP', K_PENDING) end
      local before = #out
      consider(pid, redis.call('HGET', K_JOBS, pid), redis.call('HGET', K_STATE, pid),
               from_parked)
      if #out > before then return 'taken' end
    end
  end
  return nil
end

local function walk(room)
  local pointer = redis.call('HGET', K_META, 'fair') or nil
  local served, band = pointer, top_band(nil)
  while room > 0 and band do
    local took, pass, second = false, served, false
    local key = next_key(band, pass)
    if key == nil and pass ~= nil then second, key = true, next_key(band, nil) end
    while key ~= nil and not (second and key > pass) do
      local got = first(band, key)
      if got == 'taken' then
        room, served, took = room - 1, key, true
      elseif got then
        if got.cost > room then band = nil break end  -- it waits for room: nothing jumps it
        take(got)
        room, served, took = room - got.cost, key, true
      end
      if room <= 0 then break end
      local nxt = next_key(band, key)
      if nxt == nil and not second and pass ~= nil then second, nxt = true, next_key(band, nil) end
      key = nxt
    end
    if band and not took then band = top_band(band) end
  end
  if served ~= nil and served ~= pointer then redis.call('HSET', K_META, 'fair', served) end
end

rate_forget(K_RATES, K_RATE_ENDS, RATE_FORGET)
if redis.call('EXISTS', K_LINED) == 1 then
  walk(want)
else
  -- Parked jobs were popped before anything still in the list, so they go first.
  local parked_ids = redis.call('ZRANGE', K_PARKED, 0, PARKED_SCAN - 1)
  if #parked_ids > 0 then consider_all(parked_ids, true) end
  local budget = want + 1000  -- jobs popped per call, so a long blocked backlog is parked in steps
  while #out < want and budget > 0 do
    local ids = redis.call('RPOP', K_PENDING, math.min(want - #out, budget))
    if not ids then break end
    budget = budget - #ids
    consider_all(ids, false)
  end
end
flush_leases()
if dropped > 0 and redis.call('HINCRBY', K_META, 'stale', -dropped) < 0 then
  redis.call('HSET', K_META, 'stale', 0)
end
flush_counts(K_META)
return {out, lease_moves}