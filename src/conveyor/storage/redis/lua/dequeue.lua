-- dequeue.lua: lease up to `count` pending jobs of one queue (DESIGN §2 "dequeue (lease)").
--- @include "_lease"
--- @include "_flow"
--- @include "_rates"
--- @include "_admit"
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
-- ARGV: 1 now|'', 2 queue, 3 worker id, 4 count (at most 1000), 5 lease seconds,
--       6 token prefix
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
  if fl and not flow_admit(K_FLOW, K_RATES, K_RATE_ENDS, id, fl, ARGV[6] .. rate_seq) then
    if not parked then
      redis.call('ZADD', K_PARKED, redis.call('HINCRBY', K_META, 'parkseq', 1), id)
    end
    return
  end
  if parked then redis.call('ZREM', K_PARKED, id) end
  lease(id, static, f, events)
end

local function consider_all(ids, parked)
  local raws = redis.call('HMGET', K_STATE, unpack(ids))
  local statics = redis.call('HMGET', K_JOBS, unpack(ids))
  for k, id in ipairs(ids) do
    if #out >= want then return end
    consider(id, statics[k], raws[k], parked)
  end
end

rate_forget(K_RATES, K_RATE_ENDS, RATE_FORGET)
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
flush_leases()
if dropped > 0 and redis.call('HINCRBY', K_META, 'stale', -dropped) < 0 then
  redis.call('HSET', K_META, 'stale', 0)
end
flush_counts(K_META)
return {out, lease_moves}
